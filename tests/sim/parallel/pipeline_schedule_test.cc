// Tests sim/parallel/pipeline_schedule.h: action orders, and the bubble each schedule leaves
// when replayed by the engine on uniform stages.
#include "sim/parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "sim/engine/engine.h"

namespace paceline {
namespace {

using Kind = PipelineAction::Kind;

TEST(PipelineSchedule, OneFOneBWarmsUpWithTheStagesAhead) {
  // Stage 1 of 4: two warm-up forwards, then alternating, then the remaining backwards.
  const auto actions = pipeline_schedule(Schedule::kOneFOneB, 4, 1, 6, 1, false);
  ASSERT_EQ(actions.size(), 12u);
  EXPECT_EQ(actions[0], (PipelineAction{Kind::kForward, 0, 0}));
  EXPECT_EQ(actions[1], (PipelineAction{Kind::kForward, 1, 0}));
  EXPECT_EQ(actions[2], (PipelineAction{Kind::kForward, 2, 0}));
  EXPECT_EQ(actions[3], (PipelineAction{Kind::kBackward, 0, 0}));
  EXPECT_EQ(actions.back(), (PipelineAction{Kind::kBackward, 5, 0}));
}

TEST(PipelineSchedule, EverySchedulePassesEveryMicrobatchOnce) {
  for (const Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kInterleavedOneFOneB,
                                  Schedule::kZeroBubble}) {
    const int chunks = schedule == Schedule::kInterleavedOneFOneB ? 3 : 1;
    for (int stage = 0; stage < 4; ++stage) {
      std::map<std::pair<int, int>, int> forward, backward, weight;
      for (const PipelineAction& a : pipeline_schedule(schedule, 4, stage, 8, chunks, false)) {
        if (a.kind == Kind::kForward) ++forward[{a.microbatch, a.chunk}];
        if (a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput) ++backward[{a.microbatch, a.chunk}];
        if (a.kind == Kind::kBackwardWeight) ++weight[{a.microbatch, a.chunk}];
      }
      EXPECT_EQ(forward.size(), 8u * chunks);
      EXPECT_EQ(backward.size(), 8u * chunks);
      for (const auto& [key, count] : forward) EXPECT_EQ(count, 1);
      if (schedule == Schedule::kZeroBubble) {
        EXPECT_EQ(weight.size(), 8u);
      }
    }
  }
}

TEST(PipelineSchedule, PairedSchedulesWarmUpOneMoreAndPairOtherMicrobatches) {
  for (const Schedule schedule : {Schedule::kOneFOneB, Schedule::kInterleavedOneFOneB}) {
    const int chunks = schedule == Schedule::kInterleavedOneFOneB ? 3 : 1;
    for (int stage = 0; stage < 4; ++stage) {
      const auto plain = pipeline_schedule(schedule, 4, stage, 8, chunks, false);
      const auto paired = pipeline_schedule(schedule, 4, stage, 8, chunks, true);
      // The same passes.
      std::multiset<std::tuple<Kind, int, int>> a, b;
      for (const PipelineAction& x : plain) a.emplace(x.kind, x.microbatch, x.chunk);
      for (const PipelineAction& x : paired) b.emplace(x.kind, x.microbatch, x.chunk);
      EXPECT_EQ(a, b);
      // One more forward before the first backward.
      const auto first_backward = [](const std::vector<PipelineAction>& actions) {
        return std::ranges::find(actions, Kind::kBackward, &PipelineAction::kind) - actions.begin();
      };
      EXPECT_EQ(first_backward(paired), first_backward(plain) + 1) << stage;
      // Each paired forward is followed by a backward of another micro-batch or chunk.
      int pairs = 0;
      for (size_t i = 0; i < paired.size(); ++i) {
        if (!paired[i].paired) continue;
        ++pairs;
        ASSERT_LT(i + 1, paired.size());
        EXPECT_EQ(paired[i].kind, Kind::kForward);
        EXPECT_EQ(paired[i + 1].kind, Kind::kBackward);
        EXPECT_FALSE(paired[i + 1].microbatch == paired[i].microbatch && paired[i + 1].chunk == paired[i].chunk);
      }
      EXPECT_GT(pairs, 0);
      for (const PipelineAction& x : plain) EXPECT_FALSE(x.paired);
    }
  }
  // Without pipelining: one forward, then each forward beside the backward of the one before.
  const auto single = pipeline_schedule(Schedule::kOneFOneB, 1, 0, 3, 1, true);
  ASSERT_EQ(single.size(), 6u);
  EXPECT_EQ(single[0], (PipelineAction{Kind::kForward, 0, 0}));
  EXPECT_EQ(single[1], (PipelineAction{Kind::kForward, 1, 0, true}));
  EXPECT_EQ(single[2], (PipelineAction{Kind::kBackward, 0, 0}));
  EXPECT_EQ(single.back(), (PipelineAction{Kind::kBackward, 2, 0}));
}

// Replays a schedule on `stages` uniform stages in the engine: forward chunk time f,
// backward b (or input gradient b and weight gradient w), instant transfers.
SimTime replay(Schedule schedule, int stages, int microbatches, int chunks, double f, double b, double w = 0.0) {
  std::vector<RankSetup> ranks;
  const int virtual_stages = stages * chunks;
  for (int stage = 0; stage < stages; ++stage) {
    ProgramBuilder builder;
    const StreamId compute = builder.add_stream("compute");
    const StreamId send_next = builder.add_stream("send next");
    const StreamId recv_prev = builder.add_stream("recv prev");
    const StreamId send_prev = builder.add_stream("send prev");
    const StreamId recv_next = builder.add_stream("recv next");
    auto transfer = [&](StreamId stream, uint32_t slot, uint32_t sequence) {
      return builder.add_task({.stream = stream, .sync = builder.add_sync({slot, sequence, 2})});
    };
    for (const PipelineAction& a : pipeline_schedule(schedule, stages, stage, microbatches, chunks, false)) {
      const int vs = a.chunk * stages + stage;
      const uint32_t key = static_cast<uint32_t>(a.microbatch * virtual_stages);
      if (a.kind == Kind::kForward) {
        const TaskId work = builder.add_task({.stream = compute, .duration = to_sim_time(Seconds(f))});
        if (vs > 0) builder.add_dependency(transfer(recv_prev, 1, key + vs - 1), work);
        if (vs + 1 < virtual_stages) builder.add_dependency(work, transfer(send_next, 0, key + vs));
      } else if (a.kind == Kind::kBackwardWeight) {
        builder.add_task({.stream = compute, .duration = to_sim_time(Seconds(w))});
      } else {
        const TaskId work = builder.add_task({.stream = compute, .duration = to_sim_time(Seconds(b))});
        if (vs + 1 < virtual_stages) builder.add_dependency(transfer(recv_next, 3, key + vs + 1), work);
        if (vs > 0) builder.add_dependency(work, transfer(send_prev, 2, key + vs));
      }
    }
    // Slots: 0 send next / 1 receive from previous share the link instance (stage, stage + 1);
    // 2 send previous / 3 receive from next share (stage − 1, stage).
    const uint32_t p = static_cast<uint32_t>(stages);
    const uint32_t s = static_cast<uint32_t>(stage);
    ranks.push_back(RankSetup{std::make_shared<const Program>(std::move(builder).build()),
                              {s, (s + p - 1) % p, p + (s + p - 1) % p, p + s}, 0, false});
  }
  return Engine(std::move(ranks)).run().end;
}

TEST(PipelineSchedule, OneFOneBBubbleIsStagesMinusOneOverMicrobatchesPlusStagesMinusOne) {
  // Uniform stages, f = 1, b = 2: the step takes (m + p − 1)(f + b), a bubble of (p−1)/(m+p−1).
  const int p = 4, m = 8;
  const double iteration = to_seconds(replay(Schedule::kOneFOneB, p, m, 1, 1.0, 2.0)) / Seconds(1);
  EXPECT_DOUBLE_EQ(iteration, (m + p - 1) * 3.0);
  const double work = m * 3.0;
  EXPECT_DOUBLE_EQ((iteration - work) / iteration, (p - 1.0) / (m + p - 1.0));
}

TEST(PipelineSchedule, GpipeHasTheSameBubbleAsOneFOneB) {
  EXPECT_EQ(replay(Schedule::kGpipe, 4, 8, 1, 1.0, 2.0), replay(Schedule::kOneFOneB, 4, 8, 1, 1.0, 2.0));
}

TEST(PipelineSchedule, InterleavingDividesTheBubbleByTheChunks) {
  // v chunks of 1/v the work each: bubble (p−1)(f+b)/v (Narayanan et al. SC'21, §2.2.2).
  const int p = 4, m = 8, v = 2;
  const double iteration = to_seconds(replay(Schedule::kInterleavedOneFOneB, p, m, v, 1.0 / v, 2.0 / v)) / Seconds(1);
  EXPECT_NEAR(iteration, m * 3.0 + (p - 1) * 3.0 / v, 1e-9);
}

TEST(PipelineSchedule, ZeroBubbleLeavesStagesMinusOneTimesForwardPlusInputMinusWeight) {
  // ZB-H1 (Qi et al. 2023, section 3): the bubble is (p − 1)(f + b − w), against 1F1B's
  // (p − 1)(f + b + w) with the backward fused, a third of it when f = b = w.
  const int p = 4, m = 8;
  const double one_f_one_b = to_seconds(replay(Schedule::kOneFOneB, p, m, 1, 1.0, 2.0)) / Seconds(1);
  const double zero_bubble = to_seconds(replay(Schedule::kZeroBubble, p, m, 1, 1.0, 1.0, 1.0)) / Seconds(1);
  EXPECT_DOUBLE_EQ(one_f_one_b, m * 3.0 + (p - 1) * 3.0);
  EXPECT_DOUBLE_EQ(zero_bubble, m * 3.0 + (p - 1) * 1.0);
  // Unequal passes, a weight gradient shorter than the input gradient.
  const double f = 1.0, b = 1.25, w = 0.75;
  const double uneven = to_seconds(replay(Schedule::kZeroBubble, p, m, 1, f, b, w)) / Seconds(1);
  EXPECT_NEAR(uneven, m * (f + b + w) + (p - 1) * (f + b - w), 1e-9);
}

TEST(PipelineSchedule, ZeroBubbleKeepsOneFOneBsForwardsInFlightAndHoldsBackStageManyWeightPasses) {
  // Stage s of p holds at most p − s forwards whose B pass has not run, as 1F1B does, and at most
  // s + 1 B passes whose W pass has not (the one just run and the s held back), fewer when there
  // are fewer micro-batches than stages.
  for (const int m : {2, 4, 8, 13}) {
    const int p = 5;
    for (int stage = 0; stage < p; ++stage) {
      int forwards = 0, weights = 0, most_forwards = 0, most_weights = 0;
      for (const PipelineAction& a :
           pipeline_schedule(Schedule::kZeroBubble, p, stage, m, 1, false)) {
        if (a.kind == Kind::kForward) ++forwards;
        if (a.kind == Kind::kBackwardInput) --forwards, ++weights;
        if (a.kind == Kind::kBackwardWeight) --weights;
        most_forwards = std::max(most_forwards, forwards);
        most_weights = std::max(most_weights, weights);
      }
      EXPECT_EQ(most_forwards, std::min(p - stage, m)) << "m " << m << ", stage " << stage;
      EXPECT_LE(most_weights, stage + 1) << "m " << m << ", stage " << stage;
      // With as many micro-batches as stages every stage reaches both.
      if (m >= p) {
        EXPECT_EQ(most_weights, stage + 1) << "m " << m << ", stage " << stage;
      }
    }
  }
}

}  // namespace
}  // namespace paceline
