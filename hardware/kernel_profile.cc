#include "hardware/kernel_profile.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include "base/check.h"
#include "base/parsed_file_cache.h"
#include "base/yaml_reader.h"
#include "hardware/gemm_tiling.h"

namespace paceline {
namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// The compute capabilities of the catalog's NVIDIA architectures (CUDA C++ Programming Guide,
// "Compute Capabilities": A100 8.0, H100 and H200 9.0, B200 and GB200 10.0, B300 10.3). Other
// chips of a family (8.6, 12.0) have other tensor cores and memory, so they serve no catalog GPU.
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kArchitectures = {{
    {"8.0", "ampere"},
    {"9.0", "hopper"},
    {"10.0", "blackwell"},
    {"10.3", "blackwell"},
}};

// Weighted least squares minimizing relative error: each measured point contributes the row
// features/t = 1. Parameters that come out negative (unphysical) are dropped and the rest refit.
std::vector<double> fit_relative(const std::vector<std::vector<double>>& features, const std::vector<double>& times,
                                 double& rms_relative_error) {
  const size_t n = times.size();
  const size_t p = features.empty() ? 0 : features.front().size();
  std::vector<bool> active(p, true);
  std::vector<double> solution(p, 0.0);
  for (size_t attempt = 0; attempt < p; ++attempt) {
    std::vector<size_t> columns;
    for (size_t j = 0; j < p; ++j) {
      if (active[j]) columns.push_back(j);
    }
    Eigen::MatrixXd a(n, columns.size());
    Eigen::VectorXd y = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(n));
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < columns.size(); ++c) a(i, c) = features[i][columns[c]] / times[i];
    }
    const Eigen::VectorXd x = a.colPivHouseholderQr().solve(y);
    std::fill(solution.begin(), solution.end(), 0.0);
    bool negative = false;
    for (size_t c = 0; c < columns.size(); ++c) {
      solution[columns[c]] = x(static_cast<Eigen::Index>(c));
      if (x(static_cast<Eigen::Index>(c)) < 0.0 && columns[c] != 0) {
        active[columns[c]] = false;
        negative = true;
      }
    }
    if (!negative) break;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double predicted = 0.0;
    for (size_t j = 0; j < p; ++j) predicted += solution[j] * features[i][j];
    sum += std::pow(predicted / times[i] - 1.0, 2);
  }
  rms_relative_error = n > 0 ? std::sqrt(sum / static_cast<double>(n)) : 0.0;
  return solution;
}

std::optional<DType> dtype_of(const std::string& name) {
  if (name == "bf16") return DType::kBf16;
  if (name == "fp16") return DType::kFp16;
  if (name == "fp8_e4m3") return DType::kFp8;
  if (name == "tf32") return DType::kTf32;
  return std::nullopt;
}

std::optional<GemmLayout> layout_of(const std::string& transa, const std::string& transb) {
  if (transa == "T" && transb == "N") return GemmLayout::kForward;
  if (transa == "N" && transb == "N") return GemmLayout::kDataGradient;
  if (transa == "N" && transb == "T") return GemmLayout::kWeightGradient;
  return std::nullopt;
}

// cuBLAS's column-major (m, n, k) of a profile row in the model's row-major terms: forward and
// data-gradient GEMMs swap m and n (the profile's m is the output features), weight gradients
// do not (see docs/profile-format.md, "gemm").
std::array<double, 3> model_terms(GemmLayout layout, double m, double n, double k) {
  if (layout == GemmLayout::kWeightGradient) return {m, n, k};
  return {n, m, k};
}

