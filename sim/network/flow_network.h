// FlowNetwork: transfers made of flows on routed paths, sharing link bandwidth max-min fairly
// with every other flow in flight.
//
// Rates are recomputed only when a flow starts or ends, and only for the flows that share a
// link with it, directly or through other flows (its connected component): the cost follows the
// active flows near the change, not the size of the cluster.
//
// A flow may stand for a class of flows that are alike up to a symmetry of the cluster, on a
// path of link classes (sim/network/network_symmetry.h): each step of its path then says how
// many flows of its class load every link of that link class, and max-min filling counts
// them so, which gives each flow of the class the rate it would get in the unfolded network.
#ifndef PACELINE_SIM_NETWORK_FLOW_NETWORK_H_
#define PACELINE_SIM_NETWORK_FLOW_NETWORK_H_

#include <cstdint>
#include <queue>
#include <vector>

#include "hardware/collective_model.h"
#include "hardware/max_min.h"
#include "sim/engine/sim_time.h"

namespace paceline {

struct NetworkFlow {
  std::vector<LinkLoad> path;  // each link once
  Bytes size;
};

class FlowNetwork {
 public:
  // Link capacities in bytes per second, by LinkId.
  explicit FlowNetwork(std::vector<double> capacity);

  // Starts the flows of a transfer at `now` (not before the last advance); returns its id. A
  // transfer with nothing to send finishes at `now`.
  uint32_t start(SimTime now, const std::vector<NetworkFlow>& flows);
  // When the next flow (or empty transfer) finishes; SimTime::max() when idle.
  SimTime next_completion();
  // Moves to `now` (≤ next_completion()) and appends the transfers whose last flow finished,
  // in order of transfer id.
  void advance(SimTime now, std::vector<uint32_t>& finished);
  size_t active_flows() const { return active_; }

 private:
  struct FlowState {
    std::vector<LinkLoad> path;
    double remaining = 0.0;  // bytes left at `since`
    double rate = 0.0;       // bytes/s
    SimTime since;
    uint32_t transfer = 0;
    uint32_t version = 0;
    bool active = false;
  };
  struct Finish {
    SimTime time;
    uint32_t flow;
    uint32_t version;
    bool operator>(const Finish& other) const {
      return time > other.time || (time == other.time && flow > other.flow);
    }
  };

  // Re-shares the component of flows reachable from `links` at `now`.
  void reshare(const std::vector<LinkId>& links, SimTime now);
  uint32_t new_flow();
  uint32_t new_transfer(uint32_t flows);

  std::vector<double> capacity_;
  std::vector<FlowState> flows_;
  std::vector<uint32_t> free_flows_;
  std::vector<std::vector<uint32_t>> on_link_;  // active flows per link
  std::vector<uint32_t> transfer_flows_;        // flows still running, per transfer
  std::vector<uint32_t> free_transfers_;
  std::vector<std::pair<SimTime, uint32_t>> empty_;  // transfers with nothing to send
  std::priority_queue<Finish, std::vector<Finish>, std::greater<Finish>> finishes_;
  size_t active_ = 0;
  // Scratch for reshare and its max-min filling, kept to avoid reallocation; links and flows
  // are stamped with the epoch of the reshare that last touched them.
  std::vector<uint32_t> link_mark_;
  std::vector<uint32_t> flow_mark_;
  MaxMinScratch filling_;
  std::vector<uint32_t> component_;
  std::vector<LinkId> component_links_;
  std::vector<LinkId> frontier_;
  uint32_t epoch_ = 0;
};

}  // namespace paceline

#endif  // PACELINE_SIM_NETWORK_FLOW_NETWORK_H_
