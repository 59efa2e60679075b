#include "models/layer_graph.h"

#include <boost/graph/topological_sort.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iterator>

#include "base/check.h"

namespace paceline {

namespace {

// How a forward op's backward is formed.
enum class Recipe {
  kWeightGemm,       // x·W: an input-gradient GEMM and a weight-gradient GEMM
  kActivationGemm,   // a product of two activations (unfused attention): two input-gradient GEMMs
  kAttention,        // fused attention backward
  kMemory,           // one memory-bound backward pass
  kCommunication,    // the transposed collective (or nothing)
  kNoGradient,       // nothing flows back (e.g. the embedding's gather of token ids)
};

}  // namespace

// Declares forward ops with their backward recipes, then derives recomputation and backward.
class LayerGraphBuilder {
 public:
  explicit LayerGraphBuilder(const LayerShard& shard) : shard_(shard) {}

  struct Forward {
    Op op;
    std::vector<int> inputs;  // forward ops whose output this op reads
    Recipe recipe = Recipe::kMemory;
    Bytes backward_bytes;             // kMemory: traffic of the backward pass
    int backward_kernels = 1;         // kMemory: kernels the backward pass launches
    Bytes backward_transient;         // buffers alive only while the backward pass runs (kMemory; a
                                      // collective's where they are not its size)
    Bytes backward_stranded;          // kMemory: cached blocks too small for those (Op::stranded)
    MemoryKernel backward_kernel = MemoryKernel::kNone;
    CommSpec backward_comm;           // kCommunication: the transposed collective
    CommSpec regather_for_wgrad;  // kWeightGemm keeping its input's sequence shard: input re-gather
    Bytes grad_cast_bytes;            // fp8: cast of the output gradient before the GEMMs
    // kWeightGemm: the ranks that each hold a part of the weight it computes with (shared
    // experts, computed whole on a rank's own tokens, are held over the tensor-parallel group).
    int num_weight_holders = 1;
    // Under selective recompute, recomputed when any of these modules is, from the input of the
    // module (RecomputeModules) ...
    RecomputeModules recompute_in;
    // ... which this op keeps (`checkpoint_bytes`) when recomputed for a module it enters.
    RecomputeModules checkpoint_of;
    // Under selective recompute with any of these modules, computed again before the backward of
    // the weight GEMMs reading its output, which keep none of it (output-discarding checkpoints).
    RecomputeModules discards_output_in;
    // Of a discarding op: the op whose output gradient, once ready, has it computed again (the
    // module Megatron-Core hooks the recomputation on).
    int discard_trigger = -1;
    // Under per-operator recomputation: the output this op keeps (zero: it is recomputed), and
    // for a GEMM that keeps part of its output, the output columns it recomputes.
    Bytes per_op_output;
    int64_t per_op_recompute_columns = 0;
    // Kept from forward even when selectively recomputed: the inputs the recomputation starts
    // from (released with the rest by the op's backward).
    Bytes checkpoint_bytes;
    // The checkpoint is all the op reads (a module's entry), not part of it (the attention
    // core's ·V product keeps V, not the probabilities it recomputes).
    bool keeps_its_inputs = false;
    // A part of the attention core, which keeps its `checkpoint_bytes` when recomputed.
    void recompute_in_core_attention() {
      recompute_in.add(RecomputeModule::kCoreAttention);
      checkpoint_of.add(RecomputeModule::kCoreAttention);
    }
    // kWeightGemm: forward ops whose backward also delivers part of this GEMM's output gradient,
    // which the weight gradient needs whole (a reduce-scatter split beside the GEMM).
    std::vector<int> wgrad_also_after;
    // kCommunication: the backward is an autograd function of its own, issued once the backward
    // of the ops reading the collective's output has run, weight gradients included, so it waits
    // for their weight gradients (the expert-parallel dispatch, and PyTorch's tensor-parallel
    // redistributions; Megatron-LM's tensor-parallel collectives run inside their GEMM's
    // backward, beside its weight gradient).
    bool backward_after_weight_gradients = false;
    // kWeightGemm: the forward op after whose backward the weight gradient is computed (delayed
    // past the backward ops between them); -1: beside its data gradient.
    int weight_gradient_after = -1;
  };

  int add(Forward f) {
    forwards_.push_back(std::move(f));
    return static_cast<int>(forwards_.size() - 1);
  }
  Forward& at(int index) { return forwards_[index]; }

  // `rest` carries the remaining chunks of the data `first` starts: the ops reading `first`
  // begin on its chunk, the ops reading theirs also wait for `rest`.
  void complete_beside(int first, int rest) { completions_.emplace_back(first, rest); }

  // Names the ops added from `first` on as parts of `prefix` (a multi-token prediction module).
  void prefix_names(int first, const std::string& prefix) {
    for (size_t i = first; i < forwards_.size(); ++i)
      forwards_[i].op.name = prefix + forwards_[i].op.name;
  }
  int size() const { return static_cast<int>(forwards_.size()); }

  // The ops from `first` on form `module`, recomputed from the `input` bytes `first` reads.
  void recompute_from(int first, RecomputeModule module, Bytes input) {
    for (size_t i = first; i < forwards_.size(); ++i) forwards_[i].recompute_in.add(module);
    keep_checkpoint(first, module, input);
  }
  // `entry`, an op of `module` reading only from outside it, keeps the `input` bytes it reads as
  // part of the module's checkpoint: its recomputation reads them, whatever made them.
  void keep_checkpoint(int entry, RecomputeModule module, Bytes input) {
    PACELINE_CHECK(forwards_[entry].checkpoint_of.empty(), "an op entering two recomputed modules");
    forwards_[entry].checkpoint_of.add(module);
    forwards_[entry].checkpoint_bytes = input;
    forwards_[entry].keeps_its_inputs = true;
  }
  // `ops` form `module`, which discards its output (output-discarding): run without autograd, an
  // op reading only the module's inputs keeps what it kept (them), the others keep nothing in
  // forward, and all run again once the gradient of `trigger`'s output is ready, before the
  // backward of the readers that kept their outputs.
  void discard_outputs(const std::vector<int>& ops, RecomputeModule module, int trigger) {
    for (const int op : ops) {
      Forward& f = forwards_[op];
      f.discards_output_in.add(module);
      f.discard_trigger = trigger;
      if (std::ranges::any_of(
              f.inputs, [&](int input) { return std::ranges::find(ops, input) != ops.end(); }))
        f.recompute_in.add(module);
    }
  }

  // The block's input is held by `holder` (its first reader) under full recompute.
  void set_input_holder(int holder, Bytes input_bytes) {
    input_holder_ = holder;
    input_bytes_ = input_bytes;
  }

  LayerGraph build(int64_t parameters, int64_t parameters_total, std::vector<int64_t> weight_tensors);

 private:
  OpId add_vertex(LayerGraph& g, Op op, const std::vector<OpId>& after) {
    const OpId id = static_cast<OpId>(boost::add_vertex(g.graph_.get()));
    g.by_phase_[static_cast<int>(op.phase)].push_back(id);
    g.mutable_op(id) = std::move(op);
    for (const OpId a : after) boost::add_edge(a, id, g.graph_.get());
    return id;
  }

