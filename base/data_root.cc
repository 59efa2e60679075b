#include "base/data_root.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace paceline {

std::string data_root() {
  if (const char* from_environment = std::getenv("PACELINE_DATA_DIR"); from_environment && *from_environment) {
    return from_environment;
  }
  return PACELINE_DATA_DIR_DEFAULT;
}

std::vector<std::string> catalog_entries(const std::string& catalog_dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(catalog_dir, error)) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string path_from(const std::string& reference, const std::string& written_in) {
  const std::filesystem::path path(reference);
  std::error_code error;
  if (path.is_absolute() || written_in.empty() || !std::filesystem::is_regular_file(written_in, error)) {
    return reference;
  }
  return (std::filesystem::path(written_in).parent_path() / path).lexically_normal().string();
}

}  // namespace paceline
