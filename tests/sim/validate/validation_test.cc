// Tests sim/validate/validation.h: loading cases, errors and MAPE per source.
#include "sim/validate/validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/support/temp_path.h"

namespace paceline {
namespace {

TEST(Validation, EveryPublicCaseRuns) {
  const std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  EXPECT_GT(cases.size(), 100u);
  const ValidationReport report = validate(cases, 2);
  EXPECT_EQ(report.unsupported, 0);
  // MAPE is the mean of |error| over the cases.
  double sum = 0.0;
  for (const CaseOutcome& o : report.cases) sum += std::abs(*o.error);
  EXPECT_NEAR(report.mape, sum / static_cast<double>(cases.size()), 1e-12);
  EXPECT_FALSE(report.mape_by_source.empty());
}

TEST(Validation, ThreadCountDoesNotChangeTheReport) {
  const std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  const std::vector<ValidationCase> few(cases.begin(), cases.begin() + 12);
  EXPECT_EQ(to_json(validate(few, 1)).dump(), to_json(validate(few, 3)).dump());
}

TEST(Validation, MarksRunsPredictedNotToFitInMemory) {
  // Llama 3 8B with Adam on one 80 GB H100 needs 18 bytes per parameter (135 GiB) before any
  // activation; GPT 1.7B on one A100 fits.
  const std::string path = testing::temp_path("fits.yaml");
  std::ofstream(path) << R"(
- id: too-big
  source: test
  scenario:
    model: llama3-8b
    cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 1}
    training: {global_batch: 1, seq_len: 1024, recompute: full}
  measured: {iteration_time_s: 1.0}
- id: fits
  source: test
  scenario:
    model: gpt-1.7b
    cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 1}
    training: {global_batch: 1, seq_len: 1024}
  measured: {iteration_time_s: 1.0}
)";
  const std::vector<ValidationCase> cases = load_validation_file(path);
  const ValidationReport report = validate(cases, 1);
  ASSERT_EQ(report.cases.size(), 2u);
  EXPECT_FALSE(report.cases[0].fits);
  EXPECT_TRUE(report.cases[1].fits);
  EXPECT_EQ(report.out_of_memory, 1);
  EXPECT_NE(to_text(report).find("too-big"), std::string::npos);
  EXPECT_NE(to_text(report).find("does not fit"), std::string::npos);
  EXPECT_NE(to_text(report).find("1 of the measured runs are predicted not to fit"), std::string::npos);
  const Json json = to_json(report);
  EXPECT_EQ(json.at("out_of_memory").number(), 1.0);
  EXPECT_EQ(json.at("cases").elements()[0].at("fits").dump(-1), "false");
  EXPECT_NE(to_markdown(report, "plot.svg").find("| **no** |"), std::string::npos);
}

}  // namespace
}  // namespace paceline
