// Tests models/layer_graph.h: GEMM shapes, FLOPs and the activations a block keeps, against
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models").
#include "models/layer_graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "models/model_catalog.h"

namespace paceline {
namespace {

// A GPT-style model (MHA, GeLU 4h MLP, LayerNorm, dropout) with round numbers.
ModelSpec gpt_like() {
  ModelSpec m;
  m.name = "test-gpt";
  m.layers = 4;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 16;
  m.head_dim = 64;
  m.ffn_hidden = 4096;
  m.vocab = 32000;
  m.seq_len = 2048;
  m.activation = Activation::kGelu;
  m.norm = Norm::kLayerNorm;
  m.dropout = 0.1;
  return m;
}

// The same block Llama-style: SwiGLU, RMSNorm, rotary embedding, no dropout.
ModelSpec llama_like() {
  ModelSpec m = gpt_like();
  m.activation = Activation::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.dropout = 0.0;
  return m;
}

LayerShard shard(int tp, bool sp, Recompute recompute = Recompute::kNone) {
  LayerShard s;
  s.micro_batch = 2;
  s.seq_len = 2048;
  s.tp = tp;
  s.sequence_parallel = sp;
  s.recompute = recompute;
  return s;
}

// 4096 tokens at tp 2 with sequence parallelism.
LayerShard tp2_sequence_parallel_shard() {
  LayerShard s;
  s.seq_len = 4096;
  s.tp = 2;
  s.sequence_parallel = true;
  return s;
}

double sbh(const ModelSpec& m, const LayerShard& s) {
  return static_cast<double>(s.micro_batch) * s.seq_len * m.hidden;
}

// The op of `g` named `name` in `phase` (the test fails if there is none).
OpId op_in(const LayerGraph& g, Phase phase, const std::string& name) {
  for (const OpId id : g.ops(phase)) {
    if (g.op(id).name == name) return id;
  }
  ADD_FAILURE() << "no op " << name << " in phase " << static_cast<int>(phase);
  return 0;
}

OpId forward_op(const LayerGraph& g, const std::string& name) {
  return op_in(g, Phase::kForward, name);
}

// Whether `later` waits, directly or through other ops, for `earlier`.
bool waits_for(const LayerGraph& g, OpId later, OpId earlier) {
  std::vector<OpId> open = {later};
  std::vector<bool> seen(g.num_ops(), false);
  while (!open.empty()) {
    const OpId id = open.back();
    open.pop_back();
    for (const OpId before : g.predecessors(id)) {
      if (before == earlier) return true;
      if (!seen[before]) {
        seen[before] = true;
        open.push_back(before);
      }
    }
  }
  return false;
}

TEST(LayerGraph, MovesWithoutCopyingItsOpsAndCopiesWhole) {
  // Lowering and the search bounds hand each graph to a shared_ptr by moving it; a move that
  // copied (Boost's adjacency_list has no move constructor) cost the search a third of its time.
  LayerGraph built = build_transformer_layer(llama_like(), shard(2, /*sp=*/true), /*moe=*/false);
  const size_t ops = built.num_ops();
  ASSERT_GT(ops, 10u);
  const Op* first = &built.op(0);
  LayerGraph moved = std::move(built);
  EXPECT_EQ(&moved.op(0), first);
  EXPECT_EQ(moved.num_ops(), ops);
  EXPECT_EQ(built.num_ops(), 0u);  // NOLINT(bugprone-use-after-move): a moved-from graph is empty
  LayerGraph assigned = build_embedding(llama_like(), shard(2, /*sp=*/true));
  assigned = std::move(moved);
  EXPECT_EQ(&assigned.op(0), first);
  EXPECT_EQ(moved.num_ops(), 0u);  // NOLINT(bugprone-use-after-move)
  const LayerGraph copy = assigned;
  ASSERT_EQ(copy.num_ops(), ops);
  EXPECT_NE(&copy.op(0), first);
  for (OpId id = 0; id < ops; ++id) {
    EXPECT_EQ(copy.op(id).name, assigned.op(id).name);
    EXPECT_EQ(copy.predecessors(id), assigned.predecessors(id));
  }
  EXPECT_EQ(copy.forward_exit(), assigned.forward_exit());
  EXPECT_EQ(copy.saved_activations(), assigned.saved_activations());
}

TEST(LayerGraph, ActivationsMatchKorthikantiWithTensorAndSequenceParallelism) {
  // Korthikanti eq. with TP and SP, attention kept by a fused kernel (no s² tensors):
  // sbh·34/t bytes per layer in 16-bit activations with 1-byte dropout masks.
  const ModelSpec m = gpt_like();
  for (const int t : {1, 2, 4, 8}) {
    const LayerShard s = shard(t, /*sp=*/true);
    const LayerGraph g = build_transformer_layer(m, s, /*moe=*/false);
    const double expected = sbh(m, s) * 34.0 / t;
    // The flash kernel also keeps its softmax statistics: 4 bytes per query and head.
    const double statistics = 4.0 * s.micro_batch * (m.heads / t) * s.seq_len;
    EXPECT_DOUBLE_EQ(g.saved_activations() / Bytes(1), expected + statistics) << "tp " << t;
  }
}

TEST(LayerGraph, ActivationsMatchKorthikantiWithTensorParallelismOnly) {
  // Without SP the norms, dropout masks and the QKV/fc1 inputs are replicated: sbh·(10 + 24/t).
  const ModelSpec m = gpt_like();
  const LayerShard s = shard(4, /*sp=*/false);
  const LayerGraph g = build_transformer_layer(m, s, /*moe=*/false);
  const double statistics = 4.0 * s.micro_batch * (m.heads / 4) * s.seq_len;
  EXPECT_DOUBLE_EQ(g.saved_activations() / Bytes(1), sbh(m, s) * (10.0 + 24.0 / 4) + statistics);
}

TEST(LayerGraph, UnfusedAttentionKeepsTheScoreTensors) {
  // Korthikanti's full formula: sbh·(34 + 5as/h)/t with TP+SP, and 34/t under selective
  // recompute (the 5·a·s²·b bytes of scores are recomputed instead of kept).
  const ModelSpec m = gpt_like();
  LayerShard s = shard(2, /*sp=*/true);
  s.attention_kernel = AttentionKernel::kUnfused;
  const double a = m.heads, h = static_cast<double>(m.hidden), seq = static_cast<double>(s.seq_len);
  EXPECT_DOUBLE_EQ(build_transformer_layer(m, s, false).saved_activations() / Bytes(1),
                   sbh(m, s) * (34.0 + 5.0 * a * seq / h) / 2.0);
  s.recompute = Recompute::kSelective;
  const LayerGraph selective = build_transformer_layer(m, s, false);
  EXPECT_DOUBLE_EQ(selective.saved_activations() / Bytes(1), sbh(m, s) * 34.0 / 2.0);
  // The ·V product keeps V through the recomputation and reads the probabilities made again
  // before it.
  EXPECT_TRUE(waits_for(selective, op_in(selective, Phase::kRecompute, "attn.context.recompute"),
                        op_in(selective, Phase::kRecompute, "attn.dropout.recompute")));
}

TEST(LayerGraph, UnfusedAttentionWithoutDropoutKeepsTheProbabilitiesOnce) {
  // Without attention dropout the softmax's output is the tensor the ·V product reads: kept
  // once, 2·a·s²·b bytes instead of the 5·a·s²·b of softmax output, mask and dropped-out copy;
  // the two other dropout masks (sbh each) go too: Korthikanti's 34 + 5as/h becomes 32 + 2as/h.
  ModelSpec m = gpt_like();
  m.dropout = 0.0;
  LayerShard s = shard(1, /*sp=*/false);
  s.attention_kernel = AttentionKernel::kUnfused;
  const double a = m.heads, h = static_cast<double>(m.hidden), seq = static_cast<double>(s.seq_len);
  EXPECT_DOUBLE_EQ(build_transformer_layer(m, s, false).saved_activations() / Bytes(1),
                   sbh(m, s) * (32.0 + 2.0 * a * seq / h));
}

TEST(LayerGraph, FusedAttentionKeepsItsOutputWhenTheProjectionKeepsAnotherTensor) {
  // Flash attention's backward reads its output. In bf16 the output projection keeps that very
  // tensor; keeping an fp8 cast of it, or (eager) a token-major copy, it does not, and the
  // attention keeps the 2·T·q bytes of the output itself.
  const ModelSpec m = llama_like();
  const LayerShard bf16 = shard(1, false);
  const double output = 2.0 * 2048 * m.hidden * 2.0;
  auto kept_by = [](const LayerGraph& g, std::string_view name) {
    for (const OpId id : g.ops(Phase::kForward)) {
      if (g.op(id).name == name) return g.op(id).saved / Bytes(1);
    }
    return -1.0;
  };
  const LayerGraph plain = build_transformer_layer(m, bf16, false);
  LayerShard fp8 = bf16;
  fp8.fp8 = true;
  LayerShard eager = bf16;
  eager.fusion = Fusion::kEager;
  for (const LayerShard& other : {fp8, eager}) {
    const LayerGraph g = build_transformer_layer(m, other, false);
    EXPECT_DOUBLE_EQ(kept_by(g, "attn.core") - kept_by(plain, "attn.core"), output);
  }
}

TEST(LayerGraph, EmbeddingSplitsItsVocabularyOverTensorParallelismNotItsPositions) {
  // Megatron-LM: the word embedding is vocab-parallel; the learned position embedding is a
  // plain table every tensor-parallel rank holds whole.
  ModelSpec m = gpt_like();
  m.position = Position::kLearned;
  const LayerGraph g = build_embedding(m, shard(4, /*sp=*/true));
  EXPECT_EQ(g.parameters, m.vocab * m.hidden / 4 + m.seq_len * m.hidden);
}

TEST(LayerGraph, AHeadOnAnotherStageKeepsItsOwnCopyOfATiedEmbedding) {
  // Tied embeddings: with the head on the embedding's stage they are one tensor; on another
  // pipeline stage the head holds its own copy (Megatron-LM's), split over TP like the table.
  ModelSpec m = gpt_like();
  m.tied_embeddings = true;
  LayerShard s = shard(2, /*sp=*/true);
  const int64_t norm = 2 * m.hidden;  // LayerNorm weight and bias
  EXPECT_EQ(build_output_head(m, s).parameters, norm);
  s.head_apart_from_embedding = true;
  EXPECT_EQ(build_output_head(m, s).parameters, m.vocab * m.hidden / 2 + norm);
  m.tied_embeddings = false;
  EXPECT_EQ(build_output_head(m, s).parameters, m.vocab * m.hidden / 2 + norm);
}

// Sums the FLOPs of a graph's forward GEMMs.
double forward_gemm_flop(const LayerGraph& g) {
  double flop = 0.0;
  for (const OpId id : g.ops(Phase::kForward)) {
    if (g.op(id).kind == OpKind::kGemm) flop += g.op(id).flop / Flop(1);
  }
  return flop;
}

TEST(LayerGraph, MultiTokenPredictionRunsAModuleBeforeTheHead) {
  // One module, tp 2 with sequence parallelism: the shifted tokens' embedding, two norms, the
  // projection of their concatenation 2h → h, a transformer layer and a prediction of its own.
  ModelSpec m = llama_like();
  const LayerShard s = shard(2, /*sp=*/true);
  const LayerGraph head = build_output_head(m, s);
  m.mtp_layers = 1;
  const LayerGraph with_mtp = build_output_head(m, s);
  const LayerGraph layer = build_transformer_layer(m, s, false);
  const double tokens = 2.0 * 2048;
  const double h = 1024;
  const double projection = 2.0 * tokens * (h / 2) * (2 * h);
  const double logits = 2.0 * tokens * (32000 / 2) * h;
  EXPECT_DOUBLE_EQ(forward_gemm_flop(with_mtp) - forward_gemm_flop(head) - forward_gemm_flop(layer),
                   projection + logits);
  // The layer's weights, three RMSNorms and the projection's half; the embedding's copy where the
  // head sits apart from it.
  const int64_t module = layer.parameters + 3 * 1024 + 2 * 1024 * 1024 / 2;
  EXPECT_EQ(with_mtp.parameters - head.parameters, module);
  LayerShard apart = s;
  apart.head_apart_from_embedding = true;
  EXPECT_EQ(build_output_head(m, apart).parameters - with_mtp.parameters, 32000 * 1024 / 2);
  // Under sequence parallelism the norms and the layer's whole-held weights train on the rank's
  // own tokens.
  EXPECT_EQ(with_mtp.tp_summed_parameters - head.tp_summed_parameters,
            layer.tp_summed_parameters + 3 * 1024);
  // The module keeps its activations (recomputation checkpoints the model's layers only).
  EXPECT_GE(with_mtp.saved_activations(), head.saved_activations() + layer.saved_activations());
  // Its ops are named as its parts; the model's own prediction comes last. The projection's output
  // is gathered over TP, whose backward keeps the rank's columns, and split over the sequence
  // again, whose backward gathers the gradient.
  std::map<std::string, const Op*> ops;
  for (OpId id = 0; id < with_mtp.num_ops(); ++id) ops[with_mtp.op(id).name] = &with_mtp.op(id);
  ASSERT_TRUE(ops.count("mtp1.eh_proj"));
  EXPECT_EQ(ops["mtp1.eh_proj"]->gemm.k, 2 * 1024);
  ASSERT_TRUE(ops.count("mtp1.eh_proj.output_gather"));
  EXPECT_EQ(ops["mtp1.eh_proj.output_gather"]->comm.collective, Collective::kAllGather);
  EXPECT_DOUBLE_EQ(ops["mtp1.eh_proj.output_gather"]->comm.size / Bytes(1), tokens * h * 2);
  EXPECT_FALSE(ops.count("mtp1.eh_proj.output_gather.bwd"));
  ASSERT_TRUE(ops.count("mtp1.eh_proj.scatter.bwd"));
  EXPECT_EQ(ops["mtp1.eh_proj.scatter.bwd"]->comm.collective, Collective::kAllGather);
  EXPECT_EQ(with_mtp.op(with_mtp.forward_exit()).name, "head.cross_entropy.allreduce");
  // Under fp8 the projection's input is cast on the rank's tokens and gathered in fp8.
  LayerShard fp8 = s;
  fp8.fp8 = true;
  const LayerGraph g8 = build_output_head(m, fp8);
  EXPECT_DOUBLE_EQ(g8.op(forward_op(g8, "mtp1.eh_proj.input_cast")).bytes / Bytes(1),
                   tokens / 2 * 2 * h * (2 + 2));
  EXPECT_DOUBLE_EQ(g8.op(forward_op(g8, "mtp1.eh_proj.gather")).comm.size / Bytes(1),
                   tokens * 2 * h);
  EXPECT_TRUE(waits_for(g8, forward_op(g8, "mtp1.eh_proj.gather"),
                        forward_op(g8, "mtp1.eh_proj.input_cast")));
  // It normalises the model's final norm's output (Megatron-Core's decoder output).
  EXPECT_EQ(with_mtp.predecessors(op_in(with_mtp, Phase::kForward, "mtp1.hnorm")),
            std::vector<OpId>{op_in(with_mtp, Phase::kForward, "head.norm")});
  EXPECT_EQ(with_mtp.expert_parameters, 0);
  // Where the last layer is an MoE layer, so is the module's, with its routed experts.
  m.moe = MoeSpec{.experts = 8, .top_k = 2, .ffn_hidden = 512};
  LayerShard experts = s;
  experts.ep = 4;
  const LayerGraph moe_head = build_output_head(m, experts);
  EXPECT_EQ(moe_head.expert_parameters, 2 * 3 * 1024 * 512);
  EXPECT_EQ(moe_head.expert_parameters,
            build_transformer_layer(m, experts, true).expert_parameters);
}

TEST(LayerGraph, FullRecomputeCheckpointsEachMultiTokenPredictionModule) {
  // Megatron-Core checkpoints a module's two norms, projection, layer and final norm when every
  // layer is recomputed: they keep the embedding and hidden states they read (sequence-split
  // under SP) and run again once the gradient of the norm's output is ready; the lookup, logits
  // and loss keep what they keep and run once.
  ModelSpec m = llama_like();
  m.mtp_layers = 1;
  const LayerGraph kept = build_output_head(m, shard(2, /*sp=*/true));
  const LayerGraph recomputed = build_output_head(m, shard(2, /*sp=*/true, Recompute::kFull));
  const std::vector<OpId>& forward = kept.ops(Phase::kForward);
  const auto first =
      std::ranges::find_if(forward, [&](OpId id) { return kept.op(id).name == "mtp1.enorm"; });
  const auto last =
      std::ranges::find_if(forward, [&](OpId id) { return kept.op(id).name == "mtp1.head.norm"; });
  ASSERT_NE(first, forward.end());
  ASSERT_NE(last, forward.end());
  double span_flop = 0.0;
  double span_saved = 0.0;
  std::vector<std::string> span_names;
  for (auto it = first; it <= last; ++it) {
    span_flop += kept.op(*it).flop / Flop(1);
    span_saved += kept.op(*it).saved / Bytes(1);
    span_names.push_back(kept.op(*it).name + ".recompute");
  }
  std::vector<std::string> recompute_names;
  for (const OpId id : recomputed.ops(Phase::kRecompute))
    recompute_names.push_back(recomputed.op(id).name);
  std::ranges::sort(span_names);
  std::ranges::sort(recompute_names);
  EXPECT_EQ(recompute_names, span_names);
  EXPECT_DOUBLE_EQ(recomputed.flop(Phase::kRecompute) / Flop(1), span_flop);
  const double inputs = 2.0 * sbh(m, shard(2, true)) / 2 * 2;  // two bf16 tensors of sbh/tp
  EXPECT_DOUBLE_EQ(recomputed.saved_activations() / Bytes(1),
                   kept.saved_activations() / Bytes(1) - span_saved + inputs);
  EXPECT_LT(recomputed.saved_activations(), kept.saved_activations());
  // The recomputation keeps the rest: each norm reads its checkpointed input.
  double recompute_saved = 0.0;
  for (const OpId id : recomputed.ops(Phase::kRecompute))
    recompute_saved += recomputed.op(id).saved / Bytes(1);
  EXPECT_DOUBLE_EQ(recompute_saved, span_saved - inputs);
  EXPECT_TRUE(waits_for(recomputed, op_in(recomputed, Phase::kRecompute, "mtp1.enorm.recompute"),
                        op_in(recomputed, Phase::kBackwardInput, "mtp1.head.logits.dgrad")));
  // The model's own prediction is not checkpointed, nor a head without modules.
  EXPECT_FALSE(waits_for(recomputed, op_in(recomputed, Phase::kBackwardInput, "head.logits.dgrad"),
                         op_in(recomputed, Phase::kRecompute, "mtp1.enorm.recompute")));
  // A second module keeps the first's output it reads: the first runs again only once its own
  // prediction's gradient is ready.
  m.mtp_layers = 2;
  const LayerGraph two = build_output_head(m, shard(2, /*sp=*/true, Recompute::kFull));
  EXPECT_EQ(two.predecessors(op_in(two, Phase::kForward, "mtp2.hnorm")),
            std::vector<OpId>{op_in(two, Phase::kForward, "mtp1.head.norm")});
  for (const std::string part : {"mtp1.enorm", "mtp1.hnorm", "mtp1.mlp.residual"}) {
    EXPECT_TRUE(waits_for(two, op_in(two, Phase::kRecompute, part + ".recompute"),
                          op_in(two, Phase::kBackwardInput, "mtp1.head.logits.dgrad")))
        << part;
  }
  m.mtp_layers = 0;
  EXPECT_TRUE(
      build_output_head(m, shard(2, true, Recompute::kFull)).ops(Phase::kRecompute).empty());
}

TEST(LayerGraph, SelectiveRecomputeRunsTheFusedAttentionCoreTwice) {
  // Flash attention under selective recompute: the core's forward runs again before its
  // backward; the layer keeps Q, K, V and the attention output as without, and not the softmax
  // statistics (fp32 per query and head).
  const ModelSpec m = gpt_like();
  const LayerShard none = shard(2, /*sp=*/true);
  LayerShard selective = none;
  selective.recompute = Recompute::kSelective;
  const LayerGraph a = build_transformer_layer(m, none, false);
  const LayerGraph b = build_transformer_layer(m, selective, false);
  double attention_forward = 0.0;
  for (const OpId id : a.ops(Phase::kForward)) {
    if (a.op(id).kind == OpKind::kAttention) attention_forward += a.op(id).flop / Flop(1);
  }
  EXPECT_EQ(a.flop(Phase::kRecompute), Flop(0));
  EXPECT_DOUBLE_EQ(b.flop(Phase::kRecompute) / Flop(1), attention_forward);
  const double statistics = 4.0 * 2 * (16 / 2) * 2048;
  EXPECT_DOUBLE_EQ((a.saved_activations() - b.saved_activations()) / Bytes(1), statistics);
  // It runs again once the attention's output gradient is ready, after the MLP's backward; a
  // layer recomputed whole runs again as its backward starts.
  const OpId mlp_backward = op_in(b, Phase::kBackwardInput, "mlp.fc1.dgrad");
  EXPECT_TRUE(waits_for(b, op_in(b, Phase::kRecompute, "attn.core.recompute"), mlp_backward));
  selective.recompute = Recompute::kFull;
  const LayerGraph full = build_transformer_layer(m, selective, false);
  EXPECT_FALSE(waits_for(full, op_in(full, Phase::kRecompute, "attn.core.recompute"),
                         op_in(full, Phase::kBackwardInput, "mlp.fc1.dgrad")));
}

TEST(LayerGraph, FullRecomputeKeepsOnlyTheLayerInput) {
  // Korthikanti: 2·sbh/t per layer with SP (the input, sequence-sharded).
  const ModelSpec m = gpt_like();
  const LayerShard s = shard(4, /*sp=*/true, Recompute::kFull);
  const LayerGraph g = build_transformer_layer(m, s, false);
  EXPECT_DOUBLE_EQ(g.saved_activations() / Bytes(1), 2.0 * sbh(m, s) / 4.0);
  // The recompute pass re-runs the whole forward: same FLOPs.
  EXPECT_DOUBLE_EQ(g.flop(Phase::kRecompute) / Flop(1), g.flop(Phase::kForward) / Flop(1));
  // Only transformer layers are checkpointed: the embedding and the output head (logits GEMM,
  // loss) keep what their backward needs and run once.
  EXPECT_TRUE(build_embedding(m, s).ops(Phase::kRecompute).empty());
  EXPECT_TRUE(build_output_head(m, s).ops(Phase::kRecompute).empty());
  EXPECT_DOUBLE_EQ(build_output_head(m, s).saved_activations() / Bytes(1),
                   build_output_head(m, shard(4, /*sp=*/true)).saved_activations() / Bytes(1));
}

TEST(LayerGraph, PerOperatorRecomputeKeepsEveryOtherMatmulAndTheAttentionOutput) {
  // torchtitan's Llama block multiplies by wq, wk, wv, wo, w1, w3, w2 and keeps the outputs of
  // the odd ones (wq, wv, w1, w2), the attention kernel's output and statistics, and, from
  // forward, the block input; backward recomputes the rest: wk, wo and w3 and every elementwise op.
  ModelSpec m = llama_like();
  m.kv_heads = 4;
  const LayerShard s = shard(1, false, Recompute::kSelectiveOp);
  const LayerGraph g = build_transformer_layer(m, s, false);
  const double tokens = 2.0 * 2048;
  const double h = 1024, kv = 4 * 64, f = 4096;
  const double kept = tokens * (h /* input */ + h + kv /* wq, wv */ + h /* attention */ + f /* w1 */ + h /* w2 */) * 2.0 +
                      4.0 * 2 * 16 * 2048 /* statistics */;
  EXPECT_DOUBLE_EQ(g.saved_activations() / Bytes(1), kept);
  Flop recomputed_gemms;
  for (const OpId id : g.ops(Phase::kRecompute)) {
    if (g.op(id).kind == OpKind::kGemm) recomputed_gemms += g.op(id).flop;
    EXPECT_NE(g.op(id).kind, OpKind::kAttention) << g.op(id).name;
  }
  EXPECT_DOUBLE_EQ(recomputed_gemms / Flop(1), 2.0 * tokens * h * (kv + h + f));
  // Between selective (the attention core) and full recompute in what it keeps.
  EXPECT_LT(g.saved_activations(), build_transformer_layer(m, shard(1, false, Recompute::kSelective), false).saved_activations());
  EXPECT_GT(g.saved_activations(), build_transformer_layer(m, shard(1, false, Recompute::kFull), false).saved_activations());
}

TEST(LayerGraph, EveryKeptActivationIsFreedByABackwardOp) {
  // Per operator with sequence parallelism the reduce-scatters keep their output; like every
  // op that keeps bytes, they must name the backward op that frees them, or each micro-batch
  // would leave its share behind.
  const ModelSpec m = llama_like();
  for (const Recompute recompute :
       {Recompute::kNone, Recompute::kSelective, Recompute::kSelectiveOp, Recompute::kFull}) {
    const LayerGraph g = build_transformer_layer(m, shard(4, /*sp=*/true, recompute), false);
    for (OpId id = 0; id < g.num_ops(); ++id) {
      const Op& op = g.op(id);
      if (op.saved <= Bytes(0)) continue;
      ASSERT_NE(op.released_by, UINT32_MAX) << op.name;
      EXPECT_NE(g.op(op.released_by).phase, Phase::kForward) << op.name;
      EXPECT_NE(g.op(op.released_by).phase, Phase::kRecompute) << op.name;
    }
  }
}

TEST(LayerGraph, ForwardFlopsAreTwiceMatmulParametersPlusAttention) {
  // Llama 3 8B, one rank: forward FLOPs per token = 2·(matmul parameters of a layer) +
  // attention 4·s·d·heads·½ (causal) per token; element-wise ops add a little on top, so
  // compare the GEMM and attention ops only.
  const ModelSpec m = resolve_model("llama3-8b", default_model_catalog(), {});
  LayerShard s;
  s.micro_batch = 1;
  s.seq_len = 8192;
  const LayerGraph g = build_transformer_layer(m, s, false);
  double gemm_and_attention = 0.0;
  for (const OpId id : g.ops(Phase::kForward)) {
    if (g.op(id).kind == OpKind::kGemm || g.op(id).kind == OpKind::kAttention) gemm_and_attention += g.op(id).flop / Flop(1);
  }
  const double tokens = 8192.0;
  const double matmul_parameters = 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3.0 * 4096 * 14336;
  const double attention = 4.0 * 8192 * 128 * 32 * 0.5;  // per token
  EXPECT_DOUBLE_EQ(gemm_and_attention / tokens, 2.0 * matmul_parameters + attention);
  // Backward: twice the GEMM FLOPs (input and weight gradients), 2.5× the attention.
  double backward = 0.0;
  for (const OpId id : g.ops(Phase::kBackwardInput)) backward += g.op(id).flop / Flop(1);
  for (const OpId id : g.ops(Phase::kBackwardWeight)) backward += g.op(id).flop / Flop(1);
  EXPECT_NEAR(backward / tokens, 4.0 * matmul_parameters + 2.5 * attention, 0.01 * backward / tokens);
}

TEST(LayerGraph, LatentAttentionProjectsDownOnTheRanksTokensAndUpOnItsHeads) {
  // DeepSeek-V3's attention at tp 2 with sequence parallelism, 4096 tokens: the down-projections
  // (whole on every rank) run on the rank's 2048 tokens, the up-projections and the output
  // projection on all 4096 and half the 128 heads.
  const ModelSpec m = resolve_model("deepseek-v3", default_model_catalog(), {});
  LayerShard s = tp2_sequence_parallel_shard();
  const LayerGraph g = build_transformer_layer(m, s, false);
  const auto forward = [&](const std::string& name) -> const Op& {
    for (const OpId id : g.ops(Phase::kForward)) {
      if (g.op(id).name == name) return g.op(id);
    }
    ADD_FAILURE() << name;
    return g.op(0);
  };
  const auto mnk = [&](const std::string& name) {
    const GemmShape& gemm = forward(name).gemm;
    return std::vector<int64_t>{gemm.m, gemm.n, gemm.k};
  };
  EXPECT_EQ(mnk("attn.q_down"), (std::vector<int64_t>{2048, 1536, 7168}));
  EXPECT_EQ(mnk("attn.kv_down"), (std::vector<int64_t>{2048, 512 + 64, 7168}));
  EXPECT_EQ(mnk("attn.q_up"), (std::vector<int64_t>{4096, 64 * 192, 1536}));
  EXPECT_EQ(mnk("attn.kv_up"), (std::vector<int64_t>{4096, 64 * (128 + 128), 512}));
  EXPECT_EQ(mnk("attn.proj"), (std::vector<int64_t>{4096, 7168, 64 * 128}));
  // The compressed query and key/value and the rotary key part are gathered, not the 7168-wide input.
  EXPECT_EQ(forward("attn.latent.gather").comm.size, Bytes(4096.0 * (1536 + 512 + 64) * 2));
  // Under fp8 the normalised compressed parts, which the up-projections read, are gathered in
  // fp8; the rotary part and the gradient stay 16-bit.
  LayerShard fp8 = s;
  fp8.fp8 = true;
  const LayerGraph g8 = build_transformer_layer(m, fp8, false);
  EXPECT_EQ(g8.op(forward_op(g8, "attn.latent.gather")).comm.size,
            Bytes(4096.0 * ((1536 + 512) + 64 * 2)));
  EXPECT_EQ(g8.op(op_in(g8, Phase::kBackwardInput, "attn.latent.gather.bwd")).comm.size,
            Bytes(4096.0 * (1536 + 512 + 64) * 2));
  // Queries and keys 192 wide, values 128: Q·Kᵀ and P·V at their own widths, half of it causal.
  const AttentionShape& core = forward("attn.core").attention;
  EXPECT_EQ(core.head_dim, 192);
  EXPECT_EQ(core.value_dim(), 128);
  EXPECT_DOUBLE_EQ(forward("attn.core").flop / Flop(1), 2.0 * 64 * 4096.0 * 4096 * (192 + 128) * 0.5);
  // Backward: Q·Kᵀ again and four products at their own widths, (3·192 + 2·128) / (192 + 128)
  // times the forward's work.
  for (const OpId id : g.ops(Phase::kBackwardInput)) {
    if (g.op(id).name == "attn.core.bwd") {
      EXPECT_DOUBLE_EQ(g.op(id).flop / forward("attn.core").flop, 832.0 / 320.0);
    }
  }
  // The down-projections' gradients, like the two norms', come from the rank's own tokens: summed
  // over TP before the step. Without sequence parallelism every rank's are the same.
  EXPECT_EQ(g.tp_summed_parameters, count_parameters(m).tp_replicated_per_layer + 2 * 7168);
  s.sequence_parallel = false;
  EXPECT_EQ(build_transformer_layer(m, s, false).tp_summed_parameters, 0);
  // Without tensor parallelism each up-projection reads its own norm: nothing gathers them.
  s.tp = 1;
  const LayerGraph whole = build_transformer_layer(m, s, false);
  const auto reads = [&](const std::string& gemm) {
    std::vector<std::string> names;
    for (const OpId id : whole.ops(Phase::kForward)) {
      if (whole.op(id).name != gemm) continue;
      for (const OpId input : whole.predecessors(id)) names.push_back(whole.op(input).name);
    }
    return names;
  };
  EXPECT_EQ(reads("attn.q_up"), (std::vector<std::string>{"attn.q_norm"}));
  EXPECT_EQ(reads("attn.kv_up"), (std::vector<std::string>{"attn.kv_norm"}));
}

TEST(LayerGraph, RingAttentionDoesTheCausalWorkInEqualStepsAndMergesThem) {
  // cp 4: the local 512 queries meet the causal diagonal first, then three unmasked 512 × 256
  // blocks; together the causal attention of the local share (FLOPs unchanged by the split),
  // each later step's output merged into the running one.
  const ModelSpec m = gpt_like();
  LayerShard s = shard(1, false);
  s.cp = 4;
  const LayerGraph g = build_transformer_layer(m, s, false);
  const double local = 2048.0 / 4;
  double flop = 0.0;
  int steps = 0, merges = 0;
  for (const OpId id : g.ops(Phase::kForward)) {
    const Op& op = g.op(id);
    if (op.kind == OpKind::kAttention) {
      EXPECT_EQ(op.attention.causal, steps == 0);
      EXPECT_EQ(op.attention.seq_q, 512);
      EXPECT_EQ(op.attention.seq_kv, steps == 0 ? 512 : 256);
      flop += op.flop / Flop(1);
      ++steps;
    }
    if (op.name.starts_with("attn.ring.merge")) ++merges;
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(merges, 3);
  EXPECT_DOUBLE_EQ(flop, 4.0 * 2 * 16 * 64 * 0.5 * 4 * local * local);
  // Selective recomputation re-runs the whole ring: the steps, the exchanges between them and
  // the merges.
  s.recompute = Recompute::kSelective;
  const LayerGraph selective = build_transformer_layer(m, s, false);
  int recomputed_steps = 0, recomputed_exchanges = 0, recomputed_merges = 0;
  for (const OpId id : selective.ops(Phase::kRecompute)) {
    const std::string& name = selective.op(id).name;
    recomputed_steps += name.starts_with("attn.core") ? 1 : 0;
    recomputed_exchanges += name.starts_with("attn.ring.step") ? 1 : 0;
    recomputed_merges += name.starts_with("attn.ring.merge") ? 1 : 0;
  }
  EXPECT_EQ(recomputed_steps, 4);
  EXPECT_EQ(recomputed_exchanges, 3);
  EXPECT_EQ(recomputed_merges, 3);
}

double attention_flop(const LayerGraph& g) {
  double flop = 0.0;
  for (const OpId id : g.ops(Phase::kForward)) {
    if (g.op(id).kind == OpKind::kAttention) flop += g.op(id).flop / Flop(1);
  }
  return flop;
}

// The layer of `m` with cp 4 exchanging by `comm`, checked to do the ring's attention FLOPs.
LayerGraph context_parallel_layer(const ModelSpec& m, ContextComm comm) {
  LayerShard s = shard(1, false);
  s.cp = 4;
  const double ring_flop = attention_flop(build_transformer_layer(m, s, false));
  s.cp_comm = comm;
  LayerGraph g = build_transformer_layer(m, s, false);
  EXPECT_DOUBLE_EQ(attention_flop(g), ring_flop);
  return g;
}

TEST(LayerGraph, EagerGatheredContextParallelismMergesInFp32Ops) {
  // cp 4 with all_gather over 1024 tokens × 1024 features a rank (E elements of output and of
  // queries, 2 E of keys and values), bf16. Compiled, a merge reads the step's output and
  // rewrites the fp32 running one (10 bytes an element) and its backward moves 10 bytes a query
  // and 6 a key/value element. Eager (PyTorch's ops one by one), a merge moves 32.5 bytes an
  // output element on average over the ranks and 4 a key/value element (their cat); backward
  // 11.5 a query and 23.5 a key/value element; the first merge adds the diagonal block's share
  // and the casts back: 12 bytes an output element forward, 16 a query and 24 a key/value
  // element backward.
  const double e_elements = 1024.0 * 1024;
  LayerShard s = shard(1, false);
  s.cp = 4;
  s.cp_comm = ContextComm::kAllGather;
  const LayerGraph compiled = build_transformer_layer(gpt_like(), s, false);
  s.fusion = Fusion::kEager;
  const LayerGraph eager = build_transformer_layer(gpt_like(), s, false);
  const auto traffic = [](const LayerGraph& g, Phase phase, const std::string& name) {
    return g.op(op_in(g, phase, name)).bytes / Bytes(1);
  };
  for (const int step : {1, 2}) {
    const std::string name = "attn.ring.merge.step" + std::to_string(step);
    const bool first = step == 1;
    EXPECT_DOUBLE_EQ(
        traffic(eager, Phase::kForward, name) - traffic(compiled, Phase::kForward, name),
        e_elements * (32.5 + 2 * 4 - 10 + (first ? 12 : 0)))
        << name;
    EXPECT_DOUBLE_EQ(traffic(compiled, Phase::kBackwardInput, name + ".bwd"),
                     e_elements * (10 + 2 * 6))
        << name;
    EXPECT_DOUBLE_EQ(traffic(eager, Phase::kBackwardInput, name + ".bwd"),
                     e_elements * (11.5 + 2 * 23.5 + (first ? 16 + 2 * 24 : 0)))
        << name;
    EXPECT_EQ(eager.op(op_in(eager, Phase::kForward, name)).kernels, 12);
    EXPECT_EQ(compiled.op(op_in(compiled, Phase::kForward, name)).kernels, 1);
  }
  // Over the ring (Transformer Engine's exchange) eager fusion leaves the merges as they are.
  s.cp_comm = ContextComm::kRing;
  const LayerGraph ring = build_transformer_layer(gpt_like(), s, false);
  EXPECT_DOUBLE_EQ(traffic(ring, Phase::kBackwardInput, "attn.ring.merge.step2.bwd"),
                   e_elements * (10 + 2 * 6));
}

TEST(LayerGraph, GatheredContextParallelismExchangesKeysAndValuesOnce) {
  // cp 4 with all_gather: the ring's four steps and merges, but one all-gather of every rank's
  // keys and values (4 blocks of 1024 tokens × 2 × 1024 features, bf16) in place of the three
  // ring exchanges; the diagonal step does not wait for it, the later ones do. Backward
  // gathers them again, and after each block's backward the fp32 key/value gradients summed so
  // far go on to the next rank: four sends of 1024 tokens × 2 × 1024 features × 4 bytes.
  const LayerGraph g = context_parallel_layer(gpt_like(), ContextComm::kAllGather);
  for (const OpId id : g.ops(Phase::kForward)) EXPECT_FALSE(g.op(id).name.starts_with("attn.ring.step"));
  const OpId gather = forward_op(g, "attn.kv_gather");
  EXPECT_EQ(g.op(gather).comm.collective, Collective::kAllGather);
  EXPECT_EQ(g.op(gather).comm.group, CommGroup::kContext);
  EXPECT_DOUBLE_EQ(g.op(gather).comm.size / Bytes(1), 4.0 * 1024 * 2 * 1024 * 2);
  const auto waits_for_gather = [&](const std::string& name) {
    const std::vector<OpId> before = g.predecessors(forward_op(g, name));
    return std::find(before.begin(), before.end(), gather) != before.end();
  };
  EXPECT_FALSE(waits_for_gather("attn.core.step0"));
  EXPECT_TRUE(waits_for_gather("attn.core.step1"));
  EXPECT_TRUE(waits_for_gather("attn.core.step3"));
  // The gathered blocks stay allocated while the blocks after the gather, their merges and their
  // backward run, besides each block's fp32 output accumulator (1024 tokens × 1024 features).
  const double gathered_bytes = 4.0 * 1024 * 2 * 1024 * 2;
  const double accumulator_bytes = 1024.0 * 1024 * 4;
  EXPECT_DOUBLE_EQ(g.op(forward_op(g, "attn.core.step0")).transient / Bytes(1), accumulator_bytes);
  EXPECT_DOUBLE_EQ(g.op(forward_op(g, "attn.core.step1")).transient / Bytes(1),
                   accumulator_bytes + gathered_bytes);
  EXPECT_DOUBLE_EQ(g.op(forward_op(g, "attn.ring.merge.step3")).transient / Bytes(1),
                   gathered_bytes);
  EXPECT_DOUBLE_EQ(
      g.op(op_in(g, Phase::kBackwardInput, "attn.core.step3.bwd")).transient / Bytes(1),
      accumulator_bytes + gathered_bytes);
  EXPECT_DOUBLE_EQ(
      g.op(op_in(g, Phase::kBackwardInput, "attn.ring.merge.step2.bwd")).transient / Bytes(1),
      gathered_bytes);
  const LayerGraph ring = context_parallel_layer(gpt_like(), ContextComm::kRing);
  EXPECT_DOUBLE_EQ(ring.op(forward_op(ring, "attn.core.step1")).transient / Bytes(1),
                   accumulator_bytes);
  int gathers = 0, sends = 0;
  for (const OpId id : g.ops(Phase::kBackwardInput)) {
    const Op& op = g.op(id);
    if (op.comm.group != CommGroup::kContext) continue;
    if (op.comm.collective == Collective::kAllGather) {
      EXPECT_DOUBLE_EQ(op.comm.size / Bytes(1), 4.0 * 1024 * 2 * 1024 * 2);
      ++gathers;
    } else {
      EXPECT_EQ(op.comm.collective, Collective::kSendRecv);
      EXPECT_DOUBLE_EQ(op.comm.size / Bytes(1), 1024.0 * 2 * 1024 * 4);
      ++sends;
    }
  }
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(sends, 4);
  for (int step = 0; step < 4; ++step) {
    const OpId send = op_in(g, Phase::kBackwardInput, "attn.kv_grad.step" + std::to_string(step) + ".bwd");
    EXPECT_TRUE(waits_for(g, send, op_in(g, Phase::kBackwardInput, "attn.core.step" + std::to_string(step) + ".bwd")));
    // Beside the blocks: the block backward after it does not wait for it.
    if (step > 0) {
      EXPECT_FALSE(waits_for(g, op_in(g, Phase::kBackwardInput, "attn.core.step" + std::to_string(step - 1) + ".bwd"),
                             send));
    }
  }
}

TEST(LayerGraph, ContextExchangesWithoutOverlapHoldUpTheNextBlock) {
  // cp 4 without overlap: every exchange finishes before the block after it starts. Forward,
  // the diagonal step waits for the all-gather and each ring step for the send/recv issued
  // with it; backward, each block waits for the exchange of the block before it in that pass.
  for (const ContextComm comm : {ContextComm::kAllGather, ContextComm::kRing}) {
    LayerShard s = shard(1, false);
    s.cp = 4;
    s.cp_comm = comm;
    const LayerGraph beside = build_transformer_layer(gpt_like(), s, false);
    s.cp_comm_overlap = false;
    const LayerGraph g = build_transformer_layer(gpt_like(), s, false);
    EXPECT_EQ(g.num_ops(), beside.num_ops());
    const bool gathered = comm == ContextComm::kAllGather;
    const auto step = [](const std::string& name, int i) { return name + std::to_string(i); };
    for (int i = 0; i < 4; ++i) {
      const OpId core = forward_op(g, step("attn.core.step", i));
      if (gathered && i == 0) {
        EXPECT_TRUE(waits_for(g, core, forward_op(g, "attn.kv_gather")));
        EXPECT_FALSE(waits_for(beside, forward_op(beside, "attn.core.step0"), forward_op(beside, "attn.kv_gather")));
        // Waited for, the gathered keys and values are held from the diagonal block on.
        EXPECT_DOUBLE_EQ(
            (g.op(core).transient - beside.op(forward_op(beside, "attn.core.step0")).transient) /
                Bytes(1),
            g.op(forward_op(g, "attn.kv_gather")).comm.size / Bytes(1));
      }
      if (!gathered && i < 3) {
        EXPECT_TRUE(waits_for(g, core, forward_op(g, step("attn.ring.step", i))));
        EXPECT_FALSE(waits_for(beside, forward_op(beside, step("attn.core.step", i)),
                               forward_op(beside, step("attn.ring.step", i))));
      }
      // The exchange issued at block i, before its computation: the gradient send after its
      // backward (the gather) or the next block's keys and values (the ring).
      if (i == 0 || (!gathered && i == 3)) continue;
      const std::string exchange = gathered ? step("attn.kv_grad.step", i) : step("attn.ring.step", i);
      const OpId sent = op_in(g, Phase::kBackwardInput, exchange + ".bwd");
      EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardInput, step("attn.core.step", i - 1) + ".bwd"), sent))
          << exchange;
      EXPECT_FALSE(waits_for(beside, op_in(beside, Phase::kBackwardInput, step("attn.core.step", i - 1) + ".bwd"),
                             op_in(beside, Phase::kBackwardInput, exchange + ".bwd")))
          << exchange;
    }
  }
}

