// paceline: predicts the iteration time, throughput, utilization and memory of large-model
// training on a GPU cluster. Command-line front end; all logic lives in the libraries.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/check.h"
#include "base/input_error.h"
#include "base/memory_reuse.h"
#include "base/unit_parse.h"
#include "hardware/gpu_spec.h"
#include "models/model_catalog.h"
#include "sim/report/chrome_trace.h"
#include "sim/listing/listing.h"
#include "sim/search/search.h"
#include "sim/search/sweep.h"
#include "sim/simulator/simulator.h"
#include "sim/validate/validation.h"

namespace paceline {
namespace {

constexpr const char* kUsage = R"(paceline — predict how long training a transformer takes on a GPU cluster

usage: paceline <command> [options]

commands:
  run SCENARIO       predict one training iteration of a scenario YAML
  validate FILE...   run validation cases (published measurements) and report the error
  sweep SCENARIO     simulate a scenario over a grid of field values (--set PATH=V1,V2,...)
  search SCENARIO    rank every parallel layout of a scenario's model on its cluster
  models             list the model catalog
  gpus               list the GPU catalog

Run `paceline <command> --help` for a command's options. Exit codes: 0 success, 1 a check
failed (e.g. validate --max-mape), 2 bad input (the message names file, line and field) or an
output that could not be written.
)";

constexpr const char* kRunUsage =
    R"(usage: paceline run SCENARIO [--set PATH=VALUE ...] [--json] [--trace FILE] [--max-events N]
                    [--timeout TIME] [--max-memory SIZE] [--threads N]

Predicts one optimizer step of SCENARIO (a YAML file; see README.md for its fields).

  --set PATH=VALUE    set a field by its dotted path before reading the scenario (the value is
                      YAML; quote a string with a comma), e.g. --set parallelism.tp=8
                      --set training.recompute=full; repeatable, each field once
  --json              print the result as JSON (the keys of the result contract)
  --trace FILE        write a Chrome trace of the step (open in ui.perfetto.dev)
  --max-events N      stop with an error after N simulation events
  --timeout TIME      stop with an error after TIME of wall-clock time (seconds, or e.g. "5 min");
                      a scenario whose estimate exceeds it fails before it starts
  --max-memory SIZE   fail before the simulation starts when its estimated memory exceeds SIZE
                      (bytes, or e.g. "16 GiB"; default: the machine's memory, or less where a
                      cgroup or ulimit -v allows less; 0: no limit)
  --threads N         lower pipeline stages on N threads (default: all cores; the result is the same)

A limit only ever stops a run (exit 2, with the estimate); it never changes a result.
)";

constexpr const char* kValidateUsage = R"(usage: paceline validate FILE... [--overlay FILE] [--cases GLOB,...] [--json]
                         [--report FILE.md|FILE.html] [--write-scenarios DIR] [--threads N]
                         [--max-mape X] [--max-memory-mape X]

Runs every case of the validation FILEs (lists of published measurements, e.g.
scenarios/validation/public.yaml) and prints measured, predicted and signed error per case,
then the mean absolute percentage error (MAPE) overall and per source.

  --overlay FILE   set scenario fields of the cases whose ids match, rule by rule, each with the
                   source that states them (e.g. scenarios/validation/stated-software.yaml:
                   the software each run used, which its scenario cannot say); a rule that
                   matches no case sets nothing and is named in a warning
  --cases GLOB,... run only the cases whose ids match a glob (* any run of characters, ? one),
                   after the overlay; each glob must match a case
  --json           print the report as JSON
  --report FILE    write a report of every case with a predicted-vs-measured plot: FILE.md, Markdown
                   with the plot's SVG beside it; FILE.html, one page with the plot inline
  --write-scenarios DIR
                   write each case's scenario, with the overlay, as DIR/ID.yaml, which
                   `paceline run` reads (to study a case with --trace or --set); the folder is
                   made if missing
  --threads N      run cases on N threads (default: all cores; the result is the same)
  --max-mape X     exit 1 if the overall MAPE exceeds X (a fraction, e.g. 0.12), or if a case was
                   not predicted (unsupported)
  --max-memory-mape X
                   exit 1 if the peak-memory MAPE (over the cases with a measured peak) exceeds X
)";

constexpr const char* kCatalogUsage = R"(usage: paceline models|gpus [--json]

Lists the catalog with each entry's key figures.
)";

// ": why" for the system error in errno, or nothing when it holds none.
std::string system_error_suffix() { return errno != 0 ? ": " + std::string(std::strerror(errno)) : ""; }

