// Tests sim/validate/validation.h: loading cases, errors and MAPE per source.
#include "sim/validate/validation.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace paceline
