// Tests sim/scenario/scenario.h: defaults, and one error test per class of bad input — each
// asserting the exact file:line:col message a user sees.
#include "sim/scenario/scenario.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/data_root.h"
#include "base/input_error.h"

namespace paceline {
namespace {

// A valid scenario; tests replace lines of it.
constexpr const char* kBase = R"(name: test
model: gpt3-175b
cluster:
  gpu: a100-sxm4-80gb
  nodes: 128
  gpus_per_node: 8
  intra_node: {bandwidth: 300 GB/s}
  inter_node: {nics_per_node: 8, nic_bandwidth: 200 Gb/s}
parallelism:
  tp: 8
  pp: 16
training:
  global_batch: 1536
)";

std::string error_of(const std::string& text) {
  try {
    load_scenario_text(text, "s.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Scenario, DefaultsAreResolved) {
  const Scenario s = load_scenario_text(kBase, "s.yaml");
  // dp = 1024 GPUs / (tp 8 · pp 16 · cp 1) = 8.
  EXPECT_EQ(s.parallelism.dp, 8);
  EXPECT_EQ(s.parallelism.schedule, Schedule::kOneFOneB);
  EXPECT_TRUE(s.parallelism.sequence_parallel);  // default when tp > 1
  EXPECT_EQ(s.parallelism.zero, 0);
  EXPECT_EQ(s.parallelism.zero_shard, 8);  // dp·cp
  EXPECT_EQ(s.training.micro_batch, 1);
  EXPECT_EQ(s.training.seq_len, 2048);  // the model's
  EXPECT_EQ(s.training.precision, Precision::kBf16);
  EXPECT_EQ(s.training.recompute, Recompute::kNone);
  EXPECT_TRUE(s.training.overlap_grad_reduce);
  EXPECT_FALSE(s.training.separate_projections);  // Megatron-LM's fused QKV and gate/up GEMMs
  EXPECT_TRUE(load_scenario_text(replace(kBase, "global_batch: 1536",
                                         "global_batch: 1536\n  separate_projections: true"),
                                 "s.yaml")
                  .training.separate_projections);
  // 96 layers over 16 stages: 6 each.
  EXPECT_EQ(s.parallelism.layers_per_stage, std::vector<int>(16, 6));
  EXPECT_EQ(s.training.num_microbatches(8), 192);
}

TEST(Scenario, GradientBucketsGrowWithTheDataParallelRanksUnlessSet) {
  // Megatron-Core's default: max(4·10^7, 10^6 · dp · cp) parameters.
  const Scenario s = load_scenario_text(kBase, "s.yaml");
  EXPECT_FALSE(s.training.grad_bucket_parameters.has_value());
  EXPECT_EQ(s.training.bucket_parameters(s.parallelism), 40'000'000);  // dp 8
  Parallelism wide = s.parallelism;
  wide.dp = 32;
  wide.cp = 2;
  EXPECT_EQ(s.training.bucket_parameters(wide), 64'000'000);
  const Scenario set = load_scenario_text(
      replace(kBase, "global_batch: 1536", "global_batch: 1536\n  grad_bucket_parameters: 5"),
      "s.yaml");
  EXPECT_EQ(set.training.bucket_parameters(wide), 5);
  EXPECT_NE(error_of(replace(kBase, "global_batch: 1536",
                             "global_batch: 1536\n  grad_bucket_parameters: 0"))
                .find("training.grad_bucket_parameters = 0 must be at least 1"),
            std::string::npos);
}

TEST(Scenario, UnevenLayersGoToInnerStagesFirst) {
  // 126 layers over 16 stages: 7 each, 14 extra layers to stages 1..14.
  const Scenario s = load_scenario_text(replace(replace(kBase, "model: gpt3-175b", "model: llama3.1-405b"),
                                                "global_batch: 1536", "global_batch: 1536\n  seq_len: 2048"),
                                        "s.yaml");
  EXPECT_EQ(s.parallelism.layers_per_stage.front(), 7);
  EXPECT_EQ(s.parallelism.layers_per_stage[1], 8);
  EXPECT_EQ(s.parallelism.layers_per_stage.back(), 7);
}

TEST(ScenarioErrors, YamlSyntax) {
  const std::string message = error_of(replace(kBase, "  tp: 8", "  tp: [8"));
  EXPECT_EQ(message.rfind("s.yaml:", 0), 0u) << message;
  EXPECT_NE(message.find("YAML syntax error"), std::string::npos) << message;
}

TEST(ScenarioErrors, UnknownKeyListsTheKnownOnes) {
  const std::string message = error_of(replace(kBase, "  pp: 16", "  pp: 16\n  shcedule: 1f1b"));
  EXPECT_EQ(message.rfind("s.yaml:12:3: unknown key 'shcedule' in parallelism; expected one of:", 0), 0u) << message;
  EXPECT_NE(message.find("schedule"), std::string::npos);
}

TEST(ScenarioErrors, RankOrderNamesEachOfTpCpDpPpOnceAndNothingElse) {
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  rank_order: dp-tp-cp-pp")), "");
  for (const std::string order : {"tp-cp-dp", "tp-tp-cp-dp-pp", "tp-ep-cp-dp-pp", "xx-tp-cp-dp-pp",
                                  "tp--cp-dp-pp", "tp-cp-dp-pp-"}) {
    EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  rank_order: '" + order + "'")),
              "s.yaml:12:15: parallelism.rank_order = '" + order +
                  "' is not an order of tp, cp, dp and pp, innermost first (e.g. tp-cp-dp-pp)");
  }
}

TEST(ScenarioErrors, ASequenceLongerThanTheModelsSlidingWindowIsRefused) {
  // Mistral 7B v0.1 attends over a window of 4096 tokens, which paceline does not model.
  const std::filesystem::path config = std::filesystem::temp_directory_path() /
                                       ("paceline-mistral-" + std::to_string(getpid()) + ".json");
  std::ofstream(config)
      << R"({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "intermediate_size": 14336, "max_position_embeddings": 32768,
             "vocab_size": 32000, "rms_norm_eps": 1e-5, "sliding_window": 4096})";
  const std::string scenario =
      replace(replace(kBase, "model: gpt3-175b", "model: " + config.string()),
              "  global_batch: 1536", "  global_batch: 1536\n  seq_len: SEQ");
  EXPECT_EQ(error_of(replace(scenario, "SEQ", "4096")), "");
  // Without a sequence length, the window's rather than the model's 32768.
  EXPECT_EQ(
      load_scenario_text(replace(scenario, "\n  seq_len: SEQ", ""), "s.yaml").training.seq_len,
      4096);
  EXPECT_EQ(error_of(replace(scenario, "SEQ", "8192")),
            "s.yaml:14:12: training.seq_len = 8192 exceeds model " + config.stem().string() +
                "'s sliding attention window of 4096 tokens: paceline models full causal attention "
                "only, so a "
                "sequence must fit in the window");
  std::filesystem::remove(config);
  // A model file states its window as attention_window, as a result's echo writes it.
  const std::string inline_model =
      replace(replace(kBase, "model: gpt3-175b",
                      "model: {layers: 2, hidden: 1024, heads: 8, vocab: 32000, seq_len: 32768, "
                      "ffn_hidden: 4096, "
                      "attention_window: 4096}"),
              "  global_batch: 1536", "  global_batch: 1536\n  seq_len: 8192");
  EXPECT_NE(error_of(inline_model)
                .find("training.seq_len = 8192 exceeds model custom's sliding attention window of "
                      "4096 tokens"),
            std::string::npos)
      << error_of(inline_model);
}

