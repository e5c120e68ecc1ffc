// Finite-difference helpers for the double-precision gradient checks (test_gradcheck.cpp,
// test_loop_ops.cpp). For a random upstream gradient G, L = Σ G ∘ f(inputs) has ∂L/∂input =
// backward(G); central differences with h = 1e-6 have truncation error O(h²·f‴) ~ 1e-12 and
// roundoff ~ 1e-16/h = 1e-10, so analytic and numeric gradients must agree to 1e-7 relative.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace looplm::test {

using Vec = std::vector<double>;

inline Vec randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0, scale);
  Vec v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline double dotv(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compare analytic gradient `grad` of L(x) = Σ G∘f(x) with central differences on input x: every
// element, or every `every`-th (from the first) where each difference is a long pass (attention
// past a causal block: two forward passes of O(T²) per element, minutes under an emulated CPU); an
// `every` coprime with the row length still reaches every column and, over the rows, every row.
inline void fd_check(const std::string& what, Vec& x, const Vec& grad, const std::function<double()>& L, size_t every = 1) {
  const double h = 1e-6;
  double worst = 0, scale = 1e-3;
  for (double gv : grad) scale = std::max(scale, std::fabs(gv));
  for (size_t i = 0; i < x.size(); i += every) {
    double keep = x[i];
    x[i] = keep + h;
    double lp = L();
    x[i] = keep - h;
    double lm = L();
    x[i] = keep;
    double num = (lp - lm) / (2 * h);
    worst = std::max(worst, std::fabs(num - grad[i]) / scale);
  }
  EXPECT_LT(worst, 1e-7) << what;
}

}  // namespace looplm::test
