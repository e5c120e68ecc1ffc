// Weight-only quantized formats (issue 9; SPEC §2.5): q8_0 and q4_0, llama.cpp's block
// quantizations (32 weights and one fp16 scale per block) in a layout for the stream: the blocks of
// 4 consecutive rows at the same 32 columns sit together, so one pass over a 4-row group reads one
// sequential stream (like bf16.h's layout). A matrix [R, C] is stored as ceil(R/4) row groups of
// ceil(C/32) group blocks, rows and columns padded with zeros.
//
//   q8_0: w = d · (u − 128), u = q + 128 in 0..255, q = round(w / d) in −127..127, d = amax / 127
//   q4_0: w = d · (u − 8),   u in 0..15 (two per byte: element i in the low nibble of byte i,
//         element i + 16 in the high one), d = m / −8 with m the block's value of largest |w|
//
// Weights are stored unsigned (u) so that the integer dot products multiply them with int8
// activations directly (VNNI's vpdpbusd takes unsigned × signed); the offset comes back as
// −offset · Σ qx per block. The products quantize the activations too, per block of 32 to int8
// with their own scale (as llama.cpp does for these formats): the kernels compute
//   y_r = Σ_b d_{r,b} · dx_b · (Σ_i u_{r,b,i} · qx_{b,i} − offset · Σ_i qx_{b,i}).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/gemm.h"

namespace looplm {

constexpr int kQBlock = 32;     // weights per block (one scale)
constexpr int kQRows = 4;       // rows per group

struct BlockQ8_0x4 {
  uint16_t d[kQRows];           // fp16 scales of the 4 rows' blocks
  uint8_t qs[kQRows][kQBlock];  // u = q + 128
};
static_assert(sizeof(BlockQ8_0x4) == 136, "q8_0: 4 x (2 + 32) bytes, 8.5 bits per weight");

struct BlockQ4_0x4 {
  uint16_t d[kQRows];                 // fp16 scales
  uint8_t qs[kQRows][kQBlock / 2];    // u (0..15): element i low nibble of byte i, element i + 16 high nibble
};
static_assert(sizeof(BlockQ4_0x4) == 72, "q4_0: 4 x (2 + 16) bytes, 4.5 bits per weight");

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
};
void quantize_activations(const float* x, int K, QuantizedRow& out);

// Matrix-vector products with quantized activations, by kernel: portable (scalar integer dot),
// avx2 (vpmaddubsw), avx512_vnni (vpdpbusd). quant_kernels_available: portable first, best last.
std::vector<GemvKernel> quant_kernels_available();

}  // namespace looplm
