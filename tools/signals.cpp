#include "signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "looplm/util.h"

namespace looplm::cli {

namespace {

std::atomic<bool> g_graceful{false};  // a GracefulStop is alive
std::atomic<bool> g_stop{false};      // the first signal arrived while it was
std::mutex g_note_mutex;
std::string g_note;                   // set_interrupt_note
std::string g_graceful_note;          // the alive GracefulStop's (under g_note_mutex)

sigset_t handled_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

[[noreturn]] void die_by(int sig) {
  // Default action, unblocked on this thread, then raise: the process ends as killed by `sig`
  // (the shell sees the usual status).
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);
}

void wait_for_signals() {
  const sigset_t s = handled_signals();
  for (;;) {
    int sig = 0;
    if (sigwait(&s, &sig) != 0) continue;
    if (g_graceful.load() && !g_stop.exchange(true)) {
      std::lock_guard<std::mutex> lock(g_note_mutex);
      if (!g_graceful_note.empty()) {
        const std::string line = "\nlooplm: " + g_graceful_note + "\n";
        ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
        (void)ignored;
      }
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(g_note_mutex);
      if (!g_note.empty()) {
        const std::string line = "\n" + g_note + "\n";
        ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
        (void)ignored;
      }
    }
    die_by(sig);
  }
}

// SIGBUS: a read of a mapped file past its end, i.e. a checkpoint truncated or overwritten in
// place while mapped (io/mapped_file.h). Synchronous, on the thread that read, so it cannot go to
// the signal thread; the handler only writes a prepared message and exits (async-signal-safe; it
// returns nowhere, so a frame written below a JIT kernel's borrowed stack does no harm).
void on_sigbus(int) {
  auto put = [](const char* s) {
    ssize_t ignored = write(STDERR_FILENO, s, std::strlen(s));
    (void)ignored;
  };
  put("\nlooplm: error: bus error reading a mapped file: a checkpoint in use (");
  put(mapped_files_note());
  put(") was truncated or overwritten in place. Replace a checkpoint by writing the new one beside it and renaming it "
      "over the old name (mv), which readers survive\n");
  _exit(1);
}

}  // namespace

void set_interrupt_note(const std::string& note) {
  std::lock_guard<std::mutex> lock(g_note_mutex);
  g_note = note;
}

void start_signal_thread() {
  struct sigaction bus = {};
  bus.sa_handler = on_sigbus;
  sigaction(SIGBUS, &bus, nullptr);
  const sigset_t s = handled_signals();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);  // inherited by every thread created from now on
  std::thread(wait_for_signals).detach();
}

GracefulStop::GracefulStop(const std::string& note) {
  {
    std::lock_guard<std::mutex> lock(g_note_mutex);
    g_graceful_note = note;
  }
  g_stop = false;
  g_graceful = true;
}
GracefulStop::~GracefulStop() { g_graceful = false; }
const std::atomic<bool>* GracefulStop::flag() const { return &g_stop; }

}  // namespace looplm::cli