  const LayerShard shard_;  // a copy: callers may pass a temporary
  std::vector<Forward> forwards_;
  std::vector<std::pair<int, int>> completions_;  // (first, rest)
  int input_holder_ = -1;
  Bytes input_bytes_;
};

LayerGraph LayerGraphBuilder::build(int64_t parameters, int64_t parameters_total, std::vector<int64_t> weight_tensors) {
  LayerGraph g;
  g.parameters = parameters;
  g.parameters_total = parameters_total;
  g.weight_tensors = std::move(weight_tensors);
  for (const Forward& f : forwards_) {
    if (f.recipe == Recipe::kWeightGemm && f.op.gemm.dtype == DType::kFp8) {
      const GemmShape& gemm = f.op.gemm;
      g.fp8_gemm_parameters += gemm.n * gemm.k * gemm.count / f.num_weight_holders;
    }
  }
  const size_t n = forwards_.size();
  // complete_beside: the readers of the readers of `first` also wait for `rest`.
  for (const auto& [first, rest] : completions_) {
    std::vector<bool> reads_first(n, false);
    for (size_t i = 0; i < n; ++i) {
      const std::vector<int>& in = forwards_[i].inputs;
      reads_first[i] = static_cast<int>(i) != rest && std::find(in.begin(), in.end(), first) != in.end();
    }
    for (size_t i = 0; i < n; ++i) {
      std::vector<int>& in = forwards_[i].inputs;
      if (std::any_of(in.begin(), in.end(), [&](int input) { return reads_first[input]; })) in.push_back(rest);
    }
  }
  const bool full = shard_.recompute == Recompute::kFull;
  const bool per_op = shard_.recompute == Recompute::kSelectiveOp;
  const bool from_input = full || per_op;  // the recomputation starts from the block's input
  g.recomputed_whole = full;
  const RecomputeModules modules =
      shard_.recompute == Recompute::kSelective ? shard_.recompute_modules : RecomputeModules{};
  std::vector<bool> recomputed(n, false);
  // What a recomputed op keeps of its forward: its checkpoint when it enters a module recomputed.
  const auto checkpoint = [&](size_t i) {
    return forwards_[i].checkpoint_of.intersects(modules) ? forwards_[i].checkpoint_bytes
                                                          : Bytes(0);
  };
  // Output-discarding: the readers of a discarded output (`rereads`: weight GEMMs, an attention
  // kernel keeping its queries, keys and values, a recomputed module keeping it as its
  // checkpoint) keep none of it in forward (`dropped`); the ops that made it run again before
  // their backward, and a holder keeps it for each until it releases it (`held_again`: an fp8
  // GEMM then keeps its 16-bit input, Megatron-Core's save_original_input, and casts it again).
  // An op of such a module reading only its inputs keeps what it kept and runs again
  // (`discarding`) where a reader needs it.
  std::vector<bool> discarded(n, false);
  std::vector<std::vector<int>> rereads(n);
  std::vector<Bytes> dropped(n);
  std::vector<Bytes> held_again(n);
  std::vector<bool> read_again(n, false);
  const double activation_bytes = bytes_per_element(shard_.activation_dtype);
  for (size_t i = 0; i < n; ++i) {
    const Forward& f = forwards_[i];
    recomputed[i] = full || f.recompute_in.intersects(modules) ||
                    (per_op && (f.per_op_output <= Bytes(0) || f.per_op_recompute_columns > 0));
    discarded[i] = f.discards_output_in.intersects(modules);
    const bool gemm = !recomputed[i] && f.recipe == Recipe::kWeightGemm;
    const Bytes keeps = recomputed[i]                    ? checkpoint(i)
                        : gemm                           ? f.op.saved
                        : f.recipe == Recipe::kAttention ? f.checkpoint_bytes
                                                         : Bytes(0);
    for (const int input : f.inputs) {
      if (!discarded[input]) continue;
      if (gemm || keeps > Bytes(0)) rereads[i].push_back(input);
      read_again[input] = read_again[input] || recomputed[i] || gemm || keeps > Bytes(0);
    }
    if (rereads[i].empty()) continue;
    dropped[i] = keeps;
    held_again[i] = gemm && f.op.gemm.dtype == DType::kFp8 ? keeps * activation_bytes : keeps;
  }
  std::vector<bool> discarding(n, false);
  for (size_t i = 0; i < n; ++i) discarding[i] = discarded[i] && !recomputed[i] && read_again[i];
  // The readers whose discarded inputs come back once the gradient of op t's output is ready.
  std::vector<std::vector<int>> triggered(n);
  for (size_t reader = 0; reader < n; ++reader) {
    for (const int input : rereads[reader]) {
      const int trigger = forwards_[input].discard_trigger;
      PACELINE_CHECK(trigger >= static_cast<int>(reader),
                     "a discarded output computed again after its reader's backward");
      if (std::ranges::find(triggered[trigger], static_cast<int>(reader)) ==
          triggered[trigger].end())
        triggered[trigger].push_back(static_cast<int>(reader));
    }
  }

  // Forward ops. A recomputed op keeps only its checkpoint (nothing when the block re-runs from
  // its input) in forward; its recompute copy keeps the rest. Per operator, a kept op keeps its
  // output instead of its inputs.
  std::vector<OpId> forward_id(n);
  for (size_t i = 0; i < n; ++i) {
    Op op = forwards_[i].op;
    op.phase = Phase::kForward;
    if (per_op) {
      op.saved = forwards_[i].per_op_output;
    } else if (recomputed[i]) {
      op.saved = full ? Bytes(0) : checkpoint(i);
    }
    if (!rereads[i].empty()) op.saved -= dropped[i];
    if (from_input && static_cast<int>(i) == input_holder_) op.saved = input_bytes_;
    std::vector<OpId> after;
    for (const int input : forwards_[i].inputs) after.push_back(forward_id[input]);
    forward_id[i] = add_vertex(g, op, after);
  }
  g.forward_exit_ = forward_id[n - 1];

  // Recompute copies. Recomputed from the block's input (full, per operator), the whole forward
  // runs again as the block's backward starts. Selectively, a part runs again once the gradient
  // of its output is ready (`ready`), right before its backward, as autograd reaches a
  // checkpoint; a discarded output once its trigger's is, as Megatron-Core's hooks run; inputs'
  // copies first.
  std::vector<OpId> recompute_id(n, UINT32_MAX);
  // Op i's recompute copy, and a reader's discarded inputs made again with its holder (defined
  // below); each calls the other.
  std::function<void(size_t, const std::vector<OpId>&)> emit_recompute;
  std::function<void(size_t, const std::vector<OpId>&)> emit_reread;
  emit_recompute = [&](size_t i, const std::vector<OpId>& ready) {
    if (recompute_id[i] != UINT32_MAX) return;
    // A module whose checkpoint is a discarded output holds it again first.
    if (!rereads[i].empty()) emit_reread(i, ready);
    std::vector<OpId> after = ready;
    // A module's entry reads its checkpoint, not a copy another module recomputes (one
    // multi-token prediction module reading the one before it).
    const bool reads_checkpoint = forwards_[i].keeps_its_inputs && checkpoint(i) > Bytes(0);
    for (const int input : forwards_[i].inputs) {
      if (!discarding[input] && (!recomputed[input] || reads_checkpoint)) continue;
      emit_recompute(input, ready);
      after.push_back(recompute_id[input]);
    }
    Op op = forwards_[i].op;
    op.phase = Phase::kRecompute;
    op.name += ".recompute";
    if (discarding[i]) {
      op.saved = Bytes(0);
    } else if (!from_input) {
      // A checkpointed module's input may be wider than what its first op keeps (an fp8 GEMM
      // keeps its fp8 cast).
      op.saved = std::max(Bytes(0), op.saved - checkpoint(i));
    }
    if (per_op && forwards_[i].per_op_recompute_columns > 0) {
      // Only the columns not kept are computed again; the copy keeps the GEMM's input.
      const double share = static_cast<double>(forwards_[i].per_op_recompute_columns) / static_cast<double>(op.gemm.n);
      op.gemm.n = forwards_[i].per_op_recompute_columns;
      op.flop = op.flop * share;
      op.bytes = op.bytes * share;
      op.transient = op.transient * share;
    }
    recompute_id[i] = add_vertex(g, op, after);
  };
  // What a reader of discarded outputs waits for before its backward: the ops making them again,
  // through the holder keeping its part, released where the reader would have released it.
  std::vector<std::vector<OpId>> reread_ready(n);
  std::vector<OpId> holder_id(n, UINT32_MAX);
  emit_reread = [&](size_t i, const std::vector<OpId>& ready) {
    if (!reread_ready[i].empty()) return;  // emitted already
    for (const int input : rereads[i]) {
      emit_recompute(input, ready);
      reread_ready[i].push_back(recompute_id[input]);
    }
    if (held_again[i] <= Bytes(0)) return;
    // A memory op moving nothing: it runs in no time, but unlike an identity op it is planned,
    // and so holds bytes.
    Op holder;
    holder.name = forwards_[i].op.name + ".input_again";
    holder.phase = Phase::kRecompute;
    holder.kind = OpKind::kMemoryBound;
    holder.saved = held_again[i];
    holder_id[i] = add_vertex(g, holder, reread_ready[i]);
    reread_ready[i] = {holder_id[i]};
  };
  if (from_input) {
    for (size_t i = 0; i < n; ++i) {
      if (recomputed[i]) emit_recompute(i, {});
    }
  }
  // Per operator, an op kept whole reads its inputs again in backward: their recompute copies
  // produce them and hold them (until their own backward, a little past this op's).
  std::vector<std::vector<OpId>> recomputed_inputs(n);
  if (per_op) {
    for (size_t i = 0; i < n; ++i) {
      if (recomputed[i]) continue;
      for (const int input : forwards_[i].inputs) {
        if (recomputed[input]) recomputed_inputs[i].push_back(recompute_id[input]);
      }
      if (!recomputed_inputs[i].empty()) g.mutable_op(recomputed_inputs[i].front()).saved += forwards_[i].op.saved;
    }
  }

  // Backward, in reverse forward order. grad_in[i]: the ops producing the gradient of op i's
  // inputs; the gradient of op i's output comes from grad_in of its consumers.
  std::vector<std::vector<int>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    for (const int input : forwards_[i].inputs) consumers[input].push_back(static_cast<int>(i));
  }
  std::vector<std::vector<OpId>> grad_in(n);
  std::vector<OpId> weight_gradient(n, UINT32_MAX);
  // Delayed weight gradients, by the forward op whose backward they follow: (op, waits, frees).
  struct DelayedWeightGradient {
    Op op;
    std::vector<OpId> after;
    std::vector<OpId> frees;  // the ops whose kept tensors it releases
  };
  std::vector<std::vector<DelayedWeightGradient>> delayed(n);
  std::vector<OpId> holder_release;
  for (size_t r = n; r-- > 0;) {
    const Forward& f = forwards_[r];
    std::vector<OpId> grad_out;
    for (const int c : consumers[r]) grad_out.insert(grad_out.end(), grad_in[c].begin(), grad_in[c].end());
    if (!from_input) {
      for (const int reader : triggered[r]) emit_reread(reader, grad_out);
      if (recomputed[r]) emit_recompute(r, grad_out);
      if (!rereads[r].empty()) emit_reread(r, grad_out);
    }
    std::vector<OpId> after = grad_out;
    // A backward op needs what its forward op kept, recomputed (a collective's backward needs
    // nothing of it).
    if (recomputed[r] && f.recipe != Recipe::kCommunication) after.push_back(recompute_id[r]);
    after.insert(after.end(), reread_ready[r].begin(), reread_ready[r].end());
    if (f.recipe != Recipe::kCommunication) after.insert(after.end(), recomputed_inputs[r].begin(), recomputed_inputs[r].end());
    if (f.backward_after_weight_gradients) {
      // The ops reading this one's output, directly or through others, come after it in forward.
      std::vector<bool> downstream(n, false);
      downstream[r] = true;
      for (size_t i = r + 1; i < n; ++i) {
        for (const int input : forwards_[i].inputs) downstream[i] = downstream[i] || downstream[input];
        if (downstream[i] && weight_gradient[i] != UINT32_MAX) after.push_back(weight_gradient[i]);
      }
    }
    // The op whose saved tensors a backward op consumes (and then frees).
    const OpId saver = recomputed[r] ? recompute_id[r] : forward_id[r];

    auto backward_op = [&](std::string suffix, Phase phase, OpKind kind) {
      Op op;
      op.name = f.op.name + "." + suffix;
      op.phase = phase;
      op.kind = kind;
      return op;
    };
    if (f.grad_cast_bytes > Bytes(0)) {
      Op cast = backward_op("grad_cast", Phase::kBackwardInput, OpKind::kMemoryBound);
      cast.memory_kernel = MemoryKernel::kCast;
      cast.bytes = f.grad_cast_bytes;
      const OpId id = add_vertex(g, cast, after);
      after = {id};
    }
    switch (f.recipe) {
      case Recipe::kWeightGemm: {
        // dX = dY·Wᵀ (M×K from M×N and N×K); dW = Xᵀ·dY (K×N, reducing over M).
        const GemmShape& s = f.op.gemm;
        Op dgrad = backward_op("dgrad", Phase::kBackwardInput, OpKind::kGemm);
        dgrad.gemm = GemmShape{s.m, s.k, s.n, s.count, s.dtype, GemmLayout::kDataGradient};
        dgrad.gemm.kernel_per_gemm = s.kernel_per_gemm;
        dgrad.gemm.first_extra_tokens = s.first_extra_tokens;
        dgrad.flop = f.op.flop;
        dgrad.bytes = f.op.bytes;
        dgrad.transient = Bytes(s.a_elements() * bytes_per_element(shard_.activation_dtype));
        const OpId dgrad_id = add_vertex(g, dgrad, after);
        std::vector<OpId> wgrad_after = after;
        for (const int part : f.wgrad_also_after) wgrad_after.insert(wgrad_after.end(), grad_in[part].begin(), grad_in[part].end());
        if (f.regather_for_wgrad.collective != Collective::kNone) {
          Op gather = backward_op("input_regather", Phase::kBackwardWeight, OpKind::kCommunication);
          gather.comm = f.regather_for_wgrad;
          gather.transient = f.regather_for_wgrad.size;
          wgrad_after.push_back(add_vertex(g, gather, after));
        }
        Op wgrad = backward_op("wgrad", Phase::kBackwardWeight, OpKind::kGemm);
        wgrad.gemm = GemmShape{s.k, s.n, s.m, s.count, s.dtype, GemmLayout::kWeightGradient, shard_.gradient_buffer};
        wgrad.gemm.kernel_per_gemm = s.kernel_per_gemm;
        wgrad.gemm.first_extra_tokens = s.first_extra_tokens;
        wgrad.flop = f.op.flop;
        wgrad.bytes = f.op.bytes;
        grad_in[r] = {dgrad_id};
        if (f.weight_gradient_after >= 0) {
          PACELINE_CHECK(f.weight_gradient_after < static_cast<int>(r), "a weight gradient delayed to a later op");
          std::vector<OpId> frees = {saver};
          if (!full && saver != forward_id[r] && g.op(forward_id[r]).saved > Bytes(0)) {
            frees.push_back(forward_id[r]);
          }
          delayed[f.weight_gradient_after].push_back({wgrad, wgrad_after, frees});
          break;
        }
        const OpId wgrad_id = add_vertex(g, wgrad, wgrad_after);
        weight_gradient[r] = wgrad_id;
        g.mutable_op(saver).released_by = wgrad_id;
        break;
      }
      case Recipe::kActivationGemm: {
        // C = A·B: dA = dC·Bᵀ and dB = Aᵀ·dC, both needed by earlier ops.
        const GemmShape& s = f.op.gemm;
        Op da = backward_op("dgrad_a", Phase::kBackwardInput, OpKind::kGemm);
        da.gemm = GemmShape{s.m, s.k, s.n, s.count, s.dtype, GemmLayout::kDataGradient};
        da.flop = f.op.flop;
        da.bytes = f.op.bytes;
        Op db = backward_op("dgrad_b", Phase::kBackwardInput, OpKind::kGemm);
        db.gemm = GemmShape{s.k, s.n, s.m, s.count, s.dtype, GemmLayout::kWeightGradient};
        db.flop = f.op.flop;
        db.bytes = f.op.bytes;
        const OpId a = add_vertex(g, da, after);
        const OpId b = add_vertex(g, db, after);
        g.mutable_op(saver).released_by = b;
        grad_in[r] = {a, b};
        break;
      }
      case Recipe::kAttention: {
        Op bwd = backward_op("bwd", Phase::kBackwardInput, OpKind::kAttention);
        bwd.attention = f.op.attention;
        bwd.attention.backward = true;
        // Flash attention backward: five matrix products against the forward's two.
        bwd.flop = f.op.flop * f.op.attention.backward_work_ratio();
        bwd.bytes = f.op.bytes * 2.0;
        bwd.transient = f.op.transient;
        const OpId id = add_vertex(g, bwd, after);
        g.mutable_op(saver).released_by = id;
        grad_in[r] = {id};
        break;
      }
      case Recipe::kMemory: {
        Op bwd = backward_op("bwd", Phase::kBackwardInput, OpKind::kMemoryBound);
        bwd.memory_kernel = f.backward_kernel == MemoryKernel::kNone ? f.op.memory_kernel : f.backward_kernel;
        bwd.bytes = f.backward_bytes;
        bwd.kernels = f.backward_kernels;
        bwd.transient = f.backward_transient;
        bwd.stranded = f.backward_stranded;
        bwd.flop = f.op.flop * 2.0;
        const OpId id = add_vertex(g, bwd, after);
        g.mutable_op(saver).released_by = id;
        grad_in[r] = {id};
        break;
      }
      case Recipe::kCommunication: {
        // What a collective keeps (its output, per operator; the inputs its kept readers read
        // again) is freed once the gradient has passed back through it.
        if (f.backward_comm.collective == Collective::kNone) {
          // The gradient passes through unchanged (e.g. after a forward all-reduce).
          grad_in[r] = grad_out;
          if (!grad_out.empty()) g.mutable_op(saver).released_by = grad_out.back();
          break;
        }
        Op bwd = backward_op("bwd", Phase::kBackwardInput, OpKind::kCommunication);
        bwd.comm = f.backward_comm;
        bwd.transient =
            f.backward_transient > Bytes(0) ? f.backward_transient : f.backward_comm.size;
        grad_in[r] = {add_vertex(g, bwd, after)};
        g.mutable_op(saver).released_by = grad_in[r].front();
        break;
      }
      case Recipe::kNoGradient:
        grad_in[r] = {};
        break;
    }
    // A selectively recomputed op's forward copy keeps its checkpoint until the same release.
    if (!full && saver != forward_id[r] && g.op(forward_id[r]).saved > Bytes(0)) {
      g.mutable_op(forward_id[r]).released_by = g.op(saver).released_by;
    }
    if (static_cast<int>(r) == input_holder_ && from_input) holder_release = grad_in[r];
    for (const DelayedWeightGradient& w : delayed[r]) {
      const OpId id = add_vertex(g, w.op, w.after);
      for (const OpId kept : w.frees) g.mutable_op(kept).released_by = id;
    }
  }
  for (size_t reader = 0; reader < n; ++reader) {
    if (holder_id[reader] == UINT32_MAX) continue;
    const OpId saver = recomputed[reader] ? recompute_id[reader] : forward_id[reader];
    g.mutable_op(holder_id[reader]).released_by = g.op(saver).released_by;
  }
  // Recomputed from its input, the block frees the input after its last input-gradient op.
  if (from_input && input_holder_ >= 0 && !holder_release.empty()) {
    g.mutable_op(forward_id[input_holder_]).released_by = holder_release.back();
  }

  for (OpId id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    PACELINE_CHECK(op.saved <= Bytes(0) || op.released_by != UINT32_MAX,
                   fmt::format("{} keeps activations that no backward op frees", op.name));
    // Ops are added in the order they run: what frees kept bytes comes after what keeps them.
    PACELINE_CHECK(op.saved <= Bytes(0) || op.released_by > id,
                   fmt::format("{} keeps activations an earlier op frees", op.name));
  }
  // The construction above only adds edges forward in insertion order; check it is a DAG.
  std::vector<OpId> order;
  boost::topological_sort(g.graph_.get(), std::back_inserter(order));
  return g;
}

std::vector<OpId> LayerGraph::predecessors(OpId id) const {
  std::vector<OpId> result;
  for (auto [it, end] = boost::in_edges(id, graph()); it != end; ++it) {
    result.push_back(static_cast<OpId>(boost::source(*it, graph())));
  }
  return result;
}

std::vector<OpId> LayerGraph::forward_entries() const {
  std::vector<OpId> entries;
  for (const OpId id : ops(Phase::kForward)) {
    if (boost::in_degree(id, graph()) == 0) entries.push_back(id);
  }
  return entries;
}

