// Engine: replays the Programs of many ranks in simulated time.
//
// Events are ordered by (time, insertion sequence); when one completion readies several tasks
// they are issued in a fixed order (the finished task's stream successor, then its dependents
// in the order they were declared). No wall clock, no randomness, no unordered iteration
// reaches the schedule: the same setup gives a bit-identical RunResult on every run.
//
// The Engine is immutable after construction; run() keeps all mutable state in a local object,
// so one Engine may run many times and many Engines may run at once on threads.
#ifndef PACELINE_SIM_ENGINE_ENGINE_H_
#define PACELINE_SIM_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "sim/engine/program.h"
#include "sim/engine/sim_time.h"

namespace paceline {

// One simulated rank: the program it runs and how its group slots map to group instances
// (ranks whose slot maps to the same instance meet at that instance's sync points).
struct RankSetup {
  std::shared_ptr<const Program> program;
  std::vector<uint32_t> group_instances;  // indexed by SyncPoint::slot
  int64_t initial_memory_bytes = 0;       // resident before the first task (weights, states)
  bool record_spans = false;              // keep each task's start and end in the result
};

struct EngineOptions {
  uint64_t max_events = 0;  // stop with SimulationLimitError after this many events; 0: no limit
};

// A task's start and end on a rank.
struct TaskSpan {
  uint32_t rank = 0;
  TaskId task = 0;
  SimTime start;
  SimTime end;
};

struct RankOutcome {
  SimTime finish;               // when the rank's last task ended
  int64_t peak_memory_bytes = 0;
  SimTime peak_memory_time;     // when the peak was first reached
  int64_t final_memory_bytes = 0;
};

struct RunResult {
  SimTime end;                     // the latest finish over all ranks
  std::vector<RankOutcome> ranks;  // by rank
  std::vector<TaskSpan> spans;     // recorded ranks' tasks, in order of completion
  uint64_t events = 0;             // events processed
};

// Thrown when a run exceeds EngineOptions::max_events.
class SimulationLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Engine {
 public:
  explicit Engine(std::vector<RankSetup> ranks, EngineOptions options = {});

  // Runs every rank to completion. Throws InternalError on a deadlock (a task that can never
  // start), naming the rank, stream and task.
  RunResult run() const;

  size_t num_ranks() const { return ranks_.size(); }
  const RankSetup& rank(uint32_t index) const { return ranks_[index]; }

 private:
  std::vector<RankSetup> ranks_;
  EngineOptions options_;
  // Group instances renumbered densely (0 .. num_instances_−1), per rank and slot.
  std::vector<std::vector<uint32_t>> dense_instances_;
  uint32_t num_instances_ = 0;
};

}  // namespace paceline

#endif  // PACELINE_SIM_ENGINE_ENGINE_H_
