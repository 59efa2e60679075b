// Tests sim/parallel/rank_layout.h: Megatron's rank order, group membership and placement.
#include "sim/parallel/rank_layout.h"

#include <gtest/gtest.h>

namespace paceline {
namespace {

Parallelism layout_of(int tp, int cp, int dp, int pp, int ep = 1) {
  Parallelism p;
  p.tp = tp;
  p.cp = cp;
  p.dp = dp;
  p.pp = pp;
  p.ep = ep;
  p.zero_shard = dp * cp;
  return p;
}

TEST(RankLayout, TensorParallelIsInnermost) {
  // tp 8, dp 4, pp 2 on nodes of 8: a TP group is one node; DP peers are 8 apart.
  const RankLayout layout(layout_of(8, 1, 4, 2), 8);
  EXPECT_EQ(layout.num_ranks(), 64);
  EXPECT_EQ(layout.members(GroupKind::kTensor, 9), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(layout.members(GroupKind::kData, 9), (std::vector<int>{1, 9, 17, 25}));
  // Pipeline: stage 1 of rank 9 is 32 ranks on.
  EXPECT_EQ(layout.coord(41).pp, 1);
  EXPECT_EQ(layout.members(GroupKind::kForwardSend, 9), (std::vector<int>{9, 41}));
}

TEST(RankLayout, ShiftsMoveOneCoordinateAndWrapAround) {
  // tp 8, cp 2, dp 4, pp 2: rank 7 is tp 7, cp 0, dp 0, pp 0.
  const RankLayout layout(layout_of(8, 2, 4, 2), 8);
  EXPECT_EQ(layout.shifted(7, RankDim::kTensor), 0);
  EXPECT_EQ(layout.shifted(7, RankDim::kTensor, 2), 1);
  EXPECT_EQ(layout.shifted(7, RankDim::kContext), 15);
  EXPECT_EQ(layout.shifted(7, RankDim::kData, 3), 7 + 3 * 16);
  EXPECT_EQ(layout.shifted(7 + 3 * 16, RankDim::kData), 7);
  EXPECT_EQ(layout.coord(layout.shifted(64 + 7, RankDim::kData)).pp, 1);
}

TEST(RankLayout, GroupsThatFitTheNodesAlikeArePlacedAtTheirStagesFirstRank) {
  const RankLayout layout(layout_of(8, 1, 4, 2), 8);
  EXPECT_EQ(layout.placement(GroupKind::kTensor), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(layout.placement(GroupKind::kData), (std::vector<int>{0, 8, 16, 24}));
  // Stage 1's data-parallel group is 32 ranks on; its pipeline link goes back to stage 0.
  EXPECT_EQ(layout.placement(GroupKind::kData, 1), (std::vector<int>{32, 40, 48, 56}));
  EXPECT_EQ(layout.link_members(1, /*forward=*/false), (std::vector<int>{32, 0}));
}

TEST(RankLayout, PlacementIsTheGroupSpreadOverTheMostDomains) {
  // cp 3, dp 2, pp 2 on nodes of 4: stage 0's context groups are {0, 1, 2}, in one node, and
  // {3, 4, 5}, across two; stage 1's are {6, 7, 8}, across two, and {9, 10, 11}, in one.
  const RankLayout layout(layout_of(1, 3, 2, 2), 4);
  EXPECT_EQ(layout.placement(GroupKind::kContext, 0), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(layout.placement(GroupKind::kContext, 1), (std::vector<int>{6, 7, 8}));
  EXPECT_EQ(layout.placement(GroupKind::kContext), (std::vector<int>{3, 4, 5}));
  // A group spanning the stages is the same at each: all of them straddle two nodes.
  EXPECT_EQ(layout.placement(GroupKind::kEmbedding, 1), (std::vector<int>{0, 6}));
}

TEST(RankLayout, PlacementFollowsAnotherRankOrder) {
  // dp innermost, tp 2 · dp 3 on domains of 4 (GPUs 0-3, 4-7): tensor groups {0, 3}, {1, 4} and
  // {2, 5}, the last two across the boundary; data groups {0, 1, 2} and {3, 4, 5}, the second across.
  Parallelism p = layout_of(2, 1, 3, 1);
  p.rank_order = {RankDim::kData, RankDim::kTensor, RankDim::kContext, RankDim::kPipeline};
  const RankLayout layout(p, 4);
  EXPECT_EQ(layout.placement(GroupKind::kTensor), (std::vector<int>{1, 4}));
  EXPECT_EQ(layout.placement(GroupKind::kData, 0), (std::vector<int>{3, 4, 5}));
}

TEST(RankLayout, GroupInstancesAgreeWithinAGroupAndDifferAcross) {
  const RankLayout layout(layout_of(2, 2, 2, 2), 8);
  for (int rank = 0; rank < layout.num_ranks(); ++rank) {
    for (const int member : layout.members(GroupKind::kContext, rank)) {
      EXPECT_EQ(layout.instance(GroupKind::kContext, rank), layout.instance(GroupKind::kContext, member));
    }
  }
  EXPECT_NE(layout.instance(GroupKind::kTensor, 0), layout.instance(GroupKind::kTensor, 2));
  // A send and the matching receive meet at one instance.
  const int next_stage = layout.members(GroupKind::kForwardSend, 0)[1];
  EXPECT_EQ(layout.instance(GroupKind::kForwardSend, 0), layout.instance(GroupKind::kForwardRecv, next_stage));
  EXPECT_EQ(layout.instance(GroupKind::kBackwardSend, next_stage), layout.instance(GroupKind::kBackwardRecv, 0));
}

TEST(RankLayout, ExpertGroupsFoldOverTensorAndDataRanks) {
  // tp 2, dp 16, ep 32 (MoE parallel folding): one expert group spans all 32 ranks of a stage,
  // and every expert has a single replica.
  const RankLayout layout(layout_of(2, 1, 16, 1, 32), 8);
  EXPECT_EQ(layout.members(GroupKind::kExpert, 5).size(), 32u);
  EXPECT_EQ(layout.members(GroupKind::kExpertData, 5), (std::vector<int>{5}));
}

TEST(RankLayout, RankOrderIsOverridable) {
  Parallelism p = layout_of(2, 1, 4, 1);
  p.rank_order = {RankDim::kData, RankDim::kTensor, RankDim::kContext, RankDim::kPipeline};
  const RankLayout layout(p, 8);
  // dp innermost: DP peers are consecutive ranks.
  EXPECT_EQ(layout.members(GroupKind::kData, 0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(layout.members(GroupKind::kTensor, 0), (std::vector<int>{0, 4}));
}

}  // namespace
}  // namespace paceline
