#include "train/distributed.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "looplm/error.h"
#include "looplm/util.h"

namespace looplm {

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void sendrecv(const void*, void*, size_t, int) override { throw Error("sendrecv: a single process has no peer"); }
  void allgather(const void* send, size_t bytes, void* recv) override {
    if (bytes) std::memcpy(recv, send, bytes);
  }
  void broadcast(void*, size_t) override {}
};

std::unique_ptr<Communicator>& installed() {
  static std::unique_ptr<Communicator> c = std::make_unique<SingleProcess>();
  return c;
}

bool agreed_error = false, failed_here = false;

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The pairwise tree's rule, as a binary counter builds it: the open node ending just before a new
// node of `count` micro-batches is its left sibling when it covers as many, starting at a multiple
// of twice that.
bool left_sibling(int64_t open_start, int64_t open_count, int64_t count) {
  return open_count == count && open_start % (2 * count) == 0;
}

// dst = lower + higher, element by element (dst may be either operand). Which operand is on the left
// is fixed so every rank's and the single process's additions are the same IEEE operations.
void add_lower_higher(const float* lower, const float* higher, float* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = lower[i] + higher[i];
}

// The tree over `nodes` (consecutive ranges in order, each one summed already): merges of equal,
// aligned neighbours as they arrive, then the rest folded from the highest down. combine(lo, hi)
// stores lower + higher into slot hi. Returns the slot holding the total.
template <class Combine>
size_t fold_nodes(const std::vector<std::pair<int64_t, int64_t>>& nodes, Combine&& combine) {
  struct Open {
    size_t slot;
    int64_t start, count;
  };
  std::vector<Open> st;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Open n{i, nodes[i].first, nodes[i].second};
    while (!st.empty() && left_sibling(st.back().start, st.back().count, n.count)) {
      combine(st.back().slot, n.slot);
      n = {n.slot, st.back().start, 2 * n.count};
      st.pop_back();
    }
    st.push_back(n);
  }
  const size_t top = st.back().slot;
  for (size_t j = st.size() - 1; j-- > 0;) combine(st[j].slot, top);
  return top;
}

}  // namespace

Communicator& world() { return *installed(); }
int rank_in_job() { return world().rank(); }
Communicator& world_of_one() {
  static SingleProcess one;
  return one;
}
void set_world(std::unique_ptr<Communicator> c) { installed() = std::move(c); }
void note_agreed_error() { agreed_error = true; }
bool error_was_agreed() { return agreed_error; }
void note_error_here() {
  if (!agreed_error) failed_here = true;
}
bool failed_alone() { return failed_here; }

int launcher_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return std::getenv("PMIX_RANK") || std::getenv("PMI_RANK") ? 0 : -1;  // 0: launched, size unknown
}

// Without MPI (the library on its own: a program of yours, the Python module, the tests; or a
// looplm binary built without it): a launch of several ranks is refused, since each would train
// alone. Weak, so that the binary's MPI communicator (distributed_mpi.cpp) replaces both.
__attribute__((weak)) void start_distributed() {
  const int n = launcher_ranks();
  if (n >= 0 && n != 1)
    throw UsageError("this program runs looplm without MPI (the communicator is the looplm binary's, built when CMake "
                     "finds MPI: install libopenmpi-dev, scripts/install_deps.sh, and rebuild), so under mpirun each "
                     "rank would train alone; run one process");
}
__attribute__((weak)) int end_distributed(int code) { return code; }

bool any_rank(Communicator& comm, bool flag) {
  if (comm.size() == 1) return flag;
  std::vector<uint8_t> all((size_t)comm.size());
  const uint8_t mine = flag;
  comm.allgather(&mine, 1, all.data());
  return std::find(all.begin(), all.end(), 1) != all.end();
}

namespace {
[[noreturn]] void fail_together(const std::string& msg) {
  note_agreed_error();
  throw Error(msg);
}
}  // namespace

