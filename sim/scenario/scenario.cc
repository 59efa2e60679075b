#include "sim/scenario/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "base/yaml_reader.h"
#include "hardware/collective_model.h"
#include "models/model_catalog.h"

namespace paceline {
namespace {

// FlashAttention-2, FlashAttention-3 and FlashAttention in Triton are timed from their own
// catalog efficiencies and take heads up to their kernels' widths; Triton's kernel reads keys
// and values for every query head.
void check_attention_kernel(const Scenario& s, YamlMap& training) {
  const AttentionKernel kernel = s.training.attention;
  if (s.model.mla && kernel != AttentionKernel::kFlash && kernel != AttentionKernel::kFlash3) {
    training.fail("attention", fmt::format("= {} does not run multi-head latent attention, whose values are not "
                                           "as wide as its queries and keys (model.mla.v_head_dim {} against "
                                           "head_dim {}); use flash (cuDNN's, which Megatron-Core runs for it) or "
                                           "flash3",
                                           to_string(kernel), s.model.mla->v_head_dim, s.model.head_dim));
  }
  // Latent attention has no unfused form here.
  const std::string_view instead = s.model.mla ? "flash" : "flash or unfused";
  if (kernel == AttentionKernel::kFlash || kernel == AttentionKernel::kUnfused) return;
  const bool triton = kernel == AttentionKernel::kFlashTriton;
  const std::string name = to_string(kernel);
  const std::string what = triton                              ? "FlashAttention in Triton"
                           : kernel == AttentionKernel::kFlash3 ? "FlashAttention-3"
                                                                : "FlashAttention-2";
  if (s.cluster.gpu.kernels.attention(kernel).forward == 0.0) {
    training.fail("attention", fmt::format("= {} needs {}'s efficiencies for {}; its catalog entry has none "
                                           "(kernels.attention.{}_forward_efficiency); use {}",
                                           name, what, s.cluster.gpu.name, name, instead));
  }
  const int64_t max_head_dim = attention_kernel_max_head_dim(kernel);
  const int64_t widest = std::max(s.model.head_dim, s.model.value_head_dim());
  if (widest > max_head_dim) {
    training.fail("attention", fmt::format("= {} runs head dims up to {}; the model's is {}; use {}", name,
                                           max_head_dim, widest, instead));
  }
  if (triton && s.model.kv_heads != s.model.heads && !s.training.repeat_kv) {
    training.fail("attention", fmt::format("= flash_triton reads keys and values for every query head; the model has "
                                           "{} of {} (set training.repeat_kv: true, as a caller of this kernel must)",
                                           s.model.kv_heads, s.model.heads));
  }
}

int at_least_one(YamlMap& map, std::string_view key, int fallback) {
  const int value = map.get<int>(key, fallback);
  if (value < 1) map.fail(key, fmt::format("= {} must be at least 1", value));
  return value;
}

std::vector<RankDim> read_rank_order(YamlMap& map) {
  const std::string text = map.get<std::string>("rank_order", "tp-cp-dp-pp");
  std::vector<RankDim> order;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('-', start), text.size());
    const std::string part = text.substr(start, end - start);
    const std::optional<RankDim> dim = part == "tp"   ? std::optional(RankDim::kTensor)
                                       : part == "cp" ? std::optional(RankDim::kContext)
                                       : part == "dp" ? std::optional(RankDim::kData)
                                       : part == "pp" ? std::optional(RankDim::kPipeline)
                                                      : std::nullopt;
    if (!dim) {  // any other part (ep, a typo, an empty one) makes it no order
      order.clear();
      break;
    }
    order.push_back(*dim);
    start = end + 1;
  }
  std::vector<RankDim> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<RankDim>{RankDim::kTensor, RankDim::kContext, RankDim::kData, RankDim::kPipeline}) {
    map.fail("rank_order", fmt::format("= '{}' is not an order of tp, cp, dp and pp, innermost first "
                                       "(e.g. tp-cp-dp-pp)", text));
  }
  return order;
}