std::vector<double> sorted_unique(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

// A measured point: its coordinates, its time and the row that gave it.
template <size_t D>
struct Point {
  std::array<double, D> at;
  double time_s;
  YAML::Node row;
};
template <size_t D>
using Points = std::vector<Point<D>>;

// Grid cells a table's rows may span: the calibration grids have at most a few thousand, and
// rows scattered over distinct values would make the grid (and its fit) grow as their count
// to the power of the dimensions.
constexpr double kMostGridCells = 1e6;

// Measured points as a grid over their distinct coordinates, refusing two rows at one point (the
// table's key identifies a row) and rows too scattered to be a grid.
template <size_t D>
LogGrid grid_of(const Points<D>& points, YamlMap& table) {
  std::vector<const Point<D>*> by_point;
  for (const Point<D>& point : points) by_point.push_back(&point);
  std::ranges::stable_sort(by_point, {}, &Point<D>::at);
  for (size_t i = 1; i < by_point.size(); ++i) {
    if (by_point[i]->at != by_point[i - 1]->at) continue;
    throw InputError(
        location_of(by_point[i]->row, table.file()),
        fmt::format("{}.rows: this row measures the point the row at line {} measures; each point "
                    "is measured once",
                    table.path(), location_of(by_point[i - 1]->row, table.file()).line));
  }
  std::vector<std::vector<double>> axes(D);
  for (const Point<D>& point : points) {
    for (size_t d = 0; d < D; ++d) axes[d].push_back(point.at[d]);
  }
  double cells = 1.0;
  for (auto& axis : axes) {
    axis = sorted_unique(axis);
    cells *= static_cast<double>(axis.size());
  }
  if (cells > kMostGridCells) {
    throw InputError(
        location_of(table.node("rows"), table.file()),
        fmt::format(
            "{}.rows span a grid of {:g} points over their distinct values, more than {:g}: "
            "measure a regular grid (docs/profile-format.md)",
            table.path(), cells, kMostGridCells));
  }
  LogGrid grid(std::move(axes));
  for (const Point<D>& point : points)
    grid.set(std::vector<double>(point.at.begin(), point.at.end()), point.time_s);
  return grid;
}

struct Row {
  YAML::Node node;
  double time_s;
};

// The measured rows of a table (rows whose time is null are holes).
std::vector<Row> measured_rows(YamlMap& table) {
  std::vector<Row> rows;
  const YAML::Node list = table.node("rows");
  // (An absent key gives an invalid node, which throws on IsSequence(): test it first.)
  if (!list || !list.IsSequence()) table.fail("rows", "must be a list of measured points");
  for (size_t i = 0; i < list.size(); ++i) {
    // A row is a mapping of a point's fields (a scalar has no fields to look up).
    if (!list[i].IsMap()) {
      throw InputError(location_of(list[i], table.file()),
                       fmt::format("{}.rows[{}] is {}; expected a mapping of a measured point's fields", table.path(),
                                   i, describe(list[i])));
    }
    const YAML::Node time = list[i]["time_s"];
    if (!time || time.IsNull()) continue;
    const std::string field = fmt::format("{}.rows[{}].time_s", table.path(), i);
    const double t = read_scalar<double>(time, table.file(), field);
    if (!(t > 0.0)) throw InputError(location_of(time, table.file()), fmt::format("{} = {} must be positive", field, t));
    rows.push_back(Row{list[i], t});
  }
  return rows;
}

// Refuses a key of `row` outside `known`.
void check_known_keys(const Row& row, const YamlMap& table,
                      std::initializer_list<std::string_view> known) {
  for (const auto& entry : row.node) {
    const std::string key = entry.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    throw InputError(location_of(entry.first, table.file()),
                     fmt::format("{}.rows: unknown key '{}'; expected one of: {}", table.path(),
                                 echoed(key), fmt::join(known, ", ")));
  }
}

// A row's size or count: positive (grids are in log space) and at most `most` (2^53, where
// doubles stop counting exactly, or less for what becomes an int).
double number(const Row& row, const char* key, const YamlMap& table, double most = 9007199254740992.0) {
  const YAML::Node node = row.node[key];
  if (!node) throw InputError(location_of(row.node, table.file()), fmt::format("{} row has no {}", table.path(), key));
  const std::string field = fmt::format("{}.{}", table.path(), key);
  const double value = read_scalar<double>(node, table.file(), field);
  if (!(value > 0.0 && value <= most)) {
    throw InputError(location_of(node, table.file()), fmt::format("{} = {} must be positive and at most {}", field,
                                                                  value, most));
  }
  return value;
}

// A count (a GEMM dimension, heads, a sequence length): a whole number from 1 to `most`.
double count(const Row& row, const char* key, const YamlMap& table, double most = INT32_MAX) {
  const double value = number(row, key, table, most);
  if (value != std::floor(value)) {
    throw InputError(location_of(row.node[key], table.file()),
                     fmt::format("{}.{} = {} must be a whole number", table.path(), key, value));
  }
  return value;
}

std::string text(const Row& row, const char* key, const YamlMap& table) {
  const YAML::Node node = row.node[key];
  if (!node) throw InputError(location_of(row.node, table.file()), fmt::format("{} row has no {}", table.path(), key));
  return read_scalar<std::string>(node, table.file(), fmt::format("{}.{}", table.path(), key));
}

// A row's categorical value, which must be one of `allowed` (a value the loader did not know
// dropped its row, and with it perhaps a whole table).
std::string one_of(const Row& row, const char* key, const YamlMap& table,
                   const std::vector<std::string_view>& allowed) {
  const std::string value = text(row, key, table);
  if (std::ranges::find(allowed, value) == allowed.end()) {
    throw InputError(location_of(row.node[key], table.file()),
                     fmt::format("{}.{} = '{}' is unknown; expected one of: {}", table.path(), key,
                                 echoed(value), fmt::join(allowed, ", ")));
  }
  return value;
}

// The kernel an attention row timed, in training.attention's terms on Hopper and later.
// paceline-calibrate's rows (no `backend`) ran cuDNN's fused attention, the kernel Transformer
// Engine runs there (`flash`); attention_torch.py's say which kernel PyTorch's SDPA chose: `cudnn`
// the same, `flash` FlashAttention-2 (`flash2`, about 0.39 of the H100's peak forward against
// cuDNN's 0.66). PyTorch's mem-efficient and math kernels are none that paceline models: their
// rows would time another kernel. (On Ampere, KernelProfile::attention reads them otherwise.)
AttentionKernel attention_kernel_of(const Row& row, const YamlMap& table) {
  if (!row.node["backend"]) return AttentionKernel::kFlash;
  const std::string backend = text(row, "backend", table);
  if (backend == "cudnn") return AttentionKernel::kFlash;
  if (backend == "flash") return AttentionKernel::kFlash2;
  throw InputError(
      location_of(row.node["backend"], table.file()),
      fmt::format("{}.backend = '{}' is not a kernel paceline models (training.attention flash "
                  "is cuDNN's, flash2 FlashAttention-2); expected one of: cudnn, flash",
                  table.path(), echoed(backend)));
}

// Refuses a row whose keys and values were repeated to every query head before the call
// (attention_torch.py's `kv_layout: expanded`, where the backend had no grouped-query kernel): its
// time holds the copies and a kernel over `heads` key/value heads, which is neither a grouped
// kernel's time nor, under training.repeat_kv, the kernel's alone (paceline times the copies
// apart).
void check_native_kv_layout(const Row& row, const YamlMap& table) {
  if (!row.node["kv_layout"]) return;
  const std::string layout = text(row, "kv_layout", table);
  if (layout == "native") return;
  throw InputError(location_of(row.node["kv_layout"], table.file()),
                   fmt::format("{}.kv_layout = '{}' times the copies of keys and values to every "
                               "query head with the kernel, which paceline times apart; expected "
                               "native (each key/value head read by its group of query heads)",
                               table.path(), echoed(layout)));
}

// The memory-bound kernels paceline-calibrate measures (docs/profile-format.md, "memory_bound").
const std::vector<std::string_view> kMemoryOperations = {
    "add", "gelu", "swiglu", "layernorm", "rmsnorm", "softmax", "cross_entropy"};

}  // namespace

