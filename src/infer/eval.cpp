#include "infer/eval.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <omp.h>

#include "backend/cpu/parallel.h"
#include "core/memory.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "infer/early_exit.h"
#include "infer/exit_calibration.h"
#include "ops/kernels_exit.h"
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
                            const std::function<void(int64_t, int64_t)>& progress, const EarlyExit& early, bool calibrate);

}  // namespace

int eval_window_length(const Model& m, int window) {
  const int ctx = m.config().context;
  if (window < 0 || window > ctx)
    throw UsageError("evaluate: window " + std::to_string(window) + " is outside 1.." + std::to_string(ctx) + " (the model's context)");
  return window > 0 ? window : ctx;
}

EvalResult evaluate_tokens(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                           int64_t max_windows, const std::function<void(int64_t, int64_t)>& progress,
                           const EarlyExit& early, int window, bool calibrate) {
  const int T = eval_window_length(m, window);
  int64_t n_win = eval_windows(tokens, T, "evaluation data");
  if (max_windows >= 0) n_win = std::min(n_win, max_windows);
  EvalResult r = evaluate_batches(
      m, T, n_win, depth, batch,
      [&](int64_t w0, int B, int32_t* x, int32_t* y) {
        for (int b = 0; b < B; ++b) eval_window(tokens, T, w0 + b, x + (size_t)b * T, y + (size_t)b * T);
      },
      false, progress, early, calibrate);
  r.windows = n_win;
  return r;
}

EvalResult evaluate_examples(const Model& m, const Examples& ex, int depth, int batch, int64_t max_examples,
                             const std::function<void(int64_t, int64_t)>& progress, const EarlyExit& early,
                             bool calibrate) {
  const int T = m.config().context;
  int64_t n = ex.size();
  if (max_examples >= 0) n = std::min(n, max_examples);
  EvalResult r = evaluate_batches(
      m, T, n, depth, batch,
      [&](int64_t i0, int B, int32_t* x, int32_t* y) {
        for (int b = 0; b < B; ++b) fill_example(ex, i0 + b, T, x + (size_t)b * T, y + (size_t)b * T);
      },
      true, progress, early, calibrate);
  r.examples = n;
  return r;
}

namespace {

// The metrics of an evaluation, each an observer of the same pass: it sees every batch and every
// exit, and writes its part of the result at the end.

// Loss and top-1 accuracy at every exit r = 1..depth (or of h_pre at depth 0), and the per-token
// losses at exits 1 and `depth`: hard tokens gain most from depth? Tokens in deciles of their
// exit-1 loss (the difficulty), and each decile's mean loss at the first and the last exit.
class ExitLosses {
 public:
  ExitLosses(int depth, bool exact) : depth_(depth), exact_(exact), loss_(depth + 1, 0.0), correct_(depth + 1, 0) {}
  void at_exit(Graph& g, int step, Node* logits, const int32_t* y, int B, int T, int64_t scored) {
    Node* l = op::cross_entropy(g, logits, y);
    loss_[step] += l->v[0] * (double)scored;
    correct_[step] += exact_ ? exact_rows(logits, y, B, T) : correct_top1(logits, y);
    if (step == 1) token_losses(logits, y, first_);
    if (step == depth_ && depth_ > 0) token_losses(logits, y, last_);
  }
  void finish(EvalResult& r, double acc_over, int R) const {
    for (int s = 1; s <= depth_; ++s) {
      r.loss_by_depth.push_back(loss_[s] / (double)r.tokens);
      r.accuracy_by_depth.push_back((double)correct_[s] / acc_over);
    }
    r.loss = depth_ == 0 ? loss_[0] / (double)r.tokens : r.loss_by_depth[std::min(depth_, R) - 1];
    r.accuracy = depth_ == 0 ? (double)correct_[0] / acc_over : r.accuracy_by_depth[std::min(depth_, R) - 1];
    if (depth_ == 0 || first_.empty()) return;
    const size_t n = first_.size();
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return first_[a] < first_[b]; });
    for (int q = 0; q < 10; ++q) {
      const size_t lo = n * q / 10, hi = n * (q + 1) / 10;
      double f = 0, l = 0;
      for (size_t i = lo; i < hi; ++i) {
        f += first_[order[i]];
        l += last_[order[i]];
      }
      r.difficulty_first.push_back(hi > lo ? f / (double)(hi - lo) : std::nan(""));
      r.difficulty_last.push_back(hi > lo ? l / (double)(hi - lo) : std::nan(""));
    }
  }

 private:
  int depth_;
  bool exact_;  // examples: accuracy counts items whose every target is right
  std::vector<double> loss_;
  std::vector<int64_t> correct_;
  std::vector<float> first_, last_;  // per-token losses at exit 1 and at exit depth
};

