// Sweeps: one scenario run over the cartesian product of values of some of its fields, each
// configuration an ordinary scenario (the base with overrides applied), simulated on threads.
//
// Configuration i takes, for each axis, the value at i's digit in a mixed radix whose last axis
// varies fastest — itertools.product's order over the axes as given. A configuration that
// breaks the scenario format is a row with an error (its one-line message), not a failure of
// the sweep. Results do not depend on the thread count.
#ifndef PACELINE_SIM_SEARCH_SWEEP_H_
#define PACELINE_SIM_SEARCH_SWEEP_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/json.h"
#include "sim/search/scenario_source.h"

namespace paceline {

struct SweepAxis {
  std::string path;                 // dotted field path, e.g. "parallelism.tp"
  std::vector<std::string> values;  // YAML text of each value
  std::string origin;               // where it was given (Override::origin), e.g. "--set"
};

// Reads an axis written "PATH=V1,V2,...", e.g. "parallelism.tp=1,2,4" or
// "cluster.intra_node={bandwidth: 300 GB/s},{bandwidth: 900 GB/s}": values are split at commas
// outside brackets, braces and quotes. Throws InputError citing `where` when it is malformed;
// errors about a value cite "WHERE PATH=VALUE".
SweepAxis parse_sweep_axis(const std::string& text, const std::string& where);

// The most configurations one sweep runs (2^24: hours of simulation for the smallest scenario).
inline constexpr size_t kMostSweepConfigurations = size_t{1} << 24;

// Refuses a sweep of more than kMostSweepConfigurations, and one of which no configuration
// reads: an error outside the axes, thrown as the first configuration's. Configurations that
// only some values break are left to be rows with their error. Reading configurations until
// one reads, it throws SimulationStopped once `*stop` is set.
void check_sweep(const ScenarioSource& base, const std::vector<SweepAxis>& axes,
                 const std::atomic<bool>* stop = nullptr);

// The number of configurations (the product of the axis lengths; 1 for no axes).
size_t sweep_size(const std::vector<SweepAxis>& axes);
// The overrides of configuration `index`.
std::vector<Override> sweep_configuration(const std::vector<SweepAxis>& axes, size_t index);

// The sweep's results as columns, one row per configuration of [begin, end). Rows with an
// error hold NaN, -1 and false in the numeric columns.
struct SweepTable {
  std::vector<double> iteration_time_s;
  std::vector<double> tokens_per_s;
  std::vector<double> tokens_per_s_per_gpu;
  std::vector<double> mfu;
  std::vector<double> hfu;
  std::vector<int64_t> peak_memory_bytes;
  std::vector<int64_t> peak_reserved_bytes;  // Result::peak_reserved_bytes
  std::vector<uint8_t> fits;       // 0 or 1
  std::vector<std::string> error;  // "" for a simulated configuration
  std::vector<std::vector<std::string>> warnings;  // the simulation's (Result::warnings)

  size_t size() const { return error.size(); }
};

struct SweepOptions {
  int threads = 0;  // 0: one per hardware thread
  // Called on the calling thread as configurations finish (done of total); may throw to cancel.
  std::function<void(size_t done, size_t total)> progress;
  // Set by another thread (an interrupt), it stops the sweep with SimulationStopped, between
  // configurations and inside one's simulation.
  const std::atomic<bool>* stop = nullptr;
};

// Simulates configurations [begin, end) of the sweep (all when end is past the last). Refuses
// axes that set one field twice: its rows would be labelled by one value and run with another.
SweepTable run_sweep(const ScenarioSource& base, const std::vector<SweepAxis>& axes, size_t begin,
                     size_t end, const SweepOptions& options = {});

// The table with one row per configuration of [begin, …): each axis's value, then the results.
// JSON: [{"parallelism.tp": "4", …, "iteration_time_s": …, "error": null}, …]; CSV: a header
// row and one row per configuration (RFC 4180 quoting); text: aligned columns for a terminal.
Json to_json(const std::vector<SweepAxis>& axes, size_t begin, const SweepTable& table);
std::string to_csv(const std::vector<SweepAxis>& axes, size_t begin, const SweepTable& table);
std::string to_text(const std::vector<SweepAxis>& axes, size_t begin, const SweepTable& table);

}  // namespace paceline

#endif  // PACELINE_SIM_SEARCH_SWEEP_H_
