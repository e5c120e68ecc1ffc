// bf16 matrix-vector kernels for CPUs with AVX2 + FMA but no AVX-512 (e.g. AMD Zen 2, Intel
// before Skylake-X). GCC's auto-vectorised span_bf16_portable widens bf16 through unpack/shuffle
// sequences and was compute-bound (it read its weights well below fp32's stream: bench/README.md, "Kernel decisions");
// here, as in gemv.cpp's AVX-512 kernel, one 32-byte load holds 16 weights of a row, `w << 16` is
// its even columns as fp32 and `w & 0xffff0000` its odd ones (both exact), and x comes
// de-interleaved (xe = x[0::2], xo = x[1::2], zero-padded), so 16 weights cost one load, two
// integer ops and two FMAs.
#include "backend/cpu/gemv_avx2.h"
#include "backend/cpu/cpu_features.h"

#include <cstdlib>
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

// RB weight rows against MG input rows, RB·MG accumulators of 8 lanes. Row r's segment of the
// chunk at column i is base + (i / 32)·cs + r·32 (cs = 128 in a 4-row block of the decode layout, 32
// for a plain row-major row) and its last, narrower one (rem = K % 32 wide) base + (K / 32)·cs + r·rem,
// copied into a zeroed 32-wide segment (x is zero past K, so the padding adds exact zeros). Input
// g's xe is at X + g·ldxp, its xo `half` further. Per (row, input, chunk) the sum takes the same four
// operations in the same order whatever RB and MG are (columns 0-15, then 16-31), which
// is what makes the few-rows kernel's outputs bit-identical to the matrix-vector kernel's.
//
// One accumulator per (row, input), so that the few-rows kernel holds 2 rows × 4 inputs in
// registers (16 FMAs per 10 loads; one row against 4 inputs with even / odd accumulators took 18
// loads per 16 FMAs). Both kernels run at the core's FMA rate when the weights are in cache, so
// what batching gains on such a CPU is bounded by that rate against the memory stream's (README,
// batched decoding; bench/README.md, "Kernel decisions").
// (A product, an FMA and an add per 16 columns, to shorten the dependency chain, measured the same.)
template <int RB, int MG>
LOOPLM_AVX2 inline void chunk_step(__m256 (&a)[RB][MG], const uint16_t* const* seg, const float* const* xe, int half,
                                   int64_t i) {  // one chunk of every row; x's chunk at column i
  for (int h = 0; h < 2; ++h) {  // columns 16h .. 16h + 15
    __m256 we[RB], wo[RB];
    for (int r = 0; r < RB; ++r) {
      const __m256i w = _mm256_loadu_si256((const __m256i*)(seg[r] + 16 * h));
      we[r] = even(w), wo[r] = odd(w);
    }
    for (int g = 0; g < MG; ++g) {
      const float* x = xe[g] + i / 2 + 8 * h;
      const __m256 ve = _mm256_loadu_ps(x), vo = _mm256_loadu_ps(x + half);
      for (int r = 0; r < RB; ++r) {
        a[r][g] = _mm256_fmadd_ps(we[r], ve, a[r][g]);
        a[r][g] = _mm256_fmadd_ps(wo[r], vo, a[r][g]);
      }
    }
  }
}

// The weights stream is prefetched 1 KB (512 values) ahead of the chunk being read, up to the end of
// the span. The bf16 kernel does twice fp32's work per byte, so fewer cache lines fit in the core's
// out-of-order window and the hardware prefetcher alone leaves it behind fp32's stream; 1 KB ahead
// was the best distance measured (bench/README.md, "Kernel decisions").
constexpr int64_t kPrefetchAhead = 512;

// Rows r0 .. r0 + RB - 1 (of a block; r0 = 0 for a plain row); outputs Y[g·ldy + r].
template <int RB, int MG>
LOOPLM_AVX2 inline void rows_by_inputs(const uint16_t* base, int cs, int r0, int K, const float* X, int ldxp, int half,
                                       float* Y, int ldy, bool acc, const uint16_t* prefetch_until = nullptr) {
  const int full = K / 32 * 32, rem = K - full;
  __m256 a[RB][MG];
  for (int r = 0; r < RB; ++r)
    for (int g = 0; g < MG; ++g) a[r][g] = _mm256_setzero_ps();
  const uint16_t* seg[RB];
  const float* xe[MG];
  for (int g = 0; g < MG; ++g) xe[g] = X + (int64_t)g * ldxp;
  for (int i = 0; i < full; i += 32) {
    const uint16_t* c = base + (int64_t)(i / 32) * cs;
    if (c + kPrefetchAhead < prefetch_until)
      for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(c + kPrefetchAhead + 32 * l), _MM_HINT_T0);
    for (int r = 0; r < RB; ++r) seg[r] = c + (r0 + r) * 32;
    chunk_step<RB, MG>(a, seg, xe, half, i);
  }
  if (rem) {
    alignas(32) uint16_t pad[RB][32] = {};
    const uint16_t* c = base + (int64_t)(full / 32) * cs;
    for (int r = 0; r < RB; ++r) std::memcpy(pad[r], c + (r0 + r) * rem, sizeof(uint16_t) * rem), seg[r] = pad[r];
    chunk_step<RB, MG>(a, seg, xe, half, full);
  }
  for (int g = 0; g < MG; ++g)
    for (int r = 0; r < RB; ++r) {
      float* out = Y + (int64_t)g * ldy + r;
      const float s = hsum8(a[r][g]);
      *out = acc ? *out + s : s;
    }
}

