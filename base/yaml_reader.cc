#include "base/yaml_reader.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "base/utf8.h"

namespace paceline {
namespace {

// Where the quoted scalar opening at `open` ends (the position of its closing quote), or npos:
// a double quote ends at the next one not escaped by a backslash, a single quote at the next one
// not doubled.
size_t closing_quote(const std::string& text, size_t open) {
  const char quote = text[open];
  for (size_t i = open + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;
      } else {
        return i;
      }
    }
  }
  return std::string::npos;
}

// Walks a document for what yaml-cpp lets through: a key given twice in one mapping (it keeps
// the first) and a quoted string without its closing quote (it runs to the end of the file,
// taking the keys after it). Each mapping and list is walked once, however many aliases name it.
class DocumentCheck {
 public:
  DocumentCheck(const std::string& text, const std::string& name) : text_(text), name_(name) {
    // yaml-cpp's positions skip a UTF-8 byte-order mark; other encodings it re-encodes, so their
    // positions do not index the text, and strings are not checked there.
    if (text.starts_with("\xEF\xBB\xBF")) {
      offset_ = 3;
    } else if (text.starts_with("\xFE\xFF") || text.starts_with("\xFF\xFE") || text.starts_with(std::string("\0", 1))) {
      check_quotes_ = false;
    }
  }

  void check(const YAML::Node& node) {
    if (node.IsScalar()) {
      check_quote(node);
      return;
    }
    if (!node.IsMap() && !node.IsSequence()) return;
    if (!node.Mark().is_null() && !walked_.insert(node.Mark().pos).second) return;
    if (node.IsSequence()) {
      for (const auto& item : node) check(item);
      return;
    }
    std::map<std::string, YAML::Mark> seen;
    for (const auto& entry : node) {
      check(entry.first);
      check(entry.second);
      if (!entry.first.IsScalar()) continue;
      const auto [first, inserted] = seen.emplace(entry.first.Scalar(), entry.first.Mark());
      if (!inserted) {
        throw InputError(location_of(entry.first, name_),
                         fmt::format("key '{}' is given twice in this mapping (first on line {}); give it once",
                                     entry.first.Scalar(), first->second.line + 1));
      }
    }
  }

 private:
  void check_quote(const YAML::Node& node) const {
    if (!check_quotes_ || node.Mark().is_null()) return;
    size_t at = static_cast<size_t>(node.Mark().pos) + offset_;
    // Past an anchor (&name) and a tag (!tag, !!str) written before the string.
    while (at < text_.size() && (text_[at] == '&' || text_[at] == '!')) {
      while (at < text_.size() && text_[at] != ' ' && text_[at] != '\t' && text_[at] != '\n') ++at;
      while (at < text_.size() && (text_[at] == ' ' || text_[at] == '\t')) ++at;
    }
    if (at < text_.size() && (text_[at] == '"' || text_[at] == '\'') && closing_quote(text_, at) == std::string::npos) {
      throw InputError(location_of(node, name_), "YAML syntax error: this quoted string has no closing quote");
    }
  }

  const std::string& text_;
  const std::string& name_;
  size_t offset_ = 0;
  bool check_quotes_ = true;
  std::set<int> walked_;  // positions of the mappings and lists walked
};

// The line (1-based) of a document marker ('---' or '...' at the start of a line, which the
// YAML spec lets mean nothing else) with content both before and after it: where a second
// document starts, which the parser would drop. 0 when there is none. (yaml-cpp's LoadAll, which
// could count the documents, loops forever on some malformed text.)
int second_document_line(const std::string& text) {
  bool content_before = false;
  int marker = 0;
  int line = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string_view row(text.data() + start, end - start);
    const bool is_marker = (row.starts_with("---") || row.starts_with("...")) &&
                           (row.size() == 3 || row[3] == ' ' || row[3] == '\t' || row[3] == '\r');
    const size_t first = row.find_first_not_of(" \t\r");
    const bool blank = first == std::string_view::npos || row[first] == '#' || row[0] == '%';
    if (is_marker) {
      if (content_before && marker == 0) marker = line;
      // Content after a marker on its line ('--- {a: 1}') belongs to the document it starts.
      const size_t rest = row.find_first_not_of(" \t\r", 3);
      if (rest != std::string_view::npos && row[rest] != '#') {
        if (marker != 0) return marker;
        content_before = true;
      }
    } else if (!blank) {
      if (marker != 0) return marker;
      content_before = true;
    }
    start = end + 1;
  }
  return 0;
}

