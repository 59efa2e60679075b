#include "calibrate/grid.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace paceline::calibrate {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

// Row widths of the row-wise memory-bound kernels: a hidden size, a sequence length and a
// vocabulary typical of 7B–70B models (Llama 2/3: hidden 4096–8192, vocab 32000–128256).
constexpr int64_t kNormRow = 8192;
constexpr int64_t kSoftmaxRow = 4096;
constexpr int64_t kVocabRow = 32768;
constexpr int64_t kBf16Bytes = 2;

// geometric lists first, first·ratio, ... up to and including last.
std::vector<int64_t> geometric(int64_t first, int64_t last, int64_t ratio) {
  std::vector<int64_t> out;
  for (int64_t v = first; v <= last; v *= ratio) out.push_back(v);
  return out;
}

YamlNode int_list(const std::vector<int64_t>& values) {
  YamlNode list = YamlNode::sequence(/*flow_style=*/true);
  for (int64_t v : values) list.push_back(YamlNode::integer(v));
  return list;
}

template <typename T, typename Name>
YamlNode name_list(const std::vector<T>& values, Name name) {
  YamlNode list = YamlNode::sequence(/*flow_style=*/true);
  for (const T& v : values) list.push_back(YamlNode::string(name(v)));
  return list;
}

template <typename T>
std::vector<T> unique_in_order(std::vector<T> values) {
  std::vector<T> out;
  for (const T& v : values) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

YamlNode bool_list(const std::vector<bool>& values) {
  YamlNode list = YamlNode::sequence(/*flow_style=*/true);
  for (bool v : values) list.push_back(YamlNode::boolean(v));
  return list;
}

MemoryPoint memory_point(MemoryKernel kernel, int64_t size) {
  MemoryPoint p;
  p.kernel = kernel;
  p.size = size;
  // Elements are rounded down to whole rows (row-wise kernels) or to 2048 (element-wise, so
  // that 16-byte vector loads and full blocks divide them).
  auto round_down = [](int64_t v, int64_t multiple) {
    return std::max(multiple, v / multiple * multiple);
  };
  switch (kernel) {
    case MemoryKernel::kAdd:
    case MemoryKernel::kSwiglu:
      // Two bf16 inputs read, one bf16 output written.
      p.elements = round_down(size / (3 * kBf16Bytes), 2048);
      p.bytes = p.elements * 3 * kBf16Bytes;
      break;
    case MemoryKernel::kGelu:
      p.elements = round_down(size / (2 * kBf16Bytes), 2048);
      p.bytes = p.elements * 2 * kBf16Bytes;
      break;
    case MemoryKernel::kLayernorm:
    case MemoryKernel::kRmsnorm: {
      p.row = kNormRow;
      // Input read and output written, plus the weight (and LayerNorm's bias) read once.
      int64_t params = (kernel == MemoryKernel::kLayernorm ? 2 : 1) * kNormRow * kBf16Bytes;
      p.elements = round_down((size - params) / (2 * kBf16Bytes), kNormRow);
      p.bytes = p.elements * 2 * kBf16Bytes + params;
      break;
    }
    case MemoryKernel::kSoftmax:
      p.row = kSoftmaxRow;
      p.elements = round_down(size / (2 * kBf16Bytes), kSoftmaxRow);
      p.bytes = p.elements * 2 * kBf16Bytes;
      break;
    case MemoryKernel::kCrossEntropy: {
      // bf16 logits read, an int32 target read and an fp32 loss written per row.
      p.row = kVocabRow;
      int64_t row_bytes = kVocabRow * kBf16Bytes + 4 + 4;
      int64_t rows = std::max<int64_t>(1, size / row_bytes);
      p.elements = rows * kVocabRow;
      p.bytes = rows * row_bytes;
      break;
    }
  }
  return p;
}

}  // namespace

std::string_view to_string(Mode mode) { return mode == Mode::kQuick ? "quick" : "full"; }

std::string_view to_string(GemmDtype dtype) {
  switch (dtype) {
    case GemmDtype::kBf16:
      return "bf16";
    case GemmDtype::kFp16:
      return "fp16";
    case GemmDtype::kFp8E4m3:
      return "fp8_e4m3";
    case GemmDtype::kTf32:
      return "tf32";
  }
  return "?";
}

