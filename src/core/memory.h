// What looplm may allocate up front, so that a request too large for the machine (a data file of
// many GB, a pipe that never ends, --batch 10000) is refused with the figure before it is read or
// allocated, not ended by the kernel's OOM killer halfway.
//
// The budget is the smallest of: the memory the kernel reports available (MemAvailable in
// /proc/meminfo), the cgroup's limit less its usage (cgroup v2 memory.max / memory.current: a
// container or systemd slice), and LOOPLM_MEMORY_LIMIT (bytes, with an optional K/M/G suffix) when
// set. Read once per call; 0 when none of them can be read (then nothing is refused).
#pragma once
#include "looplm/util.h"
#include <cstdint>
#include <string>

namespace looplm {

// memory_budget, format_bytes: include/looplm/util.h.
// Error unless `bytes` fit the budget: "<what> needs about X; looplm may use Y here (<hint>)".
void require_memory(double bytes, const std::string& what, const std::string& hint);

}  // namespace looplm
