// The kernel vocabulary that models/ and hardware/ share without knowing each other: dtypes,
// GEMM and attention shapes, memory-bound kernel kinds and collectives. models/ describes a
// training step in these terms; hardware/ prices them; sim/parallel connects the two.
#ifndef PACELINE_BASE_KERNEL_SHAPES_H_
#define PACELINE_BASE_KERNEL_SHAPES_H_

#include <compare>
#include <cstdint>
#include <optional>
#include <string_view>

namespace paceline {

enum class DType { kFp32, kTf32, kBf16, kFp16, kFp8 };
double bytes_per_element(DType dtype);
std::string_view to_string(DType dtype);

// Memory-bound kernels, as the calibration tool measures them.
enum class MemoryKernel {
  kNone,
  kElementwise,   // add, scale, residual, dropout
  kGelu,
  kSwiglu,
  kSquaredRelu,
  kLayerNorm,
  kRmsNorm,
  kSoftmax,
  kCrossEntropy,
  kRotary,
  kEmbedding,     // gather / scatter-add of rows
  kCast,          // dtype conversion with amax (fp8)
  kPermute,       // MoE token permutation
  kOptimizer,     // fused optimizer update over parameters
};
std::string_view to_string(MemoryKernel kernel);

enum class Collective { kNone, kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
std::string_view to_string(Collective collective);

// A mixture-of-experts token exchange that sends each token once to every GPU, and once to
// every other NVLink domain, holding one of its experts, rather than once per expert (DeepEP's
// and HybridEP's dispatch and combine): each token goes to `top_k` of `experts` experts, spread
// evenly over the exchange's members, drawn from `group_top_k` of the `groups` equal groups of
// them (group-limited routing). No experts: an all-to-all of the bytes it is given.
struct TokenRouting {
  int experts = 0;
  int top_k = 0;
  int groups = 1;
  int group_top_k = 1;
  bool deduplicated() const { return experts > 0; }
  // Whether a token takes at least one expert from each group it draws, as a router ranking
  // groups by their best experts nearly always gives it where it takes two or more experts a
  // group (hardware/collective_model.cc); drawing every group chooses none over another.
  bool covers_drawn_groups() const { return group_top_k < groups && 2 * group_top_k <= top_k; }
  auto operator<=>(const TokenRouting&) const = default;
};

// Which product of a Linear layer y = x·Wᵀ a GEMM is: the three use different operand
// layouts (cuBLAS TN, NN and NT), which libraries run at different speeds.
enum class GemmLayout { kForward, kDataGradient, kWeightGradient };

// C[m×n] = A[m×k]·B[k×n], row-major in the model's terms: a forward GEMM has m = tokens,
// n = output features, k = input features.
struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t count = 1;  // independent GEMMs of this shape (grouped, e.g. local experts)
  DType dtype = DType::kBf16;
  GemmLayout layout = GemmLayout::kForward;
  // A weight-gradient GEMM that adds into a persistent gradient buffer (cuBLAS beta = 1,
  // Megatron-LM's gradient-accumulation fusion) reads and writes C in that buffer's dtype;
  // otherwise C is written once, in bf16 for fp8 GEMMs and in the input dtype for the others.
  std::optional<DType> accumulates_into;
  // Each of the `count` GEMMs is a kernel of its own, launched on several streams (Transformer
  // Engine's GroupedLinear: multi-stream cuBLAS), not one grouped kernel: together their tiles
  // fill the GPU as a grouped kernel's do, and every one pays the launch gap and tail.
  bool kernel_per_gemm = false;
  // Tokens the first of the `count` GEMMs takes beyond each of the others' (a grouped GEMM's
  // busiest expert): along m, or along k in the weight-gradient layout, which reduces over them.
  int64_t first_extra_tokens = 0;

  // m and k summed over the `count` GEMMs.
  double sum_m() const {
    return static_cast<double>(m) * count + (tokens_along_k() ? 0 : first_extra_tokens);
  }
  double sum_k() const {
    return static_cast<double>(k) * count + (tokens_along_k() ? first_extra_tokens : 0);
  }
  // Elements of A, B and C, and multiply-adds, summed over the GEMMs. Only one of m and k
  // differs between them, so the sum of m·k is the product of the sums over the count.
  double a_elements() const { return sum_m() * sum_k() / static_cast<double>(count); }
  double b_elements() const {
    // Forward and data gradient: a GEMM without rows reads no weights.
    if (!tokens_along_k() && m == 0)
      return first_extra_tokens > 0 ? static_cast<double>(k) * n : 0.0;
    return sum_k() * static_cast<double>(n);
  }
  double c_elements() const { return sum_m() * static_cast<double>(n); }
  double multiply_adds() const { return a_elements() * static_cast<double>(n); }

