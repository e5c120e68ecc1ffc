#include "core/arena.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

#include "looplm/error.h"

namespace looplm {

void* alloc_working(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const bool huge = bytes >= kHuge;
  const size_t align = huge ? kHuge : 64;
  const size_t size = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size);
  if (!p) throw std::bad_alloc();
  if (huge) madvise(p, size, MADV_HUGEPAGE);  // advice only: ignored where THP is off
  return p;
}

void FreeDeleter::operator()(void* p) const { std::free(p); }

Arena::~Arena() {
  for (auto& b : blocks_) std::free(b.base);
}

void* Arena::alloc(size_t bytes, size_t align) {
  for (; cur_ < blocks_.size(); ++cur_) {
    Block& b = blocks_[cur_];
    size_t start = (b.used + align - 1) / align * align;
    if (start + bytes <= b.size) {
      in_use_ += start + bytes - b.used;
      b.used = start + bytes;
      if (in_use_ > high_water_) high_water_ = in_use_;
      return b.base + start;
    }
    if (cur_ + 1 < blocks_.size()) in_use_ += b.size - b.used, b.used = b.size;  // skip the tail
  }
  size_t size = bytes + align;
  if (size < (size_t(16) << 20)) size = size_t(16) << 20;
  blocks_.push_back({static_cast<uint8_t*>(alloc_working(size)), size, 0});
  cur_ = blocks_.size() - 1;
  return alloc(bytes, align);
}

void Arena::rewind(const Mark& m) {
  if (blocks_.empty()) return;
  LOOPLM_ASSERT(m.block <= cur_ && m.in_use <= in_use_, "Arena::rewind to a mark ahead of the arena");
  for (size_t i = m.block + 1; i < blocks_.size(); ++i) blocks_[i].used = 0;
  blocks_[m.block].used = m.used;
  cur_ = m.block;
  in_use_ = m.in_use;
}

void Arena::reset() {
  if (blocks_.size() > 1) {  // the step needed more than one block: merge for next time
    size_t total = 0;
    for (auto& b : blocks_) { total += b.size; std::free(b.base); }
    blocks_.clear();
    blocks_.push_back({static_cast<uint8_t*>(alloc_working(total)), total, 0});
  }
  for (auto& b : blocks_) b.used = 0;
  cur_ = 0;
  in_use_ = 0;
}

size_t Arena::bytes_reserved() const {
  size_t s = 0;
  for (auto& b : blocks_) s += b.size;
  return s;
}

GradPool::~GradPool() {
  for (float* p : owned_) std::free(p);
}

float* GradPool::acquire(size_t n) {
  in_use_ += n * sizeof(float);
  if (in_use_ > peak_) peak_ = in_use_;
  auto it = free_.find(n);
  if (it != free_.end() && !it->second.empty()) {
    float* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  float* p = static_cast<float*>(alloc_working(n * sizeof(float)));
  owned_.push_back(p);
  reserved_ += n * sizeof(float);
  return p;
}

void GradPool::release(float* p, size_t n) {
  in_use_ -= n * sizeof(float);
  free_[n].push_back(p);
}

}  // namespace looplm
