// DecodeSession: continuous batching on the batched decoder (include/looplm/looplm.h), the one
// decode loop (generate_batch and the server's engine drive it). Each slot is one of the decoder's
// sequences: prefill of its last `context` tokens, then per token: sample from the last logits, and
// unless that was its last token decode it (restarting the window on the last half context when
// the cache is full) — so its tokens are the ones generate() makes alone, whoever shares the pass.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/rng.h"
#include "core/threads.h"
#include "infer/session_impl.h"
#include "infer/sampler.h"
#include "io/mapped_file.h"
#include "looplm/looplm.h"

namespace looplm {

DecodeSession::DecodeSession(const LanguageModel& lm, const SessionOptions& o) {
  if (o.slots < 1) throw UsageError("a decode session needs at least one slot");
  if (o.context < 0) throw UsageError("a decode session's context must be >= 0 (0: the model's)");
  if (o.depth == 0 && o.exit.rule != ExitRule::fixed)
    throw UsageError("exit rule " + std::string(exit_rule_name(o.exit.rule)) + " needs loop steps (depth 0 runs none)");
  const Model& m = *lm.impl_->model;
  if (o.exit.rule == ExitRule::gate && !m.has_exit_gate())
    throw UsageError("exit rule gate needs a model with a learned exit gate (loop.exit_gate, as Ouro has); this one has none");
  impl_ = std::make_unique<Impl>(*lm.impl_, m, o);
  impl_->slots.resize(o.slots);
  impl_->last.assign((size_t)o.slots * impl_->V(), 0.0f);
  impl_->z.assign((size_t)o.slots * impl_->V(), 0.0f);
}
DecodeSession::~DecodeSession() = default;

int DecodeSession::start(const std::vector<int32_t>& prompt, const SequenceOptions& s) {
  Impl& im = *impl_;
  const int V = im.V(), ctx = im.dec.capacity();
  if (prompt.empty()) throw UsageError("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= V) throw UsageError("prompt token " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  if (s.max_new < 1) throw UsageError("max_new must be >= 1");
  check_sampling(s.temperature, s.top_k, s.top_p);
  check_prompt_has_text(*im.lm, prompt, "prompt");
  if (s.logprobs > 20) throw UsageError("logprobs is at most 20");
  check_logit_bias(s.logit_bias, V);
  int slot = -1;
  for (int i = 0; i < (int)im.slots.size() && slot < 0; ++i)
    if (!im.slots[i].used) slot = i;
  if (slot < 0) return -1;
  SessionSlot& sl = im.slots[slot];
  sl.used = true;
  sl.opt = s;
  sl.rng = Rng(s.seed, kStreamSample);
  sl.seq = prompt;
  sl.made = 0;
  const int n = (int)std::min<size_t>(prompt.size(), ctx);
  try {
    im.prefill(slot, n);
  } catch (...) {
    sl.used = false;
    throw;
  }
  im.prompt_tokens += n;
  return slot;
}

std::vector<SessionToken> DecodeSession::step(const std::function<bool(const SessionToken&)>& ends_here) {
  Impl& im = *impl_;
  const int V = im.V(), ctx = im.dec.capacity();
  if (const auto now = std::chrono::steady_clock::now(); now - im.checked > std::chrono::milliseconds(500)) {
    io::check_mapped_files();  // numbers from weights overwritten mid-run are not served
    im.checked = now;
  }
  std::vector<SessionToken> out;
  im.rows.clear();
  im.in.clear();
  for (int i = 0; i < (int)im.slots.size(); ++i) {
    SessionSlot& s = im.slots[i];
    if (!s.used) continue;
    float* z = im.last.data() + (size_t)i * V;
    mask_textless(z, im.lm->textless);
    SessionToken t;
    t.slot = i;
    t.id = sample_token(z, V, SamplerOptions{s.opt.temperature, s.opt.top_k, s.opt.top_p, &s.opt.logit_bias}, s.rng, im.work);
    t.steps = s.steps;
    if (s.opt.logprobs >= 0) t.logprob = token_logprob(z, V, t.id, s.opt.logprobs, &t.top);
    s.seq.push_back(t.id);
    ++s.made;
    ++im.new_tokens;
    im.new_steps += t.steps;
    t.last = s.made >= s.opt.max_new;
    out.push_back(std::move(t));
    if (ends_here) {
      try {
        if (ends_here(out.back())) out.back().last = true;
      } catch (...) {  // the sequences sampled in this step have no pass behind them: they end
        for (const SessionToken& done : out) im.slots[done.slot].used = false;
        throw;
      }
    }
    if (out.back().last) {
      s.used = false;
      continue;
    }
    if (im.dec.length(i) == im.dec.capacity()) {
      im.prefill(i, std::max(1, ctx / 2));  // window full: restart on the last half context
    } else {
      im.rows.push_back(i);
      im.in.push_back(out.back().id);
    }
  }
  if (!im.rows.empty()) {
    adapt_threads();
    im.row_steps.resize(im.rows.size());
    im.dec.decode(im.rows.data(), im.in.data(), (int)im.rows.size(), im.z.data(), im.row_steps.data());
    for (size_t a = 0; a < im.rows.size(); ++a) {
      std::copy(im.z.data() + a * V, im.z.data() + (a + 1) * V, im.last.data() + (size_t)im.rows[a] * V);
      im.slots[im.rows[a]].steps = im.row_steps[a];
    }
  }
  return out;
}

void DecodeSession::cancel(int slot) {
  if (slot < 0 || slot >= (int)impl_->slots.size()) throw UsageError("cancel: no slot " + std::to_string(slot));
  impl_->slots[slot].used = false;
}
int DecodeSession::active() const {
  return (int)std::count_if(impl_->slots.begin(), impl_->slots.end(), [](const SessionSlot& s) { return s.used; });
}
int DecodeSession::slots() const { return (int)impl_->slots.size(); }
int DecodeSession::depth() const { return impl_->depth; }
int DecodeSession::context() const { return impl_->dec.capacity(); }
int64_t DecodeSession::prompt_tokens() const { return impl_->prompt_tokens; }
int64_t DecodeSession::new_tokens() const { return impl_->new_tokens; }
double DecodeSession::mean_steps() const {
  return impl_->new_tokens ? (double)impl_->new_steps / (double)impl_->new_tokens : impl_->depth;
}
double DecodeSession::kv_bytes_per_token() const { return impl_->dec.kv_bytes_per_token(); }
double DecodeSession::kv_cache_bytes() const { return (double)impl_->dec.cache().bytes(); }

}  // namespace looplm
