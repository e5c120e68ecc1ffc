// The core's extension points and guarantees (docs/architecture.md): loop rules that own their
// state, components that declare their parameters, init and config keys in the registries, named
// intermediates, memory that does not grow with no-grad depth, randomness keyed per micro-batch,
// divergence that never overwrites a good checkpoint, and the loader's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "backend/cpu/weight_format.h"
#include "infer/eval.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "looplm/looplm.h"
#include "model/components.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace looplm;
using looplm::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string corpus() { return looplm::test::corpus(300); }

Config small_config(const TempDir& d) {
  Config c;
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 16;
  c.n_prelude = 1;
  c.n_core = 2;
  c.n_coda = 1;
  c.R = 3;
  c.batch_size = 4;
  c.steps = 4;
  c.warmup = 1;
  c.eval_every = 100;
  c.eval_batches = 2;
  c.lr = 3e-3;
  std::string text = corpus();
  io::write_file_atomic(d / "train.txt", text.data(), text.size());
  io::write_file_atomic(d / "val.txt", text.data(), text.size() / 4);
  c.data_train = d / "train.txt";
  c.data_val = d / "val.txt";
  return c;
}

// A loop rule whose state is two streams [N, 2d]: the first advances as `residual` does, the
// second is the first plus test_stream_scale times its old self; readout is the first stream. So
// every exit equals the residual rule's while eval, generation and diagnostics only work if they
// go through init_state / readout. It also names a diagnostic: a [1, 1] tensor holding r.
class TwoStreamRule : public LoopRule {
 public:
  TwoStreamRule(ParamStore&, const Config& c) : scale_((float)c.get_float("test_stream_scale")), d_(c.d_model) {}
  Node* init_state(Graph& g, Node* h_pre, const LoopCtx&) const override { return op::concat(g, h_pre, h_pre); }
  Node* step(Graph& g, Node* s, Node*, int r, const CoreFn& core, const LoopCtx&) const override {
    Node* a = core(g, op::slice_cols(g, s, 0, d_));
    Node* b = op::axpby(g, scale_, op::slice_cols(g, s, d_, d_), a);
    Node* mark = g.node(1, 1, false);
    mark->v[0] = (float)r;
    g.diagnostic("test_step", mark);
    return op::concat(g, a, b);
  }
  Node* readout(Graph& g, Node* s) const override { return op::slice_cols(g, s, 0, d_); }

 private:
  float scale_;
  int d_;
};

// The rule is registered for the test that uses it and removed after it: the process-wide
// registry holds only the built-ins outside such a test.
class ScopedTestRule {
 public:
  ScopedTestRule() {
    registries().loop_rules.add(
        {"test_two_stream", "two streams, readout = the first (tests only)",
         {ConfigKey::number("test_stream_scale", 0.5, 0, 10, "scale of the second stream's old value (tests only)", true)},
         [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> { return std::make_unique<TwoStreamRule>(ps, c); },
         [](const Config& c) {
           if (c.get_float("test_stream_scale") == 7) throw UsageError("test_stream_scale must not be 7 (a test of rule validation)");
         }});
  }
  ~ScopedTestRule() { registries().loop_rules.remove("test_two_stream"); }
  ScopedTestRule(const ScopedTestRule&) = delete;
  ScopedTestRule& operator=(const ScopedTestRule&) = delete;
};

}  // namespace

