// How OpenMP's idle threads wait, chosen before the OpenMP runtime starts.
//
// libgomp reads its wait policy from the environment once, in its own constructor, before main.
// By default a thread that reaches a barrier spins (~300,000 rounds) before it sleeps: the fastest
// way to wait on an idle machine, and the worst beside a busy process, where the thread being
// waited for is descheduled while the others spin away the time slices it needs. The adaptive pool
// (core/threads.h) avoids that by using fewer threads under load; a fixed count (--threads N,
// OMP_NUM_THREADS) cannot, so for a fixed count the spin is cut to 1,000 rounds before sleeping
// (measured on 2 cores with one busy neighbour, bench/README.md "Threads": decoding a d=384 model
// at --threads 2 ran 5.9x slower than idle with the default spin, 2.9x with 1,000 rounds, 1.1x
// with none; idle, 1,000 rounds cost ~7% of decoding speed and none ~55%).
//
// The environment must say so before libgomp's constructor runs, and nothing in this process runs
// before it that could set it (a .preinit_array function runs first, but glibc's own initializer
// then resets the environment to the one the process started with). So when the command line or
// the environment fixes the count at 2 or more and the user has not chosen a wait policy
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT), main sets GOMP_SPINCOUNT and executes itself again
// (/proc/self/exe, the same arguments): a few milliseconds, once.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "cli.h"

namespace {

// N of "-t N", "-tN", "--threads N" or "--threads=N" (the last one given). The command's
// own parser checks the value later; this only decides how threads wait. -1 when none is given.
int threads_argument(int argc, char** argv) {
  int n = -1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--")) break;
    if ((!std::strcmp(a, "-t") || !std::strcmp(a, "--threads")) && i + 1 < argc)
      n = (int)std::strtol(argv[++i], nullptr, 10);
    else if (!std::strncmp(a, "--threads=", 10))
      n = (int)std::strtol(a + 10, nullptr, 10);
    else if (!std::strncmp(a, "-t", 2) && a[2] >= '0' && a[2] <= '9')
      n = (int)std::strtol(a + 2, nullptr, 10);
  }
  return n;
}

}  // namespace

namespace looplm::cli {

void choose_wait_policy(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int given = threads_argument(argc, argv);  // --threads overrides OMP_NUM_THREADS (core/threads.h)
  const int threads = given >= 0 ? given : omp ? (int)std::strtol(omp, nullptr, 10) : 0;
  if (threads < 2) return;
  if (::setenv("GOMP_SPINCOUNT", "1000", 0) != 0) return;
  ::execv("/proc/self/exe", argv);
  ::unsetenv("GOMP_SPINCOUNT");  // no /proc (or exec failed): go on with OpenMP's default
}

}  // namespace looplm::cli
