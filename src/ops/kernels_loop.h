// Kernels of the loop rules' ops (docs/systems.md: gated, hyper / mHC), forward and backward side by
// side, templated on the scalar (float engine / double gradcheck, tests/test_gradcheck.cpp).
//   gates:   sigmoid (with input and output scales), SiLU, the convex gate mix, scale-and-shift
//            by a learned scalar and a bias row;
//   streams: n parallel residual streams stored as Y [N, n·d] (stream s = columns s·d..s·d+d−1):
//            RMS normalisation without gain, the H_pre mix, the H_res / H_post update, Sinkhorn.
// Reductions over rows (a scalar's or a bias row's gradient) run in fixed chunks or per column,
// so results do not depend on the thread count (kernels.h, kRowChunk).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <omp.h>
#include <vector>

#include "backend/cpu/parallel.h"
#include "backend/cpu/pointwise_f32.h"
#include "ops/kernels.h"

namespace looplm::k {

// Row primitives: the templates are the double reference; the float overloads are ISA-cloned with
// 16 partial sums (backend/cpu: dot, axpy_row, scale_row), so the stream ops' per-row dot products
// run vector-wide instead of on one dependent chain of adds. Per row, so results do not depend
// on the thread count.
template <class T>
inline T row_dot(const T* a, const T* b, int n) {
  T s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
inline float row_dot(const float* a, const float* b, int n) { return looplm::dot(a, b, n); }
template <class T>
inline void row_axpy(T a, const T* x, T* y, int n) {  // y += a x
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
inline void row_axpy(float a, const float* x, float* y, int n) { axpy_row(a, x, y, n); }
template <class T>
inline void row_scale(T a, const T* x, T* y, int n) {  // y = a x
  for (int i = 0; i < n; ++i) y[i] = a * x[i];
}
inline void row_scale(float a, const float* x, float* y, int n) { scale_row(a, x, y, n); }
// y = a x (overwrite) or y += a x (acc)
template <class T>
inline void row_store(T a, const T* x, T* y, int n, bool acc) {
  if (acc) row_axpy(a, x, y, n);
  else row_scale(a, x, y, n);
}

// ---------------------------------------------------------------- sigmoid: y = o · σ(s · x)
template <class T>
void sigmoid_fwd(const T* x, T* y, int64_t n, T s, T o) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { y[i] = o / (T(1) + std::exp(-s * x[i])); });
}
// dy/dx = o · s · σ (1 − σ) = s · y · (1 − y / o)
template <class T>
void sigmoid_bwd(const T* y, const T* dy, T* dx, bool acc, int64_t n, T s, T o) {
  parallel_for<int64_t>(n, n > kParallelMin,
                        [&](int64_t i) { store(dx + i, dy[i] * s * y[i] * (T(1) - y[i] / o), acc); });
}

// ---------------------------------------------------------------- SiLU: y = x σ(x)
template <class T>
void silu_fwd(const T* x, T* y, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { y[i] = x[i] / (T(1) + std::exp(-x[i])); });
}
// silu'(x) = σ(x) (1 + x (1 − σ(x)))
template <class T>
void silu_bwd(const T* x, const T* dy, T* dx, bool acc, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) {
    const T sg = T(1) / (T(1) + std::exp(-x[i]));
    store(dx + i, dy[i] * sg * (T(1) + x[i] * (T(1) - sg)), acc);
  });
}

// ---------------------------------------------------------------- gate mix: y = g ⊙ a + (1 − g) ⊙ b
template <class T>
void gate_mix_fwd(const T* g, const T* a, const T* b, T* y, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { y[i] = b[i] + g[i] * (a[i] - b[i]); });
}
// dg = dy (a − b), da = dy g, db = dy (1 − g)
template <class T>
void gate_mix_bwd(const T* g, const T* a, const T* b, const T* dy, T* dg, bool acc_g, T* da, bool acc_a, T* db,
                  bool acc_b, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) {
    if (dg) store(dg + i, dy[i] * (a[i] - b[i]), acc_g);
    if (da) store(da + i, dy[i] * g[i], acc_a);
    if (db) store(db + i, dy[i] * (T(1) - g[i]), acc_b);
  });
}

