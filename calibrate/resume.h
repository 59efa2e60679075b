// Resuming a calibration run from the profile a previous (interrupted) run left behind.
//
// A run writes its profile atomically as it goes. When the output file already exists, the new
// run reads it, checks that it describes the same GPU and the same method, and then measures
// only the grid points that have no row yet; families recorded as skipped are tried again.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "calibrate/grid.h"
#include "calibrate/profile.h"

namespace paceline::calibrate {

// resume_conflict says why `existing` cannot be continued by a run with `device` and `method`
// (another GPU model, mode, or repetition count), or nullopt when it can.
std::optional<std::string> resume_conflict(const Profile& existing, const YamlNode& device,
                                           const YamlNode& method);

// pending_points returns the indices (into the plan's list for `family`) of the points that
// `profile` has no row for, in run order. A row with an `error` counts as done: the failure is
// recorded and deterministic, and retrying it on every resume would only repeat it.
std::vector<size_t> pending_points(const Plan& plan, std::string_view family,
                                   const Profile& profile);

// failed_points_note is what `skipped` says of a family whose table has failed rows ("3 of 2058
// points failed; first: ..."), or nullopt when none failed. A resumed run that finds every point
// done says it again: its rows are kept, and so is its failure.
std::optional<std::string> failed_points_note(const Table& table);

// prepare_table makes sure `profile` has family's table with the plan's key, interpolation
// fields and axes, keeping the rows already there; `method` describes how rows are measured.
Table& prepare_table(Profile& profile, const Plan& plan, std::string_view family,
                     std::string method);

}  // namespace paceline::calibrate
