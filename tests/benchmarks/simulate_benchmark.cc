// Benchmarks the whole prediction path — load the scenario file (catalog lookups included),
// lower, replay, assemble the result — for the ready scenarios, in both fidelities.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "sim/search/layout.h"
#include "sim/simulator/simulator.h"
#include "tests/benchmarks/peak_memory.h"

namespace paceline {
namespace {

void simulate_file(benchmark::State& state, const std::string& path, Fidelity fidelity, bool fold_symmetric_peers = true) {
  uint64_t events = 0;
  for (auto _ : state) {
    Scenario scenario = load_scenario_file(path);
    scenario.simulation.fidelity = fidelity;
    scenario.simulation.fold_symmetric_peers = fold_symmetric_peers;
    const Prediction p = simulate(std::make_shared<const Scenario>(std::move(scenario)));
    events += p.result.events;
    benchmark::DoNotOptimize(p.result.iteration_time);
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["max_rss_MiB"] = peak_resident_mib();
}

// A layout `paceline search` simulates, applied to the scenario as the search applies it.
void simulate_layout(benchmark::State& state, const std::string& path, const Layout& layout) {
  const Scenario base = load_scenario_file(path);
  uint64_t events = 0;
  for (auto _ : state) {
    const Prediction p = simulate(std::make_shared<const Scenario>(with_layout(base, layout)));
    events += p.result.events;
    benchmark::DoNotOptimize(p.result.iteration_time);
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["max_rss_MiB"] = peak_resident_mib();
}

BENCHMARK_CAPTURE(simulate_file, gpt3_175b_1024_symmetric, "scenarios/gpt3-175b-1024xa100.yaml", Fidelity::kSymmetric)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulate_file, gpt3_175b_1024_full, "scenarios/gpt3-175b-1024xa100.yaml", Fidelity::kFull)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(simulate_file, gpt3_175b_1024_full_unfolded, "scenarios/gpt3-175b-1024xa100.yaml", Fidelity::kFull,
                  false)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(simulate_file, llama3_70b_64_symmetric, "scenarios/llama3-70b-64xh100.yaml", Fidelity::kSymmetric)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulate_file, mixtral_8x7b_64_symmetric, "scenarios/mixtral-8x7b-64xh100.yaml", Fidelity::kSymmetric)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulate_file, llama31_405b_16384_symmetric, "scenarios/llama3.1-405b-16384xh100.yaml",
                  Fidelity::kSymmetric)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulate_file, llama31_405b_16384_full, "scenarios/llama3.1-405b-16384xh100.yaml", Fidelity::kFull)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
// The search's best layout for the 405B scenario: 64 pipeline stages of 256 micro-batches, the
// costliest kind of simulation a search of that cluster runs.
BENCHMARK_CAPTURE(simulate_layout, llama31_405b_16384_pp64,
                  "scenarios/llama3.1-405b-16384xh100.yaml",
                  Layout{.tp = 8, .pp = 64, .dp = 8, .cp = 4, .zero = 1, .sequence_parallel = true})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(simulate_file, gpt_1_7b_1_gpu, "scenarios/gpt-1.7b-1xa100.yaml", Fidelity::kSymmetric)
    ->Unit(benchmark::kMillisecond);
// FSDP2 on one node: per-block gathers, weight copies and gradient copies every micro-batch.
BENCHMARK_CAPTURE(simulate_file, llama3_8b_8_fsdp2_symmetric,
                  "scenarios/llama3-8b-8xh100-torchtitan.yaml", Fidelity::kSymmetric)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace paceline
