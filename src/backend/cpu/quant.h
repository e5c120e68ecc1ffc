// Weight-only quantized formats (docs/format.md, Quantized checkpoints): q8_0 and q4_0, llama.cpp's
// block quantizations (32 weights and one fp16 scale per block), and q4_k (below), its super-block
// one with 6-bit scales and mins.
//
//   q8_0: w = d · (u − 128), u = q + 128 in 0..255, q = round(w / d) in −127..127, d = amax / 127
//   q4_0: w = d · (u − 8),   u in 0..15, d = m / −8 with m the block's value of largest |w|
//
// Weights are stored unsigned (u) so that the integer dot products multiply them with int8
// activations directly (VNNI's vpdpbusd takes unsigned × signed); the offset comes back as
// −offset · Σ qx per block. The products quantize the activations too, per block of 32 to int8
// with their own scale (as llama.cpp does for these formats).
//
// q8_0 and q4_0 are stored in tiles of 16 rows: the blocks of 16 consecutive rows at the same 32
// columns sit together, each row's codes in groups of 4 consecutive columns, the 16 rows' groups
// side by side (64 bytes: one AVX-512 register). One vpdpbusd then advances 16 rows by 4 columns
// against one broadcast group of x, so a block's 16 integer dot products come out whole in 16
// lanes, with no horizontal sums, for every input row that shares the weights (batched decoding).
// Every kernel computes, per row r and block b, with the same float operations in the same order,
//   i = Σ_k u_{r,b,k} · qx_{b,k} − offset · Σ_k qx_{b,k}        (int32, exact)
//   acc_r = fma((float) i, d_{r,b} · dx_b, acc_r),   y_r = acc_r
// so the portable, AVX2 and VNNI kernels agree bit for bit, and an input row's result does not
// depend on the rows decoded beside it. A matrix [R, C] is ceil(R/16) tiles of ceil(C/32) blocks,
// rows and columns padded with zeros (docs/format.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/gemm.h"

