#include "calibrate/yaml_subset.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <system_error>

namespace paceline::calibrate {
namespace {

// Words that YAML 1.1 or 1.2 would read as booleans or null; strings spelled like this are
// quoted so that every loader reads them back as strings.
constexpr std::array<std::string_view, 12> kReservedWords = {
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf", "~"};

bool is_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

// A string may be written plain when it is a lower-case identifier-like word that no YAML
// loader reads as anything but a string.
bool is_safe_plain(std::string_view s) {
  if (s.empty()) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '+' || c == '-' || c == '/';
    if (!ok) return false;
  }
  for (std::string_view w : kReservedWords) {
    if (s == w) return false;
  }
  return true;
}

bool is_integer_text(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

// YAML 1.2 core-schema float: [-+]? ( . digits | digits ( . digits? )? ) ( [eE] [-+]? digits )?
bool is_real_text(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t digits_before = 0, digits_after = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits_before;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits_after;
  }
  if (digits_before + digits_after == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

std::string escape_quoted(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

// One logical line of the file: its 1-based number, indentation and content without the
// indentation and without a trailing comment.
struct Line {
  int number = 0;
  int indent = 0;
  std::string content;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view file) : file_(file) { split(text); }

  YamlNode parse_document() {
    if (lines_.empty()) {
      YamlNode empty = YamlNode::mapping(false);
      empty.line = 1;
      empty.column = 1;
      return empty;
    }
    if (lines_[0].indent != 0) fail(lines_[0], 1, "the document must start at column 1");
    size_t index = 0;
    YamlNode root = parse_block(index, 0);
    if (index != lines_.size()) {
      fail(lines_[index], lines_[index].indent + 1, "unexpected content after the document");
    }
    return root;
  }

 private:
  [[noreturn]] void fail(int line, int column, const std::string& what) const {
    throw ProfileError(std::string(file_) + ":" + std::to_string(line) + ":" +
                       std::to_string(column) + ": " + what);
  }
  [[noreturn]] void fail(const Line& line, int column, const std::string& what) const {
    fail(line.number, column, what);
  }

  // split cuts the text into non-blank, non-comment lines and removes trailing comments.
  void split(std::string_view text) {
    int number = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view raw = text.substr(pos, end - pos);
      ++number;
      pos = end + 1;
      if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
      int indent = 0;
      while (static_cast<size_t>(indent) < raw.size() && raw[indent] == ' ') ++indent;
      if (static_cast<size_t>(indent) < raw.size() && raw[indent] == '\t') {
        fail(number, indent + 1, "tab characters are not allowed for indentation");
      }
      std::string content = strip_comment(raw.substr(indent), number, indent);
      while (!content.empty() && content.back() == ' ') content.pop_back();
      if (content.empty()) continue;
      if (indent == 0 && (content == "---" || content == "...")) continue;
      lines_.push_back(Line{number, indent, std::move(content)});
      if (end == text.size()) break;
    }
  }

  // strip_comment removes a '#' comment that starts the line or follows a space, outside quotes.
  std::string strip_comment(std::string_view s, int number, int indent) const {
    bool in_quotes = false;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (in_quotes) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_quotes = false;
        }
      } else if (c == '"') {
        in_quotes = true;
      } else if (c == '#' && (i == 0 || s[i - 1] == ' ')) {
        return std::string(s.substr(0, i));
      }
    }
    if (in_quotes) fail(number, indent + static_cast<int>(s.size()), "unterminated quoted string");
    return std::string(s);
  }

  static bool is_sequence_item(const Line& line) {
    return line.content == "-" || line.content.rfind("- ", 0) == 0;
  }

  YamlNode parse_block(size_t& index, int indent) {
    if (is_sequence_item(lines_[index])) return parse_sequence(index, indent);
    return parse_mapping(index, indent);
  }

