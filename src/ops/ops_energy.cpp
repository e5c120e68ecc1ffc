// The energy blocks' ops (NRGPT and CEM in docs/systems.md). Each wraps a kernel pair of
// kernels_energy.h and records its backward (graph.h has the contract).
#include "ops/kernels_energy.h"
#include "ops/ops.h"

namespace looplm::op {

Node* gelu_prime_mul(Graph& g, Node* u, Node* v) {
  LOOPLM_ASSERT(u->numel() == v->numel(), "gelu_prime_mul: shapes differ");
  Node* y = g.output(u->rows, u->cols, u, v);
  k::gelu_prime_mul_fwd(u->v, v->v, y->v, y->numel());
  if (y->requires_grad)
    g.record(y, [&g, u, v, y] {
      bool au = false, av = false;
      float* du = g.grad_of(u, au);
      float* dv = g.grad_of(v, av);
      k::gelu_prime_mul_bwd(u->v, v->v, y->g, du, au, dv, av, y->numel());
    });
  return y;
}

Node* gelu_gelu_prime(Graph& g, Node* u) {
  Node* y = g.output(u->rows, u->cols, u);
  k::gelu_gelu_prime_fwd(u->v, y->v, y->numel());
  if (y->requires_grad)
    g.record(y, [&g, u, y] {
      bool acc = false;
      if (float* du = g.grad_of(u, acc)) k::gelu_gelu_prime_bwd(u->v, y->g, du, acc, y->numel());
    });
  return y;
}

Node* matmul(Graph& g, Node* x, Node* W, float alpha) {
  const int N = (int)x->rows, K = (int)x->cols, M = (int)W->cols;
  LOOPLM_ASSERT(W->rows == K, "matmul: W [K, M] must match x [N, K]");
  Node* y = g.output(N, M, x, W);
  k::matmul_fwd(x->v, W->v, y->v, N, K, M, alpha, g.bf16_products());
  if (y->requires_grad)
    g.record(y, [&g, x, W, y, N, K, M, alpha] {
      bool ax = false, aw;
      float* dx = g.grad_of(x, ax);
      float* dW = g.grad_of(W, aw);
      k::matmul_bwd(x->v, W->v, y->g, dx, ax, dW, N, K, M, alpha, g.bf16_products());
    });
  return y;
}

Node* mul_row(Graph& g, Node* x, Node* w, float c) {
  const int N = (int)x->rows, C = (int)x->cols;
  LOOPLM_ASSERT(w->numel() == C, "mul_row: the row must have x's width");
  Node* y = g.output(N, C, x, w);
  k::mul_row_fwd(x->v, w->v, c, y->v, N, C);
  if (y->requires_grad)
    g.record(y, [&g, x, w, c, y, N, C] {
      bool ax = false, aw = false;
      float* dx = g.grad_of(x, ax);
      float* dw = g.grad_of(w, aw);
      if (dw && !aw) std::fill(dw, dw + C, 0.0f);  // a row that is not a parameter starts from zero
      k::mul_row_bwd(x->v, w->v, c, y->g, dx, ax, dw, N, C);
    });
  return y;
}

Node* repeat_cols(Graph& g, Node* x, int n) {
  const int N = (int)x->rows, d = (int)x->cols;
  Node* y = g.output(N, (int64_t)n * d, x);
  k::repeat_cols_fwd(x->v, y->v, N, d, n);
  if (y->requires_grad)
    g.record(y, [&g, x, y, N, d, n] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::sum_blocks_fwd(y->g, dx, acc, N, d, n);
    });
  return y;
}

Node* sum_blocks(Graph& g, Node* x, int n) {
  const int N = (int)x->rows, d = (int)(x->cols / n);
  LOOPLM_ASSERT((int64_t)d * n == x->cols, "sum_blocks: width is not a multiple of n");
  Node* y = g.output(N, d, x);
  k::sum_blocks_fwd(x->v, y->v, false, N, d, n);
  if (y->requires_grad)
    g.record(y, [&g, x, y, N, d, n] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::repeat_cols_acc(y->g, dx, acc, N, d, n);
    });
  return y;
}

