#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "calibrate/internal/kernels.cuh"

namespace paceline::calibrate::internal {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVector = 8;  // bf16 values per 16-byte load

// splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014).
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// uniform01 maps (seed, index) to [0, 1) with 24 random bits.
__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t index) {
  return static_cast<float>(splitmix64(seed ^ splitmix64(index)) >> 40) * (1.0f / 16777216.0f);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half from_float(float v) {
  return __float2half(v);
}
template <>
__device__ __forceinline__ float from_float(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float(float v) {
  return __nv_fp8_e4m3(v);
}
template <>
__device__ __forceinline__ int32_t from_float(float v) {
  return static_cast<int32_t>(floorf(v));
}

template <typename T>
__global__ void fill_kernel(T* data, int64_t count, uint64_t seed, float lo, float hi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = from_float<T>(lo + (hi - lo) * uniform01(seed, static_cast<uint64_t>(i)));
  }
}

int grid_for(int64_t work_items) {
  int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, 1 << 20));
}

// Vector load/store of 8 bf16 values as fp32.
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[kVector]) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 f = __bfloat1622float2(h[j]);
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&v)[kVector]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// GeLU, tanh approximation (Hendrycks & Gimpel 2016, eq. 2), as in GPT-2 and Megatron-LM.
__device__ __forceinline__ float gelu(float x) {
  const float k = 0.7978845608f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

template <MemoryOp Op>
__global__ void elementwise_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                   __nv_bfloat16* out, int64_t vectors) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += stride) {
    float x[kVector], y[kVector], r[kVector];
    load8(a + i * kVector, x);
    if constexpr (Op != MemoryOp::kGelu) load8(b + i * kVector, y);
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      if constexpr (Op == MemoryOp::kAdd) r[j] = x[j] + y[j];
      if constexpr (Op == MemoryOp::kGelu) r[j] = gelu(x[j]);
      if constexpr (Op == MemoryOp::kSwiglu) r[j] = silu(x[j]) * y[j];
    }
    store8(out + i * kVector, r);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// block_sum / block_max reduce over the block; every thread gets the result.
__device__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < kWarps ? scratch[lane] : 0.0f;
  return warp_sum(total);
}

__device__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < kWarps ? scratch[lane] : -INFINITY;
  return warp_max(m);
}

// One block per row of Vecs·kThreads·kVector elements, kept in registers between passes.
template <MemoryOp Op, int Vecs>
__global__ void row_kernel(const __nv_bfloat16* x, const __nv_bfloat16* gamma,
                           const __nv_bfloat16* beta, __nv_bfloat16* out) {
  constexpr int kRow = Vecs * kThreads * kVector;
  constexpr float kEpsilon = 1e-5f;  // PyTorch's LayerNorm default
  __shared__ float scratch[kWarps];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kRow;
  float v[Vecs][kVector];
#pragma unroll
  for (int i = 0; i < Vecs; ++i) load8(x + base + (i * kThreads + threadIdx.x) * kVector, v[i]);

  float scale = 1.0f, shift = 0.0f;
  if constexpr (Op == MemoryOp::kLayernorm) {
    float sum = 0;
#pragma unroll
    for (int i = 0; i < Vecs; ++i)
#pragma unroll
      for (int j = 0; j < kVector; ++j) sum += v[i][j];
    const float mean = block_sum(sum, scratch) / kRow;
    float sq = 0;
#pragma unroll
    for (int i = 0; i < Vecs; ++i)
#pragma unroll
      for (int j = 0; j < kVector; ++j) sq += (v[i][j] - mean) * (v[i][j] - mean);
    scale = rsqrtf(block_sum(sq, scratch) / kRow + kEpsilon);
    shift = -mean * scale;
  } else if constexpr (Op == MemoryOp::kRmsnorm) {
    float sq = 0;
#pragma unroll
    for (int i = 0; i < Vecs; ++i)
#pragma unroll
      for (int j = 0; j < kVector; ++j) sq += v[i][j] * v[i][j];
    scale = rsqrtf(block_sum(sq, scratch) / kRow + kEpsilon);
  } else if constexpr (Op == MemoryOp::kSoftmax) {
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < Vecs; ++i)
#pragma unroll
      for (int j = 0; j < kVector; ++j) m = fmaxf(m, v[i][j]);
    m = block_max(m, scratch);
    float sum = 0;
#pragma unroll
    for (int i = 0; i < Vecs; ++i)
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        v[i][j] = __expf(v[i][j] - m);
        sum += v[i][j];
      }
    scale = 1.0f / block_sum(sum, scratch);
  }

#pragma unroll
  for (int i = 0; i < Vecs; ++i) {
    const int64_t col = (i * kThreads + threadIdx.x) * kVector;
    float r[kVector];
    if constexpr (Op == MemoryOp::kSoftmax) {
#pragma unroll
      for (int j = 0; j < kVector; ++j) r[j] = v[i][j] * scale;
    } else {
      float g[kVector], bb[kVector];
      load8(gamma + col, g);
      if constexpr (Op == MemoryOp::kLayernorm) {
        load8(beta + col, bb);
      } else {
#pragma unroll
        for (int j = 0; j < kVector; ++j) bb[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kVector; ++j) r[j] = (v[i][j] * scale + shift) * g[j] + bb[j];
    }
    store8(out + base + col, r);
  }
}

