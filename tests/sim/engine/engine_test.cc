// Tests sim/engine/engine.h: stream order, cross-stream dependencies, rendezvous across ranks,
// resources, memory peaks, deadlock detection and bit-identical reruns.
#include "sim/engine/engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"

namespace paceline {
namespace {

SimTime us(double n) { return to_sim_time(Microseconds(n)); }

std::shared_ptr<const Program> share(ProgramBuilder&& b) {
  return std::make_shared<const Program>(std::move(b).build());
}

RankSetup rank_of(std::shared_ptr<const Program> program, std::vector<uint32_t> groups = {}) {
  return RankSetup{std::move(program), std::move(groups), 0, true};
}

// What the one rank of `b` ends with, run from `initial_memory_bytes`.
RankOutcome run_from(ProgramBuilder&& b, int64_t initial_memory_bytes) {
  RankSetup setup = rank_of(share(std::move(b)));
  setup.initial_memory_bytes = initial_memory_bytes;
  return Engine({setup}).run().ranks[0];
}

SimTime span_end(const RunResult& r, uint32_t rank, TaskId task) {
  for (const TaskSpan& s : r.spans) {
    if (s.rank == rank && s.task == task) return s.end;
  }
  ADD_FAILURE() << "no span for rank " << rank << " task " << task;
  return SimTime::zero();
}

SimTime span_start(const RunResult& r, uint32_t rank, TaskId task) {
  for (const TaskSpan& s : r.spans) {
    if (s.rank == rank && s.task == task) return s.start;
  }
  ADD_FAILURE() << "no span for rank " << rank << " task " << task;
  return SimTime::zero();
}

TEST(Engine, StreamRunsTasksBackToBack) {
  ProgramBuilder b;
  const StreamId s = b.add_stream("compute");
  b.add_task({.stream = s, .duration = us(3)});
  b.add_task({.stream = s, .duration = us(4)});
  const RunResult r = Engine({rank_of(share(std::move(b)))}).run();
  // 3 us + 4 us in sequence.
  EXPECT_EQ(r.end, us(7));
  EXPECT_EQ(r.events, 2u);
}

TEST(Engine, StreamsOverlapUnlessDependent) {
  // compute: A(10) then C(5); comm: X(4) depends on A. C runs beside X: end = 10 + max(5, 4).
  ProgramBuilder b;
  const StreamId compute = b.add_stream("compute");
  const StreamId comm = b.add_stream("comm");
  const TaskId a = b.add_task({.stream = compute, .duration = us(10)});
  const TaskId c = b.add_task({.stream = compute, .duration = us(5)});
  const TaskId x = b.add_task({.stream = comm, .duration = us(4)});
  b.add_dependency(a, x);
  const RunResult r = Engine({rank_of(share(std::move(b)))}).run();
  EXPECT_EQ(span_start(r, 0, x), us(10));
  EXPECT_EQ(span_end(r, 0, c), us(15));
  EXPECT_EQ(r.end, us(15));
}

TEST(Engine, DependencyOnAnotherStreamDelaysTheStream) {
  // comm X(8) from 0; compute A(2) must wait for X: A runs 8..10.
  ProgramBuilder b;
  const StreamId compute = b.add_stream("compute");
  const StreamId comm = b.add_stream("comm");
  const TaskId x = b.add_task({.stream = comm, .duration = us(8)});
  const TaskId a = b.add_task({.stream = compute, .duration = us(2)});
  b.add_dependency(x, a);
  const RunResult r = Engine({rank_of(share(std::move(b)))}).run();
  EXPECT_EQ(span_start(r, 0, a), us(8));
  EXPECT_EQ(r.end, us(10));
}

TEST(Engine, RendezvousStartsAtTheLastArrival) {
  // Two ranks meet in one group (slot 0 → instance 7). Rank 0 reaches the collective at 2 us,
  // rank 1 at 5 us; the collective (3 us) runs 5..8 on both.
  auto program_with_lead = [](double lead_us) {
    ProgramBuilder b;
    const StreamId compute = b.add_stream("compute");
    const StreamId comm = b.add_stream("comm");
    const TaskId work = b.add_task({.stream = compute, .duration = us(lead_us)});
    const SyncId sync = b.add_sync({.slot = 0, .sequence = 0, .members = 2});
    const TaskId collective = b.add_task({.stream = comm, .sync = sync, .duration = us(3)});
    b.add_dependency(work, collective);
    return share(std::move(b));
  };
  const RunResult r = Engine({rank_of(program_with_lead(2), {7}), rank_of(program_with_lead(5), {7})}).run();
  EXPECT_EQ(span_start(r, 0, 1), us(5));
  EXPECT_EQ(span_end(r, 0, 1), us(8));
  EXPECT_EQ(span_end(r, 1, 1), us(8));
  EXPECT_EQ(r.ranks[0].finish, us(8));
}

TEST(Engine, SeparateGroupInstancesDoNotMeet) {
  // Same program, but two pairs of ranks in different instances: each pair completes alone.
  ProgramBuilder b;
  const StreamId comm = b.add_stream("comm");
  const SyncId sync = b.add_sync({.slot = 0, .sequence = 0, .members = 2});
  b.add_task({.stream = comm, .sync = sync, .duration = us(1)});
  auto p = share(std::move(b));
  const RunResult r = Engine({rank_of(p, {0}), rank_of(p, {1}), rank_of(p, {0}), rank_of(p, {1})}).run();
  EXPECT_EQ(r.end, us(1));
}

TEST(Engine, MissingRendezvousMemberIsADeadlock) {
  ProgramBuilder b;
  const StreamId comm = b.add_stream("comm");
  const SyncId sync = b.add_sync({.slot = 0, .sequence = 0, .members = 2});
  b.add_task({.stream = comm, .sync = sync, .duration = us(1)});
  try {
    Engine({rank_of(share(std::move(b)), {0})}).run();
    FAIL() << "a rendezvous with one of two members must not complete";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("waits for a rendezvous"), std::string::npos) << e.what();
  }
}

TEST(Engine, ResourceLimitsConcurrency) {
  // Three streams each want the single unit of one resource for 2 us: they run one after
  // another (0..2, 2..4, 4..6), in task order.
  ProgramBuilder b;
  const ResourceId engine_unit = b.add_resource("copy engine", 1);
  for (int i = 0; i < 3; ++i) {
    const StreamId s = b.add_stream(fmt::format("s{}", i));
    b.add_task({.stream = s, .duration = us(2), .resource = engine_unit});
  }
  const RunResult r = Engine({rank_of(share(std::move(b)))}).run();
  EXPECT_EQ(span_start(r, 0, 0), us(0));
  EXPECT_EQ(span_start(r, 0, 1), us(2));
  EXPECT_EQ(span_start(r, 0, 2), us(4));
  EXPECT_EQ(r.end, us(6));
}

TEST(Engine, MemoryPeakFollowsTheSchedule) {
  // 100 B resident; A keeps 50 B, B holds 30 B transiently, C frees A's 50 B.
  // Peak = 100 + 50 + 30 = 180 B while B runs; final = 100 B.
  ProgramBuilder b;
  const StreamId s = b.add_stream("compute");
  b.add_task({.stream = s, .duration = us(1), .alloc_at_start_bytes = 50});
  b.add_task({.stream = s, .duration = us(1), .transient_bytes = 30});
  b.add_task({.stream = s, .duration = us(1), .free_at_end_bytes = 50});
  RankSetup setup = rank_of(share(std::move(b)));
  setup.initial_memory_bytes = 100;
  setup.record_memory = true;
  const RunResult r = Engine({setup}).run();
  EXPECT_EQ(r.ranks[0].peak_memory_bytes, 180);
  EXPECT_EQ(r.ranks[0].peak_memory_time, us(1));
  EXPECT_EQ(r.ranks[0].peak_memory_task, 1u);
  EXPECT_EQ(r.ranks[0].final_memory_bytes, 100);
  // The recorded rank's memory after each start and end, from the initial bytes at time zero.
  std::vector<std::pair<SimTime, int64_t>> samples;
  for (const MemorySample& m : r.memory) samples.emplace_back(m.time, m.bytes);
  const std::vector<std::pair<SimTime, int64_t>> expected = {
      {us(0), 100}, {us(0), 150}, {us(1), 150}, {us(1), 180},
      {us(2), 150}, {us(2), 150}, {us(3), 100}};
  EXPECT_EQ(samples, expected);
}

TEST(Engine, ReservedMemorySumsEachAllocatorPoolsPeak) {
  // 100 B resident in pool 0. A gather stream allocates 40 B in pool 1 for each of two blocks,
  // the compute stream copying each out into 40 B of pool 0 and freeing the gather's 40 B: pool 1
  // never holds more than 40 B and pool 0 peaks at 100 + 80 + a later 30 B transient. The live
  // bytes peak at 220, as the second copy starts beside the second gather's 40 B; reserved:
  // 210 + 40 = 250.
  ProgramBuilder b;
  const StreamId gathers = b.add_stream("gathers");
  const StreamId compute = b.add_stream("compute");
  const TaskId first = b.add_task(
      {.stream = gathers, .duration = us(1), .alloc_at_start_bytes = 40, .alloc_pool = 1});
  const TaskId first_copy = b.add_task({.stream = compute,
                                        .duration = us(1),
                                        .alloc_at_start_bytes = 40,
                                        .free_at_end_bytes = 40,
                                        .free_pool = 1});
  b.add_dependency(first, first_copy);
  const TaskId second = b.add_task(
      {.stream = gathers, .duration = us(1), .alloc_at_start_bytes = 40, .alloc_pool = 1});
  b.add_dependency(first_copy, second);
  const TaskId second_copy = b.add_task({.stream = compute,
                                         .duration = us(1),
                                         .alloc_at_start_bytes = 40,
                                         .free_at_end_bytes = 40,
                                         .free_pool = 1});
  b.add_dependency(second, second_copy);
  b.add_task(
      {.stream = compute, .duration = us(1), .free_at_end_bytes = 80, .transient_bytes = 30});
  const RankOutcome outcome = run_from(std::move(b), 100);
  EXPECT_EQ(outcome.peak_memory_bytes, 220);
  EXPECT_EQ(outcome.peak_reserved_bytes, 250);
  EXPECT_EQ(outcome.final_memory_bytes, 100);
}

TEST(Engine, ATasksTransientBytesMayComeFromAnotherPool) {
  // A collective keeps 10 B of its output in pool 1 while staging its 20 B input in pool 0; the
  // next task frees the output, and a 25 B transient of pool 0 reuses what the input freed. Pool
  // 0 peaks at 100 + 25, pool 1 at 10: 135 reserved, where the live peak is 130.
  ProgramBuilder b;
  const StreamId s = b.add_stream("comm");
  b.add_task({.stream = s,
              .duration = us(1),
              .alloc_at_start_bytes = 10,
              .transient_bytes = 20,
              .alloc_pool = 1});
  b.add_task({.stream = s, .duration = us(1), .free_at_end_bytes = 10, .free_pool = 1});
  b.add_task({.stream = s, .duration = us(1), .transient_bytes = 25});
  const RankOutcome outcome = run_from(std::move(b), 100);
  EXPECT_EQ(outcome.peak_memory_bytes, 130);
  EXPECT_EQ(outcome.peak_reserved_bytes, 135);
}

TEST(Engine, StrandedBlocksCountInTheirPoolsReservePeakNotInLiveMemory) {
  // A task keeps 40 B of pool 0 and runs with 20 B transient (pool 0 peaks at 160); the next runs
  // with 30 B of pool 1 transient beside 15 B stranded there, then frees 20 B: pool 1 reserves
  // 45 B while live memory peaks at 100 + 40 + 30. A later task strands 5 B of pool 0 beside 10 B
  // transient, under pool 0's earlier peak.
  ProgramBuilder b;
  const StreamId s = b.add_stream("compute");
  b.add_task({.stream = s, .duration = us(1), .alloc_at_start_bytes = 40, .transient_bytes = 20});
  b.add_task({.stream = s,
              .duration = us(1),
              .free_at_end_bytes = 20,
              .transient_bytes = 30,
              .stranded_bytes = 15,
              .transient_pool = 1});
  b.add_task({.stream = s, .duration = us(1), .transient_bytes = 10, .stranded_bytes = 5});
  const RankOutcome outcome = run_from(std::move(b), 100);
  EXPECT_EQ(outcome.peak_memory_bytes, 170);
  EXPECT_EQ(outcome.peak_reserved_bytes, 160 + 45);
  EXPECT_EQ(outcome.final_memory_bytes, 120);
}

TEST(Engine, ReservedMemoryIsThePeakWithOnePool) {
  ProgramBuilder b;
  const StreamId s = b.add_stream("compute");
  b.add_task({.stream = s, .duration = us(1), .alloc_at_start_bytes = 50});
  b.add_task({.stream = s, .duration = us(1), .free_at_end_bytes = 50});
  b.add_task({.stream = s, .duration = us(1), .transient_bytes = 30});
  const RankOutcome outcome = run_from(std::move(b), 100);
  EXPECT_EQ(outcome.peak_memory_bytes, 150);
  EXPECT_EQ(outcome.peak_reserved_bytes, 150);
}

TEST(Engine, OfTasksStartingTogetherThePeakIsPutAtTheOneAllocatingTheMost) {
  // A 40 B task and a 1 B task start together, in either stream order: the peak is the big one's.
  for (const bool big_first : {true, false}) {
    ProgramBuilder b;
    const StreamId first = b.add_stream("first");
    const StreamId second = b.add_stream("second");
    const TaskId one =
        b.add_task({.stream = first, .duration = us(1), .transient_bytes = big_first ? 40 : 1});
    const TaskId other =
        b.add_task({.stream = second, .duration = us(1), .transient_bytes = big_first ? 1 : 40});
    const RunResult r = Engine({rank_of(share(std::move(b)))}).run();
    EXPECT_EQ(r.ranks[0].peak_memory_bytes, 41);
    EXPECT_EQ(r.ranks[0].peak_memory_task, big_first ? one : other) << big_first;
  }
}

TEST(Engine, RecordsMemoryOnlyOfTheRanksAskedAndNoPeakTaskWhenNothingRises) {
  // Rank 0 records its memory; rank 1 does not, and only frees what it started with.
  const auto program = [](int64_t alloc_bytes, int64_t free_bytes) {
    ProgramBuilder b;
    const StreamId s = b.add_stream("compute");
    b.add_task({.stream = s,
                .duration = us(1),
                .alloc_at_start_bytes = alloc_bytes,
                .free_at_end_bytes = free_bytes});
    return share(std::move(b));
  };
  RankSetup recording = rank_of(program(5, 0));
  recording.record_memory = true;
  RankSetup quiet = rank_of(program(0, 10));
  quiet.initial_memory_bytes = 10;
  const RunResult r = Engine({recording, quiet}).run();
  ASSERT_EQ(r.memory.size(), 3u);
  for (const MemorySample& m : r.memory) EXPECT_EQ(m.rank, 0u);
  EXPECT_EQ(r.memory.back().bytes, 5);
  EXPECT_EQ(r.ranks[0].peak_memory_task, 0u);
  EXPECT_EQ(r.ranks[1].peak_memory_bytes, 10);
  EXPECT_EQ(r.ranks[1].peak_memory_task, kNoId);
}

TEST(Engine, MaxEventsStopsTheRun) {
  ProgramBuilder b;
  const StreamId s = b.add_stream("compute");
  for (int i = 0; i < 10; ++i) b.add_task({.stream = s, .duration = us(1)});
  EXPECT_THROW(Engine({rank_of(share(std::move(b)))}, EngineOptions{.max_events = 5}).run(),
               SimulationLimitError);
}

// A many-rank workload with ties: every rank's tasks have equal durations, so completion
// order depends only on the tie-breaking rule.
Engine tied_workload() {
  std::vector<RankSetup> ranks;
  ProgramBuilder b;
  const StreamId compute = b.add_stream("compute");
  const StreamId comm = b.add_stream("comm");
  TaskId previous = kNoId;
  for (uint32_t i = 0; i < 50; ++i) {
    const TaskId work = b.add_task({.stream = compute, .duration = us(1), .alloc_at_start_bytes = 7});
    const SyncId sync = b.add_sync({.slot = 0, .sequence = i, .members = 8});
    const TaskId reduce =
        b.add_task({.stream = comm, .sync = sync, .duration = us(1), .free_at_end_bytes = 7});
    b.add_dependency(work, reduce);
    if (previous != kNoId) b.add_dependency(previous, work);
    previous = work;
  }
  auto p = share(std::move(b));
  for (uint32_t r = 0; r < 32; ++r) ranks.push_back(rank_of(p, {r / 8}));
  return Engine(std::move(ranks));
}

bool identical(const RunResult& a, const RunResult& b) {
  if (a.end != b.end || a.events != b.events || a.spans.size() != b.spans.size()) return false;
  for (size_t i = 0; i < a.spans.size(); ++i) {
    if (a.spans[i].rank != b.spans[i].rank || a.spans[i].task != b.spans[i].task ||
        a.spans[i].start != b.spans[i].start || a.spans[i].end != b.spans[i].end) {
      return false;
    }
  }
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    if (a.ranks[r].peak_memory_bytes != b.ranks[r].peak_memory_bytes ||
        a.ranks[r].peak_memory_time != b.ranks[r].peak_memory_time) {
      return false;
    }
  }
  return true;
}

