// The learned exit gate (docs/systems.md, Learned exit gate): its objectives' kernels by finite
// differences in double (gradcheck_util.h), the float ops against them, the gate on every loop
// rule, stage I and stage II training through train(), and the config's refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/gemm.h"
#include "gradcheck_util.h"
#include "looplm/error.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/kernels_exit.h"
#include "ops/ops.h"
#include "test_util.h"
#include "train/train_step.h"

using namespace looplm;
using namespace looplm::test;

namespace {

// Gates in (0, 1) away from the ends, so differences of h = 1e-6 stay inside.
Vec gates(size_t n, uint32_t seed) {
  Vec v = randn(n, seed, 1.5);
  for (auto& x : v) x = 1.0 / (1.0 + std::exp(-x));
  return v;
}

}  // namespace

TEST(ExitGateOps, TokenCrossEntropyGradient) {
  const int N = 5, V = 9;
  Vec z = randn(N * V, 1, 2.0), G = randn(N, 2), lse(N), loss(N), dz(N * V);
  std::vector<int32_t> y = {3, -1, 0, 8, 4};  // row 1 has no target: loss 0, no gradient
  auto L = [&] { k::token_xent_fwd(z.data(), y.data(), lse.data(), loss.data(), N, V); return dotv(G, loss); };
  L();
  EXPECT_EQ(loss[1], 0.0);
  k::token_xent_bwd(z.data(), y.data(), lse.data(), G.data(), dz.data(), false, N, V);
  fd_check("token_xent dz", z, dz, L);
  for (int v = 0; v < V; ++v) EXPECT_EQ(dz[V + v], 0.0);
}

// The fused head and cross-entropy, in chunks of 2 rows (three chunks, the last short): its
// gradients in x, W and b, and its losses equal to the unfused head's.
TEST(ExitGateOps, FusedHeadLossGradient) {
  const int N = 5, d = 4, V = 7;
  Vec x = randn(N * d, 11), W = randn(V * d, 12, 0.5), b = randn(V, 13, 0.3), G = randn(N, 14), lse(N), loss(N),
      buf(2 * V), dx(N * d), dW(V * d, 0.0), db(V, 0.0);
  const std::vector<int32_t> y = {2, 6, -1, 0, 3};
  auto L = [&] {
    k::head_xent_fwd(x.data(), W.data(), b.data(), y.data(), lse.data(), loss.data(), N, d, V, buf.data(), false, 2);
    return dotv(G, loss);
  };
  L();
  Vec logits(N * V), lse2(N), loss2(N);
  k::linear_fwd(x.data(), W.data(), b.data(), logits.data(), N, d, V);
  k::token_xent_fwd(logits.data(), y.data(), lse2.data(), loss2.data(), N, V);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(loss[n], loss2[n], 1e-14);
  k::head_xent_bwd(x.data(), W.data(), b.data(), y.data(), lse.data(), G.data(), dx.data(), false, dW.data(), db.data(), N, d,
                   V, buf.data(), false, 2);
  fd_check("head dx", x, dx, L);
  fd_check("head dW", W, dW, L);
  fd_check("head db", b, db, L);
}

// Stage I: the loss and its gradient in L and λ, for both priors, with a token that has no target.
TEST(ExitGateOps, ObjectiveGradientBothPriors) {
  const int N = 7, R = 4;
  for (bool batch : {false, true}) {
    Vec Lv = randn(R * N, 3, 1.0), lam = gates(R * N, 4), p(R * N), pbar(R), dL(R * N), dlam(R * N);
    for (auto& x : Lv) x = 2.0 + x;
    std::vector<uint8_t> valid = {1, 1, 0, 1, 1, 1, 1};
    const double beta = 0.3;
    auto loss = [&] { return k::exit_objective_fwd(Lv.data(), lam.data(), valid.data(), N, R, batch, beta, p.data(), pbar.data()); };
    loss();
    k::exit_objective_bwd(Lv.data(), lam.data(), p.data(), pbar.data(), valid.data(), N, R, batch, beta, 1.0, dL.data(),
                          dlam.data());
    fd_check(batch ? "objective dL (batch)" : "objective dL (token)", Lv, dL, loss);
    fd_check(batch ? "objective dlam (batch)" : "objective dlam (token)", lam, dlam, loss);
    for (int n = 0; n < N; ++n) EXPECT_EQ(dlam[(R - 1) * N + n], 0.0) << "the last gate is not read";
    for (int r = 0; r < R; ++r) EXPECT_EQ(dL[r * N + 2], 0.0) << "a token without a target";
  }
}

