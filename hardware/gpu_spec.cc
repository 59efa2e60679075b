#include "hardware/gpu_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/data_root.h"
#include "base/parsed_file_cache.h"
#include "base/yaml_reader.h"
#include "hardware/internal/sourced_value.h"

namespace paceline {
namespace {

// Bounds that keep the tiling arithmetic in 64 bits: no kernel's tile spans more than a few
// hundred rows, and no GPU has more than a few hundred SMs.
constexpr int64_t kMaxTile = 65536;
constexpr int64_t kMaxSmCount = 1 << 20;

template <typename T>
std::optional<T> sourced(YamlMap& map, std::string_view key, GpuSpec& gpu, const std::string& prefix) {
  return internal::read_sourced<T>(map, key, gpu.field_sources, prefix);
}

template <typename T>
T sourced_required(YamlMap& map, std::string_view key, GpuSpec& gpu, const std::string& prefix) {
  return internal::read_sourced_required<T>(map, key, gpu.field_sources, prefix);
}

double fraction(YamlMap& map, std::string_view key, GpuSpec& gpu, const std::string& prefix) {
  const double value = sourced_required<double>(map, key, gpu, prefix);
  if (value <= 0.0 || value > 1.0) map.fail(key, fmt::format("= {} must be a fraction in (0, 1]", value));
  return value;
}

template <typename Q>
Q positive_quantity(YamlMap& map, std::string_view key, GpuSpec& gpu, const std::string& prefix) {
  const Q value = sourced_required<Q>(map, key, gpu, prefix);
  if (!(value > Q(0))) map.fail(key, "must be positive");
  return value;
}

void read_kernels(YamlMap& map, GpuSpec& gpu) {
  KernelEfficiency& k = gpu.kernels;
  k.overhead = sourced_required<Seconds>(map, "overhead", gpu, "kernels.");
  if (k.overhead < Seconds(0)) map.fail("overhead", "must not be negative");
  YamlMap gemm = map.map("gemm");
  k.gemm_max_efficiency = fraction(gemm, "max_efficiency", gpu, "kernels.gemm.");
  k.gemm_fp8_max_efficiency =
      gemm.has("fp8_max_efficiency") ? fraction(gemm, "fp8_max_efficiency", gpu, "kernels.gemm.") : 0.0;
  k.gemm_fp8_fast_accumulation_max_efficiency = k.gemm_fp8_max_efficiency;
  if (gemm.has("fp8_fast_accumulation_max_efficiency")) {
    k.gemm_fp8_fast_accumulation_max_efficiency =
        fraction(gemm, "fp8_fast_accumulation_max_efficiency", gpu, "kernels.gemm.");
    if (!gpu.peak(DType::kFp8)) {
      gemm.fail("fp8_fast_accumulation_max_efficiency",
                fmt::format("= {} needs an fp8 peak (peak_dense.fp8), which this gpu has not",
                            k.gemm_fp8_fast_accumulation_max_efficiency));
    }
  }
  k.gemm_tile_m = sourced_required<int64_t>(gemm, "tile_m", gpu, "kernels.gemm.");
  k.gemm_tile_n = sourced_required<int64_t>(gemm, "tile_n", gpu, "kernels.gemm.");
  for (const auto& [key, tile] : {std::pair{"tile_m", k.gemm_tile_m}, {"tile_n", k.gemm_tile_n}}) {
    if (tile < 1 || tile > kMaxTile)
      gemm.fail(key, fmt::format("= {} must be from 1 to {}", tile, kMaxTile));
  }
  k.gemm_k_half = sourced_required<double>(gemm, "k_half", gpu, "kernels.gemm.");
  if (k.gemm_k_half < 0.0) gemm.fail("k_half", "must not be negative");
  k.gemm_persistent = sourced<bool>(gemm, "persistent", gpu, "kernels.gemm.").value_or(false);
  gemm.finish();
  YamlMap attention = map.map("attention");
  const std::string prefix = "kernels.attention.";
  AttentionKernelEfficiency& fused = k.fused_attention;
  fused.forward = fraction(attention, "forward_efficiency", gpu, prefix);
  fused.backward = fraction(attention, "backward_efficiency", gpu, prefix);
  fused.causal_ratio = fraction(attention, "causal_efficiency_ratio", gpu, prefix);
  // A sequence length at which an efficiency ramp halves.
  const auto ramp = [&](const std::string& key) {
    const double value = sourced_required<double>(attention, key, gpu, prefix);
    if (value < 0.0) attention.fail(key, fmt::format("= {} must not be negative", value));
    return value;
  };
  fused.causal_seq_half = ramp("causal_seq_half");
  k.attention_seq_half = ramp("seq_half");
  // Another kernel's two efficiencies come together or not at all; its causal figures default to
  // the fused kernel's, and it is power-limited unless the catalog says not.
  const auto other_kernel = [&](const std::string& kernel, AttentionKernelEfficiency& e) {
    const std::string ratio = kernel + "_causal_efficiency_ratio";
    const std::string seq_half = kernel + "_causal_seq_half";
    const std::string power_limited = kernel + "_power_limited";
    if (!attention.has(kernel + "_forward_efficiency") && !attention.has(kernel + "_backward_efficiency")) {
      for (const std::string& figure : {ratio, seq_half, power_limited}) {
        if (attention.has(figure)) {
          attention.fail(figure, fmt::format("applies to {0}'s efficiencies, which are not given "
                                             "({0}_forward_efficiency, {0}_backward_efficiency)",
                                             kernel));
        }
      }
      return;
    }
    e.forward = fraction(attention, kernel + "_forward_efficiency", gpu, prefix);
    e.backward = fraction(attention, kernel + "_backward_efficiency", gpu, prefix);
    e.causal_ratio = attention.has(ratio) ? fraction(attention, ratio, gpu, prefix) : fused.causal_ratio;
    e.causal_seq_half = attention.has(seq_half) ? ramp(seq_half) : fused.causal_seq_half;
    e.power_limited = sourced<bool>(attention, power_limited, gpu, prefix).value_or(true);
  };
  other_kernel("flash2", k.flash2);
  other_kernel("flash3", k.flash3);
  other_kernel("flash_triton", k.flash_triton);
  k.attention_tile_rows = sourced_required<int64_t>(attention, "tile_rows", gpu, prefix);
  if (k.attention_tile_rows < 1 || k.attention_tile_rows > kMaxTile)
    attention.fail("tile_rows",
                   fmt::format("= {} must be from 1 to {}", k.attention_tile_rows, kMaxTile));
  attention.finish();
  k.sustained_compute_fraction =
      map.has("sustained_compute_fraction") ? fraction(map, "sustained_compute_fraction", gpu, "kernels.") : 1.0;
  k.sustained_fp8_compute_fraction = map.has("sustained_fp8_compute_fraction")
                                         ? fraction(map, "sustained_fp8_compute_fraction", gpu, "kernels.")
                                         : k.sustained_compute_fraction;
  k.sustained_compute_spread =
      internal::read_sourced<double>(map, "sustained_compute_spread", gpu.field_sources, "kernels.").value_or(0.0);
  if (k.sustained_compute_spread < 0.0 || k.sustained_compute_spread >= 0.2) {
    map.fail("sustained_compute_spread", fmt::format("= {} must be a fraction in [0, 0.2): one standard deviation of "
                                                     "a chip's sustained compute throughput, of the mean",
                                                     k.sustained_compute_spread));
  }
  k.communication_interference =
      internal::read_sourced<double>(map, "communication_interference", gpu.field_sources, "kernels.").value_or(0.0);
  if (k.communication_interference < 0.0 || k.communication_interference > 1.0) {
    map.fail("communication_interference", "must be a fraction in [0, 1]");
  }
  k.communication_sms = sourced<int64_t>(map, "communication_sms", gpu, "kernels.").value_or(0);
  if (k.communication_sms < 0 || k.communication_sms >= gpu.sm_count) {
    map.fail("communication_sms", fmt::format("= {} must be from 0 to the GPU's {} SMs less one", k.communication_sms,
                                              gpu.sm_count));
  }
  if (k.gemm_persistent && k.communication_sms == 0) {
    map.fail("communication_sms", "is required when kernels.gemm.persistent is true (the SMs communication holds)");
  }
  if (k.communication_interference > 0.0 && k.communication_sms == 0) {
    map.fail("communication_interference",
             fmt::format("= {} needs kernels.communication_sms, the SMs of the collectives that slow compute by it",
                         k.communication_interference));
  }
  for (auto [key, sms] : {std::pair{"send_recv_network_sms", &k.send_recv_network_sms},
                          std::pair{"send_recv_nvlink_sms", &k.send_recv_nvlink_sms}}) {
    if (!map.has(key)) {
      *sms = k.communication_sms;
      continue;
    }
    *sms = *sourced<int64_t>(map, key, gpu, "kernels.");
    if (k.communication_sms == 0) {
      map.fail(key, fmt::format("= {} needs kernels.communication_sms (a collective's SMs) beside it", *sms));
    }
    if (*sms < 1 || *sms >= gpu.sm_count) {
      map.fail(key, fmt::format("= {} must be from 1 to the GPU's {} SMs less one", *sms, gpu.sm_count));
    }
  }
  YamlMap memory = map.map("memory_bound");
  k.memory_bandwidth_efficiency = fraction(memory, "bandwidth_efficiency", gpu, "kernels.memory_bound.");
  memory.finish();
  map.finish();
}

}  // namespace

void check_gpu_memory(YamlMap& map, std::string_view key, Bytes capacity) {
  if (!(capacity >= kLeastGpuMemory && capacity <= kMostGpuMemory)) {
    map.fail(key, fmt::format("= {} B must be from 1 MiB to 1 PiB", capacity / Bytes(1)));
  }
}

GpuSpec read_gpu(YamlMap& map) {
  GpuSpec gpu;
  gpu.name = map.required<std::string>("name");
  gpu.description = map.get<std::string>("description", gpu.name);
  gpu.vendor = map.get<std::string>("vendor", "");
  gpu.architecture = map.get<std::string>("architecture", "");
  gpu.sources = internal::read_sources(map);
  gpu.intra_node_link = map.get<std::string>("intra_node", "");
  gpu.profile = map.get<std::string>("profile", "");
  gpu.memory_capacity = sourced_required<Bytes>(map, "memory_capacity", gpu, "");
  check_gpu_memory(map, "memory_capacity", gpu.memory_capacity);
  gpu.memory_bandwidth = positive_quantity<BytesPerSecond>(map, "memory_bandwidth", gpu, "");
  const auto sm_count = sourced_required<int64_t>(map, "sm_count", gpu, "");
  if (sm_count < 1 || sm_count > kMaxSmCount)
    map.fail("sm_count", fmt::format("= {} must be from 1 to {}", sm_count, kMaxSmCount));
  gpu.sm_count = static_cast<int>(sm_count);
  gpu.boost_clock = sourced<Hertz>(map, "boost_clock", gpu, "").value_or(Hertz(0));
  gpu.l2_cache = sourced<Bytes>(map, "l2_cache", gpu, "").value_or(Bytes(0));
  gpu.power = sourced<Watts>(map, "power", gpu, "").value_or(Watts(0));
  YamlMap peak = map.map("peak_dense");
  for (const DType dtype : {DType::kFp32, DType::kTf32, DType::kBf16, DType::kFp16, DType::kFp8}) {
    const std::string key(to_string(dtype));
    if (auto value = sourced<FlopPerSecond>(peak, key, gpu, "peak_dense.")) {
      if (!(*value > FlopPerSecond(0))) peak.fail(key, "must be positive");
      gpu.peak_dense[static_cast<int>(dtype)] = *value;
    }
  }
  sourced<FlopPerSecond>(peak, "fp64", gpu, "peak_dense.");
  for (const DType required : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    if (!gpu.peak(required)) peak.fail(to_string(required), "is required");
  }
  peak.finish();
  YamlMap kernels = map.map("kernels");
  read_kernels(kernels, gpu);
  if (gpu.peak(DType::kFp8) && gpu.kernels.gemm_fp8_max_efficiency == 0.0) {
    map.fail("kernels", "gpu has an fp8 peak, so kernels.gemm.fp8_max_efficiency is required");
  }
  map.finish();
  return gpu;
}

std::string default_gpu_catalog() { return data_root() + "/hardware/catalog/gpus"; }

std::vector<std::string> catalog_gpus(const std::string& catalog_dir) {
  return catalog_entries(catalog_dir);
}

GpuSpec load_gpu_file(const std::string& path) {
  static auto* const gpus = new ParsedFileCache<GpuSpec>([](const YamlDocument& document) {
    YamlMap root(document.root, document.file, "gpu");
    return read_gpu(root);
  });
  return *gpus->get(path);
}

GpuSpec resolve_gpu(const std::string& reference, const std::string& catalog_dir, const SourceLocation& where) {
  return load_gpu_file(gpu_file(reference, catalog_dir, where));
}

std::string gpu_file(const std::string& reference, const std::string& catalog_dir,
                     const SourceLocation& where) {
  const std::string extension = std::filesystem::path(reference).extension().string();
  if (extension == ".yaml" || extension == ".yml") {
    const std::string file = path_from(reference, where.file);
    // A missing file is reported where the scenario names it.
    if (!std::ifstream(file)) {
      throw InputError(where, fmt::format("gpu = '{}' cannot be opened (missing or unreadable)", reference));
    }
    return file;
  }
  // The non-throwing check: a reference too long for a file name is simply not in the catalog.
  const std::string catalog_file = catalog_dir + "/" + reference + ".yaml";
  std::error_code error;
  if (std::filesystem::exists(catalog_file, error)) return catalog_file;
  throw InputError(where, fmt::format("gpu = '{}' is not in the GPU catalog ({}) and is not a path to a .yaml; "
                                      "known GPUs: {}",
                                      reference, catalog_dir, fmt::join(catalog_gpus(catalog_dir), ", ")));
}

}  // namespace paceline
