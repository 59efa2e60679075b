// Tests sim/search/bounds.h: the memory and time lower bounds never exceed what the simulator
// reports, over the layouts of small clusters under every pipeline schedule, dense and MoE.
#include "sim/search/bounds.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>

#include "base/parallel_for.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

struct Case {
  const char* name;
  std::string text;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Result simulated(const Scenario& base, const Layout& layout) {
  return simulate(std::make_shared<const Scenario>(with_layout(base, layout))).result;
}

// Bounds every layout of `base` in order, as the search does (earlier layouts fill the
// caches), simulates every `stride`-th, at least `at_least` of them, and expects none of those
// bounds above its simulated step.
void expect_bounds_hold(const Scenario& base, size_t stride, size_t at_least) {
  const std::vector<Layout> layouts = enumerate_layouts(base);
  LayoutBounds bounds(base);
  std::vector<double> time(layouts.size());
  for (size_t i = 0; i < layouts.size(); ++i) {
    time[i] = bounds.iteration_time_lower_bound(layouts[i]) / Seconds(1);
  }
  std::vector<size_t> picked;
  for (size_t i = 0; i < layouts.size(); i += stride) picked.push_back(i);
  EXPECT_GE(picked.size(), at_least) << base.name;
  std::vector<Result> results(picked.size());
  parallel_for(picked.size(), resolve_threads(0),
               [&](size_t k) { results[k] = simulated(base, layouts[picked[k]]); });
  for (size_t k = 0; k < picked.size(); ++k) {
    EXPECT_LE(time[picked[k]], results[k].iteration_time / Seconds(1))
        << base.name << ": " << to_string(layouts[picked[k]]);
    EXPECT_LE(bounds.peak_memory_lower_bound(layouts[picked[k]]), results[k].peak_memory_bytes)
        << base.name << ": " << to_string(layouts[picked[k]]);
  }
}

// A dense model big enough for memory to matter on 80 GB GPUs (8 layers of hidden 8192: 6.4 B
// parameters, 103 GB of weights, gradients and Adam states unsharded), with dropout so
// selective recomputation does something; a dense model on H100s, whose GEMMs are persistent
// kernels that communication beside them slows twice as much, with tensor-parallel exchanges
// overlapped where a layout allows; a small mixture-of-experts model with grouped-query
// attention; all on 2 nodes of 4 GPUs.
const Case kCases[] = {
    {"dense", R"(name: dense
model: {name: dense, layers: 8, hidden: 8192, heads: 64, ffn_hidden: 32768, vocab: 32000, seq_len: 2048,
        dropout: 0.1, bias: true}
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 200 Gb/s}}
training: {global_batch: 8}
)"},
    {"dense_h100", R"(name: dense_h100
model: {name: dense, layers: 4, hidden: 4096, heads: 32, ffn_hidden: 16384, vocab: 32000, seq_len: 2048}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}}
parallelism: {tp: 2, sequence_parallel: true, tp_comm_overlap: true}
training: {global_batch: 16}
)"},
    {"moe", R"(name: moe
model: {name: moe, layers: 4, hidden: 1024, heads: 8, kv_heads: 2, ffn_hidden: 3584, vocab: 32000, seq_len: 1024,
        activation: swiglu, norm: rmsnorm, position: rope, moe: {experts: 8, top_k: 2, shared_experts: 1}}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}}
training: {global_batch: 16, attention: unfused, precision: fp8}
)"},
};

class BoundsTest : public testing::TestWithParam<std::tuple<Case, const char*>> {};

