#include "model/layers.h"

#include <cmath>

namespace looplm {

double deeploop_beta(const Config& c) { return std::pow(8.0 * c.n_unrolled(), -c.deeploop_p); }
double deeploop_alpha(const Config& c) { return c.deeploop_p > 0 ? std::pow(2.0 * c.n_unrolled(), c.deeploop_p) : 1.0; }
Init matrix_init(const Config& c) { return Init::normal(c.init_std); }
Init value_init(const Config& c) {
  return Init::normal(c.deeploop_p > 0 ? c.init_std * deeploop_beta(c) : c.init_std);
}
Init output_init(const Config& c) {
  return Init::normal(c.init_std * (c.deeploop_p > 0 ? deeploop_beta(c) : 1.0 / std::sqrt(2.0 * c.n_unrolled())));
}

Node* linear(Graph& g, Node* x, const WeightMatrix& W, Node* b) {
  g.tap_input(&W, x);
  if (W.packed && !g.grad_enabled()) return op::linear_packed(g, x, W.packed, b);
  return op::linear(g, x, W.node, b);
}

// ---------------------------------------------------------------- Norm
Norm::Norm(ParamStore& ps, const std::string& name, const Config& c)
    : layer_(c.norm == "layernorm"), eps_(c.norm_eps) {
  w_ = ps.add(name + ".weight", {c.d_model}, Init::ones());
  if (layer_) b_ = ps.add(name + ".bias", {c.d_model}, Init::zeros());
}

Norm Norm::existing(const ParamStore& ps, const std::string& name, const Config& c) {
  Norm n;
  n.layer_ = c.norm == "layernorm";
  n.eps_ = c.norm_eps;
  n.w_ = ps.find(name + ".weight");
  n.b_ = n.layer_ ? ps.find(name + ".bias") : -1;
  LOOPLM_ASSERT(n.w_ >= 0 && (!n.layer_ || n.b_ >= 0), "Norm::existing: the norm's params are not registered");
  return n;
}

void Norm::bind(ParamStore& ps) {
  W = ps.view(w_);
  Bn = b_ >= 0 ? ps.view(b_) : nullptr;
}

Node* Norm::operator()(Graph& g, Node* x) const {
  return layer_ ? op::layernorm(g, x, W, Bn, eps_) : op::rmsnorm(g, x, W, eps_);
}

// ---------------------------------------------------------------- Attention
Attention::Attention(ParamStore& ps, const std::string& p, const Config& c)
    : d_(c.d_model), H_(c.n_heads), Hkv_(c.kv_heads()), dq_((int)c.q_width()), dkv_((int)c.kv_width()) {
  const int64_t d = d_;
  // q|k|v adjacent: one GEMM makes [N, dq + 2 dkv] (dq = n_heads·d_head, dkv = n_kv_heads·d_head)
  q_w = ps.add(p + ".q.weight", {dq_, d}, matrix_init(c));
  ps.add(p + ".k.weight", {dkv_, d}, matrix_init(c));
  v_w = ps.add(p + ".v.weight", {dkv_, d}, value_init(c));
  if (c.bias) {
    q_b = ps.add(p + ".q.bias", {dq_}, Init::zeros());
    ps.add(p + ".k.bias", {dkv_}, Init::zeros());
    v_b = ps.add(p + ".v.bias", {dkv_}, Init::zeros());
  }
  o_w = ps.add(p + ".o.weight", {d, dq_}, output_init(c));
  if (c.bias) o_b = ps.add(p + ".o.bias", {d}, Init::zeros());
}

void Attention::bind(ParamStore& ps) {
  Wqkv = ps.matrix(q_w, v_w, dq_ + 2 * dkv_, d_);
  bqkv = q_b >= 0 ? ps.view(q_b, v_b, 1, dq_ + 2 * dkv_) : nullptr;
  Wo = ps.matrix(o_w);
  bo = o_b >= 0 ? ps.view(o_b) : nullptr;
}

Node* Attention::operator()(Graph& g, Node* x, const BlockCtx& c) const {
  g.tap("attn.in", x);
  Node* qkv = linear(g, x, *Wqkv, bqkv);  // [B*T, dq + 2 dkv]
  op::AttnOptions ao;
  ao.kv_heads = Hkv_;
  Node* y = c.cache ? op::attention_cached(g, qkv, c.B, c.T, H_, c.rope, c.cache, c.place, ao)
                 : op::attention(g, qkv, c.B, c.T, H_, c.rope, ao);
  g.tap("attn.o.in", y);
  return linear(g, y, *Wo, bo);
}

// ---------------------------------------------------------------- MLP
Mlp::Mlp(ParamStore& ps, const std::string& p, const Config& c)
    : swiglu_(c.mlp == "swiglu"), d_(c.d_model), f_(c.ff_dim()) {
  const int64_t d = d_, f = f_;
  if (swiglu_) {
    gate_w = ps.add(p + ".gate.weight", {f, d}, value_init(c));  // gate|up adjacent: one GEMM makes [N, 2f]
    up_w = ps.add(p + ".up.weight", {f, d}, value_init(c));
    if (c.bias) {
      gate_b = ps.add(p + ".gate.bias", {f}, Init::zeros());
      up_b = ps.add(p + ".up.bias", {f}, Init::zeros());
    }
  } else {
    up_w = ps.add(p + ".up.weight", {f, d}, value_init(c));
    if (c.bias) up_b = ps.add(p + ".up.bias", {f}, Init::zeros());
  }
  down_w = ps.add(p + ".down.weight", {d, f}, output_init(c));
  if (c.bias) down_b = ps.add(p + ".down.bias", {d}, Init::zeros());
}

void Mlp::bind(ParamStore& ps) {
  if (swiglu_) {
    Win = ps.matrix(gate_w, up_w, 2 * f_, d_);
    bin = gate_b >= 0 ? ps.view(gate_b, up_b, 1, 2 * f_) : nullptr;
  } else {
    Win = ps.matrix(up_w);
    bin = up_b >= 0 ? ps.view(up_b) : nullptr;
  }
  Wdown = ps.matrix(down_w);
  bdown = down_b >= 0 ? ps.view(down_b) : nullptr;
}

Node* Mlp::operator()(Graph& g, Node* x) const {
  g.tap("mlp.in", x);
  Node* u = linear(g, x, *Win, bin);
  if (swiglu_) {
    Node* a = op::swiglu(g, u);
    g.tap("mlp.down.in", a);
    return linear(g, a, *Wdown, bdown);
  }
  // GELU: the fused op stores only u (gelu(u) is recomputed in backward); gelu(u) is made as a
  // tensor only for an observer or for a packed inference weight.
  const bool packed = Wdown->packed && !g.grad_enabled();
  if (packed || g.observing()) {
    Node* a;
    {
      Graph::NoGrad ng(g);  // the fused op below keeps the gradient path
      a = op::gelu(g, u);
    }
    g.tap("mlp.down.in", a);
    if (packed) return linear(g, a, *Wdown, bdown);
    g.tap_input(Wdown, a);  // the fused op below multiplies by Wdown outside linear()
  }
  return op::gelu_linear(g, u, Wdown->node, bdown);
}

}  // namespace looplm
