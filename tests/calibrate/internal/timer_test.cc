// Tests calibrate/internal/timer.cc without a GPU: how CUPTI activity records become per-call
// times (attribute_activities) and how kernel names are shortened.
#include "calibrate/internal/timer.h"

#include <gtest/gtest.h>

namespace paceline::calibrate::internal {
namespace {

// Three calls (one warm-up) 100 µs apart; times in ns.
const std::vector<CallWindow> kWindows = {
    {1000000, 1050000}, {1100000, 1150000}, {1200000, 1250000}};

TEST(TimerTest, SumsEachCallsActivitiesAndSkipsWarmup) {
  std::vector<Activity> activities = {
      {1010000, 1020000, "warm"},                                // warm-up call: ignored
      {1110000, 1120000, "gemm"},                                // call 2: 10 µs + 5 µs
      {1125000, 1130000, "reduce"}, {1210000, 1222000, "gemm"},  // call 3: 12 µs + 6 µs
      {1230000, 1236000, "reduce"},
  };
  Measurement m =
      attribute_activities(kWindows, activities, /*warmup=*/1, Aggregate::kSumOfDurations, "test");
  // Median of 15 µs and 18 µs = 16.5 µs; spread (p90 − p10) / median = (17.7 − 15.3) / 16.5.
  EXPECT_NEAR(m.summary.median, 16.5e-6, 1e-12);
  EXPECT_NEAR(m.summary.spread, (17.7 - 15.3) / 16.5, 1e-9);
  EXPECT_EQ(m.kernels_per_call, 2);
  EXPECT_EQ(m.kernel, "gemm");  // 22 µs of gemm against 11 µs of reduce
}

TEST(TimerTest, SpanRunsFromFirstStartToLastEnd) {
  // Two ranks' kernels of one collective, overlapping: 1110..1140 µs = 30 µs.
  std::vector<Activity> activities = {{1110000, 1130000, "allreduce"},
                                      {1115000, 1140000, "allreduce"}};
  std::vector<CallWindow> windows(kWindows.begin(), kWindows.begin() + 2);
  Measurement m = attribute_activities(windows, activities, 1, Aggregate::kSpan, "test");
  EXPECT_NEAR(m.summary.median, 30e-6, 1e-12);
}

TEST(TimerTest, ToleratesSmallClockOffsets) {
  // Starts 5 µs before their call's host window (GPU clock behind): still that call's, since
  // calls own the gap up to its midpoint (1075 µs, 1175 µs), and the first call 20 µs before.
  std::vector<Activity> activities = {
      {985000, 990000, "warm"}, {1095000, 1101000, "k"}, {1195000, 1203000, "k"}};
  Measurement m = attribute_activities(kWindows, activities, 1, Aggregate::kSumOfDurations, "test");
  EXPECT_NEAR(m.summary.median, 7e-6, 1e-12);  // median of 6 µs and 8 µs
}

TEST(TimerTest, ACallWithoutActivityIsAnError) {
  std::vector<Activity> activities = {{1110000, 1120000, "k"}};
  try {
    attribute_activities(kWindows, activities, 1, Aggregate::kSumOfDurations, "CUPTI");
    FAIL() << "expected BenchError";
  } catch (const BenchError& e) {
    EXPECT_STREQ(e.what(), "CUPTI recorded no GPU activity for timed call 2 of 2");
  }
}

TEST(TimerTest, KernelNamesAreDemangledWithoutParameters) {
  EXPECT_EQ(
      shorten_kernel_name("_ZN8paceline9calibrate8internal12_GLOBAL__N_111fill_kernelIfEEvPT_lmff"),
      "void paceline::calibrate::internal::(anonymous namespace)::fill_kernel<float>");
  EXPECT_EQ(shorten_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"),
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64");
  EXPECT_EQ(shorten_kernel_name(std::string(200, 'k'), 20), std::string(17, 'k') + "...");
}

}  // namespace
}  // namespace paceline::calibrate::internal
