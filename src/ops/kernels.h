// The closed op set's kernels, forward and backward side by side. Templated on the scalar so the
// same code runs in float (the engine) and in double (the finite-difference tests,
// tests/test_gradcheck.cpp). Shapes are written next to every pointer; all matrices row-major.
// Backward kernels write input gradients with overwrite-or-add chosen by `acc` (graph.h contract);
// parameter gradients always add.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <omp.h>

#include "backend/cpu/fastmath.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/pointwise_f32.h"
#include "looplm/error.h"

namespace looplm::k {

// Below this many elements a loop runs on the calling thread: waking the pool costs more than the
// work (batch-1 decoding is made of such ops).
inline constexpr int64_t kParallelMin = 1 << 14;

template <class T>
inline void store(T* dst, T v, bool acc) { *dst = acc ? *dst + v : v; }

// exp for softmax loops: the vectorisable fastmath version in float, libm in double.
inline float vexp(float x) { return fm::exp(x); }
inline double vexp(double x) { return std::exp(x); }

// A layer's matrix product: fp32 (gemm_fixed_split), or with bf16 operands when `bf16` (training
// with precision = bf16: the Graph's bf16_products; float only, the double reference stays exact).
template <class T>
inline void layer_product(bool bf16, bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                          int ldb, T beta, T* C, int ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) return gemm_fixed_split_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  LOOPLM_ASSERT(!bf16, "bf16 products are for float");
  gemm_fixed_split(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---------------------------------------------------------------- linear: y = x W^T + b
// x [N, in], W [out, in], b [out] or null, y [N, out]
template <class T>
void linear_fwd(const T* x, const T* W, const T* b, T* y, int N, int in, int out, bool bf16 = false) {
  layer_product(bf16, false, true, N, out, in, T(1), x, in, W, in, T(0), y, out);
  if (b) {
    parallel_for<int>(N, (int64_t)N * out > kParallelMin, [&](int n) {
      for (int o = 0; o < out; ++o) y[(int64_t)n * out + o] += b[o];
    });
  }
}
// dx = dy W  (overwrite or add);  dW += dy^T x;  db += colsum(dy)
template <class T>
void linear_bwd(const T* x, const T* W, const T* dy, T* dx, bool dx_acc, T* dW, T* db, int N, int in, int out,
                bool bf16 = false) {
  if constexpr (!std::is_same_v<T, float>) LOOPLM_ASSERT(!bf16, "bf16 products are for float");
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) {  // dy rounded once for both products
      uint16_t* dyb = bf16_buffer(Bf16Buffer::linear_dy, (size_t)N * out);
      round_to_bf16(N, out, dy, out, dyb);
      if (dx) {
        uint16_t* Wb = bf16_buffer(Bf16Buffer::linear_weight, (size_t)out * in);
        round_to_bf16(out, in, W, in, Wb);
        gemm_bf16(false, false, N, in, out, 1.0f, dyb, out, Wb, in, dx_acc ? 1.0f : 0.0f, dx, in);
      }
      if (dW) {
        uint16_t* xb = bf16_buffer(Bf16Buffer::linear_input, (size_t)N * in);
        round_to_bf16(N, in, x, in, xb);
        gemm_bf16(true, false, out, in, N, 1.0f, dyb, out, xb, in, 1.0f, dW, in);
      }
    }
  }
  if (!bf16) {
    if (dx) gemm_fixed_split(false, false, N, in, out, T(1), dy, out, W, in, dx_acc ? T(1) : T(0), dx, in);
    if (dW) gemm_fixed_split(true, false, out, in, N, T(1), dy, out, x, in, T(1), dW, in);  // thread-count independent
  }
  if (db) {
    parallel_for<int>(out, (int64_t)N * out > kParallelMin, [&](int o) {
      T s = 0;
      for (int n = 0; n < N; ++n) s += dy[(int64_t)n * out + o];
      db[o] += s;
    });
  }
}

