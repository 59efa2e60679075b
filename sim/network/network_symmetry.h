// NetworkSymmetry: the peers `full` fidelity may fold into one simulated rank without changing
// its answer.
//
// Shifting every rank by a step along tp, cp or dp (wrapping around) is a symmetry of a run when
// it maps every rank onto one with the same program, every group onto a group, and every
// collective's flows onto the flows of its image collective through a one-to-one map of links
// that keeps their capacities (and the image plan has the same algorithm, phases, sizes and
// latency). That is checked, not assumed: every networked collective of every rank is planned
// and compared with its image; along each dimension the shortest such step is kept. The run is
// then equivariant under the group G the kept shifts generate, so one rank per orbit (the one
// below the step along each folded dimension) is simulated, and a folded plan's flows stand for
// their whole orbit: on every link of a link orbit L, a flow class F of the collective's orbit
// puts
//
//     n(F, L) = |G| / |Stab(I)| · |O| · c_f(L) / |L|
//
// flows, where Stab(I) are the shifts that map the collective's group I to itself, O the
// class's flows in one collective (an orbit under Stab(I)) and c_f(L) how many links of L one
// of them crosses. Max-min fair rates are unique, hence invariant under G, so the folded
// network gives every flow the rate of its unfolded self; results agree up to rounding.
#ifndef PACELINE_SIM_NETWORK_NETWORK_SYMMETRY_H_
#define PACELINE_SIM_NETWORK_NETWORK_SYMMETRY_H_

#include <array>
#include <chrono>
#include <optional>
#include <cstdint>
#include <map>
#include <vector>

#include "hardware/collective_model.h"
#include "sim/network/flow_network.h"
#include "sim/parallel/lowering.h"
#include "sim/parallel/rank_layout.h"

namespace paceline {

// A collective as the network runs it: phases of flows (or flow classes) and a latency.
struct NetworkPlan {
  std::vector<std::vector<NetworkFlow>> phases;
  Seconds latency;
};

// The collective a communication task of `rank` (global) runs over its group's GPUs; a
// pipeline transfer keeps the sender's flow only.
CollectivePlan plan_task_collective(const RankLayout& layout, const CollectiveModel& collectives, int rank,
                                    const TaskComm& comm);

class NetworkSymmetry {
 public:
  // No symmetry: every rank simulated, every flow itself. `layout` must outlive the symmetry.
  explicit NetworkSymmetry(const RankLayout& layout) : layout_(&layout) {}

  // The shortest shifts, no shorter than `candidate`'s steps, that are symmetries of the run
  // whose stage programs `lowering` holds (only its stages are read: any fold's lowering will do).
  // Throws SimulationDeadlineError once the wall clock passes `deadline` (it only ever aborts).
  static NetworkSymmetry find(const Lowering& lowering, const RankLayout& layout, const CollectiveModel& collectives,
                              RankFold candidate,
                              std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

  const RankFold& fold() const { return fold_; }
  // Ranks each simulated rank stands for (|G|).
  int order() const { return static_cast<int>(elements_.size()); }

  // `plan`, which `rank` (a simulated rank) runs over its group of `kind`, as the flow classes
  // that stand for its whole orbit of collectives.
  NetworkPlan fold_plan(const CollectivePlan& plan, GroupKind kind, int rank) const;

 private:
  using Offsets = std::array<int, 3>;  // steps along tp, cp, dp
  int apply(const Offsets& g, int rank) const;
  // The shifts that map `rank`'s group of `kind` onto itself (cached per group).
  const std::vector<Offsets>& stabilizer(GroupKind kind, int rank) const;

  const RankLayout* layout_;
  RankFold fold_;
  std::vector<Offsets> elements_ = {Offsets{}};  // the group G, identity first
  std::vector<LinkId> link_class_;     // the least link of each link's orbit (empty: unfolded)
  std::vector<uint32_t> class_size_;   // by link: the size of its orbit
  mutable std::map<uint32_t, std::vector<Offsets>> stabilizers_;  // by group instance
};

}  // namespace paceline

#endif  // PACELINE_SIM_NETWORK_NETWORK_SYMMETRY_H_
