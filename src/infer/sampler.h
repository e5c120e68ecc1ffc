// Next-token choice from logits: greedy (temperature 0) or temperature / top-k / top-p sampling.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace looplm {

struct SamplerOptions {
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
};
// Error when a logit is NaN or ±Inf (as eval refuses a non-finite loss): no token is chosen from
// the outputs of a model that overflowed (a diverged or damaged checkpoint).
void require_finite_logits(const float* logits, int V);
int32_t sample_token(const float* logits, int V, const SamplerOptions& o, Rng& rng, std::vector<float>& work);

}  // namespace looplm