TEST_P(BoundsTest, NeverExceedTheSimulation) {
  const auto& [c, schedule] = GetParam();
  const ScenarioSource source{c.text, fmt::format("{}.yaml", c.name)};
  Scenario base = load_scenario(source);
  const std::vector<Override> schedule_override = {{"parallelism.schedule", schedule}};
  base.parallelism.schedule = load_scenario(source, schedule_override).parallelism.schedule;
  const std::vector<Layout> layouts = enumerate_layouts(base);
  LayoutBounds bounds(base);
  // Every 3rd layout (of 1416 dense; 1131 MoE, whose unfused attention rules out context
  // parallelism) keeps the test short while covering each dimension.
  std::vector<size_t> picked;
  for (size_t i = 0; i < layouts.size(); i += 3) picked.push_back(i);
  EXPECT_GT(picked.size(), 350u);
  std::vector<int64_t> memory(picked.size());
  std::vector<double> time(picked.size());
  for (size_t k = 0; k < picked.size(); ++k) {
    memory[k] = bounds.peak_memory_lower_bound(layouts[picked[k]]);
    time[k] = bounds.iteration_time_lower_bound(layouts[picked[k]]) / Seconds(1);
    // Counting kernels only loosens the bound.
    EXPECT_LE(bounds.iteration_time_lower_bound(layouts[picked[k]], LayoutBounds::Detail::kKernels),
              Seconds(time[k]));
  }
  std::vector<Result> results(picked.size());
  parallel_for(picked.size(), resolve_threads(0), [&](size_t k) {
    results[k] = simulated(base, layouts[picked[k]]);
  });
  size_t tight_memory = 0;
  for (size_t k = 0; k < picked.size(); ++k) {
    const std::string layout = to_string(layouts[picked[k]]);
    EXPECT_LE(memory[k], results[k].peak_memory_bytes) << layout;
    EXPECT_LE(time[k], results[k].iteration_time / Seconds(1)) << layout;
    EXPECT_GT(time[k], 0.0) << layout;
    if (memory[k] >= 0.5 * static_cast<double>(results[k].peak_memory_bytes)) ++tight_memory;
  }
  // The bounds are useful too: most memory bounds reach half the simulated peak.
  EXPECT_GT(tight_memory, picked.size() / 2);
}

INSTANTIATE_TEST_SUITE_P(Schedules, BoundsTest,
                         testing::Combine(testing::ValuesIn(kCases),
                                          testing::Values("1f1b", "gpipe", "zero-bubble")),
                         [](const auto& param_info) {
                           std::string schedule = std::get<1>(param_info.param);
                           std::replace(schedule.begin(), schedule.end(), '-', '_');
                           return fmt::format("{}_{}", std::get<0>(param_info.param).name,
                                              schedule);
                         });

// A small MoE model on two nodes of 4 GPUs, with the expert exchanges of `parallelism`.
std::string moe_case(const std::string& name, const std::string& parallelism) {
  return "name: " + name + R"(
model: {name: moe, layers: 4, hidden: 1024, heads: 8, kv_heads: 2, ffn_hidden: 3584, vocab: 32000, seq_len: 1024,
        activation: swiglu, norm: rmsnorm, position: rope, moe: {experts: 8, top_k: 2}}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}}
parallelism: )" +
         parallelism + R"(
training: {global_batch: 16, attention: unfused}
)";
}

// The MoE model with its expert-parallel exchanges overlapped where a layout allows (1f1b only:
// the overlap pairs its forwards and backwards), the passes no longer adding up one after another.
const Case kOverlapped = {"moe_overlapped",
                          moe_case("moe_overlapped", "{ep: 2, ep_comm_overlap: true}")};
// The same model sending each token once per GPU and node that needs it, wherever a layout
// spreads its experts (the base's over both nodes).
const Case kDeduplicated = {"moe_deduplicated",
                            moe_case("moe_deduplicated", "{ep: 8, ep_dispatcher: deduplicated}")};

INSTANTIATE_TEST_SUITE_P(ExpertExchanges, BoundsTest,
                         testing::Combine(testing::Values(kOverlapped, kDeduplicated),
                                          testing::Values("1f1b")),
                         [](const auto& param_info) {
                           return std::string(std::get<0>(param_info.param).name);
                         });

TEST(Bounds, PairedPassesAreBoundedByTheirKernels) {
  // Qwen3-30B-A3B with its experts over two nodes: each pass waits on all-to-alls across the
  // network for much of its span, which the other pass of its pair fills with its kernels.
  const Scenario base = load_scenario(ScenarioSource{R"(model: qwen3-30b-a3b
cluster: {system: dgx-h100, nodes: 2}
parallelism: {ep: 16, ep_comm_overlap: true, zero: 1}
training: {global_batch: 128, micro_batch: 1, seq_len: 4096, precision: fp8}
)",
                                                     "paired.yaml"});
  const Layout l{.dp = 16, .ep = 16, .zero = 1};
  LayoutBounds bounds(base);
  const Result r = simulated(base, l);
  EXPECT_TRUE(r.scenario->parallelism.ep_comm_overlap);
  EXPECT_LE(bounds.iteration_time_lower_bound(l), r.iteration_time);
  EXPECT_GT(bounds.iteration_time_lower_bound(l), 0.5 * r.iteration_time);
}

