// Tests sim/parallel/lowering.h: gradient buckets, and through whole simulations single-GPU
// physics, symmetric and full fidelity agreeing, pipeline memory, determinism.
#include "sim/parallel/lowering.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "sim/simulator/simulator.h"
#include "sim/timeline/timeline.h"

namespace paceline {
namespace {

std::shared_ptr<const Scenario> scenario_of(const std::string& text) {
  return std::make_shared<const Scenario>(load_scenario_text(text, "s.yaml"));
}

constexpr const char* kSingleGpu = R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 1}
training: {global_batch: 8, micro_batch: 2, seq_len: 2048}
)";

// Rank 0's tasks named `name` in `t`, as (start, end) in time order.
std::vector<std::pair<double, double>> rank0_spans(const Timeline& t, std::string_view name) {
  std::vector<std::pair<double, double>> found;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.rank[i] == 0 && t.names[t.name[i]] == name) found.emplace_back(t.start_s[i], t.end_s[i]);
  }
  std::sort(found.begin(), found.end());
  return found;
}

// GPT 1.7B (hidden 2304, biases, LayerNorm) over 8 GPUs under ZeRO-3, gathering per tensor.
constexpr const char* kPerTensorGpt = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {dp: 8, zero: 3, fsdp_prefetch: 0, fsdp_gather: tensor}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048}
)";

// How many blocks each bucket takes.
std::vector<size_t> bucket_blocks(std::span<const BlockParameters> blocks,
                                  int64_t bucket_parameters) {
  std::vector<size_t> sizes;
  size_t next = 0;
  for (const GradientBucket& bucket : gradient_buckets(blocks, bucket_parameters)) {
    EXPECT_EQ(bucket.first_block, next);
    next += bucket.blocks;
    sizes.push_back(bucket.blocks);
  }
  EXPECT_EQ(next, blocks.size());
  return sizes;
}

TEST(Lowering, AGradientBucketClosesOnceItHoldsTheBucketSize) {
  // Blocks of 3, 4, 10, 2 and 1 parameters in backward order, buckets of at least 7: the first
  // two blocks reach 7, the third alone 10, and the last two are left to a smaller bucket. The
  // 10 include 6 expert parameters, which the third bucket holds apart.
  const std::vector<BlockParameters> blocks = {{3, 0}, {4, 0}, {10, 6}, {2, 0}, {1, 0}};
  EXPECT_EQ(bucket_blocks(blocks, 7), (std::vector<size_t>{2, 1, 2}));
  EXPECT_EQ(bucket_blocks(blocks, 1), (std::vector<size_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(bucket_blocks(blocks, 100), (std::vector<size_t>{5}));
  EXPECT_TRUE(gradient_buckets({}, 7).empty());
  const std::vector<GradientBucket> buckets = gradient_buckets(blocks, 7);
  EXPECT_EQ(buckets[1].dense, 4);
  EXPECT_EQ(buckets[1].expert, 6);
  EXPECT_EQ(buckets[2].dense, 3);
}

TEST(Lowering, OneGpuRunsEveryKernelBackToBack) {
  // One GPU, no collectives: the step is exactly the sum of all its kernel times.
  const Prediction p = simulate(scenario_of(kSingleGpu));
  const Program& program = p.lowering->stages[0]->program;
  SimTime total;
  for (TaskId id = 0; id < program.num_tasks(); ++id) total += program.task(id).duration;
  EXPECT_EQ(p.run.end, total);
  // 4 micro-batches of 2 sequences of 2048 tokens = 16384 tokens.
  EXPECT_DOUBLE_EQ(p.result.tokens_per_s, 16384.0 / (p.result.iteration_time / Seconds(1)));
  EXPECT_EQ(p.result.microbatches, 4);
}

TEST(Lowering, OneGpuBreakdownIsAllComputeAndOptimizer) {
  const Result r = simulate(scenario_of(kSingleGpu)).result;
  EXPECT_EQ(r.breakdown.pipeline_bubble, Seconds(0));
  EXPECT_EQ(r.breakdown.exposed_communication, Seconds(0));
  EXPECT_NEAR(r.breakdown.total() / Seconds(1), r.iteration_time / Seconds(1), 1e-12);
}

constexpr const char* kThreeD = R"(model: llama3-8b
cluster:
  gpu: h100-sxm5-80gb
  nodes: 2
  gpus_per_node: 8
  inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}
parallelism: {tp: 2, pp: 4, cp: 1, zero: 1}
training: {global_batch: 32, micro_batch: 1, seq_len: 4096}
)";

TEST(Lowering, SymmetricAndFullFidelityAgreeOnSymmetricScenarios) {
  const Result symmetric = simulate(scenario_of(kThreeD)).result;
  const Result full =
      simulate(scenario_of(std::string(kThreeD) + "simulation: {fidelity: full, fold_symmetric_peers: false}\n")).result;
  EXPECT_EQ(symmetric.ranks_simulated, 4);
  EXPECT_EQ(full.ranks_simulated, 16);
  // `full` times collectives on the shared flow network, `symmetric` each alone on the same
  // topology: here nothing contends beyond what a rank's own overlapping collectives share,
  // within 1% (tests/sim/network states the tolerance).
  EXPECT_NEAR(full.iteration_time / symmetric.iteration_time, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(full.peak_memory_bytes) / static_cast<double>(symmetric.peak_memory_bytes), 1.0,
              0.01);
}

TEST(Lowering, StagesLoweredOnManyThreadsGiveTheSameResult) {
  const std::string text = std::string(kThreeD) + "simulation: {fidelity: full}\n";
  const std::string one = to_json(simulate(scenario_of(text), {.threads = 1}).result, false).dump();
  EXPECT_EQ(to_json(simulate(scenario_of(text), {.threads = 4}).result, false).dump(), one);
  EXPECT_EQ(to_json(simulate(scenario_of(kThreeD), {.threads = 3}).result, false).dump(),
            to_json(simulate(scenario_of(kThreeD), {.threads = 1}).result, false).dump());
}

TEST(Lowering, BreakdownSumsToTheIterationTime) {
  const Result r = simulate(scenario_of(kThreeD)).result;
  EXPECT_NEAR(r.breakdown.total() / Seconds(1), r.iteration_time / Seconds(1), 1e-9);
  EXPECT_GT(r.breakdown.pipeline_bubble, Seconds(0));
}

TEST(Lowering, FirstStageHoldsOneMicrobatchPerStageInFlight) {
  // 1F1B: stage 0 runs p forwards before its first backward frees anything, so its peak holds
  // p micro-batches of its activations (plus transient buffers on top).
  const Prediction p = simulate(scenario_of(kThreeD));
  const StageProgram& stage = *p.lowering->stages[0];
  int64_t one_microbatch = 0;
  for (TaskId t = 0; t < stage.program.num_tasks(); ++t) {
    const TaskLabel& label = stage.labels[stage.program.task(t).label];
    if (label.microbatch == 0 && label.plan != kNoId &&
        stage.plans[label.plan]->pass == PassKind::kForward) {
      one_microbatch += stage.program.task(t).alloc_at_start_bytes;
    }
  }
  const int64_t dynamic = p.result.stages[0].peak_bytes - p.result.stages[0].static_bytes;
  EXPECT_GE(dynamic, 4 * one_microbatch);
  EXPECT_LT(dynamic, 5 * one_microbatch);
}

TEST(Lowering, FullRecomputeTradesTimeForMemory) {
  const Result none = simulate(scenario_of(kThreeD)).result;
  std::string text = kThreeD;
  text.replace(text.find("seq_len: 4096}"), 14, "seq_len: 4096, recompute: full}");
  const Result full = simulate(scenario_of(text)).result;
  EXPECT_GT(full.iteration_time, none.iteration_time);
  EXPECT_LT(full.peak_memory_bytes, none.peak_memory_bytes);
  EXPECT_GT(full.hfu, full.mfu);
}

TEST(Lowering, PartialRecomputeRecomputesTheFirstLayersOfEachChunk) {
  // Llama 3 8B over pp 4: 8 layers a stage. Recomputing the first 3 of each costs every stage
  // 3/8 of full recompute's extra FLOPs and lands between no and full recompute in time and
  // memory; recomputing 8 or more is full recompute. With two chunks of 4 layers a stage, 3 of
  // each chunk are 6 of the stage's 8.
  const auto with = [](std::string_view training, std::string_view parallelism = "") {
    std::string text = kThreeD;
    text.replace(text.find("seq_len: 4096}"), 14, fmt::format("seq_len: 4096{}}}", training));
    text.replace(text.find("zero: 1}"), 8, fmt::format("zero: 1{}}}", parallelism));
    return simulate(scenario_of(text));
  };
  const Prediction none = with("");
  const Prediction full = with(", recompute: full");
  const Prediction three = with(", recompute: full, recompute_layers: 3");
  const auto recomputed = [](const Prediction& p, size_t stage) {
    return p.lowering->stages[stage]->recompute_flop / Flop(1);
  };
  for (size_t stage = 0; stage < 4; ++stage) {
    EXPECT_GT(recomputed(full, stage), 0.0);
    EXPECT_NEAR(recomputed(three, stage), 3.0 / 8.0 * recomputed(full, stage), 1e-9 * recomputed(full, stage));
  }
  const std::string_view interleaved = ", virtual_stages: 2, schedule: interleaved-1f1b";
  const Prediction chunks_full = with(", recompute: full", interleaved);
  const Prediction chunks_three = with(", recompute: full, recompute_layers: 3", interleaved);
  for (size_t stage = 0; stage < 4; ++stage) {
    EXPECT_NEAR(recomputed(chunks_three, stage), 6.0 / 8.0 * recomputed(chunks_full, stage),
                1e-9 * recomputed(chunks_full, stage));
  }
  EXPECT_GT(three.result.iteration_time, none.result.iteration_time);
  EXPECT_LT(three.result.iteration_time, full.result.iteration_time);
  EXPECT_GT(three.result.peak_memory_bytes, full.result.peak_memory_bytes);
  EXPECT_LT(three.result.peak_memory_bytes, none.result.peak_memory_bytes);
  const Prediction all = with(", recompute: full, recompute_layers: 9");
  EXPECT_EQ(all.result.iteration_time, full.result.iteration_time);
  EXPECT_EQ(all.result.peak_memory_bytes, full.result.peak_memory_bytes);
}

TEST(Lowering, PyTorchCrossEntropyPeaksWithItsBackwardBuffers) {
  // Llama 3's 128k vocabulary over 8192 tokens: 1.05e9 logits, whose loss is the peak under full
  // recompute. The fused kernel peaks in forward at 6 bytes per logit (the bf16 logits beside
  // the fp32 copy that becomes the kept softmax); PyTorch's in backward at 12 (two fp32 gradient
  // buffers beside it).
  constexpr const char* kLoss = R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 1}
training: {global_batch: 1, seq_len: 8192, recompute: full, cross_entropy: CE}
)";
  const auto peak = [&](const char* cross_entropy) {
    std::string text = kLoss;
    text.replace(text.find("CE"), 2, cross_entropy);
    return simulate(scenario_of(text)).result.peak_memory_bytes;
  };
  const double logits = 8192.0 * 128256.0;
  EXPECT_NEAR(static_cast<double>(peak("eager") - peak("fused")), 6.0 * logits, 0.25 * logits);
  // Over two vocabulary shards of PyTorch's tensor parallelism, loss parallel peaks in backward at
  // 16 bytes per logit of the rank's half: 10 above the fused kernel, 4 above the ATen kernels.
  const auto sharded_peak = [&](const char* cross_entropy, const char* implementation) {
    std::string text = kLoss;
    text.replace(text.find("CE"), 2, cross_entropy);
    text.replace(text.find("gpus_per_node: 1"), 16, "gpus_per_node: 2");
    text += std::string("parallelism: {tp: 2, tp_implementation: ") + implementation + "}\n";
    return simulate(scenario_of(text)).result.peak_memory_bytes;
  };
  const double half = logits / 2;
  const int64_t fused = sharded_peak("fused", "pytorch");
  EXPECT_NEAR(static_cast<double>(sharded_peak("eager", "pytorch") - fused), 10.0 * half,
              0.25 * half);
  EXPECT_NEAR(static_cast<double>(sharded_peak("eager", "megatron") - fused), 6.0 * half,
              0.25 * half);
}

// The message of the SimulationLimitError that simulating `text` (as s.yaml) stops with.
std::string limit_error_of(const std::string& text) {
  try {
    simulate(scenario_of(text));
  } catch (const SimulationLimitError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no SimulationLimitError";
  return "";
}

TEST(Lowering, AStepPastTheRangeOfSimulatedTimeStopsAtTheLimit) {
  // Two billion tokens a sequence: the attention alone would take centuries.
  const std::string message =
      limit_error_of(R"(model: {name: g, layers: 2, hidden: 64, heads: 1, ffn_hidden: 256, vocab: 128,
         seq_len: 2147483640}
cluster: {gpu: a100-sxm4-80gb}
training: {global_batch: 1}
)");
  EXPECT_TRUE(message.starts_with("s.yaml: the simulated step would last longer than 2^63 ps")) << message;
  // No op alone passes the range (no "alone"), the sum of them does: the longest names the
  // figure behind it.
  EXPECT_EQ(message.find(" alone "), std::string::npos) << message;
  EXPECT_NE(message.find("; its longest op, attn.core.bwd of layer.backward, takes "), std::string::npos)
      << message;
}

