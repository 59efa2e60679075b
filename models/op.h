// Op: one kernel (or collective) of a transformer's training step, with its shape, work,
// memory traffic and the activations it keeps for backward.
//
// Ops speak in shapes and bytes only — a GEMM of M×N×K in a dtype, a fused attention of a
// shape, a memory-bound pass over bytes, a collective over a parallel group — never in
// hardware terms. hardware/ turns them into durations; sim/parallel places them on streams.
#ifndef PACELINE_MODELS_OP_H_
#define PACELINE_MODELS_OP_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "base/kernel_shapes.h"
#include "base/units.h"

namespace paceline {

enum class OpKind { kGemm, kAttention, kMemoryBound, kCommunication };

// The parallel group a collective runs over.
enum class CommGroup { kTensor, kContext, kExpert, kData, kPipeline };
std::string_view to_string(CommGroup group);

// Which part of the step an op belongs to. Backward is split as zero-bubble schedules need:
// input gradients (on the critical path to the previous stage) and weight gradients.
enum class Phase { kForward, kRecompute, kBackwardInput, kBackwardWeight };
std::string_view to_string(Phase phase);

struct CommSpec {
  Collective collective = Collective::kNone;
  CommGroup group = CommGroup::kTensor;
  // The collective's buffer size as nccl-tests counts it: the full (gathered / reduced)
  // buffer for all-reduce, all-gather and reduce-scatter; the bytes each rank sends for
  // all-to-all and send/recv; for an all-to-all with a routing, one copy of the rank's tokens
  // (scaled by the busiest rank's load and what the capacity drops).
  Bytes size;
  TokenRouting routing;  // a mixture-of-experts exchange deduplicated per destination
};

struct Op {
  std::string name;  // stable, e.g. "attn.qkv" / "attn.qkv.dgrad"
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kMemoryBound;
  GemmShape gemm;
  AttentionShape attention;
  MemoryKernel memory_kernel = MemoryKernel::kNone;
  CommSpec comm;
  Flop flop;           // arithmetic work
  Bytes bytes;         // memory traffic: bytes read plus written
  Bytes saved;         // activations kept from this op until `released_by` finishes
  Bytes transient;     // buffers alive only while the op runs (outputs, workspace)
  // Blocks the caching allocator holds while the op runs that its transient buffers cannot use:
  // freed before it by smaller buffers than it asks for (Task::stranded_bytes).
  Bytes stranded;
  int kernels = 1;     // kernels launched: a fused op is one, an eager composite several
  uint32_t released_by = UINT32_MAX;  // the op (in the same graph) that frees `saved`
};

}  // namespace paceline

#endif  // PACELINE_MODELS_OP_H_
