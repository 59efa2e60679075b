#include "models/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <string_view>
#include <vector>

#include "base/parsed_file_cache.h"
#include "base/yaml_reader.h"

namespace paceline {
namespace {

// How the MoE layers of a family are written.
enum class MoeKeys {
  kNone,
  // Mixtral: num_local_experts, num_experts_per_tok; each expert is intermediate_size wide.
  kMixtral,
  // Qwen2-MoE / Qwen3-MoE: num_experts, num_experts_per_tok, moe_intermediate_size,
  // decoder_sparse_step, mlp_only_layers (and Qwen2-MoE's shared expert).
  kQwen,
  // DeepSeek-V2 / V3: n_routed_experts, num_experts_per_tok, moe_intermediate_size,
  // n_shared_experts of that width, first_k_dense_replace, moe_layer_freq.
  kDeepSeek,
};

// One transformers model family: the key names its config.json uses and the architecture its
// modeling code builds, with the defaults of its configuration class for keys a file may omit.
struct Family {
  std::string_view model_type;
  std::string_view hidden_key;
  std::string_view layers_key;
  std::string_view heads_key;
  std::string_view ffn_key;
  std::string_view seq_len_key;
  std::string_view activation_key;
  std::string_view default_activation;
  std::vector<std::string_view> dropout_keys;
  double default_dropout;  // of each dropout key
  bool gated_mlp;          // gate, up and down projections (LlamaMLP and kin)
  Position position;
  Norm default_norm;
  bool default_tied;
  // GPT-2 and GPT-NeoX put biases on every projection; Llama-style families read
  // attention_bias / mlp_bias instead.
  bool always_linear_bias;
  bool always_qkv_bias;  // Qwen2: biases on Q, K and V only
  bool qk_norm;          // Qwen3: RMSNorm on each head's queries and keys
  bool shared_expert;    // Qwen2-MoE: one always-active expert beside the routed ones
  // DeepSeek-V2 / V3: multi-head latent attention (q_lora_rank, kv_lora_rank, qk_nope_head_dim,
  // qk_rope_head_dim, v_head_dim).
  bool latent_attention;
  MoeKeys moe;
};

// The Llama layout of keys, shared by every family but GPT-2.
Family llama_like(std::string_view model_type) {
  return Family{.model_type = model_type,
                .hidden_key = "hidden_size",
                .layers_key = "num_hidden_layers",
                .heads_key = "num_attention_heads",
                .ffn_key = "intermediate_size",
                .seq_len_key = "max_position_embeddings",
                .activation_key = "hidden_act",
                .default_activation = "silu",
                .dropout_keys = {"attention_dropout"},
                .default_dropout = 0.0,
                .gated_mlp = true,
                .position = Position::kRope,
                .default_norm = Norm::kRmsNorm,
                .default_tied = false,
                .always_linear_bias = false,
                .always_qkv_bias = false,
                .qk_norm = false,
                .shared_expert = false,
                .latent_attention = false,
                .moe = MoeKeys::kNone};
}

// The supported families, sorted by model_type. Defaults follow the transformers configuration
// classes (LlamaConfig, GPT2Config, GPTNeoXConfig, ...).
std::vector<Family> families() {
  std::vector<Family> all;
  // DeepSeek-V2 and V3: latent attention, dense first layers, then MoE with shared experts.
  for (const std::string_view model_type : {"deepseek_v2", "deepseek_v3"}) {
    Family deepseek = llama_like(model_type);
    deepseek.latent_attention = true;
    deepseek.moe = MoeKeys::kDeepSeek;
    all.push_back(deepseek);
  }

  Family gpt2{.model_type = "gpt2",
              .hidden_key = "n_embd",
              .layers_key = "n_layer",
              .heads_key = "n_head",
              .ffn_key = "n_inner",
              .seq_len_key = "n_positions",
              .activation_key = "activation_function",
              .default_activation = "gelu_new",
              .dropout_keys = {"attn_pdrop", "resid_pdrop", "embd_pdrop"},
              .default_dropout = 0.1,
              .gated_mlp = false,
              .position = Position::kLearned,
              .default_norm = Norm::kLayerNorm,
              .default_tied = true,
              .always_linear_bias = true,
              .always_qkv_bias = false,
              .qk_norm = false,
              .shared_expert = false,
              .latent_attention = false,
              .moe = MoeKeys::kNone};
  all.push_back(gpt2);

  Family gpt_neox = llama_like("gpt_neox");
  gpt_neox.default_activation = "gelu";
  gpt_neox.dropout_keys = {"attention_dropout", "hidden_dropout"};
  gpt_neox.gated_mlp = false;
  gpt_neox.default_norm = Norm::kLayerNorm;
  gpt_neox.always_linear_bias = true;
  all.push_back(gpt_neox);

  all.push_back(llama_like("llama"));
  all.push_back(llama_like("mistral"));
  Family mixtral = llama_like("mixtral");
  mixtral.moe = MoeKeys::kMixtral;
  all.push_back(mixtral);

  // Nemotron (Minitron, Nemotron-4 conversions): squared-ReLU MLP without gating, LayerNorm1p.
  Family nemotron = llama_like("nemotron");
  nemotron.default_activation = "relu2";
  nemotron.gated_mlp = false;
  nemotron.default_norm = Norm::kLayerNorm;
  all.push_back(nemotron);

  Family qwen2 = llama_like("qwen2");
  qwen2.always_qkv_bias = true;
  all.push_back(qwen2);
  Family qwen2_moe = qwen2;
  qwen2_moe.model_type = "qwen2_moe";
  qwen2_moe.shared_expert = true;
  qwen2_moe.moe = MoeKeys::kQwen;
  all.push_back(qwen2_moe);

  Family qwen3 = llama_like("qwen3");
  qwen3.qk_norm = true;
  all.push_back(qwen3);
  Family qwen3_moe = qwen3;
  qwen3_moe.model_type = "qwen3_moe";
  qwen3_moe.moe = MoeKeys::kQwen;
  all.push_back(qwen3_moe);
  return all;
}

// Reads the keys a family needs from a config.json, leaving every other key alone: configs carry
// tokenizer ids, rope scaling and much else that does not shape the model. A JSON null counts as
// absent, as transformers treats it.
class ConfigReader {
 public:
  ConfigReader(YamlMap& config, std::string_view model_type)
      : config_(config), model_type_(model_type) {}

