// paceline: predicts the iteration time, throughput, utilization and memory of large-model
// training on a GPU cluster. Command-line front end; all logic lives in the libraries.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/input_error.h"
#include "hardware/gpu_spec.h"
#include "models/model_catalog.h"
#include "sim/report/chrome_trace.h"
#include "sim/simulator/simulator.h"
#include "sim/validate/validation.h"

namespace paceline {
namespace {

constexpr const char* kUsage = R"(paceline — predict how long training a transformer takes on a GPU cluster

usage: paceline <command> [options]

commands:
  run SCENARIO       predict one training iteration of a scenario YAML
  validate FILE...   run validation cases (published measurements) and report the error
  models             list the model catalog
  gpus               list the GPU catalog

Run `paceline <command> --help` for a command's options. Exit codes: 0 success, 1 a check
failed (e.g. validate --max-mape), 2 bad input (the message names file, line and field).
)";

constexpr const char* kRunUsage = R"(usage: paceline run SCENARIO [--json] [--trace FILE] [--max-events N]

Predicts one optimizer step of SCENARIO (a YAML file; see README.md for its fields).

  --json          print the result as JSON (the keys of the result contract)
  --trace FILE    write a Chrome trace of the step (open in ui.perfetto.dev)
  --max-events N  stop with an error after N simulation events
)";

constexpr const char* kValidateUsage = R"(usage: paceline validate FILE... [--json] [--report FILE.md] [--threads N] [--max-mape X]

Runs every case of the validation FILEs (lists of published measurements, e.g.
scenarios/validation/public.yaml) and prints measured, predicted and signed error per case,
then the mean absolute percentage error (MAPE) overall and per source.

  --json           print the report as JSON
  --report FILE    write a Markdown report and a predicted-vs-measured SVG beside it
  --threads N      run cases on N threads (default: all cores; the result is the same)
  --max-mape X     exit 1 if the overall MAPE exceeds X (a fraction, e.g. 0.12)
)";

constexpr const char* kCatalogUsage = R"(usage: paceline models|gpus [--json]

Lists the catalog with each entry's key figures.
)";

// Parsed command line: positional arguments and --flags (with their value when they take one).
struct Arguments {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  bool has(const std::string& flag) const { return options.count(flag) > 0; }
};

Arguments parse(int argc, char** argv, int first, const std::vector<std::string>& valued,
                const std::vector<std::string>& flags) {
  Arguments args;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      args.positional.push_back(arg);
      continue;
    }
    if (std::find(valued.begin(), valued.end(), arg) != valued.end()) {
      if (i + 1 >= argc) throw InputError({"<command line>"}, fmt::format("option {} needs a value", arg));
      args.options[arg] = argv[++i];
    } else if (std::find(flags.begin(), flags.end(), arg) != flags.end()) {
      args.options[arg] = "";
    } else {
      std::vector<std::string> known = valued;
      known.insert(known.end(), flags.begin(), flags.end());
      throw InputError({"<command line>"}, fmt::format("unknown option '{}'; expected one of: {}", arg,
                                                        fmt::join(known, ", ")));
    }
  }
  return args;
}

