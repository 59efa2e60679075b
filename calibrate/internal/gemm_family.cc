// GEMMs through cuBLASLt: one cublasLtMatmul per call with the first algorithm of cuBLASLt's
// heuristic and a 32 MiB workspace, which is what PyTorch does for torch.matmul / nn.Linear on
// Hopper (aten/src/ATen/cuda/CUDABlas.cpp: cublasLt with the top heuristic result; the default
// CUBLASLT_WORKSPACE_SIZE on sm90 is 32 MiB).
#include "calibrate/internal/families.h"
#include "calibrate/internal/kernels.cuh"

namespace paceline::calibrate::internal {

#if PACELINE_HAVE_CUBLASLT
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr int64_t kAlign = 256;

int64_t align_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Types of one GEMM flavor.
struct GemmTypes {
  cudaDataType_t ab;
  cudaDataType_t cd;
  cublasComputeType_t compute;
  ElementType fill;
  int64_t ab_bytes;
  int64_t cd_bytes;
};

GemmTypes types_of(GemmDtype dtype) {
  switch (dtype) {
    case GemmDtype::kBf16:
      return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, ElementType::kBf16, 2, 2};
    case GemmDtype::kFp16:
      // fp32 accumulation, as PyTorch uses for fp16 by default.
      return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, ElementType::kFp16, 2, 2};
    case GemmDtype::kFp8E4m3:
      // Transformer Engine's forward GEMM: e4m3 inputs, bf16 output, fp32 accumulation.
      return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, ElementType::kFp8E4m3, 1, 2};
    case GemmDtype::kTf32:
      return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, ElementType::kFp32, 4, 4};
  }
  return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, ElementType::kBf16, 2, 2};
}

// Owners of cuBLASLt descriptors.
struct Descriptors {
  const CublasLtApi& api;
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  explicit Descriptors(const CublasLtApi& lt) : api(lt) {}
  ~Descriptors() {
    if (preference != nullptr) api.cublasLtMatmulPreferenceDestroy(preference);
    if (d != nullptr) api.cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) api.cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) api.cublasLtMatrixLayoutDestroy(a);
    if (matmul != nullptr) api.cublasLtMatmulDescDestroy(matmul);
  }
};

void check_lt(const CublasLtApi& api, cublasStatus_t status, std::string_view what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw BenchError(std::string(what) + ": " + api.describe(status));
  }
}

}  // namespace

std::string gemm_method(const Libraries& libraries) {
  std::string version = libraries.cublaslt != nullptr
                            ? std::to_string(libraries.cublaslt->cublasLtGetVersion())
                            : std::string("?");
  return "cuBLASLt " + version +
         " cublasLtMatmul, first heuristic algorithm, 32 MiB workspace, alpha 1 beta 0, fp32 "
         "accumulation (tf32: CUBLAS_COMPUTE_32F_FAST_TF32; fp8: e4m3 in, bf16 out, fast "
         "accumulation); column-major m x n x k as cuBLAS sees it";
}

