// TaskPlan: one pass (forward, backward, …) of a LayerGraph cut into engine-task templates,
// with durations priced on the cluster.
//
// Consecutive compute ops become one task when nothing outside the run waits for an op inside
// it and nothing outside feeds an op after its start — so a run of kernels that only follow one
// another on the compute stream costs one event instead of dozens, and the result is the same
// as replaying them one by one. Each collective is its own task on its group's stream. The
// ops behind every task stay listed, so a trace shows every kernel.
//
// A plan is built once per distinct block and instantiated for every (layer, micro-batch).
#ifndef PACELINE_SIM_PARALLEL_TASK_PLAN_H_
#define PACELINE_SIM_PARALLEL_TASK_PLAN_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hardware/collective_model.h"
#include "hardware/op_timer.h"
#include "models/layer_graph.h"
#include "sim/engine/program.h"
#include "sim/parallel/rank_layout.h"

namespace paceline {

// The streams of every rank's program, in this order.
enum class StreamKind : uint32_t {
  kCompute,
  kTensor,
  kContext,
  kExpert,
  kData,
  kSendNext,
  kRecvPrev,
  kSendPrev,
  kRecvNext,
  kHostCopy,  // copies to and from host memory (activation offload), on the copy engines
};
inline constexpr int kNumStreams = 10;
std::string_view to_string(StreamKind stream);
// The stream an op of a layer graph runs on.
StreamKind stream_of(const Op& op);

// What a task spends its time on, for the breakdown.
enum class ActivityTag : uint8_t {
  kCompute,
  kRecompute,
  kTensorComm,
  kContextComm,
  kExpertComm,
  kDataComm,
  kPipelineComm,
  kOptimizer,
  kHostTransfer,
};
inline constexpr int kNumActivityTags = 9;
std::string_view to_string(ActivityTag tag);
bool is_communication(ActivityTag tag);
// What an op of a layer graph spends its time on.
ActivityTag tag_of(const Op& op);

// Which phases of a LayerGraph a pass runs.
enum class PassKind {
  kForward,        // forward
  kBackward,       // recompute, input and weight gradients together
  kBackwardInput,  // recompute and input gradients (zero-bubble B)
  kBackwardWeight  // weight gradients (zero-bubble W)
};

// Whether a pass runs the ops of this phase.
bool in_pass(Phase phase, PassKind pass);

struct PlannedOp {
  std::string name;
  Seconds duration;
  bool measured = false;  // timed from a measured kernel profile (else the roofline model)
  Phase phase;
  OpKind kind;
  Flop flop;
  int launches = 1;  // kernels it launches (kernel_launches)
};

// The kernels an op launches: an eager composite's each, and a GEMM of `count` run as a kernel
// per GEMM (GemmShape::kernel_per_gemm) one for each.
int kernel_launches(const Op& op);

struct TaskTemplate {
  StreamKind stream = StreamKind::kCompute;
  GroupKind group = GroupKind::kTensor;  // communication tasks: the group they run over
  CommSpec comm;                         // communication tasks: the collective
  SimTime duration;
  SimTime persistent_duration;      // of `duration`, in persistent kernels (KernelTime::persistent)
  std::vector<uint32_t> deps;       // templates of the same plan
  std::vector<OpId> external_deps;  // ops of another pass of the same block instance
  bool entry = false;               // waits for the block's input (or output gradient)
  bool exit = false;                // produces the block's output (or input gradient)
  int64_t alloc_bytes = 0;
  int64_t free_bytes = 0;
  int64_t transient_bytes = 0;
  int64_t stranded_bytes = 0;
  ActivityTag tag = ActivityTag::kCompute;
  uint16_t sms = 0;       // communication tasks: the SMs their kernel holds (Task::sms)
  uint32_t first_op = 0;  // its ops: ops[first_op, first_op + num_ops)
  uint32_t num_ops = 0;
  Flop flop;
};

struct TaskPlan {
  std::string name;
  PassKind pass = PassKind::kForward;
  std::vector<PlannedOp> ops;
  std::vector<TaskTemplate> tasks;
  std::vector<uint32_t> op_task;  // graph op → template (kNoId outside this pass or skipped)
  Flop flop;                      // all ops of the pass
  uint32_t last_compute = kNoId;  // the last template on the compute stream
};

// `group` of `kind` and the groups of that kind that run the same collectives at the same time
// (a stage's groups of a kind run theirs at once) through a NIC one of its GPUs sends through:
// with fewer NICs than GPUs, their traffic shares it. `group` first; alone when it stays in one
// NVLink domain or no other such group sits behind its NICs.
std::vector<std::vector<int>> sharing_nics(const RankLayout& layout, const Topology& topology, GroupKind kind,
                                           const std::vector<int>& group);

// The pipeline link from stage `link_stage` to the next in the column of rank 0 (RankLayout::
// link_members, {sender, receiver}), the column symmetric fidelity simulates, and the stage's
// other links whose transfers share its NICs: every rank of a stage passes its micro-batch on at
// once, so with fewer NICs than GPUs, links that send through its sender's NIC or receive through
// its receiver's share them. The link first; alone when it stays in one NVLink domain or has a
// NIC to itself.
std::vector<std::vector<int>> pipeline_links_sharing_nics(const RankLayout& layout,
                                                          const Topology& topology, int link_stage);

// Where pricing by sharing_nics falls short: of the groups of `kind` that leave their NVLink
// domain, the most pipeline stages whose groups send through one NIC (the sending side's, by
// rail, as sharing_nics counts them). Their collectives contend for it as the stages run side by
// side, which only full fidelity sees; 1 where no NIC carries more than one stage's.
int stages_sharing_a_nic(const RankLayout& layout, const Topology& topology, GroupKind kind);

// Whether groups of `kind` (of any stages) send over one oversubscribed leaf uplink: a group
// whose GPUs hang off leaves of several groups of nodes sends up from each of its GPUs' leaves
// (rail-optimized, the sender's rail's), and symmetric fidelity prices each group's collectives
// without the others' traffic there.
bool groups_share_an_oversubscribed_uplink(const RankLayout& layout, const Topology& topology,
                                           GroupKind kind);

// As stages_sharing_a_nic, for pipeline transfers: the most stages whose transfers leave their
// NVLink domains through one NIC (activations through the sender's, gradients through the
// receiver's), which symmetric fidelity prices each apart; 1 where no NIC carries two stages'.
// Only an interleaved schedule passes on from the last stage to the first.
int stages_passing_on_through_a_nic(const RankLayout& layout, const Topology& topology,
                                    bool interleaved);

// Prices ops: compute on the op timer, collectives over the group each runs on, together with
// the groups sharing its NICs.
class OpPricer {
 public:
  OpPricer(const OpTimer& timer, const CollectiveModel& collectives, const RankLayout& layout);
  KernelTime price(const Op& op) const;
  // The SMs the kernel of a communication op holds while it runs.
  uint16_t kernel_sms(const Op& op) const;
  // RankLayout::placement of `kind` in any stage, and in `stage`.
  const std::vector<int>& placement(GroupKind kind) const { return placements_[static_cast<int>(kind)].any_stage; }
  const std::vector<int>& placement(GroupKind kind, int stage) const {
    return placements_[static_cast<int>(kind)].by_stage[stage];
  }
  const OpTimer& timer() const { return timer_; }
  const CollectiveModel& collectives() const { return collectives_; }

 private:
  const OpTimer& timer_;
  const CollectiveModel& collectives_;
  std::array<RankLayout::Placements, kNumGroupKinds> placements_;
  std::array<std::vector<std::vector<int>>, kNumGroupKinds> sharing_;  // sharing_nics of each
};

GroupKind group_of(CommGroup group);

TaskPlan plan_pass(const LayerGraph& graph, PassKind pass, const OpPricer& pricer, std::string name);

}  // namespace paceline

#endif  // PACELINE_SIM_PARALLEL_TASK_PLAN_H_
