// Strong unit types over double: Seconds, Bytes, Flop, BytesPerSecond, FlopPerSecond.
//
// A quantity is made by a named factory (`GiB(80)`, `Microseconds(5)`, `TflopPerSecond(989)`)
// and read out by dividing by a unit (`t / Milliseconds(1)`), so no bare factor of 1e9 appears
// in model code. Only physically meaningful arithmetic compiles: Bytes / BytesPerSecond is
// Seconds, Flop / FlopPerSecond is Seconds, Bytes + Seconds does not compile.
#ifndef PACELINE_BASE_UNITS_H_
#define PACELINE_BASE_UNITS_H_

#include <compare>

namespace paceline {

// Quantity<Tag> holds a value in the SI base unit of its dimension (seconds, bytes, FLOP, ...).
template <typename Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  // The value in the base unit; prefer the named factories below.
  constexpr explicit Quantity(double base_units) : value_(base_units) {}

  constexpr Quantity& operator+=(Quantity other) {
    value_ += other.value_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity other) {
    value_ -= other.value_;
    return *this;
  }
  constexpr Quantity& operator*=(double factor) {
    value_ *= factor;
    return *this;
  }
  constexpr Quantity& operator/=(double divisor) {
    value_ /= divisor;
    return *this;
  }

  friend constexpr Quantity operator+(Quantity a, Quantity b) { return Quantity(a.value_ + b.value_); }
  friend constexpr Quantity operator-(Quantity a, Quantity b) { return Quantity(a.value_ - b.value_); }
  friend constexpr Quantity operator-(Quantity a) { return Quantity(-a.value_); }
  friend constexpr Quantity operator*(Quantity a, double f) { return Quantity(a.value_ * f); }
  friend constexpr Quantity operator*(double f, Quantity a) { return Quantity(a.value_ * f); }
  friend constexpr Quantity operator/(Quantity a, double d) { return Quantity(a.value_ / d); }
  // Reading out: a quantity divided by a unit of the same dimension is a plain number.
  friend constexpr double operator/(Quantity a, Quantity b) { return a.value_ / b.value_; }
  friend constexpr auto operator<=>(Quantity a, Quantity b) = default;

 private:
  double value_ = 0.0;
};

struct SecondsTag {};
struct BytesTag {};
struct FlopTag {};
struct BytesPerSecondTag {};
struct FlopPerSecondTag {};
struct HertzTag {};
struct WattsTag {};

using Seconds = Quantity<SecondsTag>;
using Bytes = Quantity<BytesTag>;
using Flop = Quantity<FlopTag>;
using BytesPerSecond = Quantity<BytesPerSecondTag>;
using FlopPerSecond = Quantity<FlopPerSecondTag>;
using Hertz = Quantity<HertzTag>;
using Watts = Quantity<WattsTag>;

// Cross-dimension arithmetic that has a physical meaning.
constexpr Seconds operator/(Bytes b, BytesPerSecond r) { return Seconds(b / Bytes(1) / (r / BytesPerSecond(1))); }
constexpr Seconds operator/(Flop f, FlopPerSecond r) { return Seconds(f / Flop(1) / (r / FlopPerSecond(1))); }
constexpr BytesPerSecond operator/(Bytes b, Seconds t) { return BytesPerSecond(b / Bytes(1) / (t / Seconds(1))); }
constexpr FlopPerSecond operator/(Flop f, Seconds t) { return FlopPerSecond(f / Flop(1) / (t / Seconds(1))); }
constexpr Bytes operator*(BytesPerSecond r, Seconds t) { return Bytes(r / BytesPerSecond(1) * (t / Seconds(1))); }
constexpr Bytes operator*(Seconds t, BytesPerSecond r) { return r * t; }
constexpr Flop operator*(FlopPerSecond r, Seconds t) { return Flop(r / FlopPerSecond(1) * (t / Seconds(1))); }
constexpr Flop operator*(Seconds t, FlopPerSecond r) { return r * t; }

// Time.
constexpr Seconds Picoseconds(double n) { return Seconds(n * 1e-12); }
constexpr Seconds Nanoseconds(double n) { return Seconds(n * 1e-9); }
constexpr Seconds Microseconds(double n) { return Seconds(n * 1e-6); }
constexpr Seconds Milliseconds(double n) { return Seconds(n * 1e-3); }
constexpr Seconds Minutes(double n) { return Seconds(n * 60.0); }

// Sizes: SI (kB = 1000 B) and binary (KiB = 1024 B) prefixes are different units.
constexpr Bytes KB(double n) { return Bytes(n * 1e3); }
constexpr Bytes MB(double n) { return Bytes(n * 1e6); }
constexpr Bytes GB(double n) { return Bytes(n * 1e9); }
constexpr Bytes TB(double n) { return Bytes(n * 1e12); }
constexpr Bytes KiB(double n) { return Bytes(n * 1024.0); }
constexpr Bytes MiB(double n) { return Bytes(n * 1024.0 * 1024.0); }
constexpr Bytes GiB(double n) { return Bytes(n * 1024.0 * 1024.0 * 1024.0); }
constexpr Bytes TiB(double n) { return Bytes(n * 1024.0 * 1024.0 * 1024.0 * 1024.0); }

// Work.
constexpr Flop Gflop(double n) { return Flop(n * 1e9); }
constexpr Flop Tflop(double n) { return Flop(n * 1e12); }
constexpr Flop Pflop(double n) { return Flop(n * 1e15); }

// Rates. Network rates are often quoted in bits: 200 Gb/s is 25 GB/s.
constexpr BytesPerSecond GBPerSecond(double n) { return BytesPerSecond(n * 1e9); }
constexpr BytesPerSecond TBPerSecond(double n) { return BytesPerSecond(n * 1e12); }
constexpr BytesPerSecond GbitPerSecond(double n) { return BytesPerSecond(n * 1e9 / 8.0); }
constexpr FlopPerSecond TflopPerSecond(double n) { return FlopPerSecond(n * 1e12); }

constexpr Hertz Megahertz(double n) { return Hertz(n * 1e6); }

}  // namespace paceline

#endif  // PACELINE_BASE_UNITS_H_
