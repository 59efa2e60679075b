// Tests sim/engine/sim_time.h: the one seconds-to-picoseconds conversion and overflow checks.
#include "sim/engine/sim_time.h"

#include <gtest/gtest.h>

#include <string>

#include "base/check.h"

namespace paceline {
namespace {

TEST(SimTime, ConvertsSecondsToPicoseconds) {
  EXPECT_EQ(to_sim_time(Microseconds(2.5)).picoseconds(), 2'500'000);
  // Rounds to the nearest picosecond: 1.4 ps → 1, 1.6 ps → 2.
  EXPECT_EQ(to_sim_time(Picoseconds(1.4)).picoseconds(), 1);
  EXPECT_EQ(to_sim_time(Picoseconds(1.6)).picoseconds(), 2);
  EXPECT_DOUBLE_EQ(to_seconds(SimTime::from_picoseconds(3'000'000'000)) / Milliseconds(1), 3.0);
}

TEST(SimTime, NegativeDurationsAreBugsHugeOnesALimit) {
  EXPECT_THROW(to_sim_time(Seconds(-1)), InternalError);
  EXPECT_THROW(to_sim_time(Seconds(1e10)), SimulationLimitError);  // 1e22 ps > 2^63
}

TEST(SimTime, AnOpPastTheRangeIsNamed) {
  try {
    to_sim_time(Seconds(1e10), "attn.core", "layer.forward");
    FAIL() << "no SimulationLimitError";
  } catch (const SimulationLimitError& e) {
    EXPECT_NE(std::string(e.what()).find(": attn.core of layer.forward alone would take 1e+10 s;"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(to_sim_time(Microseconds(3), "attn.core").picoseconds(), 3'000'000);
}

TEST(SimTime, AdditionPastTheRangeStopsAtTheLimit) {
  EXPECT_THROW(SimTime::max() + SimTime::from_picoseconds(1), SimulationLimitError);
}

}  // namespace
}  // namespace paceline