TEST(LayerGraph, HeadParallelContextParallelismAttendsOverTheWholeSequenceWithFewerHeads) {
  // cp 4 with a2a (Ulysses): each rank's 1024 tokens of Q, K, V (16 heads each) go out as three
  // quarters of the heads to the three other ranks; one causal kernel attends over all 2048
  // tokens with 4 heads, with the ring's FLOPs; the output comes back the same way.
  const ModelSpec m = gpt_like();
  const LayerGraph g = context_parallel_layer(m, ContextComm::kAllToAll);
  const Op& core = g.op(forward_op(g, "attn.core"));
  EXPECT_EQ(core.attention.heads, 4);
  EXPECT_EQ(core.attention.kv_heads, 4);
  EXPECT_EQ(core.attention.seq_q, 2048);
  EXPECT_EQ(core.attention.seq_kv, 2048);
  EXPECT_TRUE(core.attention.causal);
  const double tokens = 1024.0;
  const Op& in = g.op(forward_op(g, "attn.a2a.qkv"));
  EXPECT_EQ(in.comm.collective, Collective::kAllToAll);
  EXPECT_DOUBLE_EQ(in.comm.size / Bytes(1), tokens * (4 + 2 * 4) * 64 * 3 * 2);
  const Op& out = g.op(forward_op(g, "attn.a2a.output"));
  EXPECT_DOUBLE_EQ(out.comm.size / Bytes(1), tokens * 4 * 64 * 3 * 2);
  int exchanges = 0;
  for (const OpId id : g.ops(Phase::kForward)) {
    const Op& op = g.op(id);
    exchanges += op.comm.group == CommGroup::kContext ? 1 : 0;
    EXPECT_FALSE(op.name.starts_with("attn.ring"));
  }
  EXPECT_EQ(exchanges, 2);
  // Two key/value heads over four ranks: each rank gets one, repeated; the keys and values it
  // sends are one head wide to each of the three others.
  ModelSpec gqa = m;
  gqa.kv_heads = 2;
  const LayerGraph repeated = context_parallel_layer(gqa, ContextComm::kAllToAll);
  EXPECT_EQ(repeated.op(forward_op(repeated, "attn.core")).attention.kv_heads, 1);
  EXPECT_DOUBLE_EQ(repeated.op(forward_op(repeated, "attn.a2a.qkv")).comm.size / Bytes(1),
                   tokens * (4 + 2 * 1) * 64 * 3 * 2);
}