  bool present(std::string_view key) { return config_.has(key) && !config_.node(key).IsNull(); }

  // A size that must be present, from 1 to 2³¹ − 1 (the model's counts are ints).
  int64_t size(std::string_view key) {
    if (!present(key)) {
      config_.fail(key, fmt::format("is required for model_type '{}'", model_type_));
    }
    return counted(key, config_.required<int64_t>(key));
  }

  // A size that may be absent (then `fallback`) and is otherwise in size()'s range.
  int64_t size_or(std::string_view key, int64_t fallback) {
    return present(key) ? counted(key, config_.required<int64_t>(key)) : fallback;
  }

  template <typename T>
  T get(std::string_view key, T fallback) {
    return present(key) ? config_.required<T>(key) : fallback;
  }

  [[noreturn]] void fail(std::string_view key, const std::string& message) const {
    config_.fail(key, message);
  }

  YAML::Node node(std::string_view key) { return config_.node(key); }

 private:
  int64_t counted(std::string_view key, int64_t value) const {
    if (value < 1) config_.fail(key, fmt::format("= {} must be at least 1", value));
    if (value > INT32_MAX) config_.fail(key, fmt::format("= {} is too large (at most {})", value, INT32_MAX));
    return value;
  }

  YamlMap& config_;
  std::string_view model_type_;
};

// transformers' names for the GELU approximations (ACT2FN), all modelled as one GELU.
bool is_gelu(std::string_view name) {
  constexpr std::array<std::string_view, 7> kGelu = {
      "gelu",          "gelu_new",   "gelu_fast",  "gelu_pytorch_tanh",
      "gelu_accurate", "quick_gelu", "gelu_python"};
  return std::find(kGelu.begin(), kGelu.end(), name) != kGelu.end();
}

// hidden_act / activation_function: SiLU in a gated MLP is SwiGLU; GELU variants and relu2
// (squared ReLU) belong to plain two-matrix MLPs.
Activation read_activation(ConfigReader& reader, const Family& family) {
  const std::string name =
      reader.get<std::string>(family.activation_key, std::string(family.default_activation));
  if (family.gated_mlp) {
    if (name == "silu" || name == "swish") return Activation::kSwiglu;
    reader.fail(family.activation_key,
                fmt::format("= '{}' is not supported for model_type '{}' (a gated MLP); "
                            "expected one of: silu, swish",
                            name, family.model_type));
  }
  if (is_gelu(name)) return Activation::kGelu;
  if (name == "relu2") return Activation::kSquaredRelu;
  reader.fail(family.activation_key,
              fmt::format("= '{}' is not supported for model_type '{}'; expected one of: gelu, "
                          "gelu_new, gelu_fast, gelu_pytorch_tanh, gelu_accurate, quick_gelu, "
                          "gelu_python, relu2",
                          name, family.model_type));
}

// The mixture of experts of Mixtral and the Qwen MoE families; `dense_ffn` is intermediate_size.
MoeSpec read_moe(ConfigReader& reader, const Family& family, int64_t dense_ffn, int layers) {
  MoeSpec moe;
  if (family.moe == MoeKeys::kMixtral) {
    moe.experts = static_cast<int>(reader.size("num_local_experts"));
    moe.ffn_hidden = dense_ffn;
  } else if (family.moe == MoeKeys::kDeepSeek) {
    moe.experts = static_cast<int>(reader.size("n_routed_experts"));
    moe.ffn_hidden = reader.size("moe_intermediate_size");
    // DeepSeek's modelling code makes layer i an MoE layer when i >= first_k_dense_replace and
    // i % moe_layer_freq == 0; paceline's every n-th layer after first_dense_layers gives the same
    // layers when the first, the smallest multiple of the frequency from first_k_dense_replace on,
    // is the every-th after them.
    const int64_t dense = reader.get<int64_t>("first_k_dense_replace", 0);
    if (dense < 0 || dense >= layers) {
      reader.fail("first_k_dense_replace",
                  fmt::format("= {} must leave MoE layers among num_hidden_layers = {}", dense, layers));
    }
    moe.every = static_cast<int>(reader.size_or("moe_layer_freq", 1));
    const int64_t first_moe = (dense + moe.every - 1) / moe.every * moe.every;
    if (first_moe >= layers) {
      reader.fail("moe_layer_freq", fmt::format("= {} leaves no MoE layer from first_k_dense_replace = {} among "
                                                "num_hidden_layers = {}",
                                                moe.every, dense, layers));
    }
    if (first_moe < moe.every - 1) {
      reader.fail("moe_layer_freq", fmt::format("= {} with first_k_dense_replace = 0 makes layer 0 an MoE layer, "
                                                "which an MoE layer every {} layers cannot express",
                                                moe.every, moe.every));
    }
    moe.first_dense_layers = static_cast<int>(first_moe - moe.every + 1);
    // Shared experts are each as wide as a routed one.
    const int64_t shared = reader.get<int64_t>("n_shared_experts", 0);
    if (shared < 0 || shared > INT32_MAX) {
      reader.fail("n_shared_experts", fmt::format("= {} must be from 0 to {}", shared, INT32_MAX));
    }
    moe.shared_experts = static_cast<int>(shared);
    moe.shared_ffn_hidden = moe.ffn_hidden;
  } else {
    moe.experts = static_cast<int>(reader.size("num_experts"));
    moe.ffn_hidden = reader.size("moe_intermediate_size");
    moe.every = static_cast<int>(reader.size_or("decoder_sparse_step", 1));
    if (moe.every > layers) {
      reader.fail("decoder_sparse_step",
                  fmt::format("= {} exceeds num_hidden_layers = {}", moe.every, layers));
    }
    // paceline places MoE layers by a stride only; dense exceptions cannot be expressed.
    const YAML::Node dense_layers = reader.node("mlp_only_layers");
    if (dense_layers && dense_layers.IsSequence() && dense_layers.size() > 0) {
      reader.fail("mlp_only_layers",
                  "lists dense layers, which are not supported; paceline places an MoE layer "
                  "every decoder_sparse_step layers");
    }
    if (family.shared_expert && reader.present("shared_expert_intermediate_size")) {
      moe.shared_experts = 1;
      moe.shared_ffn_hidden = reader.size("shared_expert_intermediate_size");
    }
  }
  if (moe.experts > kMostExperts) {
    const char* key = family.moe == MoeKeys::kMixtral    ? "num_local_experts"
                      : family.moe == MoeKeys::kDeepSeek ? "n_routed_experts"
                                                         : "num_experts";
    reader.fail(key, fmt::format("= {} is more than {}", moe.experts, kMostExperts));
  }
  // Without shared experts their width is the routed one, as read_model defaults it.
  if (moe.shared_experts == 0) moe.shared_ffn_hidden = moe.ffn_hidden;
  moe.top_k = static_cast<int>(reader.size("num_experts_per_tok"));
  if (moe.top_k > moe.experts) {
    reader.fail("num_experts_per_tok",
                fmt::format("= {} exceeds the number of experts = {}", moe.top_k, moe.experts));
  }
  // DeepSeek routes within its best topk_group of n_group expert groups (V2's
  // group_limited_greedy, V3's noaux_tc); plain greedy top-k ignores the groups. The defaults are
  // those of transformers' DeepseekV2Config (greedy) and DeepseekV3Config (8 groups, top 4).
  if (family.moe == MoeKeys::kDeepSeek) {
    const bool v3 = family.model_type == "deepseek_v3";
    const std::string method = reader.get<std::string>("topk_method", v3 ? "noaux_tc" : "greedy");
    if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc") {
      reader.fail(
          "topk_method",
          fmt::format("= '{}' is unknown; expected one of: greedy, group_limited_greedy, noaux_tc",
                      method));
    }
    if (method != "greedy") {
      moe.groups = static_cast<int>(reader.size_or("n_group", v3 ? 8 : 1));
      moe.group_top_k = static_cast<int>(reader.size_or("topk_group", v3 ? 4 : moe.groups));
      check_moe_groups(
          moe, {"n_group", "topk_group", "num_experts_per_tok", "n_routed_experts", ""},
          [&](std::string_view key, const std::string& message) { reader.fail(key, message); });
    }
  }
  return moe;
}

// The model name: the file name without its folder and a .json extension. Only .json is cut, so
// "Llama-3.1-8B" stays whole.
std::string stem_of(const std::string& file) {
  std::string stem = std::filesystem::path(file).filename().string();
  constexpr std::string_view kJson = ".json";
  if (stem.size() > kJson.size() && stem.ends_with(kJson)) stem.resize(stem.size() - kJson.size());
  return stem;
}

ModelSpec spec_from_document(const YamlDocument& document) {
  YamlMap config(document.root, document.file, "");

  // Choose the family by model_type.
  const std::vector<Family> known = families();
  std::vector<std::string_view> names;
  for (const Family& f : known) names.push_back(f.model_type);
  if (!config.has("model_type")) {
    config.fail("model_type",
                fmt::format("is required; expected one of: {}", fmt::join(names, ", ")));
  }
  const std::string model_type = config.required<std::string>("model_type");
  const auto found = std::find_if(known.begin(), known.end(),
                                  [&](const Family& f) { return f.model_type == model_type; });
  if (found == known.end()) {
    config.fail("model_type", fmt::format("= '{}' is not supported; expected one of: {}",
                                          model_type, fmt::join(names, ", ")));
  }
  const Family& family = *found;
  ConfigReader reader(config, family.model_type);

  ModelSpec m;
  m.name = reader.get<std::string>("_name_or_path", "");
  if (m.name.empty()) m.name = stem_of(document.file);
  m.source = fmt::format("Hugging Face config.json ({})", document.file);

  // Shapes.
  m.layers = static_cast<int>(reader.size(family.layers_key));
  m.hidden = reader.size(family.hidden_key);
  m.heads = static_cast<int>(reader.size(family.heads_key));
  m.kv_heads = static_cast<int>(reader.size_or("num_key_value_heads", m.heads));
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    reader.fail("num_key_value_heads",
                fmt::format("= {} must divide {} = {}", m.kv_heads, family.heads_key, m.heads));
  }
  if (reader.present("head_dim")) {
    m.head_dim = reader.size("head_dim");
  } else if (m.hidden % m.heads != 0) {
    reader.fail(family.heads_key, fmt::format("= {} does not divide {} = {} and head_dim is absent",
                                              m.heads, family.hidden_key, m.hidden));
  } else {
    m.head_dim = m.hidden / m.heads;
  }
  m.vocab = reader.size("vocab_size");
  m.seq_len = reader.size(family.seq_len_key);
  // Sliding-window attention (Mistral 7B v0.1; Qwen2 and Qwen3 write a window but turn it off
  // with use_sliding_window: false).
  if (reader.present("sliding_window") && reader.get<bool>("use_sliding_window", true)) {
    m.attention_window = reader.size("sliding_window");
  }

