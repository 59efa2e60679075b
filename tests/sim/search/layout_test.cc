// Tests sim/search/layout.h: the layouts enumerated for tiny clusters, derived by hand, and
// agreement with the scenario format's own rules.
#include "sim/search/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>

#include "base/input_error.h"
#include "sim/search/scenario_source.h"

namespace paceline {
namespace {

// Two layers, two heads, sequences of 8 tokens, on one node of 2 GPUs.
constexpr const char* kTwoGpus = R"(name: tiny
model: {name: tiny, layers: 2, hidden: 64, heads: 2, ffn_hidden: 128, vocab: 128, seq_len: 8}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 2}
training: {global_batch: 2}
)";

TEST(Layout, EnumeratesTwoGpusByHand) {
  const Scenario base = load_scenario({kTwoGpus, "tiny.yaml"});
  const std::vector<Layout> layouts = enumerate_layouts(base);
  // tp 1, pp 1, cp 1 → dp 2: micro_batch 1 (global 2 / dp 2), 3 recompute × 4 ZeRO stages = 12
  // tp 1, pp 1, cp 2 → dp 1: micro_batch 1 or 2, 3 recompute × 4 ZeRO (dp·cp = 2)    = 24
  // tp 1, pp 2       → dp 1: micro_batch 1 or 2, 3 recompute, ZeRO 0 only; v = 1   =  6
  //                          (pp·v ≤ 2 layers leaves no room for v = 2)
  // tp 2             → dp 1: micro_batch 1 or 2, 3 recompute, ZeRO 0, sp off or on  = 12
  EXPECT_EQ(layouts.size(), 12u + 24u + 6u + 12u);
  // The first layouts vary the innermost settings first: ZeRO stage, then recompute.
  Layout first;
  first.dp = 2;
  EXPECT_EQ(layouts[0], first);
  Layout zero_one = first;
  zero_one.zero = 1;
  EXPECT_EQ(layouts[1], zero_one);
  Layout selective = first;
  selective.recompute = Recompute::kSelective;
  EXPECT_EQ(layouts[4], selective);
  // The last: tp 2, micro-batch 2, full recompute, sequence parallel.
  const Layout& last = layouts.back();
  EXPECT_EQ(last.tp, 2);
  EXPECT_EQ(last.micro_batch, 2);
  EXPECT_EQ(last.recompute, Recompute::kFull);
  EXPECT_TRUE(last.sequence_parallel);
  EXPECT_EQ(last.zero, 0);
}

TEST(Layout, VirtualStagesSplitTheLayersEvenly) {
  // 4 layers on 4 GPUs (one node), 8 sequences.
  const Scenario base = load_scenario(
      {R"(model: {name: t, layers: 4, hidden: 64, heads: 4, ffn_hidden: 128, vocab: 128, seq_len: 8}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 4}
training: {global_batch: 8}
)",
       "t.yaml"});
  std::set<std::pair<int, int>> stages;  // (pp, virtual_stages)
  for (const Layout& l : enumerate_layouts(base)) {
    stages.insert({l.pp, l.virtual_stages});
    EXPECT_EQ(l.schedule,
              l.virtual_stages > 1 ? Schedule::kInterleavedOneFOneB : Schedule::kOneFOneB);
  }
  // pp 2: v = 2 (2·2 divides 4 layers); pp 4: v = 1 only (4·2 > 4).
  EXPECT_EQ(stages, (std::set<std::pair<int, int>>{{1, 1}, {2, 1}, {2, 2}, {4, 1}}));
}

TEST(Layout, TensorParallelStaysInANodeOrSpansWholeNodes) {
  // 12 GPUs as 3 nodes of 4, 12 heads: tp 3 and 6 divide the heads and the GPU count but
  // neither divides 4 nor is a multiple of 4; tp 12 spans all three nodes.
  const Scenario base = load_scenario(
      {R"(model: {name: t, layers: 2, hidden: 96, heads: 12, ffn_hidden: 192, vocab: 128, seq_len: 48}
cluster: {gpu: a100-sxm4-80gb, nodes: 3, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 200 Gb/s}}
training: {global_batch: 12}
)",
       "t.yaml"});
  std::set<int> tps;
  for (const Layout& l : enumerate_layouts(base)) tps.insert(l.tp);
  EXPECT_EQ(tps, (std::set<int>{1, 2, 4, 12}));
}

