#include "calibrate/internal/timer.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace paceline::calibrate::internal {
namespace {

#if PACELINE_HAVE_CUPTI

std::string memcpy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "memcpy PtoP";
    default:
      return "memcpy";
  }
}

class CuptiTimer;

// CUPTI's buffer callbacks are plain functions without a user pointer; the one live timer is
// reachable through this pointer, set while it exists (see make_cupti_timer).
CuptiTimer* g_active_timer = nullptr;

constexpr size_t kBufferBytes = 8 << 20;  // CUPTI's recommended size is 1–10 MiB
constexpr size_t kRecordAlignment = 8;    // ACTIVITY_RECORD_ALIGNMENT in the CUPTI samples

class CuptiTimer final : public CallTimer {
 public:
  explicit CuptiTimer(const CuptiApi& api) : api_(api) {}

  ~CuptiTimer() override {
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                        CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2,
                                        CUPTI_ACTIVITY_KIND_MEMSET};
    for (CUpti_ActivityKind kind : kinds) api_.cuptiActivityDisable(kind);
    api_.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    g_active_timer = nullptr;
  }

  // start registers the buffer callbacks and enables the activity kinds.
  bool start(std::string* error) {
    g_active_timer = this;
    CUptiResult r = api_.cuptiActivityRegisterCallbacks(&CuptiTimer::buffer_requested,
                                                        &CuptiTimer::buffer_completed);
    if (r != CUPTI_SUCCESS) {
      *error = "cuptiActivityRegisterCallbacks: " + api_.describe(r);
      return false;
    }
    // CONCURRENT_KERNEL, unlike KERNEL, does not serialize kernels.
    const std::pair<CUpti_ActivityKind, const char*> kinds[] = {
        {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
        {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
        {CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2"},
        {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"}};
    for (const auto& [kind, name] : kinds) {
      r = api_.cuptiActivityEnable(kind);
      if (r != CUPTI_SUCCESS) {
        *error = std::string("cuptiActivityEnable(") + name + "): " + api_.describe(r);
        return false;
      }
    }
    return true;
  }

  std::string description() const override {
    uint32_t version = 0;
    api_.cuptiGetVersion(&version);
    return "CUPTI activity records (CONCURRENT_KERNEL, MEMCPY, MEMSET), CUPTI API " +
           std::to_string(version) + ", " + api_.library->path();
  }

  Measurement time(int warmup, int repetitions, const std::function<void(int)>& launch,
                   const std::vector<cudaStream_t>& streams, Aggregate aggregate) override {
    // Drop whatever earlier work left in the buffers.
    take_activities();
    std::vector<CallWindow> windows;
    const int calls = warmup + repetitions;
    for (int i = 0; i < calls; ++i) {
      CallWindow w;
      w.begin = now();
      launch(i);
      for (cudaStream_t s : streams) check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      w.end = now();
      windows.push_back(w);
    }
    std::vector<Activity> activities = take_activities();
    if (uint64_t dropped = dropped_.exchange(0); dropped > 0) {
      throw BenchError("CUPTI dropped " + std::to_string(dropped) + " activity records");
    }
    return attribute_activities(windows, std::move(activities), warmup, aggregate, "CUPTI");
  }

 private:
  uint64_t now() const {
    uint64_t t = 0;
    CUptiResult r = api_.cuptiGetTimestamp(&t);
    if (r != CUPTI_SUCCESS) throw BenchError("cuptiGetTimestamp: " + api_.describe(r));
    return t;
  }

  std::vector<Activity> take_activities() {
    CUptiResult r = api_.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) throw BenchError("cuptiActivityFlushAll: " + api_.describe(r));
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(activities_, {});
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, kBufferBytes));
    *size = *buffer != nullptr ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
  }

  static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                        size_t /*size*/, size_t valid_size) {
    if (g_active_timer != nullptr && buffer != nullptr) {
      g_active_timer->parse(context, stream_id, buffer, valid_size);
    }
    std::free(buffer);
  }

  void parse(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t valid_size) {
    std::vector<Activity> parsed;
    CUpti_Activity* record = nullptr;
    while (api_.cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
      Activity a;
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          a.start = k->start;
          a.end = k->end;
          a.name = shorten_kernel_name(k->name != nullptr ? k->name : "kernel");
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          a.start = c->start;
          a.end = c->end;
          a.name = memcpy_name(c->copyKind);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY2: {
          const auto* c = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
          a.start = c->start;
          a.end = c->end;
          a.name = "memcpy PtoP";
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* s = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          a.start = s->start;
          a.end = s->end;
          a.name = "memset";
          break;
        }
        default:
          continue;
      }
      if (a.end >= a.start && a.start != 0) parsed.push_back(std::move(a));
    }
    size_t dropped = 0;
    api_.cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped);
    std::lock_guard<std::mutex> lock(mutex_);
    dropped_ += dropped;
    for (Activity& a : parsed) activities_.push_back(std::move(a));
  }

  const CuptiApi& api_;
  std::mutex mutex_;
  std::vector<Activity> activities_;
  // Written from CUPTI's worker thread when it completes a full buffer.
  std::atomic<uint64_t> dropped_{0};
};