std::string_view to_string(MemoryKernel kernel) {
  switch (kernel) {
    case MemoryKernel::kAdd:
      return "add";
    case MemoryKernel::kGelu:
      return "gelu";
    case MemoryKernel::kSwiglu:
      return "swiglu";
    case MemoryKernel::kLayernorm:
      return "layernorm";
    case MemoryKernel::kRmsnorm:
      return "rmsnorm";
    case MemoryKernel::kSoftmax:
      return "softmax";
    case MemoryKernel::kCrossEntropy:
      return "cross_entropy";
  }
  return "?";
}

std::string_view to_string(CopyKind kind) {
  switch (kind) {
    case CopyKind::kDeviceToDevice:
      return "device_to_device";
    case CopyKind::kHostToDevice:
      return "host_to_device";
    case CopyKind::kDeviceToHost:
      return "device_to_host";
    case CopyKind::kPeerToPeer:
      return "peer_to_peer";
  }
  return "?";
}

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kAllToAll:
      return "all_to_all";
    case CollectiveOp::kSendRecv:
      return "send_recv";
  }
  return "?";
}

double bus_bandwidth_factor(CollectiveOp op, int ranks) {
  double n = ranks;
  switch (op) {
    case CollectiveOp::kAllReduce:
      return 2 * (n - 1) / n;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll:
      return (n - 1) / n;
    case CollectiveOp::kSendRecv:
      return 1;
  }
  return 1;
}

YamlNode identity(const GemmPoint& p) {
  YamlNode row = YamlNode::mapping(/*flow_style=*/true);
  row.set("dtype", YamlNode::string(to_string(p.dtype)));
  row.set("transa", YamlNode::string(std::string(1, p.transa)));
  row.set("transb", YamlNode::string(std::string(1, p.transb)));
  row.set("m", YamlNode::integer(p.m));
  row.set("n", YamlNode::integer(p.n));
  row.set("k", YamlNode::integer(p.k));
  return row;
}

YamlNode identity(const AttentionPoint& p) {
  YamlNode row = YamlNode::mapping(/*flow_style=*/true);
  row.set("direction", YamlNode::string(p.backward ? "backward" : "forward"));
  row.set("dtype", YamlNode::string("bf16"));
  row.set("causal", YamlNode::boolean(p.causal));
  row.set("head_dim", YamlNode::integer(p.head_dim));
  row.set("group", YamlNode::integer(p.group));
  row.set("batch", YamlNode::integer(p.batch));
  row.set("heads", YamlNode::integer(p.heads));
  row.set("kv_heads", YamlNode::integer(p.kv_heads()));
  row.set("seq", YamlNode::integer(p.seq));
  return row;
}

YamlNode identity(const MemoryPoint& p) {
  YamlNode row = YamlNode::mapping(/*flow_style=*/true);
  // "op", not "kernel": every row also records the CUDA kernel that ran under "kernel".
  row.set("op", YamlNode::string(to_string(p.kernel)));
  row.set("size", YamlNode::integer(p.size));
  row.set("bytes", YamlNode::integer(p.bytes));
  row.set("elements", YamlNode::integer(p.elements));
  row.set("row", YamlNode::integer(p.row));
  return row;
}

YamlNode identity(const CopyPoint& p) {
  YamlNode row = YamlNode::mapping(/*flow_style=*/true);
  row.set("kind", YamlNode::string(to_string(p.kind)));
  row.set("bytes", YamlNode::integer(p.bytes));
  return row;
}

YamlNode identity(const CollectivePoint& p) {
  YamlNode row = YamlNode::mapping(/*flow_style=*/true);
  row.set("op", YamlNode::string(to_string(p.op)));
  row.set("ranks", YamlNode::integer(p.ranks));
  row.set("bytes", YamlNode::integer(p.bytes));
  return row;
}

