#include "infer/eval.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <omp.h>

#include "backend/cpu/parallel.h"
#include "core/memory.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "infer/early_exit.h"
#include "ops/ops.h"

namespace looplm {

namespace {

// Tokens whose target is the argmax of its logits [rows, V] (ties: the lowest id).
int64_t correct_top1(const Node* logits, const int32_t* targets) {
  const int64_t rows = logits->rows, V = logits->cols;
  int64_t hits = 0;
#pragma omp parallel for reduction(+ : hits) if (rows * V > (1 << 16))
  for (int64_t n = 0; n < rows; ++n) {
    const float* z = logits->v + n * V;
    hits += (int64_t)(std::max_element(z, z + V) - z) == targets[n];
  }
  return hits;
}

// Per-token cross-entropy of logits [rows, V] at the rows with a target (appended to out), in double.
void token_losses(const Node* logits, const int32_t* targets, std::vector<float>& out) {
  const int64_t rows = logits->rows, V = logits->cols;
  std::vector<float> l(rows);
  parallel_for<int64_t>(rows, rows * V > (1 << 16), [&](int64_t n) {
    if (targets[n] < 0) return;
    const float* z = logits->v + n * V;
    double m = z[0], s = 0;
    for (int64_t v = 1; v < V; ++v) m = std::max(m, (double)z[v]);
    for (int64_t v = 0; v < V; ++v) s += std::exp((double)z[v] - m);
    l[n] = (float)(m + std::log(s) - z[targets[n]]);
  });
  for (int64_t n = 0; n < rows; ++n)
    if (targets[n] >= 0) out.push_back(l[n]);
}

// Rows of a [B, T] batch whose every target (there is at least one) is the top-1 prediction.
int64_t exact_rows(const Node* logits, const int32_t* targets, int B, int T) {
  const int64_t V = logits->cols;
  int64_t hits = 0;
  for (int b = 0; b < B; ++b) {
    bool all = true, any = false;
    for (int t = 0; t < T && all; ++t) {
      const int64_t n = (int64_t)b * T + t;
      if (targets[n] < 0) continue;
      any = true;
      const float* z = logits->v + n * V;
      all = (int64_t)(std::max_element(z, z + V) - z) == targets[n];
    }
    hits += any && all;
  }
  return hits;
}

// The evaluation loop shared by token windows and examples: `fill(first, B, x, y)` writes items
// first..first+B-1 as rows of x, y [B, T] (y < 0: no target). exact: accuracy counts items whose
// every target is predicted (examples) instead of targets.
using Fill = std::function<void(int64_t first, int B, int32_t* x, int32_t* y)>;
EvalResult evaluate_batches(const Model& m, int T, int64_t n_win, int depth, int batch, const Fill& fill, bool exact,
                            const std::function<void(int64_t, int64_t)>& progress, const EarlyExit& early);

}  // namespace

int eval_window_length(const Model& m, int window) {
  const int ctx = m.config().context;
  if (window < 0 || window > ctx)
    throw UsageError("evaluate: window " + std::to_string(window) + " is outside 1.." + std::to_string(ctx) + " (the model's context)");
  return window > 0 ? window : ctx;
}

EvalResult evaluate_tokens(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                           int64_t max_windows, const std::function<void(int64_t, int64_t)>& progress,
                           const EarlyExit& early, int window) {
  const int T = eval_window_length(m, window);
  int64_t n_win = eval_windows(tokens, T, "evaluation data");
  if (max_windows >= 0) n_win = std::min(n_win, max_windows);
  EvalResult r = evaluate_batches(
      m, T, n_win, depth, batch,
      [&](int64_t w0, int B, int32_t* x, int32_t* y) {
        for (int b = 0; b < B; ++b) eval_window(tokens, T, w0 + b, x + (size_t)b * T, y + (size_t)b * T);
      },
      false, progress, early);
  r.windows = n_win;
  return r;
}

EvalResult evaluate_examples(const Model& m, const Examples& ex, int depth, int batch, int64_t max_examples,
                             const std::function<void(int64_t, int64_t)>& progress, const EarlyExit& early) {
  const int T = m.config().context;
  int64_t n = ex.size();
  if (max_examples >= 0) n = std::min(n, max_examples);
  EvalResult r = evaluate_batches(
      m, T, n, depth, batch,
      [&](int64_t i0, int B, int32_t* x, int32_t* y) {
        for (int b = 0; b < B; ++b) fill_example(ex, i0 + b, T, x + (size_t)b * T, y + (size_t)b * T);
      },
      true, progress, early);
  r.examples = n;
  return r;
}

namespace {

EvalResult evaluate_batches(const Model& m, int T, int64_t n_win, int depth, int batch, const Fill& fill, bool exact,
                            const std::function<void(int64_t, int64_t)>& progress, const EarlyExit& early) {
  const Config& c = m.config();
  const int d = c.d_model;
  depth = c.depth_or_R(depth);
  // A window's attention scores (T x T twice per thread, ops.cpp) come first: at a converted
  // model's context (Ouro: 32,768) they are gigabytes. Refused with the figure, not left to the OOM killer.
  require_memory((double)omp_get_max_threads() * (2.0 * T * T + 4.0 * T * std::max(c.head_dim(), c.d_model)) * sizeof(float),
                 "scoring windows of " + std::to_string(T) + " tokens (their attention scores)",
                 "score shorter windows: --window N");
  EvalResult r;
  int64_t rows_seen = 0;
  std::vector<double> loss(depth + 1, 0.0), cosine(depth + 1, 0.0);
  std::vector<int64_t> correct(depth + 1, 0);
  // Diagnostics: per name and step, the sum of the tensor's elements and their count.
  std::map<std::string, std::vector<std::pair<double, double>>> diag;
  std::vector<int32_t> x((size_t)batch * T), y((size_t)batch * T);
  std::vector<float> prev;  // h^(r-1) of the current batch (its memory is reused by step r)
  std::vector<float> first_loss, last_loss;  // per-token losses at exit 1 and at exit depth
  // Early exit: each scored token's loss, top-1 hit and step at its own exit.
  const bool exiting = early.rule != ExitRule::fixed && depth > 0;
  if (early.rule == ExitRule::gate && !m.has_exit_gate())
    throw UsageError("--exit-rule gate needs a model with a learned exit gate (loop.exit_gate, as Ouro has); this one has none");
  double exit_loss = 0, exit_steps = 0;
  int64_t exit_hits = 0;
  std::vector<int64_t> exit_count(depth + 1, 0);
  std::vector<uint8_t> row_hit;
  int64_t exit_exact = 0;  // examples right at their exits
  // A learned exit gate (Ouro): per row, Π (1 − λ) so far, and Σ r · p_r over the scored rows.
  const bool gated = m.has_exit_gate() && depth > 0;
  std::vector<double> gate_left;
  double gate_depth_sum = 0;
  Graph g;
  Graph::NoGrad ng(g);
  // A block that diagnoses its input state (NRGPT's energy) sees the final state at one more step,
  // run for its diagnostics only.
  const int extra = depth > 0 && m.diagnoses_input() ? 1 : 0;
  // Descent diagnostics (per-token [N, 1]): per (name, block), the last step's values of this
  // batch, and per name and step the tokens whose value fell from step s to s + 1 and their count.
  std::map<std::pair<std::string, int>, std::pair<int, std::vector<float>>> last_seen;
  std::map<std::string, std::vector<std::pair<double, double>>> fell;
  g.set_observer(
      [&](Graph&, const TapSite& s, Node* t) {
        if (!s.diagnostic || s.step < 1 || s.step > depth + extra) return;
        auto& v = diag[s.name];
        if (v.empty()) v.assign(depth + extra + 1, {0.0, 0.0});
        double sum = 0;
        for (int64_t i = 0; i < t->numel(); ++i) sum += t->v[i];
        v[s.step].first += sum;
        v[s.step].second += (double)t->numel();
        if (!s.descent) return;
        auto& [step, prev_v] = last_seen[{s.name, s.block}];
        if (step == s.step - 1 && (int64_t)prev_v.size() == t->numel()) {
          auto& f = fell[s.name];
          if (f.empty()) f.assign(depth + 1, {0.0, 0.0});
          int64_t down = 0;
          for (int64_t i = 0; i < t->numel(); ++i) down += t->v[i] < prev_v[i];
          f[s.step - 1].first += (double)down;
          f[s.step - 1].second += (double)t->numel();
        }
        step = s.step;
        prev_v.assign(t->v, t->v + t->numel());
      },
      /*diagnostics_only=*/true);
  RunOptions o;
  o.depth = depth + extra;
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    adapt_threads();
    const int B = (int)std::min<int64_t>(batch, n_win - w0);
    const int64_t rows = (int64_t)B * T;
    fill(w0, B, x.data(), y.data());
    int64_t scored = 0;  // targets in this batch
    for (int64_t i = 0; i < rows; ++i) scored += y[i] >= 0;
    for (auto& [key, seen] : last_seen) seen.first = -1;  // a new batch: no previous step
    std::optional<ExitTracker> tracker;
    if (exiting) {
      tracker.emplace(early, depth, rows, c.vocab_size, d);
      row_hit.assign(rows, 1);
    }
    if (gated) gate_left.assign(rows, 1.0);
    m.trunk(g, x.data(), B, T, o, [&](int step, Node* h) {
      if (step > depth) return;  // the extra step: diagnostics only
      if (step > 0 || depth == 0) {
        Node* final_hidden = nullptr;
        Node* logits = m.head(g, h, B, T, o, &final_hidden);
        const float* lambda = nullptr;
        if (gated && step > 0) {
          lambda = m.exit_gate(g, final_hidden)->v;
          for (int64_t n = 0; n < rows; ++n) {
            if (y[n] < 0) continue;
            const double p = step == depth ? gate_left[n] : lambda[n] * gate_left[n];  // the last step takes what remains
            gate_depth_sum += step * p;
            gate_left[n] *= 1.0 - lambda[n];
          }
        }
        Node* l = op::cross_entropy(g, logits, y.data());
        loss[step] += l->v[0] * (double)scored;
        correct[step] += exact ? exact_rows(logits, y.data(), B, T) : correct_top1(logits, y.data());
        if (step == 1) token_losses(logits, y.data(), first_loss);
        if (step == depth && depth > 0) token_losses(logits, y.data(), last_loss);
        if (tracker && step > 0)
          for (int64_t n : tracker->step(step, logits->v, h->v, lambda)) {
            if (y[n] < 0) continue;
            const double* lp = tracker->logp(n);
            exit_loss -= lp[y[n]];
            exit_steps += step;
            ++exit_count[step];
            row_hit[n] = (int64_t)(std::max_element(lp, lp + c.vocab_size) - lp) == y[n];
            exit_hits += row_hit[n];
          }
      }
      if (step > 0) {
        double cs = 0;
        for (int64_t row = 0; row < rows; ++row) {
          const float* a = h->v + row * d;
          const float* p = prev.data() + row * d;
          double ab = 0, aa = 0, pp = 0;
          for (int i = 0; i < d; ++i) { ab += (double)a[i] * p[i]; aa += (double)a[i] * a[i]; pp += (double)p[i] * p[i]; }
          cs += ab / std::sqrt(aa * pp + 1e-30);
        }
        cosine[step] += cs;
      }
      prev.assign(h->v, h->v + rows * d);
    });
    if (tracker && exact) {  // examples: right when every answer token is right at its own exit
      for (int b = 0; b < B; ++b) {
        bool all = true, any = false;
        for (int t = 0; t < T; ++t)
          if (y[(size_t)b * T + t] >= 0) { any = true; all = all && row_hit[(size_t)b * T + t]; }
        exit_exact += any && all;
      }
    }
    r.tokens += scored;
    rows_seen += rows;
    g.reset();
    if (progress) progress(w0 + B, n_win);
  }
  const double acc_over = exact ? (double)n_win : (double)r.tokens;
  for (int s = 1; s <= depth; ++s) {
    r.loss_by_depth.push_back(loss[s] / (double)r.tokens);
    r.accuracy_by_depth.push_back((double)correct[s] / acc_over);
  }
  if (depth > 0) {
    auto& cs = r.diagnostics["state_cosine"];
    for (int s = 1; s <= depth; ++s) cs.push_back(cosine[s] / (double)rows_seen);
  }
  for (auto& [name, v] : diag) {
    auto& out = r.diagnostics[name];
    for (int s = 1; s <= depth; ++s) out.push_back(v[s].second > 0 ? v[s].first / v[s].second : std::nan(""));
    if (extra && v[depth + 1].second > 0) r.diagnostics[name + "_final"] = {v[depth + 1].first / v[depth + 1].second};
  }
  for (auto& [name, f] : fell) {  // "<name>_fell" at step s: the fraction of tokens that step lowered
    auto& out = r.diagnostics[name + "_fell"];
    for (int s = 1; s <= depth; ++s) out.push_back(f[s].second > 0 ? f[s].first / f[s].second : std::nan(""));
  }
  // Hard tokens gain most from depth? Tokens in deciles of their exit-1 loss (the difficulty), and
  // each decile's mean loss at the first and the last exit.
  if (depth > 0 && !first_loss.empty()) {
    const size_t n = first_loss.size();
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return first_loss[a] < first_loss[b]; });
    for (int q = 0; q < 10; ++q) {
      const size_t lo = n * q / 10, hi = n * (q + 1) / 10;
      double f = 0, l = 0;
      for (size_t i = lo; i < hi; ++i) { f += first_loss[order[i]]; l += last_loss[order[i]]; }
      r.difficulty_first.push_back(hi > lo ? f / (double)(hi - lo) : std::nan(""));
      r.difficulty_last.push_back(hi > lo ? l / (double)(hi - lo) : std::nan(""));
    }
  }
  r.loss = depth == 0 ? loss[0] / (double)r.tokens : r.loss_by_depth[std::min(depth, c.R) - 1];
  if (gated && r.tokens > 0) r.gate_expected_depth = gate_depth_sum / (double)r.tokens;
  r.accuracy = depth == 0 ? (double)correct[0] / acc_over : r.accuracy_by_depth[std::min(depth, c.R) - 1];
  if (depth > 0) {
    r.exit_fraction.assign(depth, 0.0);
    if (exiting) {
      r.loss = exit_loss / (double)r.tokens;
      r.accuracy = exact ? (double)exit_exact / acc_over : (double)exit_hits / acc_over;
      r.mean_steps = exit_steps / (double)r.tokens;
      for (int s = 1; s <= depth; ++s) r.exit_fraction[s - 1] = (double)exit_count[s] / (double)r.tokens;
    } else {
      r.mean_steps = depth;
      r.exit_fraction[depth - 1] = 1;
    }
  }
  return r;
}

}  // namespace

}  // namespace looplm
