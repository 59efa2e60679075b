// Tests SimulateOptions::stop (sim/simulator/simulator.h): another thread stops a run, which
// otherwise gives the same result as without the flag.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// GPT-3 175B on 1,024 A100s with every rank simulated: seconds of engine work.
std::shared_ptr<const Scenario> long_run() {
  return std::make_shared<const Scenario>(load_scenario_text(R"(model: gpt3-175b
cluster: {gpu: a100-sxm4-80gb, nodes: 128, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 200 Gb/s}}
parallelism: {tp: 8, pp: 16}
training: {global_batch: 1536}
simulation: {fidelity: full, fold_symmetric_peers: false}
)", "s.yaml"));
}

TEST(Stop, AFlagSetByAnotherThreadStopsTheRun) {
  std::atomic<bool> stop{false};
  std::jthread interrupt([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  EXPECT_THROW(simulate(long_run(), {.stop = &stop}), SimulationStopped);
}

TEST(Stop, AFlagAlreadySetStopsBeforeTheRunAndOneNeverSetChangesNothing) {
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {tp: 2, pp: 2}
training: {global_batch: 16}
)", "s.yaml"));
  std::atomic<bool> stop{true};
  EXPECT_THROW(simulate(scenario, {.stop = &stop}), SimulationStopped);
  stop = false;
  EXPECT_EQ(to_json(simulate(scenario, {.stop = &stop}).result, false).dump(),
            to_json(simulate(scenario).result, false).dump());
}

}  // namespace
}  // namespace paceline
