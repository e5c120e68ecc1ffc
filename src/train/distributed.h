// Data-parallel training (docs/training.md, "Data parallel (MPI)"): the ranks of one job, the
// collectives the trainer needs, and the canonical order of a step's gradient sum, which makes N
// ranks reproduce one process bit for bit.
//
// The library itself never links MPI: a process has one Communicator, the single-process one unless
// the `looplm` binary installed its MPI one (src/train/distributed_mpi.cpp, when mpirun launched it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "looplm/distributed.h"

namespace looplm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Exchange `bytes` with `peer` (both call it with each other's rank).
  virtual void sendrecv(const void* send, void* recv, size_t bytes, int peer) = 0;
  // Every rank's `bytes` from `send`, in rank order, into `recv` (size() x bytes).
  virtual void allgather(const void* send, size_t bytes, void* recv) = 0;
  // Rank 0's `bytes` at `data` to every rank.
  virtual void broadcast(void* data, size_t bytes) = 0;
};

// The process's communicator: the one set_world installed, else one rank of one.
Communicator& world();
void set_world(std::unique_ptr<Communicator> c);
// One rank of one, whatever world() is (e.g. a benchmark's steps inside a job).
Communicator& world_of_one();

// The ranks a launcher started (mpirun: OMPI_COMM_WORLD_SIZE; PMI_SIZE), 0 when launched with the
// count unknown (PMIx or PMI ranks only), -1 when no launcher started this process.
int launcher_ranks();

// True on every rank when `flag` is true on any (a stop request seen by one rank ends the step on all).
bool any_rank(Communicator& comm, bool flag);

// The ranks' agreement at the start of a run: an Error on every rank (exit 1, error_was_agreed),
// rank 0's message naming what differs. `config_json`: the run's config as this rank resolved it;
// the data paths are left out of the comparison (another machine may mount the data elsewhere):
// the data's contents are compared instead (agree_on_data).
void agree_on_config(Communicator& comm, const std::string& config_json);
struct DataFingerprint {
  int64_t train_items = 0, val_items = 0;  // tokens, or examples
  uint64_t train_hash = 0, val_hash = 0;
};
uint64_t fingerprint(std::span<const int32_t> v);
void agree_on_data(Communicator& comm, const DataFingerprint& mine, const std::string& train_name, const std::string& val_name);

// Rank 0's broadcast of a string / a vector of floats or doubles (sizes need not be known elsewhere).
void broadcast_string(Communicator& comm, std::string& s);
void broadcast_floats(Communicator& comm, std::span<float> v);

// The sum of a step's micro-batch gradients (and losses) in one fixed order, however the
// micro-batches are spread over ranks: a pairwise tree over the global micro-batch indices
// 0..G-1, built like a binary counter (push each micro-batch; while the top two partial sums cover
// equal, aligned ranges, replace them by lower + higher), the partial sums left at the end folded
// from the highest down (lower + (...)). Rank r computes micro-batches [r·G/N, (r+1)·G/N).
// Each rank builds the tree's nodes inside its block; across ranks:
//   - N and G/N powers of two: each rank holds one node; a butterfly (recursive doubling) over
//     buckets, level l pairing rank r with r ^ 2^l, both computing lower block + higher block.
//   - otherwise: every rank's nodes, bucket by bucket, to every rank (allgather), which finishes
//     the same tree itself.
// Either way every rank ends with the single process's bits. Extra memory: floor(log2(G/N))
// gradient-sized buffers (none for G/N = 1), plus a bucket (butterfly) or N x nodes x bucket
// (allgather).
class GradientSum {
 public:
  GradientSum(Communicator& comm, int grad_accum, size_t bucket_bytes = kDefaultBucketBytes);
  static constexpr size_t kDefaultBucketBytes = 4u << 20;

  // The gradient-sized buffers a block of `count` micro-batches needs beside the gradients:
  // floor(log2(count)) (the last micro-batch's sums stay in the gradient buffer).
  static int buffers_for(int count);

  int64_t first_micro() const { return first_; }  // this rank's block of micro-batches
  int count() const { return count_; }

  // A new step whose micro-batch gradients arrive in `grads`.
  void begin(std::span<float> grads);
  // The gradient of this rank's next micro-batch is in grads (and `loss` its share of the mean
  // loss): folds it in. Unless it was the block's last, grads may then be zeroed for the next.
  void add(double loss);
  // The sum over every rank's micro-batches into grads; returns the loss summed the same way.
  double finish();

 private:
  struct Partial {
    int64_t start, count;
    int buffer;  // into pool_; -1: the gradient buffer itself
    double loss;
  };
  float* data(int buffer) { return buffer < 0 ? grads_.data() : pool_[(size_t)buffer].data(); }
  int take_buffer();
  double butterfly();
  double gather_and_fold();

  Communicator& comm_;
  int grad_accum_, count_;
  int64_t first_;
  size_t bucket_floats_;
  std::span<float> grads_;
  int added_ = 0;
  std::vector<Partial> stack_;
  std::vector<std::vector<float>> pool_;
  std::vector<int> free_;
};

// The global nodes (start, count) that a block [first, first + count) of micro-batches holds after
// GradientSum::add has seen all of it: the tree's maximal subtrees inside the block, in order.
std::vector<std::pair<int64_t, int64_t>> block_nodes(int64_t first, int64_t count);

}  // namespace looplm

