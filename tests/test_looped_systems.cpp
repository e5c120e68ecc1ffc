// The looped systems (docs/systems.md: RecurrentGPT, DeepLoop / DeepNorm, Hyperloop / mHC)
// beyond the reference fixtures (test_reference.cpp): the values the papers' inits promise, the
// DeepLoop identities, training noise (training only, keyed per micro-batch), and every preset
// training, evaluating and generating.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "infer/eval.h"
#include "io/atomic_file.h"
#include "looplm/looplm.h"
#include "model/layers.h"
#include "model/model.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace looplm;
using namespace looplm::test;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

Config small(const std::string& rule) {
  Config c;
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 16;
  c.n_prelude = 1;
  c.n_core = 2;
  c.n_coda = 1;
  c.R = 3;
  c.loop_rule = rule;
  return c;
}

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11) % 256;
  return t;
}

// Eval's diagnostics at init (depth R + 2: the maps of loops beyond R are the last loop's).
std::map<std::string, std::vector<double>> init_diagnostics(const Config& c) {
  Model m(c);
  m.init_weights(c.seed);
  return evaluate_tokens(m, some_tokens(4 * c.context + 1), c.R + 2, 2).diagnostics;
}

}  // namespace

// RecurrentGPT's gate starts at σ(gate_bias_init / τ) (the f_g weights are N(0, 0.02): their
// contribution to a pre-activation is ~0.02·√d·|h|, small): the state is copied at first.
TEST(LoopedSystems, GatedInitCopiesTheState) {
  for (double tau : {1.0, 0.5}) {
    Config c = small("gated");
    c.set("gate_tau", std::to_string(tau));
    auto d = init_diagnostics(c);
    ASSERT_EQ(d["gate"].size(), (size_t)c.R + 2);
    for (double g : d["gate"]) EXPECT_NEAR(g, sigmoid(4.0 / tau), 2e-3) << "tau " << tau;
  }
}

// Hyperloop at init: H_pre = σ(1/n), H_res = σ(1), H_post = 2σ(0) = 1 (α = 0.01 keeps φ's share
// ~0.01); mHC's H_res keeps e/(e + n − 1) of each stream on its diagonal.
TEST(LoopedSystems, HyperInitMaps) {
  for (int n : {4, 3}) {
    Config c = small("hyper");
    c.set("hyper_streams", std::to_string(n));
    auto d = init_diagnostics(c);
    for (int r = 0; r < c.R + 2; ++r) {
      EXPECT_NEAR(d["hyper.pre"][r], sigmoid(1.0 / n), 3e-3) << n << " step " << r + 1;
      EXPECT_NEAR(d["hyper.res"][r], sigmoid(1.0), 3e-3) << n << " step " << r + 1;
      EXPECT_NEAR(d["hyper.post"][r], 1.0, 6e-3) << n << " step " << r + 1;
    }
    c.set("hyper_res", "sinkhorn");
    d = init_diagnostics(c);
    for (int r = 0; r < c.R + 2; ++r)
      EXPECT_NEAR(d["hyper.res"][r], std::exp(1.0) / (std::exp(1.0) + n - 1), 3e-3) << n << " sinkhorn step " << r + 1;
  }
}

