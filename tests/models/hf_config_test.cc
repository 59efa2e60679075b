// Tests models/hf_config.h: real config.json files import to the catalog's architectures and
// published parameter counts; unsupported or incomplete configs fail with their position.
#include "models/hf_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "base/input_error.h"
#include "base/yaml_reader.h"
#include "models/model_catalog.h"

namespace paceline {
namespace {

// Tests run from the repository root (paceline_test), so files are at their repository paths.
constexpr char kData[] = "tests/models/data";
constexpr char kCatalog[] = "models/catalog";

ModelSpec fixture(const std::string& file) {
  return load_hf_config(std::string(kData) + "/" + file);
}

ModelSpec catalog_model(const std::string& name) {
  return load_model_file(std::string(kCatalog) + "/" + name + ".yaml");
}

template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Everything a config.json and a catalog entry both state: all but the name and the source.
void expect_same_architecture(const ModelSpec& imported, const ModelSpec& catalog) {
  EXPECT_EQ(imported.layers, catalog.layers);
  EXPECT_EQ(imported.hidden, catalog.hidden);
  EXPECT_EQ(imported.heads, catalog.heads);
  EXPECT_EQ(imported.kv_heads, catalog.kv_heads);
  EXPECT_EQ(imported.head_dim, catalog.head_dim);
  EXPECT_EQ(imported.ffn_hidden, catalog.ffn_hidden);
  EXPECT_EQ(imported.vocab, catalog.vocab);
  EXPECT_EQ(imported.seq_len, catalog.seq_len);
  EXPECT_EQ(imported.activation, catalog.activation);
  EXPECT_EQ(imported.norm, catalog.norm);
  EXPECT_EQ(imported.position, catalog.position);
  EXPECT_EQ(imported.tied_embeddings, catalog.tied_embeddings);
  EXPECT_EQ(imported.linear_bias, catalog.linear_bias);
  EXPECT_EQ(imported.qkv_bias, catalog.qkv_bias);
  EXPECT_EQ(imported.qk_norm, catalog.qk_norm);
  EXPECT_EQ(imported.dropout, catalog.dropout);
  EXPECT_EQ(imported.mla, catalog.mla);
  EXPECT_EQ(imported.mtp_layers, catalog.mtp_layers);
  ASSERT_EQ(imported.moe.has_value(), catalog.moe.has_value());
  if (imported.moe) {
    EXPECT_EQ(imported.moe->experts, catalog.moe->experts);
    EXPECT_EQ(imported.moe->top_k, catalog.moe->top_k);
    EXPECT_EQ(imported.moe->ffn_hidden, catalog.moe->ffn_hidden);
    EXPECT_EQ(imported.moe->every, catalog.moe->every);
    EXPECT_EQ(imported.moe->shared_experts, catalog.moe->shared_experts);
    EXPECT_EQ(imported.moe->shared_ffn_hidden, catalog.moe->shared_ffn_hidden);
    EXPECT_EQ(*imported.moe, *catalog.moe);
  }
  // And nothing else differs, should ModelSpec grow a field this list misses.
  ModelSpec renamed = imported;
  renamed.name = catalog.name;
  renamed.source = catalog.source;
  EXPECT_TRUE(renamed == catalog);
}

TEST(HfConfig, Llama3_8bMatchesTheCatalog) {
  const ModelSpec imported = fixture("Meta-Llama-3-8B.json");
  // No _name_or_path in the file: the model is named after the file.
  EXPECT_EQ(imported.name, "Meta-Llama-3-8B");
  expect_same_architecture(imported, catalog_model("llama3-8b"));
}

TEST(HfConfig, Mixtral8x7bMatchesTheCatalog) {
  const ModelSpec imported = fixture("Mixtral-8x7B-v0.1.json");
  ASSERT_TRUE(imported.moe.has_value());
  // num_local_experts = 8, num_experts_per_tok = 2, each expert intermediate_size = 14336 wide.
  EXPECT_EQ(imported.moe->experts, 8);
  EXPECT_EQ(imported.moe->top_k, 2);
  EXPECT_EQ(imported.moe->ffn_hidden, 14336);
  expect_same_architecture(imported, catalog_model("mixtral-8x7b"));
}

TEST(HfConfig, ExpertsAreBoundedAsInTheModelFormat) {
  std::string text = read_text_file(std::string(kData) + "/Mixtral-8x7B-v0.1.json");
  const std::string key = "\"num_local_experts\": 8";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), "\"num_local_experts\": 70000");
  const std::string error = error_of([&] { parse_hf_config(text, "m.json"); });
  EXPECT_NE(error.find("num_local_experts = 70000 is more than 65536"), std::string::npos) << error;
}

