// Determinism of whole predictions: a scenario simulated twice in one process, and many
// simulations on threads at once, give bit-identical results (the JSON result without its
// wall time, byte for byte); events at the same picosecond complete in the documented order
// (sim/engine/event_queue.h: time, then insertion sequence).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sim/engine/engine.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// The ready scenarios, and those whose full fidelity is cheap (at most 200,000 engine tasks:
// mixtral-8x7b-64xh100) in full fidelity too — the suite also runs under the sanitizers.
std::vector<std::shared_ptr<const Scenario>> ready_scenarios() {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator("scenarios")) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::shared_ptr<const Scenario>> scenarios;
  for (const std::string& path : paths) {
    Scenario scenario = load_scenario_file(path);
    scenarios.push_back(std::make_shared<const Scenario>(scenario));
    scenario.simulation.fidelity = Fidelity::kFull;
    if (scenario.num_gpus() > 1 && estimate_cost(scenario).task_completions <= 200'000) {
      scenarios.push_back(std::make_shared<const Scenario>(std::move(scenario)));
    }
  }
  return scenarios;
}

std::string result_json(const std::shared_ptr<const Scenario>& scenario) {
  return to_json(simulate(scenario).result, /*include_wall_time=*/false).dump(2);
}

TEST(Determinism, TwiceInOneProcessIsBitIdentical) {
  for (const auto& scenario : ready_scenarios()) {
    SCOPED_TRACE(fmt::format("{} ({})", scenario->name, to_string(scenario->simulation.fidelity)));
    const Prediction first = simulate(scenario);
    const Prediction second = simulate(scenario);
    EXPECT_EQ(to_json(first.result, false).dump(2), to_json(second.result, false).dump(2));
    // The engine's own record too: every rank's finish and peak, every recorded span.
    EXPECT_EQ(first.run.end, second.run.end);
    EXPECT_EQ(first.run.events, second.run.events);
    ASSERT_EQ(first.run.spans.size(), second.run.spans.size());
    for (size_t i = 0; i < first.run.spans.size(); ++i) {
      const TaskSpan& a = first.run.spans[i];
      const TaskSpan& b = second.run.spans[i];
      ASSERT_TRUE(a.rank == b.rank && a.task == b.task && a.start == b.start && a.end == b.end) << "span " << i;
    }
  }
}

TEST(Determinism, ThreadsAgreeWithASerialRun) {
  const std::vector<std::shared_ptr<const Scenario>> scenarios = ready_scenarios();
  std::vector<std::string> serial;
  for (const auto& scenario : scenarios) serial.push_back(result_json(scenario));
  // Four threads run every scenario at once, each starting at a different one, so the same
  // scenario runs on several threads at the same time.
  constexpr int kThreads = 4;
  std::vector<std::vector<std::string>> parallel(kThreads, std::vector<std::string>(scenarios.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < scenarios.size(); ++i) {
        const size_t index = (i + static_cast<size_t>(t)) % scenarios.size();
        parallel[t][index] = result_json(scenarios[index]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < scenarios.size(); ++i) {
      EXPECT_EQ(parallel[t][i], serial[i]) << "thread " << t << ", " << scenarios[i]->name;
    }
  }
}

// One rank, one stream per task, every task `duration` long: they all finish at once.
RankSetup simultaneous_tasks(int tasks, SimTime duration) {
  ProgramBuilder builder;
  for (int i = 0; i < tasks; ++i) {
    const StreamId stream = builder.add_stream(fmt::format("s{}", i));
    builder.add_task(Task{.stream = stream, .duration = duration});
  }
  RankSetup setup;
  setup.program = std::make_shared<const Program>(std::move(builder).build());
  setup.record_spans = true;
  return setup;
}

TEST(Determinism, TiesCompleteInInsertionOrder) {
  // Three ranks of five tasks each, all ending at 7 ps. Ranks are started in rank order and a
  // rank's streams in stream order, so the completions, tied in time, come out in that order.
  std::vector<RankSetup> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(simultaneous_tasks(5, SimTime::from_picoseconds(7)));
  const RunResult run = Engine(ranks).run();
  ASSERT_EQ(run.spans.size(), 15u);
  for (size_t i = 0; i < run.spans.size(); ++i) {
    EXPECT_EQ(run.spans[i].rank, i / 5);
    EXPECT_EQ(run.spans[i].task, i % 5);
    EXPECT_EQ(run.spans[i].end, SimTime::from_picoseconds(7));
  }
}

TEST(Determinism, DependentsStartInDeclarationOrder) {
  // A root task readies four dependents at once on four streams; equal durations make their
  // completions tie, and they complete in the order the dependencies were declared (3, 1, 4, 2).
  ProgramBuilder builder;
  const StreamId root_stream = builder.add_stream("root");
  const TaskId root = builder.add_task(Task{.stream = root_stream, .duration = SimTime::from_picoseconds(5)});
  std::vector<TaskId> dependents;
  for (int i = 0; i < 4; ++i) {
    const StreamId stream = builder.add_stream(fmt::format("s{}", i));
    dependents.push_back(builder.add_task(Task{.stream = stream, .duration = SimTime::from_picoseconds(3)}));
  }
  for (const int i : {2, 0, 3, 1}) builder.add_dependency(root, dependents[i]);
  RankSetup setup;
  setup.program = std::make_shared<const Program>(std::move(builder).build());
  setup.record_spans = true;
  const RunResult run = Engine({setup}).run();
  std::vector<TaskId> order;
  for (const TaskSpan& span : run.spans) order.push_back(span.task);
  EXPECT_EQ(order, (std::vector<TaskId>{root, dependents[2], dependents[0], dependents[3], dependents[1]}));
}

}  // namespace
}  // namespace paceline