Parallelism read_parallelism_fields(YamlMap& map, bool& dp_given) {
  Parallelism p;
  p.tp = at_least_one(map, "tp", 1);
  p.pp = at_least_one(map, "pp", 1);
  p.cp = at_least_one(map, "cp", 1);
  const std::string cp_comm = map.choice("cp_comm", {"p2p", "all_gather", "a2a"}, "p2p");
  p.cp_comm = cp_comm == "all_gather" ? ContextComm::kAllGather
              : cp_comm == "a2a"      ? ContextComm::kAllToAll
                                      : ContextComm::kRing;
  p.cp_comm_overlap = map.get<bool>("cp_comm_overlap", true);
  p.ep = at_least_one(map, "ep", 1);
  p.ep_comm_overlap = map.get<bool>("ep_comm_overlap", false);
  p.ep_dispatcher =
      map.choice("ep_dispatcher", {"all_to_all", "deduplicated"}, "all_to_all") == "deduplicated"
          ? TokenDispatcher::kDeduplicated
          : TokenDispatcher::kAllToAll;
  dp_given = map.has("dp");
  p.dp = dp_given ? at_least_one(map, "dp", 1) : 1;
  p.virtual_stages = at_least_one(map, "virtual_stages", 1);
  const std::string schedule = map.choice("schedule", {"gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"},
                                          p.virtual_stages > 1 ? "interleaved-1f1b" : "1f1b");
  p.schedule = schedule == "gpipe"              ? Schedule::kGpipe
               : schedule == "interleaved-1f1b" ? Schedule::kInterleavedOneFOneB
               : schedule == "zero-bubble"      ? Schedule::kZeroBubble
                                                : Schedule::kOneFOneB;
  p.sequence_parallel = map.get<bool>("sequence_parallel", p.tp > 1);
  p.tp_comm_overlap = map.get<bool>("tp_comm_overlap", false);
  const std::string implementation =
      map.choice("tp_implementation", {"megatron", "pytorch"}, "megatron");
  p.tp_implementation =
      implementation == "pytorch" ? TpImplementation::kPytorch : TpImplementation::kMegatron;
  // Each tensor parallelism overlaps its collectives its own way: Megatron-LM's with Transformer
  // Engine's userbuffers, PyTorch's with its async TP.
  const std::string own_method = implementation == "pytorch" ? "async_tp" : "userbuffers";
  const std::string method =
      map.choice("tp_comm_overlap_method", {"userbuffers", "async_tp"}, own_method);
  p.tp_comm_overlap_method =
      method == "async_tp" ? TpOverlapMethod::kAsyncTp : TpOverlapMethod::kUserbuffers;
  if (map.has("tp_comm_overlap_method") && !p.tp_comm_overlap) {
    map.fail("tp_comm_overlap_method",
             fmt::format("= {} applies to tp_comm_overlap: true only", method));
  }
  if (method != own_method) {
    map.fail("tp_comm_overlap_method",
             fmt::format("= {} applies to tp_implementation: {} only (here {})", method,
                         method == "async_tp" ? "pytorch" : "megatron", implementation));
  }
  p.zero = map.get<int>("zero", 0);
  if (p.zero < 0 || p.zero > 3) {
    map.fail("zero", fmt::format("= {} is out of range; expected 0 (none), 1 (optimizer states), 2 (+ gradients) "
                                 "or 3 (+ parameters, FSDP)", p.zero));
  }
  p.zero_shard = map.get<int>("zero_shard", 0);
  // The ZeRO-3 fields act on the per-block, per-micro-batch gathers and reductions, which
  // pipelining does not have.
  const auto require_fsdp = [&](const char* field, const auto& value) {
    if (map.has(field) && (p.zero != 3 || p.pp > 1)) {
      map.fail(field, fmt::format("= {} needs zero: 3 without pipelining (weights gathered and gradients reduced per "
                                  "block and micro-batch); here zero = {}, pp = {}", value, p.zero, p.pp));
    }
  };
  p.fsdp_prefetch = map.get<int>("fsdp_prefetch", 1);
  if (map.has("fsdp_prefetch") && p.fsdp_prefetch < 0) {
    map.fail("fsdp_prefetch", fmt::format("= {} is negative; expected the number of blocks gathered ahead (0: "
                                          "each block's weights gathered when it starts)", p.fsdp_prefetch));
  }
  require_fsdp("fsdp_prefetch", p.fsdp_prefetch);
  const std::string gather =
      map.choice("fsdp_gather", {"block", "tensor", "per_parameter"}, "block");
  p.fsdp_gather = gather == "tensor"          ? FsdpGather::kTensor
                  : gather == "per_parameter" ? FsdpGather::kPerParameter
                                              : FsdpGather::kBlock;
  // PyTorch FSDP2 shards per parameter under pipelining too (torchtitan's 3D runs): there each
  // block's weights are gathered once a step.
  if (gather == "per_parameter" && map.has("fsdp_gather") && p.zero != 3) {
    map.fail("fsdp_gather",
             fmt::format("= per_parameter needs zero: 3 (weights sharded, PyTorch FSDP2); here "
                         "zero = {}",
                         p.zero));
  } else if (gather != "per_parameter") {
    require_fsdp("fsdp_gather", gather);
  }
  const std::string reduce = map.choice("fsdp_gradient_reduce", {"reduce_scatter", "all_reduce"}, "reduce_scatter");
  p.fsdp_gradient_reduce =
      reduce == "all_reduce" ? FsdpGradientReduce::kAllReduce : FsdpGradientReduce::kReduceScatter;
  require_fsdp("fsdp_gradient_reduce", reduce);
  if (p.fsdp_gather == FsdpGather::kPerParameter &&
      p.fsdp_gradient_reduce == FsdpGradientReduce::kAllReduce) {
    map.fail("fsdp_gradient_reduce",
             "= all_reduce (DeepSpeed's ZeRO-3 buckets) does not go with fsdp_gather: "
             "per_parameter (PyTorch FSDP2, which reduce-scatters each block's gradients); "
             "use reduce_scatter");
  }
  // DeepSpeed's per-tensor gather settings: element counts, for fsdp_gather: tensor only.
  const auto tensor_gather_elements = [&](const char* field, int64_t fallback, std::string_view expected) {
    const int64_t value = map.get<int64_t>(field, fallback);
    if (!map.has(field)) return value;
    if (p.fsdp_gather != FsdpGather::kTensor) {
      map.fail(field, fmt::format("= {} applies to fsdp_gather: tensor only; here fsdp_gather = {}", value,
                                  to_string(p.fsdp_gather)));
    }
    if (value < 0) map.fail(field, fmt::format("= {} is negative; expected {}", value, expected));
    return value;
  };
  p.fsdp_persistence_threshold = tensor_gather_elements("fsdp_persistence_threshold", 100000,
                                                        "the elements up to which a tensor is not gathered");
  p.fsdp_reuse_distance = tensor_gather_elements(
      "fsdp_reuse_distance", 1000000000,
      "the elements of other weights used in between below which a gathered tensor is kept for its next use");
  if (map.has("layers_per_stage")) {
    p.layers_per_stage = map.list<int>("layers_per_stage", "must be a list of layer counts, one per pipeline stage");
    if (std::ranges::any_of(p.layers_per_stage, [](int layers) { return layers < 0; })) {
      map.fail("layers_per_stage", "layer counts must not be negative");
    }
  }
  p.rank_order = read_rank_order(map);
  map.finish();
  return p;
}

}  // namespace

