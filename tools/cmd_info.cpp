// `looplm info`: what a config (a preset, a config file or a checkpoint's) builds — layout, unique
// parameters, unrolled depth, FLOPs per token, memory per token — and, for a looped model, the
// dense controls a fair comparison needs: the dense depth with the same FLOPs (iso-FLOP) and with
// the same parameters (iso-param).
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cpu/weight_format.h"
#include "cli.h"
#include "cli_common.h"
#include "io/json_input.h"
#include "data/tokenizer.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"

namespace looplm::cli {

namespace {

struct Counts {
  int64_t total = 0, embedding = 0, prelude = 0, core = 0, coda = 0, loop = 0, other = 0;
  int64_t non_embedding() const { return total - embedding; }
};

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

Counts count(const Config& c) {
  Counts n;
  for (const ParamInfo& p : Model::layout(c)) {
    const int64_t k = (int64_t)p.numel;
    n.total += k;
    if (p.name == "tok_emb.weight" || p.name == "pos_emb.weight" || starts(p.name, "lm_head.")) n.embedding += k;
    else if (starts(p.name, "prelude.")) n.prelude += k;
    else if (starts(p.name, "core.")) n.core += k;
    else if (starts(p.name, "coda.")) n.coda += k;
    else if (starts(p.name, "loop.")) n.loop += k;
    else n.other += k;
  }
  return n;
}

// The dense model of the same width and block kind with L blocks (n_prelude = n_coda = 0, R = 1,
// the residual rule; DeepLoop's scaling, if any, keyed to its own depth).
Config dense_with(const Config& c, int L) {
  Config d = c;
  d.n_prelude = d.n_coda = 0;
  d.n_core = L;
  d.R = 1;
  d.loop_rule = "residual";
  d.depth_sampler = "fixed";
  d.bptt = 0;
  return d;
}

struct Dense {
  int L = 0;
  Counts params;
  double flops = 0;
};

// The dense depth L (1..1024) whose value(L) is nearest to `target`.
template <class F>
Dense nearest_dense(const Config& c, double target, F value) {
  Dense best;
  double best_gap = INFINITY;
  for (int L = 1; L <= 1024; ++L) {
    const Config d = dense_with(c, L);
    Dense x{L, count(d), Model::skeleton(d)->flops_per_token(1)};
    const double gap = std::fabs(value(x) - target);
    if (gap < best_gap) { best_gap = gap; best = x; }
    if (value(x) > target) break;  // grows with L
  }
  return best;
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  CLI::App app{"What a config builds: layout, parameters, unrolled depth, FLOPs and memory per token, dense controls.",
               "looplm info"};
  ConfigArgs ca;
  ca.add(app, "looped");
  std::string ckpt;
  bool as_json = false, no_measure = false;
  app.add_option("--checkpoint", ckpt, "a model.safetensors (or run directory): its config")->type_name("PATH");
  app.add_flag("--json", as_json, "print one JSON object");
  app.add_flag("--no-measure", no_measure, "skip measuring activation memory (one forward and backward at batch 1)");
  if (!parse(app, argc, argv, "info")) return 0;
  if (!ckpt.empty() && ca.explicit_base()) throw UsageError("--checkpoint names the config; do not give --preset or --config too");
  Config c;
  // A checkpoint's weights: their format and bytes (a quantized checkpoint's packed matrices).
  std::string weights = "fp32";
  double weight_bytes = 0, file_bytes = 0;
  size_t n_matrices = 0;
  if (!ckpt.empty()) {
    std::string path = ckpt;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) path += "/model.safetensors";
    std::unique_ptr<Model> lm = load_model(path);
    if (const WeightFormat* f = lm->params().prepacked_format()) {
      weights = f->name;
      lm->prepare_inference(*f);
      weight_bytes = (double)lm->params().packed_bytes();
      n_matrices = lm->params().matrices().size();
    }
    if (::stat(path.c_str(), &st) == 0) file_bytes = (double)st.st_size;
    c = lm->config();
    ca.apply_sets(c);
    c.validate();
  } else {
    c = ca.resolve();
  }
  // What train refuses: a tokenizer the config cannot serve (a char alphabet still to be built
  // from the data is train's to build).
  if (!(c.tokenizer == "char" && c.tokenizer_chars.empty())) Tokenizer::from_config(c);

  const Counts n = count(c);
  auto skel = Model::skeleton(c);
  const Model::FlopParts fp = skel->flop_parts();
  const double infer = skel->flops_per_token(c.R), train = 3 * infer;  // backward ≈ 2 × forward
  const int N = c.n_unrolled();
  // The KV cache keeps keys and values per (block, loop step): 2 · kv_width floats for each
  // application (n_kv_heads · d_head; the energy block's keys are n_heads · d_model wide).
  const double kv_bytes = 2.0 * (double)skel->kv_width() * sizeof(float) * N;

  // Activation memory per token, measured: one training forward and backward at batch 1, one
  // context, depth R with every step keeping gradients.
  double act = -1, act_grad = -1;
  if (!no_measure) {
    Model m(c);
    m.init_weights(c.seed);
    Graph g;
    std::vector<int32_t> x(c.context, 0);
    RunOptions ro;
    ro.training = true;
    g.backward(op::cross_entropy(g, m.logits(g, x.data(), 1, c.context, ro), x.data()));
    act = (double)g.activation_bytes_peak() / c.context;
    act_grad = (double)g.grad_bytes_peak() / c.context;
  }

