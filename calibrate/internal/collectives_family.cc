// NCCL collectives over the node's GPUs, driven from one process (ncclCommInitAll), timed and
// reported like nccl-tests: the time of an operation spans from the first kernel start to the
// last kernel end over all ranks; algorithm bandwidth = bytes / time; bus bandwidth = algorithm
// bandwidth × bus_bandwidth_factor (nccl-tests doc/PERFORMANCE.md).
#include <algorithm>
#include <map>

#include "calibrate/internal/families.h"
#include "calibrate/internal/kernels.cuh"

namespace paceline::calibrate::internal {

#if PACELINE_HAVE_NCCL
namespace {

constexpr int64_t kBf16Bytes = 2;

void check_nccl(const NcclApi& api, ncclResult_t result, std::string_view what) {
  if (result != ncclSuccess) throw BenchError(std::string(what) + ": " + api.describe(result));
}

// Communicators, streams and buffers of one group of ranks (devices 0..ranks-1).
class RankGroup {
 public:
  RankGroup(const NcclApi& api, int ranks) : api_(api), ranks_(ranks) {
    std::vector<int> devices(ranks);
    for (int r = 0; r < ranks; ++r) devices[r] = r;
    comms_.assign(ranks, nullptr);
    check_nccl(api_, api_.ncclCommInitAll(comms_.data(), ranks, devices.data()), "ncclCommInitAll");
    streams_.assign(ranks, nullptr);
    buffers_.resize(ranks);
    for (int r = 0; r < ranks; ++r) {
      check_cuda(cudaSetDevice(r), "cudaSetDevice");
      check_cuda(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking),
                 "cudaStreamCreate");
    }
  }

  ~RankGroup() {
    for (int r = 0; r < ranks_; ++r) {
      cudaSetDevice(r);
      buffers_[r].release();
      if (streams_[r] != nullptr) cudaStreamDestroy(streams_[r]);
      if (comms_[r] != nullptr) api_.ncclCommDestroy(comms_[r]);
    }
  }

  // ensure gives every rank `bytes` of device memory filled with random bf16 values.
  void ensure(int64_t bytes, uint64_t seed) {
    for (int r = 0; r < ranks_; ++r) {
      check_cuda(cudaSetDevice(r), "cudaSetDevice");
      if (buffers_[r].size() >= static_cast<size_t>(bytes)) continue;
      buffers_[r].ensure(static_cast<size_t>(bytes));
      check_cuda(launch_fill_uniform(buffers_[r].data(), bytes / kBf16Bytes, ElementType::kBf16,
                                     seed + static_cast<uint64_t>(r), -1.0f, 1.0f, streams_[r]),
                 "fill kernel launch");
      check_cuda(cudaStreamSynchronize(streams_[r]), "filling buffers");
    }
  }

  int ranks() const { return ranks_; }
  ncclComm_t comm(int r) const { return comms_[r]; }
  cudaStream_t stream(int r) const { return streams_[r]; }
  char* buffer(int r) const { return buffers_[r].data(); }
  const std::vector<cudaStream_t>& streams() const { return streams_; }

