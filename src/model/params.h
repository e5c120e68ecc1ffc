// The parameter registry: every weight has its SPEC §6 name, shape and place in one flat buffer
// (so AdamW, gradient norms and checkpoints are single loops). Weights that one GEMM uses together
// (attn q|k|v, mlp gate|up) are registered back to back so a Node can view them as one matrix.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "ops/graph.h"

namespace looplm {

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0, numel = 0;
  bool decay = false;  // AdamW weight decay: matrices only (ndim >= 2)
};

class ParamStore {
 public:
  int add(const std::string& name, std::vector<int64_t> shape);
  void finalize();  // allocates values and grads (zeroed)
  bool finalized() const { return !values_.empty() || infos_.empty(); }

  const std::vector<ParamInfo>& infos() const { return infos_; }
  int find(const std::string& name) const;  // -1 if absent
  float* value(int i) { return values_.data() + infos_[i].offset; }
  float* grad(int i) { return grads_.data() + infos_[i].offset; }
  const float* value(int i) const { return values_.data() + infos_[i].offset; }

  // A persistent graph node over params first..last (consecutive), viewed as [rows, cols].
  Node* view(int first, int last, int64_t rows, int64_t cols);
  Node* view(int i);  // one param: [shape[0], prod(rest)] (vectors are [1, n])

  std::vector<float>& values() { return values_; }
  std::vector<float>& grads() { return grads_; }
  size_t total() const { return values_.size(); }
  void zero_grad();

  // A bf16 copy of the values (round to nearest even) for memory-bound batch-1 decoding, linked
  // into every view (Node::v_bf16). A snapshot: call again after the values change.
  void make_bf16_copy();
  bool has_bf16_copy() const { return !values_bf16_.empty(); }

 private:
  std::vector<ParamInfo> infos_;
  std::vector<float> values_, grads_;
  std::vector<uint16_t> values_bf16_;  // make_bf16_copy: the decode layout (backend/cpu/bf16.h)
  std::vector<bool> view_bf16_ok_;     // per view node: the bf16 copy's layout fits its rows
  std::deque<Node> nodes_;  // stable addresses
  size_t next_offset_ = 0;
};

}  // namespace looplm