// Writes `path` with `write`; throws InputError naming the file and why when it cannot be
// written whole (a folder in the way, a full disk).
void write_file(const std::string& path, std::string_view what, const std::function<void(std::ostream&)>& write) {
  errno = 0;
  std::ofstream out(path);
  if (out) {
    write(out);
    out.close();
  }
  if (!out) throw InputError({path}, fmt::format("cannot write {}{}", what, system_error_suffix()));
}

// The comma-separated globs of --cases, none of them empty.
std::vector<std::string> split_globs(const std::string& text) {
  std::vector<std::string> globs;
  for (const auto glob : std::views::split(text, ',')) globs.emplace_back(glob.begin(), glob.end());
  if (std::ranges::any_of(globs, [](const std::string& glob) { return glob.empty(); })) {
    throw InputError(
        {"<command line>"},
        fmt::format("--cases = '{}': expected case id globs separated by commas, none empty",
                    echoed(text)));
  }
  return globs;
}

// Writes the scenario of each case paceline can run into `folder` (made if missing); names
// every file first, so that a bad case id leaves nothing half written.
void write_scenarios(const std::vector<ValidationCase>& cases, const std::string& folder) {
  std::vector<std::string> names;
  for (const ValidationCase& c : cases) names.push_back(scenario_file_name(c));
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) {
    throw InputError({folder}, fmt::format("cannot make the folder for --write-scenarios: {}",
                                           error.message()));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!cases[i].scenario) {
      std::cerr << fmt::format(
          "paceline: warning: case {} is unsupported ({}); no scenario written\n", cases[i].id,
          cases[i].unsupported_reason);
      continue;
    }
    write_file(folder + "/" + names[i], "the case's scenario",
               [&](std::ostream& out) { out << scenario_file_text(cases[i]); });
  }
}

// Parsed command line: positional arguments and --flags (with their value when they take one).
struct Arguments {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;            // the value of each option
  std::map<std::string, std::vector<std::string>> repeated;  // every value of --set, in order
  bool has(const std::string& flag) const { return options.count(flag) > 0; }
};

// The one option a command line may repeat: each gives another axis.
constexpr const char* kRepeatable = "--set";

InputError unknown_option(const std::string& arg, const std::vector<std::string>& valued,
                          const std::vector<std::string>& flags) {
  std::vector<std::string> known = valued;
  known.insert(known.end(), flags.begin(), flags.end());
  const std::string file = arg.starts_with("-") && !arg.starts_with("--")
                               ? fmt::format(" (a file of that name is ./{})", arg)
                               : "";
  return InputError({"<command line>"}, fmt::format("unknown option '{}'; expected one of: {}{}",
                                                    arg, fmt::join(known, ", "), file));
}

Arguments parse(int argc, char** argv, int first, const std::vector<std::string>& valued,
                const std::vector<std::string>& flags) {
  Arguments args;
  for (int i = first; i < argc; ++i) {
    const std::string given = argv[i];
    const std::string arg = given == "-h" ? "--help" : given;
    if (arg.rfind("--", 0) != 0) {
      // "-j" is a mistyped option, not a file (a file of that name is "./-j").
      if (arg.size() > 1 && arg[0] == '-') throw unknown_option(arg, valued, flags);
      args.positional.push_back(arg);
      continue;
    }
    if (std::find(valued.begin(), valued.end(), arg) != valued.end()) {
      if (i + 1 >= argc) throw InputError({"<command line>"}, fmt::format("option {} needs a value", arg));
      if (args.has(arg) && arg != kRepeatable) {
        throw InputError({"<command line>"}, fmt::format("option {} is given twice; give it once", arg));
      }
      args.options[arg] = argv[++i];
      args.repeated[arg].push_back(args.options[arg]);
    } else if (std::find(flags.begin(), flags.end(), arg) != flags.end()) {
      if (args.has(arg)) throw InputError({"<command line>"}, fmt::format("option {} is given twice; give it once", arg));
      args.options[arg] = "";
    } else {
      throw unknown_option(arg, valued, flags);
    }
  }
  return args;
}

