// Self-speculative decoding of a looped model (docs/cli.md, generate): the model at its first r
// loop steps is the draft, the model at R the target, and they share the KV cache of those r steps
// (the decoder's slots are per loop step, so a draft's steps are the target's). Each round drafts K
// tokens one at a time at depth r, feeds the last accepted token and the first K − 1 drafts to the
// full model in one pass, and keeps the drafts the full model agrees with plus its first
// correction: every token kept is the full model's greedy choice given the tokens before it.
#include <algorithm>
#include <chrono>

#include "core/threads.h"
#include "tokenizer/text_stream.h"
#include "infer/decoder.h"
#include "infer/sampler.h"
#include "io/mapped_file.h"
#include "looplm/looplm.h"

namespace looplm {

std::vector<int32_t> generate_speculative(const Model& m, const std::vector<int32_t>& prompt_in, const GenerateOptions& opt,
                                          const std::vector<int32_t>& ends, const std::vector<int32_t>& textless,
                                          TextStreamer* text, const std::function<void(int32_t)>& on_token) {
  const Config& c = m.config();
  const int V = c.vocab_size, ctx = c.context, K = opt.speculative;
  const int depth = c.depth_or_R(opt.depth);
  // (the prompt, the depth and max_new are checked by LanguageModel::generate_batch, the caller)
  if (opt.temperature != 0) throw UsageError("generate: speculative decoding is greedy (--temperature 0)");
  if (opt.exit.rule != ExitRule::fixed) throw UsageError("generate: speculative decoding runs every token at the full depth (no --exit-rule)");
  if (opt.draft_depth < 1 || opt.draft_depth >= depth)
    throw UsageError("generate: --draft-depth must be from 1 to the depth - 1 (" + std::to_string(depth - 1) + ")");
  if (K > ctx / 2) throw UsageError("generate: --speculative must be at most half the context (" + std::to_string(ctx / 2) + ")");
  // The window of plain generation (LanguageModel::generate_batch), restarted where it restarts, so
  // every token sees the context plain greedy decoding gives it.
  const int capacity = (int)std::min<int64_t>(ctx, (int64_t)std::min<int64_t>(prompt_in.size(), ctx) + opt.max_new);
  Decoder dec(m, 1, capacity, DecoderOptions{depth, {}, KvPolicy::per_step, opt.draft_depth, kv_element(opt.kv_cache)});
  std::vector<int32_t> seq = prompt_in, out, feed(K);
  std::vector<float> z(V), zs((size_t)K * V);
  std::vector<int32_t> drafts(K + 1);
  int64_t drafted = 0, accepted = 0;
  std::vector<float> biased;
  auto argmax = [&](float* z_in) {  // greedy choice, as sample_token makes it at temperature 0
    mask_textless(z_in, textless);
    require_finite_logits(z_in, V);
    const float* z = biased_logits(z_in, V, &opt.logit_bias, biased);
    return (int32_t)(std::max_element(z, z + V) - z);
  };
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
  if (opt.max_new > 0) emit(argmax(z.data()));
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
      emit(argmax(z.data()));
      continue;
    }
    // Drafts d1..dk at depth r: feed x, d1, ..., d_{k-1} (k = K, or what the window still holds).
    const int k_round = std::min(K, capacity - p);
    int32_t cur = x;
    for (int k = 1; k <= k_round; ++k) {
      adapt_threads();
      dec.draft(0, cur, z.data());
      drafts[k] = cur = argmax(z.data());
    }
    // The full model on x, d1..d_{K-1} in one pass: y_i is its choice after the i-th of them.
    feed[0] = x;
    for (int k = 1; k < k_round; ++k) feed[k] = drafts[k];
    adapt_threads();
    dec.verify(0, p, feed.data(), k_round, zs.data());
    drafted += k_round;
    int i = 0;
    while (i < k_round && (int)out.size() < opt.max_new) {
      const int32_t y = argmax(zs.data() + (size_t)i * V);
      emit(y);
      if (ended || y != drafts[i + 1]) break;
      ++accepted;
      ++i;
    }
    // The cache holds x, d1..d_i at p..p+i (exact: the verification wrote them at full depth).
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
    st.draft_tokens = drafted;
    st.accepted_tokens = accepted;
    st.kv_bytes_per_token = dec.kv_bytes_per_token();
    st.kv_cache_bytes = (double)dec.cache().bytes();
  }
  return out;
}

}  // namespace looplm
