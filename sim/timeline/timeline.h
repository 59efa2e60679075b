// Timeline: what the recorded ranks of one simulated step did and when — one row per task (or
// per kernel) with its rank, stream, start, end and name — as compact columns, for plots and
// for Python (paceline.Result.timeline()); and MemoryTimeline, their memory over the step
// (paceline.Result.memory_timeline()). The same spans and memory the Chrome trace shows
// (sim/report/chrome_trace.h), without the JSON.
#ifndef PACELINE_SIM_TIMELINE_TIMELINE_H_
#define PACELINE_SIM_TIMELINE_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sim/engine/engine.h"
#include "sim/parallel/lowering.h"

namespace paceline {

struct Timeline {
  // Columns, one entry per span, in the order the spans ended.
  std::vector<int32_t> rank;    // global rank
  std::vector<int32_t> stage;   // pipeline stage
  std::vector<int32_t> stream;  // index into stream_names
  std::vector<double> start_s;  // simulated seconds from the start of the step
  std::vector<double> end_s;
  std::vector<int32_t> name;        // index into names
  std::vector<int32_t> activity;    // index into activity_names
  std::vector<int32_t> microbatch;  // −1 outside micro-batches (step-level work)
  // Tables the index columns point into, in order of first appearance.
  std::vector<std::string> stream_names;  // "compute", "tp", "dp", "pp send next", …
  std::vector<std::string>
      names;  // "layer.forward", "attn.qkv", "dp.gradient_all_reduce bucket 0", …
  std::vector<std::string> activity_names;  // "compute", "recompute", "tp_communication", …

  size_t size() const { return start_s.size(); }
};

// The memory of the ranks that recorded it (LoweringOptions::record_memory), as columns: per
// rank, in order of time, what it holds after each instant at which a task started or ended
// (the first at time zero), of the changes one instant holds the last. A peak undone by frees at
// the same instant is not among the rows: RankOutcome has each rank's peak and when it was first
// reached.
struct MemoryTimeline {
  std::vector<int32_t> rank;   // global rank
  std::vector<int32_t> stage;  // pipeline stage
  std::vector<double> time_s;  // simulated seconds from the start of the step
  std::vector<int64_t> bytes;  // held from then until the rank's next row

  size_t size() const { return time_s.size(); }
};

// The samples `run` holds (RunResult::memory) of its `ranks` simulated ranks, the last of each
// rank's instant only, in order of time per rank: what a rank holds from then on.
std::vector<MemorySample> memory_per_instant(const RunResult& run, size_t ranks);

// The memory of the ranks whose samples `run` holds (RunResult::memory), one row per rank and
// instant (memory_per_instant); empty when the run recorded none.
MemoryTimeline make_memory_timeline(const Lowering& lowering, const RunResult& run);

// The spans of the ranks whose spans were recorded (LoweringOptions::record_spans). With
// `kernels`, a fused task becomes one span per kernel, back to back from the task's start and
// named after the kernel ("attn.qkv"); without, one span per task, named after its plan
// ("layer.forward") or, outside blocks, after the task ("pp.send_activation").
Timeline make_timeline(const Lowering& lowering, const RunResult& run, bool kernels);

}  // namespace paceline

#endif  // PACELINE_SIM_TIMELINE_TIMELINE_H_
