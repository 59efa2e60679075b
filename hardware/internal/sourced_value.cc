#include "hardware/internal/sourced_value.h"

namespace paceline::internal {

std::map<std::string, std::string> read_sources(YamlMap& map) {
  std::map<std::string, std::string> sources;
  if (std::optional<YamlMap> section = map.optional_map("sources")) {
    for (const auto& entry : section->raw()) {
      const std::string key = entry.first.Scalar();
      sources[key] = read_scalar<std::string>(entry.second, map.file(), section->field(key));
    }
  }
  return sources;
}

}  // namespace paceline::internal
