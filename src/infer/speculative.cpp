// Self-speculative decoding of a looped model, loop-as-draft (docs/cli.md, generate): the model at
// its first r loop steps is the draft, the model at R the target, and they share the KV cache of
// those r steps (the decoder's slots are per loop step, so a draft's steps are the target's). Each
// round drafts K tokens one at a time at depth r, keeping each one's state after step r; the
// verification takes the last accepted token and the first K − 1 drafts (the tokens the drafts
// ran on) from those states through steps r+1..R in one pass, so steps 1..r run once per token;
// it keeps the drafts the full model agrees with plus its first correction: every token kept is
// the full model's choice given the tokens before it (greedy: the same tokens; sampling: the same
// distribution, by speculative sampling's rule).
#include <algorithm>
#include <chrono>

#include "core/rng.h"
#include "core/threads.h"
#include "tokenizer/text_stream.h"
#include "infer/decoder.h"
#include "infer/sampler.h"
#include "infer/speculative.h"
#include "io/mapped_file.h"
#include "looplm/looplm.h"

namespace looplm {

namespace {

// The choices of one speculative run: plain (after a prefill), a draft's, and the verification's
// against a draft. Greedy: the most likely token (after the logit bias), as sample_token at
// temperature 0. Sampling: each draft's distribution q (the sampling's, at the draft depth) and the
// target's p; a draft d is kept with probability min(1, p(d) / q(d)), and where one is not, the
// token is drawn from max(0, p − q) normalized (speculative sampling: each token kept is
// distributed as p).
struct Chooser {
  Chooser(int vocab, const GenerateOptions& o, const std::vector<int32_t>& ids_without_text)
      : V(vocab), opt(o), textless(ids_without_text) {}
  int V;
  const GenerateOptions& opt;
  const std::vector<int32_t>& textless;
  SamplerOptions so{opt.temperature, opt.top_k, opt.top_p, &opt.logit_bias};
  Rng rng{opt.seed, kStreamSample};
  std::vector<std::vector<double>> q = std::vector<std::vector<double>>(opt.speculative + 1);  // q[k]: draft k's
  std::vector<double> p;
  std::vector<float> work;

