#include "hardware/gemm_tiling.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace paceline {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

double gemm_max_efficiency(const GemmShape& s, const KernelEfficiency& k) {
  if (s.dtype != DType::kFp8) return k.gemm_max_efficiency;
  return s.layout == GemmLayout::kForward ? k.gemm_fp8_fast_accumulation_max_efficiency
                                          : k.gemm_fp8_max_efficiency;
}

double gemm_epilogue_bytes(const GemmShape& s) {
  if (s.accumulates_into) return 2.0 * bytes_per_element(*s.accumulates_into);
  return s.dtype == DType::kFp8 ? 2.0 : bytes_per_element(s.dtype);
}

double gemm_epilogue_k_per_byte(const GemmShape& s, const GpuSpec& gpu) {
  const KernelEfficiency& k = gpu.kernels;
  const std::optional<FlopPerSecond> bf16_peak = gpu.peak(DType::kBf16);
  const std::optional<FlopPerSecond> peak = gpu.peak(s.dtype);
  const double peak_ratio = bf16_peak && peak ? *peak / *bf16_peak : 1.0;
  return k.gemm_k_half / 2.0 * peak_ratio * gemm_max_efficiency(s, k) / k.gemm_max_efficiency;
}

GemmTiling gemm_tiling(const GemmShape& s, const GpuSpec& gpu) {
  const KernelEfficiency& k = gpu.kernels;
  // Row tiles of the GEMMs: the first's extra tokens, where they lie along m, may need more.
  const int64_t first_m = static_cast<int64_t>(s.sum_m()) - s.m * (s.count - 1);
  const int64_t row_tiles =
      ceil_div(s.m, k.gemm_tile_m) * (s.count - 1) + ceil_div(first_m, k.gemm_tile_m);
  const int64_t tiles = row_tiles * ceil_div(s.n, k.gemm_tile_n);
  const int64_t waves = ceil_div(tiles, gpu.sm_count);
  const double sms = static_cast<double>(gpu.sm_count);
  const double tile_elements = static_cast<double>(k.gemm_tile_m) * k.gemm_tile_n;
  const double k_steps = s.sum_k() / static_cast<double>(s.count);
  const double epilogue = gemm_epilogue_bytes(s);
  const GemmTiling data_parallel{.work = s.multiply_adds() / (tile_elements * sms),
                                 .main_loop = static_cast<double>(waves) * k_steps,
                                 .epilogue_bytes = static_cast<double>(waves) * epilogue,
                                 .k_per_byte = gemm_epilogue_k_per_byte(s, gpu),
                                 .blocks = tiles};
  if (s.c_elements() <= 0) return data_parallel;
  const double spread = sms * tile_elements / s.c_elements();  // S: SMs a tile's worth of C
  if (spread <= 1.0) return data_parallel;
  // Cut each tile into S parts, one an SM. The time deals the work out evenly; the kernel
  // launches a whole number of blocks a tile, as many as the SMs hold.
  GemmTiling cut = data_parallel;
  cut.tile_parts = spread;
  cut.main_loop = k_steps / std::sqrt(spread);
  cut.epilogue_bytes = epilogue / spread;
  cut.blocks = std::min<int64_t>(gpu.sm_count, tiles * static_cast<int64_t>(spread));
  // Cut each tile into q parts and split their K loops in S/q.
  const double fixed = epilogue + kGemmFixupBytesPerElement;
  const double q = std::clamp(
      std::pow(2.0 * fixed * data_parallel.k_per_byte * spread / k_steps, 2.0 / 3.0), 1.0, spread);
  GemmTiling split = cut;
  split.tile_parts = q;
  split.k_parts = spread / q;
  split.main_loop = k_steps * std::sqrt(q) / spread;
  split.epilogue_bytes = fixed / q;
  // The fastest; data-parallel on a tie.
  GemmTiling best = data_parallel;
  for (const GemmTiling& other : {cut, split}) {
    if (other.busiest() < best.busiest()) best = other;
  }
  return best;
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
