#include "sim/simulator/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/input_error.h"
#include "hardware/collective_model.h"
#include "hardware/op_timer.h"
#include "hardware/topology.h"
#include "sim/network/network_model.h"
#include "sim/parallel/task_plan.h"

namespace paceline {

Interference interference_of(const Scenario& scenario) {
  Interference interference;
  // Communication kernels take SMs and memory bandwidth from compute they overlap: a kernel
  // holding a collective's SMs slows it by the GPU catalog's communication_interference, one that
  // holds fewer (a send/recv across the network) by as much less.
  for (const ActivityTag tag :
       {ActivityTag::kCompute, ActivityTag::kRecompute, ActivityTag::kOptimizer}) {
    interference.victim_tags |= uint64_t{1} << static_cast<int>(tag);
  }
  const KernelEfficiency& kernels = scenario.cluster.gpu.kernels;
  interference.slowdown = kernels.communication_interference;
  interference.full_slowdown_sms =
      static_cast<uint16_t>(std::max<int64_t>(1, kernels.communication_sms));
  // NCCL kernels hold their SMs for the whole collective; a persistent GEMM beside one runs in
  // two waves, twice its time. Overlapped tensor-parallel chunks are not NCCL kernels: Transformer
  // Engine's userbuffers leave the GEMM the SMs they do not use, and torchtitan's async TP copies
  // with the copy engines.
  for (int tag = 0; tag < kNumActivityTags; ++tag) {
    if (is_communication(static_cast<ActivityTag>(tag))) {
      interference.sm_holder_tags |= uint64_t{1} << tag;
    }
  }
  if (scenario.parallelism.tp_comm_overlap) {
    interference.sm_holder_tags &= ~(uint64_t{1} << static_cast<int>(ActivityTag::kTensorComm));
  }
  interference.persistent_slowdown = 1.0;
  return interference;
}

void check_limits(const CostEstimate& cost, const SimulateOptions& options) {
  if (options.max_memory > Bytes(0) && cost.memory > options.max_memory) {
    throw SimulationLimitError(fmt::format(
        "the simulation would need {}, more than the {:.3g} GiB of memory allowed; {}, or raise the limit "
        "(paceline run --max-memory)",
        describe(cost), options.max_memory / GiB(1), how_to_shrink(cost)));
  }
  if (options.timeout > Seconds(0) && cost.wall_time > options.timeout) {
    throw SimulationLimitError(fmt::format(
        "the simulation would need {}, longer than the {:.3g} s allowed; {}, or raise the limit "
        "(paceline run --timeout)",
        describe(cost), options.timeout / Seconds(1), how_to_shrink(cost)));
  }
}

namespace {

// Symmetric fidelity prices a stage's collectives with its own stage's groups; where groups of
// several stages leave their NVLink domains through one NIC, it misses their contention. The
// kinds are those lowering runs collectives over (data-parallel gradients: whole groups without
// ZeRO, else shards and, under HSDP, replicas).
std::vector<std::string> symmetric_fidelity_warnings(const Scenario& scenario, const RankLayout& layout,
                                                     const Topology& topology) {
  const Parallelism& p = scenario.parallelism;
  std::vector<std::pair<GroupKind, const char*>> kinds = {{GroupKind::kTensor, "tensor-parallel"},
                                                          {GroupKind::kContext, "context-parallel"}};
  if (p.zero == 0) {
    kinds.emplace_back(GroupKind::kData, "data-parallel");
  } else {
    kinds.emplace_back(GroupKind::kDataShard, "data-parallel shard");
    if (p.hybrid_sharded()) kinds.emplace_back(GroupKind::kDataReplica, "data-parallel replica");
  }
  if (scenario.model.moe) {
    kinds.emplace_back(GroupKind::kExpert, "expert-parallel");
    kinds.emplace_back(GroupKind::kExpertData, "expert data-parallel");
  }
  std::vector<std::string> warnings;
  std::vector<std::string_view> across_leaves;
  for (const auto& [kind, name] : kinds) {
    if (groups_share_an_oversubscribed_uplink(layout, topology, kind))
      across_leaves.push_back(name);
  }
  if (!across_leaves.empty()) {
    warnings.push_back(fmt::format(
        "the {} groups send over leaf uplinks that other groups of their kind send over too, "
        "oversubscribed (cluster.inter_node.oversubscription = {:g}, nodes_per_leaf = {}); "
        "symmetric fidelity prices each group's collectives without the others' traffic there and "
        "may understate their time (simulation: {{fidelity: full}} shares the uplinks)",
        fmt::join(across_leaves, ", "), scenario.cluster.inter_node->oversubscription,
        scenario.cluster.inter_node->nodes_per_leaf));
  }
  for (const auto& [kind, name] : kinds) {
    const int stages = stages_sharing_a_nic(layout, topology, kind);
    if (stages <= 1) continue;
    warnings.push_back(fmt::format(
        "the {} groups of {} pipeline stages leave their NVLink domains through one NIC (parallelism.rank_order = {}, "
        "cluster.inter_node.nics_per_node = {}); symmetric fidelity prices each stage's collectives apart from the "
        "others' and may understate their time (simulation: {{fidelity: full}} shares the NIC among them)",
        name, stages, to_string(p.rank_order), scenario.cluster.inter_node->nics_per_node));
  }
  if (p.pp > 1) {
    if (const int stages = stages_passing_on_through_a_nic(layout, topology, p.virtual_stages > 1);
        stages > 1) {
      warnings.push_back(
          fmt::format("the pipeline transfers of {} stages leave their NVLink domains through one "
                      "NIC (parallelism.rank_order = {}, cluster.inter_node.nics_per_node = {}); "
                      "symmetric fidelity prices each stage's transfers apart from the others' and "
                      "may understate their time (simulation: {{fidelity: full}} shares the NIC "
                      "among them)",
                      stages, to_string(p.rank_order), scenario.cluster.inter_node->nics_per_node));
    }
  }
  return warnings;
}

// The longest op of the lowered passes, or task outside them (a pipeline transfer, a step-level
// collective, the optimizer), for an error that the step passed the range of simulated time: the
// figure of the scenario it comes from is most likely the one out of range.
std::string longest_op(const Lowering& lowering) {
  Seconds longest;
  std::string name;
  for (const auto& stage : lowering.stages) {
    for (const auto& plan : stage->plans) {
      for (const PlannedOp& op : plan->ops) {
        if (op.duration > longest) {
          longest = op.duration;
          name = fmt::format("{} of {}", op.name, plan->name);
        }
      }
    }
    for (TaskId id = 0; id < stage->program.num_tasks(); ++id) {
      const Task task = stage->program.task(id);
      const TaskLabel& label = stage->labels[task.label];
      if (label.plan == kNoId && to_seconds(task.duration) > longest) {
        longest = to_seconds(task.duration);
        name = stage->lone_name(label);
      }
    }
  }
  if (name.empty()) return "";
  return fmt::format("; its longest op, {}, takes {:.3g} s", name, longest / Seconds(1));
}

Prediction run_simulation(std::shared_ptr<const Scenario> scenario, const SimulateOptions& options) {
  // The wall clock measures the simulator itself and enforces the timeout; it never reaches
  // the simulated schedule.
  const auto started = std::chrono::steady_clock::now();
  // A scenario the limits cannot hold fails with its estimate before it runs. Full fidelity that
  // may fold peers is checked up front as if folded to one rank per stage, and again once
  // lowering and the fold tell how many ranks it runs.
  const bool limited = options.max_memory > Bytes(0) || options.timeout > Seconds(0);
  const bool full = scenario->simulation.fidelity == Fidelity::kFull;
  const bool folding = full && scenario->simulation.fold_symmetric_peers;
  const RankFold wanted = folding ? RankFold::all() : RankFold{};
  std::optional<CostEstimate> cost;
  if (limited) {
    cost = estimate_cost(*scenario);
    if (folding) cost = with_simulated_ranks(*cost, scenario->parallelism.pp);
    check_limits(*cost, options);
  }
  EngineOptions engine_options{.max_events = options.max_events, .stop = options.stop};
  // (A timeout beyond a century is no limit, and would overflow the clock's type.)
  if (options.timeout > Seconds(0) && options.timeout < Seconds(3e9)) {
    engine_options.deadline =
        started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options.timeout / Seconds(1)));
  }
  auto overrun = [&](uint64_t events) {
    return SimulationLimitError(fmt::format("the simulation ran past its timeout of {:.3g} s after {} events "
                                            "(its estimate was {})",
                                            options.timeout / Seconds(1), events, describe(*cost)));
  };
  const OpTimer timer(scenario->cluster.gpu, scenario->cluster.profile, scenario->num_gpus());
  const Topology topology(scenario->cluster);
  const CollectiveModel collectives(scenario->cluster, topology);
  const RankLayout layout(scenario->parallelism, scenario->cluster.nvlink_domain);
  // Full fidelity folds the peers it proves symmetric: lowered for the hoped-for fold first,
  // lowered again only when the proof keeps fewer dimensions.
  auto lower_folded = [&](RankFold fold) {
    return std::make_shared<const Lowering>(lower(*scenario, timer, collectives,
                                                  {.record_spans = true,
                                                   .record_memory = options.record_memory,
                                                   .shared_network = full,
                                                   .full_fold = fold,
                                                   .threads = options.threads}));
  };
  auto lowering = lower_folded(wanted);
  NetworkSymmetry symmetry(layout);
  if (folding) {
    try {
      symmetry = NetworkSymmetry::find(*lowering, layout, collectives, wanted, engine_options.deadline);
    } catch (const SimulationDeadlineError& e) {
      throw overrun(e.events());
    }
    if (symmetry.fold() != wanted) lowering = lower_folded(symmetry.fold());
    if (limited) {
      cost = with_simulated_ranks(*cost, static_cast<int64_t>(lowering->ranks.size()));
      check_limits(*cost, options);
    }
  }
  if (engine_options.deadline && std::chrono::steady_clock::now() > *engine_options.deadline) throw overrun(0);
  stop_if_asked(options.stop, "the simulation");
  engine_options.interference = interference_of(*scenario);
  const Engine engine(lowering->ranks, engine_options);
  std::optional<NetworkModel> network;
  if (full) network.emplace(*lowering, layout, collectives, symmetry);
  Prediction prediction;
  try {
    prediction.run = engine.run(network ? &*network : nullptr);
  } catch (const SimulationDeadlineError& e) {
    throw overrun(e.events());
  } catch (const SimulatedTimeOverflow& e) {
    throw SimulatedTimeOverflow(e.what() + longest_op(*lowering));
  }
  prediction.lowering = lowering;
  prediction.result = make_result(scenario, *lowering, prediction.run);
  if (!full) prediction.result.warnings = symmetric_fidelity_warnings(*scenario, layout, topology);
  prediction.result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return prediction;
}

}  // namespace

Prediction simulate(std::shared_ptr<const Scenario> scenario, const SimulateOptions& options) {
  try {
    return run_simulation(scenario, options);
  } catch (const SimulatedTimeOverflow& e) {
    // Which figure is out of range the engine cannot tell; the scenario it came from it can.
    const std::string& source = scenario->file.empty() ? scenario->name : scenario->file;
    throw SimulationLimitError(fmt::format("{}: {}", source, e.what()));
  }
}

Prediction simulate_again(const Result& result, const SimulateOptions& options) {
  Prediction again = simulate(result.scenario, options);
  if (to_json(again.result, false).dump() != to_json(result, false).dump()) {
    throw InputError(
        {result.scenario->file.empty() ? result.scenario->name : result.scenario->file},
        fmt::format(
            "simulated again, the scenario takes {} s an iteration, not the {} s of the result "
            "read back: the catalogs or files it names have changed since",
            again.result.iteration_time / Seconds(1), result.iteration_time / Seconds(1)));
  }
  return again;
}

}  // namespace paceline
