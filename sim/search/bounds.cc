#include "sim/search/bounds.h"

#include <algorithm>
#include <limits>
#include <set>

#include "base/check.h"
#include "base/parallel_for.h"
#include "sim/memory/static_memory.h"
#include "sim/parallel/lowering.h"
#include "sim/parallel/pipeline_schedule.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// Engine durations are op times rounded to whole picoseconds and summed per task; the bound
// gives up this much so rounding can never lift it above a simulated time.
constexpr double kRoundingMargin = 1e-6;

bool is_collective(const Op& op) { return op.kind == OpKind::kCommunication; }

}  // namespace

LayoutBounds::LayoutBounds(const Scenario& base)
    : base_(base),
      interference_(interference_of(base)),
      timer_(base.cluster.gpu, base.cluster.profile, base.num_gpus()),
      topology_(base.cluster),
      collectives_(base_.cluster, topology_),
      neutral_layout_(base.parallelism, base.cluster.nvlink_domain),
      kernel_pricer_(timer_, collectives_, neutral_layout_) {
  moe_before_.assign(static_cast<size_t>(base.model.layers) + 1, 0);
  for (int layer = 0; layer < base.model.layers; ++layer) {
    moe_before_[layer + 1] = moe_before_[layer] + (base.model.is_moe_layer(layer) ? 1 : 0);
  }
}

LayoutBounds::ShardKey LayoutBounds::shard_key(const Layout& l) const {
  return ShardKey{l.micro_batch, l.tp, l.cp, l.ep, l.sequence_parallel, static_cast<int>(l.recompute),
                  layout_overlaps_expert_exchanges(l, base_)};
}

void LayoutBounds::prepare(const std::vector<Layout>& layouts, int threads, const std::atomic<bool>* stop,
                           const std::function<void(size_t done, size_t total)>& progress) {
  auto prepared = std::make_shared<std::map<ShardKey, ShardFacts>>(
      prepared_ ? *prepared_ : std::map<ShardKey, ShardFacts>{});
  prepared->merge(shards_);
  std::map<ShardKey, const Layout*> missing;  // one layout of each shard not built yet
  for (const Layout& l : layouts) {
    if (!prepared->count(shard_key(l))) missing.emplace(shard_key(l), &l);
  }
  const std::vector<std::pair<ShardKey, const Layout*>> keys(missing.begin(), missing.end());
  std::vector<ShardFacts> built(keys.size());
  std::function<void(size_t)> built_so_far;
  if (progress) built_so_far = [&](size_t done) { progress(done, keys.size()); };
  parallel_for(keys.size(), threads, [&](size_t i) {
    stop_if_asked(stop, "the search");
    built[i] = build_shard(*keys[i].second);
  }, built_so_far);
  for (size_t i = 0; i < keys.size(); ++i) prepared->emplace(keys[i].first, std::move(built[i]));
  prepared_ = std::move(prepared);
  shards_.clear();
}

std::unique_ptr<LayoutBounds> LayoutBounds::fork() const {
  auto other = std::make_unique<LayoutBounds>(base_);
  other->prepared_ = prepared_;
  return other;
}

