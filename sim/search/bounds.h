// LayoutBounds: lower bounds on a layout's peak memory and iteration time, computed from the
// operator graphs, the op timer and the pipeline schedule without simulating — so a search can
// skip layouts that cannot fit, or cannot beat the layouts it has already simulated.
//
// Both bounds hold for the engine's accounting (tests hold them under the simulated values for
// every layout of small clusters):
//
// Memory. A rank starts with its weights, gradients and optimizer states resident (sharded as
// sim/parallel/lowering.cc shards them) and, when a forward pass ends on the compute stream,
// still holds the activations that every forward pass it ran before keeps for its backward
// pass, less those of the backward passes it ran before (freed no later than their compute
// ends). With ZeRO-3 and pipelining, it also holds the gathered weights of every model chunk
// it has run. The bound is the largest such total the pipeline schedule reaches on the first,
// second and last stage. Only activations of compute kernels count.
//
// Time. A stage's compute stream runs its passes one after another, so the step lasts at least
// the sum over its passes of each pass's span replayed alone: its kernels in order on the one
// compute stream, each collective as soon as its inputs are ready (in the schedule, other
// passes and other ranks can only make either wait longer). Each stage also cannot start
// before micro-batch 0 has flowed forward through every earlier stage, and — except under
// zero-bubble, which defers weight gradients — the gradient of its last pass, the backward of
// the last micro-batch through its first model chunk, must then flow back through every
// earlier stage (the inner stages carry the most layers when the layers split unevenly), each
// crossing of a link between stages taking its transfer's time. A block's output (or input
// gradient) waits both for its predecessors in the block's graph and for every kernel the
// compute stream runs before it, which in a backward pass are nearly all of its kernels: a
// 1F1B drain costs each earlier stage about a whole backward pass. Where gradients are reduced
// once a step, the buckets holding a stage's first-chunk blocks wait for its last pass to start
// and then run one after another on its data stream. With ZeRO-2 or -3 and no pipelining, the
// data stream's reduce-scatters (and ZeRO-3's gathers) of every micro-batch run one after
// another too.
//
// Interference. A stream runs its collectives one after another, and every kernel runs slower
// while one of them runs beside it (the engine's interference): a kernel slowed by s gets
// through d / (1 + s) of its work in d, a persistent one half of it beside a collective holding
// SMs. So while a stream's collectives run, kernels get through at most as much work as the
// plain kernels fill first and the persistent ones after, and the step lasts at least the
// kernels' time plus the collectives' less that work.
//
// An instance caches graphs, prices and schedule profiles and is not thread-safe; prepare()
// builds graphs on threads, and fork() gives each thread its own instance over shared graphs.
#ifndef PACELINE_SIM_SEARCH_BOUNDS_H_
#define PACELINE_SIM_SEARCH_BOUNDS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "hardware/collective_model.h"
#include "hardware/op_timer.h"
#include "hardware/topology.h"
#include "models/layer_graph.h"
#include "sim/engine/engine.h"
#include "sim/memory/static_memory.h"
#include "sim/parallel/lowering.h"
#include "sim/parallel/rank_layout.h"
#include "sim/parallel/task_plan.h"
#include "sim/scenario/scenario.h"
#include "sim/search/layout.h"

namespace paceline {

class LayoutBounds {
 public:
  // `base`: the model, cluster and training setup the layouts apply to. Kept by reference.
  explicit LayoutBounds(const Scenario& base);
  // Members refer to one another (the pricers to the timer and the collective model).
  LayoutBounds(const LayoutBounds&) = delete;
  LayoutBounds& operator=(const LayoutBounds&) = delete;

  // Builds the operator graphs of all `layouts` on `threads` threads (optional: the bounds
  // build what they miss on demand); throws SimulationStopped once `stop` is set. `progress`,
  // when given, runs on the calling thread as graphs are built (done of total).
  void prepare(const std::vector<Layout>& layouts, int threads, const std::atomic<bool>* stop = nullptr,
               const std::function<void(size_t done, size_t total)>& progress = {});
  // A second instance over the same base that shares the graphs built so far (read-only) and
  // keeps its own caches, so instances can compute bounds on separate threads.
  std::unique_ptr<LayoutBounds> fork() const;