// Inputs in groups of 4, then the rest one at a time.
template <int RB>
LOOPLM_AVX2 inline void rows_by_all_inputs(int M, const uint16_t* base, int cs, int r0, int K, const float* X, int ldxp,
                                           int half, float* Y, int ldy, const uint16_t* prefetch_until) {
  int m = 0;
  for (; m + 4 <= M; m += 4, prefetch_until = nullptr)
    rows_by_inputs<RB, 4>(base, cs, r0, K, X + (int64_t)m * ldxp, ldxp, half, Y + (int64_t)m * ldy, ldy, false,
                          prefetch_until);
  for (; m < M; ++m, prefetch_until = nullptr)
    rows_by_inputs<RB, 1>(base, cs, r0, K, X + (int64_t)m * ldxp, ldxp, half, Y + (int64_t)m * ldy, ldy, false,
                          prefetch_until);
}

// Attention's scores over cached keys (rows of a head's width, K ≤ ~128): eight rows at a time,
// each with its own 8-lane accumulator, reduced together by a transposing tree of horizontal adds
// (9 operations per 8 rows, where reducing each row alone, as the portable dot does with 16
// partial sums, costs more than its 8 FMAs at K = 64). Keys fp32 or bf16 (a bf16 KV cache, each
// value widened exactly as it is read); K % 8 by a copy into a zeroed 8-wide step.
LOOPLM_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
LOOPLM_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
LOOPLM_AVX2 inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}

LOOPLM_AVX2 inline __m256 reduce8(const __m256* a) {  // lane r: the sum of a[r]'s 8 lanes
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

template <int NR, class E>
LOOPLM_AVX2 inline void dot_rows_group(const E* W, int ldw, const float* x, int K, __m256* a) {
  const int full = K / 8 * 8;
  for (int r = 0; r < NR; ++r) a[r] = _mm256_setzero_ps();
  for (int i = 0; i < full; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    for (int r = 0; r < NR; ++r) a[r] = _mm256_fmadd_ps(load8(W + (int64_t)r * ldw + i), xv, a[r]);
  }
  if (K > full) {
    alignas(32) float xt[8] = {};
    std::memcpy(xt, x + full, sizeof(float) * (K - full));
    const __m256 xv = _mm256_load_ps(xt);
    for (int r = 0; r < NR; ++r) {
      alignas(32) E wt[8] = {};
      std::memcpy(wt, W + (int64_t)r * ldw + full, sizeof(E) * (K - full));
      a[r] = _mm256_fmadd_ps(load8(wt), xv, a[r]);
    }
  }
}

template <class E>
LOOPLM_AVX2 void dot_rows_avx2_impl(int N, int K, const E* W, int ldw, const float* x, float* y) {
  int j = 0;
  __m256 a[8];
  for (; j + 8 <= N; j += 8) {
    dot_rows_group<8>(W + (int64_t)j * ldw, ldw, x, K, a);
    _mm256_storeu_ps(y + j, reduce8(a));
  }
  for (; j < N; ++j) {
    dot_rows_group<1>(W + (int64_t)j * ldw, ldw, x, K, a);
    y[j] = hsum8(a[0]);
  }
}

// fp32 weights, row-major: one weight row against MG input rows, two 8-lane accumulators per input
// (columns 16c .. 16c + 7 and 16c + 8 .. 16c + 15: two FMA chains where one would wait on its
// latency), the last < 16 columns by masked loads (masked lanes read as 0, and are not read).
// Per (row, input) the operations and their order do not depend on MG, so a batch's outputs are
// the matrix-vector product's bits.
LOOPLM_AVX2 inline __m256i lanes_below(int n) {  // lane l set where l < n
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
template <int MG>
LOOPLM_AVX2 inline void row_f32(const float* w, const float* X, int ldx, int K, float* Y, int ldy, bool acc) {
  __m256 a0[MG], a1[MG];
  for (int g = 0; g < MG; ++g) a0[g] = a1[g] = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= K; i += 16) {
    const __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
    for (int g = 0; g < MG; ++g) {
      const float* x = X + (int64_t)g * ldx + i;
      a0[g] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), a0[g]);
      a1[g] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a1[g]);
    }
  }
  if (i < K) {
    const __m256i m0 = lanes_below(K - i), m1 = lanes_below(K - i - 8);
    const __m256 w0 = _mm256_maskload_ps(w + i, m0), w1 = _mm256_maskload_ps(w + i + 8, m1);
    for (int g = 0; g < MG; ++g) {
      const float* x = X + (int64_t)g * ldx + i;
      a0[g] = _mm256_fmadd_ps(w0, _mm256_maskload_ps(x, m0), a0[g]);
      a1[g] = _mm256_fmadd_ps(w1, _mm256_maskload_ps(x + 8, m1), a1[g]);
    }
  }
  for (int g = 0; g < MG; ++g) {
    float* out = Y + (int64_t)g * ldy;
    const float s = hsum8(_mm256_add_ps(a0[g], a1[g]));
    *out = acc ? *out + s : s;
  }
}

}  // namespace

