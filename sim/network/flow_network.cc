#include "sim/network/flow_network.h"

#include <algorithm>

#include "base/check.h"

namespace paceline {

FlowNetwork::FlowNetwork(std::vector<double> capacity)
    : capacity_(std::move(capacity)),
      on_link_(capacity_.size()),
      link_mark_(capacity_.size(), 0),
      filling_{.residual = std::vector<double>(capacity_.size()),
               .unfrozen = std::vector<uint32_t>(capacity_.size()),
               .load = std::vector<double>(capacity_.size())} {}

uint32_t FlowNetwork::new_flow() {
  if (!free_flows_.empty()) {
    const uint32_t id = free_flows_.back();
    free_flows_.pop_back();
    return id;
  }
  flows_.emplace_back();
  flow_mark_.push_back(0);
  filling_.frozen.push_back(0);
  return static_cast<uint32_t>(flows_.size() - 1);
}

uint32_t FlowNetwork::new_transfer(uint32_t flows) {
  if (!free_transfers_.empty()) {
    const uint32_t id = free_transfers_.back();
    free_transfers_.pop_back();
    transfer_flows_[id] = flows;
    return id;
  }
  transfer_flows_.push_back(flows);
  return static_cast<uint32_t>(transfer_flows_.size() - 1);
}

uint32_t FlowNetwork::start(SimTime now, const std::vector<NetworkFlow>& flows) {
  uint32_t count = 0;
  for (const NetworkFlow& f : flows) count += f.size > Bytes(0) && !f.path.empty() ? 1 : 0;
  const uint32_t transfer = new_transfer(count);
  if (count == 0) {
    empty_.emplace_back(now, transfer);
    return transfer;
  }
  std::vector<LinkId> touched;
  for (const NetworkFlow& f : flows) {
    if (f.size <= Bytes(0) || f.path.empty()) continue;
    const uint32_t id = new_flow();
    FlowState& state = flows_[id];
    state.path = f.path;
    state.remaining = f.size / Bytes(1);
    state.rate = 0.0;
    state.since = now;
    state.transfer = transfer;
    state.active = true;
    ++active_;
    for (const LinkLoad& step : f.path) {
      on_link_[step.link].push_back(id);
      touched.push_back(step.link);
    }
  }
  reshare(touched, now);
  return transfer;
}

SimTime FlowNetwork::next_completion() {
  SimTime next = SimTime::max();
  for (const auto& [time, transfer] : empty_) next = std::min(next, time);
  // Entries of flows rescheduled since are stale: drop them from the top.
  while (!finishes_.empty()) {
    const Finish& top = finishes_.top();
    if (flows_[top.flow].active && flows_[top.flow].version == top.version) break;
    finishes_.pop();
  }
  if (!finishes_.empty()) next = std::min(next, finishes_.top().time);
  return next;
}

void FlowNetwork::advance(SimTime now, std::vector<uint32_t>& finished) {
  std::vector<uint32_t> done;
  for (auto it = empty_.begin(); it != empty_.end();) {
    if (it->first <= now) {
      done.push_back(it->second);
      it = empty_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<LinkId> freed;
  while (!finishes_.empty() && finishes_.top().time <= now) {
    const Finish f = finishes_.top();
    finishes_.pop();
    FlowState& flow = flows_[f.flow];
    if (!flow.active || f.version != flow.version) continue;
    flow.active = false;
    --active_;
    for (const LinkLoad& step : flow.path) {
      auto& list = on_link_[step.link];
      list.erase(std::find(list.begin(), list.end(), f.flow));
      freed.push_back(step.link);
    }
    free_flows_.push_back(f.flow);
    if (--transfer_flows_[flow.transfer] == 0) done.push_back(flow.transfer);
  }
  if (!freed.empty()) reshare(freed, now);
  std::sort(done.begin(), done.end());
  for (const uint32_t transfer : done) {
    finished.push_back(transfer);
    free_transfers_.push_back(transfer);
  }
}

void FlowNetwork::reshare(const std::vector<LinkId>& links, SimTime now) {
  // The component: flows reachable from the seed links through shared links.
  ++epoch_;
  frontier_.clear();
  component_.clear();
  component_links_.clear();
  for (const LinkId link : links) {
    if (link_mark_[link] != epoch_) {
      link_mark_[link] = epoch_;
      frontier_.push_back(link);
    }
  }
  while (!frontier_.empty()) {
    const LinkId link = frontier_.back();
    frontier_.pop_back();
    component_links_.push_back(link);
    for (const uint32_t f : on_link_[link]) {
      if (flow_mark_[f] == epoch_) continue;
      flow_mark_[f] = epoch_;
      component_.push_back(f);
      for (const LinkLoad& next : flows_[f].path) {
        if (link_mark_[next.link] != epoch_) {
          link_mark_[next.link] = epoch_;
          frontier_.push_back(next.link);
        }
      }
    }
  }
  if (component_.empty()) return;
  // Flows and links in increasing id order: the filling, and its ties, do not depend on the
  // order the search met them.
  std::sort(component_.begin(), component_.end());
  std::sort(component_links_.begin(), component_links_.end());
  for (const uint32_t f : component_) {
    FlowState& flow = flows_[f];
    // Bring the flow to `now` at its old rate.
    flow.remaining = std::max(0.0, flow.remaining - flow.rate * (to_seconds(now - flow.since) / Seconds(1)));
    flow.since = now;
  }
  fill_max_min(
      component_links_, component_, capacity_,
      [&](LinkId link) -> const std::vector<uint32_t>& { return on_link_[link]; },
      [&](uint32_t f) -> const std::vector<LinkLoad>& { return flows_[f].path; },
      [&](uint32_t f, double rate) { flows_[f].rate = rate; }, filling_);
  for (const uint32_t f : component_) {
    FlowState& flow = flows_[f];
    ++flow.version;
    finishes_.push(Finish{now + to_sim_time(Seconds(flow.remaining / flow.rate)), f, flow.version});
  }
}

}  // namespace paceline
