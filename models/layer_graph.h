// LayerGraph: the operator DAG of one transformer block (or the embedding, or the output head
// with its loss) as one rank runs it — forward, recomputation and backward ops, with data
// dependencies as edges.
//
// The graph is built for a LayerShard: the micro-batch shape and the tensor, context and
// expert parallel degrees that split the block, so GEMM shapes, attention shapes, activation
// bytes and the collectives inside the block are the ones a rank really runs (Megatron-LM's
// column/row split with optional sequence parallelism; ring attention for context parallelism;
// all-to-all token dispatch for expert parallelism). Everything outside the block — pipeline
// stages, data-parallel reductions, schedules — belongs to sim/parallel.
//
// Ops are added in an order that is a valid execution order within each phase; edges carry
// the data dependencies (forward data flow, gradient flow, and each backward op's need for
// the recomputed forward op).
#ifndef PACELINE_MODELS_LAYER_GRAPH_H_
#define PACELINE_MODELS_LAYER_GRAPH_H_

#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "models/model_spec.h"
#include "models/op.h"

namespace paceline {

using OpId = uint32_t;

// What backward recomputes: nothing; parts of each layer (Megatron-LM's selective: by default the
// attention core; RecomputeModules); every op but
// the outputs torchtitan's per-operator policy keeps (kSelectiveOp: every other matmul, the
// attention kernel, reduce-scatters); or whole layers from their input.
enum class Recompute { kNone, kSelective, kSelectiveOp, kFull };

// The parts of a transformer layer selective recomputation recomputes (Megatron-Core's
// --recompute-modules). From the module's input, which it keeps: the attention core (the
// default), a dense layer's MLP with its fused norm, an MoE layer whole, or its shared experts.
// Discarding an output its readers kept and computing it again before their backward: the expert
// activation (with the weighting and fp8 cast after it), the norms Transformer Engine does not
// fuse into the GEMM after them (an MoE layer's pre-MLP norm, latent attention's input norm), or
// latent attention's up-projections with the rotary embedding, whose queries, keys and values
// the attention kernel kept. The first kRecomputeModuleCount are the ones a scenario names; a
// multi-token prediction module's two input norms, projection, layer and final norm are
// checkpointed as a module of their own when every layer is recomputed whole (Megatron-Core's
// MultiTokenPredictionLayer under the uniform method).
enum class RecomputeModule {
  kCoreAttention,
  kMlp,
  kMoe,
  kSharedExperts,
  kMoeActivation,
  kLayerNorm,
  kLatentUpProjection,
  kMultiTokenPrediction
};
inline constexpr int kRecomputeModuleCount = 7;

class RecomputeModules {
 public:
  constexpr RecomputeModules() = default;
  constexpr RecomputeModules(std::initializer_list<RecomputeModule> modules) {
    for (const RecomputeModule module : modules) add(module);
  }
  constexpr bool has(RecomputeModule module) const { return (bits_ & bit(module)) != 0; }
  constexpr void add(RecomputeModule module) { bits_ |= bit(module); }
  constexpr bool intersects(RecomputeModules other) const { return (bits_ & other.bits_) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool operator==(const RecomputeModules&) const = default;

 private:
  static constexpr uint32_t bit(RecomputeModule module) {
    return uint32_t{1} << static_cast<int>(module);
  }
  uint32_t bits_ = 0;
};
// What selective recomputation recomputes unless told: the attention core, as Megatron-Core does.
inline constexpr RecomputeModules kDefaultRecomputeModules = {RecomputeModule::kCoreAttention};

// How a stretch of elementwise work runs: as fused kernels (Transformer Engine, Apex,
// torch.compile), or as PyTorch eager mode runs it, one kernel per tensor operation with fp32
// intermediates.
enum class Fusion { kFused, kEager };

// Where an MoE layer scales each routed token by its router probability. On the token copies as
// they are combined after the experts (or before them, torchtitan's score_before_experts), whose
// backward keeps a copy of the routed tokens; or inside the experts' activation, whose backward
// keeps only the probabilities (Megatron-Core's TEGroupedMLP: weighted_bias_swiglu_impl when the
// activation is fused, the activation output times the probabilities otherwise).
enum class MoeWeighting { kTokens, kActivation };

// How the local experts' GEMMs run: a kernel per expert on several streams, as Transformer
// Engine's GroupedLinear (Megatron-Core's TEGroupedMLP) runs them by default, each paying a
// kernel's launch and tail; or one grouped kernel for them all (torch._grouped_mm in torchtitan,
// Transformer Engine's CUTLASS grouped GEMM under NVTE_USE_CUTLASS_GROUPED_GEMM=1).
enum class ExpertGemm { kPerExpert, kGrouped };

// How the expert-parallel exchanges send the routed tokens: a copy per (token, expert) in an
// NCCL all-to-all (Megatron-Core's alltoall dispatcher, torchtitan's all_to_all_single), or each
// token once per GPU and once per other NVLink domain that holds one of its experts, forwarded
// inside the domain (DeepEP's and HybridEP's dispatch and combine; hardware/collective_model.h).
enum class TokenDispatcher { kAllToAll, kDeduplicated };

// How context-parallel attention exchanges the sequence: keys and values passed around a ring
// step by step (Megatron-LM/Transformer Engine `p2p`), gathered once (`all_gather`, PyTorch's
// context parallel, whose backward gathers them again and passes the fp32 key/value gradients
// around the ring, one step per block), or all-to-alls that give each rank whole heads over the
// whole sequence (`a2a`, DeepSpeed-Ulysses).
enum class ContextComm { kRing, kAllGather, kAllToAll };

// What runs tensor-parallel collectives beside their GEMMs. Transformer Engine's userbuffers
// (`userbuffers`: Megatron-LM, NeMo) reduce-scatter in communication kernels that sum as they go.
// PyTorch's async TP (`async_tp`: torchtitan) copies each rank's GEMM output chunks to their
// owners with the copy engines and sums the tp chunks it holds in one kernel after the last.
enum class TpOverlapMethod { kUserbuffers, kAsyncTp };
// Whose tensor parallelism runs the block. Megatron-LM's column-parallel GEMM keeps its input's
// sequence shard under sequence parallelism and gathers it again for the weight gradient, and
// issues its input gradient's collective before the weight gradient, which runs beside it.
// PyTorch's (DTensor: ColwiseParallel after a redistribution of the sequence shards) keeps the
// gathered input, and each redistribution is an autograd function of its own, issued after the
// linear's backward, weight gradient included.
enum class TpImplementation { kMegatron, kPytorch };

// How one rank sees a block.
struct LayerShard {
  int64_t micro_batch = 1;
  int64_t seq_len = 0;     // the full training sequence
  int tp = 1;              // tensor parallel
  int cp = 1;              // context parallel
  ContextComm cp_comm = ContextComm::kRing;
  // The ring's and the gather's exchanges run beside the attention blocks; false: each is waited
  // for where it is issued, before the next block starts, forward and backward.
  bool cp_comm_overlap = true;
  int ep = 1;              // expert parallel
  // The experts' weight gradients wait until the dispatch's gradient exchange is issued and run
  // beside it (Transformer Engine's delay_wgrad_compute, which Megatron-Core's expert-parallel
  // communication overlap pairs with).
  bool delay_expert_weight_gradients = false;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // sequence-parallel collectives in chunks beside their GEMMs
  TpOverlapMethod tp_comm_overlap_method = TpOverlapMethod::kUserbuffers;
  TpImplementation tp_implementation = TpImplementation::kMegatron;
  DType activation_dtype = DType::kBf16;  // bf16 or fp16 activations and weights
  bool fp8 = false;        // block GEMMs in fp8 (Transformer Engine style), with casts
  Recompute recompute = Recompute::kNone;
  // Under selective recompute, what it recomputes.
  RecomputeModules recompute_modules = kDefaultRecomputeModules;
  AttentionKernel attention_kernel = AttentionKernel::kFlash;
  bool repeat_kv = false;  // keys and values copied out to the query heads before the attention call
  // Queries, keys and values (a gated MLP's gate and up) projected by a linear each, whose input
  // gradients backward sums; their GEMMs are timed as one.
  bool separate_projections = false;
  MoeWeighting moe_weighting = MoeWeighting::kTokens;
  ExpertGemm expert_gemm = ExpertGemm::kPerExpert;
  TokenDispatcher ep_dispatcher = TokenDispatcher::kAllToAll;
  Fusion fusion = Fusion::kFused;  // norms, rotary embedding and gated activations
  // The loss: one vocab-parallel softmax cross-entropy kernel over an fp32 copy of the logits
  // (Megatron-LM), or PyTorch's log_softmax then nll_loss on it.
  Fusion cross_entropy = Fusion::kFused;
  // The output head runs on another pipeline stage than the embedding: with tied embeddings or
  // multi-token prediction it keeps its own copy of the word embedding (Megatron-LM's), whose
  // gradient is summed with the first stage's.
  bool head_apart_from_embedding = false;
  // The persistent buffer that weight-gradient GEMMs add into, in its dtype (Megatron-LM's
  // gradient-accumulation fusion into main_grad). None under FSDP, or where each micro-batch's
  // gradients are reduced: autograd's weight gradient is a fresh tensor in the activation dtype.
  std::optional<DType> gradient_buffer;
};

class LayerGraph {
 public:
  // The graph's edge list is a vector, one allocation per growth rather than one per edge: edges
  // are never removed (erasing one would shift the indices the others are stored by).
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Op, boost::no_property,
                                      boost::no_property, boost::vecS>;

