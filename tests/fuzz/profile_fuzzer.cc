// Fuzzes the measured-profile loader (hardware/kernel_profile.h KernelProfile::load) on the
// text of a profile, for the H200 the repository's profile was measured on. Profiles are read
// only from files, so each input is written to a private folder first. It loads or throws
// InputError citing file:line:col; a loaded profile answers queries with finite, positive times.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "hardware/gpu_spec.h"
#include "hardware/kernel_profile.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  static const GpuSpec gpu = resolve_gpu("h200-sxm-141gb", default_gpu_catalog(), {});
  static const fuzz::ScratchFile file("profile.yaml");
  const std::string& path = file.write(data, size);
  std::optional<KernelProfile> profile;
  if (!fuzz::loads_or_input_error([&] { profile = KernelProfile::load(path, gpu); })) return 0;
  // What the op timer asks: a time for a GEMM, an attention and a streaming kernel, in and
  // outside the grid; an answer must be a finite, positive time.
  auto check = [](const std::optional<Seconds>& time, const char* what) {
    if (time && !(std::isfinite(*time / Seconds(1)) && *time > Seconds(0))) {
      fuzz::fail(std::string("a non-finite or non-positive time for ") + what);
    }
  };
  for (const int64_t n : {1, 4096, 1 << 20}) {
    check(profile->gemm(GemmShape{.m = n, .n = 4096, .k = n, .dtype = DType::kBf16}), "a GEMM");
    for (const bool backward : {false, true}) {
      check(profile->attention(AttentionShape{.batch = 1, .heads = 32, .kv_heads = 8, .seq_q = n, .seq_kv = n,
                                              .head_dim = 128, .causal = true, .backward = backward}),
            "an attention");
    }
    check(profile->memory_bound(MemoryKernel::kElementwise, Bytes(static_cast<double>(n) * 1024)), "a streaming kernel");
  }
  return 0;
}
