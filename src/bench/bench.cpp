// Bench (include/looplm/bench.h): what `looplm bench` measures, as the library runs it for every
// front end.
#include "looplm/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backend/cpu/gemm.h"
#include "backend/cpu/weight_format.h"
#include "core/rng.h"
#include "core/threads.h"
#include "io/json_input.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "quant/gptq.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace looplm {

namespace {

using clk = std::chrono::steady_clock;
double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
std::string sfx_of(const std::string& f) { return f == "fp32" ? std::string() : f + "_"; }

}  // namespace

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

struct Bench::Impl {
  Config c;
  BenchOptions o;
  std::vector<std::string> formats;
  std::string own;  // the checkpoint's own format (its packed matrices used in place)
  std::vector<BenchMetric> metrics;
  std::unique_ptr<Model> train_model;  // fp32 values, gradients and AdamW state (none for generation only)
  std::unique_ptr<AdamW> opt;
  std::vector<std::unique_ptr<LanguageModel>> lms;  // one per format, made at the first measure()
  std::vector<int32_t> x, y;
  double train_rss = 0;
  size_t act_peak = 0, grad_peak = 0;
  std::vector<std::tuple<std::string, int64_t, int64_t>> mats;  // weight matrices: (name, rows, cols)
  int64_t n_params = 0;

  void train_steps(std::map<std::string, double>& v);
  void generation(std::map<std::string, double>& v);
  void speculative(const LanguageModel& lm, const std::vector<int32_t>& prompt, const std::string& format,
                   std::map<std::string, double>& v);
  // A measured metric into v, and to the caller's on_measured as it comes.
  void put(std::map<std::string, double>& v, const std::string& key, double value) {
    v[key] = value;
    if (o.on_measured) o.on_measured(key, value);
  }
};

Bench::Bench(const Config& config, const BenchOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& b = *impl_;
  b.c = config;
  b.c.validate();
  b.o = options;
  const Config& c = b.c;
  const std::vector<std::string> caches = available_kv_caches();
  if (std::find(caches.begin(), caches.end(), options.kv_cache) == caches.end())
    throw UsageError("bench: unknown KV cache '" + io::brief(options.kv_cache) + "' (" + joined(caches) + ")");
  for (const std::string& f : options.formats) {
    if (!find_weight_format(f)) throw UsageError("bench: unknown weight format '" + io::brief(f) + "' (" + weight_format_names() + ")");
    if (std::find(b.formats.begin(), b.formats.end(), f) == b.formats.end()) b.formats.push_back(f);
  }
  if (!options.checkpoint.empty()) {
    const CheckpointSummary ck = inspect_checkpoint(options.checkpoint);
    if (ck.weights != "fp32") b.own = ck.weights;
    if (!b.own.empty() && std::find(b.formats.begin(), b.formats.end(), b.own) == b.formats.end()) b.formats.push_back(b.own);
  }
  if (b.formats.empty()) throw UsageError("bench: no weight format to time generation in");
  b.o.prompt_tokens = std::min(options.prompt_tokens, c.context);

  const int B = c.batch_size, T = c.context, V = c.vocab_size;
  if (options.train) {
    require_precision_supported(c);
    b.train_model = std::make_unique<Model>(c);
    b.train_model->init_weights(c.seed);
    b.opt = std::make_unique<AdamW>(b.train_model->params());
  }
  Rng rng(c.seed, kStreamData);
  b.x.resize((size_t)B * T);
  b.y.resize((size_t)B * T);
  for (auto& t : b.x) t = (int32_t)rng.below(V);
  for (auto& t : b.y) t = (int32_t)rng.below(V);

  const std::string bt = std::to_string(B) + " x " + std::to_string(T) + " tokens";
  if (options.train)
    b.metrics = {{"train_tokens_per_s", "train (fwd + bwd + AdamW, " + bt + ")"},
                 {"eval_tokens_per_s", "evaluation (loss at depth R, " + bt + ") fp32"},
                 {"quantize_tokens_per_s", "quantization: GPTQ q4_0 (calibration on " + std::to_string(B * T) + " tokens + solve), tokens/s"}};
  const std::string tg = "generation tg" + std::to_string(options.gen_tokens);
  for (const std::string& f : b.formats) {  // per weight format: prompt, decoding, batched decoding (and end to end for fp32 / bf16)
    b.metrics.push_back({"prompt_" + sfx_of(f) + "tokens_per_s", "prompt processing pp" + std::to_string(b.o.prompt_tokens) + " " + f});
    b.metrics.push_back({"decode_" + sfx_of(f) + "tokens_per_s", tg + " " + f});
    b.metrics.push_back({"decode_batch_" + sfx_of(f) + "tokens_per_s", tg + " x " + std::to_string(options.gen_batch) + " sequences " + f});
    if (f == "fp32" || f == "bf16")
      b.metrics.push_back({"generate_" + sfx_of(f) + "tokens_per_s",
                           "end to end: 16-token prompt + " + std::to_string(options.gen_tokens) + " new, " + f});
    if (c.R >= 2)  // a loop to draft from (the label says what auto chose, once measured)
      b.metrics.push_back({"decode_speculative_" + sfx_of(f) + "tokens_per_s", tg + " " + f + ", loop-as-draft (auto)"});
  }

  // The weight matrices: the training model's, or every 2-D parameter of the layout but the
  // position table and an untied embedding (a lookup, not a product).
  if (b.train_model) {
    b.n_params = b.train_model->n_params();
    for (const WeightMatrix& w : b.train_model->params().matrices())
      b.mats.emplace_back(b.train_model->params().infos()[w.first].name, w.node->rows, w.node->cols);
  } else {
    const std::vector<ParamInfo> layout = Model::layout(c);
    bool untied_head = false;
    for (const ParamInfo& p : layout) untied_head |= p.name == "lm_head.weight";
    for (const ParamInfo& p : layout) {
      b.n_params += p.numel;
      if (p.shape.size() == 2 && p.name != "pos_emb.weight" && !(untied_head && p.name == "tok_emb.weight"))
        b.mats.emplace_back(p.name, p.shape[0], p.shape[1]);
    }
  }
}

