// The parameter registry: every weight has its checkpoint name (docs/format.md), shape, init and
// place in one flat buffer (so AdamW, gradient norms and checkpoints are single loops). Weights that
// one GEMM uses together (attn q|k|v, mlp gate|up) are registered back to back so they can be viewed
// as one matrix.
//
// A component declares each parameter with its init (constant, normal(std), uniform(±a), computed
// from the config where the paper says so: an output projection's 1/√(2N), DeepLoop's β, a gate
// bias of +4); Model::init_weights draws them all from one seeded stream in registration order.
//
// Storage: allocate() for training (values and gradients, zeroed), or attach() to values that live
// elsewhere (a mapped checkpoint: inference needs neither gradients nor a copy). For inference,
// pack() makes each weight matrix's copy in a weight format (backend/cpu/weight_format.h).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/weight_format.h"
#include "ops/graph.h"

namespace looplm {
namespace io {
class Bytes;
}

struct Init {
  enum class Kind { Constant, Normal, Uniform, Eye };
  Kind kind = Kind::Constant;
  // Constant: the value; Normal: the standard deviation; Uniform: the bound (±a); Eye: the value
  // on the diagonal of a square [n, n] param, 0 off it (e.g. mHC's H_res bias).
  double a = 0;
  static Init zeros() { return {Kind::Constant, 0.0}; }
  static Init ones() { return {Kind::Constant, 1.0}; }
  static Init constant(double v) { return {Kind::Constant, v}; }
  static Init normal(double std) { return {Kind::Normal, std}; }
  static Init uniform(double bound) { return {Kind::Uniform, bound}; }
  static Init eye(double diagonal) { return {Kind::Eye, diagonal}; }
  std::string describe() const;  // "N(0, 0.02)", "U(±0.05)", "1"
};

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0, numel = 0;
  bool decay = false;  // AdamW weight decay: matrices only (ndim >= 2)
  Init init;
};

// A weight matrix [rows, cols] as one product sees it: the autograd node over one or more adjacent
// params (training, and inference without a format) and, after ParamStore::pack, its copy in the
// inference weight format.
struct WeightMatrix {
  Node* node = nullptr;
  PackedMatrix packed;
  int first = -1, last = -1;  // the params it covers (consecutive)
  // Besides the products, the model reads this matrix's fp32 values at inference (a tied
  // embedding's lookups, an energy block's Wᵀ products). A quantized checkpoint loaded lean
  // (LoadModelOptions::lean) dequantizes only such matrices; the components set it in bind().
  bool read_as_values = false;
};

class ParamStore {
 public:
  ParamStore() = default;
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  int add(const std::string& name, std::vector<int64_t> shape, Init init);
  // Values and (with_grads) gradients, zeroed.
  void allocate(bool with_grads = true);
  // Use `values` (total() floats, read-only) that `owner` keeps alive, e.g. a mapped checkpoint.
  void attach(float* values, std::shared_ptr<const io::Bytes> owner);
  bool has_grads() const { return grad_store_ != nullptr; }
  bool attached() const { return owner_ != nullptr; }  // values live elsewhere (attach)

  const std::vector<ParamInfo>& infos() const { return infos_; }
  int find(const std::string& name) const;  // -1 if absent
  float* value(int i) { return values_ + infos_[i].offset; }
  const float* value(int i) const { return values_ + infos_[i].offset; }
  float* grad(int i) { return grads_ + infos_[i].offset; }

  // Draw every parameter from its Init (one stream keyed by seed, in registration order).
  void init(uint64_t seed);

  // A persistent graph node over params first..last (consecutive), viewed as [rows, cols].
  Node* view(int first, int last, int64_t rows, int64_t cols);
  Node* view(int i);  // one param: [shape[0], prod(rest)] (vectors are [1, n])
  // Row r of a 2-D param as a [1, cols] node (its gradient lands in that row), e.g. one loop's
  // embedding.
  Node* row(int i, int64_t r);
  // A weight matrix for products (linear layers, the lm_head): a view that pack() also covers.
  WeightMatrix* matrix(int first, int last, int64_t rows, int64_t cols);
  WeightMatrix* matrix(int i);

  // The inference copy of every matrix in `format` (fp32: the values in place). A snapshot: pack
  // again after the values change. With attached values, each matrix's source pages are released
  // once packed, so a bf16 copy does not keep the fp32 file resident too.
  void pack(const WeightFormat& format);
  const WeightFormat* packed_format() const { return format_; }
  const std::deque<WeightMatrix>& matrices() const { return matrices_; }
  // Matrices that come packed already (a quantized checkpoint): pack(format) uses data[first param]
  // in place instead of packing the values; `owner` keeps the bytes alive.
  // `values_unset`: the fp32 values of the packed matrices not read_as_values were left unset (a
  // lean load); pack() fills them from the packed bytes before it packs into another format.
  void set_prepacked(const WeightFormat& format, std::map<int, const void*> data, std::shared_ptr<const void> owner,
                     bool values_unset = false);
  const WeightFormat* prepacked_format() const { return prepacked_format_; }
  size_t packed_bytes() const;

  std::span<float> values() { return {values_, total_}; }
  std::span<const float> values() const { return {values_, total_}; }
  std::span<float> grads() { return {grads_, has_grads() ? total_ : 0}; }
  size_t total() const { return total_; }
  void zero_grad();

 private:
  struct Free { void operator()(void* p) const; };
  std::vector<ParamInfo> infos_;
  size_t total_ = 0;
  float* values_ = nullptr;
  float* grads_ = nullptr;
  // allocate(): calloc'd, so pages never written (a lean load's unset values) take no memory
  std::unique_ptr<float[], Free> value_store_, grad_store_;
  std::shared_ptr<const io::Bytes> owner_;       // attach()
  std::deque<Node> nodes_;                       // stable addresses
  std::deque<WeightMatrix> matrices_;
  const WeightFormat* format_ = nullptr;
  const WeightFormat* prepacked_format_ = nullptr;
  std::map<int, const void*> prepacked_;
  std::shared_ptr<const void> prepacked_owner_;
  bool prepacked_values_unset_ = false;
  std::unique_ptr<uint8_t, Free> packed_store_;  // pack(): every matrix packed here, one block
  size_t packed_bytes_ = 0;
};

}  // namespace looplm
