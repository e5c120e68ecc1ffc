// Exit calibration (eval --calibrate; docs/cli.md): one full pass records, for every scored token and
// every exit r = 1..depth, its loss and each early-exit rule's signal (the learned gate's λ, the KL
// of successive exits' next-token distributions, the exit's entropy, the relative change of the exit
// state), so every threshold of every rule is scored afterwards without another pass. What a token
// would pay at a threshold is exactly what `eval --exit-rule RULE --exit-threshold X` scores in its
// full pass (infer/early_exit.h: the same signals and the same exit tests).
#pragma once
#include <cstdint>
#include <vector>

#include "looplm/looplm.h"

namespace looplm {

class CalibrationRecorder {
 public:
  CalibrationRecorder(int depth, int64_t V, int d, bool gate);
  void begin_batch(int64_t rows);
  // Exit r's logits [rows, V], state [rows, d] and (with a gate) λ [rows].
  void at_exit(int r, const float* logits, const float* h, const float* lambda, const int32_t* y);
  void end_batch(const int32_t* y);  // keeps the rows with a target
  // Every rule's loss-versus-mean-steps frontier (EvalResult::ExitCalibration).
  EvalResult::ExitCalibration finish() const;

 private:
  int depth_, d_;
  int64_t V_, rows_ = 0;
  bool gate_;
  // This batch, row-major [rows, depth]: loss, entropy, KL to the previous exit, latent change, λ.
  // In double, as the exit rules compute them, so a threshold exits the tokens the rule would.
  std::vector<double> loss_, entropy_, kl_, latent_, lambda_;
  std::vector<double> prev_logp_;  // [rows, V]: the previous exit's
  std::vector<float> prev_h_;      // [rows, d]
  // Every kept token, [tokens, depth] each.
  std::vector<double> all_loss_, all_entropy_, all_kl_, all_latent_, all_lambda_;
};

}  // namespace looplm
