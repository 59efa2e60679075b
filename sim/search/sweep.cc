#include "sim/search/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "base/check.h"
#include "base/input_error.h"
#include "base/parallel_for.h"
#include "base/yaml_reader.h"
#include "sim/simulator/cost_estimate.h"
#include "sim/simulator/simulator.h"

namespace paceline {

SweepAxis parse_sweep_axis(const std::string& text, const std::string& where) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
    throw InputError({where}, fmt::format("'{}' must be written PATH=VALUE, e.g. parallelism.tp=4 (a sweep's "
                                          "values: parallelism.tp=1,2,4)", text));
  }
  SweepAxis axis{text.substr(0, equals), {}, where};
  int depth = 0;
  char quote = 0;
  bool escaped = false;
  std::string value;
  // A quote opens a YAML scalar only where one starts: at the value's start, after a flow
  // collection's bracket, comma or colon, or after a tag or an anchor ("!!str 'a, b'"); an
  // apostrophe inside a word is text. A single quote right after a single-quoted part reopens it
  // (YAML's '' escape).
  const auto starts_scalar = [&value](char c) {
    if (c == '\'' && value.ends_with('\'')) return true;
    const size_t last = value.find_last_not_of(' ');
    if (last == std::string::npos ||
        std::string_view("[{,:").find(value[last]) != std::string_view::npos)
      return true;
    if (last + 1 == value.size()) return false;
    const size_t token = value.find_last_of(" [{,", last);
    const char first = value[token == std::string::npos ? 0 : token + 1];
    return first == '!' || first == '&';
  };
  auto finish_value = [&] {
    if (value.empty()) {
      throw InputError({where}, fmt::format("'{}' has an empty value; write PATH=VALUE or PATH=V1,V2,...", text));
    }
    axis.values.push_back(value);
    value.clear();
  };
  for (const char c : text.substr(equals + 1)) {
    if (quote != 0) {
      if (escaped) {
        escaped = false;
      } else if (quote == '"' && c == '\\') {
        escaped = true;
      } else if (c == quote) {
        quote = 0;
      }
    } else if ((c == '"' || c == '\'') && starts_scalar(c)) {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == ',' && depth == 0) {
      finish_value();
      continue;
    }
    value += c;
  }
  if (quote != 0 || depth != 0) {
    throw InputError({where}, fmt::format("'{}' has an unclosed quote or bracket", text));
  }
  finish_value();
  return axis;
}

namespace {

// Refuses two axes of which one sets a field inside the other's.
void check_axes_apart(const ScenarioSource& base, const std::vector<SweepAxis>& axes) {
  for (size_t a = 0; a < axes.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      if (paths_overlap(axes[a].path, axes[b].path)) {
        const std::string& inner =
            axes[a].path.size() >= axes[b].path.size() ? axes[a].path : axes[b].path;
        throw InputError(
            SourceLocation{axes[a].origin.empty() ? base.file : axes[a].origin},
            fmt::format("the sweep sets {} on two axes ({} and {}); give each field one axis",
                        inner, axes[b].path, axes[a].path));
      }
    }
  }
}

}  // namespace

void check_sweep(const ScenarioSource& base, const std::vector<SweepAxis>& axes,
                 const std::atomic<bool>* stop) {
  for (const SweepAxis& axis : axes) {
    if (axis.values.empty()) {
      throw InputError(
          SourceLocation{axis.origin.empty() ? base.file : axis.origin},
          fmt::format("the sweep's axis {} has no values; give it one or more", axis.path));
    }
  }
  // Counted without overflow: the product stops growing once past the limit.
  size_t size = 1;
  for (const SweepAxis& axis : axes) size = std::min(size * axis.values.size(), kMostSweepConfigurations + 1);
  if (size > kMostSweepConfigurations) {
    std::vector<std::string> lengths;
    for (const SweepAxis& axis : axes) lengths.push_back(fmt::format("{} {}", axis.values.size(), axis.path));
    throw InputError(SourceLocation{base.file},
                     fmt::format("the sweep has more than {} configurations ({}); split it into sweeps of fewer",
                                 kMostSweepConfigurations, fmt::join(lengths, " × ")));
  }
  check_axes_apart(base, axes);
  // Text that is not YAML fails every configuration alike: said at once, not after trying each.
  load_yaml_text(base.text, base.file);
  std::optional<InputError> first;
  for (size_t i = 0; i < sweep_size(axes); ++i) {
    stop_if_asked(stop, "the sweep's check");
    try {
      load_scenario(base, sweep_configuration(axes, i));
      return;
    } catch (const InputError& e) {
      if (!first) first = e;
    }
  }
  throw *first;
}

