#include "sim/engine/program.h"

#include <algorithm>

#include "base/check.h"

namespace paceline {

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
  PACELINE_CHECK(task.stream < stream_names_.size(), "task on an unknown stream");
  PACELINE_CHECK(task.sync == kNoId || task.sync < syncs_.size(), "task with an unknown sync");
  PACELINE_CHECK(task.resource == kNoId || task.resource < resources_.size(),
                 "task with an unknown resource");
  PACELINE_CHECK(tasks_.size() < kNoId - 1, "too many tasks in one program");
  tasks_.push_back(task);
  return static_cast<TaskId>(tasks_.size() - 1);
}

void ProgramBuilder::add_dependency(TaskId before, TaskId after) {
  PACELINE_CHECK(before < tasks_.size() && after < tasks_.size() && before != after,
                 "dependency between unknown tasks");
  edges_.emplace_back(before, after);
}

void ProgramBuilder::set_alloc(TaskId id, int64_t bytes) {
  PACELINE_CHECK(id < tasks_.size(), "set_alloc on an unknown task");
  tasks_[id].alloc_at_start_bytes = bytes;
}

Program ProgramBuilder::build() && {
  Program program;
  const size_t num_tasks = tasks_.size();
  const size_t num_streams = stream_names_.size();

  // Stream order: counting sort of tasks by stream, stable in insertion order.
  program.stream_offsets_.assign(num_streams + 1, 0);
  for (const Task& t : tasks_) ++program.stream_offsets_[t.stream + 1];
  for (size_t s = 0; s < num_streams; ++s) program.stream_offsets_[s + 1] += program.stream_offsets_[s];
  program.stream_order_.resize(num_tasks);
  program.stream_position_.resize(num_tasks);
  {
    std::vector<uint32_t> fill(program.stream_offsets_.begin(), program.stream_offsets_.end() - 1);
    for (TaskId id = 0; id < num_tasks; ++id) {
      const StreamId s = tasks_[id].stream;
      program.stream_position_[id] = fill[s] - program.stream_offsets_[s];
      program.stream_order_[fill[s]++] = id;
    }
  }

  // Dependencies and dependents, both in compressed rows, each row in insertion order.
  auto compress = [num_tasks](const std::vector<std::pair<TaskId, TaskId>>& edges, bool by_after,
                              std::vector<uint32_t>& offsets, std::vector<TaskId>& targets) {
    offsets.assign(num_tasks + 1, 0);
    for (const auto& [before, after] : edges) ++offsets[(by_after ? after : before) + 1];
    for (size_t i = 0; i < num_tasks; ++i) offsets[i + 1] += offsets[i];
    targets.resize(edges.size());
    std::vector<uint32_t> fill(offsets.begin(), offsets.end() - 1);
    for (const auto& [before, after] : edges) {
      const TaskId row = by_after ? after : before;
      targets[fill[row]++] = by_after ? before : after;
    }
  };
  compress(edges_, /*by_after=*/true, program.dependency_offsets_, program.dependencies_);
  compress(edges_, /*by_after=*/false, program.dependent_offsets_, program.dependents_);
  program.dependency_positions_.reserve(program.dependencies_.size());
  for (const TaskId d : program.dependencies_) {
    program.dependency_positions_.push_back({tasks_[d].stream, program.stream_position_[d]});
  }

  for (const SyncPoint& sync : syncs_) program.num_slots_ = std::max(program.num_slots_, sync.slot + 1);
  program.stream_names_ = std::move(stream_names_);
  program.tasks_ = std::move(tasks_);
  program.syncs_ = std::move(syncs_);
  program.resources_ = std::move(resources_);
  return program;
}

}  // namespace paceline
