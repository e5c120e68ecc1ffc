// q8_0 / q4_0 (quant.h): the scalar reference, packing, and the products per ISA. Each
// WeightFormat row at the end is what the format table (weight_format.cpp) lists.
#include "backend/cpu/quant.h"
#include "backend/cpu/cpu_features.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/isa.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quant_driver.h"
#include "backend/cpu/quant_q4_block.h"
#include "backend/cpu/weight_format.h"

namespace looplm {

// ---------------------------------------------------------------- fp16
uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to ≥ 65520: Inf
  if (ax < 0x38800000u) {  // below the smallest normal half: a subnormal (or zero), rounded to nearest even
    float a;
    std::memcpy(&a, &ax, 4);
    const float scaled = a * 16777216.0f;  // / 2^-24, the subnormal unit
    return (uint16_t)(sign | (uint32_t)std::nearbyint(scaled));
  }
  uint32_t m = ax + 0xc8000000u;  // rebias the exponent (127 -> 15)
  m += 0x0fffu + ((m >> 13) & 1u);  // round to nearest even at bit 13
  return (uint16_t)(sign | (m >> 13));
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp((float)m, -24);
    if (sign) f = -f;
    return f;
  }
  const uint32_t bits = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---------------------------------------------------------------- the scalar reference
namespace {
// Codes u = clamp(round(x / d), lo, hi) + offset of a block (n ≤ 32 values, the rest 0); a zero
// or non-finite scale: every code at the offset (the value 0, or NaN once multiplied by d).
void block_codes(const float* x, int n, float d, float lo, float hi, float offset, uint8_t* u) {
  const float id = d != 0 && std::isfinite(d) ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQBlock; ++i) {
    const float v = i < n ? std::nearbyint(x[i] * id) : 0.0f;
    u[i] = (uint8_t)(std::clamp(v, lo, hi) + offset);
  }
}
// A block holding NaN or Inf gets a NaN scale, so that it dequantizes to NaN (quantize
// --allow-nonfinite keeps what it was given non-finite; a plain load then refuses it). Without
// this the max skipped a NaN and the block came out finite and wrong.
bool block_finite(const float* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}
inline float block_amax(const float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}
// q8_0's weight scale base (the activations take block_amax without the finiteness pass).
inline float weight_amax(const float* x, int n) { return block_finite(x, n) ? block_amax(x, n) : NAN; }
// The value of largest magnitude, with its sign (q4_0's scale, llama.cpp's choice: it maps to −8 exactly).
float block_extreme(const float* x, int n) {
  if (!block_finite(x, n)) return NAN;
  float amax = 0, m = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  return m;
}
}  // namespace

void quantize_block_q8_0_scaled(const float* x, int n, float d, uint8_t* u) { block_codes(x, n, d, -127, 127, 128, u); }
void quantize_block_q4_0_scaled(const float* x, int n, float d, uint8_t* u) { block_codes(x, n, d, -8, 7, 8, u); }

void quantize_block_q8_0(const float* x, int n, uint16_t* d, uint8_t* u) {
  const float s = weight_amax(x, n) / 127.0f;
  *d = fp32_to_fp16(s);
  quantize_block_q8_0_scaled(x, n, s, u);
}

void quantize_block_q4_0(const float* x, int n, uint16_t* d, uint8_t* u) {
  const float s = block_extreme(x, n) / -8.0f;
  *d = fp32_to_fp16(s);
  quantize_block_q4_0_scaled(x, n, s, u);
}

// Per block: amax, scale, codes, sum (ISA-cloned, so that the loops vectorize where they can).
LOOPLM_ISA_CLONES static void quantize_blocks(const float* x, int K, int blocks, int8_t* q, float* dd, int32_t* sum) {
  for (int b = 0; b < blocks; ++b) {
    const int n = std::min(kQBlock, K - b * kQBlock);
    const float* xb = x + (int64_t)b * kQBlock;
    const float d = block_amax(xb, n) / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < n; ++i) {
      const int v = (int)std::nearbyint(xb[i] * id);
      q[(size_t)b * kQBlock + i] = (int8_t)v;
      s += v;
    }
    dd[b] = d;
    sum[b] = s;
  }
}

