// q4_k (quant.h): the scalar reference (fitting a super-block's grid), packing, and the group
// kernels per ISA; the drivers are quant.cpp's (quant_driver.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/isa.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_driver.h"
#include "backend/cpu/quant_q4_block.h"
#include "backend/cpu/weight_format.h"


namespace looplm {

// One rounding (fma) wherever a q4_k value is formed — the reference, GPTQ's grid, the unpacking —
// so that packing values already on a grid gives them back bit for bit.
float GridQ4_K::value(int j, int u) const { return std::fma(d * (float)sc[j], (float)u, -(dmin * (float)m[j])); }

namespace {

constexpr int kHalf = kQBlock / 2;

// The (scale a ≥ 0, min b ≥ 0) of one sub-block, w ≈ a·u − b with u in 0..15, minimizing the squared
// error: alternate assigning codes and solving the 2 × 2 least-squares system for (a, b), from
// the full range and from two narrower ones (clipping the extremes can pay at 16 levels); the best
// fit seen wins. The grid's low end is at most 0 (b ≥ 0), as the format stores a min, not an offset.
void fit_sub_block(const float* x, int n, float* a_out, float* b_out) {
  float lo = 0, hi = -INFINITY;
  for (int i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  *a_out = 0;
  *b_out = -lo;
  if (n == 0 || !(hi > lo)) return;  // every value equal: w = lo exactly (or nothing to fit)
  auto error = [&](float a, float b) {
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const float u = std::clamp(std::nearbyint((x[i] + b) / a), 0.0f, 15.0f);
      e += (double)(a * u - b - x[i]) * (a * u - b - x[i]);
    }
    return e;
  };
  double best = INFINITY;
  for (float shrink : {1.0f, 0.9f, 0.8f}) {
    float a = shrink * (hi - lo) / 15.0f, b = -lo * shrink;
    for (int it = 0; it < 6 && a > 0; ++it) {
      const double e = error(a, b);
      if (e < best) best = e, *a_out = a, *b_out = b;
      double su = 0, suu = 0, sx = 0, sux = 0;
      for (int i = 0; i < n; ++i) {
        const double u = std::clamp(std::nearbyint((x[i] + b) / a), 0.0f, 15.0f);
        su += u, suu += u * u, sx += x[i], sux += u * x[i];
      }
      const double det = suu * n - su * su;
      if (det <= 0) break;  // one code for every value: nothing to solve
      double na = (n * sux - su * sx) / det, nb = (su * sux - suu * sx) / det;
      if (nb < 0) nb = 0, na = sux / suu;  // the grid may not start above 0
      if (!(na > 0)) break;
      a = (float)na, b = (float)nb;
    }
  }
}

// Codes of values on (or near) sub-block j's grid.
inline uint8_t code_on(const GridQ4_K& g, int j, float x) {
  const float a = g.d * (float)g.sc[j], b = g.dmin * (float)g.m[j];
  return a > 0 ? (uint8_t)std::clamp(std::nearbyint((x + b) / a), 0.0f, 15.0f) : 0;
}

// A 6-bit multiple of the stored fp16 scale s (0 when s is).
inline uint8_t six_bits(float v, float s) { return s > 0 ? (uint8_t)std::clamp(std::nearbyint(v / s), 0.0f, 63.0f) : 0; }

}  // namespace

GridQ4_K fit_grid_q4_k(const float* x, int n) {
  GridQ4_K g;
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) {  // NaN / Inf: NaN d and dmin, zero codes (a NaN super-block, as q8_0 / q4_0 do)
      g.d = g.dmin = NAN;
      return g;
    }
  float a[kQKSubs] = {}, b[kQKSubs] = {}, amax = 0, bmax = 0;
  for (int j = 0; j * kQBlock < n; ++j) {
    fit_sub_block(x + j * kQBlock, std::min(kQBlock, n - j * kQBlock), &a[j], &b[j]);
    amax = std::max(amax, a[j]), bmax = std::max(bmax, b[j]);
  }
  g.d = fp16_to_fp32(fp32_to_fp16(amax / 63.0f));
  g.dmin = fp16_to_fp32(fp32_to_fp16(bmax / 63.0f));
  for (int j = 0; j < kQKSubs; ++j) g.sc[j] = six_bits(a[j], g.d), g.m[j] = six_bits(b[j], g.dmin);
  return g;
}