TEST(ScenarioErrors, WrongType) {
  EXPECT_EQ(error_of(replace(kBase, "tp: 8", "tp: eight")), "s.yaml:10:7: parallelism.tp = 'eight' is not an integer");
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 99999999999999999999")),
            "s.yaml:13:17: training.global_batch = 99999999999999999999 is out of range");
}

TEST(ScenarioErrors, BadOrMissingUnit) {
  const std::string message = error_of(replace(kBase, "bandwidth: 300 GB/s", "bandwidth: 300 GiB"));
  EXPECT_EQ(message.rfind("s.yaml:7:27: cluster.intra_node.bandwidth: '300 GiB' has unit 'GiB', which is not a unit "
                          "of a bandwidth; expected one of:",
                          0),
            0u)
      << message;
}

TEST(ScenarioErrors, OutOfRange) {
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  zero: 4")),
            "s.yaml:12:9: parallelism.zero = 4 is out of range; expected 0 (none), 1 (optimizer states), 2 (+ "
            "gradients) or 3 (+ parameters, FSDP)");
  EXPECT_EQ(error_of(replace(kBase, "tp: 8", "tp: 0")), "s.yaml:10:7: parallelism.tp = 0 must be at least 1");
}

TEST(ScenarioErrors, SizesStayWhereTheirProductsAreExact) {
  // 2^16 nodes of 2^16 GPUs would wrap an int; degrees beyond the GPUs would wrap their product.
  EXPECT_EQ(error_of(replace(replace(kBase, "nodes: 128", "nodes: 65536"), "gpus_per_node: 8", "gpus_per_node: 65536")),
            "s.yaml:5:10: cluster.nodes = 65536 with gpus_per_node = 65536 makes 4294967296 GPUs; a cluster has at "
            "most 1048576");
  EXPECT_EQ(error_of(replace(kBase, "pp: 16", "pp: 65536")),
            "s.yaml:11:7: parallelism.pp = 65536 is more than the cluster's 1024 GPUs");
  EXPECT_EQ(error_of(replace(kBase, "pp: 16", "pp: 16\n  virtual_stages: 2147483647")),
            "s.yaml:12:19: parallelism.virtual_stages = 2147483647 exceeds model.layers = 96");
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  micro_batch: 2048")),
            "s.yaml:14:16: training.micro_batch = 2048 is more than global_batch = 1536");
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 4294967296")),
            "s.yaml:13:17: training.global_batch = 4294967296 is more than 2147483647");
  EXPECT_EQ(error_of(replace(kBase, "model: gpt3-175b",
                             "model: {name: m, layers: 96, hidden: 12288, heads: 96, ffn_hidden: 49152, vocab: 51200, "
                             "seq_len: 2048, moe: {experts: 100000}}")),
            "s.yaml:2:119: model.moe.experts = 100000 is more than 65536");
}