size_t sweep_size(const std::vector<SweepAxis>& axes) {
  size_t size = 1;
  for (const SweepAxis& axis : axes) size *= axis.values.size();
  return size;
}

std::vector<Override> sweep_configuration(const std::vector<SweepAxis>& axes, size_t index) {
  PACELINE_CHECK(index < sweep_size(axes), "sweep configuration out of range");
  std::vector<Override> overrides(axes.size());
  for (size_t a = axes.size(); a-- > 0;) {
    const size_t n = axes[a].values.size();
    overrides[a] = Override{axes[a].path, axes[a].values[index % n], axes[a].origin};
    index /= n;
  }
  return overrides;
}

SweepTable run_sweep(const ScenarioSource& base, const std::vector<SweepAxis>& axes, size_t begin,
                     size_t end, const SweepOptions& options) {
  check_axes_apart(base, axes);
  end = std::min(end, sweep_size(axes));
  begin = std::min(begin, end);
  const size_t n = end - begin;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  SweepTable table;
  table.iteration_time_s.assign(n, kNaN);
  table.tokens_per_s.assign(n, kNaN);
  table.tokens_per_s_per_gpu.assign(n, kNaN);
  table.mfu.assign(n, kNaN);
  table.hfu.assign(n, kNaN);
  table.peak_memory_bytes.assign(n, -1);
  table.peak_reserved_bytes.assign(n, -1);
  table.fits.assign(n, 0);
  table.error.assign(n, "");
  table.warnings.assign(n, {});
  // As `paceline run` does: a configuration that would not fit in this machine's memory is a row
  // with that error, not the end of the sweep.
  const SimulateOptions limits{.max_memory = machine_memory(), .stop = options.stop};
  // Each configuration is parsed from the base text on its own thread; only slot i is written.
  auto body = [&](size_t i) {
    try {
      stop_if_asked(options.stop, "the sweep");
      auto scenario = std::make_shared<const Scenario>(
          load_scenario(base, sweep_configuration(axes, begin + i)));
      const Result r = simulate(scenario, limits).result;
      table.iteration_time_s[i] = r.iteration_time / Seconds(1);
      table.tokens_per_s[i] = r.tokens_per_s;
      table.tokens_per_s_per_gpu[i] = r.tokens_per_s_per_gpu;
      table.mfu[i] = r.mfu;
      table.hfu[i] = r.hfu;
      table.peak_memory_bytes[i] = r.peak_memory_bytes;
      table.peak_reserved_bytes[i] = r.peak_reserved_bytes;
      table.fits[i] = r.fits ? 1 : 0;
      table.warnings[i] = r.warnings;
    } catch (const InputError& e) {
      table.error[i] = e.what();
    } catch (const SimulationStopped&) {
      throw;
    } catch (const SimulationLimitError& e) {
      table.error[i] = e.what();
    }
  };
  std::function<void(size_t)> progress;
  if (options.progress) progress = [&](size_t done) { options.progress(done, n); };
  parallel_for(n, resolve_threads(options.threads), body, progress);
  return table;
}