LayoutBounds::ShardFacts LayoutBounds::build_shard(const Layout& layout) const {
  // One graph serves layouts with and without a gradient buffer: the weight gradients that add
  // into the buffer (as without ZeRO) are priced both so and writing fresh tensors.
  const Scenario scenario = with_layout(base_, layout);
  LayerShard shard = layer_shard(scenario);
  shard.gradient_buffer = gradient_buffer(base_.training, /*zero=*/0, /*pp=*/1);
  // Shared by layouts with and without pipelining: without the head's copy of the word
  // embedding, which only adds.
  shard.head_apart_from_embedding = false;
  auto facts_of = [&](const LayerGraph& g) {
    auto facts = std::make_shared<BlockFacts>();
    const size_t n = g.num_ops();
    facts->phase.resize(n);
    facts->collective.resize(n);
    facts->predecessor_begin.reserve(n + 1);
    facts->compute_s.assign(n, 0.0);
    facts->persistent.assign(n, false);
    facts->forward_exit = g.forward_exit();
    facts->backward_exits = g.backward_exits();
    facts->weights = held_weights(g);
    // Tensor by tensor, experts' too, whatever experts a block holds.
    if (scenario.parallelism.fsdp_gather == FsdpGather::kTensor) {
      facts->tensor_gathers = fsdp_gathers(scenario, g);
    }
    for (OpId id = 0; id < n; ++id) {
      // A layer graph only adds edges forward in insertion order: ids are a topological order.
      facts->predecessor_begin.push_back(static_cast<uint32_t>(facts->predecessor_ids.size()));
      for (const OpId pred : g.predecessors(id)) {
        PACELINE_CHECK(pred < id, "an op before its predecessor");
        facts->predecessor_ids.push_back(pred);
      }
      const Op& op = g.op(id);
      const bool collective = is_collective(op);
      facts->phase[id] = op.phase;
      facts->collective[id] = collective;
      if (!collective) {
        Op fresh = op;
        fresh.gemm.accumulates_into.reset();
        const KernelTime kernel = kernel_pricer_.price(fresh);
        facts->compute_s[id] = kernel.time / Seconds(1);
        facts->persistent[id] = kernel.persistent;
      }
      if (collective && op.comm.collective != Collective::kNone) facts->priced_collectives.emplace_back(id, op);
      if (op.kind == OpKind::kGemm && op.gemm.accumulates_into) {
        const KernelTime kernel = kernel_pricer_.price(op);
        facts->buffered_wgrads.push_back({id, kernel.time / Seconds(1), kernel.persistent});
      }
      // Kept for backward: saved by a forward kernel and not released within the forward pass.
      const bool released_in_forward =
          op.released_by != UINT32_MAX && g.op(op.released_by).phase == Phase::kForward;
      if (op.phase == Phase::kForward && !collective && !released_in_forward) {
        facts->kept_bytes += static_cast<int64_t>(op.saved / Bytes(1));
      }
    }
    facts->predecessor_begin.push_back(static_cast<uint32_t>(facts->predecessor_ids.size()));
    return std::shared_ptr<const BlockFacts>(std::move(facts));
  };
  ShardFacts facts;
  const ModelSpec& m = base_.model;
  facts[kEmbedding] = facts_of(build_embedding(m, shard));
  facts[kHead] = facts_of(build_output_head(m, shard));
  if (m.num_moe_layers() < m.layers) {
    facts[kDense] = facts_of(build_transformer_layer(m, shard, false));
  }
  if (m.moe) facts[kMoe] = facts_of(build_transformer_layer(m, shard, true));
  return facts;
}

const LayoutBounds::ShardFacts& LayoutBounds::shard_facts(const Layout& l) {
  const ShardKey key = shard_key(l);
  if (prepared_) {
    if (auto it = prepared_->find(key); it != prepared_->end()) return it->second;
  }
  if (auto it = shards_.find(key); it != shards_.end()) return it->second;
  return shards_.emplace(key, build_shard(l)).first->second;
}

const std::array<LayoutBounds::BlockTimes, LayoutBounds::kNumBlockKinds>& LayoutBounds::block_times(
    const Layout& l, Detail detail) {
  const bool zero_bubble = l.schedule == Schedule::kZeroBubble;
  const bool buffered = gradient_buffer(base_.training, l.zero, l.pp).has_value();
  const ShardKey shard = shard_key(l);
  const bool paired = std::get<6>(shard);
  if (detail == Detail::kKernels) {
    const auto key = std::make_tuple(shard, zero_bubble, buffered);
    if (auto it = kernel_times_.find(key); it != kernel_times_.end()) return it->second;
    return kernel_times_.emplace(key, compute_times(shard_facts(l), nullptr, zero_bubble, buffered, paired))
        .first->second;
  }
  const auto layout_key =
      std::make_tuple(shard, l.tp, l.cp, l.dp, l.pp, l.ep, zero_bubble, buffered);
  if (auto it = times_by_layout_.find(layout_key); it != times_by_layout_.end()) return *it->second;
  const RankLayout ranks(layout_parallelism(l, base_), base_.cluster.nvlink_domain);
  auto placed = placements_.find({l.tp, l.cp, l.dp, l.pp, l.ep});
  if (placed == placements_.end()) {
    auto priced = [&](GroupKind kind) { return sharing_nics(ranks, topology_, kind, ranks.placement(kind)); };
    placed = placements_
                 .emplace(std::make_tuple(l.tp, l.cp, l.dp, l.pp, l.ep),
                          PricedGroups{priced(GroupKind::kTensor), priced(GroupKind::kContext),
                                       priced(GroupKind::kExpert)})
                 .first;
  }
  const TimesKey key{shard, placed->second, zero_bubble, buffered};
  if (auto it = times_.find(key); it != times_.end()) {
    return *(times_by_layout_[layout_key] = &it->second);
  }
  const OpPricer pricer(timer_, collectives_, ranks);
  const auto& times =
      times_.emplace(key, compute_times(shard_facts(l), &pricer, zero_bubble, buffered, paired))
          .first->second;
  return *(times_by_layout_[layout_key] = &times);
}

