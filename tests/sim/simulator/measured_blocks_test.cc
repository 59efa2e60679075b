// Tests the simulator's transformer block against whole blocks measured in PyTorch on an H200
// (hardware/profiles/h200-sxm-141gb.blocks.json, calibrate/layer_torch.py: eager PyTorch, bf16,
// cuDNN attention, forward plus backward of one block, CUDA events). The H200's catalog entry
// prices kernels from its measured profile, so the comparison isolates how the block is built:
// eager PyTorch runs RMSNorm, rotary embedding and SwiGLU as several kernels each.
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

}  // namespace
}  // namespace paceline
