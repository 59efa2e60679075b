// Tests models/model_spec.h: exact parameter counts against published ones, and read_model's
// checks with their messages and positions.
#include "models/model_spec.h"

#include <gtest/gtest.h>

#include <string>

#include "base/yaml_reader.h"
#include "models/model_catalog.h"

namespace paceline {
namespace {

// Tests run from the repository root (paceline_test), so the catalog is at its repository path.
constexpr char kCatalog[] = "models/catalog";

ModelSpec catalog_model(const std::string& name) {
  return load_model_file(std::string(kCatalog) + "/" + name + ".yaml");
}

// Reads an inline model mapping as a scenario's `model:` would be read.
ModelSpec read_text(const std::string& text) {
  const YamlDocument document = load_yaml_text(text, "m.yaml");
  YamlMap root(document.root, document.file, "model");
  return read_model(root);
}

// Runs `body` and returns the InputError message it throws ("" if none).
template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A small dense model in catalog form whose counts are worked out by hand below.
constexpr char kTinyGpt[] = R"(name: tiny
layers: 2
hidden: 8
heads: 2
ffn_hidden: 32
vocab: 10
seq_len: 4
activation: gelu
norm: layernorm
position: learned
tied_embeddings: true
bias: true
)";

TEST(CountParameters, TinyGptByHand) {
  const ParameterCount count = count_parameters(read_text(kTinyGpt));
  // h = 8, f = 32. Attention: QKV 8·24 + 24 bias, output 8·8 + 8 = 288; two LayerNorms 2·16 = 32;
  // MLP 8·32 + 32 + 32·8 + 8 = 552. A layer: 288 + 32 + 552 = 872.
  EXPECT_EQ(count.per_dense_layer, 872);
  // Token embedding 10·8 = 80 plus learned positions 4·8 = 32; the output head is tied.
  EXPECT_EQ(count.embedding, 112);
  EXPECT_EQ(count.output, 0);
  // 2 layers · 872 + 112 + final LayerNorm 16 = 1872, all active.
  EXPECT_EQ(count.total, 1872);
  EXPECT_EQ(count.active, 1872);
  EXPECT_EQ(count.per_moe_layer, 0);
}

TEST(CountParameters, MoeEveryOtherLayerByHand) {
  const ModelSpec model = read_text(R"(layers: 4
hidden: 8
heads: 2
kv_heads: 1
ffn_hidden: 16
vocab: 10
seq_len: 4
activation: swiglu
norm: rmsnorm
position: rope
moe: {experts: 4, top_k: 2, ffn_hidden: 6, every: 2}
)");
  // Layers 1 and 3 (0-based) are MoE: (layer + 1) % every == 0.
  EXPECT_FALSE(model.is_moe_layer(0));
  EXPECT_TRUE(model.is_moe_layer(1));
  EXPECT_EQ(model.num_moe_layers(), 2);
  const ParameterCount count = count_parameters(model);
  // head_dim 4, one KV head: Q 8·8, K and V 8·4 each, output 8·8 = 192; two RMSNorms 16.
  // Dense layer: 192 + 16 + SwiGLU 3·8·16 = 592.
  EXPECT_EQ(count.per_dense_layer, 592);
  // An expert: 3·8·6 = 144. MoE layer: 192 + 16 + router 8·4 + 4·144 = 816.
  EXPECT_EQ(count.per_expert, 144);
  EXPECT_EQ(count.per_moe_layer, 816);
  // Outside the layers: embedding 80, untied output 80, final RMSNorm 8 = 168.
  // Total: 168 + 2·592 + 2·816 = 2984. Active: MoE layers run 2 of 4 experts,
  // 816 − 2·144 = 528 each: 168 + 2·592 + 2·528 = 2408.
  EXPECT_EQ(count.total, 2984);
  EXPECT_EQ(count.active, 2408);
}

// The dense Llama 3 counts are the ones Meta's checkpoints hold (sum of tensor sizes). Each layer:
// attention h·(h + 2·kv·128) + h², two RMSNorms 2h, SwiGLU 3·h·f; outside the layers an untied
// embedding and output head V·h each and the final RMSNorm h.
TEST(CountParameters, Llama3_8b) {
  // h = 4096, kv = 8, f = 14336, V = 128256, 32 layers:
  // layer 4096·6144 + 4096² + 8192 + 3·4096·14336 = 41,943,040 + 8192 + 176,160,768
  //       = 218,112,000; 32 layers = 6,979,584,000;
  // plus 2·128256·4096 = 1,050,673,152 and 4096 → 8,030,261,248.
  const ParameterCount count = count_parameters(catalog_model("llama3-8b"));
  EXPECT_EQ(count.total, 8'030'261'248);
  EXPECT_EQ(count.active, count.total);
}

TEST(CountParameters, Llama3_70b) {
  // h = 8192, kv = 8, f = 28672, 80 layers:
  // layer 8192·10240 + 8192² + 16384 + 3·8192·28672 = 150,994,944 + 16384 + 704,643,072
  //       = 855,654,400; 80 layers = 68,452,352,000;
  // plus 2·128256·8192 = 2,101,346,304 and 8192 → 70,553,706,496.
  EXPECT_EQ(count_parameters(catalog_model("llama3-70b")).total, 70'553'706'496);
}

TEST(CountParameters, Llama31_405b) {
  // h = 16384, kv = 8, f = 53248, 126 layers:
  // layer 16384·18432 + 16384² + 32768 + 3·16384·53248 = 570,425,344 + 32768 + 2,617,245,696
  //       = 3,187,703,808; 126 layers = 401,650,679,808;
  // plus 2·128256·16384 = 4,202,692,608 and 16384 → 405,853,388,800.
  EXPECT_EQ(count_parameters(catalog_model("llama3.1-405b")).total, 405'853'388'800);
}

TEST(CountParameters, Mixtral8x7bTotalAndActive) {
  const ParameterCount count = count_parameters(catalog_model("mixtral-8x7b"));
  // h = 4096, kv = 8, 8 experts of f = 14336, top-2, 32 layers, V = 32000.
  // Shared per layer: attention 4096·6144 + 4096² = 41,943,040, two RMSNorms 8192, router
  // 4096·8 = 32,768 → 41,984,000. An expert: 3·4096·14336 = 176,160,768.
  EXPECT_EQ(count.per_expert, 176'160'768);
  // Total: layer 41,984,000 + 8·176,160,768 = 1,451,270,144; 32 layers = 46,440,644,608;
  // plus 2·32000·4096 = 262,144,000 and 4096 → 46,702,792,704 (Mistral's published count).
  EXPECT_EQ(count.total, 46'702'792'704);
  // Active: two experts a token, layer 41,984,000 + 2·176,160,768 = 394,305,536;
  // 32 layers = 12,617,777,152; plus 262,148,096 → 12,879,925,248 (the "12.9B active").
  EXPECT_EQ(count.active, 12'879'925'248);
}

TEST(CountParameters, DeepSeekV3TotalAndActive) {
  const ModelSpec model = catalog_model("deepseek-v3");
  const ParameterCount count = count_parameters(model);
  // h = 7168, 128 heads of 192 (rotary 64) with values of 128, q_lora 1536, kv_lora 512.
  // Attention: q_down 7168·1536 = 11,010,048 and its norm 1536; q_up 1536·128·192 = 37,748,736;
  // kv_down 7168·(512 + 64) = 4,128,768 and its norm 512; kv_up 512·128·(128 + 128) =
  // 16,777,216; output 128·128·7168 = 117,440,512 → 187,107,328, of which the down-projections
  // and their norms, 15,140,864, sit whole on every tensor-parallel rank.
  EXPECT_EQ(count.tp_replicated_per_layer, 15'140'864);
  EXPECT_EQ(count.attention_matmuls_per_layer, 187'105'280);
  // Dense layer: attention, two RMSNorms 14,336, SwiGLU 3·7168·18432 = 396,361,728.
  EXPECT_EQ(count.per_dense_layer, 583'483'392);
  // MoE layer: attention, norms, router 7168·256 = 1,835,008, one shared and 256 routed experts
  // of 3·7168·2048 = 44,040,192.
  EXPECT_EQ(count.per_expert, 44'040'192);
  EXPECT_EQ(count.per_moe_layer, 11'507'286'016);
  // The multi-token prediction module: an MoE layer (as the last layer is), three norms 21,504
  // and the projection 2·7168·7168 = 102,760,448.
  EXPECT_TRUE(model.mtp_layer_is_moe());
  EXPECT_EQ(count.per_mtp_module, 11'610'067'968);
  // 3 dense and 58 MoE layers, embedding and head 129280·7168 each, the final norm: 671.0B, the
  // report's 671B; with the module 682.6B (the 685B checkpoint also holds the module's copies of
  // the embedding and head, 1.85B).
  EXPECT_EQ(model.num_moe_layers(), 58);
  EXPECT_FALSE(model.is_moe_layer(2));
  EXPECT_TRUE(model.is_moe_layer(3));
  EXPECT_EQ(count.total, 671'026'404'352 + 11'610'067'968);
  // Active: 8 routed experts and the shared one a token → 37.6B, the report's 37B; the module's
  // layer 585,318,400 of them, with its projection and norms 688,100,352 more.
  EXPECT_EQ(count.active, 37'552'282'624 + 688'100'352);
}

TEST(CountParameters, Gpt3_175bMatchesNarayanansFormula) {
  const ModelSpec model = catalog_model("gpt3-175b");
  // Narayanan et al. (arXiv:2104.04473, §5.1) count P = 12·l·h²·(1 + 13/(12h)) + (V + s)·h: each
  // layer 12h² weights and 13h biases and LayerNorm parameters, plus the tied embedding and the
  // learned positions. count_parameters adds the final LayerNorm, 2h. With l = 96, h = 12288,
  // V = 51200, s = 2048:
  //   96·(12·12288² + 13·12288) = 96·1,812,099,072 = 173,961,510,912
  //   (51200 + 2048)·12288      =                         654,311,424
  //   2·12288                   =                              24,576
  //   total                                            174,615,846,912
  const int64_t l = model.layers;
  const int64_t h = model.hidden;
  const int64_t formula = l * (12 * h * h + 13 * h) + (model.vocab + model.seq_len) * h + 2 * h;
  EXPECT_EQ(formula, 174'615'846'912);
  EXPECT_EQ(count_parameters(model).total, formula);
}

// The six required fields of a dense model on lines 1–6; tests append line 7 onwards.
constexpr char kRequired[] =
    "layers: 2\nhidden: 64\nheads: 8\nffn_hidden: 256\nvocab: 100\nseq_len: 16\n";

TEST(ReadModel, DefaultsFollowTheHeads) {
  const ModelSpec model = read_text(kRequired);
  // kv_heads defaults to heads (plain multi-head attention), head_dim to hidden / heads = 8.
  EXPECT_EQ(model.kv_heads, 8);
  EXPECT_EQ(model.head_dim, 8);
  EXPECT_EQ(model.name, "custom");
  EXPECT_EQ(model.activation, Activation::kGelu);
  EXPECT_EQ(model.norm, Norm::kLayerNorm);
  EXPECT_EQ(model.position, Position::kLearned);
  EXPECT_FALSE(model.moe.has_value());
}

TEST(ReadModel, KvHeadsMustDivideHeads) {
  // kv_heads' value, 3, sits at line 7, column 11 (after "kv_heads: ").
  EXPECT_EQ(error_of([] { read_text(std::string(kRequired) + "kv_heads: 3\n"); }),
            "m.yaml:7:11: model.kv_heads = 3 must divide heads = 8");
}

TEST(ReadModel, TopKMustNotExceedExperts) {
  // top_k's value, 8, sits at line 8, column 10 (after two spaces of indent and "top_k: ").
  EXPECT_EQ(
      error_of([] { read_text(std::string(kRequired) + "moe:\n  top_k: 8\n  experts: 4\n"); }),
      "m.yaml:8:10: model.moe.top_k = 8 exceeds moe.experts = 4");
}

TEST(ReadModel, ExpertGroupsDivideTheExpertsAndHoldTheTopK) {
  const auto moe = [](const std::string& fields) {
    return read_text(std::string(kRequired) + "moe: {" + fields + "}\n");
  };
  EXPECT_EQ(error_of([&] { moe("experts: 8, top_k: 2, groups: 3"); }),
            "m.yaml:7:37: model.moe.groups = 3 does not divide moe.experts = 8");
  EXPECT_EQ(error_of([&] { moe("experts: 8, top_k: 2, groups: 4, group_top_k: 5"); }),
            "m.yaml:7:53: model.moe.group_top_k = 5 exceeds moe.groups = 4");
  EXPECT_EQ(error_of([&] { moe("experts: 8, top_k: 4, groups: 4, group_top_k: 1"); }),
            "m.yaml:7:26: model.moe.top_k = 4 exceeds the 2 experts in moe.group_top_k = 1 of the "
            "groups");
  const ModelSpec grouped = moe("experts: 8, top_k: 2, groups: 4, group_top_k: 2");
  EXPECT_EQ(grouped.moe->groups, 4);
  EXPECT_EQ(grouped.moe->group_top_k, 2);
  // Without groups every expert is one group's.
  const ModelSpec plain = moe("experts: 8, top_k: 2");
  EXPECT_EQ(plain.moe->groups, 1);
  EXPECT_EQ(plain.moe->group_top_k, 1);
}

TEST(ReadModel, SizesAndCountsStayWithin64Bits) {
  // Sizes each within 2^31 - 1 (tests/fuzz/regression_test.cc: one above it) whose parameters
  // a 64-bit count cannot hold name the model.
  EXPECT_EQ(error_of([] { read_text("layers: 2147483647\nhidden: 2147483640\nheads: 8\nffn_hidden: 2147483647\n"
                                    "vocab: 100\nseq_len: 16\n"); }),
            "m.yaml:1:1: model: has more than 9223372036854775807 parameters (layers 2147483647, hidden "
            "2147483640, ffn_hidden 2147483647, vocab 100); no model that large can be counted");
  // The largest dense layers still counted exactly: 4·h² + 2·h·f + 2·2h norms, h = f = 2^20.
  const ModelSpec wide = read_text("layers: 1\nhidden: 1048576\nheads: 8\nffn_hidden: 1048576\nvocab: 1\n"
                                   "seq_len: 1\nposition: rope\ntied_embeddings: true\n");
  const int64_t h = 1048576;
  EXPECT_EQ(count_parameters(wide).per_dense_layer, 4 * h * h + 2 * h * h + 4 * h);
}

TEST(ReadModel, LatentAttentionStatesItsHeadsInFull) {
  const std::string rope = std::string(kRequired) + "position: rope\n";
  const std::string mla = "mla: {kv_lora_rank: 32, rope_head_dim: 4, v_head_dim: 8}\n";
  // head_dim is the query/key width with its rotary part, which hidden / heads need not be.
  EXPECT_EQ(error_of([&] { read_text(rope + mla); }),
            "m.yaml:8:6: model.mla: needs model.head_dim, the query/key head width with its rotary part "
            "(DeepSeek-V3: 128 + 64 = 192)");
  EXPECT_EQ(error_of([&] { read_text(rope + "head_dim: 4\n" + mla); }),
            "m.yaml:9:40: model.mla.rope_head_dim = 4 must be less than model.head_dim = 4, the query/key head "
            "width of which it is the rotary part");
  EXPECT_EQ(error_of([&] { read_text(rope + "head_dim: 12\nkv_heads: 4\n" + mla); }),
            "m.yaml:9:11: model.kv_heads = 4 must equal heads = 8 with mla: every head has its own key and value");
  EXPECT_EQ(error_of([&] { read_text(std::string(kRequired) + "head_dim: 12\n" + mla); }),
            "m.yaml:1:1: model.position = learned (the default) must be rope with mla, whose keys share a rotary "
            "part");
  EXPECT_EQ(error_of([&] { read_text(rope + "head_dim: 12\nqk_norm: true\n" + mla); }),
            "m.yaml:9:10: model.qk_norm = true is not a form of mla; its projections have no biases and it "
            "normalises the compressed query and key/value instead");
  const ModelSpec model = read_text(rope + "head_dim: 12\n" + mla);
  EXPECT_EQ(model.mla->q_lora_rank, 0);  // queries projected from the block input
  EXPECT_EQ(model.value_head_dim(), 8);
  // 0 said outright, as the result echoes it, reads back the same.
  EXPECT_EQ(read_text(rope + "head_dim: 12\nmla: {q_lora_rank: 0, kv_lora_rank: 32, rope_head_dim: 4, "
                             "v_head_dim: 8}\n").mla,
            model.mla);
}

TEST(ReadModel, FirstDenseLayersMustLeaveAnMoeLayer) {
  EXPECT_EQ(error_of([] { read_text(std::string(kRequired) + "moe: {experts: 4, first_dense_layers: 2}\n"); }),
            "m.yaml:7:39: model.moe.first_dense_layers = 2 leaves no MoE layer of layers = 2 at every = 1");
  // More dense layers than layers would count a negative number of MoE layers.
  EXPECT_EQ(error_of([] { read_text(std::string(kRequired) + "moe: {experts: 4, first_dense_layers: 5}\n"); }),
            "m.yaml:7:39: model.moe.first_dense_layers = 5 leaves no MoE layer of layers = 2 at every = 1");
  const ModelSpec model = read_text(std::string(kRequired) + "moe: {experts: 4, first_dense_layers: 1}\n");
  EXPECT_FALSE(model.is_moe_layer(0));
  EXPECT_TRUE(model.is_moe_layer(1));
}

TEST(ReadModel, UnknownActivationListsTheAlternatives) {
  // activation's value, relu, sits at line 7, column 13 (after "activation: ").
  EXPECT_EQ(error_of([] { read_text(std::string(kRequired) + "activation: relu\n"); }),
            "m.yaml:7:13: model.activation = 'relu' is unknown; expected one of: gelu, swiglu, "
            "squared-relu");
}

TEST(ReadModel, MultiTokenPredictionModulesFollowRotaryLayers) {
  const std::string rope = std::string(kRequired) + "position: rope\n";
  EXPECT_EQ(read_text(rope + "mtp_layers: 2\n").mtp_layers, 2);
  EXPECT_EQ(error_of([&] { read_text(rope + "mtp_layers: -1\n"); }),
            "m.yaml:8:13: model.mtp_layers = -1 must be in [0, layers = 2]: the multi-token "
            "prediction modules "
            "after the last layer");
  EXPECT_EQ(error_of([] { read_text(std::string(kRequired) + "mtp_layers: 1\n"); }),
            "m.yaml:7:13: model.mtp_layers = 1 needs position rope or alibi: multi-token "
            "prediction is modelled "
            "without a learned position table");
}

TEST(ReadModel, UnknownKeyListsTheKnownOnes) {
  // The misspelt key starts line 7; the list is every key read_model asks for, sorted.
  EXPECT_EQ(error_of([] { read_text(std::string(kRequired) + "tied_embedding: true\n"); }),
            "m.yaml:7:1: unknown key 'tied_embedding' in model; expected one of: activation, attention_window, bias, "
            "dropout, ffn_hidden, head_dim, heads, hidden, kv_heads, layers, mla, moe, mtp_layers, "
            "name, norm, "
            "position, qk_norm, qkv_bias, seq_len, source, tied_embeddings, vocab");
}

TEST(ModelSpecStrings, NamesMatchTheYamlSpelling) {
  EXPECT_EQ(to_string(Activation::kGelu), "gelu");
  EXPECT_EQ(to_string(Activation::kSwiglu), "swiglu");
  EXPECT_EQ(to_string(Activation::kSquaredRelu), "squared-relu");
  EXPECT_EQ(to_string(Norm::kLayerNorm), "layernorm");
  EXPECT_EQ(to_string(Norm::kRmsNorm), "rmsnorm");
  EXPECT_EQ(to_string(Position::kLearned), "learned");
  EXPECT_EQ(to_string(Position::kRope), "rope");
  EXPECT_EQ(to_string(Position::kAlibi), "alibi");
}

}  // namespace
}  // namespace paceline
