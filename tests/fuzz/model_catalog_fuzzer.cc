// Fuzzes the model catalog reader (models/model_spec.h read_model) on the text of a catalog
// file: it reads or throws InputError citing file:line:col; a model read has positive shapes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/model_spec.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelSpec model;
  if (!fuzz::reads_document_or_input_error(text, "model.yaml", "model",
                                          [&](YamlMap& root) { model = read_model(root); })) {
    return 0;
  }
  if (model.layers < 1 || model.hidden < 1 || model.heads < 1 || model.kv_heads < 1 || model.head_dim < 1 ||
      model.vocab < 1 || model.seq_len < 1) {
    fuzz::fail("a model with a shape below 1");
  }
  if (model.moe && (model.moe->top_k < 1 || model.moe->top_k > model.moe->experts)) fuzz::fail("bad top_k");
  return 0;
}
