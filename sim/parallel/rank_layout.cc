#include "sim/parallel/rank_layout.h"

#include <algorithm>
#include <map>

#include "base/check.h"

namespace paceline {

RankLayout::RankLayout(const Parallelism& parallelism, int nvlink_domain)
    : parallelism_(parallelism), nvlink_domain_(nvlink_domain) {
  const std::array<int, 4> size = {parallelism.tp, parallelism.cp, parallelism.dp, parallelism.pp};
  int stride = 1;
  for (const RankDim dim : parallelism.rank_order) {
    stride_[static_cast<int>(dim)] = stride;
    stride *= size[static_cast<int>(dim)];
  }
  num_ranks_ = stride;
}

RankCoord RankLayout::coord(int rank) const {
  auto along = [&](RankDim dim, int size) { return (rank / stride_[static_cast<int>(dim)]) % size; };
  return RankCoord{along(RankDim::kTensor, parallelism_.tp), along(RankDim::kContext, parallelism_.cp),
                   along(RankDim::kData, parallelism_.dp), along(RankDim::kPipeline, parallelism_.pp)};
}

int RankLayout::rank_of(const RankCoord& c) const {
  return c.tp * stride_[static_cast<int>(RankDim::kTensor)] + c.cp * stride_[static_cast<int>(RankDim::kContext)] +
         c.dp * stride_[static_cast<int>(RankDim::kData)] + c.pp * stride_[static_cast<int>(RankDim::kPipeline)];
}

int RankLayout::shifted(int rank, RankDim dim, int steps) const {
  RankCoord c = coord(rank);
  auto step = [&](int& x, int size) { x = (x + steps % size + size) % size; };
  switch (dim) {
    case RankDim::kTensor: step(c.tp, parallelism_.tp); break;
    case RankDim::kContext: step(c.cp, parallelism_.cp); break;
    case RankDim::kData: step(c.dp, parallelism_.dp); break;
    case RankDim::kPipeline: PACELINE_CHECK(false, "pipeline stages are never shifted onto each other");
  }
  return rank_of(c);
}

RankCoord RankLayout::with_expert_index(RankCoord c, int index) const {
  c.tp = index % parallelism_.tp;
  return with_data_index(c, index / parallelism_.tp);
}

RankCoord RankLayout::with_data_index(RankCoord c, int index) const {
  c.cp = index % parallelism_.cp;
  c.dp = index / parallelism_.cp;
  return c;
}

int RankLayout::next_stage_rank(int rank) const {
  const RankCoord c = coord(rank);
  return rank_of(RankCoord{c.tp, c.cp, c.dp, (c.pp + 1) % parallelism_.pp});
}

std::vector<int> RankLayout::members(GroupKind kind, int rank) const {
  const RankCoord c = coord(rank);
  const Parallelism& p = parallelism_;
  std::vector<int> result;
  const int d = data_index(c);
  const int data_size = p.dp * p.cp;
  switch (kind) {
    case GroupKind::kTensor:
      for (int i = 0; i < p.tp; ++i) result.push_back(rank_of(RankCoord{i, c.cp, c.dp, c.pp}));
      break;
    case GroupKind::kContext:
      for (int i = 0; i < p.cp; ++i) result.push_back(rank_of(RankCoord{c.tp, i, c.dp, c.pp}));
      break;
    case GroupKind::kData:
      for (int i = 0; i < data_size; ++i) result.push_back(rank_of(with_data_index(c, i)));
      break;
    case GroupKind::kExpert: {
      const int e = expert_index(c);
      for (int i = e - e % p.ep; i < e - e % p.ep + p.ep; ++i) result.push_back(rank_of(with_expert_index(c, i)));
      break;
    }
    case GroupKind::kExpertData: {
      for (int i = expert_index(c) % p.ep; i < p.tp * data_size; i += p.ep) {
        result.push_back(rank_of(with_expert_index(c, i)));
      }
      break;
    }
    case GroupKind::kDataShard:
      for (int i = 0; i < p.zero_shard; ++i) result.push_back(rank_of(with_data_index(c, d - d % p.zero_shard + i)));
      break;
    case GroupKind::kDataReplica:
      for (int i = d % p.zero_shard; i < data_size; i += p.zero_shard) result.push_back(rank_of(with_data_index(c, i)));
      break;
    case GroupKind::kModel:
      for (int s = 0; s < p.pp; ++s) {
        for (int t = 0; t < p.tp; ++t) result.push_back(rank_of(RankCoord{t, c.cp, c.dp, s}));
      }
      break;
    case GroupKind::kEmbedding:
      result.push_back(rank_of(RankCoord{c.tp, c.cp, c.dp, 0}));
      if (p.pp > 1) result.push_back(rank_of(RankCoord{c.tp, c.cp, c.dp, p.pp - 1}));
      break;
    case GroupKind::kForwardSend:
      result = {rank, next_stage_rank(rank)};
      break;
    case GroupKind::kForwardRecv:
      result = {rank_of(RankCoord{c.tp, c.cp, c.dp, (c.pp + p.pp - 1) % p.pp}), rank};
      break;
    case GroupKind::kBackwardSend:
      result = {rank, rank_of(RankCoord{c.tp, c.cp, c.dp, (c.pp + p.pp - 1) % p.pp})};
      break;
    case GroupKind::kBackwardRecv:
      result = {next_stage_rank(rank), rank};
      break;
  }
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  return result;
}

RankLayout::Placements RankLayout::placements(GroupKind kind) const {
  PACELINE_CHECK(kind < GroupKind::kForwardSend, "pipeline links are placed by link_members");
  // Stage 0's groups, each once.
  std::vector<std::vector<int>> groups;
  std::vector<uint8_t> covered(num_ranks_, 0);
  for (int dp = 0; dp < parallelism_.dp; ++dp) {
    for (int cp = 0; cp < parallelism_.cp; ++cp) {
      for (int tp = 0; tp < parallelism_.tp; ++tp) {
        const int rank = rank_of(RankCoord{tp, cp, dp, 0});
        if (covered[rank]) continue;
        groups.push_back(members(kind, rank));
        for (const int m : groups.back()) covered[m] = 1;
      }
    }
  }
  // The most spread of stage 0's groups moved by `move` ranks, as (domains, its first rank, it).
  struct Spread {
    int domains = 0;
    int first = 0;
    const std::vector<int>* group = nullptr;
    int move = 0;
    bool beats(const Spread& other) const {
      return other.group == nullptr || domains > other.domains || (domains == other.domains && first < other.first);
    }
  };
  auto most_spread = [&](int move) {
    Spread best;
    for (const std::vector<int>& group : groups) {
      Spread spread{.first = group.front() + move, .group = &group, .move = move};
      int last = -1;
      for (const int m : group) {  // in rank order: a new domain starts where the last ends
        const int domain = (m + move) / nvlink_domain_;
        spread.domains += domain != last;
        last = domain;
      }
      if (spread.beats(best)) best = spread;
    }
    return best;
  };
  auto moved = [](const Spread& spread) {
    std::vector<int> group = *spread.group;
    for (int& m : group) m += spread.move;
    return group;
  };
  // A stage's groups are stage 0's moved by whole stages, and only the move modulo the domain
  // changes which straddles the most; a group spanning the stages is the same for each.
  const bool spans_stages = kind == GroupKind::kModel || kind == GroupKind::kEmbedding;
  const int stage_stride = stride_[static_cast<int>(RankDim::kPipeline)];
  std::map<int, Spread> by_residue;
  Placements result;
  Spread any;
  for (int stage = 0; stage < parallelism_.pp; ++stage) {
    const int move = spans_stages ? 0 : stage * stage_stride;
    auto [it, inserted] = by_residue.try_emplace(move % nvlink_domain_);
    if (inserted) it->second = most_spread(move % nvlink_domain_);
    Spread spread = it->second;
    spread.first += move - move % nvlink_domain_;
    spread.move = move;
    result.by_stage.push_back(moved(spread));
    if (spread.beats(any)) any = spread;
  }
  result.any_stage = moved(any);
  return result;
}

std::vector<int> RankLayout::placement(GroupKind kind, int stage) const {
  Placements placed = placements(kind);
  return stage == kEveryStage ? std::move(placed.any_stage) : std::move(placed.by_stage[stage]);
}

std::vector<int> RankLayout::link_members(int stage, bool forward) const {
  const int to_stage = forward ? (stage + 1) % parallelism_.pp : (stage + parallelism_.pp - 1) % parallelism_.pp;
  return {rank_of(RankCoord{0, 0, 0, stage}), rank_of(RankCoord{0, 0, 0, to_stage})};
}

uint32_t RankLayout::instance(GroupKind kind, int rank) const {
  // Pipeline links are named by their sender; every other group by its lowest member.
  int representative = 0;
  switch (kind) {
    case GroupKind::kForwardSend:
    case GroupKind::kBackwardSend: representative = rank; break;
    case GroupKind::kForwardRecv:
    case GroupKind::kBackwardRecv: {
      const RankCoord c = coord(rank);
      const int sender_stage = kind == GroupKind::kForwardRecv ? (c.pp + parallelism_.pp - 1) % parallelism_.pp
                                                                : (c.pp + 1) % parallelism_.pp;
      representative = this->rank_of(RankCoord{c.tp, c.cp, c.dp, sender_stage});
      break;
    }
    default: representative = members(kind, rank).front(); break;
  }
  // Sends and receives of one link share an instance: a send's kind and its receive's kind map
  // to the same number.
  uint32_t family = static_cast<uint32_t>(kind);
  if (kind == GroupKind::kForwardRecv) family = static_cast<uint32_t>(GroupKind::kForwardSend);
  if (kind == GroupKind::kBackwardRecv) family = static_cast<uint32_t>(GroupKind::kBackwardSend);
  PACELINE_CHECK(static_cast<uint64_t>(num_ranks_) * kNumGroupKinds < UINT32_MAX, "too many ranks");
  return family * static_cast<uint32_t>(num_ranks_) + static_cast<uint32_t>(representative);
}

std::vector<uint32_t> RankLayout::instances(int rank) const {
  std::vector<uint32_t> result(kNumGroupKinds);
  for (int k = 0; k < kNumGroupKinds; ++k) result[k] = instance(static_cast<GroupKind>(k), rank);
  return result;
}

}  // namespace paceline
