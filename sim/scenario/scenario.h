// Scenario: one prediction request — a model, a cluster, a parallel layout and a training
// setup — validated, with every default resolved. See README.md for the YAML format.
#ifndef PACELINE_SIM_SCENARIO_SCENARIO_H_
#define PACELINE_SIM_SCENARIO_SCENARIO_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hardware/cluster.h"
#include "models/layer_graph.h"
#include "models/model_spec.h"

namespace paceline {

class YamlMap;

enum class Schedule { kGpipe, kOneFOneB, kInterleavedOneFOneB, kZeroBubble };
enum class Precision { kFp32, kFp16, kBf16, kFp8 };
enum class Fidelity { kSymmetric, kFull };
enum class Optimizer { kAdam, kSgd };
// How ZeRO-3 gathers a block's weights: one all-gather of them all (PyTorch FSDP's flat
// parameters, DeepSpeed's coalesced fetch); one all-gather per weight tensor, one after another
// (DeepSpeed ZeRO-3 before mid-2021); or one all-gather of them all into a staging buffer that
// the compute stream copies out into each weight, and the gradients copied into one before their
// reduce-scatter (PyTorch FSDP2's per-parameter shards).
enum class FsdpGather { kBlock, kTensor, kPerParameter };
// How ZeRO-3 reduces a block's gradients: each rank receiving only its shard (PyTorch FSDP,
// DeepSpeed's reduce-scatter path) or the whole sum, of which it keeps its shard.
enum class FsdpGradientReduce { kReduceScatter, kAllReduce };
// How the optimizer step runs: one multi-tensor kernel that reads and writes each state once
// (Apex / Transformer Engine FusedAdam, torch.optim with fused=True); one pass over all the
// states per arithmetic op (torch.optim's foreach implementation, its default on GPUs); or the
// same passes tensor by tensor (torch.optim's for-loop implementation, Composer's
// DecoupledAdamW), whose temporaries are one tensor's.
enum class OptimizerKernels { kFused, kUnfused, kForLoop };

// The four rank dimensions, innermost first in `rank_order`.
enum class RankDim { kTensor, kContext, kData, kPipeline };

// Whether each micro-batch's gradients are reduced as its backward produces them, every rank
// accumulating only its shard: ZeRO-2 and ZeRO-3 without pipelining (DeepSpeed's stage 2
// reduces every micro-step, PyTorch FSDP reduce-scatters every backward). With pipelining a
// stage keeps whole gradients over the micro-batches and reduces them in the step.
inline bool reduces_gradients_per_microbatch(int zero, int pp) { return zero >= 2 && pp == 1; }

struct Parallelism {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int cp = 1;
  ContextComm cp_comm = ContextComm::kRing;
  // The ring's and the gather's exchanges run beside the attention blocks; false: each is waited
  // for where it is issued (PyTorch's context parallel under torch.compile).
  bool cp_comm_overlap = true;
  int ep = 1;
  // Expert-parallel all-to-alls run beside another micro-batch's compute: in the steady state
  // each forward is paired with a backward and their blocks interleave, and the experts' weight
  // gradients wait until the dispatch's gradient exchange is under way (Megatron-Core's
  // --overlap-moe-expert-parallel-comm with --delay-wgrad-compute).
  bool ep_comm_overlap = false;
  // How the expert-parallel exchanges send the routed tokens (models/layer_graph.h).
  TokenDispatcher ep_dispatcher = TokenDispatcher::kAllToAll;
  int virtual_stages = 1;
  Schedule schedule = Schedule::kOneFOneB;
  bool sequence_parallel = false;
  // Sequence-parallel all-gathers and reduce-scatters run in chunks beside the GEMMs they feed
  // or drain (Megatron-LM's --tp-comm-overlap, torchtitan's async TP), by `tp_comm_overlap_method`.
  bool tp_comm_overlap = false;
  TpOverlapMethod tp_comm_overlap_method = TpOverlapMethod::kUserbuffers;
  TpImplementation tp_implementation = TpImplementation::kMegatron;
  int zero = 0;        // 0 none, 1 optimizer states, 2 + gradients, 3 + parameters (FSDP)
  int fsdp_prefetch = 1;  // ZeRO-3: blocks whose weights are gathered ahead of the one computing
  FsdpGather fsdp_gather = FsdpGather::kBlock;
  // fsdp_gather: tensor: tensors of at most this many elements stay whole on every rank and are
  // not gathered (DeepSpeed's stage3_param_persistence_threshold).
  int64_t fsdp_persistence_threshold = 100000;
  // fsdp_gather: tensor with full recompute: a tensor used again within this many elements of
  // other weights is kept gathered from the recomputed forward to its backward; one used
  // further apart is released and gathered again (DeepSpeed's stage3_max_reuse_distance).
  int64_t fsdp_reuse_distance = 1000000000;
  FsdpGradientReduce fsdp_gradient_reduce = FsdpGradientReduce::kReduceScatter;
  int zero_shard = 1;  // shard over groups of this many data-parallel ranks (HSDP when < dp·cp)
  std::vector<int> layers_per_stage;  // per virtual stage, in pipeline order
  std::vector<RankDim> rank_order = {RankDim::kTensor, RankDim::kContext, RankDim::kData, RankDim::kPipeline};

