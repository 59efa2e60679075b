// Numerical sanity properties of whole predictions, over every catalog model on a cluster that
// suits it: more bandwidth or a faster GPU never makes a step slower; a doubled global batch at
// a fixed layout doubles the tokens and at most doubles the time; memory is never negative;
// the breakdown sums to the iteration time.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "models/model_catalog.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// Relative slack for comparing times computed along different paths (integer picoseconds).
constexpr double kSlack = 1e-9;

// A 3D layout the model accepts on H100 nodes: the largest tp of 8, 4, 2, 1 that divides its
// heads and MLP (and pairs with its KV heads), pp 2, dp 2, four micro-batches of one sequence
// of up to 2048 tokens per data-parallel rank.
std::string scenario_text(const std::string& model_name, const std::string& gpu, int64_t global_batch_per_rank) {
  const ModelSpec model = resolve_model(model_name, default_model_catalog(), {});
  int tp = 1;
  for (const int t : {8, 4, 2}) {
    if (model.heads % t == 0 && model.ffn_hidden % t == 0 && (model.kv_heads % t == 0 || t % model.kv_heads == 0)) {
      tp = t;
      break;
    }
  }
  const int gpus = tp * 2 * 2;
  const int per_node = std::min(gpus, 8);
  const int nodes = gpus / per_node;
  return fmt::format(R"(model: {}
cluster:
  gpu: {}
  nodes: {}
  gpus_per_node: {}
{}parallelism: {{tp: {}, pp: 2, dp: 2}}
training: {{global_batch: {}, micro_batch: 1, seq_len: {}}}
)",
                     model_name, gpu, nodes, per_node,
                     nodes > 1 ? "  inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}\n" : "", tp,
                     2 * global_batch_per_rank, std::min<int64_t>(model.seq_len, 2048));
}

Scenario scenario_of(const std::string& model, const std::string& gpu = "h100-sxm5-80gb", int64_t batch = 4) {
  return load_scenario_text(scenario_text(model, gpu, batch), model + ".yaml");
}

Result run(Scenario scenario) { return simulate(std::make_shared<const Scenario>(std::move(scenario))).result; }

double seconds(const Result& r) { return r.iteration_time / Seconds(1); }

class CatalogProperty : public testing::TestWithParam<std::string> {};

TEST_P(CatalogProperty, MoreBandwidthIsNeverSlower) {
  const Scenario base = scenario_of(GetParam());
  // Twice the NVLink and twice the NIC bandwidth, everything else equal.
  Scenario fast = base;
  fast.cluster.intra_node.bandwidth = fast.cluster.intra_node.bandwidth * 2.0;
  if (fast.cluster.inter_node) fast.cluster.inter_node->nic.bandwidth = fast.cluster.inter_node->nic.bandwidth * 2.0;
  EXPECT_LE(seconds(run(fast)), seconds(run(base)) * (1 + kSlack)) << scenario_text(GetParam(), "h100-sxm5-80gb", 4);
}

TEST_P(CatalogProperty, FasterGpuIsNeverSlower) {
  const Scenario base = scenario_of(GetParam());
  // The same GPU with twice its peak compute and memory bandwidth.
  Scenario fast = base;
  for (auto& peak : fast.cluster.gpu.peak_dense) {
    if (peak) *peak = *peak * 2.0;
  }
  fast.cluster.gpu.memory_bandwidth = fast.cluster.gpu.memory_bandwidth * 2.0;
  const double base_s = seconds(run(base));
  EXPECT_LE(seconds(run(fast)), base_s * (1 + kSlack));
  // And a newer GPU: an H100 is never slower than an A100 on the same layout.
  EXPECT_LE(base_s, seconds(run(scenario_of(GetParam(), "a100-sxm4-80gb"))) * (1 + kSlack));
}

TEST_P(CatalogProperty, DoublingTheBatchDoublesTokensAndAtMostDoublesTime) {
  const Result single = run(scenario_of(GetParam(), "h100-sxm5-80gb", 4));
  const Result twice = run(scenario_of(GetParam(), "h100-sxm5-80gb", 8));
  const double tokens = single.tokens_per_s * seconds(single);
  const double tokens_twice = twice.tokens_per_s * seconds(twice);
  // Same layout, twice the micro-batches: exactly twice the tokens per iteration.
  EXPECT_NEAR(tokens_twice, 2.0 * tokens, 2.0 * tokens * kSlack);
  EXPECT_GE(tokens_twice, 2.0 * tokens * (1 - kSlack));
  // Fixed costs (pipeline fill, gradient reduction, optimizer) are paid once per step, so the
  // step takes longer but never more than twice as long, and throughput never drops.
  EXPECT_GT(seconds(twice), seconds(single));
  EXPECT_LE(seconds(twice), 2.0 * seconds(single) * (1 + kSlack));
  EXPECT_GE(twice.tokens_per_s, single.tokens_per_s * (1 - kSlack));
}

TEST_P(CatalogProperty, MemoryIsNeverNegative) {
  const Prediction p = simulate(std::make_shared<const Scenario>(scenario_of(GetParam())));
  const Result& r = p.result;
  EXPECT_GT(r.peak_memory_bytes, 0);
  for (const StageMemory& stage : r.stages) {
    EXPECT_GE(stage.weight_bytes, 0);
    EXPECT_GE(stage.gradient_bytes, 0);
    EXPECT_GE(stage.optimizer_bytes, 0);
    EXPECT_EQ(stage.static_bytes, stage.weight_bytes + stage.gradient_bytes + stage.optimizer_bytes);
    EXPECT_GE(stage.peak_bytes, stage.static_bytes);
  }
  // What each simulated rank still holds at the end of the step, and its peak.
  for (size_t rank = 0; rank < p.run.ranks.size(); ++rank) {
    const RankOutcome& outcome = p.run.ranks[rank];
    EXPECT_GE(outcome.final_memory_bytes, 0) << "rank " << rank;
    EXPECT_GE(outcome.peak_memory_bytes, outcome.final_memory_bytes) << "rank " << rank;
    EXPECT_GE(outcome.peak_memory_bytes, p.lowering->ranks[rank].initial_memory_bytes) << "rank " << rank;
  }
}

TEST_P(CatalogProperty, BreakdownSumsToTheIterationTime) {
  const Result r = run(scenario_of(GetParam()));
  const Breakdown& b = r.breakdown;
  for (const Seconds part : {b.compute, b.recompute, b.optimizer, b.exposed_communication, b.pipeline_bubble}) {
    EXPECT_GE(part / Seconds(1), 0.0);
  }
  Seconds exposed;
  for (const Seconds part : b.exposed_by_tag) exposed += part;
  EXPECT_NEAR(exposed / Seconds(1), b.exposed_communication / Seconds(1), seconds(r) * kSlack);
  EXPECT_NEAR(b.total() / Seconds(1), seconds(r), seconds(r) * kSlack);
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Catalog, CatalogProperty, testing::ValuesIn(catalog_models(default_model_catalog())),
                         test_name);

}  // namespace
}  // namespace paceline
