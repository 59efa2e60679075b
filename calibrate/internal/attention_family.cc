// Fused scaled-dot-product attention through cuDNN's backend (graph) API.
//
// Frameworks on Hopper reach cuDNN's fused flash-attention kernels through cudnn-frontend's SDPA
// node (PyTorch's cuDNN SDPA backend, Transformer Engine's FusedAttention). cudnn-frontend is a
// header-only C++ library that is not available where this tool is built, so this file builds
// the same operation graphs with the backend API directly. For cuDNN 9.x before 9.21 the node is
// lowered to a "composite" graph, which cuDNN's SDPA engines pattern-match (cudnn-frontend,
// include/cudnn_frontend/node/scaled_dot_product_flash_attention.h: CompositeSDPANode and
// CompositeSDPABackwardNode; node/softmax.h: CompositeSoftmaxNode; node/diagonal_band_mask.h:
// CompositeDiagonalBandMaskNode for the causal mask):
//
//   forward:  S = Q·Kᵀ; S *= scale; [causal: S = select(S, -inf, row >= col)];
//             M = max_row(S); E = exp(S - M); Z = sum_row(E); Stats = M + log(Z);
//             P = E / Z (bf16); O = P·V
//   backward: softmax_sum = sum_row(dO ∘ O) (fp32 workspace);
//             S = Q·Kᵀ · scale - Stats; [causal mask]; E = exp(S);
//             dV = Eᵀ(bf16)·dO (GQA: summed over the group's heads);
//             dS = (dO·Vᵀ - softmax_sum) ∘ E · scale;
//             dK = dSᵀ(bf16)·Q (GQA: summed); dQ_accum (fp32 workspace) = dS·K; dQ = dQ_accum.
//
// Every backend call is checked; a graph that no engine accepts is reported, never run.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "calibrate/internal/families.h"
#include "calibrate/internal/kernels.cuh"
#include "calibrate/internal/sdpa_graph.h"

namespace paceline::calibrate::internal {

#if PACELINE_HAVE_CUDNN
namespace {

constexpr int64_t kAlign = 256;
int64_t align_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Buffers and plans of one shape: forward and backward graphs, rotated buffer sets.
class AttentionShape {
 public:
  AttentionShape(const CudnnApi& api, cudnnHandle_t handle, const SdpaShape& shape,
                 const BenchContext& ctx, DeviceBuffer& pool, uint64_t seed)
      : api_(api), handle_(handle), shape_(shape), ctx_(ctx), pool_(pool) {
    const int64_t q = align_up(shape.b * shape.h * shape.s * shape.d * 2);
    const int64_t kv = align_up(shape.b * shape.hk * shape.s * shape.d * 2);
    const int64_t rows = align_up(shape.b * shape.h * shape.s * 4);
    // Per set: Q, K, V, O, dO, dQ, dK, dV, Stats; then one shared softmax_sum and dQ_accum.
    offsets_ = {0,
                q,
                q + kv,
                q + 2 * kv,
                2 * q + 2 * kv,
                3 * q + 2 * kv,
                4 * q + 2 * kv,
                4 * q + 3 * kv,
                4 * q + 4 * kv};
    set_bytes_ = 4 * q + 4 * kv + rows;
    sets_ = rotation_sets(set_bytes_, ctx.rotation_bytes);
    shared_bytes_ = rows + align_up(shape.b * shape.h * shape.s * shape.d * 4);
    pool_.ensure(static_cast<size_t>(sets_ * set_bytes_ + shared_bytes_));
    for (int i = 0; i < sets_; ++i) {
      char* base = set(i);
      for (int t : {0, 1, 2, 4}) {  // Q, K, V, dO
        const int64_t count = (t == 1 || t == 2 ? kv : q) / 2;
        check_cuda(launch_fill_uniform(base + offsets_[t], count, ElementType::kBf16, seed++, -1.0f,
                                       1.0f, ctx.stream),
                   "fill attention inputs");
      }
      // Plausible stats (log-sum-exp of the scores) until a forward pass writes real ones.
      check_cuda(launch_fill_uniform(base + offsets_[8], shape.b * shape.h * shape.s,
                                     ElementType::kFp32, seed++, 4.0f, 8.0f, ctx.stream),
                 "fill stats");
    }
    check_cuda(cudaStreamSynchronize(ctx.stream), "filling buffers");
  }

