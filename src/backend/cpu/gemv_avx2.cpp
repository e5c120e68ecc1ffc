// bf16 matrix-vector kernels for CPUs with AVX2 + FMA but no AVX-512 (e.g. AMD Zen 2, Intel
// before Skylake-X). GCC's auto-vectorised span_bf16_portable widens bf16 through unpack/shuffle
// sequences and was compute-bound on a Zen 2 core (~10 GB/s of weights against fp32's 16 GB/s);
// here, as in gemv.cpp's AVX-512 kernel, one 32-byte load holds 16 weights of a row, `w << 16` is
// its even columns as fp32 and `w & 0xffff0000` its odd ones (both exact), and x comes
// de-interleaved (xe = x[0::2], xo = x[1::2], zero-padded), so a weight costs a load, one integer
// op and one FMA per two columns.
#include "backend/cpu/gemv_avx2.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/bf16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace looplm {

#define LOOPLM_AVX2 __attribute__((target("avx2,fma")))

namespace {

// Σ of 8 lanes by a fixed tree (the same everywhere, so equal sums give equal bits).
LOOPLM_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

LOOPLM_AVX2 inline __m256 even(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
LOOPLM_AVX2 inline __m256 odd(__m256i w) {
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}

// One row segment of a 32-column chunk (w: 32 bf16; xe, xo: the chunk's 16 even / odd x values)
// into the row's even and odd accumulators. Every kernel below runs exactly these four FMAs in
// this order per (weight row, chunk, input row), which is what makes the few-rows kernel's
// outputs bit-identical to the matrix-vector kernel's.
LOOPLM_AVX2 inline void chunk(const uint16_t* w, const float* xe, const float* xo, __m256& e, __m256& o) {
  const __m256i lo = _mm256_loadu_si256((const __m256i*)w), hi = _mm256_loadu_si256((const __m256i*)(w + 16));
  e = _mm256_fmadd_ps(even(lo), _mm256_loadu_ps(xe), e);
  o = _mm256_fmadd_ps(odd(lo), _mm256_loadu_ps(xo), o);
  e = _mm256_fmadd_ps(even(hi), _mm256_loadu_ps(xe + 8), e);
  o = _mm256_fmadd_ps(odd(hi), _mm256_loadu_ps(xo + 8), o);
}

// A chunk narrower than 32 columns (the last, K % 32 wide): its weights copied into a zeroed
// 32-wide segment; x is zero past K, so the padding adds exact zeros.
LOOPLM_AVX2 inline void tail_chunk(const uint16_t* w, int rem, const float* xe, const float* xo, __m256& e, __m256& o) {
  alignas(32) uint16_t seg[32] = {};
  std::memcpy(seg, w, sizeof(uint16_t) * rem);
  chunk(seg, xe, xo, e, o);
}

LOOPLM_AVX2 inline void put(float* out, __m256 e, __m256 o, bool acc) {  // (a lambda would not inherit the target)
  const float s = hsum8(_mm256_add_ps(e, o));
  *out = acc ? *out + s : s;
}

// One plain (row-major) row: the last R % 4 rows of the decode layout.
LOOPLM_AVX2 inline float plain_row(const uint16_t* w, const float* xe, const float* xo, int K) {
  const int full = K / 32 * 32;
  __m256 e = _mm256_setzero_ps(), o = e;
  for (int i = 0; i < full; i += 32) chunk(w + i, xe + i / 2, xo + i / 2, e, o);
  if (K > full) tail_chunk(w + full, K - full, xe + full / 2, xo + full / 2, e, o);
  return hsum8(_mm256_add_ps(e, o));
}

// One weight row r of a 4-row block against MG input rows (X + g·ldxp: xe, xo at +half), from L1
// after the block's first pass; 2·MG accumulators.
template <int MG>
LOOPLM_AVX2 inline void block_row(const uint16_t* blk, int r, int K, const float* X, int ldxp, int half, float* Y,
                                  int ldy) {
  const int full = K / 32 * 32, rem = K - full;
  __m256 e[MG], o[MG];
  for (int g = 0; g < MG; ++g) e[g] = o[g] = _mm256_setzero_ps();
  const uint16_t* w = blk + r * 32;
  for (int i = 0; i < full; i += 32, w += 128) {
    const __m256i lo = _mm256_loadu_si256((const __m256i*)w), hi = _mm256_loadu_si256((const __m256i*)(w + 16));
    const __m256 el = even(lo), ol = odd(lo), eh = even(hi), oh = odd(hi);
    for (int g = 0; g < MG; ++g) {  // chunk()'s four FMAs, with the widened weights shared
      const float* xe = X + (int64_t)g * ldxp + i / 2;
      const float* xo = xe + half;
      e[g] = _mm256_fmadd_ps(el, _mm256_loadu_ps(xe), e[g]);
      o[g] = _mm256_fmadd_ps(ol, _mm256_loadu_ps(xo), o[g]);
      e[g] = _mm256_fmadd_ps(eh, _mm256_loadu_ps(xe + 8), e[g]);
      o[g] = _mm256_fmadd_ps(oh, _mm256_loadu_ps(xo + 8), o[g]);
    }
  }
  for (int g = 0; g < MG; ++g) {
    const float* xe = X + (int64_t)g * ldxp + full / 2;
    if (rem) tail_chunk(blk + (int64_t)full * 4 + r * rem, rem, xe, xe + half, e[g], o[g]);
    Y[(int64_t)g * ldy] = hsum8(_mm256_add_ps(e[g], o[g]));
  }
}

}  // namespace

bool have_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

LOOPLM_AVX2 void span_bf16_avx2(const uint16_t* W, const float* xe, const float* xo, int K, float* y, int n,
                                bool acc) {
  static_assert(kBf16Rows == 4 && kBf16Cols == 32, "the kernel is written for 4 x 32 chunks");
  const int full = K / 32 * 32, rem = K - full;
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const uint16_t* w = W + (int64_t)j * K;  // the block: one sequential stream of 4·K weights
    __m256 e0 = _mm256_setzero_ps(), o0 = e0, e1 = e0, o1 = e0, e2 = e0, o2 = e0, e3 = e0, o3 = e0;
    for (int i = 0; i < full; i += 32, w += 128) {
      chunk(w, xe + i / 2, xo + i / 2, e0, o0);
      chunk(w + 32, xe + i / 2, xo + i / 2, e1, o1);
      chunk(w + 64, xe + i / 2, xo + i / 2, e2, o2);
      chunk(w + 96, xe + i / 2, xo + i / 2, e3, o3);
    }
    if (rem) {
      tail_chunk(w, rem, xe + full / 2, xo + full / 2, e0, o0);
      tail_chunk(w + rem, rem, xe + full / 2, xo + full / 2, e1, o1);
      tail_chunk(w + 2 * rem, rem, xe + full / 2, xo + full / 2, e2, o2);
      tail_chunk(w + 3 * rem, rem, xe + full / 2, xo + full / 2, e3, o3);
    }
    put(y + j, e0, o0, acc);
    put(y + j + 1, e1, o1, acc);
    put(y + j + 2, e2, o2, acc);
    put(y + j + 3, e3, o3, acc);
  }
  for (; j < n; ++j) {
    const float s = plain_row(W + (int64_t)j * K, xe, xo, K);
    y[j] = acc ? y[j] + s : s;
  }
}

