// Tests sim/search/scenario_source.h: dotted-path overrides on a scenario's YAML tree and the
// messages a bad override gives.
#include "sim/search/scenario_source.h"

#include <gtest/gtest.h>

#include <string>

#include "base/input_error.h"
#include "models/model_spec.h"

namespace paceline {
namespace {

constexpr const char* kBase = R"(name: test
model: gpt3-175b
cluster:
  gpu: a100-sxm4-80gb
  nodes: 128
  gpus_per_node: 8
  inter_node: {nics_per_node: 8, nic_bandwidth: 200 Gb/s}
parallelism:
  tp: 8
  pp: 16
training:
  global_batch: 1536
)";

std::string error_of(const ScenarioSource& source, const std::vector<Override>& overrides) {
  try {
    load_scenario(source, overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ScenarioSource, OverridesReplaceValues) {
  const Scenario s =
      load_scenario({kBase, "s.yaml"}, {{"parallelism.tp", "4"}, {"training.recompute", "full"}});
  EXPECT_EQ(s.parallelism.tp, 4);
  // dp = 1024 GPUs / (tp 4 · pp 16) = 16.
  EXPECT_EQ(s.parallelism.dp, 16);
  EXPECT_EQ(s.training.recompute, Recompute::kFull);
  EXPECT_EQ(s.file, "s.yaml");
}

TEST(ScenarioSource, OverridesCreateMissingMappings) {
  const Scenario s = load_scenario({kBase, "s.yaml"}, {{"simulation.fidelity", "full"}});
  EXPECT_EQ(s.simulation.fidelity, Fidelity::kFull);
}

TEST(ScenarioSource, ValuesMayBeMappingsInJson) {
  const Scenario s =
      load_scenario({kBase, "s.yaml"}, {{"parallelism", R"({"tp": 2, "pp": 4, "zero": 1})"}});
  EXPECT_EQ(s.parallelism.tp, 2);
  EXPECT_EQ(s.parallelism.pp, 4);
  EXPECT_EQ(s.parallelism.zero, 1);
  // The whole mapping is replaced: dp = 1024 / (2·4) = 128.
  EXPECT_EQ(s.parallelism.dp, 128);
}

TEST(ScenarioSource, LaterOverridesWin) {
  const Scenario s =
      load_scenario({kBase, "s.yaml"}, {{"parallelism.tp", "4"}, {"parallelism.tp", "2"}});
  EXPECT_EQ(s.parallelism.tp, 2);
}

TEST(ScenarioSource, AnOverriddenValueIsCitedByItsOverride) {
  // tp 64 · pp 16 divides the 1024 GPUs; 64 does not divide the 96 heads. The value has no line in
  // the file: the message cites the override, by where it was given when that is known.
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism.tp", "64"}}),
            "s.yaml with parallelism.tp=64: parallelism.tp = 64 does not divide model.heads = 96");
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism.tp", "64", "--set"}}),
            "--set parallelism.tp=64: parallelism.tp = 64 does not divide model.heads = 96");
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism.tp", "x", "--set"}}),
            "--set parallelism.tp=x: parallelism.tp = 'x' is not an integer");
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism.shcedule", "1f1b", "--set"}})
                .rfind("--set parallelism.shcedule=1f1b: unknown key 'shcedule'", 0),
            0u);
  // A field inside a mapping given whole cites that mapping's override, the latest one.
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism.tp", "64", "--set"}, {"parallelism", "{tp: 64, pp: 16}"}}),
            "s.yaml with parallelism={tp: 64, pp: 16}: parallelism.tp = 64 does not divide model.heads = 96");
  // Fields of the file keep their line beside an override.
  EXPECT_EQ(error_of({std::string(kBase) + "foo: 1\n", "s.yaml"}, {{"parallelism.tp", "4", "--set"}})
                .rfind("s.yaml:13:1: unknown key 'foo'", 0),
            0u);
  // A mapping an override creates is its doing: a misspelt section, or a section the file lacks.
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"paralelism.tp", "4", "--set"}})
                .rfind("--set paralelism.tp=4: unknown key 'paralelism' in the document", 0),
            0u);
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"collectives.all_reduce", "bogus", "--set"}})
                .rfind("--set collectives.all_reduce=bogus: ", 0),
            0u);
  // A long value is cut short, leaving the message its reason.
  const std::string cut = error_of({kBase, "s.yaml"}, {{"parallelism.tp", std::string(5000, 'x'), "--set"}});
  EXPECT_EQ(cut, "--set parallelism.tp=" + std::string(77, 'x') + "...: parallelism.tp = '" + std::string(77, 'x') +
                     "...' is not an integer");
}

