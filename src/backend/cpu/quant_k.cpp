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

int64_t row_groups(int64_t R) { return (R + kQRows - 1) / kQRows; }
int64_t col_blocks(int64_t C) { return (C + kQBlock - 1) / kQBlock; }
// Bytes of one row group: the whole super-blocks, then a header and the sub-blocks of the last.
size_t group_bytes(int64_t C) {
  const int64_t full = C / kQKBlock, tail = col_blocks(C % kQKBlock);
  return (size_t)full * sizeof(BlockQ4_Kx4) + (tail ? kQKHeader + tail * kQRows * kHalf : 0);
}
size_t q4k_bytes(int64_t R, int64_t C) { return (size_t)row_groups(R) * group_bytes(C); }

// ---------------------------------------------------------------- packing
// Writes row r's grid and codes (u[256]: 0 past the matrix's columns) into super-block `blk`.
void put_row(BlockQ4_Kx4* blk, int r, const GridQ4_K& g, const uint8_t* u, int subs) {
  blk->d[r] = fp32_to_fp16(g.d);
  blk->dmin[r] = fp32_to_fp16(g.dmin);
  for (int j = 0; j < kQKSubs; ++j) {
    const int k = j * kQRows + r;
    blk->sm_lo[k] = (uint8_t)((g.sc[j] & 15) | (g.m[j] & 15) << 4);
    const uint8_t top = (uint8_t)(g.sc[j] >> 4 | (g.m[j] >> 4) << 2);
    uint8_t& h = blk->sm_hi[k % 16];
    h = k < 16 ? (uint8_t)((h & 0xf0) | top) : (uint8_t)((h & 0x0f) | top << 4);
  }
  for (int j = 0; j < subs; ++j)
    for (int i = 0; i < kHalf; ++i) blk->qs[j][r][i] = (uint8_t)(u[j * kQBlock + i] | u[j * kQBlock + i + kHalf] << 4);
}

GridQ4_K get_row(const BlockQ4_Kx4* blk, int r) {
  GridQ4_K g;
  g.d = fp16_to_fp32(blk->d[r]);
  g.dmin = fp16_to_fp32(blk->dmin[r]);
  for (int j = 0; j < kQKSubs; ++j) {
    const int k = j * kQRows + r;
    const int top = k < 16 ? blk->sm_hi[k] & 15 : blk->sm_hi[k - 16] >> 4;
    g.sc[j] = (uint8_t)((blk->sm_lo[k] & 15) | (top & 3) << 4);
    g.m[j] = (uint8_t)((blk->sm_lo[k] >> 4) | (top >> 2) << 4);
  }
  return g;
}