TEST(Lowering, ATransferPastTheRangeOfSimulatedTimeIsNamed) {
  // Two stages over a 1 MB/s network: each micro-batch's activations (2^20 tokens of 4096 in
  // bf16, 8.6 GB) take hours to send, far longer than any op of the passes.
  const std::string message = limit_error_of(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 1, inter_node: {nics_per_node: 1, nic_bandwidth: 1 MB/s,
  latency: 5 us, bandwidth_efficiency: 0.9}}
parallelism: {pp: 2}
training: {global_batch: 2000, micro_batch: 1, seq_len: 1048576}
)");
  EXPECT_NE(message.find("; its longest op, pp.send_activation, takes "), std::string::npos) << message;
}

TEST(Lowering, AnOpPastTheRangeOfSimulatedTimeIsNamed) {
  // A head twice as wide as above: the attention's backward alone passes the range.
  const std::string message =
      limit_error_of(R"(model: {name: g, layers: 2, hidden: 128, heads: 1, ffn_hidden: 256, vocab: 128,
         seq_len: 2147483640}
cluster: {gpu: a100-sxm4-80gb}
training: {global_batch: 1}
)");
  EXPECT_TRUE(message.starts_with(
      "s.yaml: the simulated step would last longer than 2^63 ps (106 days): attn.core.bwd of layer.backward alone "))
      << message;
}

TEST(Lowering, RunsAreBitIdentical) {
  const auto scenario = scenario_of(kThreeD);
  EXPECT_EQ(to_json(simulate(scenario).result, false).dump(), to_json(simulate(scenario).result, false).dump());
}

TEST(Lowering, FsdpGathersRunTheirPrefetchDepthAhead) {
  // FSDP over 8 GPUs, one micro-batch, with fsdp_prefetch a: no block's weight gather starts
  // before the block a + 1 ahead of it has finished (a + 1 blocks gathered at most); with a ≥ 1
  // it runs while the block before it computes, with a = 0 only once that block has finished,
  // and with a = 2 some gathers run two blocks early.
  for (const int ahead : {0, 1, 2}) {
    SCOPED_TRACE(ahead);
    const Prediction p = simulate(scenario_of(fmt::format(R"(model: gpt-1.7b
cluster: {{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}}
parallelism: {{dp: 8, zero: 3, fsdp_prefetch: {}}}
training: {{global_batch: 8, micro_batch: 1, seq_len: 2048}}
)",
                                                          ahead)));
    const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
    struct Span {
      double start, end;
    };
    std::vector<Span> gathers, blocks;
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string& name = t.names[t.name[i]];
      if (t.rank[i] != 0) continue;
      if (name == "fsdp.forward_weight_gather") gathers.push_back({t.start_s[i], t.end_s[i]});
      if (t.stream_names[t.stream[i]] == "compute" && name.ends_with(".forward")) {
        blocks.push_back({t.start_s[i], t.end_s[i]});
      }
    }
    const auto by_start = [](const Span& a, const Span& b) { return a.start < b.start; };
    std::sort(gathers.begin(), gathers.end(), by_start);
    std::sort(blocks.begin(), blocks.end(), by_start);
    ASSERT_EQ(gathers.size(), blocks.size());
    ASSERT_GE(blocks.size(), 4u);
    int two_early = 0;
    for (size_t i = 1; i < blocks.size(); ++i) {
      const size_t a = static_cast<size_t>(ahead);
      if (i > a) {
        EXPECT_GE(gathers[i].start, blocks[i - a - 1].end) << "too many blocks gathered at block " << i;
      }
      if (ahead == 0) {
        EXPECT_GE(gathers[i].start, blocks[i - 1].end) << "block " << i << " prefetched";
      } else {
        EXPECT_LT(gathers[i].start, blocks[i - 1].end) << "block " << i << " not prefetched";
      }
      if (i >= 2 && gathers[i].start < blocks[i - 2].end) ++two_early;
    }
    EXPECT_EQ(two_early > 0, ahead == 2);
  }
}

TEST(Lowering, PerTensorFsdpGathersRunOneAfterAnother) {
  // Each layer's QKV, projection, fc1 and fc2 weights, the tensors of over 10^5 elements, by
  // their own all-gathers, each starting once the one before has ended; biases and norms are not
  // gathered.
  const std::string text = kPerTensorGpt;
  const Prediction p = simulate(scenario_of(text));
  const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
  const auto spans = [&](std::string_view name) { return rank0_spans(t, name); };
  const std::vector<std::pair<double, double>> gathers = spans("fsdp.forward_weight_gather");
  double gathered_s = 0.0;
  for (const auto& [start, end] : gathers) gathered_s += end - start;
  const int layers = 24;
  // The layers' four weights, the embedding table and the learned positions (the head's
  // projection is the tied embedding).
  ASSERT_EQ(gathers.size(), static_cast<size_t>(4 * layers + 2));
  for (size_t i = 1; i < gathers.size(); ++i) EXPECT_GE(gathers[i].first, gathers[i - 1].second) << i;
  // Before each gather the host builds its list of 8 views, 3 us each, the GPU idle; after it,
  // the result is copied out one rank's share at a time before the next list: a fill and 8
  // copies, each at least the H100's 2 us kernel overhead.
  const std::vector<std::pair<double, double>> lists = spans("fsdp.forward_weight_gather.list");
  const std::vector<std::pair<double, double>> copies = spans("fsdp.forward_weight_gather.copies");
  ASSERT_EQ(lists.size(), gathers.size());
  ASSERT_EQ(copies.size(), gathers.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_NEAR(lists[i].second - lists[i].first, 8 * 3e-6, 1e-12) << i;
    EXPECT_GE(gathers[i].first, lists[i].second) << i;
    EXPECT_GE(copies[i].first, gathers[i].second) << i;
    if (i + 1 < gathers.size()) {
      EXPECT_GE(lists[i + 1].first, copies[i].second) << i;
    }
    EXPECT_GE(copies[i].second - copies[i].first, 9 * 2e-6) << i;
  }
  // Against one gather per block: the same bytes less the biases and norms, in 4 times as many
  // collectives, each paying the ring's latency.
  const Prediction whole = simulate(scenario_of(
      std::string(text).replace(text.find(", fsdp_gather: tensor"), std::string(", fsdp_gather: tensor").size(), "")));
  const Timeline w = make_timeline(*whole.lowering, whole.run, /*kernels=*/false);
  double whole_s = 0.0;
  size_t whole_count = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w.rank[i] != 0 || w.names[w.name[i]] != "fsdp.forward_weight_gather") continue;
    whole_s += w.end_s[i] - w.start_s[i];
    ++whole_count;
  }
  EXPECT_EQ(whole_count, static_cast<size_t>(layers + 2));
  EXPECT_GT(gathered_s, whole_s);
  EXPECT_GT(p.result.iteration_time, whole.result.iteration_time);
}

// GPT 1.7B over 8 H100s under PyTorch FSDP2, `global_batch` sequences of 2048 tokens a step.
std::string fsdp2_gpt(int global_batch) {
  return fmt::format(R"(model: gpt-1.7b
cluster: {{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}}
parallelism: {{dp: 8, zero: 3, fsdp_gather: per_parameter}}
training: {{global_batch: {}, micro_batch: 1, seq_len: 2048}}
)",
                     global_batch);
}

TEST(Lowering, PerParameterFsdpCopiesWeightsOutAndGradientsIn) {
  // GPT 1.7B (hidden 2304) over 8 H100s under PyTorch FSDP2: each layer pass's weights, and the
  // root unit's (the embedding's tables and the head's norm) once as the forward starts, are
  // copied out of the gather's buffer on the compute stream after the gather and right before
  // the pass, reading and writing the layer's 12h² + 13h bf16 weights; after each block's
  // backward the compute stream waits for the reduce-scatter issued before, then copies the
  // block's gradients into the reduce-scatter's input, bf16 read and fp32 written, and the
  // reduce-scatter waits for that copy.
  const std::string text = fsdp2_gpt(8);
  const Prediction p = simulate(scenario_of(text));
  const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
  struct Span {
    double start, end;
    std::string name, stream;
  };
  std::vector<Span> all;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.rank[i] == 0)
      all.push_back({t.start_s[i], t.end_s[i], t.names[t.name[i]], t.stream_names[t.stream[i]]});
  }
  std::sort(all.begin(), all.end(), [](const Span& a, const Span& b) {
    return std::tie(a.start, a.end) < std::tie(b.start, b.end);
  });
  const auto named = [&](std::string_view name) {
    std::vector<Span> found;
    std::copy_if(all.begin(), all.end(), std::back_inserter(found),
                 [&](const Span& s) { return s.name == name; });
    return found;
  };
  // What the compute stream runs next after each span of `name`.
  const auto followers = [&](std::string_view name) {
    std::vector<std::string> next;
    std::optional<size_t> pending;
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i].stream != "compute") continue;
      if (pending) next.push_back(all[i].name);
      pending.reset();
      if (all[i].name == name) pending = i;
    }
    return next;
  };
  const double hidden = 2304.0, h100_peak_bytes_per_s = 3.35e12;
  const double layer_weight_bytes = 2.0 * (12.0 * hidden * hidden + 13.0 * hidden);
  for (const char* pass : {"forward", "backward"}) {
    SCOPED_TRACE(pass);
    const std::vector<Span> gathers = named(fmt::format("fsdp.{}_weight_gather", pass));
    const std::vector<Span> copies = named(fmt::format("fsdp.{}_weight_copy_out", pass));
    ASSERT_EQ(copies.size(), gathers.size());
    int layer_copies = 0;
    for (size_t i = 0; i < copies.size(); ++i) {
      EXPECT_EQ(copies[i].stream, "compute") << i;
      EXPECT_GE(copies[i].start, gathers[i].end) << i;
      // Reading and writing a layer's weights at 2/3 of the peak bandwidth or more.
      const double seconds = copies[i].end - copies[i].start;
      const double fastest_s = 2.0 * layer_weight_bytes / h100_peak_bytes_per_s;
      if (seconds >= fastest_s && seconds <= 1.5 * fastest_s) ++layer_copies;
    }
    EXPECT_EQ(layer_copies, 24);  // the root unit's, in forward, is larger
    const std::vector<std::string> next = followers(fmt::format("fsdp.{}_weight_copy_out", pass));
    ASSERT_EQ(next.size(), copies.size());
    for (const std::string& name : next)
      EXPECT_TRUE(name.ends_with(std::string(".") + pass)) << name;
  }
  const std::vector<Span> copied_in = named("fsdp.gradient_copy_in");
  const std::vector<Span> scatters = named("fsdp.gradient_reduce_scatter");
  ASSERT_EQ(copied_in.size(), scatters.size());
  int copied_blocks = 0;
  for (size_t i = 0; i < scatters.size(); ++i) {
    EXPECT_EQ(copied_in[i].stream, "compute") << i;
    EXPECT_GE(scatters[i].start, copied_in[i].end) << i;
    if (i > 0) {
      EXPECT_GE(copied_in[i].start, scatters[i - 1].end) << i;
    }
    // bf16 read and fp32 written: 6 bytes a weight, the layers' and the embedding table's.
    if (copied_in[i].end - copied_in[i].start >= 3.0 * layer_weight_bytes / h100_peak_bytes_per_s)
      ++copied_blocks;
  }
  EXPECT_EQ(copied_blocks, 25);
  // After a layer's copy the compute stream copies out the next layer's weights; the first
  // layer's is followed by the embedding's backward, whose weights stayed gathered with the
  // rest of the root unit, and the root's copy by the step.
  const std::vector<std::string> after_copy_in = followers("fsdp.gradient_copy_in");
  ASSERT_EQ(after_copy_in.size(), copied_in.size());
  ASSERT_GE(after_copy_in.size(), 2u);
  for (size_t i = 0; i + 2 < after_copy_in.size(); ++i)
    EXPECT_EQ(after_copy_in[i], "fsdp.backward_weight_copy_out");
  EXPECT_TRUE(after_copy_in[after_copy_in.size() - 2].starts_with("embedding."));
  EXPECT_TRUE(after_copy_in.back().starts_with("step."));
  const std::string flat =
      std::string(text).replace(text.find(", fsdp_gather: per_parameter"),
                                std::string(", fsdp_gather: per_parameter").size(), "");
  EXPECT_GT(p.result.iteration_time, simulate(scenario_of(flat)).result.iteration_time);
}