void agree_on_config(Communicator& comm, const std::string& config_json) {
  if (comm.size() == 1) return;
  nlohmann::json mine = nlohmann::json::parse(config_json);
  for (const char* path_key : {"data_train", "data_val", "tokenizer_file"}) mine.erase(path_key);
  std::string lead_text = mine.dump();
  broadcast_string(comm, lead_text);
  const nlohmann::json lead = nlohmann::json::parse(lead_text);
  // One flag per key of rank 0's config (and one for keys rank 0 does not have), gathered to all.
  std::vector<std::string> keys;
  for (auto it = lead.begin(); it != lead.end(); ++it) keys.push_back(it.key());
  std::vector<uint8_t> differs(keys.size() + 1, 0), all(differs.size() * (size_t)comm.size());
  for (size_t i = 0; i < keys.size(); ++i) differs[i] = !mine.contains(keys[i]) || mine.at(keys[i]) != lead.at(keys[i]);
  for (auto it = mine.begin(); it != mine.end(); ++it) differs.back() |= !lead.contains(it.key());
  comm.allgather(differs.data(), differs.size(), all.data());
  std::string msg;
  for (int q = 1; q < comm.size(); ++q) {
    std::string which;
    for (size_t i = 0; i <= keys.size(); ++i)
      if (all[(size_t)q * differs.size() + i])
        which += (which.empty() ? "" : ", ") +
                 (i < keys.size() ? keys[i] + " (rank 0: " + brief(lead.at(keys[i]).dump(), 60) + ")" : std::string("keys rank 0 lacks"));
    if (!which.empty()) msg += (msg.empty() ? "" : "; ") + ("rank " + std::to_string(q) + " differs in " + which);
  }
  if (!msg.empty())
    fail_together("the ranks disagree on the config: " + msg +
                  ". Every rank must run the same command (the same preset or config file and --set)");
}

