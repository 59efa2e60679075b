// Bindings of sim/simulator and sim/scenario: simulate() and the Result it returns.
#include <pybind11/stl.h>

#include <memory>

#include "python/bindings.h"
#include "sim/report/result.h"
#include "sim/search/scenario_source.h"
#include "sim/simulator/cost_estimate.h"
#include "sim/simulator/simulator.h"
#include "sim/timeline/timeline.h"

namespace paceline::python {
namespace {

// A Result read back from a pickle carries the prediction, not the step's spans, and one from
// simulate() keeps no memory samples: the simulation is deterministic, so simulating its
// scenario again gives the same step with them.
void ensure_step_recorded(Prediction& p, bool with_memory) {
  if (p.lowering != nullptr && (!with_memory || !p.run.memory.empty())) return;
  Prediction again = run_interruptible([&](const std::atomic<bool>& stop) {
    return simulate_again(p.result, {.stop = &stop, .record_memory = with_memory});
  });
  p.lowering = std::move(again.lowering);
  p.run = std::move(again.run);
}

}  // namespace

void bind_simulator(py::module_& m) {
  py::class_<Prediction, std::shared_ptr<Prediction>>(
      m, "Result",
      "The prediction of one training step (paceline.simulate()). Times in seconds, memory in "
      "bytes, throughput in tokens per second; to_dict() has every key of the result contract. "
      "Pickles as that contract's JSON.")
      .def_property_readonly(
          "iteration_time_s",
          [](const Prediction& p) { return p.result.iteration_time / Seconds(1); },
          "Wall time of one optimizer step, in seconds.")
      .def_property_readonly(
          "tokens_per_s", [](const Prediction& p) { return p.result.tokens_per_s; },
          "Global batch × sequence length over the iteration time, in tokens per second.")
      .def_property_readonly(
          "tokens_per_s_per_gpu", [](const Prediction& p) { return p.result.tokens_per_s_per_gpu; },
          "tokens_per_s divided by the GPU count, in tokens per second.")
      .def_property_readonly(
          "mfu", [](const Prediction& p) { return p.result.mfu; },
          "Model FLOP utilization: model FLOP/s per GPU over its dense peak (a fraction).")
      .def_property_readonly(
          "hfu", [](const Prediction& p) { return p.result.hfu; },
          "Hardware FLOP utilization, counting recomputation (a fraction).")
      .def_property_readonly(
          "peak_memory_bytes", [](const Prediction& p) { return p.result.peak_memory_bytes; },
          "Peak memory of the worst rank, in bytes.")
      .def_property_readonly(
          "peak_reserved_bytes", [](const Prediction& p) { return p.result.peak_reserved_bytes; },
          "The most the caching allocator holds on the worst rank, in bytes (PyTorch's "
          "max_memory_reserved): each allocator pool keeps its own peak. At least "
          "peak_memory_bytes, and at most capacity_bytes where that fits.")
      .def_property_readonly(
          "capacity_bytes", [](const Prediction& p) { return p.result.capacity_bytes; },
          "Memory of one GPU, in bytes.")
      .def_property_readonly(
          "fits", [](const Prediction& p) { return p.result.fits; },
          "Whether peak_memory_bytes fits in capacity_bytes.")
      .def_property_readonly(
          "warnings", [](const Prediction& p) { return p.result.warnings; },
          "What the simulation knows it leaves out, one line each (empty for most scenarios).")
      .def(
          "to_dict", [](const Prediction& p) { return to_python(to_json(p.result)); },
          "The result contract as a dict (the keys of `paceline run --json`; seconds, bytes, "
          "tokens/s).")
      .def(
          "to_json", [](const Prediction& p, int indent) { return to_json(p.result).dump(indent); },
          py::arg("indent") = 2, "The result contract as JSON text (seconds, bytes, tokens/s).")
      .def(
          "timeline",
          [](Prediction& p, bool kernels) {
            ensure_step_recorded(p, /*with_memory=*/false);
            return std::make_shared<Timeline>(make_timeline(*p.lowering, p.run, kernels));
          },
          py::arg("kernels") = false,
          "The step's spans as a Timeline (simulated seconds): one per task, or one per kernel "
          "with kernels=True. A Result read back from a pickle simulates its scenario again for "
          "them, and raises ValueError when that gives another result (its catalogs or files "
          "changed).")
      .def(
          "memory_timeline",
          [](Prediction& p) {
            ensure_step_recorded(p, /*with_memory=*/true);
            return std::make_shared<MemoryTimeline>(make_memory_timeline(*p.lowering, p.run));
          },
          "The memory of the recorded ranks over the step as a MemoryTimeline (bytes, simulated "
          "seconds): what each holds from its start and after each instant a task started or "
          "ended. Simulates the scenario again to record it (the same step; ValueError when its "
          "catalogs or files changed). peak_memory_bytes and to_dict()'s memory.stages[].peak_at "
          "say where the peak is.")
      .def("__repr__", [](const Prediction& p) { return to_text(p.result); })
      // Pickled as the result contract's JSON, so that results cross processes (multiprocessing,
      // concurrent.futures, dask) and files without simulating again.
      .def(
          py::pickle([](const Prediction& p) { return py::make_tuple(to_json(p.result).dump(-1)); },
                     [](const py::tuple& state) {
                       if (state.size() != 1 || !py::isinstance<py::str>(state[0])) {
                         throw std::invalid_argument(
                             "a pickled paceline.Result holds one string, the result's JSON");
                       }
                       const std::string json = state[0].cast<std::string>();
                       auto prediction = std::make_shared<Prediction>();
                       py::gil_scoped_release release;  // it reads catalogs and profiles
                       prediction->result = read_result(json, "pickled Result");
                       return prediction;
                     }));

  m.def(
      "simulate",
      [](const std::string& text, const std::string& file, double timeout_s, uint64_t max_events,
         double max_memory_bytes) {
        return run_interruptible([&](const std::atomic<bool>& stop) {
          auto scenario = std::make_shared<const Scenario>(load_scenario(ScenarioSource{text, file}));
          const SimulateOptions options{.max_events = max_events,
                                        .timeout = Seconds(timeout_s),
                                        .max_memory = Bytes(max_memory_bytes),
                                        .stop = &stop};
          return std::make_shared<Prediction>(simulate(scenario, options));
        });
      },
      py::arg("text"), py::arg("file"), py::arg("timeout_s") = 0.0, py::arg("max_events") = 0,
      py::arg("max_memory_bytes") = 0.0,
      "Simulates one training step of the scenario YAML `text` (errors cite `file`) with the GIL "
      "released; returns a Result (seconds, bytes, tokens/s). Raises ValueError with file:line:col "
      "on bad input, SimulationLimitError when a limit (0: none) stops it, and KeyboardInterrupt "
      "on Ctrl-C.");
  m.def(
      "estimate_cost",
      [](const std::string& text, const std::string& file) {
        const CostEstimate cost = estimate_cost(load_scenario(ScenarioSource{text, file}));
        py::dict out;
        out["engine_tasks"] = cost.task_completions;
        out["tasks_per_rank"] = cost.tasks_per_rank;
        out["simulated_ranks"] = cost.ranks;
        out["memory_bytes"] = cost.memory / Bytes(1);
        out["wall_time_s"] = cost.wall_time / Seconds(1);
        out["full_fidelity"] = cost.full_fidelity;
        out["description"] = describe(cost);
        return out;
      },
      py::arg("text"), py::arg("file"),
      "What simulating the scenario would take, estimated without lowering it: engine tasks, "
      "memory (bytes) and wall time (seconds) on this machine.");
  m.def(
      "machine_memory_bytes", [] { return machine_memory() / Bytes(1); },
      "This machine's physical memory, in bytes (the CLI's default --max-memory).");
  m.def(
      "load_scenario",
      [](const std::string& text, const std::string& file) {
        return to_python(to_json(load_scenario(ScenarioSource{text, file})));
      },
      py::arg("text"), py::arg("file"),
      "Reads and validates the scenario YAML `text`; returns the resolved scenario as a dict "
      "(every default filled in; quantities in seconds, bytes, bytes/s).");
  py::register_exception<SimulationLimitError>(m, "SimulationLimitError", PyExc_RuntimeError);
}

}  // namespace paceline::python
