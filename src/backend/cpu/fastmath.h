// A branch-free float exp that vectorises (libm's scalar call does not), for the float hot loops.
// Accuracy ~2 ulp on [-87, 88] (Cephes polynomial), below the float32 tolerances of the reference
// tests (docs/numerics.md). GELU's Φ is built on it in pointwise_f32.cpp. The double kernels keep
// std::exp / std::erf.
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

}  // namespace looplm::fm
