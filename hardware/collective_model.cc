#include "hardware/collective_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "base/check.h"
#include "hardware/max_min.h"

namespace paceline {

std::string_view to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kAuto: return "auto";
    case CollectiveAlgorithm::kRing: return "ring";
    case CollectiveAlgorithm::kTree: return "tree";
    case CollectiveAlgorithm::kHierarchical: return "hierarchical";
    case CollectiveAlgorithm::kNvls: return "nvls";
    case CollectiveAlgorithm::kDirect: return "direct";
    case CollectiveAlgorithm::kDeduplicated:
      return "deduplicated";
  }
  return "?";
}

CollectiveModel::CollectiveModel(const ClusterSpec& cluster, const Topology& topology)
    : cluster_(cluster), topology_(topology), capacity_(topology.capacities()) {}

uint16_t CollectiveModel::kernel_sms(Collective collective, std::span<const int> members) const {
  // The catalog keeps each figure below the GPU's SM count. A deduplicated exchange's kernels hold
  // what their launch asks, 20 SMs by default (DeepEP's Buffer.num_sms, Megatron-Core's
  // moe_deepep_num_sms), near NCCL's figure used here.
  const KernelEfficiency& k = cluster_.gpu.kernels;
  if (collective != Collective::kSendRecv) return static_cast<uint16_t>(k.communication_sms);
  return static_cast<uint16_t>(by_domain(members).size() > 1 ? k.send_recv_network_sms : k.send_recv_nvlink_sms);
}

std::vector<std::vector<int>> CollectiveModel::by_domain(std::span<const int> members) const {
  std::vector<std::vector<int>> domains;
  std::map<int, size_t> index;
  for (const int m : members) {
    auto [it, inserted] = index.emplace(topology_.domain_of(m), domains.size());
    if (inserted) domains.emplace_back();
    domains[it->second].push_back(m);
  }
  return domains;
}

void CollectiveModel::add_flow(PhaseFlows& phase, int from, int to, Bytes size) const {
  if (from == to || size <= Bytes(0)) return;
  // One flow per pair: repeated edges (channels through the same GPUs) add up.
  const auto [it, inserted] = phase.index.emplace(std::make_pair(from, to), phase.flows.size());
  if (!inserted) {
    phase.flows[it->second].size += size;
    return;
  }
  Flow flow{.size = size, .from = from, .to = to};
  topology_.route(from, to, flow.path);
  phase.flows.push_back(std::move(flow));
}

void CollectiveModel::spread_over_mesh(PhaseFlows& phase) const {
  if (!topology_.mesh()) return;
  // RCCL runs rings over a node's direct links in as many orders as it takes to use them all:
  // what a domain's GPUs send each other, summed, goes evenly over the links between them.
  std::map<int, std::pair<Bytes, std::set<int>>> within;  // by domain: bytes and GPUs
  PhaseFlows spread;
  for (Flow& flow : phase.flows) {
    if (topology_.domain_of(flow.from) == topology_.domain_of(flow.to)) {
      auto& [bytes, gpus] = within[topology_.domain_of(flow.from)];
      bytes += flow.size;
      gpus.insert({flow.from, flow.to});
      continue;
    }
    spread.index.emplace(std::make_pair(flow.from, flow.to), spread.flows.size());
    spread.flows.push_back(std::move(flow));
  }
  for (const auto& [domain, sent] : within) {
    const auto& [bytes, gpus] = sent;
    const double links = static_cast<double>(gpus.size() * (gpus.size() - 1));
    for (const int from : gpus) {
      for (const int to : gpus) add_flow(spread, from, to, bytes / links);
    }
  }
  phase = std::move(spread);
}

