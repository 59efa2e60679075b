// StaticMemory: what a rank keeps resident through the whole step — weights, gradients and
// optimizer state — given the parameters it holds and how ZeRO / FSDP shards them.
//
// Bytes per parameter under mixed precision (Megatron-LM and PyTorch FSDP alike): 2 for the
// bf16/fp16 weights, 4 for the fp32 gradient accumulation buffer (Megatron's main_grad; bf16
// training forces fp32 accumulation), and 12 for Adam's fp32 master weights and two moments
// (Rajbhandari et al., ZeRO, SC'20, §3.1: "16Ψ" = 2 + 2 + 12 with 16-bit grads; paceline keeps
// the 4-byte gradient Megatron allocates). ZeRO-1 shards the 12, ZeRO-2 also the gradients,
// ZeRO-3 also the weights (PyTorch FSDP2's shards are the fp32 masters themselves: 4 + 12, and
// its gradient shards come with the step's reduce-scatters).
// fp32 training has 4-byte weights and no master copy. fp8 training adds Transformer Engine's
// fp8 copy of the weight of each GEMM that runs in fp8, or with fp8 parameters holds that byte
// alone; the other weights (embedding, output head, norms, router) stay 16-bit.
#ifndef PACELINE_SIM_MEMORY_STATIC_MEMORY_H_
#define PACELINE_SIM_MEMORY_STATIC_MEMORY_H_

#include <cstdint>

#include "models/layer_graph.h"
#include "sim/scenario/scenario.h"

namespace paceline {

// The weights a rank holds: all of them, the routed experts' among them, and of each the
// weights of GEMMs that run in fp8 (LayerGraph::fp8_gemm_parameters).
struct HeldWeights {
  int64_t parameters = 0;
  int64_t experts = 0;
  int64_t fp8_gemm = 0;
  int64_t fp8_gemm_experts = 0;

  HeldWeights& operator+=(const HeldWeights& other);
  HeldWeights operator*(int64_t times) const;
  HeldWeights dense() const { return {parameters - experts, 0, fp8_gemm - fp8_gemm_experts, 0}; }
  HeldWeights expert() const { return {experts, experts, fp8_gemm_experts, fp8_gemm_experts}; }
};
HeldWeights held_weights(const LayerGraph& graph);

struct StaticMemory {
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  // Of gradient_bytes, those that come into being as the step's reduce-scatters produce them:
  // PyTorch FSDP2's sharded gradients, which its optimizer's zero_grad sets to None before each
  // step.
  int64_t reduce_scattered_gradient_bytes = 0;
  int64_t total() const { return weight_bytes + gradient_bytes + optimizer_bytes; }
  // What is resident as the step starts.
  int64_t resident_bytes() const { return total() - reduce_scattered_gradient_bytes; }
};

// Per-parameter byte counts of a scenario's precision and optimizer.
struct ParameterBytes {
  double weight = 2.0;     // the working copy the kernels read
  double fp8_gemm_weight = 2.0;  // of a weight of an fp8 GEMM: 1 with fp8 parameters, else `weight`
  double fp8_weight = 0.0;  // fp8 copies of GEMM weights (fp8 training)
  double gradient = 4.0;   // accumulation buffer, reduced in this precision
  double optimizer = 12.0;  // master copy and moments

  // The working copies of `weights`.
  double weights_bytes(const HeldWeights& weights) const;
};
ParameterBytes parameter_bytes(const Training& training);

// Which of a rank's states are divided over its ZeRO shard group.
struct Sharding {
  bool weights = false;    // ZeRO-3
  bool gradients = false;  // ZeRO-2 and ZeRO-3 without pipelining
  bool optimizer = false;  // ZeRO-1 and up
};

// `weights`: held by the rank after tensor/pipeline/expert sharding; `shard`: the size of the
// group the sharded states are divided over.
StaticMemory static_memory(const Training& training, const Sharding& sharding,
                           const HeldWeights& weights, int shard);

// The static memory of a rank holding `weights` under the ZeRO stage of `parallelism`: dense
// states are divided over its zero_shard group, expert states over the expert-data group, and
// ZeRO-2 and ZeRO-3 with pipelining keep unsharded gradients, accumulated over the
// micro-batches. Without fp8 parameters each weight of an fp8 GEMM has an fp8 copy, kept whole;
// FSDP2 keeps no 16-bit or fp8 weights between passes.
StaticMemory rank_static_memory(const Training& training, const Parallelism& parallelism,
                                const HeldWeights& weights);

}  // namespace paceline

#endif  // PACELINE_SIM_MEMORY_STATIC_MEMORY_H_
