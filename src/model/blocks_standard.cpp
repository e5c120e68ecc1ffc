// The standard block kinds (docs/systems.md, Building blocks).
#include <cmath>

#include "model/components.h"

namespace looplm {

// Common parts: attention + MLP with their norms (parameters registered in this order).
class AttnMlpBlock : public Block {
 protected:
  AttnMlpBlock(ParamStore& ps, const std::string& p, const Config& c)
      : d_(c.d_model), f_(c.ff_dim()), dq_((double)c.q_width()), dkv_((double)c.kv_width()), swiglu_(c.mlp == "swiglu"), attn_norm(ps, p + ".attn_norm", c), attn(ps, p + ".attn", c) {
    mlp_norm = Norm(ps, p + ".mlp_norm", c);
    mlp = Mlp(ps, p + ".mlp", c);
  }
  void bind(ParamStore& ps) override {
    attn_norm.bind(ps);
    attn.bind(ps);
    mlp_norm.bind(ps);
    mlp.bind(ps);
  }
  // q, o (d·dq each), k, v (d·dkv each; 4d² for plain attention) and the MLP (2·d·f, swiglu 3·d·f)
  // multiply-adds, and QKᵀ plus PV over T/2 keys for each of the dq query columns.
  double flops_per_token(int T) const override {
    const double d = d_, f = f_;
    return 2 * (2 * d * dq_ + 2 * d * dkv_ + (swiglu_ ? 3 : 2) * d * f) + 2.0 * T * dq_;
  }
  double d_, f_, dq_, dkv_;
  bool swiglu_;
  Norm attn_norm;
  Attention attn;
  Norm mlp_norm;
  Mlp mlp;
};

// pre_norm (GPT-2 / Llama): x = x + attn(n1(x)); x = x + mlp(n2(x))
class PreNormBlock : public AttnMlpBlock {
 public:
  PreNormBlock(ParamStore& ps, const std::string& p, const Config& c) : AttnMlpBlock(ps, p, c) {}
  Node* forward(Graph& g, Node* x, const BlockCtx& ctx) const override {
    x = op::add(g, x, attn(g, attn_norm(g, x), ctx));
    return op::add(g, x, mlp(g, mlp_norm(g, x)));
  }
};

// parallel (NRGPT's GPT_Rec_parallel): x = x + attn(n1(x)) + mlp(n2(x))
class ParallelBlock : public AttnMlpBlock {
 public:
  ParallelBlock(ParamStore& ps, const std::string& p, const Config& c) : AttnMlpBlock(ps, p, c) {}
  Node* forward(Graph& g, Node* x, const BlockCtx& ctx) const override {
    Node* a = attn(g, attn_norm(g, x), ctx);
    Node* m = mlp(g, mlp_norm(g, x));
    return op::add(g, op::add(g, x, a), m);
  }
};

// sandwich (post-norm; DeepLoop / DeepNorm / Huginn), α = (2N)^p, 1 when p = 0 (docs/systems.md,
// DeepLoop and DeepNorm):
//   x = n2(α·x + attn(n1(x)));  x = n4(α·x + mlp(n3(x)))
class SandwichBlock : public AttnMlpBlock {
 public:
  SandwichBlock(ParamStore& ps, const std::string& p, const Config& c)
      : AttnMlpBlock(ps, p, c),
        attn_post_norm(ps, p + ".attn_post_norm", c),
        mlp_post_norm(ps, p + ".mlp_post_norm", c),
        alpha_((float)deeploop_alpha(c)) {}
  void bind(ParamStore& ps) override {
    AttnMlpBlock::bind(ps);
    attn_post_norm.bind(ps);
    mlp_post_norm.bind(ps);
  }
  Node* forward(Graph& g, Node* x, const BlockCtx& ctx) const override {
    x = attn_post_norm(g, op::axpby(g, alpha_, x, attn(g, attn_norm(g, x), ctx)));
    return mlp_post_norm(g, op::axpby(g, alpha_, x, mlp(g, mlp_norm(g, x))));
  }
 private:
  Norm attn_post_norm, mlp_post_norm;
  float alpha_;
};

// peri_norm (Ouro): each sub-layer's output normed before it joins the stream, the stream itself
// never normed by the block:
//   x = x + n2(attn(n1(x)));  x = x + n4(mlp(n3(x)))
// (sandwich norms the sum instead). The same four norms and names as sandwich.
class PeriNormBlock : public AttnMlpBlock {
 public:
  PeriNormBlock(ParamStore& ps, const std::string& p, const Config& c)
      : AttnMlpBlock(ps, p, c), attn_post_norm(ps, p + ".attn_post_norm", c), mlp_post_norm(ps, p + ".mlp_post_norm", c) {}
  void bind(ParamStore& ps) override {
    AttnMlpBlock::bind(ps);
    attn_post_norm.bind(ps);
    mlp_post_norm.bind(ps);
  }
  Node* forward(Graph& g, Node* x, const BlockCtx& ctx) const override {
    x = op::add(g, x, attn_post_norm(g, attn(g, attn_norm(g, x), ctx)));
    return op::add(g, x, mlp_post_norm(g, mlp(g, mlp_norm(g, x))));
  }
 private:
  Norm attn_post_norm, mlp_post_norm;
};

template <class B>
BlockFactory factory() {
  return [](ParamStore& ps, const std::string& prefix, const Config& c) -> std::unique_ptr<Block> {
    return std::make_unique<B>(ps, prefix, c);
  };
}

void register_standard_blocks(Registries& r) {
  r.blocks.add({"pre_norm", "x = x + attn(n1(x)); x = x + mlp(n2(x))  (GPT-2 / Llama)", {}, factory<PreNormBlock>(), {}});
  r.blocks.add({"parallel", "x = x + attn(n1(x)) + mlp(n2(x))  (NRGPT's GPT_Rec_parallel)", {}, factory<ParallelBlock>(), {}});
  r.blocks.add({"sandwich",
                "post-norm x = n2(α·x + attn(n1(x))); x = n4(α·x + mlp(n3(x))), α = (2N)^deeploop_p  (DeepLoop / DeepNorm)",
                {}, factory<SandwichBlock>(), {}});
  r.blocks.add({"peri_norm", "x = x + n2(attn(n1(x))); x = x + n4(mlp(n3(x)))  (Ouro: sub-layer outputs normed)", {},
                factory<PeriNormBlock>(), {}});
}

}  // namespace looplm
