// Tests hardware/kernel_profile.h: loading, interpolation exact at grid points and monotone
// between them, the least-squares fits, and the op timer's use of a profile (and transfer).
#include "hardware/kernel_profile.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/input_error.h"
#include "hardware/gemm_tiling.h"
#include "hardware/op_timer.h"
#include "tests/support/temp_path.h"

namespace paceline {
namespace {

GpuSpec h200() { return resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {}); }

// A synthetic GEMM time: an efficiency of 0.8 with k_half 100 and a 2 us overhead on the H200
// tiling: the busiest SM's K steps and its epilogues (of 2 bytes an element, 100 steps each), a
// step being a tile's multiply-adds over all SMs at peak, t = step·(K steps + 100·epilogues)/0.8
// + 2 us.
double synthetic_gemm_s(const GpuSpec& gpu, const GemmShape& shape) {
  const GemmTiling tiling = gemm_tiling(shape, gpu);
  const double step = 2.0 * static_cast<double>(gpu.kernels.gemm_tile_m) * gpu.kernels.gemm_tile_n *
                      static_cast<double>(gpu.sm_count) /
                      (*gpu.peak(DType::kBf16) / FlopPerSecond(1));
  return step * (tiling.main_loop + 100.0 * tiling.epilogue_bytes / 2.0) / 0.8 + 2e-6;
}

// Synthetic GEMM times (synthetic_gemm_s); memory-bound kernels stream at 4 TB/s plus 1.5 us.
// Written in cuBLAS terms (forward: m = out, n = tokens).
std::string synthetic_profile(const GpuSpec& gpu) {
  std::ifstream in("tests/hardware/data/synthetic_profile.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  std::string gemm_rows, memory_rows;
  for (const int64_t out : {1024, 4096, 16384}) {
    for (const int64_t tokens : {1024, 4096, 16384}) {
      for (const int64_t in_features : {1024, 4096, 16384}) {
        const double t = synthetic_gemm_s(gpu, GemmShape{tokens, out, in_features});
        gemm_rows += "    - {dtype: bf16, transa: \"T\", transb: \"N\", m: " + std::to_string(out) +
                     ", n: " + std::to_string(tokens) + ", k: " + std::to_string(in_features) +
                     ", time_s: " + fmt::format("{}", t) + "}\n";
      }
    }
  }
  for (const double bytes : {1e6, 1e7, 1e8, 1e9}) {
    memory_rows += "    - {op: add, size: " + std::to_string(static_cast<int64_t>(bytes)) +
                   ", bytes: " + std::to_string(static_cast<int64_t>(bytes)) +
                   ", time_s: " + fmt::format("{}", bytes / 4e12 + 1.5e-6) + "}\n";
  }
  yaml.replace(yaml.find("GEMM_ROWS"), 9, gemm_rows);
  yaml.replace(yaml.find("MEMORY_ROWS"), 11, memory_rows);
  return yaml;
}

KernelProfile load_synthetic() {
  const GpuSpec gpu = h200();
  const std::string path = paceline::testing::temp_path("synthetic_profile.yaml");
  std::ofstream(path) << synthetic_profile(gpu);
  return KernelProfile::load(path, gpu);
}

// The message of loading a profile of `tables` (after its format and device), "" if it loads.
std::string profile_error(const std::string& name, const std::string& tables) {
  const std::string path = paceline::testing::temp_path(name);
  std::ofstream(path)
      << "format: paceline-profile/1\ndevice: {name: x, compute_capability: \"9.0\"}\n"
      << tables;
  try {
    KernelProfile::load(path, h200());
  } catch (const InputError& e) {
    return std::string(e.what()).substr(path.size());
  }
  return "";
}

TEST(KernelProfile, InterpolationIsExactAtGridPoints) {
  const KernelProfile profile = load_synthetic();
  const GemmShape shape{4096, 16384, 1024};  // tokens 4096, out 16384, in 1024
  const double expected = synthetic_gemm_s(h200(), shape);
  // The file keeps every digit (shortest round-trip text).
  EXPECT_NEAR(*profile.gemm(shape) / Seconds(1), expected, expected * 1e-5);
}

TEST(KernelProfile, InterpolationIsMonotoneBetweenGridPoints) {
  const KernelProfile profile = load_synthetic();
  double previous = 0.0;
  for (int64_t tokens = 1024; tokens <= 16384; tokens += 512) {
    const double t = *profile.gemm({tokens, 4096, 4096}) / Seconds(1);
    EXPECT_GE(t, previous) << tokens;
    previous = t;
  }
  previous = 0.0;
  for (double bytes = 1e6; bytes <= 1e9; bytes *= 1.3) {
    const double t = *profile.memory_bound(MemoryKernel::kElementwise, Bytes(bytes)) / Seconds(1);
    EXPECT_GE(t, previous);
    previous = t;
  }
}

TEST(KernelProfile, FitsRecoverTheModelThatMadeTheData) {
  const KernelProfile profile = load_synthetic();
  const GemmFit& fit = profile.gemm_fits().at({DType::kBf16, GemmLayout::kForward});
  // e = 0.8, k_half = 100.
  EXPECT_NEAR(1.0 / fit.inverse_efficiency, 0.8, 0.01);
  EXPECT_NEAR(fit.k_half_over_efficiency / fit.inverse_efficiency, 100.0, 5.0);
  EXPECT_LT(fit.rms_relative_error, 0.01);
  const MemoryFit& memory = profile.memory_fits().at("add");
  EXPECT_NEAR(memory.bandwidth / TBPerSecond(1), 4.0, 0.01);
  EXPECT_NEAR(memory.overhead / Microseconds(1), 1.5, 0.05);
}

TEST(KernelProfile, OutsideTheGridFollowsTheFitThroughTheEdge) {
  const KernelProfile profile = load_synthetic();
  // 32768 tokens is beyond the grid: doubling tokens of a large GEMM doubles its time.
  const double edge = *profile.gemm({16384, 4096, 4096}) / Seconds(1);
  const double beyond = *profile.gemm({32768, 4096, 4096}) / Seconds(1);
  EXPECT_NEAR(beyond / edge, 2.0, 0.02);
  // Streaming 1e10 bytes beyond the 1e9 edge: at 4 TB/s.
  EXPECT_NEAR(*profile.memory_bound(MemoryKernel::kElementwise, Bytes(1e10)) / Seconds(1), 1e10 / 4e12 + 1.5e-6, 1e-5);
}

TEST(KernelProfile, AGroupedGemmWithUnderOneRowOfKAGroupIsTimed) {
  // A weight gradient over 64 experts of which only the first gets tokens (here 16): the mean k
  // is a quarter, below the grid, and the fit is evaluated at a whole k of 1 (it divided by a
  // k of 0 and gave NaN).
  const KernelProfile profile = load_synthetic();
  GemmShape gradient{1024, 1024, 0, 64, DType::kBf16, GemmLayout::kWeightGradient};
  gradient.first_extra_tokens = 16;
  const std::optional<Seconds> time = profile.gemm(gradient);
  ASSERT_TRUE(time.has_value());
  EXPECT_TRUE(std::isfinite(*time / Seconds(1)));
  EXPECT_GT(*time, Seconds(0));
}

TEST(KernelProfile, TheMeasuredH200ProfileLoads) {
  const KernelProfile profile = KernelProfile::load("hardware/profiles/h200-sxm-141gb.yaml", h200());
  EXPECT_EQ(profile.device_name(), "NVIDIA H200");
  // An 8192³ bf16 GEMM was measured at 1.413 ms (778 TFLOP/s).
  EXPECT_NEAR(*profile.gemm({8192, 8192, 8192}) / Milliseconds(1), 1.413, 0.001);
  // Llama 3 8B attention, b=1, 32 heads, GQA 4... the profile has groups 1 and 8: the nearest.
  EXPECT_TRUE(profile.attention({1, 32, 8, 8192, 8192, 128, true, false, DType::kBf16}).has_value());
  EXPECT_FALSE(profile.attention({1, 32, 8, 8192, 8192, 96, true, false, DType::kBf16}).has_value());
}

TEST(KernelProfile, OnlyBf16AttentionIsTimedFromTheBf16Table) {
  // The H200 profile measured bf16 attention: fp32 attention (no tensor-core flash kernel, a
  // sixteenth of the peak) took bf16's measured times, and fp16 and fp8 run kernels of their own.
  const GpuSpec gpu = h200();
  const auto profile = std::make_shared<const KernelProfile>(
      KernelProfile::load("hardware/profiles/h200-sxm-141gb.yaml", gpu));
  const OpTimer timer(gpu, profile);
  const OpTimer model(gpu);
  AttentionShape shape{1, 32, 8, 8192, 8192, 128, true, false, DType::kBf16};
  EXPECT_TRUE(timer.attention(shape).measured);
  for (const DType dtype : {DType::kFp32, DType::kFp16, DType::kFp8}) {
    shape.dtype = dtype;
    EXPECT_FALSE(profile->attention(shape).has_value()) << to_string(dtype);
    EXPECT_FALSE(timer.attention(shape).measured) << to_string(dtype);
    EXPECT_EQ(timer.attention(shape).time, model.attention(shape).time) << to_string(dtype);
  }
  // A row of another dtype is refused rather than mixed into bf16's table.
  EXPECT_EQ(profile_error("fp16_attention.yaml",
                          "attention:\n  rows:\n    - {dtype: fp16, direction: forward, causal: "
                          "true, batch: 1, heads: 8, seq: 1024, head_dim: 128, group: 1, time_s: "
                          "1.0e-4}\n"),
            ":5:15: profile.attention.dtype = 'fp16' is unknown; expected one of: bf16");
}

// A profile of forward causal attention rows of 128-wide heads, 8 and 32 of them over 1024 and
// 4096 tokens, whose `fields` (", backend: flash") say what measured them; each row takes
// 10 us per head and 1024² tokens: t = 10 us · heads · (seq/1024)².
std::shared_ptr<const KernelProfile> attention_profile(const std::string& name,
                                                       const std::string& fields,
                                                       const GpuSpec& gpu = h200(),
                                                       const std::string& capability = "9.0") {
  std::string rows;
  for (const int64_t heads : {8, 32}) {
    for (const int64_t seq : {1024, 4096}) {
      rows += fmt::format(
          "    - {{dtype: bf16, direction: forward, causal: true, batch: 1, heads: {}, seq: {}, "
          "head_dim: 128, group: 1, time_s: {}{}}}\n",
          heads, seq, 1e-5 * heads * std::pow(seq / 1024.0, 2), fields);
    }
  }
  const std::string path = paceline::testing::temp_path(name);
  std::ofstream(path) << "format: paceline-profile/1\ndevice: {name: x, compute_capability: \""
                      << capability << "\"}\nattention:\n  rows:\n"
                      << rows;
  return std::make_shared<const KernelProfile>(KernelProfile::load(path, gpu));
}

TEST(KernelProfile, AttentionRowsTimeTheKernelTheyMeasured) {
  // attention_torch.py writes rows PyTorch's SDPA ran on FlashAttention-2 (`backend: flash`),
  // which timed cuDNN's kernel (training.attention flash) at FlashAttention-2's speed, 0.39 of
  // the H100's peak forward against 0.66, and left FlashAttention-2 to the roofline.
  const GpuSpec gpu = h200();
  const OpTimer model(gpu);
  const AttentionShape cudnn{1, 32, 32, 4096, 4096, 128, true, false, DType::kBf16};
  AttentionShape flash2 = cudnn;
  flash2.kernel = AttentionKernel::kFlash2;
  // The row at 32 heads and 4096 tokens: 10 us · 32 · 16 = 5.12 ms.
  const double row_s = 1e-5 * 32 * 16;

  const auto from_flash2 = attention_profile("flash2_attention.yaml", ", backend: flash");
  const OpTimer flash2_timer(gpu, from_flash2);
  // FlashAttention-2 keeps below the H200's power limit (flash2_power_limited: false): the
  // measured burst time stands, not slowed to the sustained fraction.
  EXPECT_TRUE(flash2_timer.attention(flash2).measured);
  EXPECT_DOUBLE_EQ(flash2_timer.attention(flash2).time / Seconds(1), row_s);
  EXPECT_FALSE(flash2_timer.attention(cudnn).measured);
  EXPECT_EQ(flash2_timer.attention(cudnn).time, model.attention(cudnn).time);
  // The rows measured 128-wide heads: a 112-wide head (run on the same 128-wide kernel, but
  // reading less) is the model's.
  AttentionShape narrower = flash2;
  narrower.head_dim = 112;
  EXPECT_FALSE(flash2_timer.attention(narrower).measured);
  // Each kernel fits its own rows.
  EXPECT_TRUE(from_flash2->attention_fits().contains({AttentionKernel::kFlash2, false}));
  EXPECT_FALSE(from_flash2->attention_fits().contains({AttentionKernel::kFlash, false}));

  // paceline-calibrate's rows (no backend) and PyTorch's cuDNN rows time cuDNN's kernel only.
  for (const std::string fields : {"", ", backend: cudnn"}) {
    const auto from_cudnn = attention_profile("cudnn_attention.yaml", fields);
    const OpTimer cudnn_timer(gpu, from_cudnn);
    EXPECT_TRUE(cudnn_timer.attention(cudnn).measured) << fields;
    EXPECT_DOUBLE_EQ(*from_cudnn->attention(cudnn) / Seconds(1), row_s) << fields;
    EXPECT_FALSE(cudnn_timer.attention(flash2).measured) << fields;
    EXPECT_EQ(cudnn_timer.attention(flash2).time, model.attention(flash2).time) << fields;
  }

  // On Ampere Transformer Engine's `flash` is FlashAttention-2: its rows time both settings, and
  // cuDNN's rows neither.
  const GpuSpec a100 = resolve_gpu("a100-sxm4-80gb", default_gpu_catalog(), {});
  const OpTimer a100_flash2(
      a100, attention_profile("a100_flash2_attention.yaml", ", backend: flash", a100, "8.0"));
  EXPECT_TRUE(a100_flash2.attention(cudnn).measured);
  EXPECT_TRUE(a100_flash2.attention(flash2).measured);
  const OpTimer a100_cudnn(a100, attention_profile("a100_cudnn_attention.yaml", "", a100, "8.0"));
  EXPECT_FALSE(a100_cudnn.attention(cudnn).measured);
  EXPECT_FALSE(a100_cudnn.attention(flash2).measured);
}

TEST(KernelProfile, AttentionRowsOfKernelsPacelineDoesNotModelAreRefused) {
  const std::string attention =
      "attention:\n  rows:\n    - {dtype: bf16, direction: forward, causal: true, batch: 1, heads: "
      "8, seq: 1024, head_dim: 128, group: 8, time_s: 1.0e-4, FIELD}\n";
  const auto with = [&](const std::string& field) {
    std::string text = attention;
    return text.replace(text.find("FIELD"), 5, field);
  };
  // PyTorch's mem-efficient kernel, which attention_torch.py records when SDPA chose it: timing
  // cuDNN's kernel or FlashAttention-2 with it would be another kernel's time.
  EXPECT_EQ(profile_error("efficient.yaml", with("backend: efficient")),
            ":5:136: profile.attention.backend = 'efficient' is not a kernel paceline models "
            "(training.attention flash is cuDNN's, flash2 FlashAttention-2); expected one of: "
            "cudnn, flash");
  // Keys and values repeated to every query head before the call: the copies are in the time,
  // and paceline times them apart.
  EXPECT_EQ(profile_error("expanded.yaml", with("backend: flash, kv_layout: expanded")),
            ":5:154: profile.attention.kv_layout = 'expanded' times the copies of keys and values "
            "to every query head with the kernel, which paceline times apart; expected native "
            "(each key/value head read by its group of query heads)");
  EXPECT_EQ(profile_error("native.yaml", with("backend: flash, kv_layout: native")), "");
  // Which kernel a row timed hangs on `backend`: a misspelt key would pass FlashAttention-2's rows
  // off as cuDNN's.
  EXPECT_TRUE(
      profile_error("misspelt.yaml", with("backends: flash"))
          .starts_with(":5:127: profile.attention.rows: unknown key 'backends'; expected one of: "
                       "direction, dtype, causal, head_dim"));
}

TEST(KernelProfile, UnknownTopLevelKeysAreRefused) {
  // A misspelt table was dropped unseen, and the profile timed attention by the roofline.
  EXPECT_EQ(profile_error("misspelt.yaml",
                          "attension:\n  rows:\n    - {dtype: bf16, direction: forward, causal: "
                          "true, batch: 1, heads: 8, seq: 1024, head_dim: 128, group: 1, time_s: "
                          "1.0e-4}\n"),
            ":3:1: unknown key 'attension' in profile; expected one of: attention, "
            "attention_crosscheck, attention_cudnn_backend, collectives, copies, device, format, "
            "gemm, gemm_crosscheck, memory_bound, method, notes, skipped");
  // The optional tables the calibration tools write are known.
  EXPECT_EQ(profile_error("known.yaml",
                          "method: {mode: quick}\ncopies: {rows: []}\nattention_crosscheck: "
                          "{rows: []}\ngemm_crosscheck: {rows: []}\nattention_cudnn_backend: "
                          "{rows: []}\nskipped: {}\nnotes: {attention: x}\n"),
            "");
}

TEST(KernelProfile, RowValuesOutsideTheDocumentedSetsAreRefused) {
  // Each was dropped with its row (a table of them emptied, and the roofline timed its kernels).
  const std::string gemm =
      "gemm:\n  rows:\n    - {dtype: bf16, transa: \"T\", transb: \"N\", m: 256, "
      "n: 256, k: 256, time_s: 1.0e-5}\n";
  const std::string attention =
      "attention:\n  rows:\n    - {dtype: bf16, direction: forward, causal: true, batch: 1, heads: "
      "8, seq: 1024, head_dim: 128, group: 1, time_s: 1.0e-4}\n";
  const auto edited = [](std::string table, const std::string& from, const std::string& to) {
    return table.replace(table.find(from), from.size(), to);
  };
  EXPECT_EQ(profile_error("bfloat16.yaml", edited(gemm, "dtype: bf16", "dtype: bfloat16")),
            ":5:15: profile.gemm.dtype = 'bfloat16' is unknown; expected one of: bf16, fp16, "
            "fp8_e4m3, tf32");
  EXPECT_EQ(profile_error("lower_t.yaml", edited(gemm, "transa: \"T\"", "transa: \"t\"")),
            ":5:29: profile.gemm.transa = 't' is unknown; expected one of: T, N");
  EXPECT_EQ(profile_error("op.yaml",
                          "memory_bound:\n  rows:\n    - {op: copy, size: 1, bytes: 1000, time_s: "
                          "1.0e-6}\n"),
            ":5:12: profile.memory_bound.op = 'copy' is unknown; expected one of: add, gelu, "
            "swiglu, layernorm, rmsnorm, softmax, cross_entropy");
  EXPECT_EQ(profile_error("allreduce.yaml",
                          "collectives:\n  rows:\n    - {op: allreduce, ranks: 8, bytes: 1024, "
                          "time_s: 1.0e-5}\n"),
            ":5:12: profile.collectives.op = 'allreduce' is unknown; expected one of: all_reduce, "
            "all_gather, reduce_scatter, all_to_all, send_recv");
  EXPECT_EQ(profile_error("half.yaml", edited(attention, "dtype: bf16", "dtype: half")),
            ":5:15: profile.attention.dtype = 'half' is unknown; expected one of: bf16");
  EXPECT_EQ(profile_error("batch.yaml", edited(attention, "batch: 1", "batch: 4")),
            ":5:62: profile.attention.batch = 4 is not the measured form; expected 1 (a query of "
            "batch b and h heads reads the row at heads = b·h)");
  EXPECT_EQ(profile_error("no_causal.yaml", edited(attention, "causal: true, ", "")),
            ":5:7: profile.attention row has no causal");
  EXPECT_EQ(profile_error("big_group.yaml", edited(attention, "group: 1", "group: 16")),
            ":5:108: profile.attention.group = 16 does not divide heads = 8; expected a divisor "
            "of heads (query heads per key/value head)");
  EXPECT_EQ(profile_error("uneven_group.yaml", edited(attention, "group: 1", "group: 3")),
            ":5:108: profile.attention.group = 3 does not divide heads = 8; expected a divisor of "
            "heads (query heads per key/value head)");
  // The documented values load, T, T among them (which paceline does not ask for).
  EXPECT_EQ(profile_error("good.yaml", gemm + attention), "");
  EXPECT_EQ(profile_error("tt.yaml", edited(gemm, "transb: \"N\"", "transb: \"T\"")), "");
}

TEST(KernelProfile, EachLoadFitsTheProfileToTheGpuItIsGiven) {
  // A profile file is parsed once per process (base/parsed_file_cache.h), but its fits are the
  // model of the GPU each load names: the same H200 tables fitted with the A100's peak and tile
  // give another efficiency, and loading for the H200 again gives back the first fits exactly.
  const std::string path = "hardware/profiles/h200-sxm-141gb.yaml";
  const KernelProfile first = KernelProfile::load(path, h200());
  const KernelProfile other =
      KernelProfile::load(path, resolve_gpu("a100-sxm4-80gb", default_gpu_catalog(), {}));
  const KernelProfile again = KernelProfile::load(path, h200());
  const auto key = std::pair{DType::kBf16, GemmLayout::kForward};
  ASSERT_TRUE(first.gemm_fits().contains(key));
  EXPECT_EQ(other.gpu().name, "a100-sxm4-80gb");
  EXPECT_NE(other.gemm_fits().at(key).inverse_efficiency,
            first.gemm_fits().at(key).inverse_efficiency);
  EXPECT_EQ(again.gemm_fits().at(key).inverse_efficiency,
            first.gemm_fits().at(key).inverse_efficiency);
  EXPECT_EQ(again.gemm_fits().at(key).k_half_over_efficiency,
            first.gemm_fits().at(key).k_half_over_efficiency);
  // The measured times are the file's whatever the GPU.
  EXPECT_EQ(*other.gemm({8192, 8192, 8192}) / Seconds(1),
            *first.gemm({8192, 8192, 8192}) / Seconds(1));
}

// The K at which a GEMM of this output shape reaches half its ceiling, fitted to the profile's
// measured times over K = 512..16384: time ∝ K + k_half (one tile per SM per wave, each paying
// a fixed cost), least squares in relative error.
double fitted_k_half(const KernelProfile& profile, int64_t m, int64_t n, DType dtype) {
  const std::vector<int64_t> ks = {512, 1024, 2048, 4096, 8192, 16384};
  double best_error = std::numeric_limits<double>::infinity();
  double best_k_half = 0.0;
  for (double k_half = 0.0; k_half < 2000.0; k_half += 5.0) {
    // time = c·(K + k_half): the c minimizing Σ((c·x − t)/t)² is Σ(x/t) / Σ(x/t)².
    double sum = 0.0, sum_squares = 0.0;
    for (const int64_t k : ks) {
      const double ratio = (static_cast<double>(k) + k_half) / (*profile.gemm({m, n, k, 1, dtype}) / Seconds(1));
      sum += ratio;
      sum_squares += ratio * ratio;
    }
    const double c = sum / sum_squares;
    double error = 0.0;
    for (const int64_t k : ks) {
      const double t = *profile.gemm({m, n, k, 1, dtype}) / Seconds(1);
      error += std::pow((c * (static_cast<double>(k) + k_half) - t) / t, 2.0);
    }
    if (error < best_error) {
      best_error = error;
      best_k_half = k_half;
    }
  }
  return best_k_half;
}

TEST(KernelProfile, TheMeasuredH200ProfileBearsOutTheFp8PerTileCost) {
  // The op timer prices an fp8 GEMM's per-tile cost at (peak·ceiling)[fp8]/(peak·ceiling)[bf16]
  // times the bf16 one in units of K (hardware/op_timer.h): 1.90 on an H200 for the forward GEMM
  // with fast accumulation that the profile measures. The measured cuBLAS GEMMs, for output
  // shapes of a few waves, show 1.9 to 2.1.
  const GpuSpec gpu = h200();
  const KernelProfile profile = KernelProfile::load("hardware/profiles/h200-sxm-141gb.yaml", gpu);
  const double modelled_ratio = (*gpu.peak(DType::kFp8) / *gpu.peak(DType::kBf16)) *
                                gpu.kernels.gemm_fp8_fast_accumulation_max_efficiency / gpu.kernels.gemm_max_efficiency;
  for (const auto& [m, n] : std::vector<std::pair<int64_t, int64_t>>{{2048, 4096}, {4096, 4096}, {8192, 4096}}) {
    const double measured_ratio = fitted_k_half(profile, m, n, DType::kFp8) / fitted_k_half(profile, m, n, DType::kBf16);
    EXPECT_NEAR(measured_ratio / modelled_ratio, 1.0, 0.25) << m << "x" << n << ": " << measured_ratio;
    EXPECT_GT(measured_ratio, 1.5) << m << "x" << n;
  }
}

TEST(KernelProfile, OpTimerUsesTheProfileAndSaysSo) {
  const GpuSpec gpu = h200();
  const auto profile = std::make_shared<const KernelProfile>(load_synthetic());
  const OpTimer timer(gpu, profile);
  const KernelTime gemm = timer.gemm({4096, 4096, 4096});
  EXPECT_TRUE(gemm.measured);
  // Measured or not, its shape makes it a persistent kernel on Hopper.
  EXPECT_TRUE(gemm.persistent);
  // Compute-bound: the burst measurement slowed to the sustained fraction.
  EXPECT_NEAR(gemm.time / Seconds(1),
              *profile->gemm({4096, 4096, 4096}) / Seconds(1) / gpu.kernels.sustained_compute_fraction, 1e-12);
  // The profile measured GEMMs that write C once: one accumulating into an fp32 buffer takes
  // the roofline model's ratio of the two on top.
  const GemmShape written{4096, 4096, 4096, 1, DType::kBf16, GemmLayout::kWeightGradient};
  GemmShape accumulating = written;
  accumulating.accumulates_into = DType::kFp32;
  const OpTimer model(gpu);
  EXPECT_TRUE(timer.gemm(accumulating).measured);
  EXPECT_NEAR(timer.gemm(accumulating).time / timer.gemm(written).time,
              (model.gemm(accumulating).time - gpu.kernels.overhead) / (model.gemm(written).time - gpu.kernels.overhead),
              1e-12);
  // No fp32 table: the roofline answers.
  EXPECT_FALSE(timer.gemm({4096, 4096, 4096, 1, DType::kFp32}).measured);
  // Eight experts' GEMMs: the profile times one kernel of all their rows; as a kernel per expert
  // each of the other seven adds a kernel's overhead.
  GemmShape experts{1024, 4096, 4096, 8};
  const Seconds grouped = timer.gemm(experts).time;
  experts.kernel_per_gemm = true;
  EXPECT_TRUE(timer.gemm(experts).measured);
  EXPECT_NEAR((timer.gemm(experts).time - grouped) / Seconds(1),
              (gpu.kernels.overhead * 7.0) / Seconds(1), 1e-15);
}

TEST(KernelProfile, ProfileFp8GemmsAreForwardOnesWithFastAccumulation) {
  // paceline-calibrate times fp8 GEMMs as Transformer Engine's forward runs them, with fast
  // accumulation: a backward fp8 GEMM, with split accumulation, takes the model's ratio of the
  // two on top of the measurement.
  const GpuSpec gpu = h200();
  const auto profile =
      std::make_shared<const KernelProfile>(KernelProfile::load("hardware/profiles/h200-sxm-141gb.yaml", gpu));
  const OpTimer timer(gpu, profile);
  const OpTimer model(gpu);
  const GemmShape forward{4096, 4096, 4096, 1, DType::kFp8};
  const GemmShape backward{4096, 4096, 4096, 1, DType::kFp8, GemmLayout::kDataGradient};
  EXPECT_TRUE(timer.gemm(backward).measured);
  EXPECT_NEAR(timer.gemm(backward).time / timer.gemm(forward).time,
              (model.gemm(backward).time - gpu.kernels.overhead) / (model.gemm(forward).time - gpu.kernels.overhead),
              1e-12);
  EXPECT_GT(timer.gemm(backward).time, 1.04 * timer.gemm(forward).time);
}

TEST(KernelProfile, SustainedGemmsRunAtTheSpeedsMeasuredAtThePowerLimit) {
  // 8192³ GEMMs back to back on an H200, bf16 for 75 s and fp8 for 40 s (catalog source
  // paceline_h200_sustained_long): bf16 at 652-656 TFLOP/s, e4m3 with fast accumulation at
  // 1237-1243, fp8 keeping less of its short-burst speed in the profile (1536) than bf16 (778).
  const GpuSpec gpu = h200();
  const OpTimer timer(gpu,
                      std::make_shared<const KernelProfile>(KernelProfile::load("hardware/profiles/h200-sxm-141gb.yaml", gpu)));
  const auto tflops = [&](DType dtype) {
    const KernelTime t = timer.gemm(GemmShape{8192, 8192, 8192, 1, dtype});
    EXPECT_TRUE(t.measured);
    return 2.0 * 8192.0 * 8192.0 * 8192.0 / (t.time / Seconds(1)) / 1e12;
  };
  EXPECT_NEAR(tflops(DType::kBf16), 654.0, 0.03 * 654.0);
  EXPECT_NEAR(tflops(DType::kFp8), 1239.0, 0.02 * 1239.0);
}

TEST(KernelProfile, TransferScalesByPeakAndBandwidthRatios) {
  // An H200 profile standing for an H100: same dense peak (compute-bound GEMMs unchanged),
  // HBM 3.35 against 4.8 TB/s (streaming kernels 4.8/3.35 = 1.43× slower).
  const auto profile = std::make_shared<const KernelProfile>(load_synthetic());
  const GpuSpec h100 = resolve_gpu("h100-sxm5-80gb", default_gpu_catalog(), {});
  const OpTimer h200_timer(h200(), profile);
  const OpTimer h100_timer(h100, profile);
  EXPECT_NEAR(h100_timer.gemm({8192, 8192, 8192}).time / h200_timer.gemm({8192, 8192, 8192}).time,
              h200().kernels.sustained_compute_fraction / h100.kernels.sustained_compute_fraction, 1e-12);
  EXPECT_NEAR(h100_timer.memory_bound(MemoryKernel::kElementwise, GiB(1)).time /
                  h200_timer.memory_bound(MemoryKernel::kElementwise, GiB(1)).time,
              4.8 / 3.35, 1e-9);
}

TEST(KernelProfile, BadFilesFailWithTheirPosition) {
  const std::string path = paceline::testing::temp_path("bad_profile.yaml");
  std::ofstream(path)
      << "format: paceline-profile/9\ndevice: {name: x, compute_capability: \"9.0\"}\n";
  try {
    KernelProfile::load(path, h200());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ":1:9: profile.format = 'paceline-profile/9' is not a profile format "
                                            "paceline reads; expected paceline-profile/1");
  }
  std::ofstream(path) << "format: paceline-profile/1\ndevice: {name: x, compute_capability: "
                         "\"9.0\"}\nmemory_bound:\n  rows:\n"
                         "    - {op: add, size: 1, bytes: 1, time_s: -1.0}\n";
  EXPECT_THROW(KernelProfile::load(path, h200()), InputError);
}

TEST(KernelProfile, RowsAreOnePerPointOfAGridAndCausalIsABoolean) {
  EXPECT_EQ(profile_error(
                "twice.yaml",
                "memory_bound:\n  rows:\n    - {op: add, size: 1, bytes: 1000, time_s: 1.0e-6}\n"
                "    - {op: add, size: 1, bytes: 1000, time_s: 1.0e-5}\n"),
            ":6:7: profile.memory_bound.rows: this row measures the point the row at line 5 "
            "measures; each point is "
            "measured once");
  // The same bytes for another operation is another point.
  EXPECT_EQ(profile_error(
                "two_ops.yaml",
                "memory_bound:\n  rows:\n    - {op: add, size: 1, bytes: 1000, time_s: 1.0e-6}\n"
                "    - {op: gelu, size: 1, bytes: 1000, time_s: 1.0e-5}\n"),
            "");
  // 101 GEMM rows, each with its own m, n and k, span 101³ grid points.
  std::string scattered = "gemm:\n  rows:\n";
  for (int i = 0; i <= 100; ++i) {
    scattered += fmt::format(
        "    - {{dtype: bf16, transa: T, transb: N, m: {0}, n: {0}, k: {0}, time_s: 1.0e-5}}\n",
        256 + i);
  }
  EXPECT_EQ(profile_error("scattered.yaml", scattered),
            ":5:5: profile.gemm.rows span a grid of 1.0303e+06 points over their distinct values, "
            "more than 1e+06: "
            "measure a regular grid (docs/profile-format.md)");
  const std::string attention =
      "attention:\n  rows:\n    - {dtype: bf16, direction: forward, causal: CAUSAL, batch: 1, "
      "heads: 8, seq: 1024, "
      "head_dim: 128, group: 1, time_s: 1.0e-4}\n";
  auto with_causal = [&](const std::string& value) {
    std::string text = attention;
    return text.replace(text.find("CAUSAL"), 6, value);
  };
  EXPECT_EQ(profile_error("causal_true.yaml", with_causal("True")), "");
  EXPECT_EQ(profile_error("causal_yes.yaml", with_causal("yes")),
            ":5:49: profile.attention.causal = 'yes' is not a boolean; expected true or false");
}

}  // namespace
}  // namespace paceline