void run_gemm(const BenchContext& ctx, const Libraries& libraries,
              const std::vector<GemmPoint>& points, RowSink& sink) {
  if (libraries.cublaslt == nullptr) throw BenchError(libraries.cublaslt_error);
  const CublasLtApi& api = *libraries.cublaslt;
  cublasLtHandle_t handle = nullptr;
  check_lt(api, api.cublasLtCreate(&handle), "cublasLtCreate");
  struct HandleGuard {
    const CublasLtApi& api;
    cublasLtHandle_t handle;
    ~HandleGuard() { api.cublasLtDestroy(handle); }
  } guard{api, handle};

  DeviceBuffer workspace(kWorkspaceBytes);
  DeviceBuffer pool;
  PointRecorder recorder(ctx, "gemm", sink);
  uint64_t seed = 2000;
  for (const GemmPoint& p : points) {
    bool more = recorder.record(
        identity(p),
        [&]() {
          const GemmTypes t = types_of(p.dtype);
          const bool ta = p.transa == 'T', tb = p.transb == 'T';
          // Stored shapes (column-major): A is k×m when transposed, else m×k; B is n×k when
          // transposed, else k×n; D is m×n.
          const int64_t a_rows = ta ? p.k : p.m, a_cols = ta ? p.m : p.k;
          const int64_t b_rows = tb ? p.n : p.k, b_cols = tb ? p.k : p.n;
          const int64_t a_bytes = align_up(p.m * p.k * t.ab_bytes);
          const int64_t b_bytes = align_up(p.k * p.n * t.ab_bytes);
          const int64_t d_bytes = align_up(p.m * p.n * t.cd_bytes);
          const int64_t set_bytes = a_bytes + b_bytes + d_bytes;
          const int sets = rotation_sets(set_bytes, ctx.rotation_bytes);
          pool.ensure(static_cast<size_t>(sets * set_bytes));
          for (int s = 0; s < sets; ++s) {
            char* base = pool.data() + s * set_bytes;
            check_cuda(
                launch_fill_uniform(base, p.m * p.k, t.fill, seed++, -1.0f, 1.0f, ctx.stream),
                "fill A");
            check_cuda(launch_fill_uniform(base + a_bytes, p.k * p.n, t.fill, seed++, -1.0f, 1.0f,
                                           ctx.stream),
                       "fill B");
          }

          Descriptors desc(api);
          check_lt(api, api.cublasLtMatmulDescCreate(&desc.matmul, t.compute, CUDA_R_32F),
                   "cublasLtMatmulDescCreate");
          const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
          const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
          check_lt(api,
                   api.cublasLtMatmulDescSetAttribute(desc.matmul, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &op_a, sizeof(op_a)),
                   "set TRANSA");
          check_lt(api,
                   api.cublasLtMatmulDescSetAttribute(desc.matmul, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &op_b, sizeof(op_b)),
                   "set TRANSB");
          if (p.dtype == GemmDtype::kFp8E4m3) {
            const int8_t fast_accumulation = 1;
            check_lt(
                api,
                api.cublasLtMatmulDescSetAttribute(desc.matmul, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                   &fast_accumulation, sizeof(fast_accumulation)),
                "set FAST_ACCUM");
          }
          check_lt(api, api.cublasLtMatrixLayoutCreate(&desc.a, t.ab, a_rows, a_cols, a_rows),
                   "layout A");
          check_lt(api, api.cublasLtMatrixLayoutCreate(&desc.b, t.ab, b_rows, b_cols, b_rows),
                   "layout B");
          check_lt(api, api.cublasLtMatrixLayoutCreate(&desc.d, t.cd, p.m, p.n, p.m), "layout D");
          check_lt(api, api.cublasLtMatmulPreferenceCreate(&desc.preference),
                   "cublasLtMatmulPreferenceCreate");
          const uint64_t workspace_bytes = kWorkspaceBytes;
          check_lt(api,
                   api.cublasLtMatmulPreferenceSetAttribute(
                       desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                       sizeof(workspace_bytes)),
                   "set MAX_WORKSPACE_BYTES");
          cublasLtMatmulHeuristicResult_t heuristic{};
          int found = 0;
          check_lt(
              api,
              api.cublasLtMatmulAlgoGetHeuristic(handle, desc.matmul, desc.a, desc.b, desc.d,
                                                 desc.d, desc.preference, 1, &heuristic, &found),
              "cublasLtMatmulAlgoGetHeuristic");
          if (found == 0) throw BenchError("cuBLASLt has no algorithm for this problem");

          const float alpha = 1.0f, beta = 0.0f;
          check_cuda(cudaStreamSynchronize(ctx.stream), "filling buffers");
          return ctx.timer->time(
              ctx.warmup, ctx.repetitions,
              [&](int call) {
                char* base = pool.data() + (call % sets) * set_bytes;
                check_lt(
                    api,
                    api.cublasLtMatmul(handle, desc.matmul, &alpha, base, desc.a, base + a_bytes,
                                       desc.b, &beta, base + a_bytes + b_bytes, desc.d,
                                       base + a_bytes + b_bytes, desc.d, &heuristic.algo,
                                       workspace.data(), kWorkspaceBytes, ctx.stream),
                    "cublasLtMatmul");
              },
              {ctx.stream}, Aggregate::kSumOfDurations);
        },
        [&](YamlNode& row, const Measurement& m) {
          if (m.summary.median > 0) {
            double flop = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) *
                          static_cast<double>(p.k);
            row.set("flop_per_s", YamlNode::real(flop / m.summary.median));
          }
        });
    if (!more) break;
  }
  recorder.finish();
}

#else  // !PACELINE_HAVE_CUBLASLT

std::string gemm_method(const Libraries&) { return "cuBLASLt (not built)"; }

void run_gemm(const BenchContext&, const Libraries& libraries, const std::vector<GemmPoint>&,
              RowSink&) {
  throw BenchError(libraries.cublaslt_error);
}

#endif

}  // namespace paceline::calibrate::internal