  // The dense MLP: GPT-2 writes n_inner = null for 4·n_embd; a Qwen MoE whose every layer is
  // MoE may omit it. Mixtral's intermediate_size is each expert's width, so it is required.
  const bool qwen_all_moe =
      family.moe == MoeKeys::kQwen && reader.get<int64_t>("decoder_sparse_step", 1) == 1;
  if (family.model_type == "gpt2") {
    m.ffn_hidden = reader.size_or(family.ffn_key, 4 * m.hidden);
  } else if (qwen_all_moe) {
    m.ffn_hidden = reader.size_or(family.ffn_key, 0);
  } else {
    m.ffn_hidden = reader.size(family.ffn_key);
  }

  // Layer kinds.
  m.activation = read_activation(reader, family);
  if (reader.present("rms_norm_eps")) {
    m.norm = Norm::kRmsNorm;
  } else if (reader.present("layer_norm_eps") || reader.present("layer_norm_epsilon")) {
    m.norm = Norm::kLayerNorm;
  } else {
    m.norm = family.default_norm;
  }
  m.position = family.position;
  m.tied_embeddings = reader.get<bool>("tie_word_embeddings", family.default_tied);

  // Biases. Llama-style attention_bias covers Q, K, V and the output projection and mlp_bias
  // the MLP; with attention_bias alone the output projection's bias (hidden values a layer) is
  // not counted, and mlp_bias alone is not counted at all.
  if (family.always_linear_bias) {
    m.linear_bias = true;
  } else {
    const bool attention_bias = reader.get<bool>("attention_bias", false);
    const bool mlp_bias = reader.get<bool>("mlp_bias", false);
    m.linear_bias = attention_bias && mlp_bias;
    m.qkv_bias = family.always_qkv_bias || (attention_bias && !mlp_bias);
  }
  m.qk_norm = family.qk_norm;