Plan make_plan(Mode mode, int num_gpus) {
  const bool quick = mode == Mode::kQuick;
  Plan plan;
  plan.mode = mode;
  plan.num_gpus = num_gpus;
  plan.warmup = quick ? 3 : 5;
  plan.repetitions = quick ? 10 : 20;

  // Memory-bound kernels from 1 MiB to 4 GiB (quick, ×4 steps) or 8 GiB (full, ×2 steps).
  const std::vector<MemoryKernel> kernels = {MemoryKernel::kAdd,         MemoryKernel::kGelu,
                                             MemoryKernel::kSwiglu,      MemoryKernel::kLayernorm,
                                             MemoryKernel::kRmsnorm,     MemoryKernel::kSoftmax,
                                             MemoryKernel::kCrossEntropy};
  const std::vector<int64_t> memory_sizes =
      quick ? geometric(kMiB, 4096 * kMiB, 4) : geometric(kMiB, 8192 * kMiB, 2);
  for (MemoryKernel kernel : kernels) {
    for (int64_t size : memory_sizes) plan.memory_bound.push_back(memory_point(kernel, size));
  }

  // Copies from 64 KiB to 1 GiB (quick) or 4 KiB to 4 GiB (full).
  std::vector<CopyKind> copy_kinds = {CopyKind::kDeviceToDevice, CopyKind::kHostToDevice,
                                      CopyKind::kDeviceToHost};
  if (num_gpus >= 2) copy_kinds.push_back(CopyKind::kPeerToPeer);
  const std::vector<int64_t> copy_sizes =
      quick ? geometric(64 * kKiB, 1024 * kMiB, 4) : geometric(4 * kKiB, 4096 * kMiB, 2);
  for (CopyKind kind : copy_kinds) {
    for (int64_t bytes : copy_sizes) plan.copies.push_back(CopyPoint{kind, bytes});
  }

  // GEMMs: bf16 in the three layouts of a Linear layer's forward and two gradients; fp16 and
  // tf32 likewise in full mode (forward only in quick mode); fp8 only as TN, the one layout
  // Hopper's FP8 tensor cores accept (cuBLASLt documentation, "FP8 ... requirements").
  // Quick mode steps by 2 from 256 to 16384: transformer GEMMs sit between the points of a
  // coarser grid (hidden 2048–8192, MLP 8192–28672, tokens 2048–16384), where log-space
  // interpolation of the ×4 grid missed the tile-quantization steps.
  const std::vector<int64_t> dims = geometric(quick ? 256 : 128, quick ? 16384 : 32768, 2);
  struct Combo {
    GemmDtype dtype;
    char transa;
    char transb;
  };
  std::vector<Combo> combos = {{GemmDtype::kBf16, 'T', 'N'}, {GemmDtype::kBf16, 'N', 'N'},
                               {GemmDtype::kBf16, 'N', 'T'}, {GemmDtype::kFp8E4m3, 'T', 'N'},
                               {GemmDtype::kFp16, 'T', 'N'}, {GemmDtype::kTf32, 'T', 'N'}};
  if (!quick) {
    combos.push_back({GemmDtype::kFp16, 'N', 'N'});
    combos.push_back({GemmDtype::kFp16, 'N', 'T'});
    combos.push_back({GemmDtype::kTf32, 'N', 'N'});
    combos.push_back({GemmDtype::kTf32, 'N', 'T'});
  }
  for (const Combo& c : combos) {
    for (int64_t m : dims) {
      for (int64_t n : dims) {
        for (int64_t k : dims) plan.gemm.push_back(GemmPoint{c.dtype, c.transa, c.transb, m, n, k});
      }
    }
  }

  // NCCL collectives: all GPUs (quick), or every power of two up to all GPUs (full).
  if (num_gpus >= 2) {
    std::vector<int> rank_counts;
    if (!quick) {
      for (int r = 2; r < num_gpus; r *= 2) rank_counts.push_back(r);
    }
    rank_counts.push_back(num_gpus);
    const std::vector<int64_t> sizes =
        quick ? geometric(kKiB, 1024 * kMiB, 4) : geometric(kKiB, 4096 * kMiB, 2);
    const std::vector<CollectiveOp> ops = {CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                                           CollectiveOp::kReduceScatter, CollectiveOp::kAllToAll,
                                           CollectiveOp::kSendRecv};
    for (int ranks : rank_counts) {
      for (CollectiveOp op : ops) {
        for (int64_t bytes : sizes) plan.collectives.push_back(CollectivePoint{op, ranks, bytes});
      }
    }
  }

  // Attention: causal bf16 with head_dim 128, MHA and GQA-8 (quick), plus non-causal, head_dim 64
  // and 256 (full). Sequence lengths are multiples of 128, which cuDNN's fused kernels need
  // without a padding mask. Forward and backward of a shape run back to back.
  const std::vector<bool> causals =
      quick ? std::vector<bool>{true} : std::vector<bool>{true, false};
  const std::vector<int64_t> head_dims =
      quick ? std::vector<int64_t>{128} : std::vector<int64_t>{64, 128, 256};
  const std::vector<int64_t> groups = {1, 8};
  const std::vector<int64_t> heads =
      quick ? std::vector<int64_t>{8, 32, 128} : std::vector<int64_t>{8, 16, 32, 64, 128};
  const std::vector<int64_t> seqs =
      quick ? geometric(1024, 16384, 2) : geometric(512, 32768, 2);
  for (bool causal : causals) {
    for (int64_t head_dim : head_dims) {
      for (int64_t group : groups) {
        for (int64_t seq : seqs) {
          for (int64_t h : heads) {
            for (bool backward : {false, true}) {
              AttentionPoint p;
              p.backward = backward;
              p.causal = causal;
              p.head_dim = head_dim;
              p.group = group;
              p.heads = h;
              p.seq = seq;
              plan.attention.push_back(p);
            }
          }
        }
      }
    }
  }
  return plan;
}