TEST(LayerGraph, RepeatedKeysAndValuesAreCopiedKeptAndExchangedAtEveryQueryHead) {
  // 16 query heads of 64 over 4 key/value heads, 2 × 2048 tokens. repeat_kv copies K and V out
  // to the 16 heads (reads 2 × 256, writes 2 × 1024 features per token, bf16; backward the
  // reverse) and the kernel keeps the copies: 2 × 768 more features per token.
  ModelSpec m = gpt_like();
  m.kv_heads = 4;
  LayerShard s = shard(1, false);
  const LayerGraph native = build_transformer_layer(m, s, false);
  s.repeat_kv = true;
  const LayerGraph repeated = build_transformer_layer(m, s, false);
  const double tokens = 2.0 * 2048;
  for (const OpId id : native.ops(Phase::kForward)) EXPECT_NE(native.op(id).name, "attn.repeat_kv");
  EXPECT_DOUBLE_EQ(repeated.op(forward_op(repeated, "attn.repeat_kv")).bytes / Bytes(1),
                   tokens * (2 * 256 + 2 * 1024) * 2);
  bool copied_back = false;
  for (const OpId id : repeated.ops(Phase::kBackwardInput)) {
    if (repeated.op(id).name.starts_with("attn.repeat_kv")) {
      EXPECT_DOUBLE_EQ(repeated.op(id).bytes / Bytes(1), tokens * (2 * 1024 + 2 * 256) * 2);
      copied_back = true;
    }
  }
  EXPECT_TRUE(copied_back);
  const Op& core = repeated.op(forward_op(repeated, "attn.core"));
  EXPECT_EQ(native.op(forward_op(native, "attn.core")).attention.kv_heads, 4);
  EXPECT_EQ(core.attention.kv_heads, 16);
  EXPECT_DOUBLE_EQ((core.saved - native.op(forward_op(native, "attn.core")).saved) / Bytes(1),
                   tokens * 2 * 768 * 2);
  // Context parallelism gathers the copies: the all-gather is as large as with 16 key/value heads.
  s.cp = 4;
  s.cp_comm = ContextComm::kAllGather;
  const LayerGraph gathered = build_transformer_layer(m, s, false);
  EXPECT_DOUBLE_EQ(gathered.op(forward_op(gathered, "attn.kv_gather")).comm.size / Bytes(1),
                   4.0 * 1024 * 2 * 1024 * 2);
  // Without fewer key/value heads than query heads there is nothing to copy.
  const LayerGraph mha = build_transformer_layer(gpt_like(), s, false);
  for (const OpId id : mha.ops(Phase::kForward)) EXPECT_NE(mha.op(id).name, "attn.repeat_kv");
}

