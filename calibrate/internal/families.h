// The benchmark families. Each measures its points in order, adding one row per point to the
// sink, and stops early when the sink is out of time. A family that cannot run at all (missing
// library, no engine, broken CUDA context) throws BenchError; the runner records the message
// under `skipped` and goes on with the next family.
#pragma once

#include <string>
#include <vector>

#include "calibrate/grid.h"
#include "calibrate/internal/bench.h"
#include "calibrate/internal/libraries.h"

namespace paceline::calibrate::internal {

// Libraries holds the optional libraries, each with why it is missing when it is.
struct Libraries {
#if PACELINE_HAVE_CUBLASLT
  std::unique_ptr<CublasLtApi> cublaslt;
#endif
#if PACELINE_HAVE_CUDNN
  std::unique_ptr<CudnnApi> cudnn;
#endif
#if PACELINE_HAVE_NCCL
  std::unique_ptr<NcclApi> nccl;
#endif
  std::string cublaslt_error = "built without cublasLt.h";
  std::string cudnn_error = "built without cuDNN headers (cudnn_graph.h)";
  std::string nccl_error = "built without nccl.h";
};

// Method texts for the tables (how each family's rows are measured).
std::string memory_bound_method();
std::string copies_method();
std::string gemm_method(const Libraries& libraries);
std::string collectives_method(const Libraries& libraries);
std::string attention_method(const Libraries& libraries);

void run_memory_bound(const BenchContext& ctx, const std::vector<MemoryPoint>& points,
                      RowSink& sink);
void run_copies(const BenchContext& ctx, const std::vector<CopyPoint>& points, RowSink& sink);
void run_gemm(const BenchContext& ctx, const Libraries& libraries,
              const std::vector<GemmPoint>& points, RowSink& sink);
void run_collectives(const BenchContext& ctx, const Libraries& libraries,
                     const std::vector<CollectivePoint>& points, RowSink& sink);
void run_attention(const BenchContext& ctx, const Libraries& libraries,
                   const std::vector<AttentionPoint>& points, RowSink& sink);

}  // namespace paceline::calibrate::internal