// state_cosine: the mean cosine between the states of successive loop steps, per step.
class StateCosine {
 public:
  StateCosine(int depth, int d) : d_(d), cosine_(depth + 1, 0.0) {}
  void at_step(int step, const Node* h, int64_t rows) {
    if (step > 0) {
      double cs = 0;
      for (int64_t row = 0; row < rows; ++row) {
        const float* a = h->v + row * d_;
        const float* p = prev_.data() + row * d_;
        double ab = 0, aa = 0, pp = 0;
        for (int i = 0; i < d_; ++i) {
          ab += (double)a[i] * p[i];
          aa += (double)a[i] * a[i];
          pp += (double)p[i] * p[i];
        }
        cs += ab / std::sqrt(aa * pp + 1e-30);
      }
      cosine_[step] += cs;
    }
    prev_.assign(h->v, h->v + rows * d_);  // h^(r-1) for step r (the memory is reused)
  }
  void end_batch(int64_t rows) { rows_seen_ += rows; }
  void finish(EvalResult& r) const {
    if (cosine_.size() < 2) return;
    auto& cs = r.diagnostics["state_cosine"];
    for (size_t s = 1; s < cosine_.size(); ++s) cs.push_back(cosine_[s] / (double)rows_seen_);
  }

 private:
  int d_;
  std::vector<double> cosine_;
  std::vector<float> prev_;
  int64_t rows_seen_ = 0;
};

// The components' named diagnostics (Graph::diagnostic) averaged per step, and for descent
// diagnostics (per-token [N, 1]) "<name>_fell": the fraction of tokens whose value fell from step
// s to s + 1. A block that diagnoses its input state (NRGPT's energy) is seen at one more step
// (`extra`), reported as "<name>_final".
class StepDiagnostics {
 public:
  StepDiagnostics(int depth, int extra) : depth_(depth), extra_(extra) {}
  void attach(Graph& g) {
    g.set_observer([this](Graph&, const TapSite& s, Node* t) { observe(s, t); }, /*diagnostics_only=*/true);
  }
  void new_batch() {
    for (auto& [key, seen] : last_seen_) seen.first = -1;  // no previous step
  }
  void finish(EvalResult& r) const {
    for (auto& [name, v] : sums_) {
      auto& out = r.diagnostics[name];
      for (int s = 1; s <= depth_; ++s) out.push_back(v[s].second > 0 ? v[s].first / v[s].second : std::nan(""));
      if (extra_ && v[depth_ + 1].second > 0) r.diagnostics[name + "_final"] = {v[depth_ + 1].first / v[depth_ + 1].second};
    }
    for (auto& [name, f] : fell_) {
      auto& out = r.diagnostics[name + "_fell"];
      for (int s = 1; s <= depth_; ++s) out.push_back(f[s].second > 0 ? f[s].first / f[s].second : std::nan(""));
    }
  }

 private:
  void observe(const TapSite& s, const Node* t) {
    if (!s.diagnostic || s.step < 1 || s.step > depth_ + extra_) return;
    auto& v = sums_[s.name];
    if (v.empty()) v.assign(depth_ + extra_ + 1, {0.0, 0.0});
    double sum = 0;
    for (int64_t i = 0; i < t->numel(); ++i) sum += t->v[i];
    v[s.step].first += sum;
    v[s.step].second += (double)t->numel();
    if (!s.descent) return;
    auto& [step, prev_v] = last_seen_[{s.name, s.block}];
    if (step == s.step - 1 && (int64_t)prev_v.size() == t->numel()) {
      auto& f = fell_[s.name];
      if (f.empty()) f.assign(depth_ + 1, {0.0, 0.0});
      int64_t down = 0;
      for (int64_t i = 0; i < t->numel(); ++i) down += t->v[i] < prev_v[i];
      f[s.step - 1].first += (double)down;
      f[s.step - 1].second += (double)t->numel();
    }
    step = s.step;
    prev_v.assign(t->v, t->v + t->numel());
  }
  int depth_, extra_;
  std::map<std::string, std::vector<std::pair<double, double>>> sums_;  // per name and step: sum, count
  std::map<std::pair<std::string, int>, std::pair<int, std::vector<float>>> last_seen_;  // per (name, block): last step, values
  std::map<std::string, std::vector<std::pair<double, double>>> fell_;  // per name and step: tokens that fell, count
};

