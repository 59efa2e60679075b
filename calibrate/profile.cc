#include "calibrate/profile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace paceline::calibrate {
namespace {

// Tables are written in this order; tables with other names follow in their own order.
constexpr std::array<std::string_view, 5> kCanonicalTables = {"memory_bound", "copies", "gemm",
                                                              "collectives", "attention"};

std::string where(std::string_view file, const YamlNode& node) {
  return std::string(file) + ":" + std::to_string(node.line) + ":" + std::to_string(node.column) +
         ": ";
}

[[noreturn]] void fail(std::string_view file, const YamlNode& node, const std::string& what) {
  throw ProfileError(where(file, node) + what);
}

YamlNode string_list(const std::vector<std::string>& values) {
  YamlNode list = YamlNode::sequence(/*flow_style=*/true);
  for (const std::string& v : values) list.push_back(YamlNode::string(v));
  return list;
}

std::vector<std::string> read_string_list(std::string_view file, const YamlNode& node,
                                          std::string_view what) {
  if (!node.is_sequence()) fail(file, node, std::string(what) + " must be a list of field names");
  std::vector<std::string> out;
  for (const YamlNode& item : node.items) {
    if (!item.is_scalar()) fail(file, item, std::string(what) + " must list field names");
    out.push_back(item.text);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> read_string_map(std::string_view file,
                                                                 const YamlNode& node,
                                                                 std::string_view what) {
  std::vector<std::pair<std::string, std::string>> out;
  if (node.is_null()) return out;
  if (!node.is_mapping()) {
    fail(file, node, std::string(what) + " must be a mapping of names to text");
  }
  for (const auto& [key, value] : node.entries) {
    if (!value.is_scalar()) fail(file, value, std::string(what) + "." + key + " must be text");
    out.emplace_back(key, value.text);
  }
  return out;
}

YamlNode table_to_node(const Table& table) {
  YamlNode node = YamlNode::mapping(/*flow_style=*/false);
  node.set("method", YamlNode::string(table.method));
  node.set("key", string_list(table.key));
  node.set("interpolate", string_list(table.interpolate));
  YamlNode axes = table.axes;
  axes.flow = true;
  node.set("axes", std::move(axes));
  YamlNode rows = YamlNode::sequence(/*flow_style=*/false);
  for (const YamlNode& row : table.rows) {
    YamlNode r = row;
    r.flow = true;
    rows.push_back(std::move(r));
  }
  node.set("rows", std::move(rows));
  return node;
}

Table table_from_node(std::string_view file, const std::string& name, const YamlNode& node) {
  Table table;
  table.name = name;
  for (const auto& [key, value] : node.entries) {
    if (key == "method") {
      if (!value.is_scalar()) fail(file, value, name + ".method must be text");
      table.method = value.text;
    } else if (key == "key") {
      table.key = read_string_list(file, value, name + ".key");
    } else if (key == "interpolate") {
      table.interpolate = read_string_list(file, value, name + ".interpolate");
    } else if (key == "axes") {
      if (!value.is_mapping()) fail(file, value, name + ".axes must be a mapping");
      table.axes = value;
    } else if (key == "rows") {
      if (value.is_null()) continue;
      if (!value.is_sequence()) fail(file, value, name + ".rows must be a list of mappings");
      for (const YamlNode& row : value.items) {
        if (!row.is_mapping())
          fail(file, row, name + ".rows items must be {field: value} mappings");
        table.rows.push_back(row);
      }
    } else {
      fail(file, node,
           "unknown key '" + key + "' in table '" + name +
               "'; expected one of: method, key, interpolate, axes, rows");
    }
  }
  // Every row must carry every key field, and keys must be unique, or resuming cannot work.
  std::set<std::string> seen;
  for (const YamlNode& row : table.rows) {
    for (const std::string& field : table.key) {
      if (row.find(field) == nullptr) {
        fail(file, row, name + " row lacks key field '" + field + "'");
      }
    }
    std::string key = row_key(row, table.key);
    if (!seen.insert(key).second) {
      fail(file, row, name + " has two rows for the same point (" + key + ")");
    }
  }
  return table;
}

}  // namespace

Table* Profile::find_table(std::string_view name) {
  for (Table& t : tables) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const Table* Profile::find_table(std::string_view name) const {
  for (const Table& t : tables) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Table& Profile::table(std::string_view name) {
  if (Table* t = find_table(name)) return *t;
  tables.push_back(Table{});
  tables.back().name = std::string(name);
  return tables.back();
}

const std::string* Profile::find_skipped(std::string_view family) const {
  for (const auto& [k, v] : skipped) {
    if (k == family) return &v;
  }
  return nullptr;
}

void Profile::set_skipped(std::string_view family, std::string reason) {
  for (auto& [k, v] : skipped) {
    if (k == family) {
      v = std::move(reason);
      return;
    }
  }
  skipped.emplace_back(std::string(family), std::move(reason));
}

void Profile::clear_skipped(std::string_view family) {
  std::erase_if(skipped, [&](const auto& entry) { return entry.first == family; });
}

void Profile::set_note(std::string_view key, std::string text) {
  for (auto& [k, v] : notes) {
    if (k == key) {
      v = std::move(text);
      return;
    }
  }
  notes.emplace_back(std::string(key), std::move(text));
}

std::string to_yaml(const Profile& profile) {
  YamlNode root = YamlNode::mapping(/*flow_style=*/false);
  root.set("format", YamlNode::string(kProfileFormat));
  YamlNode device = profile.device;
  device.flow = false;
  root.set("device", std::move(device));
  YamlNode method = profile.method;
  method.flow = false;
  root.set("method", std::move(method));
  // Canonical tables first, then the others in their order.
  for (std::string_view name : kCanonicalTables) {
    if (const Table* t = profile.find_table(name)) root.set(name, table_to_node(*t));
  }
  for (const Table& t : profile.tables) {
    bool canonical = std::find(kCanonicalTables.begin(), kCanonicalTables.end(), t.name) !=
                     kCanonicalTables.end();
    if (!canonical) root.set(t.name, table_to_node(t));
  }
  YamlNode skipped = YamlNode::mapping(/*flow_style=*/false);
  for (const auto& [k, v] : profile.skipped) skipped.set(k, YamlNode::string(v));
  root.set("skipped", std::move(skipped));
  if (!profile.notes.empty()) {
    YamlNode notes = YamlNode::mapping(/*flow_style=*/false);
    for (const auto& [k, v] : profile.notes) notes.set(k, YamlNode::string(v));
    root.set("notes", std::move(notes));
  }
  return emit_yaml_subset(root,
                          {"paceline kernel profile: measured kernel and link times.",
                           "Format: docs/profile-format.md. Times in seconds, sizes in bytes."});
}

Profile profile_from_yaml(std::string_view text, std::string_view file_name) {
  YamlNode root = parse_yaml_subset(text, file_name);
  if (!root.is_mapping()) fail(file_name, root, "a profile must be a mapping at the top level");
  const YamlNode* format = root.find("format");
  if (format == nullptr) {
    fail(file_name, root, "missing 'format'; expected format: " + std::string(kProfileFormat));
  }
  if (!format->is_scalar() || format->text != kProfileFormat) {
    fail(file_name, *format,
         "format is '" + format->text + "'; this tool reads only " + std::string(kProfileFormat));
  }
  Profile profile;
  for (const auto& [key, value] : root.entries) {
    if (key == "format") continue;
    if (key == "device" || key == "method") {
      if (!value.is_mapping()) fail(file_name, value, key + " must be a mapping");
      (key == "device" ? profile.device : profile.method) = value;
    } else if (key == "skipped") {
      profile.skipped = read_string_map(file_name, value, "skipped");
    } else if (key == "notes") {
      profile.notes = read_string_map(file_name, value, "notes");
    } else if (value.is_mapping() && value.find("rows") != nullptr) {
      profile.tables.push_back(table_from_node(file_name, key, value));
    } else {
      fail(file_name, value,
           "unknown top-level key '" + key +
               "'; expected format, device, method, skipped, notes, or a table with rows");
    }
  }
  return profile;
}

std::string row_key(const YamlNode& row, const std::vector<std::string>& key) {
  std::string out;
  for (const std::string& field : key) {
    if (!out.empty()) out += ';';
    out += field;
    out += '=';
    const YamlNode* value = row.find(field);
    out += value != nullptr && value->is_scalar() ? value->text : "?";
  }
  return out;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  std::string name = ".";
  name += path.filename().string();
  name += ".tmp.XXXXXX";
  std::string temp = (dir / name).string();
  int fd = mkstemp(temp.data());
  if (fd < 0) {
    throw std::runtime_error("cannot create a temporary file in " + dir.string() + ": " +
                             std::strerror(errno));
  }
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      throw std::runtime_error("cannot write " + temp + ": " + std::strerror(err));
    }
    written += static_cast<size_t>(n);
  }
  // mkstemp creates the file 0600; profiles are ordinary readable files.
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    throw std::runtime_error("cannot flush " + temp + ": " + std::strerror(err));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    throw std::runtime_error("cannot rename " + temp + " to " + path.string() + ": " +
                             std::strerror(err));
  }
}

std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace paceline::calibrate