TEST(HfConfig, Qwen3_30bA3bMatchesTheCatalog) {
  const ModelSpec imported = fixture("Qwen3-30B-A3B.json");
  // head_dim = 128 although hidden / heads = 2048 / 32 = 64; QK-norm comes with qwen3_moe.
  EXPECT_EQ(imported.head_dim, 128);
  EXPECT_TRUE(imported.qk_norm);
  expect_same_architecture(imported, catalog_model("qwen3-30b-a3b"));
}

TEST(HfConfig, DeepSeekV3MatchesTheCatalog) {
  const ModelSpec imported = fixture("DeepSeek-V3.json");
  // The query/key head: qk_nope_head_dim 128 + qk_rope_head_dim 64; values v_head_dim 128.
  EXPECT_EQ(imported.head_dim, 192);
  ASSERT_TRUE(imported.mla.has_value());
  EXPECT_EQ(imported.mla->q_lora_rank, 1536);
  EXPECT_EQ(imported.moe->first_dense_layers, 3);  // first_k_dense_replace
  EXPECT_EQ(imported.moe->shared_experts, 1);
  EXPECT_EQ(imported.moe->groups, 8);  // n_group, topk_group under topk_method noaux_tc
  EXPECT_EQ(imported.moe->group_top_k, 4);
  EXPECT_EQ(imported.mtp_layers, 1);  // num_nextn_predict_layers
  expect_same_architecture(imported, catalog_model("deepseek-v3"));
}

// DeepSeek-V2-Lite's config.json, its key fields.
constexpr const char* kDeepSeekV2Lite =
    R"({"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
          "intermediate_size": 10944, "max_position_embeddings": 163840, "vocab_size": 102400,
          "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
          "v_head_dim": 128, "n_routed_experts": 64, "num_experts_per_tok": 6, "moe_intermediate_size": 1408,
          "n_shared_experts": 2, "first_k_dense_replace": 1, "rms_norm_eps": 1e-06})";

// `text` with `addition` put before its last key.
std::string with_fields(std::string text, const std::string& addition) {
  return text.replace(text.find(R"("rms_norm_eps")"), 0, addition);
}

TEST(HfConfig, LatentAttentionWithoutAQueryRankProjectsQueriesDirectly) {
  // DeepSeek-V2-Lite's q_lora_rank is null; a missing qk_nope_head_dim is named.
  const std::string v2_lite = kDeepSeekV2Lite;
  const ModelSpec imported = parse_hf_config(v2_lite, "v2.json");
  EXPECT_EQ(imported.mla->q_lora_rank, 0);
  EXPECT_EQ(imported.num_moe_layers(), 26);
  const std::string biased = with_fields(v2_lite, R"("attention_bias": true, )");
  EXPECT_EQ(error_of([&] { parse_hf_config(biased, "v2.json"); }),
            "v2.json:5:80: attention_bias = true is not a form of latent attention, whose projections have no biases");
  std::string without_nope = v2_lite;
  without_nope.replace(without_nope.find(R"("qk_nope_head_dim": 128, )"), 25, "");
  EXPECT_EQ(error_of([&] { parse_hf_config(without_nope, "v2.json"); }),
            "v2.json:1:1: qk_nope_head_dim is required for model_type 'deepseek_v2'");
}

TEST(HfConfig, DeepSeekRoutesWithinGroupsUnlessGreedy) {
  // DeepSeek-V2's group_limited_greedy (as V3's noaux_tc) draws a token's experts from its best
  // topk_group of n_group groups; greedy, the default, ignores them.
  const std::string v2 = with_fields(kDeepSeekV2Lite, R"("n_group": 8, "topk_group": 3, )");
  const ModelSpec greedy = parse_hf_config(v2, "v2.json");
  EXPECT_EQ(greedy.moe->groups, 1);
  EXPECT_EQ(greedy.moe->group_top_k, 1);
  const std::string grouped = with_fields(v2, R"("topk_method": "group_limited_greedy", )");
  const ModelSpec limited = parse_hf_config(grouped, "v2.json");
  EXPECT_EQ(limited.moe->groups, 8);
  EXPECT_EQ(limited.moe->group_top_k, 3);
  std::string uneven = grouped;
  uneven.replace(uneven.find(R"("n_group": 8)"), 12, R"("n_group": 7)");
  EXPECT_EQ(error_of([&] { parse_hf_config(uneven, "v2.json"); }),
            "v2.json:5:73: n_group = 7 does not divide n_routed_experts = 64");
  EXPECT_EQ(error_of([&] {
              parse_hf_config(with_fields(v2, R"("topk_method": "gready", )"), "v2.json");
            }),
            "v2.json:5:108: topk_method = 'gready' is unknown; expected one of: greedy, "
            "group_limited_greedy, "
            "noaux_tc");
  // DeepSeek-V3's configuration class routes in 4 of 8 groups where the file does not say.
  std::string v3 = kDeepSeekV2Lite;
  v3.replace(v3.find("deepseek_v2"), 11, "deepseek_v3");
  const ModelSpec v3_defaults = parse_hf_config(v3, "v3.json");
  EXPECT_EQ(v3_defaults.moe->groups, 8);
  EXPECT_EQ(v3_defaults.moe->group_top_k, 4);
}

