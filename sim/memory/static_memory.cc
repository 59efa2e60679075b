#include "sim/memory/static_memory.h"

#include <algorithm>

namespace paceline {

ParameterBytes parameter_bytes(const Training& training) {
  ParameterBytes bytes;
  const bool fp32 = training.precision == Precision::kFp32;
  // fp8 parameters are the working copy; otherwise Transformer Engine keeps an fp8 copy of each
  // GEMM weight between micro-batches beside the 16-bit one.
  bytes.weight = fp32 ? 4.0 : training.fp8_param_gather ? 1.0 : 2.0;
  bytes.fp8_weight = training.precision == Precision::kFp8 && !training.fp8_param_gather ? 1.0 : 0.0;
  bytes.gradient = training.gradients_in_bf16 ? 2.0 : 4.0;
  // Adam: master weights (mixed precision only) and two fp32 moments; SGD: momentum.
  const double master = fp32 ? 0.0 : 4.0;
  bytes.optimizer = master + (training.optimizer == Optimizer::kAdam ? 8.0 : 4.0);
  return bytes;
}

StaticMemory static_memory(const Training& training, const Sharding& sharding, int64_t parameters,
                           int shard) {
  const ParameterBytes bytes = parameter_bytes(training);
  const double p = static_cast<double>(parameters);
  const double n = shard;
  StaticMemory memory;
  memory.weight_bytes = static_cast<int64_t>((sharding.weights ? p / n : p) * bytes.weight);
  memory.gradient_bytes = static_cast<int64_t>((sharding.gradients ? p / n : p) * bytes.gradient);
  memory.optimizer_bytes = static_cast<int64_t>((sharding.optimizer ? p / n : p) * bytes.optimizer);
  return memory;
}

StaticMemory rank_static_memory(const Training& training, const Parallelism& p, int64_t parameters,
                                int64_t expert_parameters, int64_t fp8_gemm_parameters) {
  const int expert_shard = p.expert_zero_shard();
  const Sharding sharding{p.zero >= 3, p.reduces_gradients_per_microbatch(), p.zero >= 1};
  const int64_t dense_parameters = parameters - expert_parameters;
  const StaticMemory dense = static_memory(training, sharding, dense_parameters, p.zero_shard);
  const StaticMemory experts = static_memory(training, sharding, expert_parameters, expert_shard);
  // The fp8 copies are of the weights a rank computes with, which ZeRO-3 gathers, so they are
  // counted whole. Where a framework casts each gathered layer's weights anew (torchao's float8
  // under FSDP) it holds them only while that layer runs, which this overstates.
  const auto fp8_copies = static_cast<int64_t>(static_cast<double>(fp8_gemm_parameters) *
                                               parameter_bytes(training).fp8_weight);
  return StaticMemory{dense.weight_bytes + experts.weight_bytes + fp8_copies,
                      dense.gradient_bytes + experts.gradient_bytes,
                      dense.optimizer_bytes + experts.optimizer_bytes};
}

}  // namespace paceline