TEST(ScenarioErrors, ANameTooLongForAFileIsNotInTheCatalog) {
  // The file system refuses a 300-character file name: not found, not an exception of its own.
  const std::string name(300, 'g');
  for (const auto& [field, expected] : {std::pair{"system: " + name, "' is not in the system catalog"},
                                        {"profile: " + name, "' is not a file nor in the profile catalog"},
                                        {"profile: " + name + ".yaml", "' is not a file nor in the profile catalog"}}) {
    const std::string message = error_of(replace(kBase, "gpu: a100-sxm4-80gb", "gpu: a100-sxm4-80gb\n  " + field));
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(ScenarioErrors, AProfileServesGpusOfItsArchitectureAndProfileGpuNeedsAProfile) {
  // The H200's profile (Hopper) stands in for an H100, not for the A100 (Ampere) of kBase.
  EXPECT_EQ(error_of(replace(kBase, "gpu: a100-sxm4-80gb",
                             "gpu: a100-sxm4-80gb\n  profile: h200-sxm-141gb")),
            "s.yaml:5:12: profile 'h200-sxm-141gb' was measured on h200-sxm-141gb (hopper), which "
            "cannot stand "
            "in for a100-sxm4-80gb (ampere); a profile serves GPUs of its own architecture");
  EXPECT_NO_THROW(load_scenario_text(
      replace(kBase, "gpu: a100-sxm4-80gb", "gpu: h100-sxm5-80gb\n  profile: h200-sxm-141gb"),
      "s.yaml"));
  EXPECT_EQ(error_of(replace(kBase, "gpu: a100-sxm4-80gb",
                             "gpu: a100-sxm4-80gb\n  profile_gpu: h200-sxm-141gb")),
            "s.yaml:5:16: cluster.profile_gpu = h200-sxm-141gb says where a profile was measured, "
            "but the "
            "cluster uses none: give cluster.profile (or a GPU whose catalog entry names one)");
  // Named where it was measured, the error cites that.
  EXPECT_EQ(error_of(replace(
                kBase, "gpu: a100-sxm4-80gb",
                "gpu: a100-sxm4-80gb\n  profile: h200-sxm-141gb\n  profile_gpu: h100-sxm5-80gb")),
            "s.yaml:6:16: profile 'h200-sxm-141gb' was measured on h100-sxm5-80gb (hopper), which "
            "cannot stand "
            "in for a100-sxm4-80gb (ampere); a profile serves GPUs of its own architecture");
}

TEST(ScenarioErrors, InconsistentFields) {
  // The DESIGN's own example: 96 heads cannot be split 12 ways... 96/12 = 8 does divide, so
  // use tp 5 against 96 heads (and 1024 GPUs: tp·pp = 80 must divide it too; set dp).
  EXPECT_EQ(error_of(replace(replace(kBase, "tp: 8", "tp: 7"), "nodes: 128", "nodes: 14")),
            "s.yaml:10:7: parallelism.tp = 7 does not divide model.heads = 96");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  dp: 4")),
            "s.yaml:12:7: parallelism.dp = 4: tp·pp·cp·dp = 8·16·1·4 = 512 but the cluster has 1024 GPUs");
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1001")),
            "s.yaml:13:17: training.global_batch = 1001 is not a multiple of micro_batch·dp = 1·8");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  ep: 2")),
            "s.yaml:12:7: parallelism.ep = 2 needs a mixture-of-experts model; gpt3-175b is dense");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  sequence_parallel: false\n  tp_comm_overlap: true")),
            "s.yaml:13:20: parallelism.tp_comm_overlap = true needs tp > 1 and sequence_parallel (here tp = 8, "
            "sequence_parallel = false): the overlapped collectives are the sequence-parallel ones");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  fsdp_prefetch: 2")),
            "s.yaml:12:18: parallelism.fsdp_prefetch = 2 needs zero: 3 without pipelining (weights gathered and "
            "gradients reduced per block and micro-batch); here zero = 0, pp = 16");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  zero: 3\n  fsdp_prefetch: -1")),
            "s.yaml:13:18: parallelism.fsdp_prefetch = -1 is negative; expected the number of blocks gathered ahead "
            "(0: each block's weights gathered when it starts)");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  fsdp_gather: tensor")),
            "s.yaml:12:16: parallelism.fsdp_gather = tensor needs zero: 3 without pipelining (weights gathered and "
            "gradients reduced per block and micro-batch); here zero = 0, pp = 16");
  // PyTorch FSDP2 shards per parameter under pipelining too, but only under ZeRO-3.
  EXPECT_EQ(
      error_of(replace(kBase, "  pp: 16", "  pp: 16\n  zero: 3\n  fsdp_gather: per_parameter")),
      "");
  EXPECT_EQ(
      error_of(replace(kBase, "  pp: 16", "  pp: 16\n  zero: 1\n  fsdp_gather: per_parameter")),
      "s.yaml:13:16: parallelism.fsdp_gather = per_parameter needs zero: 3 (weights sharded, "
      "PyTorch FSDP2); "
      "here zero = 1");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  zero: 3\n  fsdp_gradient_reduce: all_reduce")),
            "s.yaml:13:25: parallelism.fsdp_gradient_reduce = all_reduce needs zero: 3 without pipelining (weights "
            "gathered and gradients reduced per block and micro-batch); here zero = 3, pp = 16");
  EXPECT_EQ(error_of(replace(replace(kBase, "model: gpt3-175b", "model: mixtral-8x7b"), "  pp: 16",
                             "  pp: 1\n  zero: 3\n  fsdp_gradient_reduce: all_reduce")),
            "s.yaml:13:25: parallelism.fsdp_gradient_reduce = all_reduce (DeepSpeed's ZeRO-3 buckets, all-reduced "
            "over the whole data-parallel group) takes no mixture-of-experts model (mixtral-8x7b has experts, reduced "
            "over their own group); use reduce_scatter");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 1\n  zero: 3\n  fsdp_gradient_reduce: reduce")),
            "s.yaml:13:25: parallelism.fsdp_gradient_reduce = 'reduce' is unknown; expected one of: reduce_scatter, "
            "all_reduce");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 1\n  zero: 3\n  fsdp_gather: layer")),
            "s.yaml:13:16: parallelism.fsdp_gather = 'layer' is unknown; expected one of: block, "
            "tensor, per_parameter");
  EXPECT_EQ(
      error_of(replace(
          kBase, "  pp: 16",
          "  pp: 1\n  zero: 3\n  fsdp_gather: per_parameter\n  fsdp_gradient_reduce: all_reduce")),
      "s.yaml:14:25: parallelism.fsdp_gradient_reduce = all_reduce (DeepSpeed's ZeRO-3 buckets) "
      "does not go with fsdp_gather: per_parameter (PyTorch FSDP2, which reduce-scatters each "
      "block's gradients); use reduce_scatter");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 1\n  zero: 3\n  fsdp_persistence_threshold: 10")),
            "s.yaml:13:31: parallelism.fsdp_persistence_threshold = 10 applies to fsdp_gather: tensor only; here "
            "fsdp_gather = block");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16",
                             "  pp: 1\n  zero: 3\n  fsdp_gather: tensor\n  fsdp_persistence_threshold: -1")),
            "s.yaml:14:31: parallelism.fsdp_persistence_threshold = -1 is negative; expected the elements up to which "
            "a tensor is not gathered");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 1\n  zero: 3\n  fsdp_reuse_distance: 0")),
            "s.yaml:13:24: parallelism.fsdp_reuse_distance = 0 applies to fsdp_gather: tensor only; here "
            "fsdp_gather = block");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 1\n  zero: 3\n  fsdp_gather: tensor\n  fsdp_reuse_distance: -5")),
            "s.yaml:14:24: parallelism.fsdp_reuse_distance = -5 is negative; expected the elements of other weights "
            "used in between below which a gathered tensor is kept for its next use");
}

TEST(Scenario, FsdpGathersWholeBlocksUnlessSaid) {
  EXPECT_EQ(load_scenario_text(kBase, "s.yaml").parallelism.fsdp_gather, FsdpGather::kBlock);
  const Scenario s = load_scenario_text(replace(kBase, "  pp: 16", "  pp: 1\n  zero: 3\n  fsdp_gather: tensor"),
                                        "s.yaml");
  EXPECT_EQ(s.parallelism.fsdp_gather, FsdpGather::kTensor);
  EXPECT_EQ(s.parallelism.fsdp_persistence_threshold, 100000);  // DeepSpeed's default
  EXPECT_EQ(s.parallelism.fsdp_reuse_distance, 1000000000);      // DeepSpeed's default
  EXPECT_EQ(to_string(s.parallelism.fsdp_gather), "tensor");
  const Scenario fsdp2 = load_scenario_text(
      replace(kBase, "  pp: 16", "  pp: 1\n  zero: 3\n  fsdp_gather: per_parameter"), "s.yaml");
  EXPECT_EQ(fsdp2.parallelism.fsdp_gather, FsdpGather::kPerParameter);
  EXPECT_EQ(to_string(fsdp2.parallelism.fsdp_gather), "per_parameter");
}

TEST(ScenarioErrors, UnknownCatalogNameListsTheCatalog) {
  const std::string message = error_of(replace(kBase, "model: gpt3-175b", "model: gpt5"));
  EXPECT_EQ(message.rfind("s.yaml:2:8: model = 'gpt5' is not in the model catalog", 0), 0u) << message;
  EXPECT_NE(message.find("llama3-70b"), std::string::npos) << message;
}

TEST(ScenarioErrors, EmptyFile) {
  EXPECT_EQ(error_of(""), "s.yaml:1:1: the file is empty; expected a YAML mapping");
}

TEST(ScenarioErrors, Fp8OnAGpuWithoutFp8) {
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  precision: fp8")),
            "s.yaml:14:14: training.precision = fp8 needs fp8 tensor cores; a100-sxm4-80gb has none (no "
            "peak_dense.fp8)");
}

TEST(ScenarioErrors, InterleavingNeedsVirtualStages) {
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  schedule: interleaved-1f1b")),
            "s.yaml:12:13: parallelism.schedule = interleaved-1f1b needs virtual_stages > 1");
}

