// GpuSpec: one GPU model's datasheet figures and the op-timer efficiency parameters, each
// with the source it came from (hardware/catalog/gpus/<name>.yaml).
#ifndef PACELINE_HARDWARE_GPU_SPEC_H_
#define PACELINE_HARDWARE_GPU_SPEC_H_

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "base/kernel_shapes.h"
#include "base/units.h"

namespace paceline {

class YamlMap;

// One fused attention kernel's efficiency on one GPU (see hardware/op_timer.h).
struct AttentionKernelEfficiency {
  double forward = 0.0;   // ceiling of the forward pass, of the dense peak
  double backward = 0.0;  // and of the backward pass
  // Under a causal mask: the ceiling is this fraction of the one above, and efficiency halves at
  // `causal_seq_half` (diagonal tiles half wasted, tiles of uneven work per query block).
  double causal_ratio = 0.0;
  double causal_seq_half = 0.0;
  // Whether back-to-back runs of the kernel hold the board at its power limit, as dense GEMMs do
  // (then it keeps the GPU's sustained fraction of the ceilings above, on the slowest chip); a
  // kernel that draws less keeps its short-burst speed under any load. The fused kernel is.
  bool power_limited = true;
  double efficiency(bool backward_pass) const { return backward_pass ? backward : forward; }
};

// The op timer's efficiency model (see hardware/op_timer.h for how each figure is used).
struct KernelEfficiency {
  Seconds overhead;                   // fixed time per kernel: launch gap and tail
  double gemm_max_efficiency = 0.0;   // of the dense peak, for a large well-shaped GEMM
  // fp8 GEMMs whose tensor-core sums are promoted to fp32 as they go (split accumulation: the
  // backward GEMMs of Transformer Engine and torchao), and those that keep them in the tensor
  // core's narrower accumulator (fast accumulation: their forward GEMMs). The same unless the
  // catalog gives both.
  double gemm_fp8_max_efficiency = 0.0;
  double gemm_fp8_fast_accumulation_max_efficiency = 0.0;
  int64_t gemm_tile_m = 128;
  int64_t gemm_tile_n = 128;
  double gemm_k_half = 0.0;           // K at which a bf16 GEMM's per-tile efficiency halves: K/(K + k_half)
  // The fused attention kernel the GPU's frameworks run (training.attention flash), and
  // FlashAttention-2's, FlashAttention-3's and FlashAttention in Triton's where the catalog gives
  // them (forward 0: not known for this GPU).
  AttentionKernelEfficiency fused_attention;
  AttentionKernelEfficiency flash2;
  AttentionKernelEfficiency flash3;
  AttentionKernelEfficiency flash_triton;
  double attention_seq_half = 0.0;  // sequence at which attention efficiency halves, any kernel
  // Query rows per thread block (forward; key rows in backward): one block per SM at a time, so
  // few heads × blocks leave SMs idle and, under a causal mask, the longest row of tiles bounds
  // the kernel.
  int64_t attention_tile_rows = 0;
  // The figures `kernel` runs at (the fused kernel's for flash and unfused).
  const AttentionKernelEfficiency& attention(AttentionKernel kernel) const {
    switch (kernel) {
      case AttentionKernel::kFlash2: return flash2;
      case AttentionKernel::kFlash3: return flash3;
      case AttentionKernel::kFlashTriton: return flash_triton;
      default: return fused_attention;
    }
  }
  double memory_bandwidth_efficiency = 0.0;  // of the HBM bandwidth, for streaming kernels
  // Compute-bound throughput kept under sustained load, against the short bursts the
  // efficiencies above (and measured profiles) come from: at its power limit a GPU runs below
  // its boost clock.
  double sustained_compute_fraction = 1.0;
  // The same for fp8 compute-bound kernels: fp8 GEMMs hold the power limit at a lower clock
  // (equal to the above where the catalog does not say).
  double sustained_fp8_compute_fraction = 1.0;
  double sustained_fraction(DType dtype) const {
    return dtype == DType::kFp8 ? sustained_fp8_compute_fraction : sustained_compute_fraction;
  }
  // The spread of that sustained throughput from chip to chip, one standard deviation as a
  // fraction of the mean: at the same power limit chips hold different clocks (0: not known).
  double sustained_compute_spread = 0.0;
  // How much longer compute takes while a kernel holding `communication_sms` SMs or more (a
  // collective's) runs beside it on the same GPU, taking SMs and memory bandwidth: time × (1 +
  // communication_interference). A kernel that holds fewer slows compute in proportion.
  double communication_interference = 0.0;
  // GEMM kernels launch one thread block per SM, each working through a fixed share of the
  // tiles (persistent kernels with a static schedule, as Hopper's cuBLAS runs them). While a
  // communication kernel holds `communication_sms` SMs, the blocks that find none wait until
  // others finish: the GEMM runs in two waves.
  bool gemm_persistent = false;
  int64_t communication_sms = 0;  // SMs a collective's (NCCL) kernel holds, sharing none
  // SMs a send/recv kernel holds: NCCL runs every peer of a communicator on the channels (a
  // thread block each) of its slowest path, few when the communicator spans NVLink domains and
  // more when it lies within one. Where the catalog does not say, communication_sms.
  int64_t send_recv_network_sms = 0;
  int64_t send_recv_nvlink_sms = 0;
};

struct GpuSpec {
  std::string name;
  std::string description;
  std::string vendor;
  std::string architecture;
  Bytes memory_capacity;
  BytesPerSecond memory_bandwidth;
  int sm_count = 0;
  Hertz boost_clock;
  Bytes l2_cache;
  Watts power;
  // Dense peak per dtype, indexed by DType; absent where the GPU has no such units (fp8 on A100).
  std::array<std::optional<FlopPerSecond>, 5> peak_dense;
  KernelEfficiency kernels;
  std::string intra_node_link;  // the catalog link of its usual node (hardware/catalog/links)
  std::string profile;          // a measured profile used by default (hardware/profiles), or ""
  // Citations by key, and the source cited for each field ("peak_dense.bf16" → "klockwood").
  std::map<std::string, std::string> sources;
  std::map<std::string, std::string> field_sources;

  std::optional<FlopPerSecond> peak(DType dtype) const { return peak_dense[static_cast<int>(dtype)]; }
};

// The memory a GPU may have: from 1 MiB to 1 PiB, so that byte counts stay exact in 64 bits.
inline constexpr Bytes kLeastGpuMemory = Bytes(1 << 20);
inline constexpr Bytes kMostGpuMemory = Bytes(static_cast<double>(int64_t{1} << 50));
// Fails `key` of `map` unless `capacity` lies in those bounds.
void check_gpu_memory(YamlMap& map, std::string_view key, Bytes capacity);

// Reads a GPU mapping (catalog file or inline scenario form). Every quantity may be a plain
// value or {value, source, note}; `source` is a key of `sources:` or a citation.
GpuSpec read_gpu(YamlMap& map);

std::string default_gpu_catalog();  // <data root>/hardware/catalog/gpus
std::vector<std::string> catalog_gpus(const std::string& catalog_dir);
GpuSpec load_gpu_file(const std::string& path);
// A catalog name or a path to a GPU YAML file; throws InputError at `where` listing the catalog.
GpuSpec resolve_gpu(const std::string& reference, const std::string& catalog_dir, const SourceLocation& where);
// The file a `gpu:` string names (a catalog file, or the path relative to `where`), which
// resolve_gpu reads; throws as it does.
std::string gpu_file(const std::string& reference, const std::string& catalog_dir,
                     const SourceLocation& where);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_GPU_SPEC_H_