  bool greedy() const { return opt.temperature <= 0; }
  int32_t argmax(const float* z) { return greedy_token(z, V, &opt.logit_bias); }
  // A token where no draft is checked: as plain decoding chooses it.
  int32_t plain(float* z) {
    mask_textless(z, textless);
    return greedy() ? argmax(z) : sample_token(z, V, so, rng, work);
  }
  // Draft k (1..K) from the draft depth's logits.
  int32_t draft(float* z, int k) {
    mask_textless(z, textless);
    if (greedy()) return argmax(z);
    sampling_distribution(z, V, so, q[k]);
    return sample_from(q[k], rng);
  }
  // The token the full model's logits z give where draft k stands; `kept`: the draft stands.
  int32_t check(float* z, int k, int32_t d, bool& kept) {
    mask_textless(z, textless);
    if (greedy()) {
      const int32_t y = argmax(z);
      kept = y == d;
      return y;
    }
    sampling_distribution(z, V, so, p);
    kept = rng.uniform() * q[k][d] < p[d];
    if (kept) return d;
    double mass = 0;
    for (int v = 0; v < V; ++v) mass += p[v] = std::max(0.0, p[v] - q[k][v]);
    if (!(mass > 0)) sampling_distribution(z, V, so, p);  // (p = q up to rounding)
    return sample_from(p, rng);
  }
};

}  // namespace

std::vector<int32_t> generate_speculative(const Model& m, const std::vector<int32_t>& prompt_in, const GenerateOptions& opt,
                                          const std::vector<int32_t>& ends, const std::vector<int32_t>& textless,
                                          TextStreamer* text, const std::function<void(int32_t)>& on_token) {
  const Config& c = m.config();
  const int V = c.vocab_size, ctx = c.context, K = opt.speculative;
  const int depth = c.depth_or_R(opt.depth);
  // (the prompt, the depth and max_new are checked by LanguageModel::generate_batch, the caller)
  if (opt.exit.rule != ExitRule::fixed) throw UsageError("generate: speculative decoding runs every token at the full depth (no --exit-rule)");
  if (opt.draft_depth < 1 || opt.draft_depth >= depth)
    throw UsageError("generate: --draft-depth must be from 1 to the depth - 1 (" + std::to_string(depth - 1) + ")");
  if (K > ctx / 2) throw UsageError("generate: --speculative must be at most half the context (" + std::to_string(ctx / 2) + ")");
  // The window of plain generation (LanguageModel::generate_batch), restarted where it restarts, so
  // every token sees the context plain decoding gives it.
  const int capacity = (int)std::min<int64_t>(ctx, (int64_t)std::min<int64_t>(prompt_in.size(), ctx) + opt.max_new);
  Decoder dec(m, 1, capacity, DecoderOptions{depth, {}, KvPolicy::per_step, opt.draft_depth, kv_element(opt.kv_cache)});
  Chooser choose(V, opt, textless);
  std::vector<int32_t> seq = prompt_in, out;
  std::vector<float> z(V), zs((size_t)K * V);
  std::vector<int32_t> drafts(K + 1);
  int64_t drafted = 0, accepted = 0;
  bool ended = false;  // an end token came (not emitted)
  auto emit = [&](int32_t t) {
    if (std::find(ends.begin(), ends.end(), t) != ends.end()) {
      ended = true;
      return;
    }
    seq.push_back(t);
    out.push_back(t);
    if (on_token) on_token(t);
    if (text && (text->push(t), text->stopped())) ended = true;
  };

  const auto t0 = std::chrono::steady_clock::now();
  const int start = std::max(0, (int)seq.size() - ctx);
  adapt_threads();
  dec.prefill(0, seq.data() + start, (int)seq.size() - start, z.data());
  const auto t1 = std::chrono::steady_clock::now();
  if (opt.max_new > 0) emit(choose.plain(z.data()));
  auto checked = t1;  // when the mapped checkpoint was last checked (io::check_mapped_files)
  while (!ended && (int)out.size() < opt.max_new) {
    if (const auto now = std::chrono::steady_clock::now(); now - checked > std::chrono::milliseconds(500)) {
      io::check_mapped_files();
      checked = now;
    }
    const int32_t x = seq.back();  // emitted, not yet in the cache
    const int p = dec.length(0);
    if (p == capacity) {  // window full: restart on the last half context (x included), as plain decoding does
      const int keep = std::max(1, ctx / 2);
      adapt_threads();
      dec.prefill(0, seq.data() + seq.size() - keep, keep, z.data());
      emit(choose.plain(z.data()));
      continue;
    }
    // Drafts d1..dk at depth r: feed x, d1, ..., d_{k-1} (k = K, or what the window still holds).
    const int k_round = std::min(K, capacity - p);
    int32_t cur = x;
    for (int k = 1; k <= k_round; ++k) {
      adapt_threads();
      dec.draft(0, cur, z.data());
      drafts[k] = cur = choose.draft(z.data(), k);
    }
    // The full model on x, d1..d_{K-1} (what the drafts ran on) in one pass from their states at
    // step r: row i gives its token after the i-th of them, where draft i + 1 stands.
    adapt_threads();
    dec.verify_drafts(0, p, k_round, zs.data());
    drafted += k_round;
    int i = 0;
    while (i < k_round && (int)out.size() < opt.max_new) {
      bool kept = false;
      emit(choose.check(zs.data() + (size_t)i * V, i + 1, drafts[i + 1], kept));
      if (ended || !kept) break;
      ++accepted;
      ++i;
    }
    // The cache holds x, d1..d_i at p..p+i (exact: the drafts and the verification wrote them).
    dec.truncate(0, p + std::min(i + 1, k_round));
  }
  if (opt.stats) {
    const auto t2 = std::chrono::steady_clock::now();
    GenerateStats& st = *opt.stats;
    st.prompt_tokens = (int)prompt_in.size() - start;
    st.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    st.new_tokens = (int)out.size();
    st.gen_seconds = std::chrono::duration<double>(t2 - t1).count();
    st.mean_steps = depth;
    st.computed_steps = depth;
    st.draft_tokens = drafted;
    st.accepted_tokens = accepted;
    st.weight_streams = (double)dec.loop_passes() / depth;
    st.kv_bytes_per_token = dec.kv_bytes_per_token();
    st.kv_cache_bytes = (double)dec.cache().bytes();
  }
  return out;
}

}  // namespace looplm
