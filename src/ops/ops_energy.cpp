// The energy blocks' ops (SPEC §2.3 NRGPT, §2.4 CEM). Each wraps a kernel pair of
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
  k::matmul_fwd(x->v, W->v, y->v, N, K, M, alpha);
  if (y->requires_grad)
    g.record(y, [&g, x, W, y, N, K, M, alpha] {
      bool ax = false, aw;
      float* dx = g.grad_of(x, ax);
      float* dW = g.grad_of(W, aw);
      k::matmul_bwd(x->v, W->v, y->g, dx, ax, dW, N, K, M, alpha);
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

}  // namespace looplm::op
