// CollectiveModel: NCCL-style collectives over a group of GPUs, as flows on the topology.
//
// A collective is planned by its algorithm into phases of concurrent flows on routed paths,
// plus a latency (its steps times the per-step latency of the links they cross):
//
//   ring          all-reduce, all-gather, reduce-scatter. Each member sends to the next; edges
//                 carry 2(n−1)/n·S (all-reduce) or (n−1)/n·S. Across NVLink domains the ring is
//                 split into channels, one per NIC the group's GPUs sit behind, each carrying S/C.
//   tree          all-reduce across domains: a chain inside each domain and two binary trees
//                 over the domains (NCCL's double binary tree), each carrying half the data,
//                 on every NIC the group's GPUs sit behind.
//   hierarchical  all-reduce: reduce-scatter inside each domain, all-reduce of each 1/k shard
//                 across domains (k rings, one per local GPU), all-gather inside each domain.
//   nvls          all-reduce inside an NVLink domain whose switches reduce (NVLink SHARP):
//                 each GPU sends to the switch and receives back, at the link's measured NVLS
//                 bus bandwidth, in one step of the link's NVLS latency.
//   direct        all-to-all (every pair exchanges S/(n−1)) and send/recv (a ring shift: each
//                 member sends S to the next; a pipeline link is the two-member case).
//   deduplicated  a mixture-of-experts token exchange given its routing (DeepEP, HybridEP):
//                 S is one copy of each member's tokens. A token goes once to each GPU of its
//                 own domain that holds one of its experts; to another domain it crosses the
//                 network once, to the member of the same position there, which forwards it over
//                 NVLink to the GPUs there that hold one, the two hops running together. With
//                 top-k of E experts spread evenly over n members, a GPU holding E/n of them
//                 gets a token with the chance that its top-k include one of them, 1 − C(E −
//                 E/n, k)/C(E, k), and a domain of g members with that of E·g/n.
//
// Without contention a collective takes its latency plus the time its phases' flows need when
// they share links max-min fairly (hardware/max_min.h) — the `symmetric` fidelity's cost, and
// exactly what the flow network of `full` fidelity gives a collective running alone. `auto`
// picks like NCCL's tuner: the fastest estimate among the algorithms the group can use (ring or
// NVLS inside a domain that has it, ring or tree across domains), overridable per collective.
//
// Where the cluster's profile holds a measured link profile for a collective over a group of
// that size inside one node (paceline-calibrate's nccl-tests-style `collectives` table), it
// replaces the analytical curve: the plan's flows are scaled to take the measured time. Beyond
// the measured sizes the analytical curve carries the nearest measurement (below: scaled to meet
// it; above: its bandwidth scaled as far as the measurement was bandwidth-bound).
#ifndef PACELINE_HARDWARE_COLLECTIVE_MODEL_H_
#define PACELINE_HARDWARE_COLLECTIVE_MODEL_H_

#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/kernel_shapes.h"
#include "base/units.h"
#include "hardware/cluster.h"
#include "hardware/topology.h"

namespace paceline {

enum class CollectiveAlgorithm {
  kAuto,
  kRing,
  kTree,
  kHierarchical,
  kNvls,
  kDirect,
  kDeduplicated
};
std::string_view to_string(CollectiveAlgorithm algorithm);

// Its endpoints are global GPU indices; kSwitch stands for the NVLink switches that reduce.
struct Flow {
  static constexpr int kSwitch = -1;
  std::vector<LinkId> path;
  Bytes size;
  int from = kSwitch;
  int to = kSwitch;
};

struct CollectivePlan {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kDirect;
  std::vector<std::vector<Flow>> phases;  // run one after another; flows of a phase concurrently
  Seconds latency;
};

class CollectiveModel {
 public:
  // `topology` must outlive the model.
  CollectiveModel(const ClusterSpec& cluster, const Topology& topology);

