// OpTimer: how long one kernel takes on one GPU.
//
// With a measured KernelProfile (paceline-calibrate) a kernel's time is read from it,
// interpolated in log space inside the measured grid and following the profile's own fitted
// model outside it. Without one — or for kernels the profile does not cover — it is a roofline
// (compute time against memory time) with shape-dependent efficiency, plus a fixed per-kernel
// overhead, every figure from the GpuSpec (and so from the catalog, with its source):
//
//   GEMM        2·M·N·K·count / (peak[dtype] · e_max · utilization), utilization the share of
//               the busiest SM's time spent on the GEMM's own multiply-adds (gemm_tiling): its
//               tile_m × tile_n tiles in waves over the SMs (tile padding and wave quantization,
//               NVIDIA, "Matrix Multiplication Background User's Guide"), each wave K steps of
//               the main loop and an epilogue of k_half' steps; where the tiles are fewer than the
//               SMs, spread over all of them by smaller tiles and split K loops, whose partial
//               sums pay a fix-up (split-K / stream-K). k_half' = k_half · c/2 ·
//               (peak[dtype]·e_max[dtype]) / (peak[bf16]·e_max[bf16]): the catalog's k_half is
//               a bf16 GEMM's per-tile epilogue, writing c = 2 bytes per output element; fp8
//               GEMMs run their main loop twice as fast, and a weight-gradient GEMM that
//               accumulates into an fp32 buffer moves c = 8 (read and write). e_max[fp8] is
//               the fast-accumulation ceiling for forward GEMMs and the split-accumulation one
//               for backward GEMMs, as Transformer Engine and torchao run them
//   attention   FLOPs / (peak[bf16] · e_fwd|bwd · s/(s + seq_half) · occupancy); FLOPs =
//               4·b·h·s_q·s_kv·d, halved when causal, ×2.5 for backward (five products against
//               two); e, causal_ratio and causal_seq_half from the kernel's figures (the fused
//               kernel's may come from a profile, FlashAttention-2's, -3's and Triton's never);
//               causal: e · causal_ratio · s/(s + causal_seq_half) instead; occupancy: how its
//               tiles of tile_rows rows fill the SMs (attention_occupancy); FlashAttention-2, -3
//               and Triton's spend the FLOPs of the padded head dim their kernels are built for
//   memory      bytes / (HBM bandwidth · e_bw)
// each never faster than its memory roofline, plus `overhead` (a GEMM of `count` kernels, each its
// own launch — `kernel_per_gemm` — once per kernel).
//
// A profile measures GEMMs with one weight matrix. A grouped GEMM (`count` GEMMs, each with its
// own weights: a rank's experts) is looked up as one GEMM of all its groups' rows and takes the
// model's ratio of the group's kernel to that GEMM, overheads included: the other groups' weights
// it reads and each group's rows count as the roofline counts them (padded to whole tiles from
// one wave of them up). No GEMM timed from a profile is faster than its operands stream from
// memory.
//
// On GPUs whose GEMMs are persistent kernels (a thread block per SM, a static share of the tiles
// each), a GEMM launching more blocks than the SMs communication kernels leave free is marked
// `persistent` (with `kernel_per_gemm`, one of its GEMMs' blocks): beside communication its late
// blocks wait for a second wave.
//
// A profile measured on another GPU of the same family stands in for this one scaled by the
// peak ratios: compute-bound kernels by the dtype's dense peak, memory-bound ones by HBM
// bandwidth. Compute-bound kernels keep the GPU's sustained fraction of their short-burst speed
// (`sustained_compute_fraction`, `sustained_fp8_compute_fraction` for fp8): under hours of dense
// math a GPU runs at its power limit, below its boost clock. A step that synchronizes n GPUs runs
// at the pace of the slowest of them: chips hold different clocks at the same power limit
// (`sustained_compute_spread`, σ), so compute-bound kernels are timed on the expected slowest of
// n chips, σ · E[max of n standard normals] below the mean chip. An attention kernel that draws
// too little to reach the limit (the catalog's `<kernel>_power_limited: false`) keeps its
// short-burst speed on every chip.
#ifndef PACELINE_HARDWARE_OP_TIMER_H_
#define PACELINE_HARDWARE_OP_TIMER_H_

#include <memory>

#include "base/kernel_shapes.h"
#include "base/units.h"
#include "hardware/gpu_spec.h"
#include "hardware/kernel_profile.h"

namespace paceline {

// FLOPs of a fused attention kernel of this shape (forward or backward).
Flop attention_flop(const AttentionShape& shape);

// E[max of n independent standard normal variables]: 0 for one, 1/√π for two, 1.42 for eight.
double expected_maximum_of_standard_normals(int n);

// A kernel's time, whether it came from a measured profile, and whether it is a persistent
// kernel that needs more SMs than communication kernels leave it (GpuSpec: gemm_persistent).
struct KernelTime {
  Seconds time;
  bool measured = false;
  bool persistent = false;
};

class OpTimer {
 public:
  // `profile` (optional) was measured on `profile->gpu()`, which may differ from `gpu`;
  // `synchronized_gpus`: the GPUs that wait for one another every step (the job's).
  explicit OpTimer(const GpuSpec& gpu, std::shared_ptr<const KernelProfile> profile = nullptr,
                   int synchronized_gpus = 1);

  KernelTime gemm(const GemmShape& shape) const;
  KernelTime attention(const AttentionShape& shape) const;
  // `traffic` moved by `kernels` launches (an eager composite), each paying the kernel overhead.
  KernelTime memory_bound(MemoryKernel kernel, Bytes traffic, int kernels = 1) const;
  // The efficiency the roofline model assigns to a GEMM shape (of the dense peak).
  double gemm_efficiency(const GemmShape& shape) const;
  const GpuSpec& gpu() const { return gpu_; }
  const KernelProfile* profile() const { return profile_.get(); }

 private:
  struct Roofline {
    Seconds time;    // at sustained clocks, without the kernel overhead
    Seconds memory;  // every operand streamed once at the effective memory bandwidth
    bool compute_bound = false;
    // How much slower than in a short burst: time over the longer of burst compute and memory.
    double power_slowdown = 1.0;
  };

  FlopPerSecond peak_for(DType dtype) const;
  Seconds memory_roofline(Bytes traffic) const;
  Roofline gemm_roofline(const GemmShape& shape) const;
  // Profile time on the profile's GPU carried to this one, slowed by the model's
  // `power_slowdown` of the kernel at the power limit against the short bursts the profile ran
  // (a ratio that grows smoothly from 1 where memory binds to 1/sustained where compute does).
  Seconds transferred(Seconds measured, bool compute_bound, DType dtype,
                      double power_slowdown) const;
  // Compute-bound throughput of the slowest synchronized chip, of its short-burst speed.
  double sustained(DType dtype) const { return gpu_.kernels.sustained_fraction(dtype) * slowest_chip_; }

  GpuSpec gpu_;
  std::shared_ptr<const KernelProfile> profile_;
  double slowest_chip_ = 1.0;  // the slowest synchronized chip's throughput, of the mean chip's
};

}  // namespace paceline

#endif  // PACELINE_HARDWARE_OP_TIMER_H_
