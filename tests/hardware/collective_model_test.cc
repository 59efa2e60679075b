// Tests hardware/topology.h, hardware/max_min.h and hardware/collective_model.h: routes, fair
// sharing, and collective times against their closed forms, derived by hand.
#include "hardware/collective_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <numeric>
#include <random>

#include "base/input_error.h"
#include "base/yaml_reader.h"
#include "hardware/max_min.h"
#include "tests/support/temp_path.h"

namespace paceline {
namespace {

// The cluster of a scenario's `cluster` mapping.
ClusterSpec cluster_from(const std::string& text) {
  const YamlDocument doc = load_yaml_text(text, "c.yaml");
  YamlMap map(doc.root, doc.file, "cluster");
  return read_cluster(map);
}

// `nodes` nodes of 8 GPUs: NVLink 400 GB/s and 3 us per step, 8 NICs of 400 Gb/s (50 GB/s) and
// 10 us per step, all at full efficiency; `extra` adds cluster fields.
ClusterSpec cluster_of(int nodes, const std::string& extra = "", const std::string& network = "") {
  return cluster_from(fmt::format(
      "gpu: h100-sxm5-80gb\nnodes: {}\ngpus_per_node: 8\n{}"
      "intra_node: {{bandwidth: 400 GB/s, latency: 3 us, bandwidth_efficiency: 1.0}}\n"
      "inter_node: {{nics_per_node: 8, nic_bandwidth: 400 Gb/s, latency: 10 us, bandwidth_efficiency: 1.0{}}}\n",
      nodes, extra, network));
}

std::vector<int> range(int from, int to, int step = 1) {
  std::vector<int> v;
  for (int i = from; i < to; i += step) v.push_back(i);
  return v;
}

TEST(MaxMin, TwoFlowsOnOneLinkGetHalfEach) {
  const std::vector<std::vector<uint32_t>> paths = {{0}, {0}};
  const std::vector<double> capacity = {100.0};
  EXPECT_EQ(max_min_rates(paths, capacity, 1e9), (std::vector<double>{50.0, 50.0}));
}

TEST(MaxMin, AFlowLimitedElsewhereLeavesTheRestToOthers) {
  // Flow 0 crosses links 0 (100) and 1 (30); flow 1 only link 0. Link 1 caps flow 0 at 30,
  // so flow 1 takes the remaining 70 of link 0.
  const std::vector<std::vector<uint32_t>> paths = {{0, 1}, {0}};
  const std::vector<double> capacity = {100.0, 30.0};
  EXPECT_EQ(max_min_rates(paths, capacity, 1e9), (std::vector<double>{30.0, 70.0}));
}

TEST(MaxMin, SkewedTrafficFinishesAtItsMostLoadedLink) {
  // Three flows on link 0 (capacity 10): 10, 20 and 30 bytes. Shared equally until the first
  // finishes; in all the link carries 60 bytes, so the last finishes at 60/10 = 6 s.
  const std::vector<std::vector<uint32_t>> paths = {{0}, {0}, {0}};
  const std::vector<double> bytes = {10.0, 20.0, 30.0};
  const std::vector<double> capacity = {10.0};
  EXPECT_NEAR(transfer_time(paths, bytes, capacity), 6.0, 1e-12);
}

TEST(MaxMin, FlowsOfTheSmallestDoublesFinish) {
  // Bytes near the smallest subnormal doubles: a flow's time left rounds to zero, and each step
  // must still finish one (it looped forever when the step did not move the bytes left).
  const std::vector<std::vector<uint32_t>> paths = {{0}, {0}, {0, 1}};
  const std::vector<double> bytes = {1e-320, 3e-320, 1e-318};
  const std::vector<double> capacity = {1e10, 5e9};
  const double time_s = transfer_time(paths, bytes, capacity);
  EXPECT_GE(time_s, 0.0);
  EXPECT_LT(time_s, 1e-300);
}

TEST(MaxMin, TransferTimeBoundsAreTheLongestFlowAloneAndAllFlowsInTurn) {
  // The skewed case: the largest flow alone takes 30/10 s; one after another they take 6 s,
  // which sharing one link also takes.
  const std::vector<std::vector<uint32_t>> paths = {{0}, {0}, {0}};
  const std::vector<double> bytes = {10.0, 20.0, 30.0};
  const std::vector<double> capacity = {10.0};
  const TransferTimeBounds bounds = transfer_time_bounds(paths, bytes, capacity);
  EXPECT_EQ(bounds.low_s, 3.0);
  EXPECT_EQ(bounds.high_s, 6.0);
}

TEST(MaxMin, TransferTimeLiesWithinItsBounds) {
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> link(0, 7);
  std::uniform_real_distribution<double> amount(1.0, 100.0);
  const std::vector<double> capacity = {10.0, 20.0, 5.0, 40.0, 10.0, 25.0, 15.0, 30.0};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::vector<uint32_t>> paths(1 + trial % 12);
    std::vector<double> bytes;
    for (auto& path : paths) {
      for (uint32_t hop = 0; hop < 1 + link(random) % 3; ++hop) path.push_back(link(random));
      std::ranges::sort(path);
      path.erase(std::unique(path.begin(), path.end()), path.end());
      bytes.push_back(amount(random));
    }
    const double time_s = transfer_time(paths, bytes, capacity);
    const TransferTimeBounds bounds = transfer_time_bounds(paths, bytes, capacity);
    EXPECT_LE(bounds.low_s, time_s * (1 + 1e-12)) << "trial " << trial;
    EXPECT_LE(time_s, bounds.high_s * (1 + 1e-12)) << "trial " << trial;
  }
}

TEST(CollectiveModel, RingAllReduceInsideANode) {
  // 2(n−1)/n·S/B + 2(n−1)·α with n = 8, S = 1 GiB, B = 400 GB/s, α = 3 us.
  const ClusterSpec c = cluster_of(1);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double expected = 2.0 * 7 / 8 * (GiB(1) / Bytes(1)) / 400e9 + 2.0 * 7 * 3e-6;
  EXPECT_NEAR(model.time(Collective::kAllReduce, GiB(1), range(0, 8)) / Seconds(1), expected, 1e-12);
}

TEST(CollectiveModel, SendRecvKernelsHoldTheChannelsOfTheirCommunicatorsSlowestPath) {
  // The H100 catalog: collectives hold 16 SMs; a send/recv 2 (one block per channel, 2 channels
  // per network peer) when its communicator spans nodes, 32 when it lies within one.
  const ClusterSpec c = cluster_of(2);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  EXPECT_EQ(model.kernel_sms(Collective::kAllGather, range(0, 16, 8)), 16);
  EXPECT_EQ(model.kernel_sms(Collective::kSendRecv, range(0, 16, 4)), 2);
  EXPECT_EQ(model.kernel_sms(Collective::kSendRecv, range(0, 8, 2)), 32);
}

TEST(CollectiveModel, AllGatherAndReduceScatterAreHalfAnAllReduce) {
  const ClusterSpec c = cluster_of(1);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double expected = 7.0 / 8 * (GiB(1) / Bytes(1)) / 400e9 + 7 * 3e-6;
  EXPECT_NEAR(model.time(Collective::kAllGather, GiB(1), range(0, 8)) / Seconds(1), expected, 1e-12);
  EXPECT_NEAR(model.time(Collective::kReduceScatter, GiB(1), range(0, 8)) / Seconds(1), expected, 1e-12);
}

TEST(CollectiveModel, NvlinkSharpRunsAtTheLinksMeasuredBusBandwidthInOneStep) {
  // NVLS: 2(n−1)/n·S at the link's NVLS bus bandwidth (here 1.2 of 400 GB/s) plus its one
  // 25 us step, against a ring's 2(n−1)/n·S at 400 GB/s plus 2(n−1) steps of 3 us.
  const ClusterSpec c = cluster_from(
      "gpu: h100-sxm5-80gb\ngpus_per_node: 8\nnvls: true\n"
      "intra_node: {bandwidth: 400 GB/s, latency: 3 us, bandwidth_efficiency: 1.0, nvls_bus_efficiency: 1.2, "
      "nvls_latency: 25 us}\n");
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double bus = 2.0 * 7 / 8 * (GiB(1) / Bytes(1));
  EXPECT_EQ(model.plan(Collective::kAllReduce, GiB(1), range(0, 8)).algorithm, CollectiveAlgorithm::kNvls);
  EXPECT_NEAR(model.time(Collective::kAllReduce, GiB(1), range(0, 8)) / Seconds(1), bus / (1.2 * 400e9) + 25e-6,
              1e-12);
  // A small buffer over two GPUs: the ring's 2 steps of 3 us beat NVLS's 25 us. A large one
  // over two: NVLS still moves S each way through each port, no faster than the ring's S.
  EXPECT_EQ(model.plan(Collective::kAllReduce, KiB(64), range(0, 2)).algorithm, CollectiveAlgorithm::kRing);
  const CollectivePlan pair = model.plan(Collective::kAllReduce, GiB(1), range(0, 2), CollectiveAlgorithm::kNvls);
  EXPECT_NEAR(model.time(pair) / Seconds(1), (GiB(1) / Bytes(1)) / 400e9 + 25e-6, 1e-12);
}

TEST(CollectiveModel, NvlinkSharpNeedsTheLinksFigures) {
  try {
    cluster_from("gpu: h100-sxm5-80gb\ngpus_per_node: 8\nnvls: true\nintra_node: {link: nvlink3}\n");
    FAIL() << "nvls over a link without NVLS figures was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "c.yaml:3:7: cluster.nvls = true needs NVLS figures on the intra-node link nvlink3: "
              "nvls_bus_efficiency and nvls_latency, as the nvlink4 and nvlink5 catalog links give");
  }
}

