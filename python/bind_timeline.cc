// Bindings of sim/timeline: a Result's spans and memory as NumPy columns that keep their owner
// alive.
#include <pybind11/stl.h>

#include <memory>

#include "python/bindings.h"
#include "sim/timeline/timeline.h"

namespace paceline::python {

void bind_timeline(py::module_& m) {
  py::class_<Timeline, std::shared_ptr<Timeline>>(
      m, "Timeline",
      "The spans of one simulated step on the recorded ranks (one per pipeline stage), as "
      "read-only NumPy columns of equal length. Times in simulated seconds from the step's start; "
      "`stream`, `name` and `activity` index the *_names lists.")
      .def("__len__", &Timeline::size, "Number of spans.")
      .def_property_readonly(
          "rank", [](py::object self) { return view(self.cast<const Timeline&>().rank, self); },
          "Global rank of each span (int32).")
      .def_property_readonly(
          "stage", [](py::object self) { return view(self.cast<const Timeline&>().stage, self); },
          "Pipeline stage of each span (int32).")
      .def_property_readonly(
          "stream", [](py::object self) { return view(self.cast<const Timeline&>().stream, self); },
          "Stream of each span, an index into stream_names (int32).")
      .def_property_readonly(
          "start_s",
          [](py::object self) { return view(self.cast<const Timeline&>().start_s, self); },
          "Start of each span, in simulated seconds (float64).")
      .def_property_readonly(
          "end_s", [](py::object self) { return view(self.cast<const Timeline&>().end_s, self); },
          "End of each span, in simulated seconds (float64).")
      .def_property_readonly(
          "name", [](py::object self) { return view(self.cast<const Timeline&>().name, self); },
          "Name of each span, an index into names (int32).")
      .def_property_readonly(
          "activity",
          [](py::object self) { return view(self.cast<const Timeline&>().activity, self); },
          "What each span spends time on, an index into activity_names (int32).")
      .def_property_readonly(
          "microbatch",
          [](py::object self) { return view(self.cast<const Timeline&>().microbatch, self); },
          "Micro-batch of each span, -1 for step-level work (int32).")
      .def_readonly("stream_names", &Timeline::stream_names,
                    "Stream names (compute, tp, dp, pp send next, ...).")
      .def_readonly("names", &Timeline::names, "Span names (layer.forward, attn.qkv, ...).")
      .def_readonly("activity_names", &Timeline::activity_names,
                    "Activity names (compute, recompute, tp_communication, ...).");
  py::class_<MemoryTimeline, std::shared_ptr<MemoryTimeline>>(
      m, "MemoryTimeline",
      "The memory of the recorded ranks (one per pipeline stage) over one simulated step, as "
      "read-only NumPy columns of equal length: per rank, in order of time, the bytes it holds "
      "from each row's time until its next row.")
      .def("__len__", &MemoryTimeline::size, "Number of rows.")
      .def_property_readonly(
          "rank",
          [](py::object self) { return view(self.cast<const MemoryTimeline&>().rank, self); },
          "Global rank of each row (int32).")
      .def_property_readonly(
          "stage",
          [](py::object self) { return view(self.cast<const MemoryTimeline&>().stage, self); },
          "Pipeline stage of each row (int32).")
      .def_property_readonly(
          "time_s",
          [](py::object self) { return view(self.cast<const MemoryTimeline&>().time_s, self); },
          "Simulated seconds from the step's start (float64).")
      .def_property_readonly(
          "bytes",
          [](py::object self) { return view(self.cast<const MemoryTimeline&>().bytes, self); },
          "Bytes the rank holds from then on (int64).");
}

}  // namespace paceline::python
