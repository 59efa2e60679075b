#include "hardware/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "base/data_root.h"
#include "base/parsed_file_cache.h"
#include "base/yaml_reader.h"
#include "hardware/internal/sourced_value.h"

namespace paceline {
namespace {

// Links and NICs: at least 1 MB/s, so that a figure without its unit (bytes per second) is caught
// where it is written rather than as a step of years.
constexpr BytesPerSecond kLeastLinkBandwidth(1e6);
constexpr const char* kLeastLinkBandwidthRule = "must be at least 1 MB/s (a figure needs its unit, e.g. 300 GB/s)";

// A GPU's path to host memory or to its NICs: at least 1 MB/s, as a link's.
BytesPerSecond checked_path_bandwidth(YamlMap& map, std::string_view key,
                                      BytesPerSecond bandwidth) {
  if (!(bandwidth >= kLeastLinkBandwidth && bandwidth < BytesPerSecond(1e18))) {
    map.fail(key, fmt::format("= {} B/s must be at least 1 MB/s and below 1000 PB/s (a figure needs its unit, "
                              "e.g. 54 GB/s)",
                              bandwidth / BytesPerSecond(1)));
  }
  return bandwidth;
}

void check_link(YamlMap& map, const LinkSpec& link) {
  if (!(link.bandwidth >= kLeastLinkBandwidth)) map.fail("bandwidth", kLeastLinkBandwidthRule);
  if (link.latency < Seconds(0)) map.fail("latency", "must not be negative");
  if (link.bandwidth_efficiency <= 0.0 || link.bandwidth_efficiency > 1.0) {
    map.fail("bandwidth_efficiency", fmt::format("= {} must be a fraction in (0, 1]", link.bandwidth_efficiency));
  }
  // Bus bandwidth counts 2(n−1)/n·S against the line rate: NVLS reaches a little over 1.
  if (link.nvls_bus_efficiency < 0.0 || link.nvls_bus_efficiency > 2.0) {
    map.fail("nvls_bus_efficiency", fmt::format("= {} must be in (0, 2] (or absent: no NVLS figures)",
                                                link.nvls_bus_efficiency));
  }
  if (link.nvls_latency < Seconds(0)) map.fail("nvls_latency", "must not be negative");
  // Meshes of direct links join a handful of GPUs (MI300X: 7 links, 8 GPUs); the flows of a
  // collective over one grow with the square of its GPUs.
  constexpr int kMostMeshLinks = 63;
  if (link.mesh_links < 0 || link.mesh_links > kMostMeshLinks) {
    map.fail("mesh_links", fmt::format("= {} must be from 0 to {} (a mesh of at most {} GPUs)",
                                       link.mesh_links, kMostMeshLinks, kMostMeshLinks + 1));
  }
  if (link.mesh_links > 0 && link.kind == LinkKind::kNetwork) {
    map.fail("mesh_links", "applies to intra-node links only (a mesh of GPUs without a switch)");
  }
  if (link.mesh_links > 0 && (link.nvls_bus_efficiency > 0.0 || link.nvls_latency > Seconds(0))) {
    map.fail("mesh_links", fmt::format("= {}: a mesh has no switch to reduce in, but the link has NVLS figures "
                                       "(nvls_bus_efficiency, nvls_latency)",
                                       link.mesh_links));
  }
}

LinkSpec read_link_document(const YamlDocument& document) {
  YamlMap map(document.root, document.file, "link");
  std::map<std::string, std::string> field_sources;
  LinkSpec link;
  link.name = map.required<std::string>("name");
  map.get<std::string>("description", "");
  link.kind = map.choice("kind", {"intra_node", "network"}) == "network" ? LinkKind::kNetwork : LinkKind::kIntraNode;
  internal::read_sources(map);
  link.bandwidth = internal::read_sourced_required<BytesPerSecond>(map, "bandwidth", field_sources, "");
  link.latency = internal::read_sourced_required<Seconds>(map, "latency", field_sources, "");
  link.bandwidth_efficiency = internal::read_sourced_required<double>(map, "bandwidth_efficiency", field_sources, "");
  link.nvls_bus_efficiency =
      internal::read_sourced<double>(map, "nvls_bus_efficiency", field_sources, "").value_or(0.0);
  link.nvls_latency = internal::read_sourced<Seconds>(map, "nvls_latency", field_sources, "").value_or(Seconds(0));
  link.mesh_links = internal::read_sourced<int>(map, "mesh_links", field_sources, "").value_or(0);
  check_link(map, link);
  map.finish();
  return link;
}

LinkSpec read_link_file(const std::string& path) {
  static auto* const links = new ParsedFileCache<LinkSpec>(read_link_document);
  return *links->get(path);
}

std::string_view kind_name(LinkKind kind) { return kind == LinkKind::kNetwork ? "network" : "intra-node"; }
std::string_view a_link_of(LinkKind kind) { return kind == LinkKind::kNetwork ? "a network link" : "an intra-node link"; }

// The catalog's links of `kind`.
std::vector<std::string> links_of_kind(const std::string& catalog, LinkKind kind) {
  std::vector<std::string> names;
  for (const std::string& name : catalog_links(catalog)) {
    if (read_link_file(catalog + "/" + name + ".yaml").kind == kind) names.push_back(name);
  }
  return names;
}

// A catalog link by name that must be of `kind`.
LinkSpec load_link_of_kind(const std::string& name, LinkKind kind, const SourceLocation& where) {
  const std::string catalog = default_link_catalog();
  LinkSpec link = load_link(name, catalog, where);
  if (link.kind != kind) {
    throw InputError(where, fmt::format("link '{}' is {}, where {} is wanted; {} links: {}", name,
                                        a_link_of(link.kind), a_link_of(kind), kind_name(kind),
                                        fmt::join(links_of_kind(catalog, kind), ", ")));
  }
  return link;
}

// A link given by name, or inline with unset fields taken from `defaults`.
LinkSpec read_link(YamlMap& parent, std::string_view key, const std::optional<LinkSpec>& defaults) {
  const std::string catalog = default_link_catalog();
  const YAML::Node node = parent.node(key);
  if (node.IsScalar()) return load_link_of_kind(node.Scalar(), LinkKind::kIntraNode, parent.location(key));
  YamlMap map = parent.map(key);
  std::optional<LinkSpec> base = defaults;
  if (map.has("link")) {
    base = load_link_of_kind(map.required<std::string>("link"), LinkKind::kIntraNode, map.location("link"));
  }
  LinkSpec link;
  link.name = base ? base->name : "inline";
  std::map<std::string, std::string> unused;
  auto bandwidth = internal::read_sourced<BytesPerSecond>(map, "bandwidth", unused, "");
  auto latency = internal::read_sourced<Seconds>(map, "latency", unused, "");
  auto efficiency = internal::read_sourced<double>(map, "bandwidth_efficiency", unused, "");
  if (!bandwidth && !base) map.fail("bandwidth", "is required (or name a catalog `link`)");
  if ((!latency || !efficiency) && !base) {
    map.fail_here(fmt::format("give latency and bandwidth_efficiency, or name a catalog `link` (known: {})",
                              fmt::join(links_of_kind(catalog, LinkKind::kIntraNode), ", ")));
  }
  link.bandwidth = bandwidth.value_or(base ? base->bandwidth : BytesPerSecond(0));
  link.latency = latency.value_or(base ? base->latency : Seconds(0));
  link.bandwidth_efficiency = efficiency.value_or(base ? base->bandwidth_efficiency : 1.0);
  const auto nvls_efficiency = internal::read_sourced<double>(map, "nvls_bus_efficiency", unused, "");
  const auto nvls_latency = internal::read_sourced<Seconds>(map, "nvls_latency", unused, "");
  link.nvls_bus_efficiency = nvls_efficiency.value_or(base ? base->nvls_bus_efficiency : 0.0);
  link.nvls_latency = nvls_latency.value_or(base ? base->nvls_latency : Seconds(0));
  const auto mesh_links = internal::read_sourced<int>(map, "mesh_links", unused, "");
  link.mesh_links = mesh_links.value_or(base ? base->mesh_links : 0);
  // Figures of its own make the link another one, unless they are every figure of the named link
  // or of the GPU's default link: the echo of another link names none, so a link with the
  // default's figures must be the default wherever it was read, or it would read back otherwise.
  auto same_figures = [&link](const std::optional<LinkSpec>& catalog_link) {
    return catalog_link && link.bandwidth == catalog_link->bandwidth &&
           link.latency == catalog_link->latency &&
           link.bandwidth_efficiency == catalog_link->bandwidth_efficiency &&
           link.nvls_bus_efficiency == catalog_link->nvls_bus_efficiency &&
           link.nvls_latency == catalog_link->nvls_latency &&
           link.mesh_links == catalog_link->mesh_links;
  };
  if (same_figures(defaults)) {
    link.name = defaults->name;
  } else if (!same_figures(base)) {
    link.name = "inline";
  }
  check_link(map, link);
  map.finish();
  return link;
}

// The catalog network link whose NIC bandwidth equals `bandwidth`, if any.
std::optional<LinkSpec> network_link_of_bandwidth(BytesPerSecond bandwidth) {
  const std::string catalog = default_link_catalog();
  for (const std::string& name : catalog_links(catalog)) {
    const LinkSpec link = read_link_file(catalog + "/" + name + ".yaml");
    if (link.kind == LinkKind::kNetwork && std::abs(link.bandwidth / bandwidth - 1.0) < 1e-9) return link;
  }
  return std::nullopt;
}

// `post_overhead` as read from `map`, failing there outside the range a host's post takes.
Seconds checked_post_overhead(YamlMap& map, Seconds post_overhead) {
  if (post_overhead < Seconds(0) || post_overhead > Seconds(1e-4)) {
    map.fail("post_overhead", fmt::format("= {:g} us must be in [0, 100] us: the host's cost of posting one network "
                                          "send (NCCL: 1 us on Intel hosts, 2 us on AMD)",
                                          post_overhead / Seconds(1e-6)));
  }
  return post_overhead;
}

// The network from the system's defaults alone.
NetworkSpec system_network(const SystemSpec& system, const SourceLocation& where) {
  NetworkSpec network;
  network.nics_per_node = system.nics_per_node;
  network.nic = load_link_of_kind(system.nic, LinkKind::kNetwork, where);
  network.topology = system.topology;
  network.nodes_per_leaf = system.nodes_per_leaf;
  network.oversubscription = system.oversubscription;
  network.post_overhead = system.post_overhead;
  network.gpu_nic_pcie = system.gpu_nic_pcie;
  return network;
}

// Fails at `map`'s nics_per_node where NICs beyond one a GPU do not give every GPU as many of
// its own.
void check_nics_per_node(const YamlMap& map, int nics_per_node, int gpus_per_node) {
  if (nics_per_node <= gpus_per_node || nics_per_node % gpus_per_node == 0) return;
  map.fail("nics_per_node",
           fmt::format("= {} is more than gpus_per_node = {} but not a multiple of it: each GPU "
                       "sends through as many NICs of its own as the others",
                       nics_per_node, gpus_per_node));
}

// A system's compute NICs belong to its GPUs (one a GPU in every catalog system): a node the
// scenario sizes otherwise keeps each GPU's share, as its NVLink fabric ends at that node. A
// single node sends nothing over the network, so a share that is not whole is refused only
// where `nodes` > 1 (one node keeps the whole NICs of its share, at least one).
int system_nics_per_node(const YamlMap& cluster, const SystemSpec& system, int gpus_per_node,
                         int nodes) {
  const int64_t nics = int64_t{system.nics_per_node} * gpus_per_node;
  if (nics % system.gpus_per_node != 0 && nodes > 1) {
    cluster.fail(
        "gpus_per_node",
        fmt::format("= {} GPUs take no whole share of system {}'s {} NICs for {} GPUs; "
                    "give inter_node.nics_per_node",
                    gpus_per_node, system.name, system.nics_per_node, system.gpus_per_node));
  }
  return std::max(1, static_cast<int>(nics / system.gpus_per_node));
}

NetworkSpec read_network(YamlMap& cluster, const std::optional<SystemSpec>& system,
                         int gpus_per_node, int nodes) {
  YamlMap map = cluster.map("inter_node");
  NetworkSpec network;
  const bool from_system = system && system->nics_per_node > 0;
  network.nics_per_node = from_system && !map.has("nics_per_node")
                              ? system_nics_per_node(cluster, *system, gpus_per_node, nodes)
                              : map.required<int>("nics_per_node");
  if (network.nics_per_node < 1) map.fail("nics_per_node", "must be at least 1");
  check_nics_per_node(map, network.nics_per_node, gpus_per_node);
  const std::string catalog = default_link_catalog();
  std::optional<LinkSpec> base;
  if (map.has("link")) {
    base = load_link_of_kind(map.required<std::string>("link"), LinkKind::kNetwork, map.location("link"));
  } else if (from_system && !map.has("nic_bandwidth")) {
    base = load_link_of_kind(system->nic, LinkKind::kNetwork, map.location());
  }
  const std::optional<BytesPerSecond> nic_bandwidth = map.optional<BytesPerSecond>("nic_bandwidth");
  if (nic_bandwidth && !(*nic_bandwidth >= kLeastLinkBandwidth)) map.fail("nic_bandwidth", kLeastLinkBandwidthRule);
  if (!base && !nic_bandwidth) map.fail("nic_bandwidth", "is required (or name a catalog `link`)");
  if (!base) base = network_link_of_bandwidth(*nic_bandwidth);
  const std::optional<Seconds> latency = map.optional<Seconds>("latency");
  const std::optional<double> efficiency = map.optional<double>("bandwidth_efficiency");
  if (!base && (!latency || !efficiency)) {
    map.fail_here(fmt::format("no catalog network link has nic_bandwidth {} Gb/s: give latency and "
                              "bandwidth_efficiency, or name a `link` (known: {})",
                              *nic_bandwidth / GbitPerSecond(1),
                              fmt::join(links_of_kind(catalog, LinkKind::kNetwork), ", ")));
  }
  network.nic.name = base ? base->name : "inline";
  network.nic.kind = LinkKind::kNetwork;
  network.nic.bandwidth = nic_bandwidth.value_or(base ? base->bandwidth : BytesPerSecond(0));
  network.nic.latency = latency.value_or(base ? base->latency : Seconds(0));
  network.nic.bandwidth_efficiency = efficiency.value_or(base ? base->bandwidth_efficiency : 1.0);
  if (!(network.nic.bandwidth >= kLeastLinkBandwidth)) map.fail("nic_bandwidth", kLeastLinkBandwidthRule);
  if (network.nic.latency < Seconds(0)) map.fail("latency", "must not be negative");
  if (network.nic.bandwidth_efficiency <= 0.0 || network.nic.bandwidth_efficiency > 1.0) {
    map.fail("bandwidth_efficiency", "must be a fraction in (0, 1]");
  }
  network.topology = map.choice("topology", {"fat-tree", "rail-optimized"}, system ? system->topology : "fat-tree");
  network.nodes_per_leaf = map.get<int>("nodes_per_leaf", system ? system->nodes_per_leaf : network.nodes_per_leaf);
  if (network.nodes_per_leaf < 1) map.fail("nodes_per_leaf", "must be at least 1");
  network.oversubscription = map.get<double>("oversubscription", system ? system->oversubscription : 1.0);
  // Tapered fabrics run at 2:1 to 4:1; past 64:1 a leaf would be no network.
  if (!(network.oversubscription >= 1.0 && network.oversubscription <= 64.0)) {
    map.fail("oversubscription",
             fmt::format("= {} must be from 1 (non-blocking) to 64", network.oversubscription));
  }
  network.post_overhead =
      checked_post_overhead(map, map.get<Seconds>("post_overhead", system ? system->post_overhead : Seconds(0)));
  network.gpu_nic_pcie = system ? system->gpu_nic_pcie : BytesPerSecond(0);
  // 0 lifts a system's limit.
  if (const auto pcie = map.optional<BytesPerSecond>("gpu_nic_pcie")) {
    network.gpu_nic_pcie =
        *pcie == BytesPerSecond(0) ? *pcie : checked_path_bandwidth(map, "gpu_nic_pcie", *pcie);
  }
  map.finish();
  return network;
}

// `reference` (a catalog name, or a path written at `where`) as any scenario can name it.
std::string portable_reference(const std::string& reference, const SourceLocation& where) {
  const std::string extension = std::filesystem::path(reference).extension().string();
  if (extension != ".yaml" && extension != ".yml") return reference;
  return std::filesystem::absolute(path_from(reference, where.file)).lexically_normal().string();
}

SystemSpec read_system_document(const YamlDocument& document) {
  YamlMap map(document.root, document.file, "system");
  std::map<std::string, std::string> field_sources;
  SystemSpec system;
  system.name = map.required<std::string>("name");
  map.get<std::string>("description", "");
  internal::read_sources(map);
  // A GPU file is found beside the system file that names it.
  system.gpu = portable_reference(map.required<std::string>("gpu"), map.location("gpu"));
  system.gpu_memory_capacity =
      internal::read_sourced<Bytes>(map, "gpu_memory_capacity", field_sources, "");
  if (system.gpu_memory_capacity)
    check_gpu_memory(map, "gpu_memory_capacity", *system.gpu_memory_capacity);
  system.gpus_per_node = static_cast<int>(
      internal::read_sourced_required<int64_t>(map, "gpus_per_node", field_sources, ""));
  system.intra_node = map.required<std::string>("intra_node");
  system.nvlink_domain = static_cast<int>(
      internal::read_sourced_required<int64_t>(map, "nvlink_domain", field_sources, ""));
  system.nvls = internal::read_sourced<bool>(map, "nvls", field_sources, "").value_or(false);
  system.nics_per_node = static_cast<int>(
      internal::read_sourced<int64_t>(map, "nics_per_node", field_sources, "").value_or(0));
  system.nic = map.get<std::string>("nic", "");
  system.post_overhead = checked_post_overhead(
      map, internal::read_sourced<Seconds>(map, "post_overhead", field_sources, "")
               .value_or(Seconds(0)));
  if (auto pcie = internal::read_sourced<BytesPerSecond>(map, "gpu_nic_pcie", field_sources, "")) {
    system.gpu_nic_pcie = checked_path_bandwidth(map, "gpu_nic_pcie", *pcie);
  }
  if (auto host =
          internal::read_sourced<BytesPerSecond>(map, "gpu_host_bandwidth", field_sources, "")) {
    system.gpu_host_bandwidth = checked_path_bandwidth(map, "gpu_host_bandwidth", *host);
  }
  if (std::optional<YamlMap> fabric = map.optional_map("fabric")) {
    system.topology = fabric->choice("topology", {"fat-tree", "rail-optimized"}, "fat-tree");
    internal::read_sourced<int64_t>(*fabric, "switch_radix", field_sources, "fabric.");
    internal::read_sourced<int64_t>(*fabric, "tiers", field_sources, "fabric.");
    system.nodes_per_leaf = static_cast<int>(
        internal::read_sourced<int64_t>(*fabric, "nodes_per_leaf", field_sources, "fabric.")
            .value_or(32));
    system.oversubscription =
        internal::read_sourced<double>(*fabric, "oversubscription", field_sources, "fabric.")
            .value_or(1.0);
    internal::read_sourced<Seconds>(*fabric, "hop_latency", field_sources, "fabric.");
    fabric->finish();
  }
  map.finish();
  if (system.gpus_per_node < 1)
    map.fail("gpus_per_node", fmt::format("= {} must be at least 1", system.gpus_per_node));
  if (system.nvlink_domain < system.gpus_per_node) {
    map.fail("nvlink_domain", fmt::format("= {} must be at least gpus_per_node = {}",
                                          system.nvlink_domain, system.gpus_per_node));
  }
  check_nics_per_node(map, system.nics_per_node, system.gpus_per_node);
  if (system.nics_per_node > 0 && system.nic.empty())
    map.fail("nic", "is required with nics_per_node");
  return system;
}

}  // namespace

ClusterSpec read_cluster(YamlMap& map) {
  ClusterSpec cluster;
  std::optional<SystemSpec> system;
  if (map.has("system")) {
    const std::string reference = map.required<std::string>("system");
    system = load_system(reference, default_system_catalog(), map.location("system"));
    cluster.system = portable_reference(reference, map.location("system"));
  }
  const YAML::Node gpu = map.node("gpu");
  if (!gpu && !system) map.fail("gpu", "is required (or name a catalog `system`)");
  if (gpu && gpu.IsMap()) {
    YamlMap inline_gpu = map.map("gpu");
    cluster.gpu = read_gpu(inline_gpu);
    cluster.gpu_mapping = to_json(gpu);
  } else if (gpu) {
    const std::string reference = map.required<std::string>("gpu");
    cluster.gpu = resolve_gpu(reference, default_gpu_catalog(), map.location("gpu"));
    cluster.gpu_reference = portable_reference(reference, map.location("gpu"));
  } else {
    cluster.gpu = resolve_gpu(system->gpu, default_gpu_catalog(), map.location("system"));
    if (system->gpu_memory_capacity) cluster.gpu.memory_capacity = *system->gpu_memory_capacity;
  }
  cluster.nodes = map.get<int>("nodes", 1);
  if (cluster.nodes < 1) map.fail("nodes", fmt::format("= {} must be at least 1", cluster.nodes));
  cluster.gpus_per_node = map.get<int>("gpus_per_node", system ? system->gpus_per_node : 1);
  if (cluster.gpus_per_node < 1) map.fail("gpus_per_node", fmt::format("= {} must be at least 1", cluster.gpus_per_node));
  if (int64_t{cluster.nodes} * cluster.gpus_per_node > kMostGpus) {
    map.fail("nodes", fmt::format("= {} with gpus_per_node = {} makes {} GPUs; a cluster has at most {}", cluster.nodes,
                                  cluster.gpus_per_node, int64_t{cluster.nodes} * cluster.gpus_per_node, kMostGpus));
  }

  std::optional<LinkSpec> intra_default;
  const std::string intra_link = system ? system->intra_node : cluster.gpu.intra_node_link;
  if (!intra_link.empty()) intra_default = load_link_of_kind(intra_link, LinkKind::kIntraNode, map.location("gpu"));
  if (map.has("intra_node")) {
    cluster.intra_node = read_link(map, "intra_node", intra_default);
  } else if (intra_default) {
    cluster.intra_node = *intra_default;
  } else if (cluster.gpus_per_node > 1) {
    map.fail("intra_node", fmt::format("is required: gpu {} names no default intra-node link", cluster.gpu.name));
  }
  // A system's NVLink fabric that ends at its node ends at the node the scenario sizes; only one
  // that joins nodes (GB200 NVL72's racks of trays) keeps its own size.
  const bool domain_joins_nodes = system && system->nvlink_domain > system->gpus_per_node;
  cluster.nvlink_domain = map.get<int>(
      "nvlink_domain", domain_joins_nodes ? system->nvlink_domain : cluster.gpus_per_node);
  if (cluster.nvlink_domain < cluster.gpus_per_node || cluster.nvlink_domain % cluster.gpus_per_node != 0 ||
      cluster.nvlink_domain > kMostGpus) {
    map.fail("nvlink_domain", fmt::format("= {} must be a multiple of gpus_per_node = {}, at most {}",
                                          cluster.nvlink_domain, cluster.gpus_per_node, kMostGpus));
  }
  const LinkSpec& intra = cluster.intra_node;
  if (intra.mesh_links > 0 && cluster.nvlink_domain != cluster.gpus_per_node) {
    map.fail("nvlink_domain", fmt::format("= {} must equal gpus_per_node = {}: the intra-node link {} is a mesh of "
                                          "direct links inside a node",
                                          cluster.nvlink_domain, cluster.gpus_per_node, intra.name));
  }
  if (intra.mesh_links > 0 && cluster.gpus_per_node - 1 > intra.mesh_links) {
    map.fail("gpus_per_node", fmt::format("= {} is more than the intra-node link {} joins: a mesh of {} direct links "
                                          "per GPU holds at most {} GPUs",
                                          cluster.gpus_per_node, intra.name, intra.mesh_links, intra.mesh_links + 1));
  }
  cluster.nvls = map.get<bool>("nvls", system ? system->nvls : false);
  if (cluster.nvls && !(intra.nvls_bus_efficiency > 0.0 && intra.nvls_latency > Seconds(0))) {
    const std::string needs = fmt::format("NVLS figures on the intra-node link {}: nvls_bus_efficiency and "
                                          "nvls_latency, as the nvlink4 and nvlink5 catalog links give",
                                          intra.name);
    if (map.has("nvls")) map.fail("nvls", "= true needs " + needs);
    map.fail("system",
             fmt::format("= {} reduces in its NVLink switches (nvls), which needs {}", cluster.system, needs));
  }
  cluster.host_bandwidth = system ? system->gpu_host_bandwidth : BytesPerSecond(0);
  if (map.has("host_bandwidth")) {
    cluster.host_bandwidth = checked_path_bandwidth(map, "host_bandwidth",
                                                    map.required<BytesPerSecond>("host_bandwidth"));
  }
  // A measured profile: named here, or the GPU's default. It was measured on `profile_gpu`
  // (default: the catalog GPU the profile is named after, else this cluster's GPU).
  const std::string profile = map.get<std::string>("profile", cluster.gpu.profile);
  if (!profile.empty()) {
    const std::filesystem::path reference(profile);
    const bool is_path = reference.extension() == ".yaml" || reference.extension() == ".yml";
    const SourceLocation where = map.has("profile") ? map.location("profile") : map.location("gpu");
    const std::string path = is_path ? path_from(profile, where.file) : default_profile_catalog() + "/" + profile + ".yaml";
    // The error_code overloads: a name too long for a path is "not found", not an exception.
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      throw InputError(where, fmt::format("profile '{}' is not a file nor in the profile catalog ({})", profile,
                                          default_profile_catalog()));
    }
    const std::string stem = reference.stem().string();
    const bool named_after_gpu = std::filesystem::exists(default_gpu_catalog() + "/" + stem + ".yaml", error);
    const std::string measured_on = map.get<std::string>("profile_gpu", named_after_gpu ? stem : cluster.gpu.name);
    const SourceLocation measured_where = map.has("profile_gpu") ? map.location("profile_gpu") : where;
    // A profile named after a catalog GPU, or whose profile_gpu is one, was measured on that
    // GPU as the catalog describes it: a scenario that overrides its peak or bandwidth runs the
    // measured kernels at the ratio of its figures to the catalog's. Otherwise it was measured on
    // this cluster's GPU, whatever its figures.
    const bool in_catalog =
        std::filesystem::exists(default_gpu_catalog() + "/" + measured_on + ".yaml", error);
    const bool measured_on_this_gpu =
        measured_on == cluster.gpu.name &&
        (!in_catalog || (!named_after_gpu && !map.has("profile_gpu")));
    const GpuSpec profile_gpu =
        measured_on_this_gpu ? cluster.gpu
                             : resolve_gpu(measured_on, default_gpu_catalog(), measured_where);
    // Peak and bandwidth ratios carry kernel times across GPUs of one architecture only: its
    // kernels, tiles and instructions are the same there.
    if (!profile_gpu.architecture.empty() && !cluster.gpu.architecture.empty() &&
        profile_gpu.architecture != cluster.gpu.architecture) {
      throw InputError(
          measured_where,
          fmt::format("profile '{}' was measured on {} ({}), which cannot stand in for {} ({}); "
                      "a profile serves GPUs of its own architecture",
                      profile, profile_gpu.name, profile_gpu.architecture, cluster.gpu.name,
                      cluster.gpu.architecture));
    }
    cluster.profile_reference = portable_reference(profile, where);
    cluster.profile_gpu_reference = portable_reference(measured_on, measured_where);
    cluster.profile = std::make_shared<const KernelProfile>(KernelProfile::load(path, profile_gpu));
    // The file names the GPU that measured it: a profile of another architecture would pass for
    // one of this GPU's (whatever its file is called) and time its kernels up to 3x off.
    const std::optional<std::string> measured_architecture =
        architecture_of_compute_capability(cluster.profile->compute_capability());
    if (!profile_gpu.architecture.empty() && measured_architecture != profile_gpu.architecture) {
      const std::vector<std::string> expected = compute_capabilities_of(profile_gpu.architecture);
      throw InputError(
          cluster.profile->compute_capability_location(),
          fmt::format(
              "profile.device.compute_capability = '{}' ({}, {}) is not that of {} ({}), "
              "the GPU cluster.profile ({}) is taken as measured on; expected {}: a profile "
              "serves GPUs of its own architecture",
              echoed(cluster.profile->compute_capability()),
              measured_architecture.value_or("no catalog architecture"),
              echoed(cluster.profile->device_name()), profile_gpu.name, profile_gpu.architecture,
              where.to_string(),
              expected.empty()
                  ? fmt::format("a profile measured on a {} GPU (paceline-calibrate "
                                "measures CUDA GPUs only)",
                                profile_gpu.architecture)
                  : fmt::format("compute capability {}", fmt::join(expected, " or "))));
    }
  }
  if (profile.empty() && map.has("profile_gpu")) {
    map.fail("profile_gpu",
             "says where a profile was measured, but the cluster uses none: give "
             "cluster.profile (or a GPU whose catalog entry names one)");
  }
  if (map.has("inter_node")) {
    cluster.inter_node = read_network(map, system, cluster.gpus_per_node, cluster.nodes);
  } else if (system && system->nics_per_node > 0) {
    cluster.inter_node = system_network(*system, map.location("system"));
    cluster.inter_node->nics_per_node =
        system_nics_per_node(map, *system, cluster.gpus_per_node, cluster.nodes);
  } else if (cluster.nodes > 1) {
    map.fail("inter_node", fmt::format("is required for {} nodes", cluster.nodes));
  }
  map.finish();
  return cluster;
}