// 8-GPU nodes joined by a mesh: 7 direct links of 64 GB/s per GPU, 2 us per step.
ClusterSpec mesh_cluster_of(int nodes) {
  return cluster_from(fmt::format(
      "gpu: mi300x\nnodes: {}\ngpus_per_node: 8\n"
      "intra_node: {{bandwidth: 448 GB/s, latency: 2 us, bandwidth_efficiency: 1.0, mesh_links: 7}}\n"
      "inter_node: {{nics_per_node: 8, nic_bandwidth: 400 Gb/s, latency: 10 us, bandwidth_efficiency: 1.0}}\n",
      nodes));
}

TEST(CollectiveModel, AMeshGivesAGroupTheLinksBetweenItsGpus) {
  // A ring's 2(n−1)/n·S per GPU goes over the n − 1 links to the group's other GPUs: 64 GB/s for
  // a pair, 3 · 64 for four, all 7 (448 GB/s, as through a switch port) for the whole node.
  const ClusterSpec c = mesh_cluster_of(1);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double s = GiB(1) / Bytes(1);
  for (const int n : {2, 4, 8}) {
    const double expected = 2.0 * (n - 1) / n * s / ((n - 1) * 64e9) + 2.0 * (n - 1) * 2e-6;
    EXPECT_NEAR(model.time(Collective::kAllReduce, GiB(1), range(0, n)) / Seconds(1), expected, 1e-12) << n;
  }
  // A copy from one GPU to another has the one link between them.
  EXPECT_NEAR(model.time(Collective::kSendRecv, GiB(1), std::vector<int>{0, 5}) / Seconds(1), s / 64e9 + 2e-6, 1e-12);
  std::vector<LinkId> path;
  topology.route(6, 2, path);
  ASSERT_EQ(path.size(), 1u);
  EXPECT_EQ(topology.link_name(path[0]), "gpu 6 link to gpu 2");
  EXPECT_EQ(topology.capacity(path[0]) / BytesPerSecond(1), 64e9);
}

