// EventQueue: pending events in a total order — simulated time, then insertion sequence.
//
// Two events at the same picosecond run in the order they were scheduled (as in OMNeT++'s and
// ns-3's schedulers), so a run never depends on heap layout, pointer values or thread count.
//
// A discrete-event run never schedules before the event it is processing, so the queue is a
// monotone radix heap (a variant of Ahuja, Mehlhorn, Orlin and Tarjan's, "Faster algorithms for
// the shortest path problem", J. ACM 1990): bucket b ≥ 1 holds the events whose time first
// differs from the last time popped at bit b − 1, bucket 0 those at that time. A push is an
// append; a pop takes bucket 0's front and, when it is empty, moves the first non-empty
// bucket's events down to lower buckets against its least time. Each move lowers an event's
// bucket, so an event moves 63 times at most, and in a simulation's schedule a few. Appends and
// moves keep each bucket's events in insertion order, and events at one time always share a
// bucket, so ties leave in the order they came.
#ifndef PACELINE_SIM_ENGINE_EVENT_QUEUE_H_
#define PACELINE_SIM_ENGINE_EVENT_QUEUE_H_

#include <algorithm>
#include <array>
#include <bit>
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

  // Schedules `payload` at `time`, no earlier than the last event popped (nor before zero);
  // returns the event's insertion sequence number.
  uint64_t push(SimTime time, Payload payload) {
    const int64_t t = time.picoseconds();
    PACELINE_CHECK(t >= last_, "an event scheduled before the event being processed");
    const uint64_t sequence = next_sequence_++;
    append(Event{time, sequence, std::move(payload)});
    ++size_;
    return sequence;
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  // Removes and returns the earliest event (ties: the one pushed first).
  Event pop() {
    PACELINE_CHECK(size_ > 0);
    if (front_ == buckets_[0].size()) refill_front();
    --size_;
    return std::move(buckets_[0][front_++]);
  }

 private:
  void append(Event&& event) {
    const int64_t t = event.time.picoseconds();
    const size_t b = t == last_ ? 0 : std::bit_width(static_cast<uint64_t>(t ^ last_));
    buckets_[b].push_back(std::move(event));
    if (b != 0) filled_ |= uint64_t{1} << (b - 1);
  }

  // Bucket 0 is spent: the least time of the first non-empty bucket becomes the last time, and
  // that bucket's events move down (to bucket 0 those at the least time).
  void refill_front() {
    buckets_[0].clear();
    front_ = 0;
    const size_t b = std::countr_zero(filled_) + 1;
    filled_ &= filled_ - 1;
    std::vector<Event>& source = buckets_[b];
    last_ = std::min_element(source.begin(), source.end(), [](const Event& x, const Event& y) {
              return x.time < y.time;
            })->time.picoseconds();
    for (Event& e : source) append(std::move(e));
    source.clear();
  }

  // Times are non-negative: the highest of 63 bits at most differs from the last time.
  std::array<std::vector<Event>, 64> buckets_;
  uint64_t filled_ = 0;  // bit b − 1 set: bucket b ≥ 1 holds events
  size_t front_ = 0;     // bucket 0's events before this one have been popped
  int64_t last_ = 0;     // the time of the last event popped
  size_t size_ = 0;
  uint64_t next_sequence_ = 0;
};

}  // namespace paceline

#endif  // PACELINE_SIM_ENGINE_EVENT_QUEUE_H_