TEST(Layout, MixtureOfExpertsVariesEpAndKeepsSequenceParallel) {
  const Scenario base = load_scenario(
      {R"(model: {name: m, layers: 2, hidden: 64, heads: 4, ffn_hidden: 128, vocab: 128, seq_len: 8,
        moe: {experts: 4, top_k: 2}}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 4}
training: {global_batch: 4}
)",
       "m.yaml"});
  std::set<int> eps;
  for (const Layout& l : enumerate_layouts(base)) {
    eps.insert(l.ep);
    EXPECT_EQ(4 % l.ep, 0);
    EXPECT_EQ((l.tp * l.dp * l.cp) % l.ep, 0);
    if (l.tp > 1) {
      EXPECT_TRUE(l.sequence_parallel);
    }
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));
}

// A tiny MoE model on 4 GPUs whose base has the expert exchanges of `parallelism`: expects each
// of its layouts, read back from its overrides and built by with_layout, to keep
// `setting(parallelism)` as `expected(layout)`, and returns the values expected.
template <typename Value>
std::set<Value> expect_layouts_keep(const std::string& parallelism,
                                    const std::function<Value(const Parallelism&)>& setting,
                                    const std::function<Value(const Layout&)>& expected) {
  const ScenarioSource source{
      R"(model: {name: m, layers: 2, hidden: 64, heads: 4, ffn_hidden: 128, vocab: 128,
        seq_len: 8, moe: {experts: 4, top_k: 2}}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 4}
parallelism: )" +
          parallelism + R"(
training: {global_batch: 4}
)",
      "m.yaml"};
  const Scenario base = load_scenario(source);
  std::set<Value> seen;
  for (const Layout& l : enumerate_layouts(base)) {
    seen.insert(expected(l));
    EXPECT_EQ(setting(load_scenario(source, layout_overrides(l, base)).parallelism), expected(l))
        << to_string(l);
    EXPECT_EQ(setting(with_layout(base, l).parallelism), expected(l)) << to_string(l);
  }
  return seen;
}

TEST(Layout, ExpertExchangeOverlapStaysWhereTheLayoutCanPairPasses) {
  // The base overlaps its all-to-alls; the layouts with experts over several ranks, a 1f1b
  // schedule (interleaved with pipelining), no ZeRO-3 and no full recomputation keep that, the
  // others have nothing to pair.
  const std::set<bool> seen = expect_layouts_keep<bool>(
      "{ep: 2, ep_comm_overlap: true}", [](const Parallelism& p) { return p.ep_comm_overlap; },
      [](const Layout& l) {
        return l.ep > 1 && l.zero < 3 && l.recompute != Recompute::kFull &&
               ((l.schedule == Schedule::kOneFOneB && l.pp == 1) ||
                l.schedule == Schedule::kInterleavedOneFOneB);
      });
  EXPECT_EQ(seen, (std::set<bool>{false, true}));
}

TEST(Layout, DeduplicatedExchangesStayWhereTheLayoutSpreadsExperts) {
  std::set<int> eps;
  expect_layouts_keep<TokenDispatcher>(
      "{ep: 2, ep_dispatcher: deduplicated}", [](const Parallelism& p) { return p.ep_dispatcher; },
      [&](const Layout& l) {
        eps.insert(l.ep);
        return l.ep > 1 ? TokenDispatcher::kDeduplicated : TokenDispatcher::kAllToAll;
      });
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));
}

