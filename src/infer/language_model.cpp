// LanguageModel: a checkpoint loaded for evaluation and generation (the public API's model).
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <map>

#include "backend/cpu/weight_format.h"
#include "io/json_input.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/text_tokenizer_impl.h"
#include "tokenizer/tokenizer.h"
#include "infer/decoder.h"
#include "infer/eval.h"
#include "infer/language_model_impl.h"
#include "infer/sampler.h"
#include "infer/session_impl.h"
#include "infer/speculative.h"
#include "io/mapped_file.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "model/model_io.h"

namespace looplm {

namespace {
// What `--speculative auto` runs: measured once per model, depth, KV cache and thread count
// (speculative_auto.cpp); several sequences, or an exit rule, decode plainly.
SpeculativeChoice speculative_choice(LanguageModel::Impl& impl, const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerateOptions& opt, int depth) {
  SpeculativeChoice choice;
  if (prompts.size() > 1) {
    choice.why = "plain decoding: several sequences decode together, one weight stream for the batch";
  } else if (opt.exit.rule != ExitRule::fixed) {
    choice.why = "plain decoding: tokens exit early (drafting runs every token at the full depth)";
  } else {
    const auto key = std::make_tuple(depth, opt.kv_cache, current_threads());
    std::lock_guard<std::mutex> lk(impl.speculative_mu);
    auto it = impl.speculative_choice.find(key);
    if (it == impl.speculative_choice.end())
      it = impl.speculative_choice.emplace(key, measure_speculative(*impl.model, prompts[0], opt, impl.textless)).first;
    choice = it->second;
  }
  return choice;
}

// The ids in [0, V) the tokenizer has no text for: past its vocabulary, or holes in its id space.
std::vector<int32_t> textless_ids(const Tokenizer& tok, int V) {
  std::vector<int32_t> out;
  const HfTokenizer* hf = tok.hf();
  for (int32_t id = 0; id < V; ++id)
    if (id >= tok.vocab_size() || (hf && hf->token(id).empty())) out.push_back(id);
  return out;
}
}  // namespace

LanguageModel::Impl::Impl(std::unique_ptr<Model> m)
    : model(std::move(m)), tok(Tokenizer::from_config(model->config())), special(special_tokens_of(model->config(), tok)),
      textless(textless_ids(tok, model->config().vocab_size)) {
  init_chat_template(*this);
}

void check_prompt_has_text(const LanguageModel::Impl& impl, const std::vector<int32_t>& prompt, const std::string& which) {
  if (impl.textless.empty()) return;
  for (int32_t t : prompt)
    if (std::binary_search(impl.textless.begin(), impl.textless.end(), t))
      throw UsageError(which + " token " + std::to_string(t) + " has no text: the model's vocabulary (" +
                       std::to_string(impl.model->config().vocab_size) + " rows) is padded past its tokenizer's (" +
                       std::to_string(impl.tok.vocab_size()) + " ids), and those rows are never used");
}
bool LanguageModel::has_text(int32_t id) const {
  return id >= 0 && id < config().vocab_size && !std::binary_search(impl_->textless.begin(), impl_->textless.end(), id);
}

LanguageModel::LanguageModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LanguageModel::LanguageModel(LanguageModel&&) noexcept = default;
LanguageModel& LanguageModel::operator=(LanguageModel&&) noexcept = default;
LanguageModel::~LanguageModel() = default;

namespace {
// The weight format asked for; "" = the checkpoint's own (fp32, or a quantized checkpoint's).
const WeightFormat& format_of(const LoadOptions& o, const WeightFormat* own = nullptr) {
  if (o.weights.empty()) return own ? *own : *find_weight_format("fp32");
  const WeightFormat* f = find_weight_format(o.weights);
  if (!f) throw UsageError("unknown weight format '" + io::brief(o.weights) + "' (available: " + weight_format_names() + ")");
  return *f;
}
}  // namespace

LanguageModel LanguageModel::load(const std::string& checkpoint, const LoadOptions& o) {
  format_of(o);  // a bad name is a usage error before the file is read
  const std::string path = checkpoint_file(checkpoint);
  LoadModelOptions lmo;
  lmo.allow_nonfinite = o.allow_nonfinite;
  lmo.lean = true;  // quantized: no fp32 copy of what is only multiplied (another --weights fills it)
  std::unique_ptr<Model> m = load_model(path, lmo);
  m->prepare_inference(format_of(o, m->params().prepacked_format()));
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
bool LanguageModel::has_exit_gate() const { return impl_->model->has_exit_gate(); }
std::vector<int32_t> LanguageModel::encode(const std::string& text) const { return impl_->tok.encode(text); }
std::string LanguageModel::decode(const std::vector<int32_t>& ids) const { return impl_->tok.decode(ids); }
std::vector<int32_t> LanguageModel::encode_prompt(const std::string& text, std::vector<std::string>* unseen, bool add_bos) const {
  std::vector<int32_t> ids = impl_->tok.encode_prompt(text, unseen);
  const SpecialTokens& sp = impl_->special;
  if (add_bos && sp.add_bos && (ids.empty() || ids[0] != sp.bos)) ids.insert(ids.begin(), sp.bos);
  return ids;
}
std::string LanguageModel::token_piece(int32_t id) const { return impl_->tok.piece(id); }
TextStream LanguageModel::text_stream(const TextStreamOptions& o) const { return make_text_stream(impl_->tok, o); }
const std::string& LanguageModel::chat_template() const { return impl_->model->config().text.chat_template; }
std::vector<std::string> available_weight_formats() {
  std::vector<std::string> v;
  for (const WeightFormat* f : weight_formats()) v.push_back(f->name);
  return v;
}
std::vector<std::string> available_quantized_formats() {
  std::vector<std::string> v;
  for (const WeightFormat* f : weight_formats())
    if (f->quantized()) v.push_back(f->name);
  return v;
}
// available_kv_caches: infer/decoder.cpp; available_exit_rules: infer/early_exit.cpp;
// available_kv_policies: model/kv_cache.cpp (each next to its table).
std::string joined(const std::vector<std::string>& names, const char* sep) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

LanguageModel::SpecialTokens special_tokens_of(const Config& c, const Tokenizer& tok) {
  LanguageModel::SpecialTokens st;
  const TextConventions& own = c.text;
  const HfTokenizer* hf = tok.hf();
  auto text_of = [&](int32_t id) { return tok.decode({id}); };
  if (!own.eos_token_ids.empty()) {
    st.eos_ids = own.eos_token_ids;
  } else if (hf) {
    if (auto e = hf->find_special(hf_end_of_text_names())) st.eos_ids = {*e};
  }
  if (own.bos_token_id >= 0) st.bos = own.bos_token_id;
  else if (hf) st.bos = hf->find_special(hf_begin_of_text_names()).value_or(-1);
  if (!st.eos_ids.empty()) {
    st.eos = st.eos_ids[0];
    st.eos_text = text_of(st.eos);
  }
  if (st.bos >= 0) st.bos_text = text_of(st.bos);
  st.add_bos = own.add_bos_token == 1 && st.bos >= 0;
  return st;
}

const LanguageModel::SpecialTokens& LanguageModel::special_tokens() const { return impl_->special; }
std::string LanguageModel::fallback_symbol() const { return impl_->tok.decode({impl_->tok.fallback_id()}); }

EvalResult LanguageModel::evaluate(const std::vector<int32_t>& tokens, const EvalOptions& o) const {
  if (o.batch < 1) throw UsageError("evaluate: batch must be >= 1");
  if (o.calibrate && o.incremental)
    throw UsageError("evaluate: calibration scores every rule in one full pass; it does not take incremental scoring (--kv-policy, --kv-cache)");
  EvalResult e = o.incremental ? evaluate_incremental(*impl_->model, tokens, o.depth, o.batch, o.max_windows, o.progress,
                                                      o.exit, o.kv_policy, kv_element(o.kv_cache), o.window)
                               : evaluate_tokens(*impl_->model, tokens, o.depth, o.batch, o.max_windows, o.progress, o.exit,
                                                 o.window, o.calibrate);
  io::check_mapped_files();  // numbers from weights overwritten mid-run are not reported
  return e;
}
EvalResult LanguageModel::evaluate(const std::vector<int32_t>& tokens, int depth) const {
  EvalOptions o;
  o.depth = depth;
  return evaluate(tokens, o);
}
EvalResult LanguageModel::evaluate_file(const std::string& data_path, const EvalOptions& o) const {
  if (impl_->model->config().data_mode == "examples") {  // a model trained on examples is evaluated on them
    if (o.incremental) throw UsageError("evaluate: incremental scoring (--kv-policy) is for text models, not examples");
    if (o.window) throw UsageError("evaluate: --window is for text models; an example is scored whole");
    if (o.batch < 1) throw UsageError("evaluate: batch must be >= 1");
    const Examples ex = load_examples(data_path, impl_->tok, impl_->model->config().context);
    EvalResult e = evaluate_examples(*impl_->model, ex, o.depth, o.batch, o.max_windows, o.progress, o.exit, o.calibrate);
    io::check_mapped_files();
    return e;
  }
  return evaluate(load_tokens(data_path, impl_->tok), o);
}
EvalResult LanguageModel::evaluate_validation(const EvalOptions& o) const {
  const Config& c = impl_->model->config();
  if (!c.data_val.empty()) return evaluate_file(c.data_val, o);
  if (c.data_mode == "examples") {
    if (o.incremental) throw UsageError("evaluate: incremental scoring (--kv-policy) is for text models, not examples");
    if (o.window) throw UsageError("evaluate: --window is for text models; an example is scored whole");
    if (o.batch < 1) throw UsageError("evaluate: batch must be >= 1");
    Examples all = load_examples(c.data_train, impl_->tok, c.context);
    const Examples val = hold_out_examples(all, c.val_split);
    EvalResult e = evaluate_examples(*impl_->model, val, o.depth, o.batch, o.max_windows, o.progress, o.exit, o.calibrate);
    io::check_mapped_files();
    return e;
  }
  return evaluate(load_train_val(c.data_train, "", c.val_split, impl_->tok).val, o);
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

std::vector<TokenLogprob> LanguageModel::prompt_logprobs(const std::vector<int32_t>& tokens, int depth, int top) const {
  const int V = config().vocab_size;
  if (top < 0 || top > 20) throw UsageError("prompt_logprobs: top is 0..20");
  for (int32_t t : tokens)
    if (t < 0 || t >= V) throw UsageError("prompt_logprobs: token id " + std::to_string(t) + " is outside the vocabulary");
  const std::vector<float> z = forward_logits(tokens, depth);
  std::vector<TokenLogprob> out(tokens.size() > 0 ? tokens.size() - 1 : 0);
  for (size_t t = 1; t < tokens.size(); ++t) {
    out[t - 1].id = tokens[t];
    out[t - 1].logprob = token_logprob(z.data() + (t - 1) * V, V, tokens[t], top, &out[t - 1].top);
  }
  return out;
}

LanguageModel::Trace LanguageModel::trace(const std::vector<int32_t>& tokens, const TraceOptions& opt) const {
  const Model& m = *impl_->model;
  const Config& c = m.config();
  const int T = (int)tokens.size(), d = c.d_model, V = c.vocab_size;
  if (T == 0 || T > c.context)
    throw UsageError("trace: need 1.." + std::to_string(c.context) + " tokens (the context), got " + std::to_string(T));
  for (int32_t t : tokens)
    if (t < 0 || t >= V) throw UsageError("trace: token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  Trace tr;
  tr.depth = c.depth_or_R(opt.depth);
  tr.tokens = T;
  tr.d_model = d;
  tr.vocab = V;
  tr.exits = opt.exits;
  for (int e : opt.exits)
    if (e < 0 || e > tr.depth)
      throw UsageError("trace: exit " + std::to_string(e) + " is not one of 0.." + std::to_string(tr.depth) + " (the depth run)");
  if (opt.states) tr.states.resize((size_t)(tr.depth + 1) * T * d);
  tr.logits.resize(opt.exits.size() * (size_t)T * V);
  // Diagnostics as eval sums them: per name, per step the sum and count of values; per token the
  // row means summed over the blocks that report them, and how many did.
  std::map<std::string, std::vector<std::pair<double, double>>> sums;
  std::map<std::string, std::pair<std::vector<double>, std::vector<int>>> rows;
  Graph g;
  Graph::NoGrad ng(g);
  g.set_observer(
      [&](Graph&, const TapSite& s, Node* t) {
        if (!s.diagnostic || s.step < 1 || s.step > tr.depth) return;
        auto& v = sums[s.name];
        if (v.empty()) v.assign(tr.depth + 1, {0.0, 0.0});
        double sum = 0;
        for (int64_t i = 0; i < t->numel(); ++i) sum += t->v[i];
        v[s.step].first += sum;
        v[s.step].second += (double)t->numel();
        if (t->rows != T) return;
        auto& [acc, count] = rows[s.name];
        if (acc.empty()) acc.assign((size_t)(tr.depth + 1) * T, 0.0), count.assign(tr.depth + 1, 0);
        for (int i = 0; i < T; ++i) {
          double r = 0;
          for (int64_t j = 0; j < t->cols; ++j) r += t->v[i * t->cols + j];
          acc[(size_t)s.step * T + i] += r / (double)t->cols;
        }
        ++count[s.step];
      },
      /*diagnostics_only=*/true);
  RunOptions ro;
  ro.depth = tr.depth;
  std::vector<double> cosine(tr.depth + 1, 0.0);
  std::vector<float> prev;
  m.trunk(g, tokens.data(), 1, T, ro, [&](int r, Node* h) {
    if (opt.states) std::copy(h->v, h->v + (size_t)T * d, tr.states.begin() + (size_t)r * T * d);
    for (size_t k = 0; k < opt.exits.size(); ++k) {
      if (opt.exits[k] != r) continue;
      Node* z = m.head(g, h, 1, T, ro);
      std::copy(z->v, z->v + (size_t)T * V, tr.logits.begin() + k * (size_t)T * V);
    }
    if (r > 0) {
      for (int i = 0; i < T; ++i) {
        const float* a = h->v + (size_t)i * d;
        const float* p = prev.data() + (size_t)i * d;
        double ab = 0, aa = 0, pp = 0;
        for (int j = 0; j < d; ++j) { ab += (double)a[j] * p[j]; aa += (double)a[j] * a[j]; pp += (double)p[j] * p[j]; }
        cosine[r] += ab / std::sqrt(aa * pp + 1e-30);
      }
    }
    prev.assign(h->v, h->v + (size_t)T * d);
  });
  io::check_mapped_files();
  if (tr.depth > 0) {
    auto& cs = tr.diagnostics["state_cosine"];
    for (int r = 1; r <= tr.depth; ++r) cs.push_back(cosine[r] / T);
  }
  for (auto& [name, v] : sums) {
    auto& out = tr.diagnostics[name];
    for (int r = 1; r <= tr.depth; ++r) out.push_back(v[r].second > 0 ? v[r].first / v[r].second : std::nan(""));
  }
  for (auto& [name, ac] : rows) {
    auto& out = tr.token_diagnostics[name];
    out.resize((size_t)tr.depth * T);
    for (int r = 1; r <= tr.depth; ++r)
      for (int i = 0; i < T; ++i)
        out[(size_t)(r - 1) * T + i] = ac.second[r] ? (float)(ac.first[(size_t)r * T + i] / ac.second[r]) : std::nanf("");
  }
  return tr;
}

std::string LanguageModel::decode_continuation(const std::vector<int32_t>& prompt, const std::vector<int32_t>& added) const {
  TextStream ts = text_stream();
  std::string text;
  for (int32_t id : added) text += ts.push(id);
  return text + ts.finish();
}

std::vector<int32_t> LanguageModel::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                             const std::function<void(int32_t)>& on_token) const {
  auto outs = generate_batch({prompt}, opt, [&](int, int32_t t) {
    if (on_token) on_token(t);
  });
  return std::move(outs[0]);
}

std::vector<std::vector<int32_t>> LanguageModel::generate_batch(const std::vector<std::vector<int32_t>>& prompts,
                                                                const GenerateOptions& opt,
                                                                const std::function<void(int, int32_t)>& on_token) const {
  const Model& m = *impl_->model;
  const Config& c = m.config();
  const int V = c.vocab_size, ctx = c.context, B = (int)prompts.size();
  const int depth = c.depth_or_R(opt.depth);
  if (B == 0) throw UsageError("generate: no prompts");
  if (opt.max_new < 0) throw UsageError("generate: max_new must be >= 0");
  try {
    check_sampling(opt.temperature, opt.top_k, opt.top_p);
  } catch (const UsageError& e) {
    throw UsageError(std::string("generate: ") + e.what());
  }
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::string which;  // (built in steps: g++ 12 warns falsely about " " + to_string)
    if (B > 1) which.append(" ").append(std::to_string(i + 1));
    if (prompts[i].empty()) throw UsageError("generate: prompt" + which + " is empty");
    for (int32_t t : prompts[i])
      if (t < 0 || t >= V)
        throw UsageError("generate: prompt" + which + " token " + std::to_string(t) + " is outside the vocabulary");
    check_prompt_has_text(*impl_, prompts[i], "generate: prompt" + which);
    longest = std::max(longest, std::min<size_t>(prompts[i].size(), ctx));
  }
  check_logit_bias(opt.logit_bias, V);
  const std::vector<int32_t> ends = opt.ignore_eos ? std::vector<int32_t>{} : impl_->special.eos_ids;
  auto is_end = [&](int32_t t) { return std::find(ends.begin(), ends.end(), t) != ends.end(); };
  std::vector<TextStreamer> texts;  // with stop strings: each sequence's text, to see one come
  if (!opt.stop.empty())
    for (int i = 0; i < B; ++i) texts.emplace_back(impl_->tok, TextStreamer::Options{opt.stop, false});
  if (opt.speculative < 0) {  // auto
    const SpeculativeChoice choice = speculative_choice(*impl_, prompts, opt, depth);
    GenerateOptions chosen = opt;
    chosen.speculative = choice.K;
    chosen.draft_depth = choice.draft_depth;
    auto said = [&] {  // what ran and why, also when a caller's on_token ends the call by throwing
      if (!opt.stats) return;
      opt.stats->speculative = choice.K;
      opt.stats->draft_depth = choice.draft_depth;
      opt.stats->speculative_why = choice.why;
    };
    try {
      auto outs = generate_batch(prompts, chosen, on_token);
      said();
      return outs;
    } catch (...) {
      said();
      throw;
    }
  }
  if (opt.speculative > 0) {  // one sequence at a time
    std::vector<std::vector<int32_t>> outs;
    for (int i = 0; i < B; ++i) {
      GenerateOptions oi = opt;
      oi.seed = opt.seed + (uint64_t)i;
      outs.push_back(generate_speculative(m, prompts[i], oi, ends, impl_->textless, texts.empty() ? nullptr : &texts[i], [&](int32_t t) {
        if (on_token) on_token(i, t);
      }));
    }
    return outs;
  }
  std::vector<std::vector<int32_t>> out(B);
  if (opt.max_new == 0) {  // nothing to make: no prompt runs
    if (opt.stats) *opt.stats = GenerateStats{};
    return out;
  }
  // One sequence per slot of a decode session (the one decode loop: session.cpp), whose cache holds
  // what the window can hold: the longest prompt (at most a context) and the new tokens. Sequence i
  // samples with seed + i.
  SessionOptions so;
  so.slots = B;
  so.context = (int)std::min<int64_t>(ctx, (int64_t)longest + opt.max_new);
  so.depth = depth;
  so.exit = opt.exit;
  so.kv_policy = opt.kv_policy;
  so.kv_cache = opt.kv_cache;
  DecodeSession session(*this, so);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < B; ++i) {
    SequenceOptions s{opt.max_new, opt.temperature, opt.top_k, opt.top_p, opt.seed + (uint64_t)i, -1, opt.logit_bias};
    if (session.start(prompts[i], s) != i) throw Error("generate: a decode session did not give sequence i slot i");
  }
  const auto t1 = std::chrono::steady_clock::now();
  // An end token ends its sequence (not part of the output); a stop string ends it after the token
  // that completed it: neither gets another pass.
  auto ends_here = [&](const SessionToken& t) {
    if (is_end(t.id)) return true;
    out[t.slot].push_back(t.id);
    if (on_token) on_token(t.slot, t.id);
    return !texts.empty() && (texts[t.slot].push(t.id), texts[t.slot].stopped());
  };
  while (session.active() > 0) session.step(ends_here);
  if (opt.stats) {
    const auto t2 = std::chrono::steady_clock::now();
    const Decoder& dec = session.impl_->dec;
    GenerateStats& st = *opt.stats;
    st = GenerateStats{};
    st.prompt_tokens = (int)session.prompt_tokens();
    st.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    for (const auto& o : out) st.new_tokens += (int)o.size();  // (the session's count has the end tokens too)
    st.gen_seconds = std::chrono::duration<double>(t2 - t1).count();
    st.mean_steps = dec.decoded() ? (double)dec.steps() / (double)dec.decoded() : depth;
    st.computed_steps = dec.decoded() ? (double)dec.computed_steps() / (double)dec.decoded() : depth;
    st.weight_streams = depth > 0 ? (double)dec.loop_passes() / depth : 0;
    st.kv_bytes_per_token = dec.kv_bytes_per_token();
    st.kv_cache_bytes = (double)dec.cache().bytes();
  }
  return out;
}

}  // namespace looplm
