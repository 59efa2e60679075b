// Strict, position-aware reading of YAML input into typed values.
//
// YamlMap wraps one YAML mapping. Each typed accessor both reads a key and declares it known;
// finish() then rejects any key that no accessor asked for, listing the known ones, so a typo
// such as `shcedule:` is an error instead of a silently applied default. Every error is an
// InputError that names file:line:col, the dotted field, the value and what was allowed.
//
//   YamlMap parallelism = root.map("parallelism");
//   const int tp = parallelism.get<int>("tp", 1);
//   parallelism.finish();
#ifndef PACELINE_BASE_YAML_READER_H_
#define PACELINE_BASE_YAML_READER_H_

#include <yaml-cpp/yaml.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/input_error.h"
#include "base/json.h"
#include "base/unit_parse.h"

namespace paceline {

// A parsed YAML document and the name its errors cite.
struct YamlDocument {
  std::string file;
  YAML::Node root;
};

// Reads and parses a YAML file. Throws InputError for a missing or unreadable file, a syntax
// error (with its position) or an empty document.
YamlDocument load_yaml_file(const std::string& path);
// Parses YAML text; `name` stands for the file in error messages.
YamlDocument load_yaml_text(const std::string& text, const std::string& name);

// The most bytes a YAML file may hold.
inline constexpr size_t kMostYamlBytes = size_t{64} << 20;
// A file's text. Throws InputError for a directory, a file it cannot open, one larger than
// kMostYamlBytes, or one that is not UTF-8.
std::string read_text_file(const std::string& path);

// Refuses what yaml-cpp lets through in `root`, parsed from `text`: bytes that are not UTF-8
// (which would reach JSON output and Python strings as they are), a second document (it keeps
// the first), a key given twice in one mapping (it keeps the first) and a quoted string without
// its closing quote (it runs to the end of the text). load_yaml_file and load_yaml_text check
// their documents so.
void check_yaml(const YAML::Node& root, const std::string& text, const std::string& name);

// The 1-based position of a node in its file.
SourceLocation location_of(const YAML::Node& node, const std::string& file);

// A node as JSON that reads back as the same node: scalars as strings (which the readers parse as
// they parse plain scalars), mappings in their order, lists, nulls.
Json to_json(const YAML::Node& node);

// A short rendering of a node for error messages: the scalar text, or "a mapping" / "a list".
std::string describe(const YAML::Node& node);

// Fields put into a document after it was parsed (a `--set` on the command line, a sweep's
// value), by dotted path, each with the place errors about it, or about anything inside it, cite:
// the document has no line for them.
using FieldOrigins = std::map<std::string, SourceLocation, std::less<>>;

// The origin of `field` ("a.b[2].c"), or of the nearest mapping or list around it that has one;
// nullptr when none has.
const SourceLocation* find_origin(const FieldOrigins& origins, std::string_view field);

class YamlMap {
 public:
  // `path` is the dotted field name of this mapping ("" for the document root). `origins`, when
  // given, passes to the mappings inside. Throws InputError when `node` is not a mapping.
  YamlMap(YAML::Node node, std::string file, std::string path,
          std::shared_ptr<const FieldOrigins> origins = nullptr);

  // Whether the key is present (and declares it known).
  bool has(std::string_view key);

  // The value of a present key; throws naming the key when absent or of the wrong type.
  template <typename T>
  T required(std::string_view key);
  // The value, or `fallback` when the key is absent.
  template <typename T>
  T get(std::string_view key, T fallback) {
    return has(key) ? required<T>(key) : fallback;
  }
  template <typename T>
  std::optional<T> optional(std::string_view key) {
    if (!has(key)) return std::nullopt;
    return required<T>(key);
  }

  // The scalars of a present list, read as T; throws with `not_a_list` when it is something else.
  template <typename T>
  std::vector<T> list(std::string_view key, std::string_view not_a_list);

  // A string that must be one of `allowed`.
  std::string choice(std::string_view key, const std::vector<std::string>& allowed,
                     std::optional<std::string> fallback = std::nullopt);

  // Nested mappings and raw nodes.
  YamlMap map(std::string_view key);
  std::optional<YamlMap> optional_map(std::string_view key);
  YAML::Node node(std::string_view key);

  // Throws InputError for each key present but never asked for.
  void finish() const;

  // Errors about a key of this mapping, positioned at its value (or at the mapping if absent).
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
  // Errors about the mapping as a whole.
  [[noreturn]] void fail_here(const std::string& message) const;

  // "parallelism.tp" for key "tp" of mapping "parallelism".
  std::string field(std::string_view key) const;
  SourceLocation location(std::string_view key) const;
  SourceLocation location() const;
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const YAML::Node& raw() const { return node_; }

 private:
  YAML::Node lookup(std::string_view key) const;
  // read_scalar, its errors citing the field's origin when it has one.
  template <typename T>
  T read(const YAML::Node& value, const std::string& field) const;
  // Where a field set after parsing came from: the origin of `field` or of the nearest mapping
  // or list around it that was; nullptr for fields of the file.
  const SourceLocation* origin_of(std::string_view field) const;

  YAML::Node node_;
  std::string file_;
  std::string path_;
  std::shared_ptr<const FieldOrigins> origins_;
  std::set<std::string, std::less<>> known_;
};

// Reads a scalar node as T, throwing InputError that names `field` on failure.
// Supported: bool, int, int64_t, double, std::string and the unit types of base/units.h.
template <typename T>
T read_scalar(const YAML::Node& node, const std::string& file, const std::string& field);

template <typename T>
T YamlMap::required(std::string_view key) {
  known_.emplace(key);
  const YAML::Node value = lookup(key);
  if (!value) fail(key, "is required");
  if (value.IsNull()) {
    try {
      return read<T>(value, field(key));
    } catch (const InputError& e) {
      throw InputError(location(key), e.detail());  // at the key, not the next line
    }
  }
  return read<T>(value, field(key));
}

template <typename T>
std::vector<T> YamlMap::list(std::string_view key, std::string_view not_a_list) {
  known_.emplace(key);
  const YAML::Node value = lookup(key);
  if (!value) fail(key, "is required");
  if (!value.IsSequence()) fail(key, std::string(not_a_list));
  std::vector<T> items;
  for (size_t i = 0; i < value.size(); ++i) {
    items.push_back(read<T>(value[i], field(key) + "[" + std::to_string(i) + "]"));
  }
  return items;
}

template <typename T>
T YamlMap::read(const YAML::Node& value, const std::string& field) const {
  const SourceLocation* origin = origin_of(field);
  if (origin == nullptr) return read_scalar<T>(value, file_, field);
  try {
    return read_scalar<T>(value, file_, field);
  } catch (const InputError& e) {
    throw InputError(*origin, e.detail());
  }
}

}  // namespace paceline

#endif  // PACELINE_BASE_YAML_READER_H_
