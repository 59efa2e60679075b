// Json: a small JSON value for paceline's outputs — objects keep their keys in insertion
// order and numbers print as the shortest text that reads back to the same double, so the
// same result always prints byte for byte the same.
#ifndef PACELINE_BASE_JSON_H_
#define PACELINE_BASE_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace paceline {

class Json {
 public:
  Json() = default;  // null
  Json(bool value) : value_(value) {}
  Json(int value) : value_(static_cast<double>(value)) {}
  Json(int64_t value) : value_(static_cast<double>(value)) {}
  Json(uint64_t value) : value_(static_cast<double>(value)) {}
  Json(double value) : value_(value) {}
  Json(const char* value) : value_(std::string(value)) {}
  Json(std::string value) : value_(std::move(value)) {}
  Json(std::string_view value) : value_(std::string(value)) {}

  static Json object();
  static Json array();
  static Json array(const std::vector<std::string>& strings);  // an array of those strings

  // Objects: sets (or replaces) a key. Arrays: appends.
  Json& set(std::string_view key, Json value);
  Json& push(Json value);
  // Objects: the value of a key (null if absent).
  const Json& at(std::string_view key) const;
  // Arrays: the elements (empty for any other value).
  const std::vector<Json>& elements() const;

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  double number() const { return std::get<double>(value_); }
  const std::string& string() const { return std::get<std::string>(value_); }

  // Compact (indent < 0) or pretty with `indent` spaces.
  std::string dump(int indent = 2) const;

 private:
  using Object = std::vector<std::pair<std::string, Json>>;
  using Array = std::vector<Json>;
  void write(std::string& out, int indent, int depth) const;

  std::variant<std::monostate, bool, double, std::string, Array, Object> value_;
};

// JSON string escaping of `text`, quotes included.
std::string json_quote(std::string_view text);

}  // namespace paceline

#endif  // PACELINE_BASE_JSON_H_
