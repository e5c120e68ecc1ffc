// The energy systems beyond the reference fixtures (test_reference.cpp): evaluation's energy
// diagnostics (per step, their fall, the final state's), the config checks of the energy block,
// the parameter count of its layout, and CEM at one step as a tied standard layer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "infer/eval.h"
#include "looplm/error.h"
#include "model/model.h"
#include "test_util.h"

using namespace looplm;
using namespace looplm::test;

namespace {

Config energy_config(const std::string& ff, const std::string& P) {
  Config c;
  c.d_model = 16;
  c.n_heads = 2;
  c.context = 12;
  c.n_prelude = 0;
  c.n_core = 1;
  c.n_coda = 0;
  c.R = 3;
  c.block = "energy";
  c.pos = "learned";
  c.norm = "layernorm";
  c.set("energy_ff", ff);
  c.set("energy_P", P);
  c.validate();
  return c;
}

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11) % 256;
  return t;
}

}  // namespace

// eval reports "energy" (the mean per-token energy of each step's input state), "energy_fell" (the
// fraction of tokens each step lowered) and "energy_final" (the last state's, from one more
// application that is not otherwise counted): evaluating one step deeper must report, at that
// step, exactly the final energy and fall of the shallower run.
TEST(EnergyDiagnostics, PerStepFallAndFinalAreConsistentAcrossDepths) {
  for (const char* ff : {"ff2w", "ff1"}) {
    Config c = energy_config(ff, "matrix");
    Model m(c);
    m.init_weights(3);
    for (auto& w : m.params().values()) w *= 4.0f;  // a state that moves visibly per step
    const std::vector<int32_t> tokens = some_tokens(12 * 6 + 1);
    const EvalResult a = evaluate_tokens(m, tokens, 3, 2, -1);
    const EvalResult b = evaluate_tokens(m, tokens, 4, 2, -1);
    ASSERT_EQ(a.diagnostics.at("energy").size(), 3u) << ff;
    ASSERT_EQ(a.diagnostics.at("energy_fell").size(), 3u) << ff;
    ASSERT_EQ(a.diagnostics.at("energy_final").size(), 1u) << ff;
    for (int s = 0; s < 3; ++s) {
      EXPECT_DOUBLE_EQ(a.diagnostics.at("energy")[s], b.diagnostics.at("energy")[s]) << ff << " step " << s + 1;
      EXPECT_DOUBLE_EQ(a.diagnostics.at("energy_fell")[s], b.diagnostics.at("energy_fell")[s]) << ff;
      const double f = a.diagnostics.at("energy_fell")[s];
      EXPECT_TRUE(f >= 0 && f <= 1) << ff;
    }
    EXPECT_DOUBLE_EQ(a.diagnostics.at("energy_final")[0], b.diagnostics.at("energy")[3]) << ff;
    // the steps differ (the state moves), so the check above compares different numbers
    EXPECT_NE(a.diagnostics.at("energy")[0], a.diagnostics.at("energy")[1]) << ff;
    // losses are those of the exits only: the extra application changes nothing
    for (int s = 0; s < 3; ++s) EXPECT_DOUBLE_EQ(a.loss_by_depth[s], b.loss_by_depth[s]) << ff;
    // a model without energy blocks reports none
  }
  Config plain;
  plain.d_model = 16;
  plain.n_heads = 2;
  plain.context = 12;
  plain.n_core = 1;
  plain.R = 2;
  Model m(plain);
  m.init_weights(1);
  const EvalResult e = evaluate_tokens(m, some_tokens(12 * 2 + 1), 2, 2, -1);
  EXPECT_EQ(e.diagnostics.count("energy"), 0u);
  EXPECT_EQ(e.diagnostics.count("energy_final"), 0u);
}

TEST(EnergyBlock, ConfigChecksAndLayout) {
  Config c = energy_config("ff2w", "matrix");
  c.pos = "rope";
  EXPECT_THROW(c.validate(), UsageError);  // energy blocks take no RoPE (docs/systems.md, NRGPT)
  c.pos = "none";
  c.validate();
  EXPECT_THROW(c.set("energy_ff", "ff3"), UsageError);
  EXPECT_THROW(c.set("energy_P", "full"), UsageError);
  EXPECT_THROW(c.set("energy_c", "0"), UsageError);
  // ff2w + matrix: bias d, H n·d², W1 + b1 f·d + f, W2 + b2 d·f + d, s_ff 1, P d²
  const int64_t d = 16, f = 64, n = 2;
  auto count = [](const Config& k) {
    int64_t s = 0;
    for (const ParamInfo& p : Model::layout(k))
      if (p.name.rfind("core.0.", 0) == 0) s += (int64_t)p.numel;
    return s;
  };
  EXPECT_EQ(count(c), d + n * d * d + f * d + f + d * f + d + 1 + d * d);
  Config c1 = energy_config("ff1", "diag");
  EXPECT_EQ(count(c1), d + n * d * d + f * d + f + 1 + d);  // no W2, γ instead of P
}

