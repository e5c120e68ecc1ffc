// What this CPU can run, read once from CPUID: the one place the kernels' dispatch asks (matrix-
// vector kernels, cached attention, the quantized formats, bf16 training, CRC-32C). Each field is
// what a family of kernels needs; a kernel that needs several asks for each. All false off x86-64.
#pragma once

namespace looplm {

struct CpuFeatures {
  bool sse42 = false;        // the crc32 instructions (io/crc32c.cpp)
  bool avx2_fma = false;     // AVX2 and FMA: the AVX2 kernels
  bool f16c = false;         // half-precision conversions (the quantized formats' scales)
  bool avx512 = false;       // AVX-512 F and BW: the AVX-512 kernels
  bool avx512vl = false;     // AVX-512 on 128/256-bit registers (narrow cached attention)
  bool avx512_bf16 = false;  // vdpbf16ps: bf16 weights, bf16 training's products
  bool avx512_vnni = false;  // vpdpbusd: the int8 dot products of the quantized formats
  bool zen5_or_later = false;  // AMD family 1Ah+: reads four rows side by side at full speed (gemv.cpp)
};

const CpuFeatures& cpu_features();

}  // namespace looplm