// ---------------------------------------------------------------- 1. a loop rule owns its state
TEST(LoopRule, StateOfAnyShapeGoesThroughReadout) {
  ScopedTestRule test_rule;
  TempDir d("two_stream");
  Config c = small_config(d);
  Model res(c);
  res.init_weights(11);
  for (auto& w : res.params().values()) w *= 6.0f;  // sharper: greedy choices are not near-ties
  Config c2 = c;
  c2.loop_rule = "test_two_stream";
  Model two(c2);
  ASSERT_EQ(two.params().total(), res.params().total());  // neither rule has parameters
  std::copy(res.params().values().begin(), res.params().values().end(), two.params().values().begin());
  save_model(d / "res.safetensors", res);
  save_model(d / "two.safetensors", two);
  LanguageModel a = LanguageModel::load(d / "res.safetensors"), b = LanguageModel::load(d / "two.safetensors");

  std::vector<int32_t> toks = a.encode("And the LORD");
  for (int depth : {0, 1, c.R + 2}) {
    std::vector<float> za = a.forward_logits(toks, depth), zb = b.forward_logits(toks, depth);
    ASSERT_EQ(za.size(), zb.size());
    for (size_t i = 0; i < za.size(); ++i) ASSERT_FLOAT_EQ(za[i], zb[i]) << "depth " << depth;
    GenerateOptions g;
    g.temperature = 0;
    g.max_new = 20;  // beyond the context: the window restarts once
    g.depth = depth;
    EXPECT_EQ(a.generate(toks, g), b.generate(toks, g)) << "depth " << depth;
  }
  const std::vector<int32_t> val = a.encode(corpus().substr(0, 600));
  EvalResult ea = a.evaluate(val, c.R + 1), eb = b.evaluate(val, c.R + 1);
  ASSERT_EQ(ea.loss_by_depth.size(), (size_t)c.R + 1);
  for (int r = 0; r <= c.R; ++r) {
    EXPECT_NEAR(ea.loss_by_depth[r], eb.loss_by_depth[r], 1e-6) << r;
    EXPECT_NEAR(ea.diagnostics.at("state_cosine")[r], eb.diagnostics.at("state_cosine")[r], 1e-6) << r;
    EXPECT_DOUBLE_EQ(eb.diagnostics.at("test_step")[r], r + 1.0);  // a rule's diagnostic, by loop step
  }
  EXPECT_EQ(ea.diagnostics.count("test_step"), 0u);
  EXPECT_EQ(ea.diagnostics.size(), 1u);  // residual reports only the state cosine
}

// ---------------------------------------------------------------- 2. components and their keys
TEST(Registry, NamesAreRegisteredOnceAndValidatedFromTheRegistry) {
  ScopedTestRule test_rule;
  auto dummy = [](ParamStore&, const Config&) -> std::unique_ptr<LoopRule> { return nullptr; };
  EXPECT_THROW(registries().loop_rules.add({"residual", "again", {}, dummy, {}}), Error);
  Config c;
  c.loop_rule = "test_two_stream";  // known only through the registry
  EXPECT_NO_THROW(c.validate());
  c.loop_rule = "gated_nonexistent";
  try {
    c.validate();
    FAIL() << "an unregistered loop rule validated";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("residual"), std::string::npos) << e.what();  // lists the registered ones
  }
  c.loop_rule = "test_two_stream";
  c.set("test_stream_scale", "7");
  EXPECT_THROW(c.validate(), UsageError);  // the component's own validation runs
}