// The distribution and the loss written out by hand: R = 2, λ_1 = 1/4 → p = (1/4, 3/4).
TEST(ExitGateOps, ObjectiveByHand) {
  const double L1 = 3.0, L2 = 2.0, beta = 0.5;
  const Vec Lv = {L1, L2}, lam = {0.25, 0.9};
  Vec p(2), pbar(2);
  const std::vector<uint8_t> valid = {1};
  k::ExitSummary s;
  const double loss = k::exit_objective_fwd(Lv.data(), lam.data(), valid.data(), 1, 2, false, beta, p.data(), pbar.data(), &s);
  const double H = -(0.25 * std::log(0.25) + 0.75 * std::log(0.75));
  EXPECT_NEAR(p[0], 0.25, 1e-15);
  EXPECT_NEAR(p[1], 0.75, 1e-15);
  EXPECT_NEAR(s.expected_loss, 0.25 * L1 + 0.75 * L2, 1e-15);
  EXPECT_NEAR(s.entropy, H, 1e-15);
  EXPECT_NEAR(s.mean_step, 0.25 * 1 + 0.75 * 2, 1e-15);
  EXPECT_NEAR(loss, 0.25 * L1 + 0.75 * L2 - beta * H, 1e-14);
  // Two tokens with opposite gates: each token's entropy is low, the batch's mean is uniform.
  const Vec L2tok = {1, 1, 1, 1}, lam2 = {0.999, 0.001, 0.5, 0.5};
  Vec p2(4), pbar2(2);
  const std::vector<uint8_t> both = {1, 1};
  k::ExitSummary tok;
  const double token_loss = k::exit_objective_fwd(L2tok.data(), lam2.data(), both.data(), 2, 2, false, 1.0, p2.data(), pbar2.data(), &tok);
  const double batch_loss = k::exit_objective_fwd(L2tok.data(), lam2.data(), both.data(), 2, 2, true, 1.0, p2.data(), pbar2.data());
  EXPECT_NEAR(pbar2[0], 0.5, 1e-12);
  EXPECT_NEAR(batch_loss, 1.0 - std::log(2.0), 1e-12) << "the batch prior sees the mean distribution (uniform here)";
  EXPECT_GT(token_loss, batch_loss + 0.5) << "the token prior sees each token's nearly certain exit";
}

TEST(ExitGateOps, StageTwoBceGradient) {
  const int N = 6, R = 3;
  Vec z = randn(R * N, 5, 2.0), w = gates(R * N, 6), dz(R * N);
  const std::vector<uint8_t> valid = {1, 0, 1, 1, 1, 1};
  auto loss = [&] { return k::exit_bce_fwd(z.data(), w.data(), valid.data(), N, R); };
  k::exit_bce_bwd(z.data(), w.data(), valid.data(), N, R, 1.0, dz.data());
  fd_check("bce dz", z, dz, loss);
  // The BCE of 1 − λ = σ(−z) against w, written with logs.
  double direct = 0;
  int cnt = 0;
  for (int n = 0; n < N; ++n) {
    if (!valid[n]) continue;
    ++cnt;
    for (int r = 0; r < R; ++r) {
      const double lam = 1 / (1 + std::exp(-z[r * N + n])), t = w[r * N + n];
      direct -= t * std::log(1 - lam) + (1 - t) * std::log(lam);
    }
  }
  EXPECT_NEAR(loss(), direct / (cnt * R), 1e-12);
}

