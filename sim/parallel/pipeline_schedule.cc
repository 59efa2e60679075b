#include "sim/parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "base/check.h"

namespace paceline {
namespace {

using Kind = PipelineAction::Kind;

std::vector<PipelineAction> gpipe(int microbatches) {
  std::vector<PipelineAction> actions;
  for (int mb = 0; mb < microbatches; ++mb) actions.push_back({Kind::kForward, mb, 0});
  for (int mb = 0; mb < microbatches; ++mb) actions.push_back({Kind::kBackward, mb, 0});
  return actions;
}

std::vector<PipelineAction> one_f_one_b(int stages, int stage, int microbatches, bool paired) {
  std::vector<PipelineAction> actions;
  const int warmup = std::min(stages - stage - 1 + (paired ? 1 : 0), microbatches);
  int forward = 0;
  int backward = 0;
  for (; forward < warmup; ++forward) actions.push_back({Kind::kForward, forward, 0});
  while (forward < microbatches) {
    actions.push_back({Kind::kForward, forward++, 0, paired});
    actions.push_back({Kind::kBackward, backward++, 0});
  }
  while (backward < microbatches) actions.push_back({Kind::kBackward, backward++, 0});
  return actions;
}

// Megatron-LM's interleaved schedule: virtual micro-batch k of a stage is micro-batch
// (k / (p·v))·p + k mod p on chunk (k / p) mod v for forwards, and on chunk v−1−((k / p) mod v)
// for backwards. Warm-up runs (p−s−1)·2 + (v−1)·p forwards.
std::vector<PipelineAction> interleaved(int stages, int stage, int microbatches, int chunks, bool paired) {
  const int total = microbatches * chunks;
  auto microbatch_of = [&](int k) { return (k / (stages * chunks)) * stages + k % stages; };
  auto forward_chunk = [&](int k) { return (k / stages) % chunks; };
  auto backward_chunk = [&](int k) { return chunks - 1 - (k / stages) % chunks; };
  const int warmup = std::min((stages - stage - 1) * 2 + (chunks - 1) * stages + (paired ? 1 : 0), total);
  std::vector<PipelineAction> actions;
  int forward = 0;
  int backward = 0;
  for (; forward < warmup; ++forward) {
    actions.push_back({Kind::kForward, microbatch_of(forward), forward_chunk(forward)});
  }
  while (forward < total) {
    actions.push_back({Kind::kForward, microbatch_of(forward), forward_chunk(forward), paired});
    ++forward;
    actions.push_back({Kind::kBackward, microbatch_of(backward), backward_chunk(backward)});
    ++backward;
  }
  for (; backward < total; ++backward) {
    actions.push_back({Kind::kBackward, microbatch_of(backward), backward_chunk(backward)});
  }
  return actions;
}

std::vector<PipelineAction> zero_bubble_h1(int stages, int stage, int microbatches) {
  std::vector<PipelineAction> actions;
  std::deque<int> deferred;  // micro-batches whose W pass is still to run
  int forward = 0;
  int backward = 0;
  auto forward_pass = [&] { actions.push_back({Kind::kForward, forward++, 0}); };
  auto backward_input = [&] {
    actions.push_back({Kind::kBackwardInput, backward, 0});
    deferred.push_back(backward++);
  };
  auto oldest_weight = [&] {
    actions.push_back({Kind::kBackwardWeight, deferred.front(), 0});
    deferred.pop_front();
  };
  const int warmup = std::min(stages - stage - 1, microbatches);
  while (forward < warmup) forward_pass();
  // Stage s holds back the W passes of its first s backwards, so that its B passes, which the
  // stages before it wait for, do not wait behind them.
  const int held_back = std::min(stage, microbatches - warmup);
  for (int i = 0; i < held_back; ++i) {
    forward_pass();
    backward_input();
  }
  while (forward < microbatches) {
    forward_pass();
    backward_input();
    oldest_weight();
  }
  // Cool-down: a W pass after each B, run while the next B's gradient is on its way; the held
  // back ones fill the end, where 1f1b would leave the stage idle.
  while (backward < microbatches) {
    backward_input();
    oldest_weight();
  }
  while (!deferred.empty()) oldest_weight();
  return actions;
}

}  // namespace

std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stages, int stage, int microbatches,
                                              int chunks, bool paired) {
  PACELINE_CHECK(stages >= 1 && stage >= 0 && stage < stages && microbatches >= 1 && chunks >= 1);
  PACELINE_CHECK(!paired || schedule == Schedule::kOneFOneB || schedule == Schedule::kInterleavedOneFOneB,
                 "only 1f1b schedules pair forwards with backwards");
  switch (schedule) {
    case Schedule::kGpipe: return gpipe(microbatches);
    case Schedule::kOneFOneB: return one_f_one_b(stages, stage, microbatches, paired);
    case Schedule::kInterleavedOneFOneB: return interleaved(stages, stage, microbatches, chunks, paired);
    case Schedule::kZeroBubble: return zero_bubble_h1(stages, stage, microbatches);
  }
  return {};
}

}  // namespace paceline
