// How a GEMM's output tiles fill the GPU: tile padding, wave quantization and split-K (NVIDIA,
// "Matrix Multiplication Background User's Guide"). Shared by the op timer's roofline and the
// profile fits, which model GEMMs the same way.
#ifndef PACELINE_HARDWARE_GEMM_TILING_H_
#define PACELINE_HARDWARE_GEMM_TILING_H_

#include "base/kernel_shapes.h"
#include "hardware/gpu_spec.h"

namespace paceline {

struct GemmTiling {
  double utilization = 1.0;  // padding × wave fill: the share of issued tile work that is real
  double k_per_part = 0.0;   // K each split-K part reduces over
};

// Tiles of tile_m × tile_n over the SMs; when tiles are fewer than SMs, K is split over up to
// SMs/tiles parts (split-K / stream-K).
GemmTiling gemm_tiling(const GemmShape& shape, const GpuSpec& gpu);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_GEMM_TILING_H_