// ---------------------------------------------------------------------------------------------
// LogGrid

LogGrid::LogGrid(std::vector<std::vector<double>> axes) : axes_(std::move(axes)) {
  size_t size = 1;
  for (const auto& axis : axes_) size *= axis.size();
  times_.assign(size, kMissing);
}

size_t LogGrid::index_of(const std::vector<size_t>& position) const {
  size_t index = 0;
  for (size_t d = 0; d < axes_.size(); ++d) index = index * axes_[d].size() + position[d];
  return index;
}

void LogGrid::set(const std::vector<double>& point, double time_s) {
  std::vector<size_t> position(axes_.size());
  for (size_t d = 0; d < axes_.size(); ++d) {
    const auto it = std::lower_bound(axes_[d].begin(), axes_[d].end(), point[d]);
    PACELINE_CHECK(it != axes_[d].end() && *it == point[d], "a profile point off its grid");
    position[d] = static_cast<size_t>(it - axes_[d].begin());
  }
  times_[index_of(position)] = time_s;
}

size_t LogGrid::measured() const {
  return static_cast<size_t>(std::count_if(times_.begin(), times_.end(), [](double t) { return !std::isnan(t); }));
}

std::optional<double> LogGrid::interpolate(const std::vector<double>& point) const {
  const size_t dims = axes_.size();
  std::vector<size_t> low(dims);
  std::vector<double> weight(dims);
  for (size_t d = 0; d < dims; ++d) {
    const std::vector<double>& axis = axes_[d];
    if (point[d] < axis.front() || point[d] > axis.back()) return std::nullopt;
    size_t i = static_cast<size_t>(std::upper_bound(axis.begin(), axis.end(), point[d]) - axis.begin());
    i = i == 0 ? 0 : i - 1;
    if (i + 1 >= axis.size()) {
      low[d] = axis.size() - 1;
      weight[d] = 0.0;
    } else {
      low[d] = i;
      weight[d] = std::log(point[d] / axis[i]) / std::log(axis[i + 1] / axis[i]);
    }
  }
  // Multilinear in log space over the 2^dims corners of the cell.
  double log_time = 0.0;
  for (size_t corner = 0; corner < (size_t{1} << dims); ++corner) {
    double w = 1.0;
    std::vector<size_t> position(dims);
    for (size_t d = 0; d < dims; ++d) {
      const bool upper = (corner >> d) & 1;
      w *= upper ? weight[d] : 1.0 - weight[d];
      position[d] = low[d] + (upper && weight[d] > 0.0 ? 1 : 0);
    }
    if (w == 0.0) continue;
    const double t = times_[index_of(position)];
    if (std::isnan(t)) return std::nullopt;
    log_time += w * std::log(t);
  }
  return std::exp(log_time);
}

