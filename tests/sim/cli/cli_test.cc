// Tests the paceline executable: exit codes, one-line errors, JSON output.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct Outcome {
  int exit_code;
  std::string output;  // stdout and stderr
};

Outcome run(const std::string& arguments) {
  const std::string command = std::string(PACELINE_CLI) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

TEST(Cli, RunPrintsASummary) {
  const Outcome o = run("run scenarios/gpt-1.7b-1xa100.yaml");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("iteration time"), std::string::npos);
}

TEST(Cli, JsonIsOneObject) {
  const Outcome o = run("run scenarios/gpt-1.7b-1xa100.yaml --json");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.output.front(), '{');
  EXPECT_NE(o.output.find("\"iteration_time_s\""), std::string::npos);
}

TEST(Cli, BadInputIsOneLineAndExitCodeTwo) {
  const std::string path = testing::TempDir() + "bad.yaml";
  std::ofstream(path) << "model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 8}\nfoo: 1\n";
  const Outcome o = run("run " + path);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.output, "paceline: " + path +
                          ":4:1: unknown key 'foo' in the document; expected one of: cluster, model, name, "
                          "parallelism, simulation, training\n");
}

TEST(Cli, MissingFileAndUnknownCommand) {
  EXPECT_EQ(run("run /nonexistent.yaml").exit_code, 2);
  EXPECT_EQ(run("frobnicate").exit_code, 2);
  EXPECT_EQ(run("run scenarios/gpt-1.7b-1xa100.yaml --jsn").exit_code, 2);
}

TEST(Cli, EveryCommandHasHelp) {
  for (const char* command : {"--help", "run --help", "validate --help", "models --help", "gpus --help"}) {
    const Outcome o = run(command);
    EXPECT_EQ(o.exit_code, 0) << command;
    EXPECT_NE(o.output.find("usage:"), std::string::npos) << command;
  }
}

TEST(Cli, CatalogsList) {
  EXPECT_NE(run("models").output.find("llama3.1-405b"), std::string::npos);
  EXPECT_NE(run("gpus").output.find("h200-sxm-141gb"), std::string::npos);
}

TEST(Cli, MaxEventsGuard) {
  const Outcome o = run("run scenarios/gpt-1.7b-1xa100.yaml --max-events 10");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.output.find("limit of 10 events"), std::string::npos) << o.output;
}

}  // namespace
