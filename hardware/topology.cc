#include "hardware/topology.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"

namespace paceline {

Topology::Topology(const ClusterSpec& cluster)
    : num_gpus_(cluster.num_gpus()),
      gpus_per_node_(cluster.gpus_per_node),
      nvlink_domain_(std::min(cluster.nvlink_domain, cluster.num_gpus())),
      mesh_(cluster.intra_node.mesh_links > 0 && cluster.gpus_per_node > 1),
      nvlink_latency_(cluster.intra_node.latency) {
  if (mesh_) {
    // A link to each of the node's other GPUs, by GPU and then by peer.
    PACELINE_CHECK(nvlink_domain_ == gpus_per_node_ && gpus_per_node_ - 1 <= cluster.intra_node.mesh_links,
                   "a mesh of direct links spans one node, with a link to each of its GPUs");
    const BytesPerSecond per_peer =
        cluster.intra_node.effective_bandwidth() / static_cast<double>(cluster.intra_node.mesh_links);
    capacity_.assign(static_cast<size_t>(num_gpus_) * (gpus_per_node_ - 1), per_peer);
  } else {
    // NVLink ports: one transmit and one receive link per GPU.
    capacity_.assign(2 * static_cast<size_t>(num_gpus_), cluster.intra_node.effective_bandwidth());
  }
  nic_base_ = static_cast<LinkId>(capacity_.size());
  leaf_base_ = nic_base_;
  if (!cluster.inter_node) return;
  const NetworkSpec& net = *cluster.inter_node;
  // A GPU with NICs of its own (AWS P5: four 100 Gb/s EFA NICs behind each GPU's PCIe switch)
  // sends through all of them at once, NCCL's channels or the network plugin spreading over them:
  // they are one link of their summed bandwidth.
  nics_per_gpu_ = std::max(1, net.nics_per_node / gpus_per_node_);
  nics_per_node_ = net.nics_per_node / nics_per_gpu_;
  const BytesPerSecond line_capacity =
      net.nic.effective_bandwidth() * static_cast<double>(nics_per_gpu_);
  nodes_per_leaf_ = net.nodes_per_leaf;
  rail_optimized_ = net.topology == "rail-optimized";
  oversubscribed_ = net.oversubscription > 1.0;
  network_latency_ = net.nic.latency;
  // A NIC carries no more than the PCIe paths of the GPUs behind it take: one GPU's where it has
  // NICs of its own, the paths of the GPUs sharing it together (which bounds them all sending at
  // once; a lone GPU behind a shared NIC is not held to its own path). A path is credited at the
  // NIC's bandwidth efficiency, as the NIC's line rate is: no measurement separates the two.
  std::vector<int> gpus_on_rail(static_cast<size_t>(nics_per_node_), 0);
  for (int local = 0; local < gpus_per_node_; ++local)
    ++gpus_on_rail[static_cast<size_t>(rail_of(local))];
  const int nodes = cluster.nodes;
  for (int node = 0; node < nodes; ++node) {
    for (const int gpus : gpus_on_rail) {
      BytesPerSecond capacity = line_capacity;
      if (net.gpu_nic_pcie > BytesPerSecond(0)) {
        capacity = std::min(capacity, net.gpu_nic_pcie * (net.nic.bandwidth_efficiency * gpus));
      }
      capacity_.push_back(capacity);  // transmit
      capacity_.push_back(capacity);  // receive
    }
  }
  leaf_base_ = static_cast<LinkId>(capacity_.size());
  // Leaves: per rail and group of nodes (rail-optimized), or per group of nodes (fat-tree).
  const int groups = (nodes + nodes_per_leaf_ - 1) / nodes_per_leaf_;
  num_leaves_ = rail_optimized_ ? groups * nics_per_node_ : groups;
  const int ports_per_leaf = rail_optimized_ ? nodes_per_leaf_ : nodes_per_leaf_ * nics_per_node_;
  // Oversubscription is of the NICs' line rate, whatever their GPUs' paths to them take.
  const BytesPerSecond uplink = line_capacity * (ports_per_leaf / net.oversubscription);
  for (int leaf = 0; leaf < num_leaves_; ++leaf) {
    capacity_.push_back(uplink);
    capacity_.push_back(uplink);
  }
}

int Topology::rail_of(int gpu) const {
  if (nics_per_node_ == 0) return 0;
  const int local = gpu % gpus_per_node_;
  return local * nics_per_node_ / gpus_per_node_;
}

int Topology::leaf_of(int node, int rail) const {
  const int group = node / nodes_per_leaf_;
  return rail_optimized_ ? group * nics_per_node_ + rail : group;
}

LinkId Topology::mesh_link(int from, int to) const {
  const int local_to = to % gpus_per_node_;
  const int peer = local_to - (local_to > from % gpus_per_node_ ? 1 : 0);
  return static_cast<LinkId>(from * (gpus_per_node_ - 1) + peer);
}

void Topology::route(int from, int to, std::vector<LinkId>& path) const {
  PACELINE_CHECK(from >= 0 && to >= 0 && from < num_gpus_ && to < num_gpus_, "a route between unknown GPUs");
  if (from == to) return;
  if (domain_of(from) == domain_of(to)) {
    if (mesh_) {
      path.push_back(mesh_link(from, to));
      return;
    }
    path.push_back(nvlink_tx(from));
    path.push_back(nvlink_rx(to));
    return;
  }
  PACELINE_CHECK(nics_per_node_ > 0, "a route between NVLink domains without a network");
  const int from_node = node_of(from);
  const int to_node = node_of(to);
  const int from_rail = rail_of(from);
  // The destination's NIC is the one on the sender's rail: NCCL routes through the GPU on that
  // rail inside the destination node (PXN) rather than across rails in the fabric.
  const int to_rail = rail_optimized_ ? from_rail : rail_of(to);
  path.push_back(nic_tx(from_node, from_rail));
  const int from_leaf = leaf_of(from_node, from_rail);
  const int to_leaf = leaf_of(to_node, to_rail);
  // A non-blocking leaf's uplinks carry at most what its NICs send and receive, so they never
  // bind: flows skip them (and stay independent of other leaves' traffic).
  if (from_leaf != to_leaf && oversubscribed_) {
    path.push_back(leaf_up(from_leaf));
    path.push_back(leaf_down(to_leaf));
  }
  path.push_back(nic_rx(to_node, to_rail));
}

Seconds Topology::route_latency(int from, int to) const {
  return domain_of(from) == domain_of(to) ? nvlink_latency_ : network_latency_;
}

std::vector<double> Topology::capacities() const {
  std::vector<double> result;
  result.reserve(capacity_.size());
  for (const BytesPerSecond c : capacity_) result.push_back(c / BytesPerSecond(1));
  return result;
}

std::string Topology::link_name(LinkId link) const {
  if (link < nic_base_ && mesh_) {
    const int from = static_cast<int>(link) / (gpus_per_node_ - 1);
    const int peer = static_cast<int>(link) % (gpus_per_node_ - 1);
    const int local_to = peer + (peer >= from % gpus_per_node_ ? 1 : 0);
    return fmt::format("gpu {} link to gpu {}", from, from - from % gpus_per_node_ + local_to);
  }
  if (link < nic_base_) return fmt::format("gpu {} nvlink {}", link / 2, link % 2 ? "rx" : "tx");
  if (link < leaf_base_) {
    const int index = static_cast<int>((link - nic_base_) / 2);
    const int node = index / nics_per_node_;
    const int nic = index % nics_per_node_;
    const char* direction = (link - nic_base_) % 2 ? "rx" : "tx";
    if (nics_per_gpu_ == 1) return fmt::format("node {} nic {} {}", node, nic, direction);
    return fmt::format("node {} nics {}-{} {}", node, nic * nics_per_gpu_,
                       (nic + 1) * nics_per_gpu_ - 1, direction);
  }
  return fmt::format("leaf {} {}", (link - leaf_base_) / 2, (link - leaf_base_) % 2 ? "down" : "up");
}

}  // namespace paceline
