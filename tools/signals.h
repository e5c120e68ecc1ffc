// Ctrl-C and SIGTERM for the CLI.
//
// No signal is ever taken on a compute thread: main() blocks SIGINT and SIGTERM before any other
// thread exists (so the OpenMP pool inherits the mask) and one thread receives them with
// sigwait(). This is not style: oneDNN 2.6's JIT sgemm kernels (Debian 12's libdnnl 2.6.3) point rsp
// into a heap buffer, and the kernel writes a signal frame below rsp, so a handler that runs on a
// thread inside such a kernel corrupts the heap (upstream oneDNN issue #4845, fixed in 3.11).
// A flag-setting SIGINT handler crashed 7 of 12 interrupted training runs here; every crash had
// the signal land in JIT code (anonymous rwx memory).
#pragma once
#include <atomic>
#include <string>

namespace looplm::cli {

// Call first in main(), before anything starts a thread.
void start_signal_thread();

// What a signal that ends the process at once should tell the user (e.g. "the checkpoint at step N
// is complete"); printed on stderr before the process dies. Empty: nothing.
void set_interrupt_note(const std::string& note);

// While one is alive, the first SIGINT / SIGTERM sets flag() (training ends after the current
// step with a checkpoint; the server finishes what is in flight) and prints `note` ("looplm: NOTE";
// empty: nothing), and a second one ends the process at once. Otherwise a signal ends the process
// at once, as usual.
class GracefulStop {
 public:
  explicit GracefulStop(const std::string& note);
  ~GracefulStop();
  GracefulStop(const GracefulStop&) = delete;
  GracefulStop& operator=(const GracefulStop&) = delete;
  const std::atomic<bool>* flag() const;
};

}  // namespace looplm::cli
