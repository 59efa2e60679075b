// Fuzzes base/unit_parse.h parse_quantity: every text parses to a finite number or throws
// std::invalid_argument whose message quotes the text; the first byte picks the dimension.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>

#include "base/unit_parse.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paceline;
  if (size == 0) return 0;
  constexpr int kDimensions = static_cast<int>(Dimension::kPower) + 1;
  const auto dimension = static_cast<Dimension>(data[0] % kDimensions);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const double value = parse_quantity(text, dimension);
    if (!std::isfinite(value)) fuzz::fail("'" + std::string(text) + "' parsed to a non-finite value");
  } catch (const std::invalid_argument& e) {
    // what() is a C string: a NUL in the text ends the message there.
    const std::string_view shown = text.substr(0, text.find('\0'));
    const std::string quoted = "'" + std::string(shown) + (shown.size() == text.size() ? "'" : "");
    if (std::string_view(e.what()).find(quoted) == std::string_view::npos) {
      fuzz::fail("the error does not quote the text: " + std::string(e.what()));
    }
  } catch (const std::exception& e) {
    fuzz::fail(std::string("an exception other than invalid_argument (") + typeid(e).name() + "): " + e.what());
  }
  return 0;
}
