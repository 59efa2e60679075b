// Tests sim/search/search.h: pruning keeps the exhaustive ranking, the report is the same on
// any thread count, and the counts add up.
#include "sim/search/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "sim/engine/engine.h"
#include "sim/report/result.h"
#include "sim/scenario/scenario.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// A 2.6 B-parameter dense model on 4 GPUs of one node: sharding, recomputation and the
// micro-batch all matter for memory (42 GB of weights, gradients and Adam states unsharded).
constexpr const char* kFourGpus = R"(name: four
model: {name: m, layers: 4, hidden: 8192, heads: 64, ffn_hidden: 32768, vocab: 32000, seq_len: 4096, dropout: 0.1}
cluster: {gpu: a100-sxm4-40gb, nodes: 1, gpus_per_node: 4}
training: {global_batch: 8}
)";

TEST(Search, PruningKeepsTheExhaustiveRanking) {
  const ScenarioSource source{kFourGpus, "four.yaml"};
  const SearchReport pruned = search_layouts(source, {.top = 5, .threads = 2});
  const SearchReport exhaustive = search_layouts(source, {.top = 5, .threads = 2, .prune = false});
  EXPECT_EQ(to_json(pruned, false).at("layouts").dump(),
            to_json(exhaustive, false).at("layouts").dump());
  EXPECT_EQ(pruned.top.size(), 5u);
  // The exhaustive search simulates every layout.
  EXPECT_EQ(exhaustive.simulated, exhaustive.considered);
  EXPECT_LT(pruned.simulated, exhaustive.simulated);
  EXPECT_LE(pruned.fit, exhaustive.fit);
  EXPECT_GT(pruned.pruned_memory, 0u);
  EXPECT_GT(pruned.pruned_bound, 0u);
  // Every considered layout is accounted for exactly once.
  EXPECT_EQ(pruned.considered,
            pruned.pruned_memory + pruned.pruned_bound + pruned.simulated);
  // Best first.
  for (size_t i = 1; i < pruned.top.size(); ++i)
    EXPECT_GE(pruned.top[i - 1].tokens_per_s, pruned.top[i].tokens_per_s);
  for (const RankedLayout& r : pruned.top) EXPECT_TRUE(r.fits);
}

TEST(Search, ZeroTwoUnderPipeliningSimulatesAsZeroOne) {
  // The search ranks such a layout by its ZeRO-1 twin's simulation: they must give the same
  // result, dense and MoE, with interleaving, zero-bubble, context parallelism, overlapped expert
  // exchanges, HSDP, fp8 weights and gathers after the step.
  const std::string dense = R"(name: dense
model: {name: m, layers: 4, hidden: 2048, heads: 16, ffn_hidden: 8192, vocab: 32000, seq_len: 2048}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}}
)";
  const std::string moe = R"(name: moe
