#include "sim/report/chrome_trace.h"

#include <fmt/format.h>

#include "base/json.h"
#include "sim/timeline/timeline.h"

namespace paceline {
namespace {

double microseconds(SimTime t) { return static_cast<double>(t.picoseconds()) * 1e-6; }

double gib(int64_t bytes) { return Bytes(static_cast<double>(bytes)) / GiB(1); }

}  // namespace

void write_chrome_trace(const Lowering& lowering, const RunResult& run, std::ostream& out) {
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const std::string& event) {
    out << (first ? "\n" : ",\n") << event;
    first = false;
  };
  for (size_t rank = 0; rank < lowering.ranks.size(); ++rank) {
    if (!lowering.ranks[rank].record_spans) continue;
    const StageProgram& stage = *lowering.stages[lowering.rank_stage[rank]];
    emit(fmt::format(R"({{"ph":"M","pid":{},"name":"process_name","args":{{"name":{}}}}})", rank,
                     json_quote(fmt::format("stage {} (rank {})", stage.stage, lowering.rank_global[rank]))));
    emit(fmt::format(R"({{"ph":"M","pid":{},"name":"process_sort_index","args":{{"sort_index":{}}}}})", rank, rank));
    for (StreamId s = 0; s < stage.program.num_streams(); ++s) {
      emit(fmt::format(R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":{}}}}})", rank, s,
                       json_quote(stage.program.stream_name(s))));
    }
  }
  for (const TaskSpan& span : run.spans) {
    const StageProgram& stage = *lowering.stages[lowering.rank_stage[span.rank]];
    const TaskLabel& label = stage.labels[stage.program.task(span.task).label];
    const StreamId stream = stage.program.task(span.task).stream;
    const std::string where = block_name(label.block);
    const std::string microbatch = label.microbatch >= 0 ? fmt::format(",\"microbatch\":{}", label.microbatch) : "";
    if (label.plan == kNoId) {
      emit(fmt::format(R"({{"ph":"X","pid":{},"tid":{},"ts":{},"dur":{},"name":{},"args":{{"block":{}{}}}}})",
                       span.rank, stream, microseconds(span.start), microseconds(span.end - span.start),
                       json_quote(stage.lone_name(label)), json_quote(where), microbatch));
      continue;
    }
    // A fused task: its kernels back to back from its start.
    const TaskPlan& plan = *stage.plans[label.plan];
    const TaskTemplate& t = plan.tasks[label.task];
    SimTime at = span.start;
    for (uint32_t i = t.first_op; i < t.first_op + t.num_ops; ++i) {
      const SimTime length = to_sim_time(plan.ops[i].duration);
      emit(fmt::format(R"({{"ph":"X","pid":{},"tid":{},"ts":{},"dur":{},"name":{},"args":{{"block":{},"pass":{}{}}}}})",
                       span.rank, stream, microseconds(at), microseconds(length), json_quote(plan.ops[i].name),
                       json_quote(where), json_quote(to_string(plan.ops[i].phase)), microbatch));
      at = at + length;
    }
  }
  // Memory as a counter track per rank (memory_per_instant). Frees at the peak's own instant
  // may keep the peak off the track, so an instant event marks it where the result places it.
  for (const MemorySample& m : memory_per_instant(run, lowering.ranks.size())) {
    emit(fmt::format(R"({{"ph":"C","pid":{},"ts":{},"name":"memory","args":{{"GiB":{}}}}})", m.rank,
                     microseconds(m.time), gib(m.bytes)));
  }
  for (size_t rank = 0; rank < lowering.ranks.size(); ++rank) {
    if (!lowering.ranks[rank].record_spans) continue;
    const RankOutcome& outcome = run.ranks[rank];
    emit(fmt::format(
        R"({{"ph":"i","s":"p","pid":{},"ts":{},"name":"memory peak","args":{{"GiB":{}}}}})", rank,
        microseconds(outcome.peak_memory_time), gib(outcome.peak_memory_bytes)));
  }
  out << "\n]}\n";
}

}  // namespace paceline
