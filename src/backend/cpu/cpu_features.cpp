#include "backend/cpu/cpu_features.h"

#include <string>
#include <utility>

#include "looplm/types.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace looplm {

namespace {
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) && defined(__GNUC__)
  f.sse42 = __builtin_cpu_supports("sse4.2");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#ifdef __clang__  // clang 14 (the fuzz build, fuzz/) has no "f16c" for __builtin_cpu_supports: CPUID.1:ECX bit 29
  unsigned a1, b1, c1, d1;
  f.f16c = __get_cpuid(1, &a1, &b1, &c1, &d1) && (c1 & bit_F16C);
#else
  f.f16c = __builtin_cpu_supports("f16c");
#endif
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163 &&  // "AuthenticAMD"
      __get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned base = (a >> 8) & 0xf, family = base == 0xf ? base + ((a >> 20) & 0xff) : base;
    f.zen5_or_later = family >= 0x1a;
  }
#endif
  return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string cpu_features_text() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  for (const auto& [on, name] : {std::pair{f.sse42, "sse4.2"}, {f.avx2_fma, "avx2 fma"}, {f.f16c, "f16c"}, {f.avx512, "avx512f avx512bw"},
                                 {f.avx512vl, "avx512vl"}, {f.avx512_bf16, "avx512_bf16"}, {f.avx512_vnni, "avx512_vnni"},
                                 {f.zen5_or_later, "zen5"}})
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  return s.empty() ? "none" : s;
}

}  // namespace looplm