TEST(ScenarioErrors, ADegreeThatDoesNotDivideTheGpusIsBlamed) {
  // 1024 GPUs: cp 3 does not divide them; tp 8 · pp 16 · cp 16 does not either, but each does.
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  cp: 3")),
            "s.yaml:12:7: parallelism.cp = 3: tp·pp·cp = 8·16·3 = 384 does not divide the cluster's 1024 GPUs");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16", "  pp: 16\n  cp: 16")),
            "s.yaml:12:7: parallelism.cp = 16: tp·pp·cp = 8·16·16 = 2048 does not divide the cluster's 1024 GPUs");
}

TEST(ScenarioErrors, FoldingPeersIsAChoiceOfFullFidelityOnly) {
  EXPECT_EQ(error_of(std::string(kBase) + "simulation: {fold_symmetric_peers: false}\n"),
            "s.yaml:14:36: simulation.fold_symmetric_peers = false applies to fidelity: full only; symmetric "
            "fidelity always simulates one rank per stage");
  EXPECT_FALSE(
      load_scenario_text(std::string(kBase) + "simulation: {fidelity: full, fold_symmetric_peers: false}\n", "s.yaml")
          .simulation.fold_symmetric_peers);
}

TEST(ScenarioErrors, FlashAttention2NeedsItsEfficiencies) {
  const std::string on_b200 = replace(replace(kBase, "gpu: a100-sxm4-80gb", "gpu: b200"), "global_batch: 1536",
                                      "global_batch: 1536\n  attention: flash2");
  EXPECT_EQ(error_of(on_b200),
            "s.yaml:14:14: training.attention = flash2 needs FlashAttention-2's efficiencies for b200; its catalog "
            "entry has none (kernels.attention.flash2_forward_efficiency); use flash or unfused");
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  attention: flash2")), "");
}

TEST(ScenarioErrors, LatentAttentionRunsOnKernelsThatTakeOtherValueWidths) {
  const std::string latent = replace(replace(kBase, "model: gpt3-175b", "model: deepseek-v3"), "global_batch: 1536",
                                     "global_batch: 1536\n  attention: flash2");
  EXPECT_EQ(error_of(latent),
            "s.yaml:14:14: training.attention = flash2 does not run multi-head latent attention, whose values are not "
            "as wide as its queries and keys (model.mla.v_head_dim 128 against head_dim 192); use flash (cuDNN's, "
            "which Megatron-Core runs for it) or flash3");
  EXPECT_EQ(error_of(replace(latent, "attention: flash2", "attention: flash")), "");
  // Where FlashAttention-3 is missing, the one alternative left is cuDNN's.
  EXPECT_EQ(error_of(replace(latent, "attention: flash2", "attention: flash3")),
            "s.yaml:14:14: training.attention = flash3 needs FlashAttention-3's efficiencies for a100-sxm4-80gb; its "
            "catalog entry has none (kernels.attention.flash3_forward_efficiency); use flash");
}

TEST(ScenarioErrors, FlashAttention3RunsOnHopperWithHeadsUpTo256) {
  const std::string on_a100 = replace(kBase, "global_batch: 1536", "global_batch: 1536\n  attention: flash3");
  EXPECT_EQ(error_of(on_a100),
            "s.yaml:14:14: training.attention = flash3 needs FlashAttention-3's efficiencies for a100-sxm4-80gb; its "
            "catalog entry has none (kernels.attention.flash3_forward_efficiency); use flash or unfused");
  const std::string on_h100 = replace(on_a100, "gpu: a100-sxm4-80gb", "gpu: h100-sxm5-80gb");
  EXPECT_EQ(load_scenario_text(on_h100, "s.yaml").training.attention, AttentionKernel::kFlash3);
  EXPECT_EQ(error_of(replace(on_h100, "model: gpt3-175b",
                             "model: {layers: 16, hidden: 4096, heads: 8, head_dim: 512, ffn_hidden: 8192, vocab: "
                             "1024, seq_len: 2048}")),
            "s.yaml:14:14: training.attention = flash3 runs head dims up to 256; the model's is 512; use flash or "
            "unfused");
}

TEST(ScenarioErrors, FlashAttentionInTritonNeedsItsEfficienciesHeadsUpTo128AndKeysPerHead) {
  const std::string triton = replace(kBase, "global_batch: 1536", "global_batch: 1536\n  attention: flash_triton");
  EXPECT_EQ(load_scenario_text(triton, "s.yaml").training.attention, AttentionKernel::kFlashTriton);
  EXPECT_EQ(error_of(replace(triton, "gpu: a100-sxm4-80gb", "gpu: b200")),
            "s.yaml:14:14: training.attention = flash_triton needs FlashAttention in Triton's efficiencies for b200; its "
            "catalog entry has none (kernels.attention.flash_triton_forward_efficiency); use flash or unfused");
  const auto with_model = [&](const std::string& model) { return replace(triton, "model: gpt3-175b", "model: " + model); };
  EXPECT_EQ(error_of(with_model("{layers: 16, hidden: 4096, heads: 16, head_dim: 256, ffn_hidden: 8192, vocab: 1024, "
                                "seq_len: 2048}")),
            "s.yaml:14:14: training.attention = flash_triton runs head dims up to 128; the model's is 256; use flash or "
            "unfused");
  const std::string grouped =
      with_model("{layers: 16, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 8192, vocab: 1024, seq_len: 2048}");
  EXPECT_EQ(error_of(grouped),
            "s.yaml:14:14: training.attention = flash_triton reads keys and values for every query head; the model has "
            "8 of 32 (set training.repeat_kv: true, as a caller of this kernel must)");
  EXPECT_EQ(error_of(replace(grouped, "attention: flash_triton", "attention: flash_triton\n  repeat_kv: true")), "");
}

TEST(Scenario, MoeWeightingNeedsExperts) {
  const std::string weighted = replace(kBase, "global_batch: 1536", "global_batch: 1536\n  moe_weighting: activation");
  EXPECT_EQ(error_of(weighted), "s.yaml:14:18: training.moe_weighting = activation applies to mixture-of-experts "
                                "models; gpt3-175b is dense");
  const std::string mixtral = replace(replace(weighted, "model: gpt3-175b", "model: mixtral-8x7b"), "  pp: 16",
                                      "  pp: 16\n  sequence_parallel: true");
  EXPECT_EQ(load_scenario_text(mixtral, "s.yaml").training.moe_weighting, MoeWeighting::kActivation);
  EXPECT_EQ(error_of(replace(mixtral, "moe_weighting: activation", "moe_weighting: output")),
            "s.yaml:15:18: training.moe_weighting = 'output' is unknown; expected one of: tokens, activation");
}

