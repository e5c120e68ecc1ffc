#include "model/params.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "core/arena.h"
#include "core/memory.h"
#include "core/rng.h"
#include "io/mapped_file.h"

namespace looplm {

std::string Init::describe() const {
  char b[64];
  switch (kind) {
    case Kind::Normal: std::snprintf(b, sizeof b, "N(0, %.4g)", a); break;
    case Kind::Uniform: std::snprintf(b, sizeof b, "U(±%.4g)", a); break;
    case Kind::Eye: std::snprintf(b, sizeof b, "%.6g·I", a); break;
    default: std::snprintf(b, sizeof b, "%.6g", a);
  }
  return b;
}

int ParamStore::add(const std::string& name, std::vector<int64_t> shape, Init init) {
  LOOPLM_ASSERT(!values_, "ParamStore::add after the values exist");
  LOOPLM_ASSERT(find(name) < 0, "duplicate parameter name");
  ParamInfo p;
  p.name = name;
  p.numel = 1;
  for (auto s : shape) p.numel *= (size_t)s;
  p.shape = std::move(shape);
  p.offset = total_;
  p.decay = p.shape.size() >= 2;
  p.init = init;
  total_ += p.numel;
  infos_.push_back(std::move(p));
  return (int)infos_.size() - 1;
}

void ParamStore::allocate(bool with_grads) {
  LOOPLM_ASSERT(!values_, "ParamStore: values already exist");
  // Training keeps values, gradients and AdamW's two moments: 4 floats a parameter.
  require_memory(4.0 * (double)total_ * (with_grads ? 4 : 1),
                 "a model of " + std::to_string(total_) + " parameters" +
                     (with_grads ? " with its gradients and AdamW moments" : ""),
                 "a smaller d_model, fewer blocks or a smaller vocab_size");
  auto zeros = [&] {
    auto* p = static_cast<float*>(std::calloc(std::max<size_t>(total_, 1), sizeof(float)));
    if (!p) throw std::bad_alloc();
    return p;
  };
  value_store_.reset(zeros());
  values_ = value_store_.get();
  if (with_grads) {
    grad_store_.reset(zeros());
    grads_ = grad_store_.get();
  }
}

void ParamStore::attach(float* values, std::shared_ptr<const io::Bytes> owner) {
  LOOPLM_ASSERT(!values_, "ParamStore: values already exist");
  values_ = values;
  owner_ = std::move(owner);
}

int ParamStore::find(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i)
    if (infos_[i].name == name) return (int)i;
  return -1;
}

void ParamStore::init(uint64_t seed) {
  Rng rng(seed, kStreamInit);
  for (size_t i = 0; i < infos_.size(); ++i) {
    const ParamInfo& p = infos_[i];
    float* w = value((int)i);
    switch (p.init.kind) {
      case Init::Kind::Normal:
        for (size_t j = 0; j < p.numel; ++j) w[j] = (float)(rng.normal() * p.init.a);
        break;
      case Init::Kind::Uniform:
        for (size_t j = 0; j < p.numel; ++j) w[j] = (float)((2.0 * rng.uniform() - 1.0) * p.init.a);
        break;
      case Init::Kind::Constant:
        std::fill(w, w + p.numel, (float)p.init.a);
        break;
      case Init::Kind::Eye: {
        LOOPLM_ASSERT(p.shape.size() == 2 && p.shape[0] == p.shape[1], "Init::eye of a param that is not square");
        std::fill(w, w + p.numel, 0.0f);
        for (int64_t j = 0; j < p.shape[0]; ++j) w[j * p.shape[0] + j] = (float)p.init.a;
        break;
      }
    }
  }
}

Node* ParamStore::view(int first, int last, int64_t rows, int64_t cols) {
  LOOPLM_ASSERT(values_, "ParamStore::view before the values exist");
  size_t n = 0;
  for (int i = first; i <= last; ++i) {
    LOOPLM_ASSERT(i == first || infos_[i].offset == infos_[i - 1].offset + infos_[i - 1].numel, "view over non-adjacent params");
    n += infos_[i].numel;
  }
  LOOPLM_ASSERT((size_t)(rows * cols) == n, "view shape does not match the params");
  Node& node = nodes_.emplace_back();
  node.v = value(first);
  node.g = grads_ ? grad(first) : nullptr;
  node.rows = rows;
  node.cols = cols;
  node.requires_grad = grads_ != nullptr;
  node.is_param = true;
  return &node;
}

Node* ParamStore::view(int i) {
  const auto& s = infos_[i].shape;
  int64_t rows = s.size() >= 2 ? s[0] : 1;
  return view(i, i, rows, (int64_t)infos_[i].numel / rows);
}

