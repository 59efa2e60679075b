// Where paceline's data lives: the model and hardware catalogs, profiles and scenarios.
#ifndef PACELINE_BASE_DATA_ROOT_H_
#define PACELINE_BASE_DATA_ROOT_H_

#include <string>
#include <vector>

namespace paceline {

// $PACELINE_DATA_DIR when set, else the folder fixed at build time (the source tree, or the
// installed copy of its data). Catalogs are found below it, e.g. <root>/models/catalog.
std::string data_root();

// The names of a catalog folder's entries: its .yaml files without the extension, sorted; none
// when the folder cannot be read.
std::vector<std::string> catalog_entries(const std::string& catalog_dir);

// A file path written in another file, as paceline opens it: a relative path is taken from the
// folder of `written_in` when that is a file on disk (a scenario naming "my-gpu.yaml" finds it
// beside itself wherever paceline runs), else from the working directory (scenarios given as
// text or a Python dict).
std::string path_from(const std::string& reference, const std::string& written_in);

}  // namespace paceline

#endif  // PACELINE_BASE_DATA_ROOT_H_
