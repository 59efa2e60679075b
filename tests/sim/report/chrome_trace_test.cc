// Tests sim/report/chrome_trace.h: every forward and backward kernel appears in the trace, and
// each recorded rank's memory with its peak.
#include "sim/report/chrome_trace.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

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
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb}
training: {global_batch: 2, micro_batch: 1}
)",
                                                                            "s.yaml"));
  const Prediction p = simulate(scenario);
  std::ostringstream out;
  write_chrome_trace(*p.lowering, p.run, out);
  // JSON is YAML: yaml-cpp reads the trace back.
  const YAML::Node trace = YAML::Load(out.str());
  double highest_gib = 0.0;
  double last_gib = -1.0;
  int counters = 0;
  int peaks = 0;
  for (const YAML::Node& event : trace["traceEvents"]) {
    const std::string ph = event["ph"].as<std::string>();
    if (ph == "C") {
      ++counters;
      last_gib = event["args"]["GiB"].as<double>();
      highest_gib = std::max(highest_gib, last_gib);
    } else if (ph == "i") {
      ++peaks;
      EXPECT_EQ(event["ts"].as<double>(),
                static_cast<double>(p.run.ranks[0].peak_memory_time.picoseconds()) * 1e-6);
    }
  }
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  EXPECT_GT(counters, 100);
  EXPECT_EQ(peaks, 1);
  // The counter reaches the peak the result reports and ends at what the step leaves resident.
  EXPECT_DOUBLE_EQ(highest_gib, static_cast<double>(p.result.peak_memory_bytes) / kGiB);
  EXPECT_DOUBLE_EQ(last_gib, static_cast<double>(p.run.ranks[0].final_memory_bytes) / kGiB);
}

}  // namespace
}  // namespace paceline
