#include "sim/listing/listing.h"

#include "hardware/gpu_spec.h"
#include "models/model_catalog.h"

namespace paceline {

Json model_listing() {
  Json list = Json::array();
  for (const std::string& name : catalog_models(default_model_catalog())) {
    const ModelSpec model = resolve_model(name, default_model_catalog(), {});
    const ParameterCount count = count_parameters(model);
    Json entry = Json::object();
    entry.set("name", name)
        .set("layers", model.layers)
        .set("hidden", model.hidden)
        .set("heads", model.heads);
    entry.set("kv_heads", model.kv_heads)
        .set("parameters", count.total)
        .set("active_parameters", count.active);
    list.push(std::move(entry));
  }
  return list;
}

Json gpu_listing() {
  Json list = Json::array();
  for (const std::string& name : catalog_gpus(default_gpu_catalog())) {
    const GpuSpec gpu = resolve_gpu(name, default_gpu_catalog(), {});
    const auto fp8 = gpu.peak(DType::kFp8);
    Json entry = Json::object();
    entry.set("name", name).set("description", gpu.description);
    entry.set("bf16_flop_per_s", *gpu.peak(DType::kBf16) / FlopPerSecond(1));
    entry.set("fp8_flop_per_s", fp8 ? Json(*fp8 / FlopPerSecond(1)) : Json());
    // Whole bytes, as a result's capacity_bytes counts them.
    entry.set("memory_bytes", static_cast<int64_t>(gpu.memory_capacity / Bytes(1)));
    entry.set("memory_bandwidth_bytes_per_s", gpu.memory_bandwidth / BytesPerSecond(1));
    list.push(std::move(entry));
  }
  return list;
}

}  // namespace paceline
