#include "base/memory_reuse.h"

// A C library header first: it defines __GLIBC__ under glibc.
#include <cstdlib>
#include <string_view>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace paceline {

void keep_freed_memory_for_reuse() {
#ifdef __GLIBC__
  // Settings of the user's own (GLIBC_TUNABLES=glibc.malloc.…) stand.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos) return;
  // 32 MiB is the largest threshold glibc accepts (half its 64 MiB thread heaps).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

}  // namespace paceline
