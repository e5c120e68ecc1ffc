// The energy systems beyond the reference fixtures (test_reference.cpp): evaluation's energy
// diagnostics (per step, their fall, the final state's), the config checks of the energy block,
// and the parameter count of its layout.
#include <gtest/gtest.h>

#include <cmath>
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
  EXPECT_THROW(c.validate(), UsageError);  // energy blocks take no RoPE (SPEC §6)
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
