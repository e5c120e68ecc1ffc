// The adaptive compute pool (core/threads.h): the sizing rule, and one thread fewer beside a
// process that keeps a core busy. (How much faster that is is a benchmark: looplm bench --contended.)
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>

#include "core/threads.h"

using namespace looplm;

TEST(Threads, SizingRuleWithHysteresis) {
  EXPECT_EQ(threads_for_load(2, 2, 0.0), 2);
  EXPECT_EQ(threads_for_load(2, 2, 0.5), 2);  // a little other work: keep the pool
  EXPECT_EQ(threads_for_load(2, 2, 0.7), 1);  // a core's worth nearly: one fewer
  EXPECT_EQ(threads_for_load(2, 2, 1.0), 1);
  EXPECT_EQ(threads_for_load(2, 1, 0.3), 1);  // hysteresis: not back up yet
  EXPECT_EQ(threads_for_load(2, 1, 0.1), 2);  // back up
  EXPECT_EQ(threads_for_load(2, 2, 3.0), 1);  // never below one
  EXPECT_EQ(threads_for_load(8, 8, 2.0), 6);
  EXPECT_EQ(threads_for_load(8, 6, 1.0), 7);  // partly back: 1 core of other work left
  EXPECT_EQ(threads_for_load(1, 1, 0.0), 1);
}

TEST(Threads, FewerBesideABusyProcess) {
  if (cores_available() < 2) GTEST_SKIP() << "one core";
  set_threads(0);
  char sh[] = "/bin/sh", c[] = "-c", loop[] = "while :; do :; done";
  char* args[] = {sh, c, loop, nullptr};
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, args, environ), 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  volatile double sink = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 100000; ++i) sink = sink + std::sqrt((double)i);  // this process works too
    adapt_threads();
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_GE(measured_other_load(), 0.6);
  EXPECT_LE(current_threads(), cores_available() - 1);
  set_threads(2);
  EXPECT_EQ(current_threads(), 2);  // a fixed count is kept
  adapt_threads();
  EXPECT_EQ(current_threads(), 2);
  set_threads(0);
}
