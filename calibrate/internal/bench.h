// What every benchmark family shares: errors, device buffers, the call timer, the row sink.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "calibrate/stats.h"
#include "calibrate/yaml_subset.h"

namespace paceline::calibrate::internal {

// BenchError is a failure of a CUDA, CUPTI or library call, with a one-line message that names
// the call and the library's own description, e.g. "cudaMalloc(1.5 GiB): out of memory".
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// check_cuda throws BenchError("<what>: <CUDA error string>") unless `status` is cudaSuccess.
void check_cuda(cudaError_t status, std::string_view what);

// format_bytes writes a size for people: "64 KiB", "1.5 GiB".
std::string format_bytes(int64_t bytes);

// DeviceBuffer owns device memory on the current device (cudaMalloc / cudaFree).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // ensure grows the buffer to at least `bytes` (contents are not kept).
  void ensure(size_t bytes);
  void release();
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// PinnedBuffer owns page-locked host memory (cudaHostAlloc), as frameworks use for transfers.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void ensure(size_t bytes);
  char* data() const { return data_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// Stream owns a non-blocking CUDA stream on the current device.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Measurement is the timing of one grid point.
struct Measurement {
  // Per-call GPU time in seconds over the timed calls.
  Summary summary;
  // GPU activities (kernels, copies, memsets) of one timed call.
  int kernels_per_call = 0;
  // The activity with the largest total time over the timed calls (demangled, shortened).
  std::string kernel;
};

// How the GPU activities of one call become its time.
enum class Aggregate {
  // Sum of the activities' durations: the GPU time the call occupies (kernels of one stream).
  kSumOfDurations,
  // From the first start to the last end over all devices: the wall time of a collective.
  kSpan,
};

// CallTimer times repeated calls on the GPU.
class CallTimer {
 public:
  virtual ~CallTimer() = default;
  // description is the profile's method.timer text.
  virtual std::string description() const = 0;
  // time runs `warmup + repetitions` calls: call i is `launch(i)`, after which every stream in
  // `streams` is synchronized, so that calls never overlap. Only the last `repetitions` calls
  // count. Throws BenchError.
  virtual Measurement time(int warmup, int repetitions, const std::function<void(int)>& launch,
                           const std::vector<cudaStream_t>& streams, Aggregate aggregate) = 0;
};

// RowSink receives a family's rows as they are measured.
class RowSink {
 public:
  virtual ~RowSink() = default;
  // add records a finished row (it may write the profile to disk).
  virtual void add(YamlNode row) = 0;
  // out_of_time is true when the family's or the run's time budget is spent; families check it
  // before each point and stop.
  virtual bool out_of_time() const = 0;
};

// BenchContext is what a family needs to run: the device, its stream, the timer and settings.
struct BenchContext {
  int device = 0;
  int num_gpus = 1;
  cudaStream_t stream = nullptr;
  CallTimer* timer = nullptr;
  int warmup = 3;
  int repetitions = 10;
  int64_t l2_bytes = 0;
  // A buffer set is reused only after this many bytes of other buffers were touched, so that
  // every timed call reads from DRAM, not from the L2 (3 × the L2 size).
  int64_t rotation_bytes = 0;
  bool verbose = false;
  std::ostream* log = nullptr;
};

// rotation_sets is the number of copies of a call's buffers (`set_bytes` each) to cycle through:
// one when a set alone is at least twice `rotation_bytes` (the L2 keeps nothing useful of it),
// otherwise enough that `rotation_bytes` of other sets are touched between two uses of a set.
int rotation_sets(int64_t set_bytes, int64_t rotation_bytes);

// measured_row appends a measurement to a row identity: time_s (median), spread, kernels, kernel.
YamlNode measured_row(YamlNode identity, const Measurement& m);
// failed_row appends time_s: null and the error to a row identity.
YamlNode failed_row(YamlNode identity, std::string_view error);

// log_point writes one line about a finished point when the context is verbose.
void log_point(const BenchContext& ctx, std::string_view family, const YamlNode& row);

// PointRecorder turns measured points into rows. A point that fails becomes a row with its
// error, unless the family's first three points all fail: that is a systematic failure (a
// missing library feature, a broken setup), not a property of those points, and the whole
// family fails with the first error instead. A sticky CUDA error (the context is unusable)
// always fails the family.
class PointRecorder {
 public:
  PointRecorder(const BenchContext& ctx, std::string family, RowSink& sink)
      : ctx_(ctx), family_(std::move(family)), sink_(sink) {}

  // record measures one point. Returns false when the family is out of time and must stop.
  bool record(const YamlNode& identity, const std::function<Measurement()>& measure,
              const std::function<void(YamlNode&, const Measurement&)>& extra = nullptr);

  // finish flushes held-back failures, or throws the first one when nothing succeeded.
  void finish();

 private:
  static constexpr int kSystematicFailures = 3;
  const BenchContext& ctx_;
  std::string family_;
  RowSink& sink_;
  int successes_ = 0;
  std::vector<YamlNode> held_failures_;
  std::string first_error_;
};

}  // namespace paceline::calibrate::internal