TEST(CollectiveModel, AMeshNodeSpreadsItsShareOfARingOverItsLinks) {
  // Two full nodes: each NIC carries one of 8 rings, 2·(15/16)·S/8 at 50 GB/s, while each GPU's
  // 2·(15/16)·S·7/8 inside its node spreads over its 7 links (at most 2·S/8 each, 64 GB/s).
  const ClusterSpec c = mesh_cluster_of(2);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const CollectivePlan ring = model.plan(Collective::kAllReduce, GiB(1), range(0, 16), CollectiveAlgorithm::kRing);
  const double s = GiB(1) / Bytes(1);
  EXPECT_NEAR((model.time(ring) - ring.latency) / Seconds(1), 2.0 * 15 / 16 * s / 8 / 50e9, 1e-9);
}

TEST(CollectiveModel, AMeshNodeOfFewerGpusKeepsItsLinks) {
  // Four MI300X of a mesh of 7 links per GPU: a pair still has one 64 GB/s link between them.
  const ClusterSpec c = cluster_from(
      "gpu: mi300x\ngpus_per_node: 4\n"
      "intra_node: {bandwidth: 448 GB/s, latency: 2 us, bandwidth_efficiency: 1.0, mesh_links: 7}\n");
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double s = GiB(1) / Bytes(1);
  EXPECT_NEAR(model.time(Collective::kAllReduce, GiB(1), range(0, 4)) / Seconds(1),
              2.0 * 3 / 4 * s / (3 * 64e9) + 2.0 * 3 * 2e-6, 1e-12);
}

