// Batched incremental decoding (src/infer/decoder.*): each sequence of a batch decodes what it
// would alone; scoring through the decoder with the exact per_step policy is the full-pass
// evaluation; early exit in generation; what each KV policy keeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "backend/cpu/bf16.h"
#include "backend/cpu/pointwise_f32.h"
#include "infer/decoder.h"
#include "infer/early_exit.h"
#include "infer/sampler.h"
#include "looplm/looplm.h"
#include "ops/ops.h"

using namespace looplm;

namespace {

Config small(const std::string& preset, int context = 16) {
  Config c = load_preset(preset);
  c.d_model = 32;
  c.n_heads = 2;
  c.context = context;
  c.R = std::min(c.R, 4);
  c.init_std = 0.3;  // far from uniform logits, and loop steps that differ: the tests can tell policies apart
  return c;
}

std::vector<int32_t> some_tokens(int n, int salt = 0) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + i / 5 + salt * 11) % 97 + 30);
  return t;
}

// The threshold of `rule` in the middle of the widest gap among one window's scores at step 2,
// from full forward passes (no token near it, so fp32 summation order cannot move an exit).
double split_threshold(const LanguageModel& lm, const std::vector<int32_t>& x, ExitRule rule) {
  const int T = (int)x.size(), V = lm.config().vocab_size;
  std::vector<double> a((size_t)T * V), b((size_t)T * V);
  const std::vector<float> z1 = lm.forward_logits(x, 1), z2 = lm.forward_logits(x, 2);
  std::vector<double> s;
  for (int t = 0; t < T; ++t) {
    log_softmax_row(z1.data() + (size_t)t * V, V, a.data() + (size_t)t * V);
    log_softmax_row(z2.data() + (size_t)t * V, V, b.data() + (size_t)t * V);
    s.push_back(exit_score(rule, b.data() + (size_t)t * V, a.data() + (size_t)t * V, V, nullptr, nullptr, 0));
  }
  std::sort(s.begin(), s.end());
  double thr = 0, gap = -1;
  for (int i = T / 4; i + 1 < 3 * T / 4; ++i)
    if (s[i + 1] - s[i] > gap) { gap = s[i + 1] - s[i]; thr = (s[i] + s[i + 1]) / 2; }
  return thr;
}

}  // namespace

// Prompts of different lengths (one longer than the context) decode together what each decodes
// alone, greedy and sampled, through window restarts (40 new tokens in a 16-token context), for
// every kind of block and loop rule (learned positions, RoPE, hyper streams, energy, CEM), with
// an fp32 and a bf16 KV cache.
TEST(Decoder, BatchedGenerationIsEachSequenceAlone) {
  for (const char* preset : {"gpt", "llama", "looped", "recurrent_gpt", "hyperloop", "nrgpt", "cem"}) {
    LanguageModel lm = LanguageModel::from_config(small(preset), 3);
    const std::vector<std::vector<int32_t>> prompts = {some_tokens(3, 1), some_tokens(9, 2), some_tokens(16, 3),
                                                       some_tokens(20, 4)};
    for (double temperature : {0.0, 1.0})
    for (const char* kv : {"fp32", "bf16", "int8"}) {
      GenerateOptions g;
      g.max_new = 40;
      g.temperature = temperature;
      g.seed = 11;
      g.kv_cache = kv;
      const auto batch = lm.generate_batch(prompts, g);
      ASSERT_EQ(batch.size(), prompts.size());
      if (temperature > 0) {  // a real sequence, not one token over and over
        EXPECT_GE(std::set<int32_t>(batch[0].begin(), batch[0].end()).size(), 4u) << preset;
      }
      for (size_t i = 0; i < prompts.size(); ++i) {
        GenerateOptions gi = g;
        gi.seed = g.seed + i;
        EXPECT_EQ(batch[i], lm.generate(prompts[i], gi)) << preset << " sequence " << i << " T " << temperature << " KV " << kv;
      }
    }
  }
}