  const bool looped = c.R > 1 || c.n_prelude + c.n_coda > 0 || c.loop_rule != "residual";
  Dense iso_flop, iso_param;
  if (looped) {
    iso_flop = nearest_dense(c, infer, [](const Dense& d) { return d.flops; });
    iso_param = nearest_dense(c, (double)n.non_embedding(), [](const Dense& d) { return (double)d.params.non_embedding(); });
  }

  if (as_json) {
    nlohmann::json j = {
        {"layout", {{"n_prelude", c.n_prelude}, {"n_core", c.n_core}, {"R", c.R}, {"n_coda", c.n_coda},
                    {"block", c.block}, {"loop_rule", c.loop_rule}, {"d_model", c.d_model}, {"n_heads", c.n_heads},
                    {"n_kv_heads", c.kv_heads()}, {"d_head", c.head_dim()}, {"context", c.context}, {"vocab_size", c.vocab_size}}},
        {"params", n.total},
        {"params_non_embedding", n.non_embedding()},
        {"params_embedding", n.embedding},
        {"params_by_section", {{"prelude", n.prelude}, {"core", n.core}, {"coda", n.coda}, {"loop", n.loop}, {"other", n.other}}},
        {"unrolled_depth", N},
        {"infer_flops_per_token", infer},
        {"train_flops_per_token", train},
        {"flops_per_token_parts", {{"prelude", fp.prelude}, {"core_per_step", fp.core}, {"rule_per_step", fp.rule},
                                   {"coda", fp.coda}, {"head", fp.head}}},
        {"kv_cache_bytes_per_token", kv_bytes}};
    if (!ckpt.empty()) {
      j["weights"] = weights;
      j["file_bytes"] = file_bytes;
      if (n_matrices) j["packed_matrix_bytes"] = weight_bytes;
    }
    if (act >= 0) {
      j["activation_bytes_per_token"] = act;
      j["activation_grad_bytes_per_token"] = act_grad;
    }
    if (looped) {
      for (auto [key, d] : {std::pair{"iso_flop_dense", &iso_flop}, std::pair{"iso_param_dense", &iso_param}})
        j[key] = {{"n_core", d->L}, {"params", d->params.total}, {"params_non_embedding", d->params.non_embedding()},
                  {"infer_flops_per_token", d->flops}};
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  const double M = 1e6;
  const std::string heads = c.kv_heads() == c.n_heads ? std::to_string(c.n_heads) + " heads of " + std::to_string(c.head_dim())
                                                       : std::to_string(c.n_heads) + " heads of " + std::to_string(c.head_dim()) + " on " +
                                                             std::to_string(c.kv_heads()) + " key/value heads";
  std::printf("layout: %d + %d x %d + %d (prelude + core x R + coda); %s blocks, %s loop rule; d %d, %s, context %d, vocab %d\n",
              c.n_prelude, c.n_core, c.R, c.n_coda, c.block.c_str(), c.loop_rule.c_str(), c.d_model, heads.c_str(),
              c.context, c.vocab_size);
  std::printf("unrolled depth: %d block applications at R = %d\n", N, c.R);
  if (!ckpt.empty()) {
    std::printf("weights: %s", weights.c_str());
    if (n_matrices) std::printf(" (%zu weight matrices packed, %.2f MB; the rest fp32)", n_matrices, weight_bytes / 1e6);
    std::printf(", file %.2f MB\n", file_bytes / 1e6);
  }
  std::printf("parameters: %s (embeddings %s, non-embedding %s)\n", with_commas(n.total).c_str(),
              with_commas(n.embedding).c_str(), with_commas(n.non_embedding()).c_str());
  std::printf("  prelude %s | core %s | coda %s | loop rule %s | final norm %s\n", with_commas(n.prelude).c_str(),
              with_commas(n.core).c_str(), with_commas(n.coda).c_str(), with_commas(n.loop).c_str(),
              with_commas(n.other).c_str());
  std::printf("FLOPs per token at R: inference %.2f M, training %.2f M (forward + backward = 3 x forward)\n", infer / M,
              train / M);
  std::printf("  prelude %.2f M, core %.2f M per step, loop rule %.3f M per step, coda %.2f M, lm_head %.2f M\n",
              fp.prelude / M, fp.core / M, fp.rule / M, fp.coda / M, fp.head / M);
  std::printf("  (matrix products and attention at its causal average, T/2 keys per query)\n");
  std::printf("memory per token: KV cache %.1f KiB (keys and values per block and loop step)", kv_bytes / 1024);
  if (act >= 0)
    std::printf("; training activations %.1f KiB + activation gradients %.1f KiB (measured: batch 1, depth R, full backprop)",
                act / 1024, act_grad / 1024);
  std::printf("\n");
  if (looped) {
    std::printf("dense controls (%s blocks, d %d):\n", c.block.c_str(), c.d_model);
    std::printf("  iso-FLOP:  n_core = %d (%.2f M FLOPs per token, %s parameters, %s non-embedding)\n", iso_flop.L,
                iso_flop.flops / M, with_commas(iso_flop.params.total).c_str(),
                with_commas(iso_flop.params.non_embedding()).c_str());
    std::printf("  iso-param: n_core = %d (%.2f M FLOPs per token, %s parameters, %s non-embedding)\n", iso_param.L,
                iso_param.flops / M, with_commas(iso_param.params.total).c_str(),
                with_commas(iso_param.params.non_embedding()).c_str());
  }
  return 0;
}

}  // namespace looplm::cli