model: {name: moe, layers: 4, hidden: 1024, heads: 8, kv_heads: 2, ffn_hidden: 3584, vocab: 32000, seq_len: 1024,
        activation: swiglu, norm: rmsnorm, position: rope, moe: {experts: 8, top_k: 2}}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}}
)";
  const std::vector<std::string> scenarios = {
      dense + "parallelism: {pp: 2, tp: 2}\ntraining: {global_batch: 16}\n",
      dense + "parallelism: {pp: 2, schedule: interleaved-1f1b, virtual_stages: 2}\ntraining: {global_batch: 16}\n",
      dense + "parallelism: {pp: 2, zero_shard: 2}\ntraining: {global_batch: 16, overlap_param_gather: false}\n",
      dense + "parallelism: {pp: 4}\ntraining: {global_batch: 16, precision: fp8, fp8_param_gather: true}\n",
      dense + "parallelism: {pp: 2, cp: 2}\ntraining: {global_batch: 16}\n",
      dense + "parallelism: {pp: 2, schedule: zero-bubble}\ntraining: {global_batch: 16}\n",
      moe + "parallelism: {pp: 2, ep: 2}\ntraining: {global_batch: 16}\n",
      moe + "parallelism: {pp: 2, ep: 4, zero_shard: 2}\ntraining: {global_batch: 16}\n",
      moe + "parallelism: {pp: 2, ep: 2, ep_comm_overlap: true, schedule: interleaved-1f1b, virtual_stages: 2}\n"
            "training: {global_batch: 16}\n",
  };
  for (const std::string& text : scenarios) {
    auto result = [&](int zero) {
      const Scenario s = load_scenario({text, "twin.yaml"}, {{"parallelism.zero", std::to_string(zero)}});
      return simulate(std::make_shared<const Scenario>(s)).result;
    };
    const Result one = result(1);
    const Result two = result(2);
    EXPECT_EQ(one.iteration_time, two.iteration_time) << text;
    EXPECT_EQ(one.peak_memory_bytes, two.peak_memory_bytes) << text;
    EXPECT_EQ(one.tokens_per_s, two.tokens_per_s) << text;
    EXPECT_EQ(one.mfu, two.mfu) << text;
    EXPECT_EQ(one.hfu, two.hfu) << text;
    EXPECT_EQ(one.warnings, two.warnings) << text;
    EXPECT_EQ(to_json(one.breakdown).dump(), to_json(two.breakdown).dump()) << text;
  }
  // And the search shares them: the four-GPU case has pipelined ZeRO-2 layouts.
  const SearchReport report = search_layouts({kFourGpus, "four.yaml"}, {.top = 5, .threads = 2, .prune = false});
  EXPECT_GT(report.shared, 0u);
  EXPECT_LT(report.shared, report.simulated);
}

TEST(Search, OverridesSetTheScenarioFirst) {
  // Setting the global batch, the GPU and a framework setting ranks as the file written so does.
  const std::string written = R"(name: four
model: {name: m, layers: 4, hidden: 8192, heads: 64, ffn_hidden: 32768, vocab: 32000, seq_len: 4096, dropout: 0.1}
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 4}
parallelism: {tp_comm_overlap: true}
training: {global_batch: 16}
)";
  const SearchReport overridden = search_layouts(
      {kFourGpus, "four.yaml"}, {.top = 5,
                                 .threads = 2,
                                 .overrides = {{"training.global_batch", "16"},
                                               {"cluster.gpu", "a100-sxm4-80gb"},
                                               {"parallelism.tp_comm_overlap", "true"}}});
  const SearchReport expected = search_layouts({written, "written.yaml"}, {.top = 5, .threads = 2});
  EXPECT_EQ(overridden.global_batch, 16);
  EXPECT_EQ(to_json(overridden, false).at("layouts").dump(), to_json(expected, false).at("layouts").dump());
  EXPECT_NE(to_json(overridden, false).at("layouts").dump(),
            to_json(search_layouts({kFourGpus, "four.yaml"}, {.top = 5, .threads = 2}), false).at("layouts").dump());
}