  const Graph& graph() const { return graph_.get(); }
  size_t num_ops() const { return boost::num_vertices(graph_.get()); }
  const Op& op(OpId id) const { return graph_.get()[id]; }
  // Ops that must finish before `id` (within this graph), in the order they were declared.
  std::vector<OpId> predecessors(OpId id) const;
  // Ops of a phase in execution order.
  const std::vector<OpId>& ops(Phase phase) const { return by_phase_[static_cast<int>(phase)]; }

  // Forward ops that read the block's input (they wait for the previous block's output).
  std::vector<OpId> forward_entries() const;
  // The forward op producing the block's output.
  OpId forward_exit() const { return forward_exit_; }
  // Recompute/backward ops that need the gradient of the block's output.
  std::vector<OpId> backward_entries() const;
  // Input-gradient ops producing the gradient of the block's input, and those that end in a
  // gradient of no input (a multi-token prediction module's embedding lookup, inside the head).
  std::vector<OpId> backward_exits() const;

  // Totals over a phase.
  Flop flop(Phase phase) const;
  // Activations kept from forward to backward (sum of `saved` of forward ops).
  Bytes saved_activations() const;
  // Parameters this rank holds for the block (after TP/EP sharding).
  int64_t parameters = 0;
  // Parameters of the block before sharding and of one token's path (for MoE: active experts).
  int64_t parameters_total = 0;
  // Elements of each weight tensor this rank holds of the block (after TP/EP sharding), one per
  // module parameter: norm weights and biases, the fused QKV projection, each MLP or expert
  // projection and its bias, the embedding table. A per-tensor optimizer loop sizes its
  // temporaries by the largest; a per-tensor parameter gather moves them one at a time.
  std::vector<int64_t> weight_tensors;
  int64_t largest_weight() const;
  // Of `parameters`, the weights every tensor-parallel rank holds whole but trains on a part of
  // the work: under sequence parallelism on its own tokens (norms, an MoE router, multi-head
  // latent attention's down-projections and their norms), and QK-norm on its own heads. Their
  // gradients are summed over the tensor-parallel group before the step (Megatron-LM's
  // finalize_model_grads).
  int64_t tp_summed_parameters = 0;
  // Of `parameters`, the routed experts' weights (reduced over the expert-data group).
  int64_t expert_parameters = 0;
  // The weights this rank holds of GEMMs that run in fp8 (not the embedding, output head, norms
  // or router, which stay in 16 or 32 bits): Transformer Engine keeps an fp8 copy of each.
  int64_t fp8_gemm_parameters = 0;
  // Of `fp8_gemm_parameters`, the routed experts' weights.
  int64_t fp8_gemm_expert_parameters = 0;
  // The whole forward runs again before the backward (full recompute): every weight is used
  // twice before its backward use.
  bool recomputed_whole = false;

