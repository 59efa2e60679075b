#include "calibrate/cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <string>

namespace paceline::calibrate {
namespace {

std::string family_list() {
  std::string out;
  for (std::string_view f : kFamilies) {
    if (!out.empty()) out += ", ";
    out += f;
  }
  return out;
}

std::vector<std::string> parse_families(std::string_view option, std::string_view value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view name = value.substr(start, comma - start);
    if (std::find(kFamilies.begin(), kFamilies.end(), name) == kFamilies.end()) {
      throw UsageError(std::string(option) + ": unknown family '" + std::string(name) +
                       "'; expected a comma-separated list of: " + family_list());
    }
    out.emplace_back(name);
    start = comma + 1;
  }
  return out;
}

// The longest budget: a year. The runner adds it to steady_clock's nanosecond time points, which
// overflow some 292 years after boot (1e10 s made every deadline lie in the past).
constexpr double kMostBudgetSeconds = 365.0 * 24 * 3600;

double parse_budget_seconds(std::string_view option, std::string_view value) {
  double seconds = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (ec != std::errc() || ptr != value.data() + value.size() || !std::isfinite(seconds) ||
      seconds < 0 || seconds > kMostBudgetSeconds) {
    throw UsageError(std::string(option) + " = '" + std::string(value) +
                     "'; expected a number of seconds from 0 (no budget) to 31536000 (a year)");
  }
  return seconds;
}

int parse_device(std::string_view value) {
  int device = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), device);
  if (ec != std::errc() || ptr != value.data() + value.size() || device < 0) {
    throw UsageError("--device = '" + std::string(value) +
                     "'; expected a CUDA device ordinal >= 0");
  }
  return device;
}

}  // namespace

Options parse_args(const std::vector<std::string_view>& args) {
  Options options;
  std::vector<std::string> only, skip;
  std::set<std::string> seen;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view arg = args[i];
    std::string_view value;
    bool has_inline_value = false;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string_view::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline_value = true;
      }
    }
    auto take_value = [&]() -> std::string_view {
      if (has_inline_value) return value;
      if (i + 1 >= args.size()) throw UsageError(std::string(arg) + " needs a value");
      return args[++i];
    };
    auto no_value = [&]() {
      if (has_inline_value) throw UsageError(std::string(arg) + " takes no value");
    };
    // Each option once, and one grid: a second would silently win over the first.
    const std::string_view option = arg == "-h"   ? "--help"
                                    : arg == "-o" ? "--output"
                                    : arg == "-v" ? "--verbose"
                                                  : arg;
    if (arg.rfind("-", 0) == 0 && !seen.insert(std::string(option)).second) {
      throw UsageError(std::string(option) + " is given twice; give each option once");
    }
    if ((option == "--quick" && seen.contains("--full")) ||
        (option == "--full" && seen.contains("--quick"))) {
      throw UsageError("--quick and --full each choose the grids; give one");
    }
    if (arg == "--help" || arg == "-h") {
      no_value();
      options.help = true;
    } else if (arg == "--quick") {
      no_value();
      options.mode = Mode::kQuick;
    } else if (arg == "--full") {
      no_value();
      options.mode = Mode::kFull;
    } else if (arg == "--output" || arg == "-o") {
      options.output = std::string(take_value());
      if (options.output.empty()) throw UsageError("--output needs a file name");
    } else if (arg == "--families") {
      only = parse_families(arg, take_value());
    } else if (arg == "--skip") {
      skip = parse_families(arg, take_value());
    } else if (arg == "--device") {
      options.device = parse_device(take_value());
    } else if (arg == "--fresh") {
      no_value();
      options.fresh = true;
    } else if (arg == "--budget-s") {
      options.budget_s = parse_budget_seconds(arg, take_value());
    } else if (arg == "--plan") {
      no_value();
      options.plan_only = true;
    } else if (arg == "--verbose" || arg == "-v") {
      no_value();
      options.verbose = true;
    } else {
      throw UsageError("unknown option '" + std::string(args[i]) +
                       "'; expected one of: --quick, --full, --output, --families, --skip, "
                       "--device, --fresh, --budget-s, --plan, --verbose, --help");
    }
  }
  for (std::string_view family : kFamilies) {
    bool selected = only.empty() || std::find(only.begin(), only.end(), family) != only.end();
    bool skipped = std::find(skip.begin(), skip.end(), family) != skip.end();
    if (selected && !skipped) options.families.emplace_back(family);
  }
  if (options.families.empty() && !options.help) {
    throw UsageError("--families/--skip leave nothing to measure");
  }
  return options;
}

std::string help_text() {
  return R"(usage: paceline-calibrate [--quick | --full] [--output FILE] [options]

Measures this node's GPU kernels and links and writes a paceline kernel profile (YAML,
docs/profile-format.md) that the simulator's op timer interpolates. Kernel times come from CUPTI
activity records (kernel start/end on the GPU), never from host timers.

Families, in run order:
  memory_bound  add, GeLU, SwiGLU, LayerNorm, RMSNorm, softmax, cross-entropy (bf16), 1 MiB..GiB
  copies        device-to-device, host-to-device, device-to-host, peer-to-peer (>= 2 GPUs)
  gemm          cuBLASLt bf16 / fp16 / fp8 (e4m3) / tf32 over an (M, N, K) grid, TN/NN/NT
  collectives   NCCL all_reduce, all_gather, reduce_scatter, all_to_all, send_recv (>= 2 GPUs)
  attention     cuDNN fused scaled-dot-product attention, forward and backward

Options:
  --quick           small grids, each family capped in time (default; ~2-3 min on an H100/H200)
  --full            dense grids, no caps (tens of minutes)
  --output FILE     profile to write (default profile.yaml). If FILE exists it is resumed:
                    points it already has are not measured again
  --fresh           overwrite FILE instead of resuming it
  --families LIST   measure only these families (comma-separated)
  --skip LIST       do not measure these families
  --device N        CUDA device for single-GPU families (default 0)
  --budget-s S      stop after S seconds of wall time (at most a year), writing what was measured
                    (rerun to resume)
  --plan            print the grids and the estimated run time, then exit (no GPU needed)
  --verbose         one line per measured point
  --help            this text

Measurement: each point runs warm-up calls, then timed calls (3 + 10 in quick mode, 5 + 20 in
full); a call's time is the sum of its kernel durations from CUPTI; the profile keeps the median
and the spread (p90 - p10) / median. Buffers rotate over more than the L2 cache and hold random
data; GPU clocks are left as they are.

Exit status: 0 every selected family measured (or not applicable, e.g. collectives on one GPU);
1 a family failed or ran out of time (the profile says which, under `skipped`); 2 no usable GPU,
bad command line, or an output that cannot be written or resumed.
)";
}

}  // namespace paceline::calibrate