// Whether YAML reads `text` as UTF-16 or UTF-32, from its first bytes (YAML 1.2, section 5.2:
// a byte-order mark, or the zero bytes around an ASCII first character), which the parser
// decodes into UTF-8.
bool utf16_or_32(std::string_view text) {
  const auto starts = [&](std::string_view bytes) { return text.substr(0, bytes.size()) == bytes; };
  using namespace std::string_view_literals;
  if (starts("\xFE\xFF"sv) || starts("\xFF\xFE"sv)) return true;  // UTF-16 (and UTF-32 LE) marks
  if (starts("\0\0\xFE\xFF"sv)) return true;                      // UTF-32 BE mark
  // An ASCII first character with a zero byte before or after it.
  return text.size() >= 2 && (text[0] == '\0' || text[1] == '\0');
}

// `text` with each carriage return that no line feed follows made a line feed: YAML breaks lines
// at either, the parser only at a line feed (it would keep the '\r' in a scalar).
std::string with_line_feeds(std::string text) {
  for (size_t i = text.find('\r'); i != std::string::npos; i = text.find('\r', i + 1)) {
    if (i + 1 == text.size() || text[i + 1] != '\n') text[i] = '\n';
  }
  return text;
}

// Throws InputError at the first byte of UTF-8 `text` that starts no character.
void refuse_non_utf8(std::string_view text, const std::string& name) {
  if (utf16_or_32(text)) return;
  const size_t bad = invalid_utf8_offset(text);
  if (bad == std::string_view::npos) return;
  // Lines as YAML breaks them, at a carriage return too.
  const std::string before = with_line_feeds(std::string(text.substr(0, bad)));
  const auto line = std::count(before.begin(), before.end(), '\n');
  const size_t column = bad - (before.rfind('\n') + 1);  // npos + 1 is 0
  throw InputError(
      SourceLocation{name, static_cast<int>(line) + 1, static_cast<int>(column) + 1},
      fmt::format("byte 0x{:02X} starts no UTF-8 character; YAML text is UTF-8, UTF-16 or UTF-32",
                  static_cast<unsigned char>(text[bad])));
}

YamlDocument parse(const std::string& given, const std::string& name) {
  YamlDocument document{name, {}};
  // Before parsing: the parser takes bytes that are not UTF-8 into strings, or fails on them
  // with a syntax error that does not say why.
  refuse_non_utf8(given, name);
  const std::string text = utf16_or_32(given) ? given : with_line_feeds(given);
  try {
    document.root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    throw InputError(
        SourceLocation{name, e.mark.line + 1, e.mark.column + 1},
        fmt::format("YAML syntax error: lists and mappings nest deeper than the {} levels the "
                    "parser reads; a scenario nests a few",
                    e.depth()));
  } catch (const YAML::ParserException& e) {
    throw InputError(SourceLocation{name, e.mark.line + 1, e.mark.column + 1},
                     fmt::format("YAML syntax error: {}", e.msg));
  }
  check_yaml(document.root, text, name);
  if (!document.root || document.root.IsNull()) {
    // An empty document has no node to point at: cite its start.
    throw InputError(SourceLocation{name, 1, 1}, "the file is empty; expected a YAML mapping");
  }
  return document;
}

// Integer text without fractions: "8", "-3", "1024".
std::optional<int64_t> parse_integer(const std::string& text) {
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  if (begin != end && *begin == '-' && begin != text.data()) return std::nullopt;  // "+-8"
  const auto [rest, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || rest != end) return std::nullopt;
  return value;
}

const std::string& scalar_text(const YAML::Node& node, const std::string& file,
                               const std::string& field, std::string_view expected) {
  if (node.IsNull()) {
    throw InputError(location_of(node, file), fmt::format("{} has no value; expected {}", field, expected));
  }
  if (!node.IsScalar()) {
    throw InputError(location_of(node, file),
                     fmt::format("{} is {}; expected {}", field, describe(node), expected));
  }
  return node.Scalar();
}

template <typename Q>
Q read_quantity(const YAML::Node& node, const std::string& file, const std::string& field) {
  const std::string& text = scalar_text(node, file, field, dimension_name(dimension_of<Q>()));
  try {
    return parse_as<Q>(text);
  } catch (const std::invalid_argument& e) {
    throw InputError(location_of(node, file), fmt::format("{}: {}", field, e.what()));
  }
}

}  // namespace

void check_yaml(const YAML::Node& root, const std::string& text, const std::string& name) {
  refuse_non_utf8(text, name);
  if (const int line = second_document_line(text); line > 0) {
    throw InputError(SourceLocation{name, line, 1}, "a second YAML document ('---'): a file holds one document");
  }
  DocumentCheck(text, name).check(root);
}

