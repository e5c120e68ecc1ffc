// Memory for one training/inference step: a bump arena for activation values and tape closures,
// and a size-keyed pool for activation gradients (released as soon as the op that produced the
// activation has run backward, so gradient memory stays a few activations deep).
// After the first step both hold enough memory and the hot path allocates nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace looplm {

// Working memory of `bytes`, uninitialized, freed with std::free. Blocks of 2 MB or more are
// aligned to 2 MB and marked for transparent huge pages: the first pass over fresh memory then
// takes one page fault per 2 MB instead of one per 4 KB (faults are expensive in a VM, and a cold
// prefill touches all of its working memory for the first time: bench/README.md, "Cold prefill").
void* alloc_working(size_t bytes);
struct FreeDeleter { void operator()(void* p) const; };

class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  void* alloc(size_t bytes, size_t align = 64);
  template <class T>
  T* alloc_n(size_t n) { return static_cast<T*>(alloc(n * sizeof(T), alignof(T) > 64 ? alignof(T) : 64)); }
  // Forget everything allocated; keeps the memory (merged into one block if the step overflowed).
  void reset();
  // Give back everything allocated since mark() (the memory stays reserved for reuse).
  struct Mark { size_t block, used, in_use; };
  Mark mark() const { return {cur_, blocks_.empty() ? 0 : blocks_[cur_].used, in_use_}; }
  void rewind(const Mark& m);
  size_t bytes_reserved() const;
  size_t high_water() const { return high_water_; }
  size_t in_use() const { return in_use_; }

 private:
  // Allocation bumps through the blocks in order (cur_ is the one in use), so a mark is a
  // position and rewinding is setting it back.
  struct Block { uint8_t* base; size_t size; size_t used; };
  std::vector<Block> blocks_;
  size_t cur_ = 0;
  size_t in_use_ = 0, high_water_ = 0;
};

class GradPool {
 public:
  GradPool() = default;
  GradPool(const GradPool&) = delete;
  GradPool& operator=(const GradPool&) = delete;
  ~GradPool();
  float* acquire(size_t n);
  void release(float* p, size_t n);
  size_t bytes_reserved() const { return reserved_; }
  size_t bytes_in_use_peak() const { return peak_; }

 private:
  std::map<size_t, std::vector<float*>> free_;
  std::vector<float*> owned_;
  size_t reserved_ = 0, in_use_ = 0, peak_ = 0;
};

}  // namespace looplm