TEST(Lowering, PerParameterFsdpStagesItsGathersInAnAllocatorPoolOfTheirOwn) {
  // FSDP2 gathers into staging buffers allocated on its copy-in stream, whose pool in PyTorch's
  // caching allocator keeps its own high-water mark. Each gather allocates in the all-gather pool
  // (1); each copy out allocates the block's weights in the compute pool (0) and frees, in pool 1,
  // the staging buffer a forward copy out kept before it, and in backward its own too.
  const std::string text = fsdp2_gpt(16);
  const Prediction p = simulate(scenario_of(text));
  const StageProgram& stage = *p.lowering->stages[0];
  const auto name_of = [&](const Task& task) {
    const TaskLabel& label = stage.labels[task.label];
    return label.plan == kNoId ? std::string(stage.lone_name(label)) : std::string();
  };
  std::array<int64_t, 3> allocated{}, freed{};
  int gathers = 0, sharding_scatters = 0;
  for (TaskId id = 0; id < stage.program.num_tasks(); ++id) {
    const Task task = stage.program.task(id);
    ASSERT_LT(task.alloc_pool, 3);
    ASSERT_LT(task.free_pool, 3);
    EXPECT_EQ(task.transient_pool, 0);
    allocated[task.alloc_pool] += task.alloc_at_start_bytes;
    freed[task.free_pool] += task.free_at_end_bytes;
    const std::string name = name_of(task);
    if (name.starts_with("fsdp.") && name.ends_with("_weight_gather")) {
      ++gathers;
      EXPECT_EQ(task.alloc_pool, 1) << name;
      EXPECT_GT(task.alloc_at_start_bytes, 0) << name;
    }
    // The sharded gradients (pool 2) come from each block's first reduce-scatter of the step,
    // which stages its input in the compute pool.
    if (name == "fsdp.gradient_reduce_scatter" && task.alloc_at_start_bytes > 0) {
      ++sharding_scatters;
      EXPECT_EQ(task.alloc_pool, 2);
      EXPECT_EQ(task.alloc_at_start_bytes * 8, task.transient_bytes);
    }
  }
  EXPECT_EQ(gathers, 2 * (25 + 24));  // per micro-batch: the root and 24 layers, the layers again
  EXPECT_GT(allocated[1], 0);
  EXPECT_EQ(allocated[1], freed[1]) << "every staging buffer is freed by the step's end";
  EXPECT_EQ(sharding_scatters, 25);  // the root's and the layers', in the first micro-batch
  EXPECT_EQ(freed[2], 0);
  // They are the rank's gradient shards, not resident as the step starts.
  const StaticMemory& states = stage.static_memory;
  EXPECT_EQ(states.reduce_scattered_gradient_bytes, states.gradient_bytes);
  EXPECT_NEAR(static_cast<double>(allocated[2]), static_cast<double>(states.gradient_bytes), 64.0);
  EXPECT_EQ(p.lowering->ranks[0].initial_memory_bytes, states.resident_bytes());
  const double layer_bytes = 2.0 * (12.0 * 2304.0 * 2304.0 + 13.0 * 2304.0);
  int64_t kept = 0;  // by the last forward copy out
  int64_t root_bytes = 0;
  int copies = 0;
  for (const TaskId id : stage.program.stream_tasks(static_cast<StreamId>(StreamKind::kCompute))) {
    const Task task = stage.program.task(id);
    const std::string name = name_of(task);
    const bool forward = name == "fsdp.forward_weight_copy_out";
    if (!forward && name != "fsdp.backward_weight_copy_out") continue;
    SCOPED_TRACE(fmt::format("copy {}, {}", copies++, name));
    EXPECT_EQ(task.alloc_pool, 0);
    EXPECT_EQ(task.free_pool, 1);
    if (task.alloc_at_start_bytes != static_cast<int64_t>(layer_bytes)) {
      root_bytes = task.alloc_at_start_bytes;
    }
    EXPECT_EQ(task.free_at_end_bytes, kept + (forward ? 0 : task.alloc_at_start_bytes));
    kept = forward ? task.alloc_at_start_bytes : 0;
  }
  EXPECT_EQ(copies, 2 * (25 + 24));
  EXPECT_GT(static_cast<double>(root_bytes), layer_bytes);
  // The all-gather pool's peak comes on top of the compute pool's: the root's buffer beside at
  // most two layers'. With `block` gathers everything comes from one pool.
  const Result& r = p.result;
  EXPECT_GT(r.peak_reserved_bytes, r.peak_memory_bytes);
  EXPECT_LE(static_cast<double>(r.peak_reserved_bytes),
            static_cast<double>(r.peak_memory_bytes + root_bytes) + 2.0 * layer_bytes);
  std::string flat = text;
  flat.replace(flat.find(", fsdp_gather: per_parameter"), 28, "");
  const Result block = simulate(scenario_of(flat)).result;
  EXPECT_EQ(block.peak_reserved_bytes, block.peak_memory_bytes);
}

TEST(Lowering, PipelinedFsdp2GathersEachBlockOnceAStepAsItsFirstForwardNears) {
  // GPT 1.7B on 2 stages of 4 data-parallel ranks under PyTorch FSDP2: each block's weights are
  // gathered once a step into a staging buffer of the all-gather pool and copied out before its
  // first forward; the next block's gather waits for that copy (FSDP2's implicit prefetch), so
  // the pool holds at most two staging buffers. The last stays until the next step's first copy.
  // Beside them the step's reduce-scatters bring the gradient shards into being in the pool of
  // their own stream.
  const std::string text = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {pp: 2, dp: 4, zero: 3, fsdp_gather: per_parameter}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
)";
  const Prediction p = simulate(scenario_of(text));
  const StageProgram& stage = *p.lowering->stages[0];
  std::array<int64_t, 3> allocated{}, freed{};
  int64_t largest_gather = 0;
  std::vector<TaskId> gathers, copies;
  for (TaskId id = 0; id < stage.program.num_tasks(); ++id) {
    const Task task = stage.program.task(id);
    allocated[task.alloc_pool] += task.alloc_at_start_bytes;
    freed[task.free_pool] += task.free_at_end_bytes;
    const TaskLabel& label = stage.labels[task.label];
    if (label.plan != kNoId) continue;
    const std::string_view name = stage.lone_name(label);
    if (name == "dp.weight_all_gather") {
      gathers.push_back(id);
      EXPECT_EQ(task.alloc_pool, 1);
      largest_gather = std::max(largest_gather, task.alloc_at_start_bytes);
    }
    if (name == "fsdp.forward_weight_copy_out") copies.push_back(id);
  }
  // Stage 0: the embedding and 12 layers, each copied out once for the 4 micro-batches.
  ASSERT_EQ(gathers.size(), 13u);
  ASSERT_EQ(copies.size(), 13u);
  for (size_t k = 0; k + 1 < gathers.size(); ++k) {
    const std::vector<TaskId> waits = stage.program.dependencies(gathers[k + 1]);
    EXPECT_NE(std::find(waits.begin(), waits.end(), copies[k]), waits.end()) << k;
  }
  EXPECT_EQ(allocated[1] - freed[1], stage.program.task(gathers.back()).alloc_at_start_bytes);
  const Result& r = p.result;
  EXPECT_GT(r.peak_reserved_bytes, r.peak_memory_bytes);
  EXPECT_LE(r.peak_reserved_bytes, r.peak_memory_bytes + 2 * largest_gather + allocated[2]);
  EXPECT_EQ(to_json(r).at("scenario").at("parallelism").at("fsdp_gather").string(),
            "per_parameter");
}

// The bytes stage 0's tasks named `name` stage while they run, one entry per task.
std::vector<int64_t> staged_bytes(const Prediction& p, std::string_view name) {
  const StageProgram& stage = *p.lowering->stages[0];
  std::vector<int64_t> bytes;
  for (TaskId id = 0; id < stage.program.num_tasks(); ++id) {
    const Task task = stage.program.task(id);
    const TaskLabel& label = stage.labels[task.label];
    if (label.plan == kNoId && stage.lone_name(label) == name)
      bytes.push_back(task.transient_bytes);
  }
  return bytes;
}

// Stage `stage`'s tasks on its first rank, in time order.
struct StageTask {
  double start_s;
  double end_s;
  std::string name;
  std::string stream;
  int32_t microbatch;
  auto operator<=>(const StageTask&) const = default;
};
std::vector<StageTask> stage_tasks(const Prediction& p, int stage) {
  const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
  std::vector<StageTask> tasks;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.stage[i] == stage && t.rank[i] == p.lowering->rank_global[stage]) {
      tasks.push_back({t.start_s[i], t.end_s[i], t.names[t.name[i]], t.stream_names[t.stream[i]],
                       t.microbatch[i]});
    }
  }
  std::sort(tasks.begin(), tasks.end());
  return tasks;
}

// A layer of GPT 1.7B holds 12·h² + 13·h parameters (h = 2304): QKV 3h² + 3h, projection h² + h,
// fc1 4h² + 4h, fc2 4h² + h and two LayerNorms 4h; its embedding 51,200 tokens and 2,048
// positions of h.
constexpr int64_t kGptLayerParameters = 12 * 2304 * 2304 + 13 * 2304;
constexpr int64_t kGptEmbeddingParameters = (51200 + 2048) * 2304;