TEST(Scenario, ExpertGemmNeedsExperts) {
  const std::string grouped =
      replace(kBase, "global_batch: 1536", "global_batch: 1536\n  expert_gemm: grouped");
  EXPECT_EQ(error_of(grouped),
            "s.yaml:14:16: training.expert_gemm = grouped applies to mixture-of-experts models; "
            "gpt3-175b is dense");
  const std::string mixtral = replace(replace(grouped, "model: gpt3-175b", "model: mixtral-8x7b"),
                                      "  pp: 16", "  pp: 16\n  sequence_parallel: true");
  EXPECT_EQ(load_scenario_text(mixtral, "s.yaml").training.expert_gemm, ExpertGemm::kGrouped);
  EXPECT_EQ(load_scenario_text(replace(mixtral, "\n  expert_gemm: grouped", ""), "s.yaml")
                .training.expert_gemm,
            ExpertGemm::kPerExpert);
  EXPECT_EQ(error_of(replace(mixtral, "expert_gemm: grouped", "expert_gemm: cutlass")),
            "s.yaml:15:16: training.expert_gemm = 'cutlass' is unknown; expected one of: "
            "per_expert, grouped");
}

TEST(Scenario, DeduplicatedExchangesOfGroupLimitedRoutingTakeATopKUpTo64) {
  // 1024 experts in 32 groups, a token's experts from 4 of them: counting the draws that cover
  // its groups takes time growing as (group_top_k·top_k)².
  const std::string text =
      R"(model: {name: wide, layers: 2, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 32000,
        seq_len: 2048, moe: {experts: 1024, top_k: 64, groups: 32, group_top_k: 4}}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {ep: 8, ep_dispatcher: deduplicated}
training: {global_batch: 8}
)";
  EXPECT_EQ(load_scenario_text(text, "s.yaml").model.moe->top_k, 64);
  EXPECT_EQ(
      error_of(replace(text, "top_k: 64", "top_k: 72")),
      "s.yaml:4:37: parallelism.ep_dispatcher = deduplicated takes model.moe.top_k up to 64 where "
      "a token draws fewer than all groups and two or more experts a group; here top_k 72 from 4 "
      "of 32 groups (all_to_all takes any)");
  // Drawing every group, the draws are counted without covering them.
  EXPECT_EQ(load_scenario_text(replace(replace(text, "top_k: 64", "top_k: 72"), "group_top_k: 4",
                                       "group_top_k: 32"),
                               "s.yaml")
                .model.moe->top_k,
            72);
}

TEST(Scenario, DeduplicatedExpertExchangesNeedExpertParallelism) {
  const std::string mixtral =
      replace(replace(kBase, "model: gpt3-175b", "model: mixtral-8x7b"), "  pp: 16",
              "  pp: 16\n  sequence_parallel: true\n  ep_dispatcher: deduplicated");
  EXPECT_EQ(error_of(mixtral),
            "s.yaml:13:18: parallelism.ep_dispatcher = deduplicated needs ep > 1: it sends the "
            "tokens of the expert-parallel exchanges");
  const std::string spread = replace(mixtral, "  pp: 16\n", "  pp: 16\n  ep: 8\n");
  EXPECT_EQ(load_scenario_text(spread, "s.yaml").parallelism.ep_dispatcher,
            TokenDispatcher::kDeduplicated);
  EXPECT_EQ(load_scenario_text(replace(spread, "\n  ep_dispatcher: deduplicated", ""), "s.yaml")
                .parallelism.ep_dispatcher,
            TokenDispatcher::kAllToAll);
  EXPECT_EQ(
      error_of(replace(spread, "ep_dispatcher: deduplicated", "ep_dispatcher: deepep")),
      "s.yaml:14:18: parallelism.ep_dispatcher = 'deepep' is unknown; expected one of: all_to_all, "
      "deduplicated");
}

TEST(Scenario, TensorParallelOverlapNamesWhatRunsIt) {
  // Each tensor parallelism overlaps its own way: Megatron-LM's with userbuffers, PyTorch's with
  // async TP; the other way is an error.
  const std::string overlapped = replace(kBase, "  pp: 16\n", "  pp: 16\n  tp_comm_overlap: true\n");
  EXPECT_EQ(load_scenario_text(overlapped, "s.yaml").parallelism.tp_comm_overlap_method, TpOverlapMethod::kUserbuffers);
  const std::string pytorch = replace(overlapped, "  tp_comm_overlap: true\n",
                                      "  tp_comm_overlap: true\n  tp_implementation: pytorch\n");
  const Scenario async_tp = load_scenario_text(pytorch, "s.yaml");
  EXPECT_EQ(async_tp.parallelism.tp_comm_overlap_method, TpOverlapMethod::kAsyncTp);
  EXPECT_EQ(to_string(async_tp.parallelism.tp_comm_overlap_method), "async_tp");
  EXPECT_EQ(
      load_scenario_text(
          replace(pytorch, "pytorch\n", "pytorch\n  tp_comm_overlap_method: async_tp\n"), "s.yaml")
          .parallelism.tp_comm_overlap_method,
      TpOverlapMethod::kAsyncTp);
  EXPECT_EQ(error_of(replace(overlapped, "true\n", "true\n  tp_comm_overlap_method: async_tp\n")),
            "s.yaml:13:27: parallelism.tp_comm_overlap_method = async_tp applies to "
            "tp_implementation: pytorch "
            "only (here megatron)");
  EXPECT_EQ(
      error_of(replace(pytorch, "pytorch\n", "pytorch\n  tp_comm_overlap_method: userbuffers\n")),
      "s.yaml:14:27: parallelism.tp_comm_overlap_method = userbuffers applies to "
      "tp_implementation: "
      "megatron only (here pytorch)");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16\n", "  pp: 16\n  tp_comm_overlap_method: async_tp\n")),
            "s.yaml:12:27: parallelism.tp_comm_overlap_method = async_tp applies to tp_comm_overlap: true only");
}

TEST(Scenario, TensorParallelismIsMegatronsUnlessSaid) {
  EXPECT_EQ(load_scenario_text(kBase, "s.yaml").parallelism.tp_implementation,
            TpImplementation::kMegatron);
  const Scenario pytorch = load_scenario_text(
      replace(kBase, "  pp: 16\n", "  pp: 16\n  tp_implementation: pytorch\n"), "s.yaml");
  EXPECT_EQ(pytorch.parallelism.tp_implementation, TpImplementation::kPytorch);
  EXPECT_EQ(to_string(pytorch.parallelism.tp_implementation), "pytorch");
  EXPECT_EQ(error_of(replace(kBase, "  pp: 16\n", "  pp: 16\n  tp_implementation: dtensor\n")),
            "s.yaml:12:22: parallelism.tp_implementation = 'dtensor' is unknown; expected one of: "
            "megatron, pytorch");
  EXPECT_EQ(error_of(replace(replace(kBase, "  tp: 8\n", "  tp: 1\n"), "  pp: 16\n",
                             "  pp: 16\n  tp_implementation: pytorch\n")),
            "s.yaml:12:22: parallelism.tp_implementation = pytorch applies to tp > 1 only");
}