TEST(CollectiveModel, AMeshIsOneNodesAndHasNoSwitchToReduceIn) {
  auto error_of = [](const std::string& text) {
    try {
      cluster_from(text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error_of("gpu: mi300x\ngpus_per_node: 8\nnvlink_domain: 16\n"),
            "c.yaml:3:16: cluster.nvlink_domain = 16 must equal gpus_per_node = 8: the intra-node link "
            "infinity-fabric-mi300x is a mesh of direct links inside a node");
  EXPECT_EQ(error_of("gpu: mi300x\ngpus_per_node: 16\n"),
            "c.yaml:2:16: cluster.gpus_per_node = 16 is more than the intra-node link infinity-fabric-mi300x "
            "joins: a mesh of 7 direct links per GPU holds at most 8 GPUs");
  EXPECT_EQ(error_of("gpu: mi300x\ngpus_per_node: 8\nintra_node: {nvls_bus_efficiency: 1.0, nvls_latency: 25 us}\n"),
            "c.yaml:3:13: cluster.intra_node.mesh_links = 7: a mesh has no switch to reduce in, but the link has NVLS "
            "figures (nvls_bus_efficiency, nvls_latency)");
  EXPECT_EQ(error_of("gpu: mi300x\ngpus_per_node: 8\nintra_node: {mesh_links: -1}\n"),
            "c.yaml:3:26: cluster.intra_node.mesh_links = -1 must be from 0 to 63 (a mesh of at most 64 GPUs)");
}

TEST(CollectiveModel, DataParallelRingOneGpuPerNodeUsesOneNic) {
  // 16 nodes, one member each (GPU 0 of each): every ring edge crosses one NIC of 50 GB/s.
  const ClusterSpec c = cluster_of(16);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const CollectivePlan ring = model.plan(Collective::kAllReduce, GiB(1), range(0, 128, 8), CollectiveAlgorithm::kRing);
  // 2(n−1)/n·S at 50 GB/s plus NCCL's 2·(16 − 1) network steps of 10 us.
  EXPECT_NEAR(model.time(ring) / Seconds(1), 2.0 * 15 / 16 * (GiB(1) / Bytes(1)) / 50e9 + 2 * 15 * 10e-6, 1e-9);
}

TEST(CollectiveModel, RingChannelsLeaveThroughEveryNicWhenGpusShareThem) {
  // 3 nodes of 8 GPUs with 4 NICs (two GPUs behind each): 4 channels, one per NIC, each
  // carrying a quarter of 2(n−1)/n·S across the network: 4 NICs of 50 GB/s, not 2 of them.
  const ClusterSpec four_nics = cluster_from(
      "gpu: h100-sxm5-80gb\nnodes: 3\ngpus_per_node: 8\n"
      "intra_node: {bandwidth: 4000 GB/s, latency: 3 us, bandwidth_efficiency: 1.0}\n"
      "inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s, latency: 10 us, bandwidth_efficiency: 1.0}\n");
  const Topology topology(four_nics);
  const CollectiveModel model(four_nics, topology);
  const double s = GiB(1) / Bytes(1);
  const CollectivePlan ring = model.plan(Collective::kAllReduce, GiB(1), range(0, 24), CollectiveAlgorithm::kRing);
  const double latency = 2 * (24 - 3) * 3e-6 + 2 * 2 * 10e-6;
  EXPECT_NEAR(model.time(ring) / Seconds(1), 2.0 * 23 / 24 * s / 4 / 50e9 + latency, 1e-9);
}

TEST(CollectiveModel, AGpusOwnNicsCarryItsTrafficTogether) {
  // The same 3.2 Tb/s a node as 8 NICs of 400 Gb/s, 16 of 200 or 32 of 100: a GPU sends through
  // all of its own at once, so a send between nodes and a ring across them take the same time.
  auto with_nics = [](int nics, int gbit) {
    return cluster_from(
        "gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
        "inter_node: {nics_per_node: " +
        std::to_string(nics) + ", nic_bandwidth: " + std::to_string(gbit) +
        " Gb/s, latency: 10 us, bandwidth_efficiency: 1.0}\n");
  };
  std::vector<double> sends;
  std::vector<double> rings;
  for (const auto& [nics, gbit] : {std::pair{8, 400}, std::pair{16, 200}, std::pair{32, 100}}) {
    const ClusterSpec c = with_nics(nics, gbit);
    const Topology topology(c);
    const CollectiveModel model(c, topology);
    sends.push_back(model.time(Collective::kSendRecv, MB(100), std::vector<int>{0, 8}) /
                    Seconds(1));
    rings.push_back(model.time(model.plan(Collective::kAllReduce, GiB(1), range(0, 16),
                                          CollectiveAlgorithm::kRing)) /
                    Seconds(1));
    if (nics == 32) {
      EXPECT_EQ(topology.link_name(static_cast<LinkId>(2 * 16 + 2)), "node 0 nics 4-7 tx");
    }
  }
  EXPECT_NEAR(sends[0], 100e6 / 50e9 + 10e-6, 1e-12);
  for (int i = 1; i < 3; ++i) {
    EXPECT_NEAR(sends[i], sends[0], 1e-12);
    EXPECT_NEAR(rings[i], rings[0], 1e-12);
  }
}

TEST(CollectiveModel, AGpusNicsCarryNoMoreThanItsPathToThem) {
  auto send_time = [](const std::string& network, const std::vector<int>& ring) {
    const ClusterSpec c = cluster_from(
        "gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
        "inter_node: {latency: 10 us, bandwidth_efficiency: 1.0, " +
        network + "}\n");
    const Topology topology(c);
    const CollectiveModel model(c, topology);
    return model.time(Collective::kSendRecv, MB(100), ring) / Seconds(1);
  };
  // Four 200 Gb/s NICs a GPU (100 GB/s) behind PCIe Gen4 x16: the PCIe link limits.
  const std::vector<int> pair = {0, 8};
  EXPECT_NEAR(
      send_time("nics_per_node: 32, nic_bandwidth: 200 Gb/s, gpu_nic_pcie: 31.5 GB/s", pair),
      100e6 / 31.5e9 + 10e-6, 1e-12);
  // One NIC a GPU, slower than its path: the NIC limits.
  EXPECT_NEAR(send_time("nics_per_node: 8, nic_bandwidth: 200 Gb/s, gpu_nic_pcie: 31.5 GB/s", pair),
              100e6 / 25e9 + 10e-6, 1e-12);
  // GPUs 0 and 1 share an 800 Gb/s NIC (100 GB/s), each over a path of 40 GB/s; both send at
  // once (0 to 8, 1 to 9, and back from 8 and 9, who share one too): 200 MB at 80 GB/s.
  EXPECT_NEAR(
      send_time("nics_per_node: 4, nic_bandwidth: 800 Gb/s, gpu_nic_pcie: 40 GB/s", {0, 8, 1, 9}),
      200e6 / 80e9 + 10e-6, 1e-12);
}

TEST(CollectiveModel, ANicCarriesNoMoreThanThePathsOfTheGpusBehindIt) {
  // 800 Gb/s NICs (100 GB/s) over 8 GPUs with 40 GB/s paths to them, at 0.9 efficiency: the
  // capacities in GB/s of node 0's NIC transmit links, and last its leaf's uplink.
  auto capacities = [](int nics, const std::string& extra) {
    const ClusterSpec c = cluster_from(
        fmt::format("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                    "inter_node: {{nics_per_node: {}, nic_bandwidth: 800 Gb/s, latency: 10 us, "
                    "bandwidth_efficiency: 0.9, gpu_nic_pcie: 40 GB/s{}}}\n",
                    nics, extra));
    const Topology topology(c);
    std::vector<double> nic_tx;
    double leaf_up = 0.0;
    for (LinkId link = 0; link < topology.num_links(); ++link) {
      const std::string name = topology.link_name(link);
      const double capacity = topology.capacity(link) / BytesPerSecond(1e9);
      if (name.starts_with("node 0 nic") && name.ends_with("tx")) nic_tx.push_back(capacity);
      if (name == "leaf 0 up") leaf_up = capacity;
    }
    nic_tx.push_back(leaf_up);
    return nic_tx;
  };
  // Three NICs serve GPUs 0-2, 3-5 and 6-7: the first two carry their line rate, the third the
  // two paths behind it.
  const std::vector<double> three = capacities(3, "");
  ASSERT_EQ(three.size(), 4u);
  EXPECT_NEAR(three[0], 90.0, 1e-9);
  EXPECT_NEAR(three[1], 90.0, 1e-9);
  EXPECT_NEAR(three[2], 2 * 40 * 0.9, 1e-9);
  // Five NICs serve GPUs 0-1, 2-3, 4, 5-6 and 7.
  const std::vector<double> five = capacities(5, "");
  ASSERT_EQ(five.size(), 6u);
  for (const int nic : {0, 1, 3}) EXPECT_NEAR(five[nic], 2 * 40 * 0.9, 1e-9) << nic;
  for (const int nic : {2, 4}) EXPECT_NEAR(five[nic], 40 * 0.9, 1e-9) << nic;
  // A leaf's uplinks are oversubscribed from the NICs' line rate, not from the paths behind them:
  // one node's 8 NICs of 90 GB/s at 2:1.
  const std::vector<double> one_node_leaves =
      capacities(8, ", nodes_per_leaf: 1, oversubscription: 2");
  ASSERT_EQ(one_node_leaves.size(), 9u);
  EXPECT_NEAR(one_node_leaves[0], 40 * 0.9, 1e-9);
  EXPECT_NEAR(one_node_leaves[8], 8 * 90.0 / 2, 1e-9);
}

TEST(CollectiveModel, RingStepsInsideANodeTakeThreeNetworkPostsAcrossNodes) {
  // The same ring with a host that takes 2 us to post a network send: each of its steps inside
  // a node takes 3 of them, 6 us instead of NVLink's 3; inside one node the ring posts none.
  const std::string base =
      "gpu: h100-sxm5-80gb\nnodes: 3\ngpus_per_node: 8\n"
      "intra_node: {bandwidth: 4000 GB/s, latency: 3 us, bandwidth_efficiency: 1.0}\n"
      "inter_node: {nics_per_node: 4, nic_bandwidth: 400 Gb/s, latency: 10 us, bandwidth_efficiency: 1.0, "
      "post_overhead: 2 us}\n";
  const ClusterSpec slow_posts = cluster_from(base);
  const Topology topology(slow_posts);
  const CollectiveModel model(slow_posts, topology);
  const CollectivePlan ring = model.plan(Collective::kAllReduce, GiB(1), range(0, 24), CollectiveAlgorithm::kRing);
  EXPECT_NEAR(ring.latency / Seconds(1), 2 * (24 - 3) * 6e-6 + 2 * 2 * 10e-6, 1e-12);
  const CollectivePlan in_node = model.plan(Collective::kAllReduce, GiB(1), range(0, 8), CollectiveAlgorithm::kRing);
  EXPECT_NEAR(in_node.latency / Seconds(1), 2 * 7 * 3e-6, 1e-12);
  // The tree posts no more than before: its latency is the same without the overhead.
  std::string free_posts = base;
  free_posts.replace(free_posts.find("post_overhead: 2 us"), 19, "post_overhead: 0 us");
  const ClusterSpec free = cluster_from(free_posts);
  const Topology free_topology(free);
  const CollectiveModel free_model(free, free_topology);
  EXPECT_EQ(model.plan(Collective::kAllReduce, GiB(1), range(0, 24), CollectiveAlgorithm::kTree).latency,
            free_model.plan(Collective::kAllReduce, GiB(1), range(0, 24), CollectiveAlgorithm::kTree).latency);
  // Three posts of 0.5 us take less than an NVLink step of 3 us, which the ring keeps.
  std::string fast_posts = base;
  fast_posts.replace(fast_posts.find("post_overhead: 2 us"), 19, "post_overhead: 0.5 us");
  const ClusterSpec fast = cluster_from(fast_posts);
  const Topology fast_topology(fast);
  const CollectiveModel fast_model(fast, fast_topology);
  EXPECT_NEAR(fast_model.plan(Collective::kAllReduce, GiB(1), range(0, 24), CollectiveAlgorithm::kRing).latency /
                  Seconds(1),
              2 * (24 - 3) * 3e-6 + 2 * 2 * 10e-6, 1e-12);
}

TEST(CollectiveModel, TreeAllReduceRunsBothTreesOnEveryNic) {
  // 16 full nodes: each of the 8 NICs carries both trees with S/16 each way per edge; a node is
  // interior in one tree and a leaf in the other, so its NIC sends 4·S/16 = S/4 at 50 GB/s,
  // as long as each GPU's 2·S up and down the chain in its node takes at 400 GB/s; all at 0.92 of
  // the rate a ring reaches (NCCL's model of its tree). Latency: 2·7 NVLink steps and 2·log2(16)
  // network steps.
  const ClusterSpec c = cluster_of(16);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double s = GiB(1) / Bytes(1);
  const CollectivePlan tree = model.plan(Collective::kAllReduce, GiB(1), range(0, 128), CollectiveAlgorithm::kTree);
  EXPECT_NEAR(model.time(tree) / Seconds(1), s / 4 / (0.92 * 50e9) + 2 * 7 * 3e-6 + 2 * 4 * 10e-6,
              1e-9);
}

TEST(CollectiveModel, AllReduceAcrossNodesChoosesTheFasterOfRingAndTree) {
  // A small buffer over many nodes is latency-bound: the tree's 2·log2(64) network steps beat
  // the ring's 2·63. Over full nodes a large one moves as many bytes per link either way, the
  // tree at 0.92 of the ring's rate.
  const ClusterSpec c = cluster_of(64);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  EXPECT_EQ(model.plan(Collective::kAllReduce, KiB(64), range(0, 512, 8)).algorithm, CollectiveAlgorithm::kTree);
  const CollectivePlan ring = model.plan(Collective::kAllReduce, GiB(4), range(0, 512), CollectiveAlgorithm::kRing);
  const CollectivePlan tree = model.plan(Collective::kAllReduce, GiB(4), range(0, 512), CollectiveAlgorithm::kTree);
  EXPECT_NEAR((model.time(tree) - tree.latency) / (model.time(ring) - ring.latency), 1.0 / 0.92,
              0.01);
  // The ring's 2·(512 − 64) NVLink and 2·63 network steps then decide.
  EXPECT_EQ(model.plan(Collective::kAllReduce, GiB(4), range(0, 512)).algorithm, CollectiveAlgorithm::kTree);
}

TEST(CollectiveModel, TimeBoundsBracketEveryAlgorithmsPlan) {
  const ClusterSpec c = cluster_of(4);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  for (const CollectiveAlgorithm algorithm :
       {CollectiveAlgorithm::kRing, CollectiveAlgorithm::kTree, CollectiveAlgorithm::kHierarchical}) {
    for (const std::vector<int>& members : {range(0, 32), range(0, 32, 8), range(4, 28)}) {
      const CollectivePlan plan = model.plan(Collective::kAllReduce, MiB(64), members, algorithm);
      const CollectiveModel::TimeBounds bounds = model.time_bounds(plan);
      const double time_s = model.time(plan) / Seconds(1);
      // To rounding: a ring's flows all take as long, and so does the ring.
      EXPECT_LE(bounds.low / Seconds(1), time_s * (1 + 1e-12)) << to_string(algorithm) << " over " << members.size();
      EXPECT_LE(time_s, bounds.high / Seconds(1) * (1 + 1e-12)) << to_string(algorithm) << " over " << members.size();
      EXPECT_LT(bounds.low, bounds.high) << to_string(algorithm) << " over " << members.size();
    }
  }
}

TEST(CollectiveModel, HierarchicalAllReduceOver128Nodes) {
  // Reduce-scatter in each node ((k−1)/k·S over NVLink), all-reduce of each S/k shard across
  // 128 nodes (2(N−1)/N·S/k per NIC, 8 rings on 8 rails), all-gather in each node:
  // 2·(7/8)·S/400 GB/s + 2·(127/128)·(S/8)/50 GB/s, plus 2·7·3 us + 2·127·10 us.
  const ClusterSpec c = cluster_of(128);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double s = GiB(1) / Bytes(1);
  const double expected = 2.0 * 7 / 8 * s / 400e9 + 2.0 * 127 / 128 * (s / 8) / 50e9 + 2 * 7 * 3e-6 + 2 * 127 * 10e-6;
  const CollectivePlan plan =
      model.plan(Collective::kAllReduce, GiB(1), range(0, 1024), CollectiveAlgorithm::kHierarchical);
  EXPECT_NEAR(model.time(plan) / Seconds(1), expected, expected * 1e-9);
}

TEST(CollectiveModel, OversubscribedSpineHalvesCrossSpineThroughput) {
  // One node per leaf, 2:1 oversubscribed: a leaf's uplink carries 8 NICs · 50 GB/s / 2. All 8
  // GPUs of node 0 sending 1 GiB to node 1 (on another leaf) share it: 200 GB/s in all, half of
  // the 400 GB/s their NICs could send; inside one leaf they get the full 400.
  const ClusterSpec blocking = cluster_of(2, "", ", nodes_per_leaf: 1, oversubscription: 2");
  const ClusterSpec same_leaf = cluster_of(2, "", ", nodes_per_leaf: 2, oversubscription: 2");
  auto send_all = [](const ClusterSpec& c) {
    const Topology topology(c);
    std::vector<std::vector<uint32_t>> paths;
    std::vector<double> bytes;
    for (int gpu = 0; gpu < 8; ++gpu) {
      std::vector<LinkId> path;
      topology.route(gpu, 8 + gpu, path);
      paths.emplace_back(path.begin(), path.end());
      bytes.push_back(GiB(1) / Bytes(1));
    }
    std::vector<double> capacity;
    for (LinkId l = 0; l < topology.num_links(); ++l) capacity.push_back(topology.capacity(l) / BytesPerSecond(1));
    return transfer_time(paths, bytes, capacity);
  };
  EXPECT_NEAR(send_all(blocking), 8.0 * (GiB(1) / Bytes(1)) / 200e9, 1e-9);
  EXPECT_NEAR(send_all(same_leaf), (GiB(1) / Bytes(1)) / 50e9, 1e-9);
}

TEST(CollectiveModel, SendRecvAcrossNodesUsesOneNic) {
  const ClusterSpec c = cluster_of(2);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  // 100 MB at 50 GB/s + 10 us; inside a node 100 MB at 400 GB/s + 3 us.
  EXPECT_NEAR(model.time(Collective::kSendRecv, MB(100), std::vector<int>{0, 8}) / Seconds(1), 100e6 / 50e9 + 10e-6,
              1e-12);
  EXPECT_NEAR(model.time(Collective::kSendRecv, MB(100), std::vector<int>{0, 1}) / Seconds(1), 100e6 / 400e9 + 3e-6,
              1e-12);
}

TEST(CollectiveModel, AllToAllAcrossNodesIsBoundByTheNics) {
  // 16 GPUs on 2 nodes each send 1.5 GB spread over 15 peers: 0.8 GB to the 8 peers in the
  // other node through their own 50 GB/s NIC: 16 ms (NVLink carries the rest faster).
  const ClusterSpec c = cluster_of(2);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double expected = 8.0 * (1.5e9 / 15) / 50e9 + 10e-6;
  EXPECT_NEAR(model.time(Collective::kAllToAll, Bytes(1.5e9), range(0, 16)) / Seconds(1), expected, expected * 1e-9);
}

// Expects every flow of a 1 GB deduplicated exchange over `gpus` GPUs of 8-GPU nodes to carry
// `expected(flow, same_node)` bytes, to the kilobyte.
void expect_exchange_flows(int gpus, const TokenRouting& routing,
                           const std::function<double(const Flow&, bool same_node)>& expected) {
  const ClusterSpec c = cluster_of((gpus + 7) / 8);
  const Topology topology(c);
  const CollectivePlan plan =
      CollectiveModel(c, topology)
          .plan(Collective::kAllToAll, GB(1), range(0, gpus), CollectiveAlgorithm::kAuto, routing);
  ASSERT_EQ(plan.phases.size(), 1u);
  for (const Flow& flow : plan.phases.front()) {
    const bool same_node = topology.domain_of(flow.from) == topology.domain_of(flow.to);
    EXPECT_NEAR(flow.size / Bytes(1), expected(flow, same_node), 1e3)
        << flow.from << " to " << flow.to;
  }
}

TEST(CollectiveModel, ADeduplicatedExchangeOfTopOneRoutingIsTheAllToAllOfItsCopies) {
  // Each token needs one of 8 GPUs: 1/8 of a GPU's tokens go to each peer either way.
  const ClusterSpec c = cluster_of(1);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const CollectivePlan plan = model.plan(Collective::kAllToAll, GB(1), range(0, 8),
                                         CollectiveAlgorithm::kAuto, TokenRouting{8, 1});
  EXPECT_EQ(plan.algorithm, CollectiveAlgorithm::kDeduplicated);
  ASSERT_EQ(plan.phases.size(), 1u);
  EXPECT_EQ(plan.phases.front().size(), 56u);
  for (const Flow& flow : plan.phases.front()) EXPECT_DOUBLE_EQ(flow.size / Bytes(1), 1e9 / 8);
  EXPECT_EQ(model.time(Collective::kAllToAll, GB(1), range(0, 8), TokenRouting{8, 1}),
            model.time(Collective::kAllToAll, Bytes(1e9 * 7 / 8), range(0, 8)));
}

// A token's top 8 of 128 experts, drawn without repeats, include one of a GPU's 8 with chance
// 1 − C(120, 8)/C(128, 8) = 0.4122821 (drawn with repeats, 1 − (15/16)^8 = 0.403), and one of a
// node's 64 with 1 − C(64, 8)/C(128, 8) = 0.9969041.
constexpr double kNeedsGpuOf16 = 0.4122821;
constexpr double kNeedsNodeOf2 = 0.9969041;

TEST(CollectiveModel, ADeduplicatedExchangeCrossesTheNetworkOncePerNode) {
  // 16 GPUs on 2 nodes hold 128 experts, 8 each; each token goes to 8 of them. A GPU sends its
  // 1 GB of tokens to the GPU of its rail in the other node when one of the token's experts is
  // there, through its 50 GB/s NIC. Over NVLink each GPU sends its own tokens and the other
  // node's that it relays to each of its 7 peers that needs them.
  const ClusterSpec c = cluster_of(2);
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const TokenRouting routing{128, 8};
  const CollectivePlan plan =
      model.plan(Collective::kAllToAll, GB(1), range(0, 16), CollectiveAlgorithm::kAuto, routing);
  ASSERT_EQ(plan.phases.size(), 1u);
  int across = 0;
  for (const Flow& flow : plan.phases.front()) {
    if (topology.domain_of(flow.from) == topology.domain_of(flow.to)) {
      EXPECT_NEAR(flow.size / Bytes(1), 2 * 1e9 * kNeedsGpuOf16, 1e3);
      continue;
    }
    ++across;
    EXPECT_EQ(flow.to, flow.from < 8 ? flow.from + 8 : flow.from - 8);
    EXPECT_NEAR(flow.size / Bytes(1), 1e9 * kNeedsNodeOf2, 1e3);
  }
  EXPECT_EQ(across, 16);
  const double network_s = 1e9 * kNeedsNodeOf2 / 50e9;
  const double nvlink_s = 7 * 2 * 1e9 * kNeedsGpuOf16 / 400e9;
  ASSERT_GT(network_s, nvlink_s);
  // The network hop's 10 us, then the NVLink hop's 3 us (cluster_of).
  const double expected = network_s + 10e-6 + 3e-6;
  const double deduplicated =
      model.time(Collective::kAllToAll, GB(1), range(0, 16), routing) / Seconds(1);
  EXPECT_NEAR(deduplicated, expected, expected * 1e-6);
  // An all-to-all sends a copy per expert: 8 GB a GPU, 15/16 of it to its 15 peers, 8 of which
  // are in the other node (AllToAllAcrossNodesIsBoundByTheNics): 4 GB through the NIC, four times
  // the deduplicated bytes.
  const double copies = 8.0 * (8e9 * 15 / 16 / 15) / 50e9 + 10e-6;
  EXPECT_NEAR(model.time(Collective::kAllToAll, Bytes(8e9 * 15 / 16), range(0, 16)) / Seconds(1),
              copies, copies * 1e-9);
  EXPECT_NEAR(deduplicated / copies, kNeedsNodeOf2 / 4, 0.001);
}

TEST(CollectiveModel, ADeduplicatedExchangeRelaysFromEveryOtherNode) {
  // 24 GPUs on 3 nodes hold 96 experts, 4 each and 32 a node. A token needs a GPU with chance
  // 1 − C(92, 8)/C(96, 8) = 0.2980379 and a node with 1 − C(64, 8)/C(96, 8) = 0.9666204. Each GPU
  // relays for its rail peers in the 2 other nodes, so it sends each node peer three shares:
  // its own and the two it relays.
  int inside = 0;
  int across = 0;
  expect_exchange_flows(24, TokenRouting{96, 8}, [&](const Flow& flow, bool same_node) {
    (same_node ? inside : across) += 1;
    EXPECT_TRUE(same_node || flow.from % 8 == flow.to % 8) << flow.from << " to " << flow.to;
    return same_node ? 3 * 1e9 * 0.2980379 : 1e9 * 0.9666204;
  });
  EXPECT_EQ(inside, 3 * 8 * 7);
  EXPECT_EQ(across, 24 * 2);
}

TEST(CollectiveModel, GroupLimitedRoutingSendsATokenOnlyToItsGroupsNodes) {
  // 128 experts in 2 groups of 64, one a node of 8 GPUs; a token's 8 experts come from 1 group.
  // It goes to the other node with chance 1/2, and to a GPU of 8 experts with 1/2 · (1 −
  // C(56, 8)/C(64, 8)) = 0.3395345, which a node peer sends twice: its own and the other node's
  // it relays.
  expect_exchange_flows(
      16, TokenRouting{.experts = 128, .top_k = 8, .groups = 2, .group_top_k = 1},
      [](const Flow&, bool same_node) { return same_node ? 2 * 1e9 * 0.3395345 : 1e9 * 0.5; });
}

TEST(CollectiveModel, GroupLimitedRoutingAsDeepSeekV3LaysItOut) {
  // DeepSeek-V3's 256 experts over 64 GPUs of 8 nodes, a group of 32 a node; a token's 8 come
  // from 4 groups, at least one from each, so it needs a node with chance 4/8. A GPU's 4 experts
  // are needed with 1/2 · (1 − c(28)/c(32)) = 0.1165668, where c(f) is the x^8 coefficient of
  // ((1 + x)^f − 1)·((1 + x)^32 − 1)^3: the ways to take 8 experts, each group giving some, none
  // of them the GPU's (drawn uniformly from the 4 groups' experts, 0.4536264 and 0.1149902). Each
  // GPU sends to a node peer its own share and the 7 it relays for the other nodes.
  expect_exchange_flows(
      64, TokenRouting{.experts = 256, .top_k = 8, .groups = 8, .group_top_k = 4},
      [](const Flow&, bool same_node) { return same_node ? 8 * 1e9 * 0.1165668 : 1e9 * 0.5; });
}

TEST(CollectiveModel, GroupLimitedRoutingCountsGpusWhoseExpertsSpanGroups) {
  // 24 experts in 6 groups of 4 over 8 GPUs of 3; a token's experts come from 2 groups. GPUs 1,
  // 2, 5 and 6 hold experts of two groups, the others 3 of one. Taking 2 experts, one a group,
  // they are drawn from the 2 groups' 8 alike: needed with chance 0.2333333, the others
  // 0.2142857 (enumerating the 15 sets of 2 groups). Taking 4, each group gives at least one:
  // 0.4068627 and 0.3137255 (enumerating the 4-expert sets that cover each pair of groups).
  for (const auto& [top_k, spanning, within_one] :
       {std::tuple{2, 0.2333333, 0.2142857}, std::tuple{4, 0.4068627, 0.3137255}}) {
    expect_exchange_flows(
        8, TokenRouting{.experts = 24, .top_k = top_k, .groups = 6, .group_top_k = 2},
        [spanning = spanning, within_one = within_one](const Flow& flow, bool) {
          const bool spans = flow.to == 1 || flow.to == 2 || flow.to == 5 || flow.to == 6;
          return 1e9 * (spans ? spanning : within_one);
        });
  }
}

TEST(CollectiveModel, GroupLimitedRoutingOfManyGroupsStaysFinite) {
  // 2048 groups of one expert, a token drawing 1024 of them: C(2048, 1024) outgrows a double.
  // Drawing half the groups and then 8 of their experts draws 8 of all: 1 − C(1792, 8)/C(2048,
  // 8) = 0.6570633 for a GPU's 256. So does drawing 8 groups, each giving its one expert.
  for (const int group_top_k : {1024, 8}) {
    expect_exchange_flows(
        8, TokenRouting{.experts = 2048, .top_k = 8, .groups = 2048, .group_top_k = group_top_k},
        [](const Flow&, bool) { return 1e9 * 0.6570633; });
  }
}

TEST(CollectiveModel, SingleRankGroupsCostNothing) {
  const ClusterSpec c = cluster_of(1);
  const Topology topology(c);
  EXPECT_EQ(CollectiveModel(c, topology).time(Collective::kAllReduce, GiB(1), std::vector<int>{3}), Seconds(0));
}

TEST(CollectiveModel, ScenarioOverridesTheAlgorithm) {
  ClusterSpec c = cluster_of(4);
  c.algorithms[static_cast<int>(Collective::kAllReduce)] = static_cast<int>(CollectiveAlgorithm::kTree);
  const Topology topology(c);
  EXPECT_EQ(CollectiveModel(c, topology).plan(Collective::kAllReduce, GiB(1), range(0, 32)).algorithm,
            CollectiveAlgorithm::kTree);
}

}  // namespace
}  // namespace paceline

namespace paceline {
namespace {

TEST(CollectiveModel, AMeasuredLinkProfileReplacesTheAnalyticalCurve) {
  // A link profile: all-reduce over 8 GPUs at 300 GB/s bus bandwidth plus 20 us, measured at
  // 1 MiB · 4^i. At a measured size the model returns the measurement exactly.
  const std::string path = paceline::testing::temp_path("link_profile.yaml");
  std::string rows;
  for (double bytes = 1048576.0; bytes <= 1073741824.0; bytes *= 4.0) {
    rows += fmt::format("    - {{op: all_reduce, ranks: 8, bytes: {}, time_s: {}}}\n", bytes,
                        2.0 * 7 / 8 * bytes / 300e9 + 20e-6);
  }
  std::ofstream(path) << "format: paceline-profile/1\ndevice: {name: test, compute_capability: "
                         "\"9.0\"}\ncollectives:\n  rows:\n"
                      << rows;
  const ClusterSpec c = cluster_of(1, fmt::format("profile: {}\nprofile_gpu: h200-sxm-141gb\n", path));
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double s = 268435456.0;  // 256 MiB = 1 MiB · 4^4
  EXPECT_NEAR(model.time(Collective::kAllReduce, Bytes(s), range(0, 8)) / Seconds(1), 2.0 * 7 / 8 * s / 300e9 + 20e-6,
              1e-12);
  // Groups the profile did not measure (4 GPUs) keep the analytical model.
  const double four = 2.0 * 3 / 4 * s / 400e9 + 2.0 * 3 * 3e-6;
  EXPECT_NEAR(model.time(Collective::kAllReduce, Bytes(s), range(0, 4)) / Seconds(1), four, 1e-12);
  // Beyond the largest measured size (1 GiB), which bandwidth dominates, the measured bandwidth
  // holds, to within the analytical latency's share of 1 GiB's time (42 us of 4.7 ms).
  const double beyond = 4.0 * 1073741824.0;
  const double measured_beyond = 2.0 * 7 / 8 * beyond / 300e9 + 20e-6;
  EXPECT_NEAR(model.time(Collective::kAllReduce, Bytes(beyond), range(0, 8)) / Seconds(1),
              measured_beyond, 0.01 * measured_beyond);
}

TEST(CollectiveModel, ALinkProfileMeasuredOnlyAtSmallSizesKeepsTheAnalyticalBandwidthBeyondIt) {
  // Measured from 4 KiB to 64 KiB, where latency dominates, at half the analytical time: the
  // measurement says nothing of the bandwidth, so a 256 MiB all-reduce takes 64 KiB's time plus
  // the analytical time of the bytes beyond (to within the bandwidth's 1% share of the
  // analytical time at 64 KiB), neither 64 KiB's time per byte (72x more) nor half the
  // analytical time (faster than the links).
  const ClusterSpec analytical = cluster_of(1);
  const Topology analytical_topology(analytical);
  const CollectiveModel analytical_model(analytical, analytical_topology);
  const auto analytical_s = [&](double bytes) {
    return analytical_model.time(Collective::kAllReduce, Bytes(bytes), range(0, 8)) / Seconds(1);
  };
  const std::string path = paceline::testing::temp_path("small_link_profile.yaml");
  std::string rows;
  for (double bytes = 4096.0; bytes <= 65536.0; bytes *= 2.0) {
    rows += fmt::format("    - {{op: all_reduce, ranks: 8, bytes: {}, time_s: {}}}\n", bytes,
                        0.5 * analytical_s(bytes));
  }
  std::ofstream(path) << "format: paceline-profile/1\ndevice: {name: test, compute_capability: "
                         "\"9.0\"}\ncollectives:\n  rows:\n"
                      << rows;
  const ClusterSpec c =
      cluster_of(1, fmt::format("profile: {}\nprofile_gpu: h200-sxm-141gb\n", path));
  const Topology topology(c);
  const CollectiveModel model(c, topology);
  const double s = 268435456.0;
  const double expected = 0.5 * analytical_s(65536) + analytical_s(s) - analytical_s(65536);
  EXPECT_NEAR(model.time(Collective::kAllReduce, Bytes(s), range(0, 8)) / Seconds(1), expected,
              0.01 * expected);
  // Below the smallest: half of the analytical latency-bound time.
  EXPECT_NEAR(model.time(Collective::kAllReduce, Bytes(256), range(0, 8)) / Seconds(1),
              0.5 * analytical_s(256), 1e-9 * analytical_s(256));
}

}  // namespace
}  // namespace paceline
