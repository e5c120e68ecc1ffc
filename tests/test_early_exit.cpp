// Per-token early exit in evaluation (docs/cli.md, eval): the criteria, the extremes (every token at
// its first possible exit / none early), and an intermediate threshold against an independent
// computation from full forward passes at each depth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "infer/early_exit.h"
#include "looplm/looplm.h"

using namespace looplm;

namespace {

Config exit_config() {
  Config c = load_preset("looped");
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 24;
  c.R = 4;
  return c;
}

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + i / 5) % 97 + 30);
  return t;
}

}  // namespace

// One check of the early-exit options for every front end (CLI, server, Python), naming the options
// as the caller spells them.
TEST(EarlyExit, OptionsAreCheckedOnce) {
  EXPECT_EQ(early_exit("fixed", NAN).rule, ExitRule::fixed);
  const EarlyExit kl = early_exit("kl", 0.05);
  EXPECT_EQ(kl.rule, ExitRule::kl);
  EXPECT_DOUBLE_EQ(kl.threshold, 0.05);
  EXPECT_DOUBLE_EQ(early_exit("gate", 1.0).threshold, 1.0);
  auto message = [](const std::string& rule, double t) {
    try {
      early_exit(rule, t, "--exit-rule", "--exit-threshold");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("kl", NAN).find("--exit-rule kl needs a finite --exit-threshold"), std::string::npos);
  EXPECT_NE(message("entropy", INFINITY).find("finite"), std::string::npos);
  EXPECT_NE(message("fixed", 0.5).find("--exit-threshold has no effect with --exit-rule fixed"), std::string::npos);
  EXPECT_NE(message("gate", 1.5).find("(0, 1]"), std::string::npos);
  EXPECT_NE(message("gate", 0).find("(0, 1]"), std::string::npos);
  EXPECT_NE(message("sometimes", 1).find("unknown exit rule 'sometimes'"), std::string::npos);
}

TEST(EarlyExit, Criteria) {
  const int V = 8, d = 3;
  std::vector<float> z(V, 0.5f), z2 = {1, 0, 0, 0, 0, 0, 0, 0};
  std::vector<double> lp(V), lp2(V);
  log_softmax_row(z.data(), V, lp.data());
  log_softmax_row(z2.data(), V, lp2.data());
  const float h[d] = {3, 0, 4}, h0[d] = {3, 0, 0};
  EXPECT_NEAR(exit_score(ExitRule::entropy, lp.data(), nullptr, V, h, nullptr, d), std::log(8.0), 1e-12);  // uniform
  EXPECT_NEAR(exit_score(ExitRule::kl, lp.data(), lp.data(), V, h, h0, d), 0.0, 1e-15);
  // KL(p2 ‖ uniform) = log V − H(p2)
  const double H2 = exit_score(ExitRule::entropy, lp2.data(), nullptr, V, h, nullptr, d);
  EXPECT_NEAR(exit_score(ExitRule::kl, lp2.data(), lp.data(), V, h, h0, d), std::log(8.0) - H2, 1e-12);
  EXPECT_NEAR(exit_score(ExitRule::latent, lp.data(), lp.data(), V, h, h0, d), 4.0 / 5.0, 1e-12);
  // kl and latent cannot decide at the first step; fixed never exits early
  EXPECT_TRUE(std::isinf(exit_score(ExitRule::kl, lp.data(), nullptr, V, h, nullptr, d)));
  EXPECT_TRUE(std::isinf(exit_score(ExitRule::latent, lp.data(), nullptr, V, h, nullptr, d)));
  EXPECT_TRUE(std::isinf(exit_score(ExitRule::fixed, lp.data(), lp.data(), V, h, h0, d)));
  EXPECT_EQ(parse_exit_rule("kl"), ExitRule::kl);
  EXPECT_THROW(parse_exit_rule("KL"), UsageError);
}

// A threshold above every score: each token exits at its first possible step (1 for entropy, 2
// for kl and latent); one below every score: none exits before the depth.
TEST(EarlyExit, ExtremeThresholdsAreTheFixedDepths) {
  LanguageModel lm = LanguageModel::from_config(exit_config(), 5);
  const auto toks = some_tokens(3 * 24 + 1);
  EvalOptions o;
  const EvalResult full = lm.evaluate(toks, o);
  ASSERT_EQ(full.loss_by_depth.size(), 4u);
  EXPECT_EQ(full.mean_steps, 4);
  EXPECT_EQ(full.exit_fraction, (std::vector<double>{0, 0, 0, 1}));
  for (auto [rule, first] : {std::pair{ExitRule::entropy, 1}, {ExitRule::kl, 2}, {ExitRule::latent, 2}}) {
    o.exit = {rule, 1e30};
    EvalResult e = lm.evaluate(toks, o);
    EXPECT_NEAR(e.loss, full.loss_by_depth[first - 1], 1e-6) << exit_rule_name(rule);
    EXPECT_NEAR(e.accuracy, full.accuracy_by_depth[first - 1], 1e-12) << exit_rule_name(rule);
    EXPECT_EQ(e.mean_steps, first) << exit_rule_name(rule);
    EXPECT_EQ(e.exit_fraction[first - 1], 1.0) << exit_rule_name(rule);
    EXPECT_EQ(e.loss_by_depth, full.loss_by_depth);  // the per-exit curve does not depend on the rule
    o.exit = {rule, -1};
    e = lm.evaluate(toks, o);
    EXPECT_NEAR(e.loss, full.loss, 1e-6) << exit_rule_name(rule);
    EXPECT_EQ(e.mean_steps, 4) << exit_rule_name(rule);
  }
}

// kl and entropy at a threshold between the tokens' scores: each token's exit step and loss
// recomputed from full forward passes at depths 1..R (one window, so the same tokens).
TEST(EarlyExit, IntermediateThresholdMatchesFullForwardPasses) {
  const Config c = exit_config();
  LanguageModel lm = LanguageModel::from_config(c, 7);
  const int T = c.context, V = c.vocab_size, R = c.R;
  const auto toks = some_tokens(T + 1);
  const std::vector<int32_t> x(toks.begin(), toks.begin() + T);
  std::vector<std::vector<double>> logp(R + 1, std::vector<double>((size_t)T * V));
  for (int r = 1; r <= R; ++r) {
    const std::vector<float> z = lm.forward_logits(x, r);
    for (int t = 0; t < T; ++t) log_softmax_row(z.data() + (size_t)t * V, V, logp[r].data() + (size_t)t * V);
  }
  for (ExitRule rule : {ExitRule::kl, ExitRule::entropy}) {
    auto score = [&](int r, int t) {
      return exit_score(rule, logp[r].data() + (size_t)t * V, r > 1 ? logp[r - 1].data() + (size_t)t * V : nullptr, V,
                        nullptr, nullptr, 0);
    };
    // the threshold: the middle of the widest gap among the scores at step 2 (no token near it)
    std::vector<double> s;
    for (int t = 0; t < T; ++t) s.push_back(score(2, t));
    std::sort(s.begin(), s.end());
    double thr = 0, gap = -1;
    for (int i = T / 4; i + 1 < 3 * T / 4; ++i)
      if (s[i + 1] - s[i] > gap) { gap = s[i + 1] - s[i]; thr = (s[i] + s[i + 1]) / 2; }
    double loss = 0, steps = 0;
    for (int t = 0; t < T; ++t) {
      int r = 1;
      while (r < R && !(score(r, t) < thr)) ++r;
      loss -= logp[r][(size_t)t * V + toks[t + 1]];
      steps += r;
    }
    EvalOptions o;
    o.exit = {rule, thr};
    const EvalResult e = lm.evaluate(toks, o);
    EXPECT_NEAR(e.mean_steps, steps / T, 1e-12) << exit_rule_name(rule);
    EXPECT_GT(e.mean_steps, 1.0);  // the threshold splits the tokens
    EXPECT_LT(e.mean_steps, (double)R);
    EXPECT_NEAR(e.loss, loss / T, 1e-5) << exit_rule_name(rule);  // fp32 forward passes, batched vs one window
  }
}
