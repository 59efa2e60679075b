// Topology: the links of a cluster and the route between any two GPUs.
//
// Inside an NVLink domain (a node, or a multi-node domain such as GB200 NVL72) every GPU has one
// port into a non-blocking NVSwitch fabric: a transmit and a receive link of the NVLink bandwidth.
// A mesh link (AMD Infinity Fabric) instead gives every GPU one link to each other GPU of its node,
// each of bandwidth / mesh_links, so a pair of GPUs talks over one of them. Between domains traffic
// leaves through the NIC serving the GPU (NICs are spread evenly over the node's GPUs) into a leaf
// switch and, when the destination hangs off another leaf, up through the spine: each leaf's
// uplinks are one aggregate link per direction of (its NIC ports × NIC bandwidth) /
// oversubscription, as equal-cost multipath spreads flows over the spines (a non-blocking leaf's
// uplinks cannot bind, so routes skip them). A rail-optimized fabric puts NIC i of every node on
// the leaves of rail i; a plain fat-tree puts all NICs of a node on one leaf. Where a node has
// more NICs than GPUs, each GPU's own NICs are one link of their summed bandwidth. Where the
// cluster gives the GPUs' PCIe paths to their NICs, a NIC link carries no more than the paths of
// the GPUs behind it; the leaves' uplinks are of the NICs' line rate.
//
// Link capacities are the effective bandwidths (line rate × the link's bandwidth efficiency).
#ifndef PACELINE_HARDWARE_TOPOLOGY_H_
#define PACELINE_HARDWARE_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/units.h"
#include "hardware/cluster.h"

namespace paceline {

using LinkId = uint32_t;

class Topology {
 public:
  explicit Topology(const ClusterSpec& cluster);

  size_t num_links() const { return capacity_.size(); }
  BytesPerSecond capacity(LinkId link) const { return capacity_[link]; }
  // Every link's capacity, by LinkId, in bytes per second.
  std::vector<double> capacities() const;
  std::string link_name(LinkId link) const;

  // The links a flow from GPU `from` to GPU `to` crosses (global GPU indices; empty when
  // from == to). Appends to `path`.
  void route(int from, int to, std::vector<LinkId>& path) const;
  // Per-hop latency of the route (NVLink, or NIC plus switch hops).
  Seconds route_latency(int from, int to) const;

  // A GPU's NVLink port into its domain's switches (NVLink SHARP reduces in the switch); none
  // in a mesh.
  LinkId nvlink_tx(int gpu) const { return static_cast<LinkId>(2 * gpu); }
  LinkId nvlink_rx(int gpu) const { return static_cast<LinkId>(2 * gpu + 1); }
  // Whether GPUs of a node are joined by direct links (a mesh) rather than through switches.
  bool mesh() const { return mesh_; }

  int num_gpus() const { return num_gpus_; }
  int gpus_per_node() const { return gpus_per_node_; }
  // How many GPUs of a node send through one NIC (0 without a network).
  int gpus_per_nic() const { return nics_per_node_ > 0 ? (gpus_per_node_ + nics_per_node_ - 1) / nics_per_node_ : 0; }
  int node_of(int gpu) const { return gpu / gpus_per_node_; }
  int domain_of(int gpu) const { return gpu / nvlink_domain_; }
  // The NIC (rail) serving a GPU within its node.
  int rail_of(int gpu) const;
  int leaf_of(int node, int rail) const;
  // The leaf switch serving a GPU's NIC; the group of nodes whose NICs share leaves (all of a
  // fat-tree leaf's, or one rail's leaf each); whether the leaves' uplinks are oversubscribed.
  int leaf_of(int gpu) const { return leaf_of(node_of(gpu), rail_of(gpu)); }
  int leaf_group_of(int gpu) const { return node_of(gpu) / nodes_per_leaf_; }
  bool oversubscribed() const { return oversubscribed_; }

 private:
  // The direct link from `from` to `to`, GPUs of one node, in a mesh.
  LinkId mesh_link(int from, int to) const;
  LinkId nic_tx(int node, int rail) const { return nic_base_ + static_cast<LinkId>(2 * (node * nics_per_node_ + rail)); }
  LinkId nic_rx(int node, int rail) const { return nic_tx(node, rail) + 1; }
  LinkId leaf_up(int leaf) const { return leaf_base_ + static_cast<LinkId>(2 * leaf); }
  LinkId leaf_down(int leaf) const { return leaf_up(leaf) + 1; }

  int num_gpus_ = 0;
  int gpus_per_node_ = 1;
  int nvlink_domain_ = 1;
  int nics_per_node_ = 0;  // NIC links: a GPU's own NICs count as one
  int nics_per_gpu_ = 1;
  int nodes_per_leaf_ = 1;
  bool mesh_ = false;
  bool rail_optimized_ = false;
  bool oversubscribed_ = false;
  LinkId nic_base_ = 0;
  LinkId leaf_base_ = 0;
  int num_leaves_ = 0;
  Seconds nvlink_latency_;
  Seconds network_latency_;
  std::vector<BytesPerSecond> capacity_;
};

}  // namespace paceline

#endif  // PACELINE_HARDWARE_TOPOLOGY_H_
