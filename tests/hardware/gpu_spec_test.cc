// Tests hardware/gpu_spec.h: every catalog GPU loads with a source for every figure, and
// bad GPU files fail with positioned messages.
#include "hardware/gpu_spec.h"

#include <gtest/gtest.h>

#include "base/yaml_reader.h"

namespace paceline {
namespace {

TEST(GpuCatalog, HasTheGpusTheDesignNames) {
  const std::vector<std::string> names = catalog_gpus(default_gpu_catalog());
  for (const char* required : {"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h100-sxm5-96gb-500w",
                               "h200-sxm-141gb", "b200", "mi300x"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
}

// Conformance over every catalog GPU: loads, physically sane, every figure cited.
TEST(GpuCatalog, EveryGpuLoadsWithSources) {
  for (const std::string& name : catalog_gpus(default_gpu_catalog())) {
    SCOPED_TRACE(name);
    const GpuSpec gpu = resolve_gpu(name, default_gpu_catalog(), {});
    EXPECT_EQ(gpu.name, name);
    EXPECT_GT(gpu.memory_capacity, GiB(16));
    EXPECT_GT(gpu.memory_bandwidth, TBPerSecond(1));
    // Tensor-core bf16 is at least 4× plain fp32 on every GPU here.
    EXPECT_GT(*gpu.peak(DType::kBf16), *gpu.peak(DType::kFp32) * 4.0);
    EXPECT_FALSE(gpu.intra_node_link.empty());
    for (const char* field : {"memory_capacity", "memory_bandwidth", "sm_count", "peak_dense.bf16",
                              "kernels.overhead", "kernels.gemm.max_efficiency", "kernels.attention.forward_efficiency",
                              "kernels.memory_bound.bandwidth_efficiency"}) {
      ASSERT_TRUE(gpu.field_sources.count(field)) << field << " has no source";
      const std::string& source = gpu.field_sources.at(field);
      // A source is a key of `sources:` or a citation in its own words.
      EXPECT_TRUE(gpu.sources.count(source) || source.size() > 12) << field << ": " << source;
    }
  }
}

TEST(GpuSpec, RejectsAnEfficiencyAboveOne) {
  const std::string text = R"(name: bad
memory_capacity: 80 GiB
memory_bandwidth: 2 TB/s
sm_count: 100
peak_dense: {fp32: 20 TFLOP/s, bf16: 300 TFLOP/s, fp16: 300 TFLOP/s}
kernels:
  overhead: 2 us
  gemm: {max_efficiency: 1.5, tile_m: 128, tile_n: 128, k_half: 64}
  attention: {forward_efficiency: 0.5, backward_efficiency: 0.4, seq_half: 100}
  memory_bound: {bandwidth_efficiency: 0.9}
)";
  const YamlDocument doc = load_yaml_text(text, "gpu.yaml");
  YamlMap map(doc.root, doc.file, "gpu");
  try {
    read_gpu(map);
    FAIL() << "1.5 is not an efficiency";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "gpu.yaml:8:26: gpu.kernels.gemm.max_efficiency = 1.5 must be a fraction in (0, 1]");
  }
}

// A small catalog GPU with `peak`, `gemm`, `kernels` and `attention` appended to its dense peaks,
// its GEMM figures, its kernels and its attention figures.
std::string small_gpu_text(const std::string& peak, const std::string& gemm, const std::string& kernels = "",
                           const std::string& attention = "") {
  return R"(name: g
memory_capacity: 80 GiB
memory_bandwidth: 2 TB/s
sm_count: 100
peak_dense: {fp32: 20 TFLOP/s, bf16: 300 TFLOP/s, fp16: 300 TFLOP/s)" + peak + R"(}
kernels:
  overhead: 2 us
  gemm: {max_efficiency: 0.8, tile_m: 128, tile_n: 128, k_half: 64)" + gemm + R"(}
  attention: {forward_efficiency: 0.5, backward_efficiency: 0.4, seq_half: 100, causal_efficiency_ratio: 0.9, causal_seq_half: 100, tile_rows: 128)" +
                           attention + R"(}
  memory_bound: {bandwidth_efficiency: 0.9}
)" + kernels;
}

GpuSpec read_gpu_text(const std::string& text) {
  const YamlDocument doc = load_yaml_text(text, "gpu.yaml");
  YamlMap map(doc.root, doc.file, "gpu");
  return read_gpu(map);
}

GpuSpec read_small_gpu(const std::string& peak, const std::string& gemm,
                       const std::string& kernels = "", const std::string& attention = "") {
  return read_gpu_text(small_gpu_text(peak, gemm, kernels, attention));
}

// The error reading that GPU raises ("no error" if none).
std::string small_gpu_error(const std::string& peak, const std::string& gemm,
                            const std::string& kernels = "", const std::string& attention = "") {
  try {
    read_small_gpu(peak, gemm, kernels, attention);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(GpuSpec, TilesAndSmsStayWithinWhatTheTilingArithmeticHolds) {
  // A tile of 2^63 - 1 rows overflowed the tile count to zero and divided by it (SIGFPE); an SM
  // count past 2^31 wrapped (4294967404 SMs ran as 108).
  const auto error_of = [](const std::string& from, const std::string& to) {
    std::string text = small_gpu_text("", "");
    text.replace(text.find(from), from.size(), to);
    try {
      read_gpu_text(text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("tile_m: 128", "tile_m: 9223372036854775807"),
            "gpu.yaml:8:39: gpu.kernels.gemm.tile_m = 9223372036854775807 must be from 1 to 65536");
  EXPECT_EQ(error_of("tile_n: 128", "tile_n: 0"),
            "gpu.yaml:8:52: gpu.kernels.gemm.tile_n = 0 must be from 1 to 65536");
  EXPECT_TRUE(error_of("tile_rows: 128", "tile_rows: 65537")
                  .ends_with(": gpu.kernels.attention.tile_rows = 65537 must be from 1 to 65536"));
  EXPECT_EQ(error_of("sm_count: 100", "sm_count: 4294967404"),
            "gpu.yaml:4:11: gpu.sm_count = 4294967404 must be from 1 to 1048576");
  EXPECT_EQ(error_of("tile_m: 128", "tile_m: 65536"), "no error");
}

TEST(GpuSpec, MemoryKeepsByteCountsExact) {
  // From 1 MiB to 1 PiB: beyond 2^63 bytes the capacity would wrap negative in the result.
  const auto error_with = [](const std::string& capacity) {
    std::string text = small_gpu_text("", "");
    text.replace(text.find("80 GiB"), 6, capacity);
    try {
      read_gpu_text(text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_with("1e30 B"), "gpu.yaml:2:18: gpu.memory_capacity = 1e+30 B must be from 1 MiB to 1 PiB");
  EXPECT_EQ(error_with("1.5 B"), "gpu.yaml:2:18: gpu.memory_capacity = 1.5 B must be from 1 MiB to 1 PiB");
  EXPECT_EQ(error_with("1 PiB"), "no error");
}

TEST(GpuSpec, Fp8FastAccumulationCeilingNeedsAnFp8PeakAndDefaultsToTheSplitOne) {
  const auto fast_ceiling = [](const std::string& gemm) {
    return read_small_gpu(", fp8: 600 TFLOP/s", gemm).kernels.gemm_fp8_fast_accumulation_max_efficiency;
  };
  EXPECT_EQ(fast_ceiling(", fp8_max_efficiency: 0.7"), 0.7);
  EXPECT_EQ(fast_ceiling(", fp8_max_efficiency: 0.7, fp8_fast_accumulation_max_efficiency: 0.75"), 0.75);
  EXPECT_EQ(small_gpu_error("", ", fp8_fast_accumulation_max_efficiency: 0.75"),
            "gpu.yaml:8:107: gpu.kernels.gemm.fp8_fast_accumulation_max_efficiency = 0.75 needs an fp8 peak "
            "(peak_dense.fp8), which this gpu has not");
}

TEST(GpuSpec, EachAttentionKernelHasItsOwnCausalFiguresOrTheFusedKernels) {
  const std::string flash3_figures = ", flash3_forward_efficiency: 0.6, flash3_backward_efficiency: 0.5";
  const GpuSpec gpu = read_small_gpu("", "", "",
                                     ", flash2_forward_efficiency: 0.3, flash2_backward_efficiency: 0.25" +
                                         flash3_figures +
                                         ", flash3_causal_efficiency_ratio: 0.95, flash3_causal_seq_half: 400");
  const AttentionKernelEfficiency& flash2 = gpu.kernels.attention(AttentionKernel::kFlash2);
  EXPECT_EQ(flash2.backward, 0.25);
  EXPECT_EQ(flash2.causal_ratio, 0.9);
  EXPECT_EQ(flash2.causal_seq_half, 100.0);
  const AttentionKernelEfficiency& flash3 = gpu.kernels.attention(AttentionKernel::kFlash3);
  EXPECT_EQ(flash3.forward, 0.6);
  EXPECT_EQ(flash3.causal_ratio, 0.95);
  EXPECT_EQ(flash3.causal_seq_half, 400.0);
  EXPECT_EQ(gpu.kernels.attention(AttentionKernel::kFlash).causal_ratio, 0.9);
  EXPECT_EQ(gpu.kernels.attention(AttentionKernel::kFlashTriton).forward, 0.0);
  EXPECT_EQ(small_gpu_error("", "", "", ", flash3_causal_seq_half: 400"),
            "gpu.yaml:9:173: gpu.kernels.attention.flash3_causal_seq_half = 400 applies to flash3's efficiencies, "
            "which are not given (flash3_forward_efficiency, flash3_backward_efficiency)");
  EXPECT_EQ(small_gpu_error("", "", "", ", flash2_forward_efficiency: 0.3, flash2_backward_efficiency: 0.25, "
                                        "flash2_causal_seq_half: -1"),
            "gpu.yaml:9:239: gpu.kernels.attention.flash2_causal_seq_half = -1 must not be negative");
  EXPECT_EQ(small_gpu_error("", "", "", flash3_figures + ", flash3_causal_efficiency_ratio: 1.2"),
            "gpu.yaml:9:246: gpu.kernels.attention.flash3_causal_efficiency_ratio = 1.2 must be a "
            "fraction in (0, 1]");
}

TEST(GpuSpec, AnAttentionKernelIsPowerLimitedUnlessTheCatalogSaysNot) {
  const std::string flash2_figures =
      ", flash2_forward_efficiency: 0.3, flash2_backward_efficiency: 0.25";
  EXPECT_TRUE(read_small_gpu("", "", "", flash2_figures).kernels.flash2.power_limited);
  const GpuSpec gpu = read_small_gpu("", "", "", flash2_figures + ", flash2_power_limited: false");
  EXPECT_FALSE(gpu.kernels.flash2.power_limited);
  EXPECT_TRUE(gpu.kernels.fused_attention.power_limited);
  EXPECT_EQ(small_gpu_error("", "", "", ", flash3_power_limited: false"),
            "gpu.yaml:9:171: gpu.kernels.attention.flash3_power_limited = false applies to "
            "flash3's efficiencies, which are not given (flash3_forward_efficiency, "
            "flash3_backward_efficiency)");
}

TEST(GpuSpec, Fp8SustainedFractionDefaultsToTheOtherDtypes) {
  const std::string fp8_gemm = ", fp8_max_efficiency: 0.7";
  const GpuSpec plain = read_small_gpu(", fp8: 600 TFLOP/s", fp8_gemm, "  sustained_compute_fraction: 0.85\n");
  EXPECT_EQ(plain.kernels.sustained_fraction(DType::kFp8), 0.85);
  EXPECT_EQ(plain.kernels.sustained_fraction(DType::kBf16), 0.85);
  const GpuSpec fp8 = read_small_gpu(", fp8: 600 TFLOP/s", fp8_gemm,
                                     "  sustained_compute_fraction: 0.85\n  sustained_fp8_compute_fraction: 0.81\n");
  EXPECT_EQ(fp8.kernels.sustained_fraction(DType::kFp8), 0.81);
  EXPECT_EQ(fp8.kernels.sustained_fraction(DType::kBf16), 0.85);
  EXPECT_EQ(small_gpu_error("", "", "  sustained_fp8_compute_fraction: 0\n"),
            "gpu.yaml:11:35: gpu.kernels.sustained_fp8_compute_fraction = 0 must be a fraction in (0, 1]");
}

TEST(GpuSpec, ChipToChipSpreadIsAFractionOfTheMeanChip) {
  EXPECT_EQ(read_small_gpu("", "").kernels.sustained_compute_spread, 0.0);
  EXPECT_EQ(read_small_gpu("", "", "  sustained_compute_spread: 0.0093\n").kernels.sustained_compute_spread, 0.0093);
  EXPECT_EQ(small_gpu_error("", "", "  sustained_compute_spread: 0.5\n"),
            "gpu.yaml:11:29: gpu.kernels.sustained_compute_spread = 0.5 must be a fraction in [0, 0.2): one standard "
            "deviation of a chip's sustained compute throughput, of the mean");
  EXPECT_NE(small_gpu_error("", "", "  sustained_compute_spread: -0.01\n"), "");
}

TEST(GpuSpec, PersistentGemmsNeedTheSmsCommunicationHolds) {
  const GpuSpec plain = read_small_gpu("", "");
  EXPECT_FALSE(plain.kernels.gemm_persistent);
  EXPECT_EQ(plain.kernels.communication_sms, 0);
  const GpuSpec persistent = read_small_gpu("", ", persistent: true", "  communication_sms: 16\n");
  EXPECT_TRUE(persistent.kernels.gemm_persistent);
  EXPECT_EQ(persistent.kernels.communication_sms, 16);
  EXPECT_EQ(small_gpu_error("", ", persistent: true"),
            "gpu.yaml:7:3: gpu.kernels.communication_sms is required when kernels.gemm.persistent is true (the SMs "
            "communication holds)");
  EXPECT_EQ(small_gpu_error("", "", "  communication_sms: 100\n"),
            "gpu.yaml:11:22: gpu.kernels.communication_sms = 100 must be from 0 to the GPU's 100 SMs less one");
}

TEST(GpuSpec, InterferenceNeedsTheSmsOfCollectivesAndSendRecvDefaultsToThem) {
  EXPECT_EQ(small_gpu_error("", "", "  communication_interference: 0.189\n"),
            "gpu.yaml:11:31: gpu.kernels.communication_interference = 0.189 needs kernels.communication_sms, the SMs "
            "of the collectives that slow compute by it");
  const GpuSpec collectives = read_small_gpu("", "", "  communication_interference: 0.189\n  communication_sms: 16\n");
  EXPECT_EQ(collectives.kernels.send_recv_network_sms, 16);
  EXPECT_EQ(collectives.kernels.send_recv_nvlink_sms, 16);
  const GpuSpec both = read_small_gpu(
      "", "",
      "  communication_interference: 0.189\n  communication_sms: 16\n  send_recv_network_sms: 2\n"
      "  send_recv_nvlink_sms: 32\n");
  EXPECT_EQ(both.kernels.send_recv_network_sms, 2);
  EXPECT_EQ(both.kernels.send_recv_nvlink_sms, 32);
  EXPECT_EQ(small_gpu_error("", "", "  send_recv_network_sms: 2\n"),
            "gpu.yaml:11:26: gpu.kernels.send_recv_network_sms = 2 needs kernels.communication_sms (a collective's "
            "SMs) beside it");
  EXPECT_EQ(small_gpu_error("", "", "  communication_sms: 16\n  send_recv_nvlink_sms: 0\n"),
            "gpu.yaml:12:25: gpu.kernels.send_recv_nvlink_sms = 0 must be from 1 to the GPU's 100 SMs less one");
}

TEST(GpuSpec, UnknownGpuListsTheCatalog) {
  try {
    resolve_gpu("h1000", default_gpu_catalog(), SourceLocation{"s.yaml", 3, 8});
    FAIL();
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("s.yaml:3:8: gpu = 'h1000' is not in the GPU catalog", 0), 0u) << message;
    EXPECT_NE(message.find("h100-sxm5-80gb"), std::string::npos);
  }
}

}  // namespace
}  // namespace paceline
