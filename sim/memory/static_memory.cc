#include "sim/memory/static_memory.h"

#include <algorithm>

namespace paceline {

HeldWeights& HeldWeights::operator+=(const HeldWeights& other) {
  parameters += other.parameters;
  experts += other.experts;
  fp8_gemm += other.fp8_gemm;
  fp8_gemm_experts += other.fp8_gemm_experts;
  return *this;
}

HeldWeights HeldWeights::operator*(int64_t times) const {
  return {parameters * times, experts * times, fp8_gemm * times, fp8_gemm_experts * times};
}

HeldWeights held_weights(const LayerGraph& graph) {
  return {graph.parameters, graph.expert_parameters, graph.fp8_gemm_parameters,
          graph.fp8_gemm_expert_parameters};
}

double ParameterBytes::weights_bytes(const HeldWeights& weights) const {
  return static_cast<double>(weights.parameters - weights.fp8_gemm) * weight +
         static_cast<double>(weights.fp8_gemm) * fp8_gemm_weight;
}

ParameterBytes parameter_bytes(const Training& training) {
  ParameterBytes bytes;
  const bool fp32 = training.precision == Precision::kFp32;
  // fp8 parameters are the working copy of the fp8 GEMMs' weights; otherwise Transformer Engine
  // keeps an fp8 copy of each between micro-batches beside the 16-bit one.
  bytes.weight = fp32 ? 4.0 : 2.0;
  bytes.fp8_gemm_weight = training.fp8_param_gather ? 1.0 : bytes.weight;
  bytes.fp8_weight = training.precision == Precision::kFp8 && !training.fp8_param_gather ? 1.0 : 0.0;
  bytes.gradient = training.gradients_in_bf16 ? 2.0 : 4.0;
  // Adam: master weights (mixed precision only) and two fp32 moments; SGD: momentum.
  const double master = fp32 ? 0.0 : 4.0;
  bytes.optimizer = master + (training.optimizer == Optimizer::kAdam ? 8.0 : 4.0);
  return bytes;
}

StaticMemory static_memory(const Training& training, const Sharding& sharding,
                           const HeldWeights& weights, int shard) {
  const ParameterBytes bytes = parameter_bytes(training);
  const double p = static_cast<double>(weights.parameters);
  const double n = shard;
  StaticMemory memory;
  memory.weight_bytes =
      static_cast<int64_t>(bytes.weights_bytes(weights) / (sharding.weights ? n : 1.0));
  memory.gradient_bytes = static_cast<int64_t>((sharding.gradients ? p / n : p) * bytes.gradient);
  memory.optimizer_bytes = static_cast<int64_t>((sharding.optimizer ? p / n : p) * bytes.optimizer);
  return memory;
}

namespace {

// Whether the rank's weight shards are the optimizer's fp32 master copies, with no 16-bit shard
// beside them: PyTorch FSDP2 (ZeRO-3 with fsdp_gather: per_parameter) under mixed precision.
bool fsdp2_holds_master_shards(const Training& training, const Parallelism& parallelism) {
  return parallelism.zero >= 3 && parallelism.fsdp_gather == FsdpGather::kPerParameter &&
         training.precision != Precision::kFp32;
}

}  // namespace

StaticMemory rank_static_memory(const Training& training, const Parallelism& p,
                                const HeldWeights& weights) {
  const int expert_shard = p.expert_data_ranks();
  const Sharding sharding{p.zero >= 3, p.reduces_gradients_per_microbatch(), p.zero >= 1};
  const StaticMemory dense = static_memory(training, sharding, weights.dense(), p.zero_shard);
  const StaticMemory experts = static_memory(training, sharding, weights.expert(), expert_shard);
  // PyTorch FSDP2 keeps a rank's shard of each weight in the weight's own dtype, fp32 under mixed
  // precision: that shard is the master copy the optimizer updates, and each all-gather casts it
  // to the 16-bit working copy (FSDPParam.all_gather_inputs), so no rank keeps a 16-bit shard.
  // Its fp8 training is torchao's float8, which casts a weight as its layer runs and keeps no
  // copy (matmul_with_hp_or_float8_args saves the high-precision weight for backward).
  const int64_t gradient_bytes = dense.gradient_bytes + experts.gradient_bytes;
  // FSDP2's sharded gradients are the outputs of its reduce-scatters; experts held whole by one
  // rank have none.
  const int64_t reduce_scattered =
      p.fsdp_gather == FsdpGather::kPerParameter && p.reduces_gradients_per_microbatch()
          ? dense.gradient_bytes + (expert_shard > 1 ? experts.gradient_bytes : 0)
          : 0;
  if (fsdp2_holds_master_shards(training, p)) {
    return StaticMemory{0, gradient_bytes, dense.optimizer_bytes + experts.optimizer_bytes,
                        reduce_scattered};
  }
  // The fp8 copies are of the weights a rank computes with, which ZeRO-3 gathers, so they are
  // counted whole.
  const auto fp8_copies = static_cast<int64_t>(static_cast<double>(weights.fp8_gemm) *
                                               parameter_bytes(training).fp8_weight);
  return StaticMemory{dense.weight_bytes + experts.weight_bytes + fp8_copies, gradient_bytes,
                      dense.optimizer_bytes + experts.optimizer_bytes, reduce_scattered};
}

}  // namespace paceline
