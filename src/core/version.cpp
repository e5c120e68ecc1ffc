#include "commit.h"  // generated at every build (cmake/commit.cmake)
#include "looplm/types.h"

namespace looplm {

std::string version_text() {
  const std::string commit = LOOPLM_COMMIT;
  return std::string(kVersion) + (commit.empty() ? "" : " (git " + commit + ")");
}

}  // namespace looplm
