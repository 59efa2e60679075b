// Bindings of sim/search: scenario sources, sweeps and the layout search.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "python/bindings.h"
#include "sim/search/search.h"
#include "sim/search/sweep.h"

namespace paceline::python {
namespace {

using Grid = std::vector<std::pair<std::string, std::vector<std::string>>>;

std::vector<SweepAxis> sweep_axes(const Grid& grid) {
  std::vector<SweepAxis> axes;
  for (const auto& [path, values] : grid) axes.push_back({path, values, ""});
  return axes;
}

}  // namespace

void bind_search(py::module_& m) {
  m.def(
      "read_source",
      [](const std::string& path) {
        const ScenarioSource source = read_scenario_source(path);
        return std::make_pair(source.text, source.file);
      },
      py::arg("path"),
      "Reads a scenario file; returns (text, file). Raises ValueError when unreadable.");

  py::class_<SweepTable, std::shared_ptr<SweepTable>>(
      m, "SweepTable",
      "A sweep's results as read-only NumPy columns, one row per configuration; rows whose "
      "configuration is invalid hold NaN, -1 and False, and their one-line reason in `error`.")
      .def("__len__", &SweepTable::size, "Number of configurations.")
      .def_property_readonly(
          "iteration_time_s",
          [](py::object self) {
            return view(self.cast<const SweepTable&>().iteration_time_s, self);
          },
          "Iteration time, in seconds (float64).")
      .def_property_readonly(
          "tokens_per_s",
          [](py::object self) { return view(self.cast<const SweepTable&>().tokens_per_s, self); },
          "Throughput, in tokens per second (float64).")
      .def_property_readonly(
          "tokens_per_s_per_gpu",
          [](py::object self) {
            return view(self.cast<const SweepTable&>().tokens_per_s_per_gpu, self);
          },
          "Throughput per GPU, in tokens per second (float64).")
      .def_property_readonly(
          "mfu", [](py::object self) { return view(self.cast<const SweepTable&>().mfu, self); },
          "Model FLOP utilization, a fraction (float64).")
      .def_property_readonly(
          "hfu", [](py::object self) { return view(self.cast<const SweepTable&>().hfu, self); },
          "Hardware FLOP utilization, a fraction (float64).")
      .def_property_readonly(
          "peak_memory_bytes",
          [](py::object self) {
            return view(self.cast<const SweepTable&>().peak_memory_bytes, self);
          },
          "Peak memory of the worst rank, in bytes; -1 for invalid configurations (int64).")
      .def_property_readonly(
          "peak_reserved_bytes",
          [](py::object self) {
            return view(self.cast<const SweepTable&>().peak_reserved_bytes, self);
          },
          "The most the caching allocator holds on the worst rank (Result.peak_reserved_bytes), "
          "in bytes; -1 for invalid configurations (int64).")
      .def_property_readonly(
          "fits", [](py::object self) { return view(self.cast<const SweepTable&>().fits, self); },
          "1 when the peak fits in GPU memory, else 0 (uint8).")
      .def_readonly("error", &SweepTable::error,
                    "Per configuration: '' or the one-line reason it is invalid.")
      .def_readonly(
          "warnings", &SweepTable::warnings,
          "Per configuration: the simulation's warnings (Result.warnings), a list of lines.");

  m.def(
      "sweep",
      [](const std::string& text, const std::string& file, const Grid& grid, size_t begin, size_t end, int threads,
         const std::function<void(size_t, size_t)>& progress) {
        const std::vector<SweepAxis> axes = sweep_axes(grid);
        return run_interruptible([&](const std::atomic<bool>& stop) {
          return std::make_shared<SweepTable>(
              run_sweep({text, file}, axes, begin, end,
                        {.threads = threads, .progress = progress, .stop = &stop}));
        });
      },
      py::arg("text"), py::arg("file"), py::arg("grid"), py::arg("begin"), py::arg("end"),
      py::arg("threads") = 0, py::arg("progress") = nullptr,
      "Simulates configurations [begin, end) of the cartesian product of `grid` ([(dotted path, "
      "[YAML value "
      "text, ...]), ...], last axis fastest) applied to the scenario `text`, on `threads` C++ "
      "threads (0: all "
      "cores) with the GIL released; `progress(done, total)` is called as they finish. Returns a "
      "SweepTable "
      "(seconds, bytes, tokens/s).");

  m.def(
      "check_sweep",
      [](const std::string& text, const std::string& file, const Grid& grid) {
        const std::vector<SweepAxis> axes = sweep_axes(grid);
        run_interruptible([&](const std::atomic<bool>& stop) {
          check_sweep({text, file}, axes, &stop);
        });
      },
      py::arg("text"), py::arg("file"), py::arg("grid"),
      "Raises ValueError, with the first configuration's message, when no configuration of the "
      "sweep reads: an error outside the grid (a misspelt field path, a bad base scenario).");

  m.def(
      "search",
      [](const std::string& text, const std::string& file, int gpus, int top, int threads,
         const std::function<void(const std::string&)>& progress) {
        std::function<void(std::string_view, size_t, size_t)> lines;
        if (progress) {
          lines = [&](std::string_view stage, size_t done, size_t total) {
            progress(progress_line(stage, done, total));
          };
        }
        const SearchReport report = run_interruptible([&](const std::atomic<bool>& stop) {
          return search_layouts(
              {text, file}, {.gpus = gpus, .top = top, .threads = threads, .progress = lines, .stop = &stop});
        });
        return to_python(to_json(report));
      },
      py::arg("text"), py::arg("file"), py::arg("gpus") = 0, py::arg("top") = 10,
      py::arg("threads") = 0, py::arg("progress") = nullptr,
      "Ranks every valid layout of the scenario's model on its cluster (or on `gpus` GPUs) by "
      "simulated tokens/s; returns the report as a dict: counts (considered, pruned_memory, "
      "pruned_bound, simulated, shared, fit), wall_s in seconds, and the `top` layouts with iteration_time_s (s), "
      "tokens_per_s, mfu, "
      "peak_memory_bytes (bytes). `progress(line)` is called with a line saying how far the search is "
      "(\"search: 2048 of 276660 layouts bounded\", \"search: 12 layouts simulated\": the count after a "
      "batch includes the shared ones); an exception it raises stops the search, and so does Ctrl-C "
      "(KeyboardInterrupt).");
}

}  // namespace paceline::python
