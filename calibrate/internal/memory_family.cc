// Memory-bound kernels and copies: one pass over bf16 tensors with our own kernels
// (internal/kernels.cu), and cudaMemcpyAsync between device, pinned host and peer memory.
#include <algorithm>

#include "calibrate/internal/families.h"
#include "calibrate/internal/kernels.cuh"

namespace paceline::calibrate::internal {
namespace {

constexpr int64_t kAlign = 256;  // cudaMalloc's alignment, kept for every sub-buffer

int64_t align_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

MemoryOp to_op(MemoryKernel kernel) {
  switch (kernel) {
    case MemoryKernel::kAdd:
      return MemoryOp::kAdd;
    case MemoryKernel::kGelu:
      return MemoryOp::kGelu;
    case MemoryKernel::kSwiglu:
      return MemoryOp::kSwiglu;
    case MemoryKernel::kLayernorm:
      return MemoryOp::kLayernorm;
    case MemoryKernel::kRmsnorm:
      return MemoryOp::kRmsnorm;
    case MemoryKernel::kSoftmax:
      return MemoryOp::kSoftmax;
    case MemoryKernel::kCrossEntropy:
      return MemoryOp::kCrossEntropy;
  }
  return MemoryOp::kAdd;
}

void fill(void* data, int64_t count, ElementType type, uint64_t seed, float lo, float hi,
          cudaStream_t stream) {
  check_cuda(launch_fill_uniform(data, count, type, seed, lo, hi, stream), "fill kernel launch");
}

// bandwidth adds bytes / median time.
void add_bandwidth(YamlNode& row, double bytes, const Measurement& m) {
  if (m.summary.median > 0)
    row.set("bandwidth_bytes_per_s", YamlNode::real(bytes / m.summary.median));
}

}  // namespace

std::string memory_bound_method() {
  return "paceline's own single-pass bf16 kernels (calibrate/internal/kernels.cu): 16-byte vector "
         "loads, fp32 math, one block per row for norms/softmax/cross-entropy; bytes = bytes read "
         "+ written";
}

std::string copies_method() {
  return "cudaMemcpyAsync (cudaMemcpyPeerAsync for peer_to_peer) on one stream, pinned host "
         "memory; bytes = payload";
}

void run_memory_bound(const BenchContext& ctx, const std::vector<MemoryPoint>& points,
                      RowSink& sink) {
  DeviceBuffer pool;
  PointRecorder recorder(ctx, "memory_bound", sink);
  uint64_t seed = 1;
  for (const MemoryPoint& p : points) {
    bool more = recorder.record(
        identity(p),
        [&]() {
          const MemoryOp op = to_op(p.kernel);
          const int64_t rows = p.row > 0 ? p.elements / p.row : 0;
          if (p.row > 0 && !supported_row_width(op, p.row)) {
            throw BenchError("no kernel for rows of " + std::to_string(p.row) + " elements");
          }
          // One set of buffers: inputs, output and per-row parameters.
          const int64_t tensor = align_up(p.elements * 2);
          const bool two_inputs = op == MemoryOp::kAdd || op == MemoryOp::kSwiglu;
          const int64_t params = p.row > 0 ? align_up(p.row * 2) : 0;
          int64_t set_bytes = tensor * (two_inputs ? 3 : 2) + 2 * params;
          if (op == MemoryOp::kCrossEntropy) set_bytes = tensor + 2 * align_up(rows * 4);
          const int sets = rotation_sets(set_bytes, ctx.rotation_bytes);
          pool.ensure(static_cast<size_t>(sets * set_bytes));
          std::vector<MemoryArgs> args(sets);
          for (int s = 0; s < sets; ++s) {
            char* base = pool.data() + s * set_bytes;
            MemoryArgs& a = args[s];
            a.op = op;
            a.elements = p.elements;
            a.row = p.row;
            if (op == MemoryOp::kCrossEntropy) {
              a.a = base;
              a.targets = reinterpret_cast<const int32_t*>(base + tensor);
              a.loss = reinterpret_cast<float*>(base + tensor + align_up(rows * 4));
              fill(base, p.elements, ElementType::kBf16, seed++, -4.0f, 4.0f, ctx.stream);
              fill(base + tensor, rows, ElementType::kInt32, seed++, 0.0f,
                   static_cast<float>(p.row), ctx.stream);
              continue;
            }
            a.a = base;
            fill(base, p.elements, ElementType::kBf16, seed++, -2.0f, 2.0f, ctx.stream);
            char* next = base + tensor;
            if (two_inputs) {
              a.b = next;
              fill(next, p.elements, ElementType::kBf16, seed++, -2.0f, 2.0f, ctx.stream);
              next += tensor;
            }
            a.out = next;
            next += tensor;
            if (p.row > 0) {
              a.gamma = next;
              fill(next, p.row, ElementType::kBf16, seed++, 0.5f, 1.5f, ctx.stream);
              a.beta = next + params;
              fill(next + params, p.row, ElementType::kBf16, seed++, -0.5f, 0.5f, ctx.stream);
            }
          }
          check_cuda(cudaStreamSynchronize(ctx.stream), "filling buffers");
          return ctx.timer->time(
              ctx.warmup, ctx.repetitions,
              [&](int call) {
                check_cuda(launch_memory_op(args[call % sets], ctx.stream),
                           std::string(to_string(p.kernel)) + " kernel launch");
              },
              {ctx.stream}, Aggregate::kSumOfDurations);
        },
        [&](YamlNode& row, const Measurement& m) {
          add_bandwidth(row, static_cast<double>(p.bytes), m);
        });
    if (!more) break;
  }
  recorder.finish();
}

void run_copies(const BenchContext& ctx, const std::vector<CopyPoint>& points, RowSink& sink) {
  DeviceBuffer pool, peer_pool;
  PinnedBuffer host;
  PointRecorder recorder(ctx, "copies", sink);
  int peer = -1;
  bool peer_enabled = false;
  uint64_t seed = 1000;
  for (const CopyPoint& p : points) {
    bool more = recorder.record(
        identity(p),
        [&]() {
          const int64_t bytes = align_up(p.bytes);
          const int64_t words = p.bytes / 4;
          std::vector<std::function<void()>> calls;
          switch (p.kind) {
            case CopyKind::kDeviceToDevice: {
              const int sets = rotation_sets(2 * bytes, ctx.rotation_bytes);
              pool.ensure(static_cast<size_t>(sets * 2 * bytes));
              for (int s = 0; s < sets; ++s) {
                char* src = pool.data() + s * 2 * bytes;
                char* dst = src + bytes;
                fill(src, words, ElementType::kInt32, seed++, -1e9f, 1e9f, ctx.stream);
                calls.push_back([=, &ctx]() {
                  check_cuda(
                      cudaMemcpyAsync(dst, src, p.bytes, cudaMemcpyDeviceToDevice, ctx.stream),
                      "cudaMemcpyAsync(device to device)");
                });
              }
              break;
            }
            case CopyKind::kHostToDevice:
            case CopyKind::kDeviceToHost: {
              const int sets = rotation_sets(bytes, ctx.rotation_bytes);
              pool.ensure(static_cast<size_t>(sets * bytes));
              host.ensure(static_cast<size_t>(bytes));
              for (int s = 0; s < sets; ++s) {
                fill(pool.data() + s * bytes, words, ElementType::kInt32, seed++, -1e9f, 1e9f,
                     ctx.stream);
              }
              // Random host data: copied from the device once, outside the timed calls.
              check_cuda(cudaMemcpyAsync(host.data(), pool.data(), p.bytes, cudaMemcpyDeviceToHost,
                                         ctx.stream),
                         "cudaMemcpyAsync(initial host data)");
              const bool to_device = p.kind == CopyKind::kHostToDevice;
              for (int s = 0; s < sets; ++s) {
                char* dev = pool.data() + s * bytes;
                char* h = host.data();
                calls.push_back([=, &ctx]() {
                  check_cuda(
                      cudaMemcpyAsync(to_device ? dev : h, to_device ? h : dev, p.bytes,
                                      to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                      ctx.stream),
                      to_device ? "cudaMemcpyAsync(host to device)"
                                : "cudaMemcpyAsync(device to host)");
                });
              }
              break;
            }
            case CopyKind::kPeerToPeer: {
              if (peer < 0) {
                peer = ctx.device == 0 ? 1 : 0;
                int can = 0;
                check_cuda(cudaDeviceCanAccessPeer(&can, ctx.device, peer),
                           "cudaDeviceCanAccessPeer");
                if (can) {
                  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
                  if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
                    check_cuda(e, "cudaDeviceEnablePeerAccess");
                  }
                  cudaGetLastError();
                  peer_enabled = true;
                }
              }
              const int sets = rotation_sets(bytes, ctx.rotation_bytes);
              pool.ensure(static_cast<size_t>(sets * bytes));
              check_cuda(cudaSetDevice(peer), "cudaSetDevice(peer)");
              try {
                peer_pool.ensure(static_cast<size_t>(sets * bytes));
              } catch (...) {
                cudaSetDevice(ctx.device);
                throw;
              }
              check_cuda(cudaSetDevice(ctx.device), "cudaSetDevice");
              for (int s = 0; s < sets; ++s) {
                char* src = pool.data() + s * bytes;
                char* dst = peer_pool.data() + s * bytes;
                fill(src, words, ElementType::kInt32, seed++, -1e9f, 1e9f, ctx.stream);
                const int src_device = ctx.device, dst_device = peer;
                calls.push_back([=, &ctx]() {
                  check_cuda(
                      cudaMemcpyPeerAsync(dst, dst_device, src, src_device, p.bytes, ctx.stream),
                      "cudaMemcpyPeerAsync");
                });
              }
              break;
            }
          }
          check_cuda(cudaStreamSynchronize(ctx.stream), "filling buffers");
          return ctx.timer->time(
              ctx.warmup, ctx.repetitions,
              [&](int call) { calls[static_cast<size_t>(call) % calls.size()](); }, {ctx.stream},
              Aggregate::kSumOfDurations);
        },
        [&](YamlNode& row, const Measurement& m) {
          add_bandwidth(row, static_cast<double>(p.bytes), m);
          if (p.kind == CopyKind::kPeerToPeer)
            row.set("peer_access", YamlNode::boolean(peer_enabled));
        });
    if (!more) break;
  }
  // Free the peer's memory on the peer.
  if (peer >= 0) {
    cudaSetDevice(peer);
    peer_pool.release();
    cudaSetDevice(ctx.device);
  }
  recorder.finish();
}

}  // namespace paceline::calibrate::internal