TEST(ScenarioSource, ANamedModelTakesOverridesOfItsFields) {
  // gpt3-175b from the catalog, 96 layers, with fewer: every other field stays the catalog's.
  const Scenario named = load_scenario({kBase, "s.yaml"}, {});
  const Scenario fewer = load_scenario({kBase, "s.yaml"}, {{"model.layers", "48"}});
  EXPECT_EQ(fewer.model.layers, 48);
  ModelSpec expected = named.model;
  expected.layers = 48;
  EXPECT_EQ(fewer.model, expected);
  // As if the catalog file were written inline: the head width it leaves out follows the heads.
  EXPECT_EQ(load_scenario({kBase, "s.yaml"}, {{"model.heads", "48"}, {"model.kv_heads", "48"}})
                .model.head_dim,
            12288 / 48);
  // A field the override leaves alone is cited where the model is named.
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"model.heads", "48", "--set"}}),
            "s.yaml:2:8: model.kv_heads = 96 must divide heads = 48");
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"model.layers", "0", "--set"}}),
            "--set model.layers=0: model.layers = 0 must be at least 1");
  EXPECT_EQ(
      error_of({std::string(kBase).replace(18, 9, "gpt3-999b"), "s.yaml"}, {{"model.layers", "2"}})
          .rfind("s.yaml:2:8: model = 'gpt3-999b' is not in the model catalog", 0),
      0u);
}

TEST(ScenarioSource, ANamedGpuTakesOverridesOfItsFields) {
  const Scenario named = load_scenario({kBase, "s.yaml"}, {});
  const Scenario faster =
      load_scenario({kBase, "s.yaml"}, {{"cluster.gpu.memory_bandwidth", "3 TB/s"}});
  EXPECT_EQ(faster.cluster.gpu.memory_bandwidth, BytesPerSecond(3e12));
  EXPECT_NE(named.cluster.gpu.memory_bandwidth, faster.cluster.gpu.memory_bandwidth);
  EXPECT_EQ(faster.cluster.gpu.name, named.cluster.gpu.name);
  EXPECT_EQ(faster.cluster.gpu.memory_capacity, named.cluster.gpu.memory_capacity);
  EXPECT_EQ(faster.cluster.gpu.kernels.gemm_max_efficiency,
            named.cluster.gpu.kernels.gemm_max_efficiency);
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"cluster.gpu.sm_count", "0", "--set"}}),
            "--set cluster.gpu.sm_count=0: cluster.gpu.sm_count = 0 must be from 1 to 1048576");
  EXPECT_EQ(error_of({std::string(kBase).replace(44, 14, "a100-sxm9"), "s.yaml"},
                     {{"cluster.gpu.sm_count", "2"}})
                .rfind("s.yaml:4:8: gpu = 'a100-sxm9' is not in the GPU catalog", 0),
            0u);
}