std::string default_link_catalog() { return data_root() + "/hardware/catalog/links"; }

std::string default_profile_catalog() { return data_root() + "/hardware/profiles"; }

std::string default_system_catalog() { return data_root() + "/hardware/catalog/systems"; }

std::vector<std::string> catalog_systems(const std::string& catalog_dir) { return catalog_entries(catalog_dir); }

SystemSpec load_system(const std::string& name, const std::string& catalog_dir, const SourceLocation& where) {
  const std::string extension = std::filesystem::path(name).extension().string();
  const std::string path =
      extension == ".yaml" || extension == ".yml" ? path_from(name, where.file) : catalog_dir + "/" + name + ".yaml";
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw InputError(where, fmt::format("system '{}' is not in the system catalog ({}); known systems: {}", name,
                                        catalog_dir, fmt::join(catalog_systems(catalog_dir), ", ")));
  }
  static auto* const systems = new ParsedFileCache<SystemSpec>(read_system_document);
  return *systems->get(path);
}

std::vector<std::string> catalog_links(const std::string& catalog_dir) {
  return catalog_entries(catalog_dir);
}

LinkSpec load_link(const std::string& name, const std::string& catalog_dir, const SourceLocation& where) {
  const std::string path = catalog_dir + "/" + name + ".yaml";
  // The non-throwing check: a name too long for a file name, or holding a NUL (where the file
  // name would end), is simply not in the catalog.
  std::error_code error;
  if (name.find('\0') != std::string::npos || !std::filesystem::exists(path, error)) {
    throw InputError(where, fmt::format("link '{}' is not in the link catalog ({}); known links: {}", name,
                                        catalog_dir, fmt::join(catalog_links(catalog_dir), ", ")));
  }
  return read_link_file(path);
}

}  // namespace paceline
