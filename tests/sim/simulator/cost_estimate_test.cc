// Tests sim/simulator/cost_estimate.h: the task counts it works out before lowering against
// the programs lowering then builds, and the limits simulate() enforces with it.
#include "sim/simulator/cost_estimate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hardware/collective_model.h"
#include "hardware/op_timer.h"
#include "hardware/topology.h"
#include "sim/parallel/lowering.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

std::vector<std::string> ready_scenarios() {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator("scenarios")) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

struct Lowered {
  double program_tasks = 0.0;
  double largest_program = 0.0;
  double task_completions = 0.0;
  int64_t ranks = 0;
};

Lowered lowered(const Scenario& s) {
  const OpTimer timer(s.cluster.gpu, s.cluster.profile);
  const Topology topology(s.cluster);
  const CollectiveModel collectives(s.cluster, topology);
  const Lowering lowering = lower(s, timer, collectives, {});
  Lowered out;
  for (const auto& stage : lowering.stages) {
    out.program_tasks += static_cast<double>(stage->program.num_tasks());
    out.largest_program = std::max(out.largest_program, static_cast<double>(stage->program.num_tasks()));
  }
  for (const RankSetup& rank : lowering.ranks) out.task_completions += static_cast<double>(rank.program->num_tasks());
  out.ranks = static_cast<int64_t>(lowering.ranks.size());
  return out;
}

void expect_counts_the_lowered_tasks(const Scenario& s) {
  const CostEstimate cost = estimate_cost(s);
  const Lowered actual = lowered(s);
  EXPECT_EQ(cost.ranks, actual.ranks);
  const double over = actual.program_tasks > 10'000 ? 1.05 : 1.5;
  EXPECT_GE(cost.program_tasks, 0.98 * actual.program_tasks);
  EXPECT_LE(cost.program_tasks, over * actual.program_tasks);
  EXPECT_GE(cost.tasks_per_rank, 0.98 * actual.largest_program);
  EXPECT_LE(cost.tasks_per_rank, over * actual.largest_program);
  EXPECT_GE(cost.task_completions, 0.98 * actual.task_completions);
  EXPECT_LE(cost.task_completions, over * actual.task_completions);
}

TEST(CostEstimate, CountsTheTasksLoweringBuilds) {
  // The blocks' tasks are counted exactly and the tasks outside blocks bounded from above, so
  // the estimate is within a few percent of the lowered programs — except for the smallest
  // (a few hundred tasks on one GPU), where the bound on the others weighs more. Scenarios that
  // recompute every layer are counted again recomputing only the first of each chunk.
  for (const std::string& path : ready_scenarios()) {
    for (const Fidelity fidelity : {Fidelity::kSymmetric, Fidelity::kFull}) {
      Scenario s = load_scenario_file(path);
      if (fidelity == Fidelity::kFull && s.num_gpus() > 64) continue;  // same programs, more ranks
      s.simulation.fidelity = fidelity;
      SCOPED_TRACE(path + (fidelity == Fidelity::kFull ? " (full)" : ""));
      expect_counts_the_lowered_tasks(s);
      if (s.training.recompute != Recompute::kFull) continue;
      SCOPED_TRACE("recompute_layers: 1");
      s.training.recompute_layers = 1;
      expect_counts_the_lowered_tasks(s);
    }
  }
}

TEST(CostEstimate, CountsDeepSpeedPerTensorGathersAndBucketedReductions) {
  // DeepSpeed's 2021 ZeRO-3: each weight tensor gathered on its own (the host's list, the
  // gather, the copies), some gathered again for backward under full recompute, and gradients
  // all-reduced in buckets.
  const std::string base = R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 200 Gb/s}}
