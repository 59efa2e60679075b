#include "sim/network/network_model.h"

#include <algorithm>

#include "base/check.h"

namespace paceline {

NetworkModel::NetworkModel(const Lowering& lowering, const RankLayout& layout, const CollectiveModel& collectives,
                           const NetworkSymmetry& symmetry)
    : lowering_(lowering),
      layout_(layout),
      collectives_(collectives),
      symmetry_(symmetry),
      network_(collectives.topology().capacities()) {}

const NetworkPlan& NetworkModel::plan_for(const TaskRef& member, const TaskComm& comm) {
  // The rank's group instances are in its setup, one per group kind (its sync slots).
  const uint32_t instance = lowering_.ranks[member.rank].group_instances[static_cast<int>(comm.group)];
  const PlanKey key{instance, static_cast<int>(comm.collective), comm.size / Bytes(1),
                    comm.routing};
  const auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  const int rank = lowering_.rank_global[member.rank];
  NetworkPlan plan = symmetry_.fold_plan(plan_task_collective(layout_, collectives_, rank, comm), comm.group, rank);
  return plans_.emplace(key, std::move(plan)).first->second;
}

void NetworkModel::start(SimTime now, uint64_t token, std::span<const TaskRef> members) {
  PACELINE_CHECK(!members.empty());
  const TaskRef& first = members.front();
  const StageProgram& stage = *lowering_.stages[lowering_.rank_stage[first.rank]];
  const TaskComm comm = stage.comm(first.task);
  PACELINE_CHECK(comm.collective != Collective::kNone, "an external task that is not communication");
  size_t index;
  if (!free_running_.empty()) {
    index = free_running_.back();
    free_running_.pop_back();
  } else {
    index = running_.size();
    running_.emplace_back();
  }
  running_[index] = Running{token, &plan_for(first, comm), 0};
  ++collectives_started_;
  start_phase(now, index);
}

void NetworkModel::start_phase(SimTime now, size_t index) {
  Running& r = running_[index];
  if (r.phase >= r.plan->phases.size()) {
    // Every phase done: the collective ends its latency later.
    timers_.push(Timer{now + to_sim_time(r.plan->latency), timer_sequence_++, r.token});
    free_running_.push_back(index);
    return;
  }
  const std::vector<NetworkFlow>& flows = r.plan->phases[r.phase];
  flows_started_ += flows.size();
  const uint32_t transfer = network_.start(now, flows);
  if (transfer >= by_transfer_.size()) by_transfer_.resize(transfer + 1, SIZE_MAX);
  by_transfer_[transfer] = index;
}

SimTime NetworkModel::next_time() {
  SimTime next = network_.next_completion();
  if (!timers_.empty()) next = std::min(next, timers_.top().time);
  return next;
}

void NetworkModel::advance(SimTime now, std::vector<uint64_t>& finished) {
  finished_transfers_.clear();
  network_.advance(now, finished_transfers_);
  // Every finished transfer is claimed before any next phase starts: a starting phase may reuse
  // the id of a transfer that finished at the same instant.
  advancing_.clear();
  for (const uint32_t transfer : finished_transfers_) {
    const size_t index = by_transfer_[transfer];
    PACELINE_CHECK(index != SIZE_MAX, "a finished transfer nobody started");
    by_transfer_[transfer] = SIZE_MAX;
    advancing_.push_back(index);
  }
  for (const size_t index : advancing_) {
    ++running_[index].phase;
    start_phase(now, index);
  }
  while (!timers_.empty() && timers_.top().time <= now) {
    finished.push_back(timers_.top().token);
    timers_.pop();
  }
}

}  // namespace paceline