TEST(Search, OverridesTheSearchChoosesAreRefusedAndErrorsCiteTheirOrigin) {
  const auto error_of = [](const SearchOptions& options) -> std::string {
    try {
      search_layouts({kFourGpus, "four.yaml"}, options);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of({.overrides = {{"parallelism.tp", "2", "--set"}}}),
            "--set parallelism.tp=2: the search chooses parallelism.tp for each layout; set it in paceline run or "
            "sweep");
  EXPECT_EQ(error_of({.overrides = {{"training.recompute", "full", "--set"}}}).rfind("--set training.recompute=full: ", 0),
            0u);
  // Inside a mapping set whole, too (it was taken, then dropped for each layout's own).
  EXPECT_EQ(error_of({.overrides = {{"parallelism", "{schedule: gpipe, tp: 8}", "--set"}}}),
            "--set parallelism={schedule: gpipe, tp: 8}: the search chooses parallelism.tp for "
            "each layout; set it in "
            "paceline run or sweep");
  EXPECT_EQ(error_of({.overrides = {{"parallelism", "{schedule: gpipe}", "--set"}}}), "");
  EXPECT_EQ(error_of({.gpus = 8, .overrides = {{"cluster.nodes", "2", "--set"}}}),
            "--set cluster.nodes=2: the search on 8 GPUs sets cluster.nodes itself; give --gpus or cluster.nodes, not "
            "both");
  EXPECT_EQ(error_of({.overrides = {{"parallelism.schedule", "bogus", "--set"}}})
                .rfind("--set parallelism.schedule=bogus: parallelism.schedule = 'bogus' is unknown", 0),
            0u);
  EXPECT_EQ(error_of({.overrides = {{"training.global_batch", "0", "--set"}}}),
            "--set training.global_batch=0: training.global_batch = 0 must be at least 1");
  // A field of the file is cited at its line, though the search copies it into its neutral layout.
  const std::string bad_order = std::string(kFourGpus) + "parallelism: {rank_order: bogus}\n";
  std::string message;
  try {
    search_layouts({bad_order, "four.yaml"}, {});
  } catch (const InputError& e) {
    message = e.what();
  }
  EXPECT_EQ(message.rfind("four.yaml:5:27: parallelism.rank_order = 'bogus'", 0), 0u) << message;
}

TEST(Search, LayoutsCarryTheSimulationsWarnings) {
  // Stages innermost on nodes of one NIC: layouts with several stages on a node and data
  // parallelism across nodes send several stages' reductions through one NIC.
  const ScenarioSource source{R"(name: few-nics
model: {name: m, layers: 8, hidden: 2048, heads: 16, ffn_hidden: 8192, vocab: 32000, seq_len: 1024}
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {rank_order: pp-cp-tp-dp}
training: {global_batch: 8}
)",
                              "few-nics.yaml"};
  const SearchReport report = search_layouts(source, {.top = 20, .threads = 2});
  const auto warned = std::ranges::find_if(report.top, [](const RankedLayout& r) { return !r.warnings.empty(); });
  ASSERT_NE(warned, report.top.end());
  EXPECT_GT(warned->layout.pp, 1);
  EXPECT_NE(to_text(report).find("  warning (#" + std::to_string(warned - report.top.begin() + 1)), std::string::npos);
  const Json entry = to_json(report).at("layouts").elements()[warned - report.top.begin()];
  EXPECT_EQ(entry.at("warnings").elements()[0].string(), warned->warnings[0]);
}

TEST(Search, SameReportOnAnyThreadCount) {
  const ScenarioSource source{kFourGpus, "four.yaml"};
  const SearchReport one = search_layouts(source, {.top = 3, .threads = 1});
  const SearchReport three = search_layouts(source, {.top = 3, .threads = 3});
  EXPECT_EQ(to_json(one, false).dump(), to_json(three, false).dump());
}

TEST(Search, GpusResizeTheCluster) {
  const ScenarioSource source{kFourGpus, "four.yaml"};
  // 2 GPUs: a divisor of gpus_per_node 4 → one node of 2.
  EXPECT_EQ(search_layouts(source, {.gpus = 2, .top = 1}).gpus, 2);
  try {
    search_layouts(source, {.gpus = 6});
    FAIL() << "6 GPUs do not fit nodes of 4";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "four.yaml: search on 6 GPUs: the count must be a multiple or a divisor of "
              "cluster.gpus_per_node = 4");
  }
}

TEST(Search, ACatalogSystemGivesTheNodeSize) {
  // A DGX H100 node holds 8 GPUs: the global batch of 16 is searched over 8 of them, not 1.
  const ScenarioSource source{R"(model: {name: m, layers: 2, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 32000,
  seq_len: 2048}
cluster: {system: dgx-h100, nodes: 1}
training: {global_batch: 16}
)",
                              "dgx.yaml"};
  EXPECT_EQ(search_layouts(source, {.top = 1}).gpus, 8);
}

TEST(Search, TheScenariosOwnLayoutDoesNotMatter) {
  // tp 3 does not divide 64 heads, and the global batch is not a multiple of dp = 4: the search
  // replaces both, so the scenario still searches.
  const ScenarioSource source{std::string(kFourGpus) + "parallelism: {tp: 3}\n", "four.yaml"};
  EXPECT_EQ(to_json(search_layouts(source, {.top = 2})).at("layouts").dump(),
            to_json(search_layouts({kFourGpus, "four.yaml"}, {.top = 2})).at("layouts").dump());
}

