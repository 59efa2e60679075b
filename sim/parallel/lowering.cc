#include "sim/parallel/lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <string_view>

#include "base/check.h"
#include "base/parallel_for.h"
#include "sim/parallel/pipeline_schedule.h"

namespace paceline {

LayerShard layer_shard(const Scenario& s) {
  LayerShard shard;
  shard.micro_batch = s.training.micro_batch;
  shard.seq_len = s.training.seq_len;
  shard.tp = s.parallelism.tp;
  shard.cp = s.parallelism.cp;
  shard.cp_comm = s.parallelism.cp_comm;
  shard.cp_comm_overlap = s.parallelism.cp_comm_overlap;
  shard.ep = s.parallelism.ep;
  shard.delay_expert_weight_gradients = s.parallelism.ep_comm_overlap;
  shard.sequence_parallel = s.parallelism.sequence_parallel;
  shard.tp_comm_overlap = s.parallelism.tp_comm_overlap;
  shard.tp_comm_overlap_method = s.parallelism.tp_comm_overlap_method;
  shard.tp_implementation = s.parallelism.tp_implementation;
  shard.activation_dtype = s.compute_dtype();
  shard.fp8 = s.training.precision == Precision::kFp8;
  shard.recompute = s.training.recompute;
  shard.recompute_modules = s.training.recompute_modules;
  shard.attention_kernel = s.training.attention;
  shard.repeat_kv = s.training.repeat_kv;
  shard.separate_projections = s.training.separate_projections;
  shard.moe_weighting = s.training.moe_weighting;
  shard.expert_gemm = s.training.expert_gemm;
  shard.ep_dispatcher = s.parallelism.ep_dispatcher;
  shard.fusion = s.training.fusion;
  shard.cross_entropy = s.training.cross_entropy;
  shard.gradient_buffer = gradient_buffer(s.training, s.parallelism.zero, s.parallelism.pp);
  shard.head_apart_from_embedding = s.parallelism.pp > 1;
  return shard;
}

LayerShard kept_layer_shard(const Scenario& s) {
  LayerShard shard = layer_shard(s);
  shard.recompute = Recompute::kNone;
  return shard;
}

LayerShard head_layer_shard(const Scenario& s) {
  return s.training.recompute_layers > 0 ? kept_layer_shard(s) : layer_shard(s);
}

std::optional<DType> gradient_buffer(const Training& training, int zero, int pp) {
  if (reduces_gradients_per_microbatch(zero, pp)) return std::nullopt;
  return training.gradients_in_bf16 ? DType::kBf16 : DType::kFp32;
}

TaskComm StageProgram::comm(TaskId task) const {
  const TaskLabel& label = labels[program.task(task).label];
  if (label.plan == kNoId) return lone_comms[label.task];
  const TaskTemplate& t = plans[label.plan]->tasks[label.task];
  return TaskComm{t.comm.collective, t.group, t.comm.size, t.comm.routing};
}

StageProgram::TaskDescription StageProgram::describe(TaskId task) const {
  const TaskLabel& label = labels[program.task(task).label];
  TaskDescription d{.block = block_name(label.block), .microbatch = label.microbatch};
  if (label.plan == kNoId) {
    d.name = lone_name(label);
    return d;
  }
  const TaskPlan& plan = *plans[label.plan];
  const TaskTemplate& t = plan.tasks[label.task];
  const PlannedOp& first = plan.ops[t.first_op];
  d.name = t.num_ops > 1
               ? fmt::format("{} ... {}", first.name, plan.ops[t.first_op + t.num_ops - 1].name)
               : first.name;
  d.phase = std::string(to_string(first.phase));
  return d;
}

std::string block_name(int32_t block) {
  if (block == -1) return "embedding";
  if (block == -2) return "head";
  if (block < 0) return "step";
  return fmt::format("layer {}", block);
}

bool per_microbatch_fsdp(int zero, int pp) { return zero >= 3 && pp == 1; }

std::string layer_block_name(bool moe, bool keeps) {
  return fmt::format("{}{}layer", keeps ? "kept_" : "", moe ? "moe_" : "");
}

std::string pass_plan_name(std::string_view block, PassKind pass) {
  switch (pass) {
    case PassKind::kForward:
      return fmt::format("{}.forward", block);
    case PassKind::kBackward:
      return fmt::format("{}.backward", block);
    case PassKind::kBackwardInput:
      return fmt::format("{}.backward_input", block);
    case PassKind::kBackwardWeight:
      return fmt::format("{}.backward_weight", block);
  }
  return std::string(block);
}

// The caching allocator's pools a rank's memory comes from (Task::alloc_pool): PyTorch's keeps a
// pool per allocating stream, and reuses what a pool frees only for that pool.
enum AllocatorPool : uint8_t {
  kComputePool,
  // PyTorch FSDP2's all-gather outputs, allocated on its all-gather copy-in stream
  // (all_gather_copy_in in torch/distributed/_composable/fsdp/_fsdp_collectives.py).
  kAllGatherPool,
  // PyTorch FSDP2's reduce-scatter outputs, allocated on its reduce-scatter stream
  // (foreach_reduce), which become the sharded gradients.
  kReduceScatterPool,
};

bool holds_fsdp_root(const Parallelism& p) {
  return per_microbatch_fsdp(p.zero, p.pp) && p.fsdp_gather == FsdpGather::kPerParameter;
}

std::vector<GradientBucket> gradient_buckets(std::span<const BlockParameters> blocks_backward,
                                             int64_t bucket_parameters) {
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  for (const BlockParameters& block : blocks_backward) {
    ++open.blocks;
    open.dense += block.parameters - block.expert;
    open.expert += block.expert;
    if (open.dense + open.expert >= bucket_parameters) {
      buckets.push_back(open);
      open = {.first_block = open.first_block + open.blocks};
    }
  }
  if (open.blocks > 0) buckets.push_back(open);
  return buckets;
}

int64_t step_bucket_parameters(const Training& t, const Parallelism& p, int stage, int chunk) {
  if (p.zero >= 3 && p.pp > 1) return 1;
  if (stage > 0 || chunk > 0 || !t.overlap_grad_reduce) return std::numeric_limits<int64_t>::max();
  return t.bucket_parameters(p);
}

Bytes pipeline_transfer_bytes(const Scenario& s) {
  return Bytes(
      static_cast<double>(s.training.micro_batch * (s.training.seq_len / s.parallelism.cp) /
                          (s.parallelism.sequence_parallel ? s.parallelism.tp : 1)) *
      static_cast<double>(s.model.hidden) * bytes_per_element(s.compute_dtype()));
}

Bytes word_embedding_gradient_bytes(const ModelSpec& model, int tp, double gradient_bytes) {
  return Bytes(static_cast<double>(model.vocab) / tp * static_cast<double>(model.hidden) *
               gradient_bytes);
}

Bytes FsdpGathers::total() const { return std::accumulate(sizes.begin(), sizes.end(), experts); }

FsdpGathers fsdp_gathers(const Scenario& scenario, const LayerGraph& graph) {
  const Parallelism& p = scenario.parallelism;
  const ParameterBytes bytes = parameter_bytes(scenario.training);
  const HeldWeights weights = held_weights(graph);
  FsdpGathers gathers;
  if (p.fsdp_gather != FsdpGather::kTensor) {
    gathers.sizes = {Bytes(bytes.weights_bytes(weights.dense()))};
    if (p.expert_data_ranks() > 1) gathers.experts = Bytes(bytes.weights_bytes(weights.expert()));
    return gathers;
  }
  // Tensor by tensor, each at the block's mean bytes a weight: the tensors do not say which are
  // fp8 GEMM weights (they differ only with fp8 parameters).
  const double weight_bytes =
      graph.parameters > 0 ? bytes.weights_bytes(weights) / static_cast<double>(graph.parameters)
                           : bytes.weight;
  const std::vector<int64_t>& tensors = graph.weight_tensors;
  // DeepSpeed traces the modules in use order: after a tensor's use in the recomputed forward
  // come the later tensors' forward uses, then their backward uses, then its own.
  int64_t used_after = std::accumulate(tensors.begin(), tensors.end(), int64_t{0});
  for (const int64_t elements : tensors) {
    used_after -= elements;
    if (elements <= p.fsdp_persistence_threshold) continue;
    const Bytes size(static_cast<double>(elements) * weight_bytes);
    gathers.sizes.push_back(size);
    if (graph.recomputed_whole && 2 * used_after >= p.fsdp_reuse_distance)
      gathers.regather_sizes.push_back(size);
  }
  return gathers;
}

OptimizerStep optimizer_step(const Training& t, double gradient_bytes, double weight_bytes) {
  const bool adam = t.optimizer == Optimizer::kAdam;
  if (t.optimizer_kernels == OptimizerKernels::kFused) {
    // Reads the gradient, the fp32 master weights and moments, writes them back with the 16-bit
    // working copy.
    const double moments = adam ? 2.0 : 1.0;
    const double master = t.precision == Precision::kFp32 ? 0.0 : 1.0;
    return {gradient_bytes + 2.0 * 4.0 * (master + moments) + weight_bytes, 0.0, false};
  }
  // torch.optim's foreach passes over fp32 weights and states, g the gradient's bytes (Adam,
  // _multi_tensor_adam): decoupled weight decay p *= 1 - lr·wd (8), m.lerp_(grad) (8 + g),
  // v *= beta2 (8), v.addcmul_(grad, grad) (8 + 2g), t = sqrt(v) (8), t /= c (8), t += eps (8),
  // p.addcdiv_(m, t) (16), t a temporary as large as v. SGD with momentum: b *= momentum (8),
  // b += grad (8 + g), p -= lr·b (12).
  // A for-loop (torch.optim's single-tensor implementation, Composer's DecoupledAdamW) makes the
  // same passes tensor by tensor: denom = (v.sqrt() / c).add_(eps) holds two temporaries of
  // one tensor at once.
  const bool for_loop = t.optimizer_kernels == OptimizerKernels::kForLoop;
  if (adam) return {72.0 + 3.0 * gradient_bytes, for_loop ? 8.0 : 4.0, for_loop};
  return {28.0 + gradient_bytes, 0.0, for_loop};
}

namespace {

// The host's time for one Python-level PyTorch op without autograd: about 2 us
// (pytorch/pytorch issue 41383, a PyTorch maintainer: "approx 2 us. Approx half of it is python
// parsing overhead"; the reporter measured 5 us).
constexpr Seconds kPythonOpHostTime = Seconds(2e-6);
// The host's time to enqueue one kernel launch, launches not captured in a graph: about 2.6 us
// (ahrefs/ocannl issue 488).
constexpr Seconds kLaunchHostTime = Seconds(2.6e-6);
// torch.distributed.get_rank(group)'s chain of Python calls and dictionary lookups, beyond an op
// (judgment).
constexpr Seconds kGetRankExtraHostTime = Seconds(1e-6);

// The block and micro-batch of a task that belongs to the step, not to a pass over a block.
constexpr int32_t kStepBlock = -3;
constexpr int32_t kStepMicrobatch = -1;

// Under partial recomputation (training.recompute_layers), the layers of a chunk past the
// recomputed ones keep their activations: kDenseKept and kMoeKept.
enum class BlockKind { kEmbedding, kDense, kMoe, kDenseKept, kMoeKept, kHead };

// A distinct block (embedding, dense layer, MoE layer, either of them keeping its activations
// under partial recompute, head) and its passes, priced once.
struct BlockPlans {
  std::shared_ptr<const LayerGraph> graph;
  uint32_t forward = kNoId;  // indices into the shared plan list
  uint32_t backward = kNoId;
  uint32_t backward_input = kNoId;
  uint32_t backward_weight = kNoId;
  // The bytes each all-gather of its weights moves, and the gathers again for backward; the
  // sum of the first.
  FsdpGathers gathers;
  int64_t gathered_bytes = 0;
  int64_t stored_bytes = 0;  // activations its forward pass keeps for backward
};

// One block occurrence on a stage: which kind and which layer.
struct BlockRef {
  BlockKind kind;
  int32_t block;  // layer index, or -1 embedding, -2 head
};

// Everything shared by the stages of one lowering.
struct Context {
  const Scenario& scenario;
  const RankLayout& layout;
  const OpPricer& pricer;
  const CollectiveModel& collectives;
  std::vector<std::shared_ptr<const TaskPlan>> plans;
  std::map<BlockKind, BlockPlans> blocks;
  std::vector<std::vector<BlockRef>> virtual_stage_blocks;  // by virtual stage
  std::array<uint32_t, kNumGroupKinds> members{};           // simulated ranks per group, by kind
  std::array<bool, kNumGroupKinds> networked{};             // collectives timed by the shared network
  uint16_t pipeline_sms = 0;  // SMs a pipeline send/recv holds: its communicator is one rank a stage
  int64_t microbatches = 0;
  int virtual_stages_total = 1;
  bool zero_bubble = false;
};

BlockPlans plan_block(Context& c, BlockKind kind, LayerGraph graph, const std::string& name) {
  BlockPlans block;
  block.graph = std::make_shared<const LayerGraph>(std::move(graph));
  block.gathers = fsdp_gathers(c.scenario, *block.graph);
  block.gathered_bytes = static_cast<int64_t>(block.gathers.total() / Bytes(1));
  auto add = [&](PassKind pass) {
    c.plans.push_back(std::make_shared<const TaskPlan>(
        plan_pass(*block.graph, pass, c.pricer, pass_plan_name(name, pass))));
    return static_cast<uint32_t>(c.plans.size() - 1);
  };
  block.forward = add(PassKind::kForward);
  for (const TaskTemplate& t : c.plans[block.forward]->tasks) block.stored_bytes += t.alloc_bytes - t.free_bytes;
  if (c.zero_bubble) {
    block.backward_input = add(PassKind::kBackwardInput);
    block.backward_weight = add(PassKind::kBackwardWeight);
  } else {
    block.backward = add(PassKind::kBackward);
  }
  (void)kind;
  return block;
}

// Builds the program of one pipeline stage.
class StageBuilder {
 public:
  StageBuilder(const Context& c, int stage)
      : c_(c), stage_(stage), template_kinds_(c.plans.size()) {
    for (int k = 0; k < kNumStreams; ++k) builder_.add_stream(std::string(to_string(static_cast<StreamKind>(k))));
    for (int k = 0; k < static_cast<int>(GroupKind::kForwardSend); ++k) {
      const auto kind = static_cast<GroupKind>(k);
      sharing_[k] = sharing_nics(c_.layout, c_.collectives.topology(), kind, placement(kind));
    }
    const Parallelism& p = c_.scenario.parallelism;
    blocking_p2p_ =
        p.pp > 1 && p.schedule == Schedule::kOneFOneB && p.virtual_stages == 1 && p.zero <= 2;
    if (c_.scenario.parallelism.pp > 1) {
      links_out_ = pipeline_links_sharing_nics(c_.layout, c_.collectives.topology(), stage_);
      links_in_ =
          pipeline_links_sharing_nics(c_.layout, c_.collectives.topology(), previous_stage());
    }
    for (int chunk = 0; chunk < c_.scenario.parallelism.virtual_stages; ++chunk) {
      for (const BlockRef& block : chunk_blocks(chunk)) {
        if (offloads(block.block)) layer_stored_bytes_[block.block] = plans_of(block).stored_bytes;
      }
    }
    if (holds_fsdp_root(c_.scenario.parallelism)) {
      const BlockPlans& embedding = c_.blocks.at(BlockKind::kEmbedding);
      const BlockPlans& head = c_.blocks.at(BlockKind::kHead);
      root_.gathers.experts = embedding.gathers.experts + head.gathers.experts;
      root_.gathers.sizes = {embedding.gathers.total() + head.gathers.total() -
                             root_.gathers.experts};
      root_.parameters = {embedding.graph->parameters + head.graph->parameters,
                          embedding.graph->expert_parameters + head.graph->expert_parameters};
      holds_root_ = true;
    }
  }

