#include "calibrate/internal/dynlib.h"

#include <dlfcn.h>
#include <link.h>

namespace paceline::calibrate::internal {

std::unique_ptr<DynamicLibrary> DynamicLibrary::open(const std::vector<std::string>& names,
                                                     std::string* error) {
  std::string tried;
  for (const std::string& name : names) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      std::string path = name;
      struct link_map* map = nullptr;
      if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
          map->l_name[0] != '\0') {
        path = map->l_name;
      }
      return std::unique_ptr<DynamicLibrary>(new DynamicLibrary(handle, path));
    }
    const char* why = dlerror();
    if (!tried.empty()) tried += "; ";
    tried += why != nullptr ? why : name + ": not found";
  }
  if (error != nullptr) *error = tried;
  return nullptr;
}

DynamicLibrary::~DynamicLibrary() {
  // Libraries stay loaded: CUDA libraries register atexit handlers and worker threads that must
  // not outlive their code, so unloading them early is unsafe.
}

void* DynamicLibrary::symbol(const char* name) const { return dlsym(handle_, name); }

}  // namespace paceline::calibrate::internal