// Continuous batching (DecodeSession): sequences that join a running batch at different tokens,
// leave it, and take the slots others freed make what generate() makes for each alone — greedy and
// sampled, through window restarts (30 new tokens in a 16-token context, a prompt longer than the
// context), with and without early exit — and report the loop steps behind every token.
TEST(Decoder, SessionSequencesJoiningLateDecodeAsAlone) {
  for (const char* preset : {"llama", "looped", "recurrent_gpt", "hyperloop"}) {
    LanguageModel lm = LanguageModel::from_config(small(preset), 7);
    const int R = lm.config().R;
    for (const bool early : {false, true}) {
      SessionOptions so;
      so.slots = 3;
      if (early) {
        so.exit = {ExitRule::kl, split_threshold(lm, some_tokens(16, 5), ExitRule::kl)};
        so.kv_policy = KvPolicy::last;
      }
      DecodeSession session(lm, so);
      struct Req { std::vector<int32_t> prompt; SequenceOptions opt; int join; std::vector<int32_t> got; std::vector<int> steps; int slot = -1; };
      std::vector<Req> reqs;
      const int lengths[] = {3, 9, 20, 5, 12};
      for (int i = 0; i < 5; ++i) {
        Req r;
        r.prompt = some_tokens(lengths[i], i + 1);
        r.opt.max_new = i == 2 ? 30 : 6 + 5 * i;
        r.opt.temperature = i % 2 ? 0.9 : 0.0;
        r.opt.top_k = i == 3 ? 5 : 0;
        r.opt.seed = 100 + i;
        r.join = 4 * i;  // the step at which it arrives (it waits while every slot is taken)
        reqs.push_back(r);
      }
      size_t next = 0, done = 0;
      for (int step = 0; done < reqs.size(); ++step) {
        ASSERT_LT(step, 400);
        while (next < reqs.size() && reqs[next].join <= step) {
          const int slot = session.start(reqs[next].prompt, reqs[next].opt);
          if (slot < 0) break;  // full: try again after the next step
          reqs[next++].slot = slot;
        }
        for (const SessionToken& t : session.step()) {
          Req* r = nullptr;
          for (auto& q : reqs)
            if (q.slot == t.slot && (int)q.got.size() < q.opt.max_new) r = &q;
          ASSERT_NE(r, nullptr);
          r->got.push_back(t.id);
          r->steps.push_back(t.steps);
          if (t.last) {
            ++done;
            r->slot = -1;
          }
        }
      }
      EXPECT_EQ(session.active(), 0);
      for (size_t i = 0; i < reqs.size(); ++i) {
        GenerateOptions g;
        g.max_new = reqs[i].opt.max_new;
        g.temperature = reqs[i].opt.temperature;
        g.top_k = reqs[i].opt.top_k;
        g.seed = reqs[i].opt.seed;
        g.exit = so.exit;
        g.kv_policy = so.kv_policy;
        EXPECT_EQ(reqs[i].got, lm.generate(reqs[i].prompt, g)) << preset << " request " << i << " early exit " << early;
        EXPECT_EQ(reqs[i].steps[0], R) << "the first token comes from the prompt's pass at the full depth";
        for (int s : reqs[i].steps) {
          EXPECT_GE(s, 1);
          EXPECT_LE(s, R);
        }
        if (!early) {
          EXPECT_EQ(std::set<int>(reqs[i].steps.begin(), reqs[i].steps.end()), std::set<int>{R});
        }
      }
      if (early && R > 1) {
        EXPECT_LT(session.mean_steps(), R) << preset << ": some tokens exited early";
      }
    }
  }
}

// A full session refuses a sequence (-1); cancel frees the slot at once; log-probabilities are the
// model's distribution (the full pass's softmax at the prompt's last position for the first token).
TEST(Decoder, SessionSlotsCancelAndLogprobs) {
  LanguageModel lm = LanguageModel::from_config(small("looped"), 9);
  const int V = lm.config().vocab_size;
  SessionOptions so;
  so.slots = 2;
  DecodeSession session(lm, so);
  SequenceOptions s;
  s.max_new = 50;
  s.temperature = 0;
  s.logprobs = 3;
  const auto prompt = some_tokens(7, 2);
  EXPECT_EQ(session.start(prompt, s), 0);
  EXPECT_EQ(session.start(some_tokens(4, 3), s), 1);
  EXPECT_EQ(session.start(some_tokens(4, 4), s), -1);
  const auto first = session.step();
  ASSERT_EQ(first.size(), 2u);
  const std::vector<float> z = lm.forward_logits(prompt);
  std::vector<double> lp(V);
  double mx = -1e30, sum = 0;
  for (int v = 0; v < V; ++v) mx = std::max(mx, (double)z[(size_t)6 * V + v]);
  for (int v = 0; v < V; ++v) sum += std::exp(z[(size_t)6 * V + v] - mx);
  for (int v = 0; v < V; ++v) lp[v] = z[(size_t)6 * V + v] - mx - std::log(sum);
  const int32_t best = (int32_t)(std::max_element(lp.begin(), lp.end()) - lp.begin());
  EXPECT_EQ(first[0].id, best);  // greedy
  // the cached prefill and the full pass sum in other orders: ~1e-6 of logits of a few units
  EXPECT_NEAR(first[0].logprob, lp[best], 1e-4);
  ASSERT_EQ(first[0].top.size(), 3u);
  EXPECT_EQ(first[0].top[0].first, best);
  EXPECT_GE(first[0].top[0].second, first[0].top[1].second);
  EXPECT_GE(first[0].top[1].second, first[0].top[2].second);
  session.cancel(0);
  EXPECT_EQ(session.active(), 1);
  EXPECT_EQ(session.start(prompt, s), 0);  // the freed slot, at once
  EXPECT_EQ(session.step()[0].id, best);   // a fresh sequence: the same first token
  SequenceOptions bad = s;
  bad.top_p = 0;
  session.cancel(0);
  EXPECT_THROW(session.start(prompt, bad), UsageError);
  EXPECT_THROW(session.start({}, s), UsageError);
  EXPECT_THROW(session.start({V}, s), UsageError);
  EXPECT_EQ(session.active(), 1);  // refused starts take no slot
}