  StageProgram build();

 private:
  struct Instance {
    std::vector<TaskId> exits;
    std::vector<TaskId> tasks;    // by template
    TaskId last_compute = kNoId;  // last compute-stream task
  };
  // A plan instance added task by task, so that two passes can interleave.
  struct Emission {
    uint32_t plan_index = 0;
    BlockRef block;
    int microbatch = 0;
    std::vector<TaskId> entry;
    const std::vector<TaskId>* other_pass = nullptr;
    std::vector<TaskId>* op_tasks = nullptr;
    int64_t free_at_exit = 0;
    Instance instance;
  };

  // A task outside any plan: pipeline transfers, step-level collectives, the optimizer.
  struct LoneTask {
    StreamKind stream = StreamKind::kData;
    Seconds duration;
    ActivityTag tag = ActivityTag::kDataComm;
    std::string_view name;
    std::vector<TaskId> deps;
    GroupKind group = GroupKind::kData;
    bool synchronized = false;  // a rendezvous of `group` (when it has more than one member)
    uint32_t sequence = 0;
    Collective collective = Collective::kNone;  // what a communication task runs
    uint16_t sms = 0;                           // the SMs its kernel holds (Task::sms)
    Bytes size;
    int64_t alloc_bytes = 0;
    int64_t free_bytes = 0;
    int64_t transient_bytes = 0;
    AllocatorPool alloc_pool = kComputePool;      // of alloc_bytes
    AllocatorPool free_pool = kComputePool;       // of free_bytes
    int32_t block = kStepBlock;
    int32_t microbatch = kStepMicrobatch;
  };

  TaskId add(const LoneTask& spec) {
    Task task;
    task.stream = static_cast<StreamId>(spec.stream);
    task.duration = to_sim_time(spec.duration, spec.name);
    task.alloc_at_start_bytes = spec.alloc_bytes;
    task.free_at_end_bytes = spec.free_bytes;
    task.transient_bytes = spec.transient_bytes;
    task.alloc_pool = spec.alloc_pool;
    task.free_pool = spec.free_pool;
    task.tag = static_cast<uint8_t>(spec.tag);
    task.sms = spec.sms;
    task.label = static_cast<uint32_t>(labels_.size());
    const uint32_t members = c_.members[static_cast<int>(spec.group)];
    if (spec.synchronized) {
      if (members > 1) task.sync = builder_.add_sync({static_cast<uint32_t>(spec.group), spec.sequence, members});
      task.external = c_.networked[static_cast<int>(spec.group)] && spec.collective != Collective::kNone;
    }
    const TaskId id = builder_.add_task(task);
    labels_.push_back(
        TaskLabel{kNoId, static_cast<uint32_t>(lone_names_.size()), spec.block, spec.microbatch});
    lone_comms_.push_back(TaskComm{spec.collective, spec.group, spec.size});
    auto name = name_index_.find(spec.name);
    if (name == name_index_.end()) {
      const auto index = static_cast<uint32_t>(names_.size());
      name = name_index_.emplace(std::string(spec.name), index).first;
      names_.emplace_back(spec.name);
    }
    lone_names_.push_back(name->second);
    for (const TaskId d : spec.deps) {
      if (d != kNoId) builder_.add_dependency(d, id);
    }
    return id;
  }

  // Where a step collective's bytes live while it runs: in the buffers it reduces or gathers
  // into (Megatron-LM's gradient and parameter buffers: its reduce-scatters, all-reduces and
  // all-gathers run in place), or in a copy staged for it and freed as it ends (a flattened
  // bucket, an FSDP block's unsharded gradients, a gathered flat buffer).
  enum class Operand { kInPlace, kStaged };

  // A collective of the whole step (not of a block) over `group`, on the data stream.
  TaskId step_collective(Collective kind, Bytes size, GroupKind group, std::string_view name,
                         std::vector<TaskId> deps, Operand operand) {
    LoneTask spec;
    spec.duration = collective_time(kind, size, group);
    spec.sms = c_.collectives.kernel_sms(kind, placement(group));
    spec.name = name;
    spec.deps = std::move(deps);
    spec.group = group;
    spec.synchronized = true;
    spec.sequence = next_sequence(group);
    spec.collective = kind;
    spec.size = size;
    // A group of one runs no collective and stages nothing.
    if (operand == Operand::kStaged && placement(group).size() > 1)
      spec.transient_bytes = static_cast<int64_t>(size / Bytes(1));
    return add(spec);
  }

  // ZeRO-2 and ZeRO-3 without pipelining reduce gradients after every micro-batch's backward, each
  // block's as its backward ends; FSDP2 with pipelining once a chunk's last backward is done
  // (reduce_chunk_gradients). A reduce-scatter of each block's gradients leaves each rank its
  // shard (PyTorch FSDP). An all-reduce (DeepSpeed's ZeRO-3 without contiguous gradients) moves
  // twice the bytes and leaves every rank the whole sum, of which it keeps its shard. DeepSpeed
  // fills a bucket of `grad_bucket_parameters` elements with the gradients in the order they are
  // ready (its reduce_bucket_size), reducing the bucket before a gradient that would overflow it
  // and at the end of the backward pass; each bucket here starts once the block holding its last
  // gradient has finished its backward. Without overlap_grad_reduce each reduction is waited for
  // before the next block's pass (DeepSpeed's overlap_comm: false runs it on the compute stream).
  // In the root unit the head's gradients wait for the embedding's and go with them. Returns the
  // last task it queued on the compute stream (FSDP2's copy in), or `backward_done`.
  TaskId reduce_block_gradients(const BlockRef& block, int microbatch, TaskId backward_done) {
    const Parallelism& p = c_.scenario.parallelism;
    if (p.fsdp_gradient_reduce == FsdpGradientReduce::kReduceScatter) {
      if (in_root(block) && block.kind == BlockKind::kHead) {
        keep_root_gradients(block, microbatch, backward_done);
        return backward_done;
      }
      const BlockParameters reduced = reduced_parameters(block);
      // Experts are sharded over their own data-parallel group (torchtitan shards them with an
      // FSDP of their own over it), where their gradients are reduce-scattered; with none, a
      // rank holds the only copy of its experts.
      const bool experts_apart = reduced.expert > 0 && p.expert_data_ranks() > 1;
      const bool after_chunk_backward = reduces_after_chunk_backward();
      const ParameterBytes bytes = parameter_bytes(c_.scenario.training);
      if (fsdp() && p.fsdp_gather == FsdpGather::kPerParameter) {
        // The copy of the root's gradients frees the head's kept so far.
        const int64_t kept = in_root(block) ? std::exchange(root_.kept_gradient_bytes, 0) : 0;
        backward_done = copy_in_gradients(block, microbatch, backward_done, reduced, experts_apart,
                                          bytes.weight, /*frees_read=*/false, kept);
      } else if (after_chunk_backward) {
        // The copy reads the gradients accumulated over the micro-batches in the reduce dtype, and
        // frees them; the hook has resharded the weights gathered for the step just before.
        backward_done =
            copy_in_gradients(block, microbatch, backward_done, reduced, experts_apart,
                              bytes.gradient, /*frees_read=*/true, plans_of(block).gathered_bytes);
      }
      // Nothing waits for FSDP2's step reductions but its next copy in and the step.
      const auto waited = [&](TaskId reduction_task) {
        return after_chunk_backward ? reduction_task : reduction(reduction_task);
      };
      const Bytes dense = gradient_bytes(reduced.parameters - reduced.expert);
      const TaskId scattered = waited(
          step_collective(Collective::kReduceScatter, dense, GroupKind::kDataShard,
                          "fsdp.gradient_reduce_scatter", {backward_done}, Operand::kStaged));
      // Without pipelining each block's micro-batches are reduced in their order; with it, the
      // step's one reduction brings the sharded gradients into being.
      const bool first_reduction = microbatch == 0 || after_chunk_backward;
      if (first_reduction)
        keep_gradient_shards(scattered, dense / static_cast<double>(p.zero_shard));
      last_block_scatter_ = scattered;
      // HSDP: the shard is all-reduced across the replicas right after (PyTorch FSDP's
      // post-backward hook), beside the rest of the backward.
      if (p.hybrid_sharded()) {
        waited(step_collective(Collective::kAllReduce, dense / static_cast<double>(p.zero_shard),
                               GroupKind::kDataReplica, "fsdp.replica_all_reduce", {scattered},
                               Operand::kInPlace));
      }
      if (experts_apart) {
        last_block_scatter_ = waited(step_collective(
            Collective::kReduceScatter, gradient_bytes(reduced.expert), GroupKind::kExpertData,
            "fsdp.expert_gradient_reduce_scatter", {backward_done}, Operand::kStaged));
        if (first_reduction) {
          keep_gradient_shards(last_block_scatter_, gradient_bytes(reduced.expert) /
                                                        static_cast<double>(p.expert_data_ranks()));
        }
      }
      return backward_done;
    }
    const std::vector<int64_t>& tensors = plans_of(block).graph->weight_tensors;
    for (auto tensor = tensors.rbegin(); tensor != tensors.rend(); ++tensor) {
      if (gradient_bucket_elements_ + *tensor >
          c_.scenario.training.bucket_parameters(c_.scenario.parallelism)) {
        reduce_gradient_bucket();
      }
      gradient_bucket_elements_ += *tensor;
      gradient_bucket_ready_ = backward_done;
    }
    return backward_done;
  }