// ---------------------------------------------------------------- scale and shift: y = s·x + b
// x, y [N, C]; s [1] or null (1); b [C] or null (a row added to every row).
template <class T>
void scale_shift_fwd(const T* x, const T* s, const T* b, T* y, int N, int C) {
  const T sc = s ? s[0] : T(1);
  parallel_for<int>(N, (int64_t)N * C > kParallelMin, [&](int n) {
    for (int c = 0; c < C; ++c) y[(int64_t)n * C + c] = sc * x[(int64_t)n * C + c] + (b ? b[c] : T(0));
  });
}
// dx = s dy;  ds += Σ dy ⊙ x (fixed row chunks, added in order; part: row_chunks(N) scratch);
// db[c] += Σ_n dy[n, c]
template <class T>
void scale_shift_bwd(const T* x, const T* s, const T* dy, T* dx, bool acc, T* ds, T* db, T* part, int N, int C) {
  const T sc = s ? s[0] : T(1);
  const int nch = row_chunks(N);
  if (ds) std::fill(part, part + nch, T(0));
  parallel_for<int>(nch, (int64_t)N * C > kParallelMin, [&](int ch) {
    for (int n = ch * kRowChunk; n < std::min(N, (ch + 1) * kRowChunk); ++n) {
      const T* g = dy + (int64_t)n * C;
      if (dx)
        for (int c = 0; c < C; ++c) store(dx + (int64_t)n * C + c, sc * g[c], acc);
      if (ds) {
        T acc_s = 0;
        for (int c = 0; c < C; ++c) acc_s += g[c] * x[(int64_t)n * C + c];
        part[ch] += acc_s;
      }
    }
  });
  if (ds)
    for (int ch = 0; ch < nch; ++ch) ds[0] += part[ch];
  if (db) {
    parallel_for<int>(C, (int64_t)N * C > kParallelMin, [&](int c) {
      T t = 0;
      for (int n = 0; n < N; ++n) t += dy[(int64_t)n * C + c];
      db[c] += t;
    });
  }
}

// ---------------------------------------------------------------- RMS normalisation without gain
// y = x / sqrt(mean(x²) + eps) over each row of D; rstd [N] saved.
template <class T>
void rms_normalize_fwd(const T* x, T* y, T* rstd, int N, int D, double eps) {
  parallel_for<int>(N, (int64_t)N * D > kParallelMin, [&](int n) {
    const T* xn = x + (int64_t)n * D;
    const T r = T(1) / std::sqrt(row_dot(xn, xn, D) / T(D) + T(eps));
    rstd[n] = r;
    row_scale(r, xn, y + (int64_t)n * D, D);
  });
}
// dx = r dy − r³/D · x Σ(dy x)
template <class T>
void rms_normalize_bwd(const T* x, const T* rstd, const T* dy, T* dx, bool acc, int N, int D) {
  parallel_for<int>(N, (int64_t)N * D > kParallelMin, [&](int n) {
    const T* xn = x + (int64_t)n * D;
    const T* gn = dy + (int64_t)n * D;
    T* o = dx + (int64_t)n * D;
    const T r = rstd[n];
    const T c = r * r * r * row_dot(gn, xn, D) / T(D);
    row_store(r, gn, o, D, acc);
    row_axpy(-c, xn, o, D);
  });
}

// ---------------------------------------------------------------- stream mix: x = Σ_s w_s Y_s
// Y [N, n·d], w [N, n] -> x [N, d]
template <class T>
void stream_mix_fwd(const T* Y, const T* w, T* x, int N, int n, int d) {
  parallel_for<int>(N, (int64_t)N * n * d > kParallelMin, [&](int r) {
    const T* Yr = Y + (int64_t)r * n * d;
    const T* wr = w + (int64_t)r * n;
    T* xr = x + (int64_t)r * d;
    row_scale(wr[0], Yr, xr, d);
    for (int s = 1; s < n; ++s) row_axpy(wr[s], Yr + (int64_t)s * d, xr, d);
  });
}
// dY_s = w_s dx;  dw_s = <dx, Y_s>
template <class T>
void stream_mix_bwd(const T* Y, const T* w, const T* dx, T* dY, bool acc_Y, T* dw, bool acc_w, int N, int n, int d) {
  parallel_for<int>(N, (int64_t)N * n * d > kParallelMin, [&](int r) {
    const T* Yr = Y + (int64_t)r * n * d;
    const T* wr = w + (int64_t)r * n;
    const T* gr = dx + (int64_t)r * d;
    for (int s = 0; s < n; ++s) {
      if (dY) row_store(wr[s], gr, dY + ((int64_t)r * n + s) * d, d, acc_Y);
      if (dw) store(dw + (int64_t)r * n + s, row_dot(gr, Yr + (int64_t)s * d, d), acc_w);
    }
  });
}

