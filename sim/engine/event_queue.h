// EventQueue: pending events in a total order — simulated time, then insertion sequence.
//
// Two events at the same picosecond run in the order they were scheduled (as in OMNeT++'s and
// ns-3's schedulers), so a run never depends on heap layout, pointer values or thread count.
//
// Layout: events at one time share a bucket, a FIFO list (so insertion order is kept for
// free); a 4-ary min-heap orders the buckets by time, and an open-addressing table finds a
// time's bucket. Simulations of many identical ranks schedule dozens of events at each
// instant, so the heap works on distinct times only.
#ifndef PACELINE_SIM_ENGINE_EVENT_QUEUE_H_
#define PACELINE_SIM_ENGINE_EVENT_QUEUE_H_

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

  EventQueue() : table_(kInitialTable, kEmpty) {}

  // Schedules `payload` at `time`; returns the event's insertion sequence number.
  uint64_t push(SimTime time, Payload payload) {
    const uint64_t sequence = next_sequence_++;
    const uint32_t node = new_node(std::move(payload), sequence);
    const int64_t t = time.picoseconds();
    uint32_t& entry = find(t);
    if (entry != kEmpty) {
      Bucket& bucket = buckets_[entry];
      nodes_[bucket.last].next = node;
      bucket.last = node;
    } else {
      entry = new_bucket(t, node);
      heap_push(entry);
      if (++live_buckets_ * 2 > table_.size()) rehash(table_.size() * 2);
    }
    ++size_;
    return sequence;
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  // Removes and returns the earliest event (ties: the one pushed first).
  Event pop() {
    PACELINE_CHECK(size_ > 0);
    const uint32_t index = heap_.front();
    Bucket& bucket = buckets_[index];
    const uint32_t node = bucket.first;
    Event event{SimTime::from_picoseconds(bucket.time), nodes_[node].sequence, std::move(nodes_[node].payload)};
    free_nodes_.push_back(node);
    --size_;
    if (node == bucket.last) {
      erase(bucket.time);
      heap_pop();
      free_buckets_.push_back(index);
      --live_buckets_;
    } else {
      bucket.first = nodes_[node].next;
    }
    return event;
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  static constexpr size_t kInitialTable = 64;

  struct Node {
    Payload payload;
    uint64_t sequence;
    uint32_t next;
  };
  struct Bucket {
    int64_t time;
    uint32_t first;
    uint32_t last;
  };

  uint32_t new_node(Payload payload, uint64_t sequence) {
    if (!free_nodes_.empty()) {
      const uint32_t node = free_nodes_.back();
      free_nodes_.pop_back();
      nodes_[node] = Node{std::move(payload), sequence, kEmpty};
      return node;
    }
    PACELINE_CHECK(nodes_.size() < kEmpty, "too many pending events");
    nodes_.push_back(Node{std::move(payload), sequence, kEmpty});
    return static_cast<uint32_t>(nodes_.size() - 1);
  }

  uint32_t new_bucket(int64_t time, uint32_t node) {
    if (!free_buckets_.empty()) {
      const uint32_t index = free_buckets_.back();
      free_buckets_.pop_back();
      buckets_[index] = Bucket{time, node, node};
      return index;
    }
    buckets_.push_back(Bucket{time, node, node});
    return static_cast<uint32_t>(buckets_.size() - 1);
  }

  // The table maps a time to its bucket: linear probing over a power-of-two array of bucket
  // indices (kEmpty where free); the time is read from the bucket itself.
  size_t slot_of(int64_t time) const {
    uint64_t h = static_cast<uint64_t>(time) * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(h >> 32) & (table_.size() - 1);
  }

  uint32_t& find(int64_t time) {
    for (size_t s = slot_of(time);; s = (s + 1) & (table_.size() - 1)) {
      if (table_[s] == kEmpty || buckets_[table_[s]].time == time) return table_[s];
    }
  }

  // Deletion by backward shift keeps every probe chain unbroken.
  void erase(int64_t time) {
    const size_t mask = table_.size() - 1;
    size_t hole = slot_of(time);
    while (buckets_[table_[hole]].time != time) hole = (hole + 1) & mask;
    for (size_t s = (hole + 1) & mask; table_[s] != kEmpty; s = (s + 1) & mask) {
      const size_t home = slot_of(buckets_[table_[s]].time);
      // Move the entry back if its home is not in (hole, s].
      if (((s - home) & mask) >= ((s - hole) & mask)) {
        table_[hole] = table_[s];
        hole = s;
      }
    }
    table_[hole] = kEmpty;
  }

  void rehash(size_t capacity) {
    std::vector<uint32_t> old = std::move(table_);
    table_.assign(capacity, kEmpty);
    for (const uint32_t index : old) {
      if (index != kEmpty) find(buckets_[index].time) = index;
    }
  }

  // 4-ary min-heap of bucket indices by time (bucket times are distinct).
  bool earlier(uint32_t a, uint32_t b) const { return buckets_[a].time < buckets_[b].time; }

  void heap_push(uint32_t index) {
    size_t i = heap_.size();
    heap_.push_back(index);
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (!earlier(index, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = index;
  }

  void heap_pop() {
    const uint32_t moving = heap_.back();
    heap_.pop_back();
    if (heap_.empty()) return;
    size_t i = 0;
    const size_t n = heap_.size();
    while (true) {
      const size_t first = 4 * i + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t end = first + 4 < n ? first + 4 : n;
      for (size_t c = first + 1; c < end; ++c) {
        if (earlier(heap_[c], heap_[best])) best = c;
      }
      if (!earlier(heap_[best], moving)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = moving;
  }

  std::vector<Node> nodes_;
  std::vector<uint32_t> free_nodes_;
  std::vector<Bucket> buckets_;
  std::vector<uint32_t> free_buckets_;
  std::vector<uint32_t> heap_;
  std::vector<uint32_t> table_;
  size_t live_buckets_ = 0;
  size_t size_ = 0;
  uint64_t next_sequence_ = 0;
};

}  // namespace paceline

#endif  // PACELINE_SIM_ENGINE_EVENT_QUEUE_H_
