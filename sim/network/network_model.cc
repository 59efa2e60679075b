#include "sim/network/network_model.h"

#include <algorithm>

#include "base/check.h"

namespace paceline {
namespace {

std::vector<double> capacities(const Topology& topology) {
  std::vector<double> capacity;
  capacity.reserve(topology.num_links());
  for (LinkId link = 0; link < topology.num_links(); ++link) {
    capacity.push_back(topology.capacity(link) / BytesPerSecond(1));
  }
  return capacity;
}

}  // namespace

NetworkModel::NetworkModel(const Lowering& lowering, const RankLayout& layout, const CollectiveModel& collectives)
    : lowering_(lowering),
      layout_(layout),
      collectives_(collectives),
      network_(capacities(collectives.topology())) {}

std::vector<int> NetworkModel::group_of(const TaskRef& member, const TaskComm& comm) const {
  const int rank = lowering_.rank_global[member.rank];
  const std::vector<int> members = layout_.members(comm.group, rank);
  auto other = [&] { return members.front() == rank ? members.back() : members.front(); };
  switch (comm.group) {
    case GroupKind::kForwardSend:
    case GroupKind::kBackwardSend: return {rank, other()};
    case GroupKind::kForwardRecv:
    case GroupKind::kBackwardRecv: return {other(), rank};
    default: return members;
  }
}

const CollectivePlan& NetworkModel::plan_for(const TaskRef& member, const TaskComm& comm) {
  // A group instance names its members (a pipeline link, its direction too).
  const uint32_t instance = layout_.instance(comm.group, lowering_.rank_global[member.rank]);
  const auto key = std::make_tuple(instance, static_cast<int>(comm.collective), comm.size / Bytes(1));
  const uint64_t hash = (uint64_t{instance} * 0x9E3779B97F4A7C15ULL) ^
                        (static_cast<uint64_t>(comm.size / Bytes(1)) * 31 + static_cast<uint64_t>(comm.collective));
  auto& bucket = plans_[hash];
  for (const auto& [k, plan] : bucket) {
    if (k == key) return plan;
  }
  CollectivePlan plan = collectives_.plan(comm.collective, comm.size, group_of(member, comm));
  // A pipeline transfer goes one way: keep the sender's flow only.
  const bool link = comm.group >= GroupKind::kForwardSend;
  if (link && !plan.phases.empty() && plan.phases.front().size() > 1) plan.phases.front().resize(1);
  bucket.emplace_back(key, std::move(plan));
  return bucket.back().second;
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
  const std::vector<Flow>& flows = r.plan->phases[r.phase];
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
  for (const uint32_t transfer : finished_transfers_) {
    const size_t index = by_transfer_[transfer];
    PACELINE_CHECK(index != SIZE_MAX, "a finished transfer nobody started");
    by_transfer_[transfer] = SIZE_MAX;
    ++running_[index].phase;
    start_phase(now, index);
  }
  while (!timers_.empty() && timers_.top().time <= now) {
    finished.push_back(timers_.top().token);
    timers_.pop();
  }
}

}  // namespace paceline