void LayoutBounds::StreamLoad::add(double seconds, uint16_t sms, ActivityTag tag,
                                   const Interference& interference) {
  if (seconds <= 0.0) return;
  busy_s += seconds;
  // A kernel holding no SMs is no aggressor.
  least_slowdown = std::min(least_slowdown, sms > 0 ? interference.slowdown_beside(sms) : 0.0);
  all_hold_sms =
      all_hold_sms && sms > 0 && ((interference.sm_holder_tags >> static_cast<int>(tag)) & 1);
}

void LayoutBounds::StreamLoad::add(const StreamLoad& other, double times) {
  if (other.busy_s <= 0.0) return;
  busy_s += times * other.busy_s;
  least_slowdown = std::min(least_slowdown, other.least_slowdown);
  all_hold_sms = all_hold_sms && other.all_hold_sms;
}

double LayoutBounds::kernels_beside(const StreamLoad& load, double kernels_s,
                                    double persistent_s) const {
  if (load.busy_s <= 0.0) return kernels_s;
  // While the collectives run, a second of plain kernel work takes 1 + s, of persistent work
  // 1 + persistent_slowdown beside SM holders (else at least the least of the two): the most
  // work gets done beside them with the cheaper kernels first.
  std::array<std::pair<double, double>, 2> work = {{
      {1.0 + load.least_slowdown, kernels_s - persistent_s},
      {1.0 + (load.all_hold_sms ? interference_.persistent_slowdown
                                : std::min(load.least_slowdown, interference_.persistent_slowdown)),
       persistent_s},
  }};
  std::sort(work.begin(), work.end());
  double time_left_s = load.busy_s;
  double beside_s = 0.0;
  for (const auto& [cost, available_s] : work) {
    const double done_s = std::max(0.0, std::min(time_left_s / cost, available_s));
    beside_s += done_s;
    time_left_s -= done_s * cost;
  }
  return kernels_s - beside_s + load.busy_s;
}