TEST(LayerGraph, TensorParallelismSplitsGemmsAndAddsCollectives) {
  const ModelSpec m = gpt_like();
  const LayerGraph g = build_transformer_layer(m, shard(4, /*sp=*/true), false);
  int gathers = 0, scatters = 0;
  for (const OpId id : g.ops(Phase::kForward)) {
    const Op& op = g.op(id);
    if (op.name == "attn.qkv") {
      // Column-parallel: N = 3·h/t, M = b·s (gathered), K = h.
      EXPECT_EQ(op.gemm.m, 2 * 2048);
      EXPECT_EQ(op.gemm.n, 3 * 1024 / 4);
      EXPECT_EQ(op.gemm.k, 1024);
    }
    if (op.comm.collective == Collective::kAllGather) ++gathers;
    if (op.comm.collective == Collective::kReduceScatter) ++scatters;
  }
  // SP: an all-gather before and a reduce-scatter after each of attention and MLP.
  EXPECT_EQ(gathers, 2);
  EXPECT_EQ(scatters, 2);
}

TEST(LayerGraph, MegatronGathersAColumnParallelInputAgainAndPytorchKeepsItGathered) {
  // Megatron-LM keeps a column-parallel GEMM's sequence shard, gathers it again for the weight
  // gradient and reduce-scatters the input gradient beside that weight gradient; PyTorch's
  // tensor parallelism keeps the gathered input and reduce-scatters after the weight gradient.
  const ModelSpec m = llama_like();
  LayerShard s = shard(4, /*sp=*/true);
  const LayerGraph megatron = build_transformer_layer(m, s, false);
  s.tp_implementation = TpImplementation::kPytorch;
  const LayerGraph pytorch = build_transformer_layer(m, s, false);
  const std::vector<std::pair<std::string, std::string>> entries = {
      {"attn.qkv", "attn.norm.gather.bwd"}, {"mlp.fc1", "mlp.norm.gather.bwd"}};
  for (const auto& [gemm, scatter] : entries) {
    const OpId regather = op_in(megatron, Phase::kBackwardWeight, gemm + ".input_regather");
    EXPECT_EQ(megatron.op(regather).comm.collective, Collective::kAllGather);
    EXPECT_TRUE(
        waits_for(megatron, op_in(megatron, Phase::kBackwardWeight, gemm + ".wgrad"), regather));
    const double shard_bytes = megatron.op(forward_op(megatron, gemm)).saved / Bytes(1);
    EXPECT_DOUBLE_EQ(pytorch.op(forward_op(pytorch, gemm)).saved / Bytes(1), 4.0 * shard_bytes)
        << gemm;
    EXPECT_EQ(megatron.op(op_in(megatron, Phase::kBackwardInput, scatter)).comm.collective,
              Collective::kReduceScatter);
    EXPECT_FALSE(waits_for(megatron, op_in(megatron, Phase::kBackwardInput, scatter),
                           op_in(megatron, Phase::kBackwardWeight, gemm + ".wgrad")));
    EXPECT_TRUE(waits_for(pytorch, op_in(pytorch, Phase::kBackwardInput, scatter),
                          op_in(pytorch, Phase::kBackwardWeight, gemm + ".wgrad")));
  }
  for (const OpId id : pytorch.ops(Phase::kBackwardWeight)) {
    EXPECT_NE(pytorch.op(id).kind, OpKind::kCommunication) << pytorch.op(id).name;
  }
  // Two gathers again; PyTorch's copies into rank order aside (below: four, forward and
  // backward), nothing else differs.
  EXPECT_EQ(pytorch.num_ops() - 8 + 2, megatron.num_ops());
}

TEST(LayerGraph, PytorchCopiesSequenceShardsIntoRankOrderAroundEachCollective) {
  // PyTorch gathers and reduce-scatters along dimension 0, the sequence shards lying along
  // dimension 1: a copy of the whole activation goes with each gather and precedes each
  // reduce-scatter, reading and writing it, both ways; a gather of one sequence is a view.
  // Megatron-LM's activations are sequence-first, and async TP's fused ops use views.
  const ModelSpec m = llama_like();
  LayerShard s = shard(4, /*sp=*/true);
  s.tp_implementation = TpImplementation::kPytorch;
  const std::vector<std::string> gathers = {"attn.norm.gather", "mlp.norm.gather"};
  const std::vector<std::string> scatters = {"attn.proj.reduce_scatter", "mlp.fc2.reduce_scatter"};
  for (const int64_t micro_batch : {2, 1}) {
    s.micro_batch = micro_batch;
    const LayerGraph g = build_transformer_layer(m, s, false);
    const double full = static_cast<double>(micro_batch * s.seq_len * m.hidden) * 2.0;
    const double gather_copy = micro_batch > 1 ? full : 0.0;
    const auto expect_copy = [&](const std::string& name, double forward, double backward) {
      const Op& f = g.op(forward_op(g, name));
      const Op& b = g.op(op_in(g, Phase::kBackwardInput, name + ".bwd"));
      EXPECT_DOUBLE_EQ(f.bytes / Bytes(1), 2.0 * forward) << name;
      EXPECT_DOUBLE_EQ(f.transient / Bytes(1), forward) << name;
      EXPECT_DOUBLE_EQ(b.bytes / Bytes(1), 2.0 * backward) << name;
      EXPECT_DOUBLE_EQ(b.transient / Bytes(1), backward) << name;
    };
    for (const std::string& gather : gathers) {
      expect_copy(gather + ".rank_order", gather_copy, full);
      // The gather waits for its copy; the copy's backward for the weight gradients the
      // gradient's reduce-scatter waits for.
      EXPECT_TRUE(waits_for(g, forward_op(g, gather), forward_op(g, gather + ".rank_order")));
    }
    EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardInput, "attn.norm.gather.rank_order.bwd"),
                          op_in(g, Phase::kBackwardWeight, "attn.qkv.wgrad")));
    for (const std::string& scatter : scatters) {
      expect_copy(scatter + ".rank_order", full, gather_copy);
      EXPECT_TRUE(waits_for(g, forward_op(g, scatter), forward_op(g, scatter + ".rank_order")));
    }
  }
  const auto copies = [](const LayerGraph& g) {
    int count = 0;
    for (OpId id = 0; id < g.num_ops(); ++id) count += g.op(id).name.ends_with(".rank_order");
    return count;
  };
  // Async TP fuses its gathers, and the reduce-scatters of gradients one GEMM makes, with GEMMs.
  LayerShard async_tp = s;
  async_tp.micro_batch = 2;
  async_tp.tp_comm_overlap = true;
  async_tp.tp_comm_overlap_method = TpOverlapMethod::kAsyncTp;
  EXPECT_EQ(copies(build_transformer_layer(m, async_tp, false)), 0);
  // A sum of separate projections' input gradients is reduce-scattered whole, with or without
  // async TP, after the copy into rank order, which a compiled sum makes itself.
  const double gradient = static_cast<double>(2 * s.seq_len * m.hidden) * 2.0;
  const std::vector<std::pair<std::string, std::string>> readers = {
      {"attn.norm.gather", "attn.qkv.wgrad"}, {"mlp.norm.gather", "mlp.fc1.wgrad"}};
  for (const LayerShard& base : {s, async_tp}) {
    for (const Fusion fusion : {Fusion::kFused, Fusion::kEager}) {
      LayerShard separate = base;
      separate.micro_batch = 2;
      separate.separate_projections = true;
      separate.fusion = fusion;
      const LayerGraph g = build_transformer_layer(m, separate, false);
      // Async TP runs compiled whatever the fusion says.
      const bool compiled = fusion == Fusion::kFused || base.tp_comm_overlap;
      const double copied = compiled ? 0.0 : gradient;
      for (const auto& [gather, wgrad] : readers) {
        const OpId backward = op_in(g, Phase::kBackwardInput, gather + ".rank_order.bwd");
        EXPECT_DOUBLE_EQ(g.op(backward).bytes / Bytes(1), 2.0 * copied) << gather;
        EXPECT_DOUBLE_EQ(g.op(backward).transient / Bytes(1), copied) << gather;
        EXPECT_TRUE(waits_for(g, backward, op_in(g, Phase::kBackwardWeight, wgrad))) << gather;
      }
    }
  }
  LayerShard megatron = s;
  megatron.tp_implementation = TpImplementation::kMegatron;
  EXPECT_EQ(copies(build_transformer_layer(m, megatron, false)), 0);
  // The embedding's reduce-scatter and the output layer's gather run outside the fused blocks.
  for (const LayerShard& either : {s, async_tp}) {
    EXPECT_EQ(copies(build_embedding(m, either)), 1);
    EXPECT_EQ(copies(build_output_head(m, either)), 1);
  }
}

TEST(LayerGraph, Fp8GathersTheNormOutputInFp8AndReduceScattersItsGradientIn16Bits) {
  // Transformer Engine gathers its norms' fp8 output, whole or in chunks beside the GEMM, and
  // the fp8 shard a column-parallel GEMM keeps for its weight gradient; torchao casts before the
  // gather. Gradients stay bf16, and so does the output layer's input.
  const ModelSpec m = llama_like();
  for (const TpImplementation implementation :
       {TpImplementation::kMegatron, TpImplementation::kPytorch}) {
    for (const bool overlap : {false, true}) {
      for (const bool fp8 : {false, true}) {
        LayerShard s = shard(4, /*sp=*/true);
        s.tp_implementation = implementation;
        s.tp_comm_overlap = overlap;
        s.tp_comm_overlap_method = implementation == TpImplementation::kPytorch
                                       ? TpOverlapMethod::kAsyncTp
                                       : TpOverlapMethod::kUserbuffers;
        s.fp8 = fp8;
        const LayerGraph g = build_transformer_layer(m, s, false);
        const double gradient = static_cast<double>(s.micro_batch * s.seq_len * m.hidden) * 2.0;
        const double gathered = fp8 ? gradient / 2.0 : gradient;
        // Beside the GEMM, the first of tp chunks is on its path and the rest overlaps it.
        const double share = overlap ? 0.25 : 1.0;
        const auto size = [&](Phase phase, const std::string& name) {
          return g.op(op_in(g, phase, name)).comm.size / Bytes(1);
        };
        for (const char* norm : {"attn.norm", "mlp.norm"}) {
          const std::string gather = std::string(norm) + ".gather";
          EXPECT_DOUBLE_EQ(size(Phase::kForward, gather), gathered * share) << gather;
          EXPECT_DOUBLE_EQ(size(Phase::kBackwardInput, gather + ".bwd"), gradient * share)
              << gather;
          if (overlap) {
            EXPECT_DOUBLE_EQ(size(Phase::kForward, gather + ".overlapped"), gathered * 0.75);
            EXPECT_DOUBLE_EQ(size(Phase::kBackwardInput, gather + ".overlapped.bwd"),
                             gradient * 0.75);
          } else if (implementation == TpImplementation::kPytorch) {
            const std::string copy = gather + ".rank_order";
            EXPECT_DOUBLE_EQ(g.op(forward_op(g, copy)).bytes / Bytes(1), 2.0 * gathered);
            EXPECT_DOUBLE_EQ(g.op(op_in(g, Phase::kBackwardInput, copy + ".bwd")).bytes / Bytes(1),
                             2.0 * gradient);
          }
        }
        if (implementation == TpImplementation::kMegatron) {
          for (const char* gemm : {"attn.qkv", "mlp.fc1"}) {
            EXPECT_DOUBLE_EQ(size(Phase::kBackwardWeight, std::string(gemm) + ".input_regather"),
                             gathered)
                << gemm;
          }
        }
        const LayerGraph head = build_output_head(m, s);
        EXPECT_DOUBLE_EQ(head.op(forward_op(head, "head.norm.gather")).comm.size / Bytes(1),
                         gradient);
        // Nor does its norm write an fp8 copy.
        LayerShard bf16 = s;
        bf16.fp8 = false;
        const LayerGraph bf16_head = build_output_head(m, bf16);
        EXPECT_EQ(head.op(forward_op(head, "head.norm")).bytes,
                  bf16_head.op(forward_op(bf16_head, "head.norm")).bytes);
      }
    }
  }
}