Bench::~Bench() = default;

void Bench::Impl::train_steps(std::map<std::string, double>& v) {
  const int B = c.batch_size, T = c.context;
  // Training: fwd + bwd + clip + AdamW on random tokens (train()'s step on one micro-batch), median
  // step time after warm-up.
  Graph g;
  Config one = c;
  one.grad_accum = 1;
  std::vector<double> step_s;
  for (int s = 0; s < o.steps + 2; ++s) {
    adapt_threads();
    auto t0 = clk::now();
    const StepOutcome so = train_step(*train_model, *opt, g, one, RunOptions{}, c.lr, [](int32_t*, int32_t*) {}, x, y);
    act_peak = std::max(act_peak, so.activation_bytes_peak);
    grad_peak = std::max(grad_peak, so.grad_bytes_peak);
    if (s >= 2) step_s.push_back(secs(t0, clk::now()));
  }
  put(v, "train_tokens_per_s", B * T / median(step_s));
  if (train_rss == 0) train_rss = peak_rss_mib();
  // Quantization: GPTQ to q4_0 of a fresh fp32 copy of the model, calibrated on the B x T training
  // tokens (as `looplm quantize --method gptq` runs it).
  Model q(c);
  q.init_weights(c.seed);
  GptqOptions qo;
  qo.tokens = x;
  qo.max_tokens = (int64_t)B * T;
  auto t0 = clk::now();
  quantize_gptq(q, *find_weight_format("q4_0"), qo);
  put(v, "quantize_tokens_per_s", (double)B * T / secs(t0, clk::now()));
}

