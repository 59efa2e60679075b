// Tests sim/engine/program.h: stream order and the dependency adjacency the builder lays out.
#include "sim/engine/program.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/check.h"

namespace paceline {
namespace {

TEST(ProgramBuilder, StreamsKeepInsertionOrder) {
  ProgramBuilder b;
  const StreamId compute = b.add_stream("compute");
  const StreamId comm = b.add_stream("comm");
  const TaskId a = b.add_task({.stream = compute});
  const TaskId x = b.add_task({.stream = comm});
  const TaskId c = b.add_task({.stream = compute});
  b.add_dependency(a, x);
  b.add_dependency(x, c);
  const Program p = std::move(b).build();
  EXPECT_EQ(std::vector<TaskId>(p.stream_tasks(compute).begin(), p.stream_tasks(compute).end()),
            (std::vector<TaskId>{a, c}));
  EXPECT_EQ(p.stream_position(c), 1u);
  EXPECT_EQ(p.dependencies(c).size(), 1u);
  EXPECT_EQ(p.dependencies(c)[0], x);
  EXPECT_EQ(p.dependents(a)[0], x);
}

TEST(ProgramBuilder, RejectsBadReferences) {
  ProgramBuilder b;
  b.add_stream("s");
  EXPECT_THROW(b.add_task({.stream = 3}), InternalError);
  const TaskId t = b.add_task({.stream = 0});
  EXPECT_THROW(b.add_dependency(t, t), InternalError);
  EXPECT_THROW(b.add_dependency(t, 7), InternalError);
  EXPECT_THROW(b.add_task_of_kind(5, kNoId, 0), InternalError);
  EXPECT_THROW(b.add_task_of_kind(0, 2, 0), InternalError);
}

TEST(ProgramBuilder, ATaskOfAKindIsTheTaskAddedWhole) {
  ProgramBuilder b;
  const StreamId compute = b.add_stream("compute");
  const SyncId sync = b.add_sync({.slot = 0, .sequence = 0, .members = 2});
  const Task whole{.stream = compute,
                   .sync = sync,
                   .duration = to_sim_time(Microseconds(3)),
                   .label = 7,
                   .transient_bytes = 64,
                   .sms = 4};
  const TaskId added = b.add_task(whole);
  const uint32_t kind = b.add_kind(whole);
  const TaskId of_kind = b.add_task_of_kind(kind, sync, 7);
  // A kind differs from another in any field but sync and label.
  Task longer = whole;
  longer.duration = to_sim_time(Microseconds(4));
  EXPECT_NE(b.add_kind(longer), kind);
  EXPECT_EQ(b.add_kind({.stream = compute,
                        .duration = whole.duration,
                        .label = 99,
                        .transient_bytes = 64,
                        .sms = 4}),
            kind);
  const Program p = std::move(b).build();
  for (const TaskId id : {added, of_kind}) {
    const Task t = p.task(id);
    EXPECT_EQ(t.duration, whole.duration);
    EXPECT_EQ(t.transient_bytes, 64);
    EXPECT_EQ(t.sms, 4);
    EXPECT_EQ(t.sync, sync);
    EXPECT_EQ(t.label, 7u);
  }
  EXPECT_EQ(&p.kind(added), &p.kind(of_kind));
}

}  // namespace
}  // namespace paceline