TEST(Lowering, PipelinedFsdp2ReducesAChunksGradientsAfterItsLastBackwardAheadOfItsSend) {
  // GPT 1.7B on 2 stages of 4 data-parallel ranks under PyTorch FSDP2, 4 micro-batches: PyTorch's
  // pipelining runs FSDP2's post-backward hooks with gradient sync once a stage's backward of its
  // last micro-batch is done, each block's copy into its reduce-scatter's input waiting for the
  // reduce-scatter before, and sends that backward's input gradient on only after the last copy;
  // the sends before are not held. Stage 1 (12 layers and the head) reduces 13 blocks, stage 0
  // the embedding's and 12 layers'.
  const Prediction p = simulate(scenario_of(R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {pp: 2, dp: 4, zero: 3, fsdp_gather: per_parameter}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
)"));
  for (int stage = 0; stage < 2; ++stage) {
    SCOPED_TRACE(stage);
    double backward_end = 0.0;
    std::vector<StageTask> copies, scatters, sends;
    for (const StageTask& task : stage_tasks(p, stage)) {
      if (task.name == "fsdp.gradient_copy_in") {
        copies.push_back(task);
      } else if (task.name == "fsdp.gradient_reduce_scatter") {
        scatters.push_back(task);
      } else if (task.name == "pp.send_gradient") {
        sends.push_back(task);
      } else if (task.stream == "compute" && task.microbatch == 3) {
        backward_end = std::max(backward_end, task.end_s);
      }
      EXPECT_FALSE(task.name.starts_with("dp.gradient_reduce_scatter")) << task.name;
    }
    ASSERT_EQ(copies.size(), 13u);
    ASSERT_EQ(scatters.size(), 13u);
    EXPECT_GT(backward_end, 0.0);
    EXPECT_GE(copies.front().start_s, backward_end);
    for (size_t k = 0; k < 13; ++k) {
      EXPECT_GE(scatters[k].start_s, copies[k].end_s) << k;
      if (k + 1 < 13) {
        EXPECT_GE(copies[k + 1].start_s, scatters[k].end_s) << k;
      }
    }
    if (stage == 1) {
      ASSERT_EQ(sends.size(), 4u);
      EXPECT_GE(sends.back().start_s, copies.back().end_s);
      EXPECT_LT(sends[2].end_s, copies.front().start_s);
    } else {
      EXPECT_TRUE(sends.empty());
    }
  }
  // Stage 0's reduce-scatters stage each block's gradients in fp32, the reduce dtype: the
  // embedding's first, then its 12 layers'.
  const std::vector<int64_t> scattered = staged_bytes(p, "fsdp.gradient_reduce_scatter");
  ASSERT_EQ(scattered.size(), 13u);
  EXPECT_EQ(scattered.front(), kGptEmbeddingParameters * 4);
  EXPECT_EQ(std::count(scattered.begin() + 1, scattered.end(), kGptLayerParameters * 4), 12);
  // Each layer's copy in frees its accumulated fp32 gradients and, resharded by the hook, its
  // 16-bit weights gathered for the step.
  const StageProgram& first = *p.lowering->stages[0];
  int layer_copies = 0;
  for (TaskId id = 0; id < first.program.num_tasks(); ++id) {
    const Task task = first.program.task(id);
    const TaskLabel& label = first.labels[task.label];
    if (label.plan != kNoId || first.lone_name(label) != "fsdp.gradient_copy_in") continue;
    if (task.free_at_end_bytes == kGptLayerParameters * (4 + 2)) ++layer_copies;
  }
  EXPECT_EQ(layer_copies, 12);
}

TEST(Lowering, InterleavedFsdp2ReducesEachChunkAfterItsOwnLastBackward) {
  // The same run interleaved, 2 chunks of 6 layers a stage: stage 0 reduces its second chunk's 6
  // layers once that chunk's last backward is done, before its first chunk's last backward, and
  // the first chunk's embedding and 6 layers after it.
  const Prediction p = simulate(scenario_of(R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {pp: 2, dp: 4, zero: 3, fsdp_gather: per_parameter, schedule: interleaved-1f1b, virtual_stages: 2}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
)"));
  std::vector<double> copy_starts;
  double first_chunk_last_backward_start = 0.0;
  for (const StageTask& task : stage_tasks(p, 0)) {
    if (task.name == "fsdp.gradient_copy_in") copy_starts.push_back(task.start_s);
    if (task.name == "embedding.backward" && task.microbatch == 3)
      first_chunk_last_backward_start = task.start_s;
  }
  ASSERT_EQ(copy_starts.size(), 13u);
  ASSERT_GT(first_chunk_last_backward_start, 0.0);
  EXPECT_EQ(std::ranges::count_if(
                copy_starts, [&](double start) { return start < first_chunk_last_backward_start; }),
            6);
  const std::vector<int64_t> scattered = staged_bytes(p, "fsdp.gradient_reduce_scatter");
  ASSERT_EQ(scattered.size(), 13u);
  EXPECT_EQ(scattered[6], kGptEmbeddingParameters * 4);
}

// The names of the gradient buckets reduced by rank 0 of `stage`, one entry per bucket.
std::vector<std::string> reduced_buckets(const Prediction& p, int stage,
                                         std::string_view collective) {
  std::vector<std::string> buckets;
  for (const StageTask& task : stage_tasks(p, stage)) {
    if (task.name.starts_with(collective)) buckets.push_back(task.name);
  }
  return buckets;
}

TEST(Lowering, MegatronBucketsTheGradientsOfTheFirstStagesFirstChunkOnly) {
  // GPT 1.7B's 24 layers (64M parameters each) on 2 stages of 2 chunks, buckets of 10M: each
  // block of stage 0's chunk 0 (6 layers and the embedding) fills a bucket of its own; its
  // chunk 1, and both chunks of stage 1, are reduced as one bucket each.
  const std::string scenario = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {pp: 2, dp: 4, zero: 1, virtual_stages: 2}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048, grad_bucket_parameters: 10000000)";
  const Prediction overlapped = simulate(scenario_of(scenario + "}\n"));
  EXPECT_EQ(reduced_buckets(overlapped, 0, "dp.gradient_reduce_scatter").size(), 8u);
  EXPECT_EQ(reduced_buckets(overlapped, 1, "dp.gradient_reduce_scatter").size(), 2u);
  // Without overlap every chunk is one bucket, reduced after the backward.
  const Prediction after = simulate(scenario_of(scenario + ", overlap_grad_reduce: false}\n"));
  EXPECT_EQ(reduced_buckets(after, 0, "dp.gradient_reduce_scatter").size(), 2u);
  // PyTorch FSDP with pipelining reduce-scatters block by block (6 and 7 blocks on stage 0).
  const std::string fsdp =
      std::string(scenario).replace(scenario.find("zero: 1"), 7, "zero: 3") + "}\n";
  EXPECT_EQ(reduced_buckets(simulate(scenario_of(fsdp)), 0, "dp.gradient_reduce_scatter").size(),
            13u);
}

TEST(Lowering, HybridShardedAllReducedGradientsCrossTheReplicasInBuckets) {
  // ZeRO-3 without pipelining, gradients all-reduced over shards of 4 of the 8 data-parallel
  // ranks (tp 2): the step all-reduces the shards across the replicas in the step's buckets. GPT
  // 1.7B's 24 layers (64M parameters, 32M a rank) and the embedding: 40M parameters a bucket (dp
  // 8) takes two layers, 1e9 all of them.
  const std::string scenario = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 16}
parallelism: {tp: 2, zero: 3, zero_shard: 4, fsdp_gradient_reduce: all_reduce}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048)";
  EXPECT_EQ(
      reduced_buckets(simulate(scenario_of(scenario + "}\n")), 0, "dp.replica_all_reduce").size(),
      13u);
  EXPECT_EQ(
      reduced_buckets(simulate(scenario_of(scenario + ", grad_bucket_parameters: 1000000000}\n")),
                      0, "dp.replica_all_reduce")
          .size(),
      1u);
}

TEST(Lowering, MegatronsNonInterleavedScheduleWaitsForEachPipelineTransfer) {
  // Two stages a node apart over 10 Gb/s: the first stage's activation takes milliseconds to
  // send. Megatron-LM's 1F1B waits for it before the next forward; PyTorch's pipelining (FSDP:
  // zero 3) runs that forward beside it.
  const std::string scenario = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 1, inter_node: {nics_per_node: 1, nic_bandwidth: 10 Gb/s, latency: 5 us,
  bandwidth_efficiency: 0.9}}
training: {global_batch: 4, micro_batch: 1, seq_len: 2048}
parallelism: {pp: 2)";
  // (end of micro-batch 0's send, start of micro-batch 1's forward) on rank 0.
  auto send_then_forward = [](const Prediction& p) {
    const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
    double sent_s = 0.0;
    double next_forward_s = 1e9;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.rank[i] != 0) continue;
      const std::string& name = t.names[t.name[i]];
      if (name == "pp.send_activation" && t.microbatch[i] == 0) sent_s = t.end_s[i];
      if (name.ends_with(".forward") && t.microbatch[i] == 1)
        next_forward_s = std::min(next_forward_s, t.start_s[i]);
    }
    return std::pair{sent_s, next_forward_s};
  };
  const auto [megatron_sent_s, megatron_forward_s] =
      send_then_forward(simulate(scenario_of(scenario + "}\n")));
  EXPECT_GT(megatron_sent_s, 0.0);
  EXPECT_GE(megatron_forward_s, megatron_sent_s);
  const auto [fsdp_sent_s, fsdp_forward_s] =
      send_then_forward(simulate(scenario_of(scenario + ", zero: 3}\n")));
  EXPECT_LT(fsdp_forward_s, fsdp_sent_s);
  // A later stage reduces its gradients once the schedule is done, after its last send: two
  // data-parallel ranks a stage, in two nodes of two GPUs.
  const Prediction reduced = simulate(
      scenario_of(std::string(scenario).replace(scenario.find("nodes: 2, gpus_per_node: 1"), 26,
                                                "nodes: 2, gpus_per_node: 2") +
                  ", zero: 1}\n"));
  const Timeline t = make_timeline(*reduced.lowering, reduced.run, /*kernels=*/false);
  double last_send_end_s = 0.0;
  double reduction_start_s = -1.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.rank[i] != reduced.lowering->rank_global[1]) continue;
    const std::string& name = t.names[t.name[i]];
    if (name == "pp.send_gradient") last_send_end_s = std::max(last_send_end_s, t.end_s[i]);
    if (name.starts_with("dp.gradient_reduce_scatter")) reduction_start_s = t.start_s[i];
  }
  EXPECT_GT(last_send_end_s, 0.0);
  EXPECT_GE(reduction_start_s, last_send_end_s);
}

TEST(Lowering, MegatronsStepCollectivesRunInPlaceWhereFsdpStagesItsGradients) {
  // Megatron-LM reduces its gradient buffer and gathers into its parameter buffer in place
  // (ParamAndGradBuffer): its step's collectives hold no bytes of their own. FSDP stages a
  // block's unsharded gradients for its reduce-scatter. A group of one stages nothing.
  const Prediction megatron = simulate(scenario_of(R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {dp: 8, zero: 1}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048, overlap_param_gather: false}
)"));
  for (const char* name :
       {"dp.gradient_reduce_scatter bucket 0", "dp.weight_all_gather", "step.gradient_norm"}) {
    EXPECT_EQ(staged_bytes(megatron, name), std::vector<int64_t>{0}) << name;
  }
  const Prediction fsdp = simulate(scenario_of(R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {dp: 8, zero: 3}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048}
)"));
  const std::vector<int64_t> scattered = staged_bytes(fsdp, "fsdp.gradient_reduce_scatter");
  ASSERT_FALSE(scattered.empty());
  // Each of the 24 layers' gradients in fp32, the reduce dtype: 12·2304² weights and 13·2304
  // biases and norms.
  EXPECT_EQ(std::ranges::count(scattered, kGptLayerParameters * 4), 24);
  const Prediction alone = simulate(scenario_of(R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 1}
parallelism: {zero: 3}
training: {global_batch: 2, micro_batch: 1, seq_len: 2048}
)"));
  const std::vector<int64_t> single = staged_bytes(alone, "fsdp.gradient_reduce_scatter");
  ASSERT_FALSE(single.empty());
  EXPECT_EQ(std::ranges::max(single), 0);
}

// Rank 0's bytes in use above its static memory at `time_s`: what the tasks started by then
// allocated, less what those ended by then freed, with the transients of those running.
int64_t dynamic_bytes_at(const Prediction& p, double time_s) {
  const Program& program = p.lowering->stages[0]->program;
  int64_t bytes = 0;
  for (const TaskSpan& span : p.run.spans) {
    if (span.rank != 0) continue;
    const Task& task = program.kind(span.task);
    if (to_seconds(span.start) / Seconds(1) <= time_s)
      bytes += task.alloc_at_start_bytes + task.transient_bytes;
    if (to_seconds(span.end) / Seconds(1) <= time_s)
      bytes -= task.free_at_end_bytes + task.transient_bytes;
  }
  return bytes;
}

TEST(Lowering, Fsdp2KeepsItsRootUnitGatheredUntilTheBackwardEnds) {
  // Two Llama-like layers (hidden h = 4096) under a large untied vocabulary V = 128256, on 8
  // H100s under PyTorch FSDP2, 2 micro-batches: the embedding and the output layer form the root
  // unit, gathered once as each micro-batch's forward starts and kept through its backward, so
  // only the layers are gathered for backward; the output layer's gradient waits for the
  // embedding's, and one reduce-scatter takes both once the embedding's backward is done. As
  // the last layer's backward starts, the two tables (V·h bf16 weights each), the output
  // layer's bf16 gradient and the layer's weights gathered again are held, far more than the
  // 256 tokens' activations; once the step's reductions are done none is. Tied, the root holds
  // the one table, and autograd its gradient from the head until the embedding adds its own.
  // Gathering block by block (`block`) the head is gathered and reduced as a block of its own.
  // Under gpipe every forward runs before the first backward, and the root gathered for the first
  // forward serves them all; the backwards after the first gather it again. Under zero-bubble
  // the embedding's B pass frees it (its W pass has nothing to run).
  const std::string text = R"(model:
  name: wide-vocabulary
  layers: 2
  hidden: 4096
  heads: 32
  kv_heads: 8
  ffn_hidden: 14336
  vocab: 128256
  seq_len: 256
  activation: swiglu
  norm: rmsnorm
  position: rope
  tied_embeddings: false
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {dp: 8, zero: 3, fsdp_gather: GATHER, schedule: SCHEDULE}
training: {global_batch: 16, micro_batch: 1, seq_len: 256}
)";
  const double table_bytes = 128256.0 * 4096.0 * 2.0;
  // Q and O 4096², K and V 4096·1024, three MLP projections 4096·14336, two norms, in bf16.
  const double layer_bytes =
      2.0 * (2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336 + 2 * 4096);
  for (const std::string gather : {"per_parameter", "block"}) {
    for (const std::string schedule : {"1f1b", "gpipe", "zero-bubble", "tied"}) {
      SCOPED_TRACE(gather + " " + schedule);
      const bool root = gather == "per_parameter";
      const bool gpipe = schedule == "gpipe";
      const bool zero_bubble = schedule == "zero-bubble";
      const bool tied = schedule == "tied";
      std::string scenario = text;
      scenario.replace(scenario.find("GATHER"), 6, gather);
      scenario.replace(scenario.find("SCHEDULE"), 8, tied ? "1f1b" : schedule);
      if (tied)
        scenario.replace(scenario.find("tied_embeddings: false"), 22, "tied_embeddings: true");
      const Prediction p = simulate(scenario_of(scenario));
      const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
      // Rank 0's spans, in time order.
      std::vector<std::tuple<double, double, std::string>> spans;
      for (size_t i = 0; i < t.size(); ++i) {
        if (t.rank[i] == 0) spans.emplace_back(t.start_s[i], t.end_s[i], t.names[t.name[i]]);
      }
      std::sort(spans.begin(), spans.end());
      const auto count = [&](std::string_view name) {
        return std::ranges::count_if(spans, [&](const auto& s) { return std::get<2>(s) == name; });
      };
      // Forward: the root unit and the 2 layers, or the embedding, the 2 layers and the head;
      // backward: the layers alone, or all four again.
      EXPECT_EQ(count("fsdp.forward_weight_gather"), root ? (gpipe ? 1 + 2 * 2 : 2 * 3) : 2 * 4);
      EXPECT_EQ(count("fsdp.backward_weight_gather"), root ? 2 * 2 + (gpipe ? 1 : 0) : 2 * 4);
      EXPECT_EQ(count("fsdp.gradient_reduce_scatter"), 2 * (root ? 3 : 4));
      EXPECT_EQ(count("fsdp.root_gradients_kept"), 2 * (root ? 1 : 0));
      // Each micro-batch's last reduce-scatter is the root's, after the embedding's backward
      // (under zero-bubble its B pass: its W pass has nothing to run), which frees the root.
      // Under zero-bubble the head's gradients come with its W pass, after the layers' B passes.
      const std::string freeing = zero_bubble ? "embedding.backward_input" : "embedding.backward";
      const std::string layer_backward = zero_bubble ? "layer.backward_input" : "layer.backward";
      std::vector<double> embedding_backward_end, head_backward_end, layer_backward_start,
          scatter_start;
      double step_start = 0.0;
      for (const auto& [start, end, name] : spans) {
        if (name == freeing) embedding_backward_end.push_back(end);
        if (name == (zero_bubble ? "head.backward_weight" : "head.backward"))
          head_backward_end.push_back(end);
        if (name == layer_backward) layer_backward_start.push_back(start);
        if (name == "fsdp.gradient_reduce_scatter") scatter_start.push_back(start);
        if (name == "step.gradient_norm") step_start = start;
      }
      // Every schedule frees what each micro-batch gathered and kept.
      EXPECT_GT(step_start, 0.0);
      EXPECT_GE(dynamic_bytes_at(p, step_start), 0);
      EXPECT_LT(static_cast<double>(dynamic_bytes_at(p, step_start)), table_bytes);
      if (!root) continue;
      ASSERT_EQ(embedding_backward_end.size(), 2u);
      ASSERT_EQ(head_backward_end.size(), 2u);
      ASSERT_EQ(layer_backward_start.size(), 2u * 2u);
      ASSERT_EQ(scatter_start.size(), 2u * 3u);
      for (int microbatch = 0; microbatch < 2; ++microbatch) {
        EXPECT_GE(scatter_start[3 * microbatch + 2], embedding_backward_end[microbatch]);
        EXPECT_GE(scatter_start[3 * microbatch + 2], head_backward_end[microbatch]);
        const double tables = (tied ? 1.0 : 2.0) + (zero_bubble ? 0.0 : 1.0);
        EXPECT_GE(static_cast<double>(dynamic_bytes_at(p, layer_backward_start[2 * microbatch])),
                  tables * table_bytes + layer_bytes);
      }
    }
  }
}

