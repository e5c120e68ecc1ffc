// `describe_model` and `inspect_checkpoint` (include/looplm/looplm.h): what `looplm info` prints.
#include <sys/stat.h>

#include <cmath>

#include "backend/cpu/weight_format.h"
#include "tokenizer/tokenizer.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"

namespace looplm {

namespace {

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

ParamCounts count(const Config& c) {
  ParamCounts n;
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

// The dense model of the same width and block kind with L blocks (DeepLoop's scaling, if any,
// keyed to its own depth).
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

// The dense depth L (1..1024) whose value(L) is nearest to `target` (value grows with L).
template <class F>
DenseControl nearest_dense(const Config& c, double target, F value) {
  DenseControl best;
  double best_gap = INFINITY;
  for (int L = 1; L <= 1024; ++L) {
    const Config d = dense_with(c, L);
    DenseControl x{L, count(d), Model::skeleton(d)->flops_per_token(1)};
    const double gap = std::fabs(value(x) - target);
    if (gap < best_gap) {
      best_gap = gap;
      best = x;
    }
    if (value(x) > target) break;
  }
  return best;
}

}  // namespace

std::string checkpoint_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path + "/model.safetensors";
  return path;
}

ModelDescription describe_model(const Config& config, bool measure_activations) {
  Config c = config;
  c.validate();
  if (!(c.tokenizer == "char" && c.tokenizer_chars.empty())) Tokenizer::from_config(c);  // what train refuses
  ModelDescription d;
  d.params = count(c);
  auto skel = Model::skeleton(c);
  const Model::FlopParts fp = skel->flop_parts();
  d.infer_flops_per_token = skel->flops_per_token(c.R);
  d.train_flops_per_token = 3 * d.infer_flops_per_token;
  d.flops_prelude = fp.prelude;
  d.flops_core_per_step = fp.core;
  d.flops_rule_per_step = fp.rule;
  d.flops_coda = fp.coda;
  d.flops_head = fp.head;
  d.unrolled_depth = c.n_unrolled();
  // Keys and values per (block, loop step): 2 · kv_width floats per application (n_kv_heads ·
  // d_head; the energy block's keys are n_heads · d_model wide).
  d.kv_cache_bytes_per_token = 2.0 * (double)skel->kv_width() * sizeof(float) * d.unrolled_depth;
  if (measure_activations) {
    Model m(c);
    m.init_weights(c.seed);
    Graph g;
    std::vector<int32_t> x(c.context, 0);
    RunOptions ro;
    ro.training = true;
    g.backward(op::cross_entropy(g, m.logits(g, x.data(), 1, c.context, ro), x.data()));
    d.activation_bytes_per_token = (double)g.activation_bytes_peak() / c.context;
    d.activation_grad_bytes_per_token = (double)g.grad_bytes_peak() / c.context;
  }
  d.looped = c.R > 1 || c.n_prelude + c.n_coda > 0 || c.loop_rule != "residual";
  if (d.looped) {
    d.iso_flop = nearest_dense(c, d.infer_flops_per_token, [](const DenseControl& x) { return x.infer_flops_per_token; });
    d.iso_param = nearest_dense(c, (double)d.params.non_embedding(),
                                [](const DenseControl& x) { return (double)x.params.non_embedding(); });
  }
  return d;
}

CheckpointSummary inspect_checkpoint(const std::string& checkpoint) {
  CheckpointSummary s;
  s.file = checkpoint_file(checkpoint);
  LoadModelOptions lo;
  lo.lean = true;  // a quantized checkpoint's packed bytes as they are, no fp32 copy of them
  std::unique_ptr<Model> lm = load_model(s.file, lo);
  if (const WeightFormat* f = lm->params().prepacked_format()) {
    s.weights = f->name;
    lm->prepare_inference(*f);
    s.packed_bytes = lm->params().packed_bytes();
    s.packed_matrices = lm->params().matrices().size();
  }
  struct stat st;
  if (::stat(s.file.c_str(), &st) == 0) s.file_bytes = (uint64_t)st.st_size;
  s.config = lm->config();
  return s;
}

}  // namespace looplm
