#include "sim/network/network_symmetry.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "base/check.h"

namespace paceline {
namespace {

constexpr LinkId kUnmapped = UINT32_MAX;
constexpr std::array<RankDim, 3> kFoldable = {RankDim::kTensor, RankDim::kContext, RankDim::kData};

// A flow's endpoints after moving their GPUs by `move` (the NVLink switch stays put).
template <typename Move>
std::pair<int, int> moved_ends(const Flow& flow, const Move& move) {
  auto end = [&](int gpu) { return gpu == Flow::kSwitch ? gpu : move(gpu); };
  return {end(flow.from), end(flow.to)};
}

// A one-to-one map of links, grown from the flows a shift maps onto each other.
struct LinkMap {
  explicit LinkMap(size_t links) : forward(links, kUnmapped), backward(links, kUnmapped) {}
  std::vector<LinkId> forward;
  std::vector<LinkId> backward;

  bool bind(LinkId from, LinkId to, const Topology& topology) {
    if (forward[from] == kUnmapped && backward[to] == kUnmapped) {
      if (topology.capacity(from) != topology.capacity(to)) return false;
      forward[from] = to;
      backward[to] = from;
      return true;
    }
    return forward[from] == to && backward[to] == from;
  }
};

// Whether `image` is `plan` moved by the shift `move`, binding the links the shift maps.
template <typename Move>
bool maps_onto(const CollectivePlan& plan, const CollectivePlan& image, const Move& move, LinkMap& links,
               const Topology& topology) {
  if (plan.algorithm != image.algorithm || plan.latency != image.latency || plan.phases.size() != image.phases.size()) {
    return false;
  }
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    const std::vector<Flow>& flows = plan.phases[p];
    const std::vector<Flow>& images = image.phases[p];
    if (flows.size() != images.size()) return false;
    std::map<std::pair<int, int>, const Flow*> by_ends;
    for (const Flow& f : images) by_ends.emplace(std::make_pair(f.from, f.to), &f);
    for (const Flow& f : flows) {
      const auto found = by_ends.find(moved_ends(f, move));
      if (found == by_ends.end()) return false;
      const Flow& g = *found->second;
      if (g.size != f.size || g.path.size() != f.path.size()) return false;
      for (size_t k = 0; k < f.path.size(); ++k) {
        if (!links.bind(f.path[k], g.path[k], topology)) return false;
      }
    }
  }
  return true;
}

// The networked collectives each stage's program runs: (group kind, collective, size, routing).
using StageComm = std::tuple<int, int, double, TokenRouting>;
std::vector<std::set<StageComm>> stage_comms(const Lowering& lowering) {
  std::vector<std::set<StageComm>> comms;
  for (const auto& stage : lowering.stages) {
    std::set<StageComm>& set = comms.emplace_back();
    for (TaskId task = 0; task < stage->program.num_tasks(); ++task) {
      if (!stage->program.kind(task).external) continue;
      const TaskComm comm = stage->comm(task);
      set.emplace(static_cast<int>(comm.group), static_cast<int>(comm.collective),
                  comm.size / Bytes(1), comm.routing);
    }
  }
  return comms;
}

// The link map of a shift by `step` along `dim` when that shift is a symmetry of the run.
std::optional<LinkMap> shift_symmetry(RankDim dim, int step, const std::vector<std::set<StageComm>>& comms,
                                      const RankLayout& layout, const CollectiveModel& collectives,
                                      const std::optional<std::chrono::steady_clock::time_point>& deadline) {
  auto move = [&](int rank) { return layout.shifted(rank, dim, step); };
  LinkMap links(collectives.topology().num_links());
  uint64_t groups = 0;
  // The plans of images not yet visited, by (group, collective): each group is then planned once.
  std::map<std::pair<int, StageComm>, CollectivePlan> image_plans;
  for (int k = 0; k < kNumGroupKinds; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    // Each group once: a pipeline link is its sender's alone, other groups all their members'.
    const bool link = kind >= GroupKind::kForwardSend;
    std::vector<uint8_t> covered(layout.num_ranks(), 0);
    for (int rank = 0; rank < layout.num_ranks(); ++rank) {
      if (covered[rank]) continue;
      if (deadline && (groups++ & 255) == 0 && std::chrono::steady_clock::now() > *deadline) {
        throw SimulationDeadlineError("the simulation ran past its wall-clock deadline while proving its peers alike", 0);
      }
      std::vector<int> group = layout.members(kind, rank);
      std::vector<int> image = layout.members(kind, move(rank));
      // A group is visited from its first rank (members come in rank order), a link from its sender.
      const int group_key = link ? rank : group.front();
      std::set<StageComm> runs;  // the networked collectives the group's members run over it
      for (const int member : group) {
        if (!link || member == rank) covered[member] = 1;
        for (const StageComm& comm : comms[layout.coord(member).pp]) {
          if (std::get<0>(comm) == k) runs.insert(comm);
        }
      }
      // The group onto a group...
      for (int& member : group) member = move(member);
      if (!link) {
        std::ranges::sort(group);
        std::ranges::sort(image);
      }
      if (group != image) return std::nullopt;
      const int image_key = link ? move(rank) : image.front();
      // ...and each of its collectives onto its image's plan.
      for (const StageComm& run : runs) {
        const TaskComm comm{static_cast<Collective>(std::get<1>(run)), kind,
                            Bytes(std::get<2>(run)), std::get<3>(run)};
        auto planned = image_plans.extract({group_key, run});
        const CollectivePlan plan =
            planned ? std::move(planned.mapped()) : plan_task_collective(layout, collectives, rank, comm);
        CollectivePlan moved = plan_task_collective(layout, collectives, move(rank), comm);
        if (!maps_onto(plan, moved, move, links, collectives.topology())) return std::nullopt;
        if (!covered[image_key]) image_plans.emplace(std::make_pair(image_key, run), std::move(moved));
      }
    }
  }
  return links;
}

// Whether every simulated rank meets as many simulated partners in each of its groups as rank
// 0 does (the rendezvous size lowering gives the shared program).
bool rendezvous_alike(const RankLayout& layout, const RankFold& fold) {
  auto simulated = [&](const std::vector<int>& members) {
    return std::ranges::count_if(members, [&](int r) { return fold.represents(layout.coord(r)); });
  };
  for (int k = 0; k < kNumGroupKinds; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    const auto expected = simulated(layout.members(kind, 0));
    for (int rank = 0; rank < layout.num_ranks(); ++rank) {
      if (fold.represents(layout.coord(rank)) && simulated(layout.members(kind, rank)) != expected) return false;
    }
  }
  return true;
}

}  // namespace

