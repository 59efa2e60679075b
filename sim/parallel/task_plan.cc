#include "sim/parallel/task_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/check.h"

namespace paceline {
namespace {

// Identity ops (a collective of kind none, e.g. Megatron's `f` in forward) cost nothing and
// run nowhere; their dependents wait for what they waited for.
bool is_identity(const Op& op) {
  return op.kind == OpKind::kCommunication && op.comm.collective == Collective::kNone;
}

// An op's dependencies with identity ops looked through; `boundary` is set when the chain
// reaches the block's input (an op with no predecessor at all).
void effective_predecessors(const LayerGraph& g, OpId id, std::vector<OpId>& out, bool& boundary) {
  const std::vector<OpId> predecessors = g.predecessors(id);
  if (predecessors.empty()) boundary = true;
  for (const OpId p : predecessors) {
    if (is_identity(g.op(p))) {
      effective_predecessors(g, p, out, boundary);
    } else {
      out.push_back(p);
    }
  }
}

}  // namespace

ActivityTag tag_of(const Op& op) {
  if (op.kind != OpKind::kCommunication) {
    return op.phase == Phase::kRecompute ? ActivityTag::kRecompute : ActivityTag::kCompute;
  }
  switch (op.comm.group) {
    case CommGroup::kTensor: return ActivityTag::kTensorComm;
    case CommGroup::kContext: return ActivityTag::kContextComm;
    case CommGroup::kExpert: return ActivityTag::kExpertComm;
    case CommGroup::kData: return ActivityTag::kDataComm;
    case CommGroup::kPipeline: return ActivityTag::kPipelineComm;
  }
  return ActivityTag::kCompute;
}

StreamKind stream_of(const Op& op) {
  if (op.kind != OpKind::kCommunication) return StreamKind::kCompute;
  switch (op.comm.group) {
    case CommGroup::kTensor: return StreamKind::kTensor;
    case CommGroup::kContext: return StreamKind::kContext;
    case CommGroup::kExpert: return StreamKind::kExpert;
    case CommGroup::kData:
    case CommGroup::kPipeline: return StreamKind::kData;
  }
  return StreamKind::kCompute;
}

int kernel_launches(const Op& op) {
  if (op.kind == OpKind::kGemm && op.gemm.kernel_per_gemm)
    return op.kernels * static_cast<int>(op.gemm.count);
  return op.kernels;
}

bool in_pass(Phase phase, PassKind pass) {
  switch (pass) {
    case PassKind::kForward: return phase == Phase::kForward;
    case PassKind::kBackward: return phase != Phase::kForward;
    case PassKind::kBackwardInput: return phase == Phase::kRecompute || phase == Phase::kBackwardInput;
    case PassKind::kBackwardWeight: return phase == Phase::kBackwardWeight;
  }
  return false;
}

std::string_view to_string(StreamKind stream) {
  switch (stream) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kTensor: return "tp";
    case StreamKind::kContext: return "cp";
    case StreamKind::kExpert: return "ep";
    case StreamKind::kData: return "dp";
    case StreamKind::kSendNext: return "pp send next";
    case StreamKind::kRecvPrev: return "pp recv prev";
    case StreamKind::kSendPrev: return "pp send prev";
    case StreamKind::kRecvNext: return "pp recv next";
    case StreamKind::kHostCopy: return "host copy";
  }
  return "?";
}

std::string_view to_string(ActivityTag tag) {
  switch (tag) {
    case ActivityTag::kCompute: return "compute";
    case ActivityTag::kRecompute: return "recompute";
    case ActivityTag::kTensorComm: return "tp_communication";
    case ActivityTag::kContextComm: return "cp_communication";
    case ActivityTag::kExpertComm: return "ep_communication";
    case ActivityTag::kDataComm: return "dp_communication";
    case ActivityTag::kPipelineComm: return "pp_communication";
    case ActivityTag::kOptimizer: return "optimizer";
    case ActivityTag::kHostTransfer: return "host_transfer";
  }
  return "?";
}

bool is_communication(ActivityTag tag) {
  return tag != ActivityTag::kCompute && tag != ActivityTag::kRecompute && tag != ActivityTag::kOptimizer;
}

GroupKind group_of(CommGroup group) {
  switch (group) {
    case CommGroup::kTensor: return GroupKind::kTensor;
    case CommGroup::kContext: return GroupKind::kContext;
    case CommGroup::kExpert: return GroupKind::kExpert;
    case CommGroup::kData: return GroupKind::kData;
    case CommGroup::kPipeline: return GroupKind::kForwardSend;
  }
  return GroupKind::kTensor;
}