  YamlNode parse_mapping(size_t& index, int indent) {
    YamlNode node = YamlNode::mapping(false);
    node.line = lines_[index].number;
    node.column = indent + 1;
    while (index < lines_.size() && lines_[index].indent == indent &&
           !is_sequence_item(lines_[index])) {
      const Line& line = lines_[index];
      const std::string& s = line.content;
      size_t k = 0;
      while (k < s.size() && is_key_char(s[k])) ++k;
      if (k == 0 || k >= s.size() || s[k] != ':' || (k + 1 < s.size() && s[k + 1] != ' ')) {
        fail(line, indent + 1,
             "expected 'key: value' with a key of letters, digits, '_', '.', '-'");
      }
      std::string key = s.substr(0, k);
      if (node.find(key) != nullptr) fail(line, indent + 1, "duplicate key '" + key + "'");
      size_t value_start = k + 1;
      while (value_start < s.size() && s[value_start] == ' ') ++value_start;
      ++index;
      YamlNode value;
      if (value_start < s.size()) {
        value = parse_inline(line, value_start);
      } else if (index < lines_.size() && lines_[index].indent > indent) {
        value = parse_block(index, lines_[index].indent);
      } else if (index < lines_.size() && lines_[index].indent == indent &&
                 is_sequence_item(lines_[index])) {
        value = parse_sequence(index, indent);
      } else {
        value = YamlNode::null();
        value.line = line.number;
        value.column = static_cast<int>(indent + k + 2);
      }
      node.entries.emplace_back(std::move(key), std::move(value));
    }
    if (index < lines_.size() && lines_[index].indent > indent) {
      fail(lines_[index], lines_[index].indent + 1, "unexpected indentation");
    }
    return node;
  }

  YamlNode parse_sequence(size_t& index, int indent) {
    YamlNode node = YamlNode::sequence(false);
    node.line = lines_[index].number;
    node.column = indent + 1;
    while (index < lines_.size() && lines_[index].indent == indent &&
           is_sequence_item(lines_[index])) {
      const Line& line = lines_[index];
      size_t value_start = 1;
      while (value_start < line.content.size() && line.content[value_start] == ' ') ++value_start;
      if (value_start >= line.content.size()) {
        fail(line, indent + 1, "sequence items must be written on the same line as '-'");
      }
      node.items.push_back(parse_inline(line, value_start));
      ++index;
    }
    if (index < lines_.size() && lines_[index].indent > indent) {
      fail(lines_[index], lines_[index].indent + 1, "unexpected indentation");
    }
    return node;
  }

  // parse_inline parses the one-line value that starts at `start` of the line's content.
  YamlNode parse_inline(const Line& line, size_t start) {
    const std::string& s = line.content;
    size_t pos = start;
    YamlNode value;
    if (s[pos] == '{' || s[pos] == '[') {
      value = parse_flow(line, pos);
      skip_spaces(s, pos);
      if (pos != s.size()) fail(line, column(line, pos), "unexpected text after a flow value");
    } else if (s[pos] == '"') {
      value = parse_quoted(line, pos);
      skip_spaces(s, pos);
      if (pos != s.size()) fail(line, column(line, pos), "unexpected text after a quoted string");
    } else {
      std::string_view text = std::string_view(s).substr(pos);
      check_plain(line, pos, text, /*in_flow=*/false);
      value = plain(text);
      value.line = line.number;
      value.column = column(line, pos);
    }
    return value;
  }

  static void skip_spaces(const std::string& s, size_t& pos) {
    while (pos < s.size() && s[pos] == ' ') ++pos;
  }

  static int column(const Line& line, size_t pos) {
    return line.indent + static_cast<int>(pos) + 1;
  }