#endif  // PACELINE_HAVE_CUPTI

class EventTimer final : public CallTimer {
 public:
  std::string description() const override {
    return "CUDA events from a call's start on its first stream to its end on the last of its "
           "streams (CUPTI unavailable)";
  }

  Measurement time(int warmup, int repetitions, const std::function<void(int)>& launch,
                   const std::vector<cudaStream_t>& streams, Aggregate /*aggregate*/) override {
    // An event is recorded only on a stream of the device it was made on: a collective's streams
    // are one per rank, each on its own device, whatever device is current.
    std::vector<int> devices(streams.size());
    for (size_t r = 0; r < streams.size(); ++r)
      check_cuda(cudaStreamGetDevice(streams[r], &devices[r]), "cudaStreamGetDevice");
    int current = 0;
    check_cuda(cudaGetDevice(&current), "cudaGetDevice");
    // begin and end on the first stream; each other stream's end only orders the first's.
    cudaEvent_t begin = nullptr, end = nullptr;
    std::vector<cudaEvent_t> rank_ends(streams.size(), nullptr);
    std::vector<double> seconds;
    std::string error;
    try {
      check_cuda(cudaSetDevice(devices[0]), "cudaSetDevice");
      check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
      check_cuda(cudaEventCreate(&end), "cudaEventCreate");
      for (size_t r = 1; r < streams.size(); ++r) {
        check_cuda(cudaSetDevice(devices[r]), "cudaSetDevice");
        check_cuda(cudaEventCreateWithFlags(&rank_ends[r], cudaEventDisableTiming),
                   "cudaEventCreate");
      }
      for (int i = 0; i < warmup + repetitions; ++i) {
        // Every stream starts after begin, so begin is at or before the first start.
        check_cuda(cudaSetDevice(devices[0]), "cudaSetDevice");
        check_cuda(cudaEventRecord(begin, streams.front()), "cudaEventRecord");
        for (size_t r = 1; r < streams.size(); ++r)
          check_cuda(cudaStreamWaitEvent(streams[r], begin, 0), "cudaStreamWaitEvent");
        check_cuda(cudaSetDevice(current), "cudaSetDevice");
        launch(i);
        // The first stream waits for every other stream's end, so end is after the last end.
        for (size_t r = 1; r < streams.size(); ++r) {
          check_cuda(cudaSetDevice(devices[r]), "cudaSetDevice");
          check_cuda(cudaEventRecord(rank_ends[r], streams[r]), "cudaEventRecord");
          check_cuda(cudaStreamWaitEvent(streams.front(), rank_ends[r], 0), "cudaStreamWaitEvent");
        }
        check_cuda(cudaSetDevice(devices[0]), "cudaSetDevice");
        check_cuda(cudaEventRecord(end, streams.front()), "cudaEventRecord");
        for (cudaStream_t s : streams)
          check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        float ms = 0;
        check_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
        if (i >= warmup) seconds.push_back(static_cast<double>(ms) * 1e-3);  // ms → s
      }
    } catch (const BenchError& e) {
      error = e.what();
    }
    if (begin != nullptr) cudaEventDestroy(begin);
    if (end != nullptr) cudaEventDestroy(end);
    for (cudaEvent_t e : rank_ends) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    cudaSetDevice(current);
    if (!error.empty()) throw BenchError(error);
    Measurement m;
    m.summary = summarize(seconds);
    m.kernels_per_call = 0;  // events cannot count a call's kernels
    m.kernel = "(unknown: CUDA event timing)";
    return m;
  }
};

}  // namespace

