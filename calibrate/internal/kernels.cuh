// paceline-calibrate's own CUDA kernels: random buffer fills and the memory-bound benchmark
// kernels.
//
// The memory-bound kernels are deliberately simple, documented stand-ins for what frameworks
// run (PyTorch's vectorized element-wise kernels, Apex/Transformer Engine fused norms): one
// pass over bf16 tensors with 16-byte vector loads and fp32 math, one block per row for the
// row-wise kernels. They measure what a good single-pass kernel achieves on the memory system,
// which is what the simulator's memory-bound op timer needs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace paceline::calibrate::internal {

// Element types the fill kernel writes.
enum class ElementType { kBf16, kFp16, kFp32, kFp8E4m3, kInt32 };

// launch_fill_uniform writes `count` values uniformly distributed in [lo, hi) to `data`, from a
// counter-based hash of (seed, index): random, reproducible, without generator state. Integers
// are the floor of the uniform value. Returns the launch status.
cudaError_t launch_fill_uniform(void* data, int64_t count, ElementType type, uint64_t seed,
                                float lo, float hi, cudaStream_t stream);

// The memory-bound kernels (names as in the profile's memory_bound table).
enum class MemoryOp { kAdd, kGelu, kSwiglu, kLayernorm, kRmsnorm, kSoftmax, kCrossEntropy };

// MemoryArgs are the buffers of one memory-bound call; bf16 unless noted. Element-wise kernels
// read `a` (and `b` for add and swiglu) and write `out`; row-wise kernels work on rows of `row`
// elements: norms read `a`, `gamma` (and `beta`) and write `out`; softmax reads `a` and writes
// `out`; cross-entropy reads logits `a` and int32 `targets` and writes fp32 `loss` per row.
struct MemoryArgs {
  MemoryOp op = MemoryOp::kAdd;
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  const int32_t* targets = nullptr;
  float* loss = nullptr;
  int64_t elements = 0;
  int64_t row = 0;
};

// supported_row_width says whether a row-wise op has a kernel for rows of `row` elements
// (multiples of 2048 up to 16384 for norms and softmax, multiples of 2048 for cross-entropy).
bool supported_row_width(MemoryOp op, int64_t row);

// launch_memory_op launches one call. Element counts must be multiples of 8 (16-byte vectors)
// and of `row` for row-wise ops. Returns the launch status.
cudaError_t launch_memory_op(const MemoryArgs& args, cudaStream_t stream);

}  // namespace paceline::calibrate::internal
