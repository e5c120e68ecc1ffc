// The autograd tape. Ops (src/ops/*.h) compute their forward at once and, when gradients are on,
// record a backward closure; backward() runs the closures in reverse.
//
// Gradient contract (one rule for every op):
//  * parameter gradients accumulate (+=): a core block visited R times sums its gradients with no
//    extra code, and micro-batches accumulate until the optimizer zeroes them;
//  * activation gradients: the first op to reach an activation overwrites a fresh buffer, later ones
//    add (grad_of() says which). A buffer returns to the pool once the op that produced the
//    activation has run its backward.
// Values live in an arena that is reset after each step; nothing is allocated on the hot path
// after the first step.
#pragma once
#include <cstdint>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "looplm/error.h"

namespace looplm {

// A 2-D view [rows, cols] of float values and (lazily) their gradient.
struct Node {
  float* v = nullptr;
  float* g = nullptr;
  int64_t rows = 0, cols = 0;
  bool requires_grad = false;
  bool is_param = false;  // grads are persistent and always accumulate
  // A weight matrix whose fp32 values a lean load left unset (its products use the packed copy):
  // an op that takes it as an input would read zeros, so Graph::output refuses it.
  bool values_unset = false;
  int64_t numel() const { return rows * cols; }
};

// Where a named intermediate was made: (name, block index, loop step). Blocks are counted over
// prelude, core and coda in order (-1: not inside a block, e.g. a loop rule's own tensors); the
// loop step is r = 1..depth for the core and the loop rule, 0 for prelude, coda and head.
struct TapSite {
  const char* name;
  int block, step;
  bool diagnostic;  // a value eval reports (its mean per loop step) under "diagnostics"
  bool descent = false;  // a per-token value [N, 1] whose fall from step to step eval counts (energy)
  const void* matrix = nullptr;  // "linear.in": the weight matrix (a WeightMatrix) this input multiplies
};

class Graph {
 public:
  Graph() { tape_.reserve(4096); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  bool grad_enabled() const { return grad_enabled_; }

  // Layers' matrix products with bf16 operands and fp32 accumulation (training with precision =
  // bf16, docs/numerics.md); everything else on the tape stays fp32.
  bool bf16_products() const { return bf16_products_; }
  void set_bf16_products(bool on) { bf16_products_ = on; }

  // A new activation; requires_grad when gradients are on and any input requires them.
  Node* node(int64_t rows, int64_t cols, bool requires_grad);
  template <class... In>
  Node* output(int64_t rows, int64_t cols, const In*... inputs) {
    LOOPLM_ASSERT(!(false || ... || (inputs && inputs->values_unset)),
                  "an op reads the fp32 values of a weight matrix a lean load left unset: the component that reads "
                  "them must mark the matrix WeightMatrix::read_as_values in bind()");
    bool rg = grad_enabled_ && (false || ... || (inputs && inputs->requires_grad));
    return node(rows, cols, rg);
  }
  // Scratch memory for the current step (freed at reset()).
  template <class T>
  T* scratch(size_t n) { return values_.alloc_n<T>(n); }

  // Working memory shared by ops that run one after another (attention's per-thread score tiles,
  // norm partial sums, widened weight panels). Persistent: grows on the first step, then never
  // reallocates. Uninitialized, and not kept when it grows: every op writes what it reads.
  float* shared_scratch(size_t n) {
    if (shared_scratch_n_ < n) {
      shared_scratch_.reset(static_cast<float*>(alloc_working(n * sizeof(float))));
      shared_scratch_n_ = n;
    }
    return shared_scratch_.get();
  }

  // Record the backward closure of the op that produced `out`. It runs only if a gradient reached
  // `out` (a branch that feeds nothing differentiable is skipped), after which out's gradient
  // buffer goes back to the pool. Closures live in the arena, so they must be trivially
  // destructible (capture pointers and numbers only).
  template <class F>
  void record(Node* out, F&& f) {
    using Fn = std::decay_t<F>;
    static_assert(std::is_trivially_destructible_v<Fn>, "tape closures capture pointers and numbers only");
    void* mem = closures_.alloc(sizeof(Fn), alignof(Fn) > 64 ? alignof(Fn) : 64);
    new (mem) Fn(std::forward<F>(f));
    tape_.push_back({mem, [](void* p) { (*static_cast<Fn*>(p))(); }, out});
  }

  // For backward closures: the gradient buffer of `n` to write into, or nullptr when `n` needs no
  // gradient. `accumulate` tells whether to add (buffer already holds a gradient) or overwrite.
  float* grad_of(Node* n, bool& accumulate);
  // Return n's gradient buffer to the pool (its producer has run backward).
  void release_grad(Node* n);

  // Run the tape backward from a scalar loss node (d loss = scale).
  void backward(Node* loss, float scale = 1.0f);
  // Run the tape backward from gradients already written into outputs (grad_of), e.g. a test
  // seeding an op's output gradient with a given tensor.
  void backward_seeded();
  // Drop the tape and every activation (parameters are untouched).
  void reset();

  size_t activation_bytes_peak() const { return values_.high_water(); }
  size_t grad_bytes_peak() const { return grads_.bytes_in_use_peak(); }

  // ---- named intermediates (docs/architecture.md). Every forward names the tensors a reader may want
  // (loop states, the inputs of each linear layer, a rule's gates) with tap(); an observer, when
  // one is set, sees each with its (name, block, loop step): eval diagnostics, calibration
  // statistics for quantization and the reference-fixture checks all read them this way. Without
  // an observer a tap costs one branch. The observer may run ops on the graph (in no-grad mode).
  using Observer = std::function<void(Graph&, const TapSite&, Node*)>;
  // diagnostics_only: the observer sees diagnostic() tensors only (eval), so forwards skip making
  // the tensors that only tap() would show.
  void set_observer(Observer o, bool diagnostics_only = false) {
    observer_ = std::move(o);
    taps_ = observer_ && !diagnostics_only;
  }
  bool observing() const { return taps_; }  // someone sees tap(): worth making a tensor for it
  void tap(const char* name, Node* x) {
    if (taps_) observer_(*this, {name, block_, step_, false}, x);
  }
  // The input x of a product with weight matrix `matrix` (every linear layer: calibration, GPTQ).
  void tap_input(const void* matrix, Node* x) {
    if (taps_) observer_(*this, {"linear.in", block_, step_, false, false, matrix}, x);
  }
  void diagnostic(const char* name, Node* x, bool descent = false) {
    if (observer_) observer_(*this, {name, block_, step_, true, descent}, x);
  }
  bool diagnosing() const { return (bool)observer_; }  // someone sees diagnostic(): worth computing one
  class At {  // RAII: taps inside come from this (block, loop step)
   public:
    At(Graph& g, int block, int step) : g_(g), b_(g.block_), s_(g.step_) { g.block_ = block; g.step_ = step; }
    ~At() { g_.block_ = b_; g_.step_ = s_; }
   private:
    Graph& g_;
    int b_, s_;
  };

  // ---- memory that does not grow with no-grad depth: everything allocated after mark() is given
  // back by rewind(mark), which only a region that recorded nothing on the tape may do (a loop
  // step run without gradients keeps only its output state; Model::trunk copies it out first).
  struct Mark { Arena::Mark values; size_t tape; };
  Mark mark() const { return {values_.mark(), tape_.size()}; }
  void rewind(const Mark& m) {
    LOOPLM_ASSERT(tape_.size() == m.tape, "Graph::rewind over ops that recorded a backward");
    values_.rewind(m.values);
  }

  class NoGrad {  // RAII: ops inside run forward only (truncated BPTT, eval, generation)
   public:
    explicit NoGrad(Graph& g) : g_(g), saved_(g.grad_enabled_) { g.grad_enabled_ = false; }
    ~NoGrad() { g_.grad_enabled_ = saved_; }
   private:
    Graph& g_;
    bool saved_;
  };

 private:
  struct Entry { void* fn; void (*call)(void*); Node* out; };
  Arena values_, closures_;
  GradPool grads_;
  std::vector<Entry> tape_;
  std::vector<Node*> live_grads_;  // activation grads handed out this step (released at reset)
  bool bf16_products_ = false;
  std::unique_ptr<float, FreeDeleter> shared_scratch_;
  size_t shared_scratch_n_ = 0;
  bool grad_enabled_ = true;
  Observer observer_;
  bool taps_ = false;
  int block_ = -1, step_ = 0;
};

}  // namespace looplm
