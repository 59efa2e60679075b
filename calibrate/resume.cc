#include "calibrate/resume.h"

#include <set>

namespace paceline::calibrate {
namespace {

std::string text_of(const YamlNode& map, std::string_view key) {
  const YamlNode* value = map.find(key);
  return value != nullptr && value->is_scalar() ? value->text : std::string("(none)");
}

}  // namespace

std::optional<std::string> resume_conflict(const Profile& existing, const YamlNode& device,
                                           const YamlNode& method) {
  // The fields that make two runs' rows comparable.
  struct Field {
    const YamlNode* existing_map;
    const YamlNode* new_map;
    std::string_view section;
    std::string_view key;
  };
  const Field fields[] = {
      {&existing.device, &device, "device", "name"},
      {&existing.device, &device, "device", "compute_capability"},
      {&existing.method, &method, "method", "mode"},
      {&existing.method, &method, "method", "warmup"},
      {&existing.method, &method, "method", "repetitions"},
  };
  for (const Field& f : fields) {
    std::string before = text_of(*f.existing_map, f.key);
    std::string now = text_of(*f.new_map, f.key);
    if (before != now) {
      return std::string(f.section) + "." + std::string(f.key) +
             " differs: the existing profile has " + before + ", this run has " + now;
    }
  }
  return std::nullopt;
}

std::vector<size_t> pending_points(const Plan& plan, std::string_view family,
                                   const Profile& profile) {
  std::vector<std::string> keys = plan.keys(family);
  std::set<std::string> done;
  if (const Table* table = profile.find_table(family)) {
    Table shell = plan.table_shell(family);
    for (const YamlNode& row : table->rows) done.insert(row_key(row, shell.key));
  }
  std::vector<size_t> pending;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (done.count(keys[i]) == 0) pending.push_back(i);
  }
  return pending;
}

std::optional<std::string> failed_points_note(const Table& table) {
  size_t failed = 0;
  std::string first;
  for (const YamlNode& row : table.rows) {
    if (const YamlNode* error = row.find("error")) {
      if (failed++ == 0) first = error->text;
    }
  }
  if (failed == 0) return std::nullopt;
  return std::to_string(failed) + " of " + std::to_string(table.rows.size()) +
         " points failed; first: " + first;
}

Table& prepare_table(Profile& profile, const Plan& plan, std::string_view family,
                     std::string method) {
  Table shell = plan.table_shell(family);
  Table& table = profile.table(family);
  table.method = std::move(method);
  table.key = shell.key;
  table.interpolate = shell.interpolate;
  table.axes = shell.axes;
  return table;
}

}  // namespace paceline::calibrate
