// PACELINE_CHECK: an internal invariant that stays on in release builds.
//
// A failed check is a bug in paceline, not bad input: it throws InternalError with the
// condition and the place, so a library caller (Python, a sweep thread) sees an exception
// rather than a dead process. Bad user input throws InputError instead (base/input_error.h).
#ifndef PACELINE_BASE_CHECK_H_
#define PACELINE_BASE_CHECK_H_

#include <stdexcept>
#include <string>

namespace paceline {

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void fail_check(const char* condition, const char* file, int line,
                             const std::string& message);

}  // namespace paceline

#define PACELINE_CHECK(condition, ...)                                                  \
  do {                                                                                  \
    if (!(condition)) [[unlikely]]                                                      \
      ::paceline::fail_check(#condition, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (false)

#endif  // PACELINE_BASE_CHECK_H_
