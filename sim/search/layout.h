// Layout: one way to lay a model out on a cluster — the parallel degrees, pipeline schedule,
// micro-batch, recomputation, ZeRO stage and sequence parallelism — and the enumeration of
// every valid layout of a scenario's model on its cluster, which `paceline search` ranks.
//
// The enumeration keeps the scenario's model, cluster, global batch and training setup and
// varies, in this order (outermost first, each ascending):
//   tp               divides the GPU count, and either divides gpus_per_node or is a multiple
//                    of it (a tensor-parallel group sits in one node or spans whole nodes);
//                    divides model.heads and model.ffn_hidden; divides or is divided by
//                    model.kv_heads
//   pp               divides GPUs/tp; at most model.layers
//   cp               divides GPUs/(tp·pp); seq_len divides into 2·cp chunks
//   dp               GPUs/(tp·pp·cp)
//   ep               1 for dense models; for MoE, divides the experts and tp·dp·cp
//   virtual_stages   1, or v ≥ 2 when pp > 1 and pp·v divides model.layers (Megatron-LM's rule:
//                    equal chunks) with the interleaved schedule
//   micro_batch      divides global_batch/dp
//   recompute        none, selective, full
//   zero             0..3 when dp·cp > 1 (else only 0: there is nothing to shard over)
//   sequence_parallel  false, true when tp > 1 (MoE with tp > 1: only true)
// The schedule is the scenario's when it runs one chunk per stage (gpipe, 1f1b, zero-bubble;
// 1f1b when the scenario is interleaved) and interleaved-1f1b when virtual_stages > 1.
// Layouts that break any rule of the scenario format (README, "Scenario format") are skipped,
// so each enumerated layout reads back as a valid scenario.
#ifndef PACELINE_SIM_SEARCH_LAYOUT_H_
#define PACELINE_SIM_SEARCH_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"
#include "sim/search/scenario_source.h"

namespace paceline {

struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int cp = 1;
  int ep = 1;
  int virtual_stages = 1;
  Schedule schedule = Schedule::kOneFOneB;
  int64_t micro_batch = 1;
  Recompute recompute = Recompute::kNone;
  int zero = 0;
  bool sequence_parallel = false;

  friend bool operator==(const Layout&, const Layout&) = default;
  friend auto operator<=>(const Layout&, const Layout&) = default;
};

// Every valid layout of `base`'s model on its cluster (base's own parallel layout, micro-batch
// and recomputation are ignored), in the order described above.
std::vector<Layout> enumerate_layouts(const Scenario& base);

// The parallelism of `layout` on `base` as the scenario format resolves it (layers_per_stage
// split by default, zero_shard = dp·cp, base's rank_order).
Parallelism layout_parallelism(const Layout& layout, const Scenario& base);

// Whether `layout` keeps base's parallelism.ep_comm_overlap: where it has expert-parallel
// exchanges, a schedule that pairs passes, no ZeRO-3 and no full recomputation.
bool layout_overlaps_expert_exchanges(const Layout& layout, const Scenario& base);

// The training settings of `layout` on `base`: its micro-batch and recomputation, and base's fp8
// parameters where the layout has the ZeRO sharding that gathers them (zero 1 and up).
Training layout_training(const Layout& layout, const Scenario& base);

// The scenario with `layout` applied: parallelism and micro-batch/recompute set as
// enumerate_layouts() defines them, the layer split and zero_shard left to their defaults.
Scenario with_layout(const Scenario& base, const Layout& layout);

// The overrides that give a scenario this layout (`parallelism` replaced as a whole, keeping
// base's rank_order; training.micro_batch and training.recompute set).
std::vector<Override> layout_overrides(const Layout& layout, const Scenario& base);

// "tp 8 · pp 16 · dp 8 · cp 1 · ep 1 · v 3 · mb 1 · recompute full · zero 1 · sp"
std::string to_string(const Layout& layout);

}  // namespace paceline

#endif  // PACELINE_SIM_SEARCH_LAYOUT_H_
