// Benchmarks `paceline search` end to end — enumerate, bound, prune and simulate every layout of
// GPT-3 175B on 1024 A100s (global batch 1536) — on all cores and on one, with the counts the
// search reports. The target: under 10 s on a 2-core machine. Llama 3 70B also runs on
// H200s, whose kernels are timed from the measured profile (hardware/profiles), which every
// simulated layout's scenario loads.
#include <benchmark/benchmark.h>

#include <vector>

#include "sim/search/search.h"
#include "tests/benchmarks/peak_memory.h"

namespace paceline {
namespace {

void search_file(benchmark::State& state, const char* path, std::vector<Override> overrides = {}) {
  const ScenarioSource source = read_scenario_source(path);
  SearchReport report;
  for (auto _ : state) {
    report = search_layouts(
        source, {.top = 10, .threads = static_cast<int>(state.range(0)), .overrides = overrides});
    benchmark::DoNotOptimize(report.top.data());
  }
  state.counters["considered"] = static_cast<double>(report.considered);
  state.counters["pruned_memory"] = static_cast<double>(report.pruned_memory);
  state.counters["pruned_bound"] = static_cast<double>(report.pruned_bound);
  state.counters["simulated"] = static_cast<double>(report.simulated);
  state.counters["shared"] = static_cast<double>(report.shared);
  state.counters["fit"] = static_cast<double>(report.fit);
  state.counters["max_rss_MiB"] = peak_resident_mib();
}

// Arg: threads (0: one per core).
BENCHMARK_CAPTURE(search_file, gpt3_175b_1024xa100, "scenarios/gpt3-175b-1024xa100.yaml")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kSecond)
    ->Iterations(2);
BENCHMARK_CAPTURE(search_file, llama3_70b_64xh100, "scenarios/llama3-70b-64xh100.yaml")
    ->Arg(0)
    ->Unit(benchmark::kSecond)
    ->Iterations(2);
BENCHMARK_CAPTURE(search_file, llama3_70b_64xh200_measured_profile,
                  "scenarios/llama3-70b-64xh100.yaml",
                  std::vector<Override>{{"cluster.gpu", "h200-sxm-141gb"}})
    ->Arg(0)
    ->Unit(benchmark::kSecond)
    ->Iterations(2);

}  // namespace
}  // namespace paceline
