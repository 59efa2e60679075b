// Tests calibrate/stats.cc: median, percentiles and spread of repeated timings.
#include "calibrate/stats.h"

#include <gtest/gtest.h>

namespace paceline::calibrate {
namespace {

TEST(StatsTest, PercentilesInterpolateBetweenRanks) {
  // Samples 1..10 sorted: rank of p10 = 0.1·9 = 0.9 → 1 + 0.9 = 1.9; p90 → rank 8.1 → 9.1.
  std::vector<double> sorted = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(percentile(sorted, 10), 1.9);
  EXPECT_DOUBLE_EQ(percentile(sorted, 50), 5.5);
  EXPECT_DOUBLE_EQ(percentile(sorted, 90), 9.1);
  EXPECT_DOUBLE_EQ(percentile(sorted, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(sorted, 100), 10);
}

TEST(StatsTest, SummaryOfUnsortedSamples) {
  Summary s = summarize({10, 1, 9, 2, 8, 3, 7, 4, 6, 5});
  EXPECT_EQ(s.count, 10);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  // (p90 − p10) / median = (9.1 − 1.9) / 5.5.
  EXPECT_DOUBLE_EQ(s.spread, (9.1 - 1.9) / 5.5);
}

TEST(StatsTest, SingleAndEmptySamples) {
  Summary one = summarize({2e-6});
  EXPECT_DOUBLE_EQ(one.median, 2e-6);
  EXPECT_DOUBLE_EQ(one.spread, 0);
  Summary none = summarize({});
  EXPECT_EQ(none.count, 0);
  EXPECT_DOUBLE_EQ(none.median, 0);
}

}  // namespace
}  // namespace paceline::calibrate
