// Command-line options of paceline-calibrate.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "calibrate/grid.h"

namespace paceline::calibrate {

// UsageError is a bad command line; the program prints it in one line and exits 2.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Options is the parsed command line.
struct Options {
  Mode mode = Mode::kQuick;
  std::string output = "profile.yaml";
  // Families to measure, in run order (a subset of kFamilies).
  std::vector<std::string> families;
  // CUDA device ordinal for the single-GPU families.
  int device = 0;
  // Overwrite an existing output instead of resuming it.
  bool fresh = false;
  // Wall-clock cap of the whole run in seconds (0: none). When it runs out, the profile holds
  // what was measured and names the unfinished families under `skipped`; rerun to resume.
  double budget_s = 0;
  // Print the grids and their estimated cost, then exit (no GPU needed).
  bool plan_only = false;
  bool verbose = false;
  bool help = false;
};

// parse_args reads argv (argv[0] is the program name). Throws UsageError.
Options parse_args(const std::vector<std::string_view>& args);

// help_text is the --help output.
std::string help_text();

}  // namespace paceline::calibrate
