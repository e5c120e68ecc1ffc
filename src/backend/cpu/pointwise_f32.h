// Float overloads of the hottest pointwise kernels (ops call these; the templates in
// src/ops/kernels_pointwise.h remain the double reference). The inner loops are ISA-cloned
// (isa.h) and use fastmath.h, so they run 16 lanes wide on AVX-512.
#pragma once
#include <cstdint>

namespace looplm::k {

void gelu_fwd(const float* x, float* y, int64_t n);
void gelu_bwd(const float* x, const float* dy, float* dx, bool acc, int64_t n);

}  // namespace looplm::k
