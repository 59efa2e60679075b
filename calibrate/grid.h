// The measurement grids of paceline-calibrate, and what a run will cost.
//
// A Plan lists every point each benchmark family measures in quick or full mode. Every family's
// grid is a Cartesian product of its key fields' values (GEMM's fp8 only exists in the TN layout
// that Hopper's FP8 tensor cores accept), so a loader can interpolate regularly in log space. The
// plan is pure data: it needs no GPU, and `paceline-calibrate --plan` prints it with its estimated
// cost.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "calibrate/profile.h"
#include "calibrate/yaml_subset.h"

namespace paceline::calibrate {

enum class Mode { kQuick, kFull };
std::string_view to_string(Mode mode);

// Benchmark families in the order a run measures them: cheap and safe first, attention (the
// family most likely to fail) last.
inline constexpr std::array<std::string_view, 5> kFamilies = {"memory_bound", "copies", "gemm",
                                                              "collectives", "attention"};

enum class GemmDtype { kBf16, kFp16, kFp8E4m3, kTf32 };
std::string_view to_string(GemmDtype dtype);

// GemmPoint is one cuBLASLt call D = op(A)·op(B) in cuBLAS's column-major convention: op(A) is
// m×k, op(B) is k×n, D is m×n. transa/transb are 'T' or 'N'. A framework's Linear layer
// y = x·Wᵀ with x [tokens, in] and W [out, in] is the call (T, N, m=out, n=tokens, k=in); its
// data gradient is (N, N, m=in, n=tokens, k=out) and its weight gradient (N, T, m=in, n=out,
// k=tokens).
struct GemmPoint {
  GemmDtype dtype = GemmDtype::kBf16;
  char transa = 'T';
  char transb = 'N';
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

// AttentionPoint is one fused scaled-dot-product attention call in BHSD layout: Q has `heads`
// heads, K and V have heads / group. The grid keeps batch = 1 and varies heads, because fused
// attention kernels schedule one block per (batch, head, tile): only batch·heads matters.
struct AttentionPoint {
  bool backward = false;
  bool causal = true;
  int64_t head_dim = 128;
  int64_t group = 1;
  int64_t batch = 1;
  int64_t heads = 32;
  int64_t seq = 4096;
  int64_t kv_heads() const { return heads / group; }
};

enum class MemoryKernel { kAdd, kGelu, kSwiglu, kLayernorm, kRmsnorm, kSoftmax, kCrossEntropy };
std::string_view to_string(MemoryKernel kernel);

// MemoryPoint is one pass of a memory-bound kernel over bf16 tensors. `size` is the nominal grid
// value; `bytes` the exact bytes read plus written; `row` the row width of row-wise kernels
// (hidden size for norms, sequence length for softmax, vocabulary for cross-entropy), 0 for
// element-wise kernels.
struct MemoryPoint {
  MemoryKernel kernel = MemoryKernel::kAdd;
  int64_t size = 0;
  int64_t elements = 0;
  int64_t row = 0;
  int64_t bytes = 0;
};

enum class CopyKind { kDeviceToDevice, kHostToDevice, kDeviceToHost, kPeerToPeer };
std::string_view to_string(CopyKind kind);

// CopyPoint is one cudaMemcpyAsync of `bytes` (payload, counted once). Host memory is pinned.
struct CopyPoint {
  CopyKind kind = CopyKind::kDeviceToDevice;
  int64_t bytes = 0;
};

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
std::string_view to_string(CollectiveOp op);

// CollectivePoint is one NCCL operation over `ranks` GPUs; `bytes` is nccl-tests' "size": the
// per-rank buffer for all_reduce, all_to_all and send_recv, the gathered output for all_gather
// and the input for reduce_scatter.
struct CollectivePoint {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int ranks = 2;
  int64_t bytes = 0;
};

// bus_bandwidth_factor is nccl-tests' busBw/algBw factor: 2(n−1)/n for all_reduce, (n−1)/n for
// all_gather, reduce_scatter and all_to_all, 1 for send_recv (nccl-tests doc/PERFORMANCE.md).
double bus_bandwidth_factor(CollectiveOp op, int ranks);

// Row identities: the key fields of a point as a flow mapping (plus derived fields such as
// kv_heads, elements, row), the start of its table row.
YamlNode identity(const GemmPoint& p);
YamlNode identity(const AttentionPoint& p);
YamlNode identity(const MemoryPoint& p);
YamlNode identity(const CopyPoint& p);
YamlNode identity(const CollectivePoint& p);

// Plan is everything a run measures.
struct Plan {
  Mode mode = Mode::kQuick;
  int warmup = 3;
  int repetitions = 10;
  int num_gpus = 1;
  std::vector<MemoryPoint> memory_bound;
  std::vector<CopyPoint> copies;
  std::vector<GemmPoint> gemm;
  std::vector<CollectivePoint> collectives;
  std::vector<AttentionPoint> attention;

