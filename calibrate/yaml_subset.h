// The strict YAML subset that kernel profiles are written in, with its reader and writer.
//
// paceline-calibrate has to build on a GPU node where only the CUDA toolkit is installed (no
// yaml-cpp, no fmt), so it reads and writes its own output itself. The subset is plain YAML 1.2
// that yaml-cpp and PyYAML both load unchanged:
//   - block mappings indented by two spaces, keys made of [A-Za-z0-9_.-];
//   - block sequences whose items are one-line values ("- {...}" or "- scalar"), indented under
//     their key or at the key's own column (PyYAML's default style);
//   - flow mappings "{k: v, ...}" and flow sequences "[a, b]", nested freely, on one line;
//   - scalars: plain words, numbers, true/false, null, or double-quoted strings with \" \\ \n
//     \t \r \xNN escapes;
//   - comments starting with '#' (whole line, or after a value), a leading "---".
// Anything else (anchors, tags, multi-line scalars, block mappings inside sequences) is rejected
// with the file, line and column, never guessed at.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace paceline::calibrate {

// ProfileError is the one error for a profile file that cannot be read: its message starts with
// "file:line:col: " (1-based) and says what was found and what was expected.
class ProfileError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// YamlNode is one parsed or to-be-written value: a scalar, a sequence or a mapping. Mappings keep
// their keys in file order. `line` and `column` (1-based) locate parsed nodes for error messages.
struct YamlNode {
  enum class Kind { kScalar, kSequence, kMapping };

  Kind kind = Kind::kScalar;
  // Scalar text without quotes or escapes.
  std::string text;
  // True when the scalar was (or must be) double-quoted: it is then always a string.
  bool quoted = false;
  // Written in flow style ({...} / [...]) instead of block style.
  bool flow = false;
  std::vector<YamlNode> items;
  std::vector<std::pair<std::string, YamlNode>> entries;
  int line = 0;
  int column = 0;

  // Named constructors for values to write.
  static YamlNode string(std::string_view value);
  static YamlNode integer(int64_t value);
  static YamlNode real(double value);
  static YamlNode boolean(bool value);
  static YamlNode null();
  static YamlNode mapping(bool flow_style);
  static YamlNode sequence(bool flow_style);

  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_mapping() const { return kind == Kind::kMapping; }
  bool is_sequence() const { return kind == Kind::kSequence; }
  // A plain `null` or `~` scalar.
  bool is_null() const;

  // find returns the value under `key` in a mapping, or nullptr.
  const YamlNode* find(std::string_view key) const;
  // set replaces the value under `key` or appends it; returns the stored value.
  YamlNode& set(std::string_view key, YamlNode value);
  // erase removes `key` from a mapping; returns whether it was there.
  bool erase(std::string_view key);
  void push_back(YamlNode value) { items.push_back(std::move(value)); }

  // Typed reads of a scalar: nullopt when the scalar is not of that type (a quoted scalar is
  // only ever a string).
  std::optional<int64_t> as_integer() const;
  std::optional<double> as_real() const;  // integers read as reals too
  std::optional<bool> as_boolean() const;
};

// format_real writes a double in its shortest exact round-trip form laid out like Python's
// repr(), but always with a '.' in the mantissa and a signed exponent ("1.5e-05", "3.0",
// "0.0003"), because PyYAML (YAML 1.1) reads "1e-05" as a string. Non-finite values are not
// representable and become "null".
std::string format_real(double value);

// parse_yaml_subset parses `text` (the contents of `file_name`, used in messages). The result is
// the top-level node (a mapping for a profile). Throws ProfileError.
YamlNode parse_yaml_subset(std::string_view text, std::string_view file_name);

// emit_yaml_subset writes a node tree: block containers one entry per line, flow containers on
// one line. `header` lines are written first as "# ..." comments.
std::string emit_yaml_subset(const YamlNode& root, const std::vector<std::string>& header = {});

}  // namespace paceline::calibrate
