// Held-out loss through incremental decoding (eval --kv-policy): the windows of evaluate_tokens,
// but every token fed one at a time through the KV cache, exiting by the rule and keeping keys and
// values by the policy — what generation would compute, scored. With the per_step policy this is
// the full-pass evaluation's result (tests/test_decoder.cpp checks it).
#include <algorithm>
#include <cmath>

#include "core/threads.h"
#include "data/dataset.h"
#include "infer/decoder.h"
#include "infer/eval.h"

namespace looplm {

EvalResult evaluate_incremental(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                                int64_t max_windows, const std::function<void(int64_t, int64_t)>& progress,
                                const EarlyExit& early, KvPolicy policy, op::KvElem kv, int window) {
  const Config& c = m.config();
  const int T = eval_window_length(m, window), V = c.vocab_size;
  depth = c.depth_or_R(depth);
  int64_t n_win = eval_windows(tokens, T, "evaluation data");
  if (max_windows >= 0) n_win = std::min(n_win, max_windows);
  EvalResult r;
  double loss = 0;
  int64_t hits = 0;
  std::vector<int32_t> x((size_t)batch * T), y((size_t)batch * T), in(batch);
  std::vector<int> seqs(batch);
  std::vector<float> z((size_t)batch * V);
  std::vector<double> lp(V);
  std::vector<int64_t> exits(depth + 1, 0);
  int64_t steps = 0;
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    const int B = (int)std::min<int64_t>(batch, n_win - w0);
    for (int b = 0; b < B; ++b) eval_window(tokens, T, w0 + b, x.data() + (size_t)b * T, y.data() + (size_t)b * T);
    DecoderOptions o{depth, early, policy, 0, kv};
    Decoder dec(m, B, T, o);
    for (int b = 0; b < B; ++b) seqs[b] = b;
    for (int t = 0; t < T; ++t) {
      adapt_threads();
      for (int b = 0; b < B; ++b) in[b] = x[(size_t)b * T + t];
      dec.decode(seqs.data(), in.data(), B, z.data());
      for (int b = 0; b < B; ++b) {
        const int32_t target = y[(size_t)b * T + t];
        const float* zb = z.data() + (size_t)b * V;
        log_softmax_row(zb, V, lp.data());
        loss -= lp[target];
        hits += (int64_t)(std::max_element(zb, zb + V) - zb) == target;
      }
    }
    r.kv_bytes_per_token += dec.kv_bytes_per_token() * B;
    r.kv_cache_bytes = std::max(r.kv_cache_bytes, (double)dec.cache().bytes());
    steps += dec.steps();
    for (int s = 0; s <= depth; ++s) exits[s] += dec.exits()[s];
    r.tokens += (int64_t)B * T;
    if (progress) progress(w0 + B, n_win);
  }
  r.windows = n_win;
  if (r.tokens == 0) return r;
  r.loss = loss / (double)r.tokens;
  r.accuracy = (double)hits / (double)r.tokens;
  r.kv_bytes_per_token /= (double)n_win;
  r.mean_steps = (double)steps / (double)r.tokens;
  if (depth > 0) {
    r.exit_fraction.assign(depth, 0.0);
    for (int s = 1; s <= depth; ++s) r.exit_fraction[s - 1] = (double)exits[s] / (double)r.tokens;
  }
  return r;
}

}  // namespace looplm