std::string read_text_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw InputError(SourceLocation{path, 0, 0}, "is a directory; expected a YAML file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(SourceLocation{path, 0, 0}, "cannot open the file (missing or unreadable)");
  // Read in bounded pieces: a device such as /dev/zero never ends, and a parsed document takes
  // many times its text in memory.
  std::string text;
  std::array<char, 1 << 16> piece;
  while (in.read(piece.data(), piece.size()) || in.gcount() > 0) {
    text.append(piece.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > kMostYamlBytes) {
      throw InputError(SourceLocation{path, 0, 0},
                       fmt::format("is larger than {} MiB; a scenario, catalog or profile file is at most that",
                                   kMostYamlBytes >> 20));
    }
  }
  if (in.bad()) throw InputError(SourceLocation{path, 0, 0}, "cannot read the file (an I/O error part-way)");
  refuse_non_utf8(text, path);
  return text;
}

YamlDocument load_yaml_file(const std::string& path) { return parse(read_text_file(path), path); }

YamlDocument load_yaml_text(const std::string& text, const std::string& name) {
  return parse(text, name);
}

SourceLocation location_of(const YAML::Node& node, const std::string& file) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return SourceLocation{file, 0, 0};
  return SourceLocation{file, mark.line + 1, mark.column + 1};
}

Json to_json(const YAML::Node& node) {
  if (node.IsMap()) {
    Json json = Json::object();
    for (const auto& entry : node) json.set(entry.first.Scalar(), to_json(entry.second));
    return json;
  }
  if (node.IsSequence()) {
    Json json = Json::array();
    for (const YAML::Node& element : node) json.push(to_json(element));
    return json;
  }
  return node.IsScalar() ? Json(node.Scalar()) : Json();
}

std::string describe(const YAML::Node& node) {
  if (!node || node.IsNull()) return "empty";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return fmt::format("'{}'", echoed(node.Scalar()));
}

YamlMap::YamlMap(YAML::Node node, std::string file, std::string path,
                 std::shared_ptr<const FieldOrigins> origins)
    : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)), origins_(std::move(origins)) {
  if (!node_.IsMap()) {
    const std::string what = path_.empty() ? std::string("the document") : path_;
    throw InputError(location(),
                     fmt::format("{} is {}; expected a mapping of keys to values", what, describe(node_)));
  }
}

bool YamlMap::has(std::string_view key) {
  known_.emplace(key);
  const YAML::Node value = lookup(key);
  return value.IsDefined();
}

std::string YamlMap::choice(std::string_view key, const std::vector<std::string>& allowed,
                            std::optional<std::string> fallback) {
  if (fallback && !has(key)) return *fallback;
  const std::string value = required<std::string>(key);
  for (const std::string& a : allowed) {
    if (a == value) return value;
  }
  fail(key, fmt::format("= '{}' is unknown; expected one of: {}", echoed(value), fmt::join(allowed, ", ")));
}

YamlMap YamlMap::map(std::string_view key) {
  known_.emplace(key);
  const YAML::Node value = lookup(key);
  if (!value) fail(key, "is required");
  if (value.IsNull() && origin_of(field(key)) == nullptr) {
    throw InputError(location(key), fmt::format("{} is empty; expected a mapping of keys to values", field(key)));
  }
  return YamlMap(value, file_, field(key), origins_);
}

std::optional<YamlMap> YamlMap::optional_map(std::string_view key) {
  if (!has(key)) return std::nullopt;
  return map(key);
}

YAML::Node YamlMap::node(std::string_view key) {
  known_.emplace(key);
  return lookup(key);
}

void YamlMap::finish() const {
  for (const auto& entry : node_) {
    const std::string key = entry.first.Scalar();
    if (known_.count(key) == 0) {
      const SourceLocation* origin = origin_of(field(key));
      throw InputError(origin != nullptr ? *origin : location_of(entry.first, file_),
                       fmt::format("unknown key '{}' in {}; expected one of: {}", key,
                                   path_.empty() ? std::string("the document") : path_,
                                   fmt::join(known_, ", ")));
    }
  }
}

void YamlMap::fail(std::string_view key, const std::string& message) const {
  // "= value ..." messages read "field = value ..."; others "field message", with the value as
  // written when the field has one ("field = -3 must be positive").
  const YAML::Node value = lookup(key);
  if (!message.starts_with("=") && value && value.IsScalar() && !value.Scalar().empty()) {
    throw InputError(location(key), fmt::format("{} = {} {}", field(key), echoed(value.Scalar()), message));
  }
  throw InputError(location(key), fmt::format("{} {}", field(key), message));
}

void YamlMap::fail_here(const std::string& message) const {
  throw InputError(location(), fmt::format("{}{}{}", path_, path_.empty() ? "" : ": ", message));
}

YAML::Node YamlMap::lookup(std::string_view key) const {
  // The const operator[] never inserts a key into the parsed document.
  const YAML::Node& document = node_;
  return document[std::string(key)];
}

