// Tests base/unit_parse.h: numbers with units, plain numbers and the errors for bad units.
#include "base/unit_parse.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace paceline {
namespace {

TEST(UnitParse, Bandwidths) {
  EXPECT_DOUBLE_EQ(parse_as<BytesPerSecond>("900 GB/s") / GBPerSecond(1), 900.0);
  // 200 Gb/s = 25e9 B/s.
  EXPECT_DOUBLE_EQ(parse_as<BytesPerSecond>("200 Gb/s") / BytesPerSecond(1), 25e9);
  EXPECT_DOUBLE_EQ(parse_as<BytesPerSecond>("3.35 TB/s") / TBPerSecond(1), 3.35);
  EXPECT_DOUBLE_EQ(parse_as<BytesPerSecond>("400Gbps") / GbitPerSecond(1), 400.0);
}

TEST(UnitParse, SizesDistinguishSiAndBinaryPrefixes) {
  EXPECT_DOUBLE_EQ(parse_as<Bytes>("80 GiB") / Bytes(1), 80.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_as<Bytes>("80 GB") / Bytes(1), 80e9);
  EXPECT_DOUBLE_EQ(parse_as<Bytes>("1024") / Bytes(1), 1024.0);
}

TEST(UnitParse, TimesAndRates) {
  EXPECT_DOUBLE_EQ(parse_as<Seconds>("2.5 us") / Microseconds(1), 2.5);
  EXPECT_DOUBLE_EQ(parse_as<Seconds>("3 µs") / Microseconds(1), 3.0);
  EXPECT_DOUBLE_EQ(parse_as<FlopPerSecond>("989 TFLOP/s") / TflopPerSecond(1), 989.0);
  EXPECT_DOUBLE_EQ(parse_as<FlopPerSecond>("312 TFLOPS") / TflopPerSecond(1), 312.0);
  EXPECT_DOUBLE_EQ(parse_as<Hertz>("1980 MHz") / Megahertz(1), 1980.0);
  EXPECT_DOUBLE_EQ(parse_as<Seconds>("0.5") / Seconds(1), 0.5);
}

TEST(UnitParse, WrongDimensionListsTheAllowedUnits) {
  try {
    parse_as<BytesPerSecond>("80 GiB");
    FAIL() << "a size is not a bandwidth";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'GiB'"), std::string::npos) << message;
    EXPECT_NE(message.find("GB/s"), std::string::npos) << message;
  }
}

TEST(UnitParse, RejectsGarbage) {
  EXPECT_THROW(parse_as<Seconds>("fast"), std::invalid_argument);
  EXPECT_THROW(parse_as<Seconds>("5 parsecs"), std::invalid_argument);
  EXPECT_THROW(parse_as<Bytes>(""), std::invalid_argument);
  EXPECT_THROW(parse_as<Bytes>("nan GB"), std::invalid_argument);
  EXPECT_THROW(parse_as<BytesPerSecond>("5 GB"), std::invalid_argument);
}

}  // namespace
}  // namespace paceline