Training read_training(YamlMap& map, const ModelSpec& model) {
  Training t;
  // Bounded so that tokens per step and micro_batch·dp stay exact in 64 bits.
  const auto within = [&](std::string_view key, int64_t value, int64_t most, std::string_view most_name) {
    if (value < 1) map.fail(key, fmt::format("= {} must be at least 1", value));
    if (value > most) map.fail(key, fmt::format("= {} is more than {}{}", value, most_name, most));
    return value;
  };
  t.global_batch = within("global_batch", map.required<int64_t>("global_batch"), INT32_MAX, "");
  t.micro_batch = within("micro_batch", map.get<int64_t>("micro_batch", 1), t.global_batch, "global_batch = ");
  // The model's context by default, or its sliding window where that is shorter.
  const int64_t default_seq_len =
      model.attention_window > 0 ? std::min(model.seq_len, model.attention_window) : model.seq_len;
  t.seq_len = within("seq_len", map.get<int64_t>("seq_len", default_seq_len), INT32_MAX, "");
  if (model.attention_window > 0 && t.seq_len > model.attention_window) {
    map.fail("seq_len",
             fmt::format(
                 "= {} exceeds model {}'s sliding attention window of {} tokens: paceline models "
                 "full causal attention only, so a sequence must fit in the window",
                 t.seq_len, model.name, model.attention_window));
  }
  if (model.position == Position::kLearned && t.seq_len > model.seq_len) {
    map.fail("seq_len", fmt::format("= {} exceeds the learned position table of model {} ({} positions)", t.seq_len,
                                    model.name, model.seq_len));
  }
  const std::string precision = map.choice("precision", {"fp32", "fp16", "bf16", "fp8"}, "bf16");
  t.precision = precision == "fp32"   ? Precision::kFp32
                : precision == "fp16" ? Precision::kFp16
                : precision == "fp8"  ? Precision::kFp8
                                      : Precision::kBf16;
  const std::string recompute = map.choice("recompute", {"none", "selective", "selective-op", "full"}, "none");
  t.recompute = recompute == "full"           ? Recompute::kFull
                : recompute == "selective"    ? Recompute::kSelective
                : recompute == "selective-op" ? Recompute::kSelectiveOp
                                              : Recompute::kNone;
  if (map.has("recompute_layers")) {
    t.recompute_layers = map.required<int>("recompute_layers");
    if (t.recompute_layers < 1) {
      map.fail("recompute_layers", fmt::format("= {} must be at least 1 (the layers of each model chunk "
                                               "recomputed, counted from its first)",
                                               t.recompute_layers));
    }
    if (t.recompute != Recompute::kFull) {
      map.fail("recompute_layers", fmt::format("= {} counts the layers full recomputation covers; it needs "
                                               "training.recompute: full (here {})",
                                               t.recompute_layers, recompute));
    }
  }
  if (map.has("recompute_modules")) {
    const std::vector<std::string> names = map.list<std::string>(
        "recompute_modules", "must be a list of layer parts, e.g. [core_attn, moe_act]");
    // As in Megatron-Core they act under selective recomputation only, so that a sweep or search
    // over recompute keeps them for its selective points.
    t.recompute_modules = {};
    for (const std::string& name : names) {
      std::optional<RecomputeModule> module;
      for (int i = 0; i < kRecomputeModuleCount; ++i) {
        if (to_string(static_cast<RecomputeModule>(i)) == name)
          module = static_cast<RecomputeModule>(i);
      }
      if (!module) {
        std::vector<std::string> known;
        for (int i = 0; i < kRecomputeModuleCount; ++i)
          known.push_back(to_string(static_cast<RecomputeModule>(i)));
        map.fail("recompute_modules", fmt::format("names '{}', not a layer part; allowed: {}",
                                                  echoed(name), fmt::join(known, ", ")));
      }
      if (t.recompute_modules.has(*module))
        map.fail("recompute_modules", fmt::format("names {} twice", echoed(name)));
      t.recompute_modules.add(*module);
    }
    if (t.recompute_modules.has(RecomputeModule::kLatentUpProjection) && !model.mla) {
      map.fail("recompute_modules",
               fmt::format("names mla_up_proj, the up-projections of latent attention, which "
                           "model {} does not have (no model.mla)",
                           model.name));
    }
    if (t.recompute_modules.has(RecomputeModule::kMoe) &&
        t.recompute_modules.has(RecomputeModule::kSharedExperts)) {
      map.fail("recompute_modules",
               "names moe and shared_experts: recomputing an MoE layer recomputes its shared "
               "experts (Megatron-Core's nested checkpoint runs them a third time); name one");
    }
  }
  t.activation_offload_layers = map.get<int>("activation_offload_layers", 0);
  if (t.activation_offload_layers < 0 || t.activation_offload_layers >= model.layers) {
    map.fail("activation_offload_layers",
             fmt::format("= {} must be from 0 to model.layers - 1 = {} (Megatron-Core offloads at most all layers "
                         "but the last)",
                         t.activation_offload_layers, model.layers - 1));
  }
  const std::string attention =
      map.choice("attention", {"flash", "flash2", "flash3", "flash_triton", "unfused"}, "flash");
  t.attention = attention == "unfused"        ? AttentionKernel::kUnfused
                : attention == "flash2"       ? AttentionKernel::kFlash2
                : attention == "flash3"       ? AttentionKernel::kFlash3
                : attention == "flash_triton" ? AttentionKernel::kFlashTriton
                                              : AttentionKernel::kFlash;
  t.repeat_kv = map.get<bool>("repeat_kv", false);
  t.separate_projections = map.get<bool>("separate_projections", false);
  const std::string weighting = map.choice("moe_weighting", {"tokens", "activation"}, "tokens");
  t.moe_weighting = weighting == "activation" ? MoeWeighting::kActivation : MoeWeighting::kTokens;
  t.expert_gemm = map.choice("expert_gemm", {"per_expert", "grouped"}, "per_expert") == "grouped"
                      ? ExpertGemm::kGrouped
                      : ExpertGemm::kPerExpert;
  const auto fusion = [&](std::string_view key) {
    return map.choice(key, {"fused", "eager"}, "fused") == "eager" ? Fusion::kEager : Fusion::kFused;
  };
  t.fusion = fusion("fusion");
  t.cross_entropy = fusion("cross_entropy");
  t.gradients_in_bf16 = map.choice("gradient_dtype", {"fp32", "bf16"}, "fp32") == "bf16";
  if (t.gradients_in_bf16 && t.precision == Precision::kFp32) {
    map.fail("gradient_dtype", "= bf16 needs 16-bit training (precision fp16, bf16 or fp8; here fp32)");
  }
  t.fp8_param_gather = map.get<bool>("fp8_param_gather", false);
  if (t.fp8_param_gather && t.precision != Precision::kFp8) {
    map.fail("fp8_param_gather", fmt::format("= true keeps fp8 weights; it needs precision fp8 (here {})", precision));
  }
  const std::string optimizer = map.choice("optimizer", {"adam", "sgd"}, "adam");
  t.optimizer = optimizer == "sgd" ? Optimizer::kSgd : Optimizer::kAdam;
  const std::string kernels = map.choice("optimizer_kernels", {"fused", "unfused", "for_loop"}, "fused");
  t.optimizer_kernels = kernels == "unfused"    ? OptimizerKernels::kUnfused
                        : kernels == "for_loop" ? OptimizerKernels::kForLoop
                                                : OptimizerKernels::kFused;
  t.overlap_grad_reduce = map.get<bool>("overlap_grad_reduce", true);
  t.overlap_param_gather = map.get<bool>("overlap_param_gather", true);
  if (map.has("grad_bucket_parameters")) {
    t.grad_bucket_parameters = map.required<int64_t>("grad_bucket_parameters");
    if (*t.grad_bucket_parameters < 1) map.fail("grad_bucket_parameters", "must be at least 1");
  }
  map.finish();
  return t;
}