TEST(Lowering, PerTensorFsdpGathersTheTensorsKeptWholeAfterTheStep) {
  // The tensors of at most 10^5 elements stay whole, and after the optimizer their updated
  // shards are gathered once, then copied into place tensor by tensor and rank by rank from
  // Python: per layer the two norms' weights and biases and the four projections' biases, and the
  // final norm's two, each in 8 shares of 4 Python-level ops (2 us each) and a launch (2.6 us).
  const std::string text = kPerTensorGpt;
  const auto spans_of = [](const Prediction& p, std::string_view name) {
    return rank0_spans(make_timeline(*p.lowering, p.run, /*kernels=*/false), name);
  };
  const Prediction p = simulate(scenario_of(text));
  const auto optimizer = spans_of(p, "step.optimizer");
  const auto list = spans_of(p, "fsdp.persistent_weight_gather.list");
  const auto gather = spans_of(p, "fsdp.persistent_weight_gather");
  const auto copies = spans_of(p, "fsdp.persistent_weight_gather.copies");
  const auto unpack = spans_of(p, "fsdp.persistent_weight_gather.unpack");
  ASSERT_EQ(optimizer.size(), 1u);
  ASSERT_EQ(list.size(), 1u);
  ASSERT_EQ(gather.size(), 1u);
  ASSERT_EQ(copies.size(), 1u);
  ASSERT_EQ(unpack.size(), 1u);
  EXPECT_GE(list[0].first, optimizer[0].second);
  EXPECT_GE(gather[0].first, list[0].second);
  EXPECT_GE(copies[0].first, gather[0].second);
  EXPECT_GE(unpack[0].first, copies[0].second);
  EXPECT_NEAR(list[0].second - list[0].first, 8 * 2e-6, 1e-12);
  const int kept_whole = 24 * 8 + 2;
  EXPECT_NEAR(unpack[0].second - unpack[0].first, kept_whole * 8 * (4 * 2e-6 + 2.6e-6), 1e-9);
  EXPECT_NEAR(p.result.iteration_time / Seconds(1), unpack[0].second, 1e-9);

  // Over 3072 ranks a tensor of 2304 elements is one element a rank on 2304 of them, the QKV
  // biases (6912) and fc1's (9216) three on 2304 and 3072: of each tensor, only the ranks holding
  // a share are copied from.
  const std::string wide = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 384, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}}
parallelism: {dp: 3072, zero: 3, fsdp_prefetch: 0, fsdp_gather: tensor}
training: {global_batch: 3072, micro_batch: 1, seq_len: 2048}
)";
  const auto wide_unpack =
      spans_of(simulate(scenario_of(wide)), "fsdp.persistent_weight_gather.unpack");
  ASSERT_EQ(wide_unpack.size(), 1u);
  const int shares = 24 * (4 * 2304 + 2304 + 2304 + 3072 + 2304) + 2 * 2304;
  EXPECT_NEAR(wide_unpack[0].second - wide_unpack[0].first, shares * (4 * 2e-6 + 2.6e-6), 1e-9);

  // Gathering whole blocks, or keeping no tensor whole, there is nothing to gather after the step.
  for (const std::string& variant :
       {std::string(text).replace(text.find(", fsdp_gather: tensor"),
                                  std::string(", fsdp_gather: tensor").size(), ""),
        std::string(text).replace(text.find("fsdp_gather: tensor"),
                                  std::string("fsdp_gather: tensor").size(),
                                  "fsdp_gather: tensor, fsdp_persistence_threshold: 0")}) {
    const Prediction other = simulate(scenario_of(variant));
    EXPECT_TRUE(spans_of(other, "fsdp.persistent_weight_gather").empty()) << variant;
    EXPECT_TRUE(spans_of(other, "fsdp.persistent_weight_gather.unpack").empty()) << variant;
  }
}

TEST(Lowering, FullRecomputeGathersAgainTheTensorsUsedFarApart) {
  // GPT 1.7B (hidden h = 2304) gathering per tensor under full recompute. Between a tensor's use
  // in the recomputed forward and in backward come the later tensors of its layer twice: 2·9h²
  // elements for QKV (projection h², fc1 and fc2 4h² each), 2·8h² for the projection, 2·4h² for
  // fc1, none for fc2 (biases and norms aside). At 5·10⁷ elements (9.4h²) QKV and the projection
  // are gathered again, at 0 all four, at DeepSpeed's 10⁹ none; the embedding and head are not
  // recomputed.
  const std::string text = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {dp: 8, zero: 3, fsdp_prefetch: 0, fsdp_gather: tensor}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048, recompute: full}
)";
  auto regathers = [](const Prediction& p) {
    const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
    size_t count = 0;
    for (size_t i = 0; i < t.size(); ++i) count += t.rank[i] == 0 && t.names[t.name[i]] == "fsdp.backward_weight_regather";
    return count;
  };
  const int layers = 24;
  const Prediction kept = simulate(scenario_of(text));
  EXPECT_EQ(regathers(kept), 0u);
  const std::string anchor = "fsdp_gather: tensor";
  const Prediction two = simulate(scenario_of(std::string(text).insert(text.find(anchor), "fsdp_reuse_distance: 50000000, ")));
  EXPECT_EQ(regathers(two), static_cast<size_t>(2 * layers));
  const Prediction all = simulate(scenario_of(std::string(text).insert(text.find(anchor), "fsdp_reuse_distance: 0, ")));
  EXPECT_EQ(regathers(all), static_cast<size_t>(4 * layers));
  EXPECT_LT(kept.result.iteration_time, two.result.iteration_time);
  EXPECT_LT(two.result.iteration_time, all.result.iteration_time);
  // A tensor gathered again replaces the copy released before it.
  EXPECT_EQ(all.result.peak_memory_bytes, kept.result.peak_memory_bytes);
  // Without recompute backward gathers each tensor once anyway.
  std::string plain = std::string(text).insert(text.find(anchor), "fsdp_reuse_distance: 0, ");
  plain.replace(plain.find(", recompute: full"), std::string(", recompute: full").size(), "");
  EXPECT_EQ(regathers(simulate(scenario_of(plain))), 0u);
}

// The spans of rank 0 named `name`, in seconds: tasks, or with `kernels` the ops within them.
std::vector<double> span_seconds(const Prediction& p, const std::string& name,
                                 bool kernels = false) {
  const Timeline t = make_timeline(*p.lowering, p.run, kernels);
  std::vector<double> seconds;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.rank[i] == 0 && t.names[t.name[i]] == name) seconds.push_back(t.end_s[i] - t.start_s[i]);
  }
  return seconds;
}

// GPT 1.7B over 16 GPUs on two nodes, ZeRO-3, one micro-batch per step.
constexpr std::string_view kZero3Gpt = R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 200 Gb/s}}
parallelism: {dp: 16, zero: 3, fsdp_prefetch: 0}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
)";

// kZero3Gpt with its gradients all-reduced, on rings, in buckets of `bucket` elements.
Prediction all_reduced_in_buckets(int64_t bucket) {
  std::string text(kZero3Gpt);
  text.insert(text.find("fsdp_prefetch"), "fsdp_gradient_reduce: all_reduce, ");
  text.insert(text.find("training"), "collectives: {all_reduce: ring}\n");
  text.insert(text.find("seq_len"), fmt::format("grad_bucket_parameters: {}, ", bucket));
  return simulate(scenario_of(text));
}