// The float ops on the tape give the double kernels' values and gradients (float tolerance: 1e-5
// relative, a few float roundings of O(1) values).
TEST(ExitGateOps, FloatOpsMatchDouble) {
  const int N = 5, R = 3;
  Vec Lv = randn(R * N, 7, 1.0), lam = gates(R * N, 8);
  for (auto& x : Lv) x = 2.0 + x;
  const std::vector<int32_t> y = {1, 2, -1, 3, 4};
  const std::vector<uint8_t> valid = {1, 1, 0, 1, 1};
  for (bool batch : {false, true}) {
    Graph g;
    std::vector<Node*> Ln(R), gn(R);
    for (int r = 0; r < R; ++r) {
      Ln[r] = g.node(N, 1, true);
      gn[r] = g.node(N, 1, true);
      for (int n = 0; n < N; ++n) Ln[r]->v[n] = (float)Lv[r * N + n], gn[r]->v[n] = (float)lam[r * N + n];
    }
    std::vector<double> dist;
    Node* out = op::exit_objective(g, Ln.data(), gn.data(), R, y.data(), batch, 0.2, nullptr, &dist);
    g.backward(out);
    Vec p(R * N), pbar(R), dL(R * N), dlam(R * N);
    const double want = k::exit_objective_fwd(Lv.data(), lam.data(), valid.data(), N, R, batch, 0.2, p.data(), pbar.data());
    k::exit_objective_bwd(Lv.data(), lam.data(), p.data(), pbar.data(), valid.data(), N, R, batch, 0.2, 1.0, dL.data(), dlam.data());
    EXPECT_NEAR(out->v[0], want, 1e-5 * std::fabs(want));
    for (int r = 0; r < R; ++r) {
      EXPECT_NEAR(dist[r], pbar[r], 1e-6);
      for (int n = 0; n < N; ++n) {
        EXPECT_NEAR(Ln[r]->g[n], dL[r * N + n], 1e-5 * (1 + std::fabs(dL[r * N + n])));
        if (r < R - 1) {
          EXPECT_NEAR(gn[r]->g[n], dlam[r * N + n], 1e-5 * (1 + std::fabs(dlam[r * N + n])));
        }
      }
    }
  }
}

namespace {

Config gate_config(const std::string& rule) {
  Config c;
  c.vocab_size = 64;
  c.d_model = 16;
  c.n_heads = 2;
  c.context = 8;
  c.n_prelude = 1;
  c.n_core = 1;
  c.n_coda = 1;
  c.R = 3;
  c.loop_rule = rule;
  c.exit_gate = true;
  c.batch_size = 2;
  return c;
}

// A small byte model on the test corpus (written into d), as the tests below train it.
Config small_run(const TempDir& d, int steps) {
  const std::string text = corpus();
  std::ofstream(d / "train.txt") << text;
  std::ofstream(d / "val.txt") << text.substr(0, text.size() / 4);
  Config c;
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 16;
  c.n_core = 1;
  c.R = 3;
  c.batch_size = 4;
  c.steps = steps;
  c.warmup = 1;
  c.eval_every = steps;
  c.eval_batches = 2;
  c.lr = 3e-3;
  c.data_train = d / "train.txt";
  c.data_val = d / "val.txt";
  return c;
}

bool trained(const Config& c, const std::string& dir, const std::string& init_from = "") {
  TrainOptions o;
  o.out_dir = dir;
  o.init_from = init_from;
  o.quiet = true;
  return train(c, o).complete;
}

}  // namespace

// Every loop rule carries the gate, and stage I's gradient reaches it and the rest of the model;
// stage II's reaches the gate alone.
TEST(ExitGate, EveryLoopRuleTrainsItsGate) {
  for (const std::string rule : {"residual", "gated", "hyper", "inject_linear"}) {
    Config c = gate_config(rule);
    Model m(c);
    m.init_weights(7);
    ASSERT_TRUE(m.has_exit_gate()) << rule;
    std::vector<int32_t> x(16), y(16);
    for (int i = 0; i < 16; ++i) x[i] = (i * 7) % 64, y[i] = (i * 5 + 3) % 64;
    y[3] = -1;
    for (const std::string only : {"", "exit_gate"}) {
      c.train_only = only;
      Graph g;
      m.params().zero_grad();
      RunOptions ro;
      ro.training = true;
      StepOutcome o;
      Node* l = micro_batch_loss(g, m, c, x.data(), y.data(), ro, &o);
      ASSERT_TRUE(std::isfinite(l->v[0])) << rule;
      g.backward(l);
      double gate_grad = 0, other_grad = 0;
      for (auto& p : m.params().infos()) {
        const float* gr = m.params().grads().data() + p.offset;
        double s = 0;
        for (int64_t i = 0; i < p.numel; ++i) s += std::fabs(gr[i]);
        (p.name.rfind("loop.exit_gate.", 0) == 0 ? gate_grad : other_grad) += s;
      }
      EXPECT_GT(gate_grad, 0) << rule << " " << (only.empty() ? "stage I" : "stage II");
      if (only.empty()) {
        EXPECT_GT(other_grad, 0) << rule;
      } else {
        EXPECT_EQ(other_grad, 0) << rule << ": stage II reaches nothing but the gate";
      }
      ASSERT_EQ(o.exit_distribution.size(), 3u);
      double total = 0;
      for (double p : o.exit_distribution) total += p;
      EXPECT_NEAR(total, 1.0, 1e-5) << rule;
      EXPECT_GT(o.exit_mean_step, 1.0);
      EXPECT_LT(o.exit_mean_step, 3.0);
    }
  }
}

