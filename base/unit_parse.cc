#include "base/unit_parse.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <span>

namespace paceline {
namespace {

struct Unit {
  std::string_view symbol;
  double factor;  // base units per one of this unit
};

// Sizes in bytes, and in bits (a lower-case b) which are an eighth of a byte.
constexpr std::array kByteUnits = {
    Unit{"B", 1.0},           Unit{"kB", 1e3},           Unit{"KB", 1e3},
    Unit{"MB", 1e6},          Unit{"GB", 1e9},           Unit{"TB", 1e12},
    Unit{"PB", 1e15},         Unit{"KiB", 1024.0},       Unit{"MiB", 1048576.0},
    Unit{"GiB", 1073741824.0}, Unit{"TiB", 1099511627776.0}, Unit{"PiB", 1125899906842624.0},
    Unit{"b", 0.125},         Unit{"kb", 125.0},         Unit{"Kb", 125.0},
    Unit{"Mb", 1.25e5},       Unit{"Gb", 1.25e8},        Unit{"Tb", 1.25e11},
};
constexpr std::array kTimeUnits = {
    Unit{"s", 1.0},    Unit{"ms", 1e-3}, Unit{"us", 1e-6}, Unit{"µs", 1e-6},
    Unit{"ns", 1e-9},  Unit{"ps", 1e-12}, Unit{"min", 60.0}, Unit{"h", 3600.0},
};
constexpr std::array kFlopUnits = {
    Unit{"FLOP", 1.0},   Unit{"kFLOP", 1e3},  Unit{"MFLOP", 1e6}, Unit{"GFLOP", 1e9},
    Unit{"TFLOP", 1e12}, Unit{"PFLOP", 1e15}, Unit{"EFLOP", 1e18},
};
constexpr std::array kFrequencyUnits = {
    Unit{"Hz", 1.0}, Unit{"kHz", 1e3}, Unit{"MHz", 1e6}, Unit{"GHz", 1e9},
};
constexpr std::array kPowerUnits = {Unit{"W", 1.0}, Unit{"kW", 1e3}};

// The units a dimension accepts, before any "/s" of a rate.
std::span<const Unit> units_of(Dimension dimension) {
  switch (dimension) {
    case Dimension::kTime: return kTimeUnits;
    case Dimension::kBytes:
    case Dimension::kByteRate: return kByteUnits;
    case Dimension::kFlop:
    case Dimension::kFlopRate: return kFlopUnits;
    case Dimension::kFrequency: return kFrequencyUnits;
    case Dimension::kPower: return kPowerUnits;
  }
  return {};
}

bool is_rate(Dimension dimension) {
  return dimension == Dimension::kByteRate || dimension == Dimension::kFlopRate;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Common spellings that mean the same unit: "TFLOPS" → "TFLOP/s", "Gbps" → "Gb/s",
// "GBps" → "GB/s", "FLOPs/s" → "FLOP/s".
std::string canonical_unit(std::string_view unit) {
  std::string u(unit);
  auto ends_with = [&u](std::string_view suffix) {
    return u.size() >= suffix.size() && u.compare(u.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("FLOPS")) return u.substr(0, u.size() - 1) + "/s";
  if (ends_with("FLOPs/s")) return u.substr(0, u.size() - 3) + "/s";
  if (ends_with("bps") || ends_with("Bps")) return u.substr(0, u.size() - 2) + "/s";
  return u;
}

}  // namespace

std::string_view dimension_name(Dimension dimension) {
  switch (dimension) {
    case Dimension::kTime: return "a time";
    case Dimension::kBytes: return "a size";
    case Dimension::kFlop: return "an amount of work";
    case Dimension::kByteRate: return "a bandwidth";
    case Dimension::kFlopRate: return "a compute rate";
    case Dimension::kFrequency: return "a frequency";
    case Dimension::kPower: return "a power";
  }
  return "a quantity";
}

double parse_quantity(std::string_view text, Dimension dimension) {
  const std::span<const Unit> units = units_of(dimension);
  const std::string_view rate_suffix = is_rate(dimension) ? "/s" : "";
  auto allowed = [&] {
    std::string list;
    for (const Unit& u : units) {
      list += fmt::format("{}{}{}", list.empty() ? "" : ", ", u.symbol, rate_suffix);
    }
    return list;
  };
  const std::string_view body = trim(text);
  double number = 0.0;
  const char* begin = body.data();
  const char* end = body.data() + body.size();
  // from_chars rejects a leading '+', which YAML users may write.
  if (begin != end && *begin == '+') ++begin;
  const auto [rest, ec] = std::from_chars(begin, end, number);
  if (ec != std::errc() || !std::isfinite(number)) {
    throw std::invalid_argument(fmt::format("'{}' is not {}: expected a number with a unit such as '{}{}'",
                                            text, dimension_name(dimension), units.front().symbol,
                                            rate_suffix));
  }
  const std::string_view unit = trim(std::string_view(rest, static_cast<size_t>(end - rest)));
  if (unit.empty()) return number;
  std::string symbol = canonical_unit(unit);
  const bool has_suffix = symbol.size() > rate_suffix.size() && symbol.ends_with(rate_suffix);
  if (is_rate(dimension) && has_suffix) symbol.resize(symbol.size() - rate_suffix.size());
  if (has_suffix || !is_rate(dimension)) {
    for (const Unit& u : units) {
      if (u.symbol != symbol) continue;
      // A finite number times its unit can still overflow ("1e300 PB").
      const double value = number * u.factor;
      if (!std::isfinite(value)) {
        throw std::invalid_argument(fmt::format("'{}' is too large for {} (beyond {:g} {})", text,
                                                dimension_name(dimension), std::numeric_limits<double>::max() / u.factor,
                                                unit));
      }
      return value;
    }
  }
  throw std::invalid_argument(fmt::format("'{}' has unit '{}', which is not a unit of {}; expected one of: {}",
                                          text, unit, dimension_name(dimension), allowed()));
}

}  // namespace paceline
