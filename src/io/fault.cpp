#include "io/fault.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace looplm::io {

namespace {

struct Plan {
  enum class Kind { none, trace, kill, enospc } kind = Kind::none;
  std::string name;
  long nth = 1;
};

Plan read_plan() {
  Plan p;
  const char* env = std::getenv("LOOPLM_FAULT");
  if (!env || !*env) return p;
  const std::string s = env;
  if (s == "trace") {
    p.kind = Plan::Kind::trace;
    return p;
  }
  const size_t at = s.find('@');
  const std::string kind = s.substr(0, at == std::string::npos ? 0 : at);
  if (kind == "kill") p.kind = Plan::Kind::kill;
  else if (kind == "enospc") p.kind = Plan::Kind::enospc;
  else {
    std::fprintf(stderr, "looplm: ignoring LOOPLM_FAULT='%s' (expected kill@NAME[#K], enospc@NAME[#K] or trace)\n", env);
    return p;
  }
  p.name = s.substr(at + 1);
  if (const size_t hash = p.name.find('#'); hash != std::string::npos) {
    p.nth = std::atol(p.name.c_str() + hash + 1);
    p.name.resize(hash);
  }
  return p;
}

}  // namespace

int fault_point(const char* name) {
  static const Plan plan = read_plan();
  if (plan.kind == Plan::Kind::none) return 0;
  static std::mutex mu;
  static std::map<std::string, long> passes;
  long k;
  {
    std::lock_guard<std::mutex> lock(mu);
    k = ++passes[name];
  }
  if (plan.kind == Plan::Kind::trace) {
    std::fprintf(stderr, "looplm fault point: %s #%ld\n", name, k);
    return 0;
  }
  if (plan.name != name || plan.nth != k) return 0;
  if (plan.kind == Plan::Kind::kill) {
    std::fflush(nullptr);
    ::raise(SIGKILL);
  }
  return ENOSPC;
}

}  // namespace looplm::io