// With the fixed rule every token runs the depth, so per_step, last and first keep the same keys
// and values and score what the full-pass evaluation scores; mean averages them and does not.
// With a threshold that splits the tokens, per_step still scores the full pass's early-exit loss
// and steps (exact: docs/cli.md, generate).
TEST(Decoder, IncrementalPerStepScoresTheFullPass) {
  for (const char* preset : {"looped", "recurrent_gpt", "hyperloop"}) {
    const Config c = small(preset);
    LanguageModel lm = LanguageModel::from_config(c, 5);
    const auto toks = some_tokens(3 * c.context + 1);
    EvalOptions o;
    o.batch = 2;  // two sequences, then one: uneven batches
    const EvalResult full = lm.evaluate(toks, o);
    o.incremental = true;
    for (KvPolicy p : {KvPolicy::per_step, KvPolicy::last, KvPolicy::first, KvPolicy::mean}) {
      o.kv_policy = p;
      const EvalResult e = lm.evaluate(toks, o);
      EXPECT_EQ(e.tokens, full.tokens);
      EXPECT_EQ(e.mean_steps, c.R) << preset;
      // fp32: cached attention and the batch-row GEMM sum in another order than the full pass
      if (p == KvPolicy::mean) EXPECT_GT(std::abs(e.loss - full.loss), 1e-4) << preset;
      else EXPECT_NEAR(e.loss, full.loss, 2e-5) << preset << " " << kv_policy_name(p);
    }
    const std::vector<int32_t> x(toks.begin(), toks.begin() + c.context);
    for (ExitRule rule : {ExitRule::kl, ExitRule::entropy}) {
      EvalOptions f;
      f.max_windows = 1;
      f.exit = {rule, split_threshold(lm, x, rule)};
      const EvalResult want = lm.evaluate(toks, f);
      ASSERT_GT(want.mean_steps, 1.0);
      ASSERT_LT(want.mean_steps, (double)c.R);
      f.incremental = true;
      f.kv_policy = KvPolicy::per_step;
      const EvalResult got = lm.evaluate(toks, f);
      EXPECT_EQ(got.mean_steps, want.mean_steps) << preset << " " << exit_rule_name(rule);
      EXPECT_EQ(got.exit_fraction, want.exit_fraction) << preset << " " << exit_rule_name(rule);
      EXPECT_NEAR(got.loss, want.loss, 2e-5) << preset << " " << exit_rule_name(rule);
      for (KvPolicy p : {KvPolicy::last, KvPolicy::first, KvPolicy::mean}) {  // not exact: other keys for exited tokens
        f.kv_policy = p;
        const EvalResult e = lm.evaluate(toks, f);
        EXPECT_NE(e.loss, got.loss) << preset << " " << kv_policy_name(p);
        EXPECT_LT(e.mean_steps, (double)c.R);
      }
    }
  }
}

// A kl threshold above every score: every token exits at step 2 (the first at which kl decides).
// A token's keys and values at steps 1..2 do not depend on later steps, so generation is what
// generation at depth 2 makes, under per_step, last and first alike (no token reads a step the
// prompt ran beyond 2); mean averages the prompt's R steps and is not. The stats say two steps.
TEST(Decoder, EarlyExitInGeneration) {
  const Config c = small("looped");
  LanguageModel lm = LanguageModel::from_config(c, 9);
  const std::vector<std::vector<int32_t>> prompts = {some_tokens(5, 1), some_tokens(7, 2)};
  GenerateOptions g;
  g.max_new = 12;
  g.temperature = 0;
  g.depth = 2;
  const auto want = lm.generate_batch(prompts, g);
  EXPECT_GE(std::set<int32_t>(want[1].begin(), want[1].end()).size(), 3u);
  for (KvPolicy p : {KvPolicy::per_step, KvPolicy::last, KvPolicy::first, KvPolicy::mean}) {
    GenerateStats st;
    GenerateOptions e = g;
    e.depth = -1;
    e.exit = {ExitRule::kl, 1e30};
    e.kv_policy = p;
    e.stats = &st;
    const auto got = lm.generate_batch(prompts, e);
    if (p == KvPolicy::mean) EXPECT_NE(got, want);
    else EXPECT_EQ(got, want) << kv_policy_name(p);
    EXPECT_EQ(st.mean_steps, 2.0) << kv_policy_name(p);
  }
}

// What each policy keeps per position: per_step every (block, step) and a coda slot per exit,
// mean one per block, last / first the steps a token ran; and the averaged cache is smaller.
TEST(Decoder, PolicyMemory) {
  const Config c = small("looped");  // 1 prelude, 2 core, 1 coda, R = 4
  LanguageModel lm = LanguageModel::from_config(c, 5);
  const auto toks = some_tokens(2 * c.context + 1);
  const double slot = 2.0 * c.d_model * sizeof(float);  // keys and values of one block at one position
  EvalOptions o;
  o.incremental = true;
  o.exit = {ExitRule::kl, 1e30};  // every token exits at 2
  o.kv_policy = KvPolicy::per_step;
  const EvalResult ps = lm.evaluate(toks, o);
  EXPECT_DOUBLE_EQ(ps.kv_bytes_per_token, (1 + 2 * 4 + 1 * 4) * slot);
  o.kv_policy = KvPolicy::last;
  const EvalResult last = lm.evaluate(toks, o);
  EXPECT_DOUBLE_EQ(last.kv_bytes_per_token, (1 + 2 * 2 + 1 * 2) * slot);
  o.kv_policy = KvPolicy::mean;
  const EvalResult mean = lm.evaluate(toks, o);
  EXPECT_DOUBLE_EQ(mean.kv_bytes_per_token, (1 + 2 + 1) * slot);
  EXPECT_DOUBLE_EQ(mean.kv_cache_bytes, 2.0 * c.context * (1 + 2 + 1) * slot);  // batch 8 -> 2 windows
  EXPECT_DOUBLE_EQ(ps.kv_cache_bytes, 2.0 * c.context * (1 + 2 * 4 + 1 * 4) * slot);
  o.exit = {};  // fixed: the coda needs one slot
  o.kv_policy = KvPolicy::per_step;
  EXPECT_DOUBLE_EQ(lm.evaluate(toks, o).kv_bytes_per_token, (1 + 2 * 4 + 1) * slot);
}

