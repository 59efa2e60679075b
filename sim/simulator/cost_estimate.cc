#include "sim/simulator/cost_estimate.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <vector>

#include "hardware/collective_model.h"
#include "hardware/op_timer.h"
#include "hardware/topology.h"
#include "models/layer_graph.h"
#include "sim/parallel/lowering.h"
#include "sim/parallel/rank_layout.h"
#include "sim/parallel/task_plan.h"

namespace paceline {
namespace {

// Costs measured on the engine with `paceline run` on the ready scenarios in both fidelities:
// Release build (g++ 12 -O3) on one core of the 2-core CI machine (x86-64, Debian 12), peak RSS
// from getrusage, wall time per phase. Each is rounded to the cautious side of what was
// measured (in brackets); the estimate decides whether a run fits at all, it does not predict
// the simulator's speed to a few percent.
//
// Memory per task of a stage program: the Task, its label, adjacency and stream order, the
// builder's copy while the program is laid out, and the first rank's span, start time and
// breakdown edges [gpt3-175b-1024xa100: 55 MB over 352,451 tasks = 156 B]; a trace's memory
// samples add two of 24 B.
constexpr double kBytesPerProgramTask = 320.0;
// Memory per simulated rank beyond its program: stream positions, resource queues, group
// instance tables, its outcome and its share of pending events and open rendezvous
// [llama3.1-405b-16384xh100, full − symmetric: 17.3 MB over 16,368 ranks = 1.06 KB].
constexpr double kBytesPerRank = 2048.0;
// Tasks the engine completes per second of replay [7.3 M/s symmetric gpt3-175b-1024xa100 to
// 35 M/s full mixtral-8x7b-64xh100, where one event completes a whole rendezvous].
constexpr double kCompletionsPerSecond = 10e6;
// Tasks lowering builds per second [8.4–9.8 M/s], and lowering time per simulated rank for its
// group tables [full llama3.1-405b-16384xh100: 0.22 s over 16,384 ranks = 14 µs].
constexpr double kLoweredTasksPerSecond = 5e6;
constexpr double kLoweringSecondsPerRank = 20e-6;

// Readable counts: "12,345" below a million, "1.2e+09" above.
std::string count(double n) {
  if (n < 1e6) return fmt::format("{:L}", static_cast<int64_t>(std::llround(n)));
  return fmt::format("{:.2g}", n);
}

// A cgroup's memory limit, when the process runs under one (containers, CI runners).
double cgroup_limit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    double limit = 0.0;
    if (in >> limit && limit > 0.0) return limit;  // "max" (no limit) does not parse
  }
  return 0.0;
}

}  // namespace

