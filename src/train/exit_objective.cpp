#include "train/exit_objective.h"

#include <cmath>
#include <cstring>

#include "ops/ops.h"

namespace looplm {

namespace {

void copy_values(Node* to, const Node* from) { std::memcpy(to->v, from->v, sizeof(float) * from->numel()); }

}  // namespace

Node* exit_objective_loss(Graph& g, const Model& m, const Config& c, const int32_t* x, const int32_t* y,
                          const RunOptions& ro, ExitMeasure* measured) {
  const int B = c.batch_size, T = c.context, N = B * T;
  const int depth = c.depth_or_R(ro.depth);
  LOOPLM_ASSERT(depth >= 1, "the exit objective needs a loop step");
  std::vector<Node*> losses(depth, nullptr), gates(depth, nullptr);
  // The exit of step r: its coda, head and gate, on the trunk's h^(r) or on a copy of it.
  auto exit = [&](int r, Node* h) {
    Node* fh = m.final_hidden(g, h, B, T, ro);
    losses[r - 1] = m.head_loss(g, fh, y);
    gates[r - 1] = r < depth ? m.exit_gate(g, fh) : nullptr;
  };
  // Steps without gradients (truncated back-propagation) give back everything they allocate, so
  // their exit states are copied into nodes made before the trunk, and their exits run after it,
  // with gradients: the state is detached, the coda, head and gate still learn from every exit.
  // (Without gradients at all, every step gives back its memory: every exit runs from a copy.)
  const int kept = !g.grad_enabled() ? 0 : ro.grad_steps < 0 ? depth : std::min(ro.grad_steps, depth);
  std::vector<Node*> detached(depth - kept);
  for (auto& h : detached) h = g.node(N, c.d_model, false);
  m.trunk(g, x, B, T, ro, [&](int r, Node* h) {
    if (r == 0) return;
    if (r > depth - kept) return exit(r, h);
    std::memcpy(detached[r - 1]->v, h->v, sizeof(float) * h->numel());
  });
  for (int r = 1; r <= depth - kept; ++r) exit(r, detached[r - 1]);
  ExitMeasure local;
  ExitMeasure& out = measured ? *measured : local;
  return op::exit_objective(g, losses.data(), gates.data(), depth, y, c.exit_prior == "batch", c.exit_entropy_beta,
                            &out.summary, &out.distribution);
}

Node* exit_gate_alone_loss(Graph& g, const Model& m, const Config& c, const int32_t* x, const int32_t* y,
                           const RunOptions& ro, ExitMeasure* measured) {
  const int B = c.batch_size, T = c.context, N = B * T;
  const int depth = c.depth_or_R(ro.depth);
  LOOPLM_ASSERT(depth >= 1, "the exit gate's stage II needs a loop step");
  std::vector<float> L((size_t)(depth + 1) * N);  // L[r·N + n]: exit r's loss, r = 0..depth
  std::vector<Node*> hidden(depth);
  for (auto& h : hidden) h = g.node(N, c.d_model, false);
  {
    Graph::NoGrad frozen(g);
    m.trunk(g, x, B, T, ro, [&](int r, Node* h) {
      Node* fh = m.final_hidden(g, h, B, T, ro);
      Node* loss = m.head_loss(g, fh, y);
      std::memcpy(L.data() + (size_t)r * N, loss->v, sizeof(float) * N);
      if (r >= 1) copy_values(hidden[r - 1], fh);
    });
  }
  // The continue target of exit r: did step r still lower the token's loss (by more than γ)?
  std::vector<float> w((size_t)depth * N);
  for (int r = 1; r <= depth; ++r)
    for (int n = 0; n < N; ++n) {
      const double gain = std::max(0.0, (double)L[(size_t)(r - 1) * N + n] - (double)L[(size_t)r * N + n]);
      w[(size_t)(r - 1) * N + n] = (float)(1.0 / (1.0 + std::exp(-c.exit_gate_k * (gain - c.exit_gate_gamma))));
    }
  std::vector<Node*> logits(depth);
  for (int r = 1; r <= depth; ++r) logits[r - 1] = m.exit_gate_logit(g, hidden[r - 1]);
  if (measured) {  // the gate's distribution now, and its expected loss, for the log
    std::vector<float> lam((size_t)depth * N), p((size_t)depth * N), pbar(depth);
    for (int r = 0; r < depth; ++r)
      for (int n = 0; n < N; ++n) lam[(size_t)r * N + n] = 1.0f / (1.0f + std::exp(-logits[r]->v[n]));
    std::vector<uint8_t> valid(N);
    for (int n = 0; n < N; ++n) valid[n] = y[n] >= 0;
    k::exit_objective_fwd(L.data() + N, lam.data(), valid.data(), N, depth, false, 0.0f, p.data(), pbar.data(),
                          &measured->summary);
    measured->distribution.assign(pbar.begin(), pbar.end());
  }
  return op::exit_gate_bce(g, logits.data(), w.data(), depth, y);
}

}  // namespace looplm
