// Tests sim/network/network_model.h through whole simulations: `full` fidelity on the shared
// network against `symmetric` with collectives charged in isolation.
#include "sim/network/network_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>

#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

Result run(const std::string& text) {
  return simulate(std::make_shared<const Scenario>(load_scenario_text(text, "s.yaml"))).result;
}

// Tolerance of the agreement: in `full` fidelity concurrent collectives of one rank (a data-
// parallel bucket beside a pipeline transfer on the same NIC) share links, which `symmetric`
// charges each alone; here that costs under 1% of the step.
constexpr double kAgreement = 0.01;

TEST(NetworkModel, FullFidelityAgreesWithSymmetricWithoutContention) {
  const std::string scenario = R"(model: llama3-8b
cluster: {system: dgx-h100, nodes: 4}
parallelism: {tp: 4, pp: 2, zero: 1}
training: {global_batch: 32, seq_len: 4096}
)";
  const Result symmetric = run(scenario);
  const Result full = run(scenario + "simulation: {fidelity: full, fold_symmetric_peers: false}\n");
  EXPECT_EQ(full.ranks_simulated, 32);
  EXPECT_NEAR(full.iteration_time / symmetric.iteration_time, 1.0, kAgreement);
}

TEST(NetworkModel, DeduplicatedExpertExchangesAgreeAcrossFidelities) {
  // Qwen3-30B-A3B's experts over 16 GPUs of 2 nodes. Deduplicated, a token crosses to the other
  // node once for its 8 experts, not for each of the about 4 there; both fidelities see it. The
  // gradients are reduced after the backward, where only full fidelity would share the NICs
  // with the exchanges.
  const std::string scenario =
      R"(model: {name: qwen3-4-layers, layers: 4, hidden: 2048, heads: 32, kv_heads: 4,
  head_dim: 128, ffn_hidden: 6144, vocab: 151936, seq_len: 4096, activation: swiglu, norm: rmsnorm,
  moe: {experts: 128, top_k: 8, ffn_hidden: 768}}
cluster: {system: dgx-h100, nodes: 2}
parallelism: {ep: 16}
training: {global_batch: 32, micro_batch: 1, overlap_grad_reduce: false}
)";
  const std::string deduplicated = R"(parallelism: {ep: 16, ep_dispatcher: deduplicated})";
  const auto with = [&](const std::string& parallelism) {
    std::string text = scenario;
    text.replace(text.find("parallelism: {ep: 16}"), 21, parallelism);
    return text;
  };
  const Result copies = run(scenario);
  const Result symmetric = run(with(deduplicated));
  const Result full =
      run(with(deduplicated) + "simulation: {fidelity: full, fold_symmetric_peers: false}\n");
  EXPECT_EQ(full.ranks_simulated, 16);
  EXPECT_NEAR(full.iteration_time / symmetric.iteration_time, 1.0, 1e-9);
  const auto expert_exchanges = [](const Result& r) {
    return r.breakdown.exposed_by_tag[static_cast<int>(ActivityTag::kExpertComm)];
  };
  // The NICs carry 0.997 of a copy of the tokens instead of 4 copies (collective_model_test), 0.249
  // of the time, and each exchange keeps its latency, one NVLink step more deduplicated: 0.259.
  EXPECT_NEAR(expert_exchanges(symmetric) / expert_exchanges(copies), 0.259, 0.005);
}

TEST(NetworkModel, SymmetricChargesGroupsSharingANicTogether) {
  // One NIC per node of 8: the four data-parallel groups of tp 2 (and the eight of tp 8) leave
  // each node through it at once, as full fidelity shares it.
  for (const char* tp : {"2", "8"}) {
    const std::string scenario = std::string(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 4, gpus_per_node: 8, inter_node: {nics_per_node: 1, nic_bandwidth: 400 Gb/s}}
parallelism: {tp: )") + tp + R"(}
training: {global_batch: 32, seq_len: 4096, micro_batch: 1}
)";
    const Result symmetric = run(scenario);
    const Result full = run(scenario + "simulation: {fidelity: full}\n");
    EXPECT_NEAR(full.iteration_time / symmetric.iteration_time, 1.0, kAgreement) << "tp " << tp;
  }
  // Tied embeddings over 4 stages: each first-stage GPU exchanges with its last-stage peer once,
  // beside the three other columns behind the NIC (the middle stages' GPUs join no exchange).
  // The pipeline's transfers cross the one NIC too, all of a stage's at once.
  const std::string tied = R"(model: gpt-3.6b
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {tp: 1, pp: 4}
training: {global_batch: 16, seq_len: 2048, micro_batch: 1}
)";
  const Result symmetric = run(tied);
  const Result full = run(tied + "simulation: {fidelity: full}\n");
  EXPECT_NEAR(full.iteration_time / symmetric.iteration_time, 1.0, kAgreement) << "tied embeddings";
  // tp 8 over 2 stages, one a node, and 2 NICs a node: four GPUs pass their micro-batches on
  // through each NIC at once (without sharing, symmetric fidelity took 136 ms, full 183 ms).
  const std::string stages =
      R"(model: {name: probe, layers: 4, hidden: 8192, heads: 64, vocab: 32000,
  seq_len: 4096, ffn_hidden: 32768, activation: gelu}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 2, nic_bandwidth: 400 Gb/s}}