LOOPLM_AVX2 void span_f32_avx2(const float* W, int ldw, const float* x, int K, float* y, int n, bool acc) {
  for (int j = 0; j < n; ++j) row_f32<1>(W + (int64_t)j * ldw, x, 0, K, y + j, 0, acc);
}

// Row by row (one sequential stream through the weights); every input against a row while it is
// in L1: 4 inputs a pass, then 2, then 1.
LOOPLM_AVX2 void span_f32_avx2_rows(int M, const float* W, int ldw, const float* X, int ldx, int K, float* Y, int ldy,
                                    int lo, int n) {
  for (int j = lo; j < lo + n; ++j) {
    const float* w = W + (int64_t)j * ldw;
    int m = 0;
    for (; m + 4 <= M; m += 4) row_f32<4>(w, X + (int64_t)m * ldx, ldx, K, Y + (int64_t)m * ldy + j, ldy, false);
    if (m + 2 <= M) {
      row_f32<2>(w, X + (int64_t)m * ldx, ldx, K, Y + (int64_t)m * ldy + j, ldy, false);
      m += 2;
    }
    if (m < M) row_f32<1>(w, X + (int64_t)m * ldx, ldx, K, Y + (int64_t)m * ldy + j, ldy, false);
  }
}

void dot_rows_avx2(int N, int K, const float* W, int ldw, const float* x, float* y) {
  dot_rows_avx2_impl(N, K, W, ldw, x, y);
}
void dot_rows_avx2(int N, int K, const uint16_t* W, int ldw, const float* x, float* y) {
  dot_rows_avx2_impl(N, K, W, ldw, x, y);
}
void dot_rows_avx2(int N, int K, const int8_t* W, int ldw, const float* x, float* y) {
  dot_rows_avx2_impl(N, K, W, ldw, x, y);
}

bool have_avx2_fma() { return cpu_features().avx2_fma; }

LOOPLM_AVX2 void span_bf16_avx2(const uint16_t* W, const float* X, int half, int K, float* y, int n, bool acc) {
  static_assert(kBf16Rows == 4 && kBf16Cols == 32, "the kernel is written for 4 x 32 chunks");
  int j = 0;
  // The blocks and the plain rows after them are one sequential stream of n·K weights (kPrefetchAhead).
  const uint16_t* end = W + (int64_t)n * K;
  for (; j + 4 <= n; j += 4) rows_by_inputs<4, 1>(W + (int64_t)j * K, 128, 0, K, X, 0, half, y + j, 0, acc, end);
  for (; j < n; ++j)  // the last R % 4 rows are plain
    rows_by_inputs<1, 1>(W + (int64_t)j * K, 32, 0, K, X, 0, half, y + j, 0, acc, end);
}

// Per 4-row block: rows 0-1 against every input (the first pass, which reads the block from
// memory, prefetches the stream ahead), then rows 2-3 from L1.
LOOPLM_AVX2 void span_bf16_avx2_rows(int M, const uint16_t* W, const float* X, int ldxp, int half, int K, float* Y,
                                     int ldy, int lo, int n) {
  const uint16_t* end = W + (int64_t)(lo + n) * K;
  int j = lo;
  for (; j + 4 <= lo + n; j += 4) {
    const uint16_t* blk = W + (int64_t)j * K;
    rows_by_all_inputs<2>(M, blk, 128, 0, K, X, ldxp, half, Y + j, ldy, end);
    rows_by_all_inputs<2>(M, blk, 128, 2, K, X, ldxp, half, Y + j + 2, ldy, nullptr);
  }
  for (; j < lo + n; ++j) rows_by_all_inputs<1>(M, W + (int64_t)j * K, 32, 0, K, X, ldxp, half, Y + j, ldy, nullptr);
}

}  // namespace looplm

#else
// Not x86: have_avx2_fma() is false, so gemv.cpp never dispatches here.
namespace looplm {
bool have_avx2_fma() { return false; }
void span_bf16_avx2(const uint16_t*, const float*, int, int, float*, int, bool) { std::abort(); }
void span_bf16_avx2_rows(int, const uint16_t*, const float*, int, int, int, float*, int, int, int) { std::abort(); }
void span_f32_avx2(const float*, int, const float*, int, float*, int, bool) { std::abort(); }
void span_f32_avx2_rows(int, const float*, int, const float*, int, int, float*, int, int, int) { std::abort(); }
void dot_rows_avx2(int, int, const float*, int, const float*, float*) { std::abort(); }
void dot_rows_avx2(int, int, const uint16_t*, int, const float*, float*) { std::abort(); }
void dot_rows_avx2(int, int, const int8_t*, int, const float*, float*) { std::abort(); }
}  // namespace looplm
#endif
