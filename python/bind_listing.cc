// Bindings of sim/listing: the model and GPU catalogs.
#include "base/data_root.h"
#include "python/bindings.h"
#include "sim/listing/listing.h"

namespace paceline::python {

void bind_listing(py::module_& m) {
  m.def(
      "models", [] { return to_python(model_listing()); },
      "The model catalog: a list of dicts {name, layers, hidden, heads, kv_heads, parameters, "
      "active_parameters} (counts), by name.");
  m.def(
      "gpus", [] { return to_python(gpu_listing()); },
      "The GPU catalog: a list of dicts {name, description, bf16_flop_per_s, fp8_flop_per_s "
      "(FLOP/s; None "
      "without fp8), memory_bytes (bytes), memory_bandwidth_bytes_per_s (bytes/s)}, by name.");
  m.def("data_root", &data_root,
        "The folder holding paceline's catalogs, profiles and scenarios ($PACELINE_DATA_DIR, else "
        "the one "
        "fixed at build time).");
}

}  // namespace paceline::python
