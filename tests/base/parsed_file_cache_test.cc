// Tests base/parsed_file_cache.h: a file is parsed once while its bytes stay the same, again
// when they change, and never kept when it fails to parse.
#include "base/parsed_file_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/parallel_for.h"

namespace paceline {
namespace {

class ParsedFileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        (std::filesystem::path(::testing::TempDir()) /
         (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".yaml"))
            .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  void write(const std::string& text) const { std::ofstream(path_, std::ios::trunc) << text; }

  // A cache that reads `value:` and counts its parses.
  ParsedFileCache<int> counting_cache() {
    return ParsedFileCache<int>([this](const YamlDocument& document) {
      ++parses_;
      YamlMap root(document.root, document.file, "");
      const int value = root.required<int>("value");
      root.finish();
      return value;
    });
  }

  std::string path_;
  std::atomic<int> parses_ = 0;
};

TEST_F(ParsedFileCacheTest, ParsesAFileOnceWhileItsBytesStayTheSame) {
  ParsedFileCache<int> cache = counting_cache();
  write("value: 7\n");
  const std::shared_ptr<const int> first = cache.get(path_);
  const std::shared_ptr<const int> second = cache.get(path_);
  EXPECT_EQ(*first, 7);
  EXPECT_EQ(second, first);  // the kept value itself
  EXPECT_EQ(parses_, 1);
}

TEST_F(ParsedFileCacheTest, ParsesAgainWhenTheFileChanges) {
  ParsedFileCache<int> cache = counting_cache();
  write("value: 7\n");
  EXPECT_EQ(*cache.get(path_), 7);
  // The same size and a different byte: the text, not the length or a time stamp, decides.
  write("value: 8\n");
  EXPECT_EQ(*cache.get(path_), 8);
  EXPECT_EQ(parses_, 2);
  // Back to the first text: parsed again, as only the latest text of a path is kept.
  write("value: 7\n");
  EXPECT_EQ(*cache.get(path_), 7);
  EXPECT_EQ(parses_, 3);
}

TEST_F(ParsedFileCacheTest, KeepsNothingThatFailsToParse) {
  ParsedFileCache<int> cache = counting_cache();
  write("value: seven\n");
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      cache.get(path_);
      ADD_FAILURE() << "no error for a value that is not an integer";
    } catch (const InputError& e) {
      // The loader's own message, at the file's line and column, each time.
      EXPECT_NE(std::string(e.what()).find(path_ + ":1:8:"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parses_, 2);
  write("value: 7\n");
  EXPECT_EQ(*cache.get(path_), 7);
}

TEST_F(ParsedFileCacheTest, AMissingFileIsAnInputError) {
  ParsedFileCache<int> cache = counting_cache();
  EXPECT_THROW(cache.get(path_ + ".missing"), InputError);
  EXPECT_EQ(parses_, 0);
}

TEST_F(ParsedFileCacheTest, ARelativePathIsReadAgainFromAnotherWorkingDirectory) {
  // A parse may resolve paths against the working directory (a system file's GPU file): two
  // folders holding the same text under one relative name give each its own value.
  const std::filesystem::path base =
      std::filesystem::path(::testing::TempDir()) / "parsed_file_cache_cwd";
  for (const char* folder : {"a", "b"}) {
    std::filesystem::create_directories(base / folder);
    std::ofstream(base / folder / "same.yaml", std::ios::trunc) << "value: 7\n";
  }
  ParsedFileCache<std::string> cache([](const YamlDocument& document) {
    return std::filesystem::absolute(document.file).lexically_normal().string();
  });
  const std::filesystem::path started = std::filesystem::current_path();
  std::vector<std::string> seen;
  for (const char* folder : {"a", "b", "a"}) {
    std::filesystem::current_path(base / folder);
    seen.push_back(*cache.get("same.yaml"));
  }
  std::filesystem::current_path(started);
  std::filesystem::remove_all(base);
  EXPECT_EQ(seen[0], ((base / "a" / "same.yaml").lexically_normal()).string());
  EXPECT_EQ(seen[1], ((base / "b" / "same.yaml").lexically_normal()).string());
  EXPECT_EQ(seen[2], seen[0]);
}

TEST_F(ParsedFileCacheTest, ThreadsMissingTogetherGetEqualValues) {
  // A cold cache read by many threads at once: each may parse, every one gets the file's value.
  ParsedFileCache<int> cache = counting_cache();
  write("value: 7\n");
  std::vector<std::shared_ptr<const int>> read(64);
  parallel_for(read.size(), 4, [&](size_t i) { read[i] = cache.get(path_); });
  for (const auto& value : read) EXPECT_EQ(*value, 7);
  EXPECT_GE(parses_, 1);
  EXPECT_LE(parses_, 64);
}

TEST_F(ParsedFileCacheTest, ThreadsReadingOneFileGetOneValue) {
  ParsedFileCache<int> cache = counting_cache();
  write("value: 7\n");
  const std::shared_ptr<const int> kept = cache.get(path_);
  std::vector<std::shared_ptr<const int>> read(64);
  parallel_for(read.size(), 4, [&](size_t i) { read[i] = cache.get(path_); });
  for (const auto& value : read) EXPECT_EQ(value, kept);
  EXPECT_EQ(parses_, 1);
}

}  // namespace
}  // namespace paceline