TEST(Scenario, OptimizerKernelsAreFusedUnlessSaid) {
  EXPECT_EQ(load_scenario_text(kBase, "s.yaml").training.optimizer_kernels, OptimizerKernels::kFused);
  const std::string text = replace(kBase, "global_batch: 1536", "global_batch: 1536\n  optimizer_kernels: unfused");
  const Scenario unfused = load_scenario_text(text, "s.yaml");
  EXPECT_EQ(unfused.training.optimizer_kernels, OptimizerKernels::kUnfused);
  EXPECT_EQ(to_string(unfused.training.optimizer_kernels), "unfused");
  const Scenario for_loop = load_scenario_text(
      replace(kBase, "global_batch: 1536", "global_batch: 1536\n  optimizer_kernels: for_loop"), "s.yaml");
  EXPECT_EQ(for_loop.training.optimizer_kernels, OptimizerKernels::kForLoop);
  EXPECT_EQ(to_string(for_loop.training.optimizer_kernels), "for_loop");
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  optimizer_kernels: foreach")),
            "s.yaml:14:22: training.optimizer_kernels = 'foreach' is unknown; expected one of: fused, unfused, "
            "for_loop");
}

TEST(ScenarioErrors, FlashAttention2RunsHeadsUpTo256Wide) {
  const std::string wide_heads =
      replace(replace(kBase, "model: gpt3-175b",
                      "model: {layers: 16, hidden: 4096, heads: 8, head_dim: 512, ffn_hidden: 8192, vocab: 1024, "
                      "seq_len: 2048}"),
              "global_batch: 1536", "global_batch: 1536\n  attention: flash2");
  EXPECT_EQ(error_of(wide_heads),
            "s.yaml:14:14: training.attention = flash2 runs head dims up to 256; the model's is 512; use flash or "
            "unfused");
}

TEST(Scenario, RecomputeSelectiveOpIsTorchtitansPolicy) {
  const Scenario s =
      load_scenario_text(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  recompute: selective-op"), "s.yaml");
  EXPECT_EQ(s.training.recompute, Recompute::kSelectiveOp);
  EXPECT_EQ(to_string(s.training.recompute), "selective-op");
}

TEST(ScenarioErrors, RecomputeLayersCountsTheFirstLayersOfEachChunkUnderFullRecompute) {
  const auto training = [](const std::string& fields) {
    return replace(kBase, "global_batch: 1536", "global_batch: 1536\n" + fields);
  };
  const Scenario s = load_scenario_text(training("  recompute: full\n  recompute_layers: 2"), "s.yaml");
  EXPECT_EQ(s.training.recompute_layers, 2);
  EXPECT_TRUE(s.training.recomputes_layer(1));
  EXPECT_FALSE(s.training.recomputes_layer(2));
  EXPECT_TRUE(load_scenario_text(kBase, "s.yaml").training.recomputes_layer(100));
  EXPECT_EQ(error_of(training("  recompute: selective\n  recompute_layers: 2")),
            "s.yaml:15:21: training.recompute_layers = 2 counts the layers full recomputation covers; it "
            "needs training.recompute: full (here selective)");
  EXPECT_EQ(error_of(training("  recompute: full\n  recompute_layers: 0")),
            "s.yaml:15:21: training.recompute_layers = 0 must be at least 1 (the layers of each model chunk "
            "recomputed, counted from its first)");
}

TEST(ScenarioErrors, RecomputeModulesNameTheLayerPartsSelectiveRecomputationRecomputes) {
  const auto training = [](const std::string& fields) {
    return replace(kBase, "global_batch: 1536", "global_batch: 1536\n" + fields);
  };
  EXPECT_EQ(
      load_scenario_text(training("  recompute: selective"), "s.yaml").training.recompute_modules,
      RecomputeModules{RecomputeModule::kCoreAttention});
  const Scenario s = load_scenario_text(
      training("  recompute: selective\n  recompute_modules: [moe_act, layernorm]"), "s.yaml");
  EXPECT_EQ(s.training.recompute_modules,
            (RecomputeModules{RecomputeModule::kMoeActivation, RecomputeModule::kLayerNorm}));
  // As Megatron-Core, latent attention's up-projections need latent attention.
  EXPECT_TRUE(load_scenario_text(
                  replace(training("  recompute: selective\n  recompute_modules: [mla_up_proj]"),
                          "model: gpt3-175b", "model: deepseek-v3"),
                  "s.yaml")
                  .training.recompute_modules.has(RecomputeModule::kLatentUpProjection));
  EXPECT_EQ(error_of(training("  recompute: selective\n  recompute_modules: [mla_up_proj]")),
            "s.yaml:15:22: training.recompute_modules names mla_up_proj, the up-projections of "
            "latent attention, "
            "which model gpt3-175b does not have (no model.mla)");
  EXPECT_TRUE(
      load_scenario_text(training("  recompute: selective\n  recompute_modules: []"), "s.yaml")
          .training.recompute_modules.empty());
  // Given with another recomputation (a sweep's or search's other points), or none, they are
  // kept and act only where it is selective.
  EXPECT_EQ(load_scenario_text(training("  recompute: full\n  recompute_modules: [mlp]"), "s.yaml")
                .training.recompute_modules,
            RecomputeModules{RecomputeModule::kMlp});
  EXPECT_EQ(load_scenario_text(training("  recompute_modules: [mlp]"), "s.yaml")
                .training.recompute_modules,
            RecomputeModules{RecomputeModule::kMlp});
  EXPECT_EQ(error_of(training("  recompute: selective\n  recompute_modules: [mlp, attn]")),
            "s.yaml:15:22: training.recompute_modules names 'attn', not a layer part; allowed: "
            "core_attn, mlp, moe, "
            "shared_experts, moe_act, layernorm, mla_up_proj");
  EXPECT_EQ(error_of(training("  recompute: selective\n  recompute_modules: [mlp, mlp]")),
            "s.yaml:15:22: training.recompute_modules names mlp twice");
  EXPECT_EQ(
      error_of(training("  recompute: selective\n  recompute_modules: [shared_experts, moe]")),
      "s.yaml:15:22: training.recompute_modules names moe and shared_experts: recomputing an MoE "
      "layer "
      "recomputes its shared experts (Megatron-Core's nested checkpoint runs them a third time); "
      "name one");
  EXPECT_EQ(error_of(training("  recompute: selective\n  recompute_modules: mlp")),
            "s.yaml:15:22: training.recompute_modules = mlp must be a list of layer parts, e.g. "
            "[core_attn, moe_act]");
}

TEST(ScenarioErrors, ActivationOffloadNeedsOneStageNoRecomputeAndAHostLink) {
  constexpr const char* kOffload = R"(model: llama3-8b
cluster: {system: dgx-h100, nodes: 1}
parallelism: {tp: 1, pp: 1}
training:
  global_batch: 8
  recompute: none
  activation_offload_layers: 31
)";
  const Scenario s = load_scenario_text(kOffload, "s.yaml");
  EXPECT_EQ(s.training.activation_offload_layers, 31);
  EXPECT_EQ(s.cluster.host_bandwidth, BytesPerSecond(54e9));  // the system's
  EXPECT_EQ(error_of(replace(kOffload, "layers: 31", "layers: 32")),
            "s.yaml:7:30: training.activation_offload_layers = 32 must be from 0 to model.layers - 1 = 31 "
            "(Megatron-Core offloads at most all layers but the last)");
  EXPECT_EQ(error_of(replace(kOffload, "layers: 31", "layers: -1")),
            "s.yaml:7:30: training.activation_offload_layers = -1 must be from 0 to model.layers - 1 = 31 "
            "(Megatron-Core offloads at most all layers but the last)");
  EXPECT_EQ(error_of(replace(kOffload, "pp: 1", "pp: 2")),
            "s.yaml:7:30: training.activation_offload_layers = 31 needs pp = 1 (here 2): Megatron-Core offloads "
            "no activations with pipelining");
  // Transformer Engine keeps one host copy of each layer: a forward must be followed by its own
  // backward.
  EXPECT_EQ(error_of(replace(kOffload, "pp: 1}", "pp: 1, schedule: gpipe}")),
            "s.yaml:7:30: training.activation_offload_layers = 31 needs schedule 1f1b without "
            "parallelism.ep_comm_overlap (here gpipe): Transformer Engine keeps one host copy of each layer, so "
            "each forward must be followed by its own backward");
  EXPECT_EQ(error_of(replace(replace(kOffload, "llama3-8b", "qwen3-30b-a3b"), "pp: 1}", "pp: 1, ep: 8, "
                                                                                      "ep_comm_overlap: true}")),
            "s.yaml:7:30: training.activation_offload_layers = 31 needs schedule 1f1b without "
            "parallelism.ep_comm_overlap (here 1f1b with ep_comm_overlap): Transformer Engine keeps one host copy "
            "of each layer, so each forward must be followed by its own backward");
  EXPECT_EQ(error_of(replace(kOffload, "recompute: none", "recompute: selective")),
            "s.yaml:7:30: training.activation_offload_layers = 31 needs recompute: none (here selective): "
            "Megatron-Core offloads no activations it recomputes");
  const std::string inline_cluster =
      replace(kOffload, "{system: dgx-h100, nodes: 1}", "{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}");
  EXPECT_EQ(error_of(inline_cluster),
            "s.yaml:7:30: training.activation_offload_layers = 31 copies activations to host memory: it needs "
            "cluster.host_bandwidth (GPU to host, per GPU per direction, e.g. 54 GB/s over PCIe Gen5 x16) or a "
            "cluster system that gives it");
  const Scenario given = load_scenario_text(replace(inline_cluster, "gpus_per_node: 8", "gpus_per_node: 8, "
                                                                                         "host_bandwidth: 25 GB/s"),
                                            "s.yaml");
  EXPECT_EQ(given.cluster.host_bandwidth, BytesPerSecond(25e9));
  // A figure without its unit is bytes per second.
  EXPECT_EQ(error_of(replace(inline_cluster, "gpus_per_node: 8", "gpus_per_node: 8, host_bandwidth: 54")),
            "s.yaml:2:76: cluster.host_bandwidth = 54 B/s must be at least 1 MB/s and below 1000 PB/s (a figure needs its "
            "unit, e.g. 54 GB/s)");
}

