// Tests base/memory_reuse.h: after it, blocks under 32 MiB come from the heap, not a mapping of
// their own that is handed back to the kernel when freed.
#include "base/memory_reuse.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace paceline {
namespace {

TEST(MemoryReuse, BlocksUnder32MiBComeFromTheHeap) {
#ifdef __GLIBC__
  keep_freed_memory_for_reuse();
  constexpr size_t kBlockBytes = 16 << 20;
  const size_t mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(kBlockBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlockBytes);
  const size_t mapped_with_block = mallinfo2().hblkhd;
  std::free(block);
  // glibc's default maps a block this large on its own (its threshold starts at 128 KiB).
  EXPECT_LT(mapped_with_block - mapped_before, kBlockBytes);
#else
  GTEST_SKIP() << "sets glibc's allocator only";
#endif
}

}  // namespace
}  // namespace paceline
