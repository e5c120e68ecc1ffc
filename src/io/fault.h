// Fault injection for the crash-consistency tests (tests/test_checkpoint_faults.cpp, docs/format.md):
// the checkpoint writer passes named points, and the LOOPLM_FAULT environment variable makes one of
// them fail the way a machine does:
//   LOOPLM_FAULT=kill@NAME[#K]    the K-th pass (default 1) through NAME kills the process (SIGKILL:
//                                 a power cut, the OOM killer); no destructor or handler runs
//   LOOPLM_FAULT=enospc@NAME[#K]  the K-th pass reports ENOSPC to its caller (a full disk)
//   LOOPLM_FAULT=trace            every pass is printed to stderr as "looplm fault point: NAME #K"
// Unset (always, outside tests), a pass is one branch on a flag read once.
#pragma once

namespace looplm::io {

// 0, or the errno the caller should fail with (enospc@). Never returns for kill@.
int fault_point(const char* name);

}  // namespace looplm::io