CollectivePlan CollectiveModel::ring(Collective collective, Bytes size, std::span<const int> members) const {
  CollectivePlan plan;
  plan.algorithm = CollectiveAlgorithm::kRing;
  const double n = static_cast<double>(members.size());
  const double passes = collective == Collective::kAllReduce ? 2.0 : 1.0;
  const Bytes per_edge = size * (passes * (n - 1.0) / n);
  const std::vector<std::vector<int>> domains = by_domain(members);
  const int nodes = static_cast<int>(domains.size());
  PhaseFlows phase;
  if (nodes == 1) {
    for (size_t i = 0; i < members.size(); ++i) add_flow(phase, members[i], members[(i + 1) % members.size()], per_edge);
    spread_over_mesh(phase);
    plan.phases.push_back(std::move(phase.flows));
    plan.latency = cluster_.intra_node.latency * (passes * (n - 1.0));
    return plan;
  }
  // NCCL gives each channel a NIC of its own: channel c leaves every domain from the GPU at the
  // position of the first of the group's GPUs behind NIC c in the first domain, so each NIC the
  // group's GPUs own carries one ring (as many channels as NICs, however many GPUs share one).
  const std::vector<size_t> exits = channel_exits(domains.front());
  const double channels = static_cast<double>(exits.size());
  for (const size_t exit : exits) {
    std::vector<int> order;
    for (const auto& domain : domains) {
      const size_t k = domain.size();
      for (size_t i = 1; i <= k; ++i) order.push_back(domain[(exit + i) % k]);
    }
    for (size_t i = 0; i < order.size(); ++i) add_flow(phase, order[i], order[(i + 1) % order.size()], per_edge / channels);
  }
  spread_over_mesh(phase);
  plan.phases.push_back(std::move(phase.flows));
  // NCCL's ring latency: of each pass's n − 1 steps, nodes − 1 cross the network, and the rest
  // take at least the three network posts the ring launches per step.
  const Seconds network = cluster_.inter_node->nic.latency;
  const Seconds intra = std::max(cluster_.intra_node.latency, 3.0 * cluster_.inter_node->post_overhead);
  plan.latency = (intra * (n - nodes) + network * (nodes - 1.0)) * passes;
  return plan;
}

std::vector<size_t> CollectiveModel::channel_exits(std::span<const int> domain) const {
  std::map<std::pair<int, int>, size_t> first_behind;  // (node, rail) → position
  for (size_t j = 0; j < domain.size(); ++j) {
    first_behind.emplace(std::make_pair(topology_.node_of(domain[j]), topology_.rail_of(domain[j])), j);
  }
  std::vector<size_t> exits;
  for (const auto& [nic, position] : first_behind) exits.push_back(position);
  return exits;
}

namespace {

// NCCL's double binary tree all-reduce reaches 0.92 of the bus bandwidth a ring reaches over the
// same channels (NCCL's own cost model, src/graph/tuning.cc ncclTopoTuneModel: `busBw*.92` for
// Tree all_reduce, unchanged from v2.4 to v2.28). The links' efficiencies are measured on rings.
constexpr double kTreeBusEfficiency = 0.92;

}  // namespace

CollectivePlan CollectiveModel::tree(Bytes size, std::span<const int> members) const {
  CollectivePlan plan;
  plan.algorithm = CollectiveAlgorithm::kTree;
  const std::vector<std::vector<int>> domains = by_domain(members);
  size = size / kTreeBusEfficiency;
  const int nodes = static_cast<int>(domains.size());
  PhaseFlows phase;
  // Inside each domain a chain reduces towards the leader and broadcasts back: S each way.
  for (const auto& domain : domains) {
    for (size_t i = 0; i + 1 < domain.size(); ++i) {
      add_flow(phase, domain[i + 1], domain[i], size);
      add_flow(phase, domain[i], domain[i + 1], size);
    }
  }
  // Two binary trees over the domains, mirrored (NCCL's double binary tree), on every channel:
  // each NIC of the group's GPUs carries both, each with its share of half the data.
  const std::vector<size_t> exits = channel_exits(domains.front());
  const Bytes per_tree = size / (2.0 * static_cast<double>(exits.size()));
  for (const size_t exit : exits) {
    for (int t = 0; t < 2; ++t) {
      auto leader = [&](int position) {
        const auto& domain = domains[t == 0 ? position : nodes - 1 - position];
        return domain[exit % domain.size()];
      };
      for (int child = 1; child < nodes; ++child) {
        const int parent = (child - 1) / 2;
        add_flow(phase, leader(child), leader(parent), per_tree);
        add_flow(phase, leader(parent), leader(child), per_tree);
      }
    }
  }
  spread_over_mesh(phase);
  plan.phases.push_back(std::move(phase.flows));
  const double k = static_cast<double>(domains.front().size());
  plan.latency = cluster_.intra_node.latency * (2.0 * (k - 1.0)) +
                 cluster_.inter_node->nic.latency * (2.0 * std::floor(std::log2(static_cast<double>(nodes))));
  return plan;
}

