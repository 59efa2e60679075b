#include "sim/search/search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/yaml_reader.h"
#include "sim/search/bounds.h"
#include "base/parallel_for.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

// Layouts simulated between two updates of the pruning threshold. Fixed, so that what is
// simulated does not depend on the thread count.
constexpr size_t kBatch = 16;

// The value of `key` in a mapping node; an undefined node when absent (yaml-cpp throws on
// reading the type of a missing key's node, so every lookup goes through here).
YAML::Node child(const YAML::Node& node, const char* key) {
  if (!node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node value = node[key];
  return value ? value : YAML::Node(YAML::NodeType::Undefined);
}

// Whether `override` sets `field`: at its path, or inside the mapping it sets at a path around
// it (--set 'parallelism={tp: 8}' sets parallelism.tp). A value that is not YAML sets nothing
// here; applying it reports it.
bool sets_field(const Override& override, std::string_view field) {
  if (path_within(override.path, field)) return true;
  if (!path_within(field, override.path)) return false;
  YAML::Node node;
  try {
    node = YAML::Load(override.value);
  } catch (const YAML::Exception&) {
    return false;
  }
  std::string_view rest = field.substr(override.path.size() + 1);
  while (!rest.empty()) {
    const size_t dot = rest.find('.');
    node = child(node, std::string(rest.substr(0, dot)).c_str());
    if (!node.IsDefined()) return false;
    rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
  }
  return true;
}

// An integer field of the raw document, or `fallback` when absent or not an integer (the
// scenario reader then reports it properly).
int64_t raw_integer(const YAML::Node& root, const char* section, const char* key,
                    int64_t fallback) {
  const YAML::Node value = child(child(root, section), key);
  if (!value.IsScalar()) return fallback;
  try {
    return value.as<int64_t>();
  } catch (const YAML::Exception&) {
    return fallback;
  }
}

// The scenario the layouts apply to: the source's model, cluster (resized to `gpus`) and
// training setup, with `given` applied, read with a neutral layout so that its own layout cannot
// make it invalid. `fixed` receives the overrides every layout takes: `given`, then those that
// resize the cluster.
Scenario load_search_base(const ScenarioSource& source, const std::vector<Override>& given, int gpus,
                          std::vector<Override>& fixed) {
  const OverriddenDocument overridden = apply_overrides(source, given);
  const YAML::Node& root = overridden.document.root;
  // Where a raw node came from: its line, or the override that put it in.
  const auto cited = [&](const YAML::Node& node, std::string_view field) {
    const SourceLocation* origin = find_origin(*overridden.origins, field);
    return origin != nullptr ? *origin : location_of(node, source.file);
  };
  // Training fields that depend on the layout: the search does not choose them.
  for (const auto& [key, why] :
       {std::pair{"recompute_layers", "the search recomputes none, some (selective) or all of every layer"},
        {"activation_offload_layers",
         "the search does not choose activation offload (it needs pp 1 and no recomputation)"}}) {
    const YAML::Node field = child(child(root, "training"), key);
    // 0 asks for nothing the layout decides: no offload (and recompute_layers refuses 0 when the
    // scenario is read).
    if (!field.IsDefined() || (field.IsScalar() && field.Scalar() == "0")) continue;
    const std::string path = fmt::format("training.{}", key);
    throw InputError(cited(field, path),
                     fmt::format("{} = {}: {}; remove the field to search, or sweep it over one layout "
                                 "(paceline sweep --set {}=...)",
                                 path, field.IsScalar() ? field.Scalar() : describe(field), why, path));
  }
  int64_t nodes = raw_integer(root, "cluster", "nodes", 1);
  // A cluster built of a catalog system takes its node size from the system unless it says one.
  const YAML::Node system = child(child(root, "cluster"), "system");
  const int64_t system_gpus_per_node =
      system.IsScalar()
          ? load_system(system.Scalar(), default_system_catalog(), cited(system, "cluster.system")).gpus_per_node
          : 1;
  int64_t gpus_per_node = raw_integer(root, "cluster", "gpus_per_node", system_gpus_per_node);
  if (gpus > 0) {
    if (gpus_per_node >= 1 && gpus % gpus_per_node == 0) {
      nodes = gpus / gpus_per_node;
    } else if (gpus_per_node >= 1 && gpus_per_node % gpus == 0) {
      nodes = 1;
      gpus_per_node = gpus;
    } else {
      throw InputError(SourceLocation{source.file},
                       fmt::format("search on {} GPUs: the count must be a multiple "
                                   "or a divisor of cluster.gpus_per_node = {}",
                                   gpus, gpus_per_node));
    }
  }
  fixed = given;
  if (gpus > 0) {
    fixed.push_back({"cluster.nodes", fmt::format("{}", nodes)});
    fixed.push_back({"cluster.gpus_per_node", fmt::format("{}", gpus_per_node)});
  }
  // The scenario's framework settings reach the layouts they apply to (layout_parallelism); its
  // own layout does not. Read before the neutral layout below copies rank_order, so that errors
  // cite the file or the --set.
  std::optional<Parallelism> settings;
  if (const YAML::Node given_parallelism = child(root, "parallelism"); given_parallelism.IsDefined()) {
    YamlMap map(given_parallelism, source.file, "parallelism", overridden.origins);
    settings = read_parallelism(map);
  }
  // Neutral layout: one GPU per model replica, micro-batch 1, a global batch of one sequence
  // per GPU; the real global batch is read back below.
  std::vector<Override> neutral = fixed;
  const YAML::Node order = child(child(root, "parallelism"), "rank_order");
  // ZeRO-1 where the scenario keeps fp8 parameters, which need a sharded optimizer: the layouts
  // set their own stage.
  const std::string fp8_parameters = child(child(root, "training"), "fp8_param_gather").IsDefined() ? "zero: 1, " : "";
  neutral.push_back({"parallelism", order.IsScalar() ? fmt::format("{{{}rank_order: {}}}", fp8_parameters, order.Scalar())
                                                     : fmt::format("{{{}}}", fp8_parameters)});
  neutral.push_back({"training.micro_batch", "1"});
  const YAML::Node batch = child(child(root, "training"), "global_batch");
  const bool has_batch = batch.IsDefined();
  if (has_batch) {
    neutral.push_back({"training.global_batch", fmt::format("{}", nodes * gpus_per_node)});
  }
  Scenario base = load_scenario(source, neutral);
  if (settings) {
    Parallelism& p = base.parallelism;
    p.schedule = settings->schedule;
    p.tp_comm_overlap = settings->tp_comm_overlap;
    p.tp_comm_overlap_method = settings->tp_comm_overlap_method;
    p.tp_implementation = settings->tp_implementation;
    p.cp_comm = settings->cp_comm;
    p.cp_comm_overlap = settings->cp_comm_overlap;
    p.ep_comm_overlap = settings->ep_comm_overlap;
    p.ep_dispatcher = settings->ep_dispatcher;
    p.fsdp_prefetch = settings->fsdp_prefetch;
    p.fsdp_gather = settings->fsdp_gather;
    p.fsdp_gradient_reduce = settings->fsdp_gradient_reduce;
    p.fsdp_persistence_threshold = settings->fsdp_persistence_threshold;
    p.fsdp_reuse_distance = settings->fsdp_reuse_distance;
    YamlMap map(child(root, "parallelism"), source.file, "parallelism", overridden.origins);
    check_settings_for_model(
        base.model, base.training, p,
        [&map](std::string_view key, const std::string& message) { map.fail(key, message); },
        [&](std::string_view key, const std::string& message) {
          YamlMap(child(root, "training"), source.file, "training", overridden.origins)
              .fail(key, message);
        });
  }
  if (has_batch) {
    // Read as a scenario reads it (its bounds, its errors' origins); the neutral one replaced it.
    YamlMap training(child(root, "training"), source.file, "training", overridden.origins);
    base.training.global_batch = read_training(training, base.model).global_batch;
  }
  return base;
}

RankedLayout ranked(const Layout& layout, size_t index, const Result& r) {
  RankedLayout out;
  out.layout = layout;
  out.index = index;
  out.iteration_time_s = r.iteration_time / Seconds(1);
  out.tokens_per_s = r.tokens_per_s;
  out.tokens_per_s_per_gpu = r.tokens_per_s_per_gpu;
  out.mfu = r.mfu;
  out.hfu = r.hfu;
  out.peak_memory_bytes = r.peak_memory_bytes;
  out.peak_reserved_bytes = r.peak_reserved_bytes;
  out.capacity_bytes = r.capacity_bytes;
  out.fits = r.fits;
  out.warnings = r.warnings;
  return out;
}

// The layout whose simulation is also `layout`'s: ZeRO-2 differs from ZeRO-1 only where it
// reduces gradients per micro-batch (reduces_gradients_per_microbatch); where it does not (under
// pipelining) the two lower to the same programs and static memory (a test holds them equal).
Layout simulated_alike(Layout layout) {
  if (layout.zero == 2 && !reduces_gradients_per_microbatch(layout.zero, layout.pp)) layout.zero = 1;
  return layout;
}

// Best first: throughput, then enumeration order.
bool better(const RankedLayout& a, const RankedLayout& b) {
  if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
  return a.index < b.index;
}

}  // namespace