std::array<LayoutBounds::BlockTimes, LayoutBounds::kNumBlockKinds> LayoutBounds::compute_times(
    const ShardFacts& facts, const OpPricer* pricer, bool zero_bubble, bool buffered, bool paired) const {
  std::array<BlockTimes, kNumBlockKinds> times{};
  for (int kind = 0; kind < kNumBlockKinds; ++kind) {
    if (!facts[kind]) continue;
    const BlockFacts& block = *facts[kind];
    // Op durations: kernels from the op timer, collectives over the group they run on.
    std::vector<double> duration = block.compute_s;
    std::vector<bool> persistent = block.persistent;
    if (buffered) {
      for (const BlockFacts::BufferedWgrad& w : block.buffered_wgrads) {
        duration[w.id] = w.seconds;
        persistent[w.id] = w.persistent;
      }
    }
    BlockTimes& t = times[kind];
    if (pricer) {
      // Under full fidelity the network times a collective beside only the transfers that run
      // with it: priced over its own group alone, not over every group sharing its NICs.
      const bool alone = base_.simulation.fidelity == Fidelity::kFull;
      for (const auto& [id, op] : block.priced_collectives) {
        const Seconds time =
            alone ? collectives_.time(op.comm.collective, op.comm.size,
                                      pricer->placement(group_of(op.comm.group)), op.comm.routing)
                  : pricer->price(op).time;
        duration[id] = time / Seconds(1);
        t.streams[static_cast<int>(stream_of(op))].add(duration[id], pricer->kernel_sms(op),
                                                       tag_of(op), interference_);
      }
    }
    // A pass alone, replayed op by op: its kernels in order on the one compute stream (the
    // order the pass issues them), each collective as soon as its inputs are ready (no stream
    // order assumed for collectives). Every op of a pass waits, through its predecessors, for an
    // op with none in the pass, and those wait for the block's input (forward) or output
    // gradient (backward: task_plan.h's entry rule), here at 0. In any schedule only more can
    // wait, so each finish bounds the real one from that moment.
    // With kAfterKernels, a collective that waits on no kernel of the pass costs nothing (it may
    // have run before the pass's first kernel), so the first kernel starts at 0 and finishes
    // count from the first kernel's start.
    enum class CollectiveCost { kAll, kAfterKernels, kNone };
    struct Replay {
      std::vector<double> finish;
      double first = -1.0;  // the first kernel's start, −1 without one
      double stream = 0.0;  // the last kernel's finish
    };
    auto replay = [&](PassKind pass, CollectiveCost cost) {
      Replay r;
      r.finish.assign(block.num_ops(), 0.0);
      std::vector<bool> after_kernel(block.num_ops(), false);
      for (OpId id = 0; id < block.num_ops(); ++id) {
        if (!in_pass(block.phase[id], pass)) continue;
        double ready = 0.0;
        bool waits_on_kernel = false;
        for (const OpId pred : block.predecessors(id)) {
          if (!in_pass(block.phase[pred], pass)) continue;
          ready = std::max(ready, r.finish[pred]);
          waits_on_kernel = waits_on_kernel || after_kernel[pred];
        }
        if (block.collective[id]) {
          const bool costs = cost == CollectiveCost::kAll ||
                             (cost == CollectiveCost::kAfterKernels && waits_on_kernel);
          r.finish[id] = ready + (costs ? duration[id] : 0.0);
          after_kernel[id] = waits_on_kernel;
        } else {
          const double start = std::max(r.stream, ready);
          if (r.first < 0.0) r.first = start;
          r.stream = r.finish[id] = start + duration[id];
          after_kernel[id] = true;
        }
      }
      return r;
    };
    // The span of a pass's kernels bounds the pass's span in any schedule. Paired with another
    // micro-batch's pass, whose kernels may fill any wait, only its kernels count.
    auto span = [](const Replay& r) { return r.first < 0.0 ? 0.0 : r.stream - r.first; };
    const CollectiveCost spanned = paired ? CollectiveCost::kNone : CollectiveCost::kAfterKernels;
    auto pass_bound = [&](PassKind pass) { return span(replay(pass, spanned)); };
    for (OpId id = 0; id < block.num_ops(); ++id) {
      if (block.collective[id]) continue;
      t.kernels_s += duration[id];
      if (persistent[id]) t.persistent_kernels_s += duration[id];
    }
    t.forward_s = pass_bound(PassKind::kForward);
    // Input to output, and output gradient to input gradient, through the kernels the stream
    // runs before them; from a kernel: from where the pass's first kernel starts.
    t.latency_s = replay(PassKind::kForward, CollectiveCost::kAll).finish[block.forward_exit];
    if (zero_bubble) {
      t.backward_s = pass_bound(PassKind::kBackwardInput) + pass_bound(PassKind::kBackwardWeight);
    } else {
      const Replay from_gradient = replay(PassKind::kBackward, CollectiveCost::kAll);
      const Replay from_kernel = replay(PassKind::kBackward, CollectiveCost::kAfterKernels);
      t.backward_s = spanned == CollectiveCost::kAfterKernels ? span(from_kernel)
                                                              : pass_bound(PassKind::kBackward);
      for (const OpId exit : block.backward_exits) {
        t.backward_latency_s = std::max(t.backward_latency_s, from_gradient.finish[exit]);
        t.backward_latency_from_kernel_s =
            std::max(t.backward_latency_from_kernel_s, from_kernel.finish[exit]);
      }
    }
  }
  return times;
}

const std::vector<LayoutBounds::VirtualStage>& LayoutBounds::blocks_of(int virtual_stages_total) {
  if (auto it = blocks_.find(virtual_stages_total); it != blocks_.end()) return it->second;
  const std::vector<int> split = default_layers_per_stage(base_.model.layers, virtual_stages_total);
  std::vector<VirtualStage> blocks(virtual_stages_total);
  int first = 0;
  for (int vs = 0; vs < virtual_stages_total; ++vs) {
    const int moe = moe_before_[first + split[vs]] - moe_before_[first];
    VirtualStage& v = blocks[vs];
    v.count[kEmbedding] = vs == 0 ? 1 : 0;
    v.count[kHead] = vs + 1 == virtual_stages_total ? 1 : 0;
    v.count[kMoe] = moe;
    v.count[kDense] = split[vs] - moe;
    first += split[vs];
    v.last = v.count[kHead]  ? kHead
             : split[vs] > 0 ? (base_.model.is_moe_layer(first - 1) ? kMoe : kDense)
                             : kEmbedding;
  }
  return blocks_.emplace(virtual_stages_total, std::move(blocks)).first->second;
}

