// simulate(): the whole prediction — lower the scenario, replay it, and assemble the result.
#ifndef PACELINE_SIM_SIMULATOR_SIMULATOR_H_
#define PACELINE_SIM_SIMULATOR_SIMULATOR_H_

#include <memory>

#include "sim/engine/engine.h"
#include "sim/parallel/lowering.h"
#include "sim/report/result.h"
#include "sim/scenario/scenario.h"
#include "sim/simulator/cost_estimate.h"

namespace paceline {

// Limits on one simulation. A limit only ever stops a run (with SimulationLimitError, naming
// what it would have needed): a run that finishes is bit-identical with or without limits.
struct SimulateOptions {
  uint64_t max_events = 0;  // stop after this many engine events; 0: no limit
  // Wall-clock time for lowering and replay; 0: no limit. A scenario whose estimate
  // (sim/simulator/cost_estimate.h) exceeds it fails before lowering (full fidelity that folds
  // peers: once lowered and folded); a run that overruns it anyway is stopped.
  Seconds timeout;
  // Memory the run may take, checked against the estimate as the timeout is; 0: no limit.
  // The CLI passes the machine's memory (machine_memory()) unless told otherwise.
  Bytes max_memory;
  // Threads that lower pipeline stages at once (0: one per hardware thread). Callers that run
  // many simulations side by side (sweep, search, validate) keep 1. The result never depends on it.
  int threads = 1;
  // Set by another thread (an interrupt), it stops the run with SimulationStopped: checked after
  // lowering and as the engine runs. Never changes a result.
  const std::atomic<bool>* stop = nullptr;
  // Keep the recorded ranks' memory after every task start and end (RunResult::memory), which
  // a trace and make_memory_timeline show one row per instant of; off, a run keeps only each
  // rank's peak.
  bool record_memory = false;
};

// A prediction and what produced it (for traces).
struct Prediction {
  Result result;
  std::shared_ptr<const Lowering> lowering;
  RunResult run;
};

// How communication running beside compute slows it on the scenario's GPUs (the engine's
// interference model, set from the GPU catalog).
Interference interference_of(const Scenario& scenario);

// Throws SimulationLimitError when a limit of `options` stops the run (before lowering when the
// estimate already exceeds it).
Prediction simulate(std::shared_ptr<const Scenario> scenario, const SimulateOptions& options = {});

// Simulates the scenario of a result read back (read_result) again, for what such a Result does
// not carry: the lowering and the spans. Throws InputError when the simulation gives another
// result, as it does once the catalogs or files the scenario names have changed.
Prediction simulate_again(const Result& result, const SimulateOptions& options = {});

// Throws SimulationLimitError, with the estimate, when `cost` exceeds the memory or time limit
// of `options` (simulate() calls it before lowering whenever one is set).
void check_limits(const CostEstimate& cost, const SimulateOptions& options);

}  // namespace paceline

#endif  // PACELINE_SIM_SIMULATOR_SIMULATOR_H_
