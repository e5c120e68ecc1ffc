// AdamW with decoupled weight decay on matrices only (ParamInfo::decay), as torch.optim.AdamW:
//   p ← p·(1 − lr·wd);  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;
//   p ← p − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)
// plus the learning-rate schedule (linear warmup, cosine to lr·min_lr_ratio) and global-norm clipping.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "looplm/config.h"
#include "model/params.h"

namespace looplm {

class AdamW {
 public:
  explicit AdamW(const ParamStore& ps);
  // Update only the parameters whose names start with `prefix` (train_only: every other value,
  // and its moments, stay as they are, bit for bit). Throws UsageError (config key train_only) when none does.
  void train_only(const ParamStore& ps, const std::string& prefix);
  void step(ParamStore& ps, double lr, const Config& c);
  int64_t t = 0;  // steps taken
  std::vector<float> m, v;

 private:
  std::vector<uint8_t> decay_;  // per element
  std::vector<std::pair<int64_t, int64_t>> spans_;  // (offset, count) updated by step(): all, or train_only's
};

double lr_at(const Config& c, int step);  // step counts from 0
// L2 norm of all gradients; scales them to max_norm when above it (torch clip_grad_norm_ rule:
// coefficient max_norm / (norm + 1e-6)). Returns the norm before clipping.
double clip_grad_norm(ParamStore& ps, double max_norm);

}  // namespace looplm