  // One dropout probability stands for all of them: the largest the config names.
  for (const std::string_view key : family.dropout_keys) {
    const double p = reader.get<double>(key, family.default_dropout);
    if (p < 0.0 || p >= 1.0) reader.fail(key, fmt::format("= {} must be in [0, 1)", p));
    m.dropout = std::max(m.dropout, p);
  }

  if (family.latent_attention) {
    // The query/key head is its non-rotary part and its rotary part.
    MlaSpec mla;
    mla.q_lora_rank = reader.size_or("q_lora_rank", 0);
    mla.kv_lora_rank = reader.size("kv_lora_rank");
    mla.rope_head_dim = reader.size("qk_rope_head_dim");
    mla.v_head_dim = reader.size("v_head_dim");
    m.head_dim = reader.size("qk_nope_head_dim") + mla.rope_head_dim;
    if (m.kv_heads != m.heads) {
      reader.fail("num_key_value_heads", fmt::format("= {} must equal {} = {}: latent attention gives every head its "
                                                     "own key and value",
                                                     m.kv_heads, family.heads_key, m.heads));
    }
    if (m.linear_bias || m.qkv_bias) {
      reader.fail("attention_bias", "= true is not a form of latent attention, whose projections have no biases");
    }
    m.mla = mla;
  }
  if (family.moe != MoeKeys::kNone) m.moe = read_moe(reader, family, m.ffn_hidden, m.layers);
  // DeepSeek-V3's multi-token prediction modules, which its checkpoint holds after the layers.
  const int64_t mtp_layers = reader.get<int64_t>("num_nextn_predict_layers", 0);
  if (mtp_layers < 0 || mtp_layers > m.layers) {
    reader.fail("num_nextn_predict_layers",
                fmt::format("= {} must be in [0, num_hidden_layers = {}]", mtp_layers, m.layers));
  }
  if (mtp_layers > 0 && m.position == Position::kLearned) {
    reader.fail(
        "num_nextn_predict_layers",
        fmt::format(
            "= {} needs rotary positions: multi-token prediction is modelled without a learned "
            "position table",
            mtp_layers));
  }
  m.mtp_layers = static_cast<int>(mtp_layers);
  if (!checked_parameter_count(m)) {
    config.fail_here(
        fmt::format("the config describes more than {} parameters; no model that large can be counted", INT64_MAX));
  }
  return m;
}

}  // namespace

ModelSpec load_hf_config(const std::string& path) {
  static auto* const configs = new ParsedFileCache<ModelSpec>(spec_from_document);
  return *configs->get(path);
}

ModelSpec parse_hf_config(const std::string& json_text, const std::string& name) {
  return spec_from_document(load_yaml_text(json_text, name));
}

}  // namespace paceline
