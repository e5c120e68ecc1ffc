// The compute pool's size: OpenMP threads, shared with oneDNN's GEMMs.
//
// By default the pool adapts: at most the cores this process may use (sched_getaffinity), fewer
// while other processes keep those cores busy. A static OpenMP split with one thread descheduled
// makes every barrier wait for it (measured on 2 cores with one busy neighbour: training 2.6x and
// batch-1 decoding 3.3x slower than idle, against 1.7x and 1.5x with one thread), so when the
// cores are shared, fewer threads are faster. Set a fixed count with set_threads(n > 0)
// (`--threads N`).
#pragma once

namespace looplm {

int cores_available();  // CPUs in this process's affinity mask (at least 1)

// n > 0: exactly n threads from now on. n = 0: adapt (the default), measuring the load from now.
void set_threads(int n);
int current_threads();  // the size of the next parallel region

// Call before the first parallel region of a command and between units of work (a training step, a
// token, an evaluation batch, a quantized matrix). It measures how much of the allowed cores' time
// other processes used since the last measurement (/proc/stat minus this process's own CPU time)
// and resizes the pool: one thread fewer per core's worth of other work (from 0.6 cores on), back
// up once it falls under 0.2. The first call decides on a window of at least 50 ms since
// set_threads(0) (it sleeps for the rest when the command's setup took less), so even a short
// command starts with the right count; later calls measure every 250 ms at most and are cheap.
void adapt_threads();

// Thread safety: every function here may be called from several threads at once. The pool's size
// is the process's; each thread's parallel regions take it when that thread calls adapt_threads or
// set_threads (OpenMP's thread count is per calling thread), and a ThreadCap limits only the thread
// that holds it.
//
// While alive, parallel regions have at most max_threads threads (0: no cap), whether the pool
// adapts or was fixed (--threads N is the most a command uses, as the kernels' own size thresholds
// already run small products on one thread): for work too small to split, such as decoding one
// sequence of a small model, where waking a second thread for every product costs more than it
// saves. Nested caps take the smaller.
class ThreadCap {
 public:
  explicit ThreadCap(int max_threads);
  ~ThreadCap();
  ThreadCap(const ThreadCap&) = delete;
  ThreadCap& operator=(const ThreadCap&) = delete;

 private:
  int previous_;
};

// The other processes' load measured last, in cores (for benchmarks and tests).
double measured_other_load();

// The rule adapt_threads applies: the pool size after `current` threads saw `other` cores' worth
// of other processes' work on `cores` cores.
int threads_for_load(int cores, int current, double other);

}  // namespace looplm
