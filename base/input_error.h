// InputError: the one exception type for bad user input (scenario, catalog, profile files).
//
// Its message starts `file:line:col:` (1-based) and names the field, the value found, what was
// expected and the alternatives, e.g.
//   run.yaml:12:5: parallelism.schedule = 'interleave' is unknown; expected one of: gpipe, 1f1b
// It derives std::invalid_argument so the Python bindings raise ValueError; the CLI maps it to
// exit code 2. Library code never exits or aborts on bad input: it throws this.
#ifndef PACELINE_BASE_INPUT_ERROR_H_
#define PACELINE_BASE_INPUT_ERROR_H_

#include <stdexcept>
#include <string>
#include <string_view>

namespace paceline {

// SourceLocation: where a value came from. line and column are 1-based; 0 means unknown.
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  // "file:line:col", "file" when the position is unknown, "<input>" when the file is too.
  std::string to_string() const;
};

// `text` as one line of printable UTF-8, as messages and text reports show names and values: line
// breaks, tabs and other control characters, and bytes that start no UTF-8 character, escaped
// (\n, \t, \xNN).
std::string printable(std::string_view text);

// `text` as an error message echoes a value: whole when short, else its first 77 bytes (not
// splitting a UTF-8 character) and "...", so that a long value leaves the message its reason.
std::string echoed(std::string_view text);

class InputError : public std::invalid_argument {
 public:
  InputError(const SourceLocation& where, const std::string& message);
  // The message without its location prefix.
  const std::string& detail() const { return detail_; }
  const SourceLocation& where() const { return where_; }

 private:
  SourceLocation where_;
  std::string detail_;
};

}  // namespace paceline

#endif  // PACELINE_BASE_INPUT_ERROR_H_
