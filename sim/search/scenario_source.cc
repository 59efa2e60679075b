#include "sim/search/scenario_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include "base/input_error.h"
#include "base/yaml_reader.h"
#include "hardware/cluster.h"
#include "hardware/gpu_spec.h"
#include "models/model_catalog.h"
#include "sim/report/result.h"

namespace paceline {
namespace {

// A deep copy of `node` built node by node, so it carries no position: an overridden value has
// no line in the file, and its errors cite the override (FieldOrigins) instead.
YAML::Node without_marks(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return YAML::Node(node.Scalar());
    case YAML::NodeType::Sequence: {
      YAML::Node list(YAML::NodeType::Sequence);
      for (const YAML::Node& item : node) list.push_back(without_marks(item));
      return list;
    }
    case YAML::NodeType::Map: {
      YAML::Node map(YAML::NodeType::Map);
      for (const auto& item : node) map[item.first.Scalar()] = without_marks(item.second);
      return map;
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return YAML::Node(YAML::NodeType::Null);
}

std::vector<std::string> split_path(const std::string& file, const Override& override) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = override.path.find('.', start);
    parts.push_back(override.path.substr(start, end == std::string::npos ? std::string::npos : end - start));
    const bool is_key = !parts.back().empty() && std::ranges::all_of(parts.back(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
    });
    if (!is_key) {
      throw InputError(override_location(file, override),
                       fmt::format("'{}' is not a dotted field path such as parallelism.tp", override.path));
    }
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

struct NamedMapping {
  YAML::Node mapping;
  SourceLocation named_at;
};

// The mapping that the catalog name or file at field `walked` stands for, so that overrides of
// its fields apply as if it were written inline; nothing where `walked` names none. A model
// file's own mapping (the fields it leaves out still follow the others); a Hugging Face config's
// model as paceline reads it, every field given; a GPU file's mapping; where only the system
// names the GPU, the system's GPU with the system's memory capacity. Errors in the fields not
// overridden cite the line naming it.
std::optional<NamedMapping> named_mapping(const std::string& walked, const YAML::Node& parent,
                                          const YAML::Node& child, const std::string& file) {
  if (walked == "model" && child.IsScalar()) {
    const SourceLocation named_at = location_of(child, file);
    const std::string model = model_file(child.Scalar(), default_model_catalog(), named_at);
    if (std::filesystem::path(model).extension() == ".json") {
      const ModelSpec read = resolve_model(child.Scalar(), default_model_catalog(), named_at);
      return NamedMapping{without_marks(YAML::Load(to_json(read).dump())), named_at};
    }
    return NamedMapping{without_marks(load_yaml_file(model).root), named_at};
  }
  if (walked != "cluster.gpu") return std::nullopt;
  if (child.IsScalar()) {
    const SourceLocation named_at = location_of(child, file);
    return NamedMapping{
        without_marks(
            load_yaml_file(gpu_file(child.Scalar(), default_gpu_catalog(), named_at)).root),
        named_at};
  }
  const YAML::Node system_name = parent["system"];
  if ((child.IsDefined() && !child.IsNull()) || !system_name.IsScalar()) return std::nullopt;
  const SourceLocation named_at = location_of(system_name, file);
  const SystemSpec system = load_system(system_name.Scalar(), default_system_catalog(), named_at);
  YAML::Node gpu =
      without_marks(load_yaml_file(gpu_file(system.gpu, default_gpu_catalog(), named_at)).root);
  if (system.gpu_memory_capacity)
    gpu["memory_capacity"] = fmt::format("{} B", *system.gpu_memory_capacity / Bytes(1));
  return NamedMapping{gpu, named_at};
}

}  // namespace

ScenarioSource read_scenario_source(const std::string& path) { return ScenarioSource{read_text_file(path), path}; }

bool path_within(std::string_view path, std::string_view field) {
  return path.starts_with(field) && (path.size() == field.size() || path[field.size()] == '.');
}

bool paths_overlap(std::string_view a, std::string_view b) { return path_within(a, b) || path_within(b, a); }

SourceLocation override_location(const std::string& file, const Override& override) {
  const std::string value = echoed(override.value);
  return SourceLocation{override.origin.empty() ? fmt::format("{} with {}={}", file, override.path, value)
                                                : fmt::format("{} {}={}", override.origin, override.path, value)};
}

void apply_override(YAML::Node& root, const std::string& file, const Override& override, FieldOrigins* origins) {
  const std::vector<std::string> parts = split_path(file, override);
  YAML::Node value;
  try {
    const YAML::Node loaded = YAML::Load(override.value);
    check_yaml(loaded, override.value, override_location(file, override).file);
    value = without_marks(loaded);
  } catch (const YAML::Exception& e) {
    throw InputError(override_location(file, override), fmt::format("'{}' is not valid YAML: {}", echoed(override.value), e.msg));
  }
  const SourceLocation origin = override_location(file, override);
  if (origins != nullptr) {
    // The value replaces what earlier overrides put inside it.
    std::erase_if(*origins, [&](const auto& entry) { return path_within(entry.first, override.path); });
    origins->emplace(override.path, origin);
  }
  // Walk to the parent mapping, creating mappings that are absent. Node::reset rebinds the
  // handle; assignment would overwrite the node it refers to.
  YAML::Node parent;
  parent.reset(root);
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    YAML::Node child = parent[parts[i]];
    if (std::optional<NamedMapping> named = named_mapping(walked, parent, child, file)) {
      parent[parts[i]] = named->mapping;
      child.reset(parent[parts[i]]);
      if (origins != nullptr) origins->emplace(walked, named->named_at);
    } else if (!child.IsDefined() || child.IsNull()) {
      // A mapping the override creates has no line either: a misspelt section is its doing.
      parent[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child.reset(parent[parts[i]]);
      if (origins != nullptr) origins->emplace(walked, origin);
    } else if (!child.IsMap()) {
      throw InputError(location_of(child, file),
                       fmt::format("override {}: {} is {}, not a mapping", override.path, walked,
                                   describe(child)));
    }
    parent.reset(child);
  }
  parent[parts.back()] = value;
}

std::vector<Override> application_order(std::vector<Override> overrides) {
  std::stable_partition(overrides.begin(), overrides.end(), [](const Override& o) {
    return o.path == "model" || o.path == "cluster.system" || o.path == "cluster.gpu";
  });
  return overrides;
}

OverriddenDocument apply_overrides(const ScenarioSource& source, const std::vector<Override>& overrides) {
  YamlDocument document = load_yaml_text(source.text, source.file);
  if (!document.root.IsMap()) {
    YamlMap root(document.root, document.file,
                 "");  // throws: "the document is ...; expected a mapping"
  }
  auto origins = std::make_shared<FieldOrigins>();
  for (const Override& override : application_order(overrides))
    apply_override(document.root, document.file, override, origins.get());
  return OverriddenDocument{std::move(document), std::move(origins)};
}

Scenario load_scenario(const ScenarioSource& source, const std::vector<Override>& overrides) {
  const OverriddenDocument overridden = apply_overrides(source, overrides);
  YamlMap root(overridden.document.root, overridden.document.file, "", overridden.origins);
  return read_scenario(root);
}

}  // namespace paceline