  // PyTorch's pipelining runs FSDP2's post-backward hooks without gradient sync after each
  // micro-batch's backward (accumulating the unsharded gradients), then runs them again by hand,
  // with it, once a model chunk's backward of its last micro-batch is done, ahead of sending that
  // backward's input gradient on (PipelineStage.backward_maybe_with_nosync from PyTorch 2.5,
  // pytorch/pytorch PR 134052; PR 165106 of October 2025 moves these reductions to the end of the
  // step, which paceline does not model). Each block's hook copies its gradients into its
  // reduce-scatter's input on the compute stream once the reduce-scatter before has ended
  // (FSDPParamGroup.post_backward), so the compute stream, and the send queued behind it, wait for
  // all but the last of the chunk's reduce-scatters. Under zero-bubble the hooks follow the last
  // W pass, which sends nothing.
  bool reduces_after_chunk_backward() const {
    const Parallelism& p = c_.scenario.parallelism;
    return p.zero >= 3 && p.pp > 1 && p.fsdp_gather == FsdpGather::kPerParameter &&
           p.fsdp_gradient_reduce == FsdpGradientReduce::kReduceScatter;
  }
  // Whether the backward of `microbatch` over `chunk` completes the chunk's gradients.
  bool completes_chunk_gradients(int chunk, int microbatch) const {
    return reduces_after_chunk_backward() && microbatch == last_backward_microbatch_.at(chunk);
  }
  // The post-backward hooks of `chunk`'s blocks, in the order FSDP2 keeps its states: the chunk's
  // module's own weights (its embedding or head) first, then its layers (named_modules order).
  // Returns the last copy in.
  TaskId reduce_chunk_gradients(int chunk, int microbatch) {
    std::vector<BlockRef> blocks = chunk_blocks(chunk);
    std::stable_partition(blocks.begin(), blocks.end(), [](const BlockRef& b) {
      return b.kind == BlockKind::kEmbedding || b.kind == BlockKind::kHead;
    });
    // Each chunk's module is a root of its own, with its own reduce-scatter state.
    last_block_scatter_ = kNoId;
    TaskId copied = last_compute_;
    for (const BlockRef& block : blocks) copied = reduce_block_gradients(block, microbatch, copied);
    return copied;
  }

  // Under PyTorch FSDP2 a block's first reduce-scatter of the step allocates its sharded
  // gradients, `shard` bytes of the reduce-scatter pool (StaticMemory's
  // reduce_scattered_gradient_bytes): later micro-batches add theirs into them.
  void keep_gradient_shards(TaskId scatter, Bytes shard) {
    if (c_.scenario.parallelism.fsdp_gather != FsdpGather::kPerParameter) return;
    builder_.set_alloc(scatter, static_cast<int64_t>(shard / Bytes(1)), kReduceScatterPool);
  }

  // PyTorch FSDP2 copies a block's gradients, as autograd left them in the weights' dtype, into
  // its reduce-scatters' inputs in the gradient dtype (torch._chunk_cat, one kernel each: the
  // dense weights', and the experts' where `experts_apart` gives them their own) on the
  // compute stream, once the reduce-scatter issued before it has ended, which bounds the
  // gradients in flight (foreach_reduce in torch/distributed/_composable/fsdp/_fsdp_collectives.py
  // and FSDPParamGroup.post_backward, from PyTorch 2.5: pytorch/pytorch PR 129721 moved the copy
  // off the reduce-scatter stream). `read_bytes`: a gradient element's, as the copy reads it.
  // Returns the copy, which the reduce-scatters wait for; it frees `freed_bytes` as it ends, and
  // with `frees_read` the gradients it read.
  TaskId copy_in_gradients(const BlockRef& block, int microbatch, TaskId backward_done,
                           const BlockParameters& reduced, bool experts_apart, double read_bytes,
                           bool frees_read, int64_t freed_bytes) {
    const ParameterBytes bytes = parameter_bytes(c_.scenario.training);
    const auto elements = static_cast<double>(experts_apart ? reduced.parameters
                                                            : reduced.parameters - reduced.expert);
    std::vector<TaskId> deps = {backward_done};
    if (last_block_scatter_ != kNoId) deps.push_back(last_block_scatter_);
    LoneTask copy = compute_stream_copy(block, microbatch, "fsdp.gradient_copy_in",
                                        Bytes(elements * (read_bytes + bytes.gradient)),
                                        experts_apart ? 2 : 1, std::move(deps));
    copy.transient_bytes = static_cast<int64_t>(elements * bytes.gradient);
    copy.free_bytes = freed_bytes + (frees_read ? static_cast<int64_t>(elements * read_bytes) : 0);
    return add(copy);
  }

  // The head's gradients (its final norm's, output layer's and any prediction modules'), in the
  // weights' dtype as autograd leaves them, held from its backward until the root's gradients
  // are copied in after the embedding's backward: FSDP2 runs the root's post-backward in its
  // final backward callback, the root's forward inputs (token ids) having no gradient to hook
  // (FSDPState._root_post_backward_final_callback). A head that reads the word embedding (tied,
  // or prediction modules' lookups) leaves its gradient of the table with autograd until the
  // embedding's backward adds its own.
  void keep_root_gradients(const BlockRef& head, int microbatch, TaskId backward_done) {
    PACELINE_CHECK(root_.kept_gradient_bytes == 0,
                   "the head's gradients kept twice before the root's copy in");
    LoneTask kept;
    kept.stream = StreamKind::kCompute;
    kept.tag = ActivityTag::kCompute;
    kept.name = "fsdp.root_gradients_kept";
    kept.deps = {backward_done};
    const double weight_bytes = parameter_bytes(c_.scenario.training).weight;
    Bytes kept_bytes(static_cast<double>(plans_of(head).graph->parameters) * weight_bytes);
    if (head_copies_word_embedding(c_.scenario.model))
      kept_bytes += word_embedding_gradient_bytes(c_.scenario.model, c_.scenario.parallelism.tp,
                                                  weight_bytes);
    kept.alloc_bytes = static_cast<int64_t>(kept_bytes / Bytes(1));
    kept.block = head.block;
    kept.microbatch = microbatch;
    add(kept);
    root_.kept_gradient_bytes = kept.alloc_bytes;
  }

  // All-reduces the gradients gathered in the bucket, if any.
  void reduce_gradient_bucket() {
    if (gradient_bucket_elements_ == 0) return;
    reduction(step_collective(Collective::kAllReduce, gradient_bytes(gradient_bucket_elements_),
                              GroupKind::kDataShard, "fsdp.gradient_all_reduce",
                              {gradient_bucket_ready_}, Operand::kStaged));
    gradient_bucket_elements_ = 0;
  }

  // A per-micro-batch gradient reduction; without overlap_grad_reduce the next block pass waits
  // for it (waited_reductions_).
  TaskId reduction(TaskId task) {
    if (!c_.scenario.training.overlap_grad_reduce) waited_reductions_.push_back(task);
    return task;
  }
  // The entry dependencies of a block pass: `entry`, and the reductions it must wait for.
  std::vector<TaskId> after_waited_reductions(std::vector<TaskId> entry) {
    entry.insert(entry.end(), waited_reductions_.begin(), waited_reductions_.end());
    waited_reductions_.clear();
    return entry;
  }

  // The bytes of `elements` gradients in the training's gradient dtype.
  Bytes gradient_bytes(int64_t elements) const {
    return Bytes(static_cast<double>(elements) * parameter_bytes(c_.scenario.training).gradient);
  }

  uint32_t next_sequence(GroupKind group) { return sequence_[static_cast<int>(group)]++; }

  Instance instantiate(uint32_t plan_index, const BlockRef& block, int microbatch, const std::vector<TaskId>& entry,
                       const std::vector<TaskId>* other_pass, std::vector<TaskId>* op_tasks, int64_t free_at_exit) {
    return instantiate(Emission{plan_index, block, microbatch, entry, other_pass, op_tasks, free_at_exit, {}});
  }
  Instance instantiate(Emission e) {
    while (!emitted_all(e)) emit_task(e);
    return end_instance(e);
  }
  bool emitted_all(const Emission& e) const { return e.instance.tasks.size() == c_.plans[e.plan_index]->tasks.size(); }
  // Adds the next task of `e`'s plan; returns its stream.
  StreamKind emit_task(Emission& e);
  Instance end_instance(Emission& e);
  std::vector<BlockRef> chunk_blocks(int chunk) const {
    return c_.virtual_stage_blocks[chunk * c_.scenario.parallelism.pp + stage_];
  }
  const BlockPlans& plans_of(const BlockRef& b) const { return c_.blocks.at(b.kind); }
  // The weights this rank holds of all its blocks.
  HeldWeights stage_weights() const {
    HeldWeights weights;
    for (int chunk = 0; chunk < c_.scenario.parallelism.virtual_stages; ++chunk) {
      for (const BlockRef& block : chunk_blocks(chunk))
        weights += held_weights(*plans_of(block).graph);
    }
    return weights;
  }
  int virtual_stage(int chunk) const { return chunk * c_.scenario.parallelism.pp + stage_; }
  int previous_stage() const { return (stage_ + c_.scenario.parallelism.pp - 1) % c_.scenario.parallelism.pp; }

  // A pipeline send or receive of one micro-batch's activation (forward) or its gradient
  // (backward) over the link from `link_stage` to the stage after it; `vs` is the virtual stage
  // the transfer belongs to, matching the two ends' rendezvous.
  TaskId pipeline_transfer(StreamKind stream, GroupKind group, const char* name, int link_stage, int microbatch, int vs,
                           std::vector<TaskId> deps) {
    const Bytes activation = pipeline_transfer_bytes(c_.scenario);
    LoneTask transfer;
    transfer.stream = stream;
    transfer.duration = c_.collectives.time(Collective::kSendRecv, activation,
                                            link_stage == stage_ ? links_out_ : links_in_);
    transfer.tag = ActivityTag::kPipelineComm;
    transfer.name = name;
    transfer.deps = std::move(deps);
    transfer.group = group;
    transfer.collective = Collective::kSendRecv;
    transfer.sms = c_.pipeline_sms;
    transfer.size = activation;
    transfer.synchronized = true;
    transfer.sequence = static_cast<uint32_t>(microbatch * c_.virtual_stages_total + vs);
    transfer.transient_bytes = static_cast<int64_t>(activation / Bytes(1));
    transfer.microbatch = microbatch;
    return add(transfer);
  }

