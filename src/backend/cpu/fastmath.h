// Branch-free float exp and erf that vectorise (libm's scalar calls do not), for the float hot
// loops. Accuracy: exp ~2 ulp on [-87, 88] (Cephes polynomial), erf absolute error < 2e-7
// (Numerical Recipes' erfc Chebyshev fit, 1.2e-7 relative) — below the float32 tolerances of the
// reference tests (docs/numerics.md). The double kernels keep std::exp / std::erf.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace looplm::fm {

inline float exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  // round to nearest by the 1.5·2^23 trick (vectorises; nearbyintf is a libm call)
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;  // ln2 split hi/lo for an exact reduction
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

inline float erf(float x) {
  const float z = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float poly =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  const float erfc = t * fm::exp(-z * z + poly);
  const float r = 1.0f - erfc;
  return x < 0 ? -r : r;
}

}  // namespace looplm::fm
