// Tests hardware/cluster.h: links from the catalog, inline overrides and errors.
#include "hardware/cluster.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/yaml_reader.h"
#include "hardware/op_timer.h"
#include "tests/support/temp_path.h"

namespace paceline {
namespace {

ClusterSpec cluster_of(const std::string& text) {
  const YamlDocument doc = load_yaml_text(text, "c.yaml");
  YamlMap map(doc.root, doc.file, "cluster");
  return read_cluster(map);
}

std::string error_of(const std::string& text) {
  try {
    cluster_of(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The catalog's DGX H100 with `nics` compute NICs, written as `name`.yaml in a fresh directory
// (the caller removes it).
std::filesystem::path dgx_h100_with_nics(int nics, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("paceline-" + name + "-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ifstream in(default_system_catalog() + "/dgx-h100.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string system = text.str();
  system.replace(system.find("nics_per_node: {value: 8"), 24,
                 "nics_per_node: {value: " + std::to_string(nics));
  const fs::path file = dir / (name + ".yaml");
  std::ofstream(file) << system;
  return file;
}

TEST(Cluster, IntraNodeDefaultsToTheGpusLink) {
  const ClusterSpec c = cluster_of("gpu: h100-sxm5-80gb\ngpus_per_node: 8\n");
  EXPECT_EQ(c.intra_node.name, "nvlink4");
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth / GBPerSecond(1), 450.0);
  EXPECT_EQ(c.num_gpus(), 8);
}

TEST(Cluster, InlineBandwidthKeepsTheCatalogLatency) {
  const ClusterSpec c = cluster_of(
      "gpu: a100-sxm4-80gb\nnodes: 2\ngpus_per_node: 8\nintra_node: {bandwidth: 300 GB/s}\n"
      "inter_node: {nics_per_node: 8, nic_bandwidth: 200 Gb/s}\n");
  const LinkSpec nvlink3 = load_link("nvlink3", default_link_catalog(), {});
  EXPECT_EQ(c.intra_node.latency, nvlink3.latency);
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth / GBPerSecond(1), 300.0);
  // 200 Gb/s matches the ib-hdr catalog link, whose latency and efficiency apply.
  ASSERT_TRUE(c.inter_node.has_value());
  EXPECT_EQ(c.inter_node->nic.name, "ib-hdr");
  EXPECT_DOUBLE_EQ(c.inter_node->nic.bandwidth / GbitPerSecond(1), 200.0);
}

// The echo of another link names none, so a link with every figure of the GPU's default link
// is that link wherever it was read; other figures keep only a named link's name, their own.
TEST(Cluster, ALinkWithTheDefaultLinksFiguresIsTheDefaultLink) {
  const std::string nvlink4_figures =
      "bandwidth: 450 GB/s, latency: 3.4 us, bandwidth_efficiency: 0.82, nvls_bus_efficiency: "
      "1.067, "
      "nvls_latency: 25 us, mesh_links: 0";
  for (const char* named : {"", "link: nvlink3, ", "link: nvlink4, "}) {
    EXPECT_EQ(cluster_of("gpu: h100-sxm5-80gb\nintra_node: {" + std::string(named) +
                         nvlink4_figures + "}\n")
                  .intra_node.name,
              "nvlink4")
        << named;
  }
  EXPECT_EQ(cluster_of("gpu: h100-sxm5-80gb\nintra_node: {bandwidth: 300 GB/s}\n").intra_node.name,
            "inline");
  EXPECT_EQ(cluster_of("gpu: h100-sxm5-80gb\nintra_node: {link: nvlink3}\n").intra_node.name,
            "nvlink3");
}

TEST(Cluster, MultiNodeNeedsANetwork) {
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nnodes: 4\ngpus_per_node: 8\n"),
            "c.yaml:1:1: cluster.inter_node is required for 4 nodes");
}

TEST(Cluster, UnknownLinkListsTheCatalog) {
  const std::string message = error_of("gpu: h100-sxm5-80gb\nintra_node: nvlink9\n");
  EXPECT_EQ(message.rfind("c.yaml:2:13: link 'nvlink9' is not in the link catalog", 0), 0u) << message;
  EXPECT_NE(message.find("nvlink4"), std::string::npos);
}

TEST(Cluster, ALinkServesOnlyItsOwnSideOfTheNode) {
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                     "inter_node: {nics_per_node: 8, link: nvlink4}\n"),
            "c.yaml:4:38: link 'nvlink4' is an intra-node link, where a network link is wanted; network links: "
            "ib-hdr, ib-ndr, roce-400g");
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node: ib-ndr\n"),
            "c.yaml:3:13: link 'ib-ndr' is a network link, where an intra-node link is wanted; intra-node links: "
            "infinity-fabric-mi300x, nvlink3, nvlink4, nvlink5");
  // A NIC bandwidth is matched among the network links only: 3600 Gb/s is NVLink 4's 450 GB/s.
  EXPECT_NE(error_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                     "inter_node: {nics_per_node: 8, nic_bandwidth: 3600 Gb/s}\n")
                .find("no catalog network link has nic_bandwidth 3600 Gb/s"),
            std::string::npos);
}

