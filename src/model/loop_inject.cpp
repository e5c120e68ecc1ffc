// The `inject_linear` loop rule (docs/systems.md, Huginn's linear injection): each step feeds the
// core a linear map of the state and the prelude's output,
//
//   s^(0) = 0 or a seeded draw,   s^(r) = core(W_proj [s^(r-1), h_pre])   (+ b_proj when biases are on)
//
// which is the gated rule without its gate and noise. `inject_state_init` picks s^(0): `zero`, or
// `like_init`, Huginn-0125's `state_init: "like-init"` — a normal of std σ = √(2 / (5 d)) cut at
// ±3σ, times emb_scale (std √(2/5) ≈ 0.632 when emb_scale = √d, as Huginn's). Huginn draws it anew
// on every call; here it is a pure function of (inject_state_seed, the token's position), so eval
// and generation stay reproducible, a token gets the same state in a full pass and in cached
// decoding, and the draw does not depend on the batch (docs/systems.md). With `inject_readout_norm`
// the exit reads norm_f(s^(r)) (its weights shared with the final norm): Huginn applies its ln_f
// before the coda and again after it.
#include <cmath>
#include <cstdint>

#include "core/rng.h"
#include "model/components.h"
#include "model/layers.h"

namespace looplm {

namespace {

class InjectLinearRule : public LoopRule {
 public:
  InjectLinearRule(ParamStore& ps, const Config& c)
      : cfg_(c),
        d_(c.d_model),
        readout_norm_(c.get_bool("inject_readout_norm")),
        like_init_(c.get_string("inject_state_init") == "like_init"),
        seed_((uint64_t)c.get_int("inject_state_seed")) {
    const int64_t d = c.d_model;
    proj_w_ = ps.add("loop.proj.weight", {d, 2 * d}, matrix_init(c));
    if (c.bias) proj_b_ = ps.add("loop.proj.bias", {d}, Init::zeros());
  }
  void bind(ParamStore& ps) override {
    Wproj_ = ps.matrix(proj_w_);
    bproj_ = proj_b_ >= 0 ? ps.view(proj_b_) : nullptr;
    if (!readout_norm_) return;
    norm_ = Norm::existing(ps, "norm_f", cfg_);
    norm_.bind(ps);
  }
  Node* init_state(Graph& g, Node* h_pre, const LoopCtx& ctx) const override {
    // zero: x − x, with h_pre's shape (exactly 0 for the finite values a prelude produces)
    if (!like_init_) return op::axpby(g, -1.0f, h_pre, h_pre);
    // like_init: row n is the draw of its position, a constant (no gradient flows into it)
    Node* s = g.node(h_pre->rows, h_pre->cols, false);
    for (int64_t n = 0; n < s->rows; ++n) like_init_row(ctx.position(n), s->v + n * s->cols, s->cols);
    return s;
  }
  // The d values of position p: Rng(inject_state_seed, kStreamState, p)'s standard normals in
  // order (Box-Muller, one cosine per pair of uniforms), those outside ±3 drawn again, times
  // emb_scale · √(2 / (5 d)). reference/looplm_ref.py (like_init_state) reproduces it: fixture huginn_like_init.
  void like_init_row(int p, float* out, int64_t d) const {
    const double sigma = std::sqrt(2.0 / (5.0 * (double)cfg_.d_model)) * cfg_.emb_scale;
    Rng rng(seed_, kStreamState, (uint64_t)(uint32_t)p);
    for (int64_t i = 0; i < d; ++i) {
      double z;
      do z = rng.normal();
      while (std::abs(z) > 3.0);
      out[i] = (float)(sigma * z);
    }
  }
  Node* step(Graph& g, Node* s, Node* h_pre, int, const CoreFn& core, const LoopCtx&) const override {
    return core(g, linear(g, op::concat(g, s, h_pre), *Wproj_, bproj_));
  }
  Node* readout(Graph& g, Node* s) const override { return readout_norm_ ? norm_(g, s) : s; }
  double flops_per_token() const override { return 4.0 * d_ * d_; }  // W_proj: 2d → d

 private:
  Config cfg_;
  double d_;
  bool readout_norm_;
  bool like_init_;
  uint64_t seed_;
  int proj_w_ = -1, proj_b_ = -1;
  WeightMatrix* Wproj_ = nullptr;
  Node* bproj_ = nullptr;
  Norm norm_;
};

}  // namespace

void register_inject_rule(Registries& r) {
  r.loop_rules.add({"inject_linear", "s(0) = 0 or a seeded draw; s(r) = core(W_proj [s(r-1), h_pre])  (Huginn's linear injection)",
                    {ConfigKey::flag("inject_readout_norm", false,
                                     "inject_linear: the exit reads norm_f(s) (norm_f's weights) before the coda (Huginn)"),
                     ConfigKey::choice("inject_state_init", "zero", {"zero", "like_init"},
                                       "inject_linear: the state before step 1: zero, or Huginn's like-init (a normal of std "
                                       "emb_scale·sqrt(2/(5·d_model)) cut at ±3 std, drawn from inject_state_seed and the token's position)"),
                     ConfigKey::integer("inject_state_seed", 0, 0, INT32_MAX,
                                        "inject_linear: the seed of the like_init state (the same seed, the same state for every run)")},
                    [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> {
                      return std::make_unique<InjectLinearRule>(ps, c);
                    },
                    {}});
}

}  // namespace looplm