TEST(LayerGraph, SeparateProjectionsSumTheirInputGradients) {
  // Three linears read the attention norm's output and two the MLP norm's (a gated MLP): backward
  // sums their input gradients over all 4096 tokens of the tp 4 group, in one kernel compiled
  // (reading each, writing the sum), pairwise eager. Forward nothing; one fused GEMM, no sum.
  const ModelSpec m = llama_like();
  const double gradient = 2.0 * 2048 * 1024 * 2;  // b·s·h bf16, gathered
  for (const Fusion fusion : {Fusion::kFused, Fusion::kEager}) {
    LayerShard s = shard(4, /*sp=*/true);
    s.tp_implementation = TpImplementation::kPytorch;
    s.fusion = fusion;
    s.separate_projections = true;
    const LayerGraph g = build_transformer_layer(m, s, false);
    const bool fused = fusion == Fusion::kFused;
    const std::vector<std::tuple<std::string, double, int>> sums = {
        {"attn.norm", fused ? 4.0 : 6.0, fused ? 1 : 2}, {"mlp.norm", 3.0, 1}};
    for (const auto& [norm, passes, kernels] : sums) {
      const std::string sum = norm + ".gradient_sum";
      EXPECT_DOUBLE_EQ(g.op(forward_op(g, sum)).bytes / Bytes(1), 0.0) << sum;
      const OpId backward = op_in(g, Phase::kBackwardInput, sum + ".bwd");
      EXPECT_DOUBLE_EQ(g.op(backward).bytes / Bytes(1), passes * gradient) << sum;
      EXPECT_EQ(g.op(backward).kernels, kernels) << sum;
      // Before the norm's backward, after the projections' input gradients.
      EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardInput, norm + ".bwd"), backward)) << sum;
    }
    EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardInput, "attn.norm.gradient_sum.bwd"),
                          op_in(g, Phase::kBackwardInput, "attn.qkv.dgrad")));
  }
  const LayerGraph one_gemm = build_transformer_layer(m, shard(4, /*sp=*/true), false);
  for (OpId id = 0; id < one_gemm.num_ops(); ++id) {
    EXPECT_EQ(one_gemm.op(id).name.find("gradient_sum"), std::string::npos) << one_gemm.op(id).name;
  }
}

TEST(LayerGraph, SharedExpertsKeepTheirOwnTokensUnderEitherTensorParallelism) {
  // Shared experts run on the rank's own tokens: nothing to gather again, nothing gathered kept.
  ModelSpec m = llama_like();
  m.moe = MoeSpec{
      .experts = 8, .top_k = 2, .ffn_hidden = 512, .shared_experts = 1, .shared_ffn_hidden = 256};
  LayerShard s = shard(4, /*sp=*/true);
  const LayerGraph megatron = build_transformer_layer(m, s, /*moe=*/true);
  s.tp_implementation = TpImplementation::kPytorch;
  const LayerGraph pytorch = build_transformer_layer(m, s, /*moe=*/true);
  for (const OpId id : megatron.ops(Phase::kBackwardWeight)) {
    EXPECT_NE(megatron.op(id).name, "moe.shared.fc1.input_regather");
  }
  const OpId fc1 = forward_op(megatron, "moe.shared.fc1");
  EXPECT_EQ(megatron.op(fc1).gemm.m, 2 * 2048 / 4);
  EXPECT_DOUBLE_EQ(pytorch.op(forward_op(pytorch, "moe.shared.fc1")).saved / Bytes(1),
                   megatron.op(fc1).saved / Bytes(1));
}

TEST(LayerGraph, OverlappedTensorCollectivesLeaveOneChunkOnTheGemmPath) {
  // tp 4 with sequence parallelism: the same bytes gathered and reduce-scattered; with
  // tp_comm_overlap the GEMMs wait for a quarter of each gather, their readers for the rest, and
  // three quarters of each reduce-scatter start with the GEMM it drains.
  const ModelSpec m = gpt_like();
  LayerShard plain_shard = shard(4, /*sp=*/true);
  LayerShard overlapped_shard = plain_shard;
  overlapped_shard.tp_comm_overlap = true;
  const LayerGraph plain = build_transformer_layer(m, plain_shard, false);
  const LayerGraph overlapped = build_transformer_layer(m, overlapped_shard, false);
  const auto tensor_bytes = [](const LayerGraph& g) {
    double bytes = 0.0;
    for (const OpId id : g.ops(Phase::kForward)) {
      if (g.op(id).comm.group == CommGroup::kTensor) bytes += g.op(id).comm.size / Bytes(1);
    }
    return bytes;
  };
  EXPECT_DOUBLE_EQ(tensor_bytes(overlapped), tensor_bytes(plain));
  const auto find = [&](const std::string& name) {
    for (OpId id = 0; id < overlapped.num_ops(); ++id) {
      if (overlapped.op(id).name == name) return id;
    }
    ADD_FAILURE() << name;
    return OpId{0};
  };
  const auto names = [&](OpId id) {
    std::vector<std::string> out;
    for (const OpId p : overlapped.predecessors(id)) out.push_back(overlapped.op(p).name);
    return out;
  };
  const double gathered = 2.0 * 2048 * 1024 * 2;  // b·s·h bf16
  EXPECT_DOUBLE_EQ(overlapped.op(find("attn.norm.gather")).comm.size / Bytes(1), gathered / 4);
  EXPECT_EQ(names(find("attn.qkv")), std::vector<std::string>{"attn.norm.gather"});
  EXPECT_EQ(names(find("mlp.act")), (std::vector<std::string>{"mlp.fc1", "mlp.norm.gather.overlapped"}));
  EXPECT_EQ(names(find("mlp.fc2.reduce_scatter.overlapped")), std::vector<std::string>{"mlp.act"});
  EXPECT_EQ(names(find("mlp.fc2.reduce_scatter")),
            (std::vector<std::string>{"mlp.fc2", "mlp.fc2.reduce_scatter.overlapped"}));
  // Backward: the weight gradient waits for the whole output gradient, the input gradient for
  // its first chunk only.
  const std::vector<std::string> wgrad = names(find("mlp.fc2.wgrad"));
  EXPECT_NE(std::find(wgrad.begin(), wgrad.end(), "mlp.fc2.reduce_scatter.overlapped.bwd"), wgrad.end());
  const std::vector<std::string> dgrad = names(find("mlp.fc2.dgrad"));
  EXPECT_EQ(std::find(dgrad.begin(), dgrad.end(), "mlp.fc2.reduce_scatter.overlapped.bwd"), dgrad.end());
}

TEST(LayerGraph, AsyncTensorParallelismSumsTheChunksItHolds) {
  // PyTorch's async TP: after each overlapped reduce-scatter the rank sums the tp = 4 chunks it
  // holds, reading the whole partial output and writing a quarter; backward, the gradient of an
  // overlapped gather is reduce-scattered beside the one GEMM making it and summed the same way.
  // A sum of separate projections' gradients (queries, keys and values here; the GPT MLP has one)
  // it reduce-scatters whole after their weight gradients. Userbuffers sum inside their kernels.
  const ModelSpec m = gpt_like();
  LayerShard async_shard = shard(4, /*sp=*/true);
  async_shard.tp_comm_overlap = true;
  async_shard.tp_comm_overlap_method = TpOverlapMethod::kAsyncTp;
  async_shard.tp_implementation = TpImplementation::kPytorch;
  const double full = 2.0 * 2048 * 1024 * 2;  // b·s·h bf16
  for (const bool separate : {false, true}) {
    async_shard.separate_projections = separate;
    const LayerGraph g = build_transformer_layer(m, async_shard, false);
    const auto find = [&](const std::string& name) -> const Op* {
      for (OpId id = 0; id < g.num_ops(); ++id) {
        if (g.op(id).name == name) return &g.op(id);
      }
      return nullptr;
    };
    for (const std::string rs :
         {"attn.proj.reduce_scatter.chunk_sum", "mlp.fc2.reduce_scatter.chunk_sum"}) {
      ASSERT_NE(find(rs), nullptr) << rs;
      EXPECT_DOUBLE_EQ(find(rs)->bytes / Bytes(1), full * 1.25) << rs;
      EXPECT_EQ(find(rs + ".bwd"), nullptr) << rs;  // the gradient passes straight through
    }
    for (const std::string gather : {"attn.norm.gather", "mlp.norm.gather"}) {
      if (separate && gather == "attn.norm.gather") {
        EXPECT_EQ(find(gather + ".chunk_sum"), nullptr);
        EXPECT_EQ(find(gather + ".bwd"), nullptr);
        EXPECT_EQ(find(gather + ".overlapped.bwd"), nullptr);
        ASSERT_NE(find(gather + ".gradient.bwd"), nullptr);
        EXPECT_EQ(find(gather + ".gradient.bwd")->comm.collective, Collective::kReduceScatter);
        EXPECT_DOUBLE_EQ(find(gather + ".gradient.bwd")->comm.size / Bytes(1), full);
        EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardInput, gather + ".gradient.bwd"),
                              op_in(g, Phase::kBackwardWeight, "attn.qkv.wgrad")));
        continue;
      }
      EXPECT_EQ(find(gather + ".gradient"), nullptr) << gather;
      ASSERT_NE(find(gather + ".chunk_sum"), nullptr) << gather;
      EXPECT_DOUBLE_EQ(find(gather + ".chunk_sum")->bytes / Bytes(1), 0.0) << gather;
      ASSERT_NE(find(gather + ".chunk_sum.bwd"), nullptr) << gather;
      EXPECT_DOUBLE_EQ(find(gather + ".chunk_sum.bwd")->bytes / Bytes(1), full * 1.25) << gather;
      ASSERT_NE(find(gather + ".overlapped.bwd"), nullptr) << gather;
      EXPECT_DOUBLE_EQ(find(gather + ".overlapped.bwd")->comm.size / Bytes(1), full * 0.75);
    }
  }
  LayerShard userbuffers_shard = async_shard;
  userbuffers_shard.separate_projections = false;
  userbuffers_shard.tp_comm_overlap_method = TpOverlapMethod::kUserbuffers;
  userbuffers_shard.tp_implementation = TpImplementation::kMegatron;
  const LayerGraph userbuffers = build_transformer_layer(m, userbuffers_shard, false);
  for (OpId id = 0; id < userbuffers.num_ops(); ++id) {
    EXPECT_EQ(userbuffers.op(id).name.find("chunk_sum"), std::string::npos) << userbuffers.op(id).name;
  }
}

TEST(LayerGraph, CrossEntropyMakesOnePassPerStepOverTheFp32Logits) {
  // 4096 tokens × 32000 vocab, bf16 logits: forward casts (2 + 4 bytes), takes the max (4) and
  // the sum of exponentials (4), writes the softmax (4 + 4): 22 bytes per logit; backward
  // rewrites the gradient in place (8) and casts it back (4 + 2): 14. It keeps the fp32 softmax,
  // which its copy of the logits became in place: beside it only the bf16 logits (2 bytes per
  // logit) while it runs, and nothing beside fp32 logits, which it works on themselves.
  const LayerGraph g = build_output_head(gpt_like(), shard(1, false));
  const double logits = 2.0 * 2048 * 32000;
  int found = 0;
  for (OpId id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    if (op.name == "head.cross_entropy") {
      EXPECT_DOUBLE_EQ(op.bytes / Bytes(1), 22.0 * logits);
      EXPECT_DOUBLE_EQ(op.saved / Bytes(1), 4.0 * logits);
      EXPECT_DOUBLE_EQ(op.transient / Bytes(1), 2.0 * logits);
      ++found;
    }
    if (op.name == "head.cross_entropy.bwd") {
      EXPECT_DOUBLE_EQ(op.bytes / Bytes(1), 14.0 * logits);
      EXPECT_DOUBLE_EQ(op.stranded / Bytes(1), 0.0);  // it allocates nothing
      ++found;
    }
  }
  EXPECT_EQ(found, 2);
  LayerShard fp32 = shard(1, false);
  fp32.activation_dtype = DType::kFp32;
  const LayerGraph f = build_output_head(gpt_like(), fp32);
  for (OpId id = 0; id < f.num_ops(); ++id) {
    if (f.op(id).name == "head.cross_entropy") {
      EXPECT_DOUBLE_EQ(f.op(id).transient / Bytes(1), 0.0);
    }
  }
  // PyTorch's log_softmax and nll_loss: the backward writes the dense fp32 gradient, then reads
  // it and the kept output into another fp32 buffer before casting back: 22 bytes per logit, and
  // 8 bytes per logit alive while it runs beside the 4 kept. The freed bf16 logits' block is too
  // small for the fp32 buffer forward freed none for: 2 bytes per logit stranded.
  LayerShard eager = shard(1, false);
  eager.cross_entropy = Fusion::kEager;
  const LayerGraph e = build_output_head(gpt_like(), eager);
  int eager_found = 0;
  for (OpId id = 0; id < e.num_ops(); ++id) {
    const Op& op = e.op(id);
    if (op.name == "head.cross_entropy") {
      EXPECT_DOUBLE_EQ(op.saved / Bytes(1), 4.0 * logits);
      ++eager_found;
    }
    if (op.name == "head.cross_entropy.bwd") {
      EXPECT_DOUBLE_EQ(op.bytes / Bytes(1), 22.0 * logits);
      EXPECT_DOUBLE_EQ(op.transient / Bytes(1), 8.0 * logits);
      EXPECT_DOUBLE_EQ(op.stranded / Bytes(1), 2.0 * logits);
      EXPECT_EQ(op.kernels, 4);
      ++eager_found;
    }
  }
  EXPECT_EQ(eager_found, 2);
  // Over fp32 logits backward's buffers fit the logits' own block.
  LayerShard eager_fp32 = eager;
  eager_fp32.activation_dtype = DType::kFp32;
  const LayerGraph ef = build_output_head(gpt_like(), eager_fp32);
  for (OpId id = 0; id < ef.num_ops(); ++id) {
    EXPECT_DOUBLE_EQ(ef.op(id).stranded / Bytes(1), 0.0) << ef.op(id).name;
  }
  // Over 4 vocabulary shards of PyTorch's tensor parallelism, loss parallel: the rank's 8000
  // columns in fp32 ops, 38 bytes per logit each way (the cast's 2 + 4 and 32 more forward),
  // besides the 4 kept 8 bytes per logit alive forward and 12 backward, 7 kernels forward and 6
  // backward. Megatron-LM's tensor parallelism keeps the ATen kernels' figures.
  LayerShard parallel = shard(4, false);
  parallel.cross_entropy = Fusion::kEager;
  parallel.tp_implementation = TpImplementation::kPytorch;
  const LayerGraph p = build_output_head(gpt_like(), parallel);
  const double shard_logits = logits / 4;
  int parallel_found = 0;
  for (OpId id = 0; id < p.num_ops(); ++id) {
    const Op& op = p.op(id);
    if (op.name != "head.cross_entropy" && op.name != "head.cross_entropy.bwd") continue;
    EXPECT_DOUBLE_EQ(op.bytes / Bytes(1), 38.0 * shard_logits) << op.name;
    EXPECT_DOUBLE_EQ(op.transient / Bytes(1),
                     (op.phase == Phase::kForward ? 8.0 : 12.0) * shard_logits)
        << op.name;
    EXPECT_EQ(op.kernels, op.phase == Phase::kForward ? 7 : 6) << op.name;
    if (op.phase == Phase::kForward) {
      EXPECT_DOUBLE_EQ(op.saved / Bytes(1), 4.0 * shard_logits);
    }
    EXPECT_DOUBLE_EQ(op.stranded / Bytes(1),
                     (op.phase == Phase::kForward ? 0.0 : 2.0) * shard_logits)
        << op.name;
    ++parallel_found;
  }
  EXPECT_EQ(parallel_found, 2);
  parallel.tp_implementation = TpImplementation::kMegatron;
  const LayerGraph megatron = build_output_head(gpt_like(), parallel);
  for (OpId id = 0; id < megatron.num_ops(); ++id) {
    if (megatron.op(id).name == "head.cross_entropy.bwd") {
      EXPECT_EQ(megatron.op(id).kernels, 4);
    }
  }
}