// Cross-entropy forward, one block per row of `row` logits: loss = logsumexp(x) - x[target],
// with an online (max, sum) pass so that the logits are read once (Milakov & Gimelshein 2018,
// "Online normalizer calculation for softmax").
__global__ void cross_entropy_kernel(const __nv_bfloat16* logits, const int32_t* targets,
                                     float* loss, int64_t row) {
  __shared__ float scratch_m[kWarps], scratch_s[kWarps];
  const __nv_bfloat16* x = logits + static_cast<int64_t>(blockIdx.x) * row;
  float m = -INFINITY, s = 0;
  for (int64_t i = threadIdx.x; i < row / kVector; i += kThreads) {
    float v[kVector];
    load8(x + i * kVector, v);
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      if (v[j] > m) {
        s = s * __expf(m - v[j]) + 1.0f;
        m = v[j];
      } else {
        s += __expf(v[j] - m);
      }
    }
  }
  // Combine (max, sum) pairs: warp, then block.
  for (int offset = 16; offset > 0; offset >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    float mm = fmaxf(m, m2);
    s = (m == -INFINITY ? 0.0f : s * __expf(m - mm)) +
        (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - mm));
    m = mm;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    scratch_m[warp] = m;
    scratch_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = scratch_m[0], bs = scratch_s[0];
    for (int w = 1; w < kWarps; ++w) {
      float mm = fmaxf(bm, scratch_m[w]);
      bs = bs * __expf(bm - mm) + scratch_s[w] * __expf(scratch_m[w] - mm);
      bm = mm;
    }
    int32_t t = targets[blockIdx.x];
    t = t < 0 ? 0 : (t >= row ? static_cast<int32_t>(row - 1) : t);
    loss[blockIdx.x] = logf(bs) + bm - __bfloat162float(x[t]);
  }
}

template <MemoryOp Op>
cudaError_t launch_row(const MemoryArgs& args, cudaStream_t stream) {
  const auto* x = static_cast<const __nv_bfloat16*>(args.a);
  const auto* gamma = static_cast<const __nv_bfloat16*>(args.gamma);
  const auto* beta = static_cast<const __nv_bfloat16*>(args.beta);
  auto* out = static_cast<__nv_bfloat16*>(args.out);
  const unsigned rows = static_cast<unsigned>(args.elements / args.row);
  switch (args.row / (kThreads * kVector)) {
    case 1:
      row_kernel<Op, 1><<<rows, kThreads, 0, stream>>>(x, gamma, beta, out);
      break;
    case 2:
      row_kernel<Op, 2><<<rows, kThreads, 0, stream>>>(x, gamma, beta, out);
      break;
    case 4:
      row_kernel<Op, 4><<<rows, kThreads, 0, stream>>>(x, gamma, beta, out);
      break;
    case 8:
      row_kernel<Op, 8><<<rows, kThreads, 0, stream>>>(x, gamma, beta, out);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fill_uniform(void* data, int64_t count, ElementType type, uint64_t seed,
                                float lo, float hi, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const int grid = std::min(grid_for(count), 8192);
  switch (type) {
    case ElementType::kBf16:
      fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count, seed, lo,
                                                 hi);
      break;
    case ElementType::kFp16:
      fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__half*>(data), count, seed, lo, hi);
      break;
    case ElementType::kFp32:
      fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(data), count, seed, lo, hi);
      break;
    case ElementType::kFp8E4m3:
      fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(data), count, seed, lo,
                                                 hi);
      break;
    case ElementType::kInt32:
      fill_kernel<<<grid, kThreads, 0, stream>>>(static_cast<int32_t*>(data), count, seed, lo, hi);
      break;
  }
  return cudaGetLastError();
}

bool supported_row_width(MemoryOp op, int64_t row) {
  const int64_t unit = kThreads * kVector;
  if (row <= 0 || row % unit != 0) return false;
  if (op == MemoryOp::kCrossEntropy) return true;
  int64_t vecs = row / unit;
  return vecs == 1 || vecs == 2 || vecs == 4 || vecs == 8;
}

cudaError_t launch_memory_op(const MemoryArgs& args, cudaStream_t stream) {
  if (args.elements <= 0 || args.elements % kVector != 0) return cudaErrorInvalidValue;
  const int64_t vectors = args.elements / kVector;
  const auto* a = static_cast<const __nv_bfloat16*>(args.a);
  const auto* b = static_cast<const __nv_bfloat16*>(args.b);
  auto* out = static_cast<__nv_bfloat16*>(args.out);
  switch (args.op) {
    case MemoryOp::kAdd:
      elementwise_kernel<MemoryOp::kAdd>
          <<<grid_for(vectors), kThreads, 0, stream>>>(a, b, out, vectors);
      return cudaGetLastError();
    case MemoryOp::kGelu:
      elementwise_kernel<MemoryOp::kGelu>
          <<<grid_for(vectors), kThreads, 0, stream>>>(a, b, out, vectors);
      return cudaGetLastError();
    case MemoryOp::kSwiglu:
      elementwise_kernel<MemoryOp::kSwiglu>
          <<<grid_for(vectors), kThreads, 0, stream>>>(a, b, out, vectors);
      return cudaGetLastError();
    case MemoryOp::kLayernorm:
    case MemoryOp::kRmsnorm:
    case MemoryOp::kSoftmax:
    case MemoryOp::kCrossEntropy:
      if (!supported_row_width(args.op, args.row) || args.elements % args.row != 0) {
        return cudaErrorInvalidValue;
      }
      break;
  }
  switch (args.op) {
    case MemoryOp::kLayernorm:
      return launch_row<MemoryOp::kLayernorm>(args, stream);
    case MemoryOp::kRmsnorm:
      return launch_row<MemoryOp::kRmsnorm>(args, stream);
    case MemoryOp::kSoftmax:
      return launch_row<MemoryOp::kSoftmax>(args, stream);
    case MemoryOp::kCrossEntropy: {
      const unsigned rows = static_cast<unsigned>(args.elements / args.row);
      cross_entropy_kernel<<<rows, kThreads, 0, stream>>>(a, args.targets, args.loss, args.row);
      return cudaGetLastError();
    }
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace paceline::calibrate::internal