CollectivePlan CollectiveModel::hierarchical(Bytes size, std::span<const int> members) const {
  CollectivePlan plan;
  plan.algorithm = CollectiveAlgorithm::kHierarchical;
  const std::vector<std::vector<int>> domains = by_domain(members);
  const int nodes = static_cast<int>(domains.size());
  const size_t k = domains.front().size();
  const double kd = static_cast<double>(k);
  // Reduce-scatter inside each domain, all-reduce of each shard across domains (one ring per
  // local index), all-gather inside each domain.
  PhaseFlows inside;
  for (const auto& domain : domains) {
    for (size_t i = 0; i < domain.size(); ++i) {
      add_flow(inside, domain[i], domain[(i + 1) % domain.size()], size * ((kd - 1.0) / kd));
    }
  }
  PhaseFlows across;
  for (size_t j = 0; j < k; ++j) {
    for (int d = 0; d < nodes; ++d) {
      add_flow(across, domains[d][j % domains[d].size()], domains[(d + 1) % nodes][j % domains[(d + 1) % nodes].size()],
               size / kd * (2.0 * (nodes - 1.0) / nodes));
    }
  }
  spread_over_mesh(inside);
  plan.phases = {inside.flows, std::move(across.flows), inside.flows};
  const Seconds network = cluster_.inter_node->nic.latency;
  plan.latency = cluster_.intra_node.latency * (2.0 * (kd - 1.0)) + network * (2.0 * (nodes - 1.0));
  return plan;
}

CollectivePlan CollectiveModel::nvls(Bytes size, std::span<const int> members) const {
  CollectivePlan plan;
  plan.algorithm = CollectiveAlgorithm::kNvls;
  PACELINE_CHECK(!topology_.mesh(), "NVLS needs a switch to reduce in");
  plan.phases.emplace_back();
  // Every GPU sends its buffer into the switch and receives the sum back, so its port carries S
  // each way at least; a large group runs at the measured NVLS bus bandwidth (2(n−1)/n·S at
  // nvls_bus_efficiency of the line rate), on ports that carry bandwidth_efficiency.
  const LinkSpec& link = cluster_.intra_node;
  const double n = static_cast<double>(members.size());
  const Bytes sent =
      size * std::max(1.0, 2.0 * (n - 1.0) / n * link.bandwidth_efficiency / link.nvls_bus_efficiency);
  for (const int m : members) {
    plan.phases.back().push_back(Flow{.path = {topology_.nvlink_tx(m)}, .size = sent, .from = m});
    plan.phases.back().push_back(Flow{.path = {topology_.nvlink_rx(m)}, .size = sent, .to = m});
  }
  plan.latency = link.nvls_latency;
  return plan;
}

CollectivePlan CollectiveModel::direct(Collective collective, Bytes size, std::span<const int> members) const {
  CollectivePlan plan;
  plan.algorithm = CollectiveAlgorithm::kDirect;
  PhaseFlows phase;
  if (collective == Collective::kSendRecv) {
    // A ring shift: every member sends `size` to the next (context parallelism passes key and
    // value blocks this way; a pipeline link is the two-member case).
    for (size_t i = 0; i < members.size(); ++i) {
      const int to = members[(i + 1) % members.size()];
      add_flow(phase, members[i], to, size);
      plan.latency = std::max(plan.latency, topology_.route_latency(members[i], to));
    }
    plan.phases.push_back(std::move(phase.flows));
    return plan;
  }
  const double peers = static_cast<double>(members.size()) - 1.0;
  Seconds latency;
  for (const int from : members) {
    for (const int to : members) {
      if (from == to) continue;
      add_flow(phase, from, to, size / peers);
      latency = std::max(latency, topology_.route_latency(from, to));
    }
  }
  plan.phases.push_back(std::move(phase.flows));
  plan.latency = latency;
  return plan;
}

