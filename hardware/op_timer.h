// OpTimer: how long one kernel takes on one GPU — a roofline (compute time against memory
// time) with shape-dependent efficiency, plus a fixed per-kernel overhead. Every figure comes
// from the GpuSpec (and so from the catalog, with its source).
//
//   GEMM        2·M·N·K·count / (peak[dtype] · e_max · padding · wave_fill · K'/(K' + k_half))
//               padding and wave_fill: tile and wave quantization of tile_m × tile_n output
//               tiles over the SMs (NVIDIA, "Matrix Multiplication Background User's Guide");
//               when tiles are fewer than SMs, K is split over up to SMs/tiles parts
//               (split-K / stream-K) and K' = K / parts
//   attention   FLOPs / (peak[bf16] · e_fwd|bwd · s/(s + seq_half)); FLOPs = 4·b·h·s_q·s_kv·d,
//               halved when causal, ×2.5 for backward (five products against two)
//   memory      bytes / (HBM bandwidth · e_bw)
// each never faster than its memory roofline, plus `overhead`.
#ifndef PACELINE_HARDWARE_OP_TIMER_H_
#define PACELINE_HARDWARE_OP_TIMER_H_

#include "base/kernel_shapes.h"
#include "base/units.h"
#include "hardware/gpu_spec.h"

namespace paceline {

// FLOPs of a fused attention kernel of this shape (forward or backward).
Flop attention_flop(const AttentionShape& shape);

class OpTimer {
 public:
  explicit OpTimer(const GpuSpec& gpu) : gpu_(gpu) {}

  Seconds gemm(const GemmShape& shape) const;
  Seconds attention(const AttentionShape& shape) const;
  Seconds memory_bound(MemoryKernel kernel, Bytes traffic) const;
  // The efficiency the GEMM model assigns to a shape (of the dense peak).
  double gemm_efficiency(const GemmShape& shape) const;
  const GpuSpec& gpu() const { return gpu_; }

 private:
  FlopPerSecond peak_for(DType dtype) const;
  Seconds memory_roofline(Bytes traffic) const;

  GpuSpec gpu_;
};

}  // namespace paceline

#endif  // PACELINE_HARDWARE_OP_TIMER_H_