LayoutBounds::StreamLoad LayoutBounds::microbatch_data_stream(const Layout& l) {
  const ShardFacts& facts = shard_facts(l);
  std::array<int64_t, kNumBlockKinds> parameters{};
  for (int kind = 0; kind < kNumBlockKinds; ++kind) {
    parameters[kind] = facts[kind] ? facts[kind]->weights.parameters : 0;
  }
  const bool gathers = l.zero >= 3;
  // Recomputation decides which tensors are gathered again (fsdp_gather: tensor); whole blocks
  // are gathered alike under every recomputation.
  const bool tensor_gathers = gathers && base_.parallelism.fsdp_gather == FsdpGather::kTensor;
  const auto key = std::make_tuple(l.tp, l.cp, l.dp, l.ep, gathers,
                                   tensor_gathers ? static_cast<int>(l.recompute) : -1, parameters);
  if (auto it = microbatch_streams_.find(key); it != microbatch_streams_.end()) return it->second;
  const Parallelism parallelism = layout_parallelism(l, base_);
  const RankLayout ranks(parallelism, base_.cluster.nvlink_domain);
  // As sim/parallel/lowering.cc sizes them: weights at the working precision, gradients at the
  // accumulation precision, over the ZeRO shard group (dp·cp ranks).
  const ParameterBytes bytes = parameter_bytes(layout_training(l, base_));
  // Experts' weights are gathered (where their states are sharded) and their gradients
  // reduce-scattered over the ranks holding the same experts. Gradients all-reduced in buckets
  // instead (fsdp_gradient_reduce: all_reduce) count for nothing: buckets may join blocks.
  const std::vector<int> shard = ranks.placement(GroupKind::kDataShard);
  const bool experts_gathered = parallelism.expert_data_ranks() > 1;
  const bool reduce_scattered =
      parallelism.fsdp_gradient_reduce == FsdpGradientReduce::kReduceScatter;
  const std::vector<int> expert_data = ranks.placement(GroupKind::kExpertData);
  // FSDP2's root unit: the embedding and the head gathered and reduced together, once.
  const bool root = gathers && holds_fsdp_root(parallelism);
  HeldWeights root_weights;
  StreamLoad per_microbatch;
  auto run = [&](Collective collective, double size_bytes, const std::vector<int>& group,
                 int times) {
    StreamLoad one;
    one.add(collectives_.time(collective, Bytes(size_bytes), group) / Seconds(1),
            collectives_.kernel_sms(collective, group), ActivityTag::kDataComm, interference_);
    per_microbatch.add(one, times);
  };
  auto gather = [&](const HeldWeights& held, int times) {
    run(Collective::kAllGather, bytes.weights_bytes(held.dense()), shard, times);
    if (experts_gathered)
      run(Collective::kAllGather, bytes.weights_bytes(held.expert()), expert_data, times);
  };
  auto reduce = [&](const HeldWeights& held, int times) {
    if (!reduce_scattered) return;
    run(Collective::kReduceScatter,
        static_cast<double>(held.parameters - held.experts) * bytes.gradient, shard, times);
    run(Collective::kReduceScatter, static_cast<double>(held.experts) * bytes.gradient, expert_data,
        times);
  };
  for (const VirtualStage& v : blocks_of(l.virtual_stages)) {
    for (int kind = 0; kind < kNumBlockKinds; ++kind) {
      if (v.count[kind] == 0) continue;
      const HeldWeights& held = facts[kind]->weights;
      if (root && (kind == kEmbedding || kind == kHead)) {
        root_weights += held;
        continue;
      }
      if (tensor_gathers) {
        const FsdpGathers& tensors = facts[kind]->tensor_gathers;
        for (const Bytes size : tensors.sizes) {
          run(Collective::kAllGather, size / Bytes(1), shard, 2 * v.count[kind]);
        }
        for (const Bytes size : tensors.regather_sizes) {
          run(Collective::kAllGather, size / Bytes(1), shard, v.count[kind]);
        }
      } else if (gathers) {
        gather(held, 2 * v.count[kind]);
      }
      reduce(held, v.count[kind]);
    }
  }
  if (root) {
    gather(root_weights, 1);
    reduce(root_weights, 1);
  }
  return microbatch_streams_[key] = per_microbatch;
}

