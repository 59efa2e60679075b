// Max-min fair sharing of link bandwidth among flows (progressive filling), and the time a set
// of flows started together takes when every finished flow's share is handed back to the rest.
// One filling (fill_max_min) serves the collective model here and the flow network of `full`
// fidelity (sim/network/flow_network.h), so a collective alone gets the same rates from both.
#ifndef PACELINE_HARDWARE_MAX_MIN_H_
#define PACELINE_HARDWARE_MAX_MIN_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace paceline {

// A link a flow crosses, and how many flows it stands for there: 1 for one flow; a flow that
// stands for a class of alike flows may load each link of a class of alike links with more or
// less (sim/network/network_symmetry.h).
struct LinkLoad {
  uint32_t link = 0;
  double flows = 1.0;
};

// Scratch of fill_max_min, indexed by link and by flow id; callers that fill often keep it.
struct MaxMinScratch {
  std::vector<double> residual;      // by link: capacity not yet given to frozen flows
  std::vector<uint32_t> unfrozen;    // by link: flows not yet frozen
  std::vector<double> load;          // by link: the flows those stand for
  std::vector<uint8_t> frozen;       // by flow
  std::vector<std::pair<double, uint32_t>> heap;  // (share, link), least first
  std::vector<uint32_t> touched;
};

// Progressive filling: repeatedly the link with the least residual capacity per flow it still
// carries (lowest link on ties) fixes the rate of those flows, in the order `flows_on(link)`
// lists them, and their rate times their load comes off every link they cross. `links` holds
// every link the `flows` cross; `path_of(flow)` gives a flow's LinkLoad steps (each link
// once, none empty); `set_rate(flow, bytes_per_s)` receives each flow's rate once.
template <typename FlowsOn, typename PathOf, typename SetRate>
void fill_max_min(std::span<const uint32_t> links, std::span<const uint32_t> flows, std::span<const double> capacity,
                  const FlowsOn& flows_on, const PathOf& path_of, const SetRate& set_rate, MaxMinScratch& s) {
  for (const uint32_t link : links) {
    s.residual[link] = capacity[link];
    s.unfrozen[link] = 0;
    s.load[link] = 0.0;
  }
  for (const uint32_t f : flows) {
    s.frozen[f] = 0;
    for (const LinkLoad& step : path_of(f)) {
      ++s.unfrozen[step.link];
      s.load[step.link] += step.flows;
    }
  }
  // A min-heap of (share, link); an entry whose link's share changed since is stale and
  // skipped (the link was pushed again when it changed).
  const auto later = [](const auto& a, const auto& b) { return a > b; };
  s.heap.clear();
  for (const uint32_t link : links) {
    if (s.unfrozen[link] > 0) s.heap.emplace_back(s.residual[link] / s.load[link], link);
  }
  std::make_heap(s.heap.begin(), s.heap.end(), later);
  size_t remaining = flows.size();
  while (remaining > 0) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const auto [share, bottleneck] = s.heap.back();
    s.heap.pop_back();
    if (s.unfrozen[bottleneck] == 0 || s.residual[bottleneck] / s.load[bottleneck] != share) continue;
    s.touched.clear();
    for (const uint32_t f : flows_on(bottleneck)) {
      if (s.frozen[f]) continue;
      s.frozen[f] = 1;
      set_rate(f, share);
      --remaining;
      for (const LinkLoad& step : path_of(f)) {
        s.residual[step.link] = std::max(0.0, s.residual[step.link] - share * step.flows);
        s.load[step.link] -= step.flows;
        --s.unfrozen[step.link];
        s.touched.push_back(step.link);
      }
    }
    std::sort(s.touched.begin(), s.touched.end());
    s.touched.erase(std::unique(s.touched.begin(), s.touched.end()), s.touched.end());
    for (const uint32_t link : s.touched) {
      if (s.unfrozen[link] > 0) {
        s.heap.emplace_back(s.residual[link] / s.load[link], link);
        std::push_heap(s.heap.begin(), s.heap.end(), later);
      }
    }
  }
}

// Rates (bytes/s) of flows whose paths are lists of link indices into `capacity` (bytes/s):
// repeatedly the most contended link (least capacity per unfrozen flow) fixes the rate of its
// flows, which are then frozen and their rate taken off their other links. A flow with an
// empty path gets `unbounded`. Deterministic: ties go to the lowest link index.
std::vector<double> max_min_rates(std::span<const std::vector<uint32_t>> paths, std::span<const double> capacity,
                                  double unbounded);

// Seconds until the last of `bytes[i]` is delivered over `paths[i]` when all start at once and
// rates are re-shared (max-min) each time a flow finishes.
double transfer_time(std::span<const std::vector<uint32_t>> paths, std::span<const double> bytes,
                     std::span<const double> capacity);

// What transfer_time can be at least and at most, found without filling rates (each flow's
// bytes over the narrowest link of its path, alone: the longest and the sum).
struct TransferTimeBounds {
  double low_s = 0.0;
  double high_s = 0.0;
};
TransferTimeBounds transfer_time_bounds(std::span<const std::vector<uint32_t>> paths, std::span<const double> bytes,
                                        std::span<const double> capacity);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_MAX_MIN_H_
