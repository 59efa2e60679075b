// RankLayout: where each rank of a parallel layout sits, and the groups it belongs to.
//
// Ranks are numbered with the `rank_order` dimensions innermost first — by default
// tp-cp-dp-pp as Megatron-LM orders them, so a tensor-parallel group shares a node and
// pipeline stages are farthest apart. Expert layers fold their own layout over the ranks of a
// stage (Megatron-Core's "MoE parallel folding", expert tensor parallelism 1): expert-parallel
// groups are blocks of `ep` consecutive ranks in tp-cp-dp order, and each expert is
// replicated over the tp·cp·dp/ep ranks of its expert-data group.
#ifndef PACELINE_SIM_PARALLEL_RANK_LAYOUT_H_
#define PACELINE_SIM_PARALLEL_RANK_LAYOUT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "sim/scenario/scenario.h"

namespace paceline {

struct RankCoord {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  int pp = 0;
};

// Peers folded into one simulated rank: along each dimension (tp, cp, dp) with a step,
// ranks whose coordinates differ by a multiple of the step run alike, and the one whose
// coordinate is below the step stands for them all; a step of 0 folds nothing. `symmetric`
// fidelity folds every peer (step 1); `full` folds by the steps
// sim/network/network_symmetry.h proves to be symmetries of the run.
struct RankFold {
  int tp = 0;
  int cp = 0;
  int dp = 0;

  static RankFold all() { return {1, 1, 1}; }
  bool represents(const RankCoord& c) const {
    return (tp == 0 || c.tp < tp) && (cp == 0 || c.cp < cp) && (dp == 0 || c.dp < dp);
  }
  bool operator==(const RankFold&) const = default;
};

// The groups a rank joins; each is a SyncPoint slot of the rank's program.
enum class GroupKind : uint32_t {
  kTensor,        // tp ranks: tensor-parallel collectives
  kContext,       // cp ranks: ring attention
  kExpert,        // ep ranks: token all-to-all
  kData,          // dp·cp ranks: dense gradient reduction
  kDataShard,     // zero_shard ranks: ZeRO / FSDP sharding
  kDataReplica,   // dp·cp / zero_shard ranks: HSDP replicas of one shard
  kExpertData,    // tp·dp·cp / ep ranks: expert gradient reduction
  kModel,         // tp·pp ranks: gradient-norm reduction before the step
  kEmbedding,     // first and last stage: word embedding gradients
  kForwardSend,   // this stage → next stage (activations)
  kForwardRecv,   // previous stage → this stage
  kBackwardSend,  // this stage → previous stage (gradients)
  kBackwardRecv,  // next stage → this stage
};
inline constexpr int kNumGroupKinds = 13;

class RankLayout {
 public:
  // `nvlink_domain`: the GPUs (consecutive ranks) sharing one NVLink fabric.
  RankLayout(const Parallelism& parallelism, int nvlink_domain);

  int num_ranks() const { return num_ranks_; }
  RankCoord coord(int rank) const;
  int rank_of(const RankCoord& coord) const;
  // The rank `steps` further along `dim` (tp, cp or dp), wrapping around.
  int shifted(int rank, RankDim dim, int steps = 1) const;

  // The rank of `rank`'s column in the next pipeline stage (the first after the last): where its
  // pipeline link leads.
  int next_stage_rank(int rank) const;
  // The members of `rank`'s group of `kind`, in rank order (pipeline links: sender, receiver).
  std::vector<int> members(GroupKind kind, int rank) const;
  // The group of `kind` whose collectives a stage's program is priced for: of the groups with a
  // member in `stage` (in any stage by default), the one spread over the most NVLink domains,
  // whose collectives are the slowest and pace the rest; the lowest-ranked of those. Where the
  // groups do not fit the domains alike (a context-parallel group of 3 on nodes of 4), some
  // straddle two. The groups spanning stages (gradient norm, word embedding) are the same for
  // every stage.
  static constexpr int kEveryStage = -1;
  std::vector<int> placement(GroupKind kind, int stage = kEveryStage) const;
  // placement() of every stage at once, and for any stage.
  struct Placements {
    std::vector<std::vector<int>> by_stage;
    std::vector<int> any_stage;
  };
  Placements placements(GroupKind kind) const;
  // The two ends of the pipeline link from `stage` to the next (or previous) stage, in the
  // column of rank 0: {sender, receiver}.
  std::vector<int> link_members(int stage, bool forward) const;
  // A unique id for `rank`'s group of `kind` (equal for all members).
  uint32_t instance(GroupKind kind, int rank) const;
  // The group instance of every kind for `rank`, indexed by GroupKind.
  std::vector<uint32_t> instances(int rank) const;

 private:
  int data_index(const RankCoord& c) const { return c.cp + parallelism_.cp * c.dp; }
  RankCoord with_data_index(RankCoord c, int index) const;
  int expert_index(const RankCoord& c) const { return c.tp + parallelism_.tp * data_index(c); }
  RankCoord with_expert_index(RankCoord c, int index) const;

  Parallelism parallelism_;
  int nvlink_domain_;
  int num_ranks_;
  std::array<int, 4> stride_{};  // by RankDim
};

}  // namespace paceline

#endif  // PACELINE_SIM_PARALLEL_RANK_LAYOUT_H_
