// Tests hardware/op_timer.h: GEMM, attention and memory-bound times against their formulas.
#include "hardware/op_timer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>

namespace paceline {
namespace {

GpuSpec h100() { return resolve_gpu("h100-sxm5-80gb", default_gpu_catalog(), {}); }
GpuSpec a100() { return resolve_gpu("a100-sxm4-80gb", default_gpu_catalog(), {}); }

TEST(OpTimer, LargeSquareGemmRunsAtPeakTimesCatalogEfficiency) {
  // 8192³ bf16 on an H100: tiles of 128×256 → 64·32 = 2048 tiles over 132 SMs = 16 waves
  // (15.5 rounded up), utilization 2048/(16·132) = 0.9697; K factor 8192/(8192 + k_half).
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const GemmShape shape{8192, 8192, 8192, 1, DType::kBf16};
  const KernelEfficiency& k = gpu.kernels;
  const double utilization = 2048.0 / (16.0 * 132.0);
  const double efficiency = k.gemm_max_efficiency * utilization * 8192.0 / (8192.0 + k.gemm_k_half);
  EXPECT_NEAR(timer.gemm_efficiency(shape), efficiency, 1e-12);
  // Under sustained load a compute-bound kernel keeps the catalog's sustained fraction.
  const Seconds expected = Flop(2.0 * 8192.0 * 8192.0 * 8192.0) / (*gpu.peak(DType::kBf16) * efficiency) /
                               k.sustained_compute_fraction +
                           k.overhead;
  EXPECT_NEAR(timer.gemm(shape).time / Seconds(1), expected / Seconds(1), 1e-15);
  // And it lands between the sustained and the short-burst speeds measured on Hopper: 663 to
  // 798 TFLOP/s (catalog sources).
  const double tflops = 2.0 * 8192.0 * 8192.0 * 8192.0 / (timer.gemm(shape).time / Seconds(1)) / 1e12;
  EXPECT_GT(tflops, 650.0);
  EXPECT_LT(tflops, 850.0);
}

TEST(OpTimer, AGemmIsBoundByItsComputeAtThePowerLimit) {
  // 256 x 16384 x 16384 bf16 on an H100: its compute in a burst (170 us) is below its memory time
  // (184 us), at the power limit (200 us) above it. It runs at the latter.
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const GemmShape shape{256, 16384, 16384, 1, DType::kBf16};
  const Seconds burst =
      Flop(2.0 * 256 * 16384 * 16384) / (*gpu.peak(DType::kBf16) * timer.gemm_efficiency(shape));
  const Seconds at_power = burst / gpu.kernels.sustained_compute_fraction;
  const Seconds memory = Bytes(2.0 * (256 * 16384 + 16384 * 16384 + 256 * 16384)) /
                         (gpu.memory_bandwidth * gpu.kernels.memory_bandwidth_efficiency);
  ASSERT_LT(burst, memory);
  ASSERT_GT(at_power, memory);
  EXPECT_NEAR(timer.gemm(shape).time / Seconds(1), (at_power + gpu.kernels.overhead) / Seconds(1),
              1e-12);
}

TEST(OpTimer, Mi300xGemmsRunAtTheSpeedMeasuredAtItsPowerLimit) {
  // MI300X's GEMM efficiencies were measured back to back at the 750 W limit (MAMF: 668.4
  // TFLOP/s at 10240x15360x8192; AMD's MAF: 708 at 4096x4864x32896, median clock 1207 MHz), so
  // they take no further sustained-load loss: no more than 5% below either.
  const OpTimer timer(resolve_gpu("mi300x", default_gpu_catalog(), {}));
  const auto tflops = [&](int64_t m, int64_t n, int64_t k) {
    return 2.0 * m * n * k / (timer.gemm({m, n, k, 1, DType::kBf16}).time / Seconds(1)) / 1e12;
  };
  EXPECT_GT(tflops(10240, 15360, 8192), 0.95 * 668.4);
  EXPECT_GT(tflops(4096, 4864, 32896), 0.95 * 708.0);
}

TEST(OpTimer, ExpertGemmsOnTheirOwnKernelsEachPayTheKernelOverhead) {
  // Transformer Engine's grouped GEMMs on an H100 (pull request 2045, TE 2.7, CUDA 12.9, bf16,
  // short bursts): 8 GEMMs of 4096 x 768 x 2048 at 627.9 TFLOP/s as GroupedLinear runs them, a
  // cuBLAS kernel each over several streams, and at 650.6 as one CUTLASS grouped kernel; 16 of
  // 2048 x 768 x 2048 at 553.9 and 636.9. The model's grouped kernel runs both at 735 (13% and
  // 15% fast); a kernel per expert adds the 2 us kernel overhead per added kernel, where the
  // measurements show 0.8 and 1.6 us, and lands at 668 and 605 (6% and 9% fast).
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const KernelEfficiency& k = gpu.kernels;
  struct Case {
    int64_t experts, rows;
    double per_expert_tflops, grouped_tflops;
  };
  for (const Case c : {Case{8, 4096, 627.9, 650.6}, Case{16, 2048, 553.9, 636.9}}) {
    const double flop = 2.0 * c.experts * c.rows * 768.0 * 2048.0;
    // Compute at burst clocks, as the benchmark ran: the overheads are not clock-bound.
    const auto burst_tflops = [&](const GemmShape& shape) {
      const Seconds overheads =
          k.overhead * static_cast<double>(shape.kernel_per_gemm ? shape.count : 1);
      const Seconds burst =
          (timer.gemm(shape).time - overheads) * k.sustained_compute_fraction + overheads;
      return flop / (burst / Seconds(1)) / 1e12;
    };
    GemmShape shape{c.rows, 768, 2048, c.experts, DType::kBf16};
    const Seconds grouped = timer.gemm(shape).time;
    const double grouped_tflops = burst_tflops(shape);
    EXPECT_GT(grouped_tflops, c.grouped_tflops) << c.experts;
    EXPECT_LT(grouped_tflops, 1.16 * c.grouped_tflops) << c.experts;
    shape.kernel_per_gemm = true;
    EXPECT_NEAR((timer.gemm(shape).time - grouped) / Seconds(1),
                (k.overhead * static_cast<double>(c.experts - 1)) / Seconds(1), 1e-15);
    // The catalog's 2 us a kernel overstates the gap between the measured kernels.
    const double measured_gap_s =
        flop / (c.per_expert_tflops * 1e12) - flop / (c.grouped_tflops * 1e12);
    EXPECT_GT((k.overhead * static_cast<double>(c.experts - 1)) / Seconds(1), measured_gap_s)
        << c.experts;
    const double per_expert_tflops = burst_tflops(shape);
    EXPECT_GT(per_expert_tflops, c.per_expert_tflops) << c.experts;
    EXPECT_LT(per_expert_tflops, 1.10 * c.per_expert_tflops) << c.experts;
  }
  // One expert a rank is one kernel either way.
  GemmShape one{4096, 768, 2048, 1, DType::kBf16};
  const Seconds alone = timer.gemm(one).time;
  one.kernel_per_gemm = true;
  EXPECT_EQ(timer.gemm(one).time, alone);
}

TEST(OpTimer, AKernelPerExpertLaunchesOneExpertsBlocks) {
  // 16 experts of 2048 x 768 x 2048 on an H100: grouped, 16 · 48 tiles of 128 x 256, more blocks
  // than the 116 SMs an NCCL kernel leaves, so a persistent kernel beside one waits for a second
  // wave; a kernel per expert spreads its 48 tiles over two blocks each, 96 blocks, which fit.
  const GpuSpec gpu = h100();
  ASSERT_TRUE(gpu.kernels.gemm_persistent);
  ASSERT_EQ(gpu.sm_count - gpu.kernels.communication_sms, 116);
  const OpTimer timer(gpu);
  GemmShape experts{2048, 768, 2048, 16, DType::kBf16};
  EXPECT_TRUE(timer.gemm(experts).persistent);
  experts.kernel_per_gemm = true;
  EXPECT_FALSE(timer.gemm(experts).persistent);
}

TEST(OpTimer, ABusiestExpertsExtraTokensCostOnlyItsOwnTiles) {
  // 64 experts of 512 x 1536 x 2048 on an H100: 64 · 4 · 6 = 1536 tiles, 12 waves of 132 SMs.
  // One more token for the first expert adds its 6 tiles, still 12 waves; one more for every
  // expert makes each 5 row tiles, 1920 tiles in 15 waves.
  const OpTimer timer(h100());
  const GemmShape even{512, 1536, 2048, 64, DType::kBf16};
  GemmShape first = even;
  first.first_extra_tokens = 1;
  const GemmShape every{513, 1536, 2048, 64, DType::kBf16};
  EXPECT_DOUBLE_EQ(first.multiply_adds(), (512.0 * 64 + 1) * 1536 * 2048);
  const double base = timer.gemm(even).time / Seconds(1);
  EXPECT_NEAR(timer.gemm(first).time / Seconds(1), base, 1e-3 * base);
  EXPECT_GT(timer.gemm(every).time / Seconds(1), 1.2 * base);
  // Where only the first GEMM has tokens, it alone is timed.
  GemmShape alone{0, 1536, 2048, 64, DType::kBf16};
  alone.first_extra_tokens = 512;
  EXPECT_NEAR(timer.gemm(alone).time / Seconds(1),
              timer.gemm(GemmShape{512, 1536, 2048, 1, DType::kBf16}).time / Seconds(1), 1e-12);
  // In the weight-gradient layout the tokens are reduced over: the extra ones lengthen the K loop
  // of the first GEMM's tiles, not their count.
  GemmShape weight_gradient{2048, 1536, 512, 64, DType::kBf16, GemmLayout::kWeightGradient};
  const double weight_base = timer.gemm(weight_gradient).time / Seconds(1);
  weight_gradient.first_extra_tokens = 512;
  EXPECT_DOUBLE_EQ(weight_gradient.multiply_adds(), 2048.0 * 1536 * (512.0 * 64 + 512));
  EXPECT_GT(timer.gemm(weight_gradient).time / Seconds(1), weight_base);
  EXPECT_LT(timer.gemm(weight_gradient).time / Seconds(1), 1.03 * weight_base);
}

// The H200 and its measured profile (paceline-calibrate's cuBLASLt GEMMs, one weight matrix each).
OpTimer h200_with_its_profile() {
  const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  return OpTimer(gpu, std::make_shared<const KernelProfile>(
                          KernelProfile::load("hardware/profiles/h200-sxm-141gb.yaml", gpu)));
}

// MoE expert GEMMs whose weights outweigh their tokens: count experts of m tokens × n × k.
struct ExpertGroup {
  int64_t count, m, n, k;
};
constexpr ExpertGroup kWeightHeavyGroups[] = {
    {16, 16, 1536, 2048}, {8, 32, 4096, 7168}, {32, 16, 2048, 7168}};

TEST(OpTimer, AGroupedGemmFromAProfileReadsEveryExpertsWeights) {
  // The profile measured dense GEMMs with one weight matrix; a group of experts reads one each.
  // 16 × (16 × 1536 × 2048) bf16: 16·1536·2048 weights + 256·2048 inputs + 256·1536 outputs =
  // 51.25 M elements, 102.5 MB, at the H200's 4.8 TB/s no faster than 21.4 us (the profile's
  // 256 × 1536 × 2048 GEMM took 6.5 us). 8 × (32 × 4096 × 7168): 237.8 M elements, 475.6 MB,
  // 99.1 us (profile 27.7 us); 32 × (16 × 2048 × 7168): 474.5 M elements, 949 MB, 197.7 us
  // (profile 25.6 us). Every layout reads as much; a weight gradient adding into an fp32 buffer
  // reads and writes 8 bytes per output element.
  const OpTimer timer = h200_with_its_profile();
  const GpuSpec& gpu = timer.gpu();
  for (const ExpertGroup g : kWeightHeavyGroups) {
    const GemmShape forward{g.m, g.n, g.k, g.count, DType::kBf16};
    const GemmShape data_gradient{g.m, g.k, g.n, g.count, DType::kBf16, GemmLayout::kDataGradient};
    const GemmShape weight_gradient{
        g.k, g.n, g.m, g.count, DType::kBf16, GemmLayout::kWeightGradient, DType::kFp32};
    for (const GemmShape& shape : {forward, data_gradient, weight_gradient}) {
      const double c_bytes = shape.accumulates_into ? 8.0 : 2.0;
      const Bytes operands(2.0 * (shape.a_elements() + shape.b_elements()) +
                           c_bytes * shape.c_elements());
      const KernelTime grouped = timer.gemm(shape);
      EXPECT_TRUE(grouped.measured);
      EXPECT_GE(grouped.time, operands / gpu.memory_bandwidth)
          << g.count << " x " << shape.m << " x " << shape.n << " x " << shape.k;
      // And never faster than one of its GEMMs alone.
      GemmShape one = shape;
      one.count = 1;
      EXPECT_GE(grouped.time, timer.gemm(one).time)
          << g.count << " x " << shape.m << " x " << shape.n << " x " << shape.k;
    }
  }
}

TEST(OpTimer, AGroupedGemmFromAProfileTakesTheModelsRatioToOneGemmOfItsRows) {
  // The profile times one GEMM of all the group's rows; the group takes the roofline model's ratio
  // of its kernel to that GEMM (each with its kernel overhead) on top: its other experts' weights
  // and each expert's rows padded to whole tiles, as the model counts `count`. Where that ratio
  // leaves the group faster than its operands stream, the memory time bounds it.
  const OpTimer timer = h200_with_its_profile();
  const OpTimer model(timer.gpu());
  const KernelEfficiency& k = timer.gpu().kernels;
  const auto memory = [&](const GemmShape& s) {
    return Bytes(2.0 * (s.a_elements() + s.b_elements() + s.c_elements())) /
           (timer.gpu().memory_bandwidth * k.memory_bandwidth_efficiency);
  };
  for (const ExpertGroup g : {ExpertGroup{16, 16, 1536, 2048}, ExpertGroup{8, 32, 4096, 7168},
                              ExpertGroup{8, 4096, 768, 2048}, ExpertGroup{8, 512, 4096, 14336}}) {
    const GemmShape group{g.m, g.n, g.k, g.count, DType::kBf16};
    const GemmShape rows{g.m * g.count, g.n, g.k, 1, DType::kBf16};
    const Seconds expected = std::max(
        timer.gemm(rows).time * (model.gemm(group).time / model.gemm(rows).time), memory(group));
    EXPECT_NEAR(timer.gemm(group).time / expected, 1.0, 1e-12) << g.count << " x " << g.m;
    // Each expert a kernel of its own adds the launches of the others, as the model's.
    GemmShape per_expert = group;
    per_expert.kernel_per_gemm = true;
    EXPECT_NEAR((timer.gemm(per_expert).time - timer.gemm(group).time) / Seconds(1),
                (k.overhead * static_cast<double>(g.count - 1)) / Seconds(1), 1e-15);
  }
  // Compute-bound experts of whole tiles of tokens (8 × 4096 × 768 × 2048: 8 · 32 · 3 tiles of
  // 128 × 256, as many as 32768 rows make) run at the profile's speed for all their rows: their
  // weights stream behind the math.
  const GemmShape compute_bound{4096, 768, 2048, 8, DType::kBf16};
  const GemmShape its_rows{8 * 4096, 768, 2048, 1, DType::kBf16};
  EXPECT_DOUBLE_EQ(timer.gemm(compute_bound).time / Seconds(1),
                   timer.gemm(its_rows).time / Seconds(1));
}

TEST(OpTimer, AGroupedGemmFromAProfileGrowsWithItsExperts) {
  // Doubling the experts doubles their weights and tokens: never less time.
  const OpTimer timer = h200_with_its_profile();
  for (const ExpertGroup g : kWeightHeavyGroups) {
    Seconds previous;
    for (int64_t count = 1; count <= 64; count *= 2) {
      const Seconds time = timer.gemm(GemmShape{g.m, g.n, g.k, count, DType::kBf16}).time;
      EXPECT_GE(time, previous) << count << " x " << g.m << " x " << g.n << " x " << g.k;
      previous = time;
    }
  }
}

TEST(OpTimer, AGemmFromAProfileIsNoFasterThanItsOperandsStream) {
  // Shapes the H200 profile's fit extrapolates to, whose model has no memory term: 8 x 8192 x
  // 8192 came out at 4.6 us, 16384 x 8 x 4096 at 4.95 us, where reading their 134 MB takes 31 us.
  const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  const OpTimer timer = h200_with_its_profile();
  for (const GemmShape shape :
       {GemmShape{8, 8192, 8192, 1, DType::kBf16}, GemmShape{8192, 64, 8192, 1, DType::kBf16},
        GemmShape{16384, 8, 4096, 1, DType::kBf16}}) {
    const KernelTime time = timer.gemm(shape);
    ASSERT_TRUE(time.measured);
    const double bytes =
        2.0 * static_cast<double>(shape.a_elements() + shape.b_elements() + shape.c_elements());
    EXPECT_GE(time.time / Seconds(1),
              bytes / (gpu.memory_bandwidth * gpu.kernels.memory_bandwidth_efficiency /
                       BytesPerSecond(1)))
        << shape.m << " x " << shape.n << " x " << shape.k;
  }
}

TEST(OpTimer, AProfileGemmSlowsSmoothlyToThePowerLimitAsComputeComesToBind) {
  // m x 16384 x 16384 on the H200 and its profile turns from memory- to compute-bound near
  // m = 150: the measured time took the whole sustained slowdown at once (152 rows 128.8 us, 160
  // rows 158.9 us); it now grows with the share compute has in the time.
  const OpTimer timer = h200_with_its_profile();
  Seconds previous = timer.gemm(GemmShape{128, 16384, 16384, 1, DType::kBf16}).time;
  for (int64_t m = 136; m <= 256; m += 8) {
    const Seconds time = timer.gemm(GemmShape{m, 16384, 16384, 1, DType::kBf16}).time;
    EXPECT_LT(time / previous, 1.1) << m << " rows";
    previous = time;
  }
}

TEST(OpTimer, ExpectedSlowestOfNChipsFollowsTheNormalOrderStatistics) {
  // E[max] of n standard normals: 0 for one, 1/√π for two, and the tabulated 1.0294 (4), 1.4236
  // (8), 3.2414 (1000); it keeps growing, slower and slower, with n.
  EXPECT_EQ(expected_maximum_of_standard_normals(1), 0.0);
  EXPECT_NEAR(expected_maximum_of_standard_normals(2), 1.0 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_maximum_of_standard_normals(4), 1.0294, 1e-4);
  EXPECT_NEAR(expected_maximum_of_standard_normals(8), 1.4236, 1e-4);
  EXPECT_NEAR(expected_maximum_of_standard_normals(1000), 3.2414, 1e-4);
  double previous = 0.0;
  for (const int n : {2, 16, 128, 1024, 16384, 100000}) {
    const double slowest = expected_maximum_of_standard_normals(n);
    EXPECT_GT(slowest, previous) << n;
    EXPECT_LT(slowest - previous, 1.5) << n;
    previous = slowest;
  }
}

TEST(OpTimer, ASynchronizedStepRunsAtItsSlowestChip) {
  // σ = 1% from chip to chip: with 8 GPUs waiting on one another every step, compute-bound
  // kernels run at the expected slowest chip's pace, 1.4236σ below the mean chip; memory-bound
  // ones (HBM, not SM clocks) and a lone GPU are unchanged.
  GpuSpec gpu = h100();
  gpu.kernels.sustained_compute_spread = 0.01;
  gpu.kernels.overhead = Seconds(0);
  const OpTimer alone(gpu), node(gpu, nullptr, 8);
  const GemmShape square{8192, 8192, 8192, 1, DType::kBf16};
  EXPECT_DOUBLE_EQ(alone.gemm(square).time / Seconds(1), OpTimer(h100()).gemm(square).time / Seconds(1) -
                                                             h100().kernels.overhead / Seconds(1));
  EXPECT_NEAR(node.gemm(square).time / alone.gemm(square).time, 1.0 / (1.0 - 0.01 * 1.4236), 1e-6);
  const AttentionShape attention{1, 32, 32, 8192, 8192, 128, true, false, DType::kBf16};
  EXPECT_NEAR(node.attention(attention).time / alone.attention(attention).time, 1.0 / (1.0 - 0.01 * 1.4236), 1e-6);
  const GemmShape gemv{1, 8192, 8192, 1, DType::kBf16};
  EXPECT_EQ(node.gemm(gemv).time, alone.gemm(gemv).time);
  EXPECT_EQ(node.memory_bound(MemoryKernel::kElementwise, Bytes(1e9)).time,
            alone.memory_bound(MemoryKernel::kElementwise, Bytes(1e9)).time);
}

TEST(OpTimer, SkinnyGemmIsMemoryBound) {
  // M = 1 (a GEMV): the 8192×8192 bf16 weights (128 MiB) dominate: time ≈ bytes / bandwidth.
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const GemmShape shape{1, 8192, 8192, 1, DType::kBf16};
  const double bytes = 2.0 * (8192.0 + 8192.0 * 8192.0) + 2.0 * 8192.0;
  const Seconds expected = Bytes(bytes) / (gpu.memory_bandwidth * gpu.kernels.memory_bandwidth_efficiency) +
                           gpu.kernels.overhead;
  EXPECT_NEAR(timer.gemm(shape).time / Seconds(1), expected / Seconds(1), 1e-15);
}

TEST(OpTimer, Fp8GemmIsFasterThanBf16) {
  const OpTimer timer(h100());
  EXPECT_LT(timer.gemm({8192, 8192, 8192, 1, DType::kFp8}).time, timer.gemm({8192, 8192, 8192, 1, DType::kBf16}).time);
}

TEST(OpTimer, Fp8GemmPaysItsPerTileCostInMoreUnitsOfK) {
  // The per-tile cost takes as long as in bf16, but the fp8 main loop covers K faster: by the
  // ratio of the two dtypes' peaks times ceilings.
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const KernelEfficiency& k = gpu.kernels;
  const double fp8_over_bf16 = *gpu.peak(DType::kFp8) / *gpu.peak(DType::kBf16);
  const double utilization = 2048.0 / (16.0 * 132.0);  // 8192 × 8192 output: 16 waves of 128×256 tiles
  const auto expected = [&](double ceiling, double k_half) {
    return ceiling * utilization * 4096.0 / (4096.0 + k_half);
  };
  EXPECT_NEAR(timer.gemm_efficiency({8192, 8192, 4096, 1, DType::kBf16}),
              expected(k.gemm_max_efficiency, k.gemm_k_half), 1e-12);
  // The forward GEMM runs with fast accumulation, the backward ones with split accumulation.
  const double fast = k.gemm_fp8_fast_accumulation_max_efficiency;
  const double split = k.gemm_fp8_max_efficiency;
  EXPECT_NEAR(timer.gemm_efficiency({8192, 8192, 4096, 1, DType::kFp8}),
              expected(fast, k.gemm_k_half * fp8_over_bf16 * fast / k.gemm_max_efficiency), 1e-12);
  for (const GemmLayout backward : {GemmLayout::kDataGradient, GemmLayout::kWeightGradient}) {
    EXPECT_NEAR(timer.gemm_efficiency({8192, 8192, 4096, 1, DType::kFp8, backward}),
                expected(split, k.gemm_k_half * fp8_over_bf16 * split / k.gemm_max_efficiency), 1e-12);
  }
  // On an H100 fast accumulation is 1.08× faster (pytorch/ao issue 2377 measured 1.1-1.2×).
  EXPECT_GT(fast / split, 1.05);
  EXPECT_LT(fast / split, 1.2);
}

TEST(OpTimer, AccumulatingWeightGradientMovesMoreEpilogueBytes) {
  // dW = Xᵀ·dY added into the gradient buffer reads and writes it: 8 bytes per element in fp32,
  // 4 in bf16, against the 2 a bf16 GEMM writes once; the per-tile cost grows with them.
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const KernelEfficiency& k = gpu.kernels;
  const GemmShape written{8192, 8192, 4096, 1, DType::kBf16, GemmLayout::kWeightGradient};
  GemmShape into_fp32 = written;
  into_fp32.accumulates_into = DType::kFp32;
  GemmShape into_bf16 = written;
  into_bf16.accumulates_into = DType::kBf16;
  const double utilization = 2048.0 / (16.0 * 132.0);
  const auto expected = [&](double bytes) {
    return k.gemm_max_efficiency * utilization * 4096.0 / (4096.0 + k.gemm_k_half * bytes / 2.0);
  };
  EXPECT_NEAR(timer.gemm_efficiency(written), expected(2.0), 1e-12);
  EXPECT_NEAR(timer.gemm_efficiency(into_bf16), expected(4.0), 1e-12);
  EXPECT_NEAR(timer.gemm_efficiency(into_fp32), expected(8.0), 1e-12);
  EXPECT_GT(timer.gemm(into_fp32).time, timer.gemm(into_bf16).time);
  // A skinny GEMM is memory-bound: there C's 8 bytes per element are part of the traffic.
  GemmShape skinny{8192, 8192, 16, 1, DType::kBf16, GemmLayout::kWeightGradient, DType::kFp32};
  const double bytes = 2.0 * (8192.0 * 16.0 * 2.0) + 8.0 * 8192.0 * 8192.0;
  EXPECT_NEAR(timer.gemm(skinny).time / Seconds(1),
              (Bytes(bytes) / (gpu.memory_bandwidth * k.memory_bandwidth_efficiency) + k.overhead) / Seconds(1), 1e-15);
}

// A compute-bound attention kernel of `shape`, whose seq_kv reaches its kernel's catalog
// efficiency asymptotically: its FLOPs at that share of the bf16 peak, under sustained load, plus
// the kernel overhead.
double expected_attention_s(const GpuSpec& gpu, const AttentionShape& shape) {
  const double length = static_cast<double>(shape.seq_kv);
  const AttentionKernelEfficiency& kernel = gpu.kernels.attention(shape.kernel);
  const double efficiency = kernel.efficiency(shape.backward);
  const double share = shape.causal ? efficiency * kernel.causal_ratio * length / (length + kernel.causal_seq_half)
                                    : efficiency * length / (length + gpu.kernels.attention_seq_half);
  const double sustained = kernel.power_limited ? gpu.kernels.sustained_compute_fraction : 1.0;
  return (attention_flop(shape) / (*gpu.peak(DType::kBf16) * share) / sustained +
          gpu.kernels.overhead) /
         Seconds(1);
}

TEST(OpTimer, HopperGemmsNeedingTheSmsCommunicationHoldsArePersistent) {
  // An H100 leaves 132 - 16 = 116 SMs beside an NCCL kernel. 8192^3: 2048 tiles, a block on
  // every SM. Fewer tiles than SMs are spread over ⌊132 / tiles⌋ blocks each: 1024 x 2048 x 4096,
  // 8 x 8 = 64 tiles, 128 blocks > 116; 1024 x 1024 x 256, 32 tiles, 128 blocks (cuBLAS runs it
  // as 128 blocks of 128 x 64 on an H200, hardware/profiles/h200-sxm-141gb.yaml); 1024 x 1536 x
  // 256, 8 x 6 = 48 tiles, 96 blocks, which fit beside NCCL.
  const OpTimer h100_timer(h100());
  EXPECT_TRUE(h100_timer.gemm({8192, 8192, 8192, 1, DType::kBf16}).persistent);
  EXPECT_TRUE(h100_timer.gemm({1024, 2048, 4096, 1, DType::kBf16}).persistent);
  EXPECT_TRUE(h100_timer.gemm({1024, 1024, 256, 1, DType::kBf16}).persistent);
  EXPECT_FALSE(h100_timer.gemm({1024, 1536, 256, 1, DType::kBf16}).persistent);
  // Ampere's cuBLAS kernels launch a block per tile: never persistent.
  const OpTimer a100_timer(resolve_gpu("a100-sxm4-80gb", default_gpu_catalog(), {}));
  EXPECT_FALSE(a100_timer.gemm({8192, 8192, 8192, 1, DType::kBf16}).persistent);
}

TEST(OpTimer, AttentionFollowsItsFlopsAndEfficiency) {
  // b=1, h=32, s=8192, d=128 causal: 4·s²·d·h·½ = 1.1e12 FLOP forward; backward 2.5×.
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  AttentionShape shape{1, 32, 8, 8192, 8192, 128, true, false, DType::kBf16};
  const double flop = 4.0 * 8192.0 * 8192.0 * 128.0 * 32.0 * 0.5;
  EXPECT_DOUBLE_EQ(attention_flop(shape) / Flop(1), flop);
  EXPECT_NEAR(timer.attention(shape).time / Seconds(1),
              expected_attention_s(gpu, shape), 1e-15);
  shape.backward = true;
  EXPECT_DOUBLE_EQ(attention_flop(shape) / Flop(1), 2.5 * flop);
}

TEST(OpTimer, NarrowerValuesDoLessOfTheAttentionsWork) {
  // Latent attention (DeepSeek-V3): queries and keys 192 wide, values 128. Q·Kᵀ and P·V each
  // take 2 FLOP per multiply-add at their own width; the time follows the FLOPs.
  const OpTimer timer(h100());
  AttentionShape shape{1, 64, 64, 4096, 4096, 192, true, false, DType::kBf16};
  shape.value_head_dim = 128;
  EXPECT_DOUBLE_EQ(attention_flop(shape) / Flop(1), 2.0 * 64 * 4096.0 * 4096 * (192 + 128) * 0.5);
  AttentionShape square = shape;
  square.value_head_dim = 0;  // values as wide as keys
  EXPECT_DOUBLE_EQ(attention_flop(shape) / attention_flop(square), 320.0 / 384.0);
  EXPECT_LT(timer.attention(shape).time, timer.attention(square).time);
}

// H100 forward TFLOP/s of `kernel` at 16k tokens per call (16 heads, head dim 128), in short
// bursts, as the FlashAttention-3 paper's bars ran.
double h100_burst_attention_tflops(AttentionKernel kernel, int64_t seq, bool causal) {
  GpuSpec gpu = h100();
  gpu.kernels.sustained_compute_fraction = 1.0;
  gpu.kernels.overhead = Seconds(0);
  const AttentionShape shape{16384 / seq, 16, 16, seq, seq, 128, causal, false, DType::kBf16, kernel};
  return attention_flop(shape) / OpTimer(gpu).attention(shape).time / FlopPerSecond(1e12);
}

// A kernel's bars in the FlashAttention-3 paper (TFLOP/s at 2k and 16k tokens, causal and
// unmasked) and how close the catalog fit follows the unmasked ones.
struct AttentionBars {
  AttentionKernel kernel;
  double causal_2k, causal_16k, unmasked_2k, unmasked_16k;
  double unmasked_tolerance;
};

void expect_follows(const AttentionBars& bars) {
  const auto tflops = [&](int64_t seq, bool causal) { return h100_burst_attention_tflops(bars.kernel, seq, causal); };
  EXPECT_NEAR(tflops(2048, true), bars.causal_2k, 0.02 * bars.causal_2k);
  EXPECT_NEAR(tflops(16384, true), bars.causal_16k, 0.02 * bars.causal_16k);
  EXPECT_NEAR(tflops(2048, false), bars.unmasked_2k, bars.unmasked_tolerance * bars.unmasked_2k);
  EXPECT_NEAR(tflops(16384, false), bars.unmasked_16k, bars.unmasked_tolerance * bars.unmasked_16k);
}

TEST(OpTimer, FusedAttentionOnHopperFollowsCuDnnsBarsInTheFlashAttention3Paper) {
  // Transformer Engine runs cuDNN's fused attention on Hopper. cuDNN's forward peaks at 2k, so
  // the unmasked fit is within 7%.
  expect_follows({AttentionKernel::kFlash, 484.0, 539.0, 617.0, 595.0, 0.07});
  EXPECT_LT(h100_burst_attention_tflops(AttentionKernel::kFlash, 4096, true),
            0.92 * h100_burst_attention_tflops(AttentionKernel::kFlash, 4096, false));
}

TEST(OpTimer, FlashAttention2FollowsItsBarsInTheFlashAttention3Paper) {
  expect_follows({AttentionKernel::kFlash2, 298.0, 335.0, 362.0, 370.0, 0.06});
}

TEST(OpTimer, FlashAttention3LosesLessToTheCausalMaskThanCuDnn) {
  // FlashAttention-3's bars in the same figures. Its causal ceiling is 0.94 of its unmasked one,
  // cuDNN's 0.87.
  expect_follows({AttentionKernel::kFlash3, 521.0, 616.0, 625.0, 648.0, 0.04});
  const auto causal_share = [](AttentionKernel kernel) {
    return h100_burst_attention_tflops(kernel, 16384, true) / h100_burst_attention_tflops(kernel, 16384, false);
  };
  EXPECT_GT(causal_share(AttentionKernel::kFlash3), causal_share(AttentionKernel::kFlash) + 0.05);
}

TEST(OpTimer, AProfilesAttentionBelowItsFewestHeadsWaitsOnItsLongestBlock) {
  // The H200 profile measured 8 heads and more. Causal at 2k tokens, 2 or 4 heads are fewer
  // blocks than SMs, all waiting on the diagonal's longest: they take about as long as 8 (its fit
  // scaled the time with the heads, 22.0 and 26.6 us against 35.7).
  const OpTimer timer = h200_with_its_profile();
  const auto forward = [&](int64_t heads) {
    const AttentionShape shape{.batch = 1,
                               .heads = heads,
                               .kv_heads = heads,
                               .seq_q = 2048,
                               .seq_kv = 2048,
                               .head_dim = 128};
    const KernelTime time = timer.attention(shape);
    EXPECT_TRUE(time.measured);
    return time.time;
  };
  const Seconds eight = forward(8);
  EXPECT_GT(forward(4), 0.9 * eight);
  EXPECT_GT(forward(2), 0.9 * eight);
}

TEST(OpTimer, AttentionWithFewHeadsLeavesSmsIdle) {
  // cuDNN's causal fused attention measured on an H200 (same GH100 compute as the H100; batch 1,
  // head dim 128, short bursts; hardware/profiles/h200-sxm-141gb.yaml): with 8 heads at 1k and
  // 2k tokens there are fewer 128-row blocks than SMs, or the diagonal's longest block outlasts
  // the rest, and the kernel reaches a fraction of what 128 heads reach. The measurement ran
  // cuDNN 9.14 at boost clocks, faster than the catalog's cuDNN 9.1.1 at 1830 MHz, so the kernel
  // is compared with itself: 8 heads against 128.
  GpuSpec gpu = h100();
  gpu.kernels.sustained_compute_fraction = 1.0;
  const OpTimer timer(gpu);
  const auto seconds = [&](int64_t heads, int64_t seq, bool backward) {
    return timer.attention(AttentionShape{1, heads, heads, seq, seq, 128, true, backward, DType::kBf16}).time / Seconds(1);
  };
  // Per head, 8 heads at 1k ran at 0.29 of the speed of 128 heads (17.52 us against 81.95 us for
  // 16x the work); within 20%: the fixed per-kernel overhead weighs more on the 17 us kernel.
  // Without the occupancy term the model would run both at the same speed.
  const auto eight_over_128 = [&](int64_t seq, bool backward) {
    return seconds(8, seq, backward) / seconds(128, seq, backward);
  };
  EXPECT_NEAR(eight_over_128(1024, false), 17.52 / 81.95, 0.2 * 17.52 / 81.95);
  // The backward at 1k within 45%: one ramp (seq_half) serves both passes, and cuDNN's backward
  // ramps more slowly than its forward, so 128 heads at 1k are modelled too fast. Without the
  // occupancy term the ratio would be 8/128 = 0.0625.
  EXPECT_NEAR(eight_over_128(1024, true), 50.03 / 296.50, 0.45 * 50.03 / 296.50);
  EXPECT_NEAR(eight_over_128(2048, false), 30.32 / 255.30, 0.2 * 30.32 / 255.30);
  EXPECT_NEAR(eight_over_128(2048, true), 90.02 / 841.12, 0.2 * 90.02 / 841.12);
  // Unmasked, only the last wave idles: 132 blocks fill the SMs once, 133 take a second wave.
  const auto unmasked = [&](int64_t heads) {
    return timer.attention(AttentionShape{1, heads, heads, 128 * 33, 128 * 33, 128, false, false, DType::kBf16}).time;
  };
  EXPECT_NEAR(unmasked(5) / unmasked(4), 2.0, 0.05);
}

TEST(OpTimer, FlashAttention2RunsAtItsOwnEfficiencies) {
  // The same backward on H100 through FlashAttention-2: its catalog efficiency, same FLOPs, at its
  // burst speed. cuDNN's is 1.28 times as fast: 0.54 x 0.84 (causal) at the sustained 0.85,
  // against 0.34 x 0.884.
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const AttentionShape shape{1, 32, 8, 8192, 8192, 128, true, true, DType::kBf16, AttentionKernel::kFlash2};
  EXPECT_NEAR(timer.attention(shape).time / Seconds(1),
              expected_attention_s(gpu, shape), 1e-15);
  AttentionShape fused = shape;
  fused.kernel = AttentionKernel::kFlash;
  EXPECT_GT(timer.attention(shape).time, 1.25 * timer.attention(fused).time);
}

TEST(OpTimer, AnAttentionKernelBelowThePowerLimitKeepsItsBurstSpeedOnEveryChip) {
  // On the slowest of 8 chips, at the sustained fraction; unlimited, at the burst speed.
  GpuSpec gpu = h100();
  ASSERT_GT(gpu.kernels.sustained_compute_spread, 0.0);
  AttentionShape shape{1, 32, 8, 8192, 8192, 128, true, true, DType::kBf16};
  shape.kernel = AttentionKernel::kFlash2;
  const auto compute_s = [&](bool power_limited) {
    gpu.kernels.flash2.power_limited = power_limited;
    return (OpTimer(gpu, nullptr, 8).attention(shape).time - gpu.kernels.overhead) / Seconds(1);
  };
  const double slowest_chip =
      1.0 - gpu.kernels.sustained_compute_spread * expected_maximum_of_standard_normals(8);
  EXPECT_NEAR(compute_s(true) / compute_s(false),
              1.0 / (gpu.kernels.sustained_compute_fraction * slowest_chip), 1e-12);
}

TEST(OpTimer, FlashAttention2PadsTheHeadDimToItsKernels) {
  // MPT-30B's heads are 112 wide: FlashAttention-2 runs them on its 128 kernel, 128/112 the
  // compute of the unpadded head (the occupancy is the same). Fused kernels are not padded here.
  const OpTimer timer(h100());
  const AttentionShape wide{1, 64, 64, 8192, 8192, 128, true, true, DType::kBf16, AttentionKernel::kFlash2};
  AttentionShape narrow = wide;
  narrow.head_dim = 112;
  const Seconds overhead = h100().kernels.overhead;
  EXPECT_NEAR((timer.attention(narrow).time - overhead) / Seconds(1),
              (timer.attention(wide).time - overhead) / Seconds(1), 1e-12);
  AttentionShape fused = narrow;
  fused.kernel = AttentionKernel::kFlash;
  AttentionShape fused_wide = wide;
  fused_wide.kernel = AttentionKernel::kFlash;
  EXPECT_NEAR((timer.attention(fused).time - overhead) / (timer.attention(fused_wide).time - overhead), 112.0 / 128.0,
              1e-12);
  EXPECT_EQ(flash2_kernel_head_dim(80), 96);
  EXPECT_EQ(flash2_kernel_head_dim(256), 256);
  // FlashAttention-3 is built for 64, 96, 128, 192 and 256: a 112-wide head runs on 128 too.
  AttentionShape flash3 = narrow;
  flash3.kernel = AttentionKernel::kFlash3;
  AttentionShape flash3_wide = wide;
  flash3_wide.kernel = AttentionKernel::kFlash3;
  EXPECT_NEAR((timer.attention(flash3).time - overhead) / Seconds(1),
              (timer.attention(flash3_wide).time - overhead) / Seconds(1), 1e-12);
  EXPECT_EQ(flash3_kernel_head_dim(80), 96);
  EXPECT_EQ(flash3_kernel_head_dim(160), 192);
  EXPECT_EQ(flash3_kernel_head_dim(256), 256);
}

TEST(OpTimer, FlashAttentionInTritonRunsAtItsOwnEfficienciesOnPowerOfTwoHeads) {
  // The FlashAttention-2 paper (section 4.1): its kernel is about 1.4x faster than FlashAttention
  // in Triton forward and 2x backward. Every catalog keeps those ratios under load, on the
  // slowest of 8 chips: on the 700 W Hopper parts neither kernel is held to the power limit.
  const auto kernel_s = [](const GpuSpec& gpu, AttentionKernel kernel, bool backward,
                           int64_t head_dim) {
    const AttentionShape shape{2, 32, 32, 4096, 4096, head_dim, true, backward, DType::kBf16, kernel};
    return (OpTimer(gpu, nullptr, 8).attention(shape).time - gpu.kernels.overhead) / Seconds(1);
  };
  for (const std::string name : {"a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb"}) {
    const GpuSpec gpu = resolve_gpu(name, default_gpu_catalog(), {});
    for (const bool is_backward : {false, true}) {
      const double triton_over_flash2 =
          kernel_s(gpu, AttentionKernel::kFlashTriton, is_backward, 128) /
          kernel_s(gpu, AttentionKernel::kFlash2, is_backward, 128);
      EXPECT_NEAR(triton_over_flash2, is_backward ? 2.0 : 1.4, 0.02) << name;
    }
  }
  const GpuSpec gpu = a100();
  const OpTimer timer(gpu);
  const AttentionShape backward{2, 32, 32, 4096, 4096, 128, true, true, DType::kBf16, AttentionKernel::kFlashTriton};
  EXPECT_NEAR(timer.attention(backward).time / Seconds(1), expected_attention_s(gpu, backward),
              1e-15);
  // An 80-wide head runs on the 128 tiles, as a 128-wide one does.
  EXPECT_NEAR(kernel_s(gpu, AttentionKernel::kFlashTriton, true, 80),
              kernel_s(gpu, AttentionKernel::kFlashTriton, true, 128), 1e-12);
  EXPECT_EQ(flash_triton_kernel_head_dim(8), 16);
  EXPECT_EQ(flash_triton_kernel_head_dim(64), 64);
  EXPECT_EQ(flash_triton_kernel_head_dim(65), 128);
}

TEST(OpTimer, MemoryBoundKernelStreamsAtEffectiveBandwidth) {
  // 1 GiB through HBM at 3.35 TB/s · efficiency, plus the kernel overhead.
  const GpuSpec gpu = h100();
  const OpTimer timer(gpu);
  const Seconds expected = GiB(1) / (gpu.memory_bandwidth * gpu.kernels.memory_bandwidth_efficiency) + gpu.kernels.overhead;
  EXPECT_DOUBLE_EQ(timer.memory_bound(MemoryKernel::kGelu, GiB(1)).time / Seconds(1), expected / Seconds(1));
  EXPECT_EQ(timer.memory_bound(MemoryKernel::kGelu, Bytes(0)).time, Seconds(0));
  // Spread over three kernels (an eager composite) it pays the overhead three times.
  EXPECT_NEAR(timer.memory_bound(MemoryKernel::kGelu, GiB(1), 3).time / Seconds(1),
              (expected + 2.0 * gpu.kernels.overhead) / Seconds(1), 1e-15);
}

}  // namespace
}  // namespace paceline
