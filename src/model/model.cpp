#include "model/model.h"

#include <cmath>

#include "core/rng.h"

namespace looplm {

Model::Model(const Config& c) : cfg_(c) {
  cfg_.validate();
  const int64_t V = c.vocab_size, d = c.d_model;
  tok_emb_ = ps_.add("tok_emb.weight", {V, d});
  if (c.pos == "learned") pos_emb_ = ps_.add("pos_emb.weight", {(int64_t)c.context, d});
  for (int i = 0; i < c.n_prelude; ++i) prelude_.push_back(make_block(ps_, "prelude." + std::to_string(i), c));
  for (int i = 0; i < c.n_core; ++i) core_.push_back(make_block(ps_, "core." + std::to_string(i), c));
  for (int i = 0; i < c.n_coda; ++i) coda_.push_back(make_block(ps_, "coda." + std::to_string(i), c));
  rule_ = make_loop_rule(ps_, c);
  norm_f_ = std::make_unique<Norm>(ps_, "norm_f", c);
  if (!c.tie_embeddings) {
    lm_head_w_ = ps_.add("lm_head.weight", {V, d});
    if (c.bias) lm_head_b_ = ps_.add("lm_head.bias", {V});
  }
  ps_.finalize();

  E_ = ps_.view(tok_emb_);
  P_ = pos_emb_ >= 0 ? ps_.view(pos_emb_) : nullptr;
  for (auto* sec : {&prelude_, &core_, &coda_})
    for (auto& b : *sec) b->bind(ps_);
  rule_->bind(ps_);
  norm_f_->bind(ps_);
  Wlm_ = lm_head_w_ >= 0 ? ps_.view(lm_head_w_) : E_;
  blm_ = lm_head_b_ >= 0 ? ps_.view(lm_head_b_) : nullptr;
  if (c.pos == "rope") rope_ = std::make_unique<RopeTable>(c.context, c.head_dim(), c.rope_base);
}

void Model::init_weights(uint64_t seed) {
  // Matrices N(0, init_std); norm gains 1; biases 0. Output projections (attn.o, mlp.down) scaled by
  // 1/sqrt(2N); with DeepLoop (p > 0) β = (8N)^-p scales attn.v, attn.o and MLP matrices instead.
  Rng rng(seed, kStreamInit);
  const double N = cfg_.n_unrolled();
  std::vector<double> scale(ps_.infos().size(), 1.0);
  for (auto* sec : {&prelude_, &core_, &coda_})
    for (auto& b : *sec) {
      if (cfg_.deeploop_p > 0) {
        for (int i : b->beta_scaled) scale[i] = std::pow(8.0 * N, -cfg_.deeploop_p);
      } else {
        for (int i : b->output_projections) scale[i] = 1.0 / std::sqrt(2.0 * N);
      }
    }
  for (size_t i = 0; i < ps_.infos().size(); ++i) {
    const ParamInfo& p = ps_.infos()[i];
    float* w = ps_.value((int)i);
    if (p.shape.size() >= 2) {
      for (size_t j = 0; j < p.numel; ++j) w[j] = (float)(rng.normal() * cfg_.init_std * scale[i]);
    } else {
      bool gain = p.name.size() >= 7 && p.name.compare(p.name.size() - 7, 7, ".weight") == 0;
      for (size_t j = 0; j < p.numel; ++j) w[j] = gain ? 1.0f : 0.0f;
    }
  }
}

BlockCtx Model::ctx(int B, int T, const RunOptions& o, int block, int step) const {
  BlockCtx c;
  c.B = B;
  c.T = T;
  c.rope = rope_.get();
  c.pos0 = o.pos0;
  c.kv = o.cache ? o.cache->slot(block, step) : nullptr;
  return c;
}

Node* Model::trunk(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o,
                   const std::function<void(int, Node*)>& on_state) const {
  const int depth = o.depth < 0 ? cfg_.R : o.depth;
  const int np = cfg_.n_prelude;
  const int keep = o.grad_steps < 0 ? depth : std::min(o.grad_steps, depth);
  Node* h_pre;
  {
    // With truncated BPTT and a rule that reads h_pre only at step 1 (`residual`), the prelude gets
    // no gradient unless step 1 is kept; the graph works that out by itself.
    h_pre = op::embedding(g, tokens, B * T, E_, P_, T, o.pos0);
    for (int i = 0; i < np; ++i) h_pre = prelude_[i]->forward(g, h_pre, ctx(B, T, o, i, 0));
  }
  if (on_state) on_state(0, h_pre);
  LoopCtx lc{o.training, cfg_.seed, o.step};
  Node* h = h_pre;
  for (int r = 1; r <= depth; ++r) {
    CoreFn core = [&](Graph& gg, Node* x) {
      for (int i = 0; i < cfg_.n_core; ++i) x = core_[i]->forward(gg, x, ctx(B, T, o, np + i, r - 1));
      return x;
    };
    if (r <= depth - keep) {  // truncated BPTT: run without recording
      Graph::NoGrad ng(g);
      h = rule_->step(g, h, h_pre, r, core, lc);
    } else {
      h = rule_->step(g, h, h_pre, r, core, lc);
    }
    if (on_state) on_state(r, h);
  }
  return h;
}

Node* Model::head(Graph& g, Node* h, int B, int T, const RunOptions& o) const {
  const int base = cfg_.n_prelude + cfg_.n_core;
  for (int i = 0; i < cfg_.n_coda; ++i) h = coda_[i]->forward(g, h, ctx(B, T, o, base + i, 0));
  return op::linear(g, (*norm_f_)(g, h), Wlm_, blm_);
}

double Model::flops_per_token(int depth) const {
  const double d = cfg_.d_model, f = cfg_.ff_dim(), V = cfg_.vocab_size, T = cfg_.context;
  const double mlp = cfg_.mlp == "swiglu" ? 3 * d * f : 2 * d * f;
  const double block = 2 * (4 * d * d + mlp) + 2 * T * d;  // matmuls + causal QK^T and PV (avg T/2 keys)
  return (cfg_.n_prelude + cfg_.n_core * depth + cfg_.n_coda) * block + 2 * d * V;
}

}  // namespace looplm