  // A lower bound on the peak memory of the worst rank, in bytes.
  int64_t peak_memory_lower_bound(const Layout& layout);
  // How much a time bound prices: kFull every term; kKernels only the kernels, every collective
  // counted as instant — looser, never wrong, and cheap where pricing collectives over groups
  // of thousands of GPUs is not.
  enum class Detail { kKernels, kFull };
  // A lower bound on the iteration time.
  Seconds iteration_time_lower_bound(const Layout& layout, Detail detail = Detail::kFull);

 private:
  enum BlockKind { kEmbedding, kDense, kMoe, kHead, kNumBlockKinds };

  // What one block (embedding, layer, head) costs one rank for one micro-batch, independent of
  // where its groups sit.
  struct BlockFacts {
    // Per op, in the graph's order (a topological one), what the bounds read of it: its phase,
    // whether it is a collective, its predecessors (those of op i are
    // predecessor_ids[predecessor_begin[i] .. predecessor_begin[i + 1])) and its kernel time (0
    // for collectives). The graph itself is not kept: a search prepares thousands of shards.
    std::vector<Phase> phase;
    std::vector<bool> collective;
    std::vector<uint32_t> predecessor_begin;
    std::vector<OpId> predecessor_ids;
    std::vector<double> compute_s;
    std::vector<bool> persistent;  // a persistent kernel (KernelTime::persistent)
    // Collectives that move data, priced for each layout's group placement.
    std::vector<std::pair<OpId, Op>> priced_collectives;
    // Weight-gradient GEMMs and their kernel time when they add into a gradient buffer (below
    // ZeRO-3); compute_s has them writing a fresh gradient.
    struct BufferedWgrad {
      OpId id;
      double seconds;
      bool persistent;
    };
    std::vector<BufferedWgrad> buffered_wgrads;
    OpId forward_exit = 0;
    std::vector<OpId> backward_exits;
    HeldWeights weights;     // held by the rank
    int64_t kept_bytes = 0;  // activations of compute kernels kept for backward
    FsdpGathers tensor_gathers;  // ZeRO-3's gathers with fsdp_gather: tensor

    size_t num_ops() const { return phase.size(); }
    std::span<const OpId> predecessors(OpId id) const {
      return {predecessor_ids.data() + predecessor_begin[id], predecessor_ids.data() + predecessor_begin[id + 1]};
    }
  };
  // Collectives that run one after another on one stream of a rank, as the engine's
  // interference sees them: how long they run, the least they slow a kernel beside them (outside
  // persistent kernels), and whether every one holds SMs a persistent kernel needs.
  struct StreamLoad {
    double busy_s = 0.0;
    double least_slowdown = std::numeric_limits<double>::infinity();
    bool all_hold_sms = true;
    // A collective of `seconds` whose kernel holds `sms` (none: it slows nothing).
    void add(double seconds, uint16_t sms, ActivityTag tag, const Interference& interference);
    void add(const StreamLoad& other, double times);
  };
  // The same with collectives priced for a layout's group placement.
  struct BlockTimes {
    double forward_s = 0.0;   // bound on the forward pass's span on the compute stream
    double backward_s = 0.0;  // the same for the backward pass (both halves for zero-bubble)
    double latency_s = 0.0;   // forward: block input to block output
    // Backward (non-zero-bubble): output gradient to input gradient, and from the pass's first
    // kernel's start to its input gradient.
    double backward_latency_s = 0.0;
    double backward_latency_from_kernel_s = 0.0;
    double kernels_s = 0.0;                         // the kernels of both passes, back to back
    double persistent_kernels_s = 0.0;              // the persistent ones among them
    std::array<StreamLoad, kNumStreams> streams{};  // the collectives of both passes
  };
  // The blocks of one virtual stage: how many of each kind, and the kind of its last block.
  struct VirtualStage {
    std::array<int, kNumBlockKinds> count{};
    int last = kHead;
  };
  // mb, tp, cp, ep, sp, recompute, ep_comm_overlap
  using ShardKey = std::tuple<int64_t, int, int, int, bool, int, bool>;
  using ShardFacts =
      std::array<std::shared_ptr<const BlockFacts>, kNumBlockKinds>;  // null where absent
  // The tensor, context and expert groups block collectives are priced over: each kind's
  // placement and the groups sharing its NICs (sharing_nics).
  using PricedGroups = std::array<std::vector<std::vector<int>>, 3>;
  // Shard, priced groups, zero-bubble, gradient buffer.
  using TimesKey = std::tuple<ShardKey, PricedGroups, bool, bool>;

