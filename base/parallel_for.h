// parallel_for: runs body(i) for i in [0, n) on up to `threads` threads (fewer when the system
// will not start more). Each index runs exactly once and callers write results into slot i, so
// the outcome never depends on the thread count or on timing. The first exception (lowest index)
// is rethrown after all threads join; the indices not yet started are then skipped.
#ifndef PACELINE_BASE_PARALLEL_FOR_H_
#define PACELINE_BASE_PARALLEL_FOR_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace paceline {

// The thread count to use for `requested` (0 or less: one per hardware thread).
inline int resolve_threads(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// `progress(done)`, when given, runs on the calling thread each time more indices have
// finished (and once at the end); if it throws, the remaining indices are skipped and its
// exception is rethrown once the threads have joined — how a caller cancels.
inline void parallel_for(size_t n, int threads, const std::function<void(size_t)>& body,
                         const std::function<void(size_t)>& progress = {}) {
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable changed;
  size_t done = 0;
  size_t failed_index = n;
  std::exception_ptr failure;
  auto work = [&] {
    while (!stop.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      std::exception_ptr error;
      try {
        body(i);
      } catch (...) {
        error = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(mutex);
      ++done;
      if (error && i < failed_index) {
        failed_index = i;
        failure = error;
        stop.store(true);
      }
      changed.notify_all();
    }
  };
  const int count =
      static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), n));
  if (!progress && count <= 1) {
    work();
  } else {
    std::exception_ptr cancelled;
    {
      std::vector<std::jthread> pool;
      for (int t = 0; t < count; ++t) {
        try {
          pool.emplace_back(work);
        } catch (const std::system_error&) {
          break;  // as many threads as the system gives: the outcome is the same
        }
      }
      if (pool.empty()) work();  // none: the calling thread runs every index
      // The calling thread reports progress until every index has finished or one failed.
      size_t reported = 0;
      while (progress) {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return done != reported || stop.load() || done == n; });
        reported = done;
        const bool finished = done == n || stop.load();
        lock.unlock();
        try {
          progress(reported);
        } catch (...) {
          cancelled = std::current_exception();
          stop.store(true);
          break;
        }
        if (finished) break;
      }
    }  // joins the workers
    if (cancelled) std::rethrow_exception(cancelled);
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace paceline

#endif  // PACELINE_BASE_PARALLEL_FOR_H_
