#include "base/kernel_shapes.h"

namespace paceline {

double bytes_per_element(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
    case DType::kTf32: return 4.0;
    case DType::kBf16:
    case DType::kFp16: return 2.0;
    case DType::kFp8: return 1.0;
  }
  return 2.0;
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return "fp32";
    case DType::kTf32: return "tf32";
    case DType::kBf16: return "bf16";
    case DType::kFp16: return "fp16";
    case DType::kFp8: return "fp8";
  }
  return "?";
}

std::string_view to_string(MemoryKernel kernel) {
  switch (kernel) {
    case MemoryKernel::kNone: return "none";
    case MemoryKernel::kElementwise: return "elementwise";
    case MemoryKernel::kGelu: return "gelu";
    case MemoryKernel::kSwiglu: return "swiglu";
    case MemoryKernel::kSquaredRelu: return "squared_relu";
    case MemoryKernel::kLayerNorm: return "layernorm";
    case MemoryKernel::kRmsNorm: return "rmsnorm";
    case MemoryKernel::kSoftmax: return "softmax";
    case MemoryKernel::kCrossEntropy: return "cross_entropy";
    case MemoryKernel::kRotary: return "rotary";
    case MemoryKernel::kEmbedding: return "embedding";
    case MemoryKernel::kCast: return "cast";
    case MemoryKernel::kPermute: return "permute";
    case MemoryKernel::kOptimizer: return "optimizer";
  }
  return "?";
}

std::string_view to_string(Collective collective) {
  switch (collective) {
    case Collective::kNone: return "none";
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "send_recv";
  }
  return "?";
}

}  // namespace paceline