namespace {

// log C(n, r).
double log_choose(int n, int r) {
  return std::lgamma(n + 1.0) - std::lgamma(r + 1.0) - std::lgamma(n - r + 1.0);
}

constexpr double kLogZero = -std::numeric_limits<double>::infinity();

// log(e^a + e^b).
double log_add(double a, double b) {
  if (a == kLogZero) return b;
  if (b == kLogZero) return a;
  const double high = std::max(a, b);
  return high + std::log1p(std::exp(std::min(a, b) - high));
}

// A polynomial in x up to x^degree, as the logs of its coefficients (kLogZero for none).
using LogPolynomial = std::vector<double>;

LogPolynomial log_product(const LogPolynomial& a, const LogPolynomial& b) {
  LogPolynomial product(a.size(), kLogZero);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == kLogZero) continue;
    for (size_t j = 0; i + j < a.size(); ++j) {
      if (b[j] != kLogZero) product[i + j] = log_add(product[i + j], a[i] + b[j]);
    }
  }
  return product;
}

// Of the experts a GPU or domain holds, by how many a group holds: how many groups hold that
// many. Both draws below depend on this alone.
using GroupHoldings = std::map<int, int>;

// (1 + x)^available − 1: the ways to take i ≥ 1 of a group's `available` experts, by i.
LogPolynomial log_ways_to_take_some(int available, int degree) {
  LogPolynomial ways(degree + 1, kLogZero);
  for (int i = 1; i <= std::min(available, degree); ++i) ways[i] = log_choose(available, i);
  return ways;
}

// The chance that a token needs one of the experts a GPU or a domain holds, `held[g]` of them in
// expert group g. Its group_top_k groups are drawn without repeats, then its top_k experts from
// those groups' experts, at least one from each (TokenRouting::covers_drawn_groups): DeepSeek's
// routers rank groups by their best experts (V3 by the sum of each group's top two), so where a
// token takes two or more experts a group, a group they pick nearly always gives it one. A Monte
// Carlo of DeepSeek-V3's router with random scores fills 3.95 to 3.96 of its 4 groups; taking one
// expert a group (top 4 of 4 groups) it fills 3.1 to 3.2, nearer the uniform draw below, which
// takes the rest of the routings. The ways to take top_k experts that cover every drawn group
// and miss the held ones are the x^top_k coefficient of Π over the drawn groups of (1 + x)^(free
// experts) − 1; summed over the drawn sets of groups, counted by groups of like holdings, and
// divided by the draws that cover them (log_count_covering_draws), all in logarithms (the counts
// outgrow a double).
double covering_chance_of_one_of(const TokenRouting& routing, const GroupHoldings& groups_holding,
                                 double log_covering_draws) {
  const int drawn = routing.group_top_k;
  const int top_k = routing.top_k;
  const int per_group = routing.experts / routing.groups;
  // missing[j]: over the sets of j groups drawn so far, the ways to take experts missing the held.
  std::vector<LogPolynomial> missing(drawn + 1, LogPolynomial(top_k + 1, kLogZero));
  missing[0][0] = 0.0;
  for (const auto& [in_group, groups] : groups_holding) {
    const LogPolynomial ways = log_ways_to_take_some(per_group - in_group, top_k);
    std::vector<LogPolynomial> next = missing;  // none of these groups drawn
    LogPolynomial taken_from_all(top_k + 1, kLogZero);
    taken_from_all[0] = 0.0;
    for (int taken = 1; taken <= std::min(groups, drawn); ++taken) {
      taken_from_all = log_product(taken_from_all, ways);
      const double log_sets = log_choose(groups, taken);
      for (int before = 0; before + taken <= drawn; ++before) {
        const LogPolynomial added = log_product(missing[before], taken_from_all);
        for (int i = 0; i <= top_k; ++i) {
          next[before + taken][i] = log_add(next[before + taken][i], added[i] + log_sets);
        }
      }
    }
    missing = std::move(next);
  }
  const double log_missed = missing[drawn][top_k];
  if (log_missed == kLogZero) return 1.0;
  return std::clamp(1.0 - std::exp(log_missed - log_covering_draws), 0.0, 1.0);
}