parallelism: {dp: 16, zero: 3, fsdp_prefetch: 0, fsdp_gather: tensor, fsdp_gradient_reduce: all_reduce}
training: {global_batch: 32, micro_batch: 1, seq_len: 2048, grad_bucket_parameters: 50000000)";
  for (const char* recompute : {"none", "full"}) {
    for (const int64_t reuse : {int64_t{1'000'000'000}, int64_t{0}}) {
      SCOPED_TRACE(fmt::format("recompute {}, reuse distance {}", recompute, reuse));
      const std::string text = std::string(base) + ", recompute: " + recompute + "}\n" +
                               "simulation: {fidelity: full}\n";
      Scenario s = load_scenario_text(text, "deepspeed.yaml");
      s.parallelism.fsdp_reuse_distance = reuse;
      expect_counts_the_lowered_tasks(s);
    }
  }
}

TEST(CostEstimate, CountsFsdp2Copies) {
  // torchtitan's Llama 3 8B under FSDP2 against gathers block by block: per micro-batch (2),
  // each of the 32 layers' weights copied out of the forward's and the backward's gathers and
  // its gradients copied in; the root unit's weights copied out and in once and its output
  // layer's gradients kept, where the embedding and the head take four gathers and two
  // reduce-scatters, the root one of each.
  Scenario s = load_scenario_file("scenarios/llama3-8b-8xh100-torchtitan.yaml");
  s.training.global_batch = 32;
  ASSERT_EQ(s.parallelism.fsdp_gather, FsdpGather::kPerParameter);
  expect_counts_the_lowered_tasks(s);
  const double copied = estimate_cost(s).program_tasks;
  const double lowered_copied = lowered(s).program_tasks;
  s.parallelism.fsdp_gather = FsdpGather::kBlock;
  const double extra_tasks = (3.0 * 32 + 3.0 - 3.0 - 1.0) * 2;
  EXPECT_DOUBLE_EQ(copied - estimate_cost(s).program_tasks, extra_tasks);
  EXPECT_DOUBLE_EQ(lowered_copied - lowered(s).program_tasks, extra_tasks);
}

TEST(CostEstimate, CountsActivationOffloadCopies) {
  // Llama 3 70B with FSDP on GB200: the copies out and back and the waits of 40 layers.
  const std::string text = R"(model: llama3-70b
cluster: {system: gb200-nvl72, nodes: 2}
parallelism: {tp: 1, pp: 1, zero: 3}
training: {global_batch: 32, micro_batch: 2, seq_len: 8192, activation_offload_layers: 40}
)";
  Scenario s = load_scenario_text(text, "offload.yaml");
  expect_counts_the_lowered_tasks(s);
  const double offloaded = estimate_cost(s).program_tasks;
  s.training.activation_offload_layers = 0;
  EXPECT_DOUBLE_EQ(offloaded - estimate_cost(s).program_tasks, 3.0 * 40 * 2);  // 2 micro-batches
}

// Llama 3.1 405B as in scenarios/llama3.1-405b-16384xh100.yaml, on `nodes` nodes of 8.
std::string llama405b(int nodes, int64_t global_batch, const char* fidelity) {
  return "model: llama3.1-405b\n"
         "cluster: {gpu: h100-sxm5-80gb, nodes: " + std::to_string(nodes) + ", gpus_per_node: 8,\n"
         "          inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}}\n"
         "parallelism: {tp: 8, pp: 16, zero: 3}\n"
         "training: {global_batch: " + std::to_string(global_batch) + ", seq_len: 8192}\n"
         "simulation: {fidelity: " + fidelity + "}\n";
}

