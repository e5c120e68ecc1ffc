#include "core/memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "looplm/error.h"

namespace looplm {

namespace {

// "123", "64M", "2G" -> bytes; 0 when it is not such a number.
uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(v > 0)) return 0;
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0; ++end; break;
    case 'm': case 'M': mult = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; ++end; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  return *end ? 0 : (uint64_t)(v * mult);
}

uint64_t read_u64_file(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return 0;
  return std::strtoull(s.c_str(), nullptr, 10);
}

uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

uint64_t cgroup_room() {
  const uint64_t max = read_u64_file("/sys/fs/cgroup/memory.max");
  if (max == 0) return 0;
  const uint64_t used = read_u64_file("/sys/fs/cgroup/memory.current");
  return max > used ? max - used : 1;
}

}  // namespace

uint64_t memory_budget() {
  uint64_t b = 0;
  auto take = [&](uint64_t x) {
    if (x > 0 && (b == 0 || x < b)) b = x;
  };
  take(mem_available());
  take(cgroup_room());
  if (const char* env = std::getenv("LOOPLM_MEMORY_LIMIT"); env && *env) {
    const uint64_t lim = parse_size(env);
    if (lim == 0) throw UsageError(std::string("LOOPLM_MEMORY_LIMIT='") + env + "' is not a size (e.g. 4G, 512M, 100000000)");
    take(lim);
  }
  return b;
}

std::string format_bytes(double bytes) {
  char b[32];
  if (bytes >= 1e9) std::snprintf(b, sizeof b, "%.1f GB", bytes / 1e9);
  else if (bytes >= 1e6) std::snprintf(b, sizeof b, "%.1f MB", bytes / 1e6);
  else std::snprintf(b, sizeof b, "%.1f kB", bytes / 1e3);
  return b;
}

void require_memory(double bytes, const std::string& what, const std::string& hint) {
  const uint64_t budget = memory_budget();
  if (budget == 0 || bytes <= (double)budget) return;
  throw Error(what + " needs about " + format_bytes(bytes) + "; looplm may use " + format_bytes((double)budget) +
              " here (the memory available, or LOOPLM_MEMORY_LIMIT)" + (hint.empty() ? "" : ": " + hint));
}

}  // namespace looplm
