#include "models/model_spec.h"

#include <fmt/format.h>

#include <cstdint>

#include "base/check.h"
#include "base/yaml_reader.h"

namespace paceline {
namespace {

// A size: at least 1 and at most 2^31 - 1, which keeps every count paceline derives from a
// model's sizes within 64 bits (checked_parameter_count).
int64_t positive(YamlMap& map, std::string_view key, int64_t value) {
  if (value < 1) map.fail(key, fmt::format("= {} must be at least 1", value));
  if (value > INT32_MAX) map.fail(key, fmt::format("= {} is too large (at most {})", value, INT32_MAX));
  return value;
}

MoeSpec read_moe(YamlMap& map, int64_t dense_ffn_hidden) {
  MoeSpec moe;
  moe.experts = static_cast<int>(positive(map, "experts", map.required<int>("experts")));
  if (moe.experts > kMostExperts) map.fail("experts", fmt::format("= {} is more than {}", moe.experts, kMostExperts));
  moe.top_k = static_cast<int>(positive(map, "top_k", map.get<int>("top_k", 2)));
  if (moe.top_k > moe.experts) {
    map.fail("top_k", fmt::format("= {} exceeds moe.experts = {}", moe.top_k, moe.experts));
  }
  moe.ffn_hidden = positive(map, "ffn_hidden", map.get<int64_t>("ffn_hidden", dense_ffn_hidden));
  moe.every = static_cast<int>(positive(map, "every", map.get<int>("every", 1)));
  moe.first_dense_layers = map.get<int>("first_dense_layers", 0);
  if (moe.first_dense_layers < 0) map.fail("first_dense_layers", "must not be negative");
  moe.shared_experts = map.get<int>("shared_experts", 0);
  if (moe.shared_experts < 0) map.fail("shared_experts", "must not be negative");
  moe.shared_ffn_hidden = positive(map, "shared_ffn_hidden", map.get<int64_t>("shared_ffn_hidden", moe.ffn_hidden));
  moe.capacity_factor = map.get<double>("capacity_factor", 0.0);
  if (moe.capacity_factor < 0.0) {
    map.fail("capacity_factor", fmt::format("= {} must be 0 (dropless) or positive", moe.capacity_factor));
  }
  moe.groups = static_cast<int>(positive(map, "groups", map.get<int>("groups", 1)));
  moe.group_top_k =
      static_cast<int>(positive(map, "group_top_k", map.get<int>("group_top_k", moe.groups)));
  check_moe_groups(
      moe, {"groups", "group_top_k", "top_k", "experts", "moe."},
      [&](std::string_view key, const std::string& message) { map.fail(key, message); });
  moe.imbalance = map.get<double>("imbalance", 1.0);
  // The busiest expert can at most receive every token: experts/top_k times the mean.
  const double most = static_cast<double>(moe.experts) / moe.top_k;
  if (moe.imbalance < 1.0 || moe.imbalance > most) {
    map.fail("imbalance", fmt::format("= {} is out of range; expected 1 (balanced) to experts/top_k = {}",
                                      moe.imbalance, most));
  }
  map.finish();
  return moe;
}

MlaSpec read_mla(YamlMap& map, int64_t head_dim) {
  MlaSpec mla;
  mla.q_lora_rank = map.get<int64_t>("q_lora_rank", 0);
  if (mla.q_lora_rank < 0) map.fail("q_lora_rank", fmt::format("= {} must be 0 (no compressed query) or more", mla.q_lora_rank));
  if (mla.q_lora_rank > 0) positive(map, "q_lora_rank", mla.q_lora_rank);
  mla.kv_lora_rank = positive(map, "kv_lora_rank", map.required<int64_t>("kv_lora_rank"));
  mla.rope_head_dim = positive(map, "rope_head_dim", map.required<int64_t>("rope_head_dim"));
  if (mla.rope_head_dim >= head_dim) {
    map.fail("rope_head_dim", fmt::format("= {} must be less than model.head_dim = {}, the query/key head width "
                                          "of which it is the rotary part",
                                          mla.rope_head_dim, head_dim));
  }
  mla.v_head_dim = positive(map, "v_head_dim", map.required<int64_t>("v_head_dim"));
  map.finish();
  return mla;
}

}  // namespace

bool ModelSpec::is_moe_layer(int layer) const {
  return moe.has_value() && layer >= moe->first_dense_layers && (layer - moe->first_dense_layers + 1) % moe->every == 0;
}

int ModelSpec::num_moe_layers() const { return moe ? (layers - moe->first_dense_layers) / moe->every : 0; }

namespace {

// Counts in 128 bits: with every dimension at most 2^31 (read_model, read_hf_config) no product
// of the formulas below exceeds 2^127, so whether a count fits in 64 bits can be told exactly.
__extension__ typedef __int128 Wide;

struct WideCount {
  Wide total = 0, active = 0, embedding = 0, output = 0, per_dense_layer = 0, per_moe_layer = 0,
       per_expert = 0, per_mtp_module = 0, routed_experts = 0, tp_replicated_per_layer = 0,
       attention_matmuls_per_layer = 0;
};

WideCount wide_count(const ModelSpec& m) {
  WideCount count;
  const Wide hidden = m.hidden;
  const Wide q_width = Wide{m.heads} * m.head_dim;
  const Wide kv_width = Wide{m.kv_heads} * m.head_dim;
  const Wide norm_params = m.norm_parameters();

  Wide attention = 0;
  if (!m.mla) {
    // Q, K, V and output projections, their biases, and the per-head q/k norms.
    count.attention_matmuls_per_layer = hidden * (q_width + 2 * kv_width) + q_width * hidden;
    attention = count.attention_matmuls_per_layer;
    if (m.linear_bias) attention += q_width + 2 * kv_width + hidden;
    if (m.qkv_bias && !m.linear_bias) attention += q_width + 2 * kv_width;
    if (m.qk_norm) attention += 2 * Wide{m.head_dim};
  } else {
    // Down-projections with their norms, up-projections to the heads (queries; keys' non-rotary
    // part and values), the output projection.
    const MlaSpec& a = *m.mla;
    const Wide heads = m.heads;
    const Wide q_down = hidden * a.q_lora_rank;
    const Wide q_up = (a.q_lora_rank > 0 ? Wide{a.q_lora_rank} : hidden) * heads * m.head_dim;
    const Wide kv_down = hidden * (a.kv_lora_rank + a.rope_head_dim);
    const Wide kv_up = Wide{a.kv_lora_rank} * heads * (m.head_dim - a.rope_head_dim + a.v_head_dim);
    const Wide down_norms = a.q_lora_rank + a.kv_lora_rank;
    count.attention_matmuls_per_layer = q_down + q_up + kv_down + kv_up + heads * a.v_head_dim * hidden;
    count.tp_replicated_per_layer = q_down + kv_down + down_norms;
    attention = count.attention_matmuls_per_layer + down_norms;
  }
  const Wide common = attention + 2 * norm_params;

  // An MLP of inner size f: two (plain) or three (gated) matrices.
  auto mlp = [&m, hidden](Wide f) {
    Wide params = (m.gated_mlp() ? 3 : 2) * hidden * f;
    if (m.linear_bias) params += (m.gated_mlp() ? 2 : 1) * f + hidden;
    return params;
  };
  count.per_dense_layer = common + mlp(m.ffn_hidden);
  Wide active_moe_layer = 0;
  if (m.moe) {
    count.per_expert = mlp(m.moe->ffn_hidden);
    const Wide router = hidden * m.moe->experts;
    const Wide shared = Wide{m.moe->shared_experts} * mlp(m.moe->shared_ffn_hidden);
    count.routed_experts = Wide{m.moe->experts} * count.per_expert;
    count.per_moe_layer = common + router + shared + count.routed_experts;
    active_moe_layer = common + router + shared + Wide{m.moe->top_k} * count.per_expert;
  }

  count.embedding = Wide{m.vocab} * hidden + (m.position == Position::kLearned ? Wide{m.seq_len} * hidden : 0);
  count.output = m.tied_embeddings ? 0 : Wide{m.vocab} * hidden;
  const Wide moe_layers = m.num_moe_layers();
  const Wide dense_layers = m.layers - moe_layers;
  const Wide outside_layers = count.embedding + count.output + norm_params;
  count.total = outside_layers + dense_layers * count.per_dense_layer + moe_layers * count.per_moe_layer;
  count.active = outside_layers + dense_layers * count.per_dense_layer + moe_layers * active_moe_layer;
  // Multi-token prediction: the embedded tokens' and hidden states' norms, the projection of
  // their concatenation and the prediction's norm around a layer.
  const Wide mtp_outside_layer = 3 * norm_params + 2 * hidden * hidden;
  const bool mtp_moe = m.mtp_layer_is_moe();
  count.per_mtp_module =
      mtp_outside_layer + (mtp_moe ? count.per_moe_layer : count.per_dense_layer);
  count.total += Wide{m.mtp_layers} * count.per_mtp_module;
  count.active += Wide{m.mtp_layers} *
                  (mtp_outside_layer + (mtp_moe ? active_moe_layer : count.per_dense_layer));
  return count;
}

}  // namespace

std::optional<ParameterCount> checked_parameter_count(const ModelSpec& m) {
  const WideCount w = wide_count(m);
  bool fits = true;
  const auto narrow = [&fits](Wide value) {
    fits = fits && value <= INT64_MAX;
    return static_cast<int64_t>(value);
  };
  const ParameterCount count{narrow(w.total),
                             narrow(w.active),
                             narrow(w.embedding),
                             narrow(w.output),
                             narrow(w.per_dense_layer),
                             narrow(w.per_moe_layer),
                             narrow(w.per_expert),
                             narrow(w.per_mtp_module),
                             narrow(w.routed_experts),
                             narrow(w.tp_replicated_per_layer),
                             narrow(w.attention_matmuls_per_layer)};
  if (!fits) return std::nullopt;
  return count;
}

ParameterCount count_parameters(const ModelSpec& m) {
  const std::optional<ParameterCount> count = checked_parameter_count(m);
  PACELINE_CHECK(count.has_value(), fmt::format("model {} has more parameters than 64 bits count; its reader "
                                                "should have refused it", m.name));
  return *count;
}

ModelSpec read_model(YamlMap& map) {
  ModelSpec m;
  m.name = map.get<std::string>("name", "custom");
  m.source = map.get<std::string>("source", "");
  m.layers = static_cast<int>(positive(map, "layers", map.required<int>("layers")));
  m.hidden = positive(map, "hidden", map.required<int64_t>("hidden"));
  m.heads = static_cast<int>(positive(map, "heads", map.required<int>("heads")));
  m.kv_heads = static_cast<int>(positive(map, "kv_heads", map.get<int>("kv_heads", m.heads)));
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    map.fail("kv_heads", fmt::format("= {} must divide heads = {}", m.kv_heads, m.heads));
  }
  if (map.has("head_dim")) {
    m.head_dim = positive(map, "head_dim", map.required<int64_t>("head_dim"));
  } else if (m.hidden % m.heads != 0) {
    map.fail("heads", fmt::format("= {} does not divide hidden = {}; give head_dim", m.heads, m.hidden));
  } else {
    m.head_dim = m.hidden / m.heads;
  }
  m.vocab = positive(map, "vocab", map.required<int64_t>("vocab"));
  m.seq_len = positive(map, "seq_len", map.required<int64_t>("seq_len"));
  const std::string activation = map.choice("activation", {"gelu", "swiglu", "squared-relu"}, "gelu");
  m.activation = activation == "swiglu"         ? Activation::kSwiglu
                 : activation == "squared-relu" ? Activation::kSquaredRelu
                                                : Activation::kGelu;
  const std::string norm = map.choice("norm", {"layernorm", "rmsnorm"}, "layernorm");
  m.norm = norm == "rmsnorm" ? Norm::kRmsNorm : Norm::kLayerNorm;
  const std::string position = map.choice("position", {"learned", "rope", "alibi"}, "learned");
  m.position = position == "rope" ? Position::kRope : position == "alibi" ? Position::kAlibi : Position::kLearned;
  m.tied_embeddings = map.get<bool>("tied_embeddings", false);
  m.linear_bias = map.get<bool>("bias", false);
  m.qkv_bias = map.get<bool>("qkv_bias", false);
  m.qk_norm = map.get<bool>("qk_norm", false);
  m.dropout = map.get<double>("dropout", 0.0);
  if (m.dropout < 0.0 || m.dropout >= 1.0) {
    map.fail("dropout", fmt::format("= {} must be in [0, 1)", m.dropout));
  }
  if (std::optional<YamlMap> mla = map.optional_map("mla")) {
    if (!map.has("head_dim")) {
      mla->fail_here("needs model.head_dim, the query/key head width with its rotary part (DeepSeek-V3: 128 + 64 = 192)");
    }
    m.mla = read_mla(*mla, m.head_dim);
    if (m.kv_heads != m.heads) {
      map.fail("kv_heads", fmt::format("= {} must equal heads = {} with mla: every head has its own key and value",
                                       m.kv_heads, m.heads));
    }
    if (m.position != Position::kRope) {
      map.fail("position", fmt::format("= {}{} must be rope with mla, whose keys share a rotary part",
                                       to_string(m.position), map.has("position") ? "" : " (the default)"));
    }
    for (const auto& [key, set] : {std::pair{"bias", m.linear_bias}, {"qkv_bias", m.qkv_bias}, {"qk_norm", m.qk_norm}}) {
      if (set) map.fail(key, "= true is not a form of mla; its projections have no biases and it normalises the "
                             "compressed query and key/value instead");
    }
  }
  std::optional<YamlMap> moe = map.optional_map("moe");
  // A model whose every layer is MoE needs no dense ffn_hidden.
  const bool all_moe = moe && moe->get<int>("every", 1) == 1 && moe->get<int>("first_dense_layers", 0) == 0;
  if (all_moe) {
    m.ffn_hidden = map.get<int64_t>("ffn_hidden", 0);
  } else {
    m.ffn_hidden = positive(map, "ffn_hidden", map.required<int64_t>("ffn_hidden"));
  }
  if (moe) {
    if (all_moe && !moe->has("ffn_hidden") && m.ffn_hidden == 0) {
      moe->fail("ffn_hidden", "is required when the model has no dense ffn_hidden");
    }
    m.moe = read_moe(*moe, m.ffn_hidden);
    if (m.moe->every > m.layers) {
      moe->fail("every", fmt::format("= {} exceeds layers = {}", m.moe->every, m.layers));
    }
    if (m.moe->first_dense_layers > 0 && (m.moe->first_dense_layers >= m.layers || m.num_moe_layers() == 0)) {
      moe->fail("first_dense_layers", fmt::format("= {} leaves no MoE layer of layers = {} at every = {}",
                                                  m.moe->first_dense_layers, m.layers, m.moe->every));
    }
  }
  m.mtp_layers = map.get<int>("mtp_layers", 0);
  if (m.mtp_layers < 0 || m.mtp_layers > m.layers) {
    map.fail("mtp_layers",
             fmt::format("= {} must be in [0, layers = {}]: the multi-token prediction modules "
                         "after the last layer",
                         m.mtp_layers, m.layers));
  }
  if (m.mtp_layers > 0 && m.position == Position::kLearned) {
    map.fail("mtp_layers",
             fmt::format("= {} needs position rope or alibi: multi-token prediction is modelled "
                         "without a learned position table",
                         m.mtp_layers));
  }
  m.attention_window = map.get<int64_t>("attention_window", 0);
  if (m.attention_window < 0) {
    map.fail(
        "attention_window",
        fmt::format("= {} must be 0 (full attention) or a window of tokens", m.attention_window));
  }
  map.finish();
  if (!checked_parameter_count(m)) {
    map.fail_here(fmt::format("has more than {} parameters (layers {}, hidden {}, ffn_hidden {}, vocab {}{}); no "
                              "model that large can be counted",
                              INT64_MAX, m.layers, m.hidden, m.ffn_hidden, m.vocab,
                              m.moe ? fmt::format(", experts {}", m.moe->experts) : ""));
  }
  return m;
}