TEST(LayerGraph, EagerModeRunsNormRotaryAndSwigluAsSeveralKernels) {
  // A Llama-style block, bf16, 4096 tokens: eager RMSNorm moves 36 bytes per element forward in
  // 6 kernels (fused: 4 in 1) and keeps the fp32 input and the bf16 output (6 bytes); rotary 20
  // bytes per query and key element each way; SwiGLU 10 bytes per output element forward, 18
  // backward (fused 6 and 10), keeping the SiLU output too. The attention output is copied into
  // token-major layout.
  const ModelSpec m = llama_like();
  LayerShard eager = shard(1, false);
  eager.fusion = Fusion::kEager;
  const LayerGraph fused_graph = build_transformer_layer(m, shard(1, false), false);
  const LayerGraph eager_graph = build_transformer_layer(m, eager, false);
  const auto op = [](const LayerGraph& g, const std::string& name) {
    for (OpId id = 0; id < g.num_ops(); ++id) {
      if (g.op(id).name == name) return g.op(id);
    }
    ADD_FAILURE() << "no op " << name;
    return Op{};
  };
  const double tokens = 2.0 * 2048;
  const double h = tokens * 1024;
  EXPECT_DOUBLE_EQ(op(fused_graph, "attn.norm").bytes / Bytes(1), 4.0 * h);
  EXPECT_EQ(op(fused_graph, "attn.norm").kernels, 1);
  EXPECT_DOUBLE_EQ(op(eager_graph, "attn.norm").bytes / Bytes(1), 36.0 * h);
  EXPECT_EQ(op(eager_graph, "attn.norm").kernels, 6);
  EXPECT_DOUBLE_EQ(op(eager_graph, "attn.norm").saved / Bytes(1), 6.0 * h);
  EXPECT_DOUBLE_EQ(op(eager_graph, "attn.norm.bwd").bytes / Bytes(1), 56.0 * h);
  EXPECT_EQ(op(eager_graph, "attn.norm.bwd").kernels, 9);
  const double qk = tokens * (1024 + 1024);
  EXPECT_DOUBLE_EQ(op(eager_graph, "attn.rotary").bytes / Bytes(1), 20.0 * qk);
  EXPECT_DOUBLE_EQ(op(eager_graph, "attn.rotary.bwd").bytes / Bytes(1), 20.0 * qk);
  const double f = tokens * 4096;
  EXPECT_DOUBLE_EQ(op(fused_graph, "mlp.act").bytes / Bytes(1), 6.0 * f);
  EXPECT_DOUBLE_EQ(op(eager_graph, "mlp.act").bytes / Bytes(1), 10.0 * f);
  EXPECT_DOUBLE_EQ(op(eager_graph, "mlp.act.bwd").bytes / Bytes(1), 18.0 * f);
  EXPECT_DOUBLE_EQ(op(eager_graph, "mlp.act").saved / Bytes(1), 6.0 * f);
  EXPECT_DOUBLE_EQ(op(eager_graph, "attn.transpose").bytes / Bytes(1), 4.0 * h);
  EXPECT_EQ(eager_graph.num_ops(), fused_graph.num_ops() + 2);  // the copy and its gradient
  // GeLU and LayerNorm are single kernels in eager mode too.
  LayerShard gpt_eager = shard(1, false);
  gpt_eager.fusion = Fusion::kEager;
  const LayerGraph gpt = build_transformer_layer(gpt_like(), gpt_eager, false);
  EXPECT_EQ(op(gpt, "attn.norm").kernels, 1);
  EXPECT_EQ(op(gpt, "mlp.act").kernels, 1);
}

TEST(LayerGraph, MoeRoutesTokensThroughAllToAll) {
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 8;
  const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
  int all_to_all = 0;
  for (const OpId id : g.ops(Phase::kForward)) {
    const Op& op = g.op(id);
    if (op.comm.collective == Collective::kAllToAll) ++all_to_all;
    if (op.name == "moe.expert_fc1") {
      // One local expert (8/8) receives its share: 4096 tokens · top-2 / 8 experts · 8 ranks
      // = 4096·2 tokens on this rank, all to its one expert.
      EXPECT_EQ(op.gemm.count, 1);
      EXPECT_EQ(op.gemm.m, 4096 * 2);
      EXPECT_EQ(op.gemm.n, 2 * 14336);
    }
  }
  EXPECT_EQ(all_to_all, 2);  // dispatch and combine
}

TEST(LayerGraph, ExpertLoadAddsUpOverTheExpertsAndTheCapacityCapsEveryOne) {
  // Mixtral's 8 experts, 4096 tokens, top-2: 8192 routed tokens. The busiest expert's extra
  // tokens are taken from the others, so a rank holding every expert carries all 8192 however
  // they are spread (each expert's count rounded up to whole tokens); on 4 ranks of two experts
  // the busiest expert's rank carries (3 + 5/7)/2 times the mean 8192 at imbalance 3. A capacity
  // factor below 1 drops tokens at every expert, and the exchange carries only what is kept.
  ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  const auto expert_rows = [&](double imbalance, double capacity, int ep) {
    m.moe->imbalance = imbalance;
    m.moe->capacity_factor = capacity;
    s.ep = ep;
    const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
    const Op& op = g.op(forward_op(g, "moe.expert_fc1"));
    return op.gemm.sum_m();
  };
  EXPECT_EQ(expert_rows(1.0, 0.0, 1), 8192);
  // Each of 8 experts a whole number of tokens: 3072 and 7 of 731 3/7 (732), a token over each.
  EXPECT_EQ(expert_rows(3.0, 0.0, 1), 3072 + 7 * 732);
  EXPECT_EQ(expert_rows(3.0, 0.0, 4), 8192.0 * 3 / 2 + std::ceil(8192.0 * 5 / 7 / 2));
  EXPECT_EQ(expert_rows(1.0, 0.5, 1), 4096);
  const auto exchanged = [&](double capacity) {
    m.moe->imbalance = 1.0;
    m.moe->capacity_factor = capacity;
    s.ep = 8;
    const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
    return g.op(forward_op(g, "moe.dispatch")).comm.size;
  };
  EXPECT_EQ(exchanged(0.5), exchanged(0.0) * 0.5);
}

TEST(LayerGraph, OnlyTheBusiestExpertsGemmGrowsWithTheImbalance) {
  // Mixtral on 4 ranks, two experts each, 8192 routed tokens a rank: an expert's mean is 4096.
  // At imbalance 1.5 the busiest takes 6144 and the other 8 − 1.5 of 7 shares, 3804 (rounded up);
  // the GEMMs' first member carries the difference, along m forward and in the data gradient,
  // along k (the tokens reduced over) in the weight gradient.
  ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 4;
  m.moe->imbalance = 1.5;
  const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
  const auto others = static_cast<int64_t>(std::ceil(8192.0 * 6.5 / 7 / 2));
  const std::pair<Phase, const char*> gemms[] = {{Phase::kForward, "moe.expert_fc1"},
                                                 {Phase::kBackwardInput, "moe.expert_fc1.dgrad"},
                                                 {Phase::kBackwardWeight, "moe.expert_fc1.wgrad"}};
  for (const auto& [phase, name] : gemms) {
    const GemmShape& gemm = g.op(op_in(g, phase, name)).gemm;
    EXPECT_EQ(gemm.count, 2) << name;
    EXPECT_EQ(gemm.first_extra_tokens, 6144 - others) << name;
    EXPECT_EQ(phase == Phase::kBackwardWeight ? gemm.k : gemm.m, others) << name;
    EXPECT_DOUBLE_EQ(gemm.multiply_adds(), (6144.0 + others) * 4096 * 2 * 14336) << name;
  }
}

TEST(LayerGraph, SeveralLocalExpertsRegroupTheExchangedTokens) {
  // The all-to-all delivers tokens by source rank: with two local experts a pass regroups them by
  // expert before the experts and another restores the rank order before the combine.
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 4;
  const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
  const double routed_bytes = 4096.0 * 2 * 4096 * 2;  // tokens · top-2 · hidden · bf16
  for (const char* name : {"moe.group_by_expert", "moe.group_by_rank"}) {
    const Op& op = g.op(forward_op(g, name));
    EXPECT_EQ(op.bytes, Bytes(2.0 * routed_bytes)) << name;
    EXPECT_EQ(op.saved, Bytes(0)) << name;
    EXPECT_EQ(g.op(op_in(g, Phase::kBackwardInput, std::string(name) + ".bwd")).bytes, Bytes(2.0 * routed_bytes));
  }
  EXPECT_TRUE(waits_for(g, forward_op(g, "moe.expert_fc1"), forward_op(g, "moe.group_by_expert")));
  EXPECT_TRUE(waits_for(g, forward_op(g, "moe.group_by_expert"), forward_op(g, "moe.dispatch")));
  EXPECT_TRUE(waits_for(g, forward_op(g, "moe.combine"), forward_op(g, "moe.group_by_rank")));
  EXPECT_TRUE(waits_for(g, forward_op(g, "moe.group_by_rank"), forward_op(g, "moe.expert_fc2")));
  // One expert a rank (8 over ep 8) receives its tokens already grouped.
  s.ep = 8;
  const LayerGraph one_each = build_transformer_layer(m, s, /*moe=*/true);
  for (const OpId id : one_each.ops(Phase::kForward)) {
    EXPECT_EQ(one_each.op(id).name.find("moe.group_by"), std::string::npos);
  }
}

TEST(LayerGraph, PerOperatorRecomputeKeepsTheExpertExchanges) {
  // torchtitan's per-operator policy saves all_to_all_single: backward does not exchange the
  // tokens again; the exchanges keep their output, all the tokens the rank's experts take (its
  // own share too): 4096 tokens · top-2 · hidden 4096 · bf16.
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 8;
  s.recompute = Recompute::kSelectiveOp;
  const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
  for (const OpId id : g.ops(Phase::kRecompute)) {
    EXPECT_NE(g.op(id).comm.collective, Collective::kAllToAll) << g.op(id).name;
  }
  for (const char* name : {"moe.dispatch", "moe.combine"}) {
    const Op& op = g.op(forward_op(g, name));
    EXPECT_DOUBLE_EQ(op.saved / Bytes(1), 4096.0 * 2 * 4096 * 2) << name;
  }
}

TEST(LayerGraph, ExpertExchangeGradientWaitsForTheExpertsWeightGradients) {
  // The dispatch's all-to-all is an autograd function of its own: backward issues it after the
  // experts' backward returns, weight gradients included. Shared experts run before the routing,
  // so their backward comes later; a tensor-parallel reduction runs beside its GEMM's weight
  // gradient.
  ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  m.moe->shared_experts = 1;
  m.moe->shared_ffn_hidden = 4096;
  LayerShard s = shard(2, false);
  s.ep = 8;
  const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
  const OpId dispatch = op_in(g, Phase::kBackwardInput, "moe.dispatch.bwd");
  EXPECT_TRUE(waits_for(g, dispatch, op_in(g, Phase::kBackwardWeight, "moe.expert_fc1.wgrad")));
  EXPECT_TRUE(waits_for(g, dispatch, op_in(g, Phase::kBackwardWeight, "moe.expert_fc2.wgrad")));
  EXPECT_FALSE(waits_for(g, dispatch, op_in(g, Phase::kBackwardWeight, "moe.shared.fc1.wgrad")));
  EXPECT_FALSE(waits_for(g, op_in(g, Phase::kBackwardInput, "attn.qkv.grad_allreduce.bwd"),
                         op_in(g, Phase::kBackwardWeight, "attn.qkv.wgrad")));
}

TEST(LayerGraph, DelayedExpertWeightGradientsRunBesideTheDispatchGradient) {
  // With delay_wgrad_compute the experts' weight gradients come after the dispatch's gradient
  // exchange is issued, which no longer waits for them; they still free the experts' inputs.
  const ModelSpec m = resolve_model("qwen3-30b-a3b", default_model_catalog(), {});
  for (const Recompute recompute : {Recompute::kNone, Recompute::kSelectiveOp}) {
    LayerShard s = shard(1, false, recompute);
    s.ep = 8;
    s.delay_expert_weight_gradients = true;
    const LayerGraph g = build_transformer_layer(m, s, /*moe=*/true);
    const OpId dispatch = op_in(g, Phase::kBackwardInput, "moe.dispatch.bwd");
    for (const char* name : {"moe.expert_fc1.wgrad", "moe.expert_fc2.wgrad"}) {
      const OpId wgrad = op_in(g, Phase::kBackwardWeight, name);
      EXPECT_FALSE(waits_for(g, dispatch, wgrad)) << name;
      EXPECT_GT(wgrad, dispatch) << name;  // declared, so run, after the exchange is issued
    }
    const OpId fc1 = forward_op(g, "moe.expert_fc1");
    const OpId freed = g.op(fc1).saved > Bytes(0) ? fc1 : op_in(g, Phase::kRecompute, "moe.expert_fc1.recompute");
    EXPECT_EQ(g.op(freed).released_by, op_in(g, Phase::kBackwardWeight, "moe.expert_fc1.wgrad"));
  }
}

