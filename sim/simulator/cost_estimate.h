// CostEstimate: what simulating a scenario will take — engine tasks, memory and wall time —
// worked out before lowering, so a scenario too big for the machine (say `full` fidelity over
// 100,000 ranks) fails at once with the numbers instead of running out of memory or time.
//
// Tasks per rank come from the same task plans lowering builds (each distinct block's passes,
// priced once), times the blocks and micro-batches of each pipeline stage, plus an upper bound
// on the few tasks outside blocks (pipeline transfers, reductions, the optimizer). Bytes and
// seconds follow from per-task and per-rank costs measured on the engine (cost_estimate.cc).
//
//   const CostEstimate cost = estimate_cost(scenario);
//   if (cost.memory > GiB(16)) ...  // fmt::print("{}", describe(cost))
#ifndef PACELINE_SIM_SIMULATOR_COST_ESTIMATE_H_
#define PACELINE_SIM_SIMULATOR_COST_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "base/units.h"
#include "sim/scenario/scenario.h"

namespace paceline {

struct CostEstimate {
  double tasks_per_rank = 0.0;    // the largest stage program, in engine tasks
  double program_tasks = 0.0;     // all stage programs together (what lowering builds and keeps)
  int64_t stages = 1;             // pipeline stages: programs, each run by ranks / stages ranks
  // Simulated ranks: one per stage (symmetric) or every GPU (full; an upper bound, as the peers
  // full fidelity folds are known only once it is lowered).
  int64_t ranks = 0;
  double task_completions = 0.0;  // tasks the engine completes over all simulated ranks
  Bytes memory;                   // peak memory of lowering and replay
  Seconds wall_time;              // lowering and replay at the measured rates
  bool full_fidelity = false;     // every rank simulated (symmetric would simulate one per stage)
  bool unfolded = false;          // full fidelity told not to fold symmetric peers
};

// Estimates the cost of simulate() on `scenario` without lowering it. Counts are doubles: an
// absurd scenario's counts may exceed any integer type, and the estimate still reports them.
CostEstimate estimate_cost(const Scenario& scenario);
// The same programs run on `simulated_ranks` ranks (the ranks full fidelity keeps once it has
// folded peers).
CostEstimate with_simulated_ranks(CostEstimate cost, int64_t simulated_ranks);

// At least what simulating a model of `layers` layers over `microbatches` micro-batches a step
// takes in memory, whatever the layout: lowering keeps every stage's program, which holds a
// forward and a backward task a micro-batch and layer (estimate_cost counts every task). Cheap
// enough to check every layout of a search before it builds their pipeline schedules.
Bytes least_simulation_memory(int64_t microbatches, int64_t layers);

// "about 2.3e+09 engine tasks (23456 per rank × 98304 simulated ranks): 0.29 GiB of memory
// and 2.3e+02 s".
std::string describe(const CostEstimate& cost);
// What would make the run smaller: folding peers or symmetric fidelity when it is full, else
// fewer micro-batches or a smaller cluster.
std::string how_to_shrink(const CostEstimate& cost);

// The memory this process may use: the machine's physical memory, or less where a cgroup
// allows less or the address-space limit (ulimit -v) leaves less beyond what the process has
// mapped (0 where none can be read). Threads started later reserve address space of their own
// (stacks, allocator arenas), which this does not foresee.
Bytes machine_memory();

}  // namespace paceline

#endif  // PACELINE_SIM_SIMULATOR_COST_ESTIMATE_H_
