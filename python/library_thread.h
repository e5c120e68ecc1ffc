// The library's own thread for the Python module: every call into the library runs on one worker
// thread that blocks SIGINT and SIGTERM (so do the OpenMP / oneDNN threads it starts: they inherit
// its mask), while the Python thread that made the call waits with the GIL released.
//
// Why (tools/signals.h has the whole story): a signal handler that runs on a compute thread inside
// one of oneDNN 2.6's JIT kernels writes its frame into a heap buffer (the kernel points rsp there)
// and corrupts the heap. Python installs a SIGINT handler, and the kernel delivers a process signal
// to any thread that does not block it, so the library's threads must all block it. The calling
// thread keeps the signal and, while it waits, runs Python's handlers every kPoll
// (PyErr_CheckSignals): a KeyboardInterrupt (or whatever a handler raises) asks the call to end
// (Call::stop: train's TrainOptions::stop, a flag generate's and evaluate's callbacks check; a call
// still queued behind another thread's is dropped) and is raised once the worker has finished
// with it. A call with no way to end early runs to its end first, and its result is dropped: as
// if the KeyboardInterrupt had come just after it returned.
//
// Calls are serialised (one worker): the library's parallel regions use the cores already. A
// Python callback the library calls (on_token, on_text, log) runs on the worker holding the GIL; a
// call made from it runs there at once (it is nested in the call the worker is running). A
// training callback runs on the calling thread instead (Call::on_caller), where a call it makes runs
// at once too, with SIGINT and SIGTERM blocked on that thread while it does.
#pragma once

#include <pybind11/pybind11.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace looplm_python {

namespace py = pybind11;

// How often a waiting caller runs Python's signal handlers.
constexpr std::chrono::milliseconds kPoll{50};

// Thrown on the worker (from a library callback) to end a call a signal interrupted.
struct Interrupted {};

inline sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

// SIGINT and SIGTERM blocked on this thread while alive (threads it starts inherit the mask).
class SignalsBlocked {
 public:
  SignalsBlocked() {
    const sigset_t s = stop_signals();
    pthread_sigmask(SIG_BLOCK, &s, &old_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

namespace detail {

struct Job {
  std::function<void()> run;                // on the worker
  bool started = false, done = false;
  std::exception_ptr error;                 // what run threw
  const std::function<void()>* request = nullptr;  // on_caller: for the calling thread to run
  bool request_done = false;
  std::exception_ptr request_error;
};

struct Worker {
  std::mutex m;
  std::condition_variable work;    // the worker: a job came, or a request was answered
  std::condition_variable done;    // callers: a job ended, or asks its caller for something
  std::deque<Job*> queue;
  bool running = false;            // the thread exists (not after fork(), in the child)
};

// Never destroyed: the detached worker waits on it until the process ends.
inline Worker*& worker_ptr() {
  static Worker* w = new Worker;
  return w;
}
inline thread_local bool t_on_worker = false;   // this thread is the worker
inline thread_local int t_serving = 0;          // this thread runs a callback for a call on the worker

inline void worker_loop(Worker* w) {
  t_on_worker = true;
  {
    const sigset_t s = stop_signals();  // (already inherited from the thread that started it)
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
  }
  // A Python thread state of its own, kept for good: callbacks then take the GIL cheaply and
  // see the same thread-local Python state from one token to the next.
  PyGILState_Ensure();
  PyEval_SaveThread();
  std::unique_lock<std::mutex> lk(w->m);
  for (;;) {
    w->work.wait(lk, [&] { return !w->queue.empty(); });
    Job* j = w->queue.front();
    w->queue.pop_front();
    j->started = true;
    lk.unlock();
    try {
      j->run();
    } catch (...) {
      j->error = std::current_exception();
    }
    lk.lock();
    j->done = true;
    w->done.notify_all();
  }
}

inline Worker& worker() {
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] {
    // A child of fork() has no worker thread: it starts its own at its first call.
    pthread_atfork(nullptr, nullptr, [] { worker_ptr() = new Worker; });
  });
  Worker* w = worker_ptr();
  std::lock_guard<std::mutex> lk(w->m);
  if (!w->running) {
    SignalsBlocked blocked;  // the new thread starts with them blocked
    std::thread(worker_loop, w).detach();
    w->running = true;
  }
  return *w;
}

}  // namespace detail

// One call into the library from Python. Construct it, give stop() to the library or check() it
// in the library's callbacks (a signal's exception sets it), then run(f) with the GIL held: f
// runs on the worker and its result or exception comes back; a KeyboardInterrupt that came
// meanwhile is raised instead.
class Call {
 public:
  Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Set once a signal's exception asked the call to end.
  const std::atomic<bool>* stop() const { return &stop_; }
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }
  // In a library callback on the worker: end the call (Interrupted) once asked to.
  void check() const {
    if (stopping()) throw Interrupted{};
  }

