// Tests calibrate/profile.cc: a kernel profile written, read back (also by yaml-cpp), and
// written to disk atomically.
#include "calibrate/profile.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

namespace paceline::calibrate {
namespace {

Profile sample_profile() {
  Profile p;
  p.device.set("name", YamlNode::string("NVIDIA H200"));
  p.device.set("compute_capability", YamlNode::string("9.0"));
  p.device.set("memory_bytes", YamlNode::integer(150754820096));
  p.method.set("mode", YamlNode::string("quick"));
  p.method.set("warmup", YamlNode::integer(3));
  Table& gemm = p.table("gemm");
  gemm.method = "cuBLASLt";
  gemm.key = {"dtype", "m"};
  gemm.interpolate = {"m"};
  YamlNode dtypes = YamlNode::sequence(true);
  dtypes.push_back(YamlNode::string("bf16"));
  gemm.axes.set("dtype", dtypes);
  for (int64_t m : {1024, 4096}) {
    YamlNode row = YamlNode::mapping(true);
    row.set("dtype", YamlNode::string("bf16"));
    row.set("m", YamlNode::integer(m));
    row.set("time_s", YamlNode::real(1.5e-5 * static_cast<double>(m) / 1024));
    gemm.rows.push_back(row);
  }
  // A table that is not canonical, added after "gemm" but written after the canonical ones.
  Table& extra = p.table("gemm_crosscheck");
  extra.key = {"m"};
  p.table("memory_bound").key = {"op", "size"};
  p.set_skipped("collectives", "1 GPU: NCCL collectives need at least 2");
  p.set_note("attention", "measured by attention_torch.py");
  return p;
}

std::string read_error(std::string_view text) {
  try {
    profile_from_yaml(text, "h200.yaml");
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "";
}

TEST(ProfileTest, RoundTripKeepsEverything) {
  Profile p = sample_profile();
  std::string text = to_yaml(p);
  Profile back = profile_from_yaml(text, "h200.yaml");
  EXPECT_EQ(to_yaml(back), text);
  ASSERT_NE(back.find_table("gemm"), nullptr);
  EXPECT_EQ(back.find_table("gemm")->rows.size(), 2u);
  EXPECT_EQ(back.find_table("gemm")->key, (std::vector<std::string>{"dtype", "m"}));
  ASSERT_NE(back.find_skipped("collectives"), nullptr);
  EXPECT_EQ(*back.find_skipped("collectives"), "1 GPU: NCCL collectives need at least 2");
  // Canonical order: memory_bound before gemm, other tables last.
  EXPECT_LT(text.find("\nmemory_bound:"), text.find("\ngemm:"));
  EXPECT_LT(text.find("\ngemm:"), text.find("\ngemm_crosscheck:"));
}

TEST(ProfileTest, YamlCppReadsTheSameNumbers) {
  YAML::Node y = YAML::Load(to_yaml(sample_profile()));
  EXPECT_EQ(y["format"].as<std::string>(), "paceline-profile/1");
  EXPECT_EQ(y["device"]["compute_capability"].as<std::string>(), "9.0");
  EXPECT_EQ(y["device"]["memory_bytes"].as<int64_t>(), 150754820096);
  // 1.5e-5 s · 4096 / 1024 = 6e-5 s, exactly as written.
  EXPECT_EQ(y["gemm"]["rows"][1]["time_s"].as<double>(), 6e-5);
  EXPECT_EQ(y["gemm"]["interpolate"][0].as<std::string>(), "m");
  EXPECT_EQ(y["skipped"]["collectives"].as<std::string>(),
            "1 GPU: NCCL collectives need at least 2");
}

TEST(ProfileTest, ReadErrorsNameFileLineAndWhatIsExpected) {
  EXPECT_EQ(read_error("device: {}\n"),
            "h200.yaml:1:1: missing 'format'; expected format: paceline-profile/1");
  EXPECT_EQ(
      read_error("format: paceline-profile/2\n"),
      "h200.yaml:1:9: format is 'paceline-profile/2'; this tool reads only paceline-profile/1");
  EXPECT_EQ(read_error("format: paceline-profile/1\ncolour: blue\n"),
            "h200.yaml:2:9: unknown top-level key 'colour'; expected format, device, method, "
            "skipped, notes, or a "
            "table with rows");
  EXPECT_EQ(
      read_error(
          "format: paceline-profile/1\ngemm:\n  key: [m]\n  rows:\n    - {m: 1}\n    - {m: 1}\n"),
      "h200.yaml:6:7: gemm has two rows for the same point (m=1)");
  EXPECT_EQ(read_error("format: paceline-profile/1\ngemm:\n  key: [m, k]\n  rows:\n    - {m: 1}\n"),
            "h200.yaml:5:7: gemm row lacks key field 'k'");
}

TEST(ProfileTest, RowKeyUsesKeyFieldsInOrder) {
  YamlNode row = YamlNode::mapping(true);
  row.set("m", YamlNode::integer(8));
  row.set("dtype", YamlNode::string("bf16"));
  row.set("time_s", YamlNode::real(1e-3));
  EXPECT_EQ(row_key(row, {"dtype", "m"}), "dtype=bf16;m=8");
  EXPECT_EQ(row_key(row, {"k"}), "k=?");
}

TEST(ProfileTest, AtomicWriteReplacesTheFileAndLeavesNoTemporaries) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("paceline_profile_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::path file = dir / "out.yaml";
  EXPECT_FALSE(read_file(file).has_value());
  write_file_atomically(file, "first\n");
  write_file_atomically(file, "second\n");
  EXPECT_EQ(read_file(file).value(), "second\n");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1);
  EXPECT_THROW(write_file_atomically(dir / "missing" / "out.yaml", "x"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace paceline::calibrate