#ifdef LOOPLM_QUANT_X86
// (g++ 12 warns falsely about the intrinsics' undefined pass-through operands once they inline.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same with AVX-512: g++ calls libm's nearbyintf per value above (5% of a batched q8_0
// decode); vcvtps2dq rounds to nearest even as nearbyint does in the default rounding mode, and
// the scale is the same division, so the codes are the same. A partial last block: the loop above.
LOOPLM_VNNI_Q static void quantize_blocks_avx512(const float* x, int K, int blocks, int8_t* q, float* dd, int32_t* sum) {
  const int full = K / kQBlock;
  for (int b = 0; b < full; ++b) {
    const float* xb = x + (int64_t)b * kQBlock;
    const __m512 a = _mm512_loadu_ps(xb), c = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const __m512i ia = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(id)));
    const __m512i ic = _mm512_cvtps_epi32(_mm512_mul_ps(c, _mm512_set1_ps(id)));
    _mm_storeu_si128((__m128i*)(q + (size_t)b * kQBlock), _mm512_cvtsepi32_epi8(ia));
    _mm_storeu_si128((__m128i*)(q + (size_t)b * kQBlock + 16), _mm512_cvtsepi32_epi8(ic));
    dd[b] = d;
    sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(ia, ic));
  }
  if (full < blocks)
    quantize_blocks(x + (int64_t)full * kQBlock, K - full * kQBlock, blocks - full, q + (size_t)full * kQBlock, dd + full,
                    sum + full);
}
// The same with AVX2 (the scalar loop was a visible share of a batch-1 q4_0 decode): eight lanes
// of max|x|, vcvtps2dq's nearest-even rounding, and the codes packed down with saturation (they
// are within ±127 already).
LOOPLM_AVX2_Q static void quantize_blocks_avx2(const float* x, int K, int blocks, int8_t* q, float* dd, int32_t* sum) {
  const int full = K / kQBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int b = 0; b < full; ++b) {
    const float* xb = x + (int64_t)b * kQBlock;
    __m256 v[4], m = _mm256_setzero_ps();
    for (int c = 0; c < 4; ++c) m = _mm256_max_ps(m, _mm256_and_ps(v[c] = _mm256_loadu_ps(xb + 8 * c), abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float d = _mm_cvtss_f32(m4) / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    __m256i i[4], s = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) s = _mm256_add_epi32(s, i[c] = _mm256_cvtps_epi32(_mm256_mul_ps(v[c], _mm256_set1_ps(id))));
    // packs interleave the 128-bit lanes; the permute puts the 32 codes back in order
    const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i[0], i[1]), 0xd8);
    const __m256i q16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i[2], i[3]), 0xd8);
    _mm256_storeu_si256((__m256i*)(q + (size_t)b * kQBlock), _mm256_permute4x64_epi64(_mm256_packs_epi16(p16, q16), 0xd8));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    dd[b] = d;
    sum[b] = _mm_cvtsi128_si32(s4);
  }
  if (full < blocks)
    quantize_blocks(x + (int64_t)full * kQBlock, K - full * kQBlock, blocks - full, q + (size_t)full * kQBlock, dd + full,
                    sum + full);
}
#pragma GCC diagnostic pop
#endif

void quantize_activations(const float* x, int K, QuantizedRow& o) {
  o.blocks = (K + kQBlock - 1) / kQBlock;
  o.q.assign((size_t)o.blocks * kQBlock, 0);
  o.d.resize(o.blocks);
  o.sum.resize(o.blocks);
  o.dsum.resize(o.blocks);
#ifdef LOOPLM_QUANT_X86
  if (have_vnni_q())
    quantize_blocks_avx512(x, K, o.blocks, o.q.data(), o.d.data(), o.sum.data());
  else if (have_avx2_q())
    quantize_blocks_avx2(x, K, o.blocks, o.q.data(), o.d.data(), o.sum.data());
  else
#endif
    quantize_blocks(x, K, o.blocks, o.q.data(), o.d.data(), o.sum.data());
  for (int b = 0; b < o.blocks; ++b) o.dsum[b] = o.d[b] * (float)o.sum[b];
}

