#include "base/memory_reuse.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace paceline {

void keep_freed_memory_for_reuse() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

}  // namespace paceline
