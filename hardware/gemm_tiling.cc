#include "hardware/gemm_tiling.h"

#include <algorithm>

namespace paceline {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

GemmTiling gemm_tiling(const GemmShape& s, const GpuSpec& gpu) {
  const KernelEfficiency& k = gpu.kernels;
  // Row tiles of the GEMMs: the first's extra tokens, where they lie along m, may need more.
  const int64_t first_m = static_cast<int64_t>(s.sum_m()) - s.m * (s.count - 1);
  const int64_t row_tiles =
      ceil_div(s.m, k.gemm_tile_m) * (s.count - 1) + ceil_div(first_m, k.gemm_tile_m);
  const int64_t tiles = row_tiles * ceil_div(s.n, k.gemm_tile_n);
  const int64_t split = std::max<int64_t>(1, std::min<int64_t>(gpu.sm_count / tiles, ceil_div(s.k, k.gemm_tile_n)));
  const int64_t waves = ceil_div(tiles * split, gpu.sm_count);
  const double padding =
      s.c_elements() / (static_cast<double>(tiles) * k.gemm_tile_m * k.gemm_tile_n);
  const double wave_fill = static_cast<double>(tiles * split) / (static_cast<double>(waves) * gpu.sm_count);
  return GemmTiling{padding * wave_fill, s.sum_k() / static_cast<double>(s.count) / split,
                    tiles * split};
}

double attention_occupancy(const AttentionShape& s, const GpuSpec& gpu) {
  const int64_t rows = s.backward ? s.seq_kv : s.seq_q;
  const int64_t blocks_per_pair = ceil_div(rows, gpu.kernels.attention_tile_rows);
  const int64_t pairs = s.batch * s.heads;
  if (!s.causal) {
    const int64_t blocks = pairs * blocks_per_pair;
    return static_cast<double>(blocks) / (static_cast<double>(ceil_div(blocks, gpu.sm_count)) * gpu.sm_count);
  }
  const double longest = static_cast<double>(blocks_per_pair);
  const double work_per_sm = static_cast<double>(pairs) * longest * (longest + 1.0) / 2.0 / gpu.sm_count;
  return work_per_sm / std::max(longest, work_per_sm);
}

}  // namespace paceline
