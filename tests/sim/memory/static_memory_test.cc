// Tests sim/memory/static_memory.h: bytes per parameter and their ZeRO sharding.
#include "sim/memory/static_memory.h"

#include <gtest/gtest.h>

namespace paceline {
namespace {

TEST(StaticMemory, MixedPrecisionAdamKeepsEighteenBytesPerParameter) {
  // 2 (bf16 weights) + 4 (fp32 gradients) + 12 (fp32 master, two moments) = 18 bytes.
  const Training training;
  const StaticMemory m =
      static_memory(training, Sharding{}, HeldWeights{.parameters = 1'000'000}, 1);
  EXPECT_EQ(m.weight_bytes, 2'000'000);
  EXPECT_EQ(m.gradient_bytes, 4'000'000);
  EXPECT_EQ(m.optimizer_bytes, 12'000'000);
}

TEST(StaticMemory, ZeroStagesShardMoreAndMore) {
  // Over 8 ranks: ZeRO-1 → 2 + 4 + 12/8; ZeRO-2 → 2 + (4 + 12)/8; ZeRO-3 → 18/8.
  const Training training;
  const int64_t p = 8'000'000;
  EXPECT_EQ(static_memory(training, {false, false, true}, {.parameters = p}, 8).total(),
            2 * p + 4 * p + 12 * p / 8);
  EXPECT_EQ(static_memory(training, {false, true, true}, {.parameters = p}, 8).total(),
            2 * p + 16 * p / 8);
  EXPECT_EQ(static_memory(training, {true, true, true}, {.parameters = p}, 8).total(), 18 * p / 8);
}

TEST(StaticMemory, Fp32TrainingHasNoMasterCopy) {
  Training training;
  training.precision = Precision::kFp32;
  // 4 (weights) + 4 (gradients) + 8 (moments).
  EXPECT_EQ(static_memory(training, Sharding{}, {.parameters = 1000}, 1).total(), 16'000);
}

TEST(StaticMemory, Fp8KeepsWholeCopiesOfItsGemmWeightsOnly) {
  // 1000 parameters, 800 of them weights of fp8 GEMMs: 2 bytes each and 1 for each fp8 copy,
  // which ZeRO-3 leaves whole while it divides the 16-bit weights over 4 ranks.
  Training training;
  training.precision = Precision::kFp8;
  Parallelism parallelism;
  EXPECT_EQ(
      rank_static_memory(training, parallelism, {.parameters = 1000, .fp8_gemm = 800}).weight_bytes,
      2000 + 800);
  parallelism.zero = 3;
  parallelism.zero_shard = 4;
  EXPECT_EQ(
      rank_static_memory(training, parallelism, {.parameters = 1000, .fp8_gemm = 800}).weight_bytes,
      500 + 800);
  training.precision = Precision::kBf16;
  EXPECT_EQ(
      rank_static_memory(training, parallelism, {.parameters = 1000, .fp8_gemm = 800}).weight_bytes,
      500);
}

TEST(StaticMemory, Fp8ParametersAreTheWorkingCopyOfTheFp8GemmsWeights) {
  // One fp8 byte per weight of an fp8 GEMM in place of the 16-bit weight and its fp8 copy; the
  // other 200 weights (embedding, norms, router) stay 16-bit. ZeRO-3 shards both.
  Training training;
  training.precision = Precision::kFp8;
  training.fp8_param_gather = true;
  Parallelism parallelism;
  EXPECT_EQ(
      rank_static_memory(training, parallelism, {.parameters = 1000, .fp8_gemm = 800}).weight_bytes,
      200 * 2 + 800);
  parallelism.zero = 3;
  parallelism.zero_shard = 4;
  EXPECT_EQ(
      rank_static_memory(training, parallelism, {.parameters = 1000, .fp8_gemm = 800}).weight_bytes,
      (200 * 2 + 800) / 4);
  // Experts' states are divided over their own group: 400 expert weights, all of fp8 GEMMs, over 2.
  parallelism.ep = 2;
  parallelism.dp = 4;
  parallelism.zero_shard = 4;
  const HeldWeights held{
      .parameters = 1000, .experts = 400, .fp8_gemm = 800, .fp8_gemm_experts = 400};
  EXPECT_EQ(parallelism.expert_data_ranks(), 2);
  EXPECT_EQ(rank_static_memory(training, parallelism, held).weight_bytes,
            (200 * 2 + 400) / 4 + 400 / 2);
}

TEST(StaticMemory, ExpertStatesAreShardedOverTheWholeExpertDataParallelGroup) {
  // tp 4, dp 8, ep 2: the experts' 16 copies share their states (Megatron-Core's expert data-
  // parallel group, which reduces their gradients), not the dense weights' 8.
  Training training;
  Parallelism parallelism;
  parallelism.tp = 4;
  parallelism.dp = 8;
  parallelism.ep = 2;
  parallelism.zero = 1;
  parallelism.zero_shard = 8;
  const int64_t experts = 16'000'000;
  const StaticMemory memory =
      rank_static_memory(training, parallelism, {.parameters = experts, .experts = experts});
  EXPECT_EQ(memory.optimizer_bytes, 12 * experts / 16);
}

TEST(StaticMemory, Fsdp2ShardsAreTheMasterWeights) {
  // PyTorch FSDP2 under mixed precision: the fp32 shard is the master, no 16-bit shard beside it
  // (4 + 4 + 8 = 16 bytes a parameter over the shard group, where Megatron-style ZeRO-3 holds 18),
  // and its fp8 (torchao's) keeps no fp8 copies.
  Training training;
  Parallelism parallelism;
  parallelism.dp = 8;
  parallelism.zero = 3;
  parallelism.zero_shard = 8;
  const HeldWeights held{.parameters = 8'000'000, .fp8_gemm = 6'000'000};
  const StaticMemory block = rank_static_memory(training, parallelism, held);
  EXPECT_EQ(block.total(), 18 * 1'000'000);
  EXPECT_EQ(block.resident_bytes(), block.total());
  parallelism.fsdp_gather = FsdpGather::kPerParameter;
  const StaticMemory fsdp2 = rank_static_memory(training, parallelism, held);
  EXPECT_EQ(fsdp2.weight_bytes, 0);
  EXPECT_EQ(fsdp2.total(), 16 * 1'000'000);
  // Its gradient shards come from the step's reduce-scatters, not resident as the step starts.
  EXPECT_EQ(fsdp2.reduce_scattered_gradient_bytes, 4 * 1'000'000);
  EXPECT_EQ(fsdp2.resident_bytes(), 12 * 1'000'000);
  // Pipelined, it accumulates whole gradients over the micro-batches, resident all step.
  parallelism.pp = 2;
  const StaticMemory pipelined = rank_static_memory(training, parallelism, held);
  EXPECT_EQ(pipelined.gradient_bytes, 4 * 8'000'000);
  EXPECT_EQ(pipelined.reduce_scattered_gradient_bytes, 0);
  EXPECT_EQ(pipelined.weight_bytes, 0);
  parallelism.pp = 1;
  training.precision = Precision::kFp8;
  EXPECT_EQ(rank_static_memory(training, parallelism, held).total(), 16 * 1'000'000);
  // fp32 training has no master: its shard is the weight itself.
  training.precision = Precision::kFp32;
  EXPECT_EQ(rank_static_memory(training, parallelism, held).weight_bytes, 4 * 1'000'000);
}

TEST(StaticMemory, Bf16GradientsTakeTwoBytes) {
  Training training;
  training.gradients_in_bf16 = true;
  EXPECT_EQ(
      static_memory(training, Sharding{}, HeldWeights{.parameters = 1'000'000}, 1).gradient_bytes,
      2'000'000);
}

}  // namespace
}  // namespace paceline