  // All-gathers weights updated in shards: the dense over the data-parallel shard group, the
  // experts' over the ranks holding the same experts (the last of them is returned).
  TaskId gather_updated_weights(const HeldWeights& weights, std::vector<TaskId> deps);
  void forward(int microbatch, int chunk);
  void backward(int microbatch, int chunk, PipelineAction::Kind kind);
  void forward_backward(const PipelineAction& forward_action, const PipelineAction& backward_action);
  void weight(int microbatch, int chunk);
  void step();

  // ZeRO-3 / FSDP: without pipelining, every micro-batch gathers a block's weights before its
  // forward and backward passes and reduce-scatters its gradients after (PyTorch FSDP's
  // reshard-after-forward). With pipelining the weights are gathered once per step and the
  // gradients reduced after the last micro-batch (torchtitan's policy for FSDP with PP: no
  // reshard after forward, gradient sync on the last micro-batch only).
  bool fsdp() const { return per_microbatch_fsdp(c_.scenario.parallelism.zero, c_.scenario.parallelism.pp); }
  bool per_microbatch_reduce() const { return c_.scenario.parallelism.reduces_gradients_per_microbatch(); }
  // Whether block `b` is in FSDP2's root unit (holds_fsdp_root).
  bool in_root(const BlockRef& b) const {
    return holds_root_ && (b.kind == BlockKind::kEmbedding || b.kind == BlockKind::kHead);
  }
  // The gathers of block `b`'s weights; in the root unit, the root's.
  const FsdpGathers& gathers_of(const BlockRef& b) const {
    return in_root(b) ? root_.gathers : plans_of(b).gathers;
  }
  // The gathered bytes a backward pass over block `b` frees: in the root unit, the root's after
  // the embedding's backward, none after the head's.
  int64_t freed_after_backward(const BlockRef& b) const {
    if (!in_root(b)) return plans_of(b).gathered_bytes;
    return b.kind == BlockKind::kEmbedding ? static_cast<int64_t>(root_.gathers.total() / Bytes(1))
                                           : 0;
  }
  // The parameters whose gradients are reduced after block `b`'s backward.
  BlockParameters reduced_parameters(const BlockRef& b) const {
    if (in_root(b)) return root_.parameters;
    const LayerGraph& graph = *plans_of(b).graph;
    return {graph.parameters, graph.expert_parameters};
  }
  // All-gathers of `sizes` over the shard group for a pass over block `b`, the first after
  // `after`, each after the one before (DeepSpeed synchronized the GPU before each), then of
  // `experts` over the expert-data group; returns the last. `held`: the gathered weights stay
  // until the pass over the block ends, else they take the place of ones freed.
  TaskId gather_weights(const BlockRef& b, int microbatch, TaskId after, const std::string& name,
                        const std::vector<Bytes>& sizes, Bytes experts, bool held);
  // fsdp_gather: tensor gathers as DeepSpeed did in 2021: torch.distributed.all_gather into a
  // list of one view per rank of a zero-filled buffer, which PyTorch's NCCL process group then
  // ran as a gather into a new flat buffer followed by one copy per list entry on its stream.
  // Host work of `duration` after `after` that nothing is queued on the GPU beside (a Python loop
  // after a synchronization), as task `name` of `block`; returns it.
  TaskId host_loop(int32_t block, int microbatch, TaskId after, Seconds duration,
                   const std::string& name);
  // The copies after `gather` of `size` bytes over `ranks`, as task `name`; returns it.
  TaskId copy_out_gather(int32_t block, int microbatch, TaskId gather, Bytes size, int ranks,
                         const std::string& name);
  // fsdp_gather: tensor: the step's gather of the tensors kept whole, after `after`.
  void gather_persistent_weights(TaskId after);
  // One pass's FSDP gathers and block exits, in the pass's block order.
  struct FsdpPass {
    explicit FsdpPass(size_t blocks) : gathers(blocks, kNoId), exits(blocks, kNoId) {}
    std::vector<TaskId> gathers;
    std::vector<TaskId> exits;
  };
  // One pass through a model chunk, a block at a time: forward in block order, backward in
  // reverse, each between its pipeline transfers.
  struct PassRun {
    int microbatch;
    int chunk;
    int vs;
    bool input_only;  // zero-bubble's input-gradient pass
    std::vector<BlockRef> blocks;  // in the pass's order
    std::vector<TaskId> carried;   // the activation or gradient the next block waits for
    FsdpPass fsdp;
    size_t next = 0;               // the next block
    bool done() const { return next == blocks.size(); }
  };
  PassRun start_run(int microbatch, int chunk, bool reversed, bool input_only);
  // Whether the pass `run` makes over block `b` is the block's last of the micro-batch, which
  // frees its gathered weights: a whole backward, or a zero-bubble B pass over a block whose W
  // pass has nothing to run (the embedding's: its lookup's gradient comes with the B pass). Its
  // gradients are handed on in the W passes' order all the same.
  bool ends_block(const PassRun& run, const BlockRef& b) const {
    return !run.input_only || weight_pass_empty(b);
  }
  // Whether block `b`'s zero-bubble W pass has nothing to run.
  bool weight_pass_empty(const BlockRef& b) const {
    return c_.plans[plans_of(b).backward_weight]->tasks.empty();
  }
  // The block just emitted: its exits carry on to the next.
  void advance(PassRun& run, const Instance& instance);
  PassRun start_forward(int microbatch, int chunk);
  Emission forward_block(PassRun& run);
  void end_forward_block(PassRun& run, const Instance& instance);
  void end_forward(const PassRun& run);
  PassRun start_backward(int microbatch, int chunk, PipelineAction::Kind kind);
  Emission backward_block(PassRun& run);
  void end_backward_block(PassRun& run, const Instance& instance);
  void end_backward(PassRun& run);
  // PyTorch FSDP2 gathers a block's weights into a staging buffer of the all-gather pool, which
  // the compute stream copies out into each weight's own tensor as the block starts
  // (torch.split_with_sizes_copy, one kernel per all-gather, reading and writing the gathered
  // bytes), allocated then in the compute pool (foreach_all_gather_copy_out in
  // torch/distributed/_composable/fsdp/_fsdp_collectives.py). The copy frees the staging buffers
  // copied out before it; in a backward pass, its own too. A forward keeps its own until the next
  // copy, so that the next gather can overlap it (FSDPParamGroup.wait_for_unshard's
  // all_gather_state). Returns the copy, or `gathered` under other gathers.
  TaskId copy_out_weights(const BlockRef& b, int microbatch, TaskId gathered, const char* name,
                          bool forward);
  // After `freed`, the embedding's last pass of a micro-batch, which frees the root unit's
  // weights: the next pass over the root gathers them again, once it has run.
  void release_root_after(const BlockRef& b, TaskId freed) {
    if (!in_root(b) || b.kind != BlockKind::kEmbedding) return;
    root_.gathered = root_.copied_out = kNoId;
    root_.released = freed;
  }
  // The root unit's weights for a pass over block `b`: copied out of `gathered` once a gather.
  TaskId root_weights(const BlockRef& b, int microbatch, TaskId gathered, const char* name,
                      bool forward) {
    if (root_.copied_out == kNoId)
      root_.copied_out = copy_out_weights(b, microbatch, gathered, name, forward);
    return root_.copied_out;
  }
  // A copy kernel (`kernels` of them) of block `b` on the compute stream moving `moved` bytes,
  // after `deps`; the caller sets what it allocates and frees, and adds it.
  LoneTask compute_stream_copy(const BlockRef& b, int microbatch, std::string_view name,
                               Bytes moved, int kernels, std::vector<TaskId> deps) const;
  // The gather block `i` of a pass waits for. With `fsdp_prefetch` = a, the gather of block
  // i + a is issued as block i starts and runs once block i - 1 has freed its weights: at most
  // a + 1 blocks are gathered at once (PyTorch FSDP's forward and backward prefetch: a = 1).
  // Under zero-bubble a B pass frees nothing where the W pass does (ends_block), so there it only
  // orders them.
  TaskId prefetched_gather(FsdpPass& fsdp_pass, const std::vector<BlockRef>& blocks, size_t i, int microbatch,
                           const char* pass);

  // Activation offload (training.activation_offload_layers = n of L layers, pipeline-free), as
  // Transformer Engine's CPU offload schedules it: after layer i < n's forward its activations
  // are copied to host memory on a copy stream, and the forward of layer L - n + i waits for
  // that copy before the GPU copy is freed; the copy back starts once the backward of layer
  // L - n + i is done, allocating its memory then, and the backward of layer i waits for it.
  bool offloads(int32_t layer) const { return layer >= 0 && layer < c_.scenario.training.activation_offload_layers; }
  // The offloaded layer `lag` layers before the last n ones' place in `layer`'s: the one whose
  // offload the forward of `layer` waits for (lag 0), the one whose copy back starts as the
  // backward of `layer` starts (lag 1); -1 if none.
  int32_t offloaded_layer(int32_t layer, int lag) const;
  // A copy of `layer`'s activations between GPU and host memory, after `after`.
  TaskId host_copy(int32_t layer, int microbatch, const char* name, TaskId after, int64_t alloc_bytes);

  // The stage's group of `kind` (RankLayout::placement), for the collectives of the whole step.
  const std::vector<int>& placement(GroupKind kind) const { return c_.pricer.placement(kind, stage_); }
  // The time of a collective over it, run at once by the groups sharing its NICs.
  Seconds collective_time(Collective collective, Bytes size, GroupKind kind) const {
    return c_.collectives.time(collective, size, sharing_[static_cast<int>(kind)]);
  }