uint64_t fingerprint(std::span<const int32_t> v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids' bytes
  for (int32_t t : v) {
    uint32_t u = (uint32_t)t;
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

void agree_on_data(Communicator& comm, const DataFingerprint& mine, const std::string& train_name, const std::string& val_name) {
  if (comm.size() == 1) return;
  std::vector<DataFingerprint> all((size_t)comm.size());
  comm.allgather(&mine, sizeof mine, all.data());
  auto describe = [](int64_t n, uint64_t h) {
    char b[64];
    std::snprintf(b, sizeof b, "%lld items, hash %016llx", (long long)n, (unsigned long long)h);
    return std::string(b);
  };
  std::string msg;
  for (int q = 1; q < comm.size(); ++q) {
    const DataFingerprint& a = all[0];
    const DataFingerprint& b = all[(size_t)q];
    if (a.train_items != b.train_items || a.train_hash != b.train_hash)
      msg += (msg.empty() ? "" : "; ") + ("rank " + std::to_string(q) + "'s training data has " + describe(b.train_items, b.train_hash) +
                                          ", rank 0's (" + train_name + ") " + describe(a.train_items, a.train_hash));
    if (a.val_items != b.val_items || a.val_hash != b.val_hash)
      msg += (msg.empty() ? "" : "; ") + ("rank " + std::to_string(q) + "'s validation data has " + describe(b.val_items, b.val_hash) +
                                          ", rank 0's (" + val_name + ") " + describe(a.val_items, a.val_hash));
  }
  if (!msg.empty())
    fail_together("the ranks disagree on the data: " + msg + ". Every rank must read the same files (tokens: ids after "
                  "tokenising; examples: their tokens)");
}

void broadcast_string(Communicator& comm, std::string& s) {
  uint64_t n = s.size();
  comm.broadcast(&n, sizeof n);
  s.resize(n);
  if (n) comm.broadcast(s.data(), n);
}

void broadcast_floats(Communicator& comm, std::span<float> v) {
  constexpr size_t kChunk = 1u << 26;  // floats: 256 MiB, well inside MPI's int counts
  for (size_t o = 0; o < v.size(); o += kChunk) comm.broadcast(v.data() + o, std::min(kChunk, v.size() - o) * sizeof(float));
}

std::vector<std::pair<int64_t, int64_t>> block_nodes(int64_t first, int64_t count) {
  std::vector<std::pair<int64_t, int64_t>> st;
  for (int64_t i = first; i < first + count; ++i) {
    std::pair<int64_t, int64_t> n{i, 1};
    while (!st.empty() && left_sibling(st.back().first, st.back().second, n.second)) {
      n = {st.back().first, 2 * n.second};
      st.pop_back();
    }
    st.push_back(n);
  }
  return st;
}

GradientSum::GradientSum(Communicator& comm, int grad_accum, size_t bucket_bytes)
    : comm_(comm), grad_accum_(grad_accum), bucket_floats_(std::max<size_t>(bucket_bytes / sizeof(float), 1)) {
  const int n = comm.size();
  if (grad_accum < 1 || grad_accum % n != 0)
    throw UsageError("grad_accum " + std::to_string(grad_accum) + " cannot be shared by " + std::to_string(n) +
                     " ranks: the global batch is grad_accum micro-batches and each rank takes an equal block of them, "
                     "so the number of ranks must divide grad_accum (e.g. --set grad_accum=" + std::to_string(n * std::max(1, (grad_accum + n - 1) / n)) + ")");
  count_ = grad_accum / n;
  first_ = (int64_t)comm.rank() * count_;
}

int GradientSum::buffers_for(int count) {
  int n = 0;
  while ((2 << n) <= count) ++n;
  return n;
}

void GradientSum::begin(std::span<float> grads) {
  grads_ = grads;
  added_ = 0;
  stack_.clear();
  free_.clear();
  for (size_t i = 0; i < pool_.size(); ++i) free_.push_back((int)i);
}

int GradientSum::take_buffer() {
  if (free_.empty()) {
    pool_.emplace_back(grads_.size());
    return (int)pool_.size() - 1;
  }
  const int b = free_.back();
  free_.pop_back();
  pool_[(size_t)b].resize(grads_.size());
  return b;
}

void GradientSum::add(double loss) {
  const bool last = added_ + 1 == count_;
  Partial p{first_ + added_, 1, -1, loss};
  ++added_;
  while (!stack_.empty() && left_sibling(stack_.back().start, stack_.back().count, p.count)) {
    const Partial lo = stack_.back();
    stack_.pop_back();
    // The block's last micro-batch keeps its sums in the gradient buffer (where the total ends);
    // an earlier one's go to a buffer of their own, as the next micro-batch needs the gradients.
    const int dst = p.buffer < 0 && last ? -1 : lo.buffer;
    add_lower_higher(data(lo.buffer), data(p.buffer), data(dst), (int64_t)grads_.size());
    if (dst < 0) free_.push_back(lo.buffer);
    else if (p.buffer >= 0) free_.push_back(p.buffer);
    p = {lo.start, 2 * p.count, dst, lo.loss + p.loss};
  }
  if (p.buffer < 0 && !last) {
    p.buffer = take_buffer();
    std::copy(grads_.begin(), grads_.end(), pool_[(size_t)p.buffer].begin());
  }
  stack_.push_back(p);
}

double GradientSum::finish() {
  LOOPLM_ASSERT(added_ == count_, "GradientSum::finish before every micro-batch of the block was added");
  if (comm_.size() > 1 && power_of_two(comm_.size()) && power_of_two(count_)) return butterfly();
  if (comm_.size() > 1) return gather_and_fold();
  // One process: the partial sums left, folded from the highest (the gradient buffer) down.
  double loss = stack_.back().loss;
  for (size_t j = stack_.size() - 1; j-- > 0;) {
    add_lower_higher(data(stack_[j].buffer), grads_.data(), grads_.data(), (int64_t)grads_.size());
    loss = stack_[j].loss + loss;
  }
  return loss;
}

// Each rank's block is one node of the tree, in the gradient buffer; level l joins the blocks of
// ranks r and r ^ 2^l, which are sibling nodes, the lower rank's on the left.
double GradientSum::butterfly() {
  LOOPLM_ASSERT(stack_.size() == 1 && stack_[0].buffer < 0, "butterfly: a block of 2^k micro-batches is one node");
  const int r = comm_.rank();
  double loss = stack_[0].loss;
  std::vector<float> recv(std::min(bucket_floats_, grads_.size()));
  for (int bit = 1; bit < comm_.size(); bit <<= 1) {
    const int peer = r ^ bit;
    const bool lower = r < peer;
    double other = 0;
    comm_.sendrecv(&loss, &other, sizeof loss, peer);
    loss = lower ? loss + other : other + loss;
    for (size_t o = 0; o < grads_.size(); o += bucket_floats_) {
      const size_t n = std::min(bucket_floats_, grads_.size() - o);
      float* mine = grads_.data() + o;
      comm_.sendrecv(mine, recv.data(), n * sizeof(float), peer);
      if (lower) add_lower_higher(mine, recv.data(), mine, (int64_t)n);
      else add_lower_higher(recv.data(), mine, mine, (int64_t)n);
    }
  }
  return loss;
}

// Any N: every rank's nodes to every rank, bucket by bucket, and the tree finished the same way
// everywhere. Ranks hold different numbers of nodes; each sends max_nodes slots (the extra unused).
double GradientSum::gather_and_fold() {
  const int n_ranks = comm_.size();
  std::vector<std::vector<std::pair<int64_t, int64_t>>> nodes_of(n_ranks);
  size_t max_nodes = 0;
  for (int q = 0; q < n_ranks; ++q) {
    nodes_of[q] = block_nodes((int64_t)q * count_, count_);
    max_nodes = std::max(max_nodes, nodes_of[q].size());
  }
  std::vector<std::pair<int64_t, int64_t>> all;
  std::vector<size_t> slot;  // of each node of `all`: its place in the gathered data
  for (int q = 0; q < n_ranks; ++q)
    for (size_t j = 0; j < nodes_of[q].size(); ++j) {
      all.push_back(nodes_of[q][j]);
      slot.push_back((size_t)q * max_nodes + j);
    }
  LOOPLM_ASSERT(stack_.size() == nodes_of[comm_.rank()].size(), "gather: this rank's nodes");
  std::vector<double> my_loss(max_nodes, 0.0), losses((size_t)n_ranks * max_nodes);
  for (size_t j = 0; j < stack_.size(); ++j) my_loss[j] = stack_[j].loss;
  comm_.allgather(my_loss.data(), max_nodes * sizeof(double), losses.data());
  std::vector<double> node_loss(all.size());
  for (size_t i = 0; i < all.size(); ++i) node_loss[i] = losses[slot[i]];
  const size_t top = fold_nodes(all, [&](size_t lo, size_t hi) { node_loss[hi] = node_loss[lo] + node_loss[hi]; });
  const double loss = node_loss[top];

  const size_t bucket = std::min(bucket_floats_, grads_.size());
  std::vector<float> send(max_nodes * bucket), recv((size_t)n_ranks * max_nodes * bucket);
  for (size_t o = 0; o < grads_.size(); o += bucket) {
    const size_t n = std::min(bucket, grads_.size() - o);
    for (size_t j = 0; j < stack_.size(); ++j) std::copy_n(data(stack_[j].buffer) + o, n, send.data() + j * bucket);
    comm_.allgather(send.data(), send.size() * sizeof(float), recv.data());
    auto at = [&](size_t node) { return recv.data() + slot[node] * bucket; };
    const size_t t = fold_nodes(all, [&](size_t lo, size_t hi) { add_lower_higher(at(lo), at(hi), at(hi), (int64_t)n); });
    std::copy_n(at(t), n, grads_.data() + o);
  }
  return loss;
}

}  // namespace looplm