namespace {

int64_t tiles(int64_t R) { return (R + kQTile - 1) / kQTile; }
int64_t col_blocks(int64_t C) { return (C + kQBlock - 1) / kQBlock; }

// ---------------------------------------------------------------- packing (quant.h: the tile layout)
size_t q8_bytes(int64_t R, int64_t C) { return (size_t)(tiles(R) * col_blocks(C)) * sizeof(BlockQ8_0x16); }
size_t q4_bytes(int64_t R, int64_t C) { return (size_t)(tiles(R) * col_blocks(C)) * sizeof(BlockQ4_0x16); }

// Row r's 32 codes u into a tile's block, and back.
void place_codes(BlockQ8_0x16& blk, int r, const uint8_t* u) {
  for (int c = 0; c < kQBlock; ++c) blk.qs[c / 4][r][c % 4] = u[c];
}
void place_codes(BlockQ4_0x16& blk, int r, const uint8_t* u) {
  for (int c = 0; c < kQBlock / 2; ++c) blk.qs[c / 4][r][c % 4] = (uint8_t)(u[c] | (u[c + kQBlock / 2] << 4));
}
inline int code_at(const BlockQ8_0x16& blk, int r, int c) { return blk.qs[c / 4][r][c % 4]; }
inline int code_at(const BlockQ4_0x16& blk, int r, int c) {
  return c < kQBlock / 2 ? blk.qs[c / 4][r][c % 4] & 0x0f : blk.qs[(c - kQBlock / 2) / 4][r][c % 4] >> 4;
}

// Every row's block through `codes(row, b, n, &d, u)` (n: the block's columns, 0 for a padding row).
template <class Block, class Codes>
void pack_tiles(int64_t R, int64_t C, void* dst, Codes codes) {
  auto* B = static_cast<Block*>(dst);
  const int64_t nb = col_blocks(C);
  parallel_for<int64_t>(tiles(R), R * C > (1 << 18), [&](int64_t t) {
    for (int64_t b = 0; b < nb; ++b) {
      Block& blk = B[t * nb + b];
      for (int r = 0; r < kQTile; ++r) {
        const int64_t row = t * kQTile + r;
        uint8_t u[kQBlock];
        codes(row, b, row < R ? (int)std::min<int64_t>(kQBlock, C - b * kQBlock) : 0, &blk.d[r], u);
        place_codes(blk, r, u);
      }
    }
  });
}

void q8_pack(const float* w, int64_t R, int64_t C, void* dst) {
  pack_tiles<BlockQ8_0x16>(R, C, dst, [&](int64_t row, int64_t b, int n, uint16_t* d, uint8_t* u) {
    quantize_block_q8_0(n ? w + row * C + b * kQBlock : nullptr, n, d, u);
  });
}
void q4_pack(const float* w, int64_t R, int64_t C, void* dst) {
  pack_tiles<BlockQ4_0x16>(R, C, dst, [&](int64_t row, int64_t b, int n, uint16_t* d, uint8_t* u) {
    quantize_block_q4_0(n ? w + row * C + b * kQBlock : nullptr, n, d, u);
  });
}

// A row's block of codes (kBytes: 32 for q8_0, 16 nibble pairs for q4_0, low nibbles first) to its
// 32 values d · (u - kOffset).
template <int kOffset, int kBytes>
void dequant_block(const uint8_t* u, float d, float* v) {
  for (int c = 0; c < kBytes; ++c) v[c] = d * (float)((kOffset == 8 ? u[c] & 0x0f : u[c]) - kOffset);
  if constexpr (kOffset == 8)
    for (int c = 0; c < kBytes; ++c) v[kBytes + c] = d * (float)((u[c] >> 4) - kOffset);
}
#ifdef LOOPLM_QUANT_X86
// The same with AVX2, written out: g++ -O3 left the q4_0 loops above scalar.
LOOPLM_AVX2_Q inline void dequant8_avx2(__m128i u8, int offset, __m256 d, float* v) {
  const __m256i i = _mm256_sub_epi32(_mm256_cvtepu8_epi32(u8), _mm256_set1_epi32(offset));
  _mm256_storeu_ps(v, _mm256_mul_ps(_mm256_cvtepi32_ps(i), d));
}
template <int kOffset, int kBytes>
LOOPLM_AVX2_Q void dequant_block_avx2(const uint8_t* u, float d, float* v) {
  const __m256 vd = _mm256_set1_ps(d);
  __m128i part[2];
  if constexpr (kOffset == 8) {
    const __m128i b = _mm_loadu_si128((const __m128i*)u), m = _mm_set1_epi8(0x0f);
    part[0] = _mm_and_si128(b, m), part[1] = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  } else {
    part[0] = _mm_loadu_si128((const __m128i*)u), part[1] = _mm_loadu_si128((const __m128i*)(u + 16));
  }
  for (int h = 0; h < 2; ++h) {
    dequant8_avx2(part[h], kOffset, vd, v + 16 * h);
    dequant8_avx2(_mm_srli_si128(part[h], 8), kOffset, vd, v + 16 * h + 8);
  }
}
#endif

// Block by block: a row's bytes of a block gathered first (they lie in 4-byte runs 64 bytes
// apart), then converted. The many-rows path (long prompts, evaluation) dequantizes 64-row panels
// with it (a third of the time the gather byte by byte took: bench/README.md, "Kernel decisions").
template <class Block, int kOffset>
void unpack_tiles(const void* p, int64_t R, int64_t C, float* dst) {
  constexpr int kBytes = kOffset == 8 ? kQBlock / 2 : kQBlock;  // a row's bytes per block
  auto dequant = dequant_block<kOffset, kBytes>;
#ifdef LOOPLM_QUANT_X86
  if (have_avx2_q()) dequant = dequant_block_avx2<kOffset, kBytes>;
#endif
  const auto* B = static_cast<const Block*>(p);
  const int64_t nb = col_blocks(C);
  for (int64_t t = 0; t < tiles(R); ++t)
    for (int64_t b = 0; b < nb; ++b) {
      const Block& blk = B[t * nb + b];
      const int n = (int)std::min<int64_t>(kQBlock, C - b * kQBlock);
      for (int r = 0; r < kQTile && t * kQTile + r < R; ++r) {
        uint8_t u[kBytes];
        for (int g = 0; g < kBytes / 4; ++g) std::memcpy(u + 4 * g, blk.qs[g][r], 4);
        float v[kQBlock];
        dequant(u, fp16_to_fp32(blk.d[r]), v);
        std::memcpy(dst + (t * kQTile + r) * C + b * kQBlock, v, sizeof(float) * n);
      }
    }
}
void q8_unpack(const void* p, int64_t R, int64_t C, float* dst) { unpack_tiles<BlockQ8_0x16, 128>(p, R, C, dst); }
void q4_unpack(const void* p, int64_t R, int64_t C, float* dst) { unpack_tiles<BlockQ4_0x16, 8>(p, R, C, dst); }

// ---------------------------------------------------------------- the products of one tile
// Each kernel: out[n · 16 + r] = the tile's row r · x[n] (the quantized activations), n < nx, by
// quant.h's formula: the integer sums exact, then one fp32 multiply and one fma per row and block.
template <class Block, int kOffset>
void tile_portable(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  const auto* B = reinterpret_cast<const Block*>(g);
  for (int n = 0; n < nx; ++n) {
    float acc[kQTile] = {};
    for (int b = 0; b < x[n]->blocks; ++b) {
      const int8_t* xq = x[n]->q.data() + (size_t)b * kQBlock;
      for (int r = 0; r < kQTile; ++r) {
        int32_t s = 0;
        for (int c = 0; c < kQBlock; ++c) s += code_at(B[b], r, c) * xq[c];
        const float scale = fp16_to_fp32(B[b].d[r]) * x[n]->d[b];
        acc[r] = std::fma((float)(s - kOffset * x[n]->sum[b]), scale, acc[r]);
      }
    }
    std::copy(acc, acc + kQTile, out + n * kQTile);
  }
}
constexpr GroupKernel kQ8Portable{tile_portable<BlockQ8_0x16, 128>, kQTile, kGroupInputs};
constexpr GroupKernel kQ4Portable{tile_portable<BlockQ4_0x16, 8>, kQTile, kGroupInputs};

#ifdef LOOPLM_QUANT_X86
// AVX2: a 64-byte group of columns is two registers (rows 0–7, 8–15). vpmaddubsw multiplies
// unsigned by signed bytes into saturating int16 pairs, so q8's codes go in as |q| with q's sign
// moved onto x (≤ 2·127² fits; the sum is then Σ q·qx, no offset); q4's codes (≤ 15) go in directly.
// Up to 4 inputs a call: 16 ymm registers hold their accumulators.
template <int NX>
LOOPLM_AVX2_Q inline void tile_step_avx2_q8(__m256i A, __m256i S, const int8_t* const* xq, size_t at, __m256i* I) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
  for (int n = 0; n < NX; ++n) {
    const __m256i X = _mm256_sign_epi8(_mm256_set1_epi32(load4(xq[n] + at)), S);
    I[n] = _mm256_add_epi32(I[n], _mm256_madd_epi16(_mm256_maddubs_epi16(A, X), ones));
  }
}