TEST(Layout, Fp8ParametersStayWhereTheOptimizerIsSharded) {
  const ScenarioSource source{R"(model: {name: g, layers: 2, hidden: 64, heads: 4, ffn_hidden: 128, vocab: 128, seq_len: 8}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 4}
parallelism: {zero: 1}
training: {global_batch: 4, precision: fp8, fp8_param_gather: true}
)",
                              "g.yaml"};
  const Scenario base = load_scenario(source);
  std::set<bool> seen;
  for (const Layout& l : enumerate_layouts(base)) {
    seen.insert(l.zero >= 1);
    EXPECT_EQ(load_scenario(source, layout_overrides(l, base)).training.fp8_param_gather, l.zero >= 1) << to_string(l);
    EXPECT_EQ(with_layout(base, l).training.fp8_param_gather, l.zero >= 1) << to_string(l);
  }
  EXPECT_EQ(seen, (std::set<bool>{false, true}));
}

// The base scenario's framework settings reach every layout they apply to, as the scenario
// reader loads it for simulation and as with_layout() builds it for the bounds.
TEST(Layout, FrameworkSettingsReachTheLayoutsTheyApplyTo) {
  const ScenarioSource source{R"(name: settings
model: {name: g, layers: 4, hidden: 128, heads: 4, kv_heads: 2, ffn_hidden: 256, vocab: 256, seq_len: 16}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 4}
parallelism: {tp: 2, zero: 3, fsdp_prefetch: 2, fsdp_gather: tensor, fsdp_persistence_threshold: 1000,
              fsdp_reuse_distance: 5000, fsdp_gradient_reduce: all_reduce, tp_comm_overlap: true,
              tp_comm_overlap_method: async_tp, tp_implementation: pytorch}
training: {global_batch: 8, recompute: selective-op, fusion: eager}
)",
                              "settings.yaml"};
  const Scenario base = load_scenario(source);
  int overlapped = 0, prefetched = 0;
  std::set<Recompute> recomputes;
  for (const Layout& l : enumerate_layouts(base)) {
    const Scenario read = load_scenario(source, layout_overrides(l, base));
    const Scenario built = with_layout(base, l);
    // The framework's kind of selective recomputation and its kernel fusion stay.
    recomputes.insert(l.recompute);
    EXPECT_EQ(read.training.recompute, l.recompute) << to_string(l);
    EXPECT_EQ(built.training.fusion, Fusion::kEager) << to_string(l);
    EXPECT_EQ(read.training.fusion, Fusion::kEager) << to_string(l);
    EXPECT_EQ(read.parallelism.tp_comm_overlap, l.sequence_parallel) << to_string(l);
    EXPECT_EQ(built.parallelism.tp_comm_overlap, l.sequence_parallel) << to_string(l);
    if (l.sequence_parallel) {
      EXPECT_EQ(read.parallelism.tp_comm_overlap_method, TpOverlapMethod::kAsyncTp) << to_string(l);
      EXPECT_EQ(built.parallelism.tp_comm_overlap_method, TpOverlapMethod::kAsyncTp) << to_string(l);
      EXPECT_EQ(read.parallelism.tp_implementation, TpImplementation::kPytorch) << to_string(l);
      EXPECT_EQ(built.parallelism.tp_implementation, TpImplementation::kPytorch) << to_string(l);
    }
    if (l.zero == 3 && l.pp == 1) {
      EXPECT_EQ(read.parallelism.fsdp_prefetch, 2) << to_string(l);
      EXPECT_EQ(built.parallelism.fsdp_prefetch, 2) << to_string(l);
      for (const Scenario* s : {&read, &built}) {
        EXPECT_EQ(s->parallelism.fsdp_gather, FsdpGather::kTensor) << to_string(l);
        EXPECT_EQ(s->parallelism.fsdp_persistence_threshold, 1000) << to_string(l);
        EXPECT_EQ(s->parallelism.fsdp_reuse_distance, 5000) << to_string(l);
        EXPECT_EQ(s->parallelism.fsdp_gradient_reduce, FsdpGradientReduce::kAllReduce) << to_string(l);
      }
      ++prefetched;
    }
    overlapped += l.sequence_parallel ? 1 : 0;
  }
  EXPECT_GT(overlapped, 0);
  EXPECT_GT(prefetched, 0);
  EXPECT_EQ(recomputes, (std::set<Recompute>{Recompute::kNone, Recompute::kSelectiveOp, Recompute::kFull}));
}