// ---------------------------------------------------------------- stream update
// Y' _s = Σ_t H[s,t] Y_t + P_s x   (full: H [N, n·n], row-major [s][t])
// Y' _s = H_s Y_s + P_s x          (diagonal: H [N, n])
// Y, Y' [N, n·d]; P [N, n]; x [N, d]
template <class T>
void stream_update_fwd(const T* Y, const T* H, const T* P, const T* x, T* Yo, int N, int n, int d, bool full) {
  parallel_for<int>(N, (int64_t)N * n * d > kParallelMin, [&](int r) {
    const T* Yr = Y + (int64_t)r * n * d;
    const T* xr = x + (int64_t)r * d;
    for (int s = 0; s < n; ++s) {
      T* o = Yo + ((int64_t)r * n + s) * d;
      row_scale(P[(int64_t)r * n + s], xr, o, d);
      if (full) {
        const T* Hs = H + ((int64_t)r * n + s) * n;
        for (int t = 0; t < n; ++t) row_axpy(Hs[t], Yr + (int64_t)t * d, o, d);
      } else {
        row_axpy(H[(int64_t)r * n + s], Yr + (int64_t)s * d, o, d);
      }
    }
  });
}
// dY_t = Σ_s H[s,t] dY'_s (diagonal: H_t dY'_t);  dH[s,t] = <dY'_s, Y_t> (diagonal: <dY'_s, Y_s>);
// dP_s = <dY'_s, x>;  dx = Σ_s P_s dY'_s
template <class T>
void stream_update_bwd(const T* Y, const T* H, const T* P, const T* x, const T* dYo, T* dY, bool acc_Y, T* dH,
                       bool acc_H, T* dP, bool acc_P, T* dx, bool acc_x, int N, int n, int d, bool full) {
  const int nh = full ? n * n : n;
  parallel_for<int>(N, (int64_t)N * n * d > kParallelMin, [&](int r) {
    const T* Yr = Y + (int64_t)r * n * d;
    const T* Gr = dYo + (int64_t)r * n * d;
    const T* xr = x + (int64_t)r * d;
    const T* Hr = H + (int64_t)r * nh;
    const T* Pr = P + (int64_t)r * n;
    if (dY)
      for (int t = 0; t < n; ++t) {
        T* o = dY + ((int64_t)r * n + t) * d;
        if (full) {
          row_store(Hr[t], Gr, o, d, acc_Y);  // s = 0
          for (int s = 1; s < n; ++s) row_axpy(Hr[(int64_t)s * n + t], Gr + (int64_t)s * d, o, d);
        } else {
          row_store(Hr[t], Gr + (int64_t)t * d, o, d, acc_Y);
        }
      }
    if (dH)
      for (int s = 0; s < n; ++s)
        for (int t = full ? 0 : s; t < (full ? n : s + 1); ++t)
          store(dH + (int64_t)r * nh + (full ? s * n + t : s), row_dot(Gr + (int64_t)s * d, Yr + (int64_t)t * d, d), acc_H);
    if (dP)
      for (int s = 0; s < n; ++s) store(dP + (int64_t)r * n + s, row_dot(Gr + (int64_t)s * d, xr, d), acc_P);
    if (dx) {
      T* o = dx + (int64_t)r * d;
      row_store(Pr[0], Gr, o, d, acc_x);
      for (int s = 1; s < n; ++s) row_axpy(Pr[s], Gr + (int64_t)s * d, o, d);
    }
  });
}

// ---------------------------------------------------------------- Sinkhorn–Knopp (mHC)
// Each row of L [N, n·n] is an n×n matrix (row-major). H = the matrix after `iters` rounds of
// {normalise every row to sum 1, then every column} applied to exp(L − max L). Computed in double
// whatever T is (docs/systems.md, Hyperloop). The backward replays the forward per matrix and keeps its
// iterates in `work` (per thread: sinkhorn_work(n, iters) doubles), then runs back through them.
inline size_t sinkhorn_work(int n, int iters) { return (size_t)(2 * iters + 1) * n * n + (size_t)2 * iters * n; }