// A whole number of at least `least` and at most `most`, in decimal digits only.
uint64_t parse_count(const std::string& text, const std::string& option, uint64_t least = 0,
                     uint64_t most = std::numeric_limits<uint64_t>::max()) {
  uint64_t value = 0;
  const auto [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool digits = !text.empty() && text.front() != '+' && text.front() != '-';
  if (!digits || (ec != std::errc() && ec != std::errc::result_out_of_range) || rest != text.data() + text.size()) {
    throw InputError({"<command line>"}, fmt::format("{} = '{}' is not a non-negative integer", option, text));
  }
  if (ec == std::errc::result_out_of_range || value < least || value > most) {
    throw InputError({"<command line>"}, fmt::format("{} = {} is out of range; expected {} to {}", option, text,
                                                      least, most));
  }
  return value;
}

// An option that takes a count of the int range.
int parse_int_count(const Arguments& args, const std::string& option, uint64_t least) {
  return static_cast<int>(parse_count(args.options.at(option), option, least, std::numeric_limits<int>::max()));
}

// --threads N, or 0 (one per hardware thread) when it is not given.
int thread_count(const Arguments& args) { return args.has("--threads") ? parse_int_count(args, "--threads", 0) : 0; }

// The --set PATH=VALUE options of `command` (in sweep's syntax, one value each), each field once.
std::vector<Override> single_value_overrides(const Arguments& args, const std::string& command) {
  std::vector<Override> overrides;
  if (!args.has("--set")) return overrides;
  for (const std::string& text : args.repeated.at("--set")) {
    SweepAxis axis = parse_sweep_axis(text, "--set");
    if (axis.values.size() != 1) {
      throw InputError({"--set"}, fmt::format("'{}' gives {} values; paceline {} takes one per field (paceline "
                                              "sweep tries several)", text, axis.values.size(), command));
    }
    for (const Override& earlier : overrides) {
      if (paths_overlap(earlier.path, axis.path)) {
        throw InputError({"--set"}, fmt::format("{} and {} set one field twice; give each field once", earlier.path,
                                                axis.path));
      }
    }
    overrides.push_back({axis.path, axis.values.front(), axis.origin});
  }
  return overrides;
}

int run_command(int argc, char** argv) {
  const Arguments args =
      parse(argc, argv, 2, {"--set", "--trace", "--max-events", "--timeout", "--max-memory", "--threads"},
            {"--json", "--help"});
  if (args.has("--help")) {
    std::cout << kRunUsage;
    return 0;
  }
  if (args.positional.size() != 1) {
    throw InputError({"<command line>"}, "paceline run takes exactly one scenario file (see paceline run --help)");
  }
  // A limit given as a quantity: "--timeout 90", "--timeout '5 min'", "--max-memory '16 GiB'".
  auto limit = [&](const std::string& option, Dimension dimension) {
    double value = 0.0;
    try {
      value = parse_quantity(args.options.at(option), dimension);
    } catch (const std::invalid_argument& e) {
      throw InputError({"<command line>"}, fmt::format("{}: {}", option, e.what()));
    }
    if (value < 0.0) {
      throw InputError({"<command line>"}, fmt::format("{} = '{}' is negative; expected at least 0",
                                                       option, args.options.at(option)));
    }
    return value;
  };
  auto scenario = std::make_shared<const Scenario>(
      load_scenario(read_scenario_source(args.positional[0]), single_value_overrides(args, "run")));
  SimulateOptions options;
  if (args.has("--max-events")) options.max_events = parse_count(args.options.at("--max-events"), "--max-events");
  if (args.has("--timeout")) options.timeout = Seconds(limit("--timeout", Dimension::kTime));
  options.max_memory = args.has("--max-memory") ? Bytes(limit("--max-memory", Dimension::kBytes)) : machine_memory();
  options.threads = thread_count(args);
  options.record_memory = args.has("--trace");
  const Prediction prediction = simulate(scenario, options);
  if (args.has("--trace")) {
    write_file(args.options.at("--trace"), "the trace",
               [&](std::ostream& out) { write_chrome_trace(*prediction.lowering, prediction.run, out); });
  }
  for (const std::string& warning : prediction.result.warnings) std::cerr << "paceline: warning: " << warning << "\n";
  if (args.has("--json")) {
    std::cout << to_json(prediction.result).dump() << "\n";
  } else {
    std::cout << to_text(prediction.result);
  }
  return 0;
}

int validate_command(int argc, char** argv) {
  const Arguments args = parse(argc, argv, 2,
                               {"--overlay", "--cases", "--report", "--write-scenarios",
                                "--threads", "--max-mape", "--max-memory-mape"},
                               {"--json", "--help"});
  if (args.has("--help")) {
    std::cout << kValidateUsage;
    return 0;
  }
  if (args.positional.empty()) {
    throw InputError({"<command line>"}, "paceline validate needs at least one validation file");
  }
  const std::string report_path = args.has("--report") ? args.options.at("--report") : "";
  if (!report_path.empty() && !report_path.ends_with(".md") && !report_path.ends_with(".html")) {
    throw InputError({"<command line>"}, fmt::format("--report = '{}': expected a path ending in .md (Markdown, with "
                                                     "the plot's SVG beside it) or .html (one page, the plot inline)",
                                                     report_path));
  }
  // The limits asked for, each a fraction of at least 0.
  std::map<std::string, std::optional<double>> limits;
  for (const char* option : {"--max-mape", "--max-memory-mape"}) {
    if (!args.has(option)) {
      limits[option] = std::nullopt;
      continue;
    }
    const std::string& text = args.options.at(option);
    double limit = 0.0;
    const auto [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), limit);
    if (ec != std::errc() || rest != text.data() + text.size() || !std::isfinite(limit) || limit < 0.0) {
      throw InputError({"<command line>"}, fmt::format("{} = '{}': expected a fraction of at least 0 (e.g. 0.12 "
                                                       "for 12%)", option, text));
    }
    limits[option] = limit;
  }
  std::vector<ValidationCase> cases;
  for (const std::string& file : args.positional) {
    std::vector<ValidationCase> loaded = load_validation_file(file);
    cases.insert(cases.end(), std::make_move_iterator(loaded.begin()), std::make_move_iterator(loaded.end()));
  }
  check_unique_ids(cases);
  if (args.has("--overlay")) {
    for (const std::string& warning : apply_overlay(cases, load_overlay_file(args.options.at("--overlay")))) {
      std::cerr << "paceline: warning: " << warning << "\n";
    }
  }
  if (args.has("--cases")) {
    const std::string& globs = args.options.at("--cases");
    cases = select_cases(std::move(cases), split_globs(globs), {"--cases " + echoed(globs)});
  }
  if (args.has("--write-scenarios")) write_scenarios(cases, args.options.at("--write-scenarios"));
  const ValidationReport report = validate(cases, thread_count(args));
  if (report_path.ends_with(".html")) {
    write_file(report_path, "the report", [&](std::ostream& out) { out << to_html(report); });
  } else if (report_path.ends_with(".md")) {
    // The plot first: a report is not left naming a plot that could not be written.
    const std::string svg = report_path.substr(0, report_path.size() - 3) + ".svg";
    write_file(svg, "the report's plot", [&](std::ostream& out) { out << predicted_vs_measured_svg(report); });
    write_file(report_path, "the report",
               [&](std::ostream& out) { out << to_markdown(report, svg.substr(svg.rfind('/') + 1)); });
  }
  std::cout << (args.has("--json") ? to_json(report).dump() + "\n" : to_text(report));
  // The checks asked for: exit 1 when an error exceeds its limit.
  const auto within = [&](const char* option, const char* what, std::optional<double> value, const std::string& missing) {
    const std::optional<double>& limit = limits.at(option);
    if (!limit) return true;
    if (!value) throw InputError({"<command line>"}, fmt::format("{}: {}", option, missing));
    if (*value <= *limit) return true;
    std::cerr << fmt::format("paceline: {} {:.2f}% exceeds the limit {:.2f}%\n", what, 100.0 * *value, 100.0 * *limit);
    return false;
  };
  const size_t predicted = report.cases.size() - static_cast<size_t>(report.unsupported);
  // A limit holds for every case: one that was not predicted (a scenario paceline cannot
  // express, or a mistake in it) fails the check rather than drop out of it.
  bool all_predicted = true;
  if (predicted > 0 && report.unsupported > 0 && (limits.at("--max-mape") || limits.at("--max-memory-mape"))) {
    const auto first = std::find_if(report.cases.begin(), report.cases.end(),
                                    [](const CaseOutcome& o) { return !o.predicted_s; });
    std::cerr << fmt::format(
        "paceline: {} of {} cases were not predicted, so no limit covers them; the first, {}: {}\n",
        report.unsupported, report.cases.size(), first->validation_case->id, first->reason);
    all_predicted = false;
  }
  const bool time_within =
      within("--max-mape", "MAPE", predicted > 0 ? std::optional(report.mape) : std::nullopt,
             fmt::format("no case of the validation files was predicted ({} unsupported)", report.unsupported));
  const bool memory_within = within("--max-memory-mape", "peak-memory MAPE", report.memory_mape,
                                    "no case of the validation files has a measured peak memory");
  return all_predicted && time_within && memory_within ? 0 : 1;
}