namespace {

// The result columns after the axes, units in the names.
constexpr const char* kResultColumns[] = {"iteration_time_s",
                                          "tokens_per_s",
                                          "tokens_per_s_per_gpu",
                                          "mfu",
                                          "hfu",
                                          "peak_memory_bytes",
                                          "peak_reserved_bytes",
                                          "fits",
                                          "error",
                                          "warnings"};

Json number_or_null(double value) { return std::isnan(value) ? Json() : Json(value); }

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// Each row's cells as text: the axis values, then the results (empty where not simulated).
std::vector<std::vector<std::string>> cells(const std::vector<SweepAxis>& axes, size_t begin, const SweepTable& t) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < t.size(); ++i) {
    std::vector<std::string> row;
    for (const Override& o : sweep_configuration(axes, begin + i))
      row.push_back(printable(o.value));
    const bool simulated = t.error[i].empty();
    auto number = [&](double value) { return simulated ? fmt::format("{}", value) : std::string(); };
    row.push_back(number(t.iteration_time_s[i]));
    row.push_back(number(t.tokens_per_s[i]));
    row.push_back(number(t.tokens_per_s_per_gpu[i]));
    row.push_back(number(t.mfu[i]));
    row.push_back(number(t.hfu[i]));
    row.push_back(simulated ? fmt::format("{}", t.peak_memory_bytes[i]) : std::string());
    row.push_back(simulated ? fmt::format("{}", t.peak_reserved_bytes[i]) : std::string());
    row.push_back(simulated ? (t.fits[i] ? "true" : "false") : std::string());
    row.push_back(t.error[i]);
    row.push_back(fmt::format("{}", fmt::join(t.warnings[i], "\n")));  // one per line of the quoted field
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

Json to_json(const std::vector<SweepAxis>& axes, size_t begin, const SweepTable& t) {
  Json rows = Json::array();
  for (size_t i = 0; i < t.size(); ++i) {
    Json row = Json::object();
    for (const Override& o : sweep_configuration(axes, begin + i)) row.set(o.path, o.value);
    const bool simulated = t.error[i].empty();
    row.set("iteration_time_s", number_or_null(t.iteration_time_s[i]));
    row.set("tokens_per_s", number_or_null(t.tokens_per_s[i]));
    row.set("tokens_per_s_per_gpu", number_or_null(t.tokens_per_s_per_gpu[i]));
    row.set("mfu", number_or_null(t.mfu[i]));
    row.set("hfu", number_or_null(t.hfu[i]));
    row.set("peak_memory_bytes", simulated ? Json(t.peak_memory_bytes[i]) : Json());
    row.set("peak_reserved_bytes", simulated ? Json(t.peak_reserved_bytes[i]) : Json());
    row.set("fits", simulated ? Json(t.fits[i] != 0) : Json());
    row.set("error", simulated ? Json() : Json(t.error[i]));
    row.set("warnings", Json::array(t.warnings[i]));
    rows.push(std::move(row));
  }
  return rows;
}

std::string to_csv(const std::vector<SweepAxis>& axes, size_t begin, const SweepTable& t) {
  std::vector<std::string> header;
  for (const SweepAxis& axis : axes) header.push_back(csv_field(axis.path));
  for (const char* column : kResultColumns) header.push_back(column);
  std::string out = fmt::format("{}\n", fmt::join(header, ","));
  for (std::vector<std::string>& row : cells(axes, begin, t)) {
    for (std::string& cell : row) cell = csv_field(cell);
    out += fmt::format("{}\n", fmt::join(row, ","));
  }
  return out;
}

std::string to_text(const std::vector<SweepAxis>& axes, size_t begin, const SweepTable& t) {
  std::vector<std::string> header;
  for (const SweepAxis& axis : axes) header.push_back(axis.path);
  for (const char* column : {"iteration s", "tokens/s", "tokens/s/GPU", "MFU", "memory GiB", "fits"}) {
    header.push_back(column);
  }
  std::vector<std::vector<std::string>> rows;
  size_t valid = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    std::vector<std::string> row;
    for (const Override& o : sweep_configuration(axes, begin + i))
      row.push_back(printable(o.value));
    if (t.error[i].empty()) {
      ++valid;
      row.push_back(fmt::format("{:.3f}", t.iteration_time_s[i]));
      row.push_back(fmt::format("{:.0f}", t.tokens_per_s[i]));
      row.push_back(fmt::format("{:.0f}", t.tokens_per_s_per_gpu[i]));
      row.push_back(fmt::format("{:.1f}%", 100.0 * t.mfu[i]));
      row.push_back(fmt::format("{:.1f}", static_cast<double>(t.peak_memory_bytes[i]) / (1024.0 * 1024.0 * 1024.0)));
      row.push_back(t.fits[i] ? "yes" : "no");
    } else {
      row.push_back("invalid: " + t.error[i]);
    }
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    // An invalid row's message runs past the columns; it does not widen them.
    if (row.size() != header.size()) continue;
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool last = c + 1 == row.size();
      out += c < axes.size() || last ? fmt::format("{:<{}}", row[c], last ? 0 : width[c])
                                     : fmt::format("{:>{}}", row[c], width[c]);
      if (!last) out += "  ";
    }
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  out += fmt::format("{} configurations, {} valid\n", t.size(), valid);
  // Each distinct warning once, with the rows of the table (from 1) it applies to.
  for (const WarningGroup& g : group_warnings(t.warnings)) {
    out += fmt::format("warning (rows {}): {}\n", fmt::join(g.positions, ", "), g.warning);
  }
  return out;
}

}  // namespace paceline
