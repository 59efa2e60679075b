// The benchmarks' main: Google Benchmark's, after setting the allocator as the paceline
// executable does, so they time what it runs.
#include <benchmark/benchmark.h>

#include "base/memory_reuse.h"

int main(int argc, char** argv) {
  paceline::keep_freed_memory_for_reuse();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
