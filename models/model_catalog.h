// The model catalog (models/catalog/*.yaml) and resolution of a scenario's `model:` reference.
#ifndef PACELINE_MODELS_MODEL_CATALOG_H_
#define PACELINE_MODELS_MODEL_CATALOG_H_

#include <string>
#include <vector>

#include "base/input_error.h"
#include "models/model_spec.h"

namespace paceline {

// <data root>/models/catalog.
std::string default_model_catalog();

// The names in a catalog folder (file names without .yaml), sorted.
std::vector<std::string> catalog_models(const std::string& catalog_dir);

// Loads a model YAML file (catalog form: the scenario's model mapping plus `source`).
ModelSpec load_model_file(const std::string& path);

// Resolves a scenario's `model:` string: a catalog name, or a path to a .yaml/.yml file or a
// Hugging Face config .json. Throws InputError at `where`, listing the catalog, on a miss.
ModelSpec resolve_model(const std::string& reference, const std::string& catalog_dir,
                        const SourceLocation& where);
// The file a `model:` string names (a catalog file, or the path relative to `where`), which
// resolve_model reads; throws as it does.
std::string model_file(const std::string& reference, const std::string& catalog_dir,
                       const SourceLocation& where);

}  // namespace paceline

#endif  // PACELINE_MODELS_MODEL_CATALOG_H_