// docs/systems.md (DeepLoop and DeepNorm): α = (2N)^p, β = (8N)^-p, so β/α = (16N²)^-p; for p = 1/2
// and a plain looped model (N = K·R), M·R·(β/α)² = 1/(8K) with M = 2N. The sandwich blocks and the
// init use these values.
TEST(LoopedSystems, DeepLoopScaling) {
  for (double p : {0.5, 0.25, 0.6}) {
    for (auto [K, R] : {std::pair{2, 3}, std::pair{4, 1}, std::pair{1, 8}}) {
      Config c;
      c.block = "sandwich";
      c.n_core = K;
      c.R = R;
      c.deeploop_p = p;
      const double N = K * R, a = deeploop_alpha(c), b = deeploop_beta(c);
      EXPECT_NEAR(a, std::pow(2 * N, p), 1e-12);
      EXPECT_NEAR(b / a, std::pow(16 * N * N, -p), 1e-12);
      if (p == 0.5) {
        EXPECT_NEAR(2 * N * R * (b / a) * (b / a), 1.0 / (8 * K), 1e-12);
      }
      Model m(c);
      for (const ParamInfo& pi : m.params().infos()) {
        const bool scaled = pi.name.find(".attn.v.") != std::string::npos || pi.name.find(".attn.o.") != std::string::npos ||
                            pi.name.find(".mlp.") != std::string::npos;
        if (pi.shape.size() == 2 && pi.name.find("core.") == 0) {
          EXPECT_DOUBLE_EQ(pi.init.a, c.init_std * (scaled ? b : 1.0)) << pi.name;
        }
      }
    }
  }
  Config off;
  off.block = "sandwich";
  EXPECT_EQ(deeploop_alpha(off), 1.0);
}

// The gated rule's noise acts in training only, is a pure function of (seed, step, micro-batch),
// and with σ = 0 training computes exactly what evaluation does.
TEST(LoopedSystems, GatedNoiseOnlyInTrainingAndKeyed) {
  Config c = small("gated");
  Model m(c);
  m.init_weights(1);
  for (auto& w : m.params().values()) w *= 3.0f;  // gates away from saturation
  const auto tok = some_tokens(2 * c.context);
  auto logits = [&](bool training, uint64_t step, int micro) {
    Graph g;
    Graph::NoGrad ng(g);
    RunOptions o;
    o.training = training;
    o.step = step;
    o.micro = micro;
    Node* z = m.logits(g, tok.data(), 2, c.context, o);
    return std::vector<float>(z->v, z->v + z->numel());
  };
  const auto eval = logits(false, 0, 0), a = logits(true, 5, 0);
  EXPECT_EQ(eval, logits(false, 9, 1));  // no noise outside training
  EXPECT_NE(a, eval);
  EXPECT_EQ(a, logits(true, 5, 0));  // the same key, the same noise
  EXPECT_NE(a, logits(true, 6, 0));
  EXPECT_NE(a, logits(true, 5, 1));  // another micro-batch of the same step

  Config quiet = c;
  quiet.set("gate_sigma_x", "0");
  quiet.set("gate_sigma_g", "0");
  Model q(quiet);
  std::copy(m.params().values().begin(), m.params().values().end(), q.params().values().begin());
  Graph g;
  Graph::NoGrad ng(g);
  RunOptions o;
  o.training = true;
  Node* z = q.logits(g, tok.data(), 2, c.context, o);
  EXPECT_EQ(std::vector<float>(z->v, z->v + z->numel()), eval);
}

// "Done when every preset trains, evaluates and generates": each byte-level preset, shrunk to a
// tiny width and a few steps on a small corpus, through the library calls the CLI makes.
TEST(Presets, EveryPresetTrainsEvaluatesAndGenerates) {
  TempDir d("presets");
  const std::string text = corpus(60);
  io::write_file_atomic(d / "train.txt", text.data(), text.size());
  // ListOps-like example lines for the data_mode = examples presets (listops_*)
  std::string ex;
  for (int i = 0; i < 40; ++i) ex += "S" + std::to_string(i % 10) + std::to_string((i * 7) % 10) + "]=\t" + std::to_string((i % 10 + (i * 7) % 10) % 10) + "\n";
  io::write_file_atomic(d / "examples.txt", ex.data(), ex.size());
  for (const std::string& name : preset_names()) {
    Config c = load_preset(name);
    // the bench-* shapes (d384, a fixed char alphabet) are built by Presets.EveryPresetBuildsAndGenerates
    if (name.rfind("bench-", 0) == 0) continue;
    const bool examples = c.data_mode == "examples";
    c.d_model = 16;
    c.n_heads = 2;
    c.context = 16;
    c.batch_size = 2;
    c.steps = 2;
    c.warmup = 1;
    c.eval_every = 2;
    c.eval_batches = 1;
    c.data_train = c.data_val = d / (examples ? "examples.txt" : "train.txt");
    TrainOptions o;
    o.out_dir = d / name;
    o.quiet = true;
    TrainResult r = train(c, o);
    ASSERT_EQ(r.steps_done, 2) << name;
    EXPECT_TRUE(std::isfinite(r.val_loss)) << name;
    LanguageModel lm = LanguageModel::load(d / name);
    EvalOptions eo;
    eo.depth = c.R + 1;
    EvalResult e = lm.evaluate_file(c.data_val, eo);
    EXPECT_EQ(e.loss_by_depth.size(), (size_t)c.R + 1) << name;
    if (examples) {
      EXPECT_EQ(e.examples, 40) << name;
    }
    EXPECT_EQ(e.difficulty_first.size(), 10u) << name;
    GenerateOptions g;
    g.max_new = 3;
    g.seed = 2;
    EXPECT_EQ(lm.generate(lm.encode(examples ? "S12]=" : "And"), g).size(), 3u) << name;
  }
}