parallelism: {tp: 8, pp: 2, sequence_parallel: false}
training: {global_batch: 8, micro_batch: 1, recompute: none}
)";
  const Result stages_symmetric = run(stages);
  const Result stages_full = run(stages + "simulation: {fidelity: full}\n");
  EXPECT_NEAR(stages_full.iteration_time / stages_symmetric.iteration_time, 1.0, 1e-6)
      << "pipeline";
  // Stages that straddle nodes (tp 1, pp 4, dp 3 on 3 nodes of 4, a NIC each): of a stage's links,
  // those that send through the same NIC share it, not those whose send enters a NIC another's
  // leaves. Symmetric fidelity shares them all the time; under full fidelity the data-parallel
  // ranks of a stage drift apart (one of stage 2's three sends within its node), and the
  // non-interleaved schedule's transfers, waited for where they are issued, and the reductions
  // after each stage's last send then share less of it: full is 3% faster.
  const std::string straddling =
      R"(model: {name: m, layers: 8, hidden: 4096, heads: 32, ffn_hidden: 8192,
  vocab: 32000, seq_len: 4096}
cluster: {gpu: h100-sxm5-80gb, nodes: 3, gpus_per_node: 4, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {tp: 1, pp: 4, dp: 3}
training: {global_batch: 48, micro_batch: 8, recompute: none}
)";
  EXPECT_NEAR(run(straddling + "simulation: {fidelity: full}\n").iteration_time /
                  run(straddling).iteration_time,
              0.970, 0.005)
      << "straddling stages";
}

TEST(NetworkModel, SymmetricSaysWhereStagesShareANic) {
  // Stages innermost: each node holds a replica's 8 stages, whose data-parallel reductions all
  // leave through its one NIC. Symmetric fidelity charges each stage's apart and says so; full
  // fidelity shares the NIC among them and takes 27% longer.
  constexpr std::string_view kStagesInside = ", rank_order: pp-cp-tp-dp";
  const std::string scenario = std::string(R"(model: llama3-8b
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {pp: 8, dp: 2)") + std::string(kStagesInside) + R"(}
training: {global_batch: 16, seq_len: 4096, micro_batch: 1}
)";
  const Result symmetric = run(scenario);
  const Result full = run(scenario + "simulation: {fidelity: full}\n");
  ASSERT_EQ(symmetric.warnings.size(), 1u);
  EXPECT_EQ(symmetric.warnings[0].rfind("the data-parallel groups of 8 pipeline stages leave their NVLink domains "
                                        "through one NIC (parallelism.rank_order = pp-cp-tp-dp",
                                        0),
            0u);
  EXPECT_TRUE(full.warnings.empty());
  EXPECT_NEAR(full.iteration_time / symmetric.iteration_time, 1.27, 0.03);
  // Sharded optimizer states: the reductions run over the shard groups, which the warning names.
  const std::string zero1 = std::string(scenario).replace(scenario.find("dp: 2"), 5, "dp: 2, zero: 1");
  ASSERT_EQ(run(zero1).warnings.size(), 1u);
  EXPECT_NE(run(zero1).warnings[0].find("data-parallel shard groups"), std::string::npos);
  // Megatron's order keeps each stage's data-parallel pair in one node: nothing to say.
  std::string megatron_order = scenario;
  megatron_order.erase(scenario.find(kStagesInside), kStagesInside.size());
  EXPECT_TRUE(run(megatron_order).warnings.empty());
  // Interleaved over 2 nodes of 2 stages, one NIC each: node 0 sends stage 1's activations on to
  // stage 2 and stage 0's gradients back to stage 3 through its NIC. Here they rarely meet (full
  // fidelity takes 0.1% longer); at 100 Gb/s with tp 4 and a smaller model, 9% longer.
  const Result interleaved = run(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {tp: 4, pp: 4, virtual_stages: 2}
training: {global_batch: 16, seq_len: 4096, micro_batch: 1}
)");
  ASSERT_EQ(interleaved.warnings.size(), 1u);
  EXPECT_EQ(interleaved.warnings[0].rfind(
                "the pipeline transfers of 2 stages leave their NVLink domains through one "
                "NIC (parallelism.rank_order = tp-cp-dp-pp",
                0),
            0u);
}

