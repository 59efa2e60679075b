#include "models/model_catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/data_root.h"
#include "base/parsed_file_cache.h"
#include "base/yaml_reader.h"
#include "models/hf_config.h"

namespace paceline {

std::string default_model_catalog() { return data_root() + "/models/catalog"; }

std::vector<std::string> catalog_models(const std::string& catalog_dir) {
  return catalog_entries(catalog_dir);
}

ModelSpec load_model_file(const std::string& path) {
  static auto* const models = new ParsedFileCache<ModelSpec>([](const YamlDocument& document) {
    YamlMap root(document.root, document.file, "model");
    return read_model(root);
  });
  return *models->get(path);
}

ModelSpec resolve_model(const std::string& reference, const std::string& catalog_dir,
                        const SourceLocation& where) {
  const std::string file = model_file(reference, catalog_dir, where);
  return std::filesystem::path(file).extension() == ".json" ? load_hf_config(file)
                                                            : load_model_file(file);
}

std::string model_file(const std::string& reference, const std::string& catalog_dir,
                       const SourceLocation& where) {
  const std::filesystem::path path(reference);
  const std::string extension = path.extension().string();
  if (extension == ".json" || extension == ".yaml" || extension == ".yml") {
    const std::string file = path_from(reference, where.file);
    // A missing file is reported where the scenario names it.
    if (!std::ifstream(file)) {
      throw InputError(where, fmt::format("model = '{}' cannot be opened (missing or unreadable)", reference));
    }
    return file;
  }
  // The non-throwing check: a reference too long for a file name is simply not in the catalog.
  const std::string catalog_file = catalog_dir + "/" + reference + ".yaml";
  std::error_code error;
  if (std::filesystem::exists(catalog_file, error)) return catalog_file;
  throw InputError(where, fmt::format("model = '{}' is not in the model catalog ({}) and is not a path "
                                      "to a .yaml or config .json; known models: {}",
                                      reference, catalog_dir, fmt::join(catalog_models(catalog_dir), ", ")));
}

}  // namespace paceline
