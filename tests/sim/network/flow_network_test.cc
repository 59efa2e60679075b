// Tests sim/network/flow_network.h: max-min sharing that changes as flows start and end.
#include "sim/network/flow_network.h"

#include <gtest/gtest.h>

namespace paceline {
namespace {

SimTime seconds(double s) { return to_sim_time(Seconds(s)); }

// Runs the network to idle, returning when each transfer finished.
std::vector<std::pair<uint32_t, SimTime>> drain(FlowNetwork& network) {
  std::vector<std::pair<uint32_t, SimTime>> done;
  std::vector<uint32_t> finished;
  while (network.next_completion() != SimTime::max()) {
    const SimTime now = network.next_completion();
    finished.clear();
    network.advance(now, finished);
    for (const uint32_t t : finished) done.emplace_back(t, now);
  }
  return done;
}

TEST(FlowNetwork, TwoFlowsOnOneLinkGetHalfEach) {
  // Link 0 at 100 B/s; two transfers of 100 B start together: 50 B/s each, both done at 2 s.
  FlowNetwork network({100.0});
  network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(100)}});
  network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(100)}});
  const auto done = drain(network);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].second, seconds(2.0));
  EXPECT_EQ(done[1].second, seconds(2.0));
}

TEST(FlowNetwork, AFinishedFlowHandsItsShareBack) {
  // 50 B and 150 B share 100 B/s: both at 50 until the first ends at 1 s; the second has 100 B
  // left and takes the whole link: done at 2 s.
  FlowNetwork network({100.0});
  network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(50)}});
  network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(150)}});
  const auto done = drain(network);
  EXPECT_EQ(done[0].second, seconds(1.0));
  EXPECT_EQ(done[1].second, seconds(2.0));
}

TEST(FlowNetwork, ALateFlowSlowsTheOneInFlight) {
  // 200 B alone at 100 B/s for 1 s (100 B left), then a second 100 B flow joins: 50 each, both
  // finish at 3 s.
  FlowNetwork network({100.0});
  network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(200)}});
  std::vector<uint32_t> finished;
  network.advance(seconds(1.0), finished);
  EXPECT_TRUE(finished.empty());
  network.start(seconds(1.0), {NetworkFlow{{{0}}, Bytes(100)}});
  const auto done = drain(network);
  EXPECT_EQ(done[0].second, seconds(3.0));
  EXPECT_EQ(done[1].second, seconds(3.0));
}

TEST(FlowNetwork, DisjointFlowsDoNotInterfere) {
  FlowNetwork network({100.0, 10.0});
  network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(100)}});
  network.start(SimTime::zero(), {NetworkFlow{{{1}}, Bytes(10)}});
  const auto done = drain(network);
  EXPECT_EQ(done[0].second, seconds(1.0));
  EXPECT_EQ(done[1].second, seconds(1.0));
}

TEST(FlowNetwork, ATransferEndsWithItsLastFlow) {
  FlowNetwork network({100.0, 100.0});
  const uint32_t t = network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(100)}, NetworkFlow{{{1}}, Bytes(300)}});
  const auto done = drain(network);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].first, t);
  EXPECT_EQ(done[0].second, seconds(3.0));
}

TEST(FlowNetwork, AFlowClassLoadsALinkAsManyFlows) {
  // A class standing for 3 flows on link 0 and one plain flow, all 300 B, at 100 B/s: four
  // flows share the link, 25 B/s each, all done at 12 s.
  FlowNetwork network({100.0});
  network.start(SimTime::zero(), {NetworkFlow{{{0, 3.0}}, Bytes(300)}});
  network.start(SimTime::zero(), {NetworkFlow{{{0}}, Bytes(300)}});
  const auto done = drain(network);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].second, seconds(12.0));
  EXPECT_EQ(done[1].second, seconds(12.0));
}

TEST(FlowNetwork, AFractionalLoadIsAClassSpreadOverALinkClass) {
  // A class that loads link 0 with a quarter of a flow (one flow per four links of the link's
  // class) shares it with a plain flow held to 20 B/s by link 1: the class takes the other
  // 80 B/s at a load of 1/4, a rate of 320 B/s, so its 320 B take 1 s, as the 20 B do.
  FlowNetwork network({100.0, 20.0});
  network.start(SimTime::zero(), {NetworkFlow{{{0, 0.25}}, Bytes(320)}});
  network.start(SimTime::zero(), {NetworkFlow{{{0}, {1}}, Bytes(20)}});
  const auto done = drain(network);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].second, seconds(1.0));
  EXPECT_EQ(done[1].second, seconds(1.0));
}

TEST(FlowNetwork, EmptyTransfersFinishAtOnce) {
  FlowNetwork network({100.0});
  network.start(seconds(5.0), {});
  EXPECT_EQ(network.next_completion(), seconds(5.0));
}

}  // namespace
}  // namespace paceline
