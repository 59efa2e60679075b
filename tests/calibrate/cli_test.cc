// Tests calibrate/cli.cc: paceline-calibrate's command line.
#include "calibrate/cli.h"

#include <gtest/gtest.h>

namespace paceline::calibrate {
namespace {

Options parse(std::vector<std::string_view> args) {
  args.insert(args.begin(), "paceline-calibrate");
  return parse_args(args);
}

std::string usage_error(std::vector<std::string_view> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CliTest, DefaultsAreQuickEveryFamilyAndResume) {
  Options o = parse({});
  EXPECT_EQ(o.mode, Mode::kQuick);
  EXPECT_EQ(o.output, "profile.yaml");
  EXPECT_FALSE(o.fresh);
  EXPECT_EQ(o.families, (std::vector<std::string>{"memory_bound", "copies", "gemm", "collectives",
                                                  "attention"}));
  EXPECT_EQ(o.budget_s, 0);
}

TEST(CliTest, ParsesEveryOption) {
  Options o = parse({"--full", "--output", "h200.yaml", "--device=1", "--fresh", "--budget-s",
                     "150.5", "--verbose"});
  EXPECT_EQ(o.mode, Mode::kFull);
  EXPECT_EQ(o.output, "h200.yaml");
  EXPECT_EQ(o.device, 1);
  EXPECT_TRUE(o.fresh);
  EXPECT_DOUBLE_EQ(o.budget_s, 150.5);
  EXPECT_TRUE(o.verbose);
  EXPECT_TRUE(parse({"--plan"}).plan_only);
  EXPECT_TRUE(parse({"--help"}).help);
}

TEST(CliTest, FamiliesAndSkipKeepRunOrder) {
  EXPECT_EQ(parse({"--families", "attention,gemm"}).families,
            (std::vector<std::string>{"gemm", "attention"}));
  EXPECT_EQ(parse({"--skip=attention,collectives"}).families,
            (std::vector<std::string>{"memory_bound", "copies", "gemm"}));
}

TEST(CliTest, ErrorsNameTheProblemAndTheAlternatives) {
  EXPECT_EQ(usage_error({"--families", "gemm,attn"}),
            "--families: unknown family 'attn'; expected a comma-separated list of: memory_bound, "
            "copies, gemm, "
            "collectives, attention");
  EXPECT_EQ(usage_error({"--budget-s", "-3"}),
            "--budget-s = '-3'; expected a number of seconds from 0 (no budget) to 31536000 (a "
            "year)");
  // 1e10 s overflowed the run's steady_clock deadline, which every family then found spent.
  EXPECT_EQ(usage_error({"--budget-s", "1e10"}),
            "--budget-s = '1e10'; expected a number of seconds from 0 (no budget) to 31536000 (a "
            "year)");
  EXPECT_DOUBLE_EQ(parse({"--budget-s", "31536000"}).budget_s, 31536000.0);
  EXPECT_EQ(usage_error({"--output"}), "--output needs a value");
  EXPECT_EQ(usage_error({"--device", "x"}), "--device = 'x'; expected a CUDA device ordinal >= 0");
  EXPECT_EQ(usage_error({"--families", "gemm", "--skip", "gemm"}),
            "--families/--skip leave nothing to measure");
  // A second grid or a repeated option silently won over the first.
  EXPECT_EQ(usage_error({"--full", "--quick"}),
            "--quick and --full each choose the grids; give one");
  EXPECT_EQ(usage_error({"-o", "a.yaml", "--output=b.yaml"}),
            "--output is given twice; give each option once");
  EXPECT_EQ(usage_error({"--families", "gemm", "--families", "attention"}),
            "--families is given twice; give each option once");
  EXPECT_NE(
      usage_error({"--quik"}).find("unknown option '--quik'; expected one of: --quick, --full"),
      std::string::npos);
}

TEST(CliTest, HelpDocumentsExitStatus) {
  std::string help = help_text();
  EXPECT_NE(help.find("usage: paceline-calibrate"), std::string::npos);
  EXPECT_NE(help.find("Exit status"), std::string::npos);
}

}  // namespace
}  // namespace paceline::calibrate