// ---------------------------------------------------------------- embedding (+ learned positions)
// tok [N] ids, E [V, d], P [T_max, d] or null: row n is at position pos0 + n % T_rows, or with
// row_pos (one per sequence of T_rows rows) row_pos[n / T_rows] + n % T_rows; y [N, d]
template <class T>
void embedding_fwd(const int32_t* tok, const T* E, const T* P, T* y, int N, int d, int T_rows, int pos0 = 0,
                   const int* row_pos = nullptr) {
  parallel_for<int>(N, (int64_t)N * d > kParallelMin, [&](int n) {
    const T* e = E + (int64_t)tok[n] * d;
    T* yn = y + (int64_t)n * d;
    if (P) {
      const T* p = P + (int64_t)((row_pos ? row_pos[n / T_rows] : pos0) + n % T_rows) * d;
      for (int i = 0; i < d; ++i) yn[i] = e[i] + p[i];
    } else {
      for (int i = 0; i < d; ++i) yn[i] = e[i];
    }
  });
}
// dE[tok[n]] += dy[n];  dP[n % T_rows] += dy[n]. Parallel over channel slices so rows never race.
template <class T>
void embedding_bwd(const int32_t* tok, const T* dy, T* dE, T* dP, int N, int d, int T_rows) {
#pragma omp parallel if ((int64_t)N * d > kParallelMin)
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int lo = (int)((int64_t)d * id / nt), hi = (int)((int64_t)d * (id + 1) / nt);
    for (int n = 0; n < N; ++n) {
      const T* g = dy + (int64_t)n * d;
      if (dE) { T* e = dE + (int64_t)tok[n] * d; for (int i = lo; i < hi; ++i) e[i] += g[i]; }
      if (dP) { T* p = dP + (int64_t)(n % T_rows) * d; for (int i = lo; i < hi; ++i) p[i] += g[i]; }
    }
  }
}

// Reductions over rows go in fixed chunks of kRowChunk rows whose partial sums are added in chunk
// order, so a result never depends on how many threads computed it: runs stay bit-exact while the
// adaptive pool (core/threads.h) changes its size.
inline constexpr int kRowChunk = 64;
inline int row_chunks(int N) { return (N + kRowChunk - 1) / kRowChunk; }

// Sum partial rows [nt, d] into out [d] (+=), in order.
template <class T>
void reduce_partials(const T* part, int nt, int d, T* out) {
  for (int t = 0; t < nt; ++t)
    for (int i = 0; i < d; ++i) out[i] += part[(int64_t)t * d + i];
}

// ---------------------------------------------------------------- RMSNorm: y = x / rms(x) * w
// x, y [N, d]; w [d]; rstd [N] saved for backward
template <class T>
void rmsnorm_fwd(const T* x, const T* w, T* y, T* rstd, int N, int d, double eps) {
  parallel_for<int>(N, (int64_t)N * d > kParallelMin, [&](int n) {
    const T* xn = x + (int64_t)n * d;
    T* yn = y + (int64_t)n * d;
    T ss = 0;
    for (int i = 0; i < d; ++i) ss += xn[i] * xn[i];
    T r = T(1) / std::sqrt(ss / T(d) + T(eps));
    rstd[n] = r;
    for (int i = 0; i < d; ++i) yn[i] = xn[i] * r * w[i];
  });
}
// dx = r (dy w) - r^3/d x Σ(dy w x);  dw += Σ_n dy x r.  part: scratch [row_chunks(N), d] for dw
template <class T>
void rmsnorm_bwd(const T* x, const T* w, const T* rstd, const T* dy, T* dx, bool acc, T* dw, T* part, int N,
                 int d) {
  const int nch = row_chunks(N);
  parallel_for<int>(nch, (int64_t)N * d > kParallelMin, [&](int ch) {
    T* pw = part + (int64_t)ch * d;
    std::fill(pw, pw + d, T(0));
    for (int n = ch * kRowChunk; n < std::min(N, (ch + 1) * kRowChunk); ++n) {
      const T* xn = x + (int64_t)n * d;
      const T* gn = dy + (int64_t)n * d;
      T r = rstd[n], dot = 0;
      for (int i = 0; i < d; ++i) dot += gn[i] * w[i] * xn[i];
      T c = r * r * r * dot / T(d);
      if (dx) {
        T* o = dx + (int64_t)n * d;
        for (int i = 0; i < d; ++i) store(o + i, r * gn[i] * w[i] - c * xn[i], acc);
      }
      for (int i = 0; i < d; ++i) pw[i] += gn[i] * xn[i] * r;
    }
  });
  if (dw) reduce_partials(part, nch, d, dw);
}

