// Tests calibrate/grid.cc: the measurement grids of quick and full mode and their cost estimate.
#include "calibrate/grid.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace paceline::calibrate {
namespace {

TEST(GridTest, QuickPlanSizes) {
  Plan one = make_plan(Mode::kQuick, 1);
  // 7 kernels × 7 sizes (1 MiB · 4^0..6).
  EXPECT_EQ(one.memory_bound.size(), 49u);
  // 3 kinds × 8 sizes (64 KiB · 4^0..7); peer copies need a second GPU.
  EXPECT_EQ(one.copies.size(), 24u);
  // 6 (dtype, layout) combinations × 7³ shapes (256 · 2^0..6).
  EXPECT_EQ(one.gemm.size(), 2058u);
  EXPECT_TRUE(one.collectives.empty());
  // 2 directions × 2 groups × 3 head counts × 5 sequence lengths (1024 · 2^0..4).
  EXPECT_EQ(one.attention.size(), 60u);
  EXPECT_EQ(one.warmup, 3);
  EXPECT_EQ(one.repetitions, 10);

  Plan eight = make_plan(Mode::kQuick, 8);
  EXPECT_EQ(eight.copies.size(), 32u);
  // 5 operations × 11 sizes (1 KiB · 4^0..10), all 8 ranks.
  EXPECT_EQ(eight.collectives.size(), 55u);
}

TEST(GridTest, FullPlanSizes) {
  Plan full = make_plan(Mode::kFull, 8);
  // 10 (dtype, layout) combinations × 9³ shapes (128..32768).
  EXPECT_EQ(full.gemm.size(), 7290u);
  // 5 operations × 23 sizes × rank counts {2, 4, 8}.
  EXPECT_EQ(full.collectives.size(), 345u);
  EXPECT_EQ(full.budget_s("gemm"), 0);
}

TEST(GridTest, GemmGridIsCartesianPerDtypeAndLayout) {
  Plan plan = make_plan(Mode::kQuick, 1);
  std::map<std::string, std::set<std::string>> shapes;
  for (const GemmPoint& p : plan.gemm) {
    std::string combo = std::string(to_string(p.dtype)) + p.transa + p.transb;
    shapes[combo].insert(std::to_string(p.m) + "x" + std::to_string(p.n) + "x" +
                         std::to_string(p.k));
  }
  for (const auto& [combo, s] : shapes) EXPECT_EQ(s.size(), 343u) << combo;  // 7³
  // fp8 exists only in the TN layout Hopper's FP8 tensor cores accept.
  EXPECT_EQ(shapes.count("fp8_e4m3TN"), 1u);
  EXPECT_EQ(shapes.count("fp8_e4m3NN"), 0u);
  EXPECT_EQ(shapes.size(), 6u);
}

TEST(GridTest, MemoryPointsFitTheirNominalSize) {
  for (const MemoryPoint& p : make_plan(Mode::kFull, 1).memory_bound) {
    EXPECT_LE(p.bytes, p.size) << to_string(p.kernel) << " " << p.size;
    EXPECT_GE(p.bytes, p.size * 9 / 10) << to_string(p.kernel) << " " << p.size;
    EXPECT_EQ(p.elements % 8, 0);
    if (p.row > 0) {
      EXPECT_EQ(p.elements % p.row, 0);
    }
  }
  // gelu over 1 MiB: 1 MiB / (2 B read + 2 B written) = 262144 elements, exactly 1 MiB.
  MemoryPoint gelu = make_plan(Mode::kQuick, 1).memory_bound[7];
  EXPECT_EQ(to_string(gelu.kernel), "gelu");
  EXPECT_EQ(gelu.elements, 262144);
  EXPECT_EQ(gelu.bytes, 1 << 20);
}

TEST(GridTest, KeysAreUniqueAndTablesSelfDescribing) {
  Plan plan = make_plan(Mode::kQuick, 8);
  for (std::string_view family : kFamilies) {
    std::vector<std::string> keys = plan.keys(family);
    std::set<std::string> unique(keys.begin(), keys.end());
    EXPECT_EQ(unique.size(), keys.size()) << family;
    Table shell = plan.table_shell(family);
    for (const std::string& field : shell.key) {
      EXPECT_NE(shell.axes.find(field), nullptr) << family << "." << field;
    }
  }
  EXPECT_EQ(plan.keys("gemm")[0], "dtype=bf16;transa=T;transb=N;m=256;n=256;k=256");
  EXPECT_THROW(plan.table_shell("convolution"), std::invalid_argument);
}

TEST(GridTest, BusBandwidthFactorsMatchNcclTests) {
  // nccl-tests: all_reduce 2(n−1)/n, all_gather and reduce_scatter (n−1)/n, send_recv 1.
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kAllToAll, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::kSendRecv, 8), 1.0);
}

TEST(GridTest, EstimateOfOneGemm) {
  Plan plan = make_plan(Mode::kQuick, 1);
  plan.memory_bound.clear();
  plan.copies.clear();
  plan.attention.clear();
  plan.gemm = {GemmPoint{GemmDtype::kBf16, 'T', 'N', 4096, 4096, 4096}};
  Rates rates;
  std::vector<FamilyEstimate> e = estimate(plan, rates);
  // 2·4096³ FLOP at 750 TFLOP/s = 183.3 µs (compute-bound: 96 MiB at 4 TB/s is 25 µs), plus a
  // 5 µs launch, times 3 + 10 calls = 2.45 ms; plus 8 ms host overhead.
  ASSERT_EQ(e[2].family, "gemm");
  EXPECT_NEAR(e[2].gpu_s, 13 * (5e-6 + 2.0 * 4096 * 4096 * 4096 / 750e12), 1e-9);
  EXPECT_DOUBLE_EQ(e[2].overhead_s, 8e-3);
}

TEST(GridTest, QuickModeFitsItsTimeBudget) {
  // The device script gives the quick run 240 s; each family's estimate must stay under its cap.
  Plan plan = make_plan(Mode::kQuick, 8);
  double total = 0;
  for (const FamilyEstimate& e : estimate(plan)) {
    EXPECT_LT(e.total_s(), plan.budget_s(e.family)) << e.family;
    total += e.total_s();
  }
  EXPECT_LT(total, 200);
  EXPECT_NE(describe_plan(plan, estimate(plan)).find("estimated total"), std::string::npos);
}

}  // namespace
}  // namespace paceline::calibrate
