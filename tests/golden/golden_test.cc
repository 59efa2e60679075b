// Tests the predictions of the ready scenarios (scenarios/*.yaml) against their golden results
// (tests/golden/<name>.json: the JSON result without wall-clock fields). A difference fails
// with the keys that changed, old → new; when the change is intended, regenerate the files
// with scripts/update-golden.sh (which runs this test with PACELINE_UPDATE_GOLDEN=1).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

constexpr const char* kScenarios = "scenarios";
constexpr const char* kGolden = "tests/golden";

// The ready scenarios by name (file stem), sorted.
std::vector<std::string> ready_scenarios() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kScenarios)) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The golden text of a scenario's result: pretty JSON without wall-clock fields.
std::string result_text(const std::string& name) {
  const auto scenario =
      std::make_shared<const Scenario>(load_scenario_file(fmt::format("{}/{}.yaml", kScenarios, name)));
  return to_json(simulate(scenario).result, /*include_wall_time=*/false).dump(2) + "\n";
}

// Flattens a JSON document (read as YAML, of which JSON is a subset) into dotted paths and
// scalar texts: "memory.stages[0].peak_bytes" → "123". Numbers keep their printed digits, so
// equal texts mean bit-identical doubles.
void flatten(const YAML::Node& node, const std::string& path, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& entry : node) {
      flatten(entry.second, path.empty() ? entry.first.Scalar() : path + "." + entry.first.Scalar(), out);
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) flatten(node[i], fmt::format("{}[{}]", path, i), out);
    if (node.size() == 0) out[path] = "[]";
  } else {
    out[path] = node.IsNull() ? "null" : node.Scalar();
  }
}

// The keys whose values differ, one line each: "  iteration_time_s: 1.5 → 1.6".
std::string key_diff(const std::string& golden, const std::string& current) {
  std::map<std::string, std::string> before;
  std::map<std::string, std::string> after;
  flatten(YAML::Load(golden), "", before);
  flatten(YAML::Load(current), "", after);
  std::string diff;
  for (const auto& [key, value] : before) {
    const auto it = after.find(key);
    if (it == after.end()) {
      diff += fmt::format("  {}: {} → (removed)\n", key, value);
    } else if (it->second != value) {
      diff += fmt::format("  {}: {} → {}\n", key, value, it->second);
    }
  }
  for (const auto& [key, value] : after) {
    if (before.count(key) == 0) diff += fmt::format("  {}: (added) → {}\n", key, value);
  }
  return diff;
}

class Golden : public testing::TestWithParam<std::string> {};

TEST_P(Golden, ResultMatches) {
  const std::string path = fmt::format("{}/{}.json", kGolden, GetParam());
  const std::string current = result_text(GetParam());
  if (std::getenv("PACELINE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << current;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing; create it with scripts/update-golden.sh";
  std::stringstream golden;
  golden << in.rdbuf();
  if (golden.str() == current) return;
  const std::string diff = key_diff(golden.str(), current);
  ADD_FAILURE() << fmt::format(
      "scenarios/{}.yaml no longer predicts {}:\n{}If the change is intended, run scripts/update-golden.sh.", GetParam(),
      path, diff.empty() ? "  (same keys and values; only the layout of the file differs)\n" : diff);
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(ReadyScenarios, Golden, testing::ValuesIn(ready_scenarios()), test_name);

// Every golden file belongs to a ready scenario (a removed scenario takes its file along).
TEST(GoldenFiles, EachHasItsScenario) {
  const std::vector<std::string> scenarios = ready_scenarios();
  for (const auto& entry : std::filesystem::directory_iterator(kGolden)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_TRUE(std::binary_search(scenarios.begin(), scenarios.end(), entry.path().stem().string()))
        << entry.path() << " has no scenarios/" << entry.path().stem().string()
        << ".yaml; delete it or run scripts/update-golden.sh";
  }
}

// The diff names the keys that changed, with their old and new values.
TEST(GoldenDiff, NamesChangedAddedAndRemovedKeys) {
  const std::string diff = key_diff(R"({"a": 1, "b": {"c": [1, 2]}, "d": true})",
                                    R"({"a": 1.5, "b": {"c": [1, 3]}, "e": null})");
  EXPECT_EQ(diff,
            "  a: 1 → 1.5\n"
            "  b.c[1]: 2 → 3\n"
            "  d: true → (removed)\n"
            "  e: (added) → null\n");
}

}  // namespace
}  // namespace paceline