  ShardKey shard_key(const Layout& layout) const;
  ShardFacts build_shard(const Layout& layout) const;
  const ShardFacts& shard_facts(const Layout& layout);
  const std::array<BlockTimes, kNumBlockKinds>& block_times(const Layout& layout, Detail detail);
  // The block times of a shard; collectives priced by `pricer`, or instant when null.
  // `buffered`: weight gradients add into a gradient buffer (ZeRO below 3). `paired`: passes run
  // interleaved with another micro-batch's (ep_comm_overlap).
  std::array<BlockTimes, kNumBlockKinds> compute_times(const ShardFacts& facts, const OpPricer* pricer,
                                                       bool zero_bubble, bool buffered, bool paired) const;
  // Distinct states of a stage at the end of a run of forward passes: per chunk, the
  // micro-batches whose activations it holds, then the highest chunk it has run.
  const std::vector<std::vector<int>>& in_flight(const Layout& layout, int stage);
  // The blocks of each virtual stage under the default layer split.
  const std::vector<VirtualStage>& blocks_of(int virtual_stages_total);
  // ZeRO-2 and -3 without pipelining, per micro-batch: the data stream's collectives (each
  // block's gradients reduce-scattered; under ZeRO-3 its weights gathered for forward and
  // backward too), each priced alone.
  StreamLoad microbatch_data_stream(const Layout& layout);
  // Per stage, the least time its data stream takes, after its last pass starts, for the
  // gradient reductions of the step (the buckets holding a block of its first model chunk, which
  // that pass finishes); none where gradients are reduced per micro-batch.
  const std::vector<double>& step_reductions(const Layout& layout);
  // Per pipeline link (stage k to the next, the last to the first), the time a transfer of
  // one micro-batch's activation or gradient takes over it; none without pipelining.
  const std::vector<double>& pipeline_hops(const Layout& layout);
  // A lower bound on the time a rank takes for kernels of `kernels_s` (of which
  // `persistent_s` persistent) and collectives `load` on another stream.
  double kernels_beside(const StreamLoad& load, double kernels_s, double persistent_s) const;

  const Scenario& base_;
  Interference interference_;
  OpTimer timer_;
  Topology topology_;
  CollectiveModel collectives_;
  RankLayout neutral_layout_;  // base's own layout: placements do not matter for kernels
  OpPricer kernel_pricer_;
  std::vector<int> moe_before_;  // MoE layers among the first i layers
  // Graphs: those prepared, shared by forks (read-only), then those this instance built.
  std::shared_ptr<const std::map<ShardKey, ShardFacts>> prepared_;
  std::map<ShardKey, ShardFacts> shards_;
  std::map<TimesKey, std::array<BlockTimes, kNumBlockKinds>> times_;
  std::map<std::tuple<ShardKey, bool, bool>, std::array<BlockTimes, kNumBlockKinds>> kernel_times_;
  // The same entries by (shard, tp, cp, dp, pp, ep, zero-bubble, gradient buffer), which fix the
  // placements.
  std::map<std::tuple<ShardKey, int, int, int, int, int, bool, bool>,
           const std::array<BlockTimes, kNumBlockKinds>*>
      times_by_layout_;
  // By (tp, cp, dp, ep), whether weights are gathered, recompute and the parameters of each
  // block kind.
  std::map<std::tuple<int, int, int, int, bool, int, std::array<int64_t, kNumBlockKinds>>,
           StreamLoad>
      microbatch_streams_;
  std::map<std::tuple<int, int, int, int64_t, int>, std::vector<std::vector<int>>> in_flight_;
  // By (tp, cp, dp, pp, ep, virtual stages, ZeRO stage).
  std::map<std::tuple<int, int, int, int, int, int, int>, std::vector<double>> step_reductions_;
  // By (tp, cp, dp, pp, ep, micro-batch, sequence parallelism).
  std::map<std::tuple<int, int, int, int, int, int64_t, bool>, std::vector<double>> pipeline_hops_;
  std::map<int, std::vector<VirtualStage>> blocks_;
  // The groups block collectives are priced over, by (tp, cp, dp, pp, ep).
  std::map<std::tuple<int, int, int, int, int>, PricedGroups> placements_;
};

}  // namespace paceline

#endif  // PACELINE_SIM_SEARCH_BOUNDS_H_