TEST(LayerGraph, MoeWeightingInTheActivationKeepsProbabilitiesNotTokens) {
  // Mixtral, one expert a rank: 4096 tokens · top-2 = 8192 routed rows of 4096, bf16.
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 8;
  const double routed = 4096.0 * 2;
  const double e = 2.0;
  const auto saved = [](const LayerGraph& g, const std::string& name) { return g.op(forward_op(g, name)).saved; };
  const LayerGraph tokens = build_transformer_layer(m, s, /*moe=*/true);
  s.moe_weighting = MoeWeighting::kActivation;
  const LayerGraph fused = build_transformer_layer(m, s, /*moe=*/true);
  // Combined unweighted, the copies of a token are summed with nothing kept; the fused SwiGLU
  // keeps each row's fp32 probability.
  EXPECT_EQ(saved(tokens, "moe.unpermute"), Bytes(routed * 4096 * e));
  EXPECT_EQ(saved(fused, "moe.unpermute"), Bytes(0));
  EXPECT_EQ(saved(fused, "moe.expert_act") - saved(tokens, "moe.expert_act"), Bytes(routed * 4.0));
  EXPECT_EQ(tokens.saved_activations() - fused.saved_activations(), Bytes(routed * (4096 * e - 4.0)));
  // Without the weighting pass the un-permute reads each copy once, forward and backward.
  const auto traffic = [](const LayerGraph& g) { return g.op(forward_op(g, "moe.unpermute")).bytes; };
  EXPECT_EQ(traffic(tokens) - traffic(fused), Bytes(routed * 4096 * e));
  // Eager, the product after the activation keeps the activation's output (14336 wide) too.
  s.fusion = Fusion::kEager;
  const LayerGraph eager = build_transformer_layer(m, s, /*moe=*/true);
  EXPECT_EQ(saved(eager, "moe.expert_weighting"), Bytes(routed * (14336 * e + 4.0)));
  EXPECT_EQ(saved(eager, "moe.unpermute"), Bytes(0));
  // GeLU has no weighted kernel: the product runs after it, fused or not.
  ModelSpec gelu = m;
  gelu.activation = Activation::kGelu;
  s.fusion = Fusion::kFused;
  EXPECT_EQ(saved(build_transformer_layer(gelu, s, /*moe=*/true), "moe.expert_weighting"),
            Bytes(routed * (14336 * e + 4.0)));
  // Recomputed whole, a layer keeps only its input whichever way its experts are weighted.
  s.fusion = Fusion::kEager;
  s.recompute = Recompute::kFull;
  const Bytes weighted_checkpoint = build_transformer_layer(m, s, /*moe=*/true).saved_activations();
  s.moe_weighting = MoeWeighting::kTokens;
  EXPECT_EQ(weighted_checkpoint, build_transformer_layer(m, s, /*moe=*/true).saved_activations());
}

TEST(LayerGraph, ExpertGemmsRunAKernelPerExpertUnlessGrouped) {
  // Mixtral, ep 2: four local experts. By default (Transformer Engine's GroupedLinear) each
  // expert's GEMM is its own kernel, forward, backward and recomputed; grouped, one kernel.
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 2;
  s.recompute = Recompute::kFull;
  const auto per_gemm = [&](const LayerGraph& g) {
    std::vector<std::string> names;
    for (OpId id = 0; id < g.num_ops(); ++id) {
      const Op& op = g.op(id);
      if (op.kind == OpKind::kGemm && op.gemm.kernel_per_gemm) {
        EXPECT_EQ(op.gemm.count, 4) << op.name;
        names.push_back(op.name);
      }
    }
    return names;
  };
  EXPECT_EQ(per_gemm(build_transformer_layer(m, s, /*moe=*/true)),
            (std::vector<std::string>{"moe.expert_fc1", "moe.expert_fc2",
                                      "moe.expert_fc1.recompute", "moe.expert_fc2.recompute",
                                      "moe.expert_fc2.dgrad", "moe.expert_fc2.wgrad",
                                      "moe.expert_fc1.dgrad", "moe.expert_fc1.wgrad"}));
  s.expert_gemm = ExpertGemm::kGrouped;
  EXPECT_TRUE(per_gemm(build_transformer_layer(m, s, /*moe=*/true)).empty());
}

TEST(LayerGraph, DeduplicatedExchangesSendOneCopyOfTheTokensWithTheirRouting) {
  // Mixtral (8 experts, top 2), ep 4: by default the dispatch, the combine and their gradients
  // are all-to-alls of the copies other ranks' experts take, 3/4 of the 2 copies of each of the
  // 4096 tokens; deduplicated, of one copy of the tokens, with the routing that spreads them.
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 4;
  const double row = 4096.0 * 2;  // a token's bf16 activations
  const auto exchanges = [&](const LayerGraph& g) {
    std::vector<CommSpec> specs;
    for (OpId id = 0; id < g.num_ops(); ++id) {
      if (g.op(id).name.starts_with("moe.dispatch") || g.op(id).name.starts_with("moe.combine")) {
        specs.push_back(g.op(id).comm);
      }
    }
    return specs;
  };
  const std::vector<CommSpec> copies = exchanges(build_transformer_layer(m, s, /*moe=*/true));
  ASSERT_EQ(copies.size(), 4u);
  for (const CommSpec& spec : copies) {
    EXPECT_EQ(spec.collective, Collective::kAllToAll);
    EXPECT_EQ(spec.size, Bytes(4096 * 2 * row * 3 / 4));
    EXPECT_FALSE(spec.routing.deduplicated());
  }
  s.ep_dispatcher = TokenDispatcher::kDeduplicated;
  const std::vector<CommSpec> deduplicated = exchanges(build_transformer_layer(m, s, /*moe=*/true));
  ASSERT_EQ(deduplicated.size(), 4u);
  for (const CommSpec& spec : deduplicated) {
    EXPECT_EQ(spec.collective, Collective::kAllToAll);
    EXPECT_EQ(spec.group, CommGroup::kExpert);
    EXPECT_EQ(spec.size, Bytes(4096 * row));
    EXPECT_EQ(spec.routing, (TokenRouting{8, 2}));
  }
  // The rank holding the busiest expert, at twice the mean, and one at 6/7 of it takes 10/7 of
  // its share of the copies; deduplicated, it sends 10/7 of its tokens, and either way its
  // buffers hold 3/4 of the copies it takes, forward and backward.
  ModelSpec imbalanced = m;
  imbalanced.moe->imbalance = 2.0;
  const LayerGraph g = build_transformer_layer(imbalanced, s, /*moe=*/true);
  for (OpId id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    if (!op.name.starts_with("moe.dispatch") && !op.name.starts_with("moe.combine")) continue;
    EXPECT_NEAR(op.comm.size / Bytes(1), 4096 * row * 10 / 7, 1.0) << op.name;
    EXPECT_NEAR(op.transient / Bytes(1), 4096 * 2 * row * 10 / 7 * 3 / 4, 1.0) << op.name;
  }
}

TEST(LayerGraph, BlocksNameTheLargestWeightTheyHold) {
  // GPT-like, tp 2: the MLP projection (1024 x 4096 / 2) outgrows the fused QKV (1024 x 3072 / 2);
  // the embedding's vocab-parallel table (32000 x 1024 / 2) the learned positions (2048 x 1024).
  const ModelSpec gpt = gpt_like();
  EXPECT_EQ(build_transformer_layer(gpt, shard(2, false), false).largest_weight(), 1024 * 4096 / 2);
  EXPECT_EQ(build_embedding(gpt, shard(2, false)).largest_weight(), 32000 * 1024 / 2);
  // Mixtral: one expert's projection (4096 x 14336, EP only) outgrows the QKV (4096 x 6144).
  const ModelSpec mixtral = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s = shard(2, false);
  s.ep = 8;
  EXPECT_EQ(build_transformer_layer(mixtral, s, true).largest_weight(), 4096LL * 14336);
}

TEST(LayerGraph, Fp8CopiesAreOfTheWeightsOfFp8GemmsOnly) {
  // A Qwen2-like MoE layer at tp 2 (sequence-parallel), ep 4 in fp8: the QKV weight (h·3h/2),
  // the projection (h·h/2), the two shared experts run as one gated MLP of 512 split over tp
  // (3·h·512/2) and the 2 local experts (2·3·h·512); not the norms, the QKV bias or the fp32
  // router. The output head stays 16-bit.
  ModelSpec m = gpt_like();
  m.norm = Norm::kRmsNorm;
  m.activation = Activation::kSwiglu;
  m.qkv_bias = true;
  m.moe = MoeSpec{
      .experts = 8, .top_k = 2, .ffn_hidden = 512, .shared_experts = 2, .shared_ffn_hidden = 256};
  LayerShard s = shard(2, /*sp=*/true);
  s.ep = 4;
  s.fp8 = true;
  const int64_t h = 1024;
  EXPECT_EQ(build_transformer_layer(m, s, true).fp8_gemm_parameters,
            h * 3 * h / 2 + h * h / 2 + 3 * h * 512 / 2 + 2 * 3 * h * 512);
  EXPECT_EQ(build_output_head(m, s).fp8_gemm_parameters, 0);
  // Dense with grouped-query attention (4 key/value heads of 64): QKV h·(h + 2·4·64)/2, the
  // projection h·h/2, the gated MLP 3·h·4096/2.
  ModelSpec dense = llama_like();
  dense.kv_heads = 4;
  EXPECT_EQ(build_transformer_layer(dense, s, false).fp8_gemm_parameters,
            h * (h + 2 * 4 * 64) / 2 + h * h / 2 + 3 * h * 4096 / 2);
  // DeepSeek-V3's MoE layer at tp 2, ep 8: the down-projections whole (7168·1536 for the queries,
  // 7168·(512 + 64) for the keys and values), the up-projections split over tp (1536·128·192/2,
  // 512·128·(128 + 128)/2), the projection 128·128·7168/2, the shared expert 3·7168·2048/2 and
  // 32 local experts of 3·7168·2048.
  const ModelSpec v3 = resolve_model("deepseek-v3", default_model_catalog(), {});
  LayerShard v3_shard = shard(2, /*sp=*/true);
  v3_shard.seq_len = 4096;
  v3_shard.ep = 8;
  v3_shard.fp8 = true;
  const int64_t v3_h = 7168;
  EXPECT_EQ(build_transformer_layer(v3, v3_shard, true).fp8_gemm_parameters,
            v3_h * 1536 + v3_h * (512 + 64) + 1536 * 128 * 192 / 2 + 512 * 128 * (128 + 128) / 2 +
                128 * 128 * v3_h / 2 + 3 * v3_h * 2048 / 2 + 32 * 3 * v3_h * 2048);
  s.fp8 = false;
  EXPECT_EQ(build_transformer_layer(m, s, true).fp8_gemm_parameters, 0);
}

TEST(LayerGraph, ATensorParallelGroupWiderThanTheKeyValueHeadsHoldsAWholeHeadOnEachRank) {
  // Llama 3 70B (8 key/value heads of 128) at tp 16: each rank computes with one whole key/value
  // head, held by two ranks, so it holds that head's weights, not half of them, and their
  // gradients are summed over the ranks sharing it. At tp 8 the heads divide evenly.
  const ModelSpec m = resolve_model("llama3-70b", default_model_catalog(), {});
  const int64_t h = 8192, f = 28672, kv_head = 2 * 128 * h;
  const LayerGraph wide = build_transformer_layer(m, shard(16, false), false);
  EXPECT_EQ(wide.parameters, (2 * h * h + 3 * h * f) / 16 + 2 * h + kv_head);
  EXPECT_EQ(wide.tp_summed_parameters, kv_head);
  const LayerGraph even = build_transformer_layer(m, shard(8, false), false);
  EXPECT_EQ(even.parameters, (2 * h * h + 3 * h * f + 8 * kv_head) / 8 + 2 * h);
  EXPECT_EQ(even.tp_summed_parameters, 0);
}