TEST(HfConfig, DeepSeekMoeLayersFollowTheirModellingCode) {
  // Layer i is an MoE layer when i >= first_k_dense_replace and i % moe_layer_freq == 0: with 2
  // dense layers and a frequency of 2, layers 2, 4 and 6 of 7.
  const auto config = [](int dense, int freq) {
    return fmt::format(
        R"({{"model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 7, "num_attention_heads": 4,
            "intermediate_size": 512, "max_position_embeddings": 4096, "vocab_size": 1000, "q_lora_rank": 64,
            "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
            "first_k_dense_replace": {}, "moe_layer_freq": {}}})",
        dense, freq);
  };
  const ModelSpec model = parse_hf_config(config(2, 2), "d.json");
  std::vector<int> moe_layers;
  for (int layer = 0; layer < model.layers; ++layer) {
    if (model.is_moe_layer(layer)) moe_layers.push_back(layer);
  }
  EXPECT_EQ(moe_layers, (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(model.num_moe_layers(), 3);
  // Layer 0 as an MoE layer with a stride of 2 is beyond paceline's MoE placement.
  EXPECT_EQ(error_of([&] { parse_hf_config(config(0, 2), "d.json"); }),
            "d.json:5:59: moe_layer_freq = 2 with first_k_dense_replace = 0 makes layer 0 an MoE layer, which an MoE "
            "layer every 2 layers cannot express");
}

TEST(HfConfig, Gpt2HasItsPublishedCount) {
  const ModelSpec imported = fixture("gpt2.json");
  EXPECT_EQ(imported.position, Position::kLearned);
  EXPECT_TRUE(imported.tied_embeddings);  // GPT2Config's default: the file does not say
  EXPECT_TRUE(imported.linear_bias);
  EXPECT_EQ(imported.activation, Activation::kGelu);  // gelu_new
  EXPECT_EQ(imported.ffn_hidden, 4 * 768);            // n_inner absent: 4·n_embd
  EXPECT_DOUBLE_EQ(imported.dropout, 0.1);
  // GPT-2 small, h = 768: each of 12 layers 12h² + 13h = 7,087,872 → 85,054,464;
  // wte 50257·768 = 38,597,376; wpe 1024·768 = 786,432; ln_f 2·768 = 1,536
  // → 124,439,808, what transformers reports for the gpt2 checkpoint.
  EXPECT_EQ(count_parameters(imported).total, 124'439'808);
}

TEST(HfConfig, PythiaHasItsPublishedCount) {
  const ModelSpec imported = fixture("pythia-160m.json");
  EXPECT_EQ(imported.position, Position::kRope);
  EXPECT_EQ(imported.norm, Norm::kLayerNorm);
  EXPECT_FALSE(imported.tied_embeddings);
  EXPECT_TRUE(imported.linear_bias);
  // Pythia-160M, h = 768: 12 layers of 12h² + 13h = 85,054,464; untied embedding and output
  // 2·50304·768 = 77,266,944; final LayerNorm 1,536 → 162,322,944, the total the Pythia suite
  // (Biderman et al., arXiv:2304.01373) lists, of which 85,056,000 are non-embedding.
  EXPECT_EQ(count_parameters(imported).total, 162'322'944);
}

TEST(HfConfig, NameOrPathNamesTheModel) {
  const ModelSpec model = parse_hf_config(R"({
  "_name_or_path": "openai-community/gpt2",
  "model_type": "gpt2",
  "n_embd": 64,
  "n_layer": 2,
  "n_head": 4,
  "n_inner": null,
  "n_positions": 128,
  "vocab_size": 1000
})",
                                          "config.json");
  EXPECT_EQ(model.name, "openai-community/gpt2");
  // n_inner = null means 4·n_embd = 256.
  EXPECT_EQ(model.ffn_hidden, 256);
}

