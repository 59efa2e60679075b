#include "base/check.h"

#include <fmt/format.h>

namespace paceline {

void fail_check(const char* condition, const char* file, int line, const std::string& message) {
  throw InternalError(fmt::format("internal error at {}:{}: check `{}` failed{}{}", file, line,
                                  condition, message.empty() ? "" : ": ", message));
}

}  // namespace paceline