void Bench::Impl::generation(std::map<std::string, double>& v) {
  const int T = c.context, V = c.vocab_size, pp = o.prompt_tokens;
  // Generation through the library (LanguageModel::generate, as `looplm generate` runs it); the
  // format is chosen when a model is loaded:
  //  * prompt processing: the prefill of pp tokens;
  //  * generation: gen_tokens new tokens, greedy, after a 16-token prompt: decoding alone, and end
  //    to end from the prefill on (as the PyTorch peer times it; like the peer, a full window
  //    restarts the cache on its last half).
  if (lms.empty())
    for (const std::string& f : formats) {
      LoadOptions lo;
      lo.weights = f == own ? "" : f;  // the checkpoint's own packed matrices in place
      lms.push_back(std::make_unique<LanguageModel>(o.checkpoint.empty() ? LanguageModel::from_config(c, c.seed, lo)
                                                                         : LanguageModel::load(o.checkpoint, lo)));
      // One untimed pass: the first one grows the model's working memory and faults its pages in.
      GenerateOptions warm;
      warm.temperature = 0;
      warm.max_new = 2;
      warm.kv_cache = o.kv_cache;
      lms.back()->generate(std::vector<int32_t>(x.begin(), x.begin() + pp), warm);
    }
  if (o.train) {  // Evaluation: the loss of B windows of T tokens at depth R through the fp32 model, as `looplm eval`.
    auto t0 = clk::now();
    const EvalResult er = lms[0]->evaluate(x, EvalOptions{});
    put(v, "eval_tokens_per_s", (double)er.tokens / secs(t0, clk::now()));
  }
  for (size_t fi = 0; fi < formats.size(); ++fi) {
    LanguageModel* lm = lms[fi].get();
    const std::string sfx = sfx_of(formats[fi]);
    GenerateStats st;
    GenerateOptions go;
    go.temperature = 0;
    go.stats = &st;
    go.max_new = 1;
    go.kv_cache = o.kv_cache;
    lm->generate(std::vector<int32_t>(x.begin(), x.begin() + pp), go);
    put(v, "prompt_" + sfx + "tokens_per_s", st.prompt_tokens / st.prompt_seconds);
    go.max_new = o.gen_tokens;
    const std::vector<int32_t> prompt(x.begin(), x.begin() + std::max(1, std::min(16, T - 1)));
    auto t0 = clk::now();
    lm->generate(prompt, go);
    if (formats[fi] == "fp32" || formats[fi] == "bf16") put(v, "generate_" + sfx + "tokens_per_s", o.gen_tokens / secs(t0, clk::now()));
    put(v, "decode_" + sfx + "tokens_per_s", std::max(0, st.new_tokens - 1) / st.gen_seconds);
    if (c.R >= 2) speculative(*lm, prompt, formats[fi], v);
    if (o.gen_batch > 1) {  // gen_batch sequences decoded together: distinct prompts, one batched pass per token
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < o.gen_batch; ++i) {
        std::vector<int32_t> p = prompt;
        p[0] = (p[0] + i) % V;
        prompts.push_back(p);
      }
      lm->generate_batch(prompts, go);
      put(v, "decode_batch_" + sfx + "tokens_per_s", std::max(0, st.new_tokens - o.gen_batch) / st.gen_seconds);
    }
  }
}

// Batch-1 greedy decoding as `generate --speculative auto` runs it (loop-as-draft where it is
// predicted to pay, else plain): an untimed call first, in which auto measures (once per model,
// KV cache and thread count), then the timed one. The row's label says what auto chose.
void Bench::Impl::speculative(const LanguageModel& lm, const std::vector<int32_t>& prompt, const std::string& format,
                              std::map<std::string, double>& v) {
  GenerateStats st;
  GenerateOptions go;
  go.temperature = 0;
  go.speculative = -1;
  go.kv_cache = o.kv_cache;
  go.stats = &st;
  go.max_new = 2;
  lm.generate(prompt, go);
  go.max_new = o.gen_tokens;
  lm.generate(prompt, go);
  const std::string key = "decode_speculative_" + sfx_of(format) + "tokens_per_s";
  char chose[160];
  if (st.speculative > 0)
    std::snprintf(chose, sizeof chose, "K %d at draft depth %d, %.0f%% of drafts accepted", st.speculative, st.draft_depth,
                  100.0 * st.accepted_tokens / std::max<int64_t>(st.draft_tokens, 1));
  else
    std::snprintf(chose, sizeof chose, "plain decoding");
  for (BenchMetric& m : metrics)
    if (m.key == key) m.label = "generation tg" + std::to_string(o.gen_tokens) + " " + format + ", loop-as-draft auto: " + chose;
  put(v, key, std::max(0, st.new_tokens - 1) / st.gen_seconds);
}

std::map<std::string, double> Bench::measure() {
  std::map<std::string, double> v;
  if (impl_->o.train) impl_->train_steps(v);
  if (impl_->o.gen_tokens > 0) impl_->generation(v);
  return v;
}

const std::vector<BenchMetric>& Bench::metrics() const { return impl_->metrics; }
const std::vector<std::string>& Bench::formats() const { return impl_->formats; }
int64_t Bench::n_params() const { return impl_->n_params; }
double Bench::train_flops_per_token() const {
  return impl_->train_model ? 3.0 * impl_->train_model->flops_per_token(impl_->c.R) : 0;  // fwd + bwd ≈ 3 × fwd
}
double Bench::peak_rss_after_training_mib() const { return impl_->train_rss; }
size_t Bench::activation_bytes_peak() const { return impl_->act_peak; }
size_t Bench::grad_bytes_peak() const { return impl_->grad_peak; }

double Bench::weight_bytes_per_token(const std::string& format) const {
  const WeightFormat* f = find_weight_format(format);
  if (!f) throw UsageError("unknown weight format '" + io::brief(format) + "' (" + weight_format_names() + ")");
  double bytes = 0;
  for (const auto& [name, rows, cols] : impl_->mats) {
    const bool per_step = name.rfind("core.", 0) == 0 || name.rfind("loop.", 0) == 0;
    bytes += (double)f->packed_bytes(rows, cols) * (per_step ? impl_->c.R : 1);
  }
  return bytes;
}

}  // namespace looplm