TEST(Bounds, CountWhatCollectivesTakeFromTheKernelsBesideThem) {
  // Mixtral 8x7B under ZeRO-3 on 64 H100s: every micro-batch gathers each layer's weights twice
  // and reduce-scatters its gradients across the nodes, beside kernels that are mostly
  // persistent GEMMs, which run at half speed beside them. The bound counts most of that
  // slowdown, not only the kernels.
  const Scenario base = load_scenario(ScenarioSource{R"(model: mixtral-8x7b
cluster: {system: dgx-h100, nodes: 8}
training: {global_batch: 256, seq_len: 4096}
)",
                                                     "mixtral.yaml"});
  const Layout l{.tp = 2, .dp = 32, .ep = 8, .micro_batch = 4, .zero = 3, .sequence_parallel = true};
  const Result r = simulated(base, l);
  const Seconds bound = LayoutBounds(base).iteration_time_lower_bound(l);
  EXPECT_GT(r.breakdown.overlap_slowdown, 0.2 * r.iteration_time);
  EXPECT_LE(bound, r.iteration_time);
  EXPECT_GT(bound, r.iteration_time - 0.5 * r.breakdown.overlap_slowdown);
}

TEST(Bounds, NeverExceedTheSimulationUnderFsdp2) {
  // PyTorch FSDP2's sharded gradients come with each block's first reduce-scatter: with one
  // micro-batch the peak of its passes may come before any of them, with more after all of them.
  const Scenario base = load_scenario(ScenarioSource{R"(name: fsdp2
model: {name: m, layers: 4, hidden: 2048, heads: 16, ffn_hidden: 8192, vocab: 128000, seq_len: 2048}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}}
parallelism: {dp: 8, zero: 3, fsdp_gather: per_parameter}
training: {global_batch: 16}
)",
                                                     "fsdp2.yaml"});
  expect_bounds_hold(base, 4, 100);
}

TEST(Bounds, NeverExceedTheSimulationWhereGroupsShareANic) {
  // One NIC per node of 4: whether a context group of 3 sends beside another depends on dp and
  // pp, not only on where the group sits, so layouts placing it alike are priced apart.
  const Scenario base = load_scenario(ScenarioSource{R"(name: shared
model: {name: m, layers: 4, hidden: 1536, heads: 12, ffn_hidden: 6144, vocab: 32010, seq_len: 3072}
cluster: {gpu: h100-sxm5-80gb, nodes: 3, gpus_per_node: 4, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
training: {global_batch: 48}
)",
                                                     "shared.yaml"});
  expect_bounds_hold(base, 8, 400);  // of 3684 layouts
}

// Tied embeddings of 128,000 × 1024 over one 25 Gb/s NIC a node.
constexpr const char* kSlowTiedEmbeddings = R"(name: tied
model: {name: m, layers: 4, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 128000, seq_len: 2048,
        tied_embeddings: true}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4,
          inter_node: {nics_per_node: 1, nic_bandwidth: 25 Gb/s, latency: 5 us, bandwidth_efficiency: 1}}
training: {global_batch: 16}
)";

