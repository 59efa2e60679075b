// Reading catalog figures written either plainly (`bandwidth: 450 GB/s`) or with their
// provenance (`bandwidth: {value: 450 GB/s, source: datasheet, note: ...}`).
#ifndef PACELINE_HARDWARE_INTERNAL_SOURCED_VALUE_H_
#define PACELINE_HARDWARE_INTERNAL_SOURCED_VALUE_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/yaml_reader.h"

namespace paceline::internal {

// Reads `key` as T; records the cited source under `prefix + key` in `field_sources`.
template <typename T>
std::optional<T> read_sourced(YamlMap& map, std::string_view key, std::map<std::string, std::string>& field_sources,
                              const std::string& prefix) {
  if (!map.has(key)) return std::nullopt;
  const YAML::Node node = map.node(key);
  if (!node.IsMap()) return map.required<T>(key);
  YamlMap entry(node, map.file(), map.field(key));
  const T value = entry.required<T>("value");
  const std::string source = entry.get<std::string>("source", "");
  entry.get<std::string>("note", "");
  entry.finish();
  if (!source.empty()) field_sources[prefix + std::string(key)] = source;
  return value;
}

template <typename T>
T read_sourced_required(YamlMap& map, std::string_view key, std::map<std::string, std::string>& field_sources,
                        const std::string& prefix) {
  if (std::optional<T> value = read_sourced<T>(map, key, field_sources, prefix)) return *value;
  map.fail(key, "is required");
}

// The `sources:` mapping of a catalog file: citation key → citation text.
std::map<std::string, std::string> read_sources(YamlMap& map);

}  // namespace paceline::internal

#endif  // PACELINE_HARDWARE_INTERNAL_SOURCED_VALUE_H_
