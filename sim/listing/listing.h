// Catalog listings: the model and GPU catalogs as JSON lists with each entry's key figures —
// the entries `paceline models --json` and `paceline gpus --json` print, for Python's
// paceline.models() and paceline.gpus(). Units are in the key names (bytes, FLOP/s).
#ifndef PACELINE_SIM_LISTING_LISTING_H_
#define PACELINE_SIM_LISTING_LISTING_H_

#include "base/json.h"

namespace paceline {

// [{name, layers, hidden, heads, kv_heads, parameters, active_parameters}, …] by name.
Json model_listing();
// [{name, description, bf16_flop_per_s, fp8_flop_per_s (null without fp8), memory_bytes,
//   memory_bandwidth_bytes_per_s}, …] by name.
Json gpu_listing();

}  // namespace paceline

#endif  // PACELINE_SIM_LISTING_LISTING_H_