TEST(Cluster, LinkBandwidthsAreAtLeastOneMegabytePerSecond) {
  // A figure without its unit is bytes per second: caught where it is written.
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                     "inter_node: {nics_per_node: 8, nic_bandwidth: -400 Gb/s}\n"),
            "c.yaml:4:47: cluster.inter_node.nic_bandwidth = -400 Gb/s must be at least 1 MB/s (a figure needs its unit, "
            "e.g. 300 GB/s)");
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node: {bandwidth: 300}\n"),
            "c.yaml:3:25: cluster.intra_node.bandwidth = 300 must be at least 1 MB/s (a figure needs its unit, e.g. 300 "
            "GB/s)");
  EXPECT_NO_THROW(cluster_of("gpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node: {bandwidth: 3e11}\n"));
}

TEST(Cluster, NicsBeyondOneAGpuAreAWholeNumberEach) {
  EXPECT_NO_THROW(
      cluster_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                 "inter_node: {nics_per_node: 32, nic_bandwidth: 400 Gb/s}\n"));
  EXPECT_NO_THROW(
      cluster_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                 "inter_node: {nics_per_node: 3, nic_bandwidth: 400 Gb/s}\n"));
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                     "inter_node: {nics_per_node: 12, nic_bandwidth: 400 Gb/s}\n"),
            "c.yaml:4:29: cluster.inter_node.nics_per_node = 12 is more than gpus_per_node = 8 but "
            "not a multiple "
            "of it: each GPU sends through as many NICs of its own as the others");
}

TEST(SystemCatalog, ANodeOfOtherSizeKeepsEachGpusNics) {
  // DGX H100 has a NIC a GPU: four GPUs a node send through four NICs, not the system's eight.
  for (const int gpus : {1, 3, 4, 16}) {
    const std::string node = fmt::format("system: dgx-h100\nnodes: 2\ngpus_per_node: {}\n", gpus);
    EXPECT_EQ(cluster_of(node).inter_node->nics_per_node, gpus);
    EXPECT_EQ(cluster_of(node + "inter_node: {oversubscription: 2}\n").inter_node->nics_per_node,
              gpus);
  }
  EXPECT_EQ(cluster_of("system: dgx-h100\nnodes: 2\ngpus_per_node: 4\n"
                       "inter_node: {nics_per_node: 8}\n")
                .inter_node->nics_per_node,
            8);
  EXPECT_EQ(cluster_of("system: gb200-nvl72\nnodes: 18\n").inter_node->nics_per_node, 4);
}

TEST(SystemCatalog, ANodeTakingNoWholeShareOfTheNicsIsRefused) {
  const std::filesystem::path file = dgx_h100_with_nics(4, "shared-nics");
  const std::string scenario = "system: " + file.string() + "\nnodes: 2\ngpus_per_node: ";
  const int two_gpus_nics = cluster_of(scenario + "2\n").inter_node->nics_per_node;
  const std::string message = error_of(scenario + "3\n");
  // One node sends nothing over the network: its three GPUs keep the one whole NIC of their
  // share, and one GPU alone keeps one too.
  std::string one_node = scenario;
  one_node.replace(one_node.find("nodes: 2"), 8, "nodes: 1");
  const int one_node_nics = cluster_of(one_node + "3\n").inter_node->nics_per_node;
  const int one_gpu_nics = cluster_of(one_node + "1\n").inter_node->nics_per_node;
  std::filesystem::remove_all(file.parent_path());
  EXPECT_EQ(two_gpus_nics, 1);
  EXPECT_EQ(one_node_nics, 1);
  EXPECT_EQ(one_gpu_nics, 1);
  // The file keeps DGX H100's name.
  EXPECT_EQ(message,
            "c.yaml:3:16: cluster.gpus_per_node = 3 GPUs take no whole share of system "
            "dgx-h100's 4 NICs for 8 GPUs; give inter_node.nics_per_node");
}