TEST(Search, TheScenariosFrameworkSettingsReachItsLayouts) {
  // The schedule of one chunk per stage is the scenario's.
  const SearchReport gpipe =
      search_layouts({std::string(kFourGpus) + "parallelism: {tp: 3, schedule: gpipe}\n", "four.yaml"}, {.top = 50});
  int single_chunk = 0;
  for (const RankedLayout& r : gpipe.top) {
    if (r.layout.virtual_stages > 1) continue;
    ++single_chunk;
    EXPECT_EQ(r.layout.schedule, Schedule::kGpipe) << to_string(r.layout);
  }
  EXPECT_GT(single_chunk, 0);
  // The expert-parallel exchanges of layouts with experts over several ranks overlap: those
  // layouts run faster, the others as before.
  const std::string moe = R"(name: moe
model: {name: m, layers: 4, hidden: 1024, heads: 8, ffn_hidden: 2048, vocab: 32000, seq_len: 2048,
        moe: {experts: 8, top_k: 2}}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 4}
training: {global_batch: 16}
)";
  const SearchReport plain = search_layouts({moe, "moe.yaml"}, {.top = 400});
  const SearchReport overlapped =
      search_layouts({moe + "parallelism: {ep_comm_overlap: true}\n", "moe.yaml"}, {.top = 400});
  int faster = 0;
  for (const RankedLayout& o : overlapped.top) {
    const auto p = std::ranges::find(plain.top, o.layout, &RankedLayout::layout);
    if (p == plain.top.end()) continue;
    if (o.layout.ep == 1) {
      EXPECT_EQ(o.iteration_time_s, p->iteration_time_s) << to_string(o.layout);
    }
    if (o.iteration_time_s < p->iteration_time_s) ++faster;
  }
  EXPECT_GT(faster, 0);
  // PyTorch's tensor parallelism, said in a file without tp, reaches the layouts with tp > 1,
  // which keep their GEMMs' gathered inputs; the others run as before.
  const SearchReport megatron = search_layouts({kFourGpus, "four.yaml"}, {.top = 400});
  const SearchReport pytorch = search_layouts(
      {std::string(kFourGpus) + "parallelism: {tp_implementation: pytorch}\n", "four.yaml"},
      {.top = 400});
  int changed = 0;
  for (const RankedLayout& r : pytorch.top) {
    const auto m = std::ranges::find(megatron.top, r.layout, &RankedLayout::layout);
    if (m == megatron.top.end()) continue;
    if (r.layout.tp == 1) {
      EXPECT_EQ(r.iteration_time_s, m->iteration_time_s) << to_string(r.layout);
      EXPECT_EQ(r.peak_memory_bytes, m->peak_memory_bytes) << to_string(r.layout);
    } else if (r.peak_memory_bytes != m->peak_memory_bytes) {
      ++changed;
    }
  }
  EXPECT_GT(changed, 0);
}

TEST(Search, KeepsFp8ParametersOnTheShardedLayouts) {
  // fp8 parameters need a sharded optimizer: the search keeps them on the layouts with one and
  // ranks the others with 16-bit weights.
  const std::string fp8 = R"(name: fp8
model: {name: m, layers: 4, hidden: 2048, heads: 16, ffn_hidden: 8192, vocab: 32000, seq_len: 2048}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 4}
training: {global_batch: 8, precision: fp8, fp8_param_gather: true}
)";
  const SearchReport report = search_layouts({fp8, "fp8.yaml"}, {.top = 400});
  std::set<int> zeros;
  for (const RankedLayout& r : report.top) zeros.insert(r.layout.zero);
  EXPECT_TRUE(zeros.count(0) && zeros.count(1)) << "both kinds of layout ranked";
}

