#include "calibrate/internal/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace paceline::calibrate::internal {

void check_cuda(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  throw BenchError(std::string(what) + ": " + cudaGetErrorString(status) + " (" +
                   cudaGetErrorName(status) + ")");
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (value == std::floor(value)) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", value, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g %s", value, kUnits[unit]);
  }
  return buf;
}

DeviceBuffer::DeviceBuffer(size_t bytes) { ensure(bytes); }

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceBuffer::ensure(size_t bytes) {
  if (bytes <= size_) return;
  release();
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes),
             "cudaMalloc(" + format_bytes(static_cast<int64_t>(bytes)) + ")");
  data_ = static_cast<char*>(p);
  size_ = bytes;
}

void DeviceBuffer::release() {
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

void PinnedBuffer::ensure(size_t bytes) {
  if (bytes <= size_) return;
  if (data_ != nullptr) cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
  void* p = nullptr;
  check_cuda(cudaHostAlloc(&p, bytes, cudaHostAllocDefault),
             "cudaHostAlloc(" + format_bytes(static_cast<int64_t>(bytes)) + ")");
  data_ = static_cast<char*>(p);
  size_ = bytes;
}

Stream::Stream() {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

int rotation_sets(int64_t set_bytes, int64_t rotation_bytes) {
  if (set_bytes <= 0) return 1;
  if (set_bytes >= 2 * rotation_bytes) return 1;
  int64_t sets = (rotation_bytes + set_bytes - 1) / set_bytes + 1;
  return static_cast<int>(std::max<int64_t>(2, sets));
}

YamlNode measured_row(YamlNode identity, const Measurement& m) {
  identity.set("time_s", YamlNode::real(m.summary.median));
  identity.set("spread", YamlNode::real(m.summary.spread));
  identity.set("kernels", YamlNode::integer(m.kernels_per_call));
  identity.set("kernel", YamlNode::string(m.kernel));
  return identity;
}

YamlNode failed_row(YamlNode identity, std::string_view error) {
  identity.set("time_s", YamlNode::null());
  identity.set("error", YamlNode::string(error));
  return identity;
}

void log_point(const BenchContext& ctx, std::string_view family, const YamlNode& row) {
  if (!ctx.verbose || ctx.log == nullptr) return;
  std::string line = "  " + std::string(family) + " ";
  for (const auto& [key, value] : row.entries) {
    if (key == "kernel") continue;
    line += key + "=" + value.text + " ";
  }
  *ctx.log << line << "\n";
  ctx.log->flush();
}

bool PointRecorder::record(const YamlNode& identity, const std::function<Measurement()>& measure,
                           const std::function<void(YamlNode&, const Measurement&)>& extra) {
  if (sink_.out_of_time()) return false;
  YamlNode row;
  try {
    Measurement m = measure();
    row = measured_row(identity, m);
    if (extra) extra(row, m);
  } catch (const BenchError& e) {
    // Clear a non-sticky error; a sticky one makes every later call fail too.
    cudaGetLastError();
    cudaError_t sticky = cudaDeviceSynchronize();
    if (sticky != cudaSuccess) {
      throw BenchError(std::string(e.what()) + "; the CUDA context is now unusable (" +
                       cudaGetErrorString(sticky) + ")");
    }
    row = failed_row(identity, e.what());
    if (successes_ == 0) {
      if (first_error_.empty()) first_error_ = e.what();
      held_failures_.push_back(row);
      if (static_cast<int>(held_failures_.size()) >= kSystematicFailures) {
        throw BenchError(first_error_);
      }
      return true;
    }
  }
  if (row.find("error") == nullptr) {
    ++successes_;
    for (YamlNode& held : held_failures_) {
      log_point(ctx_, family_, held);
      sink_.add(std::move(held));
    }
    held_failures_.clear();
  }
  log_point(ctx_, family_, row);
  sink_.add(std::move(row));
  return true;
}

void PointRecorder::finish() {
  if (successes_ == 0 && !held_failures_.empty()) throw BenchError(first_error_);
}

}  // namespace paceline::calibrate::internal
