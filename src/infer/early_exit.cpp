#include "infer/early_exit.h"
#include "io/json_input.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/parallel.h"
#include "core/choices.h"

namespace looplm {

namespace {
const Choices<ExitRule, 5> kExitRules{
    "exit rule",
    {{ExitRule::fixed, "fixed", "every token runs every loop step (or --depth)"},
     {ExitRule::kl, "kl", "exit once KL(p_r || p_r-1) of successive exits' next-token distributions is below the threshold"},
     {ExitRule::latent, "latent", "exit once ||h_r - h_r-1|| / ||h_r|| is below the threshold"},
     {ExitRule::entropy, "entropy", "exit once the entropy of p_r is below the threshold"},
     {ExitRule::gate, "gate", "exit once the learned exit gate's cumulative probability reaches the threshold (Ouro)"}}};
}  // namespace

ExitRule parse_exit_rule(const std::string& name) { return kExitRules.parse(name); }
const char* exit_rule_name(ExitRule r) { return kExitRules.name(r); }
std::vector<std::string> available_exit_rules() { return kExitRules.names(); }

EarlyExit early_exit(const std::string& rule, double threshold, const std::string& rule_option,
                     const std::string& threshold_option) {
  EarlyExit e;
  e.rule = parse_exit_rule(rule);
  if (e.rule == ExitRule::fixed) {
    if (!std::isnan(threshold))
      throw UsageError(threshold_option + " has no effect with " + rule_option + " fixed (choose kl, latent, entropy or gate)");
    return e;
  }
  if (!std::isfinite(threshold)) throw UsageError(rule_option + " " + rule + " needs a finite " + threshold_option);
  if (e.rule == ExitRule::gate && !(threshold > 0 && threshold <= 1))
    throw UsageError(rule_option + " gate takes a cumulative probability: " + threshold_option + " in (0, 1]");
  e.threshold = threshold;
  return e;
}

void log_softmax_row(const float* z, int64_t V, double* out) {
  double m = z[0], s = 0;
  for (int64_t v = 1; v < V; ++v) m = std::max(m, (double)z[v]);
  for (int64_t v = 0; v < V; ++v) s += std::exp((double)z[v] - m);
  const double lse = m + std::log(s);
  for (int64_t v = 0; v < V; ++v) out[v] = (double)z[v] - lse;
}

double exit_score(ExitRule rule, const double* logp, const double* prev_logp, int64_t V, const float* h,
                  const float* prev_h, int d) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  switch (rule) {
    case ExitRule::fixed:
    case ExitRule::gate: return inf;  // the tracker follows the gate's cumulative probability itself
    case ExitRule::entropy: {  // H(p) = −Σ p log p
      double H = 0;
      for (int64_t v = 0; v < V; ++v) H -= std::exp(logp[v]) * logp[v];
      return H;
    }
    case ExitRule::kl: {  // KL(p_r ‖ p_{r−1}) = Σ p_r (log p_r − log p_{r−1})
      if (!prev_logp) return inf;
      double kl = 0;
      for (int64_t v = 0; v < V; ++v) kl += std::exp(logp[v]) * (logp[v] - prev_logp[v]);
      return std::max(kl, 0.0);  // rounding can make a zero divergence slightly negative
    }
    case ExitRule::latent: {  // ‖h_r − h_{r−1}‖ / ‖h_r‖
      if (!prev_h) return inf;
      double dd = 0, hh = 0;
      for (int i = 0; i < d; ++i) {
        const double e = (double)h[i] - prev_h[i];
        dd += e * e;
        hh += (double)h[i] * h[i];
      }
      return std::sqrt(dd / std::max(hh, 1e-30));
    }
  }
  return inf;
}

ExitTracker::ExitTracker(EarlyExit rule, int depth, int64_t rows, int64_t V, int d)
    : rule_(rule), depth_(depth), d_(d), V_(V) {
  reset(rows);
}

void ExitTracker::reset(int64_t rows) {
  rows_ = rows;
  logp_.resize(rows * V_);  // every row's is written before it is read (step r = 1 reads no previous exit)
  exit_.assign(rows, 0);
  if (rule_.rule == ExitRule::kl) prev_logp_.resize(rows * V_);
  if (rule_.rule == ExitRule::latent) prev_h_.resize(rows * d_);
  if (rule_.rule == ExitRule::gate) remaining_.assign(rows, 1.0), cdf_.assign(rows, 0.0);
}

const std::vector<int64_t>& ExitTracker::step(int r, const float* logits, const float* h, const float* gate) {
  LOOPLM_ASSERT(rule_.rule != ExitRule::gate || gate, "ExitTracker: the gate rule needs the gate's values");
  LOOPLM_ASSERT(logits || !rule_needs_logits(rule_.rule), "ExitTracker: the kl and entropy rules need the logits");
  exiting_.clear();
  now_.assign(rows_, 0);
  const bool first = r == 1;
  parallel_for<int64_t>(rows_, rows_ * V_ > (1 << 16), [&](int64_t n) {
    if (exit_[n]) return;
    double* lp = logp_.data() + n * V_;
    if (logits) log_softmax_row(logits + n * V_, V_, lp);
    const double s = exit_score(rule_.rule, lp, first || prev_logp_.empty() ? nullptr : prev_logp_.data() + n * V_, V_,
                                h + n * d_, first || prev_h_.empty() ? nullptr : prev_h_.data() + n * d_, d_);
    if (rule_.rule == ExitRule::gate) {  // Ouro's CDF rule: exit once Σ p_s reaches q
      const double lambda = gate[n];
      cdf_[n] += lambda * remaining_[n];
      remaining_[n] *= 1.0 - lambda;
      now_[n] = r >= depth_ || cdf_[n] >= rule_.threshold;
    } else {
      now_[n] = r >= depth_ || s < rule_.threshold;
    }
    if (!prev_logp_.empty()) std::copy(lp, lp + V_, prev_logp_.data() + n * V_);
    if (!prev_h_.empty()) std::copy(h + n * d_, h + (n + 1) * d_, prev_h_.data() + n * d_);
  });
  for (int64_t n = 0; n < rows_; ++n)
    if (now_[n]) {
      exit_[n] = r;
      exiting_.push_back(n);
    }
  return exiting_;
}

}  // namespace looplm
