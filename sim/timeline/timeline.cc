#include "sim/timeline/timeline.h"

#include <map>
#include <optional>

#include "sim/parallel/task_plan.h"

namespace paceline {
namespace {

// Interns strings into a table, in order of first appearance.
class Interner {
 public:
  explicit Interner(std::vector<std::string>& table) : table_(table) {}
  int32_t operator()(const std::string& text) {
    const auto [it, added] = index_.emplace(text, static_cast<int32_t>(table_.size()));
    if (added) table_.push_back(text);
    return it->second;
  }

 private:
  std::vector<std::string>& table_;
  std::map<std::string, int32_t, std::less<>> index_;
};

}  // namespace

Timeline make_timeline(const Lowering& lowering, const RunResult& run, bool kernels) {
  Timeline t;
  Interner streams(t.stream_names);
  Interner names(t.names);
  Interner activities(t.activity_names);
  auto add = [&](const TaskSpan& span, int stage, int32_t stream, SimTime start, SimTime end,
                 int32_t name, int32_t activity, int32_t microbatch) {
    t.rank.push_back(lowering.rank_global[span.rank]);
    t.stage.push_back(stage);
    t.stream.push_back(stream);
    t.start_s.push_back(to_seconds(start) / Seconds(1));
    t.end_s.push_back(to_seconds(end) / Seconds(1));
    t.name.push_back(name);
    t.activity.push_back(activity);
    t.microbatch.push_back(microbatch);
  };
  for (const TaskSpan& span : run.spans) {
    const int stage_index = lowering.rank_stage[span.rank];
    const StageProgram& stage = *lowering.stages[stage_index];
    const Task task = stage.program.task(span.task);
    const TaskLabel& label = stage.labels[task.label];
    const int32_t stream = streams(stage.program.stream_name(task.stream));
    const int32_t activity = activities(std::string(to_string(static_cast<ActivityTag>(task.tag))));
    if (label.plan == kNoId) {
      add(span, stage_index, stream, span.start, span.end, names(stage.lone_name(label)), activity,
          label.microbatch);
      continue;
    }
    const TaskPlan& plan = *stage.plans[label.plan];
    if (!kernels) {
      add(span, stage_index, stream, span.start, span.end, names(plan.name), activity,
          label.microbatch);
      continue;
    }
    // A fused task: its kernels back to back from its start (as the Chrome trace lays them).
    const TaskTemplate& task_template = plan.tasks[label.task];
    SimTime at = span.start;
    for (uint32_t i = task_template.first_op; i < task_template.first_op + task_template.num_ops;
         ++i) {
      const SimTime end = at + to_sim_time(plan.ops[i].duration);
      add(span, stage_index, stream, at, end, names(plan.ops[i].name), activity, label.microbatch);
      at = end;
    }
  }
  return t;
}

std::vector<MemorySample> memory_per_instant(const RunResult& run, size_t ranks) {
  std::vector<MemorySample> samples;
  // The samples of several ranks interleave in order of events: each rank's last sample of an
  // instant is kept when its next instant begins.
  std::vector<std::optional<MemorySample>> pending(ranks);
  for (const MemorySample& m : run.memory) {
    std::optional<MemorySample>& last = pending[m.rank];
    if (last && last->time != m.time) samples.push_back(*last);
    last = m;
  }
  for (const std::optional<MemorySample>& last : pending) {
    if (last) samples.push_back(*last);
  }
  return samples;
}

MemoryTimeline make_memory_timeline(const Lowering& lowering, const RunResult& run) {
  MemoryTimeline t;
  for (const MemorySample& m : memory_per_instant(run, lowering.ranks.size())) {
    t.rank.push_back(lowering.rank_global[m.rank]);
    t.stage.push_back(lowering.rank_stage[m.rank]);
    t.time_s.push_back(to_seconds(m.time) / Seconds(1));
    t.bytes.push_back(m.bytes);
  }
  return t;
}

}  // namespace paceline