TEST(Lowering, AllReducedGradientsMoveTwiceTheBytesOfReduceScattered) {
  // Each block's gradients reduce-scattered after its backward, or all of them all-reduced in one
  // bucket after the last: the ring all-reduce sends each byte twice (reduce, then broadcast),
  // so it takes about twice as long as the reduce-scatters together, and the step longer.
  const Prediction scattered = simulate(scenario_of(std::string(kZero3Gpt)));
  const Prediction all = all_reduced_in_buckets(int64_t{10'000'000'000});
  const std::vector<double> scatter_s = span_seconds(scattered, "fsdp.gradient_reduce_scatter");
  const std::vector<double> all_s = span_seconds(all, "fsdp.gradient_all_reduce");
  ASSERT_EQ(scatter_s.size(), static_cast<size_t>(24 + 2));  // each layer, the embedding and the head
  ASSERT_EQ(all_s.size(), 1u);
  EXPECT_TRUE(span_seconds(all, "fsdp.gradient_reduce_scatter").empty());
  const double scatter_total = std::accumulate(scatter_s.begin(), scatter_s.end(), 0.0);
  EXPECT_GT(all_s[0], 1.8 * scatter_total);
  EXPECT_LT(all_s[0], 2.2 * scatter_total);
  EXPECT_GT(all.result.iteration_time, scattered.result.iteration_time);
}

TEST(Lowering, AllReducedGradientsFillBucketsInTheOrderTheyAreReady) {
  // DeepSpeed's rule: a gradient that would overflow the bucket sends it off first, and the end
  // of the backward pass sends what is left.
  const int64_t h = 2304;
  // One element per bucket: every weight tensor on its own (12 per layer: two norms, the QKV
  // and output projections and the two MLP projections, each with its bias; the head's final
  // norm; the tied word embedding and the learned positions).
  EXPECT_EQ(span_seconds(all_reduced_in_buckets(1), "fsdp.gradient_all_reduce").size(),
            static_cast<size_t>(24 * 12 + 2 + 2));
  // Buckets of one layer's parameters (12h² + 13h): the head's final norm (2h) and then a layer
  // but for its first norm (2h, the last of its gradients) fill one; that norm starts the next.
  // After the first layer, its norm and the positions (2048h) share a bucket, which the word
  // embedding (51200h) overflows; it goes alone.
  EXPECT_EQ(span_seconds(all_reduced_in_buckets(12 * h * h + 13 * h), "fsdp.gradient_all_reduce").size(),
            24u + 1u + 1u);
}

// The result of the scenario `text` with `insertion` put before the first `anchor` in it.
Result simulate_with(std::string text, const std::string& anchor, const std::string& insertion) {
  text.insert(text.find(anchor), insertion);
  return simulate(scenario_of(text)).result;
}

double exposed(const Result& r, ActivityTag tag) {
  return r.breakdown.exposed_by_tag[static_cast<int>(tag)] / Seconds(1);
}

TEST(Lowering, OverlappedTensorCollectivesHideBehindTheirGemms) {
  // Llama 3 70B with tp 8 on one node: the same FLOPs, less tensor-parallel communication in
  // the open, and the compute beside it slowed by the catalog's interference.
  const std::string text = R"(model: llama3-70b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {tp: 8}
training: {global_batch: 2, seq_len: 8192, recompute: full}
)";
  const Result plain = simulate(scenario_of(text)).result;
  const Result overlapped = simulate_with(text, "tp: 8", "tp_comm_overlap: true, ");
  EXPECT_DOUBLE_EQ(overlapped.hfu * overlapped.iteration_time / Seconds(1), plain.hfu * plain.iteration_time / Seconds(1));
  EXPECT_LT(exposed(overlapped, ActivityTag::kTensorComm), 0.5 * exposed(plain, ActivityTag::kTensorComm));
  EXPECT_GT(overlapped.breakdown.overlap_slowdown, plain.breakdown.overlap_slowdown);
  EXPECT_LT(overlapped.iteration_time, plain.iteration_time);
}

TEST(Lowering, UnfusedOptimizersPassOverTheStatesOncePerOp) {
  // Adam over fp32 states with fp32 gradients: fused, 4 + 8·3 + 2 = 30 bytes per parameter;
  // torch.optim's foreach passes, 72 + 3·4 = 84 and a 4-byte temporary. SGD: 4 + 16 + 2 = 22
  // against 28 + 4 = 32.
  Training adam;
  EXPECT_DOUBLE_EQ(optimizer_step(adam, 4.0, 2.0).traffic, 30.0);
  EXPECT_DOUBLE_EQ(optimizer_step(adam, 4.0, 2.0).transient, 0.0);
  adam.optimizer_kernels = OptimizerKernels::kUnfused;
  EXPECT_DOUBLE_EQ(optimizer_step(adam, 4.0, 2.0).traffic, 84.0);
  EXPECT_DOUBLE_EQ(optimizer_step(adam, 4.0, 2.0).transient, 4.0);
  Training sgd;
  sgd.optimizer = Optimizer::kSgd;
  EXPECT_DOUBLE_EQ(optimizer_step(sgd, 4.0, 2.0).traffic, 22.0);
  sgd.optimizer_kernels = OptimizerKernels::kUnfused;
  EXPECT_DOUBLE_EQ(optimizer_step(sgd, 4.0, 2.0).traffic, 32.0);
  // The step of GPT 1.7B on one GPU takes the bytes' ratio longer, zeroing the gradient (4 bytes)
  // included, up to the kernel overhead.
  const Result fused = simulate(scenario_of(kSingleGpu)).result;
  const Result unfused = simulate_with(kSingleGpu, "seq_len", "optimizer_kernels: unfused, ");
  EXPECT_NEAR(unfused.breakdown.optimizer / fused.breakdown.optimizer, (84.0 + 4.0) / (30.0 + 4.0), 0.01);
}

TEST(Lowering, ForLoopOptimizersHoldOneTensorsTemporaries) {
  // A for-loop makes the foreach passes tensor by tensor: the same bytes, and two 4-byte
  // temporaries of the largest tensor (GPT 1.7B: the 51200 x 2304 embedding) instead of one of
  // every parameter.
  Training adam;
  adam.optimizer_kernels = OptimizerKernels::kForLoop;
  EXPECT_DOUBLE_EQ(optimizer_step(adam, 4.0, 2.0).traffic, 84.0);
  EXPECT_DOUBLE_EQ(optimizer_step(adam, 4.0, 2.0).transient, 8.0);
  EXPECT_TRUE(optimizer_step(adam, 4.0, 2.0).per_tensor);
  // Short sequences: the step's temporaries set both peaks.
  const auto text = [](const std::string& kernels) {
    return "model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 1}\n"
           "training: {global_batch: 1, micro_batch: 1, seq_len: 64, optimizer_kernels: " + kernels + "}\n";
  };
  const Prediction unfused = simulate(scenario_of(text("unfused")));
  const Result for_loop = simulate(scenario_of(text("for_loop"))).result;
  EXPECT_EQ(for_loop.breakdown.optimizer, unfused.result.breakdown.optimizer);
  int64_t parameters = 0;
  for (const auto& stage : unfused.lowering->stages) parameters += stage->parameters;
  const int64_t largest = 51200LL * 2304;
  EXPECT_EQ(unfused.result.peak_memory_bytes - for_loop.peak_memory_bytes, 4 * parameters - 8 * largest);
}

TEST(Lowering, Bf16GradientsHalveGradientMemoryAndTraffic) {
  // GPT 1.7B data-parallel over two nodes, gradients reduced after backward (nothing hides
  // them): a 16-bit buffer halves the gradient bytes and about halves the exposed reduction.
  const std::string text = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}}
parallelism: {dp: 16, zero: 1}
training: {global_batch: 16, seq_len: 2048, overlap_grad_reduce: false}
)";
  const Result fp32 = simulate(scenario_of(text)).result;
  const Result bf16 = simulate_with(text, "overlap_grad_reduce", "gradient_dtype: bf16, ");
  EXPECT_EQ(2 * bf16.stages[0].gradient_bytes, fp32.stages[0].gradient_bytes);
  const double fp32_exposed = exposed(fp32, ActivityTag::kDataComm);
  EXPECT_GT(fp32_exposed, 0.0);
  EXPECT_LT(exposed(bf16, ActivityTag::kDataComm), 0.6 * fp32_exposed);
  EXPECT_GT(exposed(bf16, ActivityTag::kDataComm), 0.4 * fp32_exposed);
}

TEST(Lowering, Fp8ParametersAreGatheredInFp8) {
  // GPT 1.7B in fp8 over two nodes with the distributed optimizer gathering the updated weights
  // after the step: the 12·h² GEMM weights of each of the 24 layers, 90% of the weights, are
  // one fp8 byte each instead of the 16-bit weight and its fp8 copy, and move in fp8; the
  // embedding, biases and norms stay 16-bit. The gather moves 55% of the bytes.
  const std::string text = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}}
parallelism: {dp: 16, zero: 1}
training: {global_batch: 16, seq_len: 2048, precision: fp8, overlap_param_gather: false}
)";
  const Prediction bf16_weights = simulate(scenario_of(text));
  const Prediction fp8_weights = simulate(scenario_of(std::string(text).insert(text.find("overlap_param"),
                                                                                "fp8_param_gather: true, ")));
  const std::vector<double> bf16_gather = span_seconds(bf16_weights, "dp.weight_all_gather");
  const std::vector<double> fp8_gather = span_seconds(fp8_weights, "dp.weight_all_gather");
  ASSERT_EQ(bf16_gather.size(), 1u);
  ASSERT_EQ(fp8_gather.size(), 1u);
  EXPECT_LT(fp8_gather[0], 0.6 * bf16_gather[0]);
  EXPECT_GT(fp8_gather[0], 0.4 * bf16_gather[0]);
  const int64_t gemm_weights = 24 * 12 * int64_t{2304} * 2304;
  EXPECT_EQ(fp8_weights.result.stages[0].weight_bytes + 2 * gemm_weights,
            bf16_weights.result.stages[0].weight_bytes);
}

TEST(Lowering, WeightGradientsAddIntoTheGradientBufferUnlessEachMicrobatchReducesThem) {
  // Megatron-LM's weight-gradient GEMMs add into main_grad, in the gradient dtype; under FSDP
  // (zero 3) autograd's weight gradient is a fresh tensor, reduced at once; with pipelining FSDP
  // accumulates the unsharded gradients over the micro-batches in the reduce dtype.
  const auto targets = [](const std::string& parallelism, const std::string& training) {
    const auto s = scenario_of(fmt::format(R"(model: gpt-1.7b
cluster: {{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}}
parallelism: {{dp: 8, {}}}
training: {{global_batch: 16, seq_len: 2048{}}}
)",
                                           parallelism, training));
    const LayerGraph layer = build_transformer_layer(s->model, layer_shard(*s), false);
    std::set<std::optional<DType>> seen;
    int wgrads = 0;
    for (OpId id = 0; id < layer.num_ops(); ++id) {
      const Op& op = layer.op(id);
      if (op.kind != OpKind::kGemm || op.gemm.layout != GemmLayout::kWeightGradient) continue;
      ++wgrads;
      seen.insert(op.gemm.accumulates_into);
    }
    EXPECT_EQ(wgrads, 4);  // qkv, proj, fc1, fc2
    return seen;
  };
  EXPECT_EQ(targets("zero: 1", ""), (std::set<std::optional<DType>>{DType::kFp32}));
  EXPECT_EQ(targets("zero: 1", ", gradient_dtype: bf16"), (std::set<std::optional<DType>>{DType::kBf16}));
  EXPECT_EQ(targets("zero: 3", ""), (std::set<std::optional<DType>>{std::nullopt}));
  EXPECT_EQ(gradient_buffer(Training{}, /*zero=*/3, /*pp=*/2), DType::kFp32);
  EXPECT_EQ(gradient_buffer(Training{}, /*zero=*/2, /*pp=*/1), std::nullopt);
}

TEST(Lowering, TheHeadRecomputesItsPredictionModulesOnlyWhenEveryLayerIsRecomputed) {
  // Megatron-Core checkpoints each multi-token prediction module under the uniform method (every
  // layer recomputed whole); under the block method it skips them, even where the block covers
  // every layer of each chunk. Only the last stage, which runs the module, differs.
  const auto recomputed = [](const std::string& training) {
    const Prediction p = simulate(scenario_of(fmt::format(
        R"(model: {{name: m, layers: 4, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 32000, seq_len: 2048, activation: swiglu, norm: rmsnorm, position: rope, mtp_layers: 1}}
cluster: {{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}}
parallelism: {{dp: 4, pp: 2}}
training: {{global_batch: 16, recompute: full{}}}
)",
        training)));
    return std::array{p.lowering->stages[0]->recompute_flop, p.lowering->stages[1]->recompute_flop};
  };
  const auto uniform = recomputed("");
  const auto block = recomputed(", recompute_layers: 2");
  EXPECT_EQ(uniform[0], block[0]);
  EXPECT_GT(uniform[1], block[1]);
  EXPECT_GT(block[1], Flop(0));
}

TEST(Lowering, PerTensorGathersTreatTheHeadAsKeptThoughItRecomputesItsPredictionModules) {
  // DeepSpeed-style gathers fetch again, for backward, the weights of a layer recomputed whole.
  // The head is not: its output projection runs once. Its prediction modules' weights do run
  // again, but paceline fetches a block's weights again only where the whole block recomputes
  // (Megatron-Core, which runs the modules, has no DeepSpeed gathers), so a module adds none.
  const auto regathers = [](int mtp_layers) {
    const Prediction p = simulate(scenario_of(fmt::format(
        R"(model: {{name: m, layers: 2, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 32000, seq_len: 2048, activation: swiglu, norm: rmsnorm, position: rope, mtp_layers: {}}}
cluster: {{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}}
parallelism: {{dp: 8, zero: 3, fsdp_prefetch: 0, fsdp_gather: tensor, fsdp_reuse_distance: 0}}
training: {{global_batch: 8, recompute: full}}
)",
        mtp_layers)));
    const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
    size_t count = 0;
    for (size_t i = 0; i < t.size(); ++i)
      count += t.rank[i] == 0 && t.names[t.name[i]] == "fsdp.backward_weight_regather";
    return count;
  };
  EXPECT_GT(regathers(0), 0u);
  EXPECT_EQ(regathers(1), regathers(0));
}

TEST(Lowering, ContextCommunicationModesDoTheSameAttentionWork) {
  // Llama 3 8B with cp 4 across four nodes, 32k tokens: the ring hides its exchanges behind
  // the attention steps, the single all-gather behind the diagonal step; the a2a (Ulysses)
  // all-to-alls sit on the critical path. Every mode does the same model FLOPs.
  const std::string text = R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 4, gpus_per_node: 1, inter_node: {nics_per_node: 1, nic_bandwidth: 400 Gb/s}}
parallelism: {cp: 4, zero: 1}
training: {global_batch: 1, seq_len: 32768, recompute: full}
)";
  const Result ring = simulate(scenario_of(text)).result;
  const Result gathered = simulate_with(text, "cp: 4", "cp_comm: all_gather, ");
  const Result ulysses = simulate_with(text, "cp: 4", "cp_comm: a2a, ");
  for (const Result* r : {&gathered, &ulysses}) {
    EXPECT_DOUBLE_EQ(r->mfu * r->iteration_time / Seconds(1), ring.mfu * ring.iteration_time / Seconds(1));
  }
  EXPECT_GT(exposed(ulysses, ActivityTag::kContextComm), 0.0);
  EXPECT_GT(exposed(ulysses, ActivityTag::kContextComm), 2.0 * exposed(ring, ActivityTag::kContextComm));
  // Waited for where they are issued, the ring's and the gather's exchanges are all exposed:
  // the same work, later.
  for (const auto& [comm, beside] : {std::pair{"", &ring}, {"cp_comm: all_gather, ", &gathered}}) {
    const Result waited = simulate_with(text, "cp: 4", std::string(comm) + "cp_comm_overlap: false, ");
    EXPECT_DOUBLE_EQ(waited.mfu * waited.iteration_time / Seconds(1), ring.mfu * ring.iteration_time / Seconds(1));
    EXPECT_GT(exposed(waited, ActivityTag::kContextComm), 2.0 * exposed(*beside, ActivityTag::kContextComm)) << comm;
    EXPECT_GT(waited.iteration_time, beside->iteration_time) << comm;
  }
}

