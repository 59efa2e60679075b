// Fuzzes the result contract's reader (sim/report/result.h read_result), which reads pickled
// Python Results back: every input reads back as a result, whose JSON then reads back as the
// same text, or throws InputError citing file:line:col.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/report/result.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string json;
  if (fuzz::loads_or_input_error(
          [&] { json = to_json(read_result(text, "result.json")).dump(); })) {
    if (to_json(read_result(json, "again.json")).dump() != json) {
      fuzz::fail("a result that reads back otherwise");
    }
  }
  return 0;
}