// A shared block's gradient is the sum over its visits: a 1 + 2x3 + 1 looped model is the dense
// model of 8 blocks [prelude, c0, c1, c0, c1, c0, c1, coda] with the visits' weights tied, so
// each core parameter's gradient must equal the sum of its three copies' gradients there.
TEST(LoopedSystems, SharedGradientsAreTheSumOverVisits) {
  Config lc = small("residual");
  lc.n_core = 2;
  lc.R = 3;
  Config dc = lc;
  dc.n_prelude = dc.n_coda = 0;
  dc.n_core = 8;
  dc.R = 1;
  Model looped(lc), dense(dc);
  looped.init_weights(4);
  // The dense copy: tok_emb, norm_f as they are; block i of the unrolled order from its source.
  auto source = [&](const std::string& name) -> std::string {  // dense name -> looped name
    if (name.rfind("core.", 0) != 0) return name;
    const size_t dot = name.find('.', 5);
    const int i = std::stoi(name.substr(5, dot - 5));
    const std::string rest = name.substr(dot);
    if (i == 0) return "prelude.0" + rest;
    if (i == 7) return "coda.0" + rest;
    return "core." + std::to_string((i - 1) % 2) + rest;
  };
  for (size_t i = 0; i < dense.params().infos().size(); ++i) {
    const ParamInfo& p = dense.params().infos()[i];
    const int j = looped.params().find(source(p.name));
    ASSERT_GE(j, 0) << p.name;
    std::copy(looped.params().value(j), looped.params().value(j) + p.numel, dense.params().value((int)i));
  }
  const auto tok = some_tokens(2 * lc.context), tgt = some_tokens(2 * lc.context + 1);
  auto run = [&](Model& m) {
    Graph g;
    Node* loss = op::cross_entropy(g, m.logits(g, tok.data(), 2, lc.context, RunOptions{}), tgt.data() + 1);
    g.backward(loss);
    return (double)loss->v[0];
  };
  EXPECT_NEAR(run(looped), run(dense), 1e-6);
  for (size_t j = 0; j < looped.params().infos().size(); ++j) {
    const ParamInfo& p = looped.params().infos()[j];
    std::vector<double> sum(p.numel, 0.0);
    int copies = 0;
    for (size_t i = 0; i < dense.params().infos().size(); ++i)
      if (source(dense.params().infos()[i].name) == p.name) {
        ++copies;
        for (size_t e = 0; e < p.numel; ++e) sum[e] += dense.params().grad((int)i)[e];
      }
    EXPECT_EQ(copies, p.name.rfind("core.", 0) == 0 ? 3 : 1) << p.name;
    double scale = 1e-6, err = 0;
    for (size_t e = 0; e < p.numel; ++e) {
      scale = std::max(scale, std::fabs(sum[e]));
      err = std::max(err, std::fabs(sum[e] - looped.params().grad((int)j)[e]));
    }
    EXPECT_LT(err / scale, 1e-5) << p.name;
  }
}