CostEstimate estimate_cost(const Scenario& s) {
  const Parallelism& p = s.parallelism;
  // The passes of each distinct block, planned as lowering plans them.
  const OpTimer timer(s.cluster.gpu, s.cluster.profile, s.num_gpus());
  const Topology topology(s.cluster);
  const CollectiveModel collectives(s.cluster, topology);
  const RankLayout layout(p, s.cluster.nvlink_domain);
  const OpPricer pricer(timer, collectives, layout);
  const LayerShard shard = layer_shard(s);
  const bool zero_bubble = p.schedule == Schedule::kZeroBubble;
  // Under FSDP without pipelining, per block and micro-batch: the gathers of its weights for
  // forward and for backward and those gathered again for backward (fsdp_gathers), each with the
  // host's list and the copies out of it under fsdp_gather: tensor, and the reduce-scatter of its
  // gradients (all-reduced buckets are bounded per micro-batch below); under ZeRO-2 without
  // pipelining the reduce-scatters alone. Either reduce-scatters a block's experts apart and,
  // under HSDP, all-reduces its shard across the replicas. Under fsdp_gather: per_parameter each
  // pass copies its weights out of the gather's buffer, and the gradients are copied in first.
  const bool fsdp_per_microbatch = per_microbatch_fsdp(p.zero, p.pp);
  const bool reduce_per_microbatch = p.reduces_gradients_per_microbatch();
  const bool reduce_scatter = p.fsdp_gradient_reduce == FsdpGradientReduce::kReduceScatter;
  const bool experts_reduced = p.expert_data_ranks() > 1;
  const bool hybrid = p.hybrid_sharded();  // each block's shard all-reduced across replicas
  // (Named as the lowering names them, for a duration past the range of simulated time.)
  auto pass_tasks = [&](const LayerGraph& graph, std::string_view block) {
    auto tasks = [&](PassKind pass) {
      return static_cast<double>(
          plan_pass(graph, pass, pricer, pass_plan_name(block, pass)).tasks.size());
    };
    const double backward =
        zero_bubble ? tasks(PassKind::kBackwardInput) + tasks(PassKind::kBackwardWeight) : tasks(PassKind::kBackward);
    return tasks(PassKind::kForward) + backward;
  };
  auto reductions = [&](bool experts) {
    return reduce_per_microbatch && reduce_scatter
               ? 1.0 + (experts && experts_reduced ? 1.0 : 0.0) + (hybrid ? 1.0 : 0.0)
               : 0.0;
  };
  auto block_tasks = [&](const LayerGraph& graph, std::string_view block) {
    double fsdp = reductions(graph.expert_parameters > 0);
    if (fsdp_per_microbatch) {
      const FsdpGathers gathers = fsdp_gathers(s, graph);
      const double tasks_per_gather = p.fsdp_gather == FsdpGather::kTensor ? 3.0 : 1.0;
      fsdp += tasks_per_gather * static_cast<double>(2 * gathers.sizes.size() + gathers.regather_sizes.size()) +
              (gathers.experts > Bytes(0) ? 2.0 : 0.0);
      if (p.fsdp_gather == FsdpGather::kPerParameter) fsdp += 3.0;
    }
    return pass_tasks(graph, block) + fsdp;
  };
  const LayerGraph embedding_graph = build_embedding(s.model, shard);
  const LayerGraph head_graph = build_output_head(s.model, head_layer_shard(s));
  double embedding = block_tasks(embedding_graph, "embedding");
  double head = block_tasks(head_graph, "head");
  if (holds_fsdp_root(p)) {
    // FSDP2's root unit, the embedding's and the head's weights, per micro-batch: one gather
    // (its experts' apart) and one copy out of it (under gpipe the forwards share the first and
    // each later backward gathers again), one copy in, one set of reductions, and the head's
    // gradients kept until then.
    const bool experts = embedding_graph.expert_parameters + head_graph.expert_parameters > 0;
    const bool experts_gathered =
        fsdp_gathers(s, embedding_graph).experts + fsdp_gathers(s, head_graph).experts > Bytes(0);
    embedding = pass_tasks(embedding_graph, "embedding") + 2.0 + (experts_gathered ? 1.0 : 0.0) +
                1.0 + reductions(experts) + 1.0;
    head = pass_tasks(head_graph, "head");
  }
  // A layer's tasks and gradient elements, by whether it is an MoE layer and whether it is
  // recomputed: each kind counted once, on first use.
  std::map<std::pair<bool, bool>, std::pair<double, double>> layer_counts;
  const auto counts_of_layer = [&](bool moe, bool recomputed) {
    auto [it, added] = layer_counts.try_emplace({moe, recomputed});
    if (added) {
      const LayerShard graph_shard = recomputed ? shard : kept_layer_shard(s);
      const LayerGraph graph = build_transformer_layer(s.model, graph_shard, moe);
      it->second = {block_tasks(graph, layer_block_name(moe, !recomputed)),
                    static_cast<double>(graph.parameters)};
    }
    return it->second;
  };

  // Each stage runs its virtual stages' blocks for every micro-batch. Outside the blocks, per
  // micro-batch and virtual stage: at most four pipeline transfers; per step and block: at most
  // two weight gathers (its experts' apart) and three gradient reductions (reducing per
  // micro-batch with reduce-scatters, the gathers alone); per step: the word embedding exchange,
  // the gradient norm, the optimizer and a final weight gather (two, with experts); under
  // fsdp_gather: tensor, the gather of the tensors kept whole (a list, the gather, its copies and
  // their unpacking).
  const double microbatches = static_cast<double>(s.training.num_microbatches(p.dp));
  const double expert_gathers = s.model.moe && experts_reduced ? 1.0 : 0.0;
  const double persistent_gather = p.zero >= 3 && p.fsdp_gather == FsdpGather::kTensor ? 4.0 : 0.0;
  std::vector<double> stage_tasks(p.pp, 4.0 + expert_gathers + persistent_gather);
  int layer = 0;
  const int virtual_total = static_cast<int>(p.layers_per_stage.size());
  for (int vs = 0; vs < virtual_total; ++vs) {
    double per_microbatch = 4.0;
    double blocks = 0.0;
    double gradient_elements = 0.0;  // of the virtual stage's blocks, for all-reduced buckets
    if (vs == 0) {
      // Activation offload (pipeline-free): per offloaded layer a copy out, a wait and a copy back.
      per_microbatch += embedding + 3.0 * s.training.activation_offload_layers;
      gradient_elements += static_cast<double>(embedding_graph.parameters);
      blocks += 1.0;
    }
    for (int i = 0; i < p.layers_per_stage[vs]; ++i) {
      const auto [tasks, elements] = counts_of_layer(s.model.is_moe_layer(layer + i), s.training.recomputes_layer(i));
      per_microbatch += tasks;
      gradient_elements += elements;
    }
    blocks += p.layers_per_stage[vs];
    layer += p.layers_per_stage[vs];
    if (vs == virtual_total - 1) {
      per_microbatch += head;
      gradient_elements += static_cast<double>(head_graph.parameters);
      blocks += 1.0;
    }
    if (fsdp_per_microbatch && !reduce_scatter) {
      // A bucket is sent off when the next gradient would overflow it, so two buckets in a row
      // hold more than its size: at most 2·elements/size + 1 all-reduces, the last at the end.
      per_microbatch += std::floor(2.0 * gradient_elements /
                                   static_cast<double>(s.training.bucket_parameters(p))) +
                        1.0;
    }
    const double step_tasks_per_block = (reduce_per_microbatch && reduce_scatter ? 1.0 : 4.0) + expert_gathers;
    stage_tasks[vs % p.pp] += per_microbatch * microbatches + step_tasks_per_block * blocks;
  }

  CostEstimate cost;
  for (const double tasks : stage_tasks) {
    cost.program_tasks += tasks;
    cost.tasks_per_rank = std::max(cost.tasks_per_rank, tasks);
  }
  cost.stages = p.pp;
  const bool full = s.simulation.fidelity == Fidelity::kFull;
  cost.full_fidelity = full;
  cost.unfolded = full && !s.simulation.fold_symmetric_peers;
  return with_simulated_ranks(cost, full ? s.num_gpus() : p.pp);
}

