// Per-token early exit (docs/cli.md, eval): the criteria of ExitRule, and a tracker that follows
// the rows of one forward pass through its exits. Shared by evaluation and generation.
#pragma once
#include <cstdint>
#include <vector>

#include "looplm/looplm.h"

namespace looplm {

// log-softmax of z[V] in double.
void log_softmax_row(const float* z, int64_t V, double* out);

// The rule's score for one token at one exit: logp / prev_logp the log-probabilities at this exit
// and the previous one (prev_* null at the first step), h / prev_h the exit states [d]. A token
// exits when the score is below the threshold; +inf where the rule cannot decide yet (kl and latent
// at the first step). fixed: always +inf.
double exit_score(ExitRule rule, const double* logp, const double* prev_logp, int64_t V, const float* h,
                  const float* prev_h, int d);

// Whether the rule reads an exit's next-token distribution (kl, entropy); gate and latent decide
// from the gate's λ or the exit state alone, so a caller may compute logits only where rows exit.
inline bool rule_needs_logits(ExitRule rule) { return rule == ExitRule::kl || rule == ExitRule::entropy; }

// The rows of a batch through the exits r = 1..depth of one forward pass: at each, the rows whose
// criterion fires exit (all that remain at `depth`); a row exits once.
class ExitTracker {
 public:
  ExitTracker(EarlyExit rule, int depth, int64_t rows, int64_t V, int d);
  // A new forward pass of `rows` rows, reusing the buffers (incremental decoding: one per token).
  void reset(int64_t rows);
  // Exit r's logits [rows, V] and states [rows, d] (and, for the gate rule, the gate's λ [rows]);
  // returns the rows that exit here. `logits` may be null where !rule_needs_logits (logp() is then
  // not set).
  const std::vector<int64_t>& step(int r, const float* logits, const float* h, const float* gate = nullptr);
  const double* logp(int64_t row) const { return logp_.data() + row * V_; }  // this exit's, any row
  int exit_step(int64_t row) const { return exit_[row]; }  // 0 while running

 private:
  EarlyExit rule_;
  int depth_, d_;
  int64_t rows_, V_;
  std::vector<double> logp_, prev_logp_;
  std::vector<float> prev_h_;
  std::vector<double> remaining_, cdf_;  // gate: Π (1 − λ) so far, and the exit probability so far
  std::vector<int> exit_;
  std::vector<uint8_t> now_;  // rows exiting at the current step (filled in parallel)
  std::vector<int64_t> exiting_;
};

}  // namespace looplm