const std::vector<double>& LayoutBounds::step_reductions(const Layout& l) {
  const auto key = std::make_tuple(l.tp, l.cp, l.dp, l.pp, l.ep, l.virtual_stages, l.zero);
  if (auto it = step_reductions_.find(key); it != step_reductions_.end()) return it->second;
  std::vector<double> per_stage;
  if (!reduces_gradients_per_microbatch(l.zero, l.pp)) {
    const ShardFacts& facts = shard_facts(l);
    const ModelSpec& m = base_.model;
    const Parallelism parallelism = layout_parallelism(l, base_);
    const RankLayout ranks(parallelism, base_.cluster.nvlink_domain);
    const Training training = layout_training(l, base_);
    const ParameterBytes bytes = parameter_bytes(training);
    const bool alone = base_.simulation.fidelity == Fidelity::kFull;
    // As sim/parallel/lowering.cc builds them: the head holds its copy of the word embedding
    // apart from the embedding's stage, which the shard's graphs leave out.
    const int64_t head = facts[kHead]->weights.parameters -
                         head_vocabulary_parameters(m, false) / l.tp +
                         head_vocabulary_parameters(m, l.pp > 1) / l.tp;
    const std::vector<int> split = default_layers_per_stage(m.layers, l.pp * l.virtual_stages);
    std::vector<int> first_layer(split.size() + 1, 0);
    for (size_t vs = 0; vs < split.size(); ++vs) first_layer[vs + 1] = first_layer[vs] + split[vs];
    // Only for the first stage (it holds the embedding), the last (the head) and the one before
    // it (the longest warm-up of the stages holding the most layers): a bound may leave stages
    // out, and finding the groups that share NICs is costly on large clusters.
    per_stage.assign(l.pp, 0.0);
    for (const int stage : std::set<int>{0, std::max(0, l.pp - 2), l.pp - 1}) {
      // The blocks of the stage's first chunk in backward order: its buckets wait for its last
      // pass (those of the chunks after it are reduced before).
      std::vector<BlockParameters> blocks_backward;
      const int vs = stage;
      if (vs + 1 == l.pp * l.virtual_stages) {
        blocks_backward.push_back({head, facts[kHead]->weights.experts});
      }
      for (int layer = first_layer[vs + 1] - 1; layer >= first_layer[vs]; --layer) {
        blocks_backward.push_back(
            m.is_moe_layer(layer)
                ? BlockParameters{facts[kMoe]->weights.parameters, facts[kMoe]->weights.experts}
                : BlockParameters{facts[kDense]->weights.parameters, 0});
      }
      if (vs == 0) blocks_backward.push_back({facts[kEmbedding]->weights.parameters, 0});
      // Priced as the step prices them: over the groups sharing the NICs, or alone under full
      // fidelity, whose network times them beside only the transfers that run with them.
      std::map<GroupKind, std::vector<std::vector<int>>> priced_over;
      auto time = [&](Collective collective, double size_bytes, GroupKind group) {
        auto groups = priced_over.find(group);
        if (groups == priced_over.end()) {
          std::vector<int> placement = ranks.placement(group, stage);
          groups = priced_over
                       .emplace(group, alone ? std::vector<std::vector<int>>{std::move(placement)}
                                             : sharing_nics(ranks, topology_, group, placement))
                       .first;
        }
        return collectives_.time(collective, Bytes(size_bytes), groups->second) / Seconds(1);
      };
      double after_last_pass_s = 0.0;
      for (const GradientBucket& bucket : gradient_buckets(
               blocks_backward, step_bucket_parameters(training, parallelism, stage, 0))) {
        // As the step runs them, one after another on the data stream.
        const double dense_bytes = static_cast<double>(bucket.dense) * bytes.gradient;
        if (l.zero == 0) {
          after_last_pass_s += time(Collective::kAllReduce, dense_bytes, GroupKind::kData);
        } else {
          after_last_pass_s += time(Collective::kReduceScatter, dense_bytes, GroupKind::kDataShard);
          if (parallelism.hybrid_sharded()) {
            after_last_pass_s += time(Collective::kAllReduce, dense_bytes / parallelism.zero_shard,
                                      GroupKind::kDataReplica);
          }
        }
        if (bucket.expert > 0 && parallelism.expert_data_ranks() > 1) {
          after_last_pass_s +=
              time(l.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter,
                   static_cast<double>(bucket.expert) * bytes.gradient, GroupKind::kExpertData);
        }
      }
      // The word embedding held by the first and last stage: their gradients are summed once
      // the pass holding the embedding (or the head, the last stage's first chunk without
      // interleaving) has run, after the buckets.
      if (head_copies_word_embedding(m) && l.pp > 1 &&
          (stage == 0 || (stage == l.pp - 1 && l.virtual_stages == 1))) {
        after_last_pass_s += time(Collective::kAllReduce,
                                  word_embedding_gradient_bytes(m, l.tp, bytes.gradient) / Bytes(1),
                                  GroupKind::kEmbedding);
      }
      per_stage[stage] = after_last_pass_s;
    }
  }
  return step_reductions_.emplace(key, std::move(per_stage)).first->second;
}

const std::vector<double>& LayoutBounds::pipeline_hops(const Layout& l) {
  const auto key =
      std::make_tuple(l.tp, l.cp, l.dp, l.pp, l.ep, l.micro_batch, l.sequence_parallel);
  if (auto it = pipeline_hops_.find(key); it != pipeline_hops_.end()) return it->second;
  std::vector<double> hops;
  if (l.pp > 1) {
    const Scenario scenario = with_layout(base_, l);
    const RankLayout ranks(scenario.parallelism, base_.cluster.nvlink_domain);
    const Bytes transfer = pipeline_transfer_bytes(scenario);
    for (int stage = 0; stage < l.pp; ++stage) {
      hops.push_back(collectives_.time(Collective::kSendRecv, transfer,
                                       pipeline_links_sharing_nics(ranks, topology_, stage)) /
                     Seconds(1));
    }
  }
  return pipeline_hops_.emplace(key, std::move(hops)).first->second;
}

