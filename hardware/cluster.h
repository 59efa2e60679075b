// ClusterSpec: the GPUs of a training cluster and the links between them.
//
// `intra_node` is the GPU-to-GPU fabric inside a node (NVLink/NVSwitch), per GPU per
// direction; `inter_node` the NICs and the fabric between nodes. Either may name a link in
// hardware/catalog/links/ or be written inline; fields an inline form leaves out (latency,
// bandwidth efficiency) come from the GPU's default intra-node link, or from the catalog
// network link of the same NIC bandwidth.
#ifndef PACELINE_HARDWARE_CLUSTER_H_
#define PACELINE_HARDWARE_CLUSTER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/units.h"
#include "hardware/gpu_spec.h"
#include "hardware/kernel_profile.h"

namespace paceline {

class YamlMap;

enum class LinkKind { kIntraNode, kNetwork };

struct LinkSpec {
  std::string name;            // catalog name, or "inline"
  LinkKind kind = LinkKind::kIntraNode;
  BytesPerSecond bandwidth;    // per GPU (intra-node) or per NIC (network), per direction
  Seconds latency;             // per step of a collective
  double bandwidth_efficiency = 1.0;  // fraction of `bandwidth` large collectives reach
  // Intra-node links whose switches reduce (NVLink SHARP): a large NVLS all-reduce's bus
  // bandwidth (nccl-tests busbw, 2(n−1)/n·S over its time) as a fraction of `bandwidth`, and its
  // latency, one step for the whole collective. Zero where the link has no figures.
  double nvls_bus_efficiency = 0.0;
  Seconds nvls_latency;
  // Intra-node links without a switch (AMD Infinity Fabric): each GPU has this many direct
  // links, one to each other GPU of a full node, `bandwidth` their sum; 0 for a switched fabric.
  int mesh_links = 0;
  BytesPerSecond effective_bandwidth() const { return bandwidth * bandwidth_efficiency; }
};

struct NetworkSpec {
  int nics_per_node = 0;
  LinkSpec nic;
  std::string topology = "fat-tree";  // fat-tree | rail-optimized
  double oversubscription = 1.0;      // ≥ 1: spine capacity below the sum of NICs
  int nodes_per_leaf = 32;            // nodes whose NICs (of one rail, if rail-optimized) share a leaf
  // The host's cost of posting one network send (NCCL's net overhead, NCCL_NET_OVERHEAD): a ring
  // across NVLink domains launches a post for every step, so each of its steps inside a domain
  // takes at least 3 of them (Simple protocol). 0: not modelled.
  Seconds post_overhead;
  // Each GPU's own path to its NICs (the PCIe link through the switch they share), per
  // direction: a GPU's NICs together carry no more. Zero: not limiting.
  BytesPerSecond gpu_nic_pcie;
};

// A node design from hardware/catalog/systems/ (DGX A100, DGX H100, GB200 NVL72, ...): the
// defaults a cluster built of it takes, each overridable in the scenario.
struct SystemSpec {
  std::string name;
  std::string gpu;         // GPU catalog name
  // The memory its GPUs have where the catalog GPU is a sibling part with other memory (GB200's
  // B200 beside the HGX B200's); unset: the catalog GPU's.
  std::optional<Bytes> gpu_memory_capacity;
  int gpus_per_node = 8;
  std::string intra_node;  // link catalog name
  int nvlink_domain = 8;
  bool nvls = false;
  int nics_per_node = 0;
  std::string nic;         // network link catalog name
  std::string topology = "fat-tree";
  int nodes_per_leaf = 32;
  double oversubscription = 1.0;
  Seconds post_overhead;
  BytesPerSecond gpu_nic_pcie;  // zero where the system gives no figure
  // Copies between a GPU and host memory, per GPU per direction (pinned memory, the copy
  // engines); zero where the system gives no figure.
  BytesPerSecond gpu_host_bandwidth;
};

std::string default_system_catalog();  // <data root>/hardware/catalog/systems
std::vector<std::string> catalog_systems(const std::string& catalog_dir);
SystemSpec load_system(const std::string& name, const std::string& catalog_dir, const SourceLocation& where);

struct ClusterSpec {
  // The system it is built of and the GPU the scenario names, as any scenario can name them: a
  // catalog name, or the absolute path of the file read; "" for none (the GPU: the system's, or
  // inline). An inline GPU is kept as written.
  std::string system;
  std::string gpu_reference;
  Json gpu_mapping;
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 1;
  LinkSpec intra_node;
  int nvlink_domain = 1;  // GPUs sharing one NVLink fabric: gpus_per_node, or more (GB200 NVL72)
  bool nvls = false;      // the NVLink switches reduce in-network (NVLink SHARP)
  // Copies between a GPU and host memory (activation offload), per GPU per direction: the
  // scenario's `host_bandwidth`, else the system's; zero when neither gives one.
  BytesPerSecond host_bandwidth;
  std::optional<NetworkSpec> inter_node;  // required when nodes > 1
  // Collective algorithm per Collective (indexed by the enum), 0 = auto: the scenario's
  // `collectives:` overrides (see hardware/collective_model.h).
  std::array<int, 6> algorithms{};
  // Measured kernel times (paceline-calibrate), possibly from another GPU of the same family.
  std::shared_ptr<const KernelProfile> profile;
  // The profile and the GPU it was measured on, as `gpu_reference`; "" without a profile.
  std::string profile_reference;
  std::string profile_gpu_reference;

  int num_gpus() const { return nodes * gpus_per_node; }
};

// The most GPUs a cluster may have: ranks are numbered in int and their degrees multiplied in
// 64 bits, and a simulation's setup grows with the count (about a minute for 2^20 GPUs).
inline constexpr int64_t kMostGpus = int64_t{1} << 20;

// Reads the scenario's `cluster:` mapping (resolving the GPU and links in the catalogs).
ClusterSpec read_cluster(YamlMap& map);

std::string default_link_catalog();     // <data root>/hardware/catalog/links
std::string default_profile_catalog();  // <data root>/hardware/profiles
std::vector<std::string> catalog_links(const std::string& catalog_dir);
// Loads a catalog link by name; throws InputError at `where` listing the known links.
LinkSpec load_link(const std::string& name, const std::string& catalog_dir, const SourceLocation& where);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_CLUSTER_H_
