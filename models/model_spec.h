// ModelSpec: the architecture of a decoder-only transformer, as a scenario names it.
//
// Loaded from a catalog name (models/catalog/<name>.yaml), a path to a YAML file or a Hugging
// Face config.json, or an inline scenario mapping. It speaks only of layers and shapes: no
// hardware and no parallelism.
#ifndef PACELINE_MODELS_MODEL_SPEC_H_
#define PACELINE_MODELS_MODEL_SPEC_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/kernel_shapes.h"

namespace paceline {

class YamlMap;

enum class Activation { kGelu, kSwiglu, kSquaredRelu };
enum class Norm { kLayerNorm, kRmsNorm };
enum class Position { kLearned, kRope, kAlibi };

// Per-expert tables are built for every expert: bounded well above any published model's 256.
inline constexpr int kMostExperts = 1 << 16;

// Mixture-of-experts feed-forward, replacing the dense MLP in MoE layers.
struct MoeSpec {
  int experts = 0;
  int top_k = 1;
  int64_t ffn_hidden = 0;     // per expert
  int every = 1;              // every n-th layer is MoE (1: all layers), counted from first_dense_layers
  int first_dense_layers = 0;  // the first layers keep the dense MLP (DeepSeek's first_k_dense_replace)
  int shared_experts = 0;     // always-active experts beside the routed ones
  int64_t shared_ffn_hidden = 0;
  // Tokens an expert accepts, over its fair share (0: dropless, no cap).
  double capacity_factor = 0.0;
  // Load imbalance: tokens of the busiest expert over the mean (1: perfectly balanced).
  double imbalance = 1.0;
  // Group-limited routing: the experts fall into `groups` equal groups and a token's top_k come
  // from its best `group_top_k` of them (DeepSeek-V3's n_group and topk_group), which bounds the
  // nodes a token is sent to where groups lie on nodes.
  int groups = 1;
  int group_top_k = 1;

  // How its tokens are routed, as a deduplicated exchange sends them.
  TokenRouting token_routing() const { return TokenRouting{experts, top_k, groups, group_top_k}; }
  // The tokens the busiest expert keeps, and each other expert, over the mean: the busiest's
  // extra tokens come from the others evenly, (experts − imbalance) / (experts − 1) shares each,
  // so the tokens add up over the experts; the capacity factor caps every expert's share, the
  // tokens beyond it dropped before the dispatch.
  double busiest_share() const { return capped(imbalance); }
  double other_share() const {
    return capped(experts > 1 ? (experts - imbalance) / (experts - 1) : 1.0);
  }
  // The share of the routed tokens the experts keep (1: dropless).
  double kept_share() const { return (busiest_share() + (experts - 1) * other_share()) / experts; }

  friend bool operator==(const MoeSpec&, const MoeSpec&) = default;

 private:
  double capped(double share) const {
    return capacity_factor > 0.0 ? std::min(share, capacity_factor) : share;
  }
};

// The names a mixture of experts' routing fields go by where they were read, and the prefix that
// messages cite them with: the model format's (groups, group_top_k, top_k, experts; "moe.") or a
// Hugging Face config's (n_group, topk_group, num_experts_per_tok, n_routed_experts; "").
struct MoeRoutingKeys {
  std::string_view groups;
  std::string_view group_top_k;
  std::string_view top_k;
  std::string_view experts;
  std::string_view prefix;
};

// Fails through `fail` unless the groups divide the experts, group_top_k is at most the groups
// and top_k at most group_top_k groups' experts.
void check_moe_groups(
    const MoeSpec& moe, const MoeRoutingKeys& keys,
    const std::function<void(std::string_view key, const std::string& message)>& fail);

// Multi-head latent attention (DeepSeek-V2 and V3): the block input is projected down to a
// compressed query (q_lora_rank wide) and a compressed key/value (kv_lora_rank wide), each
// RMS-normalised and projected up to the heads; every head's query and key end in a rotary part
// rope_head_dim wide, the key's projected from the block input once and shared by all heads.
// The model's head_dim is the query/key head width, rotary part included.
struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0: queries projected from the block input directly
  int64_t kv_lora_rank = 0;
  int64_t rope_head_dim = 0;
  int64_t v_head_dim = 0;  // of values and the attention output