TEST(Layout, Fsdp2ReachesEveryZero3Layout) {
  // PyTorch FSDP2 reaches every ZeRO-3 layout, pipelined or not, read back for simulation and
  // built by with_layout(); the others have the default in both.
  const ScenarioSource source{R"(name: fsdp2
model: {name: g, layers: 4, hidden: 128, heads: 4, kv_heads: 2, ffn_hidden: 256, vocab: 256, seq_len: 16}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 4}
parallelism: {zero: 3, fsdp_gather: per_parameter}
training: {global_batch: 8}
)",
                              "fsdp2.yaml"};
  const Scenario base = load_scenario(source);
  int gathered = 0;
  int pipelined = 0;
  int whole = 0;
  for (const Layout& l : enumerate_layouts(base)) {
    const bool sharded = l.zero == 3;
    const FsdpGather expected = sharded ? FsdpGather::kPerParameter : FsdpGather::kBlock;
    EXPECT_EQ(load_scenario(source, layout_overrides(l, base)).parallelism.fsdp_gather, expected)
        << to_string(l);
    EXPECT_EQ(with_layout(base, l).parallelism.fsdp_gather, expected) << to_string(l);
    if (sharded && l.pp > 1) ++pipelined;
    ++(sharded ? gathered : whole);
  }
  EXPECT_GT(pipelined, 0);
  EXPECT_GT(gathered, pipelined);
  EXPECT_GT(whole, 0);
}

TEST(Layout, HeadParallelContextLayoutsGiveEveryRankWholeHeads) {
  // 4 heads (2 key/value heads) over 8 GPUs with a2a context parallelism: a layout's tp·cp must
  // leave each context rank whole heads, so tp 2 goes with cp 1 or 2 only.
  const ScenarioSource source{R"(name: ulysses
model: {name: g, layers: 4, hidden: 128, heads: 4, kv_heads: 2, ffn_hidden: 256, vocab: 256, seq_len: 16}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {cp: 2, cp_comm: a2a}
training: {global_batch: 8}
)",
                              "ulysses.yaml"};
  const Scenario base = load_scenario(source);
  std::set<std::pair<int, int>> tp_cp;
  for (const Layout& l : enumerate_layouts(base)) {
    tp_cp.emplace(l.tp, l.cp);
    const Scenario read = load_scenario(source, layout_overrides(l, base));
    const ContextComm expected = l.cp > 1 ? ContextComm::kAllToAll : ContextComm::kRing;
    EXPECT_EQ(read.parallelism.cp_comm, expected) << to_string(l);
    EXPECT_EQ(with_layout(base, l).parallelism.cp_comm, expected) << to_string(l);
  }
  EXPECT_TRUE(tp_cp.count({1, 4}));
  EXPECT_TRUE(tp_cp.count({2, 2}));
  EXPECT_FALSE(tp_cp.count({2, 4}));
  EXPECT_FALSE(tp_cp.count({1, 8}));
}

TEST(Layout, ContextExchangesWaitedForWhereIssuedStayWithContextParallelism) {
  // The base's exchanges are waited for where issued; the layouts with context parallelism keep
  // that, those without have no exchange to wait for.
  const ScenarioSource source{R"(name: compiled-ring
model: {name: g, layers: 4, hidden: 128, heads: 4, kv_heads: 2, ffn_hidden: 256, vocab: 256, seq_len: 16}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {cp: 2, cp_comm: all_gather, cp_comm_overlap: false}
training: {global_batch: 8}
)",
                              "compiled-ring.yaml"};
  const Scenario base = load_scenario(source);
  std::set<bool> seen;
  for (const Layout& l : enumerate_layouts(base)) {
    const bool expected = l.cp == 1;
    seen.insert(expected);
    EXPECT_EQ(load_scenario(source, layout_overrides(l, base)).parallelism.cp_comm_overlap, expected) << to_string(l);
    EXPECT_EQ(with_layout(base, l).parallelism.cp_comm_overlap, expected) << to_string(l);
  }
  EXPECT_EQ(seen, (std::set<bool>{false, true}));
}

