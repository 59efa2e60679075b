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
}

}  // namespace
}  // namespace paceline