TEST(Bounds, NeverExceedTheSimulationWhereSettingsChangeWhatRuns) {
  const char* cluster =
      "cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 1, "
      "nic_bandwidth: 200 Gb/s}}\n";
  const char* model =
      "model: {name: m, layers: 4, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 32000, "
      "seq_len: 2048}\n";
  // ZeRO-3 gathering tensor by tensor, none of them past the persistence threshold: nothing is
  // gathered, though gathering whole blocks over one NIC a node would take longer than the step.
  expect_bounds_hold(load_scenario({fmt::format("name: tensor\n{}{}training: {{global_batch: 16}}\n"
                                                "parallelism: {{zero: 3, fsdp_gather: tensor, "
                                                "fsdp_persistence_threshold: 1000000000000}}\n",
                                                model, cluster),
                                    "tensor.yaml"}),
                     3, 300);
  // Collectives timed by the shared network, beside only the transfers running with them.
  expect_bounds_hold(load_scenario({fmt::format("name: full\n{}{}training: {{global_batch: 16}}\n"
                                                "simulation: {{fidelity: full}}\n",
                                                model, cluster),
                                    "full.yaml"}),
                     8, 100);
  // Experts exchanging each token once per GPU and node that needs it, timed by the shared
  // network: the bound prices the exchange with its routing too.
  expect_bounds_hold(load_scenario({kDeduplicated.text + "simulation: {fidelity: full}\n",
                                    "deduplicated_full.yaml"}),
                     2, 30);
  // Tied embeddings of a large vocabulary over one 25 Gb/s NIC a node: where the embedding and
  // the head sit on stages in different nodes, summing their gradients takes long after the
  // last passes.
  expect_bounds_hold(load_scenario({kSlowTiedEmbeddings, "tied.yaml"}), 2, 300);
  // A multi-token prediction module after the last layer, an MoE layer as it is: the head's
  // stage runs it, holds its experts and a copy of the word embedding, whose gradient is summed
  // with the first stage's over the slow NIC; in bf16, and in fp8 with fp8 parameters, which the
  // distributed optimizer and ZeRO-3 gather in one byte for the fp8 GEMMs' weights, two else.
  const std::string mtp =
      R"(model: {name: m, layers: 4, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 128000,
        seq_len: 2048, position: rope, mtp_layers: 1, moe: {experts: 8, top_k: 2, every: 2}}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4,
          inter_node: {nics_per_node: 1, nic_bandwidth: 25 Gb/s, latency: 5 us, bandwidth_efficiency: 1}}
)";
  expect_bounds_hold(
      load_scenario({"name: mtp\n" + mtp + "training: {global_batch: 16}\n", "mtp.yaml"}), 2, 300);
  expect_bounds_hold(
      load_scenario({"name: fp8_parameters\n" + mtp +
                         "parallelism: {zero: 1}\n"
                         "training: {global_batch: 16, precision: fp8, fp8_param_gather: true}\n",
                     "fp8_parameters.yaml"}),
      2, 300);
  // Selective recomputation of the dense layers' MLPs and, discarding outputs, the expert
  // activations and MoE norms: the layouts it recomputes selectively keep less.
  expect_bounds_hold(load_scenario({"name: modules\n" + mtp +
                                        "training: {global_batch: 16, recompute: selective, "
                                        "recompute_modules: [mlp, moe_act, layernorm]}\n",
                                    "modules.yaml"}),
                     4, 150);
  // Unfused attention on one GPU, whose step is its kernels: its GEMMs of two activations have
  // weight-gradient layout but never add into a gradient buffer.
  expect_bounds_hold(
      load_scenario({fmt::format("name: unfused\n{}cluster: {{gpu: h100-sxm5-80gb}}\n"
                                 "training: {{global_batch: 64, attention: unfused}}\n",
                                 model),
                     "unfused.yaml"}),
      1, 20);
}

TEST(Bounds, CountEveryStagesWarmUpAndDrainWhereLayersSplitUnevenly) {
  // 6 layers over 4 stages split 1, 2, 2, 1 (and a small output head): the inner stages carry
  // the most work, and each waits for micro-batch 0 to reach it and, after its last backward,
  // for the gradient to cross the stages before it, as the last stage does.
  const ScenarioSource source{R"(name: uneven
model: {name: m, layers: 6, hidden: 2048, heads: 16, ffn_hidden: 8192, vocab: 4096, seq_len: 2048}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 4, inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s}}
training: {global_batch: 16}
)",
                              "uneven.yaml"};
  for (const char* schedule : {"1f1b", "gpipe", "zero-bubble"}) {
    const Scenario base = load_scenario(source, {{"parallelism.schedule", schedule}});
    LayoutBounds bounds(base);
    std::vector<Layout> pipelined;
    for (const Layout& l : enumerate_layouts(base)) {
      if (l.pp > 1) pipelined.push_back(l);
    }
    EXPECT_GT(pipelined.size(), 150u);
    std::vector<Result> results(pipelined.size());
    parallel_for(pipelined.size(), resolve_threads(0), [&](size_t k) {
      results[k] = simulated(base, pipelined[k]);
    });
    for (size_t k = 0; k < pipelined.size(); ++k) {
      EXPECT_LE(bounds.iteration_time_lower_bound(pipelined[k]), results[k].iteration_time)
          << schedule << " " << to_string(pipelined[k]);
    }
  }
  // 1F1B over 4 stages and 8 micro-batches: an inner stage's passes alone are about 70% of the
  // step; its warm-up and drain bring the bound above four fifths of it (0.83), as they count
  // every kernel a stage's compute stream runs before the gradient leaves it (through the
  // gradient's path in each block's graph alone: 0.76).
  const Scenario base = load_scenario(source);
  const Layout l{.pp = 4, .dp = 2};
  const Result r = simulated(base, l);
  EXPECT_GT(LayoutBounds(base).iteration_time_lower_bound(l) / r.iteration_time, 0.8);
}

