// `--speculative auto`: whether drafting pays here is measured, not assumed (speculative.h). It
// pays where decoding is bound by reading the weights (a model larger than the last-level cache in
// the format read) and the drafts agree with the full model; it loses where a pass is bound by
// per-op overheads or the weights sit in the cache (bench/README.md, Self-speculative decoding).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "core/threads.h"
#include "infer/decoder.h"
#include "infer/sampler.h"
#include "infer/speculative.h"

namespace looplm {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds of f().
template <class F>
double timed(F f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Timing drafting on the prompt's tail (x), greedily, with the caller's KV cache and logit bias.
struct Probe {
  const Model& m;
  const GenerateOptions& opt;
  const std::vector<int32_t>& textless;
  std::vector<int32_t> x;
  int depth, V, room;
  op::KvElem kv;
  std::vector<float> z = std::vector<float>(V), zs = std::vector<float>((size_t)8 * V);

  int32_t argmax(float* row) const {
    mask_textless(row, textless);
    return greedy_token(row, V, &opt.logit_bias);
  }
  // Plain decoding: the median of a token's pass over `tokens` (the first one warms up).
  double plain_pass_s(int tokens) {
    Decoder plain(m, 1, (int)x.size() + room, DecoderOptions{depth, {}, KvPolicy::per_step, 0, kv});
    adapt_threads();
    plain.prefill(0, x.data(), (int)x.size(), z.data());
    int32_t next = argmax(z.data());
    std::vector<double> pass;
    for (int k = 0; k < tokens; ++k) {
      const int seq = 0;
      adapt_threads();
      const double s = timed([&] { plain.decode(&seq, &next, 1, z.data()); });
      if (k > 0) pass.push_back(s);
      next = argmax(z.data());
    }
    return median(pass);
  }
  // Draft depth r: rounds of 8, 4, 8 and 4 drafts, each verified, the rows' agreement with the
  // drafts as the acceptance (row i and draft i + 1 follow the same tokens). Stops after a round
  // whose draft pass alone is too slow to reach `bound` tokens/s (`bounded`).
  struct Drafting {
    double draft_s = 0, verify_s[9] = {};  // medians: a draft pass, a verification of 4 and of 8
    int agree = 0, rows = 0;
    bool bounded = false;
  };
  Drafting drafting(int r, double bound) {
    Decoder dec(m, 1, (int)x.size() + room, DecoderOptions{depth, {}, KvPolicy::per_step, r, kv});
    adapt_threads();
    dec.prefill(0, x.data(), (int)x.size(), z.data());
    int32_t last = argmax(z.data());
    std::vector<double> draft_s, verify_s[9];
    std::vector<int32_t> drafts(9);
    Drafting d;
    for (int n : {8, 4, 8, 4}) {
      const int p = dec.length(0);
      int32_t cur = last;
      for (int k = 1; k <= n; ++k) {
        adapt_threads();
        draft_s.push_back(timed([&] { dec.draft(0, cur, z.data()); }));
        drafts[k] = cur = argmax(z.data());
      }
      adapt_threads();
      verify_s[n].push_back(timed([&] { dec.verify_drafts(0, p, n, zs.data()); }));
      int kept = n;  // the drafts generation would keep (the first disagreement ends them)
      for (int i = 0; i < n; ++i) {
        const int32_t y = argmax(zs.data() + (size_t)i * V);
        d.agree += y == drafts[i + 1];
        ++d.rows;
        if (kept == n && y != drafts[i + 1]) {
          kept = i;
          last = y;
        }
      }
      if (kept == n) last = drafts[n];
      dec.truncate(0, p + std::min(kept + 1, n));
      d.draft_s = median(draft_s);
      if (1 / std::max(d.draft_s, 1e-9) <= bound) {
        d.bounded = true;
        break;
      }
    }
    for (int n : {4, 8}) d.verify_s[n] = median(verify_s[n]);
    return d;
  }
};

}  // namespace

SpeculativeChoice measure_speculative(const Model& m, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                      const std::vector<int32_t>& textless) {
  const Config& c = m.config();
  const int depth = c.depth_or_R(opt.depth);
  SpeculativeChoice choice;
  const auto t_start = std::chrono::steady_clock::now();
  constexpr int kPlainTokens = 8, kRoom = 32;  // positions the measurement adds after the prompt's tail
  if (depth < 2) {
    choice.why = "plain decoding: depth " + std::to_string(depth) + " leaves no loop step to draft with";
    return choice;
  }
  if (c.context < kRoom + 1) {
    choice.why = "plain decoding: a context of " + std::to_string(c.context) + " positions is too short to measure drafting in";
    return choice;
  }
  const int tail = (int)std::min<size_t>({prompt.size(), (size_t)32, (size_t)(c.context - kRoom)});
  Probe probe{m, opt, textless, std::vector<int32_t>(prompt.end() - tail, prompt.end()), depth, c.vocab_size, kRoom, kv_element(opt.kv_cache)};
  choice.plain_tokens_per_s = 1 / std::max(probe.plain_pass_s(kPlainTokens), 1e-9);

  // Draft depths 1, depth / 2 and depth − 1. No plan makes more than one token per draft pass, and
  // a draft pass costs more the deeper it runs, so once a depth's draft pass is too slow for that
  // (against plain decoding, or the best plan so far) the measuring stops: where a pass is bound by
  // per-op overheads rather than by reading weights (a small model), that is known after the
  // first round at depth 1.
  double best = 0;
  for (int r : std::set<int>{1, std::max(1, depth / 2), depth - 1}) {
    const Probe::Drafting d = probe.drafting(r, std::max(best, 1.05 * choice.plain_tokens_per_s));
    if (d.bounded) {
      if (best == 0) {  // the first depth: its draft pass's speed is the bound reported
        choice.draft_depth = r;
        choice.acceptance = (double)d.agree / d.rows;
        best = 1 / std::max(d.draft_s, 1e-9);
      }
      break;
    }
    const double alpha = std::min(0.99, (double)d.agree / d.rows);
    for (int K : {4, 8}) {
      const double tokens = (1 - std::pow(alpha, K)) / (1 - alpha);  // per round: the agreeing prefix and a correction, at most K
      const double tps = tokens / (K * d.draft_s + d.verify_s[K]);
      if (tps > best) {
        best = tps;
        choice.K = K;
        choice.draft_depth = r;
        choice.acceptance = alpha;
      }
    }
  }
  choice.tokens_per_s = best;
  choice.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  char why[320];
  if (best > 1.05 * choice.plain_tokens_per_s) {
    std::snprintf(why, sizeof why, "%d drafts at depth %d: %.0f%% agree, predicted %.2fx plain decoding (measured in %.0f ms)", choice.K,
                  choice.draft_depth, 100 * choice.acceptance, best / choice.plain_tokens_per_s, 1e3 * choice.seconds);
  } else if (choice.K == 0) {
    std::snprintf(why, sizeof why,
                  "plain decoding: a draft pass at depth %d is only %.2fx as fast as a plain token, so no drafting can pay (passes "
                  "bound by per-op overheads, not by reading weights; measured in %.0f ms)",
                  choice.draft_depth, best / choice.plain_tokens_per_s, 1e3 * choice.seconds);
    choice.draft_depth = 0;
  } else {
    std::snprintf(why, sizeof why, "plain decoding: the best drafting measured (%d at depth %d, %.0f%% agree) predicted %.2fx (measured in %.0f ms)",
                  choice.K, choice.draft_depth, 100 * choice.acceptance, best / choice.plain_tokens_per_s, 1e3 * choice.seconds);
    choice.K = choice.draft_depth = 0;
  }
  choice.why = why;
  return choice;
}

}  // namespace looplm