// Grouped-query attention with a head dimension other than d_model / n_heads (Nanbeige4.2's
// and Qwen3's shape): incremental scoring (per_step) is the full pass, batched generation is each
// sequence alone, and the cache keeps n_kv_heads · d_head values per position, not d_model.
TEST(Decoder, GroupedQueryAttentionDecodesAsTheFullPass) {
  for (int kv_heads : {2, 1})
    for (const char* kv : {"fp32", "int8"}) {
      Config c = small("looped");
      c.n_heads = 4;
      c.n_kv_heads = kv_heads;
      c.d_head = 12;  // 4 · 12 = 48 queries' columns for d_model 32
      c.validate();
      LanguageModel lm = LanguageModel::from_config(c, 5);
      const auto toks = some_tokens(2 * c.context + 1);
      EvalOptions o;
      const EvalResult full = lm.evaluate(toks, o);
      o.incremental = true;
      o.kv_policy = KvPolicy::per_step;
      o.kv_cache = kv;
      const EvalResult inc = lm.evaluate(toks, o);
      EXPECT_EQ(inc.tokens, full.tokens);
      // int8 keys and values: each within half a step of 127 (as NarrowKvCachesScoreCloseAndKeepLess)
      EXPECT_NEAR(inc.loss, full.loss, std::string(kv) == "fp32" ? 2e-5 : 1e-2 * full.loss) << kv_heads << " " << kv;
      const double values = (double)kv_heads * 12;  // per block, position and loop step, for keys and for values
      const double per_value = std::string(kv) == "fp32" ? 4.0 : 1.0 + 4.0 * kv_heads / values;
      EXPECT_DOUBLE_EQ(inc.kv_bytes_per_token, (1 + 2 * 4 + 1) * 2 * values * per_value);
      const std::vector<std::vector<int32_t>> prompts = {some_tokens(3, 1), some_tokens(9, 2), some_tokens(20, 4)};
      GenerateOptions g;
      g.max_new = 24;
      g.temperature = 0;
      g.kv_cache = kv;
      const auto batch = lm.generate_batch(prompts, g);
      for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(batch[i], lm.generate(prompts[i], g)) << i;
    }
}

// The narrow caches: incremental scoring with a bf16 and an int8 cache stays close to the fp32
// cache's (each stored key/value within 2^-9 relative of itself, or within half a step of its head
// vector's 127 steps; a loss moves by far less than 1%), differs from it (the narrow cache is
// used), and keeps 2 bytes / (1 + 4 · heads / width) bytes per value.
TEST(Decoder, NarrowKvCachesScoreCloseAndKeepLess) {
  for (const char* preset : {"llama", "looped"}) {
    const Config c = small(preset);
    LanguageModel lm = LanguageModel::from_config(c, 7);
    const auto toks = some_tokens(2 * c.context + 1);
    EvalOptions o;
    o.incremental = true;
    const EvalResult f32 = lm.evaluate(toks, o);
    for (const char* kv : {"bf16", "int8"}) {
      o.kv_cache = kv;
      const EvalResult e = lm.evaluate(toks, o);
      EXPECT_NEAR(e.loss, f32.loss, 1e-2 * f32.loss) << preset << " " << kv;
      EXPECT_NE(e.loss, f32.loss) << preset << " " << kv;
      const double per_value = std::string(kv) == "bf16" ? 2.0 : 1.0 + 4.0 * c.n_heads / c.d_model;
      EXPECT_DOUBLE_EQ(e.kv_bytes_per_token, f32.kv_bytes_per_token * per_value / 4.0) << preset << " " << kv;
    }
  }
  // Tokens exiting early under the policies that copy (last) or average (mean) cached steps.
  const Config c = small("looped");
  LanguageModel lm8 = LanguageModel::from_config(c, 7);
  const auto toks = some_tokens(2 * c.context + 1);
  for (KvPolicy p : {KvPolicy::last, KvPolicy::first, KvPolicy::mean}) {
    EvalOptions o;
    o.incremental = true;
    o.exit = {ExitRule::kl, 1e30};  // every token exits at 2 of 4
    o.kv_policy = p;
    const EvalResult f32 = lm8.evaluate(toks, o);
    o.kv_cache = "int8";
    const EvalResult i8 = lm8.evaluate(toks, o);
    EXPECT_NEAR(i8.loss, f32.loss, 1e-2 * f32.loss) << kv_policy_name(p);
    EXPECT_NE(i8.loss, f32.loss) << kv_policy_name(p);
  }
  // The first policy's copy for an exited token (KVCache::token_exited) takes an int8 position's
  // codes and its scales.
  KVCache cache(c, 2, c.context, c.R, 0, c.R, KvPolicy::first, op::KvElem::i8);
  const int core = c.n_prelude, hw = c.d_model / c.n_heads, pos = 3, row = 1;
  const op::CacheRef from = cache.slot(core, 0), to = cache.slot(core, 2);
  for (int h = 0; h < c.n_heads; ++h) {
    const size_t at = ((size_t)row * c.n_heads + h) * c.context + pos;
    for (int i = 0; i < hw; ++i) static_cast<int8_t*>(from.k)[at * hw + i] = (int8_t)(i + h), static_cast<int8_t*>(from.v)[at * hw + i] = (int8_t)-i;
    from.k_scale[at] = 0.5f + h, from.v_scale[at] = 2.0f + h;
  }
  cache.token_exited(row, pos, 1, c.R);
  for (int h = 0; h < c.n_heads; ++h) {
    const size_t at = ((size_t)row * c.n_heads + h) * c.context + pos;
    EXPECT_EQ(to.k_scale[at], 0.5f + h);
    EXPECT_EQ(to.v_scale[at], 2.0f + h);
    EXPECT_EQ(static_cast<int8_t*>(to.k)[at * hw + hw - 1], (int8_t)(hw - 1 + h));
    EXPECT_EQ(static_cast<int8_t*>(to.v)[at * hw + 1], (int8_t)-1);
  }
  EvalOptions bad;
  bad.incremental = true;
  bad.kv_cache = "int4";
  LanguageModel lm = LanguageModel::from_config(small("llama"), 7);
  EXPECT_THROW(lm.evaluate(some_tokens(40), bad), UsageError);
}

