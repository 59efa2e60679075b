// How a kernel's tiles fill the GPU. A GEMM's output tiles: tile padding and wave quantization
// (NVIDIA, "Matrix Multiplication Background User's Guide"), and, where the tiles are fewer than
// the SMs, the smaller tiles and K splits a library spreads them over the SMs with (cuBLAS's
// split-K kernels; stream-K, Osama et al., PPoPP 2023). Shared by the op timer's roofline and the
// profile fits, which model GEMMs the same way. A fused attention kernel's query (forward) or key
// (backward) tiles: waves, and under a causal mask the longest tile.
#ifndef PACELINE_HARDWARE_GEMM_TILING_H_
#define PACELINE_HARDWARE_GEMM_TILING_H_

#include "base/kernel_shapes.h"
#include "hardware/gpu_spec.h"

namespace paceline {

// Bytes per element of a fix-up: a split tile's partial sums written in fp32 by one SM and read
// back by the one that finishes the tile.
inline constexpr double kGemmFixupBytesPerElement = 8.0;

// The ceiling of a GEMM's efficiency (of the dtype's dense peak) for a large well-shaped GEMM:
// fp8 GEMMs in the forward layout run with fast accumulation and the backward ones without (as
// Transformer Engine and torchao run them); every other dtype has the catalog's one ceiling.
double gemm_max_efficiency(const GemmShape& shape, const KernelEfficiency& kernels);

// Bytes per output element a GEMM's epilogue moves: C written once in its dtype (bf16 for fp8
// GEMMs), or read and written where it accumulates into a buffer.
double gemm_epilogue_bytes(const GemmShape& shape);

// How long a tile's epilogue takes per byte it moves per element, in steps of the tile's K loop.
// The catalog's k_half is a bf16 GEMM's epilogue writing 2 bytes per element; an fp8 main loop
// covers K faster, by its peak and ceiling over bf16's.
double gemm_epilogue_k_per_byte(const GemmShape& shape, const GpuSpec& gpu);

// The busiest SM's share of a GEMM, in steps of one tile's K loop (a tile_m × tile_n × 1 block of
// multiply-adds at the GEMM's ceiling). The catalog tile is the library's large-GEMM tile, taken
// as the smallest whose operands keep the tensor cores fed: a step loads tile_m + tile_n operands
// per tile_m × tile_n multiply-adds, and a smaller tile waits on its loads.
//
// Data-parallel, as long GEMMs run: a thread block per tile, whole tiles in waves over the SMs;
// each wave runs K steps and an epilogue, and a last wave of fewer tiles than SMs leaves the
// others idle.
//
// Fewer tiles than SMs (m·n / (tile_m·tile_n) < SMs): the library spreads the work over all SMs,
// S = SMs · tile_m·tile_n / (m·n) of them a tile, by cutting tiles into smaller ones and splitting
// their K loops, whichever ends first:
// - a tile cut into q parts of its shape runs each step q times fewer multiply-adds but loads
//   √q times fewer operands, so it takes 1/√q of a step, and writes 1/q of the tile's C;
// - a K loop split in S/q parts runs K·q/S of them, and its partial sums take a fix-up: written
//   in fp32 by one SM and read back by another (kGemmFixupBytesPerElement).
// The cut tiles fit the rows and columns (their padding is not charged). The best q balances
// K·√q/S steps against the fix-up's (epilogue + fix-up bytes)/q: q = (2·bytes·k_per_byte·S/K)^⅔.
// With K short against the fix-up the library only cuts; with K long it splits. Where the
// output's area passes one wave of tiles, its padded tiles run in whole waves: the time doubles
// there (H100, 1048 -> 1056 x 4096 x 8192: 103 -> 205 us), as it does past every wave; a stream-K
// kernel would deal the last wave out instead, which is not modelled.
//
// Every schedule takes no less time when m, n or k grows, nor does the fastest of them.
struct GemmTiling {
  double work = 0.0;            // the multiply-adds per SM: m·n·k / (tile_m·tile_n·SMs)
  double main_loop = 0.0;       // K steps the busiest SM runs: `work` with padding and idle SMs
  double epilogue_bytes = 0.0;  // bytes per tile element its epilogues and fix-ups move
  double k_per_byte = 0.0;      // gemm_epilogue_k_per_byte of the shape
  double tile_parts = 1.0;      // parts each tile is cut into (1: the catalog tile)
  double k_parts = 1.0;         // parts each K loop is split into (1: not split)
  // Thread blocks launched: one a tile, or where tiles are spread, ⌊S⌋ a tile (at most one an SM).
  int64_t blocks = 0;

  // The busiest SM's time, in K steps: its main loop, epilogues and fix-ups.
  double busiest() const { return main_loop + epilogue_bytes * k_per_byte; }
  // The share of the SMs' time that does the GEMM's own multiply-adds.
  double utilization() const { return work / busiest(); }
};

GemmTiling gemm_tiling(const GemmShape& shape, const GpuSpec& gpu);

// The share of the SMs' time a fused attention kernel keeps busy. It runs one thread block per
// SM at a time, each over `tile_rows` rows of one (batch, head) pair. Unmasked, every block does
// the same work and only the last wave idles SMs. Under a causal mask the i-th block of a pair
// does i + 1 units (the diagonal's triangle), the scheduler starts the longest first, and the
// kernel lasts max(longest block, work / SMs).
double attention_occupancy(const AttentionShape& shape, const GpuSpec& gpu);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_GEMM_TILING_H_