// q4's steps (tile_step_avx2_q4, pin_sums): quant_q4_block.h.

// The two block halves (rows 0–7, 8–15) in one pass over the blocks for up to 2 inputs, in two
// passes for more (the accumulators of one half then fit in the 16 registers); 1 input is faster
// in one pass (bench/README.md, "Kernel decisions").
//
// At one input (batch-1 decoding) a matrix larger than the caches is a DRAM stream, and the q4
// kernel's work per byte (two nibble products per code byte) leaves too few cache lines in the
// out-of-order window for the hardware prefetcher alone to keep up, as in gemv_avx2.cpp's bf16
// kernel. Each block prefetches the bytes 1 KB ahead: the rest of the tile, then the next tile's
// (contiguous; past the last tile the hints touch nothing); 1 KB was the best distance measured
// (bench/README.md, "Kernel decisions").
constexpr int kTilePrefetchAhead = 1024;
constexpr int kBatchPrefetchAhead = 4096;  // tile_vnni, 2+ inputs
template <int NX, bool Q4>
LOOPLM_AVX2_Q void tile_avx2(const uint8_t* g, const QuantizedRow* const* x, float* out) {
  using Block = std::conditional_t<Q4, BlockQ4_0x16, BlockQ8_0x16>;
  constexpr int kPasses = NX > 2 ? 2 : 1, kHalves = 2 / kPasses;
  const auto* B = reinterpret_cast<const Block*>(g);
  const int8_t* xq[NX];
  for (int n = 0; n < NX; ++n) xq[n] = x[n]->q.data();
  const int blocks = x[0]->blocks;
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  for (int pass = 0; pass < kPasses; ++pass) {
    __m256 acc[NX][kHalves];
    for (int n = 0; n < NX; ++n)
      for (int k = 0; k < kHalves; ++k) acc[n][k] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; ++b) {
      const uint8_t* qs = &B[b].qs[0][0][0];
      const size_t at = (size_t)b * kQBlock;
      if constexpr (NX == 1)  // batch 1 streams the weights once: fetch them 1 KB ahead (below)
        for (int l = 0; l < (int)sizeof(Block); l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(B + b) + kTilePrefetchAhead + l, _MM_HINT_T0);
      for (int k = 0; k < kHalves; ++k) {
        const int h = pass * kHalves + k;
        __m256i I[NX];  // the block half's int32 sums per input
        if constexpr (Q4) {
          q4_half_sums_avx2<NX>(qs, h, xq, at, I);
        } else {
          for (int n = 0; n < NX; ++n) I[n] = _mm256_setzero_si256();
          for (int q = 0; q < kQBlock / 4; ++q) {
            const __m256i W = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(qs + q * 64 + h * 32)), flip);
            tile_step_avx2_q8<NX>(_mm256_abs_epi8(W), W, xq, at + 4 * q, I);
            pin_sums<NX>(I);
          }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(B[b].d + 8 * h)));
        for (int n = 0; n < NX; ++n) {
          __m256i i = I[n];
          if constexpr (Q4) i = _mm256_sub_epi32(i, _mm256_set1_epi32(8 * x[n]->sum[b]));
          acc[n][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, _mm256_set1_ps(x[n]->d[b])), acc[n][k]);
        }
      }
    }
    for (int n = 0; n < NX; ++n)
      for (int k = 0; k < kHalves; ++k) _mm256_storeu_ps(out + n * kQTile + 8 * (pass * kHalves + k), acc[n][k]);
  }
}
template <int NX>
LOOPLM_AVX2_Q void q8_avx2(const uint8_t* g, const QuantizedRow* const* x, float* out) { tile_avx2<NX, false>(g, x, out); }
template <int NX>
LOOPLM_AVX2_Q void q4_avx2(const uint8_t* g, const QuantizedRow* const* x, float* out) { tile_avx2<NX, true>(g, x, out); }
LOOPLM_AVX2_Q void group_q8_avx2(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q8_avx2, g, x, nx, out)
}
LOOPLM_AVX2_Q void group_q4_avx2(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q4_avx2, g, x, nx, out)
}