int catalog_command(int argc, char** argv, bool gpus) {
  const Arguments args = parse(argc, argv, 2, {}, {"--json", "--help"});
  if (args.has("--help")) {
    std::cout << kCatalogUsage;
    return 0;
  }
  if (!args.positional.empty()) {
    throw InputError({"<command line>"}, fmt::format("paceline {} takes no file or name; '{}' is extra (see paceline "
                                                      "{} --help)", argv[1], args.positional[0], argv[1]));
  }
  const Json list = gpus ? gpu_listing() : model_listing();
  std::string text;
  if (gpus) {
    text = fmt::format("{:<22} {:>10} {:>10} {:>12} {:>10}  {}\n", "gpu", "bf16 TF/s", "fp8 TF/s", "memory GiB",
                       "HBM TB/s", "description");
    for (const Json& gpu : list.elements()) {
      const Json& fp8 = gpu.at("fp8_flop_per_s");
      text += fmt::format("{:<22} {:>10.1f} {:>10} {:>12.1f} {:>10.2f}  {}\n", gpu.at("name").string(),
                          gpu.at("bf16_flop_per_s").number() / 1e12,
                          fp8.is_null() ? "-" : fmt::format("{:.1f}", fp8.number() / 1e12),
                          gpu.at("memory_bytes").number() / (GiB(1) / Bytes(1)),
                          gpu.at("memory_bandwidth_bytes_per_s").number() / 1e12, gpu.at("description").string());
    }
  } else {
    text = fmt::format("{:<18} {:>8} {:>7} {:>6} {:>9} {:>18} {:>18}\n", "model", "layers", "hidden", "heads",
                       "kv_heads", "parameters", "active");
    auto whole = [](const Json& value) { return static_cast<int64_t>(value.number()); };
    for (const Json& model : list.elements()) {
      text += fmt::format("{:<18} {:>8} {:>7} {:>6} {:>9} {:>18L} {:>18L}\n", model.at("name").string(),
                          whole(model.at("layers")), whole(model.at("hidden")), whole(model.at("heads")),
                          whole(model.at("kv_heads")), whole(model.at("parameters")),
                          whole(model.at("active_parameters")));
    }
  }
  std::cout << (args.has("--json") ? list.dump() + "\n" : text);
  return 0;
}