const std::vector<std::vector<int>>& LayoutBounds::in_flight(const Layout& l, int stage) {
  const int64_t microbatches = base_.training.global_batch / (l.micro_batch * l.dp);
  const auto key =
      std::make_tuple(static_cast<int>(l.schedule), l.pp, stage, microbatches, l.virtual_stages);
  if (auto it = in_flight_.find(key); it != in_flight_.end()) return it->second;
  // Per-chunk micro-batches in flight at the end of each run of forward passes. A backward
  // pass (its input half, for zero-bubble) counts as freeing its activations.
  // Unpaired: pairing for expert-parallel overlap only adds a forward in flight, so the count
  // stays a lower bound.
  const std::vector<PipelineAction> actions =
      pipeline_schedule(l.schedule, l.pp, stage, static_cast<int>(microbatches), l.virtual_stages, false);
  std::set<std::vector<int>> peaks;
  std::vector<int> live(l.virtual_stages + 1, 0);  // then the highest chunk run
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& a = actions[i];
    if (a.kind == PipelineAction::Kind::kForward) {
      ++live[a.chunk];
      live.back() = std::max(live.back(), a.chunk);
      if (i + 1 == actions.size() || actions[i + 1].kind != PipelineAction::Kind::kForward) {
        peaks.insert(live);
      }
    } else if (a.kind != PipelineAction::Kind::kBackwardWeight) {
      --live[a.chunk];
    }
  }
  return in_flight_.emplace(key, std::vector<std::vector<int>>(peaks.begin(), peaks.end()))
      .first->second;
}

int64_t LayoutBounds::peak_memory_lower_bound(const Layout& l) {
  const ShardFacts& facts = shard_facts(l);
  const auto& blocks = blocks_of(l.pp * l.virtual_stages);
  const Training training = layout_training(l, base_);
  const ParameterBytes bytes = parameter_bytes(training);
  const Parallelism parallelism = layout_parallelism(l, base_);
  // ZeRO-3 with pipelining gathers each chunk's weights for the whole step.
  const bool gathered = l.zero >= 3 && !per_microbatch_fsdp(l.zero, l.pp);
  const int64_t microbatches = base_.training.global_batch / (l.micro_batch * l.dp);
  int64_t bound = 0;
  for (const int stage : {0, 1, l.pp - 1}) {
    if (stage >= l.pp) continue;
    HeldWeights held;
    std::vector<int64_t> kept(l.virtual_stages, 0);
    std::vector<int64_t> weights(l.virtual_stages, 0);  // gathered, per chunk
    for (int chunk = 0; chunk < l.virtual_stages; ++chunk) {
      const auto& count = blocks[chunk * l.pp + stage].count;
      for (int kind = 0; kind < kNumBlockKinds; ++kind) {
        if (count[kind] == 0) continue;
        const BlockFacts& block = *facts[kind];
        held += block.weights * count[kind];
        kept[chunk] += count[kind] * block.kept_bytes;
        // Experts whose states are not sharded are held whole, not gathered.
        const HeldWeights gathered_weights =
            parallelism.expert_data_ranks() <= 1 ? block.weights.dense() : block.weights;
        weights[chunk] += count[kind] * static_cast<int64_t>(bytes.weights_bytes(gathered_weights));
      }
    }
    const StaticMemory states = rank_static_memory(training, parallelism, held);
    int64_t transient = 0;
    for (const std::vector<int>& state : in_flight(l, stage)) {
      int64_t in_flight_bytes = 0;
      for (int chunk = 0; chunk < l.virtual_stages; ++chunk) {
        in_flight_bytes += state[chunk] * kept[chunk];
        if (gathered && chunk <= state.back()) in_flight_bytes += weights[chunk];
      }
      transient = std::max(transient, in_flight_bytes);
    }
    // FSDP2's sharded gradients come with the first micro-batch's reduce-scatters: all there
    // from the second micro-batch's passes on, and at least by the first's end.
    const int64_t gradients = states.reduce_scattered_gradient_bytes;
    bound = std::max(
        bound, states.resident_bytes() +
                   (microbatches > 1 ? gradients + transient : std::max(gradients, transient)));
  }
  return bound;
}