std::string to_string(Activation activation) {
  switch (activation) {
    case Activation::kGelu: return "gelu";
    case Activation::kSwiglu: return "swiglu";
    case Activation::kSquaredRelu: return "squared-relu";
  }
  return "?";
}

std::string to_string(Norm norm) { return norm == Norm::kRmsNorm ? "rmsnorm" : "layernorm"; }

std::string to_string(Position position) {
  switch (position) {
    case Position::kLearned: return "learned";
    case Position::kRope: return "rope";
    case Position::kAlibi: return "alibi";
  }
  return "?";
}

void check_moe_groups(
    const MoeSpec& moe, const MoeRoutingKeys& keys,
    const std::function<void(std::string_view key, const std::string& message)>& fail) {
  if (moe.experts % moe.groups != 0) {
    fail(keys.groups, fmt::format("= {} does not divide {}{} = {}", moe.groups, keys.prefix,
                                  keys.experts, moe.experts));
  }
  if (moe.group_top_k > moe.groups) {
    fail(keys.group_top_k, fmt::format("= {} exceeds {}{} = {}", moe.group_top_k, keys.prefix,
                                       keys.groups, moe.groups));
  }
  const int pool = moe.group_top_k * (moe.experts / moe.groups);
  if (moe.top_k > pool) {
    fail(keys.top_k, fmt::format("= {} exceeds the {} experts in {}{} = {} of the groups",
                                 moe.top_k, pool, keys.prefix, keys.group_top_k, moe.group_top_k));
  }
}

}  // namespace paceline
