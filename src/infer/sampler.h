// Next-token choice from logits: greedy (temperature 0) or temperature / top-k / top-p sampling.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace looplm {

using LogitBias = std::vector<std::pair<int32_t, float>>;  // (token id, added to its logit)

struct SamplerOptions {
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
  const LogitBias* logit_bias = nullptr;  // added before anything else (greedy included)
};
// UsageError naming the entry: an id outside [0, V), a bias that is not finite or outside
// [-100, 100] (OpenAI's range).
void check_logit_bias(const LogitBias& bias, int V);
// Token ids no text can be made of (a padded vocabulary's rows past its tokenizer, holes in its id
// space) get the lowest logit in `z` (V logits): they are never chosen (a bias cannot lift them),
// and never listed among the likely ones.
void mask_textless(float* z, const std::vector<int32_t>& textless);
// z with `bias` added (copied into `biased`), or z itself when there is none.
const float* biased_logits(const float* z, int V, const LogitBias* bias, std::vector<float>& biased);
// Error when a logit is NaN or ±Inf (as eval refuses a non-finite loss): no token is chosen from
// the outputs of a model that overflowed (a diverged or damaged checkpoint).
void require_finite_logits(const float* logits, int V);
int32_t sample_token(const float* logits, int V, const SamplerOptions& o, Rng& rng, std::vector<float>& work);
// The greedy choice (sample_token at temperature 0): the most likely token after the bias.
int32_t greedy_token(const float* logits, int V, const LogitBias* bias);
// The distribution sample_token draws from, dense (p[V], zero outside the top-k / top-p cut):
// speculative sampling compares the draft's with the target's. Temperature > 0.
void sampling_distribution(const float* z, int V, const SamplerOptions& o, std::vector<double>& p);
// A draw from p (weights summing to > 0; they need not be normalized).
int32_t sample_from(const std::vector<double>& p, Rng& rng);
// log softmax(z)[id] (the raw logits': what OpenAI's logprobs report, not the sampling's) and,
// into `top` when k > 0, the k most likely tokens' (most likely first, a tie to the lower id).
double token_logprob(const float* z, int V, int32_t id, int k, std::vector<std::pair<int32_t, double>>* top);

}  // namespace looplm