// One matrix: X0 = exp(L − max), then per round k: A_k = X_k / rowsum (r_k), X_{k+1} = A_k / colsum (c_k).
// it: (2 iters + 1) n² doubles (X0, A0, X1, A1, ..., X_iters), sums: 2 iters n doubles (r_0, c_0, ...).
template <class T>
void sinkhorn_one(const T* L, int n, int iters, double* it, double* sums) {
  const int nn = n * n;
  double m = (double)L[0];
  for (int i = 1; i < nn; ++i) m = std::max(m, (double)L[i]);
  for (int i = 0; i < nn; ++i) it[i] = std::exp((double)L[i] - m);
  for (int k = 0; k < iters; ++k) {
    const double* X = it + (size_t)2 * k * nn;
    double* A = it + (size_t)(2 * k + 1) * nn;
    double* Xn = A + nn;
    double* rs = sums + (size_t)2 * k * n;
    double* cs = rs + n;
    for (int s = 0; s < n; ++s) {
      double t = 0;
      for (int u = 0; u < n; ++u) t += X[s * n + u];
      rs[s] = t;
      for (int u = 0; u < n; ++u) A[s * n + u] = X[s * n + u] / t;
    }
    for (int u = 0; u < n; ++u) {
      double t = 0;
      for (int s = 0; s < n; ++s) t += A[s * n + u];
      cs[u] = t;
      for (int s = 0; s < n; ++s) Xn[s * n + u] = A[s * n + u] / t;
    }
  }
}

template <class T>
void sinkhorn_fwd(const T* L, T* H, int N, int n, int iters, double* work) {
  const int nn = n * n;
  const size_t per = sinkhorn_work(n, iters);
  parallel_for<int>(N, (int64_t)N * nn * iters > kParallelMin, [&](int r) {
    double* it = work + per * (size_t)omp_get_thread_num();
    double* sums = it + (size_t)(2 * iters + 1) * nn;
    sinkhorn_one(L + (int64_t)r * nn, n, iters, it, sums);
    const double* X = it + (size_t)2 * iters * nn;
    for (int i = 0; i < nn; ++i) H[(int64_t)r * nn + i] = (T)X[i];
  });
}
// Back through the rounds: for y = a / colsum(a): da[s,u] = (dy[s,u] − Σ_v dy[v,u] y[v,u]) / c_u;
// for y = x / rowsum(x): dx[s,u] = (dy[s,u] − Σ_v dy[s,v] y[s,v]) / r_s; then dL = dX0 ⊙ X0 (the
// max shift does not change the result, so it carries no gradient).
template <class T>
void sinkhorn_bwd(const T* L, const T* dH, T* dL, bool acc, int N, int n, int iters, double* work) {
  const int nn = n * n;
  const size_t per = sinkhorn_work(n, iters) + 2 * (size_t)nn;
  parallel_for<int>(N, (int64_t)N * nn * iters > kParallelMin, [&](int r) {
    double* it = work + per * (size_t)omp_get_thread_num();
    double* sums = it + (size_t)(2 * iters + 1) * nn;
    double* g = sums + (size_t)2 * iters * n;  // gradient of the current iterate
    double* ga = g + nn;
    sinkhorn_one(L + (int64_t)r * nn, n, iters, it, sums);
    for (int i = 0; i < nn; ++i) g[i] = (double)dH[(int64_t)r * nn + i];
    for (int k = iters - 1; k >= 0; --k) {
      const double* A = it + (size_t)(2 * k + 1) * nn;
      const double* Xn = A + nn;
      const double* rs = sums + (size_t)2 * k * n;
      const double* cs = rs + n;
      for (int u = 0; u < n; ++u) {  // column normalisation
        double dot = 0;
        for (int s = 0; s < n; ++s) dot += g[s * n + u] * Xn[s * n + u];
        for (int s = 0; s < n; ++s) ga[s * n + u] = (g[s * n + u] - dot) / cs[u];
      }
      for (int s = 0; s < n; ++s) {  // row normalisation
        double dot = 0;
        for (int u = 0; u < n; ++u) dot += ga[s * n + u] * A[s * n + u];
        for (int u = 0; u < n; ++u) g[s * n + u] = (ga[s * n + u] - dot) / rs[s];
      }
    }
    for (int i = 0; i < nn; ++i) store(dL + (int64_t)r * nn + i, (T)(g[i] * it[i]), acc);
  });
}

}  // namespace looplm::k