TEST(ScenarioSource, TheGpuOfANamedSystemTakesOverridesOfItsFields) {
  // GB200 NVL72 names the B200 and gives it the GB200's memory; an override keeps that memory.
  constexpr const char* kSystem = R"(model: llama3-8b
cluster:
  system: gb200-nvl72
training:
  global_batch: 64
)";
  const Scenario named = load_scenario({kSystem, "s.yaml"}, {});
  const Scenario slower =
      load_scenario({kSystem, "s.yaml"}, {{"cluster.gpu.memory_bandwidth", "4 TB/s"}});
  EXPECT_EQ(slower.cluster.gpu.memory_bandwidth, BytesPerSecond(4e12));
  EXPECT_EQ(slower.cluster.gpu.memory_capacity, named.cluster.gpu.memory_capacity);
  EXPECT_EQ(slower.cluster.gpu.name, named.cluster.gpu.name);
  EXPECT_EQ(slower.cluster.intra_node.name, named.cluster.intra_node.name);
  EXPECT_EQ(error_of({std::string(kSystem).replace(36, 11, "dgx-z100"), "s.yaml"},
                     {{"cluster.gpu.sm_count", "2"}})
                .rfind("s.yaml:3:11: system 'dgx-z100' is not in the system catalog", 0),
            0u);
}

TEST(ScenarioSource, AFieldOfTheGpuRefinesTheSystemGivenAfterIt) {
  // The GPU's memory, then the system: the memory of the A100 that DGX A100 names, in either
  // order; likewise a model's field and the model.
  constexpr const char* kH100 = R"(model: llama3-8b
cluster: {system: dgx-h100, nodes: 1}
training: {global_batch: 64}
)";
  const Override memory{"cluster.gpu.memory_capacity", "60 GiB"};
  const Override system{"cluster.system", "dgx-a100"};
  for (const std::vector<Override>& overrides :
       {std::vector<Override>{memory, system}, std::vector<Override>{system, memory}}) {
    const Scenario s = load_scenario({kH100, "s.yaml"}, overrides);
    EXPECT_EQ(s.cluster.gpu.name, "a100-sxm4-80gb");
    EXPECT_EQ(s.cluster.gpu.memory_capacity, Bytes(60.0 * 1024 * 1024 * 1024));
    EXPECT_EQ(s.cluster.intra_node.name,
              load_scenario({kH100, "s.yaml"}, {system}).cluster.intra_node.name);
  }
  const Scenario layers =
      load_scenario({kH100, "s.yaml"}, {{"model.layers", "2"}, {"model", "llama3-70b"}});
  EXPECT_EQ(layers.model.layers, 2);
  EXPECT_EQ(layers.model.hidden, 8192);
}

TEST(ScenarioSource, ErrorsInTheTextKeepTheirLine) {
  // The base has 12 lines; the unknown key is the 13th.
  EXPECT_EQ(error_of({std::string(kBase) + "foo: 1\n", "s.yaml"}, {})
                .rfind("s.yaml:13:1: unknown key 'foo'", 0),
            0u);
}

TEST(ScenarioSource, BadOverridesSayWhy) {
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"name.first", "x"}}),
            "s.yaml:1:7: override name.first: name is 'test', not a mapping");
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism..tp", "2"}}),
            "s.yaml with parallelism..tp=2: 'parallelism..tp' is not a dotted field path such as parallelism.tp");
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism.tp", "2\n---\n3", "--set"}}),
            "--set parallelism.tp=2\\n---\\n3:2:1: a second YAML document ('---'): a file holds one document");
  for (const char* path : {".", "", " training.micro_batch", "parallelism.tp[0]", "a.b c"}) {
    EXPECT_NE(error_of({kBase, "s.yaml"}, {{path, "2", "--set"}}).find("is not a dotted field path"),
              std::string::npos)
        << path;
  }
  EXPECT_EQ(error_of({kBase, "s.yaml"}, {{"parallelism.tp", "[1", "--set"}})
                .rfind("--set parallelism.tp=[1: '[1' is not valid YAML", 0),
            0u);
}

TEST(ScenarioSource, MissingFileIsAnInputError) {
  EXPECT_THROW(read_scenario_source("/nonexistent/scenario.yaml"), InputError);
  EXPECT_EQ(read_scenario_source("scenarios/gpt3-175b-1024xa100.yaml").file,
            "scenarios/gpt3-175b-1024xa100.yaml");
}

}  // namespace
}  // namespace paceline
