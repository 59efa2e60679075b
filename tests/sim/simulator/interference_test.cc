// Tests how the simulator sets up interference between communication and compute kernels
// (sim/simulator/simulator.cc): on Hopper, persistent GEMMs beside NCCL kernels run in two waves.
#include <gtest/gtest.h>

#include <string>

#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// The scenario `text`, on its catalog GPU with GEMMs persistent or not.
Result simulate_gemms(const std::string& text, bool persistent) {
  Scenario scenario = load_scenario_text(text, "s.yaml");
  scenario.cluster.gpu.kernels.gemm_persistent = persistent;
  return simulate(std::make_shared<const Scenario>(std::move(scenario))).result;
}

TEST(Interference, PersistentGemmsBesideFsdpGathersRunInTwoWaves) {
  // Llama 3 8B under FSDP on 8 H100s: every block's weights are gathered, and its gradients
  // reduce-scattered, by NCCL kernels beside the GEMMs of its neighbours. Persistent GEMMs lose
  // half their speed there instead of the catalog's communication_interference (0.189): the
  // same work, a larger overlap slowdown, a longer step.
  const std::string text = R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {dp: 8, zero: 3}
training: {global_batch: 8, seq_len: 8192}
)";
  const Result plain = simulate_gemms(text, false);
  const Result persistent = simulate_gemms(text, true);
  EXPECT_DOUBLE_EQ(persistent.model_tflops_per_gpu * persistent.iteration_time / Seconds(1),
            plain.model_tflops_per_gpu * plain.iteration_time / Seconds(1));
  EXPECT_GT(plain.breakdown.overlap_slowdown, Seconds(0));
  EXPECT_GT(persistent.breakdown.overlap_slowdown, 2.0 * plain.breakdown.overlap_slowdown);
  EXPECT_LT(persistent.breakdown.overlap_slowdown, 1.0 / 0.189 * plain.breakdown.overlap_slowdown);
  EXPECT_GT(persistent.iteration_time, plain.iteration_time);
}

TEST(Interference, OverlappedTensorParallelChunksHoldNoSms) {
  // Llama 3 70B with tp 8 on one node and nothing else to communicate: the overlapped
  // tensor-parallel chunks are Transformer Engine userbuffers or async-TP copies, not NCCL
  // kernels, so persistent GEMMs beside them keep the generic slowdown.
  const std::string text = R"(model: llama3-70b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {tp: 8, tp_comm_overlap: true}
training: {global_batch: 1, seq_len: 8192, recompute: full}
)";
  const Result plain = simulate_gemms(text, false);
  const Result persistent = simulate_gemms(text, true);
  EXPECT_GT(plain.breakdown.overlap_slowdown, Seconds(0));
  EXPECT_EQ(persistent.iteration_time, plain.iteration_time);
}

}  // namespace
}  // namespace paceline