TEST(Registry, ComponentConfigKeys) {
  ScopedTestRule test_rule;
  Config c;
  EXPECT_DOUBLE_EQ(c.get_float("test_stream_scale"), 0.5);  // the declared default
  c.set("test_stream_scale", "2.5");
  EXPECT_DOUBLE_EQ(c.get_float("test_stream_scale"), 2.5);
  c.loop_rule = "test_two_stream";  // a config carries the keys of the components it uses
  Config back = Config::from_json_text(c.to_json_text(), "round trip");
  EXPECT_DOUBLE_EQ(back.get_float("test_stream_scale"), 2.5);
  try {
    c.set("test_stream_scale", "11");
    FAIL() << "out of range accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("greater than 0 and at most 10"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.set("test_stream_scale", "0"), UsageError);
  // The getters are public: an undeclared key or the wrong type is a UsageError naming it, not an abort.
  EXPECT_THROW(c.get_bool("exit_gate_nonexistent"), UsageError);
  EXPECT_THROW(c.get_bool("test_stream_scale"), UsageError);
  EXPECT_THROW(c.get_float("d_model"), UsageError);  // a field, read as a field
  bool documented = false;
  for (auto& k : Config::documentation())
    if (k.key == "test_stream_scale") documented = k.owner == "loop_rule test_two_stream" && k.default_value == "0.5";
  EXPECT_TRUE(documented);
}

// A test's component lives as long as the test: afterwards the process-wide registry, the key list
// and validation know only the built-ins again.
TEST(Registry, TestComponentsLeaveTheProcessWideRegistry) {
  {
    ScopedTestRule test_rule;
    ASSERT_NE(registries().loop_rules.find("test_two_stream"), nullptr);
  }
  EXPECT_EQ(registries().loop_rules.find("test_two_stream"), nullptr);
  for (auto& k : Config::documentation()) EXPECT_NE(k.key, "test_stream_scale");
  Config c;
  EXPECT_THROW(c.set("test_stream_scale", "2"), UsageError);
  c.loop_rule = "test_two_stream";
  EXPECT_THROW(c.validate(), UsageError);
}

// docs/config.md lists every key of the built-ins (the fields and every built-in component's keys).
TEST(Registry, EveryKeyIsInDocsConfig) {
  std::ifstream in(std::string(LOOPLM_SOURCE_DIR) + "/docs/config.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  ASSERT_FALSE(doc.empty());
  Registries builtin;
  register_builtins(builtin);
  std::set<std::string> owners = {"model", "training"};
  for (auto& b : builtin.blocks.all()) owners.insert("block " + b.name);
  for (auto& r : builtin.loop_rules.all()) owners.insert("loop_rule " + r.name);
  for (auto& k : Config::documentation()) {
    EXPECT_TRUE(owners.count(k.owner)) << k.key << " of " << k.owner << " is not a built-in's";  // no test's component left over
    EXPECT_NE(doc.find("`" + k.key + "`"), std::string::npos) << "docs/config.md does not mention `" << k.key << "`";
  }
  for (auto& b : builtin.blocks.names()) EXPECT_NE(doc.find("`" + b + "`"), std::string::npos) << b;
  for (auto& r : builtin.loop_rules.names()) EXPECT_NE(doc.find("`" + r + "`"), std::string::npos) << r;
}

// Every parameter is declared with its init, and init_weights draws exactly that.
TEST(Init, EveryParameterFromItsDeclaredInit) {
  Config c;
  c.d_model = 64;
  c.n_heads = 4;
  c.n_prelude = 1;
  c.n_core = 2;
  c.n_coda = 1;
  c.R = 4;
  c.norm = "layernorm";
  c.bias = true;
  c.tie_embeddings = false;
  Model m(c);
  m.init_weights(5);
  const double N = c.n_unrolled();
  for (size_t i = 0; i < m.params().infos().size(); ++i) {
    const ParamInfo& p = m.params().infos()[i];
    const bool out = p.name.find(".attn.o.weight") != std::string::npos || p.name.find(".mlp.down.weight") != std::string::npos;
    if (p.shape.size() == 2) {
      ASSERT_EQ(p.init.kind, Init::Kind::Normal) << p.name;
      EXPECT_DOUBLE_EQ(p.init.a, out ? 0.02 / std::sqrt(2 * N) : 0.02) << p.name;
    } else {
      ASSERT_EQ(p.init.kind, Init::Kind::Constant) << p.name;
      const bool gain = p.name.size() > 7 && p.name.substr(p.name.size() - 7) == ".weight";
      EXPECT_EQ(p.init.a, gain ? 1.0 : 0.0) << p.name;
      for (size_t j = 0; j < p.numel; ++j) ASSERT_EQ(m.params().value((int)i)[j], (float)p.init.a) << p.name;
    }
  }
}

// ---------------------------------------------------------------- 3. named intermediates
TEST(Taps, EveryBlockApplicationNamesItsLinearInputs) {
  Config c;
  c.d_model = 16;
  c.n_heads = 2;
  c.context = 8;
  c.n_prelude = 1;
  c.n_core = 2;
  c.n_coda = 1;
  c.R = 3;
  Model m(c);
  m.init_weights(3);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6};
  for (bool grad : {true, false}) {
    for (int depth : {3, 5}) {
      Graph g;
      std::unique_ptr<Graph::NoGrad> ng;
      if (!grad) ng = std::make_unique<Graph::NoGrad>(g);
      std::map<std::string, std::set<std::pair<int, int>>> seen;
      std::map<std::string, int> count;
      g.set_observer([&](Graph&, const TapSite& s, Node* x) {
        seen[s.name].insert({s.block, s.step});
        count[s.name]++;
        if (std::string(s.name) != "state") {
          EXPECT_EQ(x->rows, 6);
        }
      });
      RunOptions o;
      o.depth = depth;
      Node* z = m.logits(g, tok.data(), 1, 6, o);
      std::set<std::pair<int, int>> want = {{0, 0}, {3, 0}};
      for (int r = 1; r <= depth; ++r) want.insert({{1, r}, {2, r}});
      for (const char* name : {"attn.in", "attn.o.in", "mlp.in", "mlp.down.in"}) {
        EXPECT_EQ(seen[name], want) << name << " grad " << grad;
        EXPECT_EQ(count[name], 2 + 2 * depth) << name;
      }
      std::set<std::pair<int, int>> states;
      for (int r = 0; r <= depth; ++r) states.insert({-1, r});
      EXPECT_EQ(seen["state"], states);
      EXPECT_EQ(count["lm_head.in"], 1);
      // Observing changes nothing.
      Graph g2;
      Graph::NoGrad ng2(g2);
      Node* z2 = m.logits(g2, tok.data(), 1, 6, o);
      for (int64_t i = 0; i < z->numel(); ++i) ASSERT_EQ(z->v[i], z2->v[i]);
    }
  }
}

// ---------------------------------------------------------------- 4. memory and depth
TEST(Memory, NoGradForwardDoesNotGrowWithDepth) {
  Config c;
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 16;
  c.n_prelude = 1;
  c.n_core = 2;
  c.n_coda = 1;
  c.R = 4;
  Model m(c);
  m.init_weights(1);
  const int B = 2, T = 16;
  std::vector<int32_t> tok(B * T + 1, 7);
  auto peak = [&](int depth) {
    Graph g;
    Graph::NoGrad ng(g);
    RunOptions o;
    o.depth = depth;
    m.logits(g, tok.data(), B, T, o);
    return (double)g.activation_bytes_peak();
  };
  const double p1 = peak(1), p32 = peak(32);
  EXPECT_LE(p32, 1.2 * p1) << "depth 1: " << p1 << " bytes, depth 32: " << p32;
  // And evaluation with every exit read (the callback's head is given back too).
  auto eval_peak = [&](int depth) {
    Graph g;
    Graph::NoGrad ng(g);
    RunOptions o;
    o.depth = depth;
    m.trunk(g, tok.data(), B, T, o, [&](int, Node* h) { op::cross_entropy(g, m.head(g, h, B, T, o), tok.data() + 1); });
    return (double)g.activation_bytes_peak();
  };
  EXPECT_LE(eval_peak(32), 1.2 * eval_peak(1));
}

TEST(Memory, TruncatedBpttPlansForTheKeptStepsOnly) {
  TempDir d("bptt_memory");
  Config c = small_config(d);
  c.n_core = 2;
  c.R = 8;  // 1 + 2x8 + 1
  c.steps = 1;
  c.eval_batches = 1;
  c.depth_sampler = "fixed";
  TrainOptions o;
  o.quiet = true;
  o.out_dir = d / "full";
  TrainResult full = train(c, o);
  c.bptt = 1;
  o.out_dir = d / "bptt1";
  TrainResult cut = train(c, o);
  ASSERT_GT(full.activation_bytes_peak, 0u);
  EXPECT_LE((double)cut.activation_bytes_peak, 0.4 * (double)full.activation_bytes_peak)
      << cut.activation_bytes_peak << " vs " << full.activation_bytes_peak;
}

// ---------------------------------------------------------------- 5. divergence
TEST(Train, DivergenceKeepsTheLastFiniteCheckpoint) {
  TempDir d("diverge");
  Config c = small_config(d);
  c.lr = 1e6;
  c.warmup = 0;
  c.steps = 40;
  c.eval_every = 1;
  TrainOptions o;
  o.quiet = true;
  o.out_dir = d / "run";
  try {
    train(c, o);
    FAIL() << "lr = 1e6 trained 40 steps without diverging";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("diverged at step"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lr"), std::string::npos) << msg;
  }
  if (fs::exists(d / "run/model.safetensors")) {
    auto f = io::SafetensorsFile::open(d / "run/model.safetensors");
    for (auto& n : f.names()) {
      std::vector<float> v = f.read_f32(n, f.get(n).shape);
      for (float x : v) ASSERT_TRUE(std::isfinite(x)) << n;
    }
    // And it resumes (the run's state is consistent with its weights).
    EXPECT_TRUE(has_checkpoint(d / "run"));
  }
}

// ---------------------------------------------------------------- 6. randomness per micro-batch
TEST(Train, GradAccumEqualsTheLargerBatch) {
  TempDir d("accum");
  Config c = small_config(d);
  c.depth_sampler = "uniform";
  c.steps = 3;
  c.batch_size = 4;
  c.grad_accum = 2;
  TrainOptions o;
  o.quiet = true;
  o.out_dir = d / "accum";
  TrainResult a = train(c, o);
  c.batch_size = 8;
  c.grad_accum = 1;
  o.out_dir = d / "big";
  TrainResult b = train(c, o);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5 * b.losses[i]) << i;
  // The gradient norm before clipping (metrics.jsonl): the accumulated gradient has the scale of
  // the large batch's (Adam alone would hide a wrong scale).
  auto norms = [](const std::string& path) {
    std::vector<double> v;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("grad_norm")) v.push_back(j["grad_norm"].get<double>());
    }
    return v;
  };
  std::vector<double> na = norms(d / "accum/metrics.jsonl"), nb = norms(d / "big/metrics.jsonl");
  ASSERT_EQ(na.size(), 3u);
  ASSERT_EQ(nb.size(), 3u);
  for (size_t i = 0; i < na.size(); ++i) EXPECT_NEAR(na[i], nb[i], 1e-4 * nb[i]) << "step " << i;
  // Weights after 3 AdamW steps: the gradients differ by float summation order only, but Adam's
  // first steps move each element by about ±lr whatever its gradient's size, so an element whose
  // gradient is float noise around zero may step the other way (up to 2·lr·steps apart). All but a
  // few elements must agree to 1e-6; none may be further apart than that bound.
  auto fa = io::SafetensorsFile::open(d / "accum/model.safetensors"), fb = io::SafetensorsFile::open(d / "big/model.safetensors");
  size_t total = 0, off = 0;
  for (auto& n : fa.names()) {
    auto va = fa.read_f32(n, fa.get(n).shape), vb = fb.read_f32(n, fb.get(n).shape);
    for (size_t i = 0; i < va.size(); ++i) {
      const double e = std::fabs(va[i] - vb[i]);
      off += e > 1e-6;
      ASSERT_LE(e, 2 * c.lr * c.steps + 1e-6) << n << "[" << i << "]";
    }
    total += va.size();
  }
  EXPECT_LT((double)off, 1e-3 * total) << off << " of " << total << " weights differ by more than 1e-6";
}

