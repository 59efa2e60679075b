// Profile: the kernel profile a calibration run writes (docs/profile-format.md), in memory.
//
// A profile is the device's identity, how it was measured, and one table per benchmark family
// (gemm, attention, memory_bound, copies, collectives, and cross-check tables added by
// calibrate/attention_torch.py). Each table names its key fields, the fields interpolated in log
// space, the planned grid (`axes`) and its rows. Rows stay generic YAML mappings so that a
// profile read back for resuming keeps every field it had.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "calibrate/yaml_subset.h"

namespace paceline::calibrate {

// kProfileFormat is the value of the top-level `format` key this code reads and writes.
inline constexpr std::string_view kProfileFormat = "paceline-profile/1";

// Table is one benchmark family's measurements.
struct Table {
  std::string name;
  // How the rows were measured, e.g. "cuBLASLt cublasLtMatmul, top heuristic algorithm".
  std::string method;
  // Fields that identify a row (a grid point); no two rows share the same values.
  std::vector<std::string> key;
  // Numeric key fields a loader interpolates over in log space; the other key fields are
  // categorical (matched exactly).
  std::vector<std::string> interpolate;
  // The planned grid: a flow mapping from each key field to the list of its values.
  YamlNode axes = YamlNode::mapping(/*flow_style=*/true);
  // One flow mapping per measured point.
  std::vector<YamlNode> rows;
};

// Profile is a whole profile file.
struct Profile {
  // Device identity: name, compute capability, SMs, memory, clocks, library versions, date...
  YamlNode device = YamlNode::mapping(/*flow_style=*/false);
  // Measurement method: warm-up, repetitions, statistic, spread definition, timer...
  YamlNode method = YamlNode::mapping(/*flow_style=*/false);
  std::vector<Table> tables;
  // Families that were not (completely) measured, with the reason, e.g.
  // {collectives: "1 GPU: NCCL collectives need at least 2"}.
  std::vector<std::pair<std::string, std::string>> skipped;
  // Free-form provenance notes (e.g. which tool replaced a table and why).
  std::vector<std::pair<std::string, std::string>> notes;

  Table* find_table(std::string_view name);
  const Table* find_table(std::string_view name) const;
  // table returns the table `name`, appending an empty one when absent.
  Table& table(std::string_view name);

  const std::string* find_skipped(std::string_view family) const;
  void set_skipped(std::string_view family, std::string reason);
  void clear_skipped(std::string_view family);
  void set_note(std::string_view key, std::string text);
};

// to_yaml writes a profile in the canonical layout: format, device, method, the tables in
// canonical family order (then any others in their order), skipped, notes.
std::string to_yaml(const Profile& profile);

// profile_from_yaml reads a profile written by to_yaml (or by attention_torch.py, which writes
// the same layout). Unknown top-level keys that are not tables are errors. Throws ProfileError
// with file:line:col.
Profile profile_from_yaml(std::string_view text, std::string_view file_name);

// row_key is the identity of a row: "field=value;..." over `key` fields in order. A missing key
// field reads as "?".
std::string row_key(const YamlNode& row, const std::vector<std::string>& key);

// write_file_atomically writes `contents` to a temporary file next to `path`, flushes it to disk
// and renames it over `path`, so a reader never sees a half-written profile. Throws
// std::runtime_error naming the path and the system error.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// read_file returns the contents of `path`, or nullopt when it does not exist. Throws
// std::runtime_error when it exists but cannot be read.
std::optional<std::string> read_file(const std::filesystem::path& path);

}  // namespace paceline::calibrate
