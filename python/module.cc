// The compiled half of the Python package `paceline` (python/paceline/ is the other): an index
// of one binding file per C++ folder it exposes.
#include "python/bindings.h"

PYBIND11_MODULE(_paceline, m) {
  m.doc() =
      "paceline's C++ core: simulation, sweeps, layout search, timelines and catalogs. "
      "Use the `paceline` package, which wraps it.";
  paceline::python::bind_simulator(m);
  paceline::python::bind_search(m);
  paceline::python::bind_timeline(m);
  paceline::python::bind_listing(m);
}
