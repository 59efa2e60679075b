// Runs the paceline executable (its path is the PACELINE_CLI definition of the test target) and
// captures what it prints, for the tests of the command line.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace paceline::testing {

struct CliOutcome {
  int exit_code;
  std::string output;  // stdout and stderr, interleaved
};

inline CliOutcome run_cli(const std::string& arguments) {
  const std::string command = std::string(PACELINE_CLI) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed for: " + command};
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

}  // namespace paceline::testing
