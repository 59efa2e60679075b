// Tests sim/timeline/timeline.h: the spans of a simulated step as columns, per task and per
// kernel, and its memory, against the run they come from.
#include "sim/timeline/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>

#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// GPT 1.7B on 2 GPUs as 2 pipeline stages: both stages' first (only) ranks are recorded.
Prediction two_stages(const SimulateOptions& options = {}) {
  Scenario s = load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 2}
parallelism: {pp: 2}
training: {global_batch: 4, seq_len: 1024}
)",
                                  "t.yaml");
  return simulate(std::make_shared<const Scenario>(std::move(s)), options);
}

TEST(Timeline, OneRowPerTaskSpan) {
  const Prediction p = two_stages();
  const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
  ASSERT_EQ(t.size(), p.run.spans.size());
  EXPECT_EQ(t.rank.size(), t.size());
  EXPECT_EQ(t.microbatch.size(), t.size());
  double last = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_LE(t.start_s[i], t.end_s[i]);
    last = std::max(last, t.end_s[i]);
  }
  // The last span ends when the step does.
  EXPECT_DOUBLE_EQ(last, p.result.iteration_time / Seconds(1));
  // Both stages, on their compute streams, running the layers' forward plans.
  EXPECT_EQ(std::set<int32_t>(t.stage.begin(), t.stage.end()), (std::set<int32_t>{0, 1}));
  EXPECT_NE(std::find(t.stream_names.begin(), t.stream_names.end(), "compute"),
            t.stream_names.end());
  EXPECT_NE(std::find(t.names.begin(), t.names.end(), "layer.forward"), t.names.end());
  EXPECT_NE(std::find(t.names.begin(), t.names.end(), "pp.send_activation"), t.names.end());
  EXPECT_NE(std::find(t.activity_names.begin(), t.activity_names.end(), "pp_communication"),
            t.activity_names.end());
}

TEST(Timeline, KernelsTileTheirTasks) {
  const Prediction p = two_stages();
  const Timeline tasks = make_timeline(*p.lowering, p.run, /*kernels=*/false);
  const Timeline kernels = make_timeline(*p.lowering, p.run, /*kernels=*/true);
  EXPECT_GT(kernels.size(), tasks.size());
  EXPECT_NE(std::find(kernels.names.begin(), kernels.names.end(), "attn.qkv"), kernels.names.end());
  // A task's duration is the sum of its kernels' (rounded to picoseconds), so the kernels of
  // the first span start where it starts and end where it ends.
  const TaskSpan& first = p.run.spans[0];
  const StageProgram& stage = *p.lowering->stages[p.lowering->rank_stage[first.rank]];
  const TaskLabel& label = stage.labels[stage.program.task(first.task).label];
  const size_t n = label.plan == kNoId ? 1 : stage.plans[label.plan]->tasks[label.task].num_ops;
  ASSERT_GE(kernels.size(), n);
  EXPECT_EQ(kernels.start_s[0], tasks.start_s[0]);
  EXPECT_EQ(kernels.end_s[n - 1], tasks.end_s[0]);
}

TEST(MemoryTimeline, EachRankFromItsStartToItsEndNeverAboveItsPeak) {
  const Prediction p = two_stages({.record_memory = true});
  const MemoryTimeline m = make_memory_timeline(*p.lowering, p.run);
  ASSERT_EQ(m.rank.size(), m.size());
  ASSERT_EQ(m.bytes.size(), m.size());
  for (uint32_t r = 0; r < p.lowering->ranks.size(); ++r) {
    std::vector<size_t> rows;
    for (size_t i = 0; i < m.size(); ++i) {
      if (m.rank[i] == p.lowering->rank_global[r]) rows.push_back(i);
    }
    ASSERT_GT(rows.size(), 100u) << r;
    EXPECT_EQ(m.stage[rows.front()], p.lowering->rank_stage[r]);
    // From the first instant, time zero, one row an instant, to what the step leaves.
    EXPECT_EQ(m.time_s[rows.front()], 0.0);
    EXPECT_LE(m.bytes[rows.front()], p.run.ranks[r].peak_memory_bytes);
    EXPECT_EQ(m.bytes[rows.back()], p.run.ranks[r].final_memory_bytes);
    int64_t highest = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
      if (k > 0) {
        EXPECT_LT(m.time_s[rows[k - 1]], m.time_s[rows[k]]);
      }
      highest = std::max(highest, m.bytes[rows[k]]);
    }
    EXPECT_LE(highest, p.run.ranks[r].peak_memory_bytes);
    EXPECT_GT(static_cast<double>(highest),
              0.9 * static_cast<double>(p.run.ranks[r].peak_memory_bytes));
  }
  // Without record_memory a run keeps none.
  EXPECT_EQ(make_memory_timeline(*p.lowering, two_stages().run).size(), 0u);
}

}  // namespace
}  // namespace paceline
