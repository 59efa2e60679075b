// paceline-calibrate: measures a GPU node's kernels and links and writes a kernel profile.
// The command line is parsed here; everything else lives in calibrate/internal/runner.cc.
#include <atomic>
#include <csignal>
#include <exception>
#include <iostream>
#include <string_view>
#include <vector>

#include "calibrate/cli.h"
#include "calibrate/internal/runner.h"

namespace {

// Set by SIGINT/SIGTERM; the run stops between points and writes what it has. A signal handler
// can only reach a global, hence this one mutable static.
std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  using namespace paceline::calibrate;
  std::vector<std::string_view> args(argv, argv + argc);
  Options options;
  try {
    options = parse_args(args);
  } catch (const UsageError& e) {
    std::cerr << "paceline-calibrate: " << e.what() << " (see --help)\n";
    return internal::kExitUnusable;
  }
  if (options.help) {
    std::cout << help_text();
    return internal::kExitOk;
  }
  if (options.plan_only) return internal::print_plan(options, std::cout);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    return internal::run_calibration(options, g_stop, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "paceline-calibrate: unexpected error: " << e.what() << "\n";
    return internal::kExitUnusable;
  }
}
