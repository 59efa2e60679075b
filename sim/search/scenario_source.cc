#include "sim/search/scenario_source.h"

#include <fmt/format.h>

#include <memory>

#include "base/input_error.h"
#include "base/yaml_reader.h"

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

std::vector<std::string> split_path(const std::string& file, const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = path.find('.', start);
    parts.push_back(path.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (parts.back().empty()) {
      throw InputError(SourceLocation{file},
                       fmt::format("override '{}' is not a dotted field path such as "
                                   "parallelism.tp",
                                   path));
    }
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

}  // namespace

ScenarioSource read_scenario_source(const std::string& path) { return ScenarioSource{read_text_file(path), path}; }

SourceLocation override_location(const std::string& file, const Override& override) {
  return SourceLocation{override.origin.empty()
                            ? fmt::format("{} with {}={}", file, override.path, override.value)
                            : fmt::format("{} {}={}", override.origin, override.path, override.value)};
}

void apply_override(YAML::Node& root, const std::string& file, const Override& override) {
  const std::vector<std::string> parts = split_path(file, override.path);
  YAML::Node value;
  try {
    const YAML::Node loaded = YAML::Load(override.value);
    check_yaml(loaded, override.value, override_location(file, override).file);
    value = without_marks(loaded);
  } catch (const YAML::Exception& e) {
    throw InputError(override_location(file, override), fmt::format("'{}' is not valid YAML: {}", override.value, e.msg));
  }
  // Walk to the parent mapping, creating mappings that are absent. Node::reset rebinds the
  // handle; assignment would overwrite the node it refers to.
  YAML::Node parent;
  parent.reset(root);
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    YAML::Node child = parent[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      parent[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child.reset(parent[parts[i]]);
    } else if (!child.IsMap()) {
      throw InputError(location_of(child, file),
                       fmt::format("override {}: {} is {}, not a mapping", override.path, walked,
                                   describe(child)));
    }
    parent.reset(child);
  }
  parent[parts.back()] = value;
}

Scenario load_scenario(const ScenarioSource& source, const std::vector<Override>& overrides) {
  YamlDocument document = load_yaml_text(source.text, source.file);
  if (!document.root.IsMap()) {
    YamlMap root(document.root, document.file,
                 "");  // throws: "the document is ...; expected a mapping"
  }
  auto origins = std::make_shared<FieldOrigins>();
  for (const Override& override : overrides) {
    apply_override(document.root, document.file, override);
    // A later override of a mapping replaces the fields earlier ones put inside it.
    std::erase_if(*origins, [&](const auto& origin) {
      const std::string& path = origin.first;
      return path.size() > override.path.size() && path.starts_with(override.path) &&
             (path[override.path.size()] == '.' || path[override.path.size()] == '[');
    });
    origins->insert_or_assign(override.path, override_location(document.file, override));
  }
  YamlMap root(document.root, document.file, "", std::move(origins));
  return read_scenario(root);
}

}  // namespace paceline