namespace {

// Members come in rank order, and GPU g is rank g: a group crosses domains where its ends do.
bool crosses_domains(const Topology& topology, const std::vector<int>& group) {
  return !group.empty() && topology.domain_of(group.front()) != topology.domain_of(group.back());
}

}  // namespace

std::vector<std::vector<int>> sharing_nics(const RankLayout& layout, const Topology& topology, GroupKind kind,
                                           const std::vector<int>& group) {
  std::vector<std::vector<int>> groups = {group};
  if (kind >= GroupKind::kForwardSend || topology.gpus_per_nic() <= 1 || !crosses_domains(topology, group)) {
    return groups;
  }
  const bool spans_stages = kind == GroupKind::kModel || kind == GroupKind::kEmbedding;
  const int stage = layout.coord(group.front()).pp;
  std::set<std::pair<int, int>> nics;  // (node, rail)
  for (const int gpu : group) nics.emplace(topology.node_of(gpu), topology.rail_of(gpu));
  std::set<int> listed(group.begin(), group.end());
  const int per_node = topology.gpus_per_node();
  for (const auto& [node, rail] : nics) {
    for (int gpu = node * per_node; gpu < (node + 1) * per_node; ++gpu) {
      if (topology.rail_of(gpu) != rail || listed.contains(gpu)) continue;
      if (!spans_stages && layout.coord(gpu).pp != stage) continue;
      // A GPU outside every group of the kind (a middle stage's, for the tied embedding) adds none.
      std::vector<int> other = layout.members(kind, gpu);
      if (!std::ranges::binary_search(other, gpu)) continue;
      listed.insert(other.begin(), other.end());
      if (crosses_domains(topology, other)) groups.push_back(std::move(other));
    }
  }
  return groups;
}

namespace {

using StagesByNic = std::map<std::pair<int, int>, std::set<int>>;  // (node, rail) → stages

// The most stages one NIC carries traffic of; at least 1.
int most_stages(const StagesByNic& stages_by_nic) {
  size_t most = 1;
  for (const auto& [nic, stages] : stages_by_nic) most = std::max(most, stages.size());
  return static_cast<int>(most);
}

}  // namespace

std::vector<std::vector<int>> pipeline_links_sharing_nics(const RankLayout& layout,
                                                          const Topology& topology,
                                                          int link_stage) {
  std::vector<std::vector<int>> links = {layout.link_members(link_stage, true)};
  const int from = links.front().front();
  const int to = links.front().back();
  if (topology.gpus_per_nic() <= 1 || topology.domain_of(from) == topology.domain_of(to))
    return links;
  // A send's flow leaves its sender's NIC and enters its receiver's: the links sharing one with
  // this one send through its sender's NIC or receive through its receiver's.
  const auto nic_of = [&](int gpu) {
    return std::pair{topology.node_of(gpu), topology.rail_of(gpu)};
  };
  for (int rank = 0; rank < layout.num_ranks(); ++rank) {
    if (layout.coord(rank).pp != link_stage || rank == from) continue;
    const int receiver = layout.next_stage_rank(rank);
    if (topology.domain_of(rank) == topology.domain_of(receiver)) continue;
    if (nic_of(rank) == nic_of(from) || nic_of(receiver) == nic_of(to))
      links.push_back({rank, receiver});
  }
  return links;
}

int stages_passing_on_through_a_nic(const RankLayout& layout, const Topology& topology,
                                    bool interleaved) {
  if (topology.gpus_per_nic() <= 1) return 1;
  StagesByNic stages_by_nic;
  for (int rank = 0; rank < layout.num_ranks(); ++rank) {
    const int receiver = layout.next_stage_rank(rank);
    const int stage = layout.coord(rank).pp;
    const int next_stage = layout.coord(receiver).pp;
    if (next_stage < stage && !interleaved)
      continue;  // only chunks pass on from the last stage to the first
    if (topology.domain_of(rank) == topology.domain_of(receiver)) continue;
    // Activations leave the sender's NIC, gradients the receiver's.
    stages_by_nic[{topology.node_of(rank), topology.rail_of(rank)}].insert(stage);
    stages_by_nic[{topology.node_of(receiver), topology.rail_of(receiver)}].insert(next_stage);
  }
  return most_stages(stages_by_nic);
}