TEST(Cluster, OversubscriptionOutsideOneTo64IsRejected) {
  for (const char* ratio : {"0.5", "1e+30"}) {
    const std::string message = error_of(fmt::format(
        "gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
        "inter_node: {{nics_per_node: 8, nic_bandwidth: 400 Gb/s, oversubscription: {}}}\n",
        ratio));
    EXPECT_NE(
        message.find(fmt::format(
            "cluster.inter_node.oversubscription = {} must be from 1 (non-blocking) to 64", ratio)),
        std::string::npos)
        << message;
  }
}

TEST(Cluster, AMeshJoinsAtMost64Gpus) {
  const std::string message = error_of(
      "gpu: mi300x\nnodes: 1\ngpus_per_node: 2048\n"
      "intra_node: {link: infinity-fabric-mi300x, mesh_links: 2047}\n");
  EXPECT_NE(
      message.find(
          "cluster.intra_node.mesh_links = 2047 must be from 0 to 63 (a mesh of at most 64 GPUs)"),
      std::string::npos)
      << message;
}

TEST(Cluster, PostOverheadIsAShortTime) {
  const std::string message = error_of(
      "gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
      "inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s, post_overhead: -1 us}\n");
  EXPECT_NE(message.find("cluster.inter_node.post_overhead = -1 us must be in [0, 100] us"), std::string::npos)
      << message;
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                     "inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s, post_overhead: 1 ms}\n"),
            "c.yaml:4:72: cluster.inter_node.post_overhead = 1000 us must be in [0, 100] us: the host's cost of "
            "posting one network send (NCCL: 1 us on Intel hosts, 2 us on AMD)");
}

}  // namespace
}  // namespace paceline