  template <class F>
  auto run(F&& f) -> decltype(f()) {
    using R = decltype(f());
    if (detail::t_on_worker) {  // nested in the worker's call (a callback's): at once
      py::gil_scoped_release nogil;
      return f();
    }
    if (detail::t_serving > 0) {  // from a training callback on the calling thread: here, at once
      py::gil_scoped_release nogil;
      SignalsBlocked blocked;
      return f();
    }
    std::optional<std::conditional_t<std::is_void_v<R>, char, R>> result;
    detail::Job job;
    job.run = [&] {
      if constexpr (std::is_void_v<R>)
        f();
      else
        result.emplace(f());
    };
    wait(job);
    if (pending_) throw std::move(*pending_);
    if (job.error) {
      try {
        std::rethrow_exception(job.error);
      } catch (const Interrupted&) {  // (only once pending_ was set)
        PyErr_SetNone(PyExc_KeyboardInterrupt);
        throw py::error_already_set();
      }
    }
    if constexpr (!std::is_void_v<R>) return std::move(*result);
  }

  // On the worker: f runs on the calling thread, holding the GIL, and then that thread runs
  // Python's signal handlers (an exception from them asks the call to stop). Returns after both;
  // rethrows what f threw. Outside run(): f runs here, with the GIL.
  void on_caller(const std::function<void()>& f) {
    if (!job_) {
      py::gil_scoped_acquire gil;
      f();
      return;
    }
    detail::Worker& w = *worker_;
    std::unique_lock<std::mutex> lk(w.m);
    job_->request = &f;
    job_->request_done = false;
    job_->request_error = nullptr;
    w.done.notify_all();
    w.work.wait(lk, [&] { return job_->request_done; });
    if (job_->request_error) std::rethrow_exception(job_->request_error);
  }

 private:
  // With the GIL: run Python's signal handlers; keep the first exception one raises and ask the
  // call to stop (a second Ctrl-C while it ends is dropped).
  void check_signals() {
    if (PyErr_CheckSignals() == 0) return;
    if (pending_) {
      PyErr_Clear();
      return;
    }
    pending_.emplace();  // fetches (and clears) the error
    stop_ = true;
  }

  void wait(detail::Job& job) {
    detail::Worker& w = detail::worker();
    worker_ = &w;
    job_ = &job;
    py::gil_scoped_release nogil;
    std::unique_lock<std::mutex> lk(w.m);
    w.queue.push_back(&job);
    w.work.notify_all();
    auto ready = [&] { return job.done || job.request; };
    for (;;) {
      w.done.wait_for(lk, kPoll, ready);
      if (job.done) break;
      if (job.request) {
        const std::function<void()>* f = job.request;
        job.request = nullptr;
        lk.unlock();
        std::exception_ptr error;
        {
          py::gil_scoped_acquire gil;
          ++detail::t_serving;
          try {
            (*f)();
          } catch (...) {
            error = std::current_exception();
          }
          --detail::t_serving;
          check_signals();
        }
        lk.lock();
        job.request_error = error;
        job.request_done = true;
        w.work.notify_all();
        continue;
      }
      lk.unlock();
      {
        py::gil_scoped_acquire gil;
        check_signals();
      }
      lk.lock();
      if (pending_ && !job.started && !job.done) {  // not begun: it never will
        for (auto it = w.queue.begin(); it != w.queue.end(); ++it)
          if (*it == &job) {
            w.queue.erase(it);
            break;
          }
        job.done = true;
      }
    }
    job_ = nullptr;
  }

  std::atomic<bool> stop_{false};
  std::optional<py::error_already_set> pending_;  // the exception a signal handler raised
  detail::Worker* worker_ = nullptr;
  detail::Job* job_ = nullptr;  // while run() waits for it
};

// A call with no way to end early: f on the worker, its result here.
template <class F>
auto library_call(F&& f) -> decltype(f()) {
  Call c;
  return c.run(std::forward<F>(f));
}

}  // namespace looplm_python
