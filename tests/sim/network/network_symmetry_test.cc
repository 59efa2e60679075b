// Tests sim/network/network_symmetry.h through whole simulations: `full` fidelity with its
// proven-symmetric peers folded gives the answer of `full` fidelity with every rank simulated.
#include "sim/network/network_symmetry.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

Result run(const std::string& text, bool fold) {
  const std::string simulation =
      fold ? "simulation: {fidelity: full}\n" : "simulation: {fidelity: full, fold_symmetric_peers: false}\n";
  return simulate(std::make_shared<const Scenario>(load_scenario_text(text + simulation, "s.yaml"))).result;
}

std::map<std::string, int> folded_peers(const Result& r) {
  return {r.folded_peers.begin(), r.folded_peers.end()};
}

// Folding changes only the order of floating-point sums (a link's load from a class of flows
// instead of flow by flow).
constexpr double kRounding = 1e-9;

void expect_same_answer(const Result& folded, const Result& unfolded) {
  EXPECT_NEAR(folded.iteration_time / unfolded.iteration_time, 1.0, kRounding);
  EXPECT_EQ(folded.peak_memory_bytes, unfolded.peak_memory_bytes);
  ASSERT_EQ(folded.stages.size(), unfolded.stages.size());
  for (size_t s = 0; s < folded.stages.size(); ++s) {
    EXPECT_EQ(folded.stages[s].peak_bytes, unfolded.stages[s].peak_bytes) << "stage " << s;
  }
  EXPECT_EQ(folded.critical_stage, unfolded.critical_stage);
  for (int tag = 0; tag < kNumActivityTags; ++tag) {
    EXPECT_NEAR(folded.breakdown.exposed_by_tag[tag] / Seconds(1), unfolded.breakdown.exposed_by_tag[tag] / Seconds(1),
                kRounding * (unfolded.iteration_time / Seconds(1)))
        << "tag " << tag;
  }
}

TEST(NetworkSymmetry, ContendedDataParallelismFoldsToOneRank) {
  // One node per leaf behind a 4:1 oversubscribed spine, all eight NICs of a node on its leaf:
  // the gradient all-reduces of the eight tensor ranks cross the spine at once, through the
  // leaf's one uplink. Tensor peers (a ring inside each node, one NIC each) and data replicas
  // are all alike, so one rank stands for the 128, and its flow classes load each uplink as
  // the eight flows through it do.
  const std::string scenario = R"(model: llama3-8b
cluster:
  system: dgx-h100
  nodes: 16
  inter_node: {topology: fat-tree, nodes_per_leaf: 1, oversubscription: 4}
parallelism: {tp: 8, zero: 0}
training: {global_batch: 16, seq_len: 4096, overlap_grad_reduce: false}
)";
  const Result folded = run(scenario, true);
  const Result unfolded = run(scenario, false);
  EXPECT_EQ(folded.ranks_simulated, 1);
  EXPECT_EQ(unfolded.ranks_simulated, 128);
  EXPECT_EQ(folded_peers(folded), (std::map<std::string, int>{{"dp", 16}, {"tp", 8}}));
  expect_same_answer(folded, unfolded);
}

TEST(NetworkSymmetry, GpusSharingANicFoldOnlyInPairs) {
  // Four NICs for eight GPUs: GPUs 2i and 2i+1 share NIC i, so a shift by one tensor rank
  // maps NIC 0 onto NIC 0 and onto NIC 1 (not one-to-one) while a shift by two is a symmetry.
  const std::string scenario = R"(model: llama3-8b
cluster:
  gpu: h100-sxm5-80gb
  nodes: 4
  gpus_per_node: 8
  inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}
parallelism: {tp: 8, zero: 1}
training: {global_batch: 16, seq_len: 4096}
)";
  const Result folded = run(scenario, true);
  EXPECT_EQ(folded_peers(folded), (std::map<std::string, int>{{"dp", 4}, {"tp", 4}}));
  EXPECT_EQ(folded.ranks_simulated, 2);
  expect_same_answer(folded, run(scenario, false));
}

TEST(NetworkSymmetry, ReplicasAcrossUnevenLeavesStayUnfolded) {
  // Six nodes on leaves of four: the data-parallel ring's hop from node 3 to node 4 crosses the
  // spine while its image under any shift of the replicas stays on a leaf, so no shift along
  // dp is a symmetry and every replica is simulated.
  const std::string scenario = R"(model: llama3-8b
cluster:
  system: dgx-h100
  nodes: 6
  inter_node: {nodes_per_leaf: 4, oversubscription: 2}
parallelism: {tp: 8, zero: 0}
training: {global_batch: 12, seq_len: 4096, overlap_grad_reduce: false}
)";
  const Result folded = run(scenario, true);
  EXPECT_EQ(folded_peers(folded).count("dp"), 0u);
  EXPECT_EQ(folded.ranks_simulated, 6);
  expect_same_answer(folded, run(scenario, false));
}

// Layouts whose every collective runs on the shared network, folded: each simulates fewer
// ranks than the unfolded run and gives its answer.
struct Layout {
  const char* name;
  const char* scenario;
};

class FoldedLayouts : public testing::TestWithParam<Layout> {};

std::string layout_name(const testing::TestParamInfo<Layout>& info) { return info.param.name; }

TEST_P(FoldedLayouts, FoldFewerRanksToTheSameAnswer) {
  const Result folded = run(GetParam().scenario, true);
  const Result unfolded = run(GetParam().scenario, false);
  EXPECT_LT(folded.ranks_simulated, unfolded.ranks_simulated);
  expect_same_answer(folded, unfolded);
}

INSTANTIATE_TEST_SUITE_P(
    NetworkSymmetry, FoldedLayouts,
    testing::Values(
        // Pipeline transfers, ring attention over context peers and the distributed
        // optimizer's reductions.
        Layout{"PipelineContextData", R"(model: llama3-70b
cluster: {system: dgx-h100, nodes: 8}
parallelism: {tp: 4, pp: 4, cp: 2, zero: 1}
training: {global_batch: 16, seq_len: 8192}
)"},
        // Token all-to-alls over expert groups carved from tensor and data ranks.
        Layout{"ExpertParallel", R"(model: mixtral-8x7b
cluster: {system: dgx-h100, nodes: 4}
parallelism: {tp: 2, pp: 2, ep: 8, zero: 1}
training: {global_batch: 32, seq_len: 4096}
)"},
        // FSDP gathers and reduce-scatters per micro-batch, sharded within groups of 8 and
        // replicated across them (HSDP).
        Layout{"HybridShardedData", R"(model: llama3-8b
cluster: {system: dgx-h100, nodes: 4}
parallelism: {tp: 1, zero: 3, zero_shard: 8}
training: {global_batch: 32, seq_len: 4096}
)"},
        // Interleaved pipeline stages, double binary trees across nodes.
        Layout{"InterleavedWithTrees", R"(model: llama3-8b
cluster: {system: dgx-h100, nodes: 8}
parallelism: {tp: 8, pp: 2, virtual_stages: 2, schedule: interleaved-1f1b}
training: {global_batch: 32, seq_len: 4096}
collectives: {all_reduce: tree}
)"}),
    layout_name);

}  // namespace
}  // namespace paceline
