// EventQueue: pending events in a total order — simulated time, then insertion sequence.
//
// Two events at the same picosecond run in the order they were scheduled (as in OMNeT++'s and
// ns-3's schedulers), so a run never depends on heap layout, pointer values or thread count.
// Payloads are stored by value; the queue owns them until pop().
#ifndef PACELINE_SIM_ENGINE_EVENT_QUEUE_H_
#define PACELINE_SIM_ENGINE_EVENT_QUEUE_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.h"
#include "sim/engine/sim_time.h"

namespace paceline {

template <typename Payload>
class EventQueue {
 public:
  struct Event {
    SimTime time;
    uint64_t sequence;
    Payload payload;
  };

  // Schedules `payload` at `time`; returns the event's insertion sequence number.
  uint64_t push(SimTime time, Payload payload) {
    const uint64_t sequence = next_sequence_++;
    heap_.push_back(Event{time, sequence, std::move(payload)});
    sift_up(heap_.size() - 1);
    return sequence;
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const {
    PACELINE_CHECK(!heap_.empty());
    return heap_.front();
  }

  // Removes and returns the earliest event (ties: the one pushed first).
  Event pop() {
    PACELINE_CHECK(!heap_.empty());
    Event earliest = std::move(heap_.front());
    heap_.front() = std::move(heap_.back());
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
    return earliest;
  }

 private:
  static bool before(const Event& a, const Event& b) {
    return a.time < b.time || (a.time == b.time && a.sequence < b.sequence);
  }

  // A 4-ary heap: shallower than a binary one, and its children share cache lines.
  static constexpr size_t kArity = 4;

  void sift_up(size_t index) {
    Event moving = std::move(heap_[index]);
    while (index > 0) {
      const size_t parent = (index - 1) / kArity;
      if (!before(moving, heap_[parent])) break;
      heap_[index] = std::move(heap_[parent]);
      index = parent;
    }
    heap_[index] = std::move(moving);
  }

  void sift_down(size_t index) {
    Event moving = std::move(heap_[index]);
    const size_t n = heap_.size();
    while (true) {
      const size_t first_child = index * kArity + 1;
      if (first_child >= n) break;
      size_t best = first_child;
      const size_t last_child = std::min(first_child + kArity, n);
      for (size_t c = first_child + 1; c < last_child; ++c) {
        if (before(heap_[c], heap_[best])) best = c;
      }
      if (!before(heap_[best], moving)) break;
      heap_[index] = std::move(heap_[best]);
      index = best;
    }
    heap_[index] = std::move(moving);
  }

  std::vector<Event> heap_;
  uint64_t next_sequence_ = 0;
};

}  // namespace paceline

#endif  // PACELINE_SIM_ENGINE_EVENT_QUEUE_H_