void quantize_superblock_q4_k(const float* x, int n, const GridQ4_K& g, uint8_t* u) {
  for (int i = 0; i < n; ++i) u[i] = code_on(g, i / kQBlock, x[i]);
}

extern const WeightFormat kQ4_K;

namespace {

int64_t tiles(int64_t R) { return (R + kQTile - 1) / kQTile; }
int64_t col_blocks(int64_t C) { return (C + kQBlock - 1) / kQBlock; }
constexpr size_t kSubBytes = sizeof(BlockQ4_Kx16::qs[0]);  // one sub-block of a tile's codes
// Bytes of one tile: the whole super-blocks, then a header and the sub-blocks of the last.
size_t tile_bytes(int64_t C) {
  const int64_t full = C / kQKBlock, tail = col_blocks(C % kQKBlock);
  return (size_t)full * sizeof(BlockQ4_Kx16) + (tail ? kQKHeader + tail * kSubBytes : 0);
}
size_t q4k_bytes(int64_t R, int64_t C) { return (size_t)tiles(R) * tile_bytes(C); }
const BlockQ4_Kx16* super_block(const uint8_t* tile, int64_t s) {
  return reinterpret_cast<const BlockQ4_Kx16*>(tile + s * sizeof(BlockQ4_Kx16));
}

// ---------------------------------------------------------------- packing
// Code of row r, column c (0..31) of sub-block j: as q4_0's (quant.h).
inline uint8_t& code_byte(BlockQ4_Kx16* blk, int j, int r, int c) { return blk->qs[j][(c % kHalf) / 4][r][c % 4]; }
inline int code_at(const BlockQ4_Kx16* blk, int j, int r, int c) {
  const uint8_t b = blk->qs[j][(c % kHalf) / 4][r][c % 4];
  return c < kHalf ? b & 15 : b >> 4;
}

// Writes row r's grid and codes (u[256]: 0 past the matrix's columns) into super-block `blk`.
void put_row(BlockQ4_Kx16* blk, int r, const GridQ4_K& g, const uint8_t* u, int subs) {
  blk->d[r] = fp32_to_fp16(g.d);
  blk->dmin[r] = fp32_to_fp16(g.dmin);
  for (int j = 0; j < kQKSubs; ++j) {
    blk->sm_lo[j][r] = (uint8_t)((g.sc[j] & 15) | (g.m[j] & 15) << 4);
    const uint8_t top = (uint8_t)(g.sc[j] >> 4 | (g.m[j] >> 4) << 2);
    uint8_t& h = blk->sm_hi[j % 4][r];
    h = j < 4 ? (uint8_t)((h & 0xf0) | top) : (uint8_t)((h & 0x0f) | top << 4);
  }
  for (int j = 0; j < subs; ++j)
    for (int c = 0; c < kHalf; ++c) code_byte(blk, j, r, c) = (uint8_t)(u[j * kQBlock + c] | u[j * kQBlock + c + kHalf] << 4);
}

GridQ4_K get_row(const BlockQ4_Kx16* blk, int r) {
  GridQ4_K g;
  g.d = fp16_to_fp32(blk->d[r]);
  g.dmin = fp16_to_fp32(blk->dmin[r]);
  for (int j = 0; j < kQKSubs; ++j) {
    const int h = blk->sm_hi[j % 4][r], top = j < 4 ? h & 15 : h >> 4;
    g.sc[j] = (uint8_t)((blk->sm_lo[j][r] & 15) | (top & 3) << 4);
    g.m[j] = (uint8_t)((blk->sm_lo[j][r] >> 4) | (top >> 2) << 4);
  }
  return g;
}

// Every row's super-blocks through `grid(row, s, x, n)` (the fitted or the given grid).
template <class GridOf>
void pack_rows(const float* w, int64_t R, int64_t C, void* dst, GridOf grid) {
  auto* base = static_cast<uint8_t*>(dst);
  const int64_t supers = (C + kQKBlock - 1) / kQKBlock;
  std::memset(dst, 0, q4k_bytes(R, C));
  parallel_for<int64_t>(tiles(R), R * C > (1 << 18), [&](int64_t t) {
    for (int64_t s = 0; s < supers; ++s) {
      auto* blk = reinterpret_cast<BlockQ4_Kx16*>(base + t * tile_bytes(C) + s * sizeof(BlockQ4_Kx16));
      const int n = (int)std::min<int64_t>(kQKBlock, C - s * kQKBlock), subs = (int)col_blocks(n);
      for (int r = 0; r < kQTile; ++r) {
        const int64_t row = t * kQTile + r;
        uint8_t u[kQKBlock] = {};
        GridQ4_K gr;  // a padding row: all zero
        if (row < R) {
          const float* x = w + row * C + s * kQKBlock;
          gr = grid(row, s, x, n);
          quantize_superblock_q4_k(x, n, gr, u);
        }
        put_row(blk, r, gr, u, subs);
      }
    }
  });
}

void q4k_pack(const float* w, int64_t R, int64_t C, void* dst) {
  pack_rows(w, R, C, dst, [](int64_t, int64_t, const float* x, int n) { return fit_grid_q4_k(x, n); });
}

// Rows in order, super-block by super-block (ISA-cloned: the prefill path dequantizes 64-row
// panels with it at every long prompt).
LOOPLM_ISA_CLONES void q4k_unpack(const void* p, int64_t R, int64_t C, float* dst) {
  const auto* base = static_cast<const uint8_t*>(p);
  for (int64_t row = 0; row < R; ++row) {
    const int r = (int)(row % kQTile);
    const uint8_t* tile = base + (row / kQTile) * tile_bytes(C);
    for (int64_t s = 0; s * kQKBlock < C; ++s) {
      const BlockQ4_Kx16* blk = super_block(tile, s);
      const GridQ4_K g = get_row(blk, r);
      for (int j = 0; j < kQKSubs && s * kQKBlock + j * kQBlock < C; ++j) {
        const int64_t c0 = s * kQKBlock + j * kQBlock, n = std::min<int64_t>(kQBlock, C - c0);
        float* o = dst + row * C + c0;
        for (int64_t i = 0; i < n; ++i) o[i] = g.value(j, code_at(blk, j, r, (int)i));
      }
    }
  }
}

// ---------------------------------------------------------------- GPTQ's hooks: a grid is a super-block's GridQ4_K
constexpr int kGridFloats = 2 + 2 * kQKSubs;
void to_floats(const GridQ4_K& g, float* f) {
  f[0] = g.d, f[1] = g.dmin;
  for (int j = 0; j < kQKSubs; ++j) f[2 + j] = g.sc[j], f[2 + kQKSubs + j] = g.m[j];
}
GridQ4_K from_floats(const float* f) {
  GridQ4_K g;
  g.d = f[0], g.dmin = f[1];
  for (int j = 0; j < kQKSubs; ++j) g.sc[j] = (uint8_t)f[2 + j], g.m[j] = (uint8_t)f[2 + kQKSubs + j];
  return g;
}
void q4k_choose_grid(const float* x, int n, float* grid) { to_floats(fit_grid_q4_k(x, n), grid); }
float q4k_snap(float x, const float* grid, int i) {
  const GridQ4_K g = from_floats(grid);
  return g.value(i / kQBlock, code_on(g, i / kQBlock, x));
}
void q4k_pack_on_grids(const float* w, const float* grids, int64_t R, int64_t C, void* dst) {
  const int64_t supers = (C + kQKBlock - 1) / kQKBlock;
  pack_rows(w, R, C, dst, [&](int64_t row, int64_t s, const float*, int) {
    return from_floats(grids + (row * supers + s) * kGridFloats);
  });
}

// ---------------------------------------------------------------- the products of one tile
// Per super-block the 16 rows' sub-block scales d·sc and mins dmin·m, as S[j·16 + r], M[j·16 + r];
// then per sub-block j and row r quant.h's two fmas (the integer sum scaled, the min taken off).
void decode_scales(const BlockQ4_Kx16* blk, float* S, float* M) {
  for (int r = 0; r < kQTile; ++r) {
    const GridQ4_K g = get_row(blk, r);
    for (int j = 0; j < kQKSubs; ++j) S[j * kQTile + r] = g.d * (float)g.sc[j], M[j * kQTile + r] = g.dmin * (float)g.m[j];
  }
}

void tile_q4k_portable(const uint8_t* tile, int C, const QuantizedRow* const* x, int nx, float* out) {
  const int blocks = (int)col_blocks(C);
  for (int n = 0; n < nx; ++n) {
    float acc[kQTile] = {};
    for (int s = 0; s * kQKSubs < blocks; ++s) {
      const BlockQ4_Kx16* blk = super_block(tile, s);
      float S[kQKSubs * kQTile], M[kQKSubs * kQTile];
      decode_scales(blk, S, M);
      for (int j = 0; j < kQKSubs && s * kQKSubs + j < blocks; ++j) {
        const int b = s * kQKSubs + j;
        const int8_t* xq = x[n]->q.data() + (size_t)b * kQBlock;
        for (int r = 0; r < kQTile; ++r) {
          int32_t dot = 0;
          for (int c = 0; c < kQBlock; ++c) dot += code_at(blk, j, r, c) * xq[c];
          acc[r] = std::fma((float)dot, S[j * kQTile + r] * x[n]->d[b], acc[r]);
          acc[r] = std::fma(-M[j * kQTile + r], x[n]->dsum[b], acc[r]);
        }
      }
    }
    std::copy(acc, acc + kQTile, out + n * kQTile);
  }
}

#ifdef LOOPLM_QUANT_X86

// decode_scales with vector instructions, two sub-blocks (32 rows' bytes) a step: the 6-bit
// numbers from their low nibbles and top bits, widened to floats, times the rows' d / dmin.
LOOPLM_AVX2_Q inline void decode_scales_avx2(const BlockQ4_Kx16* blk, float* S, float* M) {
  const __m256i nib = _mm256_set1_epi8(15);
  const __m256 d[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)blk->d)),
                       _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(blk->d + 8)))};
  const __m256 dm[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)blk->dmin)),
                        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(blk->dmin + 8)))};
  for (int j = 0; j < kQKSubs; j += 2) {
    const __m256i L = _mm256_loadu_si256((const __m256i*)blk->sm_lo[j]);
    const __m256i H = _mm256_loadu_si256((const __m256i*)blk->sm_hi[j % 4]);
    const __m256i top = _mm256_and_si256(j < 4 ? H : _mm256_srli_epi16(H, 4), nib);
    const __m256i sc = _mm256_or_si256(_mm256_and_si256(L, nib), _mm256_slli_epi16(_mm256_and_si256(top, _mm256_set1_epi8(3)), 4));
    const __m256i m = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), nib),
                                      _mm256_slli_epi16(_mm256_and_si256(top, _mm256_set1_epi8(12)), 2));
    alignas(32) uint8_t scb[32], mb[32];
    _mm256_store_si256((__m256i*)scb, sc);
    _mm256_store_si256((__m256i*)mb, m);
    for (int k = 0; k < 32; k += 8) {  // rows 0-7, 8-15 of sub-block j, then of j + 1
      const int o = j * kQTile + k;
      _mm256_storeu_ps(S + o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(scb + k)))), d[k / 8 % 2]));
      _mm256_storeu_ps(M + o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(mb + k)))), dm[k / 8 % 2]));
    }
  }
}

