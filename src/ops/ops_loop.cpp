// The loop rules' ops: gates (gated rule) and parallel residual streams (hyper rule). Each wraps a
// kernel pair of kernels_loop.h and records its backward (graph.h has the contract).
#include <cmath>
#include <omp.h>

#include "ops/kernels_loop.h"
#include "ops/ops.h"

namespace looplm::op {

Node* sigmoid(Graph& g, Node* x, float in_scale, float out_scale) {
  Node* y = g.output(x->rows, x->cols, x);
  k::sigmoid_fwd(x->v, y->v, x->numel(), in_scale, out_scale);
  if (y->requires_grad)
    g.record(y, [&g, x, y, in_scale, out_scale] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::sigmoid_bwd(y->v, y->g, dx, acc, y->numel(), in_scale, out_scale);
    });
  return y;
}

Node* silu(Graph& g, Node* x) {
  Node* y = g.output(x->rows, x->cols, x);
  k::silu_fwd(x->v, y->v, x->numel());
  if (y->requires_grad)
    g.record(y, [&g, x, y] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::silu_bwd(x->v, y->g, dx, acc, x->numel());
    });
  return y;
}

Node* gate_mix(Graph& g, Node* gate, Node* a, Node* b) {
  LOOPLM_ASSERT(gate->numel() == a->numel() && a->numel() == b->numel(), "gate_mix: shapes differ");
  Node* y = g.output(a->rows, a->cols, gate, a, b);
  k::gate_mix_fwd(gate->v, a->v, b->v, y->v, y->numel());
  if (y->requires_grad)
    g.record(y, [&g, gate, a, b, y] {
      bool ag = false, aa = false, ab = false;
      float* dg = g.grad_of(gate, ag);
      float* da = g.grad_of(a, aa);
      float* db = g.grad_of(b, ab);
      k::gate_mix_bwd(gate->v, a->v, b->v, y->g, dg, ag, da, aa, db, ab, y->numel());
    });
  return y;
}

Node* scale_shift(Graph& g, Node* x, Node* s, Node* b) {
  const int N = (int)x->rows, C = (int)x->cols;
  LOOPLM_ASSERT(!s || s->numel() == 1, "scale_shift: the scale is one number");
  LOOPLM_ASSERT(!b || b->numel() == C, "scale_shift: the shift is one row of x's width");
  Node* y = g.output(N, C, x, s, b);
  k::scale_shift_fwd(x->v, s ? s->v : nullptr, b ? b->v : nullptr, y->v, N, C);
  if (y->requires_grad)
    g.record(y, [&g, x, s, b, y, N, C] {
      bool ax = false, as = false, abb = false;
      float* dx = g.grad_of(x, ax);
      float* ds = s ? g.grad_of(s, as) : nullptr;
      float* db = b ? g.grad_of(b, abb) : nullptr;
      // A scale or shift that is not a parameter starts from zero (a parameter's always adds).
      if (ds && !as) ds[0] = 0;
      if (db && !abb) std::fill(db, db + C, 0.0f);
      float* part = ds ? g.shared_scratch((size_t)k::row_chunks(N)) : nullptr;
      k::scale_shift_bwd(x->v, s ? s->v : nullptr, y->g, dx, ax, ds, db, part, N, C);
    });
  return y;
}

Node* rms_normalize(Graph& g, Node* x, double eps) {
  const int N = (int)x->rows, D = (int)x->cols;
  Node* y = g.output(N, D, x);
  float* rstd = g.scratch<float>(N);
  k::rms_normalize_fwd(x->v, y->v, rstd, N, D, eps);
  if (y->requires_grad)
    g.record(y, [&g, x, y, rstd, N, D] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::rms_normalize_bwd(x->v, rstd, y->g, dx, acc, N, D);
    });
  return y;
}

Node* stream_mix(Graph& g, Node* Y, Node* w, int n) {
  const int N = (int)Y->rows, d = (int)Y->cols / n;
  LOOPLM_ASSERT(Y->cols == (int64_t)n * d && w->rows == N && w->cols == n, "stream_mix: Y [N, n·d], w [N, n]");
  Node* x = g.output(N, d, Y, w);
  k::stream_mix_fwd(Y->v, w->v, x->v, N, n, d);
  if (x->requires_grad)
    g.record(x, [&g, Y, w, x, N, n, d] {
      bool aY = false, aw = false;
      float* dY = g.grad_of(Y, aY);
      float* dw = g.grad_of(w, aw);
      k::stream_mix_bwd(Y->v, w->v, x->g, dY, aY, dw, aw, N, n, d);
    });
  return x;
}

Node* stream_update(Graph& g, Node* Y, Node* H, Node* P, Node* x, int n, bool full) {
  const int N = (int)Y->rows, d = (int)x->cols;
  LOOPLM_ASSERT(Y->cols == (int64_t)n * d && x->rows == N && P->rows == N && P->cols == n && H->rows == N &&
                    H->cols == (full ? n * n : n),
                "stream_update: Y [N, n·d], H [N, n] or [N, n·n], P [N, n], x [N, d]");
  Node* Yo = g.output(N, (int64_t)n * d, Y, H, P, x);
  k::stream_update_fwd(Y->v, H->v, P->v, x->v, Yo->v, N, n, d, full);
  if (Yo->requires_grad)
    g.record(Yo, [&g, Y, H, P, x, Yo, N, n, d, full] {
      bool aY = false, aH = false, aP = false, ax = false;
      float* dY = g.grad_of(Y, aY);
      float* dH = g.grad_of(H, aH);
      float* dP = g.grad_of(P, aP);
      float* dx = g.grad_of(x, ax);
      k::stream_update_bwd(Y->v, H->v, P->v, x->v, Yo->g, dY, aY, dH, aH, dP, aP, dx, ax, N, n, d, full);
    });
  return Yo;
}

Node* sinkhorn(Graph& g, Node* L, int n, int iters) {
  const int N = (int)L->rows;
  LOOPLM_ASSERT(L->cols == (int64_t)n * n && iters >= 1, "sinkhorn: L [N, n·n]");
  Node* H = g.output(N, (int64_t)n * n, L);
  const int threads = omp_get_max_threads();
  double* work = g.scratch<double>(k::sinkhorn_work(n, iters) * threads);
  k::sinkhorn_fwd(L->v, H->v, N, n, iters, work);
  if (H->requires_grad)
    g.record(H, [&g, L, H, N, n, iters] {
      bool acc = false;
      float* dL = g.grad_of(L, acc);
      if (!dL) return;
      const int threads = omp_get_max_threads();
      double* work = g.scratch<double>((k::sinkhorn_work(n, iters) + 2 * (size_t)n * n) * threads);
      k::sinkhorn_bwd(L->v, H->g, dL, acc, N, n, iters, work);
    });
  return H;
}

Node* gaussian(Graph& g, int64_t rows, int64_t cols, double std, const Rng& rng) {
  Node* y = g.node(rows, cols, false);
  const int64_t n = rows * cols, pairs = (n + 1) / 2;
  parallel_for<int64_t>(pairs, n > k::kParallelMin, [&](int64_t p) {
    Rng r = rng;
    r.counter = 2 * (uint64_t)p;  // Box–Muller on two uniforms gives two normals
    double u1 = r.uniform(), u2 = r.uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double m = std * std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
    y->v[2 * p] = (float)(m * std::cos(a));
    if (2 * p + 1 < n) y->v[2 * p + 1] = (float)(m * std::sin(a));
  });
  return y;
}

}  // namespace looplm::op