TEST(Bounds, CountTheLinkBetweenStagesBothWays) {
  // Two stages, one a node, joined by one 10 Gb/s NIC a node: micro-batch 0's activation (2048
  // tokens of hidden 4096 in bf16, 16.8 MB) takes 13.4 ms to reach the second stage, and the
  // last micro-batch's gradient as long to come back, where a pass's kernels take under 1 ms.
  // Without the link, warm-up and drain come to a tenth of the step.
  const Scenario base = load_scenario({R"(name: slow_link
model: {name: m, layers: 2, hidden: 4096, heads: 32, ffn_hidden: 16384, vocab: 4096, seq_len: 2048}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8,
          inter_node: {nics_per_node: 1, nic_bandwidth: 10 Gb/s, latency: 5 us, bandwidth_efficiency: 1}}
parallelism: {tp: 8, pp: 2}
training: {global_batch: 4}
)",
                                       "slow_link.yaml"});
  const Layout l{.tp = 8, .pp = 2};
  const Seconds bound = LayoutBounds(base).iteration_time_lower_bound(l);
  EXPECT_GT(bound, Seconds(2 * 16777216 / 1.25e9));
  EXPECT_LE(bound, simulated(base, l).iteration_time);
}

TEST(Bounds, CountTheGradientReductionsAfterTheLastPass) {
  // One node's tensor-parallel group a replica, two replicas over one 10 Gb/s NIC a node: each
  // rank's fp32 gradients (2 layers of 201 M parameters, a 16.8 M embedding and as large an
  // output head, over 8: 54.5 M, 218 MB) are half sent to be reduce-scattered, 87 ms at 1.25 GB/s,
  // and the eight ranks of a node share its NIC: 0.7 s, of which only the last micro-batch's
  // backward pass can hide a few ms.
  const Scenario base = load_scenario({R"(name: slow_reduction
model: {name: m, layers: 2, hidden: 4096, heads: 32, ffn_hidden: 16384, vocab: 4096, seq_len: 2048}
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8,
          inter_node: {nics_per_node: 1, nic_bandwidth: 10 Gb/s, latency: 5 us, bandwidth_efficiency: 1}}
parallelism: {tp: 8, dp: 2, zero: 1}
training: {global_batch: 4}
)",
                                       "slow_reduction.yaml"});
  const Layout l{.tp = 8, .dp = 2, .zero = 1};
  const Seconds bound = LayoutBounds(base).iteration_time_lower_bound(l);
  EXPECT_GT(bound, Seconds(0.69));
  EXPECT_LE(bound, simulated(base, l).iteration_time);
  // Tied embeddings of 128,000 × 1024 on the first and last of two stages, a node each, over a
  // 25 Gb/s NIC: summing their fp32 gradients is most of the step, and the bound counts it.
  const Scenario tied = load_scenario({kSlowTiedEmbeddings, "tied.yaml"});
  const Layout pipelined{.pp = 2, .dp = 4};
  EXPECT_GT(LayoutBounds(tied).iteration_time_lower_bound(pipelined) /
                simulated(tied, pipelined).iteration_time,
            0.9);
}

TEST(Bounds, StaticStatesAloneCanRuleALayoutOut) {
  // GPT-3 175B on 8 GPUs with tp 8 and nothing else sharded: 175e9 parameters × 18 bytes (2 for
  // bf16 weights, 4 for fp32 gradients, 12 for Adam's master copy and moments) / 8 ≈ 3.9e11 B
  // ≈ 367 GiB per GPU, far above 80 GiB.
  Scenario base = load_scenario({R"(model: gpt3-175b
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 8}
training: {global_batch: 8}
)",
                                 "g.yaml"});
  Layout l;
  l.tp = 8;
  EXPECT_GT(LayoutBounds(base).peak_memory_lower_bound(l), GiB(360) / Bytes(1));
}

}  // namespace
}  // namespace paceline
