// A file name in the temporary folder that no other test process uses, so that test runs (the
// release and sanitizer suites, say) can overlap.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace paceline::testing {

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + std::to_string(getpid()) + "-" + name;
}

}  // namespace paceline::testing
