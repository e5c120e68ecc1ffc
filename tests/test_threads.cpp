// The adaptive compute pool (core/threads.h): the sizing rule, and one thread fewer beside a
// process that keeps a core busy. (How much faster that is is a benchmark: looplm bench --contended.)
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <chrono>
#include <cmath>

#include <vector>

#include <omp.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/weight_format.h"
#include "core/threads.h"
#include "looplm/looplm.h"

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

// A command's first parallel region already knows the load: the first adapt_threads after
// set_threads(0) decides on at least 50 ms since then (sleeping for the rest), not after the
// first 250 ms of work, by which time a short command is over.
TEST(Threads, TheFirstParallelRegionKnowsTheLoad) {
  if (cores_available() < 2) GTEST_SKIP() << "one core";
  char sh[] = "/bin/sh", c[] = "-c", loop[] = "while :; do :; done";
  char* args[] = {sh, c, loop, nullptr};
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, args, environ), 0);
  usleep(200000);  // the neighbour is spinning
  // t0 before set_threads, whose window the 50 ms count from: however slowly set_threads runs (a
  // sanitizer build on a loaded machine took over 5 ms), adapt_threads returns ≥ 50 ms after t0.
  const auto t0 = std::chrono::steady_clock::now();
  set_threads(0);
  adapt_threads();  // at once: no work done since set_threads
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int threads = current_threads();
  const double other = measured_other_load();
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_GE(waited, 0.049);  // (1 ms of slack: the sleep is computed in double seconds)
  EXPECT_LT(waited, 0.5);
  EXPECT_GE(other, 0.6);
  EXPECT_LE(threads, cores_available() - 1);
  set_threads(0);
}

