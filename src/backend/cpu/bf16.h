// bfloat16 storage: the top 16 bits of an IEEE float (8-bit exponent, 7-bit mantissa). Used for a
// read-only copy of the weights that batch-1 decoding streams (half the bytes of fp32, so the
// dense bench model's 21.5 MB fit this machine's 32 MB L3), in a layout made for that stream;
// arithmetic stays fp32.
#pragma once
#include <cstdint>
#include <cstring>

namespace looplm {

// Round to nearest, ties to even; NaN stays NaN (quiet).
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The decode layout of a [R, C] matrix: rows in blocks of 4 (R / 4 of them, then R % 4 plain
// rows); inside a block the columns go in chunks of 32 (the last one C % 32 wide), and each chunk
// holds its 4 row segments back to back. So a 4-row product reads one sequential stream instead
// of 4 strided ones, and the hardware prefetcher keeps up. Row block b starts at element 4·b·C,
// as in row-major order, so a thread can start at any multiple of 4 rows.
inline constexpr int kBf16Rows = 4, kBf16Cols = 32;

inline void pack_bf16(const float* src, int64_t R, int64_t C, uint16_t* dst) {
  const int64_t blocks = R / kBf16Rows;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t c0 = 0; c0 < C; c0 += kBf16Cols) {
      const int64_t w = C - c0 < kBf16Cols ? C - c0 : kBf16Cols;
      for (int r = 0; r < kBf16Rows; ++r)
        for (int64_t c = 0; c < w; ++c)
          dst[b * kBf16Rows * C + c0 * kBf16Rows + r * w + c] = to_bf16(src[(b * kBf16Rows + r) * C + c0 + c]);
    }
  for (int64_t i = blocks * kBf16Rows * C; i < R * C; ++i) dst[i] = to_bf16(src[i]);
}

}  // namespace looplm
