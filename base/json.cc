#include "base/json.h"

#include <fmt/format.h>

#include <cmath>

#include "base/check.h"
#include "base/utf8.h"

namespace paceline {

Json Json::object() {
  Json json;
  json.value_ = Object{};
  return json;
}

Json Json::array() {
  Json json;
  json.value_ = Array{};
  return json;
}

Json Json::array(const std::vector<std::string>& strings) {
  Json json = array();
  for (const std::string& s : strings) json.push(s);
  return json;
}

Json& Json::set(std::string_view key, Json value) {
  PACELINE_CHECK(std::holds_alternative<Object>(value_), "set() on a JSON value that is not an object");
  Object& object = std::get<Object>(value_);
  for (auto& [k, v] : object) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  object.emplace_back(std::string(key), std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  PACELINE_CHECK(std::holds_alternative<Array>(value_), "push() on a JSON value that is not an array");
  std::get<Array>(value_).push_back(std::move(value));
  return *this;
}

const Json& Json::at(std::string_view key) const {
  static const Json kNull;
  if (const Object* object = std::get_if<Object>(&value_)) {
    for (const auto& [k, v] : *object) {
      if (k == key) return v;
    }
  }
  return kNull;
}

const std::vector<Json>& Json::elements() const {
  static const Array kNone;
  const Array* array = std::get_if<Array>(&value_);
  return array ? *array : kNone;
}

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    // JSON is UTF-8: a byte that starts no character (a file name's, say) is U+FFFD.
    if (const size_t bytes = utf8_character_bytes(text, i); bytes != 1) {
      if (bytes == 0) {
        out += "\ufffd";
      } else {
        out += text.substr(i, bytes);
        i += bytes - 1;
      }
      continue;
    }
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(ch));
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

void Json::write(std::string& out, int indent, int depth) const {
  const bool pretty = indent >= 0;
  auto newline = [&](int level) {
    if (!pretty) return;
    out += '\n';
    out.append(static_cast<size_t>(level * indent), ' ');
  };
  if (std::holds_alternative<std::monostate>(value_)) {
    out += "null";
  } else if (const bool* b = std::get_if<bool>(&value_)) {
    out += *b ? "true" : "false";
  } else if (const double* d = std::get_if<double>(&value_)) {
    // Non-finite numbers have no JSON form.
    out += std::isfinite(*d) ? fmt::format("{}", *d) : "null";
  } else if (const std::string* s = std::get_if<std::string>(&value_)) {
    out += json_quote(*s);
  } else if (const Array* a = std::get_if<Array>(&value_)) {
    out += '[';
    for (size_t i = 0; i < a->size(); ++i) {
      if (i) out += ',';
      newline(depth + 1);
      (*a)[i].write(out, indent, depth + 1);
    }
    if (!a->empty()) newline(depth);
    out += ']';
  } else if (const Object* o = std::get_if<Object>(&value_)) {
    out += '{';
    for (size_t i = 0; i < o->size(); ++i) {
      if (i) out += ',';
      newline(depth + 1);
      out += json_quote((*o)[i].first);
      out += pretty ? ": " : ":";
      (*o)[i].second.write(out, indent, depth + 1);
    }
    if (!o->empty()) newline(depth);
    out += '}';
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  return out;
}

}  // namespace paceline
