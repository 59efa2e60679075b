// Fuzzes sim/scenario/scenario.h load_scenario_text: every input loads or throws InputError
// citing file:line:col. A loaded scenario also keeps the invariants lowering relies on.
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>

#include "sim/scenario/scenario.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Scenario scenario;
  const bool loaded = fuzz::loads_or_input_error([&] { scenario = load_scenario_text(text, "fuzz.yaml"); });
  if (!loaded) return 0;
  // What validation promises: the layout covers the cluster and the layers.
  const Parallelism& p = scenario.parallelism;
  if (static_cast<int64_t>(p.tp) * p.pp * p.cp * p.dp != scenario.num_gpus()) fuzz::fail("tp·pp·cp·dp != GPUs");
  const int64_t layers = std::accumulate(p.layers_per_stage.begin(), p.layers_per_stage.end(), int64_t{0});
  if (layers != scenario.model.layers) fuzz::fail("layers_per_stage does not sum to the model's layers");
  if (static_cast<int64_t>(p.layers_per_stage.size()) != static_cast<int64_t>(p.pp) * p.virtual_stages) {
    fuzz::fail("layers_per_stage has the wrong length");
  }
  if (scenario.training.num_microbatches(p.dp) < 1) fuzz::fail("no micro-batches");
  return 0;
}
