// Program: the immutable work of one simulated rank — tasks on in-order streams, with
// dependencies, memory effects and synchronization with other ranks.
//
// A stream is an in-order queue, like a CUDA stream: a task starts only after the task before
// it on the same stream has finished and every task it depends on (on any stream) has finished.
// A task with a SyncPoint is a rendezvous: it starts on every member rank at once, when the
// last member reaches it (collectives, send/recv pairs). The engine knows nothing else about
// what a task means: `label` and `tag` are opaque indices the caller interprets.
//
// Built with ProgramBuilder, then shared read-only (shared_ptr<const Program>) by every rank
// that runs the same role.
#ifndef PACELINE_SIM_ENGINE_PROGRAM_H_
#define PACELINE_SIM_ENGINE_PROGRAM_H_

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sim/engine/sim_time.h"

namespace paceline {

using TaskId = uint32_t;
using StreamId = uint32_t;
using ResourceId = uint32_t;
using SyncId = uint32_t;
inline constexpr uint32_t kNoId = std::numeric_limits<uint32_t>::max();
// The most caching-allocator pools a program's tasks may use (Task::alloc_pool).
inline constexpr uint32_t kMaxAllocatorPools = 4;

// A rendezvous point. Member ranks meet at the instance their group table maps `slot` to;
// `sequence` distinguishes successive rendezvous of one group; `members` ranks must arrive.
struct SyncPoint {
  uint32_t slot = 0;
  uint32_t sequence = 0;
  uint32_t members = 1;
};

struct Task {
  StreamId stream = 0;
  SyncId sync = kNoId;  // index into Program::syncs(), or kNoId
  // How long the task runs once started. For a rendezvous: the time from the last arrival.
  SimTime duration;
  ResourceId resource = kNoId;  // a resource unit held while running, or kNoId
  uint32_t label = 0;           // opaque to the engine: the caller's description of the task
  // Memory effects on the rank, in bytes: allocated when the task starts (and kept),
  // freed when it ends, and held only while it runs.
  int64_t alloc_at_start_bytes = 0;
  int64_t free_at_end_bytes = 0;
  int64_t transient_bytes = 0;
  // Blocks the transient pool caches while the task runs that are too small for the buffers it
  // asks for (freed by smaller buffers before it), so the allocator reserves new memory beside
  // them: they count in the pool's high-water mark, not in the rank's live memory.
  int64_t stranded_bytes = 0;
  uint8_t tag = 0;  // opaque to the engine: the caller's activity class
  // The caching-allocator pools the memory effects go to. An allocator like PyTorch's keeps what
  // a pool frees for that pool's own later allocations (a pool per stream that allocates), so
  // each pool holds on to its own high-water mark.
  uint8_t alloc_pool = 0;      // of alloc_at_start_bytes
  uint8_t free_pool = 0;       // of free_at_end_bytes
  uint8_t transient_pool = 0;  // of transient_bytes
  // Its duration is decided by the run's ExternalModel (a network shared by concurrent
  // transfers) instead of `duration`.
  bool external = false;
  // SMs its kernel holds beside the rank's other work (a communication kernel's thread
  // blocks): above 0 it slows the rank's compute while it runs (Interference).
  uint16_t sms = 0;
  // Of `duration`, the time in persistent kernels (a thread block per SM, each over a fixed
  // share of the work): those whose blocks find SMs held by another kernel wait for them.
  SimTime persistent_duration;
};

struct Resource {
  std::string name;
  uint32_t capacity = 1;
};

// A program's tasks repeat a few kinds (one per layer template and pass), so a task is
// stored as its kind (every field but `sync` and `label`, shared through a table of distinct
// kinds) plus its own sync and label: a few bytes per task instead of a whole Task, which
// keeps the programs of many ranks in cache during a run.
class Program {
 public:
  size_t num_tasks() const { return entries_.size(); }
  // The task `id`, by value: its kind's fields with its own sync and label.
  Task task(TaskId id) const {
    const Entry& e = entries_[id];
    Task task = kinds_[e.kind];
    task.sync = e.sync;
    task.label = e.label;
    return task;
  }
  size_t num_streams() const { return stream_names_.size(); }
  const std::string& stream_name(StreamId id) const { return stream_names_[id]; }
  // Tasks of a stream in issue order.
  std::span<const TaskId> stream_tasks(StreamId id) const {
    return {stream_order_.data() + stream_offsets_[id], stream_offsets_[id + 1] - stream_offsets_[id]};
  }
  // Where each dependency of `id` sits: its stream and its position there (the engine decides
  // whether a dependency finished from its stream's progress alone).
  struct StreamPosition {
    StreamId stream;
    uint32_t position;
  };
  std::span<const StreamPosition> dependency_positions(TaskId id) const {
    return {dependency_positions_.data() + dependency_offsets_[id],
            dependency_offsets_[id + 1] - dependency_offsets_[id]};
  }
  // Tasks that must finish before `id` starts (besides its stream predecessor), in the order
  // they were declared.
  std::vector<TaskId> dependencies(TaskId id) const;
  // Tasks that list `id` among their dependencies.
  std::span<const TaskId> dependents(TaskId id) const {
    return {dependents_.data() + dependent_offsets_[id], dependent_offsets_[id + 1] - dependent_offsets_[id]};
  }
  // The fields `id` shares with its kind — all but sync and label (left at their defaults) —
  // and its sync point: what the engine reads on every event, without copying a Task.
  const Task& kind(TaskId id) const { return kinds_[entries_[id].kind]; }
  SyncId sync(TaskId id) const { return entries_[id].sync; }
  // Position of a task in its stream.
  uint32_t stream_position(TaskId id) const { return entries_[id].position; }
  std::span<const SyncPoint> syncs() const { return syncs_; }
  std::span<const Resource> resources() const { return resources_; }
  // The number of distinct group slots the program's sync points use.
  uint32_t num_slots() const { return num_slots_; }