  // Plans a collective of `size` bytes (as nccl-tests counts it: the full buffer for
  // all-reduce, all-gather and reduce-scatter; the bytes each member sends for all-to-all and
  // send/recv) over `members` (global GPU indices, in group order; send/recv: {from, to}). An
  // all-to-all with a `routing` is deduplicated, and `size` one copy of a member's tokens (as the
  // layer graph scales it by the busiest rank's load and what the capacity drops).
  CollectivePlan plan(Collective collective, Bytes size, std::span<const int> members,
                      CollectiveAlgorithm algorithm = CollectiveAlgorithm::kAuto,
                      const TokenRouting& routing = {}) const;
  // Its time alone on the network (cached per collective, size, routing and group).
  Seconds time(Collective collective, Bytes size, std::span<const int> members,
               const TokenRouting& routing = {}) const;
  // The time until the last of `groups` (disjoint) has run it, all starting at once and sharing
  // the links (cached per collective, size, routing and groups): each group's plan is chosen
  // alone, and their phases run together, the n-th of each beside the n-th of the others.
  Seconds time(Collective collective, Bytes size, std::span<const std::vector<int>> groups,
               const TokenRouting& routing = {}) const;
  // The time of a plan alone on the network.
  Seconds time(const CollectivePlan& plan) const;
  // What time(plan) can be at least and at most, found without filling rates.
  struct TimeBounds {
    Seconds low;
    Seconds high;
  };
  TimeBounds time_bounds(const CollectivePlan& plan) const;
  // The SMs its kernel holds while it runs over the communicator `members` (global GPU
  // indices): a send/recv's channels, fewer when the communicator spans NVLink domains, else
  // the GPU's figure for collectives (an all-to-all, whose sends reach every peer, spreads over
  // all of the communicator's channels).
  uint16_t kernel_sms(Collective collective, std::span<const int> members) const;

  const Topology& topology() const { return topology_; }

 private:
  // The algorithm `auto` picks, and its plan when picking it meant planning it.
  struct Resolved {
    CollectiveAlgorithm algorithm;
    std::optional<CollectivePlan> plan;
  };
  Resolved resolve(Collective collective, Bytes size, std::span<const int> members) const;
  // Both planned to be timed: the faster is used, the first on a tie.
  Resolved faster(CollectivePlan first, CollectivePlan second) const;
  // The paths and bytes of a phase's flows, for the max-min functions.
  struct PhaseTransfer {
    std::vector<std::vector<uint32_t>> paths;
    std::vector<double> bytes;
  };
  static PhaseTransfer transfer_of(const std::vector<Flow>& phase);
  CollectivePlan planned_by(CollectiveAlgorithm algorithm, Collective collective, Bytes size,
                            std::span<const int> members) const;
  // A link profile's `measured` time at another size, carried to the size of plan `here` by the
  // analytical plan at the measured size: below the measurements, the analytical curve scaled;
  // above (`larger`), the measurement plus the analytical time of the bytes beyond it, scaled
  // toward the measured/analytical ratio by the measurement's bandwidth share.
  Seconds extrapolated_measurement(Seconds measured, const CollectivePlan& at_measured_size,
                                   const CollectivePlan& here, bool larger) const;
  // The plan from the links' figures alone, before a link profile's measurement scales it.
  CollectivePlan analytical_plan(Collective collective, Bytes size, std::span<const int> members,
                                 CollectiveAlgorithm algorithm) const;
  // A phase's flows as they are planned, one per (from, to) pair.
  struct PhaseFlows {
    std::vector<Flow> flows;
    std::map<std::pair<int, int>, size_t> index;  // of each pair's flow
  };
  void add_flow(PhaseFlows& phase, int from, int to, Bytes size) const;
  // In a mesh, the phase's flows inside each domain spread evenly over its GPUs' direct links.
  void spread_over_mesh(PhaseFlows& phase) const;
  CollectivePlan ring(Collective collective, Bytes size, std::span<const int> members) const;
  CollectivePlan tree(Bytes size, std::span<const int> members) const;
  CollectivePlan hierarchical(Bytes size, std::span<const int> members) const;
  CollectivePlan nvls(Bytes size, std::span<const int> members) const;
  CollectivePlan direct(Collective collective, Bytes size, std::span<const int> members) const;
  CollectivePlan deduplicated(Bytes token_bytes, const TokenRouting& routing,
                              std::span<const int> members) const;
  // The members grouped by NVLink domain, in group order.
  std::vector<std::vector<int>> by_domain(std::span<const int> members) const;
  // One channel per NIC the domain's members sit behind: the position of the first member
  // behind each, in (node, rail) order.
  std::vector<size_t> channel_exits(std::span<const int> domain) const;

  const ClusterSpec& cluster_;
  const Topology& topology_;
  std::vector<double> capacity_;  // by link, bytes/s
  // The cache of time(), shared by the threads of one simulation: by collective, bytes,
  // routing and members (groups apart behind a -1).
  using CacheKey = std::tuple<int, double, TokenRouting, std::vector<int>>;
  Seconds cached(CacheKey key, const std::function<Seconds()>& compute) const;
  mutable std::mutex cache_mutex_;
  mutable std::map<CacheKey, Seconds> cache_;
};

}  // namespace paceline

#endif  // PACELINE_HARDWARE_COLLECTIVE_MODEL_H_