// (g++ 12 warns falsely about the intrinsics' undefined pass-through operands once they inline.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// AVX-512 VNNI: one 64-byte load is 4 columns of all 16 rows; one vpdpbusd per input row adds
// their products with 4 columns of x (broadcast) into the 16 rows' lanes. Up to 8 inputs a call.
//
// Batched (2+ inputs) the kernel reads a matrix larger than the caches at a fraction of the DRAM
// rate, yet the hardware prefetcher, which stops at each 4 KB page, left it waiting on the weight
// loads (perf: the hot instructions were the loads at each block's start). Each block then
// prefetches its bytes 4 KB ahead, a page past the one being read, into L2 (T1) rather than L1.
// One input, where the kernel runs near the DRAM rate, was no faster with it (the distances and
// hints measured: bench/README.md, "Kernel decisions"). The accumulators start at −offset · Σ qx (the same integer sum; one
// subtraction fewer per block and input).
template <int NX, bool Q4>
LOOPLM_VNNI_Q void tile_vnni(const uint8_t* g, const QuantizedRow* const* x, float* out) {
  using Block = std::conditional_t<Q4, BlockQ4_0x16, BlockQ8_0x16>;
  constexpr int kOffset = Q4 ? 8 : 128;
  const auto* B = reinterpret_cast<const Block*>(g);
  __m512 acc[NX];
  for (int n = 0; n < NX; ++n) acc[n] = _mm512_setzero_ps();
  const int8_t* xq[NX];
  const int32_t* xs[NX];
  const float* xd[NX];
  for (int n = 0; n < NX; ++n) xq[n] = x[n]->q.data(), xs[n] = x[n]->sum.data(), xd[n] = x[n]->d.data();
  const int blocks = x[0]->blocks;
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* qs = &B[b].qs[0][0][0];
    const size_t at = (size_t)b * kQBlock;
    if constexpr (NX > 1)  // batched: fetch 4 KB ahead into L2 (tile_vnni's comment)
      for (int l = 0; l < (int)sizeof(Block); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(B + b) + kBatchPrefetchAhead + l, _MM_HINT_T1);
    // Each input's sum starts at −offset · Σ qx (the same integer at the end, one subtraction fewer);
    // two sums for one input (the dependent vpdpbusd chain is then half as long).
    constexpr int kSplit = NX == 1 ? 2 : 1;
    __m512i I[NX][kSplit];
    for (int n = 0; n < NX; ++n) {
      I[n][0] = _mm512_set1_epi32(-kOffset * xs[n][b]);
      if constexpr (kSplit == 2) I[n][1] = _mm512_setzero_si512();
    }
    if constexpr (Q4) {
      q4_block_sums_vnni<NX, kSplit>(qs, xq, at, I);
    } else {
#pragma GCC unroll 8
      for (int q = 0; q < kQBlock / 4; ++q) {
        const __m512i W = _mm512_loadu_si512(qs + q * 64);
#pragma GCC unroll 8
        for (int n = 0; n < NX; ++n)
          I[n][q % kSplit] = _mm512_dpbusd_epi32(I[n][q % kSplit], W, _mm512_set1_epi32(load4(xq[n] + at + 4 * q)));
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)B[b].d));
#pragma GCC unroll 8
    for (int n = 0; n < NX; ++n) {
      const __m512i i = kSplit == 2 ? _mm512_add_epi32(I[n][0], I[n][kSplit - 1]) : I[n][0];
      acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(dw, _mm512_set1_ps(xd[n][b])), acc[n]);
    }
  }
  for (int n = 0; n < NX; ++n) _mm512_storeu_ps(out + n * kQTile, acc[n]);
}
template <int NX>
LOOPLM_VNNI_Q void q8_vnni(const uint8_t* g, const QuantizedRow* const* x, float* out) { tile_vnni<NX, false>(g, x, out); }
template <int NX>
LOOPLM_VNNI_Q void q4_vnni(const uint8_t* g, const QuantizedRow* const* x, float* out) { tile_vnni<NX, true>(g, x, out); }
LOOPLM_VNNI_Q void group_q8_vnni(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS8(q8_vnni, g, x, nx, out)
}
LOOPLM_VNNI_Q void group_q4_vnni(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS8(q4_vnni, g, x, nx, out)
}
#pragma GCC diagnostic pop

