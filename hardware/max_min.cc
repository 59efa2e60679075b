#include "hardware/max_min.h"

#include <algorithm>
#include <limits>
#include <functional>
#include <queue>
#include <utility>

namespace paceline {

std::vector<double> max_min_rates(std::span<const std::vector<uint32_t>> paths, std::span<const double> capacity,
                                  double unbounded) {
  const size_t flows = paths.size();
  std::vector<double> rate(flows, unbounded);
  // The links the flows use, densely renumbered in increasing link order.
  std::vector<uint32_t> links;
  for (const auto& path : paths) links.insert(links.end(), path.begin(), path.end());
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  std::vector<std::vector<size_t>> local_paths(flows);
  std::vector<double> residual(links.size());
  std::vector<int> unfrozen(links.size(), 0);
  std::vector<std::vector<size_t>> on_link(links.size());
  for (size_t l = 0; l < links.size(); ++l) residual[l] = capacity[links[l]];
  for (size_t f = 0; f < flows; ++f) {
    for (const uint32_t link : paths[f]) {
      const size_t l = static_cast<size_t>(std::lower_bound(links.begin(), links.end(), link) - links.begin());
      local_paths[f].push_back(l);
      ++unfrozen[l];
      on_link[l].push_back(f);
    }
  }
  std::vector<bool> frozen(flows, false);
  size_t remaining = 0;
  for (size_t f = 0; f < flows; ++f) remaining += paths[f].empty() ? 0 : 1;
  // Links by their current share, least first, ties by index; an entry whose link's share has
  // changed since it was pushed is stale and skipped (the link was pushed again).
  using Entry = std::pair<double, size_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> by_share;
  for (size_t l = 0; l < links.size(); ++l) by_share.emplace(residual[l] / unfrozen[l], l);
  std::vector<size_t> touched;
  while (remaining > 0) {
    const auto [share, bottleneck] = by_share.top();
    by_share.pop();
    if (unfrozen[bottleneck] == 0 || residual[bottleneck] / unfrozen[bottleneck] != share) continue;
    touched.clear();
    for (const size_t f : on_link[bottleneck]) {
      if (frozen[f]) continue;
      frozen[f] = true;
      rate[f] = share;
      --remaining;
      for (const size_t l : local_paths[f]) {
        residual[l] = std::max(0.0, residual[l] - share);
        --unfrozen[l];
        touched.push_back(l);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const size_t l : touched) {
      if (unfrozen[l] > 0) by_share.emplace(residual[l] / unfrozen[l], l);
    }
  }
  return rate;
}

double transfer_time(std::span<const std::vector<uint32_t>> paths, std::span<const double> bytes,
                     std::span<const double> capacity) {
  std::vector<std::vector<uint32_t>> active_paths(paths.begin(), paths.end());
  std::vector<double> left(bytes.begin(), bytes.end());
  std::vector<size_t> index(paths.size());
  for (size_t i = 0; i < index.size(); ++i) index[i] = i;
  // Flows with nothing to send, or no links to cross, are done at once.
  auto done = [&](size_t i) { return left[i] <= 0.0 || active_paths[i].empty(); };
  index.erase(std::remove_if(index.begin(), index.end(), done), index.end());
  double elapsed = 0.0;
  while (!index.empty()) {
    std::vector<std::vector<uint32_t>> current;
    current.reserve(index.size());
    for (const size_t i : index) current.push_back(active_paths[i]);
    const std::vector<double> rate = max_min_rates(current, capacity, std::numeric_limits<double>::infinity());
    // Advance to the next flow to finish.
    double step = std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < index.size(); ++j) step = std::min(step, left[index[j]] / rate[j]);
    elapsed += step;
    for (size_t j = 0; j < index.size(); ++j) left[index[j]] -= rate[j] * step;
    // Relative tolerance: a flow within a part per billion of done is done.
    std::vector<size_t> still;
    for (const size_t i : index) {
      if (left[i] > bytes[i] * 1e-9) still.push_back(i);
    }
    index = std::move(still);
  }
  return elapsed;
}

}  // namespace paceline