namespace {

// Cross-field rules, each reported at the field a user would change.
void validate(Scenario& s, YamlMap& root, YamlMap* parallelism, YamlMap& training, bool dp_given) {
  Parallelism& p = s.parallelism;
  const ModelSpec& m = s.model;
  auto fail_parallel = [&](std::string_view key, const std::string& message) {
    if (parallelism) parallelism->fail(key, message);
    root.fail("parallelism", message);
  };
  const int gpus = s.num_gpus();
  // No degree exceeds the GPUs (at most kMostGpus), so their products are exact in 64 bits.
  for (const auto& [key, degree] : {std::pair{"tp", p.tp}, {"pp", p.pp}, {"cp", p.cp}, {"dp", p.dp}, {"ep", p.ep}}) {
    if (degree > gpus) fail_parallel(key, fmt::format("= {} is more than the cluster's {} GPUs", degree, gpus));
  }
  const int64_t model_parallel = int64_t{p.tp} * p.pp * p.cp;
  if (dp_given) {
    if (model_parallel * p.dp != gpus) {
      fail_parallel("dp", fmt::format("= {}: tp·pp·cp·dp = {}·{}·{}·{} = {} but the cluster has {} GPUs", p.dp, p.tp,
                                      p.pp, p.cp, p.dp, model_parallel * p.dp, gpus));
    }
  } else if (gpus % model_parallel != 0) {
    // Blamed: a degree that alone does not divide the GPUs, else the last one above 1.
    std::pair<const char*, int> blamed{"tp", p.tp};
    const std::pair<const char*, int> degrees[] = {{"tp", p.tp}, {"pp", p.pp}, {"cp", p.cp}};
    for (const auto& degree : degrees) {
      if (degree.second > 1) blamed = degree;
    }
    for (const auto& degree : degrees) {
      if (gpus % degree.second != 0) {
        blamed = degree;
        break;
      }
    }
    fail_parallel(blamed.first, fmt::format("= {}: tp·pp·cp = {}·{}·{} = {} does not divide the cluster's {} GPUs",
                                            blamed.second, p.tp, p.pp, p.cp, model_parallel, gpus));
  } else {
    p.dp = gpus / model_parallel;
  }
  if (m.heads % p.tp != 0) fail_parallel("tp", fmt::format("= {} does not divide model.heads = {}", p.tp, m.heads));
  if (m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0) {
    fail_parallel("tp", fmt::format("= {} and model.kv_heads = {}: one must divide the other", p.tp, m.kv_heads));
  }
  if (m.ffn_hidden % p.tp != 0) {
    fail_parallel("tp", fmt::format("= {} does not divide model.ffn_hidden = {}", p.tp, m.ffn_hidden));
  }
  if (p.tp_implementation != TpImplementation::kMegatron && p.tp == 1) {
    fail_parallel("tp_implementation",
                  fmt::format("= {} applies to tp > 1 only", to_string(p.tp_implementation)));
  }
  if (p.tp_comm_overlap && (p.tp == 1 || !p.sequence_parallel)) {
    fail_parallel("tp_comm_overlap", fmt::format("= true needs tp > 1 and sequence_parallel (here tp = {}, "
                                                 "sequence_parallel = {}): the overlapped collectives are the "
                                                 "sequence-parallel ones", p.tp, p.sequence_parallel));
  }
  if (p.tp == 1) p.sequence_parallel = false;
  if (p.ep > 1) {
    if (!m.moe) fail_parallel("ep", fmt::format("= {} needs a mixture-of-experts model; {} is dense", p.ep, m.name));
    if (m.moe->experts % p.ep != 0) {
      fail_parallel("ep", fmt::format("= {} does not divide model.moe.experts = {}", p.ep, m.moe->experts));
    }
    if ((int64_t{p.tp} * p.dp * p.cp) % p.ep != 0) {
      fail_parallel("ep", fmt::format("= {} does not divide tp·dp·cp = {} (expert layers fold their expert-parallel "
                                      "groups over the ranks of a pipeline stage)", p.ep, int64_t{p.tp} * p.dp * p.cp));
    }
  }
  if (p.ep_dispatcher == TokenDispatcher::kDeduplicated && p.ep == 1) {
    fail_parallel(
        "ep_dispatcher",
        "= deduplicated needs ep > 1: it sends the tokens of the expert-parallel exchanges");
  }
  if (p.ep_comm_overlap) {
    if (p.ep == 1) fail_parallel("ep_comm_overlap", "= true needs ep > 1: it overlaps the expert-parallel all-to-alls");
    if (p.schedule != Schedule::kOneFOneB && p.schedule != Schedule::kInterleavedOneFOneB) {
      fail_parallel("ep_comm_overlap", fmt::format("= true pairs the forwards and backwards of 1f1b or "
                                                   "interleaved-1f1b; schedule is {}", to_string(p.schedule)));
    }
    // Paired, a stage sends a gradient on only after the forward beside it: with one chunk per
    // stage the stages would take turns.
    if (p.pp > 1 && p.virtual_stages == 1) {
      fail_parallel("ep_comm_overlap", fmt::format("= true with pp = {} needs interleaved-1f1b (virtual_stages > 1), "
                                                   "as Megatron-Core requires", p.pp));
    }
    if (p.zero >= 3) {
      fail_parallel("ep_comm_overlap", fmt::format("= true is not modelled with zero = {} (weights gathered per "
                                                   "block); use zero 0 to 2", p.zero));
    }
    if (s.training.recompute == Recompute::kFull) {
      training.fail("recompute", "= full cannot run with parallelism.ep_comm_overlap (Megatron-Core refuses it too)");
    }
  }
  // Megatron-LM gathers fp8 weights only from the distributed optimizer or FSDP, whose step
  // writes them from the fp32 master shards.
  if (s.training.fp8_param_gather && p.zero < 1) {
    training.fail("fp8_param_gather", fmt::format("= true needs parallelism.zero 1 or more (the distributed optimizer "
                                                  "or FSDP gathers the fp8 weights); here zero = {}", p.zero));
  }
  check_settings_for_model(m, s.training, p, fail_parallel,
                           [&training](std::string_view key, const std::string& message) {
                             training.fail(key, message);
                           });
  if (!m.moe && s.training.moe_weighting != MoeWeighting::kTokens) {
    training.fail("moe_weighting", fmt::format("= activation applies to mixture-of-experts models; {} is dense",
                                               m.name));
  }
  if (!m.moe && s.training.expert_gemm != ExpertGemm::kPerExpert) {
    training.fail(
        "expert_gemm",
        fmt::format("= grouped applies to mixture-of-experts models; {} is dense", m.name));
  }
  if (m.moe && p.tp > 1 && !p.sequence_parallel) {
    fail_parallel("sequence_parallel", "must be true for a mixture-of-experts model with tp > 1");
  }
  const Training& t = s.training;
  if (p.cp_comm != ContextComm::kRing && p.cp == 1) {
    fail_parallel("cp_comm", fmt::format("= {} needs cp > 1 (here cp = 1)", to_string(p.cp_comm)));
  }
  if (!p.cp_comm_overlap && p.cp == 1) fail_parallel("cp_comm_overlap", "= false needs cp > 1 (here cp = 1)");
  if (!p.cp_comm_overlap && p.cp_comm == ContextComm::kAllToAll) {
    fail_parallel("cp_comm_overlap", "= false applies to cp_comm p2p and all_gather: a2a's all-to-alls never run "
                                     "beside the attention");
  }
  if (const auto problem = context_parallel_problem(m, p.tp, p.cp, p.cp_comm, t.attention, t.seq_len)) {
    fail_parallel(problem->field, problem->message);
  }
  if (p.sequence_parallel && (t.micro_batch * (t.seq_len / p.cp)) % p.tp != 0) {
    fail_parallel("sequence_parallel", fmt::format("needs micro_batch·seq_len/cp = {} divisible by tp = {}",
                                                   t.micro_batch * (t.seq_len / p.cp), p.tp));
  }
  // Pipeline: stages, virtual stages, schedule.
  if (p.virtual_stages > m.layers) {
    fail_parallel("virtual_stages", fmt::format("= {} exceeds model.layers = {}", p.virtual_stages, m.layers));
  }
  const int virtual_total = p.pp * p.virtual_stages;
  if (p.virtual_stages > 1 && p.pp == 1) {
    fail_parallel("virtual_stages", fmt::format("= {} needs pp > 1", p.virtual_stages));
  }
  if (p.virtual_stages > 1 && p.schedule != Schedule::kInterleavedOneFOneB) {
    fail_parallel("schedule", fmt::format("= {} runs one model chunk per stage; virtual_stages = {} needs "
                                          "interleaved-1f1b", to_string(p.schedule), p.virtual_stages));
  }
  if (p.schedule == Schedule::kInterleavedOneFOneB && p.virtual_stages == 1) {
    // Only a schedule given as interleaved-1f1b can be: the default is when virtual_stages > 1.
    fail_parallel("schedule", "= interleaved-1f1b needs virtual_stages > 1");
  }
  if (!p.layers_per_stage.empty()) {
    if (static_cast<int>(p.layers_per_stage.size()) != virtual_total) {
      fail_parallel("layers_per_stage", fmt::format("has {} entries; expected pp·virtual_stages = {}",
                                                    p.layers_per_stage.size(), virtual_total));
    }
    const int sum = std::accumulate(p.layers_per_stage.begin(), p.layers_per_stage.end(), 0);
    if (sum != m.layers) {
      fail_parallel("layers_per_stage", fmt::format("sums to {} layers; model {} has {}", sum, m.name, m.layers));
    }
  } else if (m.layers < virtual_total) {
    fail_parallel("pp", fmt::format("= {}: pp·virtual_stages = {} exceeds model.layers = {}", p.pp, virtual_total,
                                    m.layers));
  } else {
    p.layers_per_stage = default_layers_per_stage(m.layers, virtual_total);
  }
  // Batch.
  if (t.global_batch % (t.micro_batch * p.dp) != 0) {
    training.fail("global_batch", fmt::format("= {} is not a multiple of micro_batch·dp = {}·{}", t.global_batch,
                                              t.micro_batch, p.dp));
  }
  const int64_t microbatches = t.num_microbatches(p.dp);
  if (p.schedule == Schedule::kInterleavedOneFOneB && microbatches % p.pp != 0) {
    training.fail("global_batch", fmt::format("gives {} micro-batches per pipeline; interleaved-1f1b needs a "
                                              "multiple of pp = {}", microbatches, p.pp));
  }
  // Sharding.
  const int shard_domain = p.dp * p.cp;
  if (p.zero_shard == 0) p.zero_shard = shard_domain;
  if (p.zero_shard < 1 || shard_domain % p.zero_shard != 0) {
    fail_parallel("zero_shard", fmt::format("= {} must divide dp·cp = {}", p.zero_shard, shard_domain));
  }
  if (t.precision == Precision::kFp8 && !s.cluster.gpu.peak(DType::kFp8)) {
    training.fail("precision", fmt::format("= fp8 needs fp8 tensor cores; {} has none (no peak_dense.fp8)",
                                           s.cluster.gpu.name));
  }
  if (t.activation_offload_layers > 0) {
    const std::string offload = fmt::format("= {}", t.activation_offload_layers);
    if (p.pp > 1) {
      training.fail("activation_offload_layers",
                    fmt::format("{} needs pp = 1 (here {}): Megatron-Core offloads no activations with pipelining",
                                offload, p.pp));
    }
    // Transformer Engine keeps one host copy per layer: the passes must alternate a forward and
    // the backward of the same micro-batch.
    if (p.schedule != Schedule::kOneFOneB || p.ep_comm_overlap) {
      training.fail("activation_offload_layers",
                    fmt::format("{} needs schedule 1f1b without parallelism.ep_comm_overlap (here {}{}): "
                                "Transformer Engine keeps one host copy of each layer, so each forward must be "
                                "followed by its own backward",
                                offload, to_string(p.schedule), p.ep_comm_overlap ? " with ep_comm_overlap" : ""));
    }
    if (t.recompute != Recompute::kNone) {
      training.fail("activation_offload_layers",
                    fmt::format("{} needs recompute: none (here {}): Megatron-Core offloads no activations it "
                                "recomputes",
                                offload, to_string(t.recompute)));
    }
    if (!(s.cluster.host_bandwidth > BytesPerSecond(0))) {
      training.fail("activation_offload_layers",
                    fmt::format("{} copies activations to host memory: it needs cluster.host_bandwidth (GPU to "
                                "host, per GPU per direction, e.g. 54 GB/s over PCIe Gen5 x16) or a cluster "
                                "system that gives it",
                                offload));
    }
  }
  check_attention_kernel(s, training);
}

}  // namespace