// Memory: stage I's activations do not grow with depth × vocabulary. At V 8192 and 512 rows an
// exit's logits are 16 MiB; eight exits keep none of them (the fused head: one chunk of 512 rows at
// a time), so 8 exits cost what 2 do plus the loop steps' own activations, far below 8 × 16 MiB.
TEST(ExitGate, StageOneMemoryDoesNotGrowWithDepthTimesVocabulary) {
  auto peak = [](int R) {
    Config c = gate_config("residual");
    c.vocab_size = 8192;
    c.context = 128;
    c.batch_size = 4;
    c.R = R;
    Model m(c);
    m.init_weights(1);
    std::vector<int32_t> x(512), y(512);
    for (int i = 0; i < 512; ++i) x[i] = (i * 37) % 8192, y[i] = (i * 101 + 5) % 8192;
    Graph g;
    RunOptions ro;
    ro.training = true;
    g.backward(micro_batch_loss(g, m, c, x.data(), y.data(), ro));
    return (double)g.activation_bytes_peak();
  };
  const double two = peak(2), eight = peak(8), logits = 512.0 * 8192 * 4;
  EXPECT_LT(eight - two, 2 * logits) << "2 exits: " << two << " bytes, 8 exits: " << eight;
  std::printf("stage I activation peak: %.1f MiB at 2 exits, %.1f MiB at 8 (one exit's logits: %.0f MiB)\n", two / 1048576, eight / 1048576, logits / 1048576);
}

// Truncated back-propagation: the exits of steps without gradients read their state detached, so
// the objective's value is the full one's, nothing reaches the loop through them, and the gate
// still learns (with one step keeping gradients only those exits have a gate that is read).
TEST(ExitGate, StageOneUnderTruncatedBackprop) {
  Config c = gate_config("residual");
  Model m(c);
  m.init_weights(3);
  std::vector<int32_t> x(16), y(16);
  for (int i = 0; i < 16; ++i) x[i] = (i * 3) % 64, y[i] = (i * 11 + 1) % 64;
  RunOptions full, cut;
  full.training = cut.training = true;
  cut.grad_steps = 1;
  Graph g1, g2;
  Node* a = micro_batch_loss(g1, m, c, x.data(), y.data(), full);
  Node* b = micro_batch_loss(g2, m, c, x.data(), y.data(), cut);
  EXPECT_FLOAT_EQ(a->v[0], b->v[0]);
  {  // and without gradients at all (every step's memory given back): the same value
    Graph g3;
    Graph::NoGrad ng(g3);
    EXPECT_FLOAT_EQ(micro_batch_loss(g3, m, c, x.data(), y.data(), full)->v[0], a->v[0]);
  }
  m.params().zero_grad();
  g2.backward(b);
  double prelude = 0, gate = 0;
  for (auto& p : m.params().infos())
    for (int64_t i = 0; i < p.numel; ++i) {
      const double v = std::fabs(m.params().grads()[p.offset + i]);
      if (p.name.rfind("prelude.", 0) == 0) prelude += v;
      if (p.name.rfind("loop.exit_gate.", 0) == 0) gate += v;
    }
  EXPECT_EQ(prelude, 0.0) << "with one step keeping gradients, none reaches the prelude";
  EXPECT_GT(gate, 0.0);
}

