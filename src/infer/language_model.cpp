// LanguageModel: a checkpoint loaded for evaluation and generation (the public API's model).
#include <sys/stat.h>

#include <chrono>

#include "backend/cpu/weight_format.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "infer/eval.h"
#include "infer/sampler.h"
#include "looplm/looplm.h"
#include "model/model_io.h"

namespace looplm {

struct LanguageModel::Impl {
  std::unique_ptr<Model> model;
  Tokenizer tok;
  explicit Impl(std::unique_ptr<Model> m) : model(std::move(m)), tok(Tokenizer::from_config(model->config())) {}
};

LanguageModel::LanguageModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LanguageModel::LanguageModel(LanguageModel&&) noexcept = default;
LanguageModel& LanguageModel::operator=(LanguageModel&&) noexcept = default;
LanguageModel::~LanguageModel() = default;

namespace {
const WeightFormat& format_of(const LoadOptions& o) {
  const WeightFormat* f = find_weight_format(o.weights);
  if (!f) throw UsageError("unknown weight format '" + o.weights + "' (available: " + weight_format_names() + ")");
  return *f;
}
}  // namespace

LanguageModel LanguageModel::load(const std::string& checkpoint, const LoadOptions& o) {
  const WeightFormat& f = format_of(o);
  std::string path = checkpoint;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) path += "/model.safetensors";
  LoadModelOptions lmo;
  lmo.allow_nonfinite = o.allow_nonfinite;
  std::unique_ptr<Model> m = load_model(path, lmo);
  m->prepare_inference(f);
  return LanguageModel(std::make_unique<Impl>(std::move(m)));
}

LanguageModel LanguageModel::from_config(const Config& c, uint64_t seed, const LoadOptions& o) {
  const WeightFormat& f = format_of(o);
  ParamStorage s;
  s.grads = false;
  auto m = std::make_unique<Model>(c, s);
  m->init_weights(seed);
  m->prepare_inference(f);
  return LanguageModel(std::make_unique<Impl>(std::move(m)));
}

const Config& LanguageModel::config() const { return impl_->model->config(); }
int64_t LanguageModel::n_params() const { return impl_->model->n_params(); }
std::vector<int32_t> LanguageModel::encode(const std::string& text) const { return impl_->tok.encode(text); }
std::string LanguageModel::decode(const std::vector<int32_t>& ids) const { return impl_->tok.decode(ids); }

EvalResult LanguageModel::evaluate(const std::vector<int32_t>& tokens, const EvalOptions& o) const {
  if (o.batch < 1) throw UsageError("evaluate: batch must be >= 1");
  return evaluate_tokens(*impl_->model, tokens, o.depth, o.batch, o.max_windows, o.progress, o.exit);
}
EvalResult LanguageModel::evaluate(const std::vector<int32_t>& tokens, int depth) const {
  EvalOptions o;
  o.depth = depth;
  return evaluate(tokens, o);
}
EvalResult LanguageModel::evaluate_file(const std::string& data_path, const EvalOptions& o) const {
  if (impl_->model->config().data_mode == "examples") {  // a model trained on examples is evaluated on them
    if (o.batch < 1) throw UsageError("evaluate: batch must be >= 1");
    const Examples ex = load_examples(data_path, impl_->tok, impl_->model->config().context);
    return evaluate_examples(*impl_->model, ex, o.depth, o.batch, o.max_windows, o.progress, o.exit);
  }
  return evaluate(load_tokens(data_path, impl_->tok), o);
}
EvalResult LanguageModel::evaluate_file(const std::string& data_path, int depth) const {
  EvalOptions o;
  o.depth = depth;
  return evaluate_file(data_path, o);
}

std::vector<float> LanguageModel::forward_logits(const std::vector<int32_t>& tokens, int depth) const {
  const Model& m = *impl_->model;
  if (tokens.empty() || (int)tokens.size() > m.config().context)
    throw UsageError("forward_logits: need 1..context tokens");
  Graph g;
  Graph::NoGrad ng(g);
  RunOptions o;
  o.depth = depth;
  Node* z = m.logits(g, tokens.data(), 1, (int)tokens.size(), o);
  return std::vector<float>(z->v, z->v + z->numel());
}

std::vector<int32_t> LanguageModel::generate(const std::vector<int32_t>& prompt_in, const GenerateOptions& opt,
                                             const std::function<void(int32_t)>& on_token) const {
  const Model& m = *impl_->model;
  const Config& c = m.config();
  const int V = c.vocab_size, ctx = c.context;
  const int depth = opt.depth < 0 ? c.R : opt.depth;
  if (prompt_in.empty()) throw UsageError("generate: the prompt is empty");
  if (depth < 0) throw UsageError("generate: --depth must be >= 0");
  for (int32_t t : prompt_in)
    if (t < 0 || t >= V) throw UsageError("generate: prompt token " + std::to_string(t) + " is outside the vocabulary");
  // The cache holds what the window can hold: the prompt (at most a context) and the new tokens.
  const int capacity = (int)std::min<int64_t>(ctx, (int64_t)std::min<int64_t>(prompt_in.size(), ctx) + opt.max_new);
  KVCache cache(c, 1, capacity, depth, m.kv_width());
  Graph g;
  Graph::NoGrad ng(g);
  RunOptions o;
  o.depth = depth;
  o.cache = &cache;
  SamplerOptions so{opt.temperature, opt.top_k, opt.top_p};
  Rng rng(opt.seed, kStreamSample);
  std::vector<float> work;
  std::vector<int32_t> seq = prompt_in, out;

  // Fill the cache with `ids` (positions from 0) and return the last row's logits.
  std::vector<float> last(V);
  auto prefill = [&](const int32_t* ids, int n) {
    adapt_threads();
    o.pos0 = 0;
    Node* z = m.logits(g, ids, 1, n, o);
    std::copy(z->v + (int64_t)(n - 1) * V, z->v + (int64_t)n * V, last.begin());
    cache.length = n;
    g.reset();
  };
  int start = std::max(0, (int)seq.size() - ctx);
  const auto t0 = std::chrono::steady_clock::now();
  prefill(seq.data() + start, (int)seq.size() - start);
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < opt.max_new; ++i) {
    int32_t next = sample_token(last.data(), V, so, rng, work);
    seq.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == opt.max_new) break;
    if (cache.length == capacity) {  // window full: restart the cache on the last half context
      const int keep = std::max(1, ctx / 2);
      prefill(seq.data() + seq.size() - keep, keep);
      continue;
    }
    adapt_threads();
    o.pos0 = cache.length;
    Node* z = m.logits(g, &next, 1, 1, o);
    std::copy(z->v, z->v + V, last.begin());
    cache.length += 1;
    g.reset();
  }
  if (opt.stats) {
    const auto t2 = std::chrono::steady_clock::now();
    opt.stats->prompt_tokens = (int)seq.size() - (int)out.size() - start;
    opt.stats->prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    opt.stats->new_tokens = (int)out.size();
    opt.stats->gen_seconds = std::chrono::duration<double>(t2 - t1).count();
  }
  return out;
}

}  // namespace looplm