// ---------------------------------------------------------------- LayerNorm: y = (x - μ)/σ · w + b
// x, y [N, d]; w, b [d] (b may be null); mean, rstd [N]
// Row kernels (the double reference; float uses the ISA-cloned overloads of pointwise_f32.h).
template <class T>
void layernorm_row_fwd(const T* xn, const T* w, const T* b, T* yn, int d, double eps, T& mean, T& rstd) {
  T mu = 0;
  for (int i = 0; i < d; ++i) mu += xn[i];
  mu /= T(d);
  T var = 0;
  for (int i = 0; i < d; ++i) var += (xn[i] - mu) * (xn[i] - mu);
  T r = T(1) / std::sqrt(var / T(d) + T(eps));
  mean = mu;
  rstd = r;
  for (int i = 0; i < d; ++i) yn[i] = (xn[i] - mu) * r * (w ? w[i] : T(1)) + (b ? b[i] : T(0));
}
template <class T>
void layernorm_row_bwd(const T* xn, const T* w, T mu, T r, const T* gn, T* o, bool acc, T* pw, T* pb, int d) {
  T sg = 0, sgx = 0;
  for (int i = 0; i < d; ++i) {
    T xh = (xn[i] - mu) * r, g = gn[i] * (w ? w[i] : T(1));
    sg += g;
    sgx += g * xh;
    pw[i] += gn[i] * xh;
    pb[i] += gn[i];
  }
  sg /= T(d);
  sgx /= T(d);
  if (o)
    for (int i = 0; i < d; ++i) {
      T xh = (xn[i] - mu) * r, g = gn[i] * (w ? w[i] : T(1));
      store(o + i, r * (g - sg - xh * sgx), acc);
    }
}

template <class T>
void layernorm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int N, int d, double eps) {
  parallel_for<int>(N, (int64_t)N * d > kParallelMin, [&](int n) {
    layernorm_row_fwd(x + (int64_t)n * d, w, b, y + (int64_t)n * d, d, eps, mean[n], rstd[n]);
  });
}
// x̂ = (x-μ)r; g = dy w;  dx = r (g - mean(g) - x̂ mean(g x̂));  dw += Σ dy x̂;  db += Σ dy.
// part: scratch [row_chunks(N), 2d]
template <class T>
void layernorm_bwd(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, T* dx, bool acc, T* dw,
                   T* db, T* part, int N, int d) {
  const int nch = row_chunks(N);
  parallel_for<int>(nch, (int64_t)N * d > kParallelMin, [&](int ch) {
    T* pw = part + (int64_t)ch * 2 * d;
    T* pb = pw + d;
    std::fill(pw, pw + 2 * d, T(0));
    for (int n = ch * kRowChunk; n < std::min(N, (ch + 1) * kRowChunk); ++n)
      layernorm_row_bwd(x + (int64_t)n * d, w, mean[n], rstd[n], dy + (int64_t)n * d, dx ? dx + (int64_t)n * d : nullptr,
                        acc, pw, pb, d);
  });
  for (int ch = 0; ch < nch; ++ch)
    for (int i = 0; i < d; ++i) {
      if (dw) dw[i] += part[(int64_t)ch * 2 * d + i];
      if (db) db[i] += part[(int64_t)ch * 2 * d + d + i];
    }
}

