// Tests calibrate/yaml_subset.cc: the profile's YAML subset, written and read back, and read by
// yaml-cpp as an independent YAML implementation.
#include "calibrate/yaml_subset.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <random>

namespace paceline::calibrate {
namespace {

std::string parse_error(std::string_view text) {
  try {
    parse_yaml_subset(text, "p.yaml");
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "";
}

TEST(YamlSubsetTest, RealsAreShortestRoundTripWithDotAndSignedExponent) {
  // PyYAML (YAML 1.1) reads "1e-05" as a string, so a '.' and a signed exponent are required.
  EXPECT_EQ(format_real(1e-5), "1.0e-05");
  EXPECT_EQ(format_real(1.5e-5), "1.5e-05");
  EXPECT_EQ(format_real(3.0), "3.0");
  EXPECT_EQ(format_real(0.1), "0.1");
  EXPECT_EQ(format_real(1.2e20), "1.2e+20");
  // Python's repr() switches to scientific notation below 1e-4 and from 1e16.
  EXPECT_EQ(format_real(3e-4), "0.0003");
  EXPECT_EQ(format_real(1e-4), "0.0001");
  EXPECT_EQ(format_real(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(format_real(612345678900000.0), "612345678900000.0");
  EXPECT_EQ(format_real(1e16), "1.0e+16");
  EXPECT_EQ(format_real(0.0), "0.0");
  EXPECT_EQ(format_real(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(format_real(std::nan("")), "null");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-12, 15);
  for (int i = 0; i < 1000; ++i) {
    double v = std::pow(10.0, exponent(rng)) * (1 + static_cast<double>(rng() % 1000) / 997.0);
    YamlNode parsed = parse_yaml_subset("x: " + format_real(v) + "\n", "t").entries[0].second;
    ASSERT_EQ(parsed.as_real(), v) << format_real(v);
  }
}

TEST(YamlSubsetTest, StringsThatLookLikeOtherTypesAreQuoted) {
  EXPECT_FALSE(YamlNode::string("bf16").quoted);
  EXPECT_FALSE(YamlNode::string("device_to_host").quoted);
  for (std::string_view s : {"T", "N", "n", "yes", "off", "true", "null", "9.0", "1e5", "", "a b",
                             "x:y", "NVIDIA H200"}) {
    EXPECT_TRUE(YamlNode::string(s).quoted) << s;
  }
}

TEST(YamlSubsetTest, EmitParseRoundTrip) {
  YamlNode root = YamlNode::mapping(false);
  root.set("format", YamlNode::string("paceline-profile/1"));
  YamlNode device = YamlNode::mapping(false);
  device.set("name", YamlNode::string("NVIDIA \"H200\"\tSXM\\"));
  device.set("sm_count", YamlNode::integer(132));
  device.set("ok", YamlNode::boolean(true));
  root.set("device", device);
  YamlNode rows = YamlNode::sequence(false);
  YamlNode row = YamlNode::mapping(true);
  row.set("dtype", YamlNode::string("bf16"));
  row.set("transa", YamlNode::string("T"));
  row.set("time_s", YamlNode::real(1.25e-4));
  row.set("error", YamlNode::null());
  YamlNode list = YamlNode::sequence(true);
  list.push_back(YamlNode::integer(-1));
  list.push_back(YamlNode::string("a, b]"));
  row.set("list", list);
  rows.push_back(row);
  root.set("rows", rows);
  root.set("empty", YamlNode::sequence(false));

  std::string text = emit_yaml_subset(root, {"header line"});
  EXPECT_EQ(text.rfind("# header line\nformat: paceline-profile/1\n", 0), 0u) << text;
  YamlNode back = parse_yaml_subset(text, "t.yaml");
  EXPECT_EQ(emit_yaml_subset(back, {"header line"}), text);
  EXPECT_EQ(back.find("device")->find("name")->text, "NVIDIA \"H200\"\tSXM\\");
  EXPECT_EQ(back.find("device")->find("sm_count")->as_integer(), 132);
  const YamlNode& r = back.find("rows")->items.at(0);
  EXPECT_EQ(r.find("transa")->text, "T");
  EXPECT_TRUE(r.find("transa")->quoted);
  EXPECT_EQ(r.find("time_s")->as_real(), 1.25e-4);
  EXPECT_TRUE(r.find("error")->is_null());
  EXPECT_EQ(r.find("list")->items.at(1).text, "a, b]");
  EXPECT_TRUE(back.find("empty")->is_sequence());
  // Header, format, device and its three fields, rows: the row is on line 8.
  EXPECT_EQ(r.line, 8);

  // yaml-cpp reads the same values.
  YAML::Node y = YAML::Load(text);
  EXPECT_EQ(y["device"]["name"].as<std::string>(), "NVIDIA \"H200\"\tSXM\\");
  EXPECT_EQ(y["device"]["sm_count"].as<int>(), 132);
  EXPECT_EQ(y["rows"][0]["transa"].as<std::string>(), "T");
  EXPECT_EQ(y["rows"][0]["time_s"].as<double>(), 1.25e-4);
  EXPECT_TRUE(y["rows"][0]["error"].IsNull());
  EXPECT_EQ(y["rows"][0]["list"][0].as<int>(), -1);
  EXPECT_EQ(y["rows"][0]["list"][1].as<std::string>(), "a, b]");
}

TEST(YamlSubsetTest, ReadsPyYamlStyleSequencesAndComments) {
  // PyYAML writes block sequences at their key's indentation.
  YamlNode root = parse_yaml_subset(
      "---\n"
      "a:\n"
      "- {x: 1}   # trailing comment\n"
      "- \"# not a comment\"\n"
      "# a comment line\n"
      "b:\n"
      "  c: [1, 2.5, .5, -3]\n"
      "  d:\n",
      "t.yaml");
  ASSERT_EQ(root.find("a")->items.size(), 2u);
  EXPECT_EQ(root.find("a")->items[0].find("x")->as_integer(), 1);
  EXPECT_EQ(root.find("a")->items[1].text, "# not a comment");
  const YamlNode& c = *root.find("b")->find("c");
  EXPECT_EQ(c.items[1].as_real(), 2.5);
  EXPECT_EQ(c.items[2].as_real(), 0.5);
  EXPECT_EQ(c.items[3].as_integer(), -3);
  EXPECT_TRUE(root.find("b")->find("d")->is_null());
}

TEST(YamlSubsetTest, ErrorsCarryFileLineAndColumn) {
  EXPECT_EQ(parse_error("a: 1\na: 2\n"), "p.yaml:2:1: duplicate key 'a'");
  EXPECT_EQ(parse_error("a:\n\t- 1\n"),
            "p.yaml:2:1: tab characters are not allowed for indentation");
  EXPECT_EQ(parse_error("rows:\n  - x: 1\n"),
            "p.yaml:2:5: a block mapping here is outside the profile's YAML subset; write it as "
            "{key: value}");
  EXPECT_EQ(parse_error("a: &anchor 1\n"),
            "p.yaml:1:4: '&' (anchors, tags, block or single-quoted scalars) is outside the "
            "profile's YAML subset");
  EXPECT_EQ(parse_error("a: {x: 1\n"), "p.yaml:1:9: expected ',' or '}' in a flow mapping");
  EXPECT_EQ(parse_error("a: \"open\n"), "p.yaml:1:8: unterminated quoted string");
  EXPECT_EQ(parse_error("a: 1\n   b: 2\n"), "p.yaml:2:4: unexpected indentation");
}

}  // namespace
}  // namespace paceline::calibrate
