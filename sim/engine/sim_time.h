// SimTime: simulated time as an integer count of picoseconds.
//
// Integer time makes event order exact and results bit-identical across machines: no two
// events compare equal or unequal because of rounding. 2^63 ps is about 106 days, far beyond
// any iteration of real hardware; a step that would last longer (a bandwidth or throughput far
// outside real hardware) stops with SimulationLimitError instead of wrapping.
// Durations computed in Seconds become SimTime only through to_sim_time().
#ifndef PACELINE_SIM_ENGINE_SIM_TIME_H_
#define PACELINE_SIM_ENGINE_SIM_TIME_H_

#include <compare>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "base/units.h"

namespace paceline {

// Thrown when a run exceeds a limit (EngineOptions::max_events, a deadline, a caller's memory or
// time limit checked before the run, or the range of simulated time).
class SimulationLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The range of simulated time exceeded: a figure of the scenario far outside real hardware.
class SimulatedTimeOverflow : public SimulationLimitError {
 public:
  using SimulationLimitError::SimulationLimitError;
};

class SimTime {
 public:
  constexpr SimTime() = default;
  static constexpr SimTime from_picoseconds(int64_t ps) { return SimTime(ps); }
  static constexpr SimTime zero() { return SimTime(0); }
  static constexpr SimTime max() { return SimTime(INT64_MAX); }

  constexpr int64_t picoseconds() const { return ps_; }

  // Checked: a sum past the range throws SimulationLimitError; a difference that overflows is a
  // bug (InternalError).
  SimTime operator+(SimTime other) const;
  SimTime operator-(SimTime other) const;
  SimTime& operator+=(SimTime other) { return *this = *this + other; }

  friend constexpr auto operator<=>(SimTime a, SimTime b) = default;

 private:
  constexpr explicit SimTime(int64_t ps) : ps_(ps) {}
  int64_t ps_ = 0;
};

// The one conversion from computed durations to simulated time: rounds to the nearest
// picosecond. A duration past the range throws SimulationLimitError; a negative or non-finite
// one is a bug (InternalError).
SimTime to_sim_time(Seconds duration);
// As above; a duration past the range names `what` (an op or task), and `within` what (a pass),
// in the error, so that the scenario's field behind it can be found.
SimTime to_sim_time(Seconds duration, std::string_view what, std::string_view within = {});
// Simulated time read back as Seconds (exact up to double precision).
Seconds to_seconds(SimTime time);

}  // namespace paceline

#endif  // PACELINE_SIM_ENGINE_SIM_TIME_H_
