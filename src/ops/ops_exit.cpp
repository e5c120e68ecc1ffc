// The exit gate's training ops (docs/systems.md, Learned exit gate): per-token cross-entropy and the
// two objectives, each wrapping a kernel pair of kernels_exit.h. An objective takes its R exits as
// separate [N, 1] nodes (each exit's head made them); they are gathered exit-major into scratch for
// the kernels and their gradients scattered back (N·R floats: nothing next to the logits).
#include <cstring>

#include "ops/kernels_exit.h"
#include "ops/ops.h"

namespace looplm::op {

Node* token_cross_entropy(Graph& g, Node* logits, const int32_t* targets) {
  const int N = (int)logits->rows, V = (int)logits->cols;
  Node* loss = g.output(N, 1, logits);
  int32_t* tgt = g.scratch<int32_t>(N);
  std::memcpy(tgt, targets, sizeof(int32_t) * N);
  float* lse = g.scratch<float>(N);
  k::token_xent_fwd(logits->v, tgt, lse, loss->v, N, V);
  if (loss->requires_grad)
    g.record(loss, [&g, logits, tgt, lse, loss, N, V] {
      bool acc = false;
      if (float* dz = g.grad_of(logits, acc)) k::token_xent_bwd(logits->v, tgt, lse, loss->g, dz, acc, N, V);
    });
  return loss;
}

Node* head_token_loss(Graph& g, Node* x, Node* W, Node* b, const int32_t* targets) {
  const int N = (int)x->rows, d = (int)x->cols, V = (int)W->rows;
  LOOPLM_ASSERT(W->cols == d, "head_token_loss: W [V, d] must match x [N, d]");
  Node* loss = g.output(N, 1, x, W, b);
  int32_t* tgt = g.scratch<int32_t>(N);
  std::memcpy(tgt, targets, sizeof(int32_t) * N);
  float* lse = g.scratch<float>(N);
  const bool bf16 = g.bf16_products();
  const size_t chunk = (size_t)k::head_chunk_rows(N, V) * V;
  {  // the chunk's logits live only while the op runs: given back to the arena at once
    const Graph::Mark m = g.mark();
    k::head_xent_fwd(x->v, W->v, b ? b->v : nullptr, tgt, lse, loss->v, N, d, V, g.scratch<float>(chunk), bf16);
    g.rewind(m);
  }
  if (loss->requires_grad)
    g.record(loss, [&g, x, W, b, tgt, lse, loss, chunk, N, d, V, bf16] {
      bool ax = false, aw = false, ab = false;
      float* dx = g.grad_of(x, ax);
      float* dW = g.grad_of(W, aw);
      float* db = b ? g.grad_of(b, ab) : nullptr;
      const Graph::Mark m = g.mark();  // the same in backward: one chunk's logits at a time, whatever the exits
      k::head_xent_bwd(x->v, W->v, b ? b->v : nullptr, tgt, lse, loss->g, dx, ax, dW, db, N, d, V,
                       g.scratch<float>(chunk), bf16);
      g.rewind(m);
    });
  return loss;
}

namespace {

// The exits' [N, 1] values side by side, exit-major [R·N] (a null node: zeros).
float* gather(Graph& g, Node* const* x, int R, int N) {
  float* out = g.scratch<float>((size_t)R * N);
  for (int r = 0; r < R; ++r) {
    if (x[r]) LOOPLM_ASSERT(x[r]->numel() == N, "exit objective: an exit's values are not [N, 1]");
    if (x[r]) std::memcpy(out + (size_t)r * N, x[r]->v, sizeof(float) * N);
    else std::memset(out + (size_t)r * N, 0, sizeof(float) * N);
  }
  return out;
}
// d/dx of each exit's node from the exit-major gradient (+= where the node already has one).
void scatter(Graph& g, Node* const* x, int R, int N, const float* d) {
  for (int r = 0; r < R; ++r) {
    bool acc = false;
    float* dx = x[r] ? g.grad_of(x[r], acc) : nullptr;
    if (!dx) continue;
    for (int n = 0; n < N; ++n) dx[n] = acc ? dx[n] + d[(size_t)r * N + n] : d[(size_t)r * N + n];
  }
}
Node** kept(Graph& g, Node* const* x, int R) {
  Node** out = g.scratch<Node*>(R);
  for (int r = 0; r < R; ++r) out[r] = x[r];
  return out;
}
uint8_t* valid_rows(Graph& g, const int32_t* targets, int N) {
  uint8_t* v = g.scratch<uint8_t>(N);
  for (int n = 0; n < N; ++n) v[n] = targets[n] >= 0;
  return v;
}
bool any_grad(Node* const* x, int R) {
  for (int r = 0; r < R; ++r)
    if (x[r] && x[r]->requires_grad) return true;
  return false;
}

}  // namespace

Node* exit_objective(Graph& g, Node* const* losses, Node* const* gates, int R, const int32_t* targets, bool batch_prior,
                     double beta, k::ExitSummary* summary, std::vector<double>* distribution) {
  LOOPLM_ASSERT(R >= 1 && losses[0], "exit objective: no exits");
  const int N = (int)losses[0]->numel();
  float* L = gather(g, losses, R, N);
  float* lam = gather(g, gates, R, N);
  float* p = g.scratch<float>((size_t)R * N);
  float* pbar = g.scratch<float>(R);
  uint8_t* valid = valid_rows(g, targets, N);
  Node* out = g.node(1, 1, g.grad_enabled() && (any_grad(losses, R) || any_grad(gates, R)));
  out->v[0] = (float)k::exit_objective_fwd(L, lam, valid, N, R, batch_prior, (float)beta, p, pbar, summary);
  if (distribution) distribution->assign(pbar, pbar + R);
  if (out->requires_grad) {
    Node** ls = kept(g, losses, R);
    Node** gs = kept(g, gates, R);
    const float b = (float)beta;
    g.record(out, [&g, out, ls, gs, L, lam, p, pbar, valid, N, R, batch_prior, b] {
      float* dL = g.scratch<float>((size_t)R * N);
      float* dlam = g.scratch<float>((size_t)R * N);
      k::exit_objective_bwd(L, lam, p, pbar, valid, N, R, batch_prior, b, out->g[0], dL, dlam);
      scatter(g, ls, R, N, dL);
      scatter(g, gs, R, N, dlam);
    });
  }
  return out;
}

Node* exit_gate_bce(Graph& g, Node* const* logits, const float* targets_w, int R, const int32_t* targets) {
  LOOPLM_ASSERT(R >= 1 && logits[0], "exit gate BCE: no exits");
  const int N = (int)logits[0]->numel();
  float* z = gather(g, logits, R, N);
  float* w = g.scratch<float>((size_t)R * N);
  std::memcpy(w, targets_w, sizeof(float) * R * N);
  uint8_t* valid = valid_rows(g, targets, N);
  Node* out = g.node(1, 1, g.grad_enabled() && any_grad(logits, R));
  out->v[0] = (float)k::exit_bce_fwd(z, w, valid, N, R);
  if (out->requires_grad) {
    Node** zs = kept(g, logits, R);
    g.record(out, [&g, out, zs, z, w, valid, N, R] {
      float* dz = g.scratch<float>((size_t)R * N);
      k::exit_bce_bwd(z, w, valid, N, R, out->g[0], dz);
      scatter(g, zs, R, N, dz);
    });
  }
  return out;
}

}  // namespace looplm::op
