#include "sim/search/layout.h"

#include <fmt/format.h>

#include "base/json.h"

namespace paceline {
namespace {

// In increasing order, found in pairs up to √n: a global batch may be 2^31 − 1.
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> small;
  std::vector<int64_t> large;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d * d != n) large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

// The tensor-parallel degrees the scenario format accepts for this model on `gpus` GPUs.
bool valid_tp(const ModelSpec& m, int tp, int gpus_per_node) {
  if (tp % gpus_per_node != 0 && gpus_per_node % tp != 0) return false;
  if (m.heads % tp != 0 || m.ffn_hidden % tp != 0) return false;
  return m.kv_heads % tp == 0 || tp % m.kv_heads == 0;
}

}  // namespace

std::vector<Layout> enumerate_layouts(const Scenario& base) {
  const ModelSpec& m = base.model;
  const Training& t = base.training;
  const int gpus = base.num_gpus();
  const Schedule single_chunk = base.parallelism.schedule == Schedule::kInterleavedOneFOneB
                                    ? Schedule::kOneFOneB
                                    : base.parallelism.schedule;
  std::vector<Layout> layouts;
  for (const int64_t tp : divisors(gpus)) {
    if (!valid_tp(m, static_cast<int>(tp), base.cluster.gpus_per_node)) continue;
    for (const int64_t pp : divisors(gpus / tp)) {
      if (pp > m.layers) continue;
      for (const int64_t cp : divisors(gpus / (tp * pp))) {
        if (context_parallel_problem(m, static_cast<int>(tp), static_cast<int>(cp), base.parallelism.cp_comm,
                                     t.attention, t.seq_len)) {
          continue;
        }
        const int64_t dp = gpus / (tp * pp * cp);
        if (t.global_batch % dp != 0) continue;
        std::vector<int64_t> eps = {1};
        if (m.moe) {
          eps.clear();
          for (const int64_t ep : divisors(m.moe->experts)) {
            if ((tp * dp * cp) % ep == 0) eps.push_back(ep);
          }
        }
        std::vector<int64_t> virtual_stages = {1};
        if (pp > 1) {
          for (int64_t v = 2; pp * v <= m.layers; ++v) {
            if (m.layers % (pp * v) == 0) virtual_stages.push_back(v);
          }
        }
        for (const int64_t ep : eps) {
          for (const int64_t v : virtual_stages) {
            for (const int64_t micro_batch : divisors(t.global_batch / dp)) {
              const int64_t microbatches = t.global_batch / (micro_batch * dp);
              if (v > 1 && microbatches % pp != 0) continue;
              // The base scenario's kind of selective recomputation is its framework's.
              const Recompute selective =
                  t.recompute == Recompute::kSelectiveOp ? Recompute::kSelectiveOp : Recompute::kSelective;
              for (const Recompute recompute : {Recompute::kNone, selective, Recompute::kFull}) {
                for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); ++zero) {
                  for (const bool sp : {false, true}) {
                    if (sp && tp == 1) continue;
                    if (!sp && tp > 1 && m.moe) continue;
                    if (sp && (micro_batch * (t.seq_len / cp)) % tp != 0) continue;
                    Layout l;
                    l.tp = static_cast<int>(tp);
                    l.pp = static_cast<int>(pp);
                    l.dp = static_cast<int>(dp);
                    l.cp = static_cast<int>(cp);
                    l.ep = static_cast<int>(ep);
                    l.virtual_stages = static_cast<int>(v);
                    l.schedule = v > 1 ? Schedule::kInterleavedOneFOneB : single_chunk;
                    l.micro_batch = micro_batch;
                    l.recompute = recompute;
                    l.zero = zero;
                    l.sequence_parallel = sp;
                    layouts.push_back(l);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return layouts;
}

Parallelism layout_parallelism(const Layout& l, const Scenario& base) {
  Parallelism p = base.parallelism;
  p.tp = l.tp;
  p.pp = l.pp;
  p.dp = l.dp;
  p.cp = l.cp;
  p.ep = l.ep;
  p.virtual_stages = l.virtual_stages;
  p.schedule = l.schedule;
  p.sequence_parallel = l.sequence_parallel;
  // The base's choice, where the layout has the sequence-parallel collectives it overlaps.
  p.tp_comm_overlap = base.parallelism.tp_comm_overlap && l.sequence_parallel;
  p.cp_comm = l.cp > 1 ? base.parallelism.cp_comm : ContextComm::kRing;
  p.cp_comm_overlap = base.parallelism.cp_comm_overlap || l.cp == 1 || p.cp_comm == ContextComm::kAllToAll;
  p.ep_comm_overlap = layout_overlaps_expert_exchanges(l, base);
  p.ep_dispatcher = l.ep > 1 ? base.parallelism.ep_dispatcher : TokenDispatcher::kAllToAll;
  p.zero = l.zero;
  p.zero_shard = l.dp * l.cp;
  // The base's ZeRO-3 settings act on per-block gathers and reductions, which only ZeRO-3
  // without pipelining has; elsewhere the scenario reader's defaults, as layout_overrides
  // leaves them.
  if (l.zero != 3 || l.pp != 1) {
    const Parallelism defaults;
    p.fsdp_prefetch = defaults.fsdp_prefetch;
    // PyTorch FSDP2 pipelines too.
    if (l.zero != 3 || p.fsdp_gather != FsdpGather::kPerParameter)
      p.fsdp_gather = defaults.fsdp_gather;
    p.fsdp_persistence_threshold = defaults.fsdp_persistence_threshold;
    p.fsdp_reuse_distance = defaults.fsdp_reuse_distance;
    p.fsdp_gradient_reduce = defaults.fsdp_gradient_reduce;
  }
  p.layers_per_stage = default_layers_per_stage(base.model.layers, l.pp * l.virtual_stages);
  return p;
}

bool layout_overlaps_expert_exchanges(const Layout& l, const Scenario& base) {
  const bool pairs = (l.schedule == Schedule::kOneFOneB && l.pp == 1) || l.schedule == Schedule::kInterleavedOneFOneB;
  return base.parallelism.ep_comm_overlap && pairs && l.ep > 1 && l.zero < 3 && l.recompute != Recompute::kFull;
}

Training layout_training(const Layout& l, const Scenario& base) {
  Training t = base.training;
  t.micro_batch = l.micro_batch;
  t.recompute = l.recompute;
  t.fp8_param_gather = base.training.fp8_param_gather && l.zero >= 1;
  return t;
}

Scenario with_layout(const Scenario& base, const Layout& l) {
  Scenario s = base;
  s.parallelism = layout_parallelism(l, base);
  s.training = layout_training(l, base);
  return s;
}

std::vector<Override> layout_overrides(const Layout& l, const Scenario& base) {
  // What with_layout() builds, as the scenario reader accepts it: the base's framework settings
  // only where the layout has what they apply to.
  const Parallelism p = layout_parallelism(l, base);
  Json parallelism = Json::object();
  parallelism.set("tp", p.tp).set("pp", p.pp).set("dp", p.dp).set("cp", p.cp).set("ep", p.ep);
  parallelism.set("virtual_stages", p.virtual_stages).set("schedule", to_string(p.schedule));
  parallelism.set("sequence_parallel", p.sequence_parallel)
      .set("zero", p.zero)
      .set("rank_order", to_string(p.rank_order));
  if (p.tp_comm_overlap) {
    parallelism.set("tp_comm_overlap", true);
    parallelism.set("tp_comm_overlap_method", to_string(p.tp_comm_overlap_method));
  }
  if (p.tp > 1 && p.tp_implementation != TpImplementation::kMegatron) {
    parallelism.set("tp_implementation", to_string(p.tp_implementation));
  }
  if (p.cp_comm != ContextComm::kRing) parallelism.set("cp_comm", to_string(p.cp_comm));
  if (!p.cp_comm_overlap) parallelism.set("cp_comm_overlap", false);
  if (p.ep_comm_overlap) parallelism.set("ep_comm_overlap", true);
  if (p.ep > 1 && p.ep_dispatcher != TokenDispatcher::kAllToAll)
    parallelism.set("ep_dispatcher", to_string(p.ep_dispatcher));
  if (p.zero == 3 && p.pp == 1) {
    parallelism.set("fsdp_prefetch", p.fsdp_prefetch);
    if (p.fsdp_gradient_reduce != FsdpGradientReduce::kReduceScatter) {
      parallelism.set("fsdp_gradient_reduce", to_string(p.fsdp_gradient_reduce));
    }
    if (p.fsdp_gather != FsdpGather::kBlock)
      parallelism.set("fsdp_gather", to_string(p.fsdp_gather));
    if (p.fsdp_gather == FsdpGather::kTensor) {
      parallelism.set("fsdp_persistence_threshold", p.fsdp_persistence_threshold);
      parallelism.set("fsdp_reuse_distance", p.fsdp_reuse_distance);
    }
  } else if (p.zero == 3 && p.fsdp_gather == FsdpGather::kPerParameter) {
    parallelism.set("fsdp_gather", to_string(p.fsdp_gather));
  }
  std::vector<Override> overrides = {{"parallelism", parallelism.dump(-1)},
                                     {"training.micro_batch", fmt::format("{}", l.micro_batch)},
                                     {"training.recompute", to_string(l.recompute)}};
  if (base.training.fp8_param_gather) {
    overrides.push_back({"training.fp8_param_gather", layout_training(l, base).fp8_param_gather ? "true" : "false"});
  }
  return overrides;
}

std::string to_string(const Layout& l) {
  return fmt::format(
      "tp {} · pp {} · dp {} · cp {} · ep {} · v {} · mb {} · recompute {} · zero {}{}", l.tp, l.pp,
      l.dp, l.cp, l.ep, l.virtual_stages, l.micro_batch, to_string(l.recompute), l.zero,
      l.sequence_parallel ? " · sp" : "");
}

}  // namespace paceline