int64_t Training::bucket_parameters(const Parallelism& parallelism) const {
  return grad_bucket_parameters.value_or(
      std::max<int64_t>(40'000'000, int64_t{1'000'000} * parallelism.dp * parallelism.cp));
}

DType Scenario::compute_dtype() const {
  switch (training.precision) {
    case Precision::kFp32: return DType::kFp32;
    case Precision::kFp16: return DType::kFp16;
    case Precision::kBf16:
    case Precision::kFp8: return DType::kBf16;
  }
  return DType::kBf16;
}

Parallelism read_parallelism(YamlMap& map) {
  bool dp_given = false;
  return read_parallelism_fields(map, dp_given);
}

void check_settings_for_model(const ModelSpec& model, const Training& training,
                              const Parallelism& parallelism, const FailAt& fail_parallel,
                              const FailAt& fail_training) {
  // Counting the draws that cover a token's groups takes time growing as (group_top_k·top_k)².
  constexpr int kMostCoveringTopK = 64;
  if (parallelism.ep_dispatcher == TokenDispatcher::kDeduplicated && model.moe) {
    const MoeSpec& moe = *model.moe;
    if (moe.token_routing().covers_drawn_groups() && moe.top_k > kMostCoveringTopK) {
      fail_parallel("ep_dispatcher",
                    fmt::format("= deduplicated takes model.moe.top_k up to {} where a token "
                                "draws fewer than all groups "
                                "and two or more experts a group; here top_k {} from {} of "
                                "{} groups (all_to_all takes any)",
                                kMostCoveringTopK, moe.top_k, moe.group_top_k, moe.groups));
    }
  }
  if (model.moe && parallelism.ep_comm_overlap && training.precision == Precision::kFp32) {
    fail_training(
        "precision",
        "= fp32 cannot run with parallelism.ep_comm_overlap: Megatron-Core overlaps bf16 or "
        "fp16 models (and their fp8 GEMMs)");
  }
  if (model.moe && parallelism.fsdp_gradient_reduce == FsdpGradientReduce::kAllReduce) {
    fail_parallel("fsdp_gradient_reduce",
                  fmt::format("= all_reduce (DeepSpeed's ZeRO-3 buckets, all-reduced over the "
                              "whole data-parallel group) takes no mixture-of-experts model "
                              "({} has experts, reduced over their own group); use "
                              "reduce_scatter",
                              model.name));
  }
}