  const Context& c_;
  int stage_;
  std::array<std::vector<std::vector<int>>, kNumGroupKinds> sharing_;  // sharing_nics of each
  // The pipeline links to the next stage and from the previous one, with the links sharing their
  // NICs (pipeline_links_sharing_nics).
  std::vector<std::vector<int>> links_out_;
  std::vector<std::vector<int>> links_in_;
  ProgramBuilder builder_;
  std::vector<std::vector<uint32_t>> template_kinds_;  // by plan, then template: its kind, or kNoId
  std::vector<TaskLabel> labels_;
  std::vector<TaskComm> lone_comms_;
  std::vector<std::string> names_;
  std::vector<uint32_t> lone_names_;
  std::map<std::string, uint32_t, std::less<>> name_index_;  // names_ → index
  std::array<uint32_t, kNumGroupKinds> sequence_{};
  Flop executed_;
  Flop recomputed_;
  // The last finished pass per (chunk, block): gradient ready for the data-parallel reduction.
  std::map<std::pair<int, int32_t>, TaskId> last_backward_;
  // Zero-bubble: op → task of each (microbatch, chunk, block) input-gradient pass, for its W pass.
  std::map<std::tuple<int, int, int32_t>, std::vector<TaskId>> backward_ops_;
  std::map<int32_t, TaskId> start_gathers_;  // ZeRO-1/2 with overlapped parameter gather
  TaskId last_compute_ = kNoId;
  // Megatron-LM's non-interleaved schedule waits for each call's pipeline transfers where it
  // issues them, then synchronizes the device (p2p_communication._communicate: req.wait(), and
  // torch.cuda.synchronize() under batch_p2p_sync), so the host issues the next call, and the
  // pass after it, once they are done. Where the schedule turns from forward to backward or back
  // (its steady state's send_forward_recv_backward, send_backward_recv_forward) a pass's send and
  // the next pass's receive are one batched call, issued together; in warm-up and cool-down each
  // is a call of its own. The other schedules (PyTorch's pipelining, Megatron-LM's interleaved
  // one with overlap_p2p_comm) leave transfers to their streams.
  bool blocking_p2p_ = false;
  TaskId open_send_ = kNoId;                 // the last pass's send, its call still open
  bool open_send_forward_ = false;           // ... sent by a forward pass
  std::vector<TaskId> open_send_issued_at_;  // ... issued after these
  // Under blocking_p2p_: what the receive of a pass (`forward` or not) is issued after.
  std::vector<TaskId> receive_issued_after(bool forward) const;
  // Under blocking_p2p_: the pass of `run` starts once the open call is done.
  void close_call(PassRun& run);
  // ZeRO-3 all-reduced gradients waiting in the bucket, and the task after which the last is ready.
  int64_t gradient_bucket_elements_ = 0;
  TaskId gradient_bucket_ready_ = kNoId;
  std::vector<TaskId> waited_reductions_;  // reductions the next block pass waits for
  TaskId last_block_scatter_ = kNoId;      // the last reduce-scatter of a block's gradients
  // Under reduces_after_chunk_backward: by chunk, the micro-batch whose backward completes its
  // gradients.
  std::vector<int> last_backward_microbatch_;
  // PyTorch FSDP2 with pipelining: each block's step gather, in the order of the blocks' first
  // forwards, not yet copied out.
  std::deque<std::pair<int32_t, TaskId>> staged_gathers_;
  // FSDP2 with pipelining unshards a block as its first forward starts, the next block's gather
  // issued then (its implicit forward prefetch), and keeps the weights for the step: copies out
  // the front of staged_gathers_ (`block`'s) and lets the next gather start once this copy has.
  // Returns the copy.
  TaskId copy_out_staged_gather(const BlockRef& block, int microbatch) {
    const TaskId gathered = staged_gathers_.front().second;
    staged_gathers_.pop_front();
    const TaskId copy = copy_out_weights(block, microbatch, gathered,
                                         "fsdp.forward_weight_copy_out", /*forward=*/true);
    if (!staged_gathers_.empty()) builder_.add_dependency(copy, staged_gathers_.front().second);
    return copy;
  }
  // FSDP2's root unit (holds_fsdp_root): the embedding's and the head's weights gathered
  // together and their parameters. A gather and the copy out of it serve every pass until an
  // embedding's backward frees them (under gpipe every forward runs before the first backward);
  // the next gather waits for that pass. The head's gradients are kept until the root's copy in.
  struct RootUnit {
    FsdpGathers gathers;
    BlockParameters parameters;
    TaskId gathered = kNoId;
    TaskId copied_out = kNoId;
    TaskId released = kNoId;
    int64_t kept_gradient_bytes = 0;
  };
  bool holds_root_ = false;
  RootUnit root_;
  // FSDP2's staging buffers copied out and not yet freed (copy_out_weights).
  int64_t copied_staging_bytes_ = 0;
  // Activation offload: the copies to host and back of each (micro-batch, layer).
  std::map<std::pair<int, int32_t>, TaskId> offloaded_;
  std::map<std::pair<int, int32_t>, TaskId> reloaded_;
  std::map<int32_t, int64_t> layer_stored_bytes_;  // of each offloaded layer
};

StreamKind StageBuilder::emit_task(Emission& e) {
  const TaskPlan& plan = *c_.plans[e.plan_index];
  const uint32_t i = static_cast<uint32_t>(e.instance.tasks.size());
  if (i == 0) e.instance.tasks.reserve(plan.tasks.size());
  const TaskTemplate& t = plan.tasks[i];
  // A template's kind is the same in every instance, save for the bytes the last compute task
  // frees on exit: interned once per template.
  const int64_t freed_on_exit = i == plan.last_compute ? e.free_at_exit : 0;
  std::vector<uint32_t>& kinds = template_kinds_[e.plan_index];
  if (kinds.empty()) kinds.assign(plan.tasks.size(), kNoId);
  uint32_t kind = freed_on_exit == 0 ? kinds[i] : kNoId;
  if (kind == kNoId) {
    Task task;
    task.stream = static_cast<StreamId>(t.stream);
    task.duration = t.duration;
    task.persistent_duration = t.persistent_duration;
    task.alloc_at_start_bytes = t.alloc_bytes;
    task.free_at_end_bytes = t.free_bytes + freed_on_exit;
    task.transient_bytes = t.transient_bytes;
    task.stranded_bytes = t.stranded_bytes;
    task.tag = static_cast<uint8_t>(t.tag);
    task.sms = t.sms;
    if (t.stream != StreamKind::kCompute) task.external = c_.networked[static_cast<int>(t.group)];
    kind = builder_.add_kind(task);
    if (freed_on_exit == 0) kinds[i] = kind;
  }
  SyncId sync = kNoId;
  if (t.stream != StreamKind::kCompute) {
    const uint32_t members = c_.members[static_cast<int>(t.group)];
    const uint32_t sequence = next_sequence(t.group);
    if (members > 1) sync = builder_.add_sync({static_cast<uint32_t>(t.group), sequence, members});
  }
  const TaskId id = builder_.add_task_of_kind(kind, sync, static_cast<uint32_t>(labels_.size()));
  labels_.push_back(TaskLabel{e.plan_index, i, e.block.block, e.microbatch});
  for (const uint32_t d : t.deps) builder_.add_dependency(e.instance.tasks[d], id);
  if (t.entry) {
    for (const TaskId entry : e.entry) {
      if (entry != kNoId) builder_.add_dependency(entry, id);
    }
  }
  for (const OpId op : t.external_deps) {
    PACELINE_CHECK(e.other_pass != nullptr && (*e.other_pass)[op] != kNoId, "weight pass without its input pass");
    builder_.add_dependency((*e.other_pass)[op], id);
  }
  if (t.exit) e.instance.exits.push_back(id);
  if (t.stream == StreamKind::kCompute) e.instance.last_compute = id;
  e.instance.tasks.push_back(id);
  return t.stream;
}

StageBuilder::Instance StageBuilder::end_instance(Emission& e) {
  const TaskPlan& plan = *c_.plans[e.plan_index];
  Instance& instance = e.instance;
  if (instance.exits.empty() && instance.last_compute != kNoId) instance.exits.push_back(instance.last_compute);
  if (e.op_tasks) {
    e.op_tasks->assign(plan.op_task.size(), kNoId);
    for (size_t op = 0; op < plan.op_task.size(); ++op) {
      if (plan.op_task[op] != kNoId) (*e.op_tasks)[op] = instance.tasks[plan.op_task[op]];
    }
  }
  executed_ += plan.flop;
  for (const TaskTemplate& t : plan.tasks) {
    if (t.tag == ActivityTag::kRecompute) recomputed_ += t.flop;
  }
  if (instance.last_compute != kNoId) last_compute_ = instance.last_compute;
  return std::move(instance);
}

TaskId StageBuilder::gather_weights(const BlockRef& b, int microbatch, TaskId after, const std::string& name,
                                    const std::vector<Bytes>& sizes, Bytes experts, bool held) {
  const bool per_tensor_list = c_.scenario.parallelism.fsdp_gather == FsdpGather::kTensor;
  TaskId last = after;
  auto gather = [&](Bytes size, GroupKind kind) {
    LoneTask spec;
    spec.duration = collective_time(Collective::kAllGather, size, kind);
    spec.name = name;
    spec.deps = {last};
    spec.group = kind;
    spec.collective = Collective::kAllGather;
    spec.sms = c_.collectives.kernel_sms(Collective::kAllGather, placement(kind));
    spec.size = size;
    spec.synchronized = true;
    spec.sequence = next_sequence(kind);
    // Freed by the last task of the pass over the block, or FSDP2's staging buffer by a copy out.
    spec.alloc_bytes = held ? static_cast<int64_t>(size / Bytes(1)) : 0;
    if (c_.scenario.parallelism.fsdp_gather == FsdpGather::kPerParameter)
      spec.alloc_pool = kAllGatherPool;
    spec.block = b.block;
    spec.microbatch = microbatch;
    last = add(spec);
  };
  const auto ranks = static_cast<int>(placement(GroupKind::kDataShard).size());
  for (const Bytes size : sizes) {
    // DeepSpeed's _allgather_param synchronized the GPU, then looped in Python over the ranks,
    // each iteration one narrow() view of the buffer and one torch.distributed.get_rank(group)
    // call (deepspeed/runtime/zero/partition_parameters.py of 2021), with nothing queued on the
    // GPU. The copies' launches after the gather overlap the gather itself.
    if (per_tensor_list) {
      last = host_loop(b.block, microbatch, last,
                       (kPythonOpHostTime + kGetRankExtraHostTime) * static_cast<double>(ranks),
                       name + ".list");
    }
    gather(size, GroupKind::kDataShard);
    if (per_tensor_list)
      last = copy_out_gather(b.block, microbatch, last, size, ranks, name + ".copies");
  }
  if (experts > Bytes(0)) gather(experts, GroupKind::kExpertData);
  return last;
}

TaskId StageBuilder::host_loop(int32_t block, int microbatch, TaskId after, Seconds duration,
                               const std::string& name) {
  LoneTask loop;
  loop.duration = duration;
  loop.name = name;
  loop.deps = {after};
  loop.block = block;
  loop.microbatch = microbatch;
  return add(loop);
}

TaskId StageBuilder::copy_out_gather(int32_t block, int microbatch, TaskId gather, Bytes size,
                                     int ranks, const std::string& name) {
  LoneTask copies;
  // A zero-filled buffer, then one copy per rank out of the flat buffer NCCL gathered into: the
  // fill writes the bytes once, the copies read and write them. Each kernel pays the GPU's
  // launch overhead; the host dispatches them while the gather runs.
  copies.duration = c_.pricer.timer().memory_bound(MemoryKernel::kElementwise, size * 3.0, ranks + 1).time;
  copies.name = name;
  copies.deps = {gather};
  copies.transient_bytes = static_cast<int64_t>(size / Bytes(1));  // the flat buffer
  copies.block = block;
  copies.microbatch = microbatch;
  return add(copies);
}

TaskId StageBuilder::copy_out_weights(const BlockRef& b, int microbatch, TaskId gathered,
                                      const char* name, bool forward) {
  if (c_.scenario.parallelism.fsdp_gather != FsdpGather::kPerParameter) return gathered;
  const FsdpGathers& gathers = gathers_of(b);
  const int kernels = static_cast<int>(gathers.sizes.size()) + (gathers.experts > Bytes(0) ? 1 : 0);
  const auto staged = static_cast<int64_t>(gathers.total() / Bytes(1));
  LoneTask copy =
      compute_stream_copy(b, microbatch, name, gathers.total() * 2.0, kernels, {gathered});
  copy.alloc_bytes = staged;
  // A forward keeps its own staging buffer until the next copy out; a backward frees it at once.
  copy.free_bytes = copied_staging_bytes_ + (forward ? 0 : staged);
  copied_staging_bytes_ = forward ? staged : 0;
  copy.free_pool = kAllGatherPool;
  return add(copy);
}

StageBuilder::LoneTask StageBuilder::compute_stream_copy(const BlockRef& b, int microbatch,
                                                         std::string_view name, Bytes moved,
                                                         int kernels,
                                                         std::vector<TaskId> deps) const {
  LoneTask copy;
  copy.stream = StreamKind::kCompute;
  copy.tag = ActivityTag::kCompute;
  copy.duration = c_.pricer.timer().memory_bound(MemoryKernel::kElementwise, moved, kernels).time;
  copy.name = name;
  copy.deps = std::move(deps);
  copy.block = b.block;
  copy.microbatch = microbatch;
  return copy;
}

TaskId StageBuilder::prefetched_gather(FsdpPass& fsdp_pass, const std::vector<BlockRef>& blocks, size_t i,
                                       int microbatch, const char* pass) {
  const size_t ahead = static_cast<size_t>(c_.scenario.parallelism.fsdp_prefetch);
  for (size_t j = i; j <= std::min(i + ahead, blocks.size() - 1); ++j) {
    if (fsdp_pass.gathers[j] != kNoId) continue;
    const bool root = in_root(blocks[j]);
    if (root && root_.gathered != kNoId) {
      fsdp_pass.gathers[j] = root_.gathered;
      continue;
    }
    TaskId freed = j > ahead ? fsdp_pass.exits[j - ahead - 1] : kNoId;
    if (root && freed == kNoId) freed = root_.released;
    const FsdpGathers& gathers = gathers_of(blocks[j]);
    fsdp_pass.gathers[j] = gather_weights(blocks[j], microbatch, freed, fmt::format("fsdp.{}_weight_gather", pass),
                                          gathers.sizes, gathers.experts, true);
    if (root) root_.gathered = fsdp_pass.gathers[j];
  }
  return fsdp_pass.gathers[i];
}

// A forward pass of one micro-batch through one model chunk: receive the activation from the
// previous virtual stage, run the blocks, send the activation on.
StageBuilder::PassRun StageBuilder::start_run(int microbatch, int chunk, bool reversed, bool input_only) {
  PassRun run{microbatch, chunk, virtual_stage(chunk), input_only, chunk_blocks(chunk), {}, FsdpPass(0)};
  if (reversed) std::reverse(run.blocks.begin(), run.blocks.end());
  run.fsdp = FsdpPass(run.blocks.size());
  return run;
}

void StageBuilder::advance(PassRun& run, const Instance& instance) {
  run.fsdp.exits[run.next] = instance.exits.empty() ? kNoId : instance.exits.back();
  run.carried = instance.exits;
  ++run.next;
}

std::vector<TaskId> StageBuilder::receive_issued_after(bool forward) const {
  if (open_send_ != kNoId && open_send_forward_ != forward) return open_send_issued_at_;  // batched
  std::vector<TaskId> after;
  if (last_compute_ != kNoId) after.push_back(last_compute_);
  if (open_send_ != kNoId) after.push_back(open_send_);
  return after;
}

void StageBuilder::close_call(PassRun& run) {
  if (open_send_ != kNoId) run.carried.push_back(open_send_);
  open_send_ = kNoId;
}

StageBuilder::PassRun StageBuilder::start_forward(int microbatch, int chunk) {
  PassRun run = start_run(microbatch, chunk, /*reversed=*/false, /*input_only=*/false);
  if (run.vs > 0) {
    run.carried = {
        pipeline_transfer(StreamKind::kRecvPrev, GroupKind::kForwardRecv, "pp.recv_activation",
                          previous_stage(), microbatch, run.vs - 1,
                          blocking_p2p_ ? receive_issued_after(true) : std::vector<TaskId>{})};
  }
  if (blocking_p2p_) close_call(run);
  return run;
}

StageBuilder::Emission StageBuilder::forward_block(PassRun& run) {
  const size_t i = run.next;
  const BlockRef& block = run.blocks[i];
  const BlockPlans& plans = plans_of(block);
  std::vector<TaskId> entry = run.carried;
  int64_t free_at_exit = 0;
  if (fsdp()) {
    const TaskId gathered = prefetched_gather(run.fsdp, run.blocks, i, run.microbatch, "forward");
    if (in_root(block)) {
      entry.push_back(root_weights(block, run.microbatch, gathered, "fsdp.forward_weight_copy_out",
                                   /*forward=*/true));
    } else {
      entry.push_back(copy_out_weights(block, run.microbatch, gathered,
                                       "fsdp.forward_weight_copy_out", /*forward=*/true));
      free_at_exit = plans.gathered_bytes;
    }
  } else if (auto it = start_gathers_.find(block.block); it != start_gathers_.end()) {
    if (!staged_gathers_.empty() && staged_gathers_.front().first == block.block) {
      it->second = copy_out_staged_gather(block, run.microbatch);
    }
    entry.push_back(it->second);
  }
  if (const int32_t offloaded = offloaded_layer(block.block, 0); offloaded >= 0) {
    // The compute stream waits for the copy to host, then the GPU copy is freed.
    LoneTask wait;
    wait.stream = StreamKind::kCompute;
    wait.tag = ActivityTag::kHostTransfer;
    wait.name = "offload.wait";
    wait.deps = {offloaded_.at({run.microbatch, offloaded})};
    wait.free_bytes = layer_stored_bytes_.at(offloaded);
    wait.block = offloaded;
    wait.microbatch = run.microbatch;
    offloaded_.erase({run.microbatch, offloaded});
    entry.push_back(add(wait));
  }
  return Emission{plans.forward, block, run.microbatch, after_waited_reductions(std::move(entry)), nullptr, nullptr,
                  free_at_exit, {}};
}

void StageBuilder::end_forward_block(PassRun& run, const Instance& instance) {
  const int32_t layer = run.blocks[run.next].block;
  if (offloads(layer)) {
    offloaded_[{run.microbatch, layer}] =
        host_copy(layer, run.microbatch, "offload.activations_to_host", instance.last_compute, 0);
  }
  advance(run, instance);
}

int32_t StageBuilder::offloaded_layer(int32_t layer, int lag) const {
  const int offloaded = c_.scenario.training.activation_offload_layers;
  const int32_t index = layer - (c_.scenario.model.layers - lag - offloaded);
  return layer >= 0 && index >= 0 && index < offloaded ? index : -1;
}

TaskId StageBuilder::host_copy(int32_t layer, int microbatch, const char* name, TaskId after, int64_t alloc_bytes) {
  const Bytes size(static_cast<double>(layer_stored_bytes_.at(layer)));
  LoneTask copy;
  copy.stream = StreamKind::kHostCopy;
  copy.duration = size / c_.scenario.cluster.host_bandwidth;
  copy.tag = ActivityTag::kHostTransfer;
  copy.name = name;
  copy.deps = {after};
  copy.size = size;
  copy.alloc_bytes = alloc_bytes;
  copy.block = layer;
  copy.microbatch = microbatch;
  return add(copy);
}

void StageBuilder::end_forward(const PassRun& run) {
  if (run.vs + 1 < c_.virtual_stages_total) {
    const TaskId send =
        pipeline_transfer(StreamKind::kSendNext, GroupKind::kForwardSend, "pp.send_activation",
                          stage_, run.microbatch, run.vs, run.carried);
    if (blocking_p2p_) {
      open_send_ = send;
      open_send_forward_ = true;
      open_send_issued_at_ = run.carried;
    }
  }
}

void StageBuilder::forward(int microbatch, int chunk) {
  PassRun run = start_forward(microbatch, chunk);
  while (!run.done()) end_forward_block(run, instantiate(forward_block(run)));
  end_forward(run);
}

// A backward pass (or its input-gradient half, for zero-bubble) of one micro-batch through one
// model chunk, in reverse block order, between gradient transfers.
StageBuilder::PassRun StageBuilder::start_backward(int microbatch, int chunk, PipelineAction::Kind kind) {
  PassRun run = start_run(microbatch, chunk, /*reversed=*/true, kind == PipelineAction::Kind::kBackwardInput);
  if (run.vs + 1 < c_.virtual_stages_total) {
    run.carried = {pipeline_transfer(
        StreamKind::kRecvNext, GroupKind::kBackwardRecv, "pp.recv_gradient", stage_, microbatch,
        run.vs + 1, blocking_p2p_ ? receive_issued_after(false) : std::vector<TaskId>{})};
  }
  if (blocking_p2p_) close_call(run);
  return run;
}

StageBuilder::Emission StageBuilder::backward_block(PassRun& run) {
  const size_t i = run.next;
  const BlockRef& block = run.blocks[i];
  const BlockPlans& plans = plans_of(block);
  std::vector<TaskId> entry = run.carried;
  int64_t free_at_exit = 0;
  if (fsdp()) {
    TaskId gathered = prefetched_gather(run.fsdp, run.blocks, i, run.microbatch, "backward");
    if (in_root(block)) {
      entry.push_back(root_weights(block, run.microbatch, gathered, "fsdp.backward_weight_copy_out",
                                   /*forward=*/false));
    } else {
      // DeepSpeed gathers them again between the recomputed forward and the backward; they are
      // timed after the block's gathers, ahead of its pass: with its synchronized gathers
      // (fsdp_prefetch: 0) the pass waits for them either way. They hold no more memory than
      // the copies released before them.
      if (!plans.gathers.regather_sizes.empty()) {
        gathered = gather_weights(block, run.microbatch, gathered, "fsdp.backward_weight_regather",
                                  plans.gathers.regather_sizes, Bytes(0), false);
      }
      entry.push_back(copy_out_weights(block, run.microbatch, gathered,
                                       "fsdp.backward_weight_copy_out", /*forward=*/false));
    }
    // Under zero-bubble the weights stay gathered until the W pass, if it runs anything.
    if (ends_block(run, block)) free_at_exit = freed_after_backward(block);
  }
  if (const int32_t reloaded = offloaded_layer(block.block, 1); reloaded >= 0) {
    // The copy back allocates its memory as it is issued, after the compute queued before.
    reloaded_[{run.microbatch, reloaded}] = host_copy(reloaded, run.microbatch, "offload.activations_from_host",
                                                      last_compute_, layer_stored_bytes_.at(reloaded));
  }
  if (offloads(block.block)) {
    entry.push_back(reloaded_.at({run.microbatch, block.block}));
    reloaded_.erase({run.microbatch, block.block});
  }
  std::vector<TaskId>* ops = nullptr;
  if (run.input_only) ops = &backward_ops_[{run.microbatch, run.chunk, block.block}];
  return Emission{run.input_only ? plans.backward_input : plans.backward, block, run.microbatch,
                  after_waited_reductions(std::move(entry)), nullptr, ops, free_at_exit, {}};
}

void StageBuilder::end_backward_block(PassRun& run, const Instance& instance) {
  const BlockRef& block = run.blocks[run.next];
  if (ends_block(run, block)) {
    last_backward_[{run.chunk, block.block}] = instance.last_compute;
    release_root_after(block, instance.last_compute);
  }
  // A zero-bubble B pass leaves them to its W pass's turn (weight()).
  if (!run.input_only && per_microbatch_reduce())
    reduce_block_gradients(block, run.microbatch, instance.last_compute);
  advance(run, instance);
}

void StageBuilder::end_backward(PassRun& run) {
  if (per_microbatch_reduce() && !run.input_only) reduce_gradient_bucket();
  // The input gradient is sent after the chunk's reductions queued on the compute stream.
  if (!run.input_only && completes_chunk_gradients(run.chunk, run.microbatch))
    run.carried.push_back(reduce_chunk_gradients(run.chunk, run.microbatch));
  if (run.vs > 0) {
    const TaskId send =
        pipeline_transfer(StreamKind::kSendPrev, GroupKind::kBackwardSend, "pp.send_gradient",
                          previous_stage(), run.microbatch, run.vs, run.carried);
    if (blocking_p2p_) {
      open_send_ = send;
      open_send_forward_ = false;
      open_send_issued_at_ = run.carried;
    }
  }
}

void StageBuilder::backward(int microbatch, int chunk, PipelineAction::Kind kind) {
  PassRun run = start_backward(microbatch, chunk, kind);
  while (!run.done()) end_backward_block(run, instantiate(backward_block(run)));
  end_backward(run);
}

// A forward and a backward of other micro-batches, their blocks taken in pairs (the backward's
// first) and each pair's tasks interleaved at the expert-parallel exchanges: each pass adds its
// tasks up to and including its next all-to-all, then hands over, so that the compute stream
// runs one pass's work while the other's exchange is under way (Megatron-Core's combined 1F1B
// with --overlap-moe-expert-parallel-comm).
void StageBuilder::forward_backward(const PipelineAction& forward_action, const PipelineAction& backward_action) {
  PassRun f = start_forward(forward_action.microbatch, forward_action.chunk);
  PassRun b = start_backward(backward_action.microbatch, backward_action.chunk, backward_action.kind);
  auto until_exchange = [&](Emission& e) {
    while (!emitted_all(e)) {
      if (emit_task(e) == StreamKind::kExpert) return;
    }
  };
  while (!f.done() || !b.done()) {
    std::optional<Emission> backward_pass;
    std::optional<Emission> forward_pass;
    if (!b.done()) backward_pass = backward_block(b);
    if (!f.done()) forward_pass = forward_block(f);
    while ((backward_pass && !emitted_all(*backward_pass)) || (forward_pass && !emitted_all(*forward_pass))) {
      if (backward_pass) until_exchange(*backward_pass);
      if (forward_pass) until_exchange(*forward_pass);
    }
    if (backward_pass) end_backward_block(b, end_instance(*backward_pass));
    if (forward_pass) end_forward_block(f, end_instance(*forward_pass));
  }
  end_backward(b);
  end_forward(f);
}

// Zero-bubble W: the weight gradients of a chunk's blocks for one micro-batch.
void StageBuilder::weight(int microbatch, int chunk) {
  std::vector<BlockRef> blocks = chunk_blocks(chunk);
  std::reverse(blocks.begin(), blocks.end());
  for (const BlockRef& block : blocks) {
    const BlockPlans& plans = plans_of(block);
    const auto key = std::make_tuple(microbatch, chunk, block.block);
    if (weight_pass_empty(block)) {  // its B pass ended it (ends_block)
      backward_ops_.erase(key);
      // Reduced per micro-batch, its gradients go at this turn, behind the W passes queued before
      // it (whose gradients an open all-reduce bucket may hold too).
      if (per_microbatch_reduce()) reduce_block_gradients(block, microbatch, last_compute_);
      continue;
    }
    const int64_t free_at_exit = fsdp() ? freed_after_backward(block) : 0;
    const Instance instance = instantiate(plans.backward_weight, block, microbatch, {}, &backward_ops_.at(key),
                                          nullptr, free_at_exit);
    // A W pass has no entry tasks (its ops hang off the B pass's); its first compute task holds
    // the rest of the stream behind the reductions. A block without weight gradients leaves them
    // to the next pass.
    const std::vector<TaskTemplate>& tasks = c_.plans[plans.backward_weight]->tasks;
    const auto first_compute = std::ranges::find(tasks, StreamKind::kCompute, &TaskTemplate::stream);
    if (first_compute != tasks.end()) {
      const TaskId held = instance.tasks[first_compute - tasks.begin()];
      for (const TaskId reduction : after_waited_reductions({})) builder_.add_dependency(reduction, held);
    }
    backward_ops_.erase(key);
    last_backward_[{chunk, block.block}] = instance.last_compute;
    release_root_after(block, instance.last_compute);
    if (per_microbatch_reduce()) reduce_block_gradients(block, microbatch, instance.last_compute);
  }
  if (per_microbatch_reduce()) reduce_gradient_bucket();
  if (completes_chunk_gradients(chunk, microbatch)) reduce_chunk_gradients(chunk, microbatch);
}

// After the last backward: data-parallel gradient reduction, the word-embedding gradient
// exchange, the gradient norm and the optimizer step.
void StageBuilder::step() {
  const Scenario& s = c_.scenario;
  const Parallelism& p = s.parallelism;
  const ParameterBytes bytes = parameter_bytes(s.training);
  const bool hybrid = p.hybrid_sharded();
  // Reduce-scattered per micro-batch, or by FSDP2 after its chunk's last backward, each block's
  // gradients went then: its experts' over their own group and its shard across the replicas
  // (DeepSpeed's all-reduced buckets went whole).
  const bool reduced_per_block =
      (per_microbatch_reduce() && p.fsdp_gradient_reduce == FsdpGradientReduce::kReduceScatter) ||
      reduces_after_chunk_backward();
  std::vector<TaskId> reductions;

  // Each chunk's buckets are reduced as soon as their blocks' last gradients are ready (or after
  // all backward work), in backward order. The step's reductions reduce the gradient buffer in
  // place (Megatron-LM's; under ZeRO-3 with pipelining, the whole gradients accumulated over the
  // micro-batches). FSDP without pipelining reduced each block's as its backward ended, and FSDP2
  // with it each chunk's once the chunk's last backward was done (reduce_block_gradients).
  struct ReadyBucket {
    GradientBucket bucket;
    std::vector<TaskId> ready;  // the tasks after which it is reduced
  };
  std::vector<ReadyBucket> buckets;
  for (int chunk = p.virtual_stages - 1; chunk >= 0; --chunk) {
    std::vector<BlockRef> blocks = chunk_blocks(chunk);
    std::reverse(blocks.begin(), blocks.end());
    std::vector<BlockParameters> blocks_backward;
    std::vector<TaskId> ready;  // by block, in backward order
    for (const BlockRef& block : blocks) {
      const BlockPlans& plans = plans_of(block);
      blocks_backward.push_back({plans.graph->parameters, plans.graph->expert_parameters});
      ready.push_back(s.training.overlap_grad_reduce ? last_backward_.at({chunk, block.block})
                                                     : last_compute_);
    }
    for (const GradientBucket& bucket :
         gradient_buckets(blocks_backward, step_bucket_parameters(s.training, p, stage_, chunk))) {
      std::vector<TaskId> bucket_ready(ready.begin() + bucket.first_block,
                                       ready.begin() + bucket.first_block + bucket.blocks);
      // Megatron-LM syncs a later stage's gradients once the schedule is done, its last blocking
      // send included (forward_backward_pipelining_without_interleaving's grad_sync_func).
      if (blocking_p2p_ && stage_ > 0 && open_send_ != kNoId) bucket_ready.push_back(open_send_);
      buckets.push_back({bucket, std::move(bucket_ready)});
    }
  }
  int index = 0;
  for (const auto& [bucket, bucket_ready] : buckets) {
    const std::string suffix = fmt::format(" bucket {}", index++);
    const Bytes dense(static_cast<double>(bucket.dense) * bytes.gradient);
    const Bytes expert(static_cast<double>(bucket.expert) * bytes.gradient);
    if (p.zero == 0) {
      reductions.push_back(step_collective(Collective::kAllReduce, dense, GroupKind::kData,
                                           "dp.gradient_all_reduce" + suffix, bucket_ready,
                                           Operand::kInPlace));
    } else if (!per_microbatch_reduce() && !reduces_after_chunk_backward()) {
      reductions.push_back(step_collective(Collective::kReduceScatter, dense, GroupKind::kDataShard,
                                           "dp.gradient_reduce_scatter" + suffix, bucket_ready,
                                           Operand::kInPlace));
    }
    if (hybrid && p.zero >= 1 && !reduced_per_block) {
      // HSDP: shards are all-reduced across the replicas.
      reductions.push_back(step_collective(
          Collective::kAllReduce, dense / static_cast<double>(p.zero_shard),
          GroupKind::kDataReplica, "dp.replica_all_reduce" + suffix,
          {per_microbatch_reduce() ? last_compute_ : reductions.back()}, Operand::kInPlace));
    }
    if (bucket.expert > 0 && p.expert_data_ranks() > 1 && !reduced_per_block) {
      reductions.push_back(
          step_collective(p.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter, expert,
                          GroupKind::kExpertData, "dp.expert_gradient_reduce" + suffix,
                          bucket_ready, Operand::kInPlace));
    }
  }
  // The word embedding held by the first and last stage: their gradients are summed.
  if (head_copies_word_embedding(s.model) && p.pp > 1 && (stage_ == 0 || stage_ == p.pp - 1)) {
    const int32_t holder = stage_ == 0 ? -1 : -2;
    const int chunk = stage_ == 0 ? 0 : p.virtual_stages - 1;
    reductions.push_back(step_collective(
        Collective::kAllReduce, word_embedding_gradient_bytes(s.model, p.tp, bytes.gradient),
        GroupKind::kEmbedding, "pp.embedding_gradient_all_reduce",
        {last_backward_.at({chunk, holder})}, Operand::kInPlace));
  }
  reductions.push_back(last_compute_);
  // The last micro-batch's waited reductions, which no block pass follows.
  for (const TaskId reduction : after_waited_reductions({})) reductions.push_back(reduction);
  const HeldWeights weights = stage_weights();
  int64_t largest_weight = 0;
  int64_t tp_summed = 0;
  for (int chunk = 0; chunk < p.virtual_stages; ++chunk) {
    for (const BlockRef& block : chunk_blocks(chunk)) {
      const LayerGraph& graph = *plans_of(block).graph;
      largest_weight = std::max(largest_weight, graph.largest_weight());
      tp_summed += graph.tp_summed_parameters;
    }
  }
  // Weights every tensor-parallel rank trained on its own tokens or heads are summed over the group
  // once the data-parallel reductions are done (Megatron-LM's finalize_model_grads).
  if (tp_summed > 0) {
    reductions = {step_collective(
        Collective::kAllReduce, Bytes(static_cast<double>(tp_summed) * bytes.gradient),
        GroupKind::kTensor, "tp.replicated_gradient_all_reduce", reductions, Operand::kStaged)};
  }
  // The gradient norm (for clipping) is summed over the model-parallel ranks.
  const TaskId norm = step_collective(Collective::kAllReduce, Bytes(4), GroupKind::kModel,
                                      "step.gradient_norm", reductions, Operand::kInPlace);
  // The optimizer updates the states this rank holds: of dense weights a 1/zero_shard share, of
  // experts a share over the ranks holding the same experts (as static memory shards them).
  const double shard = p.zero >= 1 ? p.zero_shard : 1.0;
  const double expert_shard = p.zero >= 1 ? p.expert_data_ranks() : 1.0;
  const double held = static_cast<double>(weights.parameters - weights.experts) / shard +
                      static_cast<double>(weights.experts) / expert_shard;
  // Written back at each weight's own bytes (fp8 parameters: one for an fp8 GEMM's, two else).
  const double written_bytes = bytes.weights_bytes(weights.dense()) / shard +
                               bytes.weights_bytes(weights.expert()) / expert_shard;
  const double mean_weight_bytes = held > 0.0 ? written_bytes / held : bytes.weight;
  const OptimizerStep step_bytes = optimizer_step(s.training, bytes.gradient, mean_weight_bytes);
  // The step also zeroes the gradient buffer for the next one.
  const double zeroed =
      (per_microbatch_reduce() ? held : static_cast<double>(weights.parameters)) * bytes.gradient;
  LoneTask optimizer;
  optimizer.stream = StreamKind::kCompute;
  optimizer.duration =
      c_.pricer.timer().memory_bound(MemoryKernel::kOptimizer, Bytes(held * step_bytes.traffic + zeroed)).time;
  const double temporary_elements = step_bytes.per_tensor ? static_cast<double>(largest_weight) / shard : held;
  optimizer.transient_bytes = static_cast<int64_t>(temporary_elements * step_bytes.transient);
  optimizer.tag = ActivityTag::kOptimizer;
  optimizer.name = "step.optimizer";
  optimizer.deps = {norm};
  const TaskId update = add(optimizer);
  last_compute_ = update;
  if (fsdp() && p.fsdp_gather == FsdpGather::kTensor) gather_persistent_weights(update);
  // ZeRO-1/2 without overlap: the updated weights are gathered before the step ends.
  if (p.zero >= 1 && !fsdp() && !s.training.overlap_param_gather) {
    gather_updated_weights(weights, {update});
  }
}

// DeepSpeed's ZeRO-3 of 2021 kept the tensors of at most stage3_param_persistence_threshold
// elements whole on every rank, and after each optimizer step (_post_step) gathered their
// updated shards in one synchronous all-gather (_allgather_params in
// deepspeed/runtime/zero/partition_parameters.py of 2021): a Python loop over the ranks built one
// narrow() view each of a flat buffer; after the gather, tensor by tensor, a loop over the ranks
// holding a share of it copied that share into the whole tensor, each iteration a narrow() of
// the buffer, a view() and a narrow() of the tensor and a copy_(): four Python-level ops and a
// kernel launch, which the host issues far slower than the GPU copies a few elements.
void StageBuilder::gather_persistent_weights(TaskId after) {
  const Parallelism& p = c_.scenario.parallelism;
  const int64_t ranks = static_cast<int64_t>(placement(GroupKind::kDataShard).size());
  int64_t elements = 0;
  int64_t copies = 0;
  for (int chunk = 0; chunk < p.virtual_stages; ++chunk) {
    for (const BlockRef& block : chunk_blocks(chunk)) {
      for (const int64_t tensor : plans_of(block).graph->weight_tensors) {
        if (tensor == 0 || tensor > p.fsdp_persistence_threshold) continue;
        const int64_t share = (tensor + ranks - 1) / ranks;
        elements += tensor;
        copies += (tensor + share - 1) / share;
      }
    }
  }
  if (copies == 0) return;
  const ParameterBytes bytes = parameter_bytes(c_.scenario.training);
  const Bytes size(static_cast<double>(elements) * bytes.weight);
  const TaskId list =
      host_loop(kStepBlock, kStepMicrobatch, after, kPythonOpHostTime * static_cast<double>(ranks),
                "fsdp.persistent_weight_gather.list");
  const TaskId gather = step_collective(Collective::kAllGather, size, GroupKind::kDataShard,
                                        "fsdp.persistent_weight_gather", {list}, Operand::kStaged);
  const TaskId copied_out =
      copy_out_gather(kStepBlock, kStepMicrobatch, gather, size, static_cast<int>(ranks),
                      "fsdp.persistent_weight_gather.copies");
  host_loop(kStepBlock, kStepMicrobatch, copied_out,
            (4.0 * kPythonOpHostTime + kLaunchHostTime) * static_cast<double>(copies),
            "fsdp.persistent_weight_gather.unpack");
}

TaskId StageBuilder::gather_updated_weights(const HeldWeights& weights, std::vector<TaskId> deps) {
  const ParameterBytes bytes = parameter_bytes(c_.scenario.training);
  TaskId last =
      step_collective(Collective::kAllGather, Bytes(bytes.weights_bytes(weights.dense())),
                      GroupKind::kDataShard, "dp.weight_all_gather", deps, Operand::kInPlace);
  // Experts' weights are sharded over the ranks holding the same experts, and gathered there.
  if (weights.experts > 0 && c_.scenario.parallelism.expert_data_ranks() > 1) {
    last = step_collective(Collective::kAllGather, Bytes(bytes.weights_bytes(weights.expert())),
                           GroupKind::kExpertData, "dp.expert_weight_all_gather", deps,
                           Operand::kInPlace);
  }
  return last;
}

StageProgram StageBuilder::build() {
  const Scenario& s = c_.scenario;
  const Parallelism& p = s.parallelism;
  // ZeRO-1/2 with overlapped gathers: the previous step's updated weights are gathered per
  // block while this step's forward passes start (the steady state of Megatron-LM's
  // --overlap-param-gather); each block's first forward waits for its gather.
  // ZeRO-3 with pipelining gathers this way too, and keeps the weights for the whole step.
  if (p.zero >= 1 && !fsdp() && (s.training.overlap_param_gather || p.zero >= 3)) {
    for (int chunk = 0; chunk < p.virtual_stages; ++chunk) {
      for (const BlockRef& block : chunk_blocks(chunk)) {
        // fsdp_gather: tensor needs ZeRO-3 without pipelining, so each block here is one gather
        // (two, with the experts').
        const BlockPlans& plans = plans_of(block);
        start_gathers_[block.block] = gather_updated_weights(held_weights(*plans.graph), {});
        if (p.zero >= 3 && p.fsdp_gather == FsdpGather::kPerParameter) {
          builder_.set_alloc(start_gathers_[block.block], plans.gathered_bytes, kAllGatherPool);
          staged_gathers_.emplace_back(block.block, start_gathers_[block.block]);
        } else if (p.zero >= 3) {
          builder_.set_alloc(start_gathers_[block.block], plans.gathered_bytes);
        }
      }
    }
  }
  const auto actions = pipeline_schedule(p.schedule, p.pp, stage_, static_cast<int>(c_.microbatches), p.virtual_stages,
                                         p.ep_comm_overlap);
  last_backward_microbatch_.assign(p.virtual_stages, -1);
  for (const PipelineAction& action : actions) {
    if (action.kind == PipelineAction::Kind::kBackward ||
        action.kind == PipelineAction::Kind::kBackwardWeight)
      last_backward_microbatch_.at(action.chunk) = action.microbatch;
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& action = actions[i];
    if (action.paired) {
      forward_backward(action, actions.at(i + 1));
      ++i;
      continue;
    }
    switch (action.kind) {
      case PipelineAction::Kind::kForward: forward(action.microbatch, action.chunk); break;
      case PipelineAction::Kind::kBackward:
      case PipelineAction::Kind::kBackwardInput: backward(action.microbatch, action.chunk, action.kind); break;
      case PipelineAction::Kind::kBackwardWeight: weight(action.microbatch, action.chunk); break;
    }
  }
  step();
  PACELINE_CHECK(staged_gathers_.empty(),
                 fmt::format("block {}'s step gather was never copied out: the first forwards ran "
                             "out of the order of the gathers",
                             staged_gathers_.empty() ? 0 : staged_gathers_.front().first));

  StageProgram stage;
  stage.stage = stage_;
  stage.plans = c_.plans;
  stage.labels = std::move(labels_);
  stage.lone_comms = std::move(lone_comms_);
  stage.names = std::move(names_);
  stage.lone_names = std::move(lone_names_);
  const HeldWeights weights = stage_weights();
  stage.parameters = weights.parameters;
  stage.static_memory = rank_static_memory(s.training, p, weights);
  stage.executed_flop = executed_;
  stage.recompute_flop = recomputed_;
  stage.program = std::move(builder_).build();
  return stage;
}

}  // namespace

Lowering lower(const Scenario& s, const OpTimer& timer, const CollectiveModel& collectives,
               const LoweringOptions& options) {
  const Parallelism& p = s.parallelism;
  const RankLayout layout(p, s.cluster.nvlink_domain);
  const OpPricer pricer(timer, collectives, layout);
  Context c{.scenario = s,
            .layout = layout,
            .pricer = pricer,
            .collectives = collectives,
            .virtual_stages_total = p.pp * p.virtual_stages,
            .zero_bubble = p.schedule == Schedule::kZeroBubble};
  c.microbatches = s.training.num_microbatches(p.dp);

  // Blocks of each virtual stage, in order.
  int layer = 0;
  c.virtual_stage_blocks.resize(c.virtual_stages_total);
  for (int vs = 0; vs < c.virtual_stages_total; ++vs) {
    auto& blocks = c.virtual_stage_blocks[vs];
    if (vs == 0) blocks.push_back({BlockKind::kEmbedding, -1});
    for (int i = 0; i < p.layers_per_stage[vs]; ++i, ++layer) {
      const bool recomputed = s.training.recomputes_layer(i);
      const BlockKind kind = s.model.is_moe_layer(layer) ? (recomputed ? BlockKind::kMoe : BlockKind::kMoeKept)
                                                         : (recomputed ? BlockKind::kDense : BlockKind::kDenseKept);
      blocks.push_back({kind, layer});
    }
    if (vs == c.virtual_stages_total - 1) blocks.push_back({BlockKind::kHead, -2});
  }
  // The distinct blocks, planned once.
  const LayerShard shard = layer_shard(s);
  const LayerShard kept = kept_layer_shard(s);
  c.blocks[BlockKind::kEmbedding] =
      plan_block(c, BlockKind::kEmbedding, build_embedding(s.model, shard), "embedding");
  c.blocks[BlockKind::kHead] =
      plan_block(c, BlockKind::kHead, build_output_head(s.model, head_layer_shard(s)), "head");
  for (const auto& blocks : c.virtual_stage_blocks) {
    for (const BlockRef& b : blocks) {
      if (c.blocks.count(b.kind)) continue;  // planned, or the embedding or head
      const bool moe = b.kind == BlockKind::kMoe || b.kind == BlockKind::kMoeKept;
      const bool keeps = b.kind == BlockKind::kDenseKept || b.kind == BlockKind::kMoeKept;
      c.blocks[b.kind] =
          plan_block(c, b.kind, build_transformer_layer(s.model, keeps ? kept : shard, moe),
                     layer_block_name(moe, keeps));
    }
  }

  // Rendezvous sizes: the simulated ranks of each group. Symmetric fidelity simulates one rank
  // per stage, so groups inside a stage need no partner; pipeline links and cross-stage groups
  // do. Rank 0 is simulated, and its groups are alike to every simulated rank's.
  const RankFold fold = s.simulation.fidelity == Fidelity::kFull ? options.full_fold : RankFold::all();
  for (int k = 0; k < kNumGroupKinds; ++k) {
    const std::vector<int> members = layout.members(static_cast<GroupKind>(k), 0);
    c.members[k] = static_cast<uint32_t>(
        std::ranges::count_if(members, [&](int rank) { return fold.represents(layout.coord(rank)); }));
    c.networked[k] = options.shared_network && members.size() > 1;
  }
  std::vector<int> pipeline;
  for (int stage = 0; stage < p.pp; ++stage) pipeline.push_back(layout.rank_of(RankCoord{0, 0, 0, stage}));
  c.pipeline_sms = collectives.kernel_sms(Collective::kSendRecv, pipeline);

  Lowering lowering;
  lowering.microbatches = c.microbatches;
  lowering.fold = fold;
  lowering.stages.resize(p.pp);
  parallel_for(static_cast<size_t>(p.pp), resolve_threads(options.threads), [&](size_t stage) {
    lowering.stages[stage] = std::make_shared<const StageProgram>(StageBuilder(c, static_cast<int>(stage)).build());
  });
  // The simulated ranks: one per stage (symmetric), or one per orbit of the fold (full).
  for (int rank = 0; rank < layout.num_ranks(); ++rank) {
    const RankCoord coord = layout.coord(rank);
    if (!fold.represents(coord)) continue;
    const StageProgram& stage = *lowering.stages[coord.pp];
    RankSetup setup;
    setup.program = std::shared_ptr<const Program>(lowering.stages[coord.pp], &stage.program);
    setup.group_instances = layout.instances(rank);
    setup.initial_memory_bytes = stage.static_memory.resident_bytes();
    // Spans of the stage's first rank: the one symmetric fidelity simulates.
    setup.record_spans = options.record_spans && RankFold::all().represents(coord);
    setup.record_memory = options.record_memory && setup.record_spans;
    lowering.ranks.push_back(std::move(setup));
    lowering.rank_stage.push_back(coord.pp);
    lowering.rank_global.push_back(rank);
  }
  return lowering;
}

}  // namespace paceline