TEST(ScenarioErrors, FusionAndCrossEntropyAreFusedOrEager) {
  EXPECT_EQ(load_scenario_text(kBase, "s.yaml").training.fusion, Fusion::kFused);
  EXPECT_EQ(load_scenario_text(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  fusion: eager"), "s.yaml")
                .training.fusion,
            Fusion::kEager);
  EXPECT_EQ(load_scenario_text(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  cross_entropy: eager"), "s.yaml")
                .training.cross_entropy,
            Fusion::kEager);
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  fusion: compiled")),
            "s.yaml:14:11: training.fusion = 'compiled' is unknown; expected one of: fused, eager");
}

TEST(ScenarioErrors, GradientDtypeIsFp32OrBf16OfSixteenBitTraining) {
  EXPECT_FALSE(load_scenario_text(kBase, "s.yaml").training.gradients_in_bf16);
  EXPECT_TRUE(load_scenario_text(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  gradient_dtype: bf16"),
                                 "s.yaml")
                  .training.gradients_in_bf16);
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  gradient_dtype: fp16")),
            "s.yaml:14:19: training.gradient_dtype = 'fp16' is unknown; expected one of: fp32, bf16");
  EXPECT_EQ(error_of(replace(kBase, "global_batch: 1536", "global_batch: 1536\n  precision: fp32\n  gradient_dtype: bf16")),
            "s.yaml:15:19: training.gradient_dtype = bf16 needs 16-bit training (precision fp16, bf16 or fp8; here fp32)");
}

TEST(ScenarioErrors, Fp8ParametersNeedFp8TrainingAndAShardedOptimizer) {
  const auto with = [](const std::string& training, const std::string& zero) {
    return replace(replace(replace(kBase, "global_batch: 1536", "global_batch: 1536\n" + training), "pp: 16",
                           "pp: 16\n" + zero),
                   "a100-sxm4-80gb", "h100-sxm5-80gb");
  };
  EXPECT_FALSE(load_scenario_text(kBase, "s.yaml").training.fp8_param_gather);
  EXPECT_TRUE(load_scenario_text(with("  precision: fp8\n  fp8_param_gather: true", "  zero: 1"), "s.yaml")
                  .training.fp8_param_gather);
  EXPECT_EQ(error_of(with("  fp8_param_gather: true", "  zero: 1")),
            "s.yaml:15:21: training.fp8_param_gather = true keeps fp8 weights; it needs precision fp8 (here bf16)");
  EXPECT_EQ(error_of(with("  precision: fp8\n  fp8_param_gather: true", "  zero: 0")),
            "s.yaml:16:21: training.fp8_param_gather = true needs parallelism.zero 1 or more (the distributed "
            "optimizer or FSDP gathers the fp8 weights); here zero = 0");
}

TEST(ScenarioErrors, ContextCommunicationFitsTheHeadsAndNeedsContextParallelism) {
  const auto with = [](const std::string& parallelism) { return replace(kBase, "pp: 16", parallelism); };
  EXPECT_EQ(load_scenario_text(kBase, "s.yaml").parallelism.cp_comm, ContextComm::kRing);
  EXPECT_EQ(load_scenario_text(with("pp: 4\n  cp: 4\n  cp_comm: a2a"), "s.yaml").parallelism.cp_comm,
            ContextComm::kAllToAll);
  EXPECT_EQ(load_scenario_text(with("pp: 4\n  cp: 4\n  cp_comm: all_gather"), "s.yaml").parallelism.cp_comm,
            ContextComm::kAllGather);
  EXPECT_EQ(error_of(with("pp: 16\n  cp_comm: ring")),
            "s.yaml:12:12: parallelism.cp_comm = 'ring' is unknown; expected one of: p2p, all_gather, a2a");
  EXPECT_EQ(error_of(with("pp: 16\n  cp_comm: a2a")), "s.yaml:12:12: parallelism.cp_comm = a2a needs cp > 1 (here cp = 1)");
  // 96 heads over tp 8 leave 12 per rank: 8 context ranks cannot each take whole heads.
  EXPECT_EQ(error_of(with("pp: 2\n  cp: 8\n  cp_comm: a2a")),
            "s.yaml:13:12: parallelism.cp_comm = a2a gives each of the cp = 8 ranks whole heads, but model.heads/tp = "
            "96/8 = 12 does not divide by it");
}

