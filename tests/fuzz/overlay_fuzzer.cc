// Fuzzes the validation overlay (sim/validate/validation.h load_overlay_file and apply_overlay)
// over the public cases: every input sets the fields it names on the cases it matches or throws
// InputError citing file:line:col. Overlays are read only from files, so each input is written
// to a private folder first.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/data_root.h"
#include "sim/validate/validation.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  static const std::vector<ValidationCase> public_cases =
      load_validation_file(data_root() + "/scenarios/validation/public.yaml");
  static const fuzz::ScratchFile file("overlay.yaml");
  const std::string& path = file.write(data, size);
  std::vector<ValidationCase> cases = public_cases;
  fuzz::loads_or_input_error([&] { apply_overlay(cases, load_overlay_file(path)); });
  return 0;
}
