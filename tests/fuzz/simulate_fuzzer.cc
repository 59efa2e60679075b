// Fuzzes the whole prediction on the scenarios the loader accepts: sim/simulator/simulator.h
// simulate() on every fuzzed scenario that loads and whose estimate (cost_estimate.h) is small
// enough to run in milliseconds. A valid scenario must simulate: the only errors allowed are
// an InputError citing file:line:col (a rule only lowering can check) and SimulationLimitError;
// an InternalError (a failed PACELINE_CHECK) or any other exception is a bug, and the result
// keeps its contract: finite, positive time; the breakdown sums to it; memory is not negative.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>

#include "sim/simulator/simulator.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const Scenario> scenario;
  const bool loaded = fuzz::loads_or_input_error(
      [&] { scenario = std::make_shared<const Scenario>(load_scenario_text(text, "fuzz.yaml")); });
  if (!loaded) return 0;
  CostEstimate cost;
  if (!fuzz::loads_or_input_error([&] { cost = estimate_cost(*scenario); })) return 0;
  // Small enough for a fuzzer's pace (a few milliseconds with sanitizers). The GPU count is
  // bounded too: pricing a collective over thousands of ranks on the topology takes
  // milliseconds, which the estimate (tasks, not collectives) does not count.
  if (cost.program_tasks > 20'000 || cost.task_completions > 100'000 || scenario->num_gpus() > 256) return 0;
  Result result;
  try {
    result = simulate(scenario, SimulateOptions{.max_events = 1'000'000}).result;
  } catch (const InputError& e) {
    if (!fuzz::cites_position(e)) fuzz::fail("an InputError without file:line:col: " + std::string(e.what()));
    return 0;
  } catch (const SimulationLimitError&) {
    return 0;
  } catch (const std::exception& e) {
    fuzz::fail(std::string("simulate() threw ") + typeid(e).name() + ": " + e.what());
  }
  const double seconds = result.iteration_time / Seconds(1);
  if (!(std::isfinite(seconds) && seconds > 0.0)) fuzz::fail("a non-finite or non-positive iteration time");
  if (std::abs(result.breakdown.total() / Seconds(1) - seconds) > 1e-9 * seconds + 1e-12) {
    fuzz::fail("the breakdown does not sum to the iteration time");
  }
  if (result.peak_memory_bytes < 0) fuzz::fail("negative peak memory");
  return 0;
}