// The KV policy lives in the cache: its slot map, the hook for a token that exited, whether an
// exited token keeps running, and the slots a position holds (the decoder only asks).
TEST(Decoder, KvPolicyLivesInTheCache) {
  Config c = small("looped");
  const int R = c.R, hw = c.d_model / c.n_heads, core = c.n_prelude, row = 0, pos = 2;
  ASSERT_GE(R, 3);
  auto fill_step = [&](const KVCache& k, int step, float v) {
    const op::CacheRef s = k.slot(core, step);
    for (int h = 0; h < c.n_heads; ++h)
      for (int i = 0; i < hw; ++i) static_cast<float*>(s.k)[(((size_t)row * c.n_heads + h) * c.context + pos) * hw + i] = v;
  };
  auto at_step = [&](const KVCache& k, int step) {
    return static_cast<float*>(k.slot(core, step).k)[(((size_t)row * c.n_heads + 1) * c.context + pos) * hw + 1];
  };
  for (KvPolicy p : {KvPolicy::per_step, KvPolicy::last, KvPolicy::first}) {
    KVCache k(c, 1, c.context, R, 0, 1, p);
    for (int s = 0; s < R; ++s) fill_step(k, s, 10.0f + s);
    k.token_exited(row, pos, 2, R);  // ran steps 1 and 2 (slots 0 and 1)
    const float want = p == KvPolicy::last ? 11.0f : p == KvPolicy::first ? 10.0f : 12.0f;
    for (int s = 2; s < R; ++s) EXPECT_EQ(at_step(k, s), p == KvPolicy::per_step ? 10.0f + s : want) << kv_policy_name(p) << " " << s;
    EXPECT_EQ(at_step(k, 1), 11.0f) << kv_policy_name(p);  // the steps it ran stay its own
    EXPECT_EQ(k.exited_tokens_keep_running(), p == KvPolicy::per_step);
    const int64_t held = c.n_prelude + (int64_t)c.n_core * (p == KvPolicy::per_step ? R : 2) + c.n_coda;
    EXPECT_EQ(k.slots_per_position(2, R, false), held) << kv_policy_name(p);
  }
  KVCache mean(c, 1, c.context, R, 0, 1, KvPolicy::mean);
  EXPECT_EQ(mean.slot(core, 0).k, mean.slot(core, R - 1).k);  // one averaged slot for every step
  EXPECT_EQ(mean.slot(core, R - 1).mean_step, R - 1);
  EXPECT_EQ(mean.slots_per_position(1, R, false), c.n_prelude + c.n_core + c.n_coda);
  EXPECT_FALSE(mean.exited_tokens_keep_running());
}

// An int8 cache element: codes within half a step of each value, the largest at ±127; a zero
// vector zero codes and scale; a vector holding Inf or NaN a NaN scale (what reads it is NaN, as
// an fp32 cache would give), never a cast of a non-finite value.
TEST(Decoder, Int8KvRowQuantization) {
  float x[20];
  for (int i = 0; i < 20; ++i) x[i] = 0.37f * (float)(i - 7);
  int8_t c[20];
  float d = -1;
  k::quantize_kv_row(x, 20, c, &d);
  EXPECT_FLOAT_EQ(d, 0.37f * 12 / 127.0f);
  EXPECT_EQ(c[19], 127);
  for (int i = 0; i < 20; ++i) EXPECT_LE(std::fabs(x[i] - d * (float)c[i]), 0.5f * d * (1 + 1e-5f)) << i;
  const float zero[4] = {0, 0, 0, 0};
  k::quantize_kv_row(zero, 4, c, &d);
  EXPECT_EQ(d, 0.0f);
  EXPECT_EQ(c[0] | c[1] | c[2] | c[3], 0);
  x[5] = -9.0f;  // the largest |x| among the first 16 (the kernel's 16 lanes), negative
  k::quantize_kv_row(x, 20, c, &d);
  EXPECT_FLOAT_EQ(d, 9.0f / 127.0f);
  EXPECT_EQ(c[5], -127);
  for (int at : {3, 18})  // a non-finite value in the lanes and in the tail past them
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      float y[20];
      std::copy(x, x + 20, y);
      y[at] = bad;
      k::quantize_kv_row(y, 20, c, &d);
      EXPECT_TRUE(std::isnan(d)) << at;
      EXPECT_EQ(c[at], 0);
    }
}

