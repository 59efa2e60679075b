// Lowering: a Scenario becomes the Programs its ranks run.
//
// Each pipeline stage gets one program: its schedule of forward and backward passes over its
// blocks (embedding, transformer layers, output head) for every micro-batch, the pipeline
// sends and receives between stages, the data-parallel gradient reduction (bucketed and
// overlapped with backward when asked), ZeRO/FSDP parameter gathers, the gradient-norm
// reduction and the optimizer step. `symmetric` fidelity simulates one rank per stage (its
// tensor/context/data-parallel peers are identical and their collectives are charged on the
// topology); `full` simulates every rank, all ranks of a stage sharing one program.
#ifndef PACELINE_SIM_PARALLEL_LOWERING_H_
#define PACELINE_SIM_PARALLEL_LOWERING_H_

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hardware/collective_model.h"
#include "hardware/op_timer.h"
#include "sim/engine/engine.h"
#include "sim/memory/static_memory.h"
#include "sim/parallel/rank_layout.h"
#include "sim/parallel/task_plan.h"
#include "sim/scenario/scenario.h"

namespace paceline {

// What a task of a stage program is, for traces and reports.
struct TaskLabel {
  uint32_t plan = kNoId;  // index into StageProgram::plans, or kNoId for a lone task
  uint32_t task = 0;      // template within the plan, or index into StageProgram::lone_names
  int32_t block = 0;      // layer index; -1 embedding, -2 output head, -3 outside blocks
  int32_t microbatch = -1;
};

// The collective a communication task runs (for the network of `full` fidelity).
struct TaskComm {
  Collective collective = Collective::kNone;
  GroupKind group = GroupKind::kTensor;
  Bytes size;
  TokenRouting routing;
};

struct StageProgram {
  int stage = 0;
  Program program;
  std::vector<TaskLabel> labels;  // by task
  std::vector<std::shared_ptr<const TaskPlan>> plans;
  // Lone tasks (pipeline transfers, reductions, the optimizer) repeat a few names: each
  // task's name is an index into the distinct `names`.
  std::vector<std::string> names;
  std::vector<uint32_t> lone_names;   // by lone task
  std::vector<TaskComm> lone_comms;   // by lone task
  StaticMemory static_memory;
  int64_t parameters = 0;          // held by one rank of the stage
  Flop executed_flop;              // all compute of one rank of the stage in one step
  Flop recompute_flop;             // of which activation recomputation