Scenario read_scenario(YamlMap& root) {
  Scenario s;
  s.file = root.file();
  const YAML::Node model = root.node("model");
  if (!model) root.fail("model", "is required: a catalog name, a path, or a mapping");
  if (model.IsMap()) {
    YamlMap inline_model = root.map("model");
    s.model = read_model(inline_model);
  } else {
    s.model = resolve_model(root.required<std::string>("model"), default_model_catalog(), root.location("model"));
  }
  YamlMap cluster = root.map("cluster");
  s.cluster = read_cluster(cluster);
  bool dp_given = false;
  std::optional<YamlMap> parallelism = root.optional_map("parallelism");
  if (parallelism) {
    s.parallelism = read_parallelism_fields(*parallelism, dp_given);
  } else {
    s.parallelism.sequence_parallel = false;
  }
  if (std::optional<YamlMap> collectives = root.optional_map("collectives")) {
    // Algorithm overrides per collective (hardware/collective_model.h); auto by default.
    const std::vector<std::pair<const char*, Collective>> kinds = {
        {"all_reduce", Collective::kAllReduce}, {"all_gather", Collective::kAllGather},
        {"reduce_scatter", Collective::kReduceScatter}, {"all_to_all", Collective::kAllToAll}};
    for (const auto& [key, kind] : kinds) {
      const bool all_reduce = kind == Collective::kAllReduce;
      const std::vector<std::string> allowed =
          all_reduce ? std::vector<std::string>{"auto", "ring", "tree", "hierarchical", "nvls"}
                     : std::vector<std::string>{"auto", kind == Collective::kAllToAll ? "direct" : "ring"};
      const std::string choice = collectives->choice(key, allowed, "auto");
      const CollectiveAlgorithm algorithm = choice == "ring"           ? CollectiveAlgorithm::kRing
                                            : choice == "tree"         ? CollectiveAlgorithm::kTree
                                            : choice == "hierarchical" ? CollectiveAlgorithm::kHierarchical
                                            : choice == "nvls"         ? CollectiveAlgorithm::kNvls
                                            : choice == "direct"       ? CollectiveAlgorithm::kDirect
                                                                       : CollectiveAlgorithm::kAuto;
      if (algorithm == CollectiveAlgorithm::kNvls && !s.cluster.nvls) {
        collectives->fail(key, "= nvls needs NVLink switches that reduce: set cluster.nvls: true");
      }
      s.cluster.algorithms[static_cast<int>(kind)] = static_cast<int>(algorithm);
    }
    collectives->finish();
  }
  YamlMap training = root.map("training");
  s.training = read_training(training, s.model);
  if (std::optional<YamlMap> simulation = root.optional_map("simulation")) {
    s.simulation.fidelity = simulation->choice("fidelity", {"symmetric", "full"}, "symmetric") == "full"
                                ? Fidelity::kFull
                                : Fidelity::kSymmetric;
    if (simulation->has("fold_symmetric_peers") && s.simulation.fidelity != Fidelity::kFull) {
      simulation->fail("fold_symmetric_peers", fmt::format("= {} applies to fidelity: full only; symmetric fidelity "
                                                           "always simulates one rank per stage",
                                                           simulation->get<bool>("fold_symmetric_peers", true)));
    }
    s.simulation.fold_symmetric_peers = simulation->get<bool>("fold_symmetric_peers", true);
    simulation->finish();
  }
  const std::string fallback_name =
      s.file.empty() ? s.model.name : std::filesystem::path(s.file).stem().string();
  s.name = root.get<std::string>("name", fallback_name);
  root.finish();
  validate(s, root, parallelism ? &*parallelism : nullptr, training, dp_given);
  return s;
}