// Cached attention over a head-major cache, fp32, bf16 and int8, against double precision on the
// keys and values the cache holds (bf16: rounded to nearest even; int8: each head vector's codes
// times its scale): several heads, head widths with and without a 16-lane tail, key counts past a
// 16-key pass. Tolerance 1e-5 of Σ|terms|: fp32 sums.
TEST(Decoder, CachedAttentionMatchesDouble) {
  for (int hd : {20, 64}) {
    const int H = 3, d = H * hd, cap = 40;
    for (op::KvElem elem : {op::KvElem::f32, op::KvElem::bf16, op::KvElem::i8}) {
      const bool bf16 = elem == op::KvElem::bf16, i8 = elem == op::KvElem::i8;
      std::vector<float> k32((size_t)cap * d), v32((size_t)cap * d), ks((size_t)H * cap), vs((size_t)H * cap);
      std::vector<uint16_t> k16((size_t)cap * d), v16((size_t)cap * d);
      std::vector<int8_t> k8((size_t)cap * d), v8((size_t)cap * d);
      op::CacheRef ref;
      ref.k = bf16 ? (void*)k16.data() : i8 ? (void*)k8.data() : (void*)k32.data();
      ref.v = bf16 ? (void*)v16.data() : i8 ? (void*)v8.data() : (void*)v32.data();
      ref.capacity = cap;
      ref.width = d;
      ref.elem = elem;
      if (i8) ref.k_scale = ks.data(), ref.v_scale = vs.data();
      std::vector<std::vector<float>> keys, vals;  // as the cache holds them
      Graph g;
      Graph::NoGrad ng(g);
      uint64_t state = 12345;
      auto next = [&] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((double)(state >> 11) / (double)(1ull << 53) * 4.0 - 2.0);
      };
      for (int p = 0; p < 37; ++p) {
        Node* qkv = g.node(1, 3 * d, false);
        for (int i = 0; i < 3 * d; ++i) qkv->v[i] = next();
        std::vector<float> kk(qkv->v + d, qkv->v + 2 * d), vv(qkv->v + 2 * d, qkv->v + 3 * d);
        if (bf16)
          for (int i = 0; i < d; ++i) kk[i] = from_bf16(to_bf16(kk[i])), vv[i] = from_bf16(to_bf16(vv[i]));
        if (i8)
          for (std::vector<float>* x : {&kk, &vv})
            for (int h = 0; h < H; ++h) {
              int8_t c[64];
              float s;
              k::quantize_kv_row(x->data() + h * hd, hd, c, &s);
              for (int i = 0; i < hd; ++i) (*x)[h * hd + i] = s * (float)c[i];
            }
        keys.push_back(kk);
        vals.push_back(vv);
        Node* y = op::attention_cached(g, qkv, 1, 1, H, {}, ref, op::RowPlace(p));
        for (int h = 0; h < H; ++h) {
          std::vector<double> sc(p + 1);
          double mx = -1e300;
          for (int j = 0; j <= p; ++j) {
            double t = 0;
            for (int i = 0; i < hd; ++i) t += (double)qkv->v[h * hd + i] * keys[j][h * hd + i];
            sc[j] = t / std::sqrt((double)hd);
            mx = std::max(mx, sc[j]);
          }
          double z = 0;
          for (double& t : sc) z += (t = std::exp(t - mx));
          for (int i = 0; i < hd; ++i) {
            double o = 0, mag = 0;
            for (int j = 0; j <= p; ++j) o += sc[j] / z * vals[j][h * hd + i], mag += sc[j] / z * std::fabs(vals[j][h * hd + i]);
            ASSERT_NEAR(y->v[h * hd + i], o, 1e-5 * (mag + 1)) << "hd " << hd << " elem " << (int)elem << " pos " << p << " head " << h;
          }
        }
      }
    }
  }
}

