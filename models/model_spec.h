// ModelSpec: the architecture of a decoder-only transformer, as a scenario names it.
//
// Loaded from a catalog name (models/catalog/<name>.yaml), a path to a YAML file or a Hugging
// Face config.json, or an inline scenario mapping. It speaks only of layers and shapes: no
// hardware and no parallelism.
#ifndef PACELINE_MODELS_MODEL_SPEC_H_
#define PACELINE_MODELS_MODEL_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace paceline {

class YamlMap;

enum class Activation { kGelu, kSwiglu, kSquaredRelu };
enum class Norm { kLayerNorm, kRmsNorm };
enum class Position { kLearned, kRope, kAlibi };

// Mixture-of-experts feed-forward, replacing the dense MLP in MoE layers.
struct MoeSpec {
  int experts = 0;
  int top_k = 1;
  int64_t ffn_hidden = 0;     // per expert
  int every = 1;              // every n-th layer is MoE (1: all layers)
  int shared_experts = 0;     // always-active experts beside the routed ones
  int64_t shared_ffn_hidden = 0;
  // Tokens an expert accepts, over its fair share (0: dropless, no cap).
  double capacity_factor = 0.0;
  // Load imbalance: tokens of the busiest expert over the mean (1: perfectly balanced).
  double imbalance = 1.0;

  friend bool operator==(const MoeSpec&, const MoeSpec&) = default;
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
  std::string source;           // where the architecture is published

  bool is_moe_layer(int layer) const;
  int num_moe_layers() const;
  bool gated_mlp() const { return activation == Activation::kSwiglu; }

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
  int64_t routed_experts = 0;  // the routed experts of one MoE layer
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
