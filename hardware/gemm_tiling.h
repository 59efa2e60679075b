// How a kernel's tiles fill the GPU. A GEMM's output tiles: tile padding, wave quantization and
// split-K (NVIDIA, "Matrix Multiplication Background User's Guide"), shared by the op timer's
// roofline and the profile fits, which model GEMMs the same way. A fused attention kernel's
// query (forward) or key (backward) tiles: waves, and under a causal mask the longest tile.
#ifndef PACELINE_HARDWARE_GEMM_TILING_H_
#define PACELINE_HARDWARE_GEMM_TILING_H_

#include "base/kernel_shapes.h"
#include "hardware/gpu_spec.h"

namespace paceline {

struct GemmTiling {
  double utilization = 1.0;  // padding × wave fill: the share of issued tile work that is real
  double k_per_part = 0.0;   // K each split-K part reduces over
  int64_t blocks = 0;        // tiles × split-K parts: the thread blocks a non-persistent kernel launches
};

// Tiles of tile_m × tile_n over the SMs; when tiles are fewer than SMs, K is split over up to
// SMs/tiles parts (split-K / stream-K).
GemmTiling gemm_tiling(const GemmShape& shape, const GpuSpec& gpu);

// The share of the SMs' time a fused attention kernel keeps busy. It runs one thread block per
// SM at a time, each over `tile_rows` rows of one (batch, head) pair. Unmasked, every block does
// the same work and only the last wave idles SMs. Under a causal mask the i-th block of a pair
// does i + 1 units (the diagonal's triangle), the scheduler starts the longest first, and the
// kernel lasts max(longest block, work / SMs).
double attention_occupancy(const AttentionShape& shape, const GpuSpec& gpu);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_GEMM_TILING_H_