 private:
  const NcclApi& api_;
  int ranks_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<DeviceBuffer> buffers_;
};

// launch_collective issues one operation on every rank inside one NCCL group. Set `sets` buffer
// pairs rotate: call `set` uses send buffer at offset set·2·bytes and receive buffer after it.
void launch_collective(const NcclApi& api, const RankGroup& g, const CollectivePoint& p,
                       int64_t set_offset, int64_t bytes) {
  const int n = g.ranks();
  const size_t count = static_cast<size_t>(bytes / kBf16Bytes);
  check_nccl(api, api.ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < n; ++r) {
    char* send = g.buffer(r) + set_offset;
    char* recv = send + bytes;
    switch (p.op) {
      case CollectiveOp::kAllReduce:
        check_nccl(
            api,
            api.ncclAllReduce(send, recv, count, ncclBfloat16, ncclSum, g.comm(r), g.stream(r)),
            "ncclAllReduce");
        break;
      case CollectiveOp::kAllGather:
        // `bytes` is the gathered output; each rank contributes bytes / n.
        check_nccl(api,
                   api.ncclAllGather(send, recv, count / n, ncclBfloat16, g.comm(r), g.stream(r)),
                   "ncclAllGather");
        break;
      case CollectiveOp::kReduceScatter:
        // `bytes` is the input; each rank receives bytes / n.
        check_nccl(api,
                   api.ncclReduceScatter(send, recv, count / n, ncclBfloat16, ncclSum, g.comm(r),
                                         g.stream(r)),
                   "ncclReduceScatter");
        break;
      case CollectiveOp::kAllToAll: {
        // nccl-tests' alltoall: every rank sends bytes / n to each peer (itself included).
        const size_t chunk = count / n;
        for (int peer = 0; peer < n; ++peer) {
          check_nccl(api,
                     api.ncclSend(send + peer * chunk * kBf16Bytes, chunk, ncclBfloat16, peer,
                                  g.comm(r), g.stream(r)),
                     "ncclSend");
          check_nccl(api,
                     api.ncclRecv(recv + peer * chunk * kBf16Bytes, chunk, ncclBfloat16, peer,
                                  g.comm(r), g.stream(r)),
                     "ncclRecv");
        }
        break;
      }
      case CollectiveOp::kSendRecv:
        // nccl-tests' sendrecv: a ring, each rank sends to the next and receives from the previous.
        check_nccl(api,
                   api.ncclSend(send, count, ncclBfloat16, (r + 1) % n, g.comm(r), g.stream(r)),
                   "ncclSend");
        check_nccl(api,
                   api.ncclRecv(recv, count, ncclBfloat16, (r + n - 1) % n, g.comm(r), g.stream(r)),
                   "ncclRecv");
        break;
    }
  }
  check_nccl(api, api.ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace

std::string collectives_method(const Libraries& libraries) {
  int version = 0;
  if (libraries.nccl != nullptr) libraries.nccl->ncclGetVersion(&version);
  return "NCCL " + std::to_string(version) +
         ", one process over GPUs 0..ranks-1 (ncclCommInitAll), bf16 sum; time = first kernel "
         "start "
         "to last kernel end over all ranks; bytes, algorithm and bus bandwidth as in nccl-tests";
}

void run_collectives(const BenchContext& ctx, const Libraries& libraries,
                     const std::vector<CollectivePoint>& points, RowSink& sink) {
  if (points.empty()) return;
  if (libraries.nccl == nullptr) throw BenchError(libraries.nccl_error);
  const NcclApi& api = *libraries.nccl;
  PointRecorder recorder(ctx, "collectives", sink);
  std::unique_ptr<RankGroup> group;
  uint64_t seed = 3000;
  try {
    for (const CollectivePoint& p : points) {
      if (group == nullptr || group->ranks() != p.ranks) {
        group.reset();
        group = std::make_unique<RankGroup>(api, p.ranks);
      }
      bool more = recorder.record(
          identity(p),
          [&]() {
            // Whole elements per rank (a size not divisible by the rank count is rounded down).
            const int64_t bytes = p.bytes / (kBf16Bytes * p.ranks) * (kBf16Bytes * p.ranks);
            if (bytes == 0) throw BenchError("size below one element per rank");
            const int64_t pair = 2 * bytes;
            const int sets = rotation_sets(pair, ctx.rotation_bytes);
            group->ensure(sets * pair, seed++);
            return ctx.timer->time(
                ctx.warmup, ctx.repetitions,
                [&](int call) { launch_collective(api, *group, p, (call % sets) * pair, bytes); },
                group->streams(), Aggregate::kSpan);
          },
          [&](YamlNode& row, const Measurement& m) {
            if (m.summary.median <= 0) return;
            const double algbw = static_cast<double>(p.bytes) / m.summary.median;
            row.set("algorithm_bandwidth_bytes_per_s", YamlNode::real(algbw));
            row.set("bus_bandwidth_bytes_per_s",
                    YamlNode::real(algbw * bus_bandwidth_factor(p.op, p.ranks)));
          });
      if (!more) break;
    }
  } catch (...) {
    group.reset();
    cudaSetDevice(ctx.device);
    throw;
  }
  group.reset();
  check_cuda(cudaSetDevice(ctx.device), "cudaSetDevice");
  recorder.finish();
}

#else  // !PACELINE_HAVE_NCCL

std::string collectives_method(const Libraries&) { return "NCCL (not built)"; }

void run_collectives(const BenchContext&, const Libraries& libraries,
                     const std::vector<CollectivePoint>& points, RowSink&) {
  if (points.empty()) return;
  throw BenchError(libraries.nccl_error);
}

#endif

}  // namespace paceline::calibrate::internal