 private:
  bool tokens_along_k() const { return layout == GemmLayout::kWeightGradient; }
};

// How attention is computed: the fused kernel Transformer Engine runs on the GPU (cuDNN's fused
// attention on Hopper, FlashAttention-2 on Ampere), FlashAttention-2 (flash-attn 2.x, PyTorch
// SDPA's flash backend), FlashAttention-3 (flash-attn's Hopper build), FlashAttention in Triton
// (flash-attn 1.x's flash_attn_triton.py, which LLM Foundry runs as attn_impl: triton), or as
// separate GEMMs and softmax that keep the s×s scores.
enum class AttentionKernel { kFlash, kFlash2, kFlash3, kFlashTriton, kUnfused };

// FlashAttention-2 is compiled for head dims 32, 64, ..., 256 and runs a head on the smallest
// that holds it (flash-attn 2.x's HEADDIM_SWITCH, copied into PyTorch's
// aten/src/ATen/native/transformers/cuda/flash_attn/static_switch.h): its matmuls span the
// padded width.
inline constexpr int64_t kFlash2MaxHeadDim = 256;
inline constexpr int64_t flash2_kernel_head_dim(int64_t head_dim) { return (head_dim + 31) / 32 * 32; }

// FlashAttention-3 is compiled for head dims 64, 96, 128, 192 and 256 and runs a head on the
// smallest that holds it (hopper/flash_api.cpp, round_up_headdim).
inline constexpr int64_t kFlash3MaxHeadDim = 256;
inline constexpr int64_t flash3_kernel_head_dim(int64_t head_dim) {
  return head_dim <= 64    ? 64
         : head_dim <= 96  ? 96
         : head_dim <= 128 ? 128
         : head_dim <= 192 ? 192
                           : kFlash3MaxHeadDim;
}

// FlashAttention in Triton takes heads up to 128 wide and tiles them at the next power of two,
// at least 16 (flash_attn_triton.py: assert d <= 128, BLOCK_HEADDIM = max(next_power_of_2(d), 16)).
inline constexpr int64_t kFlashTritonMaxHeadDim = 128;
inline constexpr int64_t flash_triton_kernel_head_dim(int64_t head_dim) {
  int64_t block = 16;
  while (block < head_dim) block *= 2;
  return block;
}

// The widest head `kernel` runs (0: any), and the width its matmuls span for a head of `head_dim`.
inline constexpr int64_t attention_kernel_max_head_dim(AttentionKernel kernel) {
  return kernel == AttentionKernel::kFlash2        ? kFlash2MaxHeadDim
         : kernel == AttentionKernel::kFlash3      ? kFlash3MaxHeadDim
         : kernel == AttentionKernel::kFlashTriton ? kFlashTritonMaxHeadDim
                                                   : 0;
}
inline constexpr int64_t attention_kernel_head_dim(AttentionKernel kernel, int64_t head_dim) {
  return kernel == AttentionKernel::kFlash2        ? flash2_kernel_head_dim(head_dim)
         : kernel == AttentionKernel::kFlash3      ? flash3_kernel_head_dim(head_dim)
         : kernel == AttentionKernel::kFlashTriton ? flash_triton_kernel_head_dim(head_dim)
                                                   : head_dim;
}

// Fused attention over one rank's shard. causal: each query sees keys up to itself.
struct AttentionShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t seq_q = 0;
  int64_t seq_kv = 0;
  int64_t head_dim = 0;  // of queries and keys
  bool causal = true;
  bool backward = false;
  DType dtype = DType::kBf16;
  AttentionKernel kernel = AttentionKernel::kFlash;  // a fused kernel: not kUnfused
  // Of values and the output, where it differs from head_dim (multi-head latent attention); 0: the same.
  int64_t value_head_dim = 0;
  int64_t value_dim() const { return value_head_dim > 0 ? value_head_dim : head_dim; }
  // Backward's matrix products over forward's: Q·Kᵀ again, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K and
  // dK = dSᵀ·Q against Q·Kᵀ and P·V, each at its own width (2.5 where values are as wide as keys).
  double backward_work_ratio() const {
    const double qk = static_cast<double>(head_dim), v = static_cast<double>(value_dim());
    return (3.0 * qk + 2.0 * v) / (qk + v);
  }
};

}  // namespace paceline

#endif  // PACELINE_BASE_KERNEL_SHAPES_H_
