// Tests simulate_again (sim/simulator/simulator.h): a result read back is simulated again into
// the same result, with its spans, and a result its scenario no longer gives is refused.
#include <gtest/gtest.h>

#include <string>

#include "sim/report/result.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

TEST(SimulateAgain, GivesTheSpansOfTheResultReadBack) {
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, gpus_per_node: 4}
parallelism: {pp: 2, dp: 2}
training: {global_batch: 8}
)",
                                                                            "s.yaml"));
  const Prediction first = simulate(scenario);
  const Prediction again = simulate_again(read_result(to_json(first.result).dump(), "r.json"));
  EXPECT_EQ(to_json(again.result, false).dump(), to_json(first.result, false).dump());
  ASSERT_NE(again.lowering, nullptr);
  ASSERT_FALSE(first.run.spans.empty());
  ASSERT_EQ(again.run.spans.size(), first.run.spans.size());
  for (size_t i = 0; i < first.run.spans.size(); ++i) {
    EXPECT_EQ(again.run.spans[i].start, first.run.spans[i].start);
    EXPECT_EQ(again.run.spans[i].end, first.run.spans[i].end);
  }
}

TEST(SimulateAgain, RefusesAResultItsScenarioNoLongerGives) {
  const auto scenario =
      std::make_shared<const Scenario>(load_scenario_file("scenarios/gpt-1.7b-1xa100.yaml"));
  Result changed = simulate(scenario).result;
  changed.iteration_time = changed.iteration_time * 2.0;
  try {
    simulate_again(changed);
    ADD_FAILURE() << "a result its scenario does not give was simulated again";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the catalogs or files it names have changed since"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace paceline