TEST(HfConfig, StemKeepsDotsBeforeJson) {
  const ModelSpec model = parse_hf_config(
      R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 256,
          "vocab_size": 1000})",
      "/models/Llama-3.1-8B.json");
  EXPECT_EQ(model.name, "Llama-3.1-8B");
  // Llama defaults: SwiGLU from silu, RMSNorm, RoPE, untied, no biases, kv_heads = heads.
  EXPECT_EQ(model.activation, Activation::kSwiglu);
  EXPECT_EQ(model.norm, Norm::kRmsNorm);
  EXPECT_EQ(model.position, Position::kRope);
  EXPECT_FALSE(model.tied_embeddings);
  EXPECT_FALSE(model.linear_bias);
  EXPECT_EQ(model.kv_heads, 4);
}

TEST(HfConfig, QwenFamiliesBiasesAndSharedExpert) {
  const ModelSpec qwen2 = parse_hf_config(
      R"({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
          "max_position_embeddings": 256, "vocab_size": 1000, "rms_norm_eps": 1e-6,
          "tie_word_embeddings": true})",
      "qwen2.json");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.linear_bias);
  EXPECT_TRUE(qwen2.tied_embeddings);
  EXPECT_EQ(qwen2.kv_heads, 2);

  const ModelSpec qwen2_moe = parse_hf_config(
      R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 256,
          "vocab_size": 1000, "num_experts": 8, "num_experts_per_tok": 2,
          "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96,
          "decoder_sparse_step": 2, "mlp_only_layers": []})",
      "qwen2_moe.json");
  ASSERT_TRUE(qwen2_moe.moe.has_value());
  EXPECT_EQ(qwen2_moe.moe->experts, 8);
  EXPECT_EQ(qwen2_moe.moe->top_k, 2);
  EXPECT_EQ(qwen2_moe.moe->ffn_hidden, 32);
  EXPECT_EQ(qwen2_moe.moe->every, 2);
  EXPECT_EQ(qwen2_moe.moe->shared_experts, 1);
  EXPECT_EQ(qwen2_moe.moe->shared_ffn_hidden, 96);
  EXPECT_EQ(qwen2_moe.ffn_hidden, 128);  // the dense layers between MoE layers
}

TEST(HfConfig, ASlidingWindowIsKeptUnlessTurnedOff) {
  const std::string mistral =
      R"({"model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 128, "max_position_embeddings": 32768,
          "vocab_size": 1000, "rms_norm_eps": 1e-5, "sliding_window": WINDOW})";
  auto with_window = [&](const std::string& window) {
    std::string text = mistral;
    return text.replace(text.find("WINDOW"), 6, window);
  };
  EXPECT_EQ(parse_hf_config(with_window("4096"), "mistral.json").attention_window, 4096);
  EXPECT_EQ(parse_hf_config(with_window("null"), "mistral.json").attention_window, 0);
  // Qwen3 writes no window and turns it off.
  EXPECT_EQ(fixture("Qwen3-30B-A3B.json").attention_window, 0);
  EXPECT_EQ(parse_hf_config(with_window("4096, \"use_sliding_window\": false"), "qwen.json")
                .attention_window,
            0);
}

TEST(HfConfig, NemotronSquaredRelu) {
  const ModelSpec model = parse_hf_config(
      R"({"model_type": "nemotron", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256,
          "max_position_embeddings": 256, "vocab_size": 1000, "hidden_act": "relu2",
          "norm_eps": 1e-5})",
      "nemotron.json");
  EXPECT_EQ(model.activation, Activation::kSquaredRelu);
  EXPECT_EQ(model.norm, Norm::kLayerNorm);
  EXPECT_FALSE(model.tied_embeddings);
}

TEST(HfConfigErrors, UnknownModelTypeListsTheSupportedOnes) {
  // The value "falcon" starts line 2, column 17.
  EXPECT_EQ(error_of([] { parse_hf_config("{\n  \"model_type\": \"falcon\"\n}", "f.json"); }),
            "f.json:2:17: model_type = 'falcon' is not supported; expected one of: deepseek_v2, deepseek_v3, "
            "gpt2, gpt_neox, llama, mistral, mixtral, nemotron, qwen2, qwen2_moe, qwen3, qwen3_moe");
  // Without model_type the mapping itself, at 1:1, is blamed.
  EXPECT_EQ(error_of([] { parse_hf_config("{\"hidden_size\": 64}", "f.json"); }),
            "f.json:1:1: model_type is required; expected one of: deepseek_v2, deepseek_v3, gpt2, gpt_neox, llama, "
            "mistral, mixtral, nemotron, qwen2, qwen2_moe, qwen3, qwen3_moe");
}

