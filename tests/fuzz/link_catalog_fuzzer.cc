// Fuzzes the link catalog reader (hardware/cluster.h load_link) on the text of a catalog file.
// Links are read only from files, so each input is written to a private catalog folder first.
// The file reads or throws InputError citing file:line:col; a link read has figures in range.
#include <cstddef>
#include <cstdint>

#include "hardware/cluster.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  static const fuzz::ScratchFile file("fuzz.yaml");
  file.write(data, size);
  LinkSpec link;
  if (!fuzz::loads_or_input_error([&] { link = load_link("fuzz", file.folder(), {"cluster.yaml", 1, 1}); })) {
    return 0;
  }
  // What the collective model divides by and scales with.
  if (!(link.bandwidth > BytesPerSecond(0)) || link.latency < Seconds(0) || !(link.bandwidth_efficiency > 0.0) ||
      link.bandwidth_efficiency > 1.0 || !(link.nvls_bus_efficiency >= 0.0) || link.nvls_bus_efficiency > 2.0 ||
      link.nvls_latency < Seconds(0)) {
    fuzz::fail("a link read with a bandwidth, latency or efficiency out of range");
  }
  return 0;
}
