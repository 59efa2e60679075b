// Tests how the simulator sets up interference between communication and compute kernels
// (sim/simulator/simulator.cc): on Hopper, persistent GEMMs beside NCCL kernels run in two waves.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

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

// The overlap slowdown of Llama 3 8B's ring attention over cp 4, on `nodes` nodes, with the
// catalog's send/recv SMs replaced and GEMMs not persistent (whose second wave any SMs held cause).
Seconds ring_overlap_slowdown(int nodes, int64_t network_sms, int64_t nvlink_sms) {
  Scenario scenario = load_scenario_text(fmt::format(R"(model: llama3-8b
cluster: {{gpu: h100-sxm5-80gb, nodes: {}, gpus_per_node: {}, inter_node: {{nics_per_node: 4, nic_bandwidth: 400 Gb/s}}}}
parallelism: {{cp: 4}}
training: {{global_batch: 1, seq_len: 65536}}
)",
                                                     nodes, 4 / nodes),
                                         "s.yaml");
  scenario.cluster.gpu.kernels.send_recv_network_sms = network_sms;
  scenario.cluster.gpu.kernels.send_recv_nvlink_sms = nvlink_sms;
  scenario.cluster.gpu.kernels.gemm_persistent = false;
  return simulate(std::make_shared<const Scenario>(std::move(scenario))).result.breakdown.overlap_slowdown;
}

TEST(Interference, SendRecvSlowsComputeByTheSmsItHolds) {
  // The ring's key/value exchanges overlap the attention kernels (the gradient all-reduce over
  // the cp ranks overlaps the backward too). Their send/recv kernel holds the network figure
  // when the ring spans nodes and the NVLink one within a node, and slows compute beside it by
  // communication_interference in proportion to those SMs over a collective's 16, at most all of
  // it: the ring's share of the overlap slowdown (beyond a ring holding none) scales with them.
  const auto ring_share = [](int nodes, int64_t sms) {
    const bool across = nodes > 1;
    const auto with = [&](int64_t ring_sms) {
      return across ? ring_overlap_slowdown(nodes, ring_sms, 32) : ring_overlap_slowdown(nodes, 2, ring_sms);
    };
    return (with(sms) - with(0)) / (with(16) - with(0));
  };
  EXPECT_GT(ring_overlap_slowdown(2, 16, 32), ring_overlap_slowdown(2, 0, 32));
  EXPECT_NEAR(ring_share(2, 2), 2.0 / 16.0, 0.2 * 2.0 / 16.0);
  EXPECT_NEAR(ring_share(1, 8), 8.0 / 16.0, 0.2 * 8.0 / 16.0);
  EXPECT_EQ(ring_overlap_slowdown(1, 2, 32), ring_overlap_slowdown(1, 2, 16));
  // Across nodes the NVLink figure plays no part, and within one node the network figure none.
  EXPECT_EQ(ring_overlap_slowdown(2, 2, 32), ring_overlap_slowdown(2, 2, 8));
  EXPECT_EQ(ring_overlap_slowdown(1, 2, 8), ring_overlap_slowdown(1, 8, 8));
}

}  // namespace
}  // namespace paceline