uint64_t parse_count(const std::string& text, const std::string& option) {
  try {
    size_t used = 0;
    const unsigned long long value = std::stoull(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw InputError({"<command line>"}, fmt::format("{} = '{}' is not a non-negative integer", option, text));
}

int run_command(int argc, char** argv) {
  const Arguments args = parse(argc, argv, 2, {"--trace", "--max-events"}, {"--json", "--help"});
  if (args.has("--help")) {
    std::cout << kRunUsage;
    return 0;
  }
  if (args.positional.size() != 1) {
    throw InputError({"<command line>"}, "paceline run takes exactly one scenario file (see paceline run --help)");
  }
  auto scenario = std::make_shared<const Scenario>(load_scenario_file(args.positional[0]));
  SimulateOptions options;
  if (args.has("--max-events")) options.max_events = parse_count(args.options.at("--max-events"), "--max-events");
  const Prediction prediction = simulate(scenario, options);
  if (args.has("--trace")) {
    const std::string path = args.options.at("--trace");
    std::ofstream out(path);
    if (!out) throw InputError({path}, "cannot write the trace file");
    write_chrome_trace(*prediction.lowering, prediction.run, out);
  }
  if (args.has("--json")) {
    std::cout << to_json(prediction.result).dump() << "\n";
  } else {
    std::cout << to_text(prediction.result);
  }
  return 0;
}

int validate_command(int argc, char** argv) {
  const Arguments args = parse(argc, argv, 2, {"--report", "--threads", "--max-mape"}, {"--json", "--help"});
  if (args.has("--help")) {
    std::cout << kValidateUsage;
    return 0;
  }
  if (args.positional.empty()) {
    throw InputError({"<command line>"}, "paceline validate needs at least one validation file");
  }
  std::vector<ValidationCase> cases;
  for (const std::string& file : args.positional) {
    std::vector<ValidationCase> loaded = load_validation_file(file);
    cases.insert(cases.end(), std::make_move_iterator(loaded.begin()), std::make_move_iterator(loaded.end()));
  }
  const int threads = args.has("--threads") ? static_cast<int>(parse_count(args.options.at("--threads"), "--threads"))
                                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ValidationReport report = validate(cases, threads);
  if (args.has("--report")) {
    const std::string path = args.options.at("--report");
    const std::string svg = path.substr(0, path.rfind('.')) + ".svg";
    std::ofstream markdown(path);
    std::ofstream plot(svg);
    if (!markdown || !plot) throw InputError({path}, "cannot write the report");
    markdown << to_markdown(report, svg.substr(svg.rfind('/') + 1));
    plot << predicted_vs_measured_svg(report);
  }
  std::cout << (args.has("--json") ? to_json(report).dump() + "\n" : to_text(report));
  if (args.has("--max-mape")) {
    double limit = 0.0;
    try {
      limit = std::stod(args.options.at("--max-mape"));
    } catch (const std::exception&) {
      throw InputError({"<command line>"}, "--max-mape needs a number (a fraction, e.g. 0.12)");
    }
    if (report.mape > limit) {
      std::cerr << fmt::format("paceline: MAPE {:.2f}% exceeds the limit {:.2f}%\n", 100.0 * report.mape, 100.0 * limit);
      return 1;
    }
  }
  return 0;
}

int catalog_command(int argc, char** argv, bool gpus) {
  const Arguments args = parse(argc, argv, 2, {}, {"--json", "--help"});
  if (args.has("--help")) {
    std::cout << kCatalogUsage;
    return 0;
  }
  Json list = Json::array();
  std::string text;
  if (gpus) {
    text = fmt::format("{:<22} {:>10} {:>10} {:>12} {:>10}  {}\n", "gpu", "bf16 TF/s", "fp8 TF/s", "memory GiB",
                       "HBM TB/s", "description");
    for (const std::string& name : catalog_gpus(default_gpu_catalog())) {
      const GpuSpec gpu = resolve_gpu(name, default_gpu_catalog(), {});
      const double bf16 = *gpu.peak(DType::kBf16) / TflopPerSecond(1);
      const auto fp8 = gpu.peak(DType::kFp8);
      Json entry = Json::object();
      entry.set("name", name).set("description", gpu.description).set("bf16_flop_per_s", bf16 * 1e12);
      entry.set("fp8_flop_per_s", fp8 ? Json(*fp8 / FlopPerSecond(1)) : Json());
      entry.set("memory_bytes", gpu.memory_capacity / Bytes(1));
      entry.set("memory_bandwidth_bytes_per_s", gpu.memory_bandwidth / BytesPerSecond(1));
      list.push(std::move(entry));
      text += fmt::format("{:<22} {:>10.1f} {:>10} {:>12.1f} {:>10.2f}  {}\n", name, bf16,
                          fp8 ? fmt::format("{:.1f}", *fp8 / TflopPerSecond(1)) : "-", gpu.memory_capacity / GiB(1),
                          gpu.memory_bandwidth / TBPerSecond(1), gpu.description);
    }
  } else {
    text = fmt::format("{:<18} {:>8} {:>7} {:>6} {:>9} {:>18} {:>18}\n", "model", "layers", "hidden", "heads",
                       "kv_heads", "parameters", "active");
    for (const std::string& name : catalog_models(default_model_catalog())) {
      const ModelSpec model = resolve_model(name, default_model_catalog(), {});
      const ParameterCount count = count_parameters(model);
      Json entry = Json::object();
      entry.set("name", name).set("layers", model.layers).set("hidden", model.hidden).set("heads", model.heads);
      entry.set("kv_heads", model.kv_heads).set("parameters", count.total).set("active_parameters", count.active);
      list.push(std::move(entry));
      text += fmt::format("{:<18} {:>8} {:>7} {:>6} {:>9} {:>18L} {:>18L}\n", name, model.layers, model.hidden,
                          model.heads, model.kv_heads, count.total, count.active);
    }
  }
  std::cout << (args.has("--json") ? list.dump() + "\n" : text);
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
  throw InputError({"<command line>"}, fmt::format("unknown command '{}'; expected one of: run, validate, models, "
                                                    "gpus (see paceline --help)", command));
}

}  // namespace
}  // namespace paceline

int main(int argc, char** argv) {
  try {
    return paceline::dispatch(argc, argv);
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