  // plan builds the forward or backward plan and its variant packs (once).
  void prepare(bool backward) {
    std::unique_ptr<CudnnGraph>& graph = backward ? backward_graph_ : forward_graph_;
    if (graph != nullptr) return;
    if (backward ? backward_error_.size() : forward_error_.size()) {
      throw BenchError(backward ? backward_error_ : forward_error_);
    }
    try {
      auto g = std::make_unique<CudnnGraph>(api_, handle_);
      if (backward) {
        build_backward(*g, shape_);
      } else {
        build_forward(*g, shape_);
      }
      int64_t workspace_bytes = 0;
      cudnnBackendDescriptor_t plan =
          g->build_plan(backward ? "SDPA backward" : "SDPA forward", &workspace_bytes);
      // Each plan has its own workspace: its variant packs keep the pointer.
      DeviceBuffer& workspace = backward ? backward_workspace_ : forward_workspace_;
      workspace.ensure(static_cast<size_t>(std::max<int64_t>(workspace_bytes, 1)));
      std::vector<cudnnBackendDescriptor_t>& packs = backward ? backward_packs_ : forward_packs_;
      for (int i = 0; i < sets_; ++i) {
        char* base = set(i);
        std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
        std::vector<void*> pointers = {base + offsets_[0], base + offsets_[1], base + offsets_[2],
                                       base + offsets_[3], base + offsets_[8], &scale_};
        if (shape_.causal) {
          uids.push_back(kNegInf);
          pointers.push_back(&neg_inf_);
        }
        if (backward) {
          char* shared = pool_.data() + sets_ * set_bytes_;
          const int64_t rows = align_up(shape_.b * shape_.h * shape_.s * 4);
          for (auto [uid, pointer] :
               std::initializer_list<std::pair<int64_t, void*>>{{kDO, base + offsets_[4]},
                                                                {kDQ, base + offsets_[5]},
                                                                {kDK, base + offsets_[6]},
                                                                {kDV, base + offsets_[7]},
                                                                {kOne, &one_},
                                                                {kSoftmaxSum, shared},
                                                                {kDQAccum, shared + rows}}) {
            uids.push_back(uid);
            pointers.push_back(pointer);
          }
        }
        packs.push_back(g->variant_pack(uids, pointers, workspace.data()));
      }
      (backward ? backward_plan_ : forward_plan_) = plan;
      graph = std::move(g);
    } catch (const BenchError& e) {
      (backward ? backward_error_ : forward_error_) = e.what();
      throw;
    }
  }

  // execute runs one call on buffer set `set`.
  void execute(bool backward, int set) {
    cudnnStatus_t status =
        api_.cudnnBackendExecute(handle_, backward ? backward_plan_ : forward_plan_,
                                 (backward ? backward_packs_ : forward_packs_)[set]);
    if (status != CUDNN_STATUS_SUCCESS) {
      throw BenchError(std::string("cudnnBackendExecute(SDPA ") +
                       (backward ? "backward" : "forward") + "): " + api_.describe(status));
    }
  }

  // ensure_forward_outputs runs the forward once on every set so that the backward reads real O
  // and Stats; without a forward plan the filled stand-ins stay.
  void ensure_forward_outputs() {
    if (forward_ran_ || forward_plan_ == nullptr) return;
    for (int i = 0; i < sets_; ++i) execute(false, i);
    check_cuda(cudaStreamSynchronize(ctx_.stream), "forward for backward inputs");
    forward_ran_ = true;
  }

  int sets() const { return sets_; }
  const SdpaShape& shape() const { return shape_; }

 private:
  char* set(int i) const { return pool_.data() + i * set_bytes_; }

