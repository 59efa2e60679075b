#include "sim/engine/sim_time.h"

#include <cmath>
#include <string>

#include "base/check.h"

namespace paceline {

SimTime SimTime::operator+(SimTime other) const {
  int64_t sum = 0;
  PACELINE_CHECK(!__builtin_add_overflow(ps_, other.ps_, &sum), "simulated time overflow");
  return SimTime(sum);
}

SimTime SimTime::operator-(SimTime other) const {
  int64_t difference = 0;
  PACELINE_CHECK(!__builtin_sub_overflow(ps_, other.ps_, &difference), "simulated time overflow");
  return SimTime(difference);
}

SimTime to_sim_time(Seconds duration) {
  const double ps = std::nearbyint(duration / Picoseconds(1));
  PACELINE_CHECK(std::isfinite(ps) && ps >= 0.0 && ps < 9.2e18,
                 "duration out of range: " + std::to_string(duration / Seconds(1)) + " s");
  return SimTime::from_picoseconds(static_cast<int64_t>(ps));
}

Seconds to_seconds(SimTime time) { return Picoseconds(static_cast<double>(time.picoseconds())); }

}  // namespace paceline