TEST(Lowering, ContextAndExpertParallelismRun) {
  const Result cp = simulate(scenario_of(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {tp: 2, cp: 4}
training: {global_batch: 4, seq_len: 32768, recompute: selective}
)")).result;
  EXPECT_GT(cp.iteration_time, Seconds(0));
  EXPECT_GT(cp.breakdown.compute, Seconds(0));
  const Result ep = simulate(scenario_of(R"(model: mixtral-8x7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {ep: 8, zero: 1}
training: {global_batch: 16, seq_len: 4096}
)")).result;
  EXPECT_GT(ep.iteration_time, Seconds(0));
  // Mixtral on 8 GPUs with one expert per rank: each rank holds every non-expert weight and
  // an eighth of the experts, in bf16.
  const ParameterCount count = count_parameters(ep.scenario->model);
  const int64_t experts = 32 * 8 * count.per_expert;
  EXPECT_EQ(ep.stages[0].weight_bytes, 2 * (count.total - experts + experts / 8));
}

TEST(Lowering, MultiTokenPredictionRunsOnTheLastStageWithACopyOfTheEmbedding) {
  const std::string text =
      R"(model: {name: m, layers: 4, hidden: 1024, heads: 8, ffn_hidden: 4096, vocab: 32000,
        seq_len: 2048, position: rope, activation: swiglu, norm: rmsnorm, mtp_layers: 1}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 4}
parallelism: {pp: 2, dp: 2}
training: {global_batch: 8, micro_batch: 1}
)";
  const Prediction mtp = simulate(scenario_of(text));
  const Prediction plain = simulate(scenario_of(std::string(text).replace(
      text.find(", mtp_layers: 1"), std::string(", mtp_layers: 1").size(), "")));
  // The last stage holds the module and a copy of the word embedding for its lookups, in bf16;
  // the first stage is as before.
  const ModelSpec& m = mtp.result.scenario->model;
  const int64_t module = count_parameters(m).per_mtp_module;
  EXPECT_EQ(module, 3 * 1024 + 2 * 1024 * 1024 + count_parameters(m).per_dense_layer);
  EXPECT_EQ(mtp.result.stages[1].weight_bytes - plain.result.stages[1].weight_bytes,
            2 * (module + 32000 * 1024));
  EXPECT_EQ(mtp.result.stages[0].weight_bytes, plain.result.stages[0].weight_bytes);
  // whose gradient is summed with the first stage's, as a tied embedding's would be.
  const auto all_reduces = [](const Prediction& p) {
    const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
    int found = 0;
    for (size_t i = 0; i < t.size(); ++i)
      found += t.names[t.name[i]] == "pp.embedding_gradient_all_reduce";
    return found;
  };
  EXPECT_EQ(all_reduces(plain), 0);
  EXPECT_EQ(all_reduces(mtp), 2);  // both stages (one rank of each simulated)
  EXPECT_GT(mtp.result.iteration_time, plain.result.iteration_time);
  // Model FLOPs count the module's projection, layer and logits.
  const double tokens = 8.0 * 2048;
  const double layer = 6.0 * (4.0 * 1024 * 1024 + 3.0 * 1024 * 4096) + 6.0 * 8 * (128 + 128) * 2048;
  EXPECT_DOUBLE_EQ(
      (mtp.result.model_flop_per_iteration - plain.result.model_flop_per_iteration) / Flop(1),
      tokens * (6.0 * 2 * 1024 * 1024 + layer + 6.0 * 32000 * 1024));
}

// Qwen3-30B-A3B in fp8 on `nodes` DGX H100s, its experts over `ep` ranks.
std::string qwen3_30b_a3b(int nodes, int ep, int global_batch) {
  return fmt::format(R"(model: qwen3-30b-a3b
cluster: {{system: dgx-h100, nodes: {}}}
parallelism: {{ep: {}, zero: 1}}
training: {{global_batch: {}, micro_batch: 1, seq_len: 4096, precision: fp8}}
)",
                     nodes, ep, global_batch);
}

// Scenario `text` with `setting` written just before the field `before`.
std::string with_setting(std::string text, const std::string& before, const std::string& setting) {
  return text.insert(text.find(before), setting);
}

TEST(Lowering, OverlappedExpertExchangesRunBesideAnotherMicrobatchsCompute) {
  // Qwen3-30B-A3B over two nodes, experts over both (ep 16): every all-to-all crosses the
  // network. Paired, a forward's dispatch runs while a backward of another micro-batch computes.
  const std::string text = qwen3_30b_a3b(2, 16, 64);
  const Prediction plain = simulate(scenario_of(text));
  const Prediction paired =
      simulate(scenario_of(with_setting(text, "zero", "ep_comm_overlap: true, ")));
  const Result& a = plain.result;
  const Result& b = paired.result;
  EXPECT_DOUBLE_EQ(b.hfu * b.iteration_time / Seconds(1), a.hfu * a.iteration_time / Seconds(1));
  EXPECT_LT(exposed(b, ActivityTag::kExpertComm), 0.5 * exposed(a, ActivityTag::kExpertComm));
  EXPECT_LT(b.iteration_time, a.iteration_time);
  // Some forward dispatch of rank 0 overlaps compute of another micro-batch's backward.
  const Timeline t = make_timeline(*paired.lowering, paired.run, /*kernels=*/true);
  bool beside = false;
  for (size_t i = 0; i < t.size() && !beside; ++i) {
    if (t.rank[i] != 0 || t.names[t.name[i]] != "moe.dispatch") continue;
    for (size_t j = 0; j < t.size() && !beside; ++j) {
      beside = t.rank[j] == 0 && t.stream_names[t.stream[j]] == "compute" && t.microbatch[j] != t.microbatch[i] &&
               t.start_s[j] < t.end_s[i] && t.end_s[j] > t.start_s[i];
    }
  }
  EXPECT_TRUE(beside);
  EXPECT_EQ(to_json(b).at("scenario").at("parallelism").at("ep_comm_overlap").dump(-1), "true");
}

TEST(Lowering, AKernelPerExpertAddsAKernelOverheadPerExpertToEachExpertGemm) {
  // Qwen3-30B-A3B on one node, ep 8: 16 experts a rank. Transformer Engine's kernel per expert
  // (the default) against one grouped kernel: each expert GEMM of rank 0, forward and backward,
  // takes 15 kernel overheads longer, and so does the step.
  const std::string text = qwen3_30b_a3b(1, 8, 8);
  const Prediction per_expert = simulate(scenario_of(text));
  const Prediction grouped =
      simulate(scenario_of(with_setting(text, "precision", "expert_gemm: grouped, ")));
  const double extra_s =
      15.0 * (per_expert.result.scenario->cluster.gpu.kernels.overhead / Seconds(1));
  for (const std::string name :
       {"moe.expert_fc1", "moe.expert_fc2.dgrad", "moe.expert_fc1.wgrad"}) {
    const std::vector<double> per_expert_s = span_seconds(per_expert, name, /*kernels=*/true);
    const std::vector<double> grouped_s = span_seconds(grouped, name, /*kernels=*/true);
    ASSERT_FALSE(per_expert_s.empty()) << name;
    ASSERT_EQ(per_expert_s.size(), grouped_s.size()) << name;
    EXPECT_NEAR(per_expert_s.front() - grouped_s.front(), extra_s, 1e-9) << name;
  }
  EXPECT_GT(per_expert.result.iteration_time, grouped.result.iteration_time);
}

// Llama 3 8B (32 layers) on one GPU, one micro-batch, activations kept: offloading the first
// layers' activations takes them off the GPU from the forward of layer 32 - n + i to the
// backward of layer 32 - n + i.
Prediction offloaded(int layers, std::string_view host_bandwidth) {
  return simulate(scenario_of(fmt::format(R"(model: llama3-8b
cluster: {{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 1, host_bandwidth: {}}}
training: {{global_batch: 1, seq_len: 8192, activation_offload_layers: {}}}
)", host_bandwidth, layers)));
}

TEST(Lowering, OffloadedActivationsLeaveTheGpuUntilTheirBackward) {
  const Prediction none = offloaded(0, "1 TB/s");
  const Prediction eight = offloaded(8, "1 TB/s");
  const Prediction sixteen = offloaded(16, "1 TB/s");
  // At the peak (the end of the forward) n layers' activations are on the host: the peak falls
  // by n times one layer's, the same for each layer.
  const int64_t layer = (none.result.peak_memory_bytes - eight.result.peak_memory_bytes) / 8;
  EXPECT_GT(layer, int64_t{1} << 30);  // 8192 tokens x 4096 x about 34 bytes
  EXPECT_EQ(eight.result.peak_memory_bytes - sixteen.result.peak_memory_bytes, 8 * layer);
  // Copies out end long before the forward that waits for them, copies back start fifteen
  // layers' backward ahead: over a fast host link nothing waits.
  EXPECT_EQ(sixteen.result.iteration_time, none.result.iteration_time);
  EXPECT_EQ(exposed(sixteen.result, ActivityTag::kHostTransfer), 0.0);
  // Every offloaded layer copies out, is waited for, and copies back once per micro-batch.
  std::map<std::string, int> copies;
  const StageProgram& stage = *sixteen.lowering->stages[0];
  for (TaskId id = 0; id < stage.program.num_tasks(); ++id) {
    const TaskLabel& label = stage.labels[stage.program.task(id).label];
    if (label.plan == kNoId && stage.lone_name(label).starts_with("offload.")) ++copies[stage.lone_name(label)];
  }
  EXPECT_EQ(copies, (std::map<std::string, int>{
                        {"offload.activations_from_host", 16}, {"offload.activations_to_host", 16}, {"offload.wait", 16}}));
}

TEST(Lowering, OffloadCopiesRunWhereTransformerEnginesScheduleSaysAndGiveBackTheirMemory) {
  // 32 layers, 4 offloaded, two micro-batches, over a slow link so that the copies are what the
  // passes wait for. On the copy stream each copy starts as soon as what it follows is done and the
  // copy before it has ended; the compute stream waits for them where Transformer Engine does.
  constexpr int kLayers = 32;
  constexpr int kOffloaded = 4;
  const Prediction p = simulate(scenario_of(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 1, host_bandwidth: 5 GB/s}
training: {global_batch: 2, seq_len: 8192, activation_offload_layers: 4}
)"));
  const StageProgram& stage = *p.lowering->stages[0];
  struct Span {
    SimTime start = SimTime::max();
    SimTime end;
  };
  // Per micro-batch: each layer's forward and backward compute, and each offloaded layer's tasks.
  std::map<std::tuple<int, int32_t, std::string>, Span> spans;
  std::vector<std::pair<SimTime, SimTime>> copies;  // the copy stream's, in order
  for (const TaskSpan& span : p.run.spans) {
    const Task task = stage.program.task(span.task);
    const TaskLabel& label = stage.labels[task.label];
    std::string what;
    if (label.plan == kNoId) {
      what = stage.lone_name(label);
      if (!what.starts_with("offload.")) continue;
      if (what != "offload.wait") copies.emplace_back(span.start, span.end);
    } else if (task.stream == static_cast<StreamId>(StreamKind::kCompute) && label.block >= 0) {
      what = stage.plans[label.plan]->pass == PassKind::kForward ? "forward" : "backward";
    } else {
      continue;
    }
    Span& s = spans[{label.microbatch, label.block, what}];
    s.start = std::min(s.start, span.start);
    s.end = std::max(s.end, span.end);
  }
  std::ranges::sort(copies);
  const auto after_copy_before = [&](SimTime start) {
    SimTime previous;
    for (const auto& [copy_start, copy_end] : copies) {
      if (copy_start < start) previous = std::max(previous, copy_end);
    }
    return previous;
  };
  for (int m = 0; m < 2; ++m) {
    const auto at = [&](int32_t layer, const char* what) { return spans.at({m, layer, what}); };
    for (int l = 0; l < kOffloaded; ++l) {
      SCOPED_TRACE(fmt::format("micro-batch {}, layer {}", m, l));
      const int32_t waiting = kLayers - kOffloaded + l;
      const Span out = at(l, "offload.activations_to_host");
      EXPECT_EQ(out.start, std::max(at(l, "forward").end, after_copy_before(out.start)));
      const Span wait = at(l, "offload.wait");
      EXPECT_EQ(wait.start, std::max(at(waiting - 1, "forward").end, out.end));
      EXPECT_EQ(at(waiting, "forward").start, wait.end);
      const Span back = at(l, "offload.activations_from_host");
      EXPECT_EQ(back.start, std::max(at(waiting, "backward").end, after_copy_before(back.start)));
      EXPECT_EQ(at(l, "backward").start, std::max(at(l + 1, "backward").end, back.end));
    }
  }
  // Every copy back allocated what the wait freed, and the backward freed it again.
  EXPECT_EQ(p.run.ranks[0].final_memory_bytes, p.lowering->ranks[0].initial_memory_bytes);
  EXPECT_GT(exposed(p.result, ActivityTag::kHostTransfer), 0.0);
}

TEST(Lowering, OffloadOverASlowHostLinkWaitsForTheCopies) {
  const Result none = offloaded(0, "1 TB/s").result;
  // Over 20 GB/s a layer's 1.1 GB takes about 57 ms each way, longer than its forward.
  const Result slow = offloaded(16, "20 GB/s").result;
  EXPECT_GT(slow.iteration_time, none.iteration_time);
  EXPECT_GT(exposed(slow, ActivityTag::kHostTransfer), 0.0);
  EXPECT_NEAR(slow.breakdown.total() / Seconds(1), slow.iteration_time / Seconds(1), 1e-9);
  // All layers but the last: the copy back of layer 30 starts only as its own backward does.
  const Result most = offloaded(31, "20 GB/s").result;
  EXPECT_GT(most.iteration_time, slow.iteration_time);
  EXPECT_LT(most.peak_memory_bytes, slow.peak_memory_bytes);
}

TEST(Lowering, LoadImbalanceSlowsExperts) {
  const std::string balanced = R"(model:
  name: moe
  layers: 4
  hidden: 2048
  heads: 16
  ffn_hidden: 8192
  vocab: 32000
  seq_len: 4096
  activation: swiglu
  norm: rmsnorm
  position: rope
  moe: {experts: 8, top_k: 2, ffn_hidden: 8192, imbalance: IMBALANCE}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {ep: 8}
training: {global_batch: 8, seq_len: 4096}
)";
  auto with = [&](const char* imbalance) {
    std::string text = balanced;
    text.replace(text.find("IMBALANCE"), 9, imbalance);
    return simulate(scenario_of(text)).result.iteration_time;
  };
  EXPECT_GT(with("2.0"), with("1.0"));
}

// A 2-layer MoE (8 experts, top 2) on one node of 8 H100s, to which a test adds its layout.
constexpr std::string_view kSmallMoeOnANode = R"(model:
  name: moe
  layers: 2
  hidden: 2048
  heads: 16
  ffn_hidden: 8192
  vocab: 32000
  seq_len: 2048
  activation: swiglu
  norm: rmsnorm
  position: rope
  moe: {experts: 8, top_k: 2, ffn_hidden: 4096}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
)";

