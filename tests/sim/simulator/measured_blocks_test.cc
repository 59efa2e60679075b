// Tests the simulator against PyTorch measured on an H200, whose catalog entry prices kernels from
// its measured profile, so the comparisons isolate how paceline builds the work:
// - whole blocks (hardware/profiles/h200-sxm-141gb.blocks.json, calibrate/layer_torch.py: eager
//   PyTorch, bf16, cuDNN attention, forward plus backward of one block, CUDA events): eager
//   PyTorch runs RMSNorm, rotary embedding and SwiGLU as several kernels each;
// - a training loop held at the power limit for minutes (h200-sxm-141gb.training.json,
//   calibrate/sustained_torch.py);
// - one rank's share of ring attention (h200-sxm-141gb.ring.json, calibrate/ring_attention_torch.py).
#include <gtest/gtest.h>

#include <string>

#include "sim/parallel/lowering.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

struct MeasuredBlock {
  const char* model;  // the block's shape as a model mapping
  int64_t micro_batch;
  int64_t seq;
  double forward_backward_s;
};

// Seconds one block's forward and backward take on the compute stream.
double block_seconds(const MeasuredBlock& block, const std::string& fusion) {
  const std::string text = std::string("model: ") + block.model + R"(
cluster: {gpu: h200-sxm-141gb, nodes: 1, gpus_per_node: 1}
training: {global_batch: )" + std::to_string(block.micro_batch) +
                           ", micro_batch: " + std::to_string(block.micro_batch) + ", seq_len: " +
                           std::to_string(block.seq) + ", fusion: " + fusion + "}\n";
  const Prediction p = simulate(std::make_shared<const Scenario>(load_scenario_text(text, "block.yaml")));
  double seconds = 0.0;
  for (const auto& plan : p.lowering->stages[0]->plans) {
    if (plan->name.rfind("layer", 0) != 0) continue;
    for (const TaskTemplate& task : plan->tasks) {
      if (task.stream == StreamKind::kCompute) seconds += to_seconds(task.duration) / Seconds(1);
    }
  }
  return seconds;
}

constexpr const char* kLlama3_8b =
    "{name: llama3-8b-block, layers: 1, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 1024, "
    "seq_len: 8192, activation: swiglu, norm: rmsnorm, position: rope}";
constexpr const char* kGpt7b =
    "{name: gpt-7b-block, layers: 1, hidden: 4096, heads: 32, kv_heads: 32, ffn_hidden: 16384, vocab: 1024, "
    "seq_len: 4096, activation: gelu, norm: layernorm, position: learned}";

TEST(MeasuredBlocks, EagerLlamaBlocksTakeTheirMeasuredTime) {
  // Fused, the Llama block is 9% faster than PyTorch eager ran it; eager, within 5%.
  for (const MeasuredBlock& block : {MeasuredBlock{kLlama3_8b, 1, 8192, 22.913e-3},
                                     MeasuredBlock{kLlama3_8b, 2, 4096, 21.137e-3}}) {
    const double fused = block_seconds(block, "fused");
    const double eager = block_seconds(block, "eager");
    EXPECT_LT(fused, 0.93 * block.forward_backward_s);
    EXPECT_NEAR(eager, block.forward_backward_s, 0.05 * block.forward_backward_s);
  }
}

TEST(MeasuredBlocks, LayerNormAndGeluAreOneKernelEagerToo) {
  // PyTorch's LayerNorm and GeLU are single kernels: the GPT block is the same either way, and
  // takes its measured time.
  const MeasuredBlock block{kGpt7b, 1, 4096, 9.066e-3};
  const double fused = block_seconds(block, "fused");
  EXPECT_NEAR(block_seconds(block, "eager"), fused, 0.01 * fused);
  EXPECT_NEAR(fused, block.forward_backward_s, 0.05 * block.forward_backward_s);
}

TEST(MeasuredBlocks, NarrowBlocksTakeTheirMeasuredTimeUntilTheHostSetsThePace) {
  // A 1.7B GPT block at 4096 tokens a step (one sequence of 4096, or four of 2048), and a narrow
  // eager Llama block (hidden 1024, 8 heads, one key/value head, FFN 3584, 8192 tokens), take
  // their measured time; the Llama one is predicted 9% fast.
  const char* gpt_1_7b =
      "{name: gpt-1.7b-block, layers: 1, hidden: 2048, heads: 16, kv_heads: 16, ffn_hidden: 8192, "
      "vocab: 1024, "
      "seq_len: 4096, activation: gelu, norm: layernorm, position: learned}";
  for (const MeasuredBlock& block :
       {MeasuredBlock{gpt_1_7b, 1, 4096, 2.852e-3}, MeasuredBlock{gpt_1_7b, 4, 2048, 4.841e-3}}) {
    EXPECT_NEAR(block_seconds(block, "fused"), block.forward_backward_s,
                0.05 * block.forward_backward_s);
  }
  const MeasuredBlock narrow_llama{
      "{name: narrow-llama-block, layers: 1, hidden: 1024, heads: 8, kv_heads: 1, ffn_hidden: "
      "3584, vocab: 1024, "
      "seq_len: 8192, activation: swiglu, norm: rmsnorm, position: rope}",
      1, 8192, 3.400e-3};
  const double narrow_llama_s = block_seconds(narrow_llama, "eager");
  EXPECT_GT(narrow_llama_s, 0.90 * narrow_llama.forward_backward_s);
  EXPECT_LT(narrow_llama_s, 0.92 * narrow_llama.forward_backward_s);
  // A GPT block of hidden 1536 (12 heads, FFN 6144) at 2048 tokens: its kernels sum to 0.88 ms,
  // and it took 1.91 ms, its time spread over the timed runs 32% (the others': 4% to 15%). Under
  // about a millisecond of kernels a block, eager PyTorch's host, launching them one by one, sets
  // the pace; paceline times the kernels and predicts such a step too fast.
  const MeasuredBlock narrow_gpt{
      "{name: narrow-gpt-block, layers: 1, hidden: 1536, heads: 12, kv_heads: 12, ffn_hidden: "
      "6144, vocab: 1024, "
      "seq_len: 2048, activation: gelu, norm: layernorm, position: learned}",
      1, 2048, 1.910e-3};
  EXPECT_NEAR(block_seconds(narrow_gpt, "fused"), 0.88e-3, 0.02e-3);
}

