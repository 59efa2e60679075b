// Call timers: CUPTI activity records (the method), CUDA events (the fallback).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "calibrate/internal/bench.h"
#include "calibrate/internal/libraries.h"

namespace paceline::calibrate::internal {

#if PACELINE_HAVE_CUPTI
// make_cupti_timer enables CUPTI activity tracing of kernels, memcpys and memsets and returns a
// timer that reads every call's GPU activities from their records: a call's activities are the
// records that start between the host timestamps taken before its launch and after its
// synchronization (CUPTI normalizes record timestamps to cuptiGetTimestamp's clock). nullptr
// with `error` when CUPTI cannot trace. Only one may exist at a time: CUPTI's buffer callbacks
// are process-wide and carry no user pointer.
std::unique_ptr<CallTimer> make_cupti_timer(const CuptiApi& api, std::string* error);
#endif

// make_event_timer returns the fallback timer: CUDA events recorded around each call on its
// first stream (GPU timestamps, but including launch gaps between a call's kernels).
std::unique_ptr<CallTimer> make_event_timer();

// Activity is one GPU activity (a kernel, a copy or a memset) with its GPU start and end in
// nanoseconds on CUPTI's clock.
struct Activity {
  uint64_t start = 0;
  uint64_t end = 0;
  std::string name;
};

// CallWindow is one call's host-side window: CUPTI timestamps taken before its launch and after
// its streams were synchronized.
struct CallWindow {
  uint64_t begin = 0;
  uint64_t end = 0;
};

// attribute_activities gives each activity to the call whose window its start falls in (windows
// widened to the midpoints of the gaps between calls, and by 20 µs at the ends, against a small
// GPU/host clock offset) and turns the calls after the first `warmup` into a Measurement. Throws
// BenchError when a timed call has no activity.
Measurement attribute_activities(const std::vector<CallWindow>& windows,
                                 std::vector<Activity> activities, int warmup, Aggregate aggregate,
                                 std::string_view timer_name);

// shorten_kernel_name demangles a kernel name and drops its parameter list and template
// arguments beyond `max_length` characters.
std::string shorten_kernel_name(const std::string& name, size_t max_length = 120);

}  // namespace paceline::calibrate::internal