namespace paceline {
namespace {

// Conformance over every catalog system: it loads, and a cluster built of it resolves.
TEST(SystemCatalog, EverySystemBuildsACluster) {
  const std::vector<std::string> names = catalog_systems(default_system_catalog());
  for (const char* required : {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const ClusterSpec c = cluster_of("system: " + name + "\nnodes: 4\n");
    EXPECT_EQ(c.system, name);
    EXPECT_GE(c.nvlink_domain, c.gpus_per_node);
    ASSERT_TRUE(c.inter_node.has_value());
    EXPECT_GT(c.inter_node->nics_per_node, 0);
  }
}

TEST(SystemCatalog, ASystemsNicsBeyondOneAGpuAreAWholeNumberEach) {
  // DGX H100 with 12 NICs: refused at the system file, not at the scenario that names it.
  const std::filesystem::path file = dgx_h100_with_nics(12, "uneven");
  const std::string message = error_of("system: " + file.string() + "\nnodes: 2\n");
  std::filesystem::remove_all(file.parent_path());
  EXPECT_EQ(message.rfind(file.string() + ":", 0), 0u) << message;
  EXPECT_NE(
      message.find(
          "system.nics_per_node = 12 is more than gpus_per_node = 8 but not a multiple of it"),
      std::string::npos)
      << message;
}

TEST(SystemCatalog, ScenarioFieldsOverrideTheSystem) {
  const ClusterSpec c = cluster_of("system: dgx-h100\nnodes: 2\ninter_node: {oversubscription: 2}\nnvls: false\n");
  EXPECT_EQ(c.gpu.name, "h100-sxm5-80gb");
  EXPECT_FALSE(c.nvls);
  EXPECT_DOUBLE_EQ(c.inter_node->oversubscription, 2.0);
  EXPECT_EQ(c.inter_node->nic.name, "ib-ndr");  // the system's NIC, kept
  EXPECT_EQ(c.inter_node->post_overhead, Seconds(1e-6));  // Intel hosts
  // DGX A100's AMD hosts post network sends more slowly; a scenario may say otherwise.
  EXPECT_EQ(cluster_of("system: dgx-a100\nnodes: 2\n").inter_node->post_overhead, Seconds(2e-6));
  EXPECT_EQ(cluster_of("system: dgx-a100\nnodes: 2\ninter_node: {post_overhead: 0 s}\n").inter_node->post_overhead,
            Seconds(0));
  // GB200 NVL72: 72 GPUs share one NVLink domain across 18 trays of 4.
  EXPECT_EQ(cluster_of("system: gb200-nvl72\nnodes: 18\n").nvlink_domain, 72);
  // A DGX's NVLink ends at its node, also at a node of fewer GPUs than the system's.
  EXPECT_EQ(cluster_of("system: dgx-h100\nnodes: 4\ngpus_per_node: 4\n").nvlink_domain, 4);
  EXPECT_EQ(cluster_of("system: gb200-nvl72\nnodes: 36\ngpus_per_node: 2\n").nvlink_domain, 72);
}

TEST(SystemCatalog, TheGpusPathToItsNicsComesFromTheSystemUnlessTheScenarioSaysOtherwise) {
  // DGX A100: PCIe Gen4 x16 between each GPU and its NICs.
  EXPECT_EQ(cluster_of("system: dgx-a100\nnodes: 2\n").inter_node->gpu_nic_pcie,
            BytesPerSecond(31.5e9));
  EXPECT_EQ(cluster_of("system: dgx-a100\nnodes: 2\ninter_node: {gpu_nic_pcie: 63 GB/s}\n")
                .inter_node->gpu_nic_pcie,
            BytesPerSecond(63e9));
  // 0 lifts it; none known: not limiting.
  EXPECT_EQ(cluster_of("system: dgx-a100\nnodes: 2\ninter_node: {gpu_nic_pcie: 0 GB/s}\n")
                .inter_node->gpu_nic_pcie,
            BytesPerSecond(0));
  EXPECT_EQ(cluster_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
                       "inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s}\n")
                .inter_node->gpu_nic_pcie,
            BytesPerSecond(0));
  EXPECT_EQ(
      error_of("gpu: h100-sxm5-80gb\nnodes: 2\ngpus_per_node: 8\n"
               "inter_node: {nics_per_node: 8, nic_bandwidth: 400 Gb/s, gpu_nic_pcie: 63}\n"),
      "c.yaml:4:71: cluster.inter_node.gpu_nic_pcie = 63 B/s must be at least 1 MB/s and below "
      "1000 PB/s (a figure needs its unit, e.g. 54 GB/s)");
}

TEST(SystemCatalog, AGpuWhosePeakAScenarioOverridesRunsItsOwnProfileAtThatPeak) {
  // The H200's measured profile, on an H200 the scenario gives a fifth of its bf16 peak: a
  // compute-bound GEMM takes five times as long (it kept the measured time, and MFU passed 100%).
  const ClusterSpec catalog = cluster_of("system: hgx-h200\n");
  std::ifstream in(default_gpu_catalog() + "/h200-sxm-141gb.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string gpu = text.str();
  const std::string peak = "bf16: {value: \"989.4 TFLOP/s\"";
  ASSERT_NE(gpu.find(peak), std::string::npos);
  gpu.replace(gpu.find(peak), peak.size(), "bf16: {value: \"197.9 TFLOP/s\"");
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("paceline-h200-" + std::to_string(getpid()) + ".yaml"))
                               .string();
  std::ofstream(file) << gpu;
  const ClusterSpec slowed = cluster_of("system: hgx-h200\ngpu: " + file + "\n");
  std::filesystem::remove(file);
  ASSERT_TRUE(catalog.profile && slowed.profile);
  const GemmShape gemm{8192, 8192, 8192};
  const OpTimer catalog_timer(catalog.gpu, catalog.profile);
  const OpTimer slowed_timer(slowed.gpu, slowed.profile);
  ASSERT_TRUE(slowed_timer.gemm(gemm).measured);
  EXPECT_NEAR(slowed_timer.gemm(gemm).time / catalog_timer.gemm(gemm).time,
              *catalog.gpu.peak(DType::kBf16) / FlopPerSecond(197.9e12), 1e-9);
}

// The H200's measured profile under a name of one's own, its compute capability as given.
std::string renamed_h200_profile(const std::string& name, const std::string& capability) {
  std::ifstream in("hardware/profiles/h200-sxm-141gb.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string profile = text.str();
  const std::string field = "compute_capability: \"9.0\"";
  profile.replace(profile.find(field), field.size(), "compute_capability: \"" + capability + "\"");
  const std::string path = paceline::testing::temp_path(name);
  std::ofstream(path) << profile;
  return path;
}

TEST(Cluster, AProfileFileServesOnlyGpusOfTheArchitectureThatMeasuredIt) {
  // Named after no catalog GPU, the H200's profile (compute capability 9.0, Hopper) was taken as
  // measured on the A100 it was given to, and timed it with H200 kernels.
  const std::string path = renamed_h200_profile("mynode.yaml", "9.0");
  const std::string refused =
      path +
      ":6:23: profile.device.compute_capability = '9.0' (hopper, NVIDIA H200) is not that "
      "of a100-sxm4-80gb (ampere), the GPU cluster.profile (c.yaml:2:10) is taken as "
      "measured on; expected compute capability 8.0: a profile serves GPUs of its own "
      "architecture";
  EXPECT_EQ(error_of("gpu: a100-sxm4-80gb\nprofile: " + path + "\n"), refused);
  // Saying it was measured on the A100 does not make it so.
  EXPECT_EQ(error_of("gpu: a100-sxm4-80gb\nprofile: " + path + "\nprofile_gpu: a100-sxm4-80gb\n"),
            refused);
  // On a Hopper GPU it serves, as measured there or standing in for it.
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nprofile: " + path + "\n"), "");
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nprofile: " + path + "\nprofile_gpu: h200-sxm-141gb\n"),
            "");
  // A capability of no catalog architecture (an RTX A6000's 8.6) serves no catalog GPU.
  const std::string ga102 = renamed_h200_profile("ga102.yaml", "8.6");
  EXPECT_EQ(error_of("gpu: a100-sxm4-80gb\nprofile: " + ga102 + "\n"),
            ga102 +
                ":6:23: profile.device.compute_capability = '8.6' (no catalog architecture, "
                "NVIDIA H200) is not that of a100-sxm4-80gb (ampere), the GPU cluster.profile "
                "(c.yaml:2:10) is taken as measured on; expected compute capability 8.0: a "
                "profile serves GPUs of its own architecture");
  const std::string unknown = renamed_h200_profile("unknown.yaml", "nine");
  EXPECT_EQ(error_of("gpu: h100-sxm5-80gb\nprofile: " + unknown + "\n"),
            unknown +
                ":6:23: profile.device.compute_capability = nine is not a CUDA compute "
                "capability; expected major.minor as a string, e.g. \"9.0\"");
}

TEST(SystemCatalog, HostLinkAndGpuMemoryComeFromTheSystemUnlessTheScenarioSaysOtherwise) {
  // Every system gives its GPUs' copies to and from host memory; a scenario may set it.
  for (const std::string& name : catalog_systems(default_system_catalog())) {
    EXPECT_GT(cluster_of("system: " + name + "\n").host_bandwidth, BytesPerSecond(0)) << name;
  }
  EXPECT_EQ(cluster_of("system: dgx-h100\nhost_bandwidth: 20 GB/s\n").host_bandwidth, BytesPerSecond(20e9));
  EXPECT_EQ(cluster_of("gpu: h100-sxm5-80gb\n").host_bandwidth, BytesPerSecond(0));  // none known
  // GB200's GPU is the catalog B200 with GB200's memory; naming the GPU takes the catalog part's.
  const ClusterSpec gb200 = cluster_of("system: gb200-nvl72\n");
  const ClusterSpec b200 = cluster_of("system: gb200-nvl72\ngpu: b200\n");
  EXPECT_EQ(gb200.gpu.name, "b200");
  EXPECT_NEAR(gb200.gpu.memory_capacity / GiB(1), 184.32, 1e-9);
  EXPECT_NEAR(b200.gpu.memory_capacity / GiB(1), 178.35, 1e-9);
  EXPECT_GT(gb200.host_bandwidth, cluster_of("system: dgx-b200\n").host_bandwidth);  // NVLink-C2C, not PCIe
}

}  // namespace
}  // namespace paceline
