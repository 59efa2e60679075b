#include "calibrate/stats.h"

#include <algorithm>
#include <cmath>

namespace paceline::calibrate {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.size() == 1) return sorted.front();
  // Rank (p/100)·(n−1) in 0-based positions, interpolated between its two neighbours.
  double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lower = static_cast<size_t>(std::floor(rank));
  size_t upper = std::min(lower + 1, sorted.size() - 1);
  double fraction = rank - static_cast<double>(lower);
  return sorted[lower] + (sorted[upper] - sorted[lower]) * fraction;
}

Summary summarize(std::vector<double> samples) {
  Summary s;
  s.count = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.median = percentile(samples, 50);
  s.p10 = percentile(samples, 10);
  s.p90 = percentile(samples, 90);
  s.min = samples.front();
  s.max = samples.back();
  s.spread = s.median > 0 ? (s.p90 - s.p10) / s.median : 0;
  return s;
}

}  // namespace paceline::calibrate