Table Plan::table_shell(std::string_view family) const {
  Table t;
  t.name = std::string(family);
  if (family == "gemm") {
    t.key = {"dtype", "transa", "transb", "m", "n", "k"};
    t.interpolate = {"m", "n", "k"};
    std::vector<GemmDtype> dtypes;
    std::vector<std::string> transa, transb;
    std::vector<int64_t> m;
    for (const GemmPoint& p : gemm) {
      dtypes.push_back(p.dtype);
      transa.emplace_back(1, p.transa);
      transb.emplace_back(1, p.transb);
      m.push_back(p.m);
    }
    std::vector<int64_t> dims = unique_in_order(m);
    t.axes.set("dtype",
               name_list(unique_in_order(dtypes), [](GemmDtype d) { return to_string(d); }));
    t.axes.set("transa",
               name_list(unique_in_order(transa), [](const std::string& s) { return s; }));
    t.axes.set("transb",
               name_list(unique_in_order(transb), [](const std::string& s) { return s; }));
    t.axes.set("m", int_list(dims));
    t.axes.set("n", int_list(dims));
    t.axes.set("k", int_list(dims));
  } else if (family == "attention") {
    t.key = {"direction", "dtype", "causal", "head_dim", "group", "batch", "heads", "seq"};
    t.interpolate = {"heads", "seq"};
    std::vector<bool> causal;
    std::vector<int64_t> head_dim, group, heads, seq;
    for (const AttentionPoint& p : attention) {
      causal.push_back(p.causal);
      head_dim.push_back(p.head_dim);
      group.push_back(p.group);
      heads.push_back(p.heads);
      seq.push_back(p.seq);
    }
    YamlNode directions = YamlNode::sequence(true);
    directions.push_back(YamlNode::string("forward"));
    directions.push_back(YamlNode::string("backward"));
    t.axes.set("direction", std::move(directions));
    YamlNode dtypes = YamlNode::sequence(true);
    dtypes.push_back(YamlNode::string("bf16"));
    t.axes.set("dtype", std::move(dtypes));
    t.axes.set("causal", bool_list(unique_in_order(causal)));
    t.axes.set("head_dim", int_list(unique_in_order(head_dim)));
    t.axes.set("group", int_list(unique_in_order(group)));
    t.axes.set("batch", int_list({1}));
    std::vector<int64_t> h = unique_in_order(heads), s = unique_in_order(seq);
    std::sort(h.begin(), h.end());
    std::sort(s.begin(), s.end());
    t.axes.set("heads", int_list(h));
    t.axes.set("seq", int_list(s));
  } else if (family == "memory_bound") {
    t.key = {"op", "size"};
    t.interpolate = {"bytes"};
    std::vector<MemoryKernel> kernels;
    std::vector<int64_t> sizes;
    for (const MemoryPoint& p : memory_bound) {
      kernels.push_back(p.kernel);
      sizes.push_back(p.size);
    }
    t.axes.set("op", name_list(unique_in_order(kernels), [](MemoryKernel k) { return to_string(k); }));
    t.axes.set("size", int_list(unique_in_order(sizes)));
  } else if (family == "copies") {
    t.key = {"kind", "bytes"};
    t.interpolate = {"bytes"};
    std::vector<CopyKind> kinds;
    std::vector<int64_t> sizes;
    for (const CopyPoint& p : copies) {
      kinds.push_back(p.kind);
      sizes.push_back(p.bytes);
    }
    t.axes.set("kind", name_list(unique_in_order(kinds), [](CopyKind k) { return to_string(k); }));
    t.axes.set("bytes", int_list(unique_in_order(sizes)));
  } else if (family == "collectives") {
    t.key = {"op", "ranks", "bytes"};
    t.interpolate = {"bytes"};
    std::vector<CollectiveOp> ops;
    std::vector<int64_t> ranks, sizes;
    for (const CollectivePoint& p : collectives) {
      ops.push_back(p.op);
      ranks.push_back(p.ranks);
      sizes.push_back(p.bytes);
    }
    t.axes.set("op", name_list(unique_in_order(ops), [](CollectiveOp o) { return to_string(o); }));
    t.axes.set("ranks", int_list(unique_in_order(ranks)));
    t.axes.set("bytes", int_list(unique_in_order(sizes)));
  } else {
    throw std::invalid_argument("unknown benchmark family '" + std::string(family) +
                                "'; expected one of: memory_bound, copies, gemm, collectives, "
                                "attention");
  }
  return t;
}

