#include "io/crc32c.h"
#include "backend/cpu/cpu_features.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "io/json_input.h"
#include "looplm/error.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace looplm::io {

namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // CRC-32C, reflected

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc_table(uint32_t c, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_sse42(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = (uint32_t)c64;
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}
const bool kHaveSse42 = cpu_features().sse42;
#endif

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (kHaveSse42) return ~crc_sse42(c, p, n);
#endif
  return ~crc_table(c, p, n);
}

std::string crc32c_hex(uint32_t crc) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", crc);
  return b;
}

uint32_t crc32c_file(const std::string& path, uint64_t* bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error("cannot read '" + brief_path(path) + "': " + std::strerror(e));
  }
  std::vector<uint8_t> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  for (;;) {
    const ssize_t k = ::read(fd, buf.data(), buf.size());
    if (k < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw Error("cannot read '" + brief_path(path) + "': " + std::strerror(e));
    }
    if (k == 0) break;
    crc = crc32c(crc, buf.data(), (size_t)k);
    total += (uint64_t)k;
  }
  ::close(fd);
  if (bytes) *bytes = total;
  return crc;
}

}  // namespace looplm::io
