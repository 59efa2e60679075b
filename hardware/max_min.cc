#include "hardware/max_min.h"

#include <algorithm>
#include <limits>
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
  std::vector<double> local_capacity(links.size());
  for (size_t l = 0; l < links.size(); ++l) local_capacity[l] = capacity[links[l]];
  std::vector<std::vector<LinkLoad>> local_paths(flows);
  std::vector<std::vector<uint32_t>> on_link(links.size());
  std::vector<uint32_t> routed;  // flows with a path
  for (uint32_t f = 0; f < flows; ++f) {
    for (const uint32_t link : paths[f]) {
      const auto l = static_cast<uint32_t>(std::lower_bound(links.begin(), links.end(), link) - links.begin());
      local_paths[f].push_back(LinkLoad{l, 1.0});
      on_link[l].push_back(f);
    }
    if (!paths[f].empty()) routed.push_back(f);
  }
  std::vector<uint32_t> all_links(links.size());
  for (uint32_t l = 0; l < links.size(); ++l) all_links[l] = l;
  MaxMinScratch scratch{.residual = std::vector<double>(links.size()),
                        .unfrozen = std::vector<uint32_t>(links.size()),
                        .load = std::vector<double>(links.size()),
                        .frozen = std::vector<uint8_t>(flows)};
  fill_max_min(
      all_links, routed, local_capacity, [&](uint32_t l) -> const std::vector<uint32_t>& { return on_link[l]; },
      [&](uint32_t f) -> const std::vector<LinkLoad>& { return local_paths[f]; },
      [&](uint32_t f, double r) { rate[f] = r; }, scratch);
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
    // Advance to the next flow to finish. It is done outright: with bytes near the smallest
    // doubles, its time left can round to zero, and subtracting it would leave it unfinished.
    std::vector<double> time_left(index.size());
    for (size_t j = 0; j < index.size(); ++j) time_left[j] = left[index[j]] / rate[j];
    const double step = *std::ranges::min_element(time_left);
    elapsed += step;
    for (size_t j = 0; j < index.size(); ++j) {
      left[index[j]] = time_left[j] <= step ? 0.0 : left[index[j]] - rate[j] * step;
    }
    // Relative tolerance: a flow within a part per billion of done is done.
    std::vector<size_t> still;
    for (const size_t i : index) {
      if (left[i] > bytes[i] * 1e-9) still.push_back(i);
    }
    index = std::move(still);
  }
  return elapsed;
}

TransferTimeBounds transfer_time_bounds(std::span<const std::vector<uint32_t>> paths, std::span<const double> bytes,
                                        std::span<const double> capacity) {
  // No flow is faster than its narrowest link alone. The flows on the first link to fill each
  // get its share, so their rates over their narrowest capacities add up to at least one: the
  // sum of bytes left over narrowest capacity falls at least as fast as time passes.
  TransferTimeBounds bounds;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty() || bytes[i] <= 0.0) continue;
    double narrowest = capacity[paths[i].front()];
    for (const uint32_t link : paths[i]) narrowest = std::min(narrowest, capacity[link]);
    const double alone_s = bytes[i] / narrowest;
    bounds.low_s = std::max(bounds.low_s, alone_s);
    bounds.high_s += alone_s;
  }
  return bounds;
}

}  // namespace paceline
