// Where paceline's data lives: the model and hardware catalogs, profiles and scenarios.
#ifndef PACELINE_BASE_DATA_ROOT_H_
#define PACELINE_BASE_DATA_ROOT_H_

#include <string>

namespace paceline {

// $PACELINE_DATA_DIR when set, else the folder fixed at build time (the source tree, or the
// installed copy of its data). Catalogs are found below it, e.g. <root>/models/catalog.
std::string data_root();

}  // namespace paceline

#endif  // PACELINE_BASE_DATA_ROOT_H_