namespace {

// Calls `visit` on each group of `kind` that leaves its NVLink domains, once a group, until it
// returns true; whether one did.
template <typename Visit>
bool any_group_leaving_its_domains(const RankLayout& layout, const Topology& topology,
                                   GroupKind kind, Visit visit) {
  std::vector<bool> visited(layout.num_ranks(), false);
  for (int gpu = 0; gpu < layout.num_ranks(); ++gpu) {
    if (visited[gpu]) continue;
    const std::vector<int> group = layout.members(kind, gpu);
    for (const int member : group) visited[member] = true;
    if (crosses_domains(topology, group) && visit(group)) return true;
  }
  return false;
}

}  // namespace

int stages_sharing_a_nic(const RankLayout& layout, const Topology& topology, GroupKind kind) {
  if (topology.gpus_per_nic() <= 1) return 1;
  StagesByNic stages_by_nic;
  any_group_leaving_its_domains(layout, topology, kind, [&](const std::vector<int>& group) {
    for (const int member : group) {
      stages_by_nic[{topology.node_of(member), topology.rail_of(member)}].insert(layout.coord(member).pp);
    }
    return false;
  });
  return most_stages(stages_by_nic);
}

bool groups_share_an_oversubscribed_uplink(const RankLayout& layout, const Topology& topology,
                                           GroupKind kind) {
  if (!topology.oversubscribed()) return false;
  std::map<int, int> groups_by_uplink;
  return any_group_leaving_its_domains(layout, topology, kind, [&](const std::vector<int>& group) {
    const int leaf_group = topology.leaf_group_of(group.front());
    if (std::ranges::all_of(
            group, [&](int member) { return topology.leaf_group_of(member) == leaf_group; })) {
      return false;  // its traffic turns around in its leaves
    }
    std::set<int> uplinks;
    for (const int member : group) uplinks.insert(topology.leaf_of(member));
    return std::ranges::any_of(uplinks, [&](int leaf) { return ++groups_by_uplink[leaf] > 1; });
  });
}

OpPricer::OpPricer(const OpTimer& timer, const CollectiveModel& collectives, const RankLayout& layout)
    : timer_(timer), collectives_(collectives) {
  for (int k = 0; k < kNumGroupKinds; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    if (kind >= GroupKind::kForwardSend) continue;  // links are placed per stage
    placements_[k] = layout.placements(kind);
    sharing_[k] = sharing_nics(layout, collectives.topology(), kind, placements_[k].any_stage);
  }
}

KernelTime OpPricer::price(const Op& op) const {
  switch (op.kind) {
    case OpKind::kGemm: return timer_.gemm(op.gemm);
    case OpKind::kAttention: return timer_.attention(op.attention);
    case OpKind::kMemoryBound: return timer_.memory_bound(op.memory_kernel, op.bytes, op.kernels);
    case OpKind::kCommunication:
      return {
          collectives_.time(op.comm.collective, op.comm.size,
                            sharing_[static_cast<int>(group_of(op.comm.group))], op.comm.routing),
          false};
  }
  return {};
}

uint16_t OpPricer::kernel_sms(const Op& op) const {
  return collectives_.kernel_sms(op.comm.collective, placement(group_of(op.comm.group)));
}

