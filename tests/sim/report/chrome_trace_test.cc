// Tests sim/report/chrome_trace.h: every forward and backward kernel appears in the trace.
#include "sim/report/chrome_trace.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace paceline