double Plan::budget_s(std::string_view family) const {
  if (mode == Mode::kFull) return 0;
  // Quick mode caps, sized from estimate() with ample room (see docs/profile-format.md).
  if (family == "memory_bound") return 20;
  if (family == "copies") return 20;
  if (family == "gemm") return 120;
  if (family == "collectives") return 40;
  if (family == "attention") return 150;
  return 0;
}

size_t Plan::num_points(std::string_view family) const {
  if (family == "memory_bound") return memory_bound.size();
  if (family == "copies") return copies.size();
  if (family == "gemm") return gemm.size();
  if (family == "collectives") return collectives.size();
  if (family == "attention") return attention.size();
  return 0;
}

std::vector<std::string> Plan::keys(std::string_view family) const {
  Table shell = table_shell(family);
  std::vector<std::string> out;
  auto add = [&](const auto& points) {
    for (const auto& p : points) out.push_back(row_key(identity(p), shell.key));
  };
  if (family == "memory_bound") add(memory_bound);
  if (family == "copies") add(copies);
  if (family == "gemm") add(gemm);
  if (family == "collectives") add(collectives);
  if (family == "attention") add(attention);
  return out;
}

std::vector<FamilyEstimate> estimate(const Plan& plan, const Rates& rates) {
  const double calls = plan.warmup + plan.repetitions;
  std::vector<FamilyEstimate> out;
  auto call_s = [&](double flop, double flop_rate, double bytes, double byte_rate) {
    double compute = flop_rate > 0 ? flop / flop_rate : 0;
    double memory = byte_rate > 0 ? bytes / byte_rate : 0;
    return rates.launch_s + std::max(compute, memory);
  };

  FamilyEstimate memory{"memory_bound"};
  for (const MemoryPoint& p : plan.memory_bound) {
    memory.gpu_s += calls * call_s(0, 0, static_cast<double>(p.bytes), rates.hbm_bytes_per_s);
  }
  memory.points = plan.memory_bound.size();
  memory.overhead_s = static_cast<double>(memory.points) * rates.point_overhead_s;
  out.push_back(memory);

  FamilyEstimate copies{"copies"};
  for (const CopyPoint& p : plan.copies) {
    double bytes = static_cast<double>(p.bytes);
    switch (p.kind) {
      case CopyKind::kDeviceToDevice:
        copies.gpu_s += calls * call_s(0, 0, 2 * bytes, rates.hbm_bytes_per_s);
        break;
      case CopyKind::kHostToDevice:
      case CopyKind::kDeviceToHost:
        copies.gpu_s += calls * call_s(0, 0, bytes, rates.pcie_bytes_per_s);
        break;
      case CopyKind::kPeerToPeer:
        copies.gpu_s += calls * call_s(0, 0, bytes, rates.nvlink_bytes_per_s);
        break;
    }
  }
  copies.points = plan.copies.size();
  copies.overhead_s = static_cast<double>(copies.points) * rates.point_overhead_s;
  out.push_back(copies);

  FamilyEstimate gemm{"gemm"};
  for (const GemmPoint& p : plan.gemm) {
    double flop =
        2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
    double rate = rates.bf16_flop_per_s, in_bytes = 2, out_bytes = 2;
    if (p.dtype == GemmDtype::kFp8E4m3) rate = rates.fp8_flop_per_s, in_bytes = 1;
    if (p.dtype == GemmDtype::kTf32) rate = rates.tf32_flop_per_s, in_bytes = 4, out_bytes = 4;
    double bytes = in_bytes * static_cast<double>(p.m * p.k + p.k * p.n) +
                   out_bytes * static_cast<double>(p.m * p.n);
    gemm.gpu_s += calls * call_s(flop, rate, bytes, rates.hbm_bytes_per_s);
  }
  gemm.points = plan.gemm.size();
  gemm.overhead_s = static_cast<double>(gemm.points) * rates.point_overhead_s;
  out.push_back(gemm);

  FamilyEstimate collectives{"collectives"};
  for (const CollectivePoint& p : plan.collectives) {
    double bus_bytes = static_cast<double>(p.bytes) * bus_bandwidth_factor(p.op, p.ranks);
    collectives.gpu_s += calls * (20e-6 + bus_bytes / rates.nvlink_bytes_per_s);
  }
  collectives.points = plan.collectives.size();
  collectives.overhead_s = static_cast<double>(collectives.points) * rates.point_overhead_s;
  out.push_back(collectives);

  FamilyEstimate attention{"attention"};
  for (const AttentionPoint& p : plan.attention) {
    // Forward: two matmuls of 2·s²·d FLOP per (batch, head); causal masking halves the work.
    double flop = 4.0 * static_cast<double>(p.batch * p.heads) * static_cast<double>(p.seq) *
                  static_cast<double>(p.seq) * static_cast<double>(p.head_dim);
    if (p.causal) flop /= 2;
    if (p.backward) flop *= 2.5;
    attention.gpu_s +=
        calls * call_s(flop, rates.bf16_flop_per_s * rates.attention_efficiency, 0, 0);
    attention.overhead_s += rates.attention_plan_s;
  }
  attention.points = plan.attention.size();
  out.push_back(attention);
  return out;
}

std::string describe_plan(const Plan& plan, const std::vector<FamilyEstimate>& estimates) {
  std::string out;
  char line[256];
  std::snprintf(
      line, sizeof(line), "plan: %s mode, %d GPU(s), %d warm-up + %d timed calls per point\n",
      std::string(to_string(plan.mode)).c_str(), plan.num_gpus, plan.warmup, plan.repetitions);
  out += line;
  double total = 0;
  for (const FamilyEstimate& e : estimates) {
    std::snprintf(line, sizeof(line),
                  "  %-13s %5zu points  ~%7.1f s GPU + %6.1f s host = %7.1f s   (cap %s)\n",
                  e.family.c_str(), e.points, e.gpu_s, e.overhead_s, e.total_s(),
                  plan.budget_s(e.family) > 0
                      ? (std::to_string(static_cast<int>(plan.budget_s(e.family))) + " s").c_str()
                      : "none");
    out += line;
    total +=
        plan.budget_s(e.family) > 0 ? std::min(e.total_s(), plan.budget_s(e.family)) : e.total_s();
  }
  std::snprintf(line, sizeof(line), "  estimated total: %.0f s (%.1f min), within the caps\n",
                total, total / 60);
  out += line;
  return out;
}

}  // namespace paceline::calibrate
