// RoPE angles for positions 0..T-1 (rotate-half, θ_i = base^(−2i/hd): docs/systems.md, Building
// blocks), owned by the model and handed to the attention ops as a view.
#pragma once
#include <cmath>
#include <vector>

#include "ops/ops.h"

namespace looplm {

struct RopeTable {
  int T = 0, hd = 0;
  std::vector<float> cos, sin;  // [T, hd/2] each
  RopeTable() = default;
  RopeTable(int T_, int hd_, double base) : T(T_), hd(hd_), cos((size_t)T_ * (hd_ / 2)), sin(cos.size()) {
    const int h = hd / 2;
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < h; ++i) {
        const double theta = std::pow(base, -2.0 * i / hd);
        cos[(size_t)t * h + i] = (float)std::cos(t * theta);
        sin[(size_t)t * h + i] = (float)std::sin(t * theta);
      }
  }
  op::RopeAngles angles() const { return {cos.data(), sin.data(), T}; }
};

}  // namespace looplm
