// Summary statistics of repeated timings: median and spread.
#pragma once

#include <vector>

namespace paceline::calibrate {

// Summary describes repeated measurements of one call, in seconds.
struct Summary {
  double median = 0;
  double p10 = 0;
  double p90 = 0;
  double min = 0;
  double max = 0;
  // (p90 - p10) / median: the relative width of the central 80 %, 0 for a single sample.
  double spread = 0;
  int count = 0;
};

// percentile returns the p-th percentile (0..100) of `sorted` (ascending, non-empty) by linear
// interpolation between closest ranks (NumPy's default "linear" method).
double percentile(const std::vector<double>& sorted, double p);

// summarize computes the summary of `samples` (any order). An empty input gives count 0.
Summary summarize(std::vector<double> samples);

}  // namespace paceline::calibrate