std::string YamlMap::field(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

const SourceLocation* find_origin(const FieldOrigins& origins, std::string_view field) {
  // "a.b[2].c" is inside "a.b[2]", "a.b" and "a".
  while (!field.empty()) {
    const auto origin = origins.find(field);
    if (origin != origins.end()) return &origin->second;
    const size_t end = field.find_last_of(".[");
    if (end == std::string_view::npos) break;
    field = field.substr(0, end);
  }
  return nullptr;
}

const SourceLocation* YamlMap::origin_of(std::string_view field) const {
  return origins_ ? find_origin(*origins_, field) : nullptr;
}

SourceLocation YamlMap::location() const {
  const SourceLocation* origin = origin_of(path_);
  return origin != nullptr ? *origin : location_of(node_, file_);
}

SourceLocation YamlMap::location(std::string_view key) const {
  if (const SourceLocation* origin = origin_of(field(key))) return *origin;
  const YAML::Node value = lookup(key);
  if (value) {
    const SourceLocation at = location_of(value, file_);
    // An empty value at the end of its line is marked where the next token starts (a line
    // below, or the start of its own line at the end of the file): its key is where it is
    // written. Inside braces it is marked after its key, where it is.
    if (value.IsNull()) {
      for (const auto& entry : node_) {
        if (entry.first.Scalar() != key) continue;
        const SourceLocation key_at = location_of(entry.first, file_);
        if (key_at.line > 0 && (at.line > key_at.line || at.column <= key_at.column)) return key_at;
      }
    }
    if (at.line > 0) return at;
  }
  return location();
}

template <>
std::string read_scalar<std::string>(const YAML::Node& node, const std::string& file,
                                     const std::string& field) {
  const std::string& text = scalar_text(node, file, field, "a string");
  // No name or path holds a NUL ("\0" in YAML): file APIs would stop reading it there.
  if (text.find('\0') != std::string::npos) {
    throw InputError(location_of(node, file), fmt::format("{} contains a NUL character", field));
  }
  return text;
}

template <>
bool read_scalar<bool>(const YAML::Node& node, const std::string& file, const std::string& field) {
  const std::string& text = scalar_text(node, file, field, "true or false");
  // YAML 1.2's booleans; YAML 1.1's yes, no, on and off are refused, not read one way or another.
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  throw InputError(location_of(node, file), fmt::format("{} = '{}' is not a boolean; expected true or false", field, echoed(text)));
}

template <>
int64_t read_scalar<int64_t>(const YAML::Node& node, const std::string& file, const std::string& field) {
  const std::string& text = scalar_text(node, file, field, "an integer");
  if (const auto value = parse_integer(text)) return *value;
  // Digits alone that do not fit are a number too large, not a non-number.
  const bool digits = !text.empty() && std::all_of(text.begin() + (text[0] == '+' || text[0] == '-'), text.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; });
  if (digits && text.size() > 1) {
    throw InputError(location_of(node, file), fmt::format("{} = {} is out of range", field, echoed(text)));
  }
  throw InputError(location_of(node, file), fmt::format("{} = '{}' is not an integer", field, echoed(text)));
}

template <>
int read_scalar<int>(const YAML::Node& node, const std::string& file, const std::string& field) {
  const int64_t value = read_scalar<int64_t>(node, file, field);
  if (value < INT32_MIN || value > INT32_MAX) {
    throw InputError(location_of(node, file), fmt::format("{} = {} is out of range", field, value));
  }
  return static_cast<int>(value);
}

template <>
double read_scalar<double>(const YAML::Node& node, const std::string& file, const std::string& field) {
  const std::string& text = scalar_text(node, file, field, "a number");
  double value = 0.0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  const bool two_signs = begin != text.data() && begin != end && *begin == '-';  // "+-8"
  const auto [rest, ec] = std::from_chars(begin, end, value);
  if (two_signs || ec != std::errc() || rest != end || !std::isfinite(value)) {
    throw InputError(location_of(node, file), fmt::format("{} = '{}' is not a number", field, echoed(text)));
  }
  return value;
}

#define PACELINE_READ_QUANTITY(Q)                                                              \
  template <>                                                                                  \
  Q read_scalar<Q>(const YAML::Node& node, const std::string& file, const std::string& field) { \
    return read_quantity<Q>(node, file, field);                                                \
  }
PACELINE_READ_QUANTITY(Seconds)
PACELINE_READ_QUANTITY(Bytes)
PACELINE_READ_QUANTITY(Flop)
PACELINE_READ_QUANTITY(BytesPerSecond)
PACELINE_READ_QUANTITY(FlopPerSecond)
PACELINE_READ_QUANTITY(Hertz)
PACELINE_READ_QUANTITY(Watts)
#undef PACELINE_READ_QUANTITY

}  // namespace paceline