std::vector<int> default_layers_per_stage(int layers, int virtual_stages_total) {
  // A remainder goes one layer each to the inner stages first: the first and last stages also
  // carry the embedding and the output head.
  std::vector<int> split(virtual_stages_total, layers / virtual_stages_total);
  int remainder = layers % virtual_stages_total;
  for (int i = 1; i < virtual_stages_total - 1 && remainder > 0; ++i, --remainder) ++split[i];
  // With two virtual stages there are no inner ones: the one extra layer goes first.
  if (remainder > 0) ++split[0];
  return split;
}

Scenario load_scenario_file(const std::string& path) {
  const YamlDocument document = load_yaml_file(path);
  YamlMap root(document.root, document.file, "");
  return read_scenario(root);
}

Scenario load_scenario_text(const std::string& text, const std::string& name) {
  const YamlDocument document = load_yaml_text(text, name);
  YamlMap root(document.root, document.file, "");
  return read_scenario(root);
}

std::optional<LayoutProblem> context_parallel_problem(const ModelSpec& m, int tp, int cp, ContextComm comm,
                                                      AttentionKernel kernel, int64_t seq_len) {
  if (cp == 1) return std::nullopt;
  if (kernel == AttentionKernel::kUnfused) {
    return LayoutProblem{"cp", fmt::format("= {} splits attention over ranks, which needs a fused kernel "
                                           "(training.attention flash, flash2, flash3 or flash_triton; "
                                           "here unfused)",
                                           cp)};
  }
  if (comm != ContextComm::kAllToAll) {
    if (seq_len % (2 * cp) == 0) return std::nullopt;
    return LayoutProblem{"cp", fmt::format("= {}: training.seq_len = {} must divide into 2·cp = {} chunks "
                                           "(load-balanced causal split)", cp, seq_len, 2 * cp)};
  }
  const int heads = m.heads / tp;
  const int kv_heads = std::max(1, m.kv_heads / tp);
  if (heads % cp != 0) {
    return LayoutProblem{"cp_comm", fmt::format("= a2a gives each of the cp = {} ranks whole heads, but model.heads/tp "
                                                "= {}/{} = {} does not divide by it", cp, m.heads, tp, heads)};
  }
  if (kv_heads % cp != 0 && cp % kv_heads != 0) {
    return LayoutProblem{"cp_comm", fmt::format("= a2a needs model.kv_heads/tp = {} and cp = {} to divide one another "
                                                "(key/value heads are split or repeated over the ranks)", kv_heads, cp)};
  }
  if (seq_len % cp != 0) {
    return LayoutProblem{"cp", fmt::format("= {} does not divide training.seq_len = {}", cp, seq_len)};
  }
  return std::nullopt;
}

