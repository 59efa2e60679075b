// The calibration run: from parsed options to a written profile and an exit status.
#pragma once

#include <atomic>
#include <ostream>

#include "calibrate/cli.h"

namespace paceline::calibrate::internal {

// Exit statuses of paceline-calibrate (see --help).
inline constexpr int kExitOk = 0;
inline constexpr int kExitIncomplete = 1;
inline constexpr int kExitUnusable = 2;

// run_calibration measures what `options` select and writes the profile; progress goes to
// `out`, problems to `err` (one line each). `stop` is polled between points: when it becomes
// true (SIGINT/SIGTERM) the run writes what it has and ends with kExitIncomplete.
int run_calibration(const Options& options, const std::atomic<bool>& stop, std::ostream& out,
                    std::ostream& err);

// print_plan prints the grids and the estimate without touching the GPU (--plan).
int print_plan(const Options& options, std::ostream& out);

}  // namespace paceline::calibrate::internal