// ---------------------------------------------------------------- RoPE (rotate-half, docs/systems.md)
// Channel i pairs with i + hd/2. cos/sin tables [T, hd/2] for positions pos0.. of the rows.
// x, y [rows, ld] with the head in columns [0, hd); y may alias x.
template <class T>
void rope_fwd(const T* x, int ldx, T* y, int ldy, const float* cos_t, const float* sin_t, int rows, int hd) {
  int h = hd / 2;
  for (int t = 0; t < rows; ++t) {
    const T* xr = x + (int64_t)t * ldx;
    T* yr = y + (int64_t)t * ldy;
    const float* c = cos_t + (int64_t)t * h;
    const float* s = sin_t + (int64_t)t * h;
    for (int i = 0; i < h; ++i) {
      T a = xr[i], b = xr[i + h];
      yr[i] = a * T(c[i]) - b * T(s[i]);
      yr[i + h] = b * T(c[i]) + a * T(s[i]);
    }
  }
}
// The transpose (= inverse) rotation.
template <class T>
void rope_bwd(const T* dy, int ldy, T* dx, int ldx, const float* cos_t, const float* sin_t, int rows, int hd,
              bool acc) {
  int h = hd / 2;
  for (int t = 0; t < rows; ++t) {
    const T* g = dy + (int64_t)t * ldy;
    T* o = dx + (int64_t)t * ldx;
    const float* c = cos_t + (int64_t)t * h;
    const float* s = sin_t + (int64_t)t * h;
    for (int i = 0; i < h; ++i) {
      T ga = g[i], gb = g[i + h];
      store(o + i, ga * T(c[i]) + gb * T(s[i]), acc);
      store(o + i + h, gb * T(c[i]) - ga * T(s[i]), acc);
    }
  }
}

// ---------------------------------------------------------------- causal self-attention
// qkv [B*T, (H + 2 Hkv) hd] rows = [q (H heads) | k (Hkv heads) | v (Hkv heads)], head h in
// columns h*hd.. of its part; y [B*T, H hd]; lse [B, H, T] saved. Hkv < H is grouped-query
// attention: query head h reads key/value head h / (H / Hkv) (Hugging Face's repeat_kv order).
// With rope tables, q and k are rotated (in per-head scratch) before the scores.
// Probabilities are not stored: backward recomputes them from the saved log-sum-exp.
// Causal blocking: query rows go in blocks of kAttnBlock and a block only multiplies against the
// keys it can see (0..end of block), so the masked upper triangle is never computed; entries of a
// block's rows past the diagonal are set to 0 so the GEMMs over the block's key range stay exact.
// scale: of the scores (0: 1/√hd). strict: query i sees keys j < i only (NRGPT's option), and a
// row with no key (i = 0) gives 0 with log-sum-exp 0. Hkv 0: H.
// scratch: per thread (2*T*T + 4*T*hd) elements.
inline constexpr int kAttnBlock = 64;

// One row of n visible scores: s <- softmax(s), returns the log-sum-exp (double reference; float
// has ISA-cloned overloads in pointwise_f32.h).
template <class T>
T softmax_row(T* s, int n) {
  T mx = s[0];
  for (int j = 1; j < n; ++j) mx = std::max(mx, s[j]);
  T sum = 0;
  for (int j = 0; j < n; ++j) sum += (s[j] = vexp(s[j] - mx));
  T inv = T(1) / sum;
  for (int j = 0; j < n; ++j) s[j] *= inv;
  return mx + std::log(sum);
}
// p <- exp(p - lse) (the probabilities again); g <- p (g - Σ p g) (dS from dP).
template <class T>
void softmax_bwd_row(T* p, T* g, int n, T lse) {
  T dot = 0;
  for (int j = 0; j < n; ++j) dot += (p[j] = vexp(p[j] - lse)) * g[j];
  for (int j = 0; j < n; ++j) g[j] = p[j] * (g[j] - dot);
}

