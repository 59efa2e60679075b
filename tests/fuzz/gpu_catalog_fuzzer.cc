// Fuzzes the GPU catalog reader (hardware/gpu_spec.h read_gpu) on the text of a catalog
// file: it reads or throws InputError citing file:line:col; a GPU read has positive figures.
#include <cstddef>
#include <cstdint>
#include <string>

#include "hardware/gpu_spec.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  const std::string text(reinterpret_cast<const char*>(data), size);
  GpuSpec gpu;
  if (!fuzz::reads_document_or_input_error(text, "gpu.yaml", "gpu", [&](YamlMap& root) { gpu = read_gpu(root); })) {
    return 0;
  }
  if (!(gpu.memory_capacity > Bytes(0)) || !(gpu.memory_bandwidth > BytesPerSecond(0))) {
    fuzz::fail("a GPU without positive memory capacity and bandwidth");
  }
  for (const DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    if (!gpu.peak(dtype) || !(*gpu.peak(dtype) > FlopPerSecond(0))) fuzz::fail("a required peak is missing");
  }
  return 0;
}
