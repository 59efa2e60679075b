// simulate(): the whole prediction — lower the scenario, replay it, and assemble the result.
#ifndef PACELINE_SIM_SIMULATOR_SIMULATOR_H_
#define PACELINE_SIM_SIMULATOR_SIMULATOR_H_

#include <memory>

#include "sim/engine/engine.h"
#include "sim/parallel/lowering.h"
#include "sim/report/result.h"
#include "sim/scenario/scenario.h"

namespace paceline {

struct SimulateOptions {
  uint64_t max_events = 0;  // 0: no limit
};

// A prediction and what produced it (for traces).
struct Prediction {
  Result result;
  std::shared_ptr<const Lowering> lowering;
  RunResult run;
};

Prediction simulate(std::shared_ptr<const Scenario> scenario, const SimulateOptions& options = {});

}  // namespace paceline

#endif  // PACELINE_SIM_SIMULATOR_SIMULATOR_H_