// docs/systems.md (CEM): CEM with T = 1 and no diagonal term is one standard layer with tied weights —
// a pre-norm SwiGLU block with v = W_K, o = W_Qᵀ, down = W_upᵀ; with the preconditioner the
// outputs are multiplied by its explicit symmetric matrix P = diag(softplus(p)) + U Vᵀ + V Uᵀ, so
// o = P W_Qᵀ and down = P W_upᵀ. Both with RoPE and with learned positions.
TEST(CemBlock, OneStepWithoutDiagonalIsATiedPreNormSwigluBlock) {
  for (bool precond : {false, true})
    for (const char* pos : {"rope", "learned"}) {
      Config c;
      c.d_model = 16;
      c.n_heads = 2;
      c.context = 10;
      c.d_ff = 24;
      c.n_core = 1;
      c.R = 1;
      c.pos = pos;
      c.block = "cem";
      c.set("cem_T", "1");
      c.set("cem_diag", "false");
      c.set("cem_precond", precond ? "true" : "false");
      c.set("cem_precond_rank", "3");
      c.validate();
      Config p = c;
      p.block = "pre_norm";
      p.mlp = "swiglu";
      p.norm = "rmsnorm";
      Model cem(c), pre(p);
      cem.init_weights(5);
      // perturb so that P is far from I and the norms are not 1
      {
        std::mt19937 rng(9);
        std::normal_distribution<float> nd(0, 0.3f);
        for (auto& w : cem.params().values()) w += nd(rng);
      }
      auto get = [](const Model& m, const std::string& name) {
        for (size_t i = 0; i < m.params().infos().size(); ++i)
          if (m.params().infos()[i].name == name) return std::vector<float>(m.params().value((int)i), m.params().value((int)i) + m.params().infos()[i].numel);
        ADD_FAILURE() << "no parameter " << name;
        return std::vector<float>();
      };
      auto put = [](Model& m, const std::string& name, const std::vector<float>& v) {
        for (size_t i = 0; i < m.params().infos().size(); ++i)
          if (m.params().infos()[i].name == name) {
            ASSERT_EQ(v.size(), m.params().infos()[i].numel) << name;
            std::copy(v.begin(), v.end(), m.params().value((int)i));
            return;
          }
        ADD_FAILURE() << "no parameter " << name;
      };
      const int d = 16, f = 24, r = 3;
      // P for one sub-layer, [d, d] row-major (symmetric)
      auto Pmat = [&](const std::string& pre_name) {
        std::vector<double> P((size_t)d * d, 0.0);
        if (!precond) {
          for (int i = 0; i < d; ++i) P[(size_t)i * d + i] = 1;
          return P;
        }
        const auto pv = get(cem, pre_name + ".p"), U = get(cem, pre_name + ".U"), V = get(cem, pre_name + ".V");
        for (int i = 0; i < d; ++i) {
          P[(size_t)i * d + i] = std::log1p(std::exp((double)pv[i]));
          for (int j = 0; j < d; ++j)
            for (int k = 0; k < r; ++k) P[(size_t)i * d + j] += (double)U[i * r + k] * V[j * r + k] + (double)V[i * r + k] * U[j * r + k];
        }
        return P;
      };
      // W [out, in] = P · Mᵀ where M [m, d] is W_Q or W_up stored [out, in]: out d, in m.
      auto times_transpose = [&](const std::vector<double>& P, const std::vector<float>& M, int m) {
        std::vector<float> W((size_t)d * m);
        for (int i = 0; i < d; ++i)
          for (int j = 0; j < m; ++j) {
            double s = 0;
            for (int k = 0; k < d; ++k) s += P[(size_t)i * d + k] * M[(size_t)j * d + k];
            W[(size_t)i * m + j] = (float)s;
          }
        return W;
      };
      for (const char* n : {"tok_emb.weight", "norm_f.weight", "core.0.attn_norm.weight", "core.0.attn.q.weight",
                            "core.0.attn.k.weight", "core.0.mlp_norm.weight", "core.0.mlp.gate.weight", "core.0.mlp.up.weight"})
        put(pre, n, get(cem, n));
      if (std::string(pos) == "learned") put(pre, "pos_emb.weight", get(cem, "pos_emb.weight"));
      put(pre, "core.0.attn.v.weight", get(cem, "core.0.attn.k.weight"));
      put(pre, "core.0.attn.o.weight", times_transpose(Pmat("core.0.attn_precond"), get(cem, "core.0.attn.q.weight"), d));
      put(pre, "core.0.mlp.down.weight", times_transpose(Pmat("core.0.mlp_precond"), get(cem, "core.0.mlp.up.weight"), f));
      const std::vector<int32_t> tok = some_tokens(2 * 10);
      Graph g1, g2;
      Graph::NoGrad n1(g1), n2(g2);
      RunOptions o;
      Node* a = cem.logits(g1, tok.data(), 2, 10, o);
      Node* b = pre.logits(g2, tok.data(), 2, 10, o);
      double err = 0, scale = 0;
      for (int64_t i = 0; i < a->numel(); ++i) {
        err = std::max(err, (double)std::fabs(a->v[i] - b->v[i]));
        scale = std::max(scale, (double)std::fabs(b->v[i]));
      }
      // float32 through one layer and two different summation orders: ~1e-6 of the scale
      EXPECT_LT(err, 1e-5 * scale) << "precond " << precond << " pos " << pos;
    }
}