SearchReport search_layouts(const ScenarioSource& source, const SearchOptions& options) {
  // The wall clock times the search itself; it never reaches a result.
  const auto started = std::chrono::steady_clock::now();
  if (options.top < 1) {
    throw InputError(SourceLocation{"<search>"},
                     fmt::format("top = {} must be at least 1", options.top));
  }
  if (options.gpus < 0) {
    throw InputError(SourceLocation{"<search>"},
                     fmt::format("gpus = {} must be positive", options.gpus));
  }
  for (const Override& override : options.overrides) {
    // What each layout chooses or leaves out is not the scenario's to set here.
    for (const char* chosen : {"parallelism.tp", "parallelism.pp", "parallelism.dp", "parallelism.cp",
                               "parallelism.ep", "parallelism.virtual_stages", "parallelism.sequence_parallel",
                               "parallelism.zero", "parallelism.zero_shard", "parallelism.layers_per_stage",
                               "training.micro_batch", "training.recompute"}) {
      if (sets_field(override, chosen)) {
        throw InputError(override_location(source.file, override),
                         fmt::format("the search chooses {} for each layout; set it in paceline run or sweep",
                                     chosen));
      }
    }
    for (const char* size : {"cluster.nodes", "cluster.gpus_per_node"}) {
      if (options.gpus > 0 && path_within(override.path, size)) {
        throw InputError(override_location(source.file, override),
                         fmt::format("the search on {} GPUs sets {} itself; give --gpus or {}, not both", options.gpus,
                                     size, size));
      }
    }
  }
  std::vector<Override> fixed;
  const Scenario base = load_search_base(source, options.overrides, options.gpus, fixed);
  const std::vector<Layout> layouts = enumerate_layouts(base);

  SearchReport report;
  report.name = base.name;
  report.model = base.model.name;
  report.gpu = base.cluster.gpu.name;
  report.gpus = base.num_gpus();
  report.global_batch = base.training.global_batch;
  report.considered = layouts.size();

  // Bounds, block by block on threads (below). The time bound here counts kernels only;
  // collectives are priced when a layout nears the top (further below).
  enum class Verdict : uint8_t { kNoFit, kCandidate };
  const int threads = resolve_threads(options.threads);
  // As a run, a simulation holds at most the memory this process may use; a layout whose
  // pipeline schedule alone would not fit stops the search before its schedule is built, and a
  // model no layout could simulate stops it before its layer graphs are.
  const Bytes memory = machine_memory();
  const auto least_memory = [&](const Layout& l) {
    return least_simulation_memory(base.training.global_batch / (int64_t{l.micro_batch} * l.dp),
                                   base.model.layers);
  };
  if (memory > Bytes(0) && !layouts.empty()) {
    const Layout& cheapest = *std::ranges::min_element(layouts, {}, least_memory);
    if (least_memory(cheapest) > memory) {
      throw SimulationLimitError(
          fmt::format("model.layers = {}: simulating even layout {} would take at least "
                      "{:.3g} GiB, more than the {:.3g} GiB of memory this process may use; "
                      "search a model with fewer layers",
                      base.model.layers, to_string(cheapest), least_memory(cheapest) / GiB(1),
                      memory / GiB(1)));
    }
  }
  LayoutBounds bounds(base);
  std::function<void(size_t, size_t)> graphs_built;
  if (options.progress) {
    graphs_built = [&](size_t done, size_t total) { options.progress("layer graphs built", done, total); };
  }
  bounds.prepare(layouts, threads, options.stop, graphs_built);
  const int64_t capacity = static_cast<int64_t>(base.cluster.gpu.memory_capacity / Bytes(1));
  const double tokens = static_cast<double>(base.tokens_per_iteration());
  auto throughput_bound = [&](LayoutBounds& b, const Layout& l, LayoutBounds::Detail detail) {
    return tokens / (b.iteration_time_lower_bound(l, detail) / Seconds(1));
  };
  auto check_simulatable = [&](const Layout& l) {
    const int64_t microbatches = base.training.global_batch / (int64_t{l.micro_batch} * l.dp);
    const Bytes least = least_memory(l);
    if (memory > Bytes(0) && least > memory) {
      throw SimulationLimitError(fmt::format(
          "training.global_batch = {}: layout {} runs {} micro-batches a step, and simulating "
          "it would take at least {:.3g} GiB, more than the {:.3g} GiB of memory this process "
          "may use; search a smaller training.global_batch",
          base.training.global_batch, to_string(l), microbatches, least / GiB(1), memory / GiB(1)));
    }
  };
  std::vector<Verdict> verdict(layouts.size());
  std::vector<double> bound(layouts.size(), std::numeric_limits<double>::infinity());
  // Blocks of layouts, each bounded by whichever fork of the graphs is free (bounds are pure
  // functions of a layout: which fork, and its caches, change nothing).
  constexpr size_t kBlock = 2048;
  std::mutex forks_mutex;
  std::vector<std::unique_ptr<LayoutBounds>> forks;
  std::vector<LayoutBounds*> free_forks;
  std::atomic<size_t> bounded{0};  // layouts of the blocks finished
  std::function<void(size_t)> blocks_bounded;
  if (options.progress) {
    blocks_bounded = [&](size_t) { options.progress("layouts bounded", bounded.load(), layouts.size()); };
  }
  parallel_for((layouts.size() + kBlock - 1) / kBlock, threads, [&](size_t block) {
    stop_if_asked(options.stop, "the search");
    LayoutBounds* fork = nullptr;
    {
      const std::lock_guard<std::mutex> lock(forks_mutex);
      if (free_forks.empty()) free_forks.push_back(forks.emplace_back(bounds.fork()).get());
      fork = free_forks.back();
      free_forks.pop_back();
    }
    for (size_t i = block * kBlock; i < std::min((block + 1) * kBlock, layouts.size()); ++i) {
      const Layout& l = layouts[i];
      check_simulatable(l);
      if (options.prune && fork->peak_memory_lower_bound(l) > capacity) {
        verdict[i] = Verdict::kNoFit;
      } else {
        verdict[i] = Verdict::kCandidate;
        if (options.prune) bound[i] = throughput_bound(*fork, l, LayoutBounds::Detail::kKernels);
      }
    }
    bounded += std::min((block + 1) * kBlock, layouts.size()) - block * kBlock;
    const std::lock_guard<std::mutex> lock(forks_mutex);
    free_forks.push_back(fork);
  }, blocks_bounded);

  // Candidates, best bound first (ties: enumeration order). A candidate whose bound still
  // counts kernels only gets its full bound when it reaches the top, and goes back in line.
  struct Candidate {
    double bound_tokens_per_s;
    size_t index;
    bool full;
  };
  auto after = [](const Candidate& a, const Candidate& b) {
    if (a.bound_tokens_per_s != b.bound_tokens_per_s)
      return a.bound_tokens_per_s < b.bound_tokens_per_s;
    return a.index > b.index;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(after)> queue(after);
  for (size_t i = 0; i < layouts.size(); ++i) {
    if (verdict[i] == Verdict::kNoFit) ++report.pruned_memory;
    if (verdict[i] == Verdict::kCandidate) queue.push({bound[i], i, !options.prune});
  }

  // Simulate batch by batch while a candidate could still enter the ranking.
  const size_t top = static_cast<size_t>(options.top);
  std::vector<RankedLayout> fitting;  // sorted best first
  std::map<Layout, RankedLayout> results;  // by simulated_alike
  while (!queue.empty()) {
    const double threshold = fitting.size() >= top ? fitting[top - 1].tokens_per_s : 0.0;
    std::vector<size_t> picked;
    while (!queue.empty() && picked.size() < kBatch) {
      stop_if_asked(options.stop, "the search");
      Candidate c = queue.top();
      if (options.prune && c.bound_tokens_per_s < threshold) break;
      queue.pop();
      if (c.full) {
        picked.push_back(c.index);
        continue;
      }
      c.bound_tokens_per_s =
          throughput_bound(bounds, layouts[c.index], LayoutBounds::Detail::kFull);
      c.full = true;
      if (c.bound_tokens_per_s < threshold) {
        ++report.pruned_bound;
      } else {
        queue.push(c);
      }
    }
    if (picked.empty()) break;
    // Each layout simulating alike one simulated before, or earlier in the batch, takes its result.
    std::vector<size_t> simulating;  // of picked
    for (const size_t index : picked) {
      if (results.try_emplace(simulated_alike(layouts[index])).second) simulating.push_back(index);
    }
    std::vector<RankedLayout> batch(simulating.size());
    std::function<void(size_t)> progress;
    if (options.progress) {
      progress = [&](size_t done) { options.progress("layouts simulated", report.simulated + done, 0); };
    }
    parallel_for(batch.size(), threads, [&](size_t i) {
      const size_t index = simulating[i];
      std::vector<Override> overrides = fixed;
      for (Override& o : layout_overrides(layouts[index], base)) overrides.push_back(std::move(o));
      std::shared_ptr<const Scenario> scenario;
      try {
        scenario = std::make_shared<const Scenario>(load_scenario(source, overrides));
      } catch (const InputError& e) {
        // The enumeration only yields layouts the scenario format accepts.
        throw InternalError(fmt::format("layout {} was enumerated but is invalid: {}",
                                        to_string(layouts[index]), e.what()));
      }
      batch[i] = ranked(layouts[index], index,
                        simulate(scenario, {.max_memory = memory, .stop = options.stop}).result);
    }, progress);
    for (RankedLayout& r : batch) results[simulated_alike(r.layout)] = std::move(r);
    for (const size_t index : picked) {
      RankedLayout r = results.at(simulated_alike(layouts[index]));
      if (r.index != index) ++report.shared;
      r.layout = layouts[index];
      r.index = index;
      ++report.simulated;
      if (!r.fits) continue;
      ++report.fit;
      fitting.insert(std::upper_bound(fitting.begin(), fitting.end(), r, better), r);
    }
    if (options.progress) options.progress("layouts simulated", report.simulated, 0);
  }
  report.pruned_bound += queue.size();
  if (fitting.size() > top) fitting.resize(top);
  report.top = std::move(fitting);
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

std::string progress_line(std::string_view stage, size_t done, size_t total) {
  return total > 0 ? fmt::format("search: {} of {} {}", done, total, stage) : fmt::format("search: {} {}", done, stage);
}

Json to_json(const SearchReport& r, bool include_wall_time) {
  Json json = Json::object();
  json.set("name", r.name).set("model", r.model).set("gpu", r.gpu).set("gpus", r.gpus);
  json.set("global_batch", r.global_batch);
  json.set("considered", static_cast<uint64_t>(r.considered));
  json.set("pruned_memory", static_cast<uint64_t>(r.pruned_memory));
  json.set("pruned_bound", static_cast<uint64_t>(r.pruned_bound));
  json.set("simulated", static_cast<uint64_t>(r.simulated))
      .set("shared", static_cast<uint64_t>(r.shared))
      .set("fit", static_cast<uint64_t>(r.fit));
  if (include_wall_time) json.set("wall_s", r.wall_s);
  Json layouts = Json::array();
  int rank = 0;
  for (const RankedLayout& t : r.top) {
    const Layout& l = t.layout;
    Json entry = Json::object();
    entry.set("rank", ++rank)
        .set("tp", l.tp)
        .set("pp", l.pp)
        .set("dp", l.dp)
        .set("cp", l.cp)
        .set("ep", l.ep);
    entry.set("virtual_stages", l.virtual_stages).set("schedule", to_string(l.schedule));
    entry.set("micro_batch", l.micro_batch)
        .set("recompute", to_string(l.recompute))
        .set("zero", l.zero);
    entry.set("sequence_parallel", l.sequence_parallel);
    entry.set("iteration_time_s", t.iteration_time_s).set("tokens_per_s", t.tokens_per_s);
    entry.set("tokens_per_s_per_gpu", t.tokens_per_s_per_gpu).set("mfu", t.mfu).set("hfu", t.hfu);
    entry.set("peak_memory_bytes", t.peak_memory_bytes)
        .set("peak_reserved_bytes", t.peak_reserved_bytes);
    entry.set("capacity_bytes", t.capacity_bytes);
    entry.set("fits", t.fits);
    entry.set("warnings", Json::array(t.warnings));
    layouts.push(std::move(entry));
  }
  json.set("layouts", std::move(layouts));
  return json;
}

std::string to_text(const SearchReport& r) {
  std::string out = fmt::format("{}\n  {} on {} × {}, global batch {}\n", r.name, r.model, r.gpus,
                                r.gpu, r.global_batch);
  out += fmt::format(
      "  layouts: {} considered · {} pruned by memory · {} pruned by throughput bound · {} simulated{} · "
      "{} fit   ({:.2f} s)\n\n",
      r.considered, r.pruned_memory, r.pruned_bound, r.simulated,
      r.shared > 0 ? fmt::format(" ({} by a layout that simulates alike)", r.shared) : "", r.fit, r.wall_s);
  if (r.considered == 0) {
    return out + "  no parallel layout splits this model over these GPUs (the heads, layers, sequence or batch do "
                 "not divide)\n";
  }
  if (r.top.empty()) return out + "  no layout fits in GPU memory\n";
  out += fmt::format(
      "  {:>3} {:>4} {:>4} {:>5} {:>4} {:>4} {:>3} {:>5} {:>10} {:>5} {:>3} {:>12} {:>8} {:>6} "
      "{:>9} "
      "{:>13}\n",
      "#", "tp", "pp", "dp", "cp", "ep", "v", "mb", "recompute", "zero", "sp", "tokens/s",
      "per GPU", "MFU", "mem GiB", "iteration ms");
  int rank = 0;
  for (const RankedLayout& t : r.top) {
    const Layout& l = t.layout;
    out += fmt::format(
        "  {:>3} {:>4} {:>4} {:>5} {:>4} {:>4} {:>3} {:>5} {:>10} {:>5} {:>3} {:>12.0f} {:>8.1f} "
        "{:>5.1f}% {:>9.2f} {:>13.2f}\n",
        ++rank, l.tp, l.pp, l.dp, l.cp, l.ep, l.virtual_stages, l.micro_batch,
        to_string(l.recompute), l.zero, l.sequence_parallel ? "yes" : "no", t.tokens_per_s,
        t.tokens_per_s_per_gpu, 100.0 * t.mfu,
        static_cast<double>(t.peak_memory_bytes) / (1024.0 * 1024.0 * 1024.0),
        1e3 * t.iteration_time_s);
  }
  // Each distinct warning once, with the ranks of the layouts it applies to.
  std::vector<std::vector<std::string>> warnings;
  for (const RankedLayout& t : r.top) warnings.push_back(t.warnings);
  const std::vector<WarningGroup> groups = group_warnings(warnings);
  if (!groups.empty()) out += "\n";
  for (const WarningGroup& g : groups) {
    out += fmt::format("  warning (#{}): {}\n", fmt::join(g.positions, ", #"), g.warning);
  }
  return out;
}

}  // namespace paceline
