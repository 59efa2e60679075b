// Layout search: every valid layout of a scenario's model on its cluster (sim/search/layout.h),
// ranked by simulated throughput — `paceline search` and Python's paceline.search().
//
//   1. enumerate the layouts (the scenario's model, cluster, global batch and training setup);
//   2. prune by memory: a layout whose peak-memory lower bound exceeds the GPU's capacity
//      cannot fit (sim/search/bounds.h);
//   3. bound the rest's throughput from above (tokens over an iteration-time lower bound that
//      counts kernels only), and take them highest bound first, ties by enumeration order; a
//      layout reaching the front gets its full bound (collectives priced) and goes back in line;
//   4. simulate the front layouts in fixed batches on threads; once `top` fitting layouts are
//      known, a layout whose bound is below the top-th best cannot enter the ranking and is
//      pruned with every layout behind it.
// Because the bounds are sound, the ranking equals that of simulating every layout. Batches
// are of a fixed size, so the counts and the ranking are the same for any thread count.
#ifndef PACELINE_SIM_SEARCH_SEARCH_H_
#define PACELINE_SIM_SEARCH_SEARCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "sim/search/layout.h"
#include "sim/search/scenario_source.h"

namespace paceline {

struct SearchOptions {
  int gpus = 0;       // search on this many GPUs (same GPU and gpus_per_node); 0: the scenario's
  int top = 10;       // layouts to rank
  int threads = 0;    // 0: one per hardware thread
  bool prune = true;  // false: simulate every layout (for tests of the pruning)
  // Fields set on the scenario first (e.g. by --set). Those a layout chooses (parallelism.tp,
  // ..., training.micro_batch and recompute) are refused, and so are cluster.nodes and
  // gpus_per_node when `gpus` resizes the cluster.
  std::vector<Override> overrides;
  // Called on the calling thread as the search moves on, stage by stage: "layer graphs built"
  // and "layouts bounded" (done of total), then "layouts simulated" (done so far; total 0). May
  // throw to cancel the search.
  std::function<void(std::string_view stage, size_t done, size_t total)> progress;
  // Set by another thread (an interrupt), it stops the search with SimulationStopped, between
  // graphs, blocks of bounds and layouts, and inside a layout's simulation.
  const std::atomic<bool>* stop = nullptr;
};

// One simulated layout and what it achieved.
struct RankedLayout {
  Layout layout;
  size_t index = 0;  // in enumeration order
  double iteration_time_s = 0.0;
  double tokens_per_s = 0.0;
  double tokens_per_s_per_gpu = 0.0;
  double mfu = 0.0;
  double hfu = 0.0;
  int64_t peak_memory_bytes = 0;
  int64_t peak_reserved_bytes = 0;  // Result::peak_reserved_bytes
  int64_t capacity_bytes = 0;
  bool fits = false;
  std::vector<std::string> warnings;  // the simulation's (Result::warnings)
};

struct SearchReport {
  std::string name;  // the scenario's
  std::string model;
  std::string gpu;
  int gpus = 0;
  int64_t global_batch = 0;
  size_t considered = 0;     // valid layouts enumerated
  size_t pruned_memory = 0;  // memory lower bound above the capacity
  size_t pruned_bound = 0;   // throughput bound below the top-th best
  size_t simulated = 0;           // ranked by a simulation's result
  size_t shared = 0;              // of those, by the result of a layout that simulates alike
  size_t fit = 0;                 // simulated and fitting
  double wall_s = 0.0;            // the search's own wall time
  std::vector<RankedLayout> top;  // best first: tokens/s, then enumeration order
};

// Searches the layouts of `source`. Throws InputError when the scenario (apart from its
// parallel layout, micro-batch and recomputation, which the search replaces) is invalid, or
// when `gpus` does not fit the cluster's gpus_per_node.
SearchReport search_layouts(const ScenarioSource& source, const SearchOptions& options = {});

// One line of a search's progress: "search: 2048 of 276660 layouts bounded", "search: 12 layouts
// simulated".
std::string progress_line(std::string_view stage, size_t done, size_t total);

// `include_wall_time`: false for comparisons.
Json to_json(const SearchReport& report, bool include_wall_time = true);
std::string to_text(const SearchReport& report);

}  // namespace paceline

#endif  // PACELINE_SIM_SEARCH_SEARCH_H_
