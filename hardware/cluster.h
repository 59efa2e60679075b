// ClusterSpec: the GPUs of a training cluster and the links between them.
//
// `intra_node` is the GPU-to-GPU fabric inside a node (NVLink/NVSwitch), per GPU per
// direction; `inter_node` the NICs and the fabric between nodes. Either may name a link in
// hardware/catalog/links/ or be written inline; fields an inline form leaves out (latency,
// bandwidth efficiency) come from the GPU's default intra-node link, or from the catalog
// network link of the same NIC bandwidth.
#ifndef PACELINE_HARDWARE_CLUSTER_H_
#define PACELINE_HARDWARE_CLUSTER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/units.h"
#include "hardware/gpu_spec.h"
#include "hardware/kernel_profile.h"

namespace paceline {

class YamlMap;

struct LinkSpec {
  std::string name;            // catalog name, or "inline"
  BytesPerSecond bandwidth;    // per GPU (intra-node) or per NIC (network), per direction
  Seconds latency;             // per step of a collective
  double bandwidth_efficiency = 1.0;  // fraction of `bandwidth` large collectives reach
  BytesPerSecond effective_bandwidth() const { return bandwidth * bandwidth_efficiency; }
};

struct NetworkSpec {
  int nics_per_node = 0;
  LinkSpec nic;
  std::string topology = "fat-tree";  // fat-tree | rail-optimized
  double oversubscription = 1.0;      // ≥ 1: spine capacity below the sum of NICs
};

struct ClusterSpec {
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 1;
  LinkSpec intra_node;
  std::optional<NetworkSpec> inter_node;  // required when nodes > 1
  // Measured kernel times (paceline-calibrate), possibly from another GPU of the same family.
  std::shared_ptr<const KernelProfile> profile;

  int num_gpus() const { return nodes * gpus_per_node; }
};

// Reads the scenario's `cluster:` mapping (resolving the GPU and links in the catalogs).
ClusterSpec read_cluster(YamlMap& map);

std::string default_link_catalog();     // <data root>/hardware/catalog/links
std::string default_profile_catalog();  // <data root>/hardware/profiles
std::vector<std::string> catalog_links(const std::string& catalog_dir);
// Loads a catalog link by name; throws InputError at `where` listing the known links.
LinkSpec load_link(const std::string& name, const std::string& catalog_dir, const SourceLocation& where);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_CLUSTER_H_
