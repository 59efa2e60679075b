#include "models/model_spec.h"

#include <fmt/format.h>

#include "base/yaml_reader.h"

namespace paceline {
namespace {

int64_t positive(YamlMap& map, std::string_view key, int64_t value) {
  if (value < 1) map.fail(key, fmt::format("= {} must be at least 1", value));
  return value;
}

MoeSpec read_moe(YamlMap& map, int64_t dense_ffn_hidden) {
  MoeSpec moe;
  moe.experts = static_cast<int>(positive(map, "experts", map.required<int>("experts")));
  moe.top_k = static_cast<int>(positive(map, "top_k", map.get<int>("top_k", 2)));
  if (moe.top_k > moe.experts) {
    map.fail("top_k", fmt::format("= {} exceeds moe.experts = {}", moe.top_k, moe.experts));
  }
  moe.ffn_hidden = positive(map, "ffn_hidden", map.get<int64_t>("ffn_hidden", dense_ffn_hidden));
  moe.every = static_cast<int>(positive(map, "every", map.get<int>("every", 1)));
  moe.shared_experts = map.get<int>("shared_experts", 0);
  if (moe.shared_experts < 0) map.fail("shared_experts", "must not be negative");
  moe.shared_ffn_hidden = map.get<int64_t>("shared_ffn_hidden", moe.ffn_hidden);
  moe.capacity_factor = map.get<double>("capacity_factor", 0.0);
  if (moe.capacity_factor < 0.0) {
    map.fail("capacity_factor", fmt::format("= {} must be 0 (dropless) or positive", moe.capacity_factor));
  }
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

}  // namespace

bool ModelSpec::is_moe_layer(int layer) const {
  return moe.has_value() && (layer + 1) % moe->every == 0;
}

int ModelSpec::num_moe_layers() const { return moe ? layers / moe->every : 0; }

ParameterCount count_parameters(const ModelSpec& m) {
  ParameterCount count;
  const int64_t q_width = m.heads * m.head_dim;
  const int64_t kv_width = m.kv_heads * m.head_dim;
  const int64_t norm_params = m.norm == Norm::kLayerNorm ? 2 * m.hidden : m.hidden;

  // Attention: Q, K, V and output projections, their biases, and the per-head q/k norms.
  int64_t attention = m.hidden * (q_width + 2 * kv_width) + q_width * m.hidden;
  if (m.linear_bias) attention += q_width + 2 * kv_width + m.hidden;
  if (m.qkv_bias && !m.linear_bias) attention += q_width + 2 * kv_width;
  if (m.qk_norm) attention += 2 * m.head_dim;
  const int64_t common = attention + 2 * norm_params;

  // An MLP of inner size f: two (plain) or three (gated) matrices.
  auto mlp = [&m](int64_t f) {
    int64_t params = (m.gated_mlp() ? 3 : 2) * m.hidden * f;
    if (m.linear_bias) params += (m.gated_mlp() ? 2 : 1) * f + m.hidden;
    return params;
  };
  count.per_dense_layer = common + mlp(m.ffn_hidden);
  int64_t active_moe_layer = 0;
  if (m.moe) {
    count.per_expert = mlp(m.moe->ffn_hidden);
    const int64_t router = m.hidden * m.moe->experts;
    const int64_t shared = m.moe->shared_experts * mlp(m.moe->shared_ffn_hidden);
    count.per_moe_layer = common + router + shared + m.moe->experts * count.per_expert;
    active_moe_layer = common + router + shared + m.moe->top_k * count.per_expert;
  }

  count.embedding = m.vocab * m.hidden + (m.position == Position::kLearned ? m.seq_len * m.hidden : 0);
  count.output = m.tied_embeddings ? 0 : m.vocab * m.hidden;
  const int64_t final_norm = norm_params;
  const int moe_layers = m.num_moe_layers();
  const int dense_layers = m.layers - moe_layers;
  const int64_t outside_layers = count.embedding + count.output + final_norm;
  count.total = outside_layers + dense_layers * count.per_dense_layer + moe_layers * count.per_moe_layer;
  count.active = outside_layers + dense_layers * count.per_dense_layer + moe_layers * active_moe_layer;
  return count;
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
  std::optional<YamlMap> moe = map.optional_map("moe");
  // A model whose every layer is MoE needs no dense ffn_hidden.
  const bool all_moe = moe && moe->get<int>("every", 1) == 1;
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
  }
  map.finish();
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

}  // namespace paceline