// The log of how many draws cover their groups: the sets of group_top_k groups times the ways to
// take top_k experts with some from each, the x^top_k coefficient of ((1 + x)^(experts a group)
// − 1)^group_top_k.
double log_count_covering_draws(const TokenRouting& routing) {
  PACELINE_CHECK(routing.covers_drawn_groups(),
                 "a routing whose draws need not cover their groups");
  LogPolynomial covering(routing.top_k + 1, kLogZero);
  covering[0] = 0.0;
  const LogPolynomial any = log_ways_to_take_some(routing.experts / routing.groups, routing.top_k);
  for (int g = 0; g < routing.group_top_k; ++g) covering = log_product(covering, any);
  return log_choose(routing.groups, routing.group_top_k) + covering[routing.top_k];
}

// As covering_chance_of_one_of, but a token's top_k experts are drawn from all its drawn groups'
// experts alike (with one group, 1 − C(experts − held, top_k)/C(experts, top_k)): where it draws
// every group, or takes fewer than two experts a group.
double uniform_chance_of_one_of(const TokenRouting& routing, const GroupHoldings& groups_holding) {
  // The drawn sets differ only in how many groups of each holding they take, the empty groups
  // filling the rest: counted in logarithms, as C(groups, group_top_k) outgrows a double.
  const auto none_held = groups_holding.find(0);
  const int empty = none_held == groups_holding.end() ? 0 : none_held->second;
  const int drawn = routing.group_top_k;
  // The log of how many sets of groups there are by (groups drawn, experts they hold).
  std::map<std::pair<int, int>, double> log_sets{{{0, 0}, 0.0}};
  for (const auto& [in_group, groups] : groups_holding) {
    if (in_group == 0) continue;
    std::map<std::pair<int, int>, double> next;
    for (const auto& [key, log_count] : log_sets) {
      for (int taken = 0; taken <= std::min(groups, drawn - key.first); ++taken) {
        const auto [it, inserted] =
            next.emplace(std::pair{key.first + taken, key.second + taken * in_group}, kLogZero);
        it->second = log_add(it->second, log_count + log_choose(groups, taken));
      }
    }
    log_sets = std::move(next);
  }
  const int pool = drawn * (routing.experts / routing.groups);
  const double log_all = log_choose(routing.groups, drawn);
  double missed = 0.0;
  for (const auto& [key, log_count] : log_sets) {
    const auto [taken, in_taken] = key;
    if (drawn - taken > empty) continue;
    double none = 1.0;
    for (int i = 0; i < routing.top_k; ++i)
      none *= std::max(0.0, static_cast<double>(pool - in_taken - i) / (pool - i));
    missed += std::exp(log_count + log_choose(empty, drawn - taken) - log_all) * none;
  }
  return 1.0 - missed;
}

// A token's chance to need a GPU or a domain that holds `held[g]` of the experts of group g,
// counted once for each distinct GroupHoldings: GPUs and domains alike share them.
class ChanceOfOneOf {
 public:
  explicit ChanceOfOneOf(const TokenRouting& routing)
      : routing_(routing),
        log_covering_draws_(routing.covers_drawn_groups() ? log_count_covering_draws(routing)
                                                          : 0.0) {}
  double operator()(const std::vector<int>& held) {
    GroupHoldings groups_holding;
    for (const int in_group : held) ++groups_holding[in_group];
    const auto [it, inserted] = chances_.emplace(std::move(groups_holding), 0.0);
    if (inserted) {
      it->second = routing_.covers_drawn_groups()
                       ? covering_chance_of_one_of(routing_, it->first, log_covering_draws_)
                       : uniform_chance_of_one_of(routing_, it->first);
    }
    return it->second;
  }