template <class T>
void attention_fwd(const T* qkv, T* y, T* lse, int B, int Tn, int H, int hd, const float* cos_t,
                   const float* sin_t, T* scratch, double scale_ = 0, bool strict = false, int Hkv = 0) {
  if (Hkv <= 0) Hkv = H;
  const int G = H / Hkv, dq = H * hd, dkv = Hkv * hd, ld = dq + 2 * dkv, shift = strict ? 1 : 0;
  const T scale = scale_ > 0 ? T(scale_) : T(1) / std::sqrt(T(hd));
  const int64_t per_thread = 2 * (int64_t)Tn * Tn + 4 * (int64_t)Tn * hd;
#pragma omp parallel for schedule(dynamic, 1)
  for (int bh = 0; bh < B * H; ++bh) {
    int b = bh / H, h = bh % H;
    T* S = scratch + (int64_t)omp_get_thread_num() * per_thread;  // [T, T]
    T* Qr = S + 2 * (int64_t)Tn * Tn;                             // [T, hd]
    T* Kr = Qr + (int64_t)Tn * hd;
    const T* row = qkv + (int64_t)b * Tn * ld;
    const T* Q = row + h * hd;
    const T* K = row + dq + (h / G) * hd;
    const T* V = K + dkv;
    const T *q = Q, *kk = K;
    int ldq = ld, ldk = ld;
    if (cos_t) {
      rope_fwd(Q, ld, Qr, hd, cos_t, sin_t, Tn, hd);
      rope_fwd(K, ld, Kr, hd, cos_t, sin_t, Tn, hd);
      q = Qr; kk = Kr; ldq = ldk = hd;
    }
    T* L = lse + (int64_t)bh * Tn;
    T* Y = y + (int64_t)b * Tn * dq + h * hd;
    for (int i0 = 0; i0 < Tn; i0 += kAttnBlock) {
      const int i1 = std::min(Tn, i0 + kAttnBlock), m = i1 - i0;
      gemm(false, true, m, i1, hd, scale, q + (int64_t)i0 * ldq, ldq, kk, ldk, T(0), S + (int64_t)i0 * Tn, Tn);
      for (int i = i0; i < i1; ++i) {
        T* s = S + (int64_t)i * Tn;
        const int n = i + 1 - shift;  // visible keys
        L[i] = n > 0 ? softmax_row(s, n) : T(0);
        std::fill(s + n, s + i1, T(0));
      }
      gemm(false, false, m, hd, i1, T(1), S + (int64_t)i0 * Tn, Tn, V, ld, T(0), Y + (int64_t)i0 * dq, dq);
    }
  }
}