Node* head_concat(Graph& g, Node* A, Node* B, int H) {
  const int N = (int)A->rows, a = (int)(A->cols / H), b = (int)B->cols;
  LOOPLM_ASSERT((int64_t)a * H == A->cols && B->rows == N, "head_concat: A [N, H·a], B [N, b]");
  Node* y = g.output(N, (int64_t)H * (a + b), A, B);
  k::head_concat_fwd(A->v, B->v, y->v, N, H, a, b);
  if (y->requires_grad)
    g.record(y, [&g, A, B, y, N, H, a, b] {
      bool aa = false, ab = false;
      float* dA = g.grad_of(A, aa);
      float* dB = g.grad_of(B, ab);
      k::head_concat_bwd(y->g, dA, aa, dB, ab, N, H, a, b);
    });
  return y;
}

Node* head_slice(Graph& g, Node* Y, int H, int c0, int n) {
  const int N = (int)Y->rows, w = (int)(Y->cols / H);
  LOOPLM_ASSERT((int64_t)w * H == Y->cols && c0 >= 0 && c0 + n <= w, "head_slice: columns outside the head");
  Node* z = g.output(N, (int64_t)H * n, Y);
  k::head_slice_fwd(Y->v, z->v, N, H, w, c0, n);
  if (z->requires_grad)
    g.record(z, [&g, Y, z, N, H, w, c0, n] {
      bool acc = false;
      if (float* dY = g.grad_of(Y, acc)) k::head_slice_bwd(z->g, dY, acc, N, H, w, c0, n);
    });
  return z;
}

Node* mul(Graph& g, Node* a, Node* b) {
  LOOPLM_ASSERT(a->numel() == b->numel(), "mul: shapes differ");
  Node* y = g.output(a->rows, a->cols, a, b);
  k::mul_fwd(a->v, b->v, y->v, y->numel());
  if (y->requires_grad)
    g.record(y, [&g, a, b, y] {
      bool aa = false, ab = false;
      float* da = g.grad_of(a, aa);
      float* db = g.grad_of(b, ab);
      k::mul_bwd(a->v, b->v, y->g, da, aa, db, ab, y->numel());
    });
  return y;
}

Node* softplus(Graph& g, Node* x) {
  Node* y = g.output(x->rows, x->cols, x);
  k::softplus_fwd(x->v, y->v, x->numel());
  if (y->requires_grad)
    g.record(y, [&g, x, y] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::softplus_bwd(x->v, y->g, dx, acc, x->numel());
    });
  return y;
}

Node* rope(Graph& g, Node* x, int B, int T, int H, RopeAngles ra, const RowPlace& at) {
  const int d = (int)x->cols, hd = d / H, half = hd / 2;
  LOOPLM_ASSERT(x->rows == (int64_t)B * T && hd * H == d, "rope: x must be [B*T, H·hd]");
  for (int b = 0; b < (at.pos ? B : 1); ++b)
    LOOPLM_ASSERT(at.at(b) + T <= ra.positions, "rope: positions beyond the RoPE table");
  Node* y = g.output(x->rows, d, x);
  LOOPLM_ASSERT(!at.pos || !y->requires_grad, "rope: per-row positions are for generation (no gradients)");
  parallel_for<int>(B * H, (int64_t)B * T * d > k::kParallelMin, [&](int bh) {
    const int64_t off = (int64_t)(bh / H) * T * d + (bh % H) * hd;
    const size_t p0 = (size_t)at.at(bh / H) * half;
    k::rope_fwd(x->v + off, d, y->v + off, d, ra.cos + p0, ra.sin + p0, T, hd);
  });
  if (y->requires_grad) {
    const float* cs = ra.cos + (size_t)at.pos0 * half;
    const float* sn = ra.sin + (size_t)at.pos0 * half;
    g.record(y, [&g, x, y, B, T, H, d, hd, cs, sn] {
      bool acc = false;
      float* dx = g.grad_of(x, acc);
      if (!dx) return;
      parallel_for<int>(B * H, (int64_t)B * T * d > k::kParallelMin, [&](int bh) {
        const int64_t off = (int64_t)(bh / H) * T * d + (bh % H) * hd;
        k::rope_bwd(y->g + off, d, dx + off, d, cs, sn, T, hd, acc);
      });
    });
  }
  return y;
}

}  // namespace looplm::op