TEST(Lowering, FsdpReducesExpertGradientsOnceOverTheirOwnGroup) {
  // ZeRO-3 without pipelining, experts over EP 4 of 8 data-parallel ranks: each micro-batch
  // reduce-scatters the block's other gradients over the 8 and its experts' over the 2 ranks
  // holding the same experts; the step reduces nothing again.
  const Prediction p = simulate(scenario_of(std::string(kSmallMoeOnANode) + R"(parallelism: {dp: 8, ep: 4, zero: 3}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
)"));
  // 2 micro-batches of the embedding, 2 MoE layers and the head; the layers' experts, sharded
  // over their 2 copies, are gathered there too.
  EXPECT_EQ(span_seconds(p, "fsdp.expert_gradient_reduce_scatter").size(), 2u * 2u);
  EXPECT_EQ(span_seconds(p, "fsdp.gradient_reduce_scatter").size(), 2u * 4u);
  EXPECT_EQ(span_seconds(p, "fsdp.forward_weight_gather").size(), 2u * (4u + 2u));
  for (int bucket = 0; bucket < 4; ++bucket) {
    EXPECT_TRUE(span_seconds(p, fmt::format("dp.expert_gradient_reduce bucket {}", bucket)).empty()) << bucket;
  }
}

TEST(Lowering, LatentAttentionSumsItsDownProjectionGradientsOverTensorParallelism) {
  // Two DeepSeek-V3-shaped layers at tp 2: with sequence parallelism each rank trains the
  // down-projections it holds whole on its own tokens, and the step all-reduces their
  // gradients (15,140,864 a layer, fp32) over the pair; without it there is nothing to sum.
  constexpr std::string_view kLatent = R"(model:
  name: latent
  layers: 2
  hidden: 7168
  heads: 128
  head_dim: 192
  ffn_hidden: 18432
  vocab: 32000
  seq_len: 4096
  activation: swiglu
  norm: rmsnorm
  position: rope
  mla: {q_lora_rank: 1536, kv_lora_rank: 512, rope_head_dim: 64, v_head_dim: 128}
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 2}
training: {global_batch: 1, micro_batch: 1, seq_len: 4096}
)";
  const Prediction p = simulate(scenario_of(std::string(kLatent) + "parallelism: {tp: 2}\n"));
  const std::vector<double> summed = span_seconds(p, "tp.replicated_gradient_all_reduce");
  ASSERT_EQ(summed.size(), 1u);
  // 121 MB (2 layers of 15,140,864 fp32 gradients) all-reduced over NVLink: well over 100 us, and
  // twice the layers take about twice as long.
  EXPECT_GT(summed[0], 100e-6);
  std::string four_layers(kLatent);
  four_layers.replace(four_layers.find("layers: 2"), 9, "layers: 4");
  const std::vector<double> doubled =
      span_seconds(simulate(scenario_of(four_layers + "parallelism: {tp: 2}\n")), "tp.replicated_gradient_all_reduce");
  ASSERT_EQ(doubled.size(), 1u);
  EXPECT_NEAR(doubled[0] / summed[0], 2.0, 0.1);
  const Prediction unsplit =
      simulate(scenario_of(std::string(kLatent) + "parallelism: {tp: 2, sequence_parallel: false}\n"));
  EXPECT_TRUE(span_seconds(unsplit, "tp.replicated_gradient_all_reduce").empty());
}

// The scenario `text` with its ZERO placeholder set to `zero`, simulated.
Prediction with_zero(std::string text, const char* zero) {
  text.replace(text.find("ZERO"), 4, zero);
  return simulate(scenario_of(text));
}

TEST(Lowering, ZeroTwoReducesEveryMicroBatchIntoItsGradientShard) {
  // ZeRO-2 shards the gradients, so each micro-batch's are reduce-scattered as its backward
  // produces them (DeepSpeed's stage 2 reduces every micro-step): 4 micro-batches × 26 blocks,
  // none left for the step. ZeRO-1 accumulates whole gradients and reduces them once.
  const std::string text = R"(model: gpt-1.7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {dp: 8, zero: ZERO}
training: {global_batch: 32, micro_batch: 1, seq_len: 2048}
)";
  const Prediction two = with_zero(text, "2");
  EXPECT_EQ(span_seconds(two, "fsdp.gradient_reduce_scatter").size(), 4u * 26u);
  EXPECT_TRUE(span_seconds(two, "dp.gradient_reduce_scatter bucket 0").empty());
  const Prediction one = with_zero(text, "1");
  EXPECT_TRUE(span_seconds(one, "fsdp.gradient_reduce_scatter").empty());
  EXPECT_FALSE(span_seconds(one, "dp.gradient_reduce_scatter bucket 0").empty());
  EXPECT_LT(two.result.stages[0].gradient_bytes, one.result.stages[0].gradient_bytes);
}

// Seconds rank 0 spends computing while a task named `name` runs.
double compute_beside(const Prediction& p, const std::string& name) {
  const Timeline t = make_timeline(*p.lowering, p.run, /*kernels=*/false);
  std::vector<std::pair<double, double>> beside;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.rank[i] == 0 && t.names[t.name[i]] == name) beside.emplace_back(t.start_s[i], t.end_s[i]);
  }
  double seconds = 0.0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.rank[i] != 0 || t.stream_names[t.stream[i]] != "compute") continue;
    for (const auto& [start, end] : beside) {
      seconds += std::max(0.0, std::min(end, t.end_s[i]) - std::max(start, t.start_s[i]));
    }
  }
  return seconds;
}

TEST(Lowering, UnoverlappedZeroTwoWaitsForEachBlocksReduction) {
  // Without overlap_grad_reduce (DeepSpeed's overlap_comm: false, which reduces on the compute
  // stream) no block pass runs beside a gradient reduce-scatter; overlapped, the backward of the
  // blocks before runs beside them, and the step is shorter.
  const std::string text = R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {dp: 16, zero: 2}
training: {global_batch: 32, micro_batch: 1, seq_len: 2048, overlap_grad_reduce: OVERLAP}
)";
  auto with_overlap = [&](const char* overlap) {
    std::string scenario = text;
    return simulate(scenario_of(scenario.replace(scenario.find("OVERLAP"), 7, overlap)));
  };
  const Prediction waited = with_overlap("false");
  EXPECT_EQ(span_seconds(waited, "fsdp.gradient_reduce_scatter").size(), 2u * 26u);
  EXPECT_EQ(compute_beside(waited, "fsdp.gradient_reduce_scatter"), 0.0);
  const Prediction overlapped = with_overlap("true");
  EXPECT_GT(compute_beside(overlapped, "fsdp.gradient_reduce_scatter"), 0.1);
  EXPECT_LT(overlapped.result.iteration_time, waited.result.iteration_time);
  // Under zero-bubble the reductions follow the W passes, which wait for them the same way.
  std::string zero_bubble = text;
  zero_bubble.replace(zero_bubble.find("zero: 2}"), 8, "zero: 2, schedule: zero-bubble}");
  zero_bubble.replace(zero_bubble.find("OVERLAP"), 7, "false");
  const Prediction split = simulate(scenario_of(zero_bubble));
  EXPECT_EQ(span_seconds(split, "fsdp.gradient_reduce_scatter").size(), 2u * 26u);
  EXPECT_EQ(compute_beside(split, "fsdp.gradient_reduce_scatter"), 0.0);
}

TEST(Lowering, HybridShardingAllReducesEachBlocksShardAcrossReplicasAfterItsReduceScatter) {
  // HSDP, shards of 8 ranks replicated twice: PyTorch FSDP's post-backward all-reduces each
  // block's reduce-scattered shard across the replicas at once, every micro-batch, beside the
  // rest of the backward; the step has none left.
  const Prediction p = simulate(scenario_of(R"(model: gpt-1.7b
cluster: {system: dgx-h100, nodes: 2}
parallelism: {dp: 16, zero: 3, zero_shard: 8}
training: {global_batch: 32, micro_batch: 1, seq_len: 2048}
)"));
  const std::vector<double> scatters = span_seconds(p, "fsdp.gradient_reduce_scatter");
  EXPECT_EQ(scatters.size(), 2u * 26u);
  EXPECT_EQ(span_seconds(p, "fsdp.replica_all_reduce").size(), scatters.size());
  EXPECT_TRUE(span_seconds(p, "dp.replica_all_reduce bucket 0").empty());
}

TEST(Lowering, ZeroOneShardsExpertStatesOverTheRanksHoldingThoseExperts) {
  // 8 data-parallel ranks, experts over EP 4: a dense state is split 8 ways, an expert's 2 ways
  // (its two copies), so the optimizer updates far more than 1/8 of what it updates unsharded,
  // and each MoE block's updated expert weights are gathered over those 2 ranks.
  const std::string text = std::string(kSmallMoeOnANode) + R"(parallelism: {dp: 8, ep: 4, zero: ZERO}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
)";
  const Prediction unsharded = with_zero(text, "0");
  const Prediction sharded = with_zero(text, "1");
  const ParameterCount count = count_parameters(sharded.result.scenario->model);
  const double experts = 2.0 * 8 * count.per_expert / 4;  // held by a rank
  const double dense = static_cast<double>(count.total - 2 * 8 * count.per_expert);
  // The step reads and writes the states it holds and zeroes the whole fp32 gradient buffer.
  const double held = (dense / 8 + experts / 2) / (dense + experts);
  const double states = optimizer_step(sharded.result.scenario->training, 4.0, 2.0).traffic;
  const double expected = (held * states + 4.0) / (states + 4.0);
  const double ratio =
      span_seconds(sharded, "step.optimizer").front() / span_seconds(unsharded, "step.optimizer").front();
  EXPECT_NEAR(ratio, expected, 0.02 * expected);
  EXPECT_EQ(span_seconds(sharded, "dp.expert_weight_all_gather").size(), 2u);
  EXPECT_FALSE(span_seconds(sharded, "dp.expert_gradient_reduce bucket 1").empty());  // after the head's bucket
}

}  // namespace
}  // namespace paceline