std::vector<double> LogGrid::clamp(const std::vector<double>& point) const {
  std::vector<double> clamped(point);
  for (size_t d = 0; d < axes_.size(); ++d) clamped[d] = std::clamp(point[d], axes_[d].front(), axes_[d].back());
  return clamped;
}

std::optional<std::pair<std::vector<double>, double>> LogGrid::nearest(const std::vector<double>& point) const {
  std::optional<std::pair<std::vector<double>, double>> best;
  double best_distance = std::numeric_limits<double>::infinity();
  std::vector<size_t> position(axes_.size(), 0);
  for (size_t index = 0; index < times_.size(); ++index) {
    size_t rest = index;
    for (size_t d = axes_.size(); d-- > 0;) {
      position[d] = rest % axes_[d].size();
      rest /= axes_[d].size();
    }
    if (std::isnan(times_[index])) continue;
    double distance = 0.0;
    std::vector<double> at(axes_.size());
    for (size_t d = 0; d < axes_.size(); ++d) {
      at[d] = axes_[d][position[d]];
      distance += std::pow(std::log(at[d] / point[d]), 2);
    }
    if (distance < best_distance) {
      best_distance = distance;
      best = std::make_pair(at, times_[index]);
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Loading

KernelProfile KernelProfile::load(const std::string& path, const GpuSpec& gpu) {
  static auto* const measured = new ParsedFileCache<KernelProfile>(read_measurements);
  KernelProfile profile = *measured->get(path);
  profile.gpu_ = gpu;
  profile.fit_gemm();
  profile.fit_attention();
  profile.fit_memory();
  return profile;
}

KernelProfile KernelProfile::read_measurements(const YamlDocument& document) {
  YamlMap root(document.root, document.file, "profile");
  KernelProfile profile;
  profile.path_ = document.file;
  const std::string format = root.required<std::string>("format");
  if (format != "paceline-profile/1") {
    root.fail("format", fmt::format("= '{}' is not a profile format paceline reads; expected paceline-profile/1", format));
  }
  YamlMap device = root.map("device");
  profile.device_name_ = device.required<std::string>("name");
  // Which GPU measured the file: cluster.cc refuses it for a GPU of another architecture.
  profile.compute_capability_ = device.required<std::string>("compute_capability");
  profile.compute_capability_location_ = device.location("compute_capability");
  const std::string& capability = profile.compute_capability_;
  const size_t dot = capability.find('.');
  const auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 3 &&
           std::ranges::all_of(s, [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dot == std::string::npos || !digits(capability.substr(0, dot)) ||
      !digits(capability.substr(dot + 1))) {
    device.fail("compute_capability",
                "is not a CUDA compute capability; expected major.minor as a string, e.g. \"9.0\"");
  }
  // Keys this version knows but does not read: provenance, copies, the PyTorch cross-checks and
  // the cuDNN rows that attention_torch.py set aside (docs/profile-format.md).
  for (const char* known : {"method", "skipped", "notes", "copies", "attention_crosscheck",
                            "gemm_crosscheck", "attention_cudnn_backend"}) {
    root.node(known);
  }

  if (std::optional<YamlMap> gemm = root.optional_map("gemm")) {
    std::map<std::pair<DType, GemmLayout>, Points<3>> points;
    for (const Row& row : measured_rows(*gemm)) {
      const std::optional<DType> dtype =
          dtype_of(one_of(row, "dtype", *gemm, {"bf16", "fp16", "fp8_e4m3", "tf32"}));
      const std::optional<GemmLayout> layout = layout_of(one_of(row, "transa", *gemm, {"T", "N"}),
                                                         one_of(row, "transb", *gemm, {"T", "N"}));
      // T, T is a layout no Linear layer runs: paceline never asks for it.
      if (!layout) continue;
      points[{*dtype, *layout}].push_back(
          {model_terms(*layout, count(row, "m", *gemm), count(row, "n", *gemm),
                       count(row, "k", *gemm)),
           row.time_s, row.node});
    }
    for (const auto& [key, list] : points) profile.gemm_[key] = grid_of(list, *gemm);
  }
  if (std::optional<YamlMap> attention = root.optional_map("attention")) {
    std::map<AttentionKey, Points<2>> points;
    for (const Row& row : measured_rows(*attention)) {
      // Which kernel a row timed hangs on its `backend`: a misspelt key would pass its rows off
      // as cuDNN's.
      check_known_keys(
          row, *attention,
          {"direction", "dtype", "causal", "head_dim", "group", "batch", "heads", "kv_heads", "seq",
           "time_s", "spread", "kernels", "kernel", "error", "flop_per_s", "backend",
           "backend_requested", "kv_layout", "ratio_to_attention"});
      // paceline-calibrate and attention_torch.py measure bf16 attention only: a row of another
      // dtype would time that dtype's kernels with bf16's.
      one_of(row, "dtype", *attention, {"bf16"});
      // Fused attention runs a block per (batch, head, tile): the grid keeps batch 1 and a query
      // of batch b and h heads reads heads = b·h.
      if (const double batch = count(row, "batch", *attention); batch != 1.0) {
        throw InputError(location_of(row.node["batch"], attention->file()),
                         fmt::format("{}.batch = {} is not the measured form; expected 1 (a query "
                                     "of batch b and h heads reads the row at heads = b·h)",
                                     attention->path(), batch));
      }
      const std::string direction = one_of(row, "direction", *attention, {"forward", "backward"});
      // Causal and full attention differ twofold in work: a row must say which it measured.
      text(row, "causal", *attention);
      const bool causal =
          read_scalar<bool>(row.node["causal"], attention->file(), attention->path() + ".causal");
      const double heads = count(row, "heads", *attention);
      const double group = count(row, "group", *attention);
      if (std::fmod(heads, group) != 0.0) {
        throw InputError(location_of(row.node["group"], attention->file()),
                         fmt::format("{}.group = {} does not divide heads = {}; expected a divisor "
                                     "of heads (query heads per key/value head)",
                                     attention->path(), group, heads));
      }
      check_native_kv_layout(row, *attention);
      const AttentionKey key{attention_kernel_of(row, *attention), direction == "backward", causal,
                             static_cast<int64_t>(count(row, "head_dim", *attention)),
                             static_cast<int64_t>(group)};
      points[key].push_back(
          {std::array{heads, count(row, "seq", *attention)}, row.time_s, row.node});
    }
    for (const auto& [key, list] : points) profile.attention_[key] = grid_of(list, *attention);
  }
  if (std::optional<YamlMap> memory = root.optional_map("memory_bound")) {
    std::map<std::string, Points<1>> points;
    for (const Row& row : measured_rows(*memory)) {
      points[one_of(row, "op", *memory, kMemoryOperations)].push_back(
          {std::array{number(row, "bytes", *memory)}, row.time_s, row.node});
    }
    for (const auto& [op, list] : points) profile.memory_[op] = grid_of(list, *memory);
  }
  if (std::optional<YamlMap> collectives = root.optional_map("collectives")) {
    std::map<std::pair<std::string, int>, Points<1>> points;
    for (const Row& row : measured_rows(*collectives)) {
      const std::string op =
          one_of(row, "op", *collectives,
                 {to_string(Collective::kAllReduce), to_string(Collective::kAllGather),
                  to_string(Collective::kReduceScatter), to_string(Collective::kAllToAll),
                  to_string(Collective::kSendRecv)});
      points[{op, static_cast<int>(count(row, "ranks", *collectives))}].push_back(
          {std::array{number(row, "bytes", *collectives)}, row.time_s, row.node});
    }
    for (const auto& [key, list] : points) profile.collectives_[key] = grid_of(list, *collectives);
  }
  // Any other key is a mistake (a misspelt table would be dropped unseen).
  root.finish();
  return profile;
}

// ---------------------------------------------------------------------------------------------
// Fits

namespace {

// The GEMM fit's terms for a shape on `gpu`, in seconds at the dense peak: the busiest SM's K
// steps and its epilogue bytes in units of a 2-byte epilogue's (gemm_tiling), each a step long.
std::array<double, 2> gemm_terms(const GpuSpec& gpu, DType dtype, int64_t m, int64_t n, int64_t k) {
  const GemmTiling tiling = gemm_tiling(GemmShape{m, n, k, 1, dtype}, gpu);
  const double peak = gpu.peak(dtype).value_or(*gpu.peak(DType::kBf16)) / FlopPerSecond(1);
  const double step = 2.0 * static_cast<double>(gpu.kernels.gemm_tile_m) * gpu.kernels.gemm_tile_n *
                      static_cast<double>(gpu.sm_count) / peak;
  return {step * tiling.main_loop, step * tiling.epilogue_bytes / 2.0};
}

}  // namespace

Seconds KernelProfile::gemm_model(const GemmFit& fit, DType dtype, int64_t m, int64_t n, int64_t k) const {
  const auto [main_loop, epilogues] = gemm_terms(gpu_, dtype, m, n, k);
  return Seconds(main_loop * fit.inverse_efficiency + epilogues * fit.k_half_over_efficiency) +
         fit.overhead;
}

void KernelProfile::fit_gemm() {
  for (const auto& [key, grid] : gemm_) {
    const double peak = gpu_.peak(key.first).value_or(*gpu_.peak(DType::kBf16)) / FlopPerSecond(1);
    std::vector<std::vector<double>> features;
    std::vector<double> times;
    const auto& axes = grid.axes();
    for (const double m : axes[0]) {
      for (const double n : axes[1]) {
        for (const double k : axes[2]) {
          const std::optional<double> t = grid.interpolate({m, n, k});
          if (!t) continue;
          // Compute-bound points only: where the roofline's arithmetic time is at least three
          // times its memory time.
          const double bytes = 2.0 * (m * k + k * n + m * n);
          const double memory = bytes / (gpu_.memory_bandwidth / BytesPerSecond(1));
          if (2.0 * m * n * k / peak < 3.0 * memory) continue;
          const auto [main_loop, epilogues] =
              gemm_terms(gpu_, key.first, static_cast<int64_t>(m), static_cast<int64_t>(n),
                         static_cast<int64_t>(k));
          features.push_back({main_loop, epilogues, 1.0});
          times.push_back(*t);
        }
      }
    }
    if (times.size() < 3) continue;
    GemmFit fit;
    const std::vector<double> x = fit_relative(features, times, fit.rms_relative_error);
    // Points that no roofline explains (the throughput term is not positive) give no fit: the
    // grid's own scaling answers outside it, as for a table too small to fit.
    if (!(x[0] > 0.0)) continue;
    fit.inverse_efficiency = x[0];
    fit.k_half_over_efficiency = x[1];
    fit.overhead = Seconds(x[2]);
    gemm_fits_[key] = fit;
  }
}

namespace {

// The attention fit's work term: a causal bf16 attention of `heads` query heads (batch × heads)
// over `seq` tokens at the dense peak, over the share of the SMs it keeps busy
// (attention_occupancy: with few heads the SMs wait behind the longest block).
double attention_work(double heads, double seq, int64_t head_dim, bool backward,
                      const GpuSpec& gpu) {
  AttentionShape shape;
  shape.batch = 1;
  shape.heads = std::max<int64_t>(1, std::llround(heads));
  shape.kv_heads = shape.heads;
  shape.seq_q = shape.seq_kv = std::max<int64_t>(1, std::llround(seq));
  shape.head_dim = head_dim;
  shape.backward = backward;
  const double peak = *gpu.peak(DType::kBf16) / FlopPerSecond(1);
  return 4.0 * heads * seq * seq * static_cast<double>(head_dim) * 0.5 * (backward ? 2.5 : 1.0) /
         peak / attention_occupancy(shape, gpu);
}

}  // namespace

Seconds KernelProfile::attention_model(const AttentionFit& fit, const AttentionShape& shape, double heads,
                                       double seq) const {
  const double work = attention_work(heads, seq, shape.head_dim, shape.backward, gpu_);
  return Seconds(work * fit.inverse_efficiency + work / seq * fit.seq_half_over_efficiency) + fit.overhead;
}

void KernelProfile::fit_attention() {
  // Each kernel's rows fit a model of their own: cuDNN's and FlashAttention-2's ceilings differ.
  std::set<std::pair<AttentionKernel, bool>> fits;
  for (const auto& [key, grid] : attention_) fits.insert({key.kernel, key.backward});
  for (const auto& [kernel, backward] : fits) {
    std::vector<std::vector<double>> features;
    std::vector<double> times;
    for (const auto& [key, grid] : attention_) {
      if (key.kernel != kernel || key.backward != backward || !key.causal) continue;
      for (const double heads : grid.axes()[0]) {
        for (const double seq : grid.axes()[1]) {
          const std::optional<double> t = grid.interpolate({heads, seq});
          if (!t) continue;
          const double work = attention_work(heads, seq, key.head_dim, backward, gpu_);
          features.push_back({work, work / seq, 1.0});
          times.push_back(*t);
        }
      }
    }
    if (times.size() < 3) continue;
    AttentionFit fit;
    const std::vector<double> x = fit_relative(features, times, fit.rms_relative_error);
    // Points that no roofline explains (the throughput term is not positive) give no fit: the
    // grid's own scaling answers outside it, as for a table too small to fit.
    if (!(x[0] > 0.0)) continue;
    fit.inverse_efficiency = x[0];
    fit.seq_half_over_efficiency = x[1];
    fit.overhead = Seconds(x[2]);
    attention_fits_[{kernel, backward}] = fit;
  }
}

void KernelProfile::fit_memory() {
  for (const auto& [op, grid] : memory_) {
    std::vector<std::vector<double>> features;
    std::vector<double> times;
    for (const double bytes : grid.axes()[0]) {
      if (const std::optional<double> t = grid.interpolate({bytes})) {
        features.push_back({bytes, 1.0});
        times.push_back(*t);
      }
    }
    if (times.size() < 2) continue;
    MemoryFit fit;
    const std::vector<double> x = fit_relative(features, times, fit.rms_relative_error);
    // Points that no roofline explains (the throughput term is not positive) give no fit: the
    // grid's own scaling answers outside it, as for a table too small to fit.
    if (!(x[0] > 0.0)) continue;
    fit.bandwidth = BytesPerSecond(1.0 / x[0]);
    fit.overhead = Seconds(x[1]);
    memory_fits_[op] = fit;
  }
}

// ---------------------------------------------------------------------------------------------
// Queries

std::optional<Seconds> KernelProfile::gemm(const GemmShape& shape) const {
  // fp8 exists only as the forward layout (Transformer Engine transposes its operands into it);
  // fp16 and tf32 may have only the forward layout in quick profiles.
  auto grid = gemm_.find({shape.dtype, shape.layout});
  if (grid == gemm_.end()) grid = gemm_.find({shape.dtype, GemmLayout::kForward});
  if (grid == gemm_.end()) return std::nullopt;
  // A grouped GEMM is answered as one GEMM over all its groups' rows at their mean k, with one
  // weight matrix: the op timer adds what its other groups read and pad (OpTimer::gemm).
  const std::vector<double> query = {shape.sum_m(), static_cast<double>(shape.n),
                                     shape.sum_k() / static_cast<double>(shape.count)};
  if (const std::optional<double> t = grid->second.interpolate(query)) return Seconds(*t);
  // Outside the grid (or in a hole): the fitted model's shape through the nearest measurement.
  const auto anchor = grid->second.nearest(grid->second.clamp(query));
  if (!anchor) return std::nullopt;
  const auto fit = gemm_fits_.find(grid->first);
  const double work_ratio = query[0] * query[1] * query[2] /
                            (anchor->first[0] * anchor->first[1] * anchor->first[2]);
  if (fit == gemm_fits_.end()) return Seconds(anchor->second * work_ratio);
  // The tiling needs whole dimensions of at least 1; a grouped GEMM's mean k can be a fraction
  // of one (a weight gradient over experts that receive few tokens).
  const auto as_int = [](double v) { return std::max<int64_t>(1, static_cast<int64_t>(v)); };
  const Seconds model = gemm_model(fit->second, shape.dtype, as_int(query[0]), as_int(query[1]), as_int(query[2]));
  const Seconds at_anchor = gemm_model(fit->second, shape.dtype, as_int(anchor->first[0]),
                                       as_int(anchor->first[1]), as_int(anchor->first[2]));
  return model * (anchor->second / (at_anchor / Seconds(1)));
}

std::optional<Seconds> KernelProfile::attention(const AttentionShape& shape) const {
  // The table is bf16's (the loader refuses other rows): fp16, fp8 and fp32 attention run other
  // kernels at other speeds, which the roofline times. Its rows have values as wide as keys.
  if (shape.dtype != DType::kBf16 || shape.value_dim() != shape.head_dim) return std::nullopt;
  // A non-causal block of s_q × s_kv does the work of a causal one of sqrt(2·s_q·s_kv).
  const double seq = shape.causal ? static_cast<double>(shape.seq_q)
                                  : std::sqrt(2.0 * static_cast<double>(shape.seq_q) * shape.seq_kv);
  const int64_t group = shape.kv_heads > 0 ? shape.heads / shape.kv_heads : 1;
  // On Ampere Transformer Engine runs FlashAttention-2 for `flash` (the catalog's flash is
  // FlashAttention-2's there): FlashAttention-2's rows time both settings, and cuDNN's neither
  // (the result's kernel counts show those shapes modelled).
  const AttentionKernel measured =
      gpu_.architecture == "ampere" && shape.kernel == AttentionKernel::kFlash
          ? AttentionKernel::kFlash2
          : shape.kernel;
  // The measured grouping nearest (in log) to the query's, of the query's kernel at its head_dim:
  // a row times the width it measured (FlashAttention-2's padding to a multiple of 32 included).
  const LogGrid* grid = nullptr;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [key, g] : attention_) {
    if (key.kernel != measured || key.backward != shape.backward || !key.causal ||
        key.head_dim != shape.head_dim) {
      continue;
    }
    const double distance = std::abs(std::log(static_cast<double>(key.group) / static_cast<double>(group)));
    if (distance < best) {
      best = distance;
      grid = &g;
    }
  }
  if (grid == nullptr) return std::nullopt;
  const std::vector<double> query = {static_cast<double>(shape.batch * shape.heads), seq};
  if (const std::optional<double> t = grid->interpolate(query)) return Seconds(*t);
  const auto anchor = grid->nearest(grid->clamp(query));
  if (!anchor) return std::nullopt;
  const auto fit = attention_fits_.find({measured, shape.backward});
  if (fit == attention_fits_.end()) {
    return Seconds(anchor->second * query[0] * query[1] * query[1] / (anchor->first[0] * std::pow(anchor->first[1], 2)));
  }
  const Seconds model = attention_model(fit->second, shape, query[0], query[1]);
  const Seconds at_anchor = attention_model(fit->second, shape, anchor->first[0], anchor->first[1]);
  return model * (anchor->second / (at_anchor / Seconds(1)));
}

std::optional<Seconds> KernelProfile::memory_bound(MemoryKernel kernel, Bytes traffic) const {
  const auto grid = memory_.find(profile_operation(kernel));
  if (grid == memory_.end()) return std::nullopt;
  const double bytes = traffic / Bytes(1);
  if (const std::optional<double> t = grid->second.interpolate({bytes})) return Seconds(*t);
  const auto anchor = grid->second.nearest(grid->second.clamp({bytes}));
  if (!anchor) return std::nullopt;
  const auto fit = memory_fits_.find(grid->first);
  if (fit == memory_fits_.end()) return Seconds(anchor->second * bytes / anchor->first[0]);
  const auto model = [&](double b) { return Bytes(b) / fit->second.bandwidth + fit->second.overhead; };
  return model(bytes) * (anchor->second / (model(anchor->first[0]) / Seconds(1)));
}

std::optional<KernelProfile::MeasuredCollective> KernelProfile::collective(Collective collective,
                                                                           int ranks,
                                                                           Bytes size) const {
  std::string op(to_string(collective));
  // nccl-tests counts an all-to-all's buffer with the rank's own share; the model counts the
  // bytes sent to others.
  const double counted =
      collective == Collective::kAllToAll ? static_cast<double>(ranks) / (ranks - 1) : 1.0;
  const double bytes = size / Bytes(1) * counted;
  const auto grid = collectives_.find({op, ranks});
  if (grid == collectives_.end()) return std::nullopt;
  if (const std::optional<double> t = grid->second.interpolate({bytes}))
    return MeasuredCollective{size, Seconds(*t)};
  const auto anchor = grid->second.nearest(grid->second.clamp({bytes}));
  if (!anchor) return std::nullopt;
  return MeasuredCollective{Bytes(anchor->first[0] / counted), Seconds(anchor->second)};
}

std::optional<std::string> architecture_of_compute_capability(
    const std::string& compute_capability) {
  for (const auto& [capability, architecture] : kArchitectures) {
    if (capability == compute_capability) return std::string(architecture);
  }
  return std::nullopt;
}

std::vector<std::string> compute_capabilities_of(const std::string& architecture) {
  std::vector<std::string> capabilities;
  for (const auto& [capability, name] : kArchitectures) {
    if (name == architecture) capabilities.emplace_back(capability);
  }
  return capabilities;
}

std::string profile_operation(MemoryKernel kernel) {
  switch (kernel) {
    case MemoryKernel::kGelu:
    case MemoryKernel::kSquaredRelu: return "gelu";
    case MemoryKernel::kSwiglu: return "swiglu";
    case MemoryKernel::kLayerNorm: return "layernorm";
    case MemoryKernel::kRmsNorm: return "rmsnorm";
    case MemoryKernel::kSoftmax: return "softmax";
    case MemoryKernel::kCrossEntropy: return "cross_entropy";
    default: return "add";
  }
}

}  // namespace paceline
