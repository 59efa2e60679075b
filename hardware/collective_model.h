// CollectiveModel: analytical (α–β) time of NCCL-style collectives over a group of GPUs,
// from where the group sits on the cluster.
//
// Inside one node a ring over the NVLink fabric: all-reduce 2(n−1)/n·S/B + 2(n−1)·α,
// all-gather and reduce-scatter (n−1)/n·S/B + (n−1)·α, with B the link's effective bandwidth.
// Across nodes the bottleneck is the NICs the group's GPUs own: with k group members per node,
// each node sends through k·(nics/gpus_per_node) NICs, so the ring's bus bandwidth is
// min(B_nvlink, that NIC bandwidth / oversubscription); all-reduce latency follows NCCL's
// tree over nodes (2·log2 N network steps) and a chain inside each node.
#ifndef PACELINE_HARDWARE_COLLECTIVE_MODEL_H_
#define PACELINE_HARDWARE_COLLECTIVE_MODEL_H_

#include "base/kernel_shapes.h"
#include "base/units.h"
#include "hardware/cluster.h"

namespace paceline {

// Where a group's members sit: `size` ranks, `per_node` of them in each node they span.
struct GroupPlacement {
  int size = 1;
  int per_node = 1;
  int nodes() const { return (size + per_node - 1) / per_node; }
};

class CollectiveModel {
 public:
  explicit CollectiveModel(const ClusterSpec& cluster) : cluster_(cluster) {}

  // `size`: the buffer as nccl-tests counts it (see CommSpec::size in models/op.h): the full
  // buffer for all-reduce, all-gather and reduce-scatter; bytes sent per rank otherwise.
  Seconds time(Collective collective, Bytes size, const GroupPlacement& group) const;

  // The bus bandwidth a ring over this group reaches.
  BytesPerSecond ring_bandwidth(const GroupPlacement& group) const;

 private:
  const ClusterSpec& cluster_;
};

}  // namespace paceline

#endif  // PACELINE_HARDWARE_COLLECTIVE_MODEL_H_
