#include "base/data_root.h"

#include <cstdlib>

namespace paceline {

std::string data_root() {
  if (const char* from_environment = std::getenv("PACELINE_DATA_DIR"); from_environment && *from_environment) {
    return from_environment;
  }
  return PACELINE_DATA_DIR_DEFAULT;
}

}  // namespace paceline
