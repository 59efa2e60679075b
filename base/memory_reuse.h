// Keeping freed memory for reuse, for programs that simulate one scenario after another.
#ifndef PACELINE_BASE_MEMORY_REUSE_H_
#define PACELINE_BASE_MEMORY_REUSE_H_

namespace paceline {

// A search, sweep or validation simulates one scenario after another, each allocating and
// freeing tens of MiB. glibc's defaults give that memory back to the kernel and fault it in
// again for the next: the Llama 3 70B search took 527,000 page faults. Kept for reuse (blocks up
// to 32 MiB from the heap, its top trimmed past 256 MiB free) it takes 10,000, and about half
// the time, at the same peak memory (measured on 2 cores; freed memory stays with the process,
// so its resident size does not fall back after a peak). Call once, first thing in main(): it
// sets the process's allocator, which a library loaded into someone else's process (the Python
// module) must not. Does nothing where the C library is not glibc, or where GLIBC_TUNABLES sets
// malloc's tunables itself.
void keep_freed_memory_for_reuse();

}  // namespace paceline

#endif  // PACELINE_BASE_MEMORY_REUSE_H_
