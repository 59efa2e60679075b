// Benchmarks the discrete-event engine: events processed per second on a pipeline-like
// workload (compute and communication streams, dependencies, rendezvous across ranks).
#include <benchmark/benchmark.h>

#include <memory>

#include "sim/engine/engine.h"

namespace paceline {
namespace {

// `ranks` ranks in groups of 8, each running `tasks` compute tasks, every 4th followed by a
// collective of its group on the communication stream.
Engine make_workload(uint32_t ranks, uint32_t tasks) {
  ProgramBuilder b;
  const StreamId compute = b.add_stream("compute");
  const StreamId comm = b.add_stream("comm");
  TaskId previous = kNoId;
  uint32_t sequence = 0;
  for (uint32_t i = 0; i < tasks; ++i) {
    const TaskId work = b.add_task({.stream = compute, .duration = to_sim_time(Microseconds(1 + i % 7))});
    if (previous != kNoId) b.add_dependency(previous, work);
    previous = work;
    if (i % 4 == 3) {
      const SyncId sync = b.add_sync({.slot = 0, .sequence = sequence++, .members = 8});
      const TaskId reduce =
          b.add_task({.stream = comm, .sync = sync, .duration = to_sim_time(Microseconds(3))});
      b.add_dependency(work, reduce);
    }
  }
  auto program = std::make_shared<const Program>(std::move(b).build());
  std::vector<RankSetup> setups;
  for (uint32_t r = 0; r < ranks; ++r) setups.push_back(RankSetup{program, {r / 8}, 0, false});
  return Engine(std::move(setups));
}

void BM_EngineEvents(benchmark::State& state) {
  const Engine engine = make_workload(static_cast<uint32_t>(state.range(0)), 10000);
  uint64_t events = 0;
  for (auto _ : state) {
    const RunResult r = engine.run();
    events += r.events;
    benchmark::DoNotOptimize(r.end);
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineEvents)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace paceline