// The mean policy's write: the (s + 1)-th key/value of a position is averaged in; a pass that
// does not write (CEM's inner steps) leaves the cache alone.
TEST(Decoder, MeanSlotAveragesTheSteps) {
  const int d = 4, H = 1, cap = 3;
  std::vector<float> k((size_t)cap * d, 0.0f), v((size_t)cap * d, 0.0f);
  Graph g;
  Graph::NoGrad ng(g);
  for (int s = 0; s < 3; ++s) {
    Node* qkv = g.node(1, 3 * d, false);
    for (int i = 0; i < 3 * d; ++i) qkv->v[i] = (float)(s + 1) * (i + 1);  // k_s, v_s = (s+1)·(…)
    op::CacheRef ref{k.data(), v.data(), cap, d, s};
    op::attention_cached(g, qkv, 1, 1, H, {}, ref, op::RowPlace(1));
  }
  for (int i = 0; i < d; ++i) {  // mean of 1, 2, 3 times the column
    EXPECT_FLOAT_EQ(k[d + i], 2.0f * (d + i + 1));
    EXPECT_FLOAT_EQ(v[d + i], 2.0f * (2 * d + i + 1));
    EXPECT_EQ(k[i], 0.0f);  // position 0 untouched
  }
  Node* qkv = g.node(1, 3 * d, false);
  std::fill(qkv->v, qkv->v + 3 * d, 100.0f);
  op::CacheRef ro{k.data(), v.data(), cap, d, -1, false};
  Node* y = op::attention_cached(g, qkv, 1, 1, H, {}, ro, op::RowPlace(1));
  EXPECT_FLOAT_EQ(k[d], 2.0f * (d + 1));
  EXPECT_TRUE(std::isfinite(y->v[0]));
}

// Self-speculative decoding (loop-as-draft: the verification runs steps r+1..R from the drafts'
// states) keeps plain greedy decoding's output for every draft depth and draft length, through
// window restarts (60 new tokens in a 16-token context), for every loop rule: residual, gated with
// the prelude's anchor (RecurrentGPT), hyper-connected streams (Hyperloop, mHC), sandwich blocks
// (DeepLoop) and the energy block (NRGPT). The verification streams the loop's weights for R − r
// steps once per round. Bad settings are usage errors.
TEST(Decoder, SpeculativeIsGreedy) {
  for (const char* preset : {"looped", "hyperloop", "recurrent_gpt", "mhc", "deeploop", "nrgpt"}) {
    Config c = small(preset);
    // DeepLoop's post-norm blocks normalize what a small init leaves, and their tied head then gives
    // one token whatever comes before: larger weights make a text that moves
    if (c.block == "sandwich") c.init_std = 2.0;
    const auto prompt = some_tokens(6, 5);
    GenerateOptions g;
    g.max_new = 60;
    g.temperature = 0;
    LanguageModel lm = LanguageModel::from_config(c, 17);
    const auto want = lm.generate(prompt, g);
    ASSERT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 3u) << preset;
    int64_t rejected = 0;
    for (int K : {1, 3, 5})
      for (int r = 1; r < c.R; ++r) {
        GenerateStats st;
        GenerateOptions s = g;
        s.speculative = K;
        s.draft_depth = r;
        s.stats = &st;
        EXPECT_EQ(lm.generate(prompt, s), want) << preset << " K " << K << " r " << r;
        EXPECT_GT(st.draft_tokens, 0);
        EXPECT_LE(st.accepted_tokens, st.draft_tokens);
        EXPECT_EQ(st.new_tokens, 60);
        // K drafts of r steps and one verification of R − r steps per round (rounds = drafts / K
        // but for a window's end, where fewer are drafted), plus whatever the windows restarted
        const double rounds_min = std::ceil((double)st.draft_tokens / K);
        EXPECT_GE(st.weight_streams, ((double)st.draft_tokens * r + rounds_min * (c.R - r)) / c.R - 1e-9) << preset;
        EXPECT_LE(st.weight_streams, ((double)st.draft_tokens * r + (double)st.draft_tokens * (c.R - r)) / c.R + 1e-9) << preset;
        rejected += st.draft_tokens - st.accepted_tokens;
      }
    EXPECT_GT(rejected, 0) << preset;  // the rejection path ran
  }
  LanguageModel lm = LanguageModel::from_config(small("looped"), 13);
  GenerateOptions s;
  s.speculative = 2;
  s.draft_depth = 2;
  s.draft_depth = 4;  // = R
  EXPECT_THROW(lm.generate({5, 6}, s), UsageError);
  s.draft_depth = 2;
  s.exit = {ExitRule::kl, 0.1};
  EXPECT_THROW(lm.generate({5, 6}, s), UsageError);
}