TEST(ScenarioErrors, ExpertExchangeOverlapNeedsExpertsAndAPairingSchedule) {
  const std::string mixtral = replace(kBase, "model: gpt3-175b", "model: mixtral-8x7b");
  const auto with = [&](const std::string& parallelism) { return replace(mixtral, "pp: 16", parallelism); };
  const std::string overlapped = "pp: 16\n  virtual_stages: 2\n  ep: 8\n  ep_comm_overlap: true";
  EXPECT_FALSE(load_scenario_text(with("pp: 16\n  ep: 8"), "s.yaml").parallelism.ep_comm_overlap);
  EXPECT_TRUE(load_scenario_text(with(overlapped), "s.yaml").parallelism.ep_comm_overlap);
  EXPECT_EQ(error_of(with("pp: 16\n  ep_comm_overlap: true")),
            "s.yaml:12:20: parallelism.ep_comm_overlap = true needs ep > 1: it overlaps the expert-parallel "
            "all-to-alls");
  EXPECT_EQ(error_of(with("pp: 16\n  ep: 8\n  ep_comm_overlap: true\n  schedule: gpipe")),
            "s.yaml:13:20: parallelism.ep_comm_overlap = true pairs the forwards and backwards of 1f1b or "
            "interleaved-1f1b; schedule is gpipe");
  EXPECT_EQ(error_of(with("pp: 16\n  ep: 8\n  ep_comm_overlap: true")),
            "s.yaml:13:20: parallelism.ep_comm_overlap = true with pp = 16 needs interleaved-1f1b (virtual_stages > "
            "1), as Megatron-Core requires");
  EXPECT_EQ(error_of(with(overlapped + "\n  zero: 3")),
            "s.yaml:14:20: parallelism.ep_comm_overlap = true is not modelled with zero = 3 (weights gathered per "
            "block); use zero 0 to 2");
  EXPECT_EQ(error_of(replace(with(overlapped), "global_batch: 1536", "global_batch: 1536\n  recompute: full")),
            "s.yaml:17:14: training.recompute = full cannot run with parallelism.ep_comm_overlap (Megatron-Core "
            "refuses it too)");
  EXPECT_EQ(error_of(replace(with(overlapped), "global_batch: 1536", "global_batch: 1536\n  precision: fp32")),
            "s.yaml:17:14: training.precision = fp32 cannot run with parallelism.ep_comm_overlap: Megatron-Core "
            "overlaps bf16 or fp16 models (and their fp8 GEMMs)");
}

TEST(ScenarioErrors, ContextExchangesOutsideTheAttentionNeedARingOrGatherToHold) {
  const auto with = [](const std::string& parallelism) { return replace(kBase, "pp: 16", parallelism); };
  EXPECT_TRUE(load_scenario_text(kBase, "s.yaml").parallelism.cp_comm_overlap);
  EXPECT_FALSE(
      load_scenario_text(with("pp: 4\n  cp: 4\n  cp_comm_overlap: false"), "s.yaml").parallelism.cp_comm_overlap);
  EXPECT_FALSE(load_scenario_text(with("pp: 4\n  cp: 4\n  cp_comm: all_gather\n  cp_comm_overlap: false"), "s.yaml")
                   .parallelism.cp_comm_overlap);
  EXPECT_EQ(error_of(with("pp: 16\n  cp_comm_overlap: false")),
            "s.yaml:12:20: parallelism.cp_comm_overlap = false needs cp > 1 (here cp = 1)");
  EXPECT_EQ(error_of(with("pp: 4\n  cp: 4\n  cp_comm: a2a\n  cp_comm_overlap: false")),
            "s.yaml:14:20: parallelism.cp_comm_overlap = false applies to cp_comm p2p and all_gather: a2a's "
            "all-to-alls never run beside the attention");
}

TEST(ScenarioErrors, ContextParallelismNeedsAFusedAttentionKernel) {
  // Unfused attention was timed on the local sequence alone, as if cp did not split it.
  EXPECT_EQ(error_of(replace(replace(kBase, "pp: 16", "pp: 4\n  cp: 4"), "global_batch: 1536",
                             "global_batch: 1536\n  attention: unfused")),
            "s.yaml:12:7: parallelism.cp = 4 splits attention over ranks, which needs a fused kernel "
            "(training.attention flash, flash2, flash3 or flash_triton; here unfused)");
}

TEST(Scenario, DefaultSplitGivesExtraLayersToInnerStages) {
  // 10 layers over 4 stages: 2 each, the 2 left over to stages 1 and 2.
  EXPECT_EQ(default_layers_per_stage(10, 4), (std::vector<int>{2, 3, 3, 2}));
  // 3 layers over 2 stages: no inner stage, the extra layer goes first.
  EXPECT_EQ(default_layers_per_stage(3, 2), (std::vector<int>{2, 1}));
}

TEST(Scenario, RelativePathsAreTakenFromTheScenarioFolder) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / ("paceline-scenario-" + std::to_string(getpid()));
  fs::create_directories(folder / "hardware");
  fs::copy_file(data_root() + "/hardware/catalog/gpus/h100-sxm5-80gb.yaml", folder / "hardware" / "my-gpu.yaml",
                fs::copy_options::overwrite_existing);
  fs::copy_file(data_root() + "/models/catalog/gpt-1.7b.yaml", folder / "my-model.yaml",
                fs::copy_options::overwrite_existing);
  std::ofstream(folder / "s.yaml") << "model: my-model.yaml\ncluster: {gpu: hardware/my-gpu.yaml}\n"
                                      "training: {global_batch: 8}\n";
  // The working directory is the source tree, where neither file is.
  const Scenario s = load_scenario_file((folder / "s.yaml").string());
  EXPECT_EQ(s.cluster.gpu.name, "h100-sxm5-80gb");
  EXPECT_EQ(s.model.layers, 24);
  // Text has no folder: its paths are taken from the working directory.
  EXPECT_THROW(load_scenario_text("model: my-model.yaml\ncluster: {gpu: h100-sxm5-80gb}\ntraining: {global_batch: 8}\n",
                                  "<text>"),
               InputError);
  EXPECT_EQ(path_from("/abs/x.yaml", (folder / "s.yaml").string()), "/abs/x.yaml");
  EXPECT_EQ(path_from("x.yaml", "<text>"), "x.yaml");
  fs::remove_all(folder);
}

}  // namespace
}  // namespace paceline