TEST(Search, RanksSelectiveLayoutsWithTheScenariosRecomputeModules) {
  // The dense MLPs recomputed: the selective layouts keep less and take longer than with the
  // attention core alone (some fit only so), the others are unchanged.
  std::string with = kFourGpus;
  with.replace(with.find("{global_batch: 8}"), 17, "{global_batch: 8, recompute: selective}");
  const SearchReport core = search_layouts({with, "four.yaml"}, {.top = 400, .prune = false});
  const SearchReport mlp = search_layouts(
      {with, "four.yaml"},
      {.top = 400, .prune = false, .overrides = {{"training.recompute_modules", "[mlp]"}}});
  int selective = 0;
  int lower = 0;
  for (const RankedLayout& r : mlp.top) {
    const auto c = std::ranges::find(core.top, r.layout, &RankedLayout::layout);
    if (c == core.top.end()) {
      // Only a layout recomputing more can newly fit.
      EXPECT_EQ(r.layout.recompute, Recompute::kSelective) << to_string(r.layout);
      continue;
    }
    if (r.layout.recompute != Recompute::kSelective) {
      EXPECT_EQ(r.iteration_time_s, c->iteration_time_s) << to_string(r.layout);
      EXPECT_EQ(r.peak_memory_bytes, c->peak_memory_bytes) << to_string(r.layout);
      continue;
    }
    ++selective;
    // A stage whose peak lies outside its layers (the output head's) keeps as much.
    EXPECT_LE(r.peak_memory_bytes, c->peak_memory_bytes) << to_string(r.layout);
    if (r.peak_memory_bytes < c->peak_memory_bytes) ++lower;
    EXPECT_GT(r.iteration_time_s, c->iteration_time_s) << to_string(r.layout);
  }
  EXPECT_GT(lower, selective / 2);
}

TEST(Search, SaysWhenNoLayoutSplitsTheModel) {
  // 7 heads over 16 GPUs with a global batch of one sequence of one token: no tp, cp or dp fits.
  const SearchReport report = search_layouts({R"(model: {name: m, layers: 4, hidden: 1792, heads: 7, ffn_hidden: 4096,
        vocab: 32000, seq_len: 1}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}}
training: {global_batch: 1}
)",
                                              "none.yaml"});
  EXPECT_EQ(report.considered, 0u);
  EXPECT_NE(to_text(report).find("no parallel layout splits this model over these GPUs"), std::string::npos);
}

TEST(Search, BadScenariosStillSayWhere) {
  try {
    search_layouts(
        {"model: nope\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 4}\n", "bad.yaml"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind("bad.yaml:1:8: model = 'nope' is not in the model catalog", 0),
        0u)
        << e.what();
  }
  try {
    search_layouts(
        {"model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 0}\n",
         "bad.yaml"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "bad.yaml:3:26: training.global_batch = 0 must be at least 1");
  }
  // A setting its layouts would refuse: deduplicated exchanges of a routing that covers its
  // groups take a top_k of at most 64 (Scenario.DeduplicatedExchangesOfGroupLimitedRouting...).
  try {
    search_layouts(
        {R"(model: {name: wide, layers: 2, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 32000,
        seq_len: 2048, moe: {experts: 256, top_k: 72, groups: 8, group_top_k: 4}}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {ep_dispatcher: deduplicated}
training: {global_batch: 8}
)",
         "bad.yaml"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind("bad.yaml:4:30: parallelism.ep_dispatcher = deduplicated takes "
                                    "model.moe.top_k up to 64",
                                    0),
        0u)
        << e.what();
  }
  // Settings no layout can run: overlapped expert exchanges of an fp32 model, all-reduced FSDP
  // gradients of an MoE model. The search once enumerated layouts that carried them and failed
  // with an internal error.
  const std::string moe =
      R"(model: {name: m, layers: 2, hidden: 1024, heads: 8, ffn_hidden: 2048, vocab: 32000,
        seq_len: 2048, moe: {experts: 8, top_k: 2}}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 4}
)";
  const auto error_of = [&](const std::string& rest) -> std::string {
    try {
      search_layouts({moe + rest, "bad.yaml"});
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(
      error_of(
          "parallelism: {ep_comm_overlap: true}\ntraining: {global_batch: 16, precision: fp32}\n"),
      "bad.yaml:5:41: training.precision = fp32 cannot run with parallelism.ep_comm_overlap: "
      "Megatron-Core "
      "overlaps bf16 or fp16 models (and their fp8 GEMMs)");
  // A dense model's overlap applies to no layout, in fp32 too: searched as without it.
  std::string dense_fp32 = std::string(kFourGpus) + "parallelism: {ep_comm_overlap: true}\n";
  dense_fp32.replace(dense_fp32.find("global_batch: 8}"), 16, "global_batch: 8, precision: fp32}");
  EXPECT_NO_THROW(search_layouts({dense_fp32, "dense.yaml"}));
  EXPECT_EQ(
      error_of("parallelism: {zero: 3, fsdp_gradient_reduce: all_reduce}\ntraining: {global_batch: "
               "16}\n")
          .rfind("bad.yaml:4:46: parallelism.fsdp_gradient_reduce = all_reduce (DeepSpeed's ZeRO-3 "
                 "buckets, all-reduced over the whole data-parallel group) takes no "
                 "mixture-of-experts model",
                 0),
      0u);
}

TEST(Search, ALayoutTooBigToSimulateStopsTheSearchBeforeItsSchedule) {
  // 2^31 − 1 (a prime) sequences on one GPU: micro-batches of 1 make as many pipeline actions,
  // which once ran the machine out of memory building the layout's schedule; 24 layers each.
  if (machine_memory() == Bytes(0) || machine_memory() > GiB(30720))
    GTEST_SKIP() << "no memory limit to pass";
  try {
    search_layouts(
        {"model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 2147483647}\n",
         "big.yaml"});
    FAIL();
  } catch (const SimulationLimitError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("training.global_batch = 2147483647: layout tp 1 · pp 1 "
                                          "· dp 1 · cp 1 · ep 1 · v 1 · mb 1 · "
                                          "recompute none · zero 0 runs 2147483647 micro-batches a "
                                          "step, and simulating it would take at "
                                          "least 3.07e+04 GiB, more than the ",
                                          0),
              0u)
        << e.what();
  }
}