  // The collective a task runs (kNone for compute): its plan template's, or a lone task's own.
  TaskComm comm(TaskId task) const;
  // The name of a lone task (one whose label has no plan).
  const std::string& lone_name(const TaskLabel& label) const {
    return names[lone_names[label.task]];
  }
  // A task as reports name it: a lone task by its name, a plan's by its op, or its first and
  // last ops where it runs several kernels; its block (block_name) and micro-batch; and the
  // phase of its first op ("" for a lone task).
  struct TaskDescription {
    std::string name;
    std::string block;
    std::string phase;
    int32_t microbatch = -1;
  };
  TaskDescription describe(TaskId task) const;
};

// A TaskLabel's block as reports name it: "layer 3", "embedding", "head" or "step".
std::string block_name(int32_t block);

struct Lowering {
  std::vector<std::shared_ptr<const StageProgram>> stages;
  std::vector<RankSetup> ranks;  // the simulated ranks
  std::vector<int> rank_stage;   // stage of each simulated rank
  std::vector<int> rank_global;  // global rank number of each simulated rank
  RankFold fold;                 // the peers each simulated rank stands for
  int64_t microbatches = 0;
};

struct LoweringOptions {
  bool record_spans = false;   // keep task spans of the first simulated rank of each stage
  bool record_memory = false;  // keep the memory over time of the same ranks
  // Communication tasks of more than one rank are timed by a shared network (ExternalModel)
  // instead of their isolated duration.
  bool shared_network = false;
  // The simulated ranks in `full` fidelity (symmetric fidelity folds every peer).
  RankFold full_fold;
  // Threads that build stage programs at once (0: one per hardware thread); the programs are
  // the same for any count.
  int threads = 1;
};

// The shard of every block a rank of the scenario computes (its slice of batch, sequence, heads
// and experts, and how it is computed).
LayerShard layer_shard(const Scenario& scenario);
// The same for a layer past the recomputed ones of its chunk under partial recompute
// (training.recompute_layers): it keeps its activations.
LayerShard kept_layer_shard(const Scenario& scenario);
// The same for the output head. Its multi-token prediction modules are checkpointed when every
// layer is recomputed whole; under partial recompute they keep their activations, as
// Megatron-Core's block method leaves them (its uniform method checkpoints them).
LayerShard head_layer_shard(const Scenario& scenario);

// Bytes the optimizer step moves per parameter it updates and the temporaries it allocates per
// element of the states it works on at once: all of them, or (`per_tensor`) the largest tensor;
// `gradient_bytes` and `weight_bytes` per gradient and 16-bit working weight.
struct OptimizerStep {
  double traffic = 0.0;
  double transient = 0.0;
  bool per_tensor = false;
};
OptimizerStep optimizer_step(const Training& training, double gradient_bytes, double weight_bytes);

// The buffer that weight-gradient GEMMs add into, in its dtype: where a stage accumulates whole
// gradients over its micro-batches they are accumulated in place (Megatron-LM's
// gradient-accumulation fusion; under ZeRO-3 with pipelining, PyTorch FSDP's unsharded gradients,
// accumulated in the reduce dtype); where each micro-batch's gradients are reduced, none.
std::optional<DType> gradient_buffer(const Training& training, int zero, int pp);

// Whether ZeRO stage `zero` over `pp` pipeline stages gathers weights and reduces gradients per
// micro-batch (FSDP without pipelining); ZeRO-3 with pipelining gathers for the whole step.
bool per_microbatch_fsdp(int zero, int pp);

// The names of a transformer layer's block (`moe`: an MoE layer; `keeps`: one that keeps its
// activations under partial recomputation) and of a block's pass plan, as traces and errors show
// them ("moe_layer", "layer.backward").
std::string layer_block_name(bool moe, bool keeps);
std::string pass_plan_name(std::string_view block, PassKind pass);

// Whether per-micro-batch FSDP (per_microbatch_fsdp) keeps a root unit, as PyTorch FSDP2
// (`fsdp_gather: per_parameter`) does once fully_shard has wrapped each block and then the
// model: the weights outside the blocks (the embedding, the final norm and the output layer)
// are one unit, gathered as the forward starts and never resharded after it (FSDPState._lazy_init
// sets the root's post_forward_mesh_info to None), so they stay gathered until the backward is
// done; their gradients are copied in and reduce-scattered together after the embedding's
// backward, the head's (with its gradient of the word embedding, where it reads the table) kept
// until then.
bool holds_fsdp_root(const Parallelism& parallelism);

// The parameters of a block a rank holds, of which expert weights (reduced over the expert-data
// group).
struct BlockParameters {
  int64_t parameters = 0;
  int64_t expert = 0;
};
// A data-parallel gradient bucket: blocks [first_block, first_block + blocks) and the dense and
// expert parameters they hold.
struct GradientBucket {
  size_t first_block = 0;
  size_t blocks = 0;
  int64_t dense = 0;
  int64_t expert = 0;
};
// A model chunk's data-parallel gradient buckets (Megatron-LM's): consecutive blocks in backward
// order (last to first), each bucket closed once it holds at least `bucket_parameters`.
std::vector<GradientBucket> gradient_buckets(std::span<const BlockParameters> blocks_backward,
                                             int64_t bucket_parameters);
// The bucket size, in parameters, of the gradient reduction after the last micro-batch of a
// stage's model chunk. Megatron-Core's DDP buckets only the first stage's first chunk
// (Training::bucket_parameters); a later pipeline stage (its pp rank > 0), a later chunk
// (Megatron-LM's get_model sets disable_bucketing for model chunks after the first), and every
// chunk without overlap_grad_reduce, reduce as one bucket: "data-parallel communication on these
// stages is not on the critical path" (megatron/core/distributed/distributed_data_parallel.py).
// ZeRO-3 with pipelining reduce-scatters each block, its unit, as its last backward ends;
// PyTorch FSDP2 (fsdp_gather: per_parameter) under PyTorch's pipelining does so only once a
// model chunk's last backward is done (PipelineStage.backward_maybe_with_nosync), which the
// lowering builds apart from these buckets.
int64_t step_bucket_parameters(const Training& training, const Parallelism& parallelism, int stage,
                               int chunk);

// What one pipeline transfer carries: a micro-batch's hidden states (or their gradient) as one
// stage's last block outputs them, split over the context-parallel ranks and, with sequence
// parallelism, over the tensor-parallel ones.
Bytes pipeline_transfer_bytes(const Scenario& scenario);

// The word embedding's gradient that the first and last pipeline stages sum between them once
// their passes have run (the last stage's copy: head_copies_word_embedding): a vocab/tp × hidden
// shard at `gradient_bytes` a parameter.
Bytes word_embedding_gradient_bytes(const ModelSpec& model, int tp, double gradient_bytes);

// The all-gathers of a block's weights under ZeRO-3: one of all of them (its expert weights
// apart, over the ranks holding the same experts, where their states are sharded), or with
// fsdp_gather: tensor one per weight tensor above the persistence threshold; and, with that and
// full recompute, the tensors released after the recomputed forward and gathered again for
// backward: those whose next use lies at least fsdp_reuse_distance elements of other weights
// away. Each in bytes of the training's working weights.
struct FsdpGathers {
  std::vector<Bytes> sizes;  // over the data-parallel shard group
  std::vector<Bytes> regather_sizes;
  Bytes experts;  // over the expert-data group
  Bytes total() const;
};
FsdpGathers fsdp_gathers(const Scenario& scenario, const LayerGraph& graph);

Lowering lower(const Scenario& scenario, const OpTimer& timer, const CollectiveModel& collectives,
               const LoweringOptions& options);

}  // namespace paceline

#endif  // PACELINE_SIM_PARALLEL_LOWERING_H_