  // See reduces_gradients_per_microbatch(zero, pp).
  bool reduces_gradients_per_microbatch() const { return paceline::reduces_gradients_per_microbatch(zero, pp); }
  // HSDP: ZeRO shards over fewer ranks than the data-parallel ones, the shards replicated.
  bool hybrid_sharded() const { return zero_shard < dp * cp; }
  // The ranks holding copies of the same experts (experts are not split by TP): their gradients
  // are reduced and, under ZeRO, their states sharded over all of them (Megatron-Core's expert
  // data-parallel group), whatever the dense weights' zero_shard.
  int expert_data_ranks() const { return tp * dp * cp / ep; }
};

struct Training {
  int64_t global_batch = 0;  // sequences per optimizer step
  int64_t micro_batch = 1;
  int64_t seq_len = 0;
  Precision precision = Precision::kBf16;
  Recompute recompute = Recompute::kNone;
  // With full recompute, the first this many layers of each model chunk (virtual pipeline stage)
  // are recomputed and the rest keep their activations (Megatron-LM's --recompute-method block
  // --recompute-num-layers); 0: every layer.
  int recompute_layers = 0;
  // With selective recompute, the parts of each layer recomputed (Megatron-Core's
  // --recompute-modules).
  RecomputeModules recompute_modules = kDefaultRecomputeModules;
  // Whether the layer at this place in its chunk (0: the chunk's first) is recomputed when
  // recompute is full.
  bool recomputes_layer(int index_in_chunk) const {
    return recompute_layers == 0 || index_in_chunk < recompute_layers;
  }
  // The first this many transformer layers copy the activations they keep for backward to host
  // memory during the forward pass and back before their backward (Megatron-Core's
  // cpu_offloading_num_layers over Transformer Engine's CPU offload); 0: none.
  int activation_offload_layers = 0;
  AttentionKernel attention = AttentionKernel::kFlash;
  // Keys and values copied out to every query head before the attention call, as torchtitan's
  // Llama and Hugging Face's eager attention do (`repeat_kv`), rather than read per key/value
  // head by the kernel.
  bool repeat_kv = false;
  // Queries, keys and values, and a gated MLP's gate and up projection, computed by a linear each
  // (torchtitan's Llama, Hugging Face's models) rather than one GEMM: backward sums the linears'
  // input gradients.
  bool separate_projections = false;
  MoeWeighting moe_weighting = MoeWeighting::kTokens;
  ExpertGemm expert_gemm = ExpertGemm::kPerExpert;
  Fusion fusion = Fusion::kFused;
  Fusion cross_entropy = Fusion::kFused;
  // Gradients accumulated and reduced in 16 bits rather than fp32 (Megatron-LM's
  // --grad-reduce-in-bf16, NeMo's distributed Adam with grad_sync_dtype: bf16).
  bool gradients_in_bf16 = false;
  // fp8 training whose GEMM weights are fp8 tensors themselves (Transformer Engine's fp8
  // parameters; Megatron-LM's --fp8-param-gather): no 16-bit working copy beside them, and the
  // distributed optimizer's and FSDP's weight gathers move fp8.
  bool fp8_param_gather = false;
  Optimizer optimizer = Optimizer::kAdam;
  OptimizerKernels optimizer_kernels = OptimizerKernels::kFused;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;
  // Gradient bucket size for data-parallel reduction (Megatron-Core's DDP `bucket_size`), and for
  // ZeRO-3's all-reduced gradients (DeepSpeed's reduce_bucket_size); unset: Megatron-Core's
  // default, which grows with the data-parallel ranks (bucket_parameters).
  std::optional<int64_t> grad_bucket_parameters;