std::vector<OpId> LayerGraph::backward_entries() const {
  std::vector<OpId> entries;
  for (int phase = static_cast<int>(Phase::kRecompute); phase <= static_cast<int>(Phase::kBackwardWeight); ++phase) {
    for (const OpId id : by_phase_[phase]) {
      bool has_backward_predecessor = false;
      for (auto [it, end] = boost::in_edges(id, graph()); it != end; ++it) {
        if (op(boost::source(*it, graph())).phase != Phase::kForward) has_backward_predecessor = true;
      }
      if (!has_backward_predecessor) entries.push_back(id);
    }
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

std::vector<OpId> LayerGraph::backward_exits() const {
  std::vector<OpId> exits;
  for (const OpId id : ops(Phase::kBackwardInput)) {
    bool feeds_input_gradient = false;
    for (auto [it, end] = boost::out_edges(id, graph()); it != end; ++it) {
      if (op(boost::target(*it, graph())).phase == Phase::kBackwardInput) feeds_input_gradient = true;
    }
    if (!feeds_input_gradient) exits.push_back(id);
  }
  return exits;
}

Flop LayerGraph::flop(Phase phase) const {
  Flop total;
  for (const OpId id : ops(phase)) total += op(id).flop;
  return total;
}

Bytes LayerGraph::saved_activations() const {
  Bytes total;
  for (const OpId id : ops(Phase::kForward)) total += op(id).saved;
  return total;
}

int64_t LayerGraph::largest_weight() const {
  return weight_tensors.empty() ? 0 : *std::max_element(weight_tensors.begin(), weight_tensors.end());
}

// ---------------------------------------------------------------------------------------
// The blocks. Notation (per rank, per micro-batch): b micro-batch, s = seq/cp local sequence,
// T = b·s tokens, Ts = T/tp tokens in sequence-parallel regions (T without SP), H hidden,
// e bytes per activation element.

namespace {

struct Dims {
  int64_t micro_batch;  // b
  int64_t tokens;       // T
  int64_t sp_tokens;    // Ts
  double e;             // bytes per activation element
  bool sp;              // sequence parallel with tp > 1
  // PyTorch's tensor parallelism: a column-parallel GEMM keeps its gathered input, and a
  // tensor-parallel entry's backward collective is issued after the backward of the GEMMs
  // reading it, weight gradients included.
  bool pytorch_tp;
  bool overlap;       // sp collectives in tp chunks beside their GEMMs
  // PyTorch's async TP: overlapped reduce-scatters sum their chunks after the exchange, and a
  // gathered norm output's gradient is reduce-scattered whole (add_norm).
  bool async_tp;
  int tp;
  Fusion fusion;
  // Compiled by torch.compile, which async TP, an Inductor pass, always is.
  bool compiled() const { return fusion == Fusion::kFused || async_tp; }

  // Megatron-LM's column-parallel GEMM under sp keeps its input's sequence shard and gathers it
  // again for the weight gradient; otherwise it keeps all `tokens` rows.
  bool regathers() const { return sp && !pytorch_tp; }
  int64_t kept_input_tokens() const { return regathers() ? sp_tokens : tokens; }
};

Dims dims_of(const LayerShard& shard) {
  Dims d;
  d.micro_batch = shard.micro_batch;
  d.tokens = shard.micro_batch * (shard.seq_len / shard.cp);
  d.sp = shard.sequence_parallel && shard.tp > 1;
  d.sp_tokens = d.sp ? d.tokens / shard.tp : d.tokens;
  d.pytorch_tp = shard.tp_implementation == TpImplementation::kPytorch;
  d.e = bytes_per_element(shard.activation_dtype);
  d.overlap = d.sp && shard.tp_comm_overlap;
  d.async_tp = d.overlap && shard.tp_comm_overlap_method == TpOverlapMethod::kAsyncTp;
  d.tp = shard.tp;
  d.fusion = shard.fusion;
  return d;
}

Bytes elements(double count, double bytes_each) { return Bytes(count * bytes_each); }

using Forward = LayerGraphBuilder::Forward;

Forward memory_op(std::string name, MemoryKernel kernel, Bytes traffic, Bytes saved, Bytes backward_traffic,
                  std::vector<int> inputs) {
  Forward f;
  f.op.name = std::move(name);
  f.op.kind = OpKind::kMemoryBound;
  f.op.memory_kernel = kernel;
  f.op.bytes = traffic;
  f.op.saved = saved;
  f.recipe = Recipe::kMemory;
  f.backward_bytes = backward_traffic;
  f.inputs = std::move(inputs);
  return f;
}

// An elementwise op's cost per element of its output, forward and backward: bytes moved,
// bytes kept for backward, kernels launched.
struct ElementwiseCost {
  double forward = 0.0;
  double backward = 0.0;
  double saved = 0.0;
  int forward_kernels = 1;
  int backward_kernels = 1;
};

// RMSNorm. Fused: reads x, writes y, keeps x; backward reads x and dy, writes dx. Eager (PyTorch's
// composite, in fp32 as torchtitan and nn.RMSNorm compute it): upcast (e→4), square (4→4),
// mean (reads 4), x·rstd (4→4), downcast (4→e), ·weight (e→e), keeping the fp32 x and the
// normalized y; backward through each of them: ·weight (dy·w, and y·dy for the weight), downcast,
// x·rstd (two products and the rstd reduction), square, the sum of the two paths, upcast.
ElementwiseCost rms_norm_cost(Fusion fusion, double e) {
  if (fusion == Fusion::kFused) return {2.0 * e, 3.0 * e, e, 1, 1};
  return {28.0 + 4.0 * e, 44.0 + 6.0 * e, 4.0 + e, 6, 9};
}

// A norm that also writes its reader GEMM's fp8 input under fp8 (Transformer Engine's
// LayerNormLinear): one byte more per element; eager, one more kernel.
ElementwiseCost with_fp8_output(ElementwiseCost cost, const LayerShard& shard) {
  if (!shard.fp8) return cost;
  cost.forward += 1.0;
  if (cost.forward_kernels > 1) ++cost.forward_kernels;
  return cost;
}

// Rotary embedding of queries and keys. Fused: one pass each way. Eager (torchtitan's complex
// form; the rotate-half form moves about as much): upcast, complex product with the
// frequencies, downcast — per tensor, for queries and keys — and the same backward.
ElementwiseCost rotary_cost(Fusion fusion, double e) {
  if (fusion == Fusion::kFused) return {2.0 * e, 2.0 * e, 0.0, 1, 1};
  return {16.0 + 2.0 * e, 16.0 + 2.0 * e, 0.0, 6, 6};
}

// The MLP activation, per element of its output (gated: the input is twice as wide). Fused: reads
// its input, writes its output, keeps its input. Eager, gated: silu(gate) then ·up, keeping the
// silu output as well; backward: the product's two gradients, then silu's. Eager squared ReLU:
// relu then square, each keeping its input. GeLU is one kernel in eager mode too.
ElementwiseCost activation_cost(Activation activation, Fusion fusion, double e) {
  const bool gated = activation == Activation::kSwiglu;
  const double input = gated ? 2.0 : 1.0;
  if (fusion == Fusion::kFused || activation == Activation::kGelu) {
    return {(input + 1.0) * e, (2.0 * input + 1.0) * e, input * e, 1, 1};
  }
  if (gated) return {5.0 * e, 9.0 * e, 3.0 * e, 2, 3};
  return {4.0 * e, 6.0 * e, 2.0 * e, 2, 2};
}

MemoryKernel activation_kernel(const ModelSpec& m) {
  return m.activation == Activation::kSwiglu       ? MemoryKernel::kSwiglu
         : m.activation == Activation::kSquaredRelu ? MemoryKernel::kSquaredRelu
                                                    : MemoryKernel::kGelu;
}

Forward elementwise_op(std::string name, MemoryKernel kernel, double count, const ElementwiseCost& cost,
                       std::vector<int> inputs) {
  Forward f = memory_op(std::move(name), kernel, elements(count, cost.forward), elements(count, cost.saved),
                        elements(count, cost.backward), std::move(inputs));
  f.op.kernels = cost.forward_kernels;
  f.backward_kernels = cost.backward_kernels;
  return f;
}

// Per-operator recomputation keeps the outputs of torchtitan's matmuls in odd places of its Llama
// block (wq, wk, wv, wo, w1, w3, w2: wq, wv, w1 and w2 kept), fp8 ones alike (its Llama-3.1-8B
// runs peak at 77.0 and 76.8 GiB with bf16 and float8 linears). `columns` of `width` output
// columns are kept, the rest recomputed.
void keep_per_op(Forward& gemm, double rows, int64_t columns, int64_t width, double e) {
  gemm.per_op_output = Bytes(rows * static_cast<double>(columns) * e);
  gemm.per_op_recompute_columns = width - columns;
}

// A GEMM Y[m×n] = X[m×k]·W[k×n] repeated `count` times, the first over `first_extra_tokens`
// more rows; `saved` is what backward keeps of X.
Forward weight_gemm(std::string name, int64_t m, int64_t n, int64_t k, int64_t count, DType dtype,
                    double e, Bytes saved, std::vector<int> inputs,
                    int64_t first_extra_tokens = 0) {
  Forward f;
  f.op.name = std::move(name);
  f.op.kind = OpKind::kGemm;
  f.op.gemm = GemmShape{m, n, k, count, dtype};
  f.op.gemm.first_extra_tokens = first_extra_tokens;
  const GemmShape& s = f.op.gemm;
  f.op.flop = Flop(2.0 * s.multiply_adds());
  const double in = bytes_per_element(dtype);
  f.op.bytes = Bytes(in * (s.a_elements() + s.b_elements()) + e * s.c_elements());
  f.op.saved = saved;
  f.op.transient = elements(s.c_elements(), e);
  f.recipe = Recipe::kWeightGemm;
  f.inputs = std::move(inputs);
  return f;
}

Forward collective(std::string name, Collective forward, Collective backward, CommGroup group, Bytes size,
                   std::vector<int> inputs) {
  Forward f;
  f.op.name = std::move(name);
  f.op.kind = OpKind::kCommunication;
  f.op.comm = CommSpec{forward, group, size};
  f.op.transient = forward == Collective::kNone ? Bytes(0) : size;
  f.recipe = Recipe::kCommunication;
  f.backward_comm = CommSpec{backward, group, size};
  f.inputs = std::move(inputs);
  return f;
}

DType gemm_dtype(const LayerShard& shard) { return shard.fp8 ? DType::kFp8 : shard.activation_dtype; }

// Bytes a GEMM input of `count` elements is kept in: fp8 GEMMs keep their fp8 cast.
double saved_input_bytes(const LayerShard& shard, double e) { return shard.fp8 ? 1.0 : e; }

// fp8: the cast (with transpose) of a GEMM input that no fused norm already wrote in fp8 —
// reads e bytes and writes two fp8 copies per element. Returns the op the GEMM reads.
int add_input_cast(LayerGraphBuilder& b, const LayerShard& shard, double e, const std::string& gemm_name,
                   double count, int input) {
  if (!shard.fp8) return input;
  Forward cast = memory_op(gemm_name + ".input_cast", MemoryKernel::kCast, Bytes(count * (e + 2.0)), Bytes(0),
                           Bytes(0), {input});
  cast.recipe = Recipe::kCommunication;  // the gradient passes straight through a cast
  return b.add(cast);
}

// fp8: the cast (with transpose) of a GEMM's output gradient before its backward GEMMs.
void add_grad_cast(LayerGraphBuilder& b, const LayerShard& shard, double e, int gemm) {
  if (!shard.fp8) return;
  const GemmShape& s = b.at(gemm).op.gemm;
  b.at(gemm).grad_cast_bytes = Bytes(s.c_elements() * (e + 2.0));
}

// PyTorch's async TP reduce-scatters a GEMM's output by copying its tp chunks to their owners
// as they are computed, then sums the tp chunks each rank holds in one memory-bound kernel
// (torch.sum over stacked_partials in torch/distributed/_symmetric_memory,
// _fused_matmul_reduce_scatter_impl): it reads the tp chunks, `full` in all, and writes one.
// `forward`: after a forward reduce-scatter; else before a gather, summing its gradient in
// backward. Under userbuffers the communication kernels sum as they go: `input` itself.
int add_chunk_sum(LayerGraphBuilder& b, const Dims& d, const std::string& name, Bytes full,
                  int input, bool forward) {
  if (!d.async_tp) return input;
  const Bytes traffic = full * (1.0 + 1.0 / d.tp);
  Forward sum =
      memory_op(name + ".chunk_sum", MemoryKernel::kElementwise, forward ? traffic : Bytes(0),
                Bytes(0), forward ? Bytes(0) : traffic, {input});
  if (forward) sum.recipe = Recipe::kCommunication;  // the gradient passes straight through
  return b.add(sum);
}

// PyTorch's functional collectives gather and scatter along dimension 0, and its sequence
// parallelism shards the activations [b, s, h] along s: a gather is followed by a copy putting
// the ranks' shards back in sequence order, a reduce-scatter preceded by one putting them in rank
// order (torch.cat over torch.chunk, torch/distributed/_functional_collectives.py), each reading
// and writing the whole tensor: `forward` bytes of it forward, `backward` backward. A gather of
// one sequence (b = 1) is a view, as in PyTorch since PR 169404 (December 2025); before, it was
// copied too. Async TP's fused ops, which the chunked collectives beside a GEMM stand for, move
// the gathered dimension with views; the collectives it leaves unfused copy still (the
// embedding's and the output layer's, outside the compiled blocks), but for a summed gradient of
// separate projections, which the compiled sum writes in rank order (add_norm).
// `of_gather`: the copy of a gather (forward; its gradient's reduce-scatter backward), else of a
// reduce-scatter (forward; its gradient's gather backward). Placed before a gather, so that its
// backward follows the gradient's reduce-scatter, which waits for the readers' weight gradients:
// either side costs the same, as the gather is waited for. Its transient is the copy's output (the
// collective's own buffer, alive beside it, is not counted twice). Returns what the collective
// reads.
std::vector<int> add_rank_order_copy(LayerGraphBuilder& b, const Dims& d, const std::string& name,
                                     Bytes forward, Bytes backward, std::vector<int> inputs,
                                     bool of_gather) {
  if (!d.pytorch_tp || !d.sp) return inputs;
  const bool gather_copies = d.micro_batch > 1;
  const Bytes forward_copy = of_gather && !gather_copies ? Bytes(0) : forward;
  const Bytes backward_copy = !of_gather && !gather_copies ? Bytes(0) : backward;
  Forward f = memory_op(name + ".rank_order", MemoryKernel::kElementwise, forward_copy * 2.0,
                        Bytes(0), backward_copy * 2.0, std::move(inputs));
  f.op.transient = forward_copy;
  f.backward_transient = backward_copy;
  return {b.add(f)};
}

// The all-gather of norm `norm_name`'s sequence-parallel output `output` over TP (its gradient
// reduce-scattered), in `gathered_e` bytes per element. `gradient_in_rank_order`: a compiled sum
// writes the gradient so, and PyTorch copies none of it into rank order.
int add_norm_gather(LayerGraphBuilder& b, const ModelSpec& m, const Dims& d,
                    const std::string& norm_name, int output, double gathered_e,
                    bool gradient_in_rank_order = false) {
  const double count = static_cast<double>(d.tokens * m.hidden);
  const Bytes gathered = elements(count, gathered_e);
  const Bytes gradient = elements(count, d.e);
  const std::string name = norm_name + ".gather";
  Forward f = collective(
      name, Collective::kAllGather, Collective::kReduceScatter, CommGroup::kTensor, gathered,
      add_rank_order_copy(b, d, name, gathered, gradient_in_rank_order ? Bytes(0) : gradient,
                          {output}, /*of_gather=*/true));
  f.backward_comm.size = gradient;
  f.backward_after_weight_gradients = d.pytorch_tp;
  return b.add(f);
}

// The input gradients of `projections` linears reading one norm's output, `input`, summed in
// backward over all T rows: under fusion (torch.compile) in one kernel reading each and writing
// the sum, eager by autograd pairwise, each sum reading two and writing one. Forward, nothing.
int add_projection_gradient_sum(LayerGraphBuilder& b, const ModelSpec& m, const Dims& d,
                                const std::string& norm_name, int projections, int input) {
  const Bytes gradient = elements(static_cast<double>(d.tokens * m.hidden), d.e);
  const bool fused = d.compiled();
  const double passes = fused ? projections + 1.0 : 3.0 * (projections - 1);
  Forward sum = memory_op(norm_name + ".gradient_sum", MemoryKernel::kElementwise, Bytes(0),
                          Bytes(0), gradient * passes, {input});
  sum.backward_kernels = fused ? 1 : projections - 1;
  sum.backward_transient = gradient;
  return b.add(sum);
}

// Adds ops reading `input` of `tokens` rows of width H: norm → (SP gather) → GEMM(s), read by
// `projections` separate linears (training.separate_projections) or one GEMM. Returns the index
// of the gathered (or plain) norm output for the GEMMs to read.
int add_norm(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard, const Dims& d,
             std::string name, int input, bool gather_after, bool overlap_gather = false,
             int projections = 1) {
  const MemoryKernel kernel = m.norm == Norm::kRmsNorm ? MemoryKernel::kRmsNorm : MemoryKernel::kLayerNorm;
  const double rows = static_cast<double>(d.sp_tokens * m.hidden);
  // LayerNorm is one kernel in eager mode too. Under fp8 the norm also writes the GEMM's fp8
  // input (Transformer Engine's LayerNormLinear; eager, one more kernel).
  const ElementwiseCost cost = with_fp8_output(
      rms_norm_cost(m.norm == Norm::kRmsNorm ? d.fusion : Fusion::kFused, d.e), shard);
  const int norm = b.add(elementwise_op(name, kernel, rows, cost, {input}));
  b.at(norm).op.flop = Flop(rows * 5.0);
  // Summed in backward before the gather's reduce-scatter; sitting before the gather here, it
  // costs the same, as the reduce-scatter is waited for, and leaves the GEMMs reading the gather.
  const int output =
      projections > 1 ? add_projection_gradient_sum(b, m, d, name, projections, norm) : norm;
  if (!gather_after) return output;
  // Under fp8 the norm's fp8 output is what is gathered, its gradient reduce-scattered in 16
  // bits: Transformer Engine's LayerNormLinear and LayerNormMLP gather the fp8 output of their
  // norm (and Userbuffers' overlapped gathers fill fp8 buffers), torchao's
  // PrepareFloat8ModuleInput (torchtitan's tensorwise float8) casts before redistributing.
  const double gathered_e = shard.fp8 ? 1.0 : d.e;
  const double count = static_cast<double>(d.tokens * m.hidden);
  const Bytes gradient = elements(count, d.e);
  // Compiled, the projections' gradient sum writes its output in rank order (Inductor folds the
  // copy's torch.cat into it).
  const bool gradient_in_rank_order = projections > 1 && d.compiled();
  if (!overlap_gather || !d.overlap)
    return add_norm_gather(b, m, d, name, output, gathered_e, gradient_in_rank_order);
  const Bytes gathered = elements(count, gathered_e);
  const std::string gather = name + ".gather";
  // Chunked beside the GEMM that reads it: the GEMM starts on the first of tp chunks. Backward,
  // the input gradient is reduce-scattered in chunks beside the GEMM computing it (async TP then
  // sums them, add_chunk_sum). But PyTorch's async TP fuses a reduce-scatter only with the one
  // GEMM making its input (torch/_inductor/fx_passes/micro_pipeline_tp.py,
  // _find_producer_matmul): the sum of separate projections' input gradients (torchtitan's wq, wk
  // and wv; w1 and w3) is reduce-scattered whole after them, as without overlap (pytorch/pytorch
  // PR 149946: in the backward graph the reduce-scatters "are receiving as input the addition of
  // various scaled_mms").
  const bool whole_gradient = d.async_tp && projections > 1;
  int gathered_from =
      whole_gradient ? output : add_chunk_sum(b, d, gather, gradient, output, /*forward=*/false);
  if (whole_gradient) {
    Forward whole = collective(
        gather + ".gradient", Collective::kNone, Collective::kReduceScatter, CommGroup::kTensor,
        gradient,
        add_rank_order_copy(b, d, gather, Bytes(0), gradient_in_rank_order ? Bytes(0) : gradient,
                            {output}, /*of_gather=*/true));
    whole.backward_after_weight_gradients = d.pytorch_tp;
    gathered_from = b.add(whole);
  }
  const Collective chunk_gradient = whole_gradient ? Collective::kNone : Collective::kReduceScatter;
  const auto chunks = [&](const std::string& chunk_name, double share, int after) {
    Forward f = collective(chunk_name, Collective::kAllGather, chunk_gradient, CommGroup::kTensor,
                           gathered * share, {after});
    f.backward_comm.size = gradient * share;
    return b.add(f);
  };
  const int first = chunks(gather, 1.0 / d.tp, gathered_from);
  const int rest = chunks(gather + ".overlapped", (d.tp - 1.0) / d.tp, first);
  b.complete_beside(first, rest);
  return first;
}

// Before column-parallel GEMMs reading `width` columns of every token: under sequence
// parallelism an all-gather of the rank's tokens (reduce-scatter of the gradient backward),
// without it identity forward and an all-reduce of the input gradient backward (Megatron's `f`).
// `fp8_width` of the columns are gathered in fp8 (what fp8 GEMMs read: Transformer Engine casts
// before it gathers), their gradient in 16 bits. Without tensor parallelism, nothing: the GEMMs
// read `inputs` (then one op) themselves.
int add_tensor_parallel_entry(LayerGraphBuilder& b, const Dims& d, const std::string& name,
                              int64_t width, std::vector<int> inputs, int64_t fp8_width = 0) {
  if (d.tp == 1) {
    PACELINE_CHECK(inputs.size() == 1, "an entry joining several inputs without tensor parallelism");
    return inputs.front();
  }
  const double tokens = static_cast<double>(d.tokens);
  const Bytes size = elements(tokens * static_cast<double>(width), d.e);
  const Bytes gathered(
      tokens * (static_cast<double>(width - fp8_width) * d.e + static_cast<double>(fp8_width)));
  if (d.sp)
    inputs = add_rank_order_copy(b, d, name + ".gather", gathered, size, std::move(inputs),
                                 /*of_gather=*/true);
  Forward f = d.sp
                  ? collective(name + ".gather", Collective::kAllGather, Collective::kReduceScatter,
                               CommGroup::kTensor, gathered, std::move(inputs))
                  : collective(name + ".grad_allreduce", Collective::kNone, Collective::kAllReduce,
                               CommGroup::kTensor, size, std::move(inputs));
  f.backward_comm.size = size;
  f.backward_after_weight_gradients = d.pytorch_tp;
  return b.add(f);
}

// Before a column-parallel GEMM reading a norm's output, which add_norm gathered already under
// sequence parallelism.
int add_column_parallel_entry(LayerGraphBuilder& b, const ModelSpec& m, const Dims& d, const std::string& name,
                              int input) {
  if (d.sp) return input;
  return add_tensor_parallel_entry(b, d, name, m.hidden, {input});
}

// After a row-parallel GEMM: all-reduce (or reduce-scatter with SP) of its partial sums.
int add_row_parallel_exit(LayerGraphBuilder& b, const ModelSpec& m, const Dims& d, const std::string& name,
                          int input, bool beside_gemm = false) {
  if (d.tp == 1) return input;
  const Bytes size = elements(static_cast<double>(d.tokens * m.hidden), d.e);
  // A reduce-scatter of `part` of the partial sums; per operator it keeps its output.
  const auto scatter = [&](const std::string& suffix, Bytes part, std::vector<int> inputs) {
    Forward f = collective(name + suffix, Collective::kReduceScatter, Collective::kAllGather, CommGroup::kTensor, part,
                           std::move(inputs));
    f.per_op_output = part * (1.0 / d.tp);
    return b.add(f);
  };
  if (d.overlap && beside_gemm) {
    // Chunked beside the GEMM: all but the last of tp chunks are reduced while it computes (and,
    // backward, gathered while its input gradient is computed; its weight gradient needs all).
    const int rest = scatter(".reduce_scatter.overlapped", size * ((d.tp - 1.0) / d.tp), b.at(input).inputs);
    b.at(input).wgrad_also_after.push_back(rest);
    const int last = scatter(".reduce_scatter", size * (1.0 / d.tp), {input, rest});
    return add_chunk_sum(b, d, name + ".reduce_scatter", size, last, /*forward=*/true);
  }
  if (d.sp) {
    return scatter(".reduce_scatter", size,
                   add_rank_order_copy(b, d, name + ".reduce_scatter", size, size, {input},
                                       /*of_gather=*/false));
  }
  return b.add(collective(name + ".allreduce", Collective::kAllReduce, Collective::kNone, CommGroup::kTensor, size,
                          {input}));
}

// dropout(x) + residual: keeps the dropout mask (one byte per element) when dropout is on.
int add_residual(LayerGraphBuilder& b, const ModelSpec& m, const Dims& d, std::string name, int branch, int residual) {
  const double rows = static_cast<double>(d.sp_tokens * m.hidden);
  const bool dropout = m.dropout > 0.0;
  // Reads branch and residual, writes the sum (and a mask); backward reads dy (and the mask)
  // and writes the branch gradient. Eager, dropout is a kernel of its own before the sum.
  const bool eager_dropout = dropout && d.fusion == Fusion::kEager;
  Forward sum = memory_op(std::move(name), MemoryKernel::kElementwise,
                          Bytes(rows * (3.0 * d.e + (dropout ? 1.0 : 0.0) + (eager_dropout ? 2.0 * d.e : 0.0))),
                          Bytes(dropout ? rows : 0.0), Bytes(rows * (2.0 * d.e + (dropout ? 1.0 : 0.0))),
                          {branch, residual});
  if (eager_dropout) sum.op.kernels = 2;
  return b.add(sum);
}

// A fused attention kernel over `shape`: reads Q, K and V (`qkv`) and writes `output`. Under
// per-operator recomputation its output and softmax statistics (fp32 per query and head) are kept;
// what else it keeps the caller says.
Forward attention_core(std::string name, const AttentionShape& shape, double flop, Bytes qkv, Bytes output,
                       Bytes statistics, int input) {
  Forward f;
  f.op.name = std::move(name);
  f.op.kind = OpKind::kAttention;
  f.op.attention = shape;
  f.op.flop = Flop(flop);
  f.op.bytes = qkv + output;
  f.recipe = Recipe::kAttention;
  f.recompute_in_core_attention();
  f.per_op_output = output + statistics;
  f.inputs = {input};
  return f;
}

// Head-parallel (Ulysses) context parallelism: an all-to-all turns the rank's Q, K and V, all
// heads of s tokens, into cp·s tokens of heads/cp heads (key/value heads repeated where fewer
// than cp); one causal kernel attends over the whole sequence; a second all-to-all returns the
// output to the rank's tokens. Backward runs the transposed all-to-alls.
int add_head_parallel_attention(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard, const Dims& d,
                                int64_t heads, int64_t kv_heads, int input) {
  const int cp = shard.cp;
  const double T = static_cast<double>(d.tokens);
  const double others = static_cast<double>(cp - 1);
  const int64_t local_heads = heads / cp;
  const int64_t local_kv_heads = std::max<int64_t>(1, kv_heads / cp);
  const int64_t S = shard.seq_len;
  // Each destination gets this rank's tokens of its heads.
  const int64_t v_dim = m.value_head_dim();
  // Queries and keys are head_dim wide, values and the output v_dim.
  const double qkv_width = static_cast<double>(local_heads * m.head_dim + local_kv_heads * (m.head_dim + v_dim));
  const Bytes sent_qkv = elements(T * qkv_width * others, d.e);
  const int scattered = b.add(collective("attn.a2a.qkv", Collective::kAllToAll, Collective::kAllToAll,
                                         CommGroup::kContext, sent_qkv, {input}));
  const double tokens = T * cp;  // of the whole sequence, on this rank's heads
  const Bytes qkv_bytes = elements(tokens * qkv_width, d.e);
  const Bytes output = elements(tokens * static_cast<double>(local_heads * v_dim), d.e);
  const Bytes statistics(4.0 * shard.micro_batch * local_heads * static_cast<double>(S));
  Forward f = attention_core("attn.core",
                              AttentionShape{shard.micro_batch, local_heads, local_kv_heads, S, S, m.head_dim, true,
                                             false, shard.activation_dtype, shard.attention_kernel, v_dim},
                              2.0 * shard.micro_batch * local_heads * static_cast<double>(S) * S *
                                  static_cast<double>(m.head_dim + v_dim) * 0.5,
                              qkv_bytes, output, statistics, scattered);
  // Backward reads the kernel's own output, which the projection, reading it after the
  // all-to-all, does not keep.
  f.op.saved = qkv_bytes + statistics + output;
  f.checkpoint_bytes = qkv_bytes;
  const int core = b.add(f);
  // All but this rank's share of the output goes back to the ranks whose tokens it is.
  return b.add(collective("attn.a2a.output", Collective::kAllToAll, Collective::kAllToAll, CommGroup::kContext,
                          output * (others / cp), {core}));
}

// A column-parallel GEMM of the tokens' `k` gathered columns to `n` of the rank's: keeps its
// input, or under SP its sequence shard, gathered again for the weight gradient (Dims::regathers).
int add_column_parallel_gemm(LayerGraphBuilder& b, const LayerShard& shard, const Dims& d, std::string name,
                             int64_t n, int64_t k, int input) {
  const int gemm = b.add(weight_gemm(
      std::move(name), d.tokens, n, k, 1, gemm_dtype(shard), d.e,
      Bytes(static_cast<double>(d.kept_input_tokens() * k) * saved_input_bytes(shard, d.e)),
      {input}));
  add_grad_cast(b, shard, d.e, gemm);
  if (d.regathers()) {
    // The kept shard, gathered as it was kept (fp8: Transformer Engine gathers its fp8 copy).
    b.at(gemm).regather_for_wgrad =
        CommSpec{Collective::kAllGather, CommGroup::kTensor,
                 Bytes(static_cast<double>(d.tokens * k) * saved_input_bytes(shard, d.e))};
  }
  return gemm;
}

// Multi-head latent attention's projections, as Megatron-Core's MLASelfAttention runs them: the
// down-projections, which every tensor-parallel rank holds whole, run on the rank's own tokens
// `norm` (a 1/tp share under sequence parallelism); the compressed query and key/value are
// RMS-normalised and gathered over the tensor-parallel group with the rotary key part (an
// all-reduce of their gradient backward without sequence parallelism, as the up-projections see
// only the local heads); the up-projections are column-parallel over the heads. One rotary kernel
// then writes the queries, the keys (the shared rotary part copied to every head) and the values
// the attention reads. Returns it, and in `up_projection` the ops mla_up_proj discards.
int add_latent_projections(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard,
                           const Dims& d, int norm, int64_t heads,
                           std::vector<int>& up_projection) {
  const MlaSpec& a = *m.mla;
  const double Ts = static_cast<double>(d.sp_tokens);
  const double T = static_cast<double>(d.tokens);
  // The query's projection keeps the block's normalised input; the key/value one reads the same.
  const int kv_down = b.add(weight_gemm("attn.kv_down", d.sp_tokens, a.kv_lora_rank + a.rope_head_dim, m.hidden, 1,
                                        gemm_dtype(shard), d.e, Bytes(0), {norm}));
  add_grad_cast(b, shard, d.e, kv_down);
  // Under fp8 the norms also write the up-projections' fp8 input (Transformer Engine's
  // LayerNormColumnParallelLinear), as add_norm's do.
  const ElementwiseCost norm_cost = with_fp8_output(rms_norm_cost(d.fusion, d.e), shard);
  const int kv_norm = b.add(elementwise_op("attn.kv_norm", MemoryKernel::kRmsNorm,
                                           Ts * static_cast<double>(a.kv_lora_rank), norm_cost, {kv_down}));
  int q_norm = -1;
  if (a.q_lora_rank > 0) {
    const Bytes input_kept(Ts * static_cast<double>(m.hidden) * saved_input_bytes(shard, d.e));
    const int q_down = b.add(weight_gemm("attn.q_down", d.sp_tokens, a.q_lora_rank, m.hidden, 1, gemm_dtype(shard),
                                         d.e, input_kept, {norm}));
    add_grad_cast(b, shard, d.e, q_down);
    q_norm = b.add(elementwise_op("attn.q_norm", MemoryKernel::kRmsNorm, Ts * static_cast<double>(a.q_lora_rank),
                                  norm_cost, {q_down}));
  }
  // One gather (or gradient all-reduce) for the compressed query and key/value together.
  int latent = -1;
  if (d.tp > 1) {
    std::vector<int> compressed = {kv_norm};
    if (q_norm >= 0) compressed.push_back(q_norm);
    latent = add_tensor_parallel_entry(
        b, d, "attn.latent", a.kv_lora_rank + a.rope_head_dim + a.q_lora_rank,
        std::move(compressed), shard.fp8 ? a.kv_lora_rank + a.q_lora_rank : 0);
  }
  const int64_t q_width = heads * m.head_dim;
  int q_up = 0;
  if (q_norm >= 0) {
    q_up = add_column_parallel_gemm(b, shard, d, "attn.q_up", q_width, a.q_lora_rank, latent >= 0 ? latent : q_norm);
  } else {
    const int entry =
        add_tensor_parallel_entry(b, d, "attn.q", m.hidden, {norm}, shard.fp8 ? m.hidden : 0);
    q_up = add_column_parallel_gemm(b, shard, d, "attn.q", q_width, m.hidden, entry);
  }
  const int64_t nope = m.head_dim - a.rope_head_dim;
  const int kv_up = add_column_parallel_gemm(b, shard, d, "attn.kv_up", heads * (nope + a.v_head_dim), a.kv_lora_rank,
                                             latent >= 0 ? latent : kv_norm);
  // Reads the queries, the up-projected keys and values and the rotary key part; writes queries,
  // keys and values. Backward, the same.
  const double read = static_cast<double>(heads * (m.head_dim + nope + a.v_head_dim) + a.rope_head_dim);
  const double written = static_cast<double>(heads * (2 * m.head_dim + a.v_head_dim));
  Forward rotary = memory_op("attn.rotary", MemoryKernel::kRotary, elements(T * (read + written), d.e), Bytes(0),
                             elements(T * (read + written), d.e), {q_up, kv_up});
  const int projected = b.add(rotary);
  // Megatron-Core's up-projection checkpoint runs the compressed query's and key/value's norms,
  // the projections and the rotary kernel; under tensor parallelism paceline gathers the
  // compressed parts after their norms, so the projections keep the gathered input.
  up_projection = {kv_norm, q_up, kv_up, projected};
  if (q_norm >= 0) up_projection.push_back(q_norm);
  return projected;
}

// Key/value heads a tensor-parallel rank holds: its share, or one whole head where the group is
// wider than the heads (each head then held by tp / kv_heads ranks).
int64_t rank_kv_heads(const ModelSpec& m, int tp) { return std::max<int64_t>(1, m.kv_heads / tp); }

void add_attention(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard, const Dims& d, int residual,
                   int& out) {
  const int64_t heads = m.heads / shard.tp;
  const int64_t kv_heads = rank_kv_heads(m, shard.tp);
  const int64_t q_width = heads * m.head_dim;
  const int64_t kv_width = kv_heads * m.head_dim;
  const int64_t s = shard.seq_len / shard.cp;
  const double T = static_cast<double>(d.tokens);

  int last = 0;
  int latent_norm = -1;
  std::vector<int> up_projection;
  if (m.mla) {
    latent_norm = add_norm(b, m, shard, d, "attn.norm", residual, /*gather_after=*/false);
    last = add_latent_projections(b, m, shard, d, latent_norm, heads, up_projection);
  } else {
    const int norm = add_norm(b, m, shard, d, "attn.norm", residual, d.sp, /*overlap_gather=*/true,
                              shard.separate_projections ? 3 : 1);
    const int qkv_input = add_column_parallel_entry(b, m, d, "attn.qkv", norm);
    // Column-parallel QKV projection. Under fp8 the norm writes the fp8 input itself (Transformer
    // Engine's LayerNormLinear).
    const int qkv = add_column_parallel_gemm(b, shard, d, "attn.qkv", q_width + 2 * kv_width, m.hidden, qkv_input);
    keep_per_op(b.at(qkv), T, q_width + kv_width, q_width + 2 * kv_width, d.e);  // wq, wv; wk recomputed
    if (m.linear_bias || m.qkv_bias) b.at(qkv).op.bytes += elements(T * (q_width + 2 * kv_width), 2.0 * d.e);
    last = qkv;
    if (m.qk_norm) {
      const double rows = T * (q_width + kv_width);
      last = b.add(elementwise_op("attn.qk_norm", MemoryKernel::kRmsNorm, rows, rms_norm_cost(d.fusion, d.e), {last}));
    }
    if (m.position == Position::kRope) {
      const double rows = T * (q_width + kv_width);
      last = b.add(elementwise_op("attn.rotary", MemoryKernel::kRotary, rows, rotary_cost(d.fusion, d.e), {last}));
    }
  }

  // Keys and values copied out to every query head before the attention call (torchtitan's Llama,
  // Hugging Face's eager attention: `repeat_kv`): one copy kernel each for K and V; backward sums the
  // copies' gradients back. The attention then keeps, and context parallelism moves, keys and
  // values of the query heads.
  int64_t attended_kv_heads = kv_heads;
  if (shard.repeat_kv && kv_heads < heads) {
    // Forward reads the key/value heads and writes the copies; backward reads the copies'
    // gradients and writes theirs: the same bytes.
    const Bytes traffic = elements(T * 2.0 * (kv_width + q_width), d.e);
    Forward repeat = memory_op("attn.repeat_kv", MemoryKernel::kElementwise, traffic, Bytes(0), traffic, {last});
    repeat.op.kernels = 2;
    repeat.backward_kernels = 2;
    last = b.add(repeat);
    attended_kv_heads = heads;
  }
  // Keys are as wide as queries; values, and so the output, may be narrower (multi-head latent
  // attention).
  const int64_t attended_kv_width = attended_kv_heads * m.head_dim;
  const int64_t value_width = attended_kv_heads * m.value_head_dim();
  const int64_t output_width = heads * m.value_head_dim();

  // The attention core. Queries, keys and values are kept for backward, also when selective
  // recomputation re-runs the core from them (Korthikanti et al. 2022; Megatron-LM checkpoints
  // its core attention whichever kernel runs it), and the ring exchange and merges with it.
  const Bytes qkv_bytes = elements(T * (q_width + attended_kv_width + value_width), d.e);
  const double causal_fraction = 0.5;
  // Context parallelism always runs a fused kernel (the scenario reader sees to it).
  if (shard.cp > 1 && shard.cp_comm == ContextComm::kAllToAll) {
    last = add_head_parallel_attention(b, m, shard, d, heads, attended_kv_heads, last);
  } else if (shard.attention_kernel != AttentionKernel::kUnfused) {
    // Ring attention splits the keys into cp blocks, passed around the ring while the local
    // block is computed; with the load-balanced causal split every step does equal work: the
    // first the causal diagonal (s × s), each later one an unmasked s × s/2 block, whose partial
    // output is merged into the running one by its softmax statistics (online softmax).
    const int steps = shard.cp;
    const double attention_flop = 2.0 * shard.micro_batch * heads * static_cast<double>(s) * s *
                                  static_cast<double>(m.head_dim + m.value_head_dim()) * causal_fraction;
    int previous = last;
    const Bytes kv_block = elements(T * static_cast<double>(attended_kv_width + value_width), d.e);
    // Backward reads the attention's output too. The projection keeps that very tensor unless
    // it keeps an fp8 cast of it or an eager copy in token-major layout: then it is kept here.
    const bool projection_keeps_output = !shard.fp8 && d.fusion != Fusion::kEager;
    const Bytes kept_output = projection_keeps_output ? Bytes(0) : elements(T * output_width, d.e);
    const bool gathered = shard.cp_comm == ContextComm::kAllGather;
    // The gathered keys and values stay allocated for the whole ring loop, forward and backward
    // (PyTorch's _AllGatherRotater holds the aggregated buffer the steps read views of): the
    // blocks and merges after the gather hold them besides their own buffers.
    const Bytes gathered_kv =
        gathered && steps > 1 ? kv_block * static_cast<double>(steps) : Bytes(0);
    // An exchange waited for where it is issued sits between the block before it and the block
    // after it: its forward copy and its backward copy each hold up the next block.
    const bool beside = shard.cp_comm_overlap;
    int kv_in = -1;
    if (gathered && steps > 1) {
      // One all-gather brings every rank's keys and values, beside the diagonal block unless
      // waited for at once. Backward gathers them again.
      Forward gather = collective("attn.kv_gather", Collective::kAllGather, Collective::kAllGather,
                                  CommGroup::kContext, kv_block * static_cast<double>(steps), {last});
      gather.recompute_in_core_attention();
      kv_in = b.add(gather);
    }
    for (int step = 0; step < steps; ++step) {
      const Bytes statistics(4.0 * shard.micro_batch * heads * s);
      Forward f = attention_core(steps == 1 ? "attn.core" : fmt::format("attn.core.step{}", step),
                                 AttentionShape{shard.micro_batch, heads, attended_kv_heads, s, step == 0 ? s : s / 2,
                                                m.head_dim, step == 0, false, shard.activation_dtype,
                                                shard.attention_kernel, m.value_head_dim()},
                                 attention_flop, qkv_bytes, elements(T * output_width, d.e), statistics, previous);
      // Q, K, V, the softmax statistics (and the output) are kept once.
      f.op.saved = step == 0 ? qkv_bytes + statistics + kept_output : Bytes(0);
      f.checkpoint_bytes = step == 0 ? qkv_bytes : Bytes(0);
      f.op.transient = elements(T * output_width, 4.0);  // fp32 output accumulator
      if (kv_in >= 0 && (step > 0 || !beside)) f.inputs.push_back(kv_in);
      // Beside the gather the diagonal block reads only the local keys; the gather holds the
      // buffer meanwhile.
      if (step > 0 || !beside) f.op.transient += gathered_kv;
      if (!gathered && step + 1 < steps) {
        // The next key/value block comes over the ring while this one is computed; backward
        // sends keys, values and their gradients.
        Forward ring = collective(fmt::format("attn.ring.step{}", step), Collective::kSendRecv,
                                  Collective::kSendRecv, CommGroup::kContext, kv_block,
                                  {kv_in >= 0 ? kv_in : last});
        ring.backward_comm.size = kv_block * 2.0;
        ring.recompute_in_core_attention();
        if (!beside) ring.inputs.push_back(previous);
        kv_in = b.add(ring);
        if (!beside) f.inputs.push_back(kv_in);
      }
      if (gathered && steps > 1) {
        // Backward: after this block the fp32 key/value gradients summed so far go on to the
        // next rank (PyTorch's _templated_ring_attention_backward); the forward sends nothing.
        Forward send = collective(fmt::format("attn.kv_grad.step{}", step), Collective::kNone, Collective::kSendRecv,
                                  CommGroup::kContext,
                                  elements(T * static_cast<double>(attended_kv_width + value_width), 4.0),
                                  {beside ? last : previous});
        send.recompute_in_core_attention();
        f.inputs.push_back(b.add(send));
      }
      int core = b.add(f);
      if (step > 0) {
        // Forward: reads the step's output and rewrites the fp32 running output, with the
        // statistics (fp32 per query and head: the step's and the running one read, the merged
        // one written). Backward: the query gradient accumulates in fp32, the key/value
        // gradient travelling the ring adds this step's.
        const Bytes statistics_traffic = 3.0 * statistics;
        const double kv_elements = T * static_cast<double>(attended_kv_width + value_width);
        Bytes forward_traffic = Bytes(T * output_width * (d.e + 8.0)) + statistics_traffic;
        Bytes backward_traffic =
            elements(T * q_width, d.e + 8.0) + elements(kv_elements, 3.0 * d.e);
        int forward_kernels = 1;
        int backward_kernels = 1;
        if (gathered && !d.compiled()) {
          // PyTorch's ring run eagerly (torch/distributed/tensor/experimental/_attention.py;
          // torch.compile traces it into the block's graph, and Inductor fuses what follows)
          // merges in fp32 ops (_SDPAMerger, convert_to_f32): the step's output cast (read e,
          // write 4), then out - block, sigmoid(lse - block lse) times that, and out minus the
          // product (12, 8 and 12 bytes an element). Where only a rank's second query chunk
          // attends (half the steps over the load-balanced ranks) that is over half the elements,
          // and a cat rebuilds the whole running output (8): 0.75 e + 31 bytes an output element
          // a step on average. Every step but the last concatenates its keys and values to pass on
          // (read and write e). Backward adds each step's query and key/value gradients into fp32
          // accumulators (read 4 + e, write 4; over half of them and a cat on half the steps:
          // 0.75 (8 + e) + 4 on average), concatenates the key/value one to send on (8) and the
          // keys and values (2 e). The first merge also carries the diagonal block's output cast
          // (e + 4) and accumulations (8 + e each, and the cat), and the casts back of the merged
          // output and of the gradients (4 + e each).
          const double accumulate = 0.75 * (8.0 + d.e) + 4.0;
          const bool first = step == 1;
          forward_traffic =
              Bytes(T * output_width * (0.75 * d.e + 31.0 + (first ? 2.0 * d.e + 8.0 : 0.0))) +
              Bytes(kv_elements * 2.0 * d.e) + statistics_traffic;
          backward_traffic = Bytes(T * q_width * (accumulate + (first ? 12.0 + 2.0 * d.e : 0.0))) +
                             Bytes(kv_elements * (accumulate + 8.0 + 2.0 * d.e +
                                                  (first ? 20.0 + 2.0 * d.e : 0.0)));
          // Forward: the two casts, eight fp32 ops on output and statistics, the key/value cat,
          // and on half the steps the two cats of the partial update. Backward: the key/value cat,
          // the three adds, the gradient cat, and on half the steps the partial updates' cats.
          forward_kernels = 12;
          backward_kernels = 7;
        }
        Forward merge =
            memory_op(fmt::format("attn.ring.merge.step{}", step), MemoryKernel::kElementwise,
                      forward_traffic, Bytes(0), backward_traffic, {core});
        merge.op.kernels = forward_kernels;
        merge.backward_kernels = backward_kernels;
        merge.op.transient = gathered_kv;
        merge.backward_transient = gathered_kv;
        merge.recompute_in_core_attention();
        core = b.add(merge);
      }
      previous = core;
    }
    last = previous;
  } else {
    // Unfused attention (Korthikanti et al. 2022): QKᵀ, softmax, dropout, then ·V, with the
    // s×s score tensors kept for backward unless selectively recomputed (all four ops).
    const double scores = static_cast<double>(shard.micro_batch) * heads * s * s;
    Forward qk;
    qk.op.name = "attn.scores";
    qk.op.kind = OpKind::kGemm;
    qk.op.gemm = GemmShape{s, s, m.head_dim, shard.micro_batch * heads, shard.activation_dtype};
    qk.op.flop = Flop(2.0 * scores * m.head_dim);
    qk.op.bytes = elements(2.0 * T * q_width + scores, d.e);
    qk.op.saved = elements(T * (q_width + attended_kv_width), d.e);  // Q and K, its checkpoint
    qk.checkpoint_bytes = qk.op.saved;
    qk.op.transient = elements(scores, d.e);
    qk.recipe = Recipe::kActivationGemm;
    qk.recompute_in_core_attention();
    qk.inputs = {last};
    const int qk_id = b.add(qk);
    Forward softmax = memory_op("attn.softmax", MemoryKernel::kSoftmax, elements(scores, 2.0 * d.e),
                                elements(scores, d.e), elements(scores, 3.0 * d.e), {qk_id});
    softmax.recompute_in_core_attention();
    int probs = b.add(softmax);
    if (m.dropout > 0.0) {
      Forward drop = memory_op("attn.dropout", MemoryKernel::kElementwise, elements(scores, 2.0 * d.e + 1.0),
                               Bytes(scores), elements(scores, 2.0 * d.e + 1.0), {probs});
      drop.recompute_in_core_attention();
      probs = b.add(drop);
    }
    Forward av;
    av.op.name = "attn.context";
    av.op.kind = OpKind::kGemm;
    av.op.gemm = GemmShape{s, m.head_dim, s, shard.micro_batch * heads, shard.activation_dtype};
    av.op.flop = Flop(2.0 * scores * m.head_dim);
    av.op.bytes = elements(scores + 2.0 * T * q_width, d.e);
    // Keeps V (its checkpoint) and the dropped-out probabilities; without dropout it reads the
    // softmax's output, which the softmax keeps.
    av.checkpoint_bytes = elements(T * attended_kv_width, d.e);
    av.op.saved = av.checkpoint_bytes + (m.dropout > 0.0 ? elements(scores, d.e) : Bytes(0));
    av.recipe = Recipe::kActivationGemm;
    av.recompute_in_core_attention();
    av.inputs = {probs, last};
    last = b.add(av);
  }

  // Discarded, the queries, keys and values come back once the attention's output gradient is
  // ready.
  if (m.mla) b.discard_outputs(up_projection, RecomputeModule::kLatentUpProjection, last);
  // Eager: the attention output, heads-major, is copied into the token-major layout the
  // projection reads (and its gradient back).
  if (d.fusion == Fusion::kEager) {
    last = b.add(memory_op("attn.transpose", MemoryKernel::kElementwise, elements(T * output_width, 2.0 * d.e),
                           Bytes(0), elements(T * output_width, 2.0 * d.e), {last}));
  }
  // Row-parallel output projection; keeps its input.
  const int proj_input = add_input_cast(b, shard, d.e, "attn.proj", T * output_width, last);
  const int proj = b.add(weight_gemm("attn.proj", d.tokens, m.hidden, output_width, 1, gemm_dtype(shard), d.e,
                                     elements(T * output_width, saved_input_bytes(shard, d.e)), {proj_input}));
  add_grad_cast(b, shard, d.e, proj);
  const int reduced = add_row_parallel_exit(b, m, d, "attn.proj", proj, /*beside_gemm=*/true);
  // Latent attention's input norm, apart from the down-projections (TENorm), can discard its
  // output, which comes back once the attention's output gradient is ready.
  if (m.mla) b.discard_outputs({latent_norm}, RecomputeModule::kLayerNorm, reduced);
  out = add_residual(b, m, d, "attn.residual", reduced, residual);
}

// Dense MLP: fc1 (column-parallel, gated: gate and up together), activation, fc2 (row-parallel),
// `ffn_hidden` divided by `tp` and the weights held over `num_weight_holders` ranks.
int add_dense_mlp(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard, const Dims& d,
                  int input, int64_t ffn_hidden, int tp, int num_weight_holders,
                  const std::string& prefix) {
  const int64_t f = ffn_hidden / tp;
  const double T = static_cast<double>(d.tokens);
  const int64_t fc1_width = m.gated_mlp() ? 2 * f : f;
  // Shared experts pass `d` without sequence parallelism: they run on the rank's own tokens.
  const int fc1 = add_column_parallel_gemm(b, shard, d, prefix + ".fc1", fc1_width, m.hidden, input);
  keep_per_op(b.at(fc1), T, f, fc1_width, d.e);  // w1 (w3 recomputed)
  b.at(fc1).num_weight_holders = num_weight_holders;
  if (m.linear_bias) b.at(fc1).op.bytes += elements(T * fc1_width, 2.0 * d.e);
  const double act_out = T * f;
  const int act = b.add(elementwise_op(prefix + ".act", activation_kernel(m), act_out,
                                       activation_cost(m.activation, d.fusion, d.e), {fc1}));
  b.at(act).op.flop = Flop(act_out * 8.0);
  const int fc2_input = add_input_cast(b, shard, d.e, prefix + ".fc2", act_out, act);
  const int fc2 = b.add(weight_gemm(prefix + ".fc2", d.tokens, m.hidden, f, 1, gemm_dtype(shard), d.e,
                                    elements(act_out, saved_input_bytes(shard, d.e)), {fc2_input}));
  b.at(fc2).num_weight_holders = num_weight_holders;
  add_grad_cast(b, shard, d.e, fc2);
  if (m.gated_mlp()) keep_per_op(b.at(fc2), T, m.hidden, m.hidden, d.e);  // w2, the seventh matmul
  return fc2;
}

// Mixture of experts: router, token permutation, all-to-all dispatch over the expert-parallel
// group, local experts as grouped GEMMs, all-to-all combine, un-permutation. Experts are not
// split by TP; with TP the block's tokens are sequence-sharded (Megatron requires SP for MoE+TP).
int add_moe_mlp(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard, const Dims& d, int input) {
  const MoeSpec& moe = *m.moe;
  const double Ts = static_cast<double>(d.sp_tokens);
  const double H = static_cast<double>(m.hidden);
  // Router: fp32 logits over experts, softmax and top-k.
  Forward router = weight_gemm("moe.router", d.sp_tokens, moe.experts, m.hidden, 1, DType::kFp32, d.e,
                               elements(Ts * H, d.e), {input});
  // Per operator the router's matmul keeps its output; grouped expert matmuls are recomputed.
  router.per_op_output = elements(Ts * moe.experts, 4.0);
  const int router_id = b.add(router);
  const Bytes layer_input = elements(Ts * H, d.e);
  const int topk = b.add(memory_op("moe.topk", MemoryKernel::kSoftmax, elements(Ts * moe.experts, 8.0),
                                   elements(Ts * moe.experts, 4.0), elements(Ts * moe.experts, 12.0), {router_id}));
  // Each token is copied to its top-k experts.
  const double routed = Ts * moe.top_k;
  const int permute = b.add(memory_op("moe.permute", MemoryKernel::kPermute, elements(2.0 * routed * H, d.e),
                                      Bytes(0), elements(2.0 * routed * H, d.e), {input, topk}));
  const int local_experts = moe.experts / shard.ep;
  // Load on this rank, which holds the busiest expert (MoeSpec::busiest_share); its other experts
  // take the others' share.
  const double busiest = moe.busiest_share();
  const double others = moe.other_share();
  const double rank_tokens = routed * (busiest + (local_experts - 1) * others) / local_experts;
  // An expert's mean share is routed / local_experts tokens. The grouped GEMMs run the other
  // experts' count and the busiest one's, so that only the busiest expert's rows grow with the
  // imbalance; a fraction of a token counts as a whole one (some expert takes it), a rounding
  // error above a whole count as that count.
  const auto whole = [](double tokens) { return static_cast<int64_t>(std::ceil(tokens - 1e-6)); };
  const int64_t busiest_rows = whole(routed * busiest / local_experts);
  const int64_t per_expert =
      local_experts > 1 ? whole(routed * others / local_experts) : busiest_rows;
  const int64_t busiest_extra = std::max<int64_t>(0, busiest_rows - per_expert);
  const int64_t f = moe.ffn_hidden;
  const int64_t fc1_width = m.gated_mlp() ? 2 * f : f;
  const double e = d.e;
  const double rows = static_cast<double>(per_expert * local_experts + busiest_extra);
  // The rank's experts take `received`; it receives (ep−1)/ep of them from the other ranks and
  // sends their outputs back.
  const Bytes received = elements(rank_tokens * H, d.e);
  const Bytes exchanged = elements(rank_tokens * H * (shard.ep - 1) / shard.ep, d.e);
  // Deduplicated, an exchange moves the rank's tokens once to each GPU and domain that needs them,
  // scaled as the copies are by the busiest rank's load and what the capacity drops; the plan
  // spreads them evenly over the experts. Its receiving buffers stay those of the copies.
  const bool deduplicated = shard.ep_dispatcher == TokenDispatcher::kDeduplicated;
  const auto exchange = [&](std::string name, int tokens) {
    Forward op = collective(
        std::move(name), Collective::kAllToAll, Collective::kAllToAll, CommGroup::kExpert,
        deduplicated ? elements(Ts * H * rank_tokens / routed, d.e) : exchanged, {tokens});
    if (deduplicated) {
      op.op.comm.routing = op.backward_comm.routing = moe.token_routing();
      op.op.transient = op.backward_transient = exchanged;
    }
    return op;
  };
  int tokens_in = permute;
  int dispatch_id = -1;
  if (shard.ep > 1) {
    Forward dispatch = exchange("moe.dispatch", permute);
    dispatch.backward_after_weight_gradients = !shard.delay_expert_weight_gradients;
    // Per operator the exchanges keep their output, all the tokens the rank's experts take, as
    // torchtitan's policy saves all_to_all_single.
    dispatch.per_op_output = received;
    tokens_in = dispatch_id = b.add(dispatch);
  }
  const int expert_weight_gradient_after = shard.delay_expert_weight_gradients ? dispatch_id : -1;
  // The exchange delivers tokens grouped by the rank they came from; with several local experts
  // one pass regroups them by expert, and another restores the rank order before the combine
  // (Megatron-Core's sort_chunks_by_idxs, torchtitan's permutation around its experts). Without
  // an exchange the permutation has grouped them already (Megatron-Core still copies them then,
  // which is left out).
  const bool regrouped = shard.ep > 1 && local_experts > 1;
  const Bytes regroup_traffic = elements(2.0 * rows * H, e);
  if (regrouped) {
    tokens_in = b.add(memory_op("moe.group_by_expert", MemoryKernel::kPermute, regroup_traffic, Bytes(0),
                                regroup_traffic, {tokens_in}));
  }
  const int fc1_input = add_input_cast(b, shard, e, "moe.expert_fc1", rows * H, tokens_in);
  const bool kernel_per_expert = shard.expert_gemm == ExpertGemm::kPerExpert;
  const int fc1 = b.add(weight_gemm(
      "moe.expert_fc1", per_expert, fc1_width, m.hidden, local_experts, gemm_dtype(shard), e,
      elements(rows * H, saved_input_bytes(shard, e)), {fc1_input}, busiest_extra));
  b.at(fc1).op.gemm.kernel_per_gemm = kernel_per_expert;
  b.at(fc1).weight_gradient_after = expert_weight_gradient_after;
  add_grad_cast(b, shard, e, fc1);
  // Weighted in the activation, each routed token's fp32 probability is read with it and kept.
  // Megatron-Core fuses the weighting into SwiGLU only (bias_activation_fusion); after any other
  // activation, or unfused, `act * probs` is a product promoted to fp32 and cast back: forward
  // writes and reads the fp32 product; backward casts the gradient up, multiplies it by the
  // probabilities, casts that down, and sums gradient × activation per row for the
  // probabilities' gradient; it keeps the activation's output.
  const bool weighted_activation = shard.moe_weighting == MoeWeighting::kActivation;
  const Bytes probabilities = elements(rows, 4.0);
  Forward activation = elementwise_op("moe.expert_act", activation_kernel(m), rows * f,
                                      activation_cost(m.activation, d.fusion, e), {fc1});
  const int activation_id = b.size();
  // The op that weights reads the probabilities and keeps them; its backward reads them again
  // and writes their gradient.
  auto weigh = [&](Forward& op) {
    op.op.bytes += probabilities;
    op.op.saved += probabilities;
    op.backward_bytes += 2.0 * probabilities;
  };
  const bool weighting_fused = d.fusion == Fusion::kFused && m.activation == Activation::kSwiglu;
  if (weighted_activation && weighting_fused) weigh(activation);
  int act = b.add(activation);
  if (weighted_activation && !weighting_fused) {
    Forward weighting = elementwise_op("moe.expert_weighting", MemoryKernel::kElementwise, rows * f,
                                       ElementwiseCost{2.0 * e + 8.0, 3.0 * e + 20.0, e, 2, 4}, {act});
    weigh(weighting);
    act = b.add(weighting);
  }
  const int fc2_input = add_input_cast(b, shard, e, "moe.expert_fc2", rows * f, act);
  const int fc2 = b.add(
      weight_gemm("moe.expert_fc2", per_expert, m.hidden, f, local_experts, gemm_dtype(shard), e,
                  elements(rows * f, saved_input_bytes(shard, e)), {fc2_input}, busiest_extra));
  b.at(fc2).op.gemm.kernel_per_gemm = kernel_per_expert;
  b.at(fc2).weight_gradient_after = expert_weight_gradient_after;
  // Discarded, the activation comes back once the second GEMM's output gradient is ready.
  std::vector<int> activation_ops;
  for (int op = activation_id; op <= fc2_input; ++op) activation_ops.push_back(op);
  b.discard_outputs(activation_ops, RecomputeModule::kMoeActivation, fc2);
  add_grad_cast(b, shard, e, fc2);
  int tokens_out = fc2;
  if (regrouped) {
    tokens_out = b.add(memory_op("moe.group_by_rank", MemoryKernel::kPermute, regroup_traffic, Bytes(0),
                                 regroup_traffic, {fc2}));
  }
  if (shard.ep > 1) {
    Forward combine = exchange("moe.combine", tokens_out);
    combine.per_op_output = received;
    tokens_out = b.add(combine);
  }
  // Un-permute: weighting by the router probabilities here keeps the expert outputs for backward;
  // already weighted, the copies of a token are only summed.
  const double weighting_passes = weighted_activation ? 0.0 : 1.0;
  int combined = b.add(memory_op("moe.unpermute", MemoryKernel::kPermute,
                                 elements(routed * H * (1.0 + weighting_passes) + Ts * H, d.e),
                                 elements(routed * H * weighting_passes, d.e),
                                 elements(routed * H * (2.0 + weighting_passes), d.e), {tokens_out, topk}));
  if (moe.shared_experts > 0) {
    // Shared experts: a dense MLP on the block's tokens beside the routed ones.
    Dims local = d;
    local.tokens = d.sp_tokens;
    local.sp = false;
    const int shared_first = b.size();
    const int shared =
        add_dense_mlp(b, m, shard, local, input, moe.shared_ffn_hidden * moe.shared_experts,
                      /*tp=*/1, /*num_weight_holders=*/shard.tp, "moe.shared");
    b.recompute_from(shared_first, RecomputeModule::kSharedExperts, layer_input);
    combined = b.add(memory_op("moe.shared_add", MemoryKernel::kElementwise, elements(3.0 * Ts * H, d.e), Bytes(0),
                               elements(2.0 * Ts * H, d.e), {combined, shared}));
  }
  b.recompute_from(router_id, RecomputeModule::kMoe, layer_input);
  return combined;
}

// Parameters of a block every tensor-parallel rank holds whole: its two norms, those
// count_parameters names replicated (latent attention's down-projections and their norms), and
// an MoE router.
int64_t tp_whole_parameters(const ModelSpec& m, const ParameterCount& count, bool moe) {
  return 2 * m.norm_parameters() + count.tp_replicated_per_layer + (moe ? m.hidden * m.moe->experts : 0);
}

// The weights and biases of one key and one value head.
int64_t kv_head_parameters(const ModelSpec& m) {
  return 2 * m.head_dim * (m.hidden + (m.linear_bias || m.qkv_bias ? 1 : 0));
}

// Of a layer's key and value projections, what a rank holds beyond its 1/tp share: a whole head
// where the tensor-parallel group is wider than the key/value heads (rank_kv_heads).
int64_t replicated_kv_parameters(const ModelSpec& m, int tp) {
  if (m.mla || tp <= m.kv_heads) return 0;
  return kv_head_parameters(m) - kv_head_parameters(m) * m.kv_heads / tp;
}

// Parameters one rank holds of a block after TP (and EP for experts).
int64_t sharded_parameters(const ModelSpec& m, const LayerShard& shard, bool moe) {
  const ParameterCount count = count_parameters(m);
  const int64_t whole = tp_whole_parameters(m, count, moe);
  const int64_t replicated = replicated_kv_parameters(m, shard.tp);
  if (!moe) return (count.per_dense_layer - whole) / shard.tp + whole + replicated;
  const int64_t experts = m.moe->experts * count.per_expert;
  return (count.per_moe_layer - experts - whole) / shard.tp + whole + replicated +
         experts / shard.ep;
}

// A norm's weight, and its bias for LayerNorm: PyTorch keeps them apart.
void add_norm_tensors(std::vector<int64_t>& tensors, const ModelSpec& m) {
  tensors.push_back(m.hidden);
  if (m.norm == Norm::kLayerNorm) tensors.push_back(m.hidden);
}

// An MLP of inner size f sharded `shards` ways: gated MLPs keep their two input projections
// apart (Hugging Face, torchtitan), each with its bias.
void add_mlp_tensors(std::vector<int64_t>& tensors, const ModelSpec& m, int64_t f, int64_t shards) {
  for (int input = 0; input < (m.gated_mlp() ? 2 : 1); ++input) {
    tensors.push_back(m.hidden * f / shards);
    if (m.linear_bias) tensors.push_back(f / shards);
  }
  tensors.push_back(f * m.hidden / shards);
  if (m.linear_bias) tensors.push_back(m.hidden / shards);
}

// Multi-head latent attention's weights one rank holds: the down-projections and their norms
// whole, the up-projections and the output projection over TP.
void add_latent_attention_tensors(std::vector<int64_t>& tensors, const ModelSpec& m, int64_t tp) {
  const MlaSpec& a = *m.mla;
  const int64_t q_width = m.heads * m.head_dim;
  if (a.q_lora_rank > 0) {
    tensors.insert(tensors.end(), {m.hidden * a.q_lora_rank, a.q_lora_rank, a.q_lora_rank * q_width / tp});
  } else {
    tensors.push_back(m.hidden * q_width / tp);
  }
  const int64_t up_width = m.heads * (m.head_dim - a.rope_head_dim + a.v_head_dim);
  tensors.insert(tensors.end(), {m.hidden * (a.kv_lora_rank + a.rope_head_dim), a.kv_lora_rank,
                                 a.kv_lora_rank * up_width / tp, m.heads * a.v_head_dim * m.hidden / tp});
}

// The weight tensors of a block one rank holds, as sharded_parameters counts them: everything but
// the norms, the router (and latent attention's down-projections) over TP, routed experts over EP.
std::vector<int64_t> layer_weight_tensors(const ModelSpec& m, const LayerShard& shard, bool moe) {
  std::vector<int64_t> tensors;
  const int64_t tp = shard.tp;
  add_norm_tensors(tensors, m);
  if (m.mla) {
    add_latent_attention_tensors(tensors, m, tp);
  } else {
    const int64_t qkv_width =
        (m.heads / tp + 2 * rank_kv_heads(m, static_cast<int>(tp))) * m.head_dim;
    const int64_t q_width = m.heads * m.head_dim;
    tensors.push_back(m.hidden * qkv_width);  // fused QKV projection
    if (m.linear_bias || m.qkv_bias) tensors.push_back(qkv_width);
    if (m.qk_norm) tensors.insert(tensors.end(), 2, m.head_dim / tp);
    tensors.push_back(q_width * m.hidden / tp);
    if (m.linear_bias) tensors.push_back(m.hidden / tp);
  }
  add_norm_tensors(tensors, m);
  if (!moe) {
    add_mlp_tensors(tensors, m, m.ffn_hidden, tp);
    return tensors;
  }
  const MoeSpec& e = *m.moe;
  tensors.push_back(m.hidden * e.experts);  // router
  // Shared experts run as one MLP of their summed width (as the graph builds them).
  if (e.shared_experts > 0) add_mlp_tensors(tensors, m, e.shared_ffn_hidden * e.shared_experts, tp);
  for (int i = 0; i < e.experts / shard.ep; ++i) add_mlp_tensors(tensors, m, e.ffn_hidden, 1);
  return tensors;
}

// One transformer block reading the residual stream `residual`; returns the op writing its output.
int add_transformer_layer(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard,
                          const Dims& d, int residual, bool moe) {
  int after_attention = 0;
  add_attention(b, m, shard, d, residual, after_attention);
  const int mlp_first = b.size();
  const int norm =
      add_norm(b, m, shard, d, "mlp.norm", after_attention, d.sp && !moe, /*overlap_gather=*/true,
               shard.separate_projections && m.gated_mlp() && !moe ? 2 : 1);
  int mlp_out = 0;
  if (moe) {
    mlp_out = add_moe_mlp(b, m, shard, d, norm);
    // Megatron-Core's MoE layers keep their pre-MLP norm apart from the GEMMs (Transformer
    // Engine's TENorm), so it can discard its output, which comes back once the layer's output
    // gradient is ready.
    b.discard_outputs({norm}, RecomputeModule::kLayerNorm, mlp_out);
  } else {
    const int entry = add_column_parallel_entry(b, m, d, "mlp.fc1", norm);
    const int fc2 = add_dense_mlp(b, m, shard, d, entry, m.ffn_hidden, shard.tp,
                                  /*num_weight_holders=*/1, "mlp");
    mlp_out = add_row_parallel_exit(b, m, d, "mlp.fc2", fc2, /*beside_gemm=*/true);
    // The dense MLP's first GEMM normalises its input (Transformer Engine's LayerNormLinear): the
    // checkpoint keeps the residual stream.
    b.recompute_from(mlp_first, RecomputeModule::kMlp,
                     elements(static_cast<double>(d.sp_tokens * m.hidden), d.e));
  }
  return add_residual(b, m, d, "mlp.residual", mlp_out, after_attention);
}

// Of a block's parameters, those whose gradients are summed over the tensor-parallel group.
int64_t layer_tp_summed_parameters(const ModelSpec& m, const LayerShard& shard, const Dims& d,
                                   bool moe) {
  // Under sequence parallelism every whole-held weight trains on the rank's own tokens.
  int64_t summed = d.sp ? tp_whole_parameters(m, count_parameters(m), moe) : 0;
  if (m.qk_norm && shard.tp > 1) summed += 2 * m.head_dim;
  // A key/value head held by several ranks trains on each one's query heads.
  if (replicated_kv_parameters(m, shard.tp) > 0) summed += kv_head_parameters(m);
  return summed;
}

// The token (and learned position) embedding, vocab-parallel over TP: each TP rank gathers the
// rows of its vocabulary shard (zeros elsewhere), then the partial embeddings are summed over TP.
// Backward scatter-adds the gradient into the fp32 embedding gradient. Returns the last op.
int add_token_embedding(LayerGraphBuilder& b, const ModelSpec& m, const Dims& d) {
  const double T = static_cast<double>(d.tokens);
  const double H = static_cast<double>(m.hidden);
  Forward lookup = memory_op("embedding.lookup", MemoryKernel::kEmbedding, elements(T * H, 2.0 * d.e), Bytes(0),
                             Bytes(T * H * (d.e + 8.0)), {});
  int last = b.add(lookup);
  if (m.position == Position::kLearned) {
    last = b.add(memory_op("embedding.position", MemoryKernel::kElementwise, elements(T * H, 3.0 * d.e), Bytes(0),
                           elements(T * H, d.e + 8.0), {last}));
  }
  last = add_row_parallel_exit(b, m, d, "embedding", last);
  if (m.dropout > 0.0) {
    const double rows = static_cast<double>(d.sp_tokens) * H;
    last = b.add(memory_op("embedding.dropout", MemoryKernel::kElementwise,
                           Bytes(rows * (2.0 * d.e + 1.0)), Bytes(rows),
                           Bytes(rows * (2.0 * d.e + 1.0)), {last}));
  }
  return last;
}

// The final norm a prediction reads, of `input`. It writes no fp8 copy: the output layer runs in
// the activation dtype.
int add_prediction_norm(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard,
                        const Dims& d, int input) {
  LayerShard no_fp8 = shard;
  no_fp8.fp8 = false;
  return add_norm(b, m, no_fp8, d, "head.norm", input, false);
}

// Output projection and softmax cross-entropy loss reading the final norm's output `norm`
// (gathered over TP first under sequence parallelism).
void add_prediction(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard,
                    const Dims& d, int norm) {
  const double T = static_cast<double>(d.tokens);
  const int64_t vocab = m.vocab / shard.tp;
  const int input = d.sp ? add_norm_gather(b, m, d, b.at(norm).op.name, norm, d.e) : norm;
  const int entry = add_column_parallel_entry(b, m, d, "head.logits", input);
  // The output projection runs in the activation dtype (Transformer Engine keeps it out of fp8).
  const int logits = b.add(
      weight_gemm("head.logits", d.tokens, vocab, m.hidden, 1, shard.activation_dtype, d.e,
                  elements(static_cast<double>(d.kept_input_tokens() * m.hidden), d.e), {entry}));
  if (d.regathers()) {
    b.at(logits).regather_for_wgrad = CommSpec{Collective::kAllGather, CommGroup::kTensor,
                                               elements(static_cast<double>(d.tokens * m.hidden), d.e)};
  }
  // Softmax cross-entropy in fp32, one pass per step: the logits cast to fp32 (read e, write 4),
  // the row max and the sum of exponentials (a read each), the softmax written normalized (read
  // and write) and kept for backward. Fused (Megatron-LM's VocabParallelCrossEntropy), the fp32
  // copy becomes the kept softmax in place (exp(out=), div_), beside the logits it was cast from
  // (none where they are fp32 already: float() returns them): 6 bytes per logit at the peak of
  // 16-bit logits; backward forms the gradient in place (read and write) and casts it back (read
  // 4, write e). PyTorch's nll_loss backward writes a dense fp32 gradient first, log_softmax's
  // backward reads it and the kept output into a third fp32 buffer, then the cast back: 8 bytes
  // per logit more traffic, and at its peak 12 bytes per logit alive. Max, sum and target logit
  // are all-reduced over TP (3 floats per token).
  const bool eager = shard.cross_entropy == Fusion::kEager;
  Forward loss = memory_op("head.cross_entropy", MemoryKernel::kCrossEntropy, Bytes(T * vocab * (d.e + 20.0)),
                           Bytes(T * vocab * 4.0), Bytes(T * vocab * ((eager ? 20.0 : 12.0) + d.e)), {logits});
  loss.op.transient = Bytes(T * vocab * (eager ? 4.0 : d.e < 4.0 ? d.e : 0.0));
  if (eager && shard.tp > 1 && shard.tp_implementation == TpImplementation::kPytorch) {
    // Over vocabulary shards of PyTorch's tensor parallelism the loss is loss parallel
    // (torch/distributed/tensor/parallel/loss.py), whose handlers spell both passes out in fp32
    // ops, moving the logits' own bytes and 36 more per logit each way. Forward, _log_softmax: the
    // fp32 copy, the shifted logits and their exponentials (summed, then freed, the result taking
    // their place): 12 bytes per logit at once with the kept 4. Backward,
    // _nll_loss_and_log_softmax_backward: (zeros_like(x) + exp(x)) * grad, then the cast back: 16
    // with the kept 4.
    loss.op.bytes = Bytes(T * vocab * (d.e + 36.0));
    loss.op.kernels = 7;  // cast, max, subtract, exp, sum, subtract, gather
    loss.backward_bytes = Bytes(T * vocab * (d.e + 36.0));
    loss.backward_kernels = 6;  // zeros, scatter, exp, add, multiply, cast
    loss.op.transient = Bytes(T * vocab * 8.0);
    loss.backward_transient = Bytes(T * vocab * 12.0);
  } else if (eager) {
    loss.op.kernels = 3;  // cast, log_softmax, nll_loss
    loss.backward_kernels = 4;
    loss.backward_transient = Bytes(T * vocab * 8.0);
  }
  if (eager && d.e < 4.0) {
    // The 16-bit logits are freed before backward (torchtitan's train step deletes them, and the
    // fp32 cast keeps none of its input), but no fp32 gradient buffer of the same logits fits in
    // their block: PyTorch's caching allocator serves a request only from a cached block at least
    // as large (CUDACachingAllocator.cpp, get_free_block). Backward asks for one fp32 buffer more
    // than forward freed, and that one takes new memory while the logits' block stays cached.
    loss.backward_stranded = Bytes(T * vocab * d.e);
  }
  const int loss_id = b.add(loss);
  if (shard.tp > 1) {
    b.add(collective("head.cross_entropy.allreduce", Collective::kAllReduce, Collective::kNone, CommGroup::kTensor,
                     Bytes(T * 3.0 * 4.0), {loss_id}));
  }
}

// A multi-token prediction module as Megatron-Core's MultiTokenPredictionLayer runs it, reading
// `hidden` (the model's final norm's output, or the norm's of the module before, as
// MultiTokenPredictionBlock passes them on): the shifted tokens' embedding and
// `hidden` each normalised, their concatenation (2·hidden wide) projected back by a
// column-parallel GEMM whose output is gathered over TP (gather_from_tensor_model_parallel_region,
// whose backward keeps the rank's columns and sends nothing; split again over the sequence under
// sequence parallelism), one transformer layer, and a prediction with a norm of its own. Its norms
// write no fp8 copy: the concatenation, not a GEMM, reads them. From the two norms to the
// prediction's norm it is one checkpointed module (kMultiTokenPrediction), whose two norms keep
// the embedding and `hidden`. Returns its norm's output.
int add_mtp_module(LayerGraphBuilder& b, const ModelSpec& m, const LayerShard& shard, const Dims& d,
                   int hidden) {
  LayerShard unfused = shard;
  unfused.fp8 = false;
  const int embedded = add_token_embedding(b, m, d);
  const int embedding_norm = add_norm(b, m, unfused, d, "enorm", embedded, false);
  const int hidden_norm = add_norm(b, m, unfused, d, "hnorm", hidden, false);
  const double rows = static_cast<double>(d.sp_tokens * 2 * m.hidden);
  // Backward splits the gradient into the two norms' contiguous inputs.
  const int joined =
      b.add(memory_op("concat", MemoryKernel::kElementwise, elements(rows, 2.0 * d.e), Bytes(0),
                      elements(rows, 2.0 * d.e), {embedding_norm, hidden_norm}));
  // Transformer Engine casts the rank's tokens, then gathers them in fp8.
  const int cast = add_input_cast(b, shard, d.e, "eh_proj", rows, joined);
  const int entry = add_tensor_parallel_entry(b, d, "eh_proj", 2 * m.hidden, {cast},
                                              shard.fp8 ? 2 * m.hidden : 0);
  int projected =
      add_column_parallel_gemm(b, shard, d, "eh_proj", m.hidden / shard.tp, 2 * m.hidden, entry);
  if (shard.tp > 1) {
    const Bytes output = elements(static_cast<double>(d.tokens * m.hidden), d.e);
    projected = b.add(collective("eh_proj.output_gather", Collective::kAllGather, Collective::kNone,
                                 CommGroup::kTensor, output, {projected}));
    if (d.sp) {
      projected = b.add(collective("eh_proj.scatter", Collective::kNone, Collective::kAllGather,
                                   CommGroup::kTensor, output, {projected}));
    }
  }
  const int norm = add_prediction_norm(
      b, m, shard, d, add_transformer_layer(b, m, shard, d, projected, m.mtp_layer_is_moe()));
  const Bytes input = elements(static_cast<double>(d.sp_tokens * m.hidden), d.e);
  b.recompute_from(embedding_norm, RecomputeModule::kMultiTokenPrediction, input);
  b.keep_checkpoint(hidden_norm, RecomputeModule::kMultiTokenPrediction, input);
  add_prediction(b, m, shard, d, norm);
  return norm;
}

// Recomputation checkpoints the model's transformer layers only (Megatron-LM, torchtitan): the
// blocks around them keep what their backward needs.
LayerShard outside_layers(LayerShard shard) {
  if (shard.recompute != Recompute::kSelective) shard.recompute = Recompute::kNone;
  return shard;
}

// The head's multi-token prediction modules are recomputed as Megatron-Core does: selectively,
// the parts of each module's layer named for every layer; under full recomputation, each module
// from its two input norms to its own norm (tensor_parallel.checkpoint around the module's
// _proj_and_transformer_layer when recompute_granularity is full).
LayerShard head_shard(LayerShard shard) {
  if (shard.recompute != Recompute::kFull) return outside_layers(shard);
  shard.recompute = Recompute::kSelective;
  shard.recompute_modules = {RecomputeModule::kMultiTokenPrediction};
  return shard;
}

// Of a layer's parameters, the routed experts one rank holds.
int64_t layer_expert_parameters(const ModelSpec& m, const LayerShard& shard, bool moe) {
  return moe ? count_parameters(m).routed_experts / shard.ep : 0;
}

// Of those, the weights of the experts' GEMMs where they run in fp8 (not their biases).
int64_t layer_fp8_expert_gemm_parameters(const ModelSpec& m, const LayerShard& shard, bool moe) {
  if (!moe || !shard.fp8) return 0;
  const int64_t matrices = m.gated_mlp() ? 3 : 2;
  return m.moe->experts / shard.ep * matrices * m.hidden * m.moe->ffn_hidden;
}

// Sets the routed experts' share of a graph's weights. Their fp8 GEMM weights come from the
// experts' shapes, not the graph's ops, so they are checked against the graph's fp8 GEMMs.
void set_expert_parameters(LayerGraph& graph, int64_t experts, int64_t fp8_gemm_experts) {
  PACELINE_CHECK(fp8_gemm_experts <= std::min(experts, graph.fp8_gemm_parameters),
                 "fp8 expert GEMM weights beyond the experts' or the fp8 GEMMs'");
  graph.expert_parameters = experts;
  graph.fp8_gemm_expert_parameters = fp8_gemm_experts;
}

// The block input: a placeholder holding the residual stream (no kernel, no gradient).
int add_block_input(LayerGraphBuilder& b) {
  return b.add(
      collective("input", Collective::kNone, Collective::kNone, CommGroup::kTensor, Bytes(0), {}));
}

}  // namespace

LayerGraph build_transformer_layer(const ModelSpec& m, const LayerShard& shard, bool moe) {
  PACELINE_CHECK(!moe || m.moe.has_value(), "an MoE block of a dense model");
  LayerGraphBuilder b(shard);
  const Dims d = dims_of(shard);
  const int residual = add_block_input(b);
  add_transformer_layer(b, m, shard, d, residual, moe);
  // Under full recompute the block keeps only its input, held by its first reader.
  b.set_input_holder(1, elements(static_cast<double>(d.sp_tokens * m.hidden), d.e));
  const ParameterCount count = count_parameters(m);
  LayerGraph graph =
      b.build(sharded_parameters(m, shard, moe), moe ? count.per_moe_layer : count.per_dense_layer,
              layer_weight_tensors(m, shard, moe));
  graph.tp_summed_parameters = layer_tp_summed_parameters(m, shard, d, moe);
  set_expert_parameters(graph, layer_expert_parameters(m, shard, moe),
                        layer_fp8_expert_gemm_parameters(m, shard, moe));
  return graph;
}

LayerGraph build_embedding(const ModelSpec& m, const LayerShard& shard) {
  LayerGraphBuilder b(outside_layers(shard));
  add_token_embedding(b, m, dims_of(shard));
  // The word embedding is split over TP by vocabulary; learned positions are whole on every rank.
  const ParameterCount count = count_parameters(m);
  const int64_t positions = m.position == Position::kLearned ? m.seq_len * m.hidden : 0;
  std::vector<int64_t> tensors = {m.vocab * m.hidden / shard.tp};
  if (positions > 0) tensors.push_back(positions);
  return b.build((count.embedding - positions) / shard.tp + positions, count.embedding,
                 std::move(tensors));
}

LayerGraph build_output_head(const ModelSpec& m, const LayerShard& shard) {
  LayerGraphBuilder b(head_shard(shard));
  const Dims d = dims_of(shard);
  const int final_norm = add_prediction_norm(b, m, shard, d, add_block_input(b));
  int hidden = final_norm;
  for (int module = 1; module <= m.mtp_layers; ++module) {
    const int first = b.size();
    hidden = add_mtp_module(b, m, shard, d, hidden);
    b.prefix_names(first, fmt::format("mtp{}.", module));
  }
  add_prediction(b, m, shard, d, final_norm);

  const int64_t norm_params = m.norm_parameters();
  const int64_t vocabulary = head_vocabulary_parameters(m, shard.head_apart_from_embedding);
  std::vector<int64_t> tensors;
  add_norm_tensors(tensors, m);
  // The output projection and the embedding's copy, each vocab-parallel.
  for (int64_t copy = 0; copy < vocabulary / (m.vocab * m.hidden); ++copy)
    tensors.push_back(m.vocab * m.hidden / shard.tp);
  int64_t parameters = vocabulary / shard.tp + norm_params;
  int64_t tp_summed = d.sp ? norm_params : 0;
  const bool mtp_moe = m.mtp_layer_is_moe();
  for (int module = 0; module < m.mtp_layers; ++module) {
    const std::vector<int64_t> layer = layer_weight_tensors(m, shard, mtp_moe);
    tensors.insert(tensors.end(), layer.begin(), layer.end());
    for (int norm = 0; norm < 3; ++norm) add_norm_tensors(tensors, m);
    tensors.push_back(2 * m.hidden * m.hidden / shard.tp);
    parameters += sharded_parameters(m, shard, mtp_moe) + 3 * norm_params +
                  2 * m.hidden * m.hidden / shard.tp;
    tp_summed += layer_tp_summed_parameters(m, shard, d, mtp_moe) + (d.sp ? 3 * norm_params : 0);
  }
  const ParameterCount count = count_parameters(m);
  LayerGraph graph =
      b.build(parameters, vocabulary + norm_params + m.mtp_layers * count.per_mtp_module,
              std::move(tensors));
  graph.tp_summed_parameters = tp_summed;
  set_expert_parameters(graph, m.mtp_layers * layer_expert_parameters(m, shard, mtp_moe),
                        m.mtp_layers * layer_fp8_expert_gemm_parameters(m, shard, mtp_moe));
  return graph;
}

bool head_copies_word_embedding(const ModelSpec& m) {
  return m.tied_embeddings || m.mtp_layers > 0;
}

int64_t head_vocabulary_parameters(const ModelSpec& m, bool apart_from_embedding) {
  const int64_t copy =
      apart_from_embedding && head_copies_word_embedding(m) ? m.vocab * m.hidden : 0;
  return count_parameters(m).output + copy;
}

std::string_view to_string(CommGroup group) {
  switch (group) {
    case CommGroup::kTensor: return "tp";
    case CommGroup::kContext: return "cp";
    case CommGroup::kExpert: return "ep";
    case CommGroup::kData: return "dp";
    case CommGroup::kPipeline: return "pp";
  }
  return "?";
}

std::string_view to_string(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "forward";
    case Phase::kRecompute: return "recompute";
    case Phase::kBackwardInput: return "backward_input";
    case Phase::kBackwardWeight: return "backward_weight";
  }
  return "?";
}

}  // namespace paceline
