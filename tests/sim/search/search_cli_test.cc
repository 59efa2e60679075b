// Tests the `paceline search` command: its table, its JSON and its errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/support/run_cli.h"

namespace {

using paceline::testing::CliOutcome;
using paceline::testing::run_cli;

TEST(SearchCli, PrintsTheRankingAndTheCounts) {
  const CliOutcome o = run_cli("search scenarios/gpt-1.7b-1xa100.yaml --top 3");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("considered"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("tokens/s"), std::string::npos) << o.output;
}

TEST(SearchCli, JsonHasTheCountsAndTheLayouts) {
  const CliOutcome o = run_cli("search scenarios/gpt-1.7b-1xa100.yaml --top 2 --json");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output.front(), '{');
  for (const char* key : {"\"considered\"", "\"pruned_memory\"",
                          "\"pruned_bound\"", "\"simulated\"", "\"shared\"", "\"fit\"", "\"wall_s\"",
                          "\"layouts\"", "\"tokens_per_s\"", "\"rank\": 2"}) {
    EXPECT_NE(o.output.find(key), std::string::npos) << key;
  }
}

TEST(SearchCli, BadArgumentsExitTwo) {
  EXPECT_EQ(run_cli("search").exit_code, 2);
  EXPECT_EQ(run_cli("search /nonexistent.yaml").exit_code, 2);
  EXPECT_EQ(run_cli("search scenarios/gpt-1.7b-1xa100.yaml --gpus 0x").exit_code, 2);
  const CliOutcome help = run_cli("search --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("usage: paceline search"), std::string::npos);
}

}  // namespace