  void check_plain(const Line& line, size_t pos, std::string_view text, bool in_flow) const {
    if (text.empty()) fail(line, column(line, pos), "expected a value");
    char first = text[0];
    if (first == '&' || first == '*' || first == '!' || first == '|' || first == '>' ||
        first == '\'' || first == '%' || first == '@' || first == '`') {
      fail(line, column(line, pos),
           std::string("'") + first + "' (anchors, tags, block or single-quoted scalars) is " +
               "outside the profile's YAML subset");
    }
    if (!in_flow && text.find(": ") != std::string_view::npos) {
      fail(line, column(line, pos),
           "a block mapping here is outside the profile's YAML subset; write it as {key: value}");
    }
  }

  static YamlNode plain(std::string_view text) {
    YamlNode node;
    node.kind = YamlNode::Kind::kScalar;
    node.text = std::string(text);
    return node;
  }

  YamlNode parse_flow(const Line& line, size_t& pos) {
    const std::string& s = line.content;
    skip_spaces(s, pos);
    if (pos >= s.size()) fail(line, column(line, pos), "expected a value");
    int col = column(line, pos);
    if (s[pos] == '{') {
      YamlNode node = YamlNode::mapping(true);
      node.line = line.number;
      node.column = col;
      ++pos;
      skip_spaces(s, pos);
      if (pos < s.size() && s[pos] == '}') {
        ++pos;
        return node;
      }
      while (true) {
        skip_spaces(s, pos);
        size_t key_start = pos;
        std::string key;
        if (pos < s.size() && s[pos] == '"') {
          key = parse_quoted(line, pos).text;
        } else {
          while (pos < s.size() && is_key_char(s[pos])) ++pos;
          key = s.substr(key_start, pos - key_start);
        }
        if (key.empty() || pos >= s.size() || s[pos] != ':') {
          fail(line, column(line, key_start), "expected 'key: value' inside '{...}'");
        }
        if (node.find(key) != nullptr) {
          fail(line, column(line, key_start), "duplicate key '" + key + "'");
        }
        ++pos;
        node.entries.emplace_back(key, parse_flow_item(line, pos));
        skip_spaces(s, pos);
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < s.size() && s[pos] == '}') {
          ++pos;
          return node;
        }
        fail(line, column(line, pos), "expected ',' or '}' in a flow mapping");
      }
    }
    if (s[pos] == '[') {
      YamlNode node = YamlNode::sequence(true);
      node.line = line.number;
      node.column = col;
      ++pos;
      skip_spaces(s, pos);
      if (pos < s.size() && s[pos] == ']') {
        ++pos;
        return node;
      }
      while (true) {
        node.items.push_back(parse_flow_item(line, pos));
        skip_spaces(s, pos);
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < s.size() && s[pos] == ']') {
          ++pos;
          return node;
        }
        fail(line, column(line, pos), "expected ',' or ']' in a flow sequence");
      }
    }
    return parse_flow_item(line, pos);
  }

  // parse_flow_item parses a value inside a flow container: a nested container, a quoted string
  // or a plain scalar that ends at ',', ']' or '}'.
  YamlNode parse_flow_item(const Line& line, size_t& pos) {
    const std::string& s = line.content;
    skip_spaces(s, pos);
    if (pos >= s.size()) fail(line, column(line, pos), "expected a value");
    if (s[pos] == '{' || s[pos] == '[') return parse_flow(line, pos);
    if (s[pos] == '"') return parse_quoted(line, pos);
    size_t start = pos;
    while (pos < s.size() && s[pos] != ',' && s[pos] != ']' && s[pos] != '}') {
      if (s[pos] == ':' && (pos + 1 == s.size() || s[pos + 1] == ' ')) {
        fail(line, column(line, pos), "unexpected ':' in a flow value (quote the string)");
      }
      ++pos;
    }
    size_t end = pos;
    while (end > start && s[end - 1] == ' ') --end;
    std::string_view text = std::string_view(s).substr(start, end - start);
    check_plain(line, start, text, /*in_flow=*/true);
    YamlNode node = plain(text);
    node.line = line.number;
    node.column = column(line, start);
    return node;
  }

  YamlNode parse_quoted(const Line& line, size_t& pos) {
    const std::string& s = line.content;
    YamlNode node;
    node.kind = YamlNode::Kind::kScalar;
    node.quoted = true;
    node.line = line.number;
    node.column = column(line, pos);
    ++pos;  // opening quote
    while (pos < s.size() && s[pos] != '"') {
      char c = s[pos];
      if (c != '\\') {
        node.text += c;
        ++pos;
        continue;
      }
      if (pos + 1 >= s.size()) break;
      char e = s[pos + 1];
      pos += 2;
      switch (e) {
        case '"':
          node.text += '"';
          break;
        case '\\':
          node.text += '\\';
          break;
        case '/':
          node.text += '/';
          break;
        case 'n':
          node.text += '\n';
          break;
        case 't':
          node.text += '\t';
          break;
        case 'r':
          node.text += '\r';
          break;
        case '0':
          node.text += '\0';
          break;
        case 'x': {
          if (pos + 2 > s.size()) fail(line, column(line, pos), "incomplete \\x escape");
          unsigned value = 0;
          auto [ptr, ec] = std::from_chars(s.data() + pos, s.data() + pos + 2, value, 16);
          if (ec != std::errc() || ptr != s.data() + pos + 2) {
            fail(line, column(line, pos), "bad \\x escape");
          }
          node.text += static_cast<char>(value);
          pos += 2;
          break;
        }
        default:
          fail(line, column(line, pos - 2),
               std::string("unsupported escape '\\") + e +
                   "'; expected one of \\\" \\\\ \\n \\t \\r \\xNN");
      }
    }
    if (pos >= s.size()) fail(line, node.column, "unterminated quoted string");
    ++pos;  // closing quote
    return node;
  }

  std::string_view file_;
  std::vector<Line> lines_;
};