Bytes least_simulation_memory(int64_t microbatches, int64_t layers) {
  return Bytes(2.0 * static_cast<double>(microbatches) * static_cast<double>(layers) *
               kBytesPerProgramTask);
}

CostEstimate with_simulated_ranks(CostEstimate cost, int64_t simulated_ranks) {
  cost.ranks = simulated_ranks;
  // Every stage's program runs on as many simulated ranks (all tp·cp·dp ranks of the stage in
  // unfolded full fidelity).
  const double ranks_per_stage = static_cast<double>(cost.ranks) / static_cast<double>(cost.stages);
  cost.task_completions = cost.program_tasks * ranks_per_stage;
  cost.memory = Bytes(cost.program_tasks * kBytesPerProgramTask + static_cast<double>(cost.ranks) * kBytesPerRank);
  cost.wall_time = Seconds(cost.task_completions / kCompletionsPerSecond + cost.program_tasks / kLoweredTasksPerSecond +
                           static_cast<double>(cost.ranks) * kLoweringSecondsPerRank);
  return cost;
}

std::string describe(const CostEstimate& cost) {
  return fmt::format("about {} engine tasks ({} per rank × {} simulated ranks): {:.3g} GiB of memory and {:.3g} s",
                     count(cost.task_completions), count(cost.tasks_per_rank), count(static_cast<double>(cost.ranks)),
                     cost.memory / GiB(1), cost.wall_time / Seconds(1));
}

std::string how_to_shrink(const CostEstimate& cost) {
  if (cost.unfolded) {
    return "fold symmetric peers (simulation: {fold_symmetric_peers: true}), simulate one rank per pipeline stage "
           "(simulation: {fidelity: symmetric}) or a smaller cluster";
  }
  if (cost.full_fidelity) {
    return "simulate one rank per pipeline stage (simulation: {fidelity: symmetric}) or a smaller cluster";
  }
  return "simulate fewer micro-batches (a smaller global_batch or a larger micro_batch) or fewer layers";
}

Bytes machine_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  double bytes = pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0.0;
  // An address-space limit (ulimit -v) counts what the process has mapped already (its code,
  // libraries, heap and stacks); the rest is what a simulation may take.
  rlimit address_space{};
  double address_space_left = 0.0;
  if (getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY) {
    std::ifstream statm("/proc/self/statm");
    double mapped_pages = 0.0;
    statm >> mapped_pages;
    address_space_left = std::max(static_cast<double>(address_space.rlim_cur) -
                                      mapped_pages * static_cast<double>(std::max(page_size, 1L)),
                                  1.0);
  }
  for (const double limit : {cgroup_limit(), address_space_left}) {
    if (limit > 0.0 && (bytes == 0.0 || limit < bytes)) bytes = limit;
  }
  return Bytes(bytes);
}

}  // namespace paceline