// A count on stderr of what a long command has done, one line rewritten in place; finished (by
// a line break) before the command prints its result, or as an error unwinds past it.
class ProgressLine {
 public:
  ProgressLine() = default;
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { finish(); }

  void show(const std::string& line) {
    // Spaces over what is left of a longer line before it.
    std::cerr << '\r' << line << std::string(shown_ > line.size() ? shown_ - line.size() : 0, ' ') << std::flush;
    shown_ = line.size();
    open_ = true;
  }
  void finish() {
    if (open_) std::cerr << '\n';
    open_ = false;
  }

 private:
  bool open_ = false;
  size_t shown_ = 0;  // characters of the line shown
};

int search_command(int argc, char** argv) {
  constexpr const char* kSearchUsage = R"(usage: paceline search SCENARIO [--set PATH=VALUE ...] [--gpus N] [--top K] [--threads N] [--json]
                       [--progress]

Ranks every valid parallel layout of SCENARIO's model on its cluster (tp, pp, dp, cp, ep,
virtual stages, micro-batch, recompute, ZeRO stage, sequence parallelism) by simulated
tokens/s, keeping its global batch; layouts that cannot fit or cannot make the top K are
pruned by lower bounds before simulating. The ranking equals simulating every layout.

  --set PATH=VALUE  set a field of SCENARIO first, as paceline run does; the fields a layout
                    chooses (parallelism.tp, ..., training.micro_batch, recompute) are refused
  --gpus N          search on N GPUs of the same kind (default: the scenario's cluster)
  --top K           how many layouts to rank (default 10)
  --threads N       build graphs, bound layouts and simulate on N threads (default: all cores;
                    the result is the same)
  --json            print the report as JSON
  --progress        show on stderr how far the search is: layer graphs built, layouts bounded,
                    layouts simulated
)";
  const Arguments args =
      parse(argc, argv, 2, {"--set", "--gpus", "--top", "--threads"}, {"--json", "--progress", "--help"});
  if (args.has("--help")) {
    std::cout << kSearchUsage;
    return 0;
  }
  if (args.positional.size() != 1) {
    throw InputError({"<command line>"}, "paceline search takes exactly one scenario file (see paceline search --help)");
  }
  SearchOptions options;
  if (args.has("--gpus")) options.gpus = parse_int_count(args, "--gpus", 1);
  if (args.has("--top")) options.top = parse_int_count(args, "--top", 1);
  options.threads = thread_count(args);
  options.overrides = single_value_overrides(args, "search");
  ProgressLine progress;
  if (args.has("--progress")) {
    options.progress = [&progress](std::string_view stage, size_t done, size_t total) {
      progress.show(progress_line(stage, done, total));
    };
  }
  const SearchReport report = search_layouts(read_scenario_source(args.positional[0]), options);
  progress.finish();
  std::cout << (args.has("--json") ? to_json(report).dump() + "\n" : to_text(report));
  return 0;
}