TaskPlan plan_pass(const LayerGraph& g, PassKind pass, const OpPricer& pricer, std::string name) {
  TaskPlan plan;
  plan.name = std::move(name);
  plan.pass = pass;
  plan.op_task.assign(g.num_ops(), kNoId);

  // By task: the most one of its ops reserves for transient buffers, stranded blocks included.
  std::vector<int64_t> transient_reserve;
  // The pass's ops in declaration order (a valid execution order).
  std::vector<OpId> ops;
  for (OpId id = 0; id < g.num_ops(); ++id) {
    if (in_pass(g.op(id).phase, pass) && !is_identity(g.op(id))) ops.push_back(id);
  }
  // Which ops a task on another stream waits for: the compute run must end after them.
  std::vector<bool> feeds_other_stream(g.num_ops(), false);
  std::vector<bool> is_exit(g.num_ops(), false);
  if (pass == PassKind::kForward) {
    is_exit[g.forward_exit()] = true;
  } else if (pass != PassKind::kBackwardWeight) {
    for (const OpId id : g.backward_exits()) is_exit[id] = true;
  }
  for (const OpId id : ops) {
    std::vector<OpId> predecessors;
    bool boundary = false;
    effective_predecessors(g, id, predecessors, boundary);
    for (const OpId p : predecessors) {
      if (stream_of(g.op(p)) != stream_of(g.op(id))) feeds_other_stream[p] = true;
    }
  }

  uint32_t open = kNoId;  // the compute task still taking ops
  std::set<uint32_t> open_deps;
  for (const OpId id : ops) {
    const Op& op = g.op(id);
    std::vector<OpId> predecessors;
    bool boundary = false;
    effective_predecessors(g, id, predecessors, boundary);
    // Dependencies as templates (same pass) or as external ops (another pass).
    std::set<uint32_t> deps;
    std::vector<OpId> external;
    for (const OpId p : predecessors) {
      if (!in_pass(g.op(p).phase, pass)) {
        if (pass == PassKind::kBackwardWeight && g.op(p).phase != Phase::kForward) external.push_back(p);
        continue;
      }
      deps.insert(plan.op_task[p]);
    }
    // The block's input or output gradient: only ops with no predecessor in any backward pass.
    if (pass != PassKind::kForward && pass != PassKind::kBackwardWeight) {
      bool has_backward_predecessor = false;
      for (const OpId p : predecessors) has_backward_predecessor |= g.op(p).phase != Phase::kForward;
      boundary = boundary || !has_backward_predecessor;
    }
    if (pass == PassKind::kBackwardWeight) boundary = false;

    const StreamKind stream = stream_of(op);
    const KernelTime priced = pricer.price(op);
    const Seconds duration = priced.time;
    bool join = stream == StreamKind::kCompute && open != kNoId && external.empty() &&
                (!boundary || plan.tasks[open].entry) && plan.tasks[open].tag == tag_of(op);
    if (join) {
      for (const uint32_t d : deps) {
        const bool satisfied = d == open || plan.tasks[d].stream == StreamKind::kCompute || open_deps.count(d);
        if (!satisfied) join = false;
      }
    }
    if (!join) {
      TaskTemplate task;
      task.stream = stream;
      task.group = op.kind == OpKind::kCommunication ? group_of(op.comm.group) : GroupKind::kTensor;
      if (op.kind == OpKind::kCommunication) {
        task.comm = op.comm;
        task.sms = pricer.kernel_sms(op);
      }
      task.tag = tag_of(op);
      task.entry = boundary;
      task.first_op = static_cast<uint32_t>(plan.ops.size());
      task.external_deps = external;
      for (const uint32_t d : deps) task.deps.push_back(d);
      plan.tasks.push_back(task);
      transient_reserve.push_back(0);
      open = stream == StreamKind::kCompute ? static_cast<uint32_t>(plan.tasks.size() - 1) : kNoId;
      open_deps = deps;
    }
    const uint32_t index = static_cast<uint32_t>(plan.tasks.size() - 1);
    TaskTemplate& task = plan.tasks[index];
    for (const uint32_t d : deps) {
      if (d != index && std::find(task.deps.begin(), task.deps.end(), d) == task.deps.end()) task.deps.push_back(d);
    }
    plan.op_task[id] = index;
    plan.ops.push_back(PlannedOp{op.name, duration, priced.measured, op.phase, op.kind, op.flop,
                                 kernel_launches(op)});
    ++task.num_ops;
    const SimTime op_time = to_sim_time(duration, op.name, plan.name);
    task.duration = task.duration + op_time;
    if (priced.persistent) task.persistent_duration = task.persistent_duration + op_time;
    task.flop += op.flop;
    plan.flop += op.flop;
    if (op.phase == Phase::kForward || op.phase == Phase::kRecompute) {
      task.alloc_bytes += static_cast<int64_t>(op.saved / Bytes(1));
    }
    task.transient_bytes =
        std::max(task.transient_bytes, static_cast<int64_t>(op.transient / Bytes(1)));
    transient_reserve[index] = std::max(
        transient_reserve[index], static_cast<int64_t>((op.transient + op.stranded) / Bytes(1)));
    task.exit = task.exit || is_exit[id];
    if (stream == StreamKind::kCompute) plan.last_compute = index;
    if (feeds_other_stream[id] || is_exit[id]) open = kNoId;
  }

  // A task's transient is its ops' largest; what it strands lifts its reserve to the most one of
  // its ops reserves with what that op strands.
  for (size_t i = 0; i < transient_reserve.size(); ++i) {
    plan.tasks[i].stranded_bytes =
        std::max<int64_t>(0, transient_reserve[i] - plan.tasks[i].transient_bytes);
  }

  // Frees: a task frees what the ops it releases kept (they may belong to another pass).
  for (OpId id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    if (op.released_by == UINT32_MAX || op.saved <= Bytes(0)) continue;
    const uint32_t releaser = plan.op_task[op.released_by];
    if (releaser != kNoId) plan.tasks[releaser].free_bytes += static_cast<int64_t>(op.saved / Bytes(1));
  }
  return plan;
}

}  // namespace paceline