std::string to_string(Schedule schedule) {
  switch (schedule) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::kOneFOneB: return "1f1b";
    case Schedule::kInterleavedOneFOneB: return "interleaved-1f1b";
    case Schedule::kZeroBubble: return "zero-bubble";
  }
  return "?";
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

std::string to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kSelectiveOp: return "selective-op";
    case Recompute::kFull: return "full";
  }
  return "?";
}

std::string to_string(RecomputeModule module) {
  switch (module) {
    case RecomputeModule::kCoreAttention:
      return "core_attn";
    case RecomputeModule::kMlp:
      return "mlp";
    case RecomputeModule::kMoe:
      return "moe";
    case RecomputeModule::kSharedExperts:
      return "shared_experts";
    case RecomputeModule::kMoeActivation:
      return "moe_act";
    case RecomputeModule::kLayerNorm:
      return "layernorm";
    case RecomputeModule::kLatentUpProjection:
      return "mla_up_proj";
    case RecomputeModule::kMultiTokenPrediction:
      return "mtp";
  }
  return "?";
}

std::string to_string(Fidelity fidelity) { return fidelity == Fidelity::kFull ? "full" : "symmetric"; }

std::string to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kFlash: return "flash";
    case AttentionKernel::kFlash2: return "flash2";
    case AttentionKernel::kFlash3: return "flash3";
    case AttentionKernel::kFlashTriton: return "flash_triton";
    case AttentionKernel::kUnfused: return "unfused";
  }
  return "?";
}

std::string to_string(OptimizerKernels kernels) {
  switch (kernels) {
    case OptimizerKernels::kFused: return "fused";
    case OptimizerKernels::kUnfused: return "unfused";
    case OptimizerKernels::kForLoop: return "for_loop";
  }
  return "?";
}

std::string to_string(FsdpGather gather) {
  switch (gather) {
    case FsdpGather::kBlock:
      return "block";
    case FsdpGather::kTensor:
      return "tensor";
    case FsdpGather::kPerParameter:
      return "per_parameter";
  }
  return "block";
}
std::string to_string(TpImplementation implementation) {
  return implementation == TpImplementation::kPytorch ? "pytorch" : "megatron";
}
std::string to_string(FsdpGradientReduce reduce) {
  return reduce == FsdpGradientReduce::kAllReduce ? "all_reduce" : "reduce_scatter";
}

std::string to_string(TpOverlapMethod method) {
  switch (method) {
    case TpOverlapMethod::kUserbuffers: return "userbuffers";
    case TpOverlapMethod::kAsyncTp: return "async_tp";
  }
  return "?";
}

std::string to_string(ContextComm comm) {
  switch (comm) {
    case ContextComm::kRing: return "p2p";
    case ContextComm::kAllGather: return "all_gather";
    case ContextComm::kAllToAll: return "a2a";
  }
  return "?";
}

std::string to_string(Fusion fusion) { return fusion == Fusion::kEager ? "eager" : "fused"; }

std::string to_string(MoeWeighting weighting) {
  return weighting == MoeWeighting::kActivation ? "activation" : "tokens";
}

std::string to_string(ExpertGemm gemm) {
  return gemm == ExpertGemm::kGrouped ? "grouped" : "per_expert";
}

std::string to_string(TokenDispatcher dispatcher) {
  return dispatcher == TokenDispatcher::kDeduplicated ? "deduplicated" : "all_to_all";
}

std::string to_string(RankDim dim) {
  switch (dim) {
    case RankDim::kTensor: return "tp";
    case RankDim::kContext: return "cp";
    case RankDim::kData: return "dp";
    case RankDim::kPipeline: return "pp";
  }
  return "?";
}

std::string to_string(const std::vector<RankDim>& rank_order) {
  std::string order;
  for (const RankDim dim : rank_order) order += (order.empty() ? "" : "-") + to_string(dim);
  return order;
}

}  // namespace paceline
