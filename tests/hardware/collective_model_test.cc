// Tests hardware/collective_model.h: α–β costs of collectives, derived by hand.
#include "hardware/collective_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/yaml_reader.h"

namespace paceline {
namespace {

ClusterSpec dgx_cluster(int nodes) {
  const std::string text = fmt::format(
      "gpu: h100-sxm5-80gb\nnodes: {}\ngpus_per_node: 8\n"
      "intra_node: {{bandwidth: 400 GB/s, latency: 3 us, bandwidth_efficiency: 1.0}}\n"
      "inter_node: {{nics_per_node: 8, nic_bandwidth: 400 Gb/s, latency: 10 us, bandwidth_efficiency: 1.0}}\n",
      nodes);
  const YamlDocument doc = load_yaml_text(text, "c.yaml");
  YamlMap map(doc.root, doc.file, "cluster");
  return read_cluster(map);
}

TEST(CollectiveModel, RingAllReduceInsideANode) {
  // 2(n−1)/n·S/B + 2(n−1)·α with n = 8, S = 1 GiB, B = 400 GB/s, α = 3 us.
  const ClusterSpec c = dgx_cluster(1);
  const CollectiveModel model(c);
  const double expected = 2.0 * 7 / 8 * (GiB(1) / Bytes(1)) / 400e9 + 2.0 * 7 * 3e-6;
  EXPECT_NEAR(model.time(Collective::kAllReduce, GiB(1), {8, 8}) / Seconds(1), expected, 1e-12);
}

TEST(CollectiveModel, AllGatherAndReduceScatterAreHalfAnAllReduce) {
  // (n−1)/n·S/B + (n−1)·α.
  const ClusterSpec c = dgx_cluster(1);
  const CollectiveModel model(c);
  const double expected = 7.0 / 8 * (GiB(1) / Bytes(1)) / 400e9 + 7 * 3e-6;
  EXPECT_NEAR(model.time(Collective::kAllGather, GiB(1), {8, 8}) / Seconds(1), expected, 1e-12);
  EXPECT_NEAR(model.time(Collective::kReduceScatter, GiB(1), {8, 8}) / Seconds(1), expected, 1e-12);
}

TEST(CollectiveModel, DataParallelGroupOneGpuPerNodeUsesOneNic) {
  // 16 nodes, one member each: ring bandwidth = one 400 Gb/s NIC = 50 GB/s; all-reduce latency
  // is a tree over nodes: 2·log2(16)·10 us.
  const ClusterSpec c = dgx_cluster(16);
  const CollectiveModel model(c);
  EXPECT_DOUBLE_EQ(model.ring_bandwidth({16, 1}) / GBPerSecond(1), 50.0);
  const double expected = 2.0 * 15 / 16 * (GiB(1) / Bytes(1)) / 50e9 + 2.0 * 4 * 10e-6;
  EXPECT_NEAR(model.time(Collective::kAllReduce, GiB(1), {16, 1}) / Seconds(1), expected, 1e-12);
}

TEST(CollectiveModel, FullNodesShareAllTheirNics) {
  // 8 members per node: 8 NICs · 50 GB/s = 400 GB/s, equal to NVLink here.
  const ClusterSpec c = dgx_cluster(4);
  const CollectiveModel model(c);
  EXPECT_DOUBLE_EQ(model.ring_bandwidth({32, 8}) / GBPerSecond(1), 400.0);
}

TEST(CollectiveModel, SendRecvAcrossNodesUsesOneNic) {
  const ClusterSpec c = dgx_cluster(2);
  const CollectiveModel model(c);
  // 100 MB at 50 GB/s + 10 us.
  EXPECT_NEAR(model.time(Collective::kSendRecv, MB(100), {2, 1}) / Seconds(1), 100e6 / 50e9 + 10e-6, 1e-12);
  // Inside a node: 100 MB at 400 GB/s + 3 us.
  EXPECT_NEAR(model.time(Collective::kSendRecv, MB(100), {2, 2}) / Seconds(1), 100e6 / 400e9 + 3e-6, 1e-12);
}

TEST(CollectiveModel, SingleRankGroupsCostNothing) {
  const ClusterSpec c = dgx_cluster(1);
  EXPECT_EQ(CollectiveModel(c).time(Collective::kAllReduce, GiB(1), {1, 1}), Seconds(0));
}

}  // namespace
}  // namespace paceline