// Through train(): stage I trains the model and logs the exit distribution; stage II from it (and
// from a model without a gate) changes the gate alone, bit for bit everything else; eval reports it.
TEST(ExitGate, StagesThroughTrain) {
  TempDir d("exit_gate");
  Config c = small_run(d, 6);
  c.n_prelude = 1;
  c.n_coda = 1;
  ASSERT_TRUE(trained(c, d / "plain"));

  Config s1 = c;
  s1.exit_gate = true;
  s1.exit_prior = "batch";
  ASSERT_TRUE(trained(s1, d / "stage1"));
  std::ifstream metrics(d / "stage1/metrics.jsonl");
  std::string line;
  int with_exits = 0;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["split"] != "train") continue;
    ASSERT_TRUE(j.contains("exit_distribution")) << line;
    EXPECT_EQ(j["exit_distribution"].size(), 3u);
    ++with_exits;
  }
  EXPECT_EQ(with_exits, 6);

  for (const std::string from : {"plain", "stage1"}) {
    Config s2 = c;
    s2.exit_gate = true;
    s2.train_only = "exit_gate";
    s2.lr = 0.05;
    ASSERT_TRUE(trained(s2, d / ("stage2_" + from), d / from)) << from;
    auto before = load_model(d / (from + "/model.safetensors"));
    auto after = load_model(d / ("stage2_" + from + "/model.safetensors"));
    int gate_changed = 0;
    auto value_before = [&](const std::string& name) -> const float* {  // by name: a gate added shifts the order
      const auto& infos = before->params().infos();
      for (size_t j = 0; j < infos.size(); ++j)
        if (infos[j].name == name) return before->params().value((int)j);
      return nullptr;
    };
    for (size_t i = 0; i < after->params().infos().size(); ++i) {
      const auto& p = after->params().infos()[i];
      const float* b = after->params().value((int)i);
      const float* a = value_before(p.name);
      if (p.name.rfind("loop.exit_gate.", 0) == 0) {
        if (from == "stage1") gate_changed += std::memcmp(b, a, p.numel * sizeof(float)) != 0;
        continue;
      }
      ASSERT_TRUE(a) << p.name;
      ASSERT_EQ(std::memcmp(b, a, p.numel * sizeof(float)), 0) << from << ": " << p.name;
    }
    if (from == "stage1") {
      EXPECT_EQ(gate_changed, 2);
    }
    const EvalResult e = LanguageModel::load(d / ("stage2_" + from)).evaluate_validation(EvalOptions{});
    ASSERT_TRUE(e.exit_gate.has_value());
    EXPECT_NE(e.exit_gate->objective.find("stage II"), std::string::npos);
    double total = 0;
    for (double p : e.exit_gate->exit_distribution) total += p;
    EXPECT_NEAR(total, 1.0, 1e-6);  // each p_r a float product (relative error ~1e-7)
    EXPECT_NEAR(e.exit_gate->mean_exit_step, e.gate_expected_depth, 1e-12);
    EXPECT_GT(e.exit_gate->expected_loss, 0);
  }
}