TEST(Layout, UnfusedAttentionKeepsTheWholeSequenceOnEachRank) {
  const Scenario base = load_scenario({R"(name: tiny
model: {name: tiny, layers: 2, hidden: 64, heads: 2, ffn_hidden: 128, vocab: 128, seq_len: 8}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 2}
training: {global_batch: 2, attention: unfused}
)",
                                       "unfused.yaml"});
  const std::vector<Layout> layouts = enumerate_layouts(base);
  EXPECT_FALSE(layouts.empty());
  for (const Layout& l : layouts) EXPECT_EQ(l.cp, 1) << to_string(l);
}

// A grid wider than the search space, loaded through the scenario reader: the valid points
// that belong to the search space are exactly the enumerated layouts, and each reads back as
// with_layout() builds it.
TEST(Layout, EnumerationAgreesWithTheScenarioReader) {
  const ScenarioSource source{R"(name: grid
model: {name: g, layers: 4, hidden: 128, heads: 4, kv_heads: 2, ffn_hidden: 256, vocab: 256, seq_len: 16}
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 200 Gb/s}}
training: {global_batch: 8}
)",
                              "grid.yaml"};
  const Scenario base = load_scenario(source);
  const std::vector<Layout> layouts = enumerate_layouts(base);
  size_t valid = 0;
  for (const int tp : {1, 2, 4, 8}) {
    for (const int pp : {1, 2, 4, 8}) {
      for (const int cp : {1, 2, 4, 8}) {
        for (const int v : {1, 2, 3}) {
          for (const int mb : {1, 2, 4, 8}) {
            for (const bool sp : {false, true}) {
              if (sp && tp == 1) continue;  // the same layout as sp off
              Layout l;
              l.tp = tp;
              l.pp = pp;
              l.cp = cp;
              l.dp = 8 / std::min(8, tp * pp * cp);
              l.virtual_stages = v;
              l.schedule = v > 1 ? Schedule::kInterleavedOneFOneB : Schedule::kOneFOneB;
              l.micro_batch = mb;
              l.sequence_parallel = sp;
              Scenario read;
              try {
                read = load_scenario(source, layout_overrides(l, base));
              } catch (const InputError&) {
                EXPECT_EQ(std::find(layouts.begin(), layouts.end(), l), layouts.end())
                    << to_string(l);
                continue;
              }
              // Interleaving is searched only with equal chunks (Megatron-LM's rule).
              if (v > 1 && base.model.layers % (pp * v) != 0) continue;
              ++valid;
              EXPECT_NE(std::find(layouts.begin(), layouts.end(), l), layouts.end())
                  << to_string(l);
              const Scenario built = with_layout(base, l);
              EXPECT_EQ(read.parallelism.dp, built.parallelism.dp) << to_string(l);
              EXPECT_EQ(read.parallelism.zero_shard, built.parallelism.zero_shard) << to_string(l);
              EXPECT_EQ(read.parallelism.layers_per_stage, built.parallelism.layers_per_stage)
                  << to_string(l);
              EXPECT_EQ(read.parallelism.sequence_parallel, built.parallelism.sequence_parallel)
                  << to_string(l);
              EXPECT_EQ(read.training.micro_batch, built.training.micro_batch) << to_string(l);
            }
          }
        }
      }
    }
  }
  // Each valid grid point appears with 3 recompute settings, and 4 ZeRO stages when dp·cp > 1.
  size_t expected = 0;
  for (const Layout& l : layouts)
    expected += (l.recompute == Recompute::kNone && l.zero == 0) ? 1 : 0;
  EXPECT_EQ(valid, expected);
  EXPECT_GT(valid, 0u);
}

}  // namespace
}  // namespace paceline