 private:
  friend class LayerGraphBuilder;
  Op& mutable_op(OpId id) { return graph_.get()[id]; }
  // Boost 1.74's adjacency_list has a copy constructor, no move constructor, and a swap that
  // copies three times: a defaulted move of a LayerGraph would copy its graph vertex by vertex.
  // Held by pointer, the graph moves in O(1) and without throwing; a moved-from LayerGraph has
  // no ops.
  class MovableGraph {
   public:
    MovableGraph() : graph_(std::make_unique<Graph>()) {}
    MovableGraph(const MovableGraph& other) : graph_(std::make_unique<Graph>(other.get())) {}
    MovableGraph& operator=(const MovableGraph& other) {
      if (this != &other) graph_ = std::make_unique<Graph>(other.get());
      return *this;
    }
    MovableGraph(MovableGraph&&) noexcept = default;
    MovableGraph& operator=(MovableGraph&&) noexcept = default;
    Graph& get() {
      if (!graph_) graph_ = std::make_unique<Graph>();
      return *graph_;
    }
    const Graph& get() const {
      static const Graph kEmpty;
      return graph_ ? *graph_ : kEmpty;
    }

   private:
    std::unique_ptr<Graph> graph_;
  };
  MovableGraph graph_;
  std::vector<OpId> by_phase_[4];
  OpId forward_exit_ = 0;
};
// Containers of graphs move them rather than copy them as they grow.
static_assert(std::is_nothrow_move_constructible_v<LayerGraph>);

// One transformer block. `moe` selects the mixture-of-experts feed-forward.
LayerGraph build_transformer_layer(const ModelSpec& model, const LayerShard& shard, bool moe);
// Token (and learned position) embedding, vocab-parallel over TP.
LayerGraph build_embedding(const ModelSpec& model, const LayerShard& shard);
// The model's multi-token prediction modules (ModelSpec::mtp_layers), then the final norm, output
// projection (vocab-parallel over TP) and softmax cross-entropy loss.
LayerGraph build_output_head(const ModelSpec& model, const LayerShard& shard);
// Where the head sits apart from the embedding (LayerShard::head_apart_from_embedding), it
// keeps a copy of the word embedding for tied embeddings' output projection or for multi-token
// prediction's lookups, whose gradient is summed with the embedding's.
bool head_copies_word_embedding(const ModelSpec& model);
// The head's weights of the word embedding's size, whole (before tensor parallelism): the
// model's own output projection, and the copy of the embedding where it keeps one.
int64_t head_vocabulary_parameters(const ModelSpec& model, bool apart_from_embedding);

}  // namespace paceline

#endif  // PACELINE_MODELS_LAYER_GRAPH_H_