// Every row's super-blocks through `grid(row, s, x, n)` (the fitted or the given grid).
template <class GridOf>
void pack_rows(const float* w, int64_t R, int64_t C, void* dst, GridOf grid) {
  auto* base = static_cast<uint8_t*>(dst);
  const int64_t supers = (C + kQKBlock - 1) / kQKBlock;
  std::memset(dst, 0, q4k_bytes(R, C));
  parallel_for<int64_t>(row_groups(R), R * C > (1 << 18), [&](int64_t g) {
    for (int64_t s = 0; s < supers; ++s) {
      auto* blk = reinterpret_cast<BlockQ4_Kx4*>(base + g * group_bytes(C) + s * sizeof(BlockQ4_Kx4));
      const int n = (int)std::min<int64_t>(kQKBlock, C - s * kQKBlock), subs = (int)col_blocks(n);
      for (int r = 0; r < kQRows; ++r) {
        const int64_t row = g * kQRows + r;
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
    const int r = (int)(row % kQRows);
    const uint8_t* group = base + (row / kQRows) * group_bytes(C);
    for (int64_t s = 0; s * kQKBlock < C; ++s) {
      const auto* blk = reinterpret_cast<const BlockQ4_Kx4*>(group + s * sizeof(BlockQ4_Kx4));
      const GridQ4_K g = get_row(blk, r);
      for (int j = 0; j < kQKSubs && s * kQKBlock + j * kQBlock < C; ++j) {
        const int64_t c0 = s * kQKBlock + j * kQBlock, n = std::min<int64_t>(kQBlock, C - c0);
        const uint8_t* q = blk->qs[j][r];
        float* o = dst + row * C + c0;
        for (int64_t i = 0; i < n; ++i) o[i] = g.value(j, i < kHalf ? q[i] & 15 : q[i - kHalf] >> 4);
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

// ---------------------------------------------------------------- the products of one row group
// Per super-block the 4 rows' sub-block scales d·sc and mins dmin·m, as S[j·4 + r], M[j·4 + r];
// then per sub-block j, as q4_0: y += dx · (S_j · Σ u·qx − M_j · Σ qx).
void decode_scales(const BlockQ4_Kx4* blk, float* S, float* M) {
  for (int r = 0; r < kQRows; ++r) {
    const GridQ4_K g = get_row(blk, r);
    for (int j = 0; j < kQKSubs; ++j) S[j * kQRows + r] = g.d * (float)g.sc[j], M[j * kQRows + r] = g.dmin * (float)g.m[j];
  }
}

void group_q4k_portable(const uint8_t* group, int C, const QuantizedRow* const* x, int nx, float* out) {
  const int blocks = (int)col_blocks(C);
  for (int n = 0; n < nx; ++n) {
    float acc[kQRows] = {0, 0, 0, 0};
    for (int s = 0; s * kQKSubs < blocks; ++s) {
      const auto* blk = reinterpret_cast<const BlockQ4_Kx4*>(group + s * sizeof(BlockQ4_Kx4));
      float S[kQKSubs * kQRows], M[kQKSubs * kQRows];
      decode_scales(blk, S, M);
      for (int j = 0; j < kQKSubs && s * kQKSubs + j < blocks; ++j) {
        const int b = s * kQKSubs + j;
        const int8_t* xq = x[n]->q.data() + (size_t)b * kQBlock;
        for (int r = 0; r < kQRows; ++r) {
          int32_t dot = 0;
          for (int i = 0; i < kHalf; ++i) dot += (blk->qs[j][r][i] & 15) * xq[i] + (blk->qs[j][r][i] >> 4) * xq[i + kHalf];
          acc[r] += x[n]->d[b] * (S[j * kQRows + r] * (float)dot - M[j * kQRows + r] * (float)x[n]->sum[b]);
        }
      }
    }
    std::copy(acc, acc + kQRows, out + n * kQRows);
  }
}

#ifdef LOOPLM_QUANT_X86

// decode_scales with vector instructions: the 32 low nibble pairs and 32 top-bit nibbles, widened
// to floats and multiplied by the rows' d / dmin (lane k's row is k mod 4).
LOOPLM_AVX2_Q inline void decode_scales_avx2(const BlockQ4_Kx4* blk, float* S, float* M) {
  const __m256i L = _mm256_loadu_si256((const __m256i*)blk->sm_lo);
  const __m128i H = _mm_loadu_si128((const __m128i*)blk->sm_hi);
  const __m256i nib = _mm256_set1_epi8(15);
  const __m256i top = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(H, 4), H), nib);
  const __m256i sc = _mm256_or_si256(_mm256_and_si256(L, nib), _mm256_slli_epi16(_mm256_and_si256(top, _mm256_set1_epi8(3)), 4));
  const __m256i m = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), nib),
                                    _mm256_slli_epi16(_mm256_and_si256(top, _mm256_set1_epi8(12)), 2));
  const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)blk->d)), m4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)blk->dmin));
  const __m256 D = _mm256_set_m128(d4, d4), Dm = _mm256_set_m128(m4, m4);
  alignas(32) uint8_t scb[32], mb[32];
  _mm256_store_si256((__m256i*)scb, sc);
  _mm256_store_si256((__m256i*)mb, m);
  for (int k = 0; k < 32; k += 8) {
    _mm256_storeu_ps(S + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(scb + k)))), D));
    _mm256_storeu_ps(M + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(mb + k)))), Dm));
  }
}

// The sub-blocks through quant_q4_block.h, with their scales and mins from the super-block.
template <int NX>
LOOPLM_AVX2_Q void q4k_avx2(const uint8_t* group, const QuantizedRow* const* x, float* out) {
  __m256 acc01[NX], acc23[NX];
  __m128 corr[NX];
  for (int n = 0; n < NX; ++n) acc01[n] = acc23[n] = _mm256_setzero_ps(), corr[n] = _mm_setzero_ps();
  const int blocks = x[0]->blocks;
  for (int s = 0; s * kQKSubs < blocks; ++s) {
    const auto* blk = reinterpret_cast<const BlockQ4_Kx4*>(group + s * sizeof(BlockQ4_Kx4));
    alignas(32) float S[kQKSubs * kQRows], M[kQKSubs * kQRows];
    decode_scales_avx2(blk, S, M);
    for (int j = 0; j < kQKSubs && s * kQKSubs + j < blocks; ++j)
      q4_block_avx2<NX>(blk->qs[j][0], _mm_load_ps(S + j * kQRows), _mm_load_ps(M + j * kQRows), s * kQKSubs + j, x,
                              acc01, acc23, corr);
  }
  q4_reduce_avx2<NX>(acc01, acc23, corr, out);
}

