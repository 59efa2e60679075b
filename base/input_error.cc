#include "base/input_error.h"

#include <fmt/format.h>

#include "base/utf8.h"

namespace paceline {

std::string SourceLocation::to_string() const {
  const std::string name = file.empty() ? "<input>" : file;
  if (line <= 0) return name;
  if (column <= 0) return fmt::format("{}:{}", name, line);
  return fmt::format("{}:{}:{}", name, line, column);
}

namespace {

// `text` cut to at most `bytes` bytes, back to the start of the UTF-8 character the cut falls in.
std::string_view utf8_prefix(std::string_view text, size_t bytes) {
  if (text.size() <= bytes) return text;
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

// printable(text), a message of pages cut short.
std::string one_line(const std::string& text) {
  constexpr size_t kMostChars = 2000;
  std::string line = printable(text);
  if (line.size() > kMostChars) return std::string(utf8_prefix(line, kMostChars)) + " [cut]";
  return line;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string line;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto byte = static_cast<unsigned char>(c);
    const size_t bytes = utf8_character_bytes(text, i);
    if (bytes > 1) {
      line += text.substr(i, bytes);
      i += bytes - 1;
    } else if (c == '\n') {
      line += "\\n";
    } else if (c == '\t') {
      line += "\\t";
    } else if (bytes == 0 || byte < 0x20 || byte == 0x7f) {
      line += fmt::format("\\x{:02x}", byte);
    } else {
      line += c;
    }
  }
  return line;
}

std::string echoed(std::string_view text) {
  constexpr size_t kMostBytes = 80;
  if (text.size() <= kMostBytes) return std::string(text);
  return std::string(utf8_prefix(text, kMostBytes - 3)) + "...";
}

InputError::InputError(const SourceLocation& where, const std::string& message)
    : std::invalid_argument(one_line(where.to_string() + ": " + message)), where_(where), detail_(one_line(message)) {}

}  // namespace paceline
