// Tests what the fuzzers (tests/fuzz/*_fuzzer.cc) found: each input, inline and cut down to
// what mattered, once crashed a reader, escaped it as another exception type or produced an
// error without file:line:col. Each now loads or fails as an InputError that cites its line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/input_error.h"
#include "base/unit_parse.h"
#include "base/yaml_reader.h"
#include "hardware/cluster.h"
#include "hardware/gpu_spec.h"
#include "hardware/kernel_profile.h"
#include "models/hf_config.h"
#include "models/model_spec.h"
#include "sim/scenario/scenario.h"
#include "sim/validate/validation.h"
#include "tests/support/temp_path.h"

namespace paceline {
namespace {

// The InputError a load throws, as its message ("" when it loads; another exception fails).
template <typename Load>
std::string input_error(Load&& load) {
  try {
    load();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string scenario_error(const std::string& text) {
  return input_error([&] { load_scenario_text(text, "fuzz.yaml"); });
}

// A file in this test's scratch folder.
std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = paceline::testing::temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Found by every harness on its first input: an empty document cited no line ("fuzz.yaml: the
// file is empty"); it now points at its start.
TEST(FuzzRegression, EmptyDocumentsCiteTheirStart) {
  EXPECT_EQ(scenario_error(""), "fuzz.yaml:1:1: the file is empty; expected a YAML mapping");
  EXPECT_EQ(input_error([] { parse_hf_config("", "config.json"); }),
            "config.json:1:1: the file is empty; expected a YAML mapping");
  EXPECT_EQ(input_error([] { load_yaml_text("# only a comment\n", "gpu.yaml"); }),
            "gpu.yaml:1:1: the file is empty; expected a YAML mapping");
}

// hf_config: a count beyond an int (`num_hidden_layers: 321474836482`) was cut to a negative
// layer count and imported.
TEST(FuzzRegression, HfConfigCountsFitAnInt) {
  EXPECT_EQ(input_error([] {
              parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
"num_attention_heads": 32, "num_hidden_layers": 321474836482, "vocab_size": 128256})",
                              "config.json");
            }),
            "config.json:2:49: num_hidden_layers = 321474836482 is too large (at most 2147483647)");
}

// link_catalog: a catalog link file was read without the range checks an inline link gets, so
// `bandwidth: 0` loaded and later divided the collective model by zero.
TEST(FuzzRegression, CatalogLinksAreRangeChecked) {
  const std::string head = "name: zero\nkind: network\nlatency: 5 us\n";
  write_file("zero.yaml", head + "bandwidth: 0\nbandwidth_efficiency: 0.9\n");
  const std::string folder = std::filesystem::path(write_file("half.yaml", head + "bandwidth: 1 GB/s\n"
                                                                                "bandwidth_efficiency: 1.5\n"))
                                 .parent_path()
                                 .string();
  EXPECT_EQ(input_error([&] { load_link("zero", folder, {}); }),
            folder + "/zero.yaml:4:12: link.bandwidth = 0 must be at least 1 MB/s (a figure needs its unit, e.g. "
                     "300 GB/s)");
  EXPECT_EQ(input_error([&] { load_link("half", folder, {}); }),
            folder + "/half.yaml:5:23: link.bandwidth_efficiency = 1.5 must be a fraction in (0, 1]");
}

// scenario: a model name longer than a file name may be escaped std::filesystem's
// filesystem_error ("File name too long") from the catalog lookup, which the CLI reported as
// an internal error.
TEST(FuzzRegression, OverlongCatalogNamesAreUnknownNames) {
  const std::string name(300, 'x');
  const std::string error = scenario_error("model: " + name + "\ncluster: {gpu: h100-sxm5-80gb}\n"
                                           "training: {global_batch: 8}\n");
  EXPECT_EQ(error.rfind("fuzz.yaml:1:8: model = '" + name + "' is not in the model catalog", 0), 0u) << error;
  const std::string gpu_error = scenario_error("model: gpt-1.7b\ncluster: {gpu: " + name + "}\n"
                                               "training: {global_batch: 8}\n");
  EXPECT_EQ(gpu_error.rfind("fuzz.yaml:2:16: gpu = '" + name + "' is not in the GPU catalog", 0), 0u) << gpu_error;
  const std::string link_error = scenario_error("model: gpt-1.7b\ncluster: {gpu: h100-sxm5-80gb, intra_node: " + name +
                                                "}\ntraining: {global_batch: 8}\n");
  EXPECT_EQ(link_error.rfind("fuzz.yaml:2:44: link '" + name + "' is not in the link catalog", 0), 0u) << link_error;
}

// scenario: a missing model or GPU file was reported without the scenario line that named it
// ("nope.yaml: cannot open the file").
TEST(FuzzRegression, MissingReferencedFilesCiteTheScenarioLine) {
  EXPECT_EQ(scenario_error("model: nope.yaml\ncluster: {gpu: h100-sxm5-80gb}\ntraining: {global_batch: 8}\n"),
            "fuzz.yaml:1:8: model = 'nope.yaml' cannot be opened (missing or unreadable)");
  EXPECT_EQ(scenario_error("model: gpt-1.7b\ncluster: {gpu: nope.yaml}\ntraining: {global_batch: 8}\n"),
            "fuzz.yaml:2:16: gpu = 'nope.yaml' cannot be opened (missing or unreadable)");
}

// scenario: a NUL in a catalog name cut the file name short, so `gpu: "\0"` opened the GPU
// catalog's folder and reported it as an empty file.
TEST(FuzzRegression, NamesWithANulAreRejectedWhereWritten) {
  EXPECT_EQ(scenario_error("model: gpt-1.7b\ncluster: {gpu: \"\\0h100\"}\ntraining: {global_batch: 8}\n"),
            "fuzz.yaml:2:16: cluster.gpu contains a NUL character");
  const std::string link_error = scenario_error(
      "model: gpt-1.7b\ncluster: {gpu: h100-sxm5-80gb, intra_node: \"\\0\"}\ntraining: {global_batch: 8}\n");
  EXPECT_EQ(link_error.rfind("fuzz.yaml:2:44: link '", 0), 0u) << link_error;
}

// profile: a table row written as a scalar escaped as YAML::BadSubscript ("operator[] call on a
// scalar") from the profile loader.
TEST(FuzzRegression, ProfileRowsMustBeMappings) {
  const std::string path = write_file("profile.yaml", R"(format: paceline-profile/1
device: {name: "NVIDIA H200", compute_capability: "9.0"}
memory_bound:
  rows:
    - {op: add, bytes: 1048576, time_s: 1.68e-06}
    - 5
)");
  const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  EXPECT_EQ(input_error([&] { KernelProfile::load(path, gpu); }),
            path + ":6:7: profile.memory_bound.rows[1] is '5'; expected a mapping of a measured point's fields");
}

// profile: a table without `rows` escaped as YAML::InvalidNode ("invalid node; first invalid
// key: rows") from the profile loader.
TEST(FuzzRegression, ProfileTablesNeedRows) {
  const std::string path = write_file("no-rows.yaml", R"(format: paceline-profile/1
device: {name: "NVIDIA H200", compute_capability: "9.0"}
gemm: {key: [dtype]}
)");
  const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  EXPECT_EQ(input_error([&] { KernelProfile::load(path, gpu); }),
            path + ":3:7: profile.gemm.rows must be a list of measured points");
}

// unit_parse: a finite number times a large unit overflowed to infinity and was returned as a
// quantity ("1e300 PB" of memory). Not reached by the fuzzer's mutations in 3.7 M runs; found by
// checking its property (finite or std::invalid_argument) at the edge of double's range.
TEST(FuzzRegression, QuantitiesThatOverflowAreRejected) {
  EXPECT_EQ(parse_quantity("1e300 B", Dimension::kBytes), 1e300);
  try {
    parse_quantity("1e300 PB", Dimension::kBytes);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "'1e300 PB' is too large for a size (beyond 1.79769e+293 PB)");
  }
  EXPECT_EQ(scenario_error("model: gpt-1.7b\ncluster: {gpu: h100-sxm5-80gb, intra_node: {bandwidth: 1e300 PB/s}}\n"
                           "training: {global_batch: 8}\n"),
            "fuzz.yaml:2:56: cluster.intra_node.bandwidth: '1e300 PB/s' is too large for a bandwidth "
            "(beyond 1.79769e+293 PB/s)");
}

// profile: a size of zero or below (`seq: -20`) went into the log-space grid and its fit, and
// the loaded profile answered backward attention with NaN seconds.
TEST(FuzzRegression, ProfileSizesArePositive) {
  const std::string path = write_file("negative.yaml", R"(format: paceline-profile/1
device: {name: "NVIDIA H200", compute_capability: "9.0"}
attention:
  rows:
    - {direction: backward, dtype: bf16, causal: true, head_dim: 128, group: 1, batch: 1, heads: 8, seq: -20, time_s: 4.8e-05}
)");
  const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  EXPECT_EQ(input_error([&] { KernelProfile::load(path, gpu); }),
            path + ":5:106: profile.attention.seq = -20 must be positive and at most 2147483647");
}

// profile: a GEMM dimension between 0 and 1 (`n: 0.024`, mutated from a measured row) was cut to
// 0 tiles, and the GEMM fit divided the GPU's SMs by them (UndefinedBehaviorSanitizer: division
// by zero in gemm_tiling). Dimensions, heads and sequence lengths are whole numbers.
TEST(FuzzRegression, ProfileDimensionsAreWholeNumbers) {
  const std::string path = write_file("fraction.yaml", R"(format: paceline-profile/1
device: {name: "NVIDIA H200", compute_capability: "9.0"}
gemm:
  rows:
    - {dtype: bf16, transa: "T", transb: "N", m: 2048, n: 0.024, k: 8192, time_s: 4.4e-05}
)");
  const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  EXPECT_EQ(input_error([&] { KernelProfile::load(path, gpu); }),
            path + ":5:59: profile.gemm.n = 0.024 must be a whole number");
}

// profile: points no roofline explains (here a typo'd direction, read as forward, mixed
// backward times into the forward table) gave a fit with a negative throughput term, and
// attention outside the grid came out negative (-0.24 ms). Such a fit is no longer used, and an
// unknown direction is an error.
TEST(FuzzRegression, ProfileFitsNeverAnswerNegativeTimes) {
  const std::string rows = R"(format: paceline-profile/1
device: {name: "NVIDIA H200", compute_capability: "9.0"}
attention:
  rows:
    - {direction: forward, dtype: bf16, causal: true, head_dim: 128, group: 1, batch: 1, heads: 8, seq: 1024, time_s: 1.752e-05}
    - {direction: DIRECTION, dtype: bf16, causal: true, head_dim: 128, group: 1, batch: 1, heads: 128, seq: 1024, time_s: 0.000296496}
    - {direction: forward, dtype: bf16, causal: true, head_dim: 128, group: 1, batch: 1, heads: 128, seq: 2048, time_s: 0.00025529550000000006}
    - {direction: forward, dtype: bf16, causal: true, head_dim: 128, group: 1, batch: 1, heads: 8, seq: 2048, time_s: 3.032e-05}
)";
  const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  auto with = [&](const std::string& direction) {
    std::string text = rows;
    return write_file(direction + ".yaml", text.replace(text.find("DIRECTION"), 9, direction));
  };
  const std::string typo = with("nullward");
  EXPECT_EQ(input_error([&] { KernelProfile::load(typo, gpu); }),
            typo + ":6:19: profile.attention.direction = 'nullward' is unknown; expected one of: forward, backward");
  // The same inconsistent times, all labelled forward: every answer is a positive time.
  const KernelProfile profile = KernelProfile::load(with("forward"), gpu);
  for (const int64_t seq : {512, 4096, 65536}) {
    const std::optional<Seconds> t = profile.attention(
        AttentionShape{.batch = 1, .heads = 32, .kv_heads = 32, .seq_q = seq, .seq_kv = seq, .head_dim = 128});
    ASSERT_TRUE(t.has_value());
    EXPECT_GT(*t / Seconds(1), 0.0) << "seq " << seq;
  }
}

// overlay: a rule without `cases` escaped as yaml-cpp's InvalidNode ("first invalid key") from
// reading the absent key's node; it is now a required field.
TEST(FuzzRegression, OverlayRulesNeedTheirCases) {
  const std::string path = write_file("no-cases.yaml", "- ccses: [a*]\n  set: {training.recompute: full}\n  why: x\n");
  EXPECT_EQ(input_error([&] { load_overlay_file(path); }), path + ":1:3: rules[0].cases is required");
}

// simulate: an inline model with `vocab: 2562147483648000` loaded, and counting its parameters
// overflowed 64 bits (undefined behaviour). Model sizes now stop at 2^31 - 1.
TEST(FuzzRegression, ModelSizesFitAnInt) {
  EXPECT_EQ(scenario_error(R"(model: {layers: 2, hidden: 64, heads: 8, ffn_hidden: 256, vocab: 2562147483648000, seq_len: 16}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
training: {global_batch: 8}
)"),
            "fuzz.yaml:1:66: model.vocab = 2562147483648000 is too large (at most 2147483647)");
}

}  // namespace
}  // namespace paceline
