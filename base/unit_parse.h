// Parsing of quantities written with units: "900 GB/s", "80 GiB", "2.5 us", "989 TFLOP/s",
// "200 Gb/s". A plain number is taken in the dimension's base unit (s, B, FLOP, B/s, FLOP/s,
// Hz, W). SI and binary prefixes differ (GB = 1e9 B, GiB = 2^30 B) and so do bits and bytes
// (Gb = 1e9 bits = 1.25e8 B).
#ifndef PACELINE_BASE_UNIT_PARSE_H_
#define PACELINE_BASE_UNIT_PARSE_H_

#include <string>
#include <string_view>

#include "base/units.h"

namespace paceline {

enum class Dimension { kTime, kBytes, kFlop, kByteRate, kFlopRate, kFrequency, kPower };

// A readable name of the dimension: "a time", "a size", ...
std::string_view dimension_name(Dimension dimension);

// Parses `text` as a quantity of `dimension` and returns its value in base units.
// Throws std::invalid_argument with a message that names the text and lists the units allowed
// (no file position: the caller that knows the position wraps it in an InputError).
double parse_quantity(std::string_view text, Dimension dimension);

// The unit types' parsers.
template <typename Q>
Q parse_as(std::string_view text);
template <>
inline Seconds parse_as<Seconds>(std::string_view t) { return Seconds(parse_quantity(t, Dimension::kTime)); }
template <>
inline Bytes parse_as<Bytes>(std::string_view t) { return Bytes(parse_quantity(t, Dimension::kBytes)); }
template <>
inline Flop parse_as<Flop>(std::string_view t) { return Flop(parse_quantity(t, Dimension::kFlop)); }
template <>
inline BytesPerSecond parse_as<BytesPerSecond>(std::string_view t) {
  return BytesPerSecond(parse_quantity(t, Dimension::kByteRate));
}
template <>
inline FlopPerSecond parse_as<FlopPerSecond>(std::string_view t) {
  return FlopPerSecond(parse_quantity(t, Dimension::kFlopRate));
}
template <>
inline Hertz parse_as<Hertz>(std::string_view t) { return Hertz(parse_quantity(t, Dimension::kFrequency)); }
template <>
inline Watts parse_as<Watts>(std::string_view t) { return Watts(parse_quantity(t, Dimension::kPower)); }

// The dimension of each unit type, for generic readers.
template <typename Q>
constexpr Dimension dimension_of();
template <> constexpr Dimension dimension_of<Seconds>() { return Dimension::kTime; }
template <> constexpr Dimension dimension_of<Bytes>() { return Dimension::kBytes; }
template <> constexpr Dimension dimension_of<Flop>() { return Dimension::kFlop; }
template <> constexpr Dimension dimension_of<BytesPerSecond>() { return Dimension::kByteRate; }
template <> constexpr Dimension dimension_of<FlopPerSecond>() { return Dimension::kFlopRate; }
template <> constexpr Dimension dimension_of<Hertz>() { return Dimension::kFrequency; }
template <> constexpr Dimension dimension_of<Watts>() { return Dimension::kPower; }

}  // namespace paceline

#endif  // PACELINE_BASE_UNIT_PARSE_H_