Seconds LayoutBounds::iteration_time_lower_bound(const Layout& l, Detail detail) {
  const std::array<BlockTimes, kNumBlockKinds>& times = block_times(l, detail);
  const std::vector<VirtualStage>& blocks = blocks_of(l.pp * l.virtual_stages);
  const double microbatches =
      static_cast<double>(base_.training.global_batch / (l.micro_batch * l.dp));
  // Stage s runs its passes for all micro-batches, starting once micro-batch 0 crossed virtual
  // stages 0 .. s−1 (each block input to block output, then the link to the next stage). Its
  // last pass (backward of the last micro-batch, chunk 0: virtual stage s) starts after all its
  // other passes; the input gradient leaves it along a chain from the pass's first kernel (its
  // last block's), then crosses virtual stages s−1 .. 0 (each link back, then output gradient
  // to input gradient) — except under zero-bubble, which may run deferred weight gradients
  // after it. Once that pass starts, its data stream still has the gradient buckets it finishes
  // to reduce (likewise not under zero-bubble). Its streams' collectives slow the kernels
  // beside them.
  const bool drains = l.pp > 1 && l.schedule != Schedule::kZeroBubble;
  static const std::vector<double> kNone;
  const std::vector<double>& hops = detail == Detail::kFull ? pipeline_hops(l) : kNone;
  const std::vector<double>& reductions =
      detail == Detail::kFull && l.schedule != Schedule::kZeroBubble ? step_reductions(l) : kNone;
  double bound = 0.0;
  double before_s = 0.0;         // micro-batch 0 forward through virtual stages 0 .. s−1
  double gradient_back_s = 0.0;  // a gradient back through virtual stages s−1 .. 0
  for (int s = 0; s < l.pp; ++s) {
    std::array<int, kNumBlockKinds> stage_blocks{};  // over its chunks
    for (int chunk = 0; chunk < l.virtual_stages; ++chunk) {
      for (int kind = 0; kind < kNumBlockKinds; ++kind) {
        stage_blocks[kind] += blocks[chunk * l.pp + s].count[kind];
      }
    }
    // Over the step: its passes, kernels and each stream's collectives.
    double passes_s = 0.0;
    double kernels_s = 0.0;
    double persistent_s = 0.0;
    std::array<StreamLoad, kNumStreams> streams{};
    for (int kind = 0; kind < kNumBlockKinds; ++kind) {
      if (stage_blocks[kind] == 0) continue;
      const BlockTimes& t = times[kind];
      const double count = microbatches * stage_blocks[kind];
      passes_s += count * (t.forward_s + t.backward_s);
      kernels_s += count * t.kernels_s;
      persistent_s += count * t.persistent_kernels_s;
      for (int stream = 0; stream < kNumStreams; ++stream) {
        streams[stream].add(t.streams[stream], count);
      }
    }
    double forward_latency_s = 0.0;   // of virtual stage s
    double backward_latency_s = 0.0;  // the same backward
    double backward_s = 0.0;          // its backward pass
    for (int kind = 0; kind < kNumBlockKinds; ++kind) {
      const BlockTimes& t = times[kind];
      forward_latency_s += blocks[s].count[kind] * t.latency_s;
      backward_latency_s += blocks[s].count[kind] * t.backward_latency_s;
      backward_s += blocks[s].count[kind] * t.backward_s;
    }
    bound = std::max(bound, before_s + passes_s);
    if (!reductions.empty()) {
      bound = std::max(bound, before_s + passes_s - backward_s + reductions[s]);
    }
    if (drains) {
      const BlockTimes& first = times[blocks[s].last];
      const double chain = backward_latency_s - first.backward_latency_s + first.backward_latency_from_kernel_s +
                           gradient_back_s;
      bound = std::max(bound, before_s + passes_s - backward_s + chain);
    }
    // Micro-batch 0 crosses the link to the next stage, and a gradient the one back.
    const double hop_s = hops.empty() ? 0.0 : hops[s];
    before_s += forward_latency_s + hop_s;
    gradient_back_s += backward_latency_s + hop_s;
    // ZeRO-2 and -3 without pipelining: the data stream reduces (and gathers) every block for
    // every micro-batch.
    if (reduces_gradients_per_microbatch(l.zero, l.pp)) {
      streams[static_cast<int>(StreamKind::kData)].add(microbatch_data_stream(l), microbatches);
    }
    for (const StreamLoad& load : streams) {
      bound = std::max(bound, kernels_beside(load, kernels_s, persistent_s));
    }
  }
  return Seconds(bound * (1.0 - kRoundingMargin));
}

}  // namespace paceline