  // table_shell is family's table without rows: name, key, interpolate and axes.
  Table table_shell(std::string_view family) const;
  // budget_s is the wall-clock cap of a family in seconds (0: none). Quick mode caps each family
  // so that one slow family cannot starve the others; a capped family is resumable.
  double budget_s(std::string_view family) const;
  // num_points is the number of points of a family.
  size_t num_points(std::string_view family) const;
  // key_of lists the row keys (row_key) of a family's points, in run order.
  std::vector<std::string> keys(std::string_view family) const;
};

// make_plan builds the grids for `mode` on a node with `num_gpus` GPUs (peer copies and NCCL
// collectives need at least 2).
Plan make_plan(Mode mode, int num_gpus);

// Rates assumed for the time estimate only (H100/H200 SXM class, dense, no sparsity): NVIDIA
// H100/H200 datasheets give 989 TFLOP/s bf16 and 1979 fp8 peak, 494 tf32, 3.35 / 4.8 TB/s HBM;
// cuBLAS reaches about three quarters of peak, hence the round numbers below.
struct Rates {
  double bf16_flop_per_s = 750e12;
  double fp8_flop_per_s = 1500e12;
  double tf32_flop_per_s = 375e12;
  // Flash attention forward reaches about half the bf16 GEMM rate; backward does 2.5× the
  // forward's FLOPs (FlashAttention-2 paper, section 3.1).
  double attention_efficiency = 0.5;
  double hbm_bytes_per_s = 4e12;
  double pcie_bytes_per_s = 50e9;  // PCIe 5.0 x16, pinned memory
  double nvlink_bytes_per_s = 400e9;
  double launch_s = 5e-6;
  // Host-side cost per grid point: descriptor setup, heuristics, filling the rotated buffers,
  // loading a new kernel's module, 13 synchronized calls and a CUPTI flush.
  double point_overhead_s = 8e-3;
  // Building a cuDNN SDPA execution plan, which compiles kernels at run time: about a second
  // per distinct shape (observed with cuDNN 9 on Hopper; the dominant cost of the attention
  // family in quick mode).
  double attention_plan_s = 1.0;
};

// FamilyEstimate is the predicted cost of one family: GPU time of all warm-up and timed calls,
// and host overhead.
struct FamilyEstimate {
  std::string family;
  size_t points = 0;
  double gpu_s = 0;
  double overhead_s = 0;
  double total_s() const { return gpu_s + overhead_s; }
};

// estimate predicts each family's cost; the GPU time of a call is its roofline time
// max(FLOP / rate, bytes / bandwidth) plus a launch, times warm-up + repetitions.
std::vector<FamilyEstimate> estimate(const Plan& plan, const Rates& rates = Rates{});

// describe_plan formats the plan's grids and estimate for the terminal.
std::string describe_plan(const Plan& plan, const std::vector<FamilyEstimate>& estimates);

}  // namespace paceline::calibrate
