// A file name in a temporary folder of this test process alone, so that test runs (the release
// and sanitizer suites, say) can overlap; the folder and what the tests wrote there go when the
// process exits.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace paceline::testing {

inline std::string temp_path(const std::string& name) {
  struct Folder {
    std::filesystem::path path =
        std::filesystem::path(::testing::TempDir()) / ("paceline-test-" + std::to_string(getpid()));
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Folder folder;
  return (folder.path / name).string();
}

}  // namespace paceline::testing
