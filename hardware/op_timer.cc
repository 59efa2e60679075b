#include "hardware/op_timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"
#include "hardware/gemm_tiling.h"

namespace paceline {

Flop attention_flop(const AttentionShape& s) {
  // Q·Kᵀ spans the query/key width, P·V the value width: 2 FLOP per multiply-add each.
  double flop = 2.0 * s.batch * s.heads * static_cast<double>(s.seq_q) * s.seq_kv *
                static_cast<double>(s.head_dim + s.value_dim());
  if (s.causal) flop *= 0.5;
  if (s.backward) flop *= s.backward_work_ratio();
  return Flop(flop);
}

double expected_maximum_of_standard_normals(int n) {
  if (n <= 1) return 0.0;
  // ∫ x · n φ(x) Φ(x)^(n-1) dx by Simpson's rule; the density is negligible past ±10.
  const double low = -10.0, high = 10.0;
  const int intervals = 800;
  const double h = (high - low) / intervals;
  double sum = 0.0;
  for (int i = 0; i <= intervals; ++i) {
    const double x = low + i * h;
    const double density = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
    const double below = 0.5 * std::erfc(-x / std::numbers::sqrt2);
    const double weight = (i == 0 || i == intervals) ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0);
    sum += weight * x * n * density * std::pow(below, n - 1);
  }
  return sum * h / 3.0;
}

OpTimer::OpTimer(const GpuSpec& gpu, std::shared_ptr<const KernelProfile> profile, int synchronized_gpus)
    : gpu_(gpu),
      profile_(std::move(profile)),
      slowest_chip_(1.0 - gpu.kernels.sustained_compute_spread * expected_maximum_of_standard_normals(synchronized_gpus)) {}

FlopPerSecond OpTimer::peak_for(DType dtype) const {
  const std::optional<FlopPerSecond> peak = gpu_.peak(dtype);
  PACELINE_CHECK(peak.has_value(), fmt::format("{} has no {} peak", gpu_.name, to_string(dtype)));
  return *peak;
}

Seconds OpTimer::memory_roofline(Bytes traffic) const {
  return traffic / (gpu_.memory_bandwidth * gpu_.kernels.memory_bandwidth_efficiency);
}

Seconds OpTimer::transferred(Seconds measured, bool compute_bound, DType dtype,
                             double power_slowdown) const {
  // By the ratio of the figures of the GPU it was measured on to this one's: another GPU of the
  // architecture, or this one with figures a scenario overrides (1 exactly where they agree).
  const GpuSpec& from = profile_->gpu();
  const std::optional<FlopPerSecond> measured_peak = from.peak(dtype);
  double ratio = !compute_bound  ? from.memory_bandwidth / gpu_.memory_bandwidth
                 : measured_peak ? *measured_peak / peak_for(dtype)
                                 : 1.0;  // a peak the scenario gave where that GPU has none
  return measured * ratio * power_slowdown;
}

namespace {

// A kernel's time at the power limit, compute there (`compute` in a burst over the sustained
// fraction) or memory, whichever binds, and how much slower that is than in a burst: a ratio
// growing smoothly from 1 where memory binds to 1/sustained where compute does.
struct AtPowerLimit {
  Seconds time;
  bool compute_bound = false;
  double slowdown = 1.0;
};
AtPowerLimit at_power_limit(Seconds compute, double sustained_fraction, Seconds memory) {
  const Seconds compute_at_power = compute / sustained_fraction;
  const Seconds time = std::max(compute_at_power, memory);
  return {time, compute_at_power > memory, time / std::max(compute, memory)};
}

// One GEMM of all a group's rows at the groups' mean k (rounded to a whole element), with one
// weight matrix: what a profile answers for a group (KernelProfile::gemm).
GemmShape one_gemm_of_all_rows(const GemmShape& s) {
  GemmShape one = s;
  one.m = static_cast<int64_t>(s.sum_m());
  one.k = std::max<int64_t>(1, std::llround(s.sum_k() / static_cast<double>(s.count)));
  one.count = 1;
  one.first_extra_tokens = 0;
  one.kernel_per_gemm = false;
  return one;
}

}  // namespace

double OpTimer::gemm_efficiency(const GemmShape& s) const {
  return gemm_max_efficiency(s, gpu_.kernels) * gemm_tiling(s, gpu_).utilization();
}

OpTimer::Roofline OpTimer::gemm_roofline(const GemmShape& s) const {
  // The busiest SM's steps (gemm_tiling), each a tile's multiply-adds on every SM at the ceiling:
  // the GEMM's work over its efficiency, without the round trip through the work.
  const KernelEfficiency& k = gpu_.kernels;
  const Flop step(2.0 * static_cast<double>(k.gemm_tile_m) * k.gemm_tile_n * gpu_.sm_count);
  const Seconds compute =
      step * gemm_tiling(s, gpu_).busiest() / (peak_for(s.dtype) * gemm_max_efficiency(s, k));
  const double in = bytes_per_element(s.dtype);
  const Seconds memory = memory_roofline(
      Bytes(in * (s.a_elements() + s.b_elements()) + gemm_epilogue_bytes(s) * s.c_elements()));
  // Compute at the sustained clock against memory: deciding at burst clocks would jump by the
  // sustained fraction where the two cross, and let a larger GEMM turn memory-bound and faster.
  const AtPowerLimit at_power = at_power_limit(compute, sustained(s.dtype), memory);
  return {at_power.time, memory, at_power.compute_bound, at_power.slowdown};
}

