// Next-token sampling: the distribution sample_token draws from equals the one temperature, top-k
// and top-p define (computed here independently), and tokens outside the cut never appear.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "infer/sampler.h"

using namespace looplm;

namespace {

// The intended distribution: softmax(z / T) over the k largest logits, then the smallest prefix
// (by probability, descending) whose mass reaches top_p, renormalised.
std::vector<double> expected(const std::vector<float>& z, double T, int top_k, double top_p) {
  const int V = (int)z.size();
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return z[a] > z[b]; });
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::vector<double> p(V, 0.0);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[idx[i]] = std::exp((z[idx[i]] - z[idx[0]]) / T);
  for (int i = 0; i < k; ++i) p[idx[i]] /= sum;
  if (top_p < 1) {
    double cum = 0;
    int keep = 0;
    while (keep < k && cum < top_p) cum += p[idx[keep++]];
    double kept = 0;
    for (int i = 0; i < V; ++i) {
      const bool in = std::find(idx.begin(), idx.begin() + keep, i) != idx.begin() + keep;
      if (!in) p[i] = 0;
      kept += p[i];
    }
    for (double& x : p) x /= kept;
  }
  return p;
}

}  // namespace

TEST(Sampler, DrawsFromTheCutDistribution) {
  const std::vector<float> z = {2.0f, 1.0f, 0.5f, 0.4f, -1.0f, 3.0f, 0.0f, 1.5f};
  struct Case { double T; int k; double p; };
  for (Case c : {Case{1.0, 0, 1.0}, {0.7, 3, 1.0}, {1.3, 0, 0.8}, {1.0, 5, 0.6}, {2.0, 2, 0.99}}) {
    const std::vector<double> want = expected(z, c.T, c.k, c.p);
    SamplerOptions o{c.T, c.k, c.p};
    Rng rng(42, kStreamSample);
    std::vector<float> work;
    const int n = 40000;
    std::vector<int> count(z.size(), 0);
    for (int i = 0; i < n; ++i) count[sample_token(z.data(), (int)z.size(), o, rng, work)]++;
    for (size_t t = 0; t < z.size(); ++t) {
      if (want[t] == 0) {
        EXPECT_EQ(count[t], 0) << "token " << t << " is outside the cut (T " << c.T << ", k " << c.k << ", p " << c.p << ")";
        continue;
      }
      const double sigma = std::sqrt(n * want[t] * (1 - want[t]));
      EXPECT_NEAR(count[t], n * want[t], 5 * sigma + 1) << "token " << t << " (T " << c.T << ", k " << c.k << ", p " << c.p << ")";
    }
  }
}

TEST(Sampler, GreedyAndSeeded) {
  const std::vector<float> z = {0.1f, 2.5f, 2.4f, -3.0f};
  Rng rng(1, kStreamSample);
  std::vector<float> work;
  EXPECT_EQ(sample_token(z.data(), 4, {0.0, 0, 1.0}, rng, work), 1);
  Rng a(9, kStreamSample), b(9, kStreamSample);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(z.data(), 4, {1.0, 0, 1.0}, a, work), sample_token(z.data(), 4, {1.0, 0, 1.0}, b, work));
}