void emit_inline(const YamlNode& node, std::string& out) {
  switch (node.kind) {
    case YamlNode::Kind::kScalar:
      out += node.quoted ? escape_quoted(node.text) : node.text;
      return;
    case YamlNode::Kind::kMapping: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : node.entries) {
        if (!first) out += ", ";
        first = false;
        out += key;
        out += ": ";
        emit_inline(value, out);
      }
      out += '}';
      return;
    }
    case YamlNode::Kind::kSequence: {
      out += '[';
      bool first = true;
      for (const YamlNode& item : node.items) {
        if (!first) out += ", ";
        first = false;
        emit_inline(item, out);
      }
      out += ']';
      return;
    }
  }
}

void emit_entry(const std::string& key, const YamlNode& value, int indent, std::string& out) {
  out.append(indent, ' ');
  out += key;
  out += ':';
  bool block = !value.flow && !value.is_scalar();
  if (block && value.is_mapping() && !value.entries.empty()) {
    out += '\n';
    for (const auto& [k, v] : value.entries) emit_entry(k, v, indent + 2, out);
    return;
  }
  if (block && value.is_sequence() && !value.items.empty()) {
    out += '\n';
    for (const YamlNode& item : value.items) {
      out.append(indent + 2, ' ');
      out += "- ";
      emit_inline(item, out);
      out += '\n';
    }
    return;
  }
  out += ' ';
  emit_inline(value, out);
  out += '\n';
}

}  // namespace

YamlNode YamlNode::string(std::string_view value) {
  YamlNode node;
  node.text = std::string(value);
  node.quoted = !is_safe_plain(value);
  return node;
}

YamlNode YamlNode::integer(int64_t value) {
  YamlNode node;
  node.text = std::to_string(value);
  return node;
}

YamlNode YamlNode::real(double value) {
  YamlNode node;
  node.text = format_real(value);
  return node;
}

YamlNode YamlNode::boolean(bool value) {
  YamlNode node;
  node.text = value ? "true" : "false";
  return node;
}