 private:
  TokenRouting routing_;
  double log_covering_draws_;
  std::map<GroupHoldings, double> chances_;
};

}  // namespace

CollectivePlan CollectiveModel::deduplicated(Bytes token_bytes, const TokenRouting& routing,
                                             std::span<const int> members) const {
  CollectivePlan plan;
  plan.algorithm = CollectiveAlgorithm::kDeduplicated;
  // Member i holds experts [i·E/n, (i + 1)·E/n); how many of them each expert group has.
  const int per_member = routing.experts / static_cast<int>(members.size());
  const int per_group = routing.experts / routing.groups;
  std::map<int, std::vector<int>> held;  // by member
  for (size_t i = 0; i < members.size(); ++i) {
    std::vector<int>& by_group =
        held.emplace(members[i], std::vector<int>(routing.groups, 0)).first->second;
    for (int expert = static_cast<int>(i) * per_member;
         expert < static_cast<int>(i + 1) * per_member; ++expert) {
      ++by_group[expert / per_group];
    }
  }
  ChanceOfOneOf chance_of_one_of(routing);
  std::map<int, double> needs;  // by member: a token's chance to need it
  for (const auto& [member, by_group] : held) needs[member] = chance_of_one_of(by_group);
  const std::vector<std::vector<int>> domains = by_domain(members);
  std::vector<double> domain_needs;
  for (const std::vector<int>& domain : domains) {
    std::vector<int> by_group(routing.groups, 0);
    for (const int member : domain) {
      for (int g = 0; g < routing.groups; ++g) by_group[g] += held[member][g];
    }
    domain_needs.push_back(chance_of_one_of(by_group));
  }
  PhaseFlows phase;
  Seconds network_latency;
  Seconds nvlink_latency;
  for (size_t a = 0; a < domains.size(); ++a) {
    for (size_t position = 0; position < domains[a].size(); ++position) {
      const int from = domains[a][position];
      for (const int to : domains[a]) {
        add_flow(phase, from, to, token_bytes * needs[to]);
        if (to != from)
          nvlink_latency = std::max(nvlink_latency, topology_.route_latency(from, to));
      }
      for (size_t b = 0; b < domains.size(); ++b) {
        if (b == a) continue;
        const int relay = domains[b][position % domains[b].size()];
        add_flow(phase, from, relay, token_bytes * domain_needs[b]);
        network_latency = std::max(network_latency, topology_.route_latency(from, relay));
        // What the relay received for each GPU of its domain, it passes on.
        for (const int to : domains[b]) add_flow(phase, relay, to, token_bytes * needs[to]);
      }
    }
  }
  plan.phases.push_back(std::move(phase.flows));
  plan.latency = network_latency + nvlink_latency;
  return plan;
}

CollectiveModel::Resolved CollectiveModel::faster(CollectivePlan first, CollectivePlan second) const {
  // Timing a plan fills its flows' rates once per flow to finish; bounds apart by more than
  // the rounding of a timed plan (a flow within 1e-9 of its bytes is done) decide without it.
  constexpr double kApart = 1.0 + 1e-6;
  const TimeBounds first_bounds = time_bounds(first);
  const TimeBounds second_bounds = time_bounds(second);
  const bool second_faster = first_bounds.high * kApart < second_bounds.low    ? false
                             : second_bounds.high * kApart < first_bounds.low ? true
                                                                              : time(second) < time(first);
  if (second_faster) std::swap(first, second);
  const CollectiveAlgorithm algorithm = first.algorithm;
  return {algorithm, std::move(first)};
}

