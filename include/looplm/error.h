// Errors. Two tiers (docs/numerics.md):
//  * user input (files, configs, flags) -> looplm::Error with a message naming the bad value;
//    UsageError exits 2, everything else exits 1. Never a crash.
//  * programmer invariants -> LOOPLM_ASSERT, which stays on in release builds and aborts with file:line.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace looplm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, int exit_code = 1) : std::runtime_error(msg), code_(exit_code) {}
  int exit_code() const { return code_; }
 private:
  int code_;
};

// A bad command line or config value: exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& msg) : Error(msg, 2) {}
};

// A library exception's message for a person: without a leading "[json.exception.parse_error.101] "
// style identifier (nlohmann::json puts one first).
inline std::string plain_message(const std::exception& e) {
  std::string s = e.what();
  if (!s.empty() && s[0] == '[') {
    const size_t end = s.find("] ");
    if (end != std::string::npos) s = s.substr(end + 2);
  }
  return s;
}

[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "looplm: internal error: %s (%s) at %s:%d\n", msg, expr, file, line);
  std::abort();
}

}  // namespace looplm

#define LOOPLM_ASSERT(cond, msg) \
  do { if (!(cond)) ::looplm::assert_fail(#cond, __FILE__, __LINE__, msg); } while (0)
