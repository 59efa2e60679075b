#include "sim/engine/program.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"

namespace paceline {
namespace {

constexpr uint32_t kFreeSlot = kNoId;
constexpr size_t kInitialKindTable = 64;

bool same_kind(const Task& a, const Task& b) {
  return a.stream == b.stream && a.duration == b.duration && a.resource == b.resource &&
         a.alloc_at_start_bytes == b.alloc_at_start_bytes &&
         a.free_at_end_bytes == b.free_at_end_bytes && a.transient_bytes == b.transient_bytes &&
         a.stranded_bytes == b.stranded_bytes && a.alloc_pool == b.alloc_pool &&
         a.free_pool == b.free_pool && a.transient_pool == b.transient_pool && a.tag == b.tag &&
         a.sms == b.sms && a.external == b.external &&
         a.persistent_duration == b.persistent_duration;
}

}  // namespace

std::vector<TaskId> Program::dependencies(TaskId id) const {
  std::vector<TaskId> tasks;
  for (const StreamPosition& d : dependency_positions(id)) {
    tasks.push_back(stream_tasks(d.stream)[d.position]);
  }
  return tasks;
}

ProgramBuilder::ProgramBuilder() : kind_table_(kInitialKindTable, kFreeSlot) {}

size_t ProgramBuilder::slot_of(const Task& kind) const {
  uint64_t h = static_cast<uint64_t>(kind.duration.picoseconds());
  for (const uint64_t field :
       {uint64_t{kind.stream}, uint64_t{kind.resource},
        static_cast<uint64_t>(kind.alloc_at_start_bytes),
        static_cast<uint64_t>(kind.free_at_end_bytes), static_cast<uint64_t>(kind.transient_bytes),
        static_cast<uint64_t>(kind.stranded_bytes),
        uint64_t{kind.transient_pool} << 41 | uint64_t{kind.alloc_pool} << 33 |
            uint64_t{kind.free_pool} << 25 | uint64_t{kind.sms} << 9 | uint64_t{kind.tag} << 1 |
            uint64_t{kind.external},
        static_cast<uint64_t>(kind.persistent_duration.picoseconds())}) {
    h = (h ^ field) * 0x9E3779B97F4A7C15ULL;
  }
  return static_cast<size_t>(h >> 32) & (kind_table_.size() - 1);
}

uint32_t ProgramBuilder::intern(const Task& kind) {
  const size_t mask = kind_table_.size() - 1;
  size_t s = slot_of(kind);
  for (; kind_table_[s] != kFreeSlot; s = (s + 1) & mask) {
    if (same_kind(kinds_[kind_table_[s]], kind)) return kind_table_[s];
  }
  const auto index = static_cast<uint32_t>(kinds_.size());
  Task& stored = kinds_.emplace_back(kind);
  stored.sync = kNoId;
  stored.label = 0;
  kind_table_[s] = index;
  // Keep the table at most half full.
  if (kinds_.size() * 2 > kind_table_.size()) {
    kind_table_.assign(kind_table_.size() * 2, kFreeSlot);
    const size_t grown_mask = kind_table_.size() - 1;
    for (uint32_t k = 0; k < kinds_.size(); ++k) {
      size_t t = slot_of(kinds_[k]);
      while (kind_table_[t] != kFreeSlot) t = (t + 1) & grown_mask;
      kind_table_[t] = k;
    }
  }
  return index;
}

StreamId ProgramBuilder::add_stream(std::string name) {
  stream_names_.push_back(std::move(name));
  return static_cast<StreamId>(stream_names_.size() - 1);
}

ResourceId ProgramBuilder::add_resource(std::string name, uint32_t capacity) {
  PACELINE_CHECK(capacity > 0, "resource " + name + " needs a capacity of at least 1");
  resources_.push_back(Resource{std::move(name), capacity});
  return static_cast<ResourceId>(resources_.size() - 1);
}

SyncId ProgramBuilder::add_sync(SyncPoint sync) {
  PACELINE_CHECK(sync.members >= 1);
  syncs_.push_back(sync);
  return static_cast<SyncId>(syncs_.size() - 1);
}

TaskId ProgramBuilder::add_task(const Task& task) {
  return add_task_of_kind(add_kind(task), task.sync, task.label);
}

uint32_t ProgramBuilder::add_kind(const Task& task) {
  PACELINE_CHECK(task.stream < stream_names_.size(), "task on an unknown stream");
  PACELINE_CHECK(task.resource == kNoId || task.resource < resources_.size(),
                 "task with an unknown resource");
  return intern(task);
}

TaskId ProgramBuilder::add_task_of_kind(uint32_t kind, SyncId sync, uint32_t label) {
  PACELINE_CHECK(kind < kinds_.size(), "task of an unknown kind");
  PACELINE_CHECK(sync == kNoId || sync < syncs_.size(), "task with an unknown sync");
  PACELINE_CHECK(entries_.size() < kNoId - 1, "too many tasks in one program");
  entries_.push_back({kind, sync, label, 0});
  return static_cast<TaskId>(entries_.size() - 1);
}

void ProgramBuilder::add_dependency(TaskId before, TaskId after) {
  PACELINE_CHECK(before < entries_.size() && after < entries_.size() && before != after,
                 "dependency between unknown tasks");
  edges_.emplace_back(before, after);
}

void ProgramBuilder::set_alloc(TaskId id, int64_t bytes, uint8_t pool) {
  PACELINE_CHECK(id < entries_.size(), "set_alloc on an unknown task");
  Task kind = kinds_[entries_[id].kind];
  kind.alloc_at_start_bytes = bytes;
  kind.alloc_pool = pool;
  entries_[id].kind = intern(kind);
}

Program ProgramBuilder::build() && {
  Program program;
  const size_t num_tasks = entries_.size();
  const size_t num_streams = stream_names_.size();
  auto stream_of = [&](TaskId id) { return kinds_[entries_[id].kind].stream; };

  // Stream order: counting sort of tasks by stream, stable in insertion order.
  program.stream_offsets_.assign(num_streams + 1, 0);
  for (TaskId id = 0; id < num_tasks; ++id) ++program.stream_offsets_[stream_of(id) + 1];
  for (size_t s = 0; s < num_streams; ++s) program.stream_offsets_[s + 1] += program.stream_offsets_[s];
  program.stream_order_.resize(num_tasks);
  {
    std::vector<uint32_t> fill(program.stream_offsets_.begin(), program.stream_offsets_.end() - 1);
    for (TaskId id = 0; id < num_tasks; ++id) {
      const StreamId s = stream_of(id);
      entries_[id].position = fill[s] - program.stream_offsets_[s];
      program.stream_order_[fill[s]++] = id;
    }
  }

  // Dependencies (as stream positions) and dependents, both in compressed rows, each row in
  // insertion order.
  auto offsets_by = [num_tasks, this](bool by_after, std::vector<uint32_t>& offsets) {
    offsets.assign(num_tasks + 1, 0);
    for (const auto& [before, after] : edges_) ++offsets[(by_after ? after : before) + 1];
    for (size_t i = 0; i < num_tasks; ++i) offsets[i + 1] += offsets[i];
    return std::vector<uint32_t>(offsets.begin(), offsets.end() - 1);
  };
  std::vector<uint32_t> fill = offsets_by(/*by_after=*/true, program.dependency_offsets_);
  program.dependency_positions_.resize(edges_.size());
  for (const auto& [before, after] : edges_) {
    program.dependency_positions_[fill[after]++] = {stream_of(before), entries_[before].position};
  }
  fill = offsets_by(/*by_after=*/false, program.dependent_offsets_);
  program.dependents_.resize(edges_.size());
  for (const auto& [before, after] : edges_) program.dependents_[fill[before]++] = after;

  for (const SyncPoint& sync : syncs_) program.num_slots_ = std::max(program.num_slots_, sync.slot + 1);
  for (const Task& kind : kinds_) {
    PACELINE_CHECK(
        std::max({kind.alloc_pool, kind.free_pool, kind.transient_pool}) < kMaxAllocatorPools,
        fmt::format("a task uses allocator pools {}, {} and {}; at most {} pools", kind.alloc_pool,
                    kind.free_pool, kind.transient_pool, kMaxAllocatorPools));
    PACELINE_CHECK(kind.stranded_bytes >= 0, "a task strands a negative number of bytes");
  }
  program.stream_names_ = std::move(stream_names_);
  program.kinds_ = std::move(kinds_);
  program.entries_ = std::move(entries_);
  program.syncs_ = std::move(syncs_);
  program.resources_ = std::move(resources_);
  return program;
}

}  // namespace paceline