TEST(LayerGraph, WeightTensorsAreTheParametersOneByOne) {
  // GPT-3 (biases, LayerNorm) at tp 8: LayerNorm weight and bias, fused QKV and its bias,
  // projection and its bias, LayerNorm, fc1 and its bias, fc2 and its bias.
  const ModelSpec gpt3 = resolve_model("gpt3-175b", default_model_catalog(), {});
  const int64_t h = 12288;
  const LayerGraph layer = build_transformer_layer(gpt3, shard(8, false), false);
  EXPECT_EQ(layer.weight_tensors, (std::vector<int64_t>{h, h, h * 3 * h / 8, 3 * h / 8, h * h / 8, h / 8, h, h,
                                                        h * 4 * h / 8, 4 * h / 8, 4 * h * h / 8, h / 8}));
  // A Qwen2-like MoE layer at tp 2, ep 4: RMSNorm, QKV with its bias, projection, RMSNorm,
  // router, two shared experts run as one gated MLP of twice their width, two local experts.
  ModelSpec moe = gpt_like();
  moe.norm = Norm::kRmsNorm;
  moe.activation = Activation::kSwiglu;
  moe.qkv_bias = true;
  moe.moe = MoeSpec{.experts = 8, .top_k = 2, .ffn_hidden = 512, .shared_experts = 2, .shared_ffn_hidden = 256};
  LayerShard moe_shard = shard(2, false);
  moe_shard.ep = 4;
  const LayerGraph moe_layer = build_transformer_layer(moe, moe_shard, true);
  const int64_t d = 1024, qkv = 3 * 1024;
  EXPECT_EQ(moe_layer.weight_tensors,
            (std::vector<int64_t>{d, d * qkv / 2, qkv / 2, d * d / 2, d, d * 8,  // norms, attention, router
                                  d * 512 / 2, d * 512 / 2, 512 * d / 2,       // shared experts, 2 x 256 wide
                                  d * 512, d * 512, 512 * d, d * 512, d * 512, 512 * d}));  // two experts
  EXPECT_EQ(moe_layer.largest_weight(), d * qkv / 2);
  // Every block's tensors add up to the parameters it holds (up to one element of rounding a
  // tensor), dense or MoE.
  for (const char* name : {"gpt3-175b", "llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "mpt-7b", "deepseek-v3"}) {
    const ModelSpec m = resolve_model(name, default_model_catalog(), {});
    for (const int tp : {1, 2, 8}) {
      LayerShard s = shard(tp, false);
      s.ep = m.moe ? 8 : 1;
      std::vector<LayerGraph> blocks = {build_embedding(m, s), build_output_head(m, s)};
      blocks.push_back(build_transformer_layer(m, s, m.moe.has_value()));
      if (m.ffn_hidden > 0) blocks.push_back(build_transformer_layer(m, s, false));
      for (const LayerGraph& g : blocks) {
        int64_t sum = 0;
        for (const int64_t t : g.weight_tensors) sum += t;
        EXPECT_NEAR(static_cast<double>(sum), static_cast<double>(g.parameters),
                    static_cast<double>(g.weight_tensors.size()))
            << name << " tp " << tp;
      }
    }
  }
}

TEST(LayerGraph, BackwardExitsAndEntriesAreTheBlockBoundary) {
  const ModelSpec m = gpt_like();
  const LayerGraph g = build_transformer_layer(m, shard(1, false), false);
  EXPECT_FALSE(g.forward_entries().empty());
  EXPECT_FALSE(g.backward_entries().empty());
  EXPECT_FALSE(g.backward_exits().empty());
  EXPECT_EQ(g.op(g.forward_exit()).name, "mlp.residual");
}

// Selective recomputation of the named modules: `modules` on top of `base`.
LayerShard recomputing(LayerShard base, RecomputeModules modules) {
  base.recompute = Recompute::kSelective;
  base.recompute_modules = modules;
  return base;
}

// The bytes the forward ops of `g` whose names start with `prefix` keep, and their FLOPs.
Bytes kept_by(const LayerGraph& g, const std::string& prefix) {
  Bytes kept;
  for (const OpId id : g.ops(Phase::kForward)) {
    if (g.op(id).name.starts_with(prefix)) kept += g.op(id).saved;
  }
  return kept;
}
Flop forward_flop_of(const LayerGraph& g, const std::string& prefix) {
  Flop flop;
  for (const OpId id : g.ops(Phase::kForward)) {
    if (g.op(id).name.starts_with(prefix)) flop += g.op(id).flop;
  }
  return flop;
}

// Every op that keeps bytes names the backward op that frees them.
void expect_every_kept_activation_freed(const LayerGraph& g, const std::string& label) {
  for (OpId id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    if (op.saved <= Bytes(0)) continue;
    ASSERT_NE(op.released_by, UINT32_MAX) << label << ": " << op.name;
    EXPECT_NE(g.op(op.released_by).phase, Phase::kForward) << label << ": " << op.name;
    EXPECT_NE(g.op(op.released_by).phase, Phase::kRecompute) << label << ": " << op.name;
  }
}

TEST(LayerGraph, SelectiveRecomputeOfNoModuleKeepsWhatNoRecomputeKeeps) {
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s = shard(2, /*sp=*/true);
  s.ep = 8;
  const LayerGraph none = build_transformer_layer(m, s, /*moe=*/true);
  const LayerGraph nothing = build_transformer_layer(m, recomputing(s, {}), /*moe=*/true);
  EXPECT_EQ(nothing.saved_activations(), none.saved_activations());
  EXPECT_TRUE(nothing.ops(Phase::kRecompute).empty());
  // The default is the attention core alone.
  EXPECT_EQ(LayerShard{}.recompute_modules, RecomputeModules{RecomputeModule::kCoreAttention});
}

TEST(LayerGraph, RecomputedExpertActivationIsDiscardedByTheSecondExpertGemm) {
  // Mixtral, one expert a rank: 4096 tokens · top-2 = 8192 routed rows; the second expert GEMM
  // keeps its 14336-wide input, in bf16 or as its fp8 cast.
  const ModelSpec m = resolve_model("mixtral-8x7b", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 8;
  for (const bool fp8 : {false, true}) {
    s.fp8 = fp8;
    const double input = 8192.0 * 14336;
    const double kept_input = input * (fp8 ? 1.0 : 2.0);
    const LayerGraph none = build_transformer_layer(m, s, /*moe=*/true);
    const LayerGraph g =
        build_transformer_layer(m, recomputing(s, {RecomputeModule::kMoeActivation}), true);
    EXPECT_EQ(none.saved_activations() - g.saved_activations(), Bytes(kept_input)) << fp8;
    EXPECT_EQ(g.op(forward_op(g, "moe.expert_fc2")).saved, Bytes(0));
    // The activation keeps its input as before; after its second run (and the cast's) the GEMM
    // holds its input again, 16-bit under fp8 too (Megatron-Core's save_original_input), until
    // its weight gradient.
    EXPECT_EQ(g.op(forward_op(g, "moe.expert_act")).saved,
              none.op(forward_op(none, "moe.expert_act")).saved);
    const OpId again =
        op_in(g, Phase::kRecompute,
              fp8 ? "moe.expert_fc2.input_cast.recompute" : "moe.expert_act.recompute");
    const OpId holder = op_in(g, Phase::kRecompute, "moe.expert_fc2.input_again");
    EXPECT_EQ(g.op(again).saved, Bytes(0));
    EXPECT_EQ(g.op(holder).saved, Bytes(input * 2.0));
    EXPECT_TRUE(waits_for(g, holder, again));
    const OpId wgrad = op_in(g, Phase::kBackwardWeight, "moe.expert_fc2.wgrad");
    EXPECT_EQ(g.op(holder).released_by, wgrad);
    EXPECT_TRUE(waits_for(g, wgrad, holder));
    EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardInput, "moe.expert_fc2.dgrad"), holder));
    // The activation runs again, nothing else.
    Flop recomputed;
    for (const OpId id : g.ops(Phase::kRecompute)) recomputed += g.op(id).flop;
    EXPECT_EQ(recomputed, g.op(forward_op(g, "moe.expert_act")).flop);
    expect_every_kept_activation_freed(g, fp8 ? "fp8" : "bf16");
  }
}

TEST(LayerGraph, ADiscardedNormIsComputedAgainForEveryGemmReadingIt) {
  // DeepSeek-V3's MoE layer: its pre-MLP norm feeds the router and the shared expert, which keep
  // it (tp 1, 4096 tokens, bf16); latent attention's input norm feeds the down-projections.
  const ModelSpec m = resolve_model("deepseek-v3", default_model_catalog(), {});
  LayerShard s;
  s.seq_len = 4096;
  s.ep = 64;
  const double norm_output = 4096.0 * 7168 * 2;
  const LayerGraph none = build_transformer_layer(m, s, /*moe=*/true);
  const LayerGraph g =
      build_transformer_layer(m, recomputing(s, {RecomputeModule::kLayerNorm}), true);
  const Bytes readers = none.op(forward_op(none, "moe.router")).saved +
                        none.op(forward_op(none, "moe.shared.fc1")).saved +
                        none.op(forward_op(none, "attn.q_down")).saved +
                        none.op(forward_op(none, "attn.kv_down")).saved;
  EXPECT_EQ(readers, Bytes(3 * norm_output));  // the key/value projection reads the query's copy
  EXPECT_EQ(none.saved_activations() - g.saved_activations(), readers);
  // Each reader holds its part again, after the norm's second run.
  for (const auto& [reader, norm] :
       {std::pair{"moe.router", "mlp.norm"}, std::pair{"moe.shared.fc1", "mlp.norm"},
        std::pair{"attn.q_down", "attn.norm"}}) {
    const OpId holder = op_in(g, Phase::kRecompute, std::string(reader) + ".input_again");
    EXPECT_EQ(g.op(holder).saved, Bytes(norm_output)) << reader;
    EXPECT_TRUE(waits_for(g, holder, op_in(g, Phase::kRecompute, std::string(norm) + ".recompute")))
        << reader;
    EXPECT_EQ(g.op(holder).released_by,
              op_in(g, Phase::kBackwardWeight, std::string(reader) + ".wgrad"))
        << reader;
  }
  // The key/value projection, which keeps nothing of its own, still waits for the norm.
  EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardWeight, "attn.kv_down.wgrad"),
                        op_in(g, Phase::kRecompute, "attn.norm.recompute")));
  // They come back once the sublayer's output gradient is ready, as Megatron-Core's hooks on the
  // attention and MoE outputs run: before either's backward.
  EXPECT_LT(op_in(g, Phase::kRecompute, "attn.norm.recompute"),
            op_in(g, Phase::kBackwardInput, "attn.proj.dgrad"));
  EXPECT_LT(op_in(g, Phase::kRecompute, "moe.router.input_again"),
            op_in(g, Phase::kBackwardInput, "moe.shared_add.bwd"));
  // Recomputing the MoE layer too, its checkpoint is the discarded norm output: held again as the
  // layer's recomputation starts.
  const LayerGraph both = build_transformer_layer(
      m, recomputing(s, {RecomputeModule::kLayerNorm, RecomputeModule::kMoe}), true);
  const OpId router_again = op_in(both, Phase::kRecompute, "moe.router.input_again");
  EXPECT_EQ(both.op(router_again).saved, Bytes(norm_output));
  EXPECT_LT(router_again, op_in(both, Phase::kRecompute, "moe.router.recompute"));
  EXPECT_LT(router_again, op_in(both, Phase::kBackwardInput, "moe.shared_add.bwd"));
  expect_every_kept_activation_freed(both, "layernorm, moe");
  expect_every_kept_activation_freed(g, "layernorm");
  // A dense layer fuses its norms into the GEMMs after them: nothing to discard.
  const ModelSpec dense = llama_like();
  EXPECT_EQ(build_transformer_layer(
                dense, recomputing(shard(1, false), {RecomputeModule::kLayerNorm}), false)
                .saved_activations(),
            build_transformer_layer(dense, shard(1, false), false).saved_activations());
}

TEST(LayerGraph, RecomputedLatentUpProjectionsLeaveTheAttentionItsStatisticsAndOutput) {
  // DeepSeek-V3 at tp 2: the attention kernel keeps the queries, keys and values the rotary
  // kernel writes; discarded, the up-projections and the rotary kernel run again before its
  // backward.
  const ModelSpec m = resolve_model("deepseek-v3", default_model_catalog(), {});
  const LayerShard s = tp2_sequence_parallel_shard();
  const LayerGraph none = build_transformer_layer(m, s, false);
  const LayerGraph g =
      build_transformer_layer(m, recomputing(s, {RecomputeModule::kLatentUpProjection}), false);
  // 64 heads of queries and keys 192 wide and values 128 wide, bf16.
  const double qkv = 4096.0 * 64 * (192 + 192 + 128) * 2;
  EXPECT_EQ(none.saved_activations() - g.saved_activations(), Bytes(qkv));
  EXPECT_EQ(none.op(forward_op(none, "attn.core")).saved - g.op(forward_op(g, "attn.core")).saved,
            Bytes(qkv));
  const OpId rotary = op_in(g, Phase::kRecompute, "attn.rotary.recompute");
  const OpId holder = op_in(g, Phase::kRecompute, "attn.core.input_again");
  EXPECT_EQ(g.op(holder).saved, Bytes(qkv));
  EXPECT_TRUE(waits_for(g, holder, rotary));
  EXPECT_TRUE(waits_for(g, rotary, op_in(g, Phase::kRecompute, "attn.q_up.recompute")));
  EXPECT_TRUE(waits_for(g, rotary, op_in(g, Phase::kRecompute, "attn.kv_up.recompute")));
  EXPECT_TRUE(waits_for(g, op_in(g, Phase::kBackwardInput, "attn.core.bwd"), holder));
  // The compressed query's and key/value's norms keep their inputs; their outputs go to the
  // gather, which is not recomputed, so they do not run again at tp 2, and do at tp 1, where the
  // up-projections read them.
  const auto recomputes = [](const LayerGraph& graph, const std::string& name) {
    return std::ranges::any_of(graph.ops(Phase::kRecompute),
                               [&](OpId id) { return graph.op(id).name == name + ".recompute"; });
  };
  LayerShard one = s;
  one.tp = 1;
  one.sequence_parallel = false;
  const LayerGraph whole =
      build_transformer_layer(m, recomputing(one, {RecomputeModule::kLatentUpProjection}), false);
  for (const char* norm : {"attn.q_norm", "attn.kv_norm"}) {
    EXPECT_EQ(g.op(forward_op(g, norm)).saved, none.op(forward_op(none, norm)).saved) << norm;
    EXPECT_FALSE(recomputes(g, norm)) << norm;
    EXPECT_TRUE(recomputes(whole, norm)) << norm;
  }
  expect_every_kept_activation_freed(whole, "mla_up_proj at tp 1");
  // Over a context-parallel ring every step's backward needs them: they come back once the
  // attention's output gradient is ready, before the last step's backward.
  LayerShard ring = s;
  ring.seq_len = 8192;
  ring.cp = 2;
  for (const ContextComm comm : {ContextComm::kRing, ContextComm::kAllGather}) {
    ring.cp_comm = comm;
    const LayerGraph cp = build_transformer_layer(
        m, recomputing(ring, {RecomputeModule::kLatentUpProjection}), false);
    const OpId again = op_in(cp, Phase::kRecompute, "attn.core.step0.input_again");
    for (const char* step : {"attn.core.step0.bwd", "attn.core.step1.bwd"}) {
      EXPECT_LT(again, op_in(cp, Phase::kBackwardInput, step)) << step;
    }
    expect_every_kept_activation_freed(cp, "mla_up_proj with cp 2");
  }
  EXPECT_EQ(g.flop(Phase::kRecompute), g.op(forward_op(g, "attn.q_up")).flop +
                                           g.op(forward_op(g, "attn.kv_up")).flop +
                                           g.op(forward_op(g, "attn.rotary")).flop);
  expect_every_kept_activation_freed(g, "mla_up_proj");
  // With the attention core recomputed too, its checkpoint is what is discarded.
  const LayerGraph both = build_transformer_layer(
      m, recomputing(s, {RecomputeModule::kCoreAttention, RecomputeModule::kLatentUpProjection}),
      false);
  const LayerGraph core =
      build_transformer_layer(m, recomputing(s, {RecomputeModule::kCoreAttention}), false);
  EXPECT_EQ(core.saved_activations() - both.saved_activations(), Bytes(qkv));
  expect_every_kept_activation_freed(both, "core_attn, mla_up_proj");
}

TEST(LayerGraph, RecomputedModulesKeepOnlyTheirInput) {
  // A dense layer's MLP with its fused norm (tp 2 with sequence parallelism: its input is the
  // rank's 2048-token share of the residual stream); an MoE layer whole; its shared experts.
  const double e = 2.0;
  const ModelSpec dense = llama_like();
  const LayerShard s = shard(2, /*sp=*/true);
  const LayerGraph none = build_transformer_layer(dense, s, false);
  const LayerGraph mlp =
      build_transformer_layer(dense, recomputing(s, {RecomputeModule::kMlp}), false);
  const Bytes input(sbh(dense, s) / 2 * e);
  EXPECT_EQ(mlp.saved_activations(), none.saved_activations() - kept_by(none, "mlp.") + input);
  EXPECT_EQ(mlp.flop(Phase::kRecompute),
            forward_flop_of(none, "mlp.") - forward_flop_of(none, "mlp.residual"));
  expect_every_kept_activation_freed(mlp, "mlp");

  const ModelSpec m = resolve_model("deepseek-v3", default_model_catalog(), {});
  LayerShard moe_shard;
  moe_shard.seq_len = 4096;
  moe_shard.ep = 64;
  const Bytes layer_input(4096.0 * 7168 * e);
  const LayerGraph kept = build_transformer_layer(m, moe_shard, true);
  const LayerGraph moe =
      build_transformer_layer(m, recomputing(moe_shard, {RecomputeModule::kMoe}), true);
  EXPECT_EQ(moe.saved_activations(),
            kept.saved_activations() - kept_by(kept, "moe.") + layer_input);
  EXPECT_EQ(moe.flop(Phase::kRecompute), forward_flop_of(kept, "moe."));
  expect_every_kept_activation_freed(moe, "moe");
  const LayerGraph shared =
      build_transformer_layer(m, recomputing(moe_shard, {RecomputeModule::kSharedExperts}), true);
  EXPECT_EQ(shared.saved_activations(),
            kept.saved_activations() - kept_by(kept, "moe.shared.") + layer_input);
  EXPECT_EQ(shared.flop(Phase::kRecompute), forward_flop_of(kept, "moe.shared."));
  // The MLP module is a dense layer's: an MoE layer keeps what it kept.
  EXPECT_EQ(build_transformer_layer(m, recomputing(moe_shard, {RecomputeModule::kMlp}), true)
                .saved_activations(),
            kept.saved_activations());
}

}  // namespace
}  // namespace paceline