int sweep_command(int argc, char** argv) {
  constexpr const char* kSweepUsage = R"(usage: paceline sweep SCENARIO --set PATH=V1,V2,... [--set ...] [--threads N] [--csv | --json]
                      [--progress]

Simulates SCENARIO once for every combination of the values given (the cartesian product of
the --set axes, the last varying fastest) and prints one row per configuration: its values,
iteration time, tokens/s, MFU, peak memory and whether it fits. A configuration that breaks
the scenario format is a row with its error, not a failure of the sweep.

  --set PATH=V1,V2,...  a field by its dotted path and the values to try (YAML; split at commas
                        outside brackets and quotes), e.g. --set parallelism.tp=1,2,4,8
                        --set training.recompute=none,selective,full
  --threads N           simulate on N threads (default: all cores; the result is the same)
  --csv                 print CSV (a header, then one row per configuration)
  --json                print a JSON list of rows
  --progress            count the configurations done on stderr as they finish
)";
  const Arguments args = parse(argc, argv, 2, {"--set", "--threads"}, {"--csv", "--json", "--progress", "--help"});
  if (args.has("--help")) {
    std::cout << kSweepUsage;
    return 0;
  }
  if (args.positional.size() != 1) {
    throw InputError({"<command line>"}, "paceline sweep takes exactly one scenario file (see paceline sweep --help)");
  }
  if (!args.has("--set")) {
    throw InputError({"<command line>"}, "paceline sweep needs at least one --set PATH=V1,V2,... (see paceline sweep --help)");
  }
  if (args.has("--csv") && args.has("--json")) {
    throw InputError({"<command line>"}, "paceline sweep prints either --csv or --json, not both");
  }
  std::vector<SweepAxis> axes;
  for (const std::string& text : args.repeated.at("--set")) axes.push_back(parse_sweep_axis(text, "--set"));
  SweepOptions options;
  options.threads = thread_count(args);
  const ScenarioSource source = read_scenario_source(args.positional[0]);
  check_sweep(source, axes);
  ProgressLine progress;
  if (args.has("--progress")) {
    options.progress = [&progress](size_t done, size_t total) {
      progress.show(fmt::format("sweep: {} of {} configurations done", done, total));
    };
  }
  const SweepTable table = run_sweep(source, axes, 0, sweep_size(axes), options);
  progress.finish();
  if (args.has("--json")) {
    std::cout << to_json(axes, 0, table).dump() << "\n";
  } else {
    std::cout << (args.has("--csv") ? to_csv(axes, 0, table) : to_text(axes, 0, table));
  }
  return 0;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "run") return run_command(argc, argv);
  if (command == "validate") return validate_command(argc, argv);
  if (command == "models") return catalog_command(argc, argv, /*gpus=*/false);
  if (command == "gpus") return catalog_command(argc, argv, /*gpus=*/true);
  if (command == "search") return search_command(argc, argv);
  if (command == "sweep") return sweep_command(argc, argv);
  throw InputError({"<command line>"}, fmt::format("unknown command '{}'; expected one of: run, validate, sweep, "
                                                    "search, models, gpus (see paceline --help)", command));
}

}  // namespace
}  // namespace paceline

int main(int argc, char** argv) {
  paceline::keep_freed_memory_for_reuse();
  try {
    const int status = paceline::dispatch(argc, argv);
    // A result that did not reach its reader (a full disk) is no result.
    errno = 0;
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "paceline: cannot write the output" << paceline::system_error_suffix() << "\n";
      return 2;
    }
    return status;
  } catch (const paceline::InputError& e) {
    std::cerr << "paceline: " << e.what() << "\n";
    return 2;
  } catch (const paceline::SimulationLimitError& e) {
    std::cerr << "paceline: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "paceline: internal error: " << e.what() << "\n";
    return 1;
  }
}