CollectiveModel::Resolved CollectiveModel::resolve(Collective collective, Bytes size,
                                                   std::span<const int> members) const {
  const auto chosen = static_cast<CollectiveAlgorithm>(cluster_.algorithms[static_cast<int>(collective)]);
  const bool one_domain = by_domain(members).size() == 1;
  switch (collective) {
    case Collective::kAllReduce:
      if (chosen == CollectiveAlgorithm::kNvls && one_domain && cluster_.nvls) return {chosen};
      if (chosen == CollectiveAlgorithm::kRing) return {chosen};
      if ((chosen == CollectiveAlgorithm::kTree || chosen == CollectiveAlgorithm::kHierarchical) && !one_domain) {
        return {chosen};
      }
      if (one_domain && !cluster_.nvls) return {CollectiveAlgorithm::kRing};
      // NVLS's one long step against the ring's many short ones: small groups and small buffers
      // can be faster on the ring. Across domains the ring against the tree.
      if (one_domain) return faster(nvls(size, members), ring(collective, size, members));
      return faster(ring(collective, size, members), tree(size, members));
    case Collective::kAllGather:
    case Collective::kReduceScatter: return {CollectiveAlgorithm::kRing};
    default: return {CollectiveAlgorithm::kDirect};
  }
}

CollectivePlan CollectiveModel::planned_by(CollectiveAlgorithm algorithm, Collective collective, Bytes size,
                                           std::span<const int> members) const {
  switch (algorithm) {
    case CollectiveAlgorithm::kRing: return ring(collective, size, members);
    case CollectiveAlgorithm::kTree: return tree(size, members);
    case CollectiveAlgorithm::kHierarchical: return hierarchical(size, members);
    case CollectiveAlgorithm::kNvls: return nvls(size, members);
    default: return direct(collective, size, members);
  }
}

Seconds CollectiveModel::extrapolated_measurement(Seconds measured,
                                                  const CollectivePlan& at_measured_size,
                                                  const CollectivePlan& here, bool larger) const {
  const Seconds analytical_there = time(at_measured_size);
  const double ratio = measured / analytical_there;
  // Below the smallest measurement latency dominates both: the analytical curve scaled.
  if (!larger) return time(here) * ratio;
  // Above the largest, the bytes beyond it move at the analytical bandwidth, scaled toward the
  // measured/analytical ratio as far as the measurement was bandwidth-bound: a table that stops
  // while latency dominates (64 KiB) says nothing of the bandwidth, one that reaches it (1 GiB)
  // says it all.
  CollectivePlan bare = at_measured_size;
  bare.latency = Seconds(0);
  const double bandwidth_share = time(bare) / analytical_there;
  return measured +
         (time(here) - analytical_there) * (bandwidth_share * ratio + 1.0 - bandwidth_share);
}

CollectivePlan CollectiveModel::analytical_plan(Collective collective, Bytes size,
                                                std::span<const int> members,
                                                CollectiveAlgorithm algorithm) const {
  if (algorithm != CollectiveAlgorithm::kAuto)
    return planned_by(algorithm, collective, size, members);
  Resolved resolved = resolve(collective, size, members);
  return resolved.plan ? std::move(*resolved.plan)
                       : planned_by(resolved.algorithm, collective, size, members);
}

CollectivePlan CollectiveModel::plan(Collective collective, Bytes size,
                                     std::span<const int> members, CollectiveAlgorithm algorithm,
                                     const TokenRouting& routing) const {
  if (members.size() <= 1 || collective == Collective::kNone || size <= Bytes(0)) return {};
  // No link profile measures it: NCCL's all-to-all sends every copy.
  if (collective == Collective::kAllToAll && routing.deduplicated()) {
    PACELINE_CHECK(algorithm == CollectiveAlgorithm::kAuto, "a routed exchange has one algorithm");
    return deduplicated(size, routing, members);
  }
  CollectivePlan planned = analytical_plan(collective, size, members, algorithm);
  // A link profile measured this collective on this many GPUs of one node: its flows are
  // scaled so that, alone, they take the measured time (latency included). Beyond the measured
  // sizes the analytical curve carries the nearest measurement (extrapolated_measurement).
  if (cluster_.profile && by_domain(members).size() == 1) {
    if (const std::optional<KernelProfile::MeasuredCollective> measurement =
            cluster_.profile->collective(collective, static_cast<int>(members.size()), size)) {
      Seconds measured = measurement->time;
      if (measurement->measured_size != size) {
        measured = extrapolated_measurement(
            measured, analytical_plan(collective, measurement->measured_size, members, algorithm),
            planned, measurement->measured_size < size);
      }
      CollectivePlan bare = planned;
      bare.latency = Seconds(0);
      const Seconds modeled = time(bare);
      if (modeled > Seconds(0)) {
        const double factor = measured / modeled;
        for (auto& phase : planned.phases) {
          for (Flow& flow : phase) flow.size *= factor;
        }
        planned.latency = Seconds(0);
      }
    }
  }
  return planned;
}

