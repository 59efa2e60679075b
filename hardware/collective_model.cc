#include "hardware/collective_model.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace paceline {

BytesPerSecond CollectiveModel::ring_bandwidth(const GroupPlacement& group) const {
  const BytesPerSecond intra = cluster_.intra_node.effective_bandwidth();
  if (group.nodes() <= 1) return intra;
  PACELINE_CHECK(cluster_.inter_node.has_value(), "a multi-node group without an inter-node network");
  const NetworkSpec& net = *cluster_.inter_node;
  // The NICs attached to the group's GPUs on one node carry its traffic off the node.
  const double nics = std::min<double>(net.nics_per_node,
                                       static_cast<double>(group.per_node) * net.nics_per_node / cluster_.gpus_per_node);
  const BytesPerSecond network = net.nic.effective_bandwidth() * (std::max(nics, 1.0) / net.oversubscription);
  return group.per_node > 1 ? std::min(intra, network) : network;
}

Seconds CollectiveModel::time(Collective collective, Bytes size, const GroupPlacement& group) const {
  const int n = group.size;
  if (n <= 1 || collective == Collective::kNone || size <= Bytes(0)) return Seconds(0);
  const int nodes = group.nodes();
  const int k = std::min(group.per_node, n);
  const Seconds alpha_intra = cluster_.intra_node.latency;
  const Seconds alpha_net = nodes > 1 ? cluster_.inter_node->nic.latency : alpha_intra;
  const BytesPerSecond bus = ring_bandwidth(group);
  // One pass of a ring: n−1 steps, of which `nodes` cross a node boundary when it spans several.
  const Seconds ring_pass_latency =
      nodes > 1 ? alpha_intra * static_cast<double>(n - nodes) + alpha_net * static_cast<double>(nodes)
                : alpha_intra * static_cast<double>(n - 1);
  const double fraction = static_cast<double>(n - 1) / n;

  switch (collective) {
    case Collective::kAllReduce: {
      const Seconds transfer = size * (2.0 * fraction) / bus;
      if (nodes <= 1) return transfer + ring_pass_latency * 2.0;
      // NCCL's double binary tree between nodes (log-depth), chained inside each node.
      const Seconds tree_latency = alpha_intra * (2.0 * (k - 1)) + alpha_net * (2.0 * std::ceil(std::log2(nodes)));
      return transfer + std::min(ring_pass_latency * 2.0, tree_latency);
    }
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return size * fraction / bus + ring_pass_latency;
    case Collective::kAllToAll: {
      // Each rank sends `size` spread evenly over its n−1 peers; the peers on other nodes are
      // reached through the NICs its node's group members share.
      const double remote = nodes > 1 ? static_cast<double>(n - k) / (n - 1) : 0.0;
      const Seconds local = size * (1.0 - remote) / cluster_.intra_node.effective_bandwidth();
      Seconds across(0);
      if (remote > 0.0) {
        const NetworkSpec& net = *cluster_.inter_node;
        const double nics_per_gpu = static_cast<double>(net.nics_per_node) / cluster_.gpus_per_node;
        across = size * remote / (net.nic.effective_bandwidth() * (nics_per_gpu / net.oversubscription));
      }
      return std::max(local, across) + alpha_intra + (nodes > 1 ? alpha_net : Seconds(0));
    }
    case Collective::kSendRecv: {
      if (nodes <= 1) return size / cluster_.intra_node.effective_bandwidth() + alpha_intra;
      const NetworkSpec& net = *cluster_.inter_node;
      const double nics_per_gpu = std::min(1.0, static_cast<double>(net.nics_per_node) / cluster_.gpus_per_node);
      return size / (net.nic.effective_bandwidth() * nics_per_gpu) + alpha_net;
    }
    case Collective::kNone:
      break;
  }
  return Seconds(0);
}

}  // namespace paceline
