// Tests base/units.h: factories, read-out by division and cross-dimension arithmetic.
#include "base/units.h"

#include <gtest/gtest.h>

namespace paceline {
namespace {

TEST(Units, FactoriesAreInBaseUnits) {
  EXPECT_DOUBLE_EQ(Microseconds(5) / Seconds(1), 5e-6);
  EXPECT_DOUBLE_EQ(GiB(1) / Bytes(1), 1073741824.0);
  EXPECT_DOUBLE_EQ(GB(1) / Bytes(1), 1e9);
  // 200 Gb/s is 25 GB/s: bits are an eighth of a byte.
  EXPECT_DOUBLE_EQ(GbitPerSecond(200) / GBPerSecond(1), 25.0);
}

TEST(Units, BytesOverBandwidthIsTime) {
  // 1 GB at 100 GB/s = 10 ms.
  const Seconds t = GB(1) / GBPerSecond(100);
  EXPECT_DOUBLE_EQ(t / Milliseconds(1), 10.0);
}

TEST(Units, FlopOverRateIsTime) {
  // 2·8192³ FLOP at 989 TFLOP/s = 1.1118 ms.
  const Flop work(2.0 * 8192.0 * 8192.0 * 8192.0);
  const Seconds t = work / TflopPerSecond(989);
  EXPECT_NEAR(t / Milliseconds(1), 2.0 * 8192.0 * 8192.0 * 8192.0 / 989e12 * 1e3, 1e-12);
}

TEST(Units, RateTimesTimeIsAmount) {
  EXPECT_DOUBLE_EQ(GBPerSecond(2) * Seconds(3) / GB(1), 6.0);
  EXPECT_DOUBLE_EQ((Seconds(2) * TflopPerSecond(1)) / Tflop(1), 2.0);
}

TEST(Units, ComparisonAndAccumulation) {
  Bytes total;
  total += MiB(1);
  total += MiB(1);
  EXPECT_EQ(total, MiB(2));
  EXPECT_LT(KB(1), KiB(1));
  EXPECT_DOUBLE_EQ((GiB(3) - GiB(1)) / GiB(1), 2.0);
}

}  // namespace
}  // namespace paceline