LOOPLM_AVX2 void span_bf16_avx2_rows(int M, const uint16_t* W, const float* X, int ldxp, int half, int K, float* Y,
                                     int ldy, int lo, int n) {
  int j = lo;
  for (; j + 4 <= lo + n; j += 4) {
    const uint16_t* blk = W + (int64_t)j * K;
    for (int r = 0; r < 4; ++r) {
      int m = 0;
      for (; m + 4 <= M; m += 4)
        block_row<4>(blk, r, K, X + (int64_t)m * ldxp, ldxp, half, Y + (int64_t)m * ldy + j + r, ldy);
      for (; m < M; ++m) block_row<1>(blk, r, K, X + (int64_t)m * ldxp, ldxp, half, Y + (int64_t)m * ldy + j + r, ldy);
    }
  }
  for (; j < lo + n; ++j)
    for (int m = 0; m < M; ++m) {
      const float* xe = X + (int64_t)m * ldxp;
      Y[(int64_t)m * ldy + j] = plain_row(W + (int64_t)j * K, xe, xe + half, K);
    }
}

}  // namespace looplm

#else
namespace looplm {
bool have_avx2_fma() { return false; }
void span_bf16_avx2(const uint16_t*, const float*, const float*, int, float*, int, bool) {}
void span_bf16_avx2_rows(int, const uint16_t*, const float*, int, int, int, float*, int, int, int) {}
}  // namespace looplm
#endif