CollectiveModel::PhaseTransfer CollectiveModel::transfer_of(const std::vector<Flow>& phase) {
  PhaseTransfer transfer;
  for (const Flow& flow : phase) {
    transfer.paths.push_back(flow.path);
    transfer.bytes.push_back(flow.size / Bytes(1));
  }
  return transfer;
}

Seconds CollectiveModel::time(const CollectivePlan& plan) const {
  Seconds total = plan.latency;
  for (const auto& phase : plan.phases) {
    const PhaseTransfer transfer = transfer_of(phase);
    total += Seconds(transfer_time(transfer.paths, transfer.bytes, capacity_));
  }
  return total;
}

CollectiveModel::TimeBounds CollectiveModel::time_bounds(const CollectivePlan& plan) const {
  TimeBounds bounds{plan.latency, plan.latency};
  for (const auto& phase : plan.phases) {
    const PhaseTransfer transfer = transfer_of(phase);
    const TransferTimeBounds phase_bounds = transfer_time_bounds(transfer.paths, transfer.bytes, capacity_);
    bounds.low += Seconds(phase_bounds.low_s);
    bounds.high += Seconds(phase_bounds.high_s);
  }
  return bounds;
}

Seconds CollectiveModel::time(Collective collective, Bytes size, std::span<const int> members,
                              const TokenRouting& routing) const {
  if (members.size() <= 1 || collective == Collective::kNone || size <= Bytes(0)) return Seconds(0);
  return cached(
      std::make_tuple(static_cast<int>(collective), size / Bytes(1), routing,
                      std::vector<int>(members.begin(), members.end())),
      [&] { return time(plan(collective, size, members, CollectiveAlgorithm::kAuto, routing)); });
}

Seconds CollectiveModel::time(Collective collective, Bytes size,
                              std::span<const std::vector<int>> groups,
                              const TokenRouting& routing) const {
  if (groups.size() <= 1)
    return groups.empty() ? Seconds(0) : time(collective, size, groups.front(), routing);
  if (groups.front().size() <= 1 || collective == Collective::kNone || size <= Bytes(0)) return Seconds(0);
  // The groups' members one after another, each group after the first behind a -1.
  std::vector<int> members;
  for (const std::vector<int>& group : groups) {
    if (!members.empty()) members.push_back(-1);
    members.insert(members.end(), group.begin(), group.end());
  }
  return cached(
      std::make_tuple(static_cast<int>(collective), size / Bytes(1), routing, std::move(members)),
      [&] {
        // Together, the groups' plans run phase by phase.
        CollectivePlan together;
        for (const std::vector<int>& group : groups) {
          CollectivePlan planned =
              plan(collective, size, group, CollectiveAlgorithm::kAuto, routing);
          together.latency = std::max(together.latency, planned.latency);
          if (together.phases.size() < planned.phases.size())
            together.phases.resize(planned.phases.size());
          for (size_t p = 0; p < planned.phases.size(); ++p) {
            std::ranges::move(planned.phases[p], std::back_inserter(together.phases[p]));
          }
        }
        return time(together);
      });
}

Seconds CollectiveModel::cached(CacheKey key, const std::function<Seconds()>& compute) const {
  {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  // Computed outside the lock: threads lowering different stages may plan at once, and a key
  // computed twice gives the same time.
  const Seconds t = compute();
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.emplace(std::move(key), t);
  return t;
}

}  // namespace paceline