constexpr GroupKernel kQ8Avx2{group_q8_avx2, kQTile, 4}, kQ4Avx2{group_q4_avx2, kQTile, 4};
constexpr GroupKernel kQ8Vnni{group_q8_vnni, kQTile, kGroupInputs}, kQ4Vnni{group_q4_vnni, kQTile, kGroupInputs};
#else
constexpr GroupKernel kQ8Avx2{}, kQ4Avx2{}, kQ8Vnni{}, kQ4Vnni{};
#endif

}  // namespace

#ifdef LOOPLM_QUANT_X86
bool have_avx2_q() { return cpu_features().avx2_fma && cpu_features().f16c; }
bool have_vnni_q() { return cpu_features().avx512 && cpu_features().avx512_vnni && have_avx2_q(); }
#else
bool have_avx2_q() { return false; }
bool have_vnni_q() { return false; }
#endif

std::vector<GemvKernel> quant_kernels_available() {
  std::vector<GemvKernel> k = {GemvKernel::portable};
  if (have_avx2_q()) k.push_back(GemvKernel::avx2);
  if (have_vnni_q()) k.push_back(GemvKernel::avx512_vnni);
  return k;
}

GroupKernel pick_group_kernel(GemvKernel k, GroupKernel portable, GroupKernel avx2, GroupKernel vnni) {
  static const GemvKernel best = quant_kernels_available().back();
  if (k == GemvKernel::best) k = best;
  if (k == GemvKernel::avx512_vnni && vnni && have_vnni_q()) return vnni;
  if (k == GemvKernel::avx2 && avx2 && have_avx2_q()) return avx2;
  return portable;
}