CollectivePlan plan_task_collective(const RankLayout& layout, const CollectiveModel& collectives, int rank,
                                    const TaskComm& comm) {
  std::vector<int> members = layout.members(comm.group, rank);
  const bool link = comm.group >= GroupKind::kForwardSend;
  if (link) {
    const int other = members.front() == rank ? members.back() : members.front();
    const bool sends = comm.group == GroupKind::kForwardSend || comm.group == GroupKind::kBackwardSend;
    members = sends ? std::vector<int>{rank, other} : std::vector<int>{other, rank};
  }
  CollectivePlan plan = collectives.plan(comm.collective, comm.size, members,
                                         CollectiveAlgorithm::kAuto, comm.routing);
  // A pipeline transfer goes one way: keep the sender's flow only.
  if (link && !plan.phases.empty() && plan.phases.front().size() > 1) plan.phases.front().resize(1);
  return plan;
}

NetworkSymmetry NetworkSymmetry::find(const Lowering& lowering, const RankLayout& layout,
                                      const CollectiveModel& collectives, RankFold candidate,
                                      std::optional<std::chrono::steady_clock::time_point> deadline) {
  NetworkSymmetry symmetry(layout);
  const std::vector<std::set<StageComm>> comms = stage_comms(lowering);
  const size_t num_links = collectives.topology().num_links();
  const RankCoord last = layout.coord(layout.num_ranks() - 1);
  const std::array<int, 3> sizes = {last.tp + 1, last.cp + 1, last.dp + 1};
  std::array<int*, 3> steps = {&candidate.tp, &candidate.cp, &candidate.dp};
  // Along each dimension, the shortest shift that is a symmetry (a dimension of one rank has
  // nothing to fold; a layout may repeat only every few ranks, as when a group straddles nodes).
  std::vector<LinkMap> maps;
  for (size_t d = 0; d < kFoldable.size(); ++d) {
    const int wanted = *steps[d];
    *steps[d] = 0;
    if (wanted == 0) continue;
    for (int step = wanted; step < sizes[d]; ++step) {
      if (sizes[d] % step != 0) continue;
      if (std::optional<LinkMap> map = shift_symmetry(kFoldable[d], step, comms, layout, collectives, deadline)) {
        *steps[d] = step;
        maps.push_back(std::move(*map));
        break;
      }
    }
  }
  if (maps.empty() || !rendezvous_alike(layout, candidate)) return symmetry;
  symmetry.fold_ = candidate;

  // G: every combination of the accepted shifts.
  symmetry.elements_.clear();
  auto multiples = [&](size_t d) { return *steps[d] == 0 ? 1 : sizes[d] / *steps[d]; };
  for (int a = 0; a < multiples(0); ++a) {
    for (int b = 0; b < multiples(1); ++b) {
      for (int c = 0; c < multiples(2); ++c) {
        symmetry.elements_.push_back(Offsets{a * candidate.tp, b * candidate.cp, c * candidate.dp});
      }
    }
  }
  // Link orbits: the links the accepted shifts connect, each named by its least member.
  std::vector<LinkId> parent(num_links);
  std::iota(parent.begin(), parent.end(), LinkId{0});
  auto root = [&](LinkId link) {
    while (parent[link] != link) link = parent[link] = parent[parent[link]];
    return link;
  };
  for (const LinkMap& map : maps) {
    for (LinkId link = 0; link < num_links; ++link) {
      if (map.forward[link] == kUnmapped) continue;
      const LinkId a = root(link);
      const LinkId b = root(map.forward[link]);
      parent[std::max(a, b)] = std::min(a, b);
    }
  }
  symmetry.link_class_.resize(num_links);
  symmetry.class_size_.assign(num_links, 0);
  for (LinkId link = 0; link < num_links; ++link) {
    symmetry.link_class_[link] = root(link);
    ++symmetry.class_size_[symmetry.link_class_[link]];
  }
  for (LinkId link = 0; link < num_links; ++link) {
    symmetry.class_size_[link] = symmetry.class_size_[symmetry.link_class_[link]];
  }
  return symmetry;
}

