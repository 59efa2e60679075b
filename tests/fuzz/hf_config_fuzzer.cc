// Fuzzes models/hf_config.h parse_hf_config: every config.json text imports or throws
// InputError citing file:line:col; an imported model has positive shapes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/hf_config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelSpec model;
  if (!fuzz::loads_or_input_error([&] { model = parse_hf_config(text, "config.json"); })) return 0;
  if (model.layers < 1 || model.hidden < 1 || model.heads < 1 || model.kv_heads < 1 || model.head_dim < 1 ||
      model.vocab < 1 || model.seq_len < 1) {
    fuzz::fail("an imported model has a shape below 1");
  }
  if (model.heads % model.kv_heads != 0) fuzz::fail("kv_heads does not divide heads");
  return 0;
}
