// The canonical order of a step's gradient sum (train/distributed.h): N ranks, each summing its
// block of micro-batches, end with one process's bits, by the butterfly (N and G/N powers of two)
// and by the gathered tree (any other N). Ranks are threads here, joined by a shared-memory
// communicator, so this runs without MPI; tests/mpi_train.sh runs the real thing.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "looplm/error.h"
#include "train/distributed.h"

namespace looplm {
namespace {

// Ranks as threads: every collective is a write to the rank's slot, a barrier, the reads, a barrier.
struct SharedMemory {
  explicit SharedMemory(int n) : slots((size_t)n), sync(n) {}
  std::vector<std::vector<char>> slots;
  std::barrier<> sync;
};

class ThreadRank final : public Communicator {
 public:
  ThreadRank(SharedMemory& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return (int)s_.slots.size(); }
  void sendrecv(const void* send, void* recv, size_t bytes, int peer) override {
    post(send, bytes);
    std::memcpy(recv, s_.slots[(size_t)peer].data(), bytes);
    s_.sync.arrive_and_wait();
  }
  void allgather(const void* send, size_t bytes, void* recv) override {
    post(send, bytes);
    for (int q = 0; q < size(); ++q) std::memcpy((char*)recv + (size_t)q * bytes, s_.slots[(size_t)q].data(), bytes);
    s_.sync.arrive_and_wait();
  }
  void broadcast(void* data, size_t bytes) override {
    post(data, bytes);
    std::memcpy(data, s_.slots[0].data(), bytes);
    s_.sync.arrive_and_wait();
  }

 private:
  void post(const void* p, size_t bytes) {
    s_.slots[(size_t)rank_].assign((const char*)p, (const char*)p + bytes);
    s_.sync.arrive_and_wait();
  }
  SharedMemory& s_;
  int rank_;
};

// Micro-batch i's "gradient": values of very different magnitudes, so any other order of the
// additions changes bits.
std::vector<float> micro_gradient(int i, size_t n) {
  std::mt19937 rng(1234 + i);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> g(n);
  for (size_t k = 0; k < n; ++k) g[k] = u(rng) * std::ldexp(1.0f, (int)(rng() % 40) - 20);
  return g;
}

struct Summed {
  std::vector<float> grads;
  double loss = 0;
};

Summed sum_on(Communicator& comm, int G, size_t n, size_t bucket_bytes) {
  GradientSum sum(comm, G, bucket_bytes);
  Summed out;
  out.grads.assign(n, 0.0f);
  for (int step = 0; step < 2; ++step) {  // twice: the buffers are reused
    sum.begin(out.grads);
    for (int j = 0; j < sum.count(); ++j) {
      const int i = (int)sum.first_micro() + j;
      const auto g = micro_gradient(i, n);
      std::copy(g.begin(), g.end(), out.grads.begin());
      sum.add(0.1 * std::pow(3.7, i));
    }
    out.loss = sum.finish();
  }
  return out;
}

Summed on_ranks(int N, int G, size_t n, size_t bucket_bytes) {
  SharedMemory mem(N);
  std::vector<Summed> got((size_t)N);
  std::vector<std::thread> ranks;
  for (int r = 0; r < N; ++r)
    ranks.emplace_back([&, r] {
      ThreadRank comm(mem, r);
      got[(size_t)r] = sum_on(comm, G, n, bucket_bytes);
    });
  for (auto& t : ranks) t.join();
  for (int r = 1; r < N; ++r) {
    EXPECT_EQ(std::memcmp(got[0].grads.data(), got[(size_t)r].grads.data(), n * sizeof(float)), 0) << "rank " << r;
    EXPECT_EQ(got[0].loss, got[(size_t)r].loss) << "rank " << r;
  }
  return got[0];
}

TEST(GradientSum, RanksGiveOneProcessesBits) {
  const size_t n = 1000;  // with 1 KiB buckets: several buckets and a partial last one
  for (int G : {1, 2, 3, 4, 6, 8, 12, 16}) {
    const Summed one = sum_on(world_of_one(), G, n, 1024);
    for (int N : {2, 3, 4, 8}) {
      if (G % N != 0) continue;
      const Summed many = on_ranks(N, G, n, 1024);
      EXPECT_EQ(std::memcmp(one.grads.data(), many.grads.data(), n * sizeof(float)), 0) << "G " << G << ", N " << N;
      EXPECT_EQ(one.loss, many.loss) << "G " << G << ", N " << N;
    }
  }
}

TEST(GradientSum, OneProcessIsThePairwiseTree) {
  // G = 6: ((0+1)+(2+3)) + (4+5), the loss the same way.
  const size_t n = 64;
  const Summed got = sum_on(world_of_one(), 6, n, 4u << 20);
  std::vector<std::vector<float>> g;
  for (int i = 0; i < 6; ++i) g.push_back(micro_gradient(i, n));
  for (size_t k = 0; k < n; ++k) {
    const float want = ((g[0][k] + g[1][k]) + (g[2][k] + g[3][k])) + (g[4][k] + g[5][k]);
    ASSERT_EQ(got.grads[k], want) << k;
  }
  auto l = [](int i) { return 0.1 * std::pow(3.7, i); };
  EXPECT_EQ(got.loss, ((l(0) + l(1)) + (l(2) + l(3))) + (l(4) + l(5)));
}

TEST(GradientSum, BlocksOfTheTree) {
  using Nodes = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(block_nodes(0, 6), (Nodes{{0, 4}, {4, 2}}));
  EXPECT_EQ(block_nodes(3, 3), (Nodes{{3, 1}, {4, 2}}));
  EXPECT_EQ(block_nodes(4, 4), (Nodes{{4, 4}}));
}

TEST(GradientSum, RanksMustDivideTheGlobalBatch) {
  SharedMemory mem(2);
  ThreadRank comm(mem, 0);
  EXPECT_THROW(GradientSum(comm, 3), UsageError);
}

}  // namespace
}  // namespace looplm

// The library on its own (these tests, the Python module, a program of yours) has no MPI: under a
// launcher of several ranks start_distributed refuses (each rank would train alone); one rank, or
// no launcher, goes on as one process; end_distributed gives the code back. (The looplm binary's
// MPI communicator replaces both: tests/mpi_train.sh.)
TEST(Distributed, LibraryAloneRefusesSeveralRanks) {
  using namespace looplm;
  const char* before = std::getenv("OMPI_COMM_WORLD_SIZE");
  const std::string saved = before ? before : "";
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_THROW(start_distributed(), UsageError);
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  EXPECT_NO_THROW(start_distributed());
  unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_NO_THROW(start_distributed());
  EXPECT_EQ(end_distributed(3), 3);
  EXPECT_EQ(world().size(), 1);
  if (before) setenv("OMPI_COMM_WORLD_SIZE", saved.c_str(), 1);
}
