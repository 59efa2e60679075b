// Max-min fair sharing of link bandwidth among flows (progressive filling), and the time a set
// of flows started together takes when every finished flow's share is handed back to the rest.
#ifndef PACELINE_HARDWARE_MAX_MIN_H_
#define PACELINE_HARDWARE_MAX_MIN_H_

#include <cstdint>
#include <span>
#include <vector>

namespace paceline {

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

}  // namespace paceline

#endif  // PACELINE_HARDWARE_MAX_MIN_H_