// AVX2, as q4_0's tile_avx2: the two halves of the tile (rows 0-7, 8-15) in one pass for up to 2
// inputs, in two passes for more (one half's accumulators then fit the 16 registers); batch 1
// fetches the codes 1 KB ahead (quant.cpp: kTilePrefetchAhead's comment).
template <int NX>
LOOPLM_AVX2_Q void q4k_avx2(const uint8_t* tile, const QuantizedRow* const* x, float* out) {
  constexpr int kPasses = NX > 2 ? 2 : 1, kHalves = 2 / kPasses;
  const int8_t* xq[NX];
  for (int n = 0; n < NX; ++n) xq[n] = x[n]->q.data();
  const int blocks = x[0]->blocks;
  for (int pass = 0; pass < kPasses; ++pass) {
    __m256 acc[NX][kHalves];
    for (int n = 0; n < NX; ++n)
      for (int k = 0; k < kHalves; ++k) acc[n][k] = _mm256_setzero_ps();
    for (int s = 0; s * kQKSubs < blocks; ++s) {
      const BlockQ4_Kx16* blk = super_block(tile, s);
      alignas(32) float S[kQKSubs * kQTile], M[kQKSubs * kQTile];
      decode_scales_avx2(blk, S, M);
      for (int j = 0; j < kQKSubs && s * kQKSubs + j < blocks; ++j) {
        const int b = s * kQKSubs + j;
        const uint8_t* qs = &blk->qs[j][0][0][0];
        const size_t at = (size_t)b * kQBlock;
        if constexpr (NX == 1)
          for (int l = 0; l < (int)kSubBytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(qs) + 1024 + l, _MM_HINT_T0);
        for (int k = 0; k < kHalves; ++k) {
          const int h = pass * kHalves + k;
          __m256i I[NX];
          q4_half_sums_avx2<NX>(qs, h, xq, at, I);
          const __m256 sw = _mm256_load_ps(S + j * kQTile + 8 * h), mw = _mm256_load_ps(M + j * kQTile + 8 * h);
          for (int n = 0; n < NX; ++n) {
            const __m256 i = _mm256_cvtepi32_ps(I[n]);
            acc[n][k] = _mm256_fmadd_ps(i, _mm256_mul_ps(sw, _mm256_set1_ps(x[n]->d[b])), acc[n][k]);
            acc[n][k] = _mm256_fnmadd_ps(mw, _mm256_set1_ps(x[n]->dsum[b]), acc[n][k]);
          }
        }
      }
    }
    for (int n = 0; n < NX; ++n)
      for (int k = 0; k < kHalves; ++k) _mm256_storeu_ps(out + n * kQTile + 8 * (pass * kHalves + k), acc[n][k]);
  }
}
LOOPLM_AVX2_Q void tile_q4k_avx2(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q4k_avx2, g, x, nx, out)
}