// Per-token early exit: each scored token's loss, top-1 hit and loop step at its own exit.
class EarlyExits {
 public:
  EarlyExits(const EarlyExit& early, int depth, int V, int d, bool exact)
      : early_(early), depth_(depth), V_(V), d_(d), exact_(exact), count_(depth + 1, 0) {}
  void begin_batch(int64_t rows) {
    tracker_.emplace(early_, depth_, rows, V_, d_);
    row_hit_.assign(rows, 1);
  }
  void at_exit(int step, const Node* logits, const Node* h, const float* lambda, const int32_t* y) {
    for (int64_t n : tracker_->step(step, logits->v, h->v, lambda)) {
      if (y[n] < 0) continue;
      const double* lp = tracker_->logp(n);
      loss_ -= lp[y[n]];
      steps_ += step;
      ++count_[step];
      row_hit_[n] = (int64_t)(std::max_element(lp, lp + V_) - lp) == y[n];
      hits_ += row_hit_[n];
    }
  }
  void end_batch(const int32_t* y, int B, int T) {
    if (!exact_) return;
    for (int b = 0; b < B; ++b) {  // examples: right when every answer token is right at its own exit
      bool all = true, any = false;
      for (int t = 0; t < T; ++t)
        if (y[(size_t)b * T + t] >= 0) {
          any = true;
          all = all && row_hit_[(size_t)b * T + t];
        }
      exact_hits_ += any && all;
    }
  }
  void finish(EvalResult& r, double acc_over) const {
    r.loss = loss_ / (double)r.tokens;
    r.accuracy = exact_ ? (double)exact_hits_ / acc_over : (double)hits_ / acc_over;
    r.mean_steps = steps_ / (double)r.tokens;
    for (int s = 1; s <= depth_; ++s) r.exit_fraction[s - 1] = (double)count_[s] / (double)r.tokens;
  }

 private:
  EarlyExit early_;
  int depth_, V_, d_;
  bool exact_;
  std::optional<ExitTracker> tracker_;
  std::vector<uint8_t> row_hit_;
  double loss_ = 0, steps_ = 0;
  int64_t hits_ = 0, exact_hits_ = 0;
  std::vector<int64_t> count_;
};

// A learned exit gate: its exit distribution p_r = λ_r Π_{j<r} (1 − λ_j) (the last step takes what
// remains) over steps 1..depth, with each token's loss at every exit: the expected loss, entropy,
// mean exit step and mean distribution over the scored tokens (the stage I forward's measurements,
// kernels_exit.h, so eval and training report one thing).
class GateReport {
 public:
  explicit GateReport(int depth) : depth_(depth), dist_(depth, 0.0) {}
  void begin_batch(int64_t rows) {
    rows_ = rows;
    L_.assign((size_t)depth_ * rows, 0.0f);
    lam_.assign((size_t)depth_ * rows, 0.0f);
  }
  void at_exit(int step, const Node* logits, const float* lambda, const int32_t* y) {
    std::vector<float> lse(rows_);
    k::token_xent_fwd(logits->v, y, lse.data(), L_.data() + (size_t)(step - 1) * rows_, (int)rows_, (int)logits->cols);
    std::copy(lambda, lambda + rows_, lam_.begin() + (size_t)(step - 1) * rows_);
  }
  void end_batch(const int32_t* y) {
    std::vector<uint8_t> valid(rows_);
    for (int64_t n = 0; n < rows_; ++n) valid[n] = y[n] >= 0;
    std::vector<float> p((size_t)depth_ * rows_), pbar(depth_);
    k::ExitSummary s;
    k::exit_objective_fwd(L_.data(), lam_.data(), valid.data(), (int)rows_, depth_, false, 0.0f, p.data(), pbar.data(), &s);
    tokens_ += s.tokens;
    expected_loss_ += s.expected_loss * s.tokens;
    entropy_ += s.entropy * s.tokens;
    mean_step_ += s.mean_step * s.tokens;
    for (int r = 0; r < depth_; ++r) dist_[r] += (double)pbar[r] * s.tokens;
  }
  void finish(EvalResult& r, const Config& c) const {
    if (tokens_ == 0) return;
    EvalResult::ExitGate e;
    e.objective = c.train_only == "exit_gate"
                      ? "loss improvement (stage II, k " + num(c.exit_gate_k) + ", gamma " + num(c.exit_gate_gamma) + ")"
                      : "expected loss - beta*H (stage I, " + c.exit_prior + " prior, beta " + num(c.exit_entropy_beta) + ")";
    e.expected_loss = expected_loss_ / (double)tokens_;
    e.entropy = entropy_ / (double)tokens_;
    e.mean_exit_step = mean_step_ / (double)tokens_;
    for (double d : dist_) e.exit_distribution.push_back(d / (double)tokens_);
    r.gate_expected_depth = e.mean_exit_step;
    r.exit_gate = e;
  }