  const CudnnApi& api_;
  cudnnHandle_t handle_;
  SdpaShape shape_;
  const BenchContext& ctx_;
  DeviceBuffer& pool_;
  DeviceBuffer forward_workspace_, backward_workspace_;
  std::array<int64_t, 9> offsets_{};
  int64_t set_bytes_ = 0;
  int64_t shared_bytes_ = 0;
  int sets_ = 1;
  // By-value scalars; the variant packs point at them.
  float scale_ = 1.0f / std::sqrt(static_cast<float>(shape_.d));
  float neg_inf_ = -std::numeric_limits<float>::infinity();
  float one_ = 1.0f;
  std::unique_ptr<CudnnGraph> forward_graph_, backward_graph_;
  cudnnBackendDescriptor_t forward_plan_ = nullptr, backward_plan_ = nullptr;
  std::vector<cudnnBackendDescriptor_t> forward_packs_, backward_packs_;
  std::string forward_error_, backward_error_;
  bool forward_ran_ = false;
};

}  // namespace

std::string attention_method(const Libraries& libraries) {
  std::string version =
      libraries.cudnn != nullptr ? std::to_string(libraries.cudnn->cudnnGetVersion()) : "?";
  return "cuDNN " + version +
         " fused SDPA (flash attention) through the backend graph API, lowered as cudnn-frontend's "
         "composite SDPA node (calibrate/internal/attention_family.cc); bf16 BHSD, scale "
         "1/sqrt(head_dim), "
         "fp32 stats; backward = dQ, dK, dV";
}

void run_attention(const BenchContext& ctx, const Libraries& libraries,
                   const std::vector<AttentionPoint>& points, RowSink& sink) {
  if (libraries.cudnn == nullptr) throw BenchError(libraries.cudnn_error);
  const CudnnApi& api = *libraries.cudnn;
  cudnnHandle_t handle = nullptr;
  cudnnStatus_t status = api.cudnnCreate(&handle);
  if (status != CUDNN_STATUS_SUCCESS) throw BenchError("cudnnCreate: " + api.describe(status));
  struct HandleGuard {
    const CudnnApi& api;
    cudnnHandle_t handle;
    ~HandleGuard() { api.cudnnDestroy(handle); }
  } guard{api, handle};
  status = api.cudnnSetStream(handle, ctx.stream);
  if (status != CUDNN_STATUS_SUCCESS) throw BenchError("cudnnSetStream: " + api.describe(status));

  DeviceBuffer pool;
  std::unique_ptr<AttentionShape> current;
  PointRecorder recorder(ctx, "attention", sink);
  uint64_t seed = 4000;
  for (const AttentionPoint& p : points) {
    const SdpaShape shape{p.batch, p.heads, p.kv_heads(), p.seq, p.head_dim, p.causal};
    bool more = recorder.record(
        identity(p),
        [&]() {
          if (current == nullptr || !(current->shape() == shape)) {
            current.reset();
            current = std::make_unique<AttentionShape>(api, handle, shape, ctx, pool, seed);
            seed += 100;
          }
          AttentionShape& a = *current;
          if (p.backward) {
            // The forward plan may fail on its own; the backward then reads stand-in O and stats.
            try {
              a.prepare(false);
            } catch (const BenchError&) {
            }
            a.ensure_forward_outputs();
          }
          a.prepare(p.backward);
          return ctx.timer->time(
              ctx.warmup, ctx.repetitions,
              [&](int call) { a.execute(p.backward, call % a.sets()); }, {ctx.stream},
              Aggregate::kSumOfDurations);
        },
        [&](YamlNode& row, const Measurement& m) {
          if (m.summary.median <= 0) return;
          // 4·b·h·s²·d FLOP forward (two matmuls), halved when causal; 2.5× that backward.
          double flop = 4.0 * static_cast<double>(p.batch * p.heads) * static_cast<double>(p.seq) *
                        static_cast<double>(p.seq) * static_cast<double>(p.head_dim);
          if (p.causal) flop /= 2;
          if (p.backward) flop *= 2.5;
          row.set("flop_per_s", YamlNode::real(flop / m.summary.median));
        });
    if (!more) break;
  }
  current.reset();
  recorder.finish();
}

#else  // !PACELINE_HAVE_CUDNN

std::string attention_method(const Libraries&) { return "cuDNN SDPA (not built)"; }

void run_attention(const BenchContext&, const Libraries& libraries,
                   const std::vector<AttentionPoint>&, RowSink&) {
  throw BenchError(libraries.cudnn_error);
}

#endif

}  // namespace paceline::calibrate::internal
