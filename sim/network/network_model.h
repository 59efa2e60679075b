// NetworkModel: times the communication of `full` fidelity on a shared FlowNetwork.
//
// Each collective (or pipeline transfer) is planned by the CollectiveModel into phases of
// flows over the members' routes; a phase's flows share links max-min fairly with every other
// flow in flight, the next phase starts when the last flow of the previous one ends, and the
// collective ends its latency after its last phase. Where a NetworkSymmetry folds peers, a
// simulated rank's collective carries the flows of its whole orbit.
#ifndef PACELINE_SIM_NETWORK_NETWORK_MODEL_H_
#define PACELINE_SIM_NETWORK_NETWORK_MODEL_H_

#include <unordered_map>
#include <queue>
#include <vector>

#include "hardware/collective_model.h"
#include "sim/engine/engine.h"
#include "sim/network/flow_network.h"
#include "sim/network/network_symmetry.h"
#include "sim/parallel/lowering.h"
#include "sim/parallel/rank_layout.h"

namespace paceline {

class NetworkModel final : public ExternalModel {
 public:
  // All references must outlive the model.
  NetworkModel(const Lowering& lowering, const RankLayout& layout, const CollectiveModel& collectives,
               const NetworkSymmetry& symmetry);

  void start(SimTime now, uint64_t token, std::span<const TaskRef> members) override;
  SimTime next_time() override;
  void advance(SimTime now, std::vector<uint64_t>& finished) override;

  // Collectives and flows started so far.
  uint64_t collectives_started() const { return collectives_started_; }
  uint64_t flows_started() const { return flows_started_; }

 private:
  struct Running {
    uint64_t token = 0;
    const NetworkPlan* plan = nullptr;
    size_t phase = 0;
  };
  struct Timer {
    SimTime time;
    uint64_t sequence;
    uint64_t token;
    bool operator>(const Timer& other) const {
      return time > other.time || (time == other.time && sequence > other.sequence);
    }
  };

  const NetworkPlan& plan_for(const TaskRef& member, const TaskComm& comm);
  void start_phase(SimTime now, size_t running);

  const Lowering& lowering_;
  const RankLayout& layout_;
  const CollectiveModel& collectives_;
  const NetworkSymmetry& symmetry_;
  FlowNetwork network_;
  // A group instance names its members (a pipeline link, its direction too).
  struct PlanKey {
    uint32_t instance;
    int collective;
    double size_bytes;
    TokenRouting routing;
    bool operator==(const PlanKey&) const = default;
  };
  struct PlanKeyHash {
    size_t operator()(const PlanKey& k) const {
      return (uint64_t{k.instance} * 0x9E3779B97F4A7C15ULL) ^
             (static_cast<uint64_t>(k.size_bytes) * 31 + static_cast<uint64_t>(k.collective));
    }
  };
  // Looked up only, never iterated; nodes keep the plans running collectives point to.
  std::unordered_map<PlanKey, NetworkPlan, PlanKeyHash> plans_;
  std::vector<Running> running_;
  std::vector<size_t> free_running_;
  std::vector<size_t> by_transfer_;  // running collective by transfer id
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  uint64_t timer_sequence_ = 0;
  uint64_t collectives_started_ = 0;
  uint64_t flows_started_ = 0;
  std::vector<uint32_t> finished_transfers_;
  std::vector<size_t> advancing_;  // running collectives whose phase just finished
};

}  // namespace paceline

#endif  // PACELINE_SIM_NETWORK_NETWORK_MODEL_H_
