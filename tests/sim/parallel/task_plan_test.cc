// Tests sim/parallel/task_plan.h: fusing compute runs keeps every op, splits at collectives
// and prices each op once.
#include "sim/parallel/task_plan.h"

#include <gtest/gtest.h>

#include "base/yaml_reader.h"
#include "models/model_catalog.h"

namespace paceline {
namespace {

struct Fixture {
  ClusterSpec cluster;
  Parallelism parallelism;
  Fixture() {
    const YamlDocument doc = load_yaml_text("gpu: h100-sxm5-80gb\ngpus_per_node: 8\n", "c.yaml");
    YamlMap map(doc.root, doc.file, "cluster");
    cluster = read_cluster(map);
    parallelism.tp = 4;
    parallelism.dp = 2;
    parallelism.zero_shard = 2;
  }
};

// The fixture's cluster priced for its parallelism.
struct Pricing {
  explicit Pricing(const Fixture& f)
      : layout(f.parallelism, 8), timer(f.cluster.gpu), topology(f.cluster), collectives(f.cluster, topology),
        pricer(timer, collectives, layout) {}
  RankLayout layout;
  OpTimer timer;
  Topology topology;
  CollectiveModel collectives;
  OpPricer pricer;
};

// The fixture's cluster priced for one GPU.
struct OneGpu {
  Fixture f = [] {
    Fixture fixture;
    fixture.parallelism.tp = 1;
    return fixture;
  }();
  Pricing priced{f};
};

TEST(TaskPlan, EveryOpOfThePassAppearsOnceAndDurationsAdd) {
  Fixture f;
  const Pricing priced(f);
  const OpPricer& pricer = priced.pricer;
  const ModelSpec model = resolve_model("llama3-8b", default_model_catalog(), {});
  LayerShard shard;
  shard.seq_len = 4096;
  shard.tp = 4;
  shard.sequence_parallel = true;
  const LayerGraph graph = build_transformer_layer(model, shard, false);
  const TaskPlan plan = plan_pass(graph, PassKind::kForward, pricer, "layer.forward");
  size_t ops = 0;
  SimTime total;
  for (const TaskTemplate& t : plan.tasks) {
    ops += t.num_ops;
    SimTime sum;
    for (uint32_t i = t.first_op; i < t.first_op + t.num_ops; ++i) sum += to_sim_time(plan.ops[i].duration);
    EXPECT_EQ(t.duration, sum);
    total += t.duration;
  }
  EXPECT_EQ(ops, plan.ops.size());
  // Forward with SP: norm, gather, QKV, rotary, attention, proj, reduce-scatter, residual,
  // norm, gather, fc1, act, fc2, reduce-scatter, residual. Collectives stand alone, so the
  // compute runs between them become 5 tasks and the 4 collectives 4 more.
  int collectives_seen = 0;
  for (const TaskTemplate& t : plan.tasks) collectives_seen += t.stream != StreamKind::kCompute;
  EXPECT_EQ(collectives_seen, 4);
  EXPECT_EQ(plan.tasks.size(), 9u);
  EXPECT_GT(total, SimTime::zero());
}

TEST(TaskPlan, WithoutCollectivesAForwardPassIsOneTask) {
  const OneGpu one;
  const OpPricer& pricer = one.priced.pricer;
  const ModelSpec model = resolve_model("llama3-8b", default_model_catalog(), {});
  LayerShard shard;
  shard.seq_len = 4096;
  const LayerGraph graph = build_transformer_layer(model, shard, false);
  const TaskPlan plan = plan_pass(graph, PassKind::kForward, pricer, "layer.forward");
  ASSERT_EQ(plan.tasks.size(), 1u);
  EXPECT_TRUE(plan.tasks[0].entry);
  EXPECT_TRUE(plan.tasks[0].exit);
  // It keeps what the block's forward ops keep for backward.
  EXPECT_EQ(plan.tasks[0].alloc_bytes, static_cast<int64_t>(graph.saved_activations() / Bytes(1)));
}

TEST(TaskPlan, ABlocksPassesFreeEveryByteTheyKeep) {
  // Forward and recomputation keep bytes; the backward passes free them: over a block's three
  // passes they balance, whatever is recomputed (the holders of discarded outputs included), on
  // one GPU and split over tensor and context parallelism.
  const OneGpu one;
  const ModelSpec m = resolve_model("deepseek-v3", default_model_catalog(), {});
  LayerShard shard;
  shard.seq_len = 4096;
  shard.ep = 64;
  shard.fp8 = true;
  const auto balance = [&](const LayerGraph& graph) {
    int64_t kept = 0;
    for (const PassKind pass :
         {PassKind::kForward, PassKind::kBackwardInput, PassKind::kBackwardWeight}) {
      for (const TaskTemplate& t : plan_pass(graph, pass, one.priced.pricer, "layer").tasks) {
        kept += t.alloc_bytes - t.free_bytes;
      }
    }
    return kept;
  };
  LayerShard split = shard;
  split.seq_len = 8192;
  split.tp = 2;
  split.sequence_parallel = true;
  split.cp = 2;
  const LayerShard whole = shard;
  for (const auto& [recompute, layout] :
       {std::pair{Recompute::kNone, whole}, std::pair{Recompute::kSelective, whole},
        std::pair{Recompute::kSelective, split}, std::pair{Recompute::kSelectiveOp, whole},
        std::pair{Recompute::kFull, whole}}) {
    shard = layout;
    shard.recompute = recompute;
    for (const RecomputeModules modules :
         {RecomputeModules{RecomputeModule::kCoreAttention, RecomputeModule::kMoeActivation,
                           RecomputeModule::kLayerNorm, RecomputeModule::kLatentUpProjection},
          RecomputeModules{RecomputeModule::kMlp, RecomputeModule::kMoe}}) {
      shard.recompute_modules = modules;
      for (const bool moe : {false, true}) {
        EXPECT_EQ(balance(build_transformer_layer(m, shard, moe)), 0)
            << static_cast<int>(recompute) << " " << moe;
      }
    }
  }
}

OpId op_named(const LayerGraph& g, const std::string& name) {
  for (OpId id = 0; id < g.num_ops(); ++id) {
    if (g.op(id).name == name) return id;
  }
  ADD_FAILURE() << "no op " << name;
  return 0;
}

TEST(TaskPlan, ATaskReservesForItsTransientBuffersWhatItsMostReservingOpDoes) {
  // The eager loss's backward strands the 16-bit logits beside 8 bytes per logit of fp32
  // buffers; the output GEMM's input gradient, fused onto its task, asks for less. The task's
  // transient is its ops' largest, and with what it strands it reserves exactly what the op
  // reserving the most does.
  const OneGpu one;
  const ModelSpec m = resolve_model("llama3-8b", default_model_catalog(), {});
  LayerShard shard;
  shard.seq_len = 4096;
  shard.cross_entropy = Fusion::kEager;
  const LayerGraph head = build_output_head(m, shard);
  const TaskPlan plan = plan_pass(head, PassKind::kBackward, one.priced.pricer, "head.backward");
  std::vector<int64_t> most_reserved(plan.tasks.size(), 0);
  for (OpId id = 0; id < head.num_ops(); ++id) {
    if (plan.op_task[id] == kNoId) continue;
    const Op& op = head.op(id);
    int64_t& most = most_reserved[plan.op_task[id]];
    most = std::max(most, static_cast<int64_t>((op.transient + op.stranded) / Bytes(1)));
  }
  const uint32_t loss = plan.op_task[op_named(head, "head.cross_entropy.bwd")];
  const int64_t logits = int64_t{4096} * m.vocab;
  EXPECT_EQ(plan.tasks[loss].transient_bytes, 8 * logits);
  EXPECT_EQ(plan.tasks[loss].stranded_bytes, 2 * logits);
  for (uint32_t i = 0; i < plan.tasks.size(); ++i) {
    EXPECT_EQ(plan.tasks[i].transient_bytes + plan.tasks[i].stranded_bytes, most_reserved[i]) << i;
  }
}

// Whether task `later` of `plan` waits, directly or through other tasks, for task `earlier`.
bool task_waits_for(const TaskPlan& plan, uint32_t later, uint32_t earlier) {
  for (const uint32_t d : plan.tasks[later].deps) {
    if (d == earlier || task_waits_for(plan, d, earlier)) return true;
  }
  return false;
}

TEST(TaskPlan, TheDispatchGradientWaitsForTheExpertWeightGradientsOnlyInTheirPass) {
  Fixture f;
  f.parallelism.tp = 1;
  f.parallelism.dp = 8;
  f.parallelism.ep = 8;
  f.parallelism.zero_shard = 1;
  const Pricing priced(f);
  const OpPricer& pricer = priced.pricer;
  const ModelSpec model = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard shard;
  shard.seq_len = 4096;
  shard.ep = 8;
  const LayerGraph graph = build_transformer_layer(model, shard, true);
  const OpId dispatch = op_named(graph, "moe.dispatch.bwd");
  const OpId wgrad = op_named(graph, "moe.expert_fc1.wgrad");
  const TaskPlan whole = plan_pass(graph, PassKind::kBackward, pricer, "layer.backward");
  EXPECT_TRUE(task_waits_for(whole, whole.op_task[dispatch], whole.op_task[wgrad]));
  // Zero-bubble's input pass leaves the weight gradients to a pass of their own: the exchange
  // goes out after the input gradient alone.
  const TaskPlan input = plan_pass(graph, PassKind::kBackwardInput, pricer, "layer.backward_input");
  ASSERT_NE(input.op_task[dispatch], kNoId);
  EXPECT_EQ(input.op_task[wgrad], kNoId);
  EXPECT_TRUE(input.tasks[input.op_task[dispatch]].external_deps.empty());
}

ClusterSpec cluster_from_text(const std::string& text) {
  const YamlDocument doc = load_yaml_text(text, "c.yaml");
  YamlMap map(doc.root, doc.file, "cluster");
  return read_cluster(map);
}

// Two H100 nodes of 8 GPUs with `nics` NICs each.
ClusterSpec cluster_with_nics(int nics) {
  return cluster_from_text(
      "gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\ninter_node: {nics_per_node: " +
      std::to_string(nics) + ", nic_bandwidth: 400 Gb/s}\n");
}

TEST(SharingNics, GroupsBehindOneNicRunTogether) {
  // tp 2, dp 8 on two nodes of 8 GPUs: data-parallel groups {0, 2, .., 14} and {1, 3, .., 15}.
  // With one NIC per node both send through it; with a NIC per GPU each has its own.
  Parallelism parallelism;
  parallelism.tp = 2;
  parallelism.dp = 8;
  parallelism.zero_shard = 8;
  const RankLayout layout(parallelism, 8);
  const std::vector<int> group = layout.placement(GroupKind::kData);
  const ClusterSpec one_nic = cluster_with_nics(1);
  const Topology shared(one_nic);
  const std::vector<std::vector<int>> together = sharing_nics(layout, shared, GroupKind::kData, group);
  ASSERT_EQ(together.size(), 2u);
  EXPECT_EQ(together[0], group);
  EXPECT_EQ(together[1], (std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15}));
  // Together they take about twice as long through the NIC as one alone.
  const CollectiveModel collectives(one_nic, shared);
  const Seconds alone = collectives.time(Collective::kAllReduce, GiB(1), group);
  const Seconds both = collectives.time(Collective::kAllReduce, GiB(1), together);
  EXPECT_NEAR(both / alone, 2.0, 0.05);
  const ClusterSpec nic_per_gpu = cluster_with_nics(8);
  EXPECT_EQ(sharing_nics(layout, Topology(nic_per_gpu), GroupKind::kData, group).size(), 1u);
  // Tensor-parallel groups stay in a node.
  EXPECT_EQ(sharing_nics(layout, shared, GroupKind::kTensor, layout.placement(GroupKind::kTensor)).size(), 1u);
}

TEST(PipelineLinksSharingNics, AStagesLinksBehindOneNicRunTogether) {
  // tp 8, pp 2 on two nodes of 8 GPUs: stage 0 is node 0, and its 8 GPUs each pass their
  // micro-batch to their peer on node 1 at once. With 2 NICs a node, 4 links share each.
  Parallelism parallelism;
  parallelism.tp = 8;
  parallelism.pp = 2;
  const RankLayout layout(parallelism, 8);
  const ClusterSpec two_nics = cluster_with_nics(2);
  const Topology shared(two_nics);
  const std::vector<std::vector<int>> links = pipeline_links_sharing_nics(layout, shared, 0);
  ASSERT_EQ(links.size(), 4u);
  EXPECT_EQ(links[0], (std::vector<int>{0, 8}));
  EXPECT_EQ(links[1], (std::vector<int>{1, 9}));
  EXPECT_EQ(links[3], (std::vector<int>{3, 11}));
  // The link back from the last stage to the first: the same pairs.
  EXPECT_EQ(pipeline_links_sharing_nics(layout, shared, 1).size(), 4u);
  const CollectiveModel collectives(two_nics, shared);
  const Seconds alone = collectives.time(Collective::kSendRecv, MiB(64), links.front());
  const Seconds together = collectives.time(Collective::kSendRecv, MiB(64), links);
  EXPECT_NEAR(together / alone, 4.0, 0.05);
  EXPECT_EQ(pipeline_links_sharing_nics(layout, Topology(cluster_with_nics(8)), 0).size(), 1u);
  // tp 1, pp 4, dp 3 on 3 nodes of 4 GPUs with a NIC each: stage s is ranks 3s..3s+2. Rank 3's
  // link sends from node 0 to node 1, rank 5's from node 1 to node 2: they share no NIC (a send
  // leaves its sender's NIC and enters its receiver's). Ranks 6 and 7 both send from node 1 to
  // node 2.
  const ClusterSpec three_nodes = cluster_from_text(
      "gpu: h100-sxm5-80gb\nnodes: 3\ngpus_per_node: 4\ninter_node: {nics_per_node: 1, "
      "nic_bandwidth: 400 Gb/s}\n");
  Parallelism columns;
  columns.pp = 4;
  columns.dp = 3;
  const RankLayout straddling(columns, 4);
  const Topology one_nic(three_nodes);
  EXPECT_EQ(pipeline_links_sharing_nics(straddling, one_nic, 1),
            (std::vector<std::vector<int>>{{3, 6}}));
  EXPECT_EQ(pipeline_links_sharing_nics(straddling, one_nic, 2),
            (std::vector<std::vector<int>>{{6, 9}, {7, 10}}));
  // Rank 0's link stays in node 0.
  EXPECT_EQ(pipeline_links_sharing_nics(straddling, one_nic, 0),
            (std::vector<std::vector<int>>{{0, 3}}));
  // Stages inside one node pass on over NVLink.
  parallelism.tp = 4;
  EXPECT_EQ(pipeline_links_sharing_nics(RankLayout(parallelism, 8), shared, 0).size(), 1u);
}

TEST(StagesSharingANic, CountsTheStagesWhoseGroupsLeaveThroughOneNic) {
  // pp 8, dp 2 on two nodes of 8 GPUs, one NIC each. Stages innermost, each node holds one
  // replica's 8 stages, and every data-parallel pair {s, 8 + s} leaves through both NICs.
  Parallelism parallelism;
  parallelism.pp = 8;
  parallelism.dp = 2;
  parallelism.rank_order = {RankDim::kPipeline, RankDim::kContext, RankDim::kTensor, RankDim::kData};
  const RankLayout stages_inside(parallelism, 8);
  EXPECT_EQ(stages_sharing_a_nic(stages_inside, Topology(cluster_with_nics(1)), GroupKind::kData), 8);
  EXPECT_EQ(stages_sharing_a_nic(stages_inside, Topology(cluster_with_nics(2)), GroupKind::kData), 4);
  EXPECT_EQ(stages_sharing_a_nic(stages_inside, Topology(cluster_with_nics(8)), GroupKind::kData), 1);
  EXPECT_EQ(stages_sharing_a_nic(stages_inside, Topology(cluster_with_nics(1)), GroupKind::kTensor), 1);
  // Megatron's order keeps each stage's data-parallel pair in one node: nothing leaves.
  parallelism.rank_order = {RankDim::kTensor, RankDim::kContext, RankDim::kData, RankDim::kPipeline};
  EXPECT_EQ(stages_sharing_a_nic(RankLayout(parallelism, 8), Topology(cluster_with_nics(1)), GroupKind::kData), 1);
}

}  // namespace
}  // namespace paceline