  int64_t num_microbatches(int dp) const { return global_batch / (micro_batch * dp); }
  // grad_bucket_parameters, or Megatron-Core's default where unset: max(4·10^7, 10^6 · dp · cp)
  // parameters, "larger DP sizes need larger buckets to ensure collectives do not become
  // latency-bound" (megatron/core/distributed/distributed_data_parallel_config.py, bucket_size;
  // the ranks counted with context parallelism, as DistributedDataParallel sizes it).
  int64_t bucket_parameters(const Parallelism& parallelism) const;
};

struct Simulation {
  Fidelity fidelity = Fidelity::kSymmetric;
  // `full` fidelity simulates one rank per orbit of the tp/cp/dp shifts it proves to be
  // symmetries of the run (sim/network/network_symmetry.h); false simulates every rank.
  bool fold_symmetric_peers = true;
};

struct Scenario {
  std::string name;
  std::string file;  // where it was read from ("" for text)
  ModelSpec model;
  ClusterSpec cluster;
  Parallelism parallelism;
  Training training;
  Simulation simulation;

  int num_gpus() const { return cluster.num_gpus(); }
  int64_t tokens_per_iteration() const { return training.global_batch * training.seq_len; }
  // The dtype of activations and of non-fp8 GEMMs.
  DType compute_dtype() const;
};

// Reads and validates a scenario mapping; errors name the file, line, column and field.
Scenario read_scenario(YamlMap& map);
Scenario load_scenario_file(const std::string& path);

// A scenario's training mapping read on its own (`map` at path "training"): each field checked as
// a scenario checks it, none against the parallelism.
Training read_training(YamlMap& map, const ModelSpec& model);

// A scenario's parallelism mapping read on its own (`map` at path "parallelism"): each field
// checked as a scenario checks it, none against the model, cluster or training.
Parallelism read_parallelism(YamlMap& map);

// A failure at a key of one mapping of the scenario, with its message.
using FailAt = std::function<void(std::string_view key, const std::string& message)>;

// The rules the parallelism's framework settings keep whatever the layout, failing through
// `fail_parallel` or `fail_training` (keys of those mappings): deduplicated expert exchanges count
// the draws that cover a token's groups (TokenRouting::covers_drawn_groups) for a top_k of at most
// 64; overlapped expert exchanges of a mixture-of-experts model need bf16, fp16 or fp8; all-reduced
// FSDP gradients take no mixture-of-experts model. A scenario checks them after its layout's
// rules, and a search, which chooses the layout, checks them alone.
void check_settings_for_model(const ModelSpec& model, const Training& training,
                              const Parallelism& parallelism, const FailAt& fail_parallel,
                              const FailAt& fail_training);

// Layers of each virtual stage when `layers_per_stage` is not given: an even split, extra layers
// to the inner stages first.
std::vector<int> default_layers_per_stage(int layers, int virtual_stages_total);

// Why `comm` cannot split this model's attention, run by `kernel`, over `cp` ranks at tensor
// parallelism `tp`: the parallelism field to blame and the message; none when it can.
struct LayoutProblem {
  std::string field;
  std::string message;
};
std::optional<LayoutProblem> context_parallel_problem(const ModelSpec& model, int tp, int cp, ContextComm comm,
                                                      AttentionKernel kernel, int64_t seq_len);

// `name` stands for the file in error messages.
Scenario load_scenario_text(const std::string& text, const std::string& name);

std::string to_string(Schedule schedule);
std::string to_string(Precision precision);
std::string to_string(Recompute recompute);
std::string to_string(RecomputeModule module);
std::string to_string(Fidelity fidelity);
std::string to_string(AttentionKernel kernel);
std::string to_string(ContextComm comm);
std::string to_string(TpOverlapMethod method);
std::string to_string(OptimizerKernels kernels);
std::string to_string(FsdpGather gather);
std::string to_string(TpImplementation implementation);
std::string to_string(FsdpGradientReduce reduce);
std::string to_string(Fusion fusion);
std::string to_string(MoeWeighting weighting);
std::string to_string(ExpertGemm gemm);
std::string to_string(TokenDispatcher dispatcher);
std::string to_string(RankDim dim);
// "tp-cp-dp-pp": the rank order as the scenario spells it.
std::string to_string(const std::vector<RankDim>& rank_order);

}  // namespace paceline

#endif  // PACELINE_SIM_SCENARIO_SCENARIO_H_
