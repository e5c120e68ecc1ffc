#include "ops/graph.h"

namespace looplm {

Node* Graph::node(int64_t rows, int64_t cols, bool requires_grad) {
  Node* n = values_.alloc_n<Node>(1);
  new (n) Node();
  n->rows = rows;
  n->cols = cols;
  n->v = values_.alloc_n<float>(size_t(rows * cols));
  n->requires_grad = requires_grad;
  return n;
}

float* Graph::grad_of(Node* n, bool& accumulate) {
  if (!n || !n->requires_grad) return nullptr;
  if (n->is_param) { accumulate = true; return n->g; }
  if (n->g) { accumulate = true; return n->g; }
  n->g = grads_.acquire(size_t(n->numel()));
  live_grads_.push_back(n);
  accumulate = false;
  return n->g;
}

void Graph::release_grad(Node* n) {
  if (!n || n->is_param || !n->g) return;
  grads_.release(n->g, size_t(n->numel()));
  n->g = nullptr;
  n->requires_grad = false;  // a released gradient is never written again
}

void Graph::backward(Node* loss, float scale) {
  LOOPLM_ASSERT(loss->numel() == 1, "backward() starts from a scalar");
  if (!loss->requires_grad) return;
  bool acc;
  float* g = grad_of(loss, acc);
  g[0] = scale;
  backward_seeded();
}

void Graph::backward_seeded() {
  for (size_t i = tape_.size(); i-- > 0;) {
    Entry& e = tape_[i];
    if (!e.out->g) continue;  // no gradient reached this op's output
    e.call(e.fn);
    release_grad(e.out);
  }
  tape_.clear();
}

void Graph::reset() {
  tape_.clear();
  for (Node* n : live_grads_) release_grad(n);
  live_grads_.clear();
  values_.reset();
  closures_.reset();
}

}  // namespace looplm