LOOPLM_AVX2_Q void group_q4k_avx2(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q4k_avx2, g, x, nx, out)
}

// VNNI takes up to 8 inputs a call (the scales decoded and each 64-byte load unpacked once for
// all of them; the AVX2 kernel's 16 registers hold 4), the scales spread to the lanes once per
// sub-block, d · Σqx once per input row (QuantizedRow::dsum), and batched calls prefetch 4 KB
// ahead. Zen 5, 1 thread, 8 x d1024 llama q4_k, 8 sequences, int8 cache, 3 interleaved runs
// (-n 100): 586-600 -> 862-886 tokens/s (without the prefetch 744-770); batch 1 389-392 -> 406-424.
// The 4-row groups still cost ~4 instructions per vpdpbusd against q4_0's tiles' ~1.5 (8 inputs
// and the weights in L3: ~110 against ~225 GMAC/s): q4_k in 16-row tiles is the next step.
template <int NX>
LOOPLM_VNNI_Q void q4k_vnni(const uint8_t* group, const QuantizedRow* const* x, float* out) {
  __m512 acc[NX];
  __m128 corr[NX];
  for (int n = 0; n < NX; ++n) acc[n] = _mm512_setzero_ps(), corr[n] = _mm_setzero_ps();
  const int blocks = x[0]->blocks;
  for (int s = 0; s * kQKSubs < blocks; ++s) {
    const auto* blk = reinterpret_cast<const BlockQ4_Kx4*>(group + s * sizeof(BlockQ4_Kx4));
    if constexpr (NX > 1)  // batched: 4 KB ahead, as quant.cpp's tile_vnni
      for (int l = 0; l < (int)sizeof(BlockQ4_Kx4); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk) + 4096 + l, _MM_HINT_T0);
    alignas(32) float S[kQKSubs * kQRows], M[kQKSubs * kQRows];
    decode_scales_avx2(blk, S, M);
    for (int j = 0; j < kQKSubs && s * kQKSubs + j < blocks; ++j)
      q4_block_vnni<NX>(blk->qs[j][0], _mm_load_ps(S + j * kQRows), _mm_load_ps(M + j * kQRows), s * kQKSubs + j, x,
                              acc, corr);
  }
  q4_reduce_vnni<NX>(acc, corr, out);
}
LOOPLM_VNNI_Q void group_q4k_vnni(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS8(q4k_vnni, g, x, nx, out)
}
constexpr GroupKernel kAvx2{group_q4k_avx2, kQRows, 4}, kVnni{group_q4k_vnni, kQRows, kGroupInputs};
#else
constexpr GroupKernel kAvx2{}, kVnni{};
#endif
constexpr GroupKernel kPortable{group_q4k_portable, kQRows, 4};

void q4k_gemv(int R, int C, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  quant_gemv(R, C, p, group_bytes(C), x, y, acc, pick_group_kernel(k, kPortable, kAvx2, kVnni));
}
void q4k_gemm(int N, int R, int C, const void* p, const float* x, float* y, float* scratch) {
  quant_gemm(N, R, C, p, group_bytes(C), x, y, scratch,
             pick_group_kernel(GemvKernel::best, kPortable, kAvx2, kVnni), q4k_unpack, kQ4_K.integer_rows);
}

}  // namespace

extern const WeightFormat kQ4_K = {
    "q4_k",
    "4-bit super-blocks of 256: 6-bit scale and min per 32, fp16 pair per 256 (4.5 bits per weight; activations int8 per block)",
    kQRows, kQKBlock, q4k_bytes, q4k_pack, q4k_unpack, q4k_gemv, q4k_gemm, quant_scratch, quant_kernels_available,
    kQKBlock, kGridFloats, q4k_choose_grid, q4k_snap, q4k_pack_on_grids, "rows4", kFewRows};

}  // namespace looplm