// (g++ 12 warns falsely about the intrinsics' undefined pass-through operands once they inline.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// AVX-512 VNNI, as q4_0's tile_vnni: per sub-block one vpdpbusd per 4 columns of the 16 rows and
// input; the sub-block's 16 scales and mins are one register each. Batched calls fetch 4 KB ahead
// into L2 (tile_vnni's comment); one input splits its sums in two chains (lo / hi nibbles).
template <int NX>
LOOPLM_VNNI_Q void q4k_vnni(const uint8_t* tile, const QuantizedRow* const* x, float* out) {
  __m512 acc[NX];
  for (int n = 0; n < NX; ++n) acc[n] = _mm512_setzero_ps();
  const int8_t* xq[NX];
  const float *xd[NX], *xds[NX];
  for (int n = 0; n < NX; ++n) xq[n] = x[n]->q.data(), xd[n] = x[n]->d.data(), xds[n] = x[n]->dsum.data();
  const int blocks = x[0]->blocks;
  constexpr int kSplit = NX == 1 ? 2 : 1;
  for (int s = 0; s * kQKSubs < blocks; ++s) {
    const BlockQ4_Kx16* blk = super_block(tile, s);
    if constexpr (NX > 1)
      for (int l = 0; l < kQKHeader; l += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + 4096 + l, _MM_HINT_T1);
    alignas(64) float S[kQKSubs * kQTile], M[kQKSubs * kQTile];
    decode_scales_avx2(blk, S, M);
    for (int j = 0; j < kQKSubs && s * kQKSubs + j < blocks; ++j) {
      const int b = s * kQKSubs + j;
      const uint8_t* qs = &blk->qs[j][0][0][0];
      const size_t at = (size_t)b * kQBlock;
      if constexpr (NX > 1)
        for (int l = 0; l < (int)kSubBytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(qs) + 4096 + l, _MM_HINT_T1);
      __m512i I[NX][kSplit];
      for (int n = 0; n < NX; ++n)
        for (int k = 0; k < kSplit; ++k) I[n][k] = _mm512_setzero_si512();
      q4_block_sums_vnni<NX, kSplit>(qs, xq, at, I);
      const __m512 sw = _mm512_load_ps(S + j * kQTile), mw = _mm512_load_ps(M + j * kQTile);
#pragma GCC unroll 8
      for (int n = 0; n < NX; ++n) {
        const __m512i i = kSplit == 2 ? _mm512_add_epi32(I[n][0], I[n][kSplit - 1]) : I[n][0];
        acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(sw, _mm512_set1_ps(xd[n][b])), acc[n]);
        acc[n] = _mm512_fnmadd_ps(mw, _mm512_set1_ps(xds[n][b]), acc[n]);
      }
    }
  }
  for (int n = 0; n < NX; ++n) _mm512_storeu_ps(out + n * kQTile, acc[n]);
}
LOOPLM_VNNI_Q void tile_q4k_vnni(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS8(q4k_vnni, g, x, nx, out)
}
#pragma GCC diagnostic pop
constexpr GroupKernel kAvx2{tile_q4k_avx2, kQTile, 4}, kVnni{tile_q4k_vnni, kQTile, kGroupInputs};
#else
constexpr GroupKernel kAvx2{}, kVnni{};
#endif
constexpr GroupKernel kPortable{tile_q4k_portable, kQTile, kGroupInputs};

void q4k_gemv(int R, int C, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  quant_gemv(R, C, p, tile_bytes(C), x, y, acc, pick_group_kernel(k, kPortable, kAvx2, kVnni));
}
void q4k_gemm(int N, int R, int C, const void* p, const float* x, float* y, float* scratch) {
  quant_gemm(N, R, C, p, tile_bytes(C), x, y, scratch,
             pick_group_kernel(GemvKernel::best, kPortable, kAvx2, kVnni), q4k_unpack, kQ4_K.integer_rows);
}

}  // namespace

extern const WeightFormat kQ4_K = {
    "q4_k",
    "4-bit super-blocks of 256: 6-bit scale and min per 32, fp16 pair per 256 (4.5 bits per weight; activations int8 per block)",
    q4k_bytes, q4k_pack, q4k_unpack, q4k_gemv, q4k_gemm, quant_scratch, quant_kernels_available,
    kQKBlock, kGridFloats, q4k_choose_grid, q4k_snap, q4k_pack_on_grids, "tiles16", 128, kIntegerSerialDecodeFlops};

}  // namespace looplm
