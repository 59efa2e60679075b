// The benchmarks' memory counter.
#ifndef PACELINE_TESTS_BENCHMARKS_PEAK_MEMORY_H_
#define PACELINE_TESTS_BENCHMARKS_PEAK_MEMORY_H_

#include <sys/resource.h>

namespace paceline {

// The process's peak resident memory so far, in MiB: the largest run in the process dominates.
inline double peak_resident_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

}  // namespace paceline

#endif  // PACELINE_TESTS_BENCHMARKS_PEAK_MEMORY_H_
