#include "model/layers.h"

namespace looplm {

// ---------------------------------------------------------------- Norm
Norm::Norm(ParamStore& ps, const std::string& name, const Config& c)
    : layer_(c.norm == "layernorm"), eps_(c.norm_eps) {
  w_ = ps.add(name + ".weight", {c.d_model});
  if (layer_) b_ = ps.add(name + ".bias", {c.d_model});
}

void Norm::bind(ParamStore& ps) {
  W = ps.view(w_);
  Bn = b_ >= 0 ? ps.view(b_) : nullptr;
}

Node* Norm::operator()(Graph& g, Node* x) const {
  return layer_ ? op::layernorm(g, x, W, Bn, eps_) : op::rmsnorm(g, x, W, eps_);
}

// ---------------------------------------------------------------- Attention
Attention::Attention(ParamStore& ps, const std::string& p, const Config& c) : d_(c.d_model), H_(c.n_heads) {
  const int64_t d = d_;
  q_w = ps.add(p + ".q.weight", {d, d});  // q|k|v adjacent: one GEMM makes [N, 3d]
  k_w = ps.add(p + ".k.weight", {d, d});
  v_w = ps.add(p + ".v.weight", {d, d});
  if (c.bias) {
    q_b = ps.add(p + ".q.bias", {d});
    ps.add(p + ".k.bias", {d});
    v_b = ps.add(p + ".v.bias", {d});
  }
  o_w = ps.add(p + ".o.weight", {d, d});
  if (c.bias) o_b = ps.add(p + ".o.bias", {d});
}

void Attention::bind(ParamStore& ps) {
  Wqkv = ps.view(q_w, v_w, 3 * d_, d_);
  bqkv = q_b >= 0 ? ps.view(q_b, v_b, 1, 3 * d_) : nullptr;
  Wo = ps.view(o_w);
  bo = o_b >= 0 ? ps.view(o_b) : nullptr;
}

Node* Attention::operator()(Graph& g, Node* x, const BlockCtx& c) const {
  Node* qkv = op::linear(g, x, Wqkv, bqkv);  // [B*T, 3d]
  Node* y = c.kv ? op::attention_cached(g, qkv, c.B, c.T, H_, c.rope, *c.kv, c.pos0)
                 : op::attention(g, qkv, c.B, c.T, H_, c.rope);
  return op::linear(g, y, Wo, bo);
}

// ---------------------------------------------------------------- MLP
Mlp::Mlp(ParamStore& ps, const std::string& p, const Config& c)
    : swiglu_(c.mlp == "swiglu"), d_(c.d_model), f_(c.ff_dim()) {
  const int64_t d = d_, f = f_;
  if (swiglu_) {
    gate_w = ps.add(p + ".gate.weight", {f, d});  // gate|up adjacent: one GEMM makes [N, 2f]
    up_w = ps.add(p + ".up.weight", {f, d});
    if (c.bias) {
      gate_b = ps.add(p + ".gate.bias", {f});
      up_b = ps.add(p + ".up.bias", {f});
    }
  } else {
    up_w = ps.add(p + ".up.weight", {f, d});
    if (c.bias) up_b = ps.add(p + ".up.bias", {f});
  }
  down_w = ps.add(p + ".down.weight", {d, f});
  if (c.bias) down_b = ps.add(p + ".down.bias", {d});
}

void Mlp::bind(ParamStore& ps) {
  if (swiglu_) {
    Win = ps.view(gate_w, up_w, 2 * f_, d_);
    bin = gate_b >= 0 ? ps.view(gate_b, up_b, 1, 2 * f_) : nullptr;
  } else {
    Win = ps.view(up_w);
    bin = up_b >= 0 ? ps.view(up_b) : nullptr;
  }
  Wdown = ps.view(down_w);
  bdown = down_b >= 0 ? ps.view(down_b) : nullptr;
}

Node* Mlp::operator()(Graph& g, Node* x) const {
  Node* u = op::linear(g, x, Win, bin);
  if (!swiglu_) return op::gelu_linear(g, u, Wdown, bdown);  // = linear(gelu(u)), stores only u
  return op::linear(g, op::swiglu(g, u), Wdown, bdown);
}

}  // namespace looplm