// Llama 3 8B data-parallel over 16 DGX H100 nodes, each node a leaf (rail-optimized, as DGX
// H100's fabric is, unless `fat_tree`) whose uplinks are oversubscribed `factor` to 1; `rest`
// ends the scenario (its training and simulation).
Result one_node_a_leaf(const std::string& factor, const std::string& rest, bool fat_tree = false) {
  return run(R"(model: llama3-8b
cluster:
  system: dgx-h100
  nodes: 16
  inter_node: {nodes_per_leaf: 1, oversubscription: )" +
             factor + (fat_tree ? ", topology: fat-tree" : "") + R"(}
parallelism: {tp: 8, zero: 0}
)" + rest);
}

TEST(NetworkModel, AnOversubscribedSpineSlowsCrossLeafDataParallelism) {
  // 4:1 oversubscription squeezes the gradient all-reduce that crosses the spine; full fidelity
  // sees the shared uplinks.
  const std::string rest =
      "training: {global_batch: 16, seq_len: 4096, overlap_grad_reduce: false}\nsimulation: "
      "{fidelity: full}\n";
  const Result blocking = one_node_a_leaf("4", rest);
  const Result open = one_node_a_leaf("1", rest);
  EXPECT_GT(blocking.breakdown.exposed_by_tag[static_cast<int>(ActivityTag::kDataComm)],
            open.breakdown.exposed_by_tag[static_cast<int>(ActivityTag::kDataComm)] * 1.5);
}

TEST(NetworkModel, SymmetricSaysWhereGroupsShareAnOversubscribedUplink) {
  // On a fat-tree each node's one leaf carries all eight data-parallel groups up the spine:
  // symmetric fidelity prices each group alone on the uplink, and says so; full fidelity shares
  // it. On rails each group has its own leaves' uplinks, so both agree and there is nothing to say.
  const std::string training = "training: {global_batch: 16, seq_len: 4096}\n";
  const std::string full = training + "simulation: {fidelity: full}\n";
  const Result shared = one_node_a_leaf("4", training, /*fat_tree=*/true);
  ASSERT_EQ(shared.warnings.size(), 1u);
  EXPECT_EQ(shared.warnings[0].rfind(
                "the data-parallel groups send over leaf uplinks that other groups of their kind "
                "send over too, oversubscribed (cluster.inter_node.oversubscription = 4, "
                "nodes_per_leaf = 1)",
                0),
            0u)
      << shared.warnings[0];
  EXPECT_GT(one_node_a_leaf("4", full, /*fat_tree=*/true).iteration_time,
            shared.iteration_time * 1.5);
  EXPECT_TRUE(one_node_a_leaf("4", full, /*fat_tree=*/true).warnings.empty());
  EXPECT_TRUE(one_node_a_leaf("1", training, /*fat_tree=*/true).warnings.empty());
  const Result rails = one_node_a_leaf("4", training);
  EXPECT_TRUE(rails.warnings.empty()) << rails.warnings[0];
  EXPECT_NEAR(one_node_a_leaf("4", full).iteration_time / rails.iteration_time, 1.0, 1e-3);
}

TEST(NetworkModel, PhasesEndingTogetherEachStartTheirNext) {
  // Hierarchical all-reduces run in three phases; two phases of different collectives ending at
  // the same instant once made the first one's next phase take the second one's transfer id,
  // and the run stopped with "a finished transfer nobody started".
  const Result r = run(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 3, gpus_per_node: 8, nvls: true,
  inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s, topology: fat-tree, nodes_per_leaf: 5, oversubscription: 2}}
parallelism: {tp: 4, dp: 6, zero: 1, zero_shard: 2}
collectives: {all_reduce: hierarchical}
training: {global_batch: 12, seq_len: 1024, recompute: full}
simulation: {fidelity: full, fold_symmetric_peers: false}
)");
  EXPECT_GT(r.iteration_time, Seconds(0));
  EXPECT_GT(r.breakdown.exposed_by_tag[static_cast<int>(ActivityTag::kDataComm)], Seconds(0));
}

}  // namespace
}  // namespace paceline