// ThreadCap bounds parallel regions while it lives, adaptive or fixed, and nests.
TEST(Threads, CapForWorkTooSmallToSplit) {
  set_threads(2);
  EXPECT_EQ(current_threads(), 2);
  {
    ThreadCap one(1);
    EXPECT_EQ(current_threads(), 1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    {
      ThreadCap none(0);  // no cap of its own: the outer one holds
      EXPECT_EQ(current_threads(), 1);
    }
    EXPECT_EQ(current_threads(), 1);
  }
  EXPECT_EQ(current_threads(), 2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  {
    ThreadCap none(0);
    EXPECT_EQ(current_threads(), 2);
  }
  set_threads(0);
}

// Training's GEMMs give the same bits at any thread count (the adaptive pool may change its size
// between steps of a run that must resume bit-exactly): the forward (x W^T) and input-gradient
// (dy W) products of the presets' shapes through oneDNN, and weight gradients (dy^T x) through the
// fixed-split GEMM. Shapes: rows 512..3072 of the presets and tests, widths 32..1536.
TEST(Threads, GemmBitsDoNotDependOnTheThreadCount) {
  struct Shape { bool ta, tb; int M, N, K; };
  const Shape shapes[] = {
      {false, true, 512, 192, 64},   {false, true, 768, 384, 128},  {false, true, 2048, 1152, 384},
      {false, true, 2048, 256, 384}, {false, false, 512, 64, 256},  {false, false, 768, 128, 512},
      {false, false, 2048, 384, 1536}, {false, false, 3072, 64, 192},
      {true, false, 64, 64, 512},    {true, false, 192, 64, 512},   {true, false, 1152, 384, 2048},
      {true, false, 384, 1536, 2048}, {true, false, 65, 128, 768},  {true, false, 32, 96, 64}};
  for (const Shape& s : shapes) {
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<float> A((size_t)s.M * s.K), B((size_t)s.K * s.N);
    uint32_t h = 1;
    for (auto& v : A) v = (float)((h = h * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    for (auto& v : B) v = (float)((h = h * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    std::vector<float> ref;
    for (int threads : {1, 2, 3, 4}) {
      set_threads(threads);
      std::vector<float> C((size_t)s.M * s.N, 0.25f);
      gemm_fixed_split(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, s.ta ? 1.0f : 0.0f, C.data(), s.N);
      if (ref.empty()) ref = C;
      EXPECT_TRUE(C == ref) << (s.ta ? "T" : "N") << (s.tb ? "T" : "N") << " " << s.M << "x" << s.N << "x" << s.K
                            << " at " << threads << " threads";
    }
  }
  set_threads(0);
}

// Several host threads at once (a server's, a Python program's): a ThreadCap limits only the
// thread that holds it, each thread's OpenMP count follows the pool, and one loaded model serves
// threads generating and evaluating at the same time with the results each gets alone.
TEST(Threads, OneModelServesSeveralThreadsAtOnce) {
  set_threads(2);
  {
    std::atomic<int> stage{0};
    int inside = -1, outside = -1, outside_omp = -1;
    std::thread capped([&] {
      ThreadCap one(1);
      inside = current_threads();
      stage = 1;
      while (stage < 2) std::this_thread::yield();
    });
    while (stage < 1) std::this_thread::yield();
    std::thread other([&] {
      adapt_threads();
      outside = current_threads();
      outside_omp = omp_get_max_threads();
    });
    other.join();
    stage = 2;
    capped.join();
    EXPECT_EQ(inside, 1);
    EXPECT_EQ(outside, 2) << "another thread's cap does not hold here";
    EXPECT_EQ(outside_omp, 2);
  }
  set_threads(0);

  Config c = load_preset("looped");
  c.d_model = 48;
  c.n_heads = 2;
  c.context = 32;
  c.init_std = 0.3;
  const LanguageModel lm = LanguageModel::from_config(c, 5);
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 4; ++p) {
    std::vector<int32_t> t;
    for (int i = 0; i < 5 + 3 * p; ++i) t.push_back((i * 31 + p * 17) % 90 + 32);
    prompts.push_back(t);
  }
  GenerateOptions g;
  g.max_new = 40;  // past the context: window restarts too
  g.temperature = 0.8;
  std::vector<std::vector<int32_t>> alone;
  for (size_t p = 0; p < prompts.size(); ++p) {
    g.seed = p;
    alone.push_back(lm.generate(prompts[p], g));
  }
  std::vector<int32_t> text;
  for (int i = 0; i < 3 * c.context + 1; ++i) text.push_back((i * 7) % 90 + 32);
  const double loss_alone = lm.evaluate(text).loss;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<int32_t>> got(prompts.size());
    double loss = 0;
    std::vector<std::thread> th;
    for (size_t p = 0; p < prompts.size(); ++p)
      th.emplace_back([&, p] {
        GenerateOptions gp = g;
        gp.seed = p;
        got[p] = lm.generate(prompts[p], gp);
      });
    th.emplace_back([&] { loss = lm.evaluate(text).loss; });
    for (auto& t : th) t.join();
    EXPECT_EQ(got, alone) << "round " << round;
    EXPECT_EQ(loss, loss_alone) << "round " << round;
  }
}

// The balanced loop of the matrix-vector products (backend/cpu/parallel.h): every item exactly
// once, in chunks of `grain` that start at multiples of it, at any thread count (more threads than
// cores included) and with shares left to steal.
TEST(Threads, BalancedLoopRunsEveryItemOnce) {
  for (int threads : {1, 2, 3, 5})
    for (int64_t n : {0, 1, 7, 100, 1000})
      for (int64_t grain : {1, 3, 64}) {
        set_threads(threads);
        std::vector<std::atomic<int>> seen(n);
        std::atomic<bool> misplaced{false};
        parallel_balanced(n, grain, true, [&](int64_t lo, int64_t count) {
          // One thread: one call over everything; else chunks.
          const bool whole = current_threads() == 1 && lo == 0 && count == n;
          if (!whole && (lo % grain || count < 1 || count > grain || lo + count > n)) misplaced = true;
          for (int64_t i = lo; i < lo + count; ++i) seen[i]++;
        });
        int64_t wrong = 0;
        for (auto& s : seen) wrong += s.load() != 1;
        EXPECT_EQ(wrong, 0) << threads << " threads, n " << n << ", grain " << grain;
        EXPECT_FALSE(misplaced) << threads << " threads, n " << n << ", grain " << grain;
      }
  set_threads(0);
}

// A thread held up in its first chunk has the back of its share taken by the other, which then
// goes on from there: thread 0 waits (up to 10 s) in its first chunk until thread 1 has done the
// last chunk of thread 0's share, which only a steal can give it (thread 1 starts once thread 0
// holds its first chunk, so that it cannot take the whole share before thread 0 begins).
TEST(Threads, BalancedLoopHandsASlowThreadsShareToTheOther) {
  set_threads(2);
  constexpr int64_t n = 64;  // two shares of 32 chunks of one item
  std::vector<std::atomic<int>> by(n);
  for (auto& b : by) b = -1;
  std::atomic<int> team{0};
  parallel_balanced(n, 1, true, [&](int64_t lo, int64_t) {
    const int id = omp_get_thread_num();
    team = omp_get_num_threads();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    if (id == 1 && lo == n / 2)  // its own first chunk
      while (by[0] != 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    by[lo] = id;
    if (id == 0 && lo == 0 && team == 2)
      while (by[n / 2 - 1] != 1 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  });
  set_threads(0);
  if (team != 2) GTEST_SKIP() << "the region had " << team << " thread(s)";
  EXPECT_EQ(by[0], 0);
  EXPECT_EQ(by[n / 2 - 1], 1) << "the back of the held-up thread's share was not taken";
  for (int64_t i = 0; i < n; ++i) EXPECT_GE(by[i], 0) << "item " << i << " never ran";
}

// Decoding's matrix-vector products give the same bits at any thread count: the balanced loop
// moves chunks between threads but each output row is one kernel's sum whichever thread runs it.
// Every weight format and kernel; rows not a multiple of any chunk, several chunks per thread.
TEST(Threads, MatrixVectorBitsDoNotDependOnTheThreadCount) {
  const int R = 1000, C = 512;
  std::vector<float> W((size_t)R * C), x(C);
  uint32_t h = 7;
  for (auto& v : W) v = (float)((h = h * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
  for (auto& v : x) v = (float)((h = h * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
  for (const WeightFormat* f : weight_formats()) {
    std::vector<uint8_t> packed(f->pack ? f->packed_bytes(R, C) : 0);
    if (f->pack) f->pack(W.data(), R, C, packed.data());
    const void* p = f->pack ? (const void*)packed.data() : (const void*)W.data();
    for (GemvKernel k : f->kernels()) {
      std::vector<float> ref;
      for (int threads : {1, 2, 3, 4}) {
        set_threads(threads);
        std::vector<float> y(R, 0.5f);
        f->gemv(R, C, p, x.data(), y.data(), true, k);
        if (ref.empty()) ref = y;
        EXPECT_TRUE(y == ref) << f->name << " kernel " << (int)k << " at " << threads << " threads";
      }
    }
  }
  set_threads(0);
}