// dP = dO V^T; dS = P ∘ (dP − rowsum(dP∘P)); dQ = scale dS K; dK = scale dS^T Q; dV = P^T dO.
// Query-indexed products (P, dP, dQ) go by query block over the visible keys; key-indexed ones
// (dK, dV) by key block over the queries that see them. One task per (sequence, key/value head):
// the query heads of a group add into the same dK, dV one after another (no two threads write them).
template <class T>
void attention_bwd(const T* qkv, const T* lse, const T* dy, T* dqkv, bool acc, int B, int Tn, int H, int hd,
                   const float* cos_t, const float* sin_t, T* scratch, double scale_ = 0, bool strict = false,
                   int Hkv = 0) {
  if (Hkv <= 0) Hkv = H;
  const int G = H / Hkv, dq = H * hd, dkv = Hkv * hd, ld = dq + 2 * dkv, shift = strict ? 1 : 0;
  const T scale = scale_ > 0 ? T(scale_) : T(1) / std::sqrt(T(hd));
  const int64_t per_thread = 2 * (int64_t)Tn * Tn + 4 * (int64_t)Tn * hd;
#pragma omp parallel for schedule(dynamic, 1)
  for (int bk = 0; bk < B * Hkv; ++bk) {
    const int b = bk / Hkv, kvh = bk % Hkv;
    T* P = scratch + (int64_t)omp_get_thread_num() * per_thread;  // [T, T]
    T* dP = P + (int64_t)Tn * Tn;                                 // [T, T], becomes dS
    T* Qr = dP + (int64_t)Tn * Tn;
    T* Kr = Qr + (int64_t)Tn * hd;
    T* dQr = Kr + (int64_t)Tn * hd;
    T* dKr = dQr + (int64_t)Tn * hd;
    const T* row = qkv + (int64_t)b * Tn * ld;
    T* drow = dqkv + (int64_t)b * Tn * ld;
    const T* K = row + dq + kvh * hd;
    const T* V = K + dkv;
    T* dK = drow + dq + kvh * hd;
    T* dV = dK + dkv;
    const T* kk = K;
    int ldk = ld;
    if (cos_t) {
      rope_fwd(K, ld, Kr, hd, cos_t, sin_t, Tn, hd);
      kk = Kr; ldk = hd;
    }
    // Where dQ and dK go: rotated scratch (un-rotated below) or straight into dqkv.
    T* gk = cos_t ? dKr : dK;
    const int ldg = cos_t ? hd : ld;
    const T beta_first = (cos_t || !acc) ? T(0) : T(1);
    for (int gi = 0; gi < G; ++gi) {
      const int h = kvh * G + gi;
      const T* Q = row + h * hd;
      const T* dO = dy + (int64_t)b * Tn * dq + h * hd;
      T* dQ = drow + h * hd;
      const T* q = Q;
      int ldq = ld;
      if (cos_t) {
        rope_fwd(Q, ld, Qr, hd, cos_t, sin_t, Tn, hd);
        q = Qr; ldq = hd;
      }
      T* gq = cos_t ? dQr : dQ;
      const T beta_k = gi == 0 ? beta_first : T(1), beta_v = gi == 0 && !acc ? T(0) : T(1);
      const T* L = lse + ((int64_t)b * H + h) * Tn;
      for (int i0 = 0; i0 < Tn; i0 += kAttnBlock) {
        const int i1 = std::min(Tn, i0 + kAttnBlock), m = i1 - i0;
        gemm(false, true, m, i1, hd, scale, q + (int64_t)i0 * ldq, ldq, kk, ldk, T(0), P + (int64_t)i0 * Tn, Tn);
        gemm(false, true, m, i1, hd, T(1), dO + (int64_t)i0 * dq, dq, V, ld, T(0), dP + (int64_t)i0 * Tn, Tn);
        for (int i = i0; i < i1; ++i) {
          T* p = P + (int64_t)i * Tn;
          T* g = dP + (int64_t)i * Tn;
          const int n = i + 1 - shift;
          softmax_bwd_row(p, g, n, L[i]);
          std::fill(p + n, p + i1, T(0));
          std::fill(g + n, g + i1, T(0));
        }
        gemm(false, false, m, hd, i1, scale, dP + (int64_t)i0 * Tn, Tn, kk, ldk, beta_first, gq + (int64_t)i0 * ldg, ldg);
      }
      for (int j0 = 0; j0 < Tn; j0 += kAttnBlock) {
        const int j1 = std::min(Tn, j0 + kAttnBlock), n = j1 - j0, rows = Tn - j0;
        const int64_t at = (int64_t)j0 * Tn + j0;  // block (j0, j0) of P / dS: rows j0..T-1, cols j0..j1-1
        gemm(true, false, n, hd, rows, T(1), P + at, Tn, dO + (int64_t)j0 * dq, dq, beta_v, dV + (int64_t)j0 * ld, ld);
        gemm(true, false, n, hd, rows, scale, dP + at, Tn, q + (int64_t)j0 * ldq, ldq, beta_k, gk + (int64_t)j0 * ldg, ldg);
      }
      if (cos_t) rope_bwd(dQr, hd, dQ, ld, cos_t, sin_t, Tn, hd, acc);
    }
    if (cos_t) rope_bwd(dKr, hd, dK, ld, cos_t, sin_t, Tn, hd, acc);
  }
}

}  // namespace looplm::k