// Speculative sampling: a draft is kept with probability min(1, p/q) and a rejected one replaced
// by a draw from max(0, p − q), so every token is distributed as plain sampling's. Three tokens
// (the first chosen plainly, two through a round of K = 2 drafts at depth 1 of 4) under top-k 4,
// sampled with 4,000 seeds, against the exact joint distribution from full passes: a χ² test at
// p = 0.001 (the seeds are fixed, so it passes or fails the same every run). Keeping every draft,
// or drawing a rejected one from p instead of p − q, fails it (checked by breaking each).
TEST(Decoder, SpeculativeSamplingKeepsTheDistribution) {
  Config c = small("looped");
  c.init_std = 0.5;  // a draft at depth 1 far from the full model: many rejections
  LanguageModel lm = LanguageModel::from_config(c, 21);
  const std::vector<int32_t> prompt = some_tokens(4, 2);
  GenerateOptions g;
  g.max_new = 3;
  g.temperature = 1.0;
  g.top_k = 4;
  g.ignore_eos = true;
  const SamplerOptions so{g.temperature, g.top_k, g.top_p, nullptr};
  const int V = c.vocab_size;
  // the exact distribution of (t1, t2, t3)
  auto dist = [&](const std::vector<int32_t>& x) {
    const std::vector<float> z = lm.forward_logits(x);
    std::vector<double> p;
    sampling_distribution(z.data() + (x.size() - 1) * V, V, so, p);
    return p;
  };
  std::map<std::vector<int32_t>, double> exact;
  const std::vector<double> p1 = dist(prompt);
  for (int a = 0; a < V; ++a) {
    if (p1[a] == 0) continue;
    std::vector<int32_t> x1 = prompt;
    x1.push_back(a);
    const std::vector<double> p2 = dist(x1);
    for (int b = 0; b < V; ++b) {
      if (p2[b] == 0) continue;
      std::vector<int32_t> x2 = x1;
      x2.push_back(b);
      const std::vector<double> p3 = dist(x2);
      for (int e = 0; e < V; ++e)
        if (p3[e] > 0) exact[{a, b, e}] = p1[a] * p2[b] * p3[e];
    }
  }
  const int N = 4000;
  std::map<std::vector<int32_t>, int> seen;
  int64_t drafted = 0, accepted = 0;
  GenerateOptions s = g;
  s.speculative = 2;
  s.draft_depth = 1;
  for (int i = 0; i < N; ++i) {
    GenerateStats st;
    s.seed = 1000 + (uint64_t)i;
    s.stats = &st;
    const std::vector<int32_t> out = lm.generate(prompt, s);
    ASSERT_EQ(out.size(), 3u);
    ++seen[out];
    drafted += st.draft_tokens;
    accepted += st.accepted_tokens;
  }
  EXPECT_GT(accepted, drafted / 10) << "drafts were rarely kept: the acceptance path is barely tested";
  EXPECT_LT(accepted, drafted * 9 / 10) << "drafts were rarely rejected: the residual draw is barely tested";
  // χ² over cells expected ≥ 5 times, the rest pooled
  double chi2 = 0, rest_expected = 0, rest_seen = 0;
  int cells = 0;
  for (const auto& [seq, p] : exact) {
    const double e = p * N;
    const double o = seen.count(seq) ? seen.at(seq) : 0;
    if (e < 5) {
      rest_expected += e;
      rest_seen += o;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  for (const auto& [seq, n] : seen) EXPECT_TRUE(exact.count(seq)) << "a sequence the sampling cannot make";
  if (rest_expected > 0) {
    chi2 += (rest_seen - rest_expected) * (rest_seen - rest_expected) / rest_expected;
    ++cells;
  }
  const double dof = cells - 1, z = 3.09;  // Wilson–Hilferty: the χ² quantile at 1 − 0.001
  const double critical = dof * std::pow(1 - 2 / (9 * dof) + z * std::sqrt(2 / (9 * dof)), 3);
  EXPECT_LT(chi2, critical) << cells << " cells";
}

// --speculative auto measures and chooses: whatever it picks, greedy output is plain greedy
// decoding's, and it says what ran and why; a batch, an exit rule or a model with no loop to draft
// with decode plainly, saying so; the choice is measured once per model and settings.
TEST(Decoder, SpeculativeAutoChoosesAndSaysWhy) {
  const Config c = small("looped", 64);
  LanguageModel lm = LanguageModel::from_config(c, 17);
  const auto prompt = some_tokens(6, 5);
  GenerateOptions g;
  g.max_new = 40;
  g.temperature = 0;
  const auto want = lm.generate(prompt, g);
  GenerateStats st;
  GenerateOptions a = g;
  a.speculative = -1;
  a.stats = &st;
  EXPECT_EQ(lm.generate(prompt, a), want);
  EXPECT_FALSE(st.speculative_why.empty());
  if (st.speculative > 0) {
    EXPECT_GE(st.draft_depth, 1);
    EXPECT_LT(st.draft_depth, c.R);
    EXPECT_GT(st.draft_tokens, 0);
  } else {
    EXPECT_EQ(st.draft_tokens, 0);
    EXPECT_NE(st.speculative_why.find("plain decoding"), std::string::npos) << st.speculative_why;
  }
  const std::string first = st.speculative_why;
  EXPECT_EQ(lm.generate(prompt, a), want);
  EXPECT_EQ(st.speculative_why, first);  // kept, not measured again
  EXPECT_EQ(lm.generate_batch({prompt, some_tokens(3, 1)}, a)[0], want);
  EXPECT_NE(st.speculative_why.find("several sequences"), std::string::npos) << st.speculative_why;
  a.exit = {ExitRule::entropy, 0.5};
  lm.generate(prompt, a);
  EXPECT_NE(st.speculative_why.find("exit early"), std::string::npos) << st.speculative_why;
  LanguageModel dense = LanguageModel::from_config(small("llama", 64), 3);
  a.exit = {};
  EXPECT_EQ(dense.generate(prompt, a), dense.generate(prompt, g));
  EXPECT_NE(st.speculative_why.find("no loop step"), std::string::npos) << st.speculative_why;
  LanguageModel short_context = LanguageModel::from_config(small("looped", 16), 17);
  short_context.generate(prompt, a);
  EXPECT_NE(st.speculative_why.find("too short"), std::string::npos) << st.speculative_why;
}
