// Limits only ever stop a run: the engine's wall-clock deadline and event limit abort with
// SimulationLimitError, simulate()'s memory and time limits refuse a scenario up front with
// its estimate, and a run that stays within its limits is bit-identical to one without. The
// CLI's --timeout and --max-memory map these to exit code 2 with a one-line message.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "sim/engine/engine.h"
#include "sim/simulator/simulator.h"
#include "tests/support/run_cli.h"

namespace paceline {
namespace {

// One rank with `tasks` back-to-back tasks of 1 ps on one stream.
std::vector<RankSetup> chain(int tasks) {
  ProgramBuilder builder;
  const StreamId stream = builder.add_stream("compute");
  for (int i = 0; i < tasks; ++i) builder.add_task(Task{.stream = stream, .duration = SimTime::from_picoseconds(1)});
  RankSetup setup;
  setup.program = std::make_shared<const Program>(std::move(builder).build());
  return {setup};
}

TEST(Limits, APassedDeadlineStopsTheEngine) {
  const auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  try {
    Engine(chain(10000), EngineOptions{.deadline = past}).run();
    FAIL() << "expected SimulationDeadlineError";
  } catch (const SimulationDeadlineError& e) {
    // The clock is read every 4096 events, the first time before any.
    EXPECT_EQ(e.events(), 0u);
    EXPECT_NE(std::string(e.what()).find("wall-clock deadline"), std::string::npos);
  }
}

TEST(Limits, AFutureDeadlineChangesNothing) {
  const RunResult free = Engine(chain(10000)).run();
  const auto later = std::chrono::steady_clock::now() + std::chrono::hours(1);
  const RunResult limited = Engine(chain(10000), EngineOptions{.max_events = 20000, .deadline = later}).run();
  EXPECT_EQ(free.end, limited.end);
  EXPECT_EQ(free.events, limited.events);
}

TEST(Limits, ResultsWithinLimitsAreBitIdentical) {
  for (const char* path : {"scenarios/gpt-1.7b-1xa100.yaml", "scenarios/llama3-70b-64xh100.yaml",
                           "scenarios/mixtral-8x7b-64xh100.yaml"}) {
    const auto scenario = std::make_shared<const Scenario>(load_scenario_file(path));
    const std::string free = to_json(simulate(scenario).result, false).dump(2);
    const SimulateOptions limits{.max_events = 100'000'000, .timeout = Seconds(600), .max_memory = GiB(64)};
    EXPECT_EQ(to_json(simulate(scenario, limits).result, false).dump(2), free) << path;
  }
}

TEST(Limits, ScenarioOverTheTimeLimitFailsBeforeLowering) {
  const auto scenario = std::make_shared<const Scenario>(load_scenario_file("scenarios/gpt3-175b-1024xa100.yaml"));
  const CostEstimate cost = estimate_cost(*scenario);
  try {
    // Half the estimated time: refused at once, with the estimate.
    simulate(scenario, SimulateOptions{.timeout = cost.wall_time * 0.5});
    FAIL() << "expected SimulationLimitError";
  } catch (const SimulationLimitError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("the simulation would need " + describe(cost), 0), 0u) << e.what();
  }
}

TEST(Limits, ProvingPeersAlikeStopsAtTheTimeout) {
  // 32,768 GPUs in full fidelity: the fold may leave one rank per stage, so the scenario is let
  // in, but planning and comparing every collective of every rank takes far longer than 50 ms.
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 4096, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}}
parallelism: {tp: 8, pp: 2, zero: 1}
training: {global_batch: 16384, seq_len: 4096}
simulation: {fidelity: full}
)", "wide.yaml"));
  ASSERT_LT(with_simulated_ranks(estimate_cost(*scenario), 2).wall_time, Seconds(0.05));
  const auto started = std::chrono::steady_clock::now();
  try {
    simulate(scenario, SimulateOptions{.timeout = Seconds(0.05)});
    FAIL() << "expected SimulationLimitError";
  } catch (const SimulationLimitError& e) {
    EXPECT_NE(std::string(e.what()).find("ran past its timeout of 0.05 s after 0 events"), std::string::npos)
        << e.what();
  }
  // Stopped near the deadline, not after the whole proof.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

using testing::run_cli;

TEST(Limits, CliRefusesWhatDoesNotFitWithExitCodeTwo) {
  // gpt3-175b-1024xa100 needs about 0.1 GiB and 0.1 s (sim/simulator/cost_estimate.cc).
  testing::CliOutcome o = run_cli("run scenarios/gpt3-175b-1024xa100.yaml --max-memory '1 MiB'");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_EQ(o.output.rfind("paceline: the simulation would need about", 0), 0u) << o.output;
  EXPECT_NE(o.output.find("memory allowed"), std::string::npos) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
  o = run_cli("run scenarios/gpt3-175b-1024xa100.yaml --timeout 1ms");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("s allowed"), std::string::npos) << o.output;
}

TEST(Limits, CliLimitsTakeUnitsAndRejectNonsense) {
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --timeout '5 min' --max-memory '8 GiB'").exit_code, 0);
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --max-memory 0").exit_code, 0);  // 0: no limit
  const testing::CliOutcome bad_unit = run_cli("run scenarios/gpt-1.7b-1xa100.yaml --timeout '5 GB'");
  EXPECT_EQ(bad_unit.exit_code, 2);
  EXPECT_NE(bad_unit.output.find("--timeout: '5 GB' has unit 'GB', which is not a unit of a time"), std::string::npos)
      << bad_unit.output;
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --max-memory -1").exit_code, 2);
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --timeout").exit_code, 2);
}

}  // namespace
}  // namespace paceline
