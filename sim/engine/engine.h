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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
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
  bool record_memory = false;             // keep its memory after each task start and end
};

// Compute slowed by concurrent communication on the same rank. A task that holds SMs (Task::sms
// above 0) is an aggressor: while aggressors run, tasks whose tag is in `victim_tags` progress
// at 1/(1 + slowdown × min(1, s / full_slowdown_sms)) of their speed, s the most SMs a running
// aggressor holds (bit t of a mask stands for tag t). While an aggressor whose tag is also in
// `sm_holder_tags` runs, the part of a victim spent in persistent kernels
// (Task::persistent_duration) is slowed by `persistent_slowdown` instead.
struct Interference {
  uint64_t victim_tags = 0;
  double slowdown = 0.0;
  uint16_t full_slowdown_sms = 1;
  uint64_t sm_holder_tags = 0;
  double persistent_slowdown = 0.0;

  // The slowdown of a victim outside persistent kernels while aggressors holding at most `sms`
  // SMs run beside it.
  double slowdown_beside(uint16_t sms) const {
    return slowdown * std::min(1.0, static_cast<double>(sms) / full_slowdown_sms);
  }
};

// A task run by the ExternalModel, on one rank.
struct TaskRef {
  uint32_t rank = 0;
  TaskId task = 0;
};

// Decides when external tasks finish: the caller's model of a resource shared among them (a
// network whose links concurrent transfers share). Called by one run, on its thread.
class ExternalModel {
 public:
  virtual ~ExternalModel() = default;
  // An external task started at `now`: a rendezvous once with all its members, else one task.
  // `token` names it in advance().
  virtual void start(SimTime now, uint64_t token, std::span<const TaskRef> members) = 0;
  // The earliest time a started task may finish; SimTime::max() when none is running.
  virtual SimTime next_time() = 0;
  // Moves the model to `now` (never past next_time()) and appends the tokens of the tasks that
  // finished, in a deterministic order.
  virtual void advance(SimTime now, std::vector<uint64_t>& finished) = 0;
};

struct EngineOptions {
  uint64_t max_events = 0;  // stop with SimulationLimitError after this many events; 0: no limit
  Interference interference;
  // Stop with SimulationDeadlineError once the wall clock passes this point. The clock is read
  // every 4096 events and only ever aborts the run: it never reaches the schedule, so a run
  // that finishes is bit-identical with or without a deadline.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Set by another thread (an interrupt), it stops the run with SimulationStopped; read when the
  // deadline is, and as unable to reach the schedule.
  const std::atomic<bool>* stop = nullptr;
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
  // The task whose start (or arrival at its rendezvous) first reached it, of those starting at
  // that instant the one that allocated the most; kNoId: the initial memory.
  TaskId peak_memory_task = kNoId;
  int64_t final_memory_bytes = 0;
  // What a caching allocator holds at most: the sum over its pools (Task::alloc_pool and the
  // others) of each pool's peak, the initial memory counted in pool 0, and the blocks a pool
  // caches beside its live bytes counted while they are stranded (Task::stranded_bytes). At least
  // peak_memory_bytes; the same where every task uses pool 0 and strands nothing.
  int64_t peak_reserved_bytes = 0;
};

// A rank's memory after a task started or ended (RankSetup::record_memory).
struct MemorySample {
  uint32_t rank = 0;
  SimTime time;
  int64_t bytes = 0;
};

struct RunResult {
  SimTime end;                     // the latest finish over all ranks
  std::vector<RankOutcome> ranks;  // by rank
  std::vector<TaskSpan> spans;     // recorded ranks' tasks, in order of completion
  // Memory of the ranks that record it: the initial bytes at time zero, then the bytes after each
  // task start and end, in order of events.
  std::vector<MemorySample> memory;
  uint64_t events = 0;             // events processed
};

// Thrown by a run, a simulation or a search whose stop flag another thread has set.
class SimulationStopped : public SimulationLimitError {
 public:
  using SimulationLimitError::SimulationLimitError;
};

// Throws SimulationStopped("`what` was stopped") when `stop` is given and set.
inline void stop_if_asked(const std::atomic<bool>* stop, std::string_view what) {
  if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
    throw SimulationStopped(std::string(what) + " was stopped");
  }
}

// Thrown when a run passes EngineOptions::deadline, after `events` events.
class SimulationDeadlineError : public SimulationLimitError {
 public:
  SimulationDeadlineError(const std::string& message, uint64_t events)
      : SimulationLimitError(message), events_(events) {}
  uint64_t events() const { return events_; }

 private:
  uint64_t events_;
};

class Engine {
 public:
  explicit Engine(std::vector<RankSetup> ranks, EngineOptions options = {});

  // Runs every rank to completion; `external` times the external tasks (required when the
  // programs have any). Throws InternalError on a deadlock (a task that can never start),
  // naming the rank, stream and task.
  RunResult run(ExternalModel* external = nullptr) const;

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