int NetworkSymmetry::apply(const Offsets& g, int rank) const {
  for (size_t d = 0; d < kFoldable.size(); ++d) {
    if (g[d] != 0) rank = layout_->shifted(rank, kFoldable[d], g[d]);
  }
  return rank;
}

const std::vector<NetworkSymmetry::Offsets>& NetworkSymmetry::stabilizer(GroupKind kind, int rank) const {
  const auto [it, inserted] = stabilizers_.try_emplace(layout_->instance(kind, rank));
  if (inserted) {
    // Groups partition the ranks (a pipeline link is its sender's alone, and a shift never
    // moves a rank onto its link partner), so a shift keeps the group exactly when it keeps
    // `rank` inside it.
    std::vector<int> members = layout_->members(kind, rank);
    std::ranges::sort(members);
    for (const Offsets& g : elements_) {
      if (std::ranges::binary_search(members, apply(g, rank))) it->second.push_back(g);
    }
  }
  return it->second;
}

NetworkPlan NetworkSymmetry::fold_plan(const CollectivePlan& plan, GroupKind kind, int rank) const {
  NetworkPlan folded{.phases = {}, .latency = plan.latency};
  if (link_class_.empty()) {
    for (const std::vector<Flow>& phase : plan.phases) {
      std::vector<NetworkFlow>& flows = folded.phases.emplace_back();
      for (const Flow& f : phase) {
        NetworkFlow& flow = flows.emplace_back(NetworkFlow{{}, f.size});
        for (const LinkId link : f.path) flow.path.push_back(LinkLoad{link, 1.0});
      }
    }
    return folded;
  }
  const std::vector<Offsets>& stabilizer = this->stabilizer(kind, rank);
  const double collectives = static_cast<double>(elements_.size()) / static_cast<double>(stabilizer.size());
  for (const std::vector<Flow>& phase : plan.phases) {
    std::map<std::pair<int, int>, size_t> by_ends;
    for (size_t i = 0; i < phase.size(); ++i) by_ends.emplace(std::make_pair(phase[i].from, phase[i].to), i);
    std::vector<uint8_t> seen(phase.size(), 0);
    std::vector<NetworkFlow>& flows = folded.phases.emplace_back();
    for (size_t i = 0; i < phase.size(); ++i) {
      if (seen[i]) continue;
      // The flow's orbit under the shifts that keep its collective's group.
      int orbit = 0;
      for (const Offsets& g : stabilizer) {
        const auto image = by_ends.find(moved_ends(phase[i], [&](int gpu) { return apply(g, gpu); }));
        PACELINE_CHECK(image != by_ends.end(), "a symmetric collective whose flow has no image");
        if (!seen[image->second]) {
          seen[image->second] = 1;
          ++orbit;
        }
      }
      NetworkFlow& flow = flows.emplace_back(NetworkFlow{{}, phase[i].size});
      for (const LinkId link : phase[i].path) {
        const LinkId cls = link_class_[link];
        const double load = collectives * orbit / class_size_[link];
        const auto same = std::ranges::find(flow.path, cls, &LinkLoad::link);
        if (same == flow.path.end()) {
          flow.path.push_back(LinkLoad{cls, load});
        } else {
          same->flows += load;
        }
      }
    }
  }
  return folded;
}

}  // namespace paceline