 private:
  friend class ProgramBuilder;
  struct Entry {
    uint32_t kind;      // index into kinds_
    SyncId sync;
    uint32_t label;
    uint32_t position;  // in its stream
  };
  std::vector<std::string> stream_names_;
  std::vector<Task> kinds_;  // distinct tasks up to sync and label (both left at their defaults)
  std::vector<Entry> entries_;
  std::vector<uint32_t> stream_offsets_;
  std::vector<TaskId> stream_order_;
  std::vector<uint32_t> dependency_offsets_;
  std::vector<StreamPosition> dependency_positions_;
  std::vector<uint32_t> dependent_offsets_;
  std::vector<TaskId> dependents_;
  std::vector<SyncPoint> syncs_;
  std::vector<Resource> resources_;
  uint32_t num_slots_ = 0;
};

// Builds a Program. Tasks join their stream in the order they are added.
class ProgramBuilder {
 public:
  ProgramBuilder();
  StreamId add_stream(std::string name);
  ResourceId add_resource(std::string name, uint32_t capacity);
  SyncId add_sync(SyncPoint sync);
  TaskId add_task(const Task& task);
  // The same in two steps, for callers that add many tasks of one kind: the kind of `task`
  // (every field but sync and label), then a task of that kind with its own sync and label.
  uint32_t add_kind(const Task& task);
  TaskId add_task_of_kind(uint32_t kind, SyncId sync, uint32_t label);
  // `before` must finish before `after` starts.
  void add_dependency(TaskId before, TaskId after);
  // Sets the memory a task allocates when it starts, and the pool it comes from.
  void set_alloc(TaskId id, int64_t bytes, uint8_t pool = 0);
  size_t num_tasks() const { return entries_.size(); }

  // Checks the references (streams, syncs, resources, dependency ids) and lays out the
  // adjacency. Dependencies are kept in the order they were added.
  Program build() &&;

 private:
  // The index of `kind` (sync and label ignored) in kinds_, added when new.
  uint32_t intern(const Task& kind);
  size_t slot_of(const Task& kind) const;

  std::vector<std::string> stream_names_;
  std::vector<Task> kinds_;
  // Finds a kind: linear probing over a power-of-two array of indices into kinds_.
  std::vector<uint32_t> kind_table_;
  std::vector<Program::Entry> entries_;
  std::vector<std::pair<TaskId, TaskId>> edges_;  // (before, after)
  std::vector<SyncPoint> syncs_;
  std::vector<Resource> resources_;
};

}  // namespace paceline

#endif  // PACELINE_SIM_ENGINE_PROGRAM_H_