#if PACELINE_HAVE_CUPTI
std::unique_ptr<CallTimer> make_cupti_timer(const CuptiApi& api, std::string* error) {
  if (g_active_timer != nullptr) {
    *error = "a CUPTI timer already exists";
    return nullptr;
  }
  auto timer = std::make_unique<CuptiTimer>(api);
  if (!timer->start(error)) return nullptr;
  return timer;
}
#endif

std::unique_ptr<CallTimer> make_event_timer() { return std::make_unique<EventTimer>(); }

Measurement attribute_activities(const std::vector<CallWindow>& windows,
                                 std::vector<Activity> activities, int warmup, Aggregate aggregate,
                                 std::string_view timer_name) {
  if (windows.empty()) throw BenchError(std::string(timer_name) + ": no calls");
  // Windows are widened to the midpoints of the gaps between them (and by kSlackNs at the
  // ends), so that a small offset between the GPU and host clocks cannot move an activity out
  // of its call.
  constexpr uint64_t kSlackNs = 20000;  // 20 µs
  std::vector<uint64_t> bounds;         // bounds[i]: where call i's widened window starts
  for (size_t i = 0; i < windows.size(); ++i) {
    bounds.push_back(i == 0 ? windows[0].begin - std::min<uint64_t>(kSlackNs, windows[0].begin)
                            : windows[i - 1].end + (windows[i].begin - windows[i - 1].end) / 2);
  }
  const uint64_t last_end = windows.back().end + kSlackNs;
  const size_t calls = windows.size();
  std::vector<double> sum_ns(calls, 0);
  std::vector<uint64_t> first(calls, UINT64_MAX), last(calls, 0);
  std::vector<int> count(calls, 0);
  std::map<std::string, double> time_by_name;
  for (const Activity& a : activities) {
    if (a.start > last_end) continue;
    auto it = std::upper_bound(bounds.begin(), bounds.end(), a.start);
    if (it == bounds.begin()) continue;
    const size_t w = static_cast<size_t>(it - bounds.begin()) - 1;
    const double ns = static_cast<double>(a.end - a.start);
    sum_ns[w] += ns;
    first[w] = std::min(first[w], a.start);
    last[w] = std::max(last[w], a.end);
    ++count[w];
    if (static_cast<int>(w) >= warmup) time_by_name[a.name] += ns;
  }
  Measurement m;
  std::vector<double> seconds;
  for (size_t w = static_cast<size_t>(warmup); w < calls; ++w) {
    if (count[w] == 0) {
      throw BenchError(std::string(timer_name) + " recorded no GPU activity for timed call " +
                       std::to_string(w - warmup + 1) + " of " + std::to_string(calls - warmup));
    }
    const double ns = aggregate == Aggregate::kSumOfDurations
                          ? sum_ns[w]
                          : static_cast<double>(last[w] - first[w]);
    seconds.push_back(ns * 1e-9);  // CUPTI timestamps are nanoseconds
  }
  m.summary = summarize(seconds);
  m.kernels_per_call = count[static_cast<size_t>(warmup)];
  double best = -1;
  for (const auto& [name, t] : time_by_name) {
    if (t > best) {
      best = t;
      m.kernel = name;
    }
  }
  return m;
}

std::string shorten_kernel_name(const std::string& name, size_t max_length) {
  std::string out = name;
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status == 0 && demangled != nullptr) out = demangled;
  std::free(demangled);
  // Drop the parameter list: "ns::kernel<...>(float*, int)" → "ns::kernel<...>".
  if (!out.empty() && out.back() == ')') {
    int depth = 0;
    for (size_t i = out.size(); i-- > 0;) {
      if (out[i] == ')') ++depth;
      if (out[i] == '(' && --depth == 0) {
        out.resize(i);
        break;
      }
    }
  }
  if (out.size() > max_length) out = out.substr(0, max_length - 3) + "...";
  return out;
}

}  // namespace paceline::calibrate::internal