// Calibration: every frontier point is what eval scores with that rule and threshold (the same
// signals in double, the same exit tests: equal steps, the loss to summation order); the CLI prints
// the choice within a budget, the JSON every frontier, the plot a PNG; misuse is refused.
TEST(ExitGate, CalibrationMatchesEachRuleAlone) {
  TempDir d("exit_calibration");
  Config c = small_run(d, 8);
  c.exit_gate = true;
  ASSERT_TRUE(trained(c, d / "run"));
  const LanguageModel lm = LanguageModel::load(d / "run");
  EvalOptions eo;
  eo.calibrate = true;
  const EvalResult all = lm.evaluate_validation(eo);
  ASSERT_TRUE(all.calibration.has_value());
  const auto& cal = *all.calibration;
  EXPECT_EQ(cal.depth, 3);
  EXPECT_EQ(cal.tokens, all.tokens);
  EXPECT_NEAR(cal.full_loss, all.loss, 1e-7 * all.loss);  // eval's own loss: the float kernel's log-sum-exp
  std::vector<std::string> names;
  for (const auto& rule : cal.rules) {
    names.push_back(rule.name);
    ASSERT_FALSE(rule.frontier.empty()) << rule.name;
    for (size_t i = 1; i < rule.frontier.size(); ++i) {
      EXPECT_GT(rule.frontier[i].mean_steps, rule.frontier[i - 1].mean_steps) << rule.name;
      if (rule.name != "depth") {
        EXPECT_LT(rule.frontier[i].loss, rule.frontier[i - 1].loss) << rule.name;
      }
    }
    if (rule.name == "depth") continue;
    for (size_t i : {(size_t)0, rule.frontier.size() / 2, rule.frontier.size() - 1}) {
      const auto& p = rule.frontier[i];
      EvalOptions one;
      one.exit = early_exit(rule.name, p.threshold);
      const EvalResult e = lm.evaluate_validation(one);
      EXPECT_NEAR(e.mean_steps, p.mean_steps, 1e-12) << rule.name << " at " << p.threshold;
      EXPECT_NEAR(e.loss, p.loss, 1e-9 * e.loss) << rule.name << " at " << p.threshold;
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"depth", "gate", "kl", "entropy", "latent"}));

  const std::string bin = std::string(LOOPLM_BINARY) + " eval --checkpoint " + (d / "run");
  CmdResult r = run_shell(bin + " --calibrate --loss-budget 2% --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_DOUBLE_EQ(j["calibration"]["loss_budget"].get<double>(), 0.02);
  EXPECT_TRUE(j["calibration"]["rules"]["gate"].contains("chosen"));
  EXPECT_TRUE(j.contains("exit_gate"));
  r = run_shell(bin + " --calibrate");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| gate |"), std::string::npos) << r.out;
  if (run_shell("command -v gnuplot").code == 0) {
    r = run_shell(bin + " --calibrate --plot " + (d / "cal.png"));
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream png(d / "cal.png", std::ios::binary);
    char magic[4] = {};
    png.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  } else {
    std::printf("note: gnuplot is not installed; --plot is not tested\n");
  }
  for (const std::string bad : {" --calibrate --loss-budget abc", " --calibrate --loss-budget -1%", " --plot x.png",
                                " --loss-budget 1%", " --calibrate --exit-rule kl --exit-threshold 0.1", " --calibrate --depth 0",
                                " --calibrate --kv-cache int8"}) {
    r = run_shell(bin + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
  }
}

// The gate read while decoding, on a rule whose state is not one stream (hyper: n streams): scoring
// token by token through the KV cache with the exact per_step policy gives what the full pass gives
// at every gate threshold.
TEST(ExitGate, GateExitWhileDecodingOnHyperRule) {
  TempDir d("exit_gate_hyper");
  Config c = small_run(d, 6);
  c.n_prelude = 1;
  c.loop_rule = "hyper";
  c.set("hyper_streams", "2");
  c.exit_gate = true;
  c.eval_batches = 1;
  ASSERT_TRUE(trained(c, d / "run"));
  const LanguageModel lm = LanguageModel::load(d / "run");
  for (double q : {0.3, 0.6, 0.9}) {
    EvalOptions full, inc;
    full.exit = inc.exit = early_exit("gate", q);
    inc.incremental = true;
    const EvalResult a = lm.evaluate_validation(full), b = lm.evaluate_validation(inc);
    EXPECT_NEAR(a.mean_steps, b.mean_steps, 1e-9) << q;
    EXPECT_NEAR(a.loss, b.loss, 1e-4 * a.loss) << q;  // one token at a time against whole windows: float sums
  }
}

// bf16 products (precision = bf16): stage I's loss tracks fp32's (bf16 operands: ~3 significant digits).
TEST(ExitGate, StageOneInBf16TracksFp32) {
  if (!bf16_products_supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  Config c = gate_config("gated");
  Model m(c);
  m.init_weights(5);
  std::vector<int32_t> x(16), y(16);
  for (int i = 0; i < 16; ++i) x[i] = (i * 13) % 64, y[i] = (i * 7 + 2) % 64;
  RunOptions ro;
  ro.training = true;
  Graph g32, g16;
  g16.set_bf16_products(true);
  const double a = micro_batch_loss(g32, m, c, x.data(), y.data(), ro)->v[0];
  Node* b = micro_batch_loss(g16, m, c, x.data(), y.data(), ro);
  EXPECT_NEAR(b->v[0], a, 1e-2 * std::fabs(a));
  g16.backward(b);
  EXPECT_TRUE(std::isfinite(m.params().grads()[0]));
}

// Bad values name their key.
TEST(ExitGate, ConfigRefusals) {
  auto refused = [](const std::string& json, const std::string& words) {
    try {
      Config::from_json_text(json, "test").validate();
      ADD_FAILURE() << json << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(R"({"R": 3, "exit_gate": true, "exit_prior": "tokens"})", "exit_prior");
  refused(R"({"R": 3, "exit_gate": true, "exit_entropy_beta": -0.1})", "exit_entropy_beta");
  refused(R"({"R": 1, "exit_gate": true})", "exit_gate needs a loop");
  refused(R"({"R": 3, "train_only": "exit_gate"})", "has none");
  refused(R"({"R": 3, "exit_gate": true, "train_only": "core"})", "train_only");
  refused(R"({"R": 3, "exit_gate": true, "exit_gate_k": 0})", "exit_gate_k");
  EXPECT_NO_THROW(Config::from_json_text(R"({"R": 3, "exit_gate": true, "train_only": "exit_gate"})", "test").validate());
}