namespace looplm {

constexpr int kQBlock = 32;     // weights per block (one scale)
constexpr int kQTile = 16;      // rows per q8_0 / q4_0 / q4_k tile

struct BlockQ8_0x16 {
  uint16_t d[kQTile];                  // fp16 scales of the 16 rows' blocks
  uint8_t qs[kQBlock / 4][kQTile][4];  // qs[g][r][j]: u = q + 128 of row r, column 4g + j
};
static_assert(sizeof(BlockQ8_0x16) == 544, "q8_0: 16 x (2 + 32) bytes, 8.5 bits per weight");

struct BlockQ4_0x16 {
  uint16_t d[kQTile];                  // fp16 scales
  uint8_t qs[kQBlock / 8][kQTile][4];  // qs[g][r][j]: u of row r, column 4g + j in the low nibble, 16 + 4g + j in the high
};
static_assert(sizeof(BlockQ4_0x16) == 288, "q4_0: 16 x (2 + 16) bytes, 4.5 bits per weight");

// q4_k: llama.cpp's k-quant shape — super-blocks of 256 weights in 8 sub-blocks of 32, each
// sub-block with its own 6-bit scale sc and 6-bit min m, the super-block's scales and mins scaled
// in turn by an fp16 pair (d, dmin):
//   w = (d · sc_j) · u − (dmin · m_j),  u in 0..15 (nibbles as q4_0),  4.5 bits per weight.
// The min lets a sub-block's grid sit where its values are (asymmetric), the 6-bit scales cost
// 0.375 bits per weight where q4_0's fp16 scales cost 0.5. Tiled like q4_0: one BlockQ4_Kx16 holds
// the 16 rows of a tile at the same 256 columns, each sub-block's codes exactly as a BlockQ4_0x16's
// (one vpdpbusd advances 16 rows by 4 columns), the 6-bit numbers in 16-byte rows of the 16 rows'
// values so that one load spreads a sub-block's scales to the 16 lanes. A matrix's last
// super-block holds only the sub-blocks its columns reach (a width of 384 is 1.5 super-blocks).
// Per row r, sub-block j (the activations' block b), every kernel computes in this order
//   acc_r = fma((float) Σ_k u·qx, S_{r,j} · dx_b, acc_r),  acc_r = fma(−M_{r,j}, dx_b · Σ_k qx, acc_r)
// with S = d·sc, M = dmin·m in fp32 and y_r = acc_r, so its kernels agree bit for bit as q4_0's do.
constexpr int kQKBlock = 256;  // weights per super-block
constexpr int kQKSubs = 8;     // sub-blocks of 32
struct BlockQ4_Kx16 {
  uint16_t d[kQTile];                     // fp16: each row's scale of its sub-block scales
  uint16_t dmin[kQTile];                  // fp16: the same for the mins
  uint8_t sm_lo[kQKSubs][kQTile];         // [j][r]: sc & 15 | (m & 15) << 4 of sub-block j, row r
  uint8_t sm_hi[kQKSubs / 2][kQTile];     // [j % 4][r]: the top bits sc >> 4 | (m >> 4) << 2, in the
                                          // low nibble for j < 4, the high one for j >= 4
  uint8_t qs[kQKSubs][kQBlock / 8][kQTile][4];  // per sub-block, as BlockQ4_0x16::qs
};
static_assert(sizeof(BlockQ4_Kx16) == 2304, "q4_k: 16 x (2 + 2 + 12 + 128) bytes, 4.5 bits per weight");
// The header (d, dmin, sm) of a super-block: what a truncated last one holds before its sub-blocks.
constexpr int kQKHeader = 256;
static_assert(offsetof(BlockQ4_Kx16, qs) == kQKHeader);

// The q4_k grid of one row's super-block: d and dmin (fp16-rounded), sc[8], m[8] (0..63) — the
// 18 numbers GPTQ's grid hooks carry — and the value of code u in sub-block j.
struct GridQ4_K {
  float d = 0, dmin = 0;
  uint8_t sc[kQKSubs] = {}, m[kQKSubs] = {};
  float value(int j, int u) const;
};
// The scalar reference: a super-block's grid from its values (n ≤ 256; the sub-blocks' (scale,
// min) fitted by least squares, then rounded to 6 bits of d and dmin), and codes on a grid.
GridQ4_K fit_grid_q4_k(const float* x, int n);
void quantize_superblock_q4_k(const float* x, int n, const GridQ4_K& g, uint8_t* u /* n codes */);

// IEEE half <-> float, round to nearest even (portable; the kernels use F16C).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);

// The scalar reference: one block of 32 values (n ≤ 32, the rest zero) to its scale and unsigned
// codes, and back. The packing and the tests use these.
void quantize_block_q8_0(const float* x, int n, uint16_t* d, uint8_t* u);
void quantize_block_q4_0(const float* x, int n, uint16_t* d, uint8_t* u /* 32 codes, one per byte */);
// With a given scale (GPTQ chooses its scales before it quantizes): codes of round(x / d), clamped.
void quantize_block_q8_0_scaled(const float* x, int n, float d, uint8_t* u);
void quantize_block_q4_0_scaled(const float* x, int n, float d, uint8_t* u);

// The activations of one row, per block of 32: int8 codes, their scale and their sum.
struct QuantizedRow {
  int blocks = 0;
  std::vector<int8_t> q;    // blocks · 32 (padded with zeros)
  std::vector<float> d;     // per block
  std::vector<int32_t> sum; // per block: Σ q
  std::vector<float> dsum;  // per block: d · (float) Σ q (q4_k's min correction, once per row)
};
void quantize_activations(const float* x, int K, QuantizedRow& out);

// Matrix-vector products with quantized activations, by kernel: portable (scalar integer dot),
// avx2 (vpmaddubsw), avx512_vnni (vpdpbusd). quant_kernels_available: portable first, best last.
std::vector<GemvKernel> quant_kernels_available();

}  // namespace looplm
