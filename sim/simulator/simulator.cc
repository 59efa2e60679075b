#include "sim/simulator/simulator.h"

#include <chrono>

#include "hardware/collective_model.h"
#include "hardware/op_timer.h"

namespace paceline {

Prediction simulate(std::shared_ptr<const Scenario> scenario, const SimulateOptions& options) {
  // The wall clock measures the simulator itself; it never reaches the simulated schedule.
  const auto started = std::chrono::steady_clock::now();
  const OpTimer timer(scenario->cluster.gpu);
  const CollectiveModel collectives(scenario->cluster);
  auto lowering = std::make_shared<const Lowering>(lower(*scenario, timer, collectives, {.record_spans = true}));
  const Engine engine(lowering->ranks, EngineOptions{options.max_events});
  Prediction prediction;
  prediction.run = engine.run();
  prediction.lowering = lowering;
  prediction.result = make_result(scenario, *lowering, prediction.run);
  prediction.result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return prediction;
}

}  // namespace paceline