// ---------------------------------------------------------------- the drivers (quant_driver.h)
void quant_gemv(int R, int C, const void* W, size_t group_bytes, const float* x, float* y, bool accumulate, GroupKernel f) {
  static thread_local QuantizedRow xq;
  quantize_activations(x, C, xq);
  const QuantizedRow* xs[1] = {&xq};
  const auto* p = static_cast<const uint8_t*>(W);
  const int rows = f.rows;
  const int64_t G = (R + rows - 1) / rows;
  const int64_t grain = std::max<int64_t>(1, kBalancedChunkBytes / (int64_t)group_bytes);
  parallel_balanced(G, grain, (int64_t)R * C > (1 << 15), [&](int64_t g0, int64_t count) {
    for (int64_t g = g0; g < g0 + count; ++g) {
      float o[kQTile];
      f.f(p + g * group_bytes, C, xs, 1, o);
      for (int r = 0; r < rows && g * rows + r < R; ++r) {
        float& t = y[g * rows + r];
        t = accumulate ? t + o[r] : o[r];
      }
    }
  });
}

constexpr int kPanel = 64;  // rows per dequantized panel (many rows)
static_assert(kPanel % kQTile == 0);

// y[N, R] for N ≤ kFewRows input rows: each row quantized once, then per group every row against
// its weights while they are in L1 (f.inputs at a time).
static void integer_products(int N, int R, int C, const uint8_t* p, size_t group_bytes, const float* x, float* y,
                             GroupKernel f) {
  static thread_local std::vector<QuantizedRow> xq;
  if ((int)xq.size() < N) xq.resize(N);
  const QuantizedRow* xs[kFewRows];
  for (int n = 0; n < N; ++n) {
    quantize_activations(x + (int64_t)n * C, C, xq[n]);
    xs[n] = &xq[n];
  }
  const int rows = f.rows;
  const int64_t G = (R + rows - 1) / rows;
  parallel_for<int64_t>(G, (int64_t)R * C * N > (1 << 15), [&](int64_t g) {
    for (int n0 = 0; n0 < N; n0 += f.inputs) {
      const int nx = std::min(f.inputs, N - n0);
      float o[kGroupInputs * kQTile];
      f.f(p + g * group_bytes, C, xs + n0, nx, o);
      for (int j = 0; j < nx; ++j)
        for (int r = 0; r < rows && g * rows + r < R; ++r) y[(int64_t)(n0 + j) * R + g * rows + r] = o[j * rows + r];
    }
  });
}

void quant_gemm(int N, int R, int C, const void* W, size_t group_bytes, const float* x, float* y, float* scratch,
                GroupKernel f, UnpackFn unpack, int max_integer_rows) {
  const auto* p = static_cast<const uint8_t*>(W);
  const int rows = f.rows;
  if (N <= std::max(kFewRows, max_integer_rows)) {
    for (int n0 = 0; n0 < N; n0 += kFewRows)
      integer_products(std::min(kFewRows, N - n0), R, C, p, group_bytes, x + (int64_t)n0 * C, y + (int64_t)n0 * R, f);
    return;
  }
  // The activations as the integer kernels see them (int8 per block of 32, dequantized), so that
  // every path computes the same function up to fp32 summation order: a prompt or an evaluation
  // batch gets the logits decoding would give, whatever its number of rows.
  static thread_local std::vector<float> xd_store;
  static thread_local QuantizedRow row;
  xd_store.resize((size_t)N * C);
  float* xd = xd_store.data();  // (a thread_local name is another object inside the parallel region)
  for (int n = 0; n < N; ++n) {
    quantize_activations(x + (int64_t)n * C, C, row);
    for (int c = 0; c < C; ++c) xd[(int64_t)n * C + c] = row.d[c / kQBlock] * (float)row.q[c];
  }
  const int panels = (R + kPanel - 1) / kPanel;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < panels; ++i) {
    const int r0 = i * kPanel, n = std::min(kPanel, R - r0);
    float* w = scratch + (size_t)omp_get_thread_num() * kPanel * C;
    unpack(p + (int64_t)(r0 / rows) * group_bytes, n, C, w);  // a panel starts on a row group: a standalone [n, C] matrix
    gemm(false, true, N, n, C, 1.0f, xd, C, w, C, 0.0f, y + r0, R);  // sequential inside a parallel region
  }
}
size_t quant_scratch(int64_t, int64_t C) { return (size_t)omp_get_max_threads() * kPanel * (size_t)C; }