TEST(LoopCtx, RandomTermsAreKeyedPerMicroBatch) {
  LoopCtx a;
  a.seed = 3;
  a.step = 10;
  LoopCtx b = a;
  b.micro = 1;
  LoopCtx s = a;
  s.step = 11;
  const uint64_t x = a.rng(1, 2).next_u64();
  EXPECT_EQ(x, a.rng(1, 2).next_u64());  // a pure function of the key
  for (uint64_t y : {b.rng(1, 2).next_u64(), s.rng(1, 2).next_u64(), a.rng(2, 2).next_u64(), a.rng(1, 3).next_u64()})
    EXPECT_NE(x, y);
}

// ---------------------------------------------------------------- 7. loading for inference
// Packing releases the attached fp32 values' pages (a bf16 copy should not keep the fp32 file
// resident too). That is the owner's to do: a mapped file reads them back from disk, bytes held in
// memory must keep them (dropping anonymous pages would zero them).
TEST(Load, PackingKeepsAttachedValuesHeldInMemory) {
  TempDir d("attach");
  Config c = small_config(d);
  Model src(c);
  src.init_weights(2);
  const ParamStore& sp = src.params();
  const std::string values(reinterpret_cast<const char*>(sp.value(0)), sizeof(float) * sp.total());
  ASSERT_GT(values.size(), size_t(8) * 4096);  // several whole pages inside the matrices
  std::shared_ptr<const io::Bytes> held = io::hold_bytes(values);
  ParamStorage s;
  s.grads = false;
  s.external = const_cast<float*>(reinterpret_cast<const float*>(held->data()));
  s.owner = held;
  Model m(c, s);
  ASSERT_TRUE(m.params().attached());
  m.params().pack(*find_weight_format("bf16"));
  EXPECT_EQ(std::memcmp(held->data(), values.data(), values.size()), 0);
}

