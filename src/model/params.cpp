#include "model/params.h"

#include <algorithm>

#include "backend/cpu/bf16.h"

namespace looplm {

int ParamStore::add(const std::string& name, std::vector<int64_t> shape) {
  LOOPLM_ASSERT(values_.empty(), "ParamStore::add after finalize");
  LOOPLM_ASSERT(find(name) < 0, "duplicate parameter name");
  ParamInfo p;
  p.name = name;
  p.numel = 1;
  for (auto s : shape) p.numel *= (size_t)s;
  p.shape = std::move(shape);
  p.offset = next_offset_;
  p.decay = p.shape.size() >= 2;
  next_offset_ += p.numel;
  infos_.push_back(std::move(p));
  return (int)infos_.size() - 1;
}

void ParamStore::finalize() {
  values_.assign(next_offset_, 0.0f);
  grads_.assign(next_offset_, 0.0f);
}

int ParamStore::find(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i)
    if (infos_[i].name == name) return (int)i;
  return -1;
}

Node* ParamStore::view(int first, int last, int64_t rows, int64_t cols) {
  LOOPLM_ASSERT(!values_.empty(), "ParamStore::view before finalize");
  size_t n = 0;
  for (int i = first; i <= last; ++i) {
    LOOPLM_ASSERT(i == first || infos_[i].offset == infos_[i - 1].offset + infos_[i - 1].numel, "view over non-adjacent params");
    n += infos_[i].numel;
  }
  LOOPLM_ASSERT((size_t)(rows * cols) == n, "view shape does not match the params");
  Node& node = nodes_.emplace_back();
  node.v = value(first);
  node.g = grad(first);
  node.rows = rows;
  node.cols = cols;
  node.requires_grad = true;
  node.is_param = true;
  bool bf16_ok = true;  // see make_bf16_copy
  for (int i = first; i <= last; ++i) {
    const int64_t R = infos_[i].shape.size() >= 2 ? infos_[i].shape[0] : 1;
    bf16_ok = bf16_ok && (int64_t)infos_[i].numel / R == cols && (first == last || R % kBf16Rows == 0);
  }
  view_bf16_ok_.push_back(bf16_ok);
  if (!values_bf16_.empty() && bf16_ok) node.v_bf16 = values_bf16_.data() + (node.v - values_.data());
  return &node;
}

Node* ParamStore::view(int i) {
  const auto& s = infos_[i].shape;
  int64_t rows = s.size() >= 2 ? s[0] : 1;
  return view(i, i, rows, (int64_t)infos_[i].numel / rows);
}

// Each matrix in the decode layout (pack_bf16: blocks of 4 rows), vectors plain. A view over
// several params keeps the layout's row-block addressing only if each of them has a multiple of 4
// rows; other views get no bf16 copy and decode reads their fp32 values.
void ParamStore::make_bf16_copy() {
  values_bf16_.resize(values_.size());
  for (const ParamInfo& p : infos_) {
    const int64_t R = p.shape.size() >= 2 ? p.shape[0] : 1;
    pack_bf16(values_.data() + p.offset, R, (int64_t)p.numel / R, values_bf16_.data() + p.offset);
  }
  for (size_t i = 0; i < nodes_.size(); ++i)
    nodes_[i].v_bf16 = view_bf16_ok_[i] ? values_bf16_.data() + (nodes_[i].v - values_.data()) : nullptr;
}

void ParamStore::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

}  // namespace looplm