TEST(MeasuredTraining, ALoopAtThePowerLimitTakesItsMeasuredTime) {
  // Eight Llama 3 8B decoder layers with the embedding, head and fp32 cross-entropy, seq 8192,
  // eager bf16, trained for 60 s at 686-697 W (SM clock 1515-1650 MHz, interquartile): forward and backward took
  // 233.9 ms an iteration over the last 30 s (230.9 over the first 5). The optimizer is left
  // out: the loop kept bf16 Adam moments, paceline keeps fp32 ones.
  const Scenario scenario = load_scenario_text(R"(
model: {name: llama3-8b-8layers, layers: 8, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336,
        vocab: 128256, seq_len: 8192, activation: swiglu, norm: rmsnorm, position: rope}
cluster: {gpu: h200-sxm-141gb, nodes: 1, gpus_per_node: 1}
training: {global_batch: 1, micro_batch: 1, seq_len: 8192, fusion: eager, cross_entropy: eager, recompute: none}
)",
                                               "loop.yaml");
  const Prediction p = simulate(std::make_shared<const Scenario>(scenario));
  EXPECT_NEAR(p.result.breakdown.compute / Seconds(1), 233.9e-3, 0.05 * 233.9e-3);
}

// One rank's ring attention in one layer: seconds of its attention kernels in forward, of its
// forward merges, and of its backward (kernels and fp32 gradient sums), at `tokens` a rank,
// FlashAttention-2 and 32 key/value heads (torchtitan's repeat_kv).
struct RingSeconds {
  double forward_kernels = 0.0, merges = 0.0, backward = 0.0;
};
RingSeconds ring_seconds(int cp, int64_t tokens) {
  const std::string seq = std::to_string(tokens * cp);
  const std::string text = "model: {name: llama-layer, layers: 1, hidden: 4096, heads: 32, kv_heads: 8, "
                           "ffn_hidden: 14336, vocab: 1024, seq_len: " + seq +
                           ", activation: swiglu, norm: rmsnorm, position: rope}\n"
                           "cluster: {gpu: h200-sxm-141gb, nodes: 1, gpus_per_node: " + std::to_string(cp) +
                           "}\nparallelism: {cp: " + std::to_string(cp) +
                           "}\ntraining: {global_batch: 1, micro_batch: 1, seq_len: " + seq +
                           ", attention: flash2, repeat_kv: true}\n";
  const Prediction p = simulate(std::make_shared<const Scenario>(load_scenario_text(text, "ring.yaml")));
  RingSeconds seconds;
  for (const auto& plan : p.lowering->stages[0]->plans) {
    if (plan->name.rfind("layer", 0) != 0) continue;
    for (const PlannedOp& op : plan->ops) {
      const bool merge = op.name.rfind("attn.ring.merge", 0) == 0;
      if (op.name.rfind("attn.core", 0) != 0 && !merge) continue;
      const double s = op.duration / Seconds(1);
      if (plan->pass != PassKind::kForward) {
        seconds.backward += s;
      } else {
        (merge ? seconds.merges : seconds.forward_kernels) += s;
      }
    }
  }
  return seconds;
}

TEST(MeasuredRing, UnmaskedRingStepsTakeTheirMeasuredTime) {
  // PyTorch's flash backend, 32 heads of 128, 32768 tokens a rank, load-balanced. The unmasked
  // steps are cp 8 less cp 4, over 4 (cp 1 ran first, from a cool GPU): forward kernels without
  // merges 25.56 ms a step ((206.48 - 104.23) / 4), backward with its fp32 gradient sums 72.07
  // ((574.23 - 285.94) / 4).
  const RingSeconds cp4 = ring_seconds(4, 32768);
  const RingSeconds cp8 = ring_seconds(8, 32768);
  EXPECT_NEAR((cp8.forward_kernels - cp4.forward_kernels) / 4.0, 25.56e-3, 0.03 * 25.56e-3);
  EXPECT_NEAR((cp8.backward - cp4.backward) / 4.0, 72.07e-3, 0.03 * 72.07e-3);
  // PyTorch's eager merge (fp32 sigmoid and log-sigmoid updates) took 1.15 ms a step at cp 8
  // ((214.53 - 206.48) / 7); paceline's one fused pass over the output and statistics takes a
  // quarter of that, under 1% of a step.
  EXPECT_LT((cp8.merges - cp4.merges) / 4.0, 1.15e-3);
  // The causal diagonal (cp 1: 26.15 ms forward, 71.11 backward) is predicted 9% and 10% slower:
  // FlashAttention-2 at 32k ran it at its unmasked speed, where the catalog's causal ratio for it
  // comes from its H100 bars at up to 16k (0.911 of its unmasked ceiling there).
  const RingSeconds cp1 = ring_seconds(1, 32768);
  EXPECT_NEAR(cp1.forward_kernels, 26.15e-3, 0.25 * 26.15e-3);
  EXPECT_NEAR(cp1.backward, 71.11e-3, 0.25 * 71.11e-3);
}

}  // namespace
}  // namespace paceline
