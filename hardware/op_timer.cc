#include "hardware/op_timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "base/check.h"

namespace paceline {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Flop attention_flop(const AttentionShape& s) {
  double flop = 4.0 * s.batch * s.heads * static_cast<double>(s.seq_q) * s.seq_kv * s.head_dim;
  if (s.causal) flop *= 0.5;
  if (s.backward) flop *= 2.5;
  return Flop(flop);
}

FlopPerSecond OpTimer::peak_for(DType dtype) const {
  const std::optional<FlopPerSecond> peak = gpu_.peak(dtype);
  PACELINE_CHECK(peak.has_value(), fmt::format("{} has no {} peak", gpu_.name, to_string(dtype)));
  return *peak;
}

Seconds OpTimer::memory_roofline(Bytes traffic) const {
  return traffic / (gpu_.memory_bandwidth * gpu_.kernels.memory_bandwidth_efficiency);
}

double OpTimer::gemm_efficiency(const GemmShape& s) const {
  const KernelEfficiency& k = gpu_.kernels;
  const int64_t tiles = ceil_div(s.m, k.gemm_tile_m) * ceil_div(s.n, k.gemm_tile_n) * s.count;
  // Too few tiles to fill the GPU: the library splits K across SMs (split-K / stream-K), each
  // part paying its own prologue and epilogue through the K factor.
  const int64_t split = std::max<int64_t>(1, std::min<int64_t>(gpu_.sm_count / tiles, ceil_div(s.k, k.gemm_tile_n)));
  const int64_t waves = ceil_div(tiles * split, gpu_.sm_count);
  const double padding = static_cast<double>(s.m) * s.n * s.count /
                         (static_cast<double>(tiles) * k.gemm_tile_m * k.gemm_tile_n);
  const double wave_fill = static_cast<double>(tiles * split) / (static_cast<double>(waves) * gpu_.sm_count);
  const double k_per_part = static_cast<double>(s.k) / split;
  const double k_factor = k_per_part / (k_per_part + k.gemm_k_half);
  const double max_efficiency = s.dtype == DType::kFp8 ? k.gemm_fp8_max_efficiency : k.gemm_max_efficiency;
  return max_efficiency * padding * wave_fill * k_factor;
}

Seconds OpTimer::gemm(const GemmShape& s) const {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.count <= 0) return Seconds(0);
  const Flop work(2.0 * s.m * s.n * s.k * s.count);
  const Seconds compute = work / (peak_for(s.dtype) * gemm_efficiency(s));
  const double in = bytes_per_element(s.dtype);
  const double out = s.dtype == DType::kFp8 ? 2.0 : bytes_per_element(s.dtype);
  const Bytes traffic(s.count * (in * (s.m * s.k + s.k * s.n) + out * s.m * s.n));
  return std::max(compute, memory_roofline(traffic)) + gpu_.kernels.overhead;
}

Seconds OpTimer::attention(const AttentionShape& s) const {
  if (s.batch <= 0 || s.heads <= 0 || s.seq_q <= 0 || s.seq_kv <= 0) return Seconds(0);
  const KernelEfficiency& k = gpu_.kernels;
  const double base = s.backward ? k.attention_backward_efficiency : k.attention_forward_efficiency;
  const double length = static_cast<double>(s.seq_kv);
  const double efficiency = base * length / (length + k.attention_seq_half);
  const Seconds compute = attention_flop(s) / (peak_for(s.dtype) * efficiency);
  // Q and O (heads wide) and K, V (kv_heads wide) are read or written at least once.
  const double e = bytes_per_element(s.dtype);
  const Bytes traffic(e * s.batch * s.head_dim *
                      (2.0 * s.heads * s.seq_q + 2.0 * s.kv_heads * s.seq_kv) * (s.backward ? 2.0 : 1.0));
  return std::max(compute, memory_roofline(traffic)) + k.overhead;
}

Seconds OpTimer::memory_bound(MemoryKernel, Bytes traffic) const {
  if (traffic <= Bytes(0)) return Seconds(0);
  return memory_roofline(traffic) + gpu_.kernels.overhead;
}

}  // namespace paceline
