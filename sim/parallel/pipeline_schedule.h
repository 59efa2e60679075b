// Pipeline schedules: the order in which one stage runs the forward and backward passes of
// its micro-batches (and model chunks, when interleaved).
//
//   gpipe             all forwards, then all backwards (Huang et al. 2019)
//   1f1b              p−s−1 warm-up forwards, then one forward / one backward, then the
//                     remaining backwards (PipeDream-Flush; Narayanan et al. 2021)
//   interleaved-1f1b  1f1b over v model chunks per stage, in Megatron-LM's order of virtual
//                     micro-batches (Narayanan et al. SC'21, §2.2.2)
//   zero-bubble       ZB-H1 (Qi et al. 2023, fig. 3): 1f1b with each backward split into an
//                     input-gradient pass B and a weight-gradient pass W. Stage s runs 1f1b's
//                     p−s−1 warm-up forwards, then s forward/B pairs whose W passes it holds
//                     back, then forward, B and the oldest held W; in cool-down a W follows
//                     each B, and the s held back end the step. The chain of B passes back
//                     through the stages then waits on no W: with uniform stages and w ≤ b
//                     the bubble is (p−1)(f+b−w) against 1f1b's (p−1)(f+b+w), at 1f1b's
//                     micro-batches in flight plus s held W passes.
//
// Paired (1f1b and interleaved-1f1b, for expert-parallel communication overlap): one more warm-up
// forward, so that each steady-state forward and the backward after it belong to different
// micro-batches and can run interleaved (Megatron-Core's combined 1F1B).
#ifndef PACELINE_SIM_PARALLEL_PIPELINE_SCHEDULE_H_
#define PACELINE_SIM_PARALLEL_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "sim/scenario/scenario.h"

namespace paceline {

struct PipelineAction {
  enum class Kind { kForward, kBackward, kBackwardInput, kBackwardWeight };
  Kind kind;
  int microbatch;
  int chunk;  // model chunk on this stage (0 unless interleaved)
  bool paired = false;  // a forward run interleaved with the backward that follows it

  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

// The actions of `stage` (0-based) of `stages`, for `microbatches` micro-batches and
// `chunks` model chunks per stage; `paired` pairs steady-state forwards with backwards.
std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stages, int stage, int microbatches,
                                              int chunks, bool paired);

}  // namespace paceline

#endif  // PACELINE_SIM_PARALLEL_PIPELINE_SCHEDULE_H_
