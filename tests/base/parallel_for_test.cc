// Tests base/parallel_for.h: every index once, the lowest failure rethrown, and the work done on
// however many threads the system starts.
#include "base/parallel_for.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace paceline {
namespace {

TEST(ParallelFor, RunsEveryIndexOnceAndRethrowsTheLowestFailure) {
  std::vector<int> ran(1000, 0);
  parallel_for(ran.size(), 4, [&](size_t i) { ++ran[i]; });
  EXPECT_EQ(ran, std::vector<int>(1000, 1));
  try {
    parallel_for(100, 4, [](size_t i) {
      if (i == 7 || i == 60) throw std::runtime_error(std::to_string(i));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "7");
  }
}

#if !defined(__SANITIZE_ADDRESS__)
// The bytes of address space this process holds (VmSize).
long address_space_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmSize:")) return std::stol(line.substr(7)) * 1024;
  }
  return 0;
}
#endif

TEST(ParallelFor, RunsOnTheThreadsTheSystemStartsWhenItWillNotStartAll) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit leaves";
#else
  // A child whose address space leaves room for a few thread stacks (8 MiB each by default), not
  // the 64 threads asked for; with progress reported, as sweeps do.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlim_t limit = static_cast<rlim_t>(address_space_bytes()) + (32 << 20);
    const rlimit space{limit, limit};
    if (setrlimit(RLIMIT_AS, &space) != 0) _exit(3);
    std::vector<int> ran(512, 0);
    size_t reported = 0;
    try {
      parallel_for(ran.size(), 64, [&](size_t i) { ++ran[i]; }, [&](size_t done) { reported = done; });
    } catch (...) {
      _exit(2);
    }
    _exit(ran == std::vector<int>(512, 1) && reported == ran.size() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

}  // namespace
}  // namespace paceline