Node* ParamStore::row(int i, int64_t r) {
  LOOPLM_ASSERT(values_, "ParamStore::row before the values exist");
  const auto& s = infos_[i].shape;
  LOOPLM_ASSERT(s.size() == 2 && r >= 0 && r < s[0], "ParamStore::row out of range");
  Node& node = nodes_.emplace_back();
  node.v = value(i) + r * s[1];
  node.g = grads_ ? grad(i) + r * s[1] : nullptr;
  node.rows = 1;
  node.cols = s[1];
  node.requires_grad = grads_ != nullptr;
  node.is_param = true;
  return &node;
}

WeightMatrix* ParamStore::matrix(int first, int last, int64_t rows, int64_t cols) {
  WeightMatrix& m = matrices_.emplace_back();
  m.node = view(first, last, rows, cols);
  m.first = first;
  m.last = last;
  return &m;
}

WeightMatrix* ParamStore::matrix(int i) {
  const auto& s = infos_[i].shape;
  LOOPLM_ASSERT(s.size() == 2, "ParamStore::matrix of a parameter that is not 2-D");
  return matrix(i, i, s[0], s[1]);
}

void ParamStore::pack(const WeightFormat& f) {
  if (prepacked_values_unset_ && prepacked_format_ != &f) {  // another format packs from the values
    for (const WeightMatrix& m : matrices_)
      if (auto it = prepacked_.find(m.first); it != prepacked_.end() && !m.read_as_values)
        prepacked_format_->unpack(it->second, m.node->rows, m.node->cols, m.node->v);
    for (WeightMatrix& m : matrices_) m.node->values_unset = false;
    prepacked_values_unset_ = false;
  }
  packed_store_.reset();
  packed_bytes_ = 0;
  format_ = &f;
  // The copies in one block of working memory (2 MB pages where the kernel gives them: a batch-1
  // product streams each matrix once per token, and from 4 KB pages it ran slower, bench/README.md
  // "Weights in 2 MB pages"); one block, since a matrix of a little over 2 MB would waste most of a
  // second huge page of its own.
  // Each copy starts on a cache line, the next one where the last ends.
  auto prepacked = [&](const WeightMatrix& m) { return prepacked_format_ == &f && prepacked_.count(m.first) > 0; };
  auto slot = [&](const Node* n) { return (f.packed_bytes(n->rows, n->cols) + 63) / 64 * 64; };
  size_t store = 0;
  for (const WeightMatrix& m : matrices_)
    if (f.pack && !prepacked(m)) store += slot(m.node);
  if (store) packed_store_.reset(static_cast<uint8_t*>(alloc_working(store)));
  size_t offset = 0;
  for (WeightMatrix& m : matrices_) {
    const Node* n = m.node;
    m.packed = {&f, n->v, n->rows, n->cols};
    if (prepacked(m)) {  // packed in the checkpoint: used in place
      m.packed.data = prepacked_.at(m.first);
      packed_bytes_ += f.packed_bytes(n->rows, n->cols);
      continue;
    }
    if (!f.pack) {  // used in place
      packed_bytes_ += f.packed_bytes(n->rows, n->cols);
      continue;
    }
    const size_t bytes = f.packed_bytes(n->rows, n->cols);
    uint8_t* mem = packed_store_.get() + offset;
    offset += slot(n);
    f.pack(n->v, n->rows, n->cols, mem);
    m.packed.data = mem;
    packed_bytes_ += bytes;
    // Packed: the attached fp32 values are not read again for products (a mapped file's pages leave
    // the resident set; values in memory stay).
    if (owner_) owner_->release(reinterpret_cast<const uint8_t*>(n->v), sizeof(float) * n->numel());
  }
}

size_t ParamStore::packed_bytes() const { return packed_bytes_; }

void ParamStore::set_prepacked(const WeightFormat& f, std::map<int, const void*> data, std::shared_ptr<const void> owner,
                               bool values_unset) {
  prepacked_format_ = &f;
  prepacked_ = std::move(data);
  prepacked_owner_ = std::move(owner);
  prepacked_values_unset_ = values_unset;
  for (WeightMatrix& m : matrices_)  // reading these values is a bug: Graph::output refuses it
    m.node->values_unset = values_unset && prepacked_.count(m.first) && !m.read_as_values;
}
void ParamStore::Free::operator()(void* p) const { std::free(p); }

void ParamStore::zero_grad() {
  if (grads_) std::fill(grads_, grads_ + total_, 0.0f);
}

}  // namespace looplm