TEST(Load, InferenceMapsTheCheckpointAndChecksItFirst) {
  TempDir d("load");
  Config c = small_config(d);
  Model m(c);
  m.init_weights(2);
  save_model(d / "m.safetensors", m);
  auto inf = load_model(d / "m.safetensors");
  EXPECT_FALSE(inf->params().has_grads());
  EXPECT_TRUE(inf->params().attached());  // the file's bytes in place: no copy
  LoadModelOptions tr;
  tr.for_training = true;
  auto trn = load_model(d / "m.safetensors", tr);
  EXPECT_TRUE(trn->params().has_grads());
  EXPECT_FALSE(trn->params().attached());

  // A file in another tensor order (as another writer may make it) loads by copying, same logits.
  auto f = io::SafetensorsFile::open(d / "m.safetensors");
  std::vector<io::TensorRef> t;
  for (auto it = f.names().rbegin(); it != f.names().rend(); ++it) t.push_back({*it, f.get(*it).dtype, f.get(*it).shape, f.get(*it).data});
  io::write_safetensors(d / "rev.safetensors", t, f.metadata());
  auto rev = load_model(d / "rev.safetensors");
  EXPECT_FALSE(rev->params().attached());
  LanguageModel a = LanguageModel::load(d / "m.safetensors"), b = LanguageModel::load(d / "rev.safetensors");
  EXPECT_EQ(a.forward_logits({1, 2, 3}), b.forward_logits({1, 2, 3}));

  // A 1 KB file whose config declares a model of petabytes: rejected by the tensor check, before
  // anything is allocated (allocating first would throw bad_alloc or be killed).
  nlohmann::json huge = nlohmann::json::parse(c.to_json_text());
  huge["d_model"] = 65536;
  huge["n_heads"] = 64;
  huge["vocab_size"] = 1 << 24;
  huge["n_core"] = 1024;
  huge["context"] = 1 << 20;
  float one = 1;
  io::write_safetensors(d / "huge.safetensors", {{"tok_emb.weight", io::DType::F32, {1}, &one}},
                        {{"format", "pt"}, {"config", huge.dump()}});
  EXPECT_LT(fs::file_size(d / "huge.safetensors"), 2048u);
  try {
    load_model(d / "huge.safetensors");
    FAIL() << "a crafted file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tok_emb.weight"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- 8. undefined behaviour and bad input
// A config (and so every checkpoint) carries the keys of the components its model uses, not every
// registered component's: renaming another component's key breaks no file. A file that carries
// every key, as older checkpoints do, still loads to the same config.
TEST(Config, CarriesTheKeysOfTheComponentsItUses) {
  Config c = load_preset("looped");  // residual rule, pre_norm blocks
  nlohmann::json j = nlohmann::json::parse(c.to_json_text());
  EXPECT_TRUE(j.contains("loop_norm"));  // the residual rule's
  EXPECT_FALSE(j.contains("gate_tau"));  // the gated rule's
  EXPECT_FALSE(j.contains("hyper_streams"));
  EXPECT_FALSE(j.contains("cem_T"));     // the cem block's
  c.set("loop_rule", "gated");
  j = nlohmann::json::parse(c.to_json_text());
  EXPECT_TRUE(j.contains("gate_tau"));
  EXPECT_FALSE(j.contains("loop_norm"));
  // Every registered key, with the defaults (an older checkpoint's config), reads back the same.
  for (const auto& k : Config::documentation())
    if (!j.contains(k.key)) j[k.key] = nlohmann::json::parse(k.default_value);
  const Config old = Config::from_json_text(j.dump(), "an older checkpoint");
  EXPECT_EQ(old.to_json_text(), c.to_json_text());
}

TEST(Config, IntegersAreRangeCheckedBeforeNarrowing) {
  Config c;
  for (const char* v : {"4294967424", "-1", "0", "65537", "1e12", "12.5"}) {
    try {
      c.set("d_model", v);
      FAIL() << "d_model=" << v << " accepted (d_model is now " << c.d_model << ")";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("d_model"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(c.d_model, 128);
  try {
    c.set("lr", "-1");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("greater than 0"), std::string::npos) << e.what();  // in words
    EXPECT_EQ(std::string(e.what()).find("1797693"), std::string::npos) << e.what();          // no DBL_MAX
  }
  EXPECT_THROW(Config::from_json_text(R"({"n_core": 4294967297})", "test"), UsageError);
  EXPECT_THROW(Config::from_json_text(R"({"seed": -3})", "test"), UsageError);
  c.set("d_model", "96");  // 96 / 4 heads = 24
  EXPECT_EQ(c.d_model, 96);
}

TEST(Eval, DepthZeroIsTheLossOfHPre) {
  TempDir d("depth0");
  Config c = small_config(d);
  Model m(c);
  m.init_weights(4);
  std::vector<int32_t> toks;
  for (int i = 0; i < 3 * c.context + 1; ++i) toks.push_back((i * 37) % 200);
  EvalResult e = evaluate_tokens(m, toks, 0, 8);
  EXPECT_TRUE(e.loss_by_depth.empty());
  // By hand: embedding + prelude -> coda -> norm_f -> head, no loop step.
  Graph g;
  Graph::NoGrad ng(g);
  RunOptions o;
  o.depth = 0;
  std::vector<int32_t> x(toks.begin(), toks.begin() + 3 * c.context), y(toks.begin() + 1, toks.begin() + 3 * c.context + 1);
  // windows are consecutive: window i = toks[i*T .. i*T+T], targets shifted by one
  for (int w = 0; w < 3; ++w)
    for (int t = 0; t < c.context; ++t) y[w * c.context + t] = toks[w * c.context + t + 1];
  Node* l = op::cross_entropy(g, m.logits(g, x.data(), 3, c.context, o), y.data());
  EXPECT_NEAR(e.loss, l->v[0], 1e-5);
  EvalResult e1 = evaluate_tokens(m, toks, 1, 8);
  EXPECT_NE(e.loss, e1.loss);
}

// --window W scores consecutive windows of W tokens (less than the context): the loss of the
// full passes over those windows, by hand; incremental scoring agrees; beyond the context is a
// usage error.
TEST(Eval, WindowShorterThanTheContext) {
  TempDir d("window");
  Config c = small_config(d);
  Model m(c);
  m.init_weights(4);
  const int W = c.context / 2 - 3;
  std::vector<int32_t> toks;
  for (int i = 0; i < 4 * W + 1; ++i) toks.push_back((i * 37) % 200);
  const EvalResult e = evaluate_tokens(m, toks, -1, 3, -1, {}, {}, W);
  EXPECT_EQ(e.windows, 4);
  EXPECT_EQ(e.tokens, 4 * W);
  Graph g;
  Graph::NoGrad ng(g);
  std::vector<int32_t> x(toks.begin(), toks.begin() + 4 * W), y(toks.begin() + 1, toks.begin() + 4 * W + 1);
  Node* l = op::cross_entropy(g, m.logits(g, x.data(), 4, W, RunOptions{}), y.data());
  EXPECT_NEAR(e.loss, l->v[0], 1e-5);
  const EvalResult inc = evaluate_incremental(m, toks, -1, 3, -1, {}, {}, KvPolicy::per_step, op::KvElem::f32, W);
  EXPECT_NEAR(inc.loss, e.loss, 2e-5);
  EXPECT_THROW(evaluate_tokens(m, toks, -1, 3, -1, {}, {}, c.context + 1), UsageError);
}

TEST(Generate, ContextOfOne) {
  TempDir d("ctx1");
  Config c = small_config(d);
  c.context = 1;
  Model m(c);
  m.init_weights(9);
  for (auto& w : m.params().values()) w *= 8.0f;
  save_model(d / "m.safetensors", m);
  LanguageModel lm = LanguageModel::load(d / "m.safetensors");
  GenerateOptions g;
  g.temperature = 0;
  g.max_new = 6;
  std::vector<int32_t> prompt = {65, 66};
  std::vector<int32_t> out = lm.generate(prompt, g);
  ASSERT_EQ(out.size(), 6u);
  int32_t last = prompt.back();
  for (int i = 0; i < 6; ++i) {  // with a window of one token, each step sees only the last token
    std::vector<float> z = lm.forward_logits({last}, -1);
    int32_t best = (int32_t)(std::max_element(z.begin(), z.end()) - z.begin());
    EXPECT_EQ(out[i], best) << i;
    last = out[i];
  }
}

// Every embedded preset is a valid config whose model builds, tokenizes and generates (the bench
// and the CLI start from them).
TEST(Presets, EveryPresetBuildsAndGenerates) {
  for (const std::string& name : preset_names()) {
    Config c = load_preset(name);
    ASSERT_NO_THROW(c.validate()) << name;
    // The preset's own layout, rule and keys, at a small width (the d384 bench shapes would only
    // cost time here: the kernels at that size are the benchmarks' business).
    c.d_model = std::min(c.d_model, 8 * c.n_heads);
    ASSERT_NO_THROW(c.validate()) << name;
    LanguageModel lm = LanguageModel::from_config(c, 1);
    GenerateOptions g;
    g.temperature = 0;
    g.max_new = 2;
    std::vector<int32_t> prompt = lm.encode(c.data_mode == "examples" ? "S12]=" : "And");
    ASSERT_FALSE(prompt.empty()) << name;
    EXPECT_EQ(lm.generate(prompt, g).size(), 2u) << name;
  }
}

// The docs are self-contained: every relative link in README.md and docs/ points at a file of
// this repository (nothing in a directory beside the checkout, which a user's clone does not have).
TEST(Docs, LinksStayInsideTheRepository) {
  const fs::path root = LOOPLM_SOURCE_DIR;
  std::vector<fs::path> pages = {root / "README.md"};
  for (auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  int links = 0;
  for (const fs::path& page : pages) {
    std::ifstream in(page);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    EXPECT_EQ(text.find("../shared"), std::string::npos) << page;
    for (size_t at = text.find("]("); at != std::string::npos; at = text.find("](", at + 2)) {
      const size_t end = text.find(')', at);
      std::string target = text.substr(at + 2, end - at - 2);
      if (target.rfind("http", 0) == 0) continue;
      target = target.substr(0, target.find('#'));
      if (target.empty()) continue;
      ++links;
      const fs::path resolved = fs::weakly_canonical(page.parent_path() / target);
      EXPECT_TRUE(fs::exists(resolved)) << page << " links to " << target;
      EXPECT_EQ(resolved.string().rfind(fs::weakly_canonical(root).string(), 0), 0u) << page << " links outside: " << target;
    }
  }
  EXPECT_GT(links, 5);
}

// Each list of choices is one table: every name a front end is offered parses to a value whose
// name is that name again, an unknown name is refused with the whole list, a request's long or
// control-laden name is quoted cut short, and the quantized formats are those the trait marks.
TEST(Choices, OneTablePerList) {
  auto message_of = [](auto parse, const std::string& name) {
    try {
      parse(name);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  for (const std::string& n : available_exit_rules()) EXPECT_EQ(exit_rule_name(parse_exit_rule(n)), n);
  for (const std::string& n : available_kv_policies()) EXPECT_EQ(kv_policy_name(parse_kv_policy(n)), n);
  EXPECT_EQ(joined(available_exit_rules()), "fixed, kl, latent, entropy, gate");
  EXPECT_EQ(joined(available_kv_policies()), "per_step, mean, last, first");
  EXPECT_EQ(joined(available_kv_caches()), "fp32, bf16, int8");
  EXPECT_EQ(joined(available_gguf_types()), "f32, f16, q8_0, q4_0");
  EXPECT_EQ(message_of(parse_exit_rule, "often"), "unknown exit rule 'often' (choose fixed, kl, latent, entropy or gate)");
  EXPECT_EQ(message_of(parse_kv_policy, "all"), "unknown KV policy 'all' (choose per_step, mean, last or first)");
  const std::string hostile = "a\nb" + std::string(100, 'x');
  const std::string m = message_of(parse_exit_rule, hostile);
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find("a?bxxx"), std::string::npos) << m;
  EXPECT_LT(m.size(), 160u) << m;
  std::vector<std::string> quantized;
  for (const WeightFormat* f : weight_formats())
    if (f->quantized()) quantized.push_back(f->name);
  EXPECT_EQ(quantized, available_quantized_formats());
  EXPECT_EQ(joined(available_quantized_formats()), "q8_0, q4_0, q4_k");
}
