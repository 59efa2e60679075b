// Tests sim/engine/event_queue.h: total order by (time, insertion sequence), for the monotone
// schedules a discrete-event run makes.
#include "sim/engine/event_queue.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace paceline {
namespace {

SimTime ps(int64_t n) { return SimTime::from_picoseconds(n); }

TEST(EventQueue, PopsInTimeOrder) {
  EventQueue<int> queue;
  queue.push(ps(30), 3);
  queue.push(ps(10), 1);
  queue.push(ps(20), 2);
  std::vector<int> order;
  while (!queue.empty()) order.push_back(queue.pop().payload);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(EventQueue, TiesBreakByInsertionOrder) {
  // 1000 events at the same time must come out exactly in the order they went in.
  EventQueue<int> queue;
  for (int i = 0; i < 1000; ++i) queue.push(ps(5), i);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(queue.pop().payload, i);
}

TEST(EventQueue, InterleavedPushAndPopKeepTheOrder) {
  // A pseudo-random schedule checked against the definition of the order.
  EventQueue<int> queue;
  uint64_t state = 12345;
  auto next = [&state] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  SimTime last = SimTime::zero();
  uint64_t last_sequence = 0;
  bool first = true;
  for (int i = 0; i < 5000; ++i) {
    queue.push(last + ps(static_cast<int64_t>(next() >> 60)), i);
    if (next() % 3 == 0) {
      const auto e = queue.pop();
      EXPECT_TRUE(first || e.time > last || (e.time == last && e.sequence > last_sequence));
      last = e.time;
      last_sequence = e.sequence;
      first = false;
    }
  }
}

// Events pushed and not yet popped, (time, payload) in insertion order: the reference order is
// a stable sort by time.
using Pending = std::vector<std::pair<int64_t, int>>;

// Pops one event and checks it is the reference's next: the earliest time, and among equals
// the first inserted. Returns its time.
int64_t pop_and_check(EventQueue<int>& queue, Pending& pending) {
  auto best = pending.begin();
  for (auto it = pending.begin(); it != pending.end(); ++it) {
    if (it->first < best->first) best = it;
  }
  const auto e = queue.pop();
  EXPECT_EQ(e.payload, best->second);
  EXPECT_EQ(e.time.picoseconds(), best->first);
  const int64_t time = best->first;
  pending.erase(best);
  return time;
}

// Drains the queue, each event against the reference.
void expect_pops_in_order(EventQueue<int>& queue, Pending& pending) {
  while (!pending.empty()) pop_and_check(queue, pending);
  EXPECT_TRUE(queue.empty());
}

// Pushes 20,000 events, each at the time `time_of(now, pending, random)` gives (`now` the last
// time popped, `random` a 64-bit generator seeded with `seed`), pops one after about every
// other push and drains the queue at the end, each pop against the reference.
template <typename TimeOf>
void expect_order_under_random_schedule(uint64_t seed, TimeOf time_of) {
  EventQueue<int> queue;
  Pending pending;
  uint64_t state = seed;
  auto random = [&state] {
    return state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  };
  int64_t now = 0;
  for (int i = 0; i < 20000; ++i) {
    const int64_t t = time_of(now, pending, random);
    queue.push(ps(t), i);
    pending.emplace_back(t, i);
    if (random() % 2 == 0) now = pop_and_check(queue, pending);
  }
  EXPECT_EQ(queue.size(), pending.size());
  expect_pops_in_order(queue, pending);
}

TEST(EventQueue, MatchesASortByTimeThenSequence) {
  // Many events on few distinct times, as identical ranks produce.
  expect_order_under_random_schedule(99, [](int64_t now, const Pending&, auto& random) {
    return now + static_cast<int64_t>((random() >> 33) % 5);
  });
}

TEST(EventQueue, MatchesASortOverTimesOfEveryMagnitude) {
  // Times 0 to 2^61 ps ahead, so events spread over the buckets and move down through many of
  // them; every fifth at the time of an event still pending (ties).
  int pushed = 0;
  expect_order_under_random_schedule(
      7, [&pushed](int64_t now, const Pending& pending, auto& random) {
        if (++pushed % 5 == 0 && !pending.empty()) {
          return pending[(random() >> 33) % pending.size()].first;
        }
        const int bits = static_cast<int>((random() >> 58) % 62);
        return now + static_cast<int64_t>((random() >> 3) >> (61 - bits));
      });
}

TEST(EventQueue, KeepsTheOrderUpToTheLastPicosecond) {
  // Times in the top buckets (bits 61 and 62 differing from the last popped) and at the
  // largest time there is, with ties, popped from a start at zero and from one near the top.
  constexpr int64_t kTop = std::numeric_limits<int64_t>::max();
  for (const int64_t start : {int64_t{0}, (int64_t{1} << 62) - 5}) {
    EventQueue<int> queue;
    Pending pending;
    queue.push(ps(start), -1);
    EXPECT_EQ(queue.pop().payload, -1);
    const std::vector<int64_t> times = {kTop,
                                        int64_t{1} << 62,
                                        (int64_t{1} << 62) + 3,
                                        kTop - 1,
                                        start + (int64_t{1} << 61),
                                        kTop,
                                        (int64_t{1} << 62) + 3,
                                        start};
    for (int i = 0; i < static_cast<int>(times.size()); ++i) {
      queue.push(ps(times[i]), i);
      pending.emplace_back(times[i], i);
    }
    expect_pops_in_order(queue, pending);
  }
}

TEST(EventQueue, RefusesAnEventBeforeTheOneBeingProcessed) {
  EventQueue<int> queue;
  queue.push(ps(10), 1);
  queue.push(ps(20), 2);
  EXPECT_EQ(queue.pop().payload, 1);
  EXPECT_THROW(queue.push(ps(9), 3), InternalError);
  queue.push(ps(10), 4);  // at the time being processed: still to come
  EXPECT_EQ(queue.pop().payload, 4);
  EXPECT_EQ(queue.pop().payload, 2);
}

}  // namespace
}  // namespace paceline
