#include "base/input_error.h"

#include <fmt/format.h>

namespace paceline {

std::string SourceLocation::to_string() const {
  const std::string name = file.empty() ? "<input>" : file;
  if (line <= 0) return name;
  if (column <= 0) return fmt::format("{}:{}", name, line);
  return fmt::format("{}:{}:{}", name, line, column);
}

InputError::InputError(const SourceLocation& where, const std::string& message)
    : std::invalid_argument(where.to_string() + ": " + message), where_(where), detail_(message) {}

}  // namespace paceline