YamlNode YamlNode::null() {
  YamlNode node;
  node.text = "null";
  return node;
}

YamlNode YamlNode::mapping(bool flow_style) {
  YamlNode node;
  node.kind = Kind::kMapping;
  node.flow = flow_style;
  return node;
}

YamlNode YamlNode::sequence(bool flow_style) {
  YamlNode node;
  node.kind = Kind::kSequence;
  node.flow = flow_style;
  return node;
}

bool YamlNode::is_null() const {
  return is_scalar() && !quoted &&
         (text == "null" || text == "~" || text == "Null" || text == "NULL" || text.empty());
}

const YamlNode* YamlNode::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

YamlNode& YamlNode::set(std::string_view key, YamlNode value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return v;
    }
  }
  entries.emplace_back(std::string(key), std::move(value));
  return entries.back().second;
}

bool YamlNode::erase(std::string_view key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->first == key) {
      entries.erase(it);
      return true;
    }
  }
  return false;
}

std::optional<int64_t> YamlNode::as_integer() const {
  if (!is_scalar() || quoted || !is_integer_text(text)) return std::nullopt;
  std::string_view s = text;
  if (s[0] == '+') s.remove_prefix(1);
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<double> YamlNode::as_real() const {
  if (!is_scalar() || quoted) return std::nullopt;
  if (!is_integer_text(text) && !is_real_text(text)) return std::nullopt;
  std::string_view s = text;
  if (s[0] == '+') s.remove_prefix(1);
  // from_chars does not accept a leading '.', which YAML allows (".5").
  std::string buffer;
  if (s[0] == '.' || (s.size() > 1 && s[0] == '-' && s[1] == '.')) {
    buffer = std::string(s);
    buffer.insert(s[0] == '-' ? 1 : 0, "0");
    s = buffer;
  }
  double value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<bool> YamlNode::as_boolean() const {
  if (!is_scalar() || quoted) return std::nullopt;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::nullopt;
}

std::string format_real(double value) {
  if (!std::isfinite(value)) return "null";
  // Shortest round-trip digits, then laid out as Python's repr() does (fixed notation for
  // decimal exponents -4..15, scientific otherwise), so that calibrate/attention_torch.py writes
  // the same text for the same number.
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  if (ec != std::errc()) return "null";
  std::string_view s(buf, static_cast<size_t>(ptr - buf));
  std::string sign;
  if (!s.empty() && s[0] == '-') {
    sign = "-";
    s.remove_prefix(1);
  }
  size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::string_view exponent_text = s.substr(e + 1);
  if (!exponent_text.empty() && exponent_text[0] == '+') exponent_text.remove_prefix(1);
  std::from_chars(exponent_text.data(), exponent_text.data() + exponent_text.size(), exponent);
  if (digits == "0") exponent = 0;
  std::string out = sign;
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      size_t whole = static_cast<size_t>(exponent) + 1;
      if (digits.size() < whole) digits.append(whole - digits.size(), '0');
      out += digits.substr(0, whole) + ".";
      out += digits.size() > whole ? digits.substr(whole) : "0";
    } else {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1) + "." + (digits.size() > 1 ? digits.substr(1) : "0");
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                exponent < 0 ? -exponent : exponent);
  return out + exp_buf;
}

YamlNode parse_yaml_subset(std::string_view text, std::string_view file_name) {
  Parser parser(text, file_name);
  return parser.parse_document();
}

std::string emit_yaml_subset(const YamlNode& root, const std::vector<std::string>& header) {
  std::string out;
  for (const std::string& line : header) {
    out += "# ";
    out += line;
    out += '\n';
  }
  if (root.is_mapping() && !root.flow) {
    for (const auto& [key, value] : root.entries) emit_entry(key, value, 0, out);
  } else {
    emit_inline(root, out);
    out += '\n';
  }
  return out;
}

}  // namespace paceline::calibrate
