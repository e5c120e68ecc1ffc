#include "core/threads.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <omp.h>

namespace looplm {

namespace {

// One per process, behind a mutex: several host threads (a server's, a Python program's) may
// decode or train at once. What OpenMP reads is per thread: omp_set_num_threads sets the calling
// thread's own count, so each thread applies the governor's size to itself (apply), and a
// ThreadCap caps only the thread that holds it.
struct Governor {
  bool adaptive = true;
  bool decided = false;  // the first measurement (kFirstWindow) has set the pool's size
  int cores = 0, threads = 0;
  double last_wall = -1, last_self = 0, last_busy = 0, other = 0;
};
std::mutex g_mutex;
thread_local int t_cap = 0;  // ThreadCap: at most this many on this thread while > 0

// The first decision's window: long enough for /proc/stat's 10 ms ticks to tell one busy core
// (5 ± 1 ticks) from none, short enough not to be felt by a command that lasts a second.
constexpr double kFirstWindow = 0.05;
// Later measurements: every 250 ms at most.
constexpr double kWindow = 0.25;

Governor& gov() {
  static Governor g = [] {
    Governor x;
    x.cores = cores_available();
    x.threads = x.cores;
    // OMP_NUM_THREADS, when set, fixes the thread count as OpenMP users expect (no adapting);
    // --threads still overrides it.
    if (const char* e = std::getenv("OMP_NUM_THREADS")) {
      char* end = nullptr;
      const long n = std::strtol(e, &end, 10);
      if (end != e && *end == '\0' && n > 0 && n <= 1024) {
        x.threads = (int)n;
        x.adaptive = false;
      }
    }
    omp_set_num_threads(x.threads);
    return x;
  }();
  return g;
}

void apply(const Governor& g) {  // (g_mutex held)
  omp_set_num_threads(t_cap > 0 ? std::min(g.threads, t_cap) : g.threads);
}

double seconds(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Busy time (user, nice, system, irq, softirq, steal) of the CPUs this process may use, in
// seconds; negative if /proc/stat cannot be read.
double busy_seconds_of_allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  static const double tick = (double)sysconf(_SC_CLK_TCK);
  char line[512];
  double busy = 0;
  bool any = false;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "cpu", 3) != 0) break;
    int cpu = -1;
    unsigned long long u = 0, n = 0, s = 0, idle = 0, io = 0, irq = 0, sirq = 0, steal = 0;
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &u, &n, &s, &idle, &io, &irq, &sirq,
                    &steal) < 9)
      continue;  // the aggregate "cpu " line
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)) continue;
    busy += (double)(u + n + s + irq + sirq + steal) / tick;
    any = true;
  }
  std::fclose(f);
  return any ? busy : -1;
}

}  // namespace

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

// The start of a measurement window: now.
static void start_window(Governor& g) {
  g.last_wall = seconds(CLOCK_MONOTONIC);
  g.last_self = seconds(CLOCK_PROCESS_CPUTIME_ID);
  g.last_busy = busy_seconds_of_allowed_cpus();
}

void set_threads(int n) {
  std::lock_guard<std::mutex> lk(g_mutex);
  Governor& g = gov();
  g.adaptive = n <= 0;
  g.threads = n > 0 ? n : g.cores;
  g.decided = false;
  // The first window opens now, so that by the first parallel region (the first adapt_threads)
  // the load is known: a command's setup (parsing, loading) usually covers most of it.
  if (g.adaptive) start_window(g);
  apply(g);
}

int current_threads() {
  std::lock_guard<std::mutex> lk(g_mutex);
  const Governor& g = gov();
  return t_cap > 0 ? std::min(g.threads, t_cap) : g.threads;
}

ThreadCap::ThreadCap(int max_threads) {
  previous_ = t_cap;
  t_cap = max_threads > 0 && t_cap > 0 ? std::min(t_cap, max_threads) : std::max(max_threads, t_cap);
  std::lock_guard<std::mutex> lk(g_mutex);
  apply(gov());
}

ThreadCap::~ThreadCap() {
  t_cap = previous_;
  std::lock_guard<std::mutex> lk(g_mutex);
  apply(gov());
}
double measured_other_load() {
  std::lock_guard<std::mutex> lk(g_mutex);
  return gov().other;
}

int threads_for_load(int cores, int current, double other) {
  const int down = cores - (int)std::floor(other + 0.4);  // from 0.6 cores of other work: one fewer
  const int up = cores - (int)std::floor(other + 0.8);    // and back only below 0.2 (hysteresis)
  if (down < current) return std::max(1, down);
  if (up > current) return std::min(cores, up);
  return current;
}

void adapt_threads() {
  std::lock_guard<std::mutex> lk(g_mutex);
  Governor& g = gov();
  // Whatever happens below, this thread's own count follows the pool's size when it returns.
  struct Apply {
    const Governor& g;
    ~Apply() { apply(g); }
  } applied{g};
  if (!g.adaptive || g.cores < 2) return;
  double wall = seconds(CLOCK_MONOTONIC);
  if (g.last_wall < 0) {  // no window open: open one
    start_window(g);
    wall = g.last_wall;
  }
  if (g.last_busy < 0) {  // no /proc/stat: keep the pool as it is, and stop asking
    g.adaptive = false;
    return;
  }
  const double need = g.decided ? kWindow : kFirstWindow;
  if (wall - g.last_wall < need) {
    if (g.decided) return;
    // The first parallel region is about to start: finish the first window before sizing the pool
    // (a short command is over before a 250 ms window would close).
    const double rest = need - (wall - g.last_wall);
    const timespec ts{0, (long)(rest * 1e9)};
    nanosleep(&ts, nullptr);
    wall = seconds(CLOCK_MONOTONIC);
  }
  const double self = seconds(CLOCK_PROCESS_CPUTIME_ID), busy = busy_seconds_of_allowed_cpus();
  if (busy < 0) return;
  const double dt = wall - g.last_wall;
  g.other = std::max(0.0, ((busy - g.last_busy) - (self - g.last_self)) / dt);
  g.threads = threads_for_load(g.cores, g.threads, g.other);
  g.decided = true;
  g.last_wall = wall;
  g.last_self = self;
  g.last_busy = busy;
}

}  // namespace looplm