TEST(Search, AModelTooDeepToSimulateStopsTheSearchBeforeItsLayerGraphs) {
  // 2^31 − 1 layers: a forward and a backward task each, whatever the layout, once overflowed
  // a count of layers and failed with an internal error after half a minute.
  if (machine_memory() == Bytes(0) || machine_memory() > GiB(1280))
    GTEST_SKIP() << "no memory limit to pass";
  try {
    search_layouts(
        {"model: {name: m, layers: 2147483647, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: "
         "32000, "
         "seq_len: 2048}\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 1}\n",
         "deep.yaml"});
    FAIL();
  } catch (const SimulationLimitError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "model.layers = 2147483647: simulating even layout tp 1 · pp 1 · dp 1 · "
                  "cp 1 · ep 1 · v 1 · mb 1 · recompute none · zero 0 would take at least "
                  "1.28e+03 GiB, more than the ",
                  0),
              0u)
        << e.what();
  }
}

TEST(Search, LayerCountsThatDependOnTheLayoutAreSweptNotSearched) {
  // The search sets the recomputation and pipelining of every layout itself; a count of
  // recomputed or offloaded layers would not apply to its layouts.
  const auto error_of = [](const std::string& training) {
    try {
      search_layouts({"model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 8, " + training + "}\n",
                      "partial.yaml"});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("recompute: full, recompute_layers: 2"),
            "partial.yaml:3:64: training.recompute_layers = 2: the search recomputes none, some (selective) or all "
            "of every layer; remove the field to search, or sweep it over one layout (paceline sweep --set "
            "training.recompute_layers=...)");
  EXPECT_EQ(error_of("activation_offload_layers: 4"),
            "partial.yaml:3:56: training.activation_offload_layers = 4: the search does not choose activation "
            "offload (it needs pp 1 and no recomputation); remove the field to search, or sweep it over one layout "
            "(paceline sweep --set training.activation_offload_layers=...)");
}

TEST(Search, AStopFlagStopsTheSearch) {
  const ScenarioSource source{"model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb, gpus_per_node: 8}\n"
                              "training: {global_batch: 16}\n",
                              "s.yaml"};
  std::atomic<bool> stop{true};
  EXPECT_THROW(search_layouts(source, {.stop = &stop}), SimulationStopped);
  // Never set, it changes nothing.
  stop = false;
  EXPECT_EQ(to_json(search_layouts(source, {.stop = &stop}), false).dump(),
            to_json(search_layouts(source), false).dump());
}

}  // namespace
}  // namespace paceline
