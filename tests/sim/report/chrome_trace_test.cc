// Tests sim/report/chrome_trace.h: every forward and backward kernel appears in the trace, and
// each recorded rank's memory with its peak.
#include "sim/report/chrome_trace.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

TEST(ChromeTrace, ShowsEveryKernelOfEveryPass) {
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb}
training: {global_batch: 2, micro_batch: 1}
)", "s.yaml"));
  const Prediction p = simulate(scenario);
  std::ostringstream out;
  write_chrome_trace(*p.lowering, p.run, out);
  const std::string trace = out.str();
  // Two micro-batches: every op of the forward and backward plans appears twice per layer.
  size_t expected = 0;
  for (const auto& plan : p.lowering->stages[0]->plans) {
    const int blocks = plan->name.rfind("layer", 0) == 0 ? 24 : 1;
    expected += plan->ops.size() * 2 * blocks;
  }
  size_t slices = 0;
  for (size_t at = trace.find("\"pass\":"); at != std::string::npos; at = trace.find("\"pass\":", at + 1)) ++slices;
  EXPECT_EQ(slices, expected);
  for (const char* kernel : {"attn.qkv", "attn.core", "mlp.fc1.dgrad", "mlp.fc1.wgrad", "head.cross_entropy",
                             "embedding.lookup", "step.optimizer", "thread_name"}) {
    EXPECT_NE(trace.find(kernel), std::string::npos) << kernel;
  }
}

TEST(ChromeTrace, ShowsTheMemoryOfEachRankAndItsPeak) {
  // Two pipeline stages, each a recorded rank with a track of its own.
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 2}
parallelism: {pp: 2}
training: {global_batch: 4, micro_batch: 1}
)",
                                                                            "s.yaml"));
  const auto trace_of = [&](bool record_memory) {
    SimulateOptions options;
    options.record_memory = record_memory;
    const Prediction p = simulate(scenario, options);
    std::ostringstream out;
    write_chrome_trace(*p.lowering, p.run, out);
    return std::make_pair(p, out.str());
  };
  const auto [p, text] = trace_of(true);
  // JSON is YAML: yaml-cpp reads the trace back.
  const YAML::Node trace = YAML::Load(text);
  std::map<int, std::vector<double>> counter_times;
  std::map<int, double> highest_gib, last_gib, peak_gib;
  for (const YAML::Node& event : trace["traceEvents"]) {
    const std::string ph = event["ph"].as<std::string>();
    const int pid = event["pid"].as<int>();
    if (ph == "C") {
      counter_times[pid].push_back(event["ts"].as<double>());
      last_gib[pid] = event["args"]["GiB"].as<double>();
      highest_gib[pid] = std::max(highest_gib[pid], last_gib[pid]);
    } else if (ph == "i") {
      EXPECT_EQ(event["s"].as<std::string>(), "p");
      EXPECT_EQ(event["ts"].as<double>(),
                static_cast<double>(p.run.ranks[pid].peak_memory_time.picoseconds()) * 1e-6);
      peak_gib[pid] = event["args"]["GiB"].as<double>();
    }
  }
  ASSERT_EQ(p.run.ranks.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    // One value per instant, in order of time; the peak marked as the result has it, the track
    // never above it, and ending at what the step leaves resident.
    const std::vector<double>& times = counter_times[rank];
    EXPECT_GT(times.size(), 100u);
    EXPECT_TRUE(std::adjacent_find(times.begin(), times.end(), std::greater_equal<>()) ==
                times.end())
        << rank;
    EXPECT_DOUBLE_EQ(peak_gib[rank],
                     static_cast<double>(p.run.ranks[rank].peak_memory_bytes) / gib);
    EXPECT_LE(highest_gib[rank], peak_gib[rank]);
    EXPECT_GT(highest_gib[rank], 0.9 * peak_gib[rank]);
    EXPECT_DOUBLE_EQ(last_gib[rank],
                     static_cast<double>(p.run.ranks[rank].final_memory_bytes) / gib);
  }
  // A run that keeps no memory samples still marks the peaks.
  const std::string without = trace_of(false).second;
  EXPECT_EQ(without.find("\"ph\":\"C\""), std::string::npos);
  EXPECT_NE(without.find("memory peak"), std::string::npos);
}

}  // namespace
}  // namespace paceline