TEST(CostEstimate, FullFidelityScalesWithRanks) {
  // 102,400 GPUs (tp 8 · pp 16 · dp 800), 16 micro-batches: every rank runs its stage's program.
  const CostEstimate full = estimate_cost(load_scenario_text(llama405b(12800, 12800, "full"), "big.yaml"));
  const CostEstimate symmetric = estimate_cost(load_scenario_text(llama405b(12800, 12800, "symmetric"), "big.yaml"));
  EXPECT_EQ(full.ranks, 102400);
  EXPECT_EQ(symmetric.ranks, 16);
  EXPECT_EQ(full.program_tasks, symmetric.program_tasks);
  // The tp·dp = 6400 ranks of each stage each complete their stage's tasks.
  EXPECT_DOUBLE_EQ(full.task_completions, 6400.0 * symmetric.task_completions);
  EXPECT_GT(full.wall_time, 100.0 * symmetric.wall_time);
  EXPECT_GT(full.memory, symmetric.memory);
  EXPECT_TRUE(full.full_fidelity);
  EXPECT_NE(how_to_shrink(full).find("fidelity: symmetric"), std::string::npos);
  EXPECT_NE(describe(full).find("102400 simulated ranks"), std::string::npos) << describe(full);
}

TEST(CostEstimate, FoldedFullFidelityIsLimitedByTheRanksItRuns) {
  // 16,384 GPUs in full fidelity: unfolded, every rank runs; folded (data-parallel replicas
  // alike on the fat tree), 128. A memory limit between the two estimates refuses only the first.
  const auto folding = std::make_shared<const Scenario>(load_scenario_text(llama405b(2048, 2048, "full"), "mid.yaml"));
  Scenario unfolding = *folding;
  unfolding.simulation.fold_symmetric_peers = false;
  const CostEstimate every_rank = estimate_cost(unfolding);
  const CostEstimate folded = with_simulated_ranks(estimate_cost(*folding), 128);
  ASSERT_LT(folded.memory, every_rank.memory);
  const SimulateOptions limit{.max_memory = (folded.memory + every_rank.memory) / 2.0};
  EXPECT_THROW(simulate(std::make_shared<const Scenario>(unfolding), limit), SimulationLimitError);
  EXPECT_EQ(simulate(folding, limit).result.ranks_simulated, 128);
  EXPECT_NE(how_to_shrink(every_rank).find("fold_symmetric_peers: true"), std::string::npos);
}

TEST(CostEstimate, AbsurdScenariosAreEstimatedNotBuilt) {
  // Ten million micro-batches of 56 tasks each: counted in microseconds, never lowered.
  const Scenario s = load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb}
training: {global_batch: 10000000}
)", "absurd.yaml");
  const CostEstimate cost = estimate_cost(s);
  EXPECT_GT(cost.program_tasks, 5e8);
  EXPECT_GT(cost.memory, GiB(100));
  try {
    simulate(std::make_shared<const Scenario>(s), SimulateOptions{.max_memory = GiB(64)});
    FAIL() << "expected SimulationLimitError";
  } catch (const SimulationLimitError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("the simulation would need about"), std::string::npos) << message;
    EXPECT_NE(message.find("64 GiB of memory allowed"), std::string::npos) << message;
    EXPECT_NE(message.find("fewer micro-batches"), std::string::npos) << message;
  }
}

TEST(CostEstimate, MachineMemoryIsKnown) {
  EXPECT_GT(machine_memory(), GiB(0.5));
}

// Exits 0 where, under ulimit -v of what the process has mapped plus 256 MiB, machine_memory()
// leaves a simulation at least a byte and less than the 256 MiB.
[[noreturn]] void exit_with_the_memory_an_address_space_limit_leaves() {
  std::ifstream statm("/proc/self/statm");
  double mapped_pages = 0.0;
  statm >> mapped_pages;
  const double mapped = mapped_pages * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  const rlimit limit{static_cast<rlim_t>(mapped) + (rlim_t{256} << 20), RLIM_INFINITY};
  setrlimit(RLIMIT_AS, &limit);
  const Bytes left = machine_memory();
  _exit(left > Bytes(0) && left <= MiB(256) ? 0 : 1);  // no exit handlers under the limit
}

TEST(CostEstimate, MachineMemoryIsWhatAnAddressSpaceLimitLeaves) {
  // In a child process, so that the limit stays there.
  EXPECT_EXIT(exit_with_the_memory_an_address_space_limit_leaves(), ::testing::ExitedWithCode(0),
              "");
}

}  // namespace
}  // namespace paceline