extern const WeightFormat kQ8_0, kQ4_0;

namespace {

size_t q8_group_bytes(int C) { return (size_t)col_blocks(C) * sizeof(BlockQ8_0x16); }
size_t q4_group_bytes(int C) { return (size_t)col_blocks(C) * sizeof(BlockQ4_0x16); }
void q8_gemv(int R, int C, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  quant_gemv(R, C, p, q8_group_bytes(C), x, y, acc, pick_group_kernel(k, kQ8Portable, kQ8Avx2, kQ8Vnni));
}
void q8_gemm(int N, int R, int C, const void* p, const float* x, float* y, float* scratch) {
  quant_gemm(N, R, C, p, q8_group_bytes(C), x, y, scratch, pick_group_kernel(GemvKernel::best, kQ8Portable, kQ8Avx2, kQ8Vnni),
             q8_unpack, kQ8_0.integer_rows);
}
void q4_gemv(int R, int C, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  quant_gemv(R, C, p, q4_group_bytes(C), x, y, acc, pick_group_kernel(k, kQ4Portable, kQ4Avx2, kQ4Vnni));
}
void q4_gemm(int N, int R, int C, const void* p, const float* x, float* y, float* scratch) {
  quant_gemm(N, R, C, p, q4_group_bytes(C), x, y, scratch, pick_group_kernel(GemvKernel::best, kQ4Portable, kQ4Avx2, kQ4Vnni),
             q4_unpack, kQ4_0.integer_rows);
}

// ---------------------------------------------------------------- GPTQ's hooks: a grid is a block's scale
void q8_choose_grid(const float* x, int n, float* g) { *g = fp16_to_fp32(fp32_to_fp16(weight_amax(x, n) / 127.0f)); }
void q4_choose_grid(const float* x, int n, float* g) { *g = fp16_to_fp32(fp32_to_fp16(block_extreme(x, n) / -8.0f)); }
float q8_snap(float x, const float* g, int) { return *g == 0 ? 0.0f : *g * std::clamp(std::nearbyint(x / *g), -127.0f, 127.0f); }
float q4_snap(float x, const float* g, int) { return *g == 0 ? 0.0f : *g * std::clamp(std::nearbyint(x / *g), -8.0f, 7.0f); }

template <class Block, bool Q4>
void pack_on_grids(const float* w, const float* scales, int64_t R, int64_t C, void* dst) {
  const int64_t nb = col_blocks(C);
  pack_tiles<Block>(R, C, dst, [&](int64_t row, int64_t b, int n, uint16_t* d, uint8_t* u) {
    const float s = n ? scales[row * nb + b] : 0.0f;
    *d = fp32_to_fp16(s);
    const float* x = n ? w + row * C + b * kQBlock : nullptr;
    if (Q4) quantize_block_q4_0_scaled(x, n, s, u);
    else quantize_block_q8_0_scaled(x, n, s, u);
  });
}

}  // namespace

extern const WeightFormat kQ8_0 = {
    "q8_0", "int8 blocks of 32 with an fp16 scale (8.5 bits per weight; activations int8 per block in the products)",
    q8_bytes, q8_pack, q8_unpack, q8_gemv, q8_gemm, quant_scratch, quant_kernels_available,
    kQBlock, 1, q8_choose_grid, q8_snap, pack_on_grids<BlockQ8_0x16, false>, "tiles16", 128, kIntegerSerialDecodeFlops};
extern const WeightFormat kQ4_0 = {
    "q4_0", "4-bit blocks of 32 with an fp16 scale (4.5 bits per weight; activations int8 per block in the products)",
    q4_bytes, q4_pack, q4_unpack, q4_gemv, q4_gemm, quant_scratch, quant_kernels_available,
    kQBlock, 1, q4_choose_grid, q4_snap, pack_on_grids<BlockQ4_0x16, true>, "tiles16", 128, kIntegerSerialDecodeFlops};

}  // namespace looplm
