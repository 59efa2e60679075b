#include "sim/engine/sim_time.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>

#include "base/check.h"

namespace paceline {

namespace {

// The range of SimTime in picoseconds, a little under 2^63.
constexpr double kRangePicoseconds = 9.2e18;

// `culprit`: what alone lasts beyond the range, where one op or task does ("" where only a sum
// does).
[[noreturn]] void beyond_range(std::string_view culprit = "") {
  throw SimulatedTimeOverflow(
      fmt::format("the simulated step would last longer than 2^63 ps (106 days){}; a bandwidth, "
                  "throughput or size in the scenario is far outside real hardware",
                  culprit));
}

}  // namespace

SimTime SimTime::operator+(SimTime other) const {
  int64_t sum = 0;
  if (__builtin_add_overflow(ps_, other.ps_, &sum)) beyond_range();
  return SimTime(sum);
}

SimTime SimTime::operator-(SimTime other) const {
  int64_t difference = 0;
  PACELINE_CHECK(!__builtin_sub_overflow(ps_, other.ps_, &difference), "simulated time overflow");
  return SimTime(difference);
}

SimTime to_sim_time(Seconds duration) {
  const double ps = std::nearbyint(duration / Picoseconds(1));
  PACELINE_CHECK(!std::isnan(ps) && ps >= 0.0, "duration out of range: " + std::to_string(duration / Seconds(1)) + " s");
  if (ps >= kRangePicoseconds) beyond_range();
  return SimTime::from_picoseconds(static_cast<int64_t>(ps));
}

SimTime to_sim_time(Seconds duration, std::string_view what, std::string_view within) {
  if (duration / Picoseconds(1) >= kRangePicoseconds) {
    beyond_range(fmt::format(": {}{}{} alone would take {:.3g} s", what,
                             within.empty() ? "" : " of ", within, duration / Seconds(1)));
  }
  return to_sim_time(duration);
}

Seconds to_seconds(SimTime time) { return Picoseconds(static_cast<double>(time.picoseconds())); }

}  // namespace paceline