  friend bool operator==(const MlaSpec&, const MlaSpec&) = default;
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;        // < heads: grouped-query attention
  int64_t head_dim = 0;    // hidden / heads unless stated
  int64_t ffn_hidden = 0;  // dense MLP inner size
  int64_t vocab = 0;
  int64_t seq_len = 0;     // the model's context (and learned-position table) length
  Activation activation = Activation::kGelu;
  Norm norm = Norm::kLayerNorm;
  Position position = Position::kLearned;
  bool tied_embeddings = false;
  bool linear_bias = false;     // biases on the attention and MLP projections (GPT-2/3 style)
  bool qkv_bias = false;        // biases on Q, K and V only (Qwen2 style)
  bool qk_norm = false;         // RMSNorm on queries and keys per head (Qwen3 style)
  double dropout = 0.0;         // attention and hidden dropout probability during training
  std::optional<MoeSpec> moe;
  std::optional<MlaSpec> mla;   // multi-head latent attention in place of (grouped-query) attention
  // Multi-token prediction modules after the last layer (DeepSeek-V3's num_nextn_predict_layers,
  // Megatron-Core's mtp_num_layers). Module k predicts the token k + 1 ahead: it embeds the
  // tokens k ahead with the model's embedding, joins them with the hidden states before it through
  // a projection, runs one transformer layer (MoE where the last layer is) and predicts through a
  // norm of its own and the model's output projection, with a loss of its own.
  int mtp_layers = 0;
  // A sliding attention window in tokens (a Hugging Face config's sliding_window: Mistral 7B
  // v0.1's 4096), 0 for none. Only full causal attention is modelled, so training sequences must
  // fit within it.
  int64_t attention_window = 0;
  std::string source;           // where the architecture is published

  bool is_moe_layer(int layer) const;
  bool mtp_layer_is_moe() const { return is_moe_layer(layers - 1); }
  int num_moe_layers() const;
  bool gated_mlp() const { return activation == Activation::kSwiglu; }
  int64_t value_head_dim() const { return mla ? mla->v_head_dim : head_dim; }
  // One norm's weight, and LayerNorm's bias.
  int64_t norm_parameters() const { return norm == Norm::kLayerNorm ? 2 * hidden : hidden; }

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

// Exact parameter counts.
struct ParameterCount {
  int64_t total = 0;
  int64_t active = 0;       // used per token (MoE: top-k routed + shared experts)
  int64_t embedding = 0;    // input embedding and learned positions
  int64_t output = 0;       // output head (0 when tied)
  int64_t per_dense_layer = 0;
  int64_t per_moe_layer = 0;
  int64_t per_expert = 0;
  // One multi-token prediction module: its transformer layer, projection and three norms (the
  // embedding and output projection are the model's).
  int64_t per_mtp_module = 0;
  int64_t routed_experts = 0;  // the routed experts of one MoE layer
  // Of a layer's parameters, those every tensor-parallel rank holds whole besides its norms:
  // multi-head latent attention's down-projections and their norms.
  int64_t tp_replicated_per_layer = 0;
  int64_t attention_matmuls_per_layer = 0;  // the attention's projection weights, without biases and norms
};
// The counts of a model whose sizes its reader accepted. checked_parameter_count is empty when a
// count would not fit in 64 bits (the readers refuse such a model).
ParameterCount count_parameters(const ModelSpec& model);
std::optional<ParameterCount> checked_parameter_count(const ModelSpec& model);

// Reads a model mapping (the scenario's inline form and the catalog's file form) and checks
// its fields: positive sizes, heads divisible by kv_heads, MoE top_k <= experts, ...
ModelSpec read_model(YamlMap& map);

std::string to_string(Activation activation);
std::string to_string(Norm norm);
std::string to_string(Position position);

}  // namespace paceline

#endif  // PACELINE_MODELS_MODEL_SPEC_H_