// A Llama config with one line to vary at line 3.
std::string llama_with(const std::string& line3) {
  return "{\n  \"model_type\": \"llama\",\n" + line3 +
         "\n  \"hidden_size\": 64,\n  \"num_attention_heads\": 8,\n  \"intermediate_size\": 128,"
         "\n  \"max_position_embeddings\": 256,\n  \"vocab_size\": 1000\n}";
}

TEST(HfConfigErrors, MissingFieldNamesFileLineAndField) {
  // No num_hidden_layers: the error points at the mapping, which opens at 1:1.
  EXPECT_EQ(error_of([] { parse_hf_config(llama_with("  \"use_cache\": true,"), "l.json"); }),
            "l.json:1:1: num_hidden_layers is required for model_type 'llama'");
  // A null counts as absent, and the error points at it: line 3, column 24.
  EXPECT_EQ(
      error_of([] { parse_hf_config(llama_with("  \"num_hidden_layers\": null,"), "l.json"); }),
      "l.json:3:24: num_hidden_layers is required for model_type 'llama'");
  EXPECT_EQ(error_of([] { load_hf_config("no/such/config.json"); }),
            "no/such/config.json: cannot open the file (missing or unreadable)");
}

TEST(HfConfigErrors, BadValuesArePositioned) {
  // "num_hidden_layers": "two" — the value at line 3, column 24.
  EXPECT_EQ(
      error_of([] { parse_hf_config(llama_with("  \"num_hidden_layers\": \"two\","), "l.json"); }),
      "l.json:3:24: num_hidden_layers = 'two' is not an integer");
  EXPECT_EQ(error_of([] { parse_hf_config(llama_with("  \"num_hidden_layers\": 0,"), "l.json"); }),
            "l.json:3:24: num_hidden_layers = 0 must be at least 1");
  // 8 query heads cannot share 3 KV heads: the 3 is at line 3, column 50.
  EXPECT_EQ(error_of([] {
              parse_hf_config(llama_with("  \"num_hidden_layers\": 2, \"num_key_value_heads\": 3,"),
                              "l.json");
            }),
            "l.json:3:50: num_key_value_heads = 3 must divide num_attention_heads = 8");
  // A gated Llama MLP needs SiLU; "gelu" is at line 3, column 41.
  EXPECT_EQ(error_of([] {
              parse_hf_config(llama_with("  \"num_hidden_layers\": 2, \"hidden_act\": \"gelu\","),
                              "l.json");
            }),
            "l.json:3:41: hidden_act = 'gelu' is not supported for model_type 'llama' (a gated "
            "MLP); expected one of: silu, swish");
}

TEST(HfConfigErrors, AModelTooLargeToCountIsRefused) {
  // Every size is within 2^31 - 1, but 2^31 layers of 2^31-wide matrices hold more parameters
  // than 64 bits count.
  const std::string config =
      "{\n  \"model_type\": \"llama\",\n  \"num_hidden_layers\": 2147483647,\n  \"hidden_size\": 2147483640,"
      "\n  \"num_attention_heads\": 8,\n  \"intermediate_size\": 2147483647,"
      "\n  \"max_position_embeddings\": 256,\n  \"vocab_size\": 1000\n}";
  EXPECT_EQ(error_of([&] { parse_hf_config(config, "l.json"); }),
            "l.json:1:1: the config describes more than 9223372036854775807 parameters; no model that large can "
            "be counted");
}

TEST(HfConfigErrors, MoeRules) {
  const std::string qwen3_moe =
      "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 4, "
      "\"num_attention_heads\": 4, \"max_position_embeddings\": 256, \"vocab_size\": 1000, "
      "\"num_experts\": 4, \"moe_intermediate_size\": 32, ";
  // top-8 of 4 experts; the error points at the 8 on the document's one line.
  const std::string too_many = qwen3_moe + "\"num_experts_per_tok\": 8}";
  EXPECT_EQ(error_of([&] { parse_hf_config(too_many, "q.json"); }),
            fmt::format("q.json:1:{}: num_experts_per_tok = 8 exceeds the number of experts = 4",
                        too_many.find(": 8}") + 3));
  const std::string dense_layers =
      qwen3_moe + "\"num_experts_per_tok\": 2, \"mlp_only_layers\": [0]}";
  EXPECT_EQ(error_of([&] { parse_hf_config(dense_layers, "q.json"); }),
            fmt::format("q.json:1:{}: mlp_only_layers lists dense layers, which are not "
                        "supported; paceline places an MoE layer every decoder_sparse_step layers",
                        dense_layers.find("[0]") + 1));
}

}  // namespace
}  // namespace paceline
