#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "looplm/error.h"
#include "looplm/looplm.h"

namespace looplm {

void require_finite_logits(const float* z, int V) {
  bool finite = true;
  for (int i = 0; i < V; ++i) finite &= std::isfinite(z[i]);  // no early exit: vectorizes
  if (finite) return;
  int i = 0;
  while (std::isfinite(z[i])) ++i;
  throw Error("the model's next-token logits are not finite (" + std::string(std::isnan(z[i]) ? "NaN" : "Inf") +
              " at token id " + std::to_string(i) +
              "): its outputs overflow or are NaN on this prompt (a diverged or damaged checkpoint?)");
}

void check_logit_bias(const LogitBias& bias, int V) {
  for (const auto& [id, b] : bias) {
    if (id < 0 || id >= V)
      throw UsageError("logit_bias: token " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
    if (!std::isfinite(b) || b < -100 || b > 100)
      throw UsageError("logit_bias: the bias of token " + std::to_string(id) + " must be a number from -100 to 100");
  }
}

void mask_textless(float* z, const std::vector<int32_t>& textless) {
  // The lowest finite float, not -inf: the logits stay finite (require_finite_logits still tells a
  // diverged model), and exp(lowest - max) is 0 all the same.
  for (int32_t id : textless) z[id] = std::numeric_limits<float>::lowest();
}

void check_sampling(double temperature, int top_k, double top_p) {
  if (!(temperature >= 0) || !std::isfinite(temperature)) throw UsageError("temperature must be a number >= 0 (0: greedy)");
  if (top_k < 0) throw UsageError("top_k must be >= 0 (0: off)");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("top_p must be greater than 0 and at most 1 (1: off)");
}

const float* biased_logits(const float* z, int V, const LogitBias* bias, std::vector<float>& biased) {
  if (!bias || bias->empty()) return z;
  biased.assign(z, z + V);
  for (const auto& [id, b] : *bias) biased[id] += b;
  return biased.data();
}

namespace {
// The ids by logit, the first k of them sorted (k = top_k, or V when it is off); returns k.
int top_candidates(const float* z, int V, int top_k, std::vector<int32_t>& idx) {
  idx.resize(V);
  std::iota(idx.begin(), idx.end(), 0);
  const int k = (top_k > 0 && top_k < V) ? top_k : V;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return z[a] > z[b]; });
  return k;
}
}  // namespace

int32_t greedy_token(const float* z_in, int V, const LogitBias* bias) {
  require_finite_logits(z_in, V);
  thread_local std::vector<float> biased;
  const float* z = biased_logits(z_in, V, bias, biased);
  return (int32_t)(std::max_element(z, z + V) - z);
}

int32_t sample_token(const float* z_in, int V, const SamplerOptions& o, Rng& rng, std::vector<float>& work) {
  if (o.temperature <= 0) return greedy_token(z_in, V, o.logit_bias);
  require_finite_logits(z_in, V);
  thread_local std::vector<float> biased;
  const float* z = biased_logits(z_in, V, o.logit_bias, biased);
  // Candidates sorted by logit, cut to top-k, softmax at temperature, cut to the top-p mass.
  std::vector<int32_t> idx;
  int k = top_candidates(z, V, o.top_k, idx);
  work.assign(k, 0.0f);
  const double m = z[idx[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += work[i] = (float)std::exp((z[idx[i]] - m) / o.temperature);
  if (o.top_p < 1.0) {
    double cum = 0;
    int keep = 0;
    while (keep < k) {
      cum += work[keep++] / sum;
      if (cum >= o.top_p) break;
    }
    k = keep;
    sum = 0;
    for (int i = 0; i < k; ++i) sum += work[i];
  }
  double u = rng.uniform() * sum, acc = 0;
  for (int i = 0; i < k; ++i) {
    acc += work[i];
    if (u < acc) return idx[i];
  }
  return idx[k - 1];
}

void sampling_distribution(const float* z_in, int V, const SamplerOptions& o, std::vector<double>& p) {
  require_finite_logits(z_in, V);
  thread_local std::vector<float> biased;
  const float* z = biased_logits(z_in, V, o.logit_bias, biased);
  // As sample_token: candidates by logit, cut to top-k, softmax at temperature, cut to the top-p mass.
  std::vector<int32_t> idx;
  const int k = top_candidates(z, V, o.top_k, idx);
  p.assign(V, 0.0);
  const double m = z[idx[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[idx[i]] = std::exp((z[idx[i]] - m) / o.temperature);
  if (o.top_p < 1.0) {
    double cum = 0;
    int keep = 0;
    while (keep < k) {
      cum += p[idx[keep++]] / sum;
      if (cum >= o.top_p) break;
    }
    for (int i = keep; i < k; ++i) p[idx[i]] = 0;
    sum = 0;
    for (int i = 0; i < keep; ++i) sum += p[idx[i]];
  }
  for (double& x : p) x /= sum;
}

int32_t sample_from(const std::vector<double>& p, Rng& rng) {
  double sum = 0;
  for (double x : p) sum += x;
  const double u = rng.uniform() * sum;
  double acc = 0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    acc += p[i];
    last = (int32_t)i;
    if (u < acc) return last;
  }
  return last;
}

double token_logprob(const float* z, int V, int32_t id, int k, std::vector<std::pair<int32_t, double>>* top) {
  double mx = z[0];
  for (int v = 1; v < V; ++v) mx = std::max(mx, (double)z[v]);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp((double)z[v] - mx);
  const double lse = mx + std::log(sum);
  if (k > 0 && top) {
    std::vector<int32_t> ids(V);
    for (int v = 0; v < V; ++v) ids[v] = v;
    k = std::min(k, V);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    for (int j = 0; j < k; ++j) top->push_back({ids[j], z[ids[j]] - lse});
  }
  return z[id] - lse;
}

}  // namespace looplm