TEST(Engine, RerunsAreBitIdentical) {
  const Engine engine = tied_workload();
  EXPECT_TRUE(identical(engine.run(), engine.run()));
}

TEST(Engine, EnginesOnThreadsAgreeWithASerialRun) {
  const Engine engine = tied_workload();
  const RunResult serial = engine.run();
  std::vector<RunResult> parallel(4);
  std::vector<std::thread> threads;
  for (auto& out : parallel) threads.emplace_back([&out] { out = tied_workload().run(); });
  for (auto& t : threads) t.join();
  for (const RunResult& r : parallel) EXPECT_TRUE(identical(serial, r));
}

}  // namespace
}  // namespace paceline

namespace paceline {
namespace {

TEST(Engine, CommunicationSlowsOverlappingCompute) {
  // Compute A (tag 0) runs 10 us; communication X (tag 1, holding 16 SMs) runs 4 us from 2 us.
  // With a slowdown of 0.25 beside 16 SMs, A advances at 1/1.25 while X runs: by 2 us it has done
  // 2, from 2 to 6 us it does 4/1.25 = 3.2, and the last 4.8 us run at full speed: 10.8 us.
  ProgramBuilder b;
  const StreamId compute = b.add_stream("compute");
  const StreamId comm = b.add_stream("comm");
  const StreamId timer = b.add_stream("timer");
  b.add_task({.stream = compute, .duration = us(10), .tag = 0});
  const TaskId delay = b.add_task({.stream = timer, .duration = us(2)});
  const TaskId x = b.add_task({.stream = comm, .duration = us(4), .tag = 1, .sms = 16});
  b.add_dependency(delay, x);
  EngineOptions options;
  options.interference = Interference{.victim_tags = 1u << 0, .slowdown = 0.25, .full_slowdown_sms = 16};
  const RunResult r = Engine({rank_of(share(std::move(b)))}, options).run();
  EXPECT_EQ(span_end(r, 0, 0), us(10.8));
}

TEST(Engine, CommunicationSlowsComputeByTheMostSmsHeld) {
  // As above, with X holding 2 SMs, 2/16 of the slowdown: A does 4/1.03125 from 2 to 6 us and
  // ends at 6 + (8 - 4/1.03125). Holding 32, no more than 16 do. With X (16 SMs, 2 to 6 us) and
  // Y (2 SMs, 2 to 10 us) both: 3.2 from 2 to 6 us at the slowdown of the most SMs, 4/1.03125
  // from 6 to 10 us, the rest at full speed.
  const auto end_of_a = [](std::vector<std::pair<uint16_t, double>> aggressors) {
    ProgramBuilder b;
    const StreamId compute = b.add_stream("compute");
    const StreamId timer = b.add_stream("timer");
    b.add_task({.stream = compute, .duration = us(10), .tag = 0});
    const TaskId delay = b.add_task({.stream = timer, .duration = us(2)});
    for (const auto& [sms, duration_us] : aggressors) {
      const StreamId comm = b.add_stream(fmt::format("comm{}", sms));
      const TaskId x = b.add_task({.stream = comm, .duration = us(duration_us), .tag = 1, .sms = sms});
      b.add_dependency(delay, x);
    }
    EngineOptions options;
    options.interference = Interference{.victim_tags = 1u << 0, .slowdown = 0.25, .full_slowdown_sms = 16};
    return static_cast<double>(span_end(Engine({rank_of(share(std::move(b)))}, options).run(), 0, 0).picoseconds()) /
           1e6;
  };
  EXPECT_NEAR(end_of_a({{2, 4.0}}), 6.0 + (8.0 - 4.0 / 1.03125), 1e-6);
  EXPECT_NEAR(end_of_a({{32, 4.0}}), 10.8, 1e-6);
  EXPECT_NEAR(end_of_a({{16, 4.0}, {2, 8.0}}), 10.0 + (4.8 - 4.0 / 1.03125), 1e-6);
  EXPECT_NEAR(end_of_a({{2, 8.0}, {16, 4.0}}), 10.0 + (4.8 - 4.0 / 1.03125), 1e-6);
}

TEST(Engine, SmHoldingCommunicationPushesPersistentWorkIntoASecondWave) {
  // As above, but A's work is in persistent kernels (a block per SM). Beside an aggressor that
  // holds SMs (tag 1), A runs at 1/(1 + 1.0): from 2 to 6 us it does 2, the last 6 at full
  // speed: 12 us. Beside one that holds none (tag 2) only the generic 0.25 applies: 10.8 us.
  // Half of A persistent: slowed by 0.25 + 0.5 x (1.0 - 0.25) = 0.625 beside tag 1, so from 2
  // to 6 us it does 4/1.625 and ends at 6 + (8 - 4/1.625) = 11.538 us.
  const auto end_of_a = [](double persistent_us, uint8_t aggressor_tag) {
    ProgramBuilder b;
    const StreamId compute = b.add_stream("compute");
    const StreamId comm = b.add_stream("comm");
    const StreamId timer = b.add_stream("timer");
    b.add_task({.stream = compute, .duration = us(10), .tag = 0, .persistent_duration = us(persistent_us)});
    const TaskId delay = b.add_task({.stream = timer, .duration = us(2)});
    const TaskId x = b.add_task({.stream = comm, .duration = us(4), .tag = aggressor_tag, .sms = 16});
    b.add_dependency(delay, x);
    EngineOptions options;
    options.interference = Interference{.victim_tags = 1u << 0,
                                        .slowdown = 0.25,
                                        .full_slowdown_sms = 16,
                                        .sm_holder_tags = 1u << 1,
                                        .persistent_slowdown = 1.0};
    return span_end(Engine({rank_of(share(std::move(b)))}, options).run(), 0, 0);
  };
  EXPECT_EQ(end_of_a(10, 1), us(12));
  EXPECT_EQ(end_of_a(10, 2), us(10.8));
  EXPECT_EQ(end_of_a(0, 1), us(10.8));
  EXPECT_NEAR(static_cast<double>(end_of_a(5, 1).picoseconds()) / 1e6, 6.0 + 8.0 - 4.0 / 1.625, 1e-6);
}

// An external model that finishes every task `delay` after it starts, one by one.
class FixedDelay : public ExternalModel {
 public:
  explicit FixedDelay(SimTime delay) : delay_(delay) {}
  void start(SimTime now, uint64_t token, std::span<const TaskRef> members) override {
    pending_.push_back({now + delay_, token});
    starts_.push_back(members.size());
  }
  SimTime next_time() override { return pending_.empty() ? SimTime::max() : pending_.front().first; }
  void advance(SimTime now, std::vector<uint64_t>& finished) override {
    while (!pending_.empty() && pending_.front().first <= now) {
      finished.push_back(pending_.front().second);
      pending_.erase(pending_.begin());
    }
  }
  std::vector<size_t> starts_;

 private:
  SimTime delay_;
  std::vector<std::pair<SimTime, uint64_t>> pending_;
};

TEST(Engine, ExternalModelTimesExternalTasks) {
  // Two ranks meet at an external collective after 1 us and 3 us of work; the model finishes
  // it 5 us after the last arrival: both end at 8 us. The model saw one start, of 2 members.
  auto program_with_lead = [](double lead_us) {
    ProgramBuilder b;
    const StreamId compute = b.add_stream("compute");
    const StreamId comm = b.add_stream("comm");
    const TaskId work = b.add_task({.stream = compute, .duration = us(lead_us)});
    const SyncId sync = b.add_sync({.slot = 0, .sequence = 0, .members = 2});
    const TaskId collective = b.add_task({.stream = comm, .sync = sync, .external = true});
    b.add_dependency(work, collective);
    return share(std::move(b));
  };
  FixedDelay model(us(5));
  const RunResult r = Engine({rank_of(program_with_lead(1), {0}), rank_of(program_with_lead(3), {0})}).run(&model);
  EXPECT_EQ(r.end, us(8));
  EXPECT_EQ(model.starts_, (std::vector<size_t>{2}));
}

}  // namespace
}  // namespace paceline