KernelTime OpTimer::gemm(const GemmShape& s) const {
  // The first GEMM may be the only one with tokens (the others' m or k 0).
  if (s.count <= 0 || s.n <= 0 || s.sum_m() <= 0 || s.sum_k() <= 0) return {};
  const Roofline modelled = gemm_roofline(s);
  const KernelEfficiency& k = gpu_.kernels;
  // Kernels beyond the one a grouped GEMM launches.
  const Seconds more_launches =
      k.overhead * static_cast<double>(s.kernel_per_gemm ? s.count - 1 : 0);
  // A kernel per GEMM launches one GEMM's blocks (the first's, the largest); a grouped kernel,
  // all of them.
  GemmShape kernel = s;
  if (s.kernel_per_gemm) kernel.count = 1;
  const bool persistent =
      k.gemm_persistent && std::min<int64_t>(gemm_tiling(kernel, gpu_).blocks, gpu_.sm_count) >
                               gpu_.sm_count - k.communication_sms;
  if (profile_) {
    // Profiles measure GEMMs that write C once, and fp8 ones only in the forward layout, with
    // fast accumulation; a GEMM that differs takes the model's ratio of the two on top.
    GemmShape as_measured = s;
    as_measured.accumulates_into.reset();
    if (s.dtype == DType::kFp8) as_measured.layout = GemmLayout::kForward;
    if (const std::optional<Seconds> measured = profile_->gemm(as_measured)) {
      const Roofline plain = gemm_roofline(as_measured);
      // The profile times one kernel of all the rows, its overhead included; for a group, one
      // GEMM of all the groups' rows with a single weight matrix (KernelProfile::gemm).
      const bool grouped = s.count > 1;
      const Roofline one = grouped ? gemm_roofline(one_gemm_of_all_rows(as_measured)) : plain;
      // The group's kernel reads `count` of what that GEMM reads once (weight matrices; in the
      // weight gradient, output gradients) and pads each group's rows to whole tiles: it takes
      // the model's ratio of the two kernels on top, each with its overhead (the measurement
      // holds one), as the roofline counts `count`.
      const double group = grouped ? (plain.time + k.overhead) / (one.time + k.overhead) : 1.0;
      const Seconds time = transferred(*measured, one.compute_bound, s.dtype, one.power_slowdown) *
                           group * (modelled.time / plain.time);
      // Never faster than its operands stream from memory: a group carried by the model to
      // traffic the profile never measured, or a shape its fit extrapolates to (whose model has
      // no memory term), nor a point measured with its operands warm in L2 as a benchmark leaves
      // them, which a training step's do not stay.
      return {std::max(time, modelled.memory) + more_launches, true, persistent};
    }
  }
  return {modelled.time + k.overhead + more_launches, false, persistent};
}

KernelTime OpTimer::attention(const AttentionShape& s) const {
  if (s.batch <= 0 || s.heads <= 0 || s.seq_q <= 0 || s.seq_kv <= 0) return {};
  const KernelEfficiency& k = gpu_.kernels;
  const AttentionKernelEfficiency& kernel = k.attention(s.kernel);
  const double base = kernel.efficiency(s.backward);
  PACELINE_CHECK(base > 0.0, "an attention kernel timed on a GPU without its efficiencies (the scenario should have failed)");
  const double length = static_cast<double>(s.seq_kv);
  const double ceiling = s.causal ? base * kernel.causal_ratio : base;
  const double seq_half = s.causal ? kernel.causal_seq_half : k.attention_seq_half;
  const double efficiency = ceiling * length / (length + seq_half) * attention_occupancy(s, gpu_);
  const double padding = static_cast<double>(attention_kernel_head_dim(s.kernel, s.head_dim)) / s.head_dim;
  const Seconds compute = attention_flop(s) * padding / (peak_for(s.dtype) * efficiency);
  // Q and O (heads wide) and K, V (kv_heads wide) are read or written at least once.
  const double e = bytes_per_element(s.dtype);
  const double widths = static_cast<double>(s.head_dim + s.value_dim());
  const Seconds memory = memory_roofline(Bytes(e * s.batch * widths *
                                               (s.heads * s.seq_q + s.kv_heads * static_cast<double>(s.seq_kv)) *
                                               (s.backward ? 2.0 : 1.0)));
  const AtPowerLimit at_power =
      at_power_limit(compute, kernel.power_limited ? sustained(s.dtype) : 1.0, memory);
  // A profile times the kernels its rows measured (cuDNN's fused attention, FlashAttention-2
  // through PyTorch), not FlashAttention-3 or Triton's; one that keeps below the power limit keeps
  // the measured speed.
  if (profile_) {
    if (const std::optional<Seconds> measured = profile_->attention(s)) {
      return {transferred(*measured, at_power.compute_bound, s.dtype, at_power.slowdown), true};
    }
  }
  return {at_power.time + k.overhead, false};
}

KernelTime OpTimer::memory_bound(MemoryKernel kernel, Bytes traffic, int kernels) const {
  if (traffic <= Bytes(0)) return {};
  const Seconds launches = gpu_.kernels.overhead * static_cast<double>(kernels - 1);
  if (profile_) {
    if (const std::optional<Seconds> measured = profile_->memory_bound(kernel, traffic)) {
      return {transferred(*measured, /*compute_bound=*/false, DType::kBf16, 1.0) + launches, true};
    }
  }
  return {memory_roofline(traffic) + gpu_.kernels.overhead + launches, false};
}

}  // namespace paceline
