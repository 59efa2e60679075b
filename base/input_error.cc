#include "base/input_error.h"

#include <fmt/format.h>

namespace paceline {

std::string SourceLocation::to_string() const {
  const std::string name = file.empty() ? "<input>" : file;
  if (line <= 0) return name;
  if (column <= 0) return fmt::format("{}:{}", name, line);
  return fmt::format("{}:{}:{}", name, line, column);
}

namespace {

// One line of printable text: control characters in echoed values and keys are escaped, and an
// echoed value of pages is cut short.
std::string one_line(const std::string& text) {
  constexpr size_t kMostChars = 2000;
  std::string line;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      line += "\\n";
    } else if (c == '\t') {
      line += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      line += fmt::format("\\x{:02x}", byte);
    } else {
      line += c;
    }
    if (line.size() >= kMostChars) {
      // Not inside a UTF-8 character: back to the byte that starts one.
      while (!line.empty() && (static_cast<unsigned char>(line.back()) & 0xC0) == 0x80) line.pop_back();
      if (!line.empty() && static_cast<unsigned char>(line.back()) >= 0xC0) line.pop_back();
      return line + " [cut]";
    }
  }
  return line;
}

}  // namespace

InputError::InputError(const SourceLocation& where, const std::string& message)
    : std::invalid_argument(one_line(where.to_string() + ": " + message)), where_(where), detail_(one_line(message)) {}

}  // namespace paceline