 private:
  static std::string num(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return b;
  }
  int depth_;
  int64_t rows_ = 0, tokens_ = 0;
  std::vector<float> L_, lam_;  // this batch, exit-major
  double expected_loss_ = 0, entropy_ = 0, mean_step_ = 0;
  std::vector<double> dist_;
};

EvalResult evaluate_batches(const Model& m, int T, int64_t n_win, int depth, int batch, const Fill& fill, bool exact,
                            const std::function<void(int64_t, int64_t)>& progress, const EarlyExit& early, bool calibrate) {
  const Config& c = m.config();
  depth = c.depth_or_R(depth);
  // A window's attention scores (T x T twice per thread, ops.cpp) come first: at a converted
  // model's context (Ouro: 32,768) they are gigabytes. Refused with the figure, not left to the OOM killer.
  require_memory((double)omp_get_max_threads() * (2.0 * T * T + 4.0 * T * std::max(c.head_dim(), c.d_model)) * sizeof(float),
                 "scoring windows of " + std::to_string(T) + " tokens (their attention scores)",
                 "score shorter windows: --window N");
  if (early.rule == ExitRule::gate && !m.has_exit_gate())
    throw UsageError("--exit-rule gate needs a model with a learned exit gate (loop.exit_gate, as Ouro has); this one has none");
  const bool exiting = early.rule != ExitRule::fixed && depth > 0;
  const bool gated = m.has_exit_gate() && depth > 0;
  const int extra = depth > 0 && m.diagnoses_input() ? 1 : 0;  // one more step, for its diagnostics only
  ExitLosses losses(depth, exact);
  StateCosine cosine(depth, c.d_model);
  StepDiagnostics diagnostics(depth, extra);
  std::optional<EarlyExits> exits;
  if (exiting) exits.emplace(early, depth, c.vocab_size, c.d_model, exact);
  GateReport gate(depth);
  std::optional<CalibrationRecorder> calibration;
  if (calibrate && depth > 0) calibration.emplace(depth, c.vocab_size, c.d_model, gated);

  EvalResult r;
  std::vector<int32_t> x((size_t)batch * T), y((size_t)batch * T);
  Graph g;
  Graph::NoGrad ng(g);
  diagnostics.attach(g);
  RunOptions o;
  o.depth = depth + extra;
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    adapt_threads();
    const int B = (int)std::min<int64_t>(batch, n_win - w0);
    const int64_t rows = (int64_t)B * T;
    fill(w0, B, x.data(), y.data());
    int64_t scored = 0;  // targets in this batch
    for (int64_t i = 0; i < rows; ++i) scored += y[i] >= 0;
    diagnostics.new_batch();
    if (exits) exits->begin_batch(rows);
    if (gated) gate.begin_batch(rows);
    if (calibration) calibration->begin_batch(rows);
    m.trunk(g, x.data(), B, T, o, [&](int step, Node* h) {
      if (step > depth) return;  // the extra step: diagnostics only
      if (step > 0 || depth == 0) {
        Node* final_hidden = nullptr;
        Node* logits = m.head(g, h, B, T, o, &final_hidden);
        const float* lambda = nullptr;
        if (gated && step > 0) {
          lambda = m.exit_gate(g, final_hidden)->v;
          gate.at_exit(step, logits, lambda, y.data());
        }
        losses.at_exit(g, step, logits, y.data(), B, T, scored);
        if (exits && step > 0) exits->at_exit(step, logits, h, lambda, y.data());
        if (calibration && step > 0) calibration->at_exit(step, logits->v, h->v, lambda, y.data());
      }
      cosine.at_step(step, h, rows);
    });
    if (exits) exits->end_batch(y.data(), B, T);
    if (gated) gate.end_batch(y.data());
    if (calibration) calibration->end_batch(y.data());
    cosine.end_batch(rows);
    r.tokens += scored;
    g.reset();
    if (progress) progress(w0 + B, n_win);
  }
  const double acc_over = exact ? (double)n_win : (double)r.tokens;
  losses.finish(r, acc_over, c.R);
  cosine.finish(r);
  diagnostics.finish(r);
  if (gated) gate.finish(r, c);
  if (calibration) r.calibration = calibration->finish();
  if (depth > 0) {
    r.exit_fraction.assign(depth, 0.0);
    r.mean_steps = depth;
    r.exit_fraction[depth - 1] = 1;
    if (exits) exits->finish(r, acc_over);  // each token at its own exit
  }
  return r;
}

}  // namespace

}  // namespace looplm
