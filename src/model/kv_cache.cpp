#include "model/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/choices.h"
#include "core/memory.h"
#include "io/json_input.h"
#include "looplm/error.h"
#include "looplm/util.h"

namespace looplm {

namespace {
const Choices<KvPolicy, 4> kKvPolicies{
    "KV policy",
    {{KvPolicy::per_step, "per_step", "a token that exited early runs its missing steps for their keys and values (exact)"},
     {KvPolicy::mean, "mean", "one slot per block: the mean of the keys and values over the steps a token ran"},
     {KvPolicy::last, "last", "later steps read the last step's keys and values of a token that exited early"},
     {KvPolicy::first, "first", "later steps read the first step's keys and values of a token that exited early"}}};
}  // namespace

KvPolicy parse_kv_policy(const std::string& name) { return kKvPolicies.parse(name); }
const char* kv_policy_name(KvPolicy p) { return kKvPolicies.name(p); }
std::vector<std::string> available_kv_policies() { return kKvPolicies.names(); }

KVCache::KVCache(const Config& c, int rows, int capacity, int core_steps, int64_t width, int coda_steps, KvPolicy policy,
                 op::KvElem elem)
    : n_prelude_(c.n_prelude),
      n_core_(c.n_core),
      n_coda_(c.n_coda),
      n_heads_(c.kv_heads()),
      rows_(rows),
      capacity_(capacity),
      core_steps_(policy == KvPolicy::mean ? 1 : std::max(core_steps, 1)),
      coda_steps_(policy == KvPolicy::mean ? 1 : std::max(coda_steps, 1)),
      policy_(policy),
      averaged_(policy == KvPolicy::mean),
      elem_(elem),
      width_(width > 0 ? width : c.kv_width()) {
  LOOPLM_ASSERT(n_heads_ >= 1 && width_ % n_heads_ == 0, "KV cache: the width must split into the heads");
  slots_per_position_ = (size_t)n_prelude_ + (size_t)n_core_ * core_steps_ + (size_t)n_coda_ * coda_steps_;
  const size_t values = (size_t)rows * capacity * width_;  // per slot, for keys and for values
  const size_t scales = elem_ == op::KvElem::i8 ? (size_t)rows * n_heads_ * capacity : 0;
  auto lines = [](size_t bytes) { return (bytes + 63) / 64 * 64; };  // each array starts on a cache line
  const size_t values_bytes = lines(values * element_bytes()), slot_bytes = 2 * values_bytes + lines(2 * scales * sizeof(float));
  // calloc: zeros as before, but a page is only resident once a position in it is written, so a
  // cache sized for the whole context costs memory as the sequences grow (and no memset up front).
  data_size_ = slot_bytes * slots_per_position_;
  // The sequences fill their positions as they decode, so all of it becomes resident.
  require_memory((double)data_size_,
                 "a KV cache for " + std::to_string(rows) + " sequence" + (rows == 1 ? "" : "s") + " of up to " +
                     std::to_string(capacity) + " positions (" + format_bytes((double)data_size_ / rows) + " each)",
                 "decode fewer sequences at once (--batch) or fewer new tokens (-n)");
  data_.reset(static_cast<unsigned char*>(std::calloc(std::max<size_t>(data_size_, 1), 1)));
  if (!data_) throw std::bad_alloc();
  slots_.resize(slots_per_position_);
  for (size_t s = 0; s < slots_per_position_; ++s) {
    unsigned char* base = data_.get() + slot_bytes * s;
    slots_[s].k = base;
    slots_[s].v = base + values_bytes;
    if (scales) {
      slots_[s].k_scale = reinterpret_cast<float*>(base + 2 * values_bytes);
      slots_[s].v_scale = slots_[s].k_scale + scales;
    }
    slots_[s].elem = elem_;
    slots_[s].capacity = capacity;
    slots_[s].width = (int)width_;
  }
}

double KVCache::bytes_per_value() const {
  return (double)element_bytes() + (elem_ == op::KvElem::i8 ? sizeof(float) * (double)n_heads_ / (double)width_ : 0.0);
}

op::CacheRef KVCache::slot(int block, int step) const {
  size_t s;
  op::CacheRef ref;
  if (block < n_prelude_) {
    s = block;
  } else if (block < n_prelude_ + n_core_) {
    LOOPLM_ASSERT(averaged_ || step < core_steps_, "KV cache: loop step beyond the cache's depth");
    s = n_prelude_ + (size_t)(block - n_prelude_) * core_steps_ + (averaged_ ? 0 : step);
  } else {
    LOOPLM_ASSERT(averaged_ || step < coda_steps_, "KV cache: exit beyond the cache's coda slots");
    s = n_prelude_ + (size_t)n_core_ * core_steps_ + (size_t)(block - n_prelude_ - n_core_) * coda_steps_ +
        (averaged_ ? 0 : step);
  }
  ref = slots_[s];
  if (averaged_ && block >= n_prelude_) ref.mean_step = step;
  return ref;
}

void KVCache::token_exited(int row, int pos, int step, int depth) {
  if (step >= depth) return;  // ran every step
  if (policy_ == KvPolicy::last) replicate(row, pos, step - 1, step);
  if (policy_ == KvPolicy::first) replicate(row, pos, 0, step);
}

int64_t KVCache::slots_per_position(int steps_run, int depth, bool per_exit) const {
  int64_t slots = n_prelude_;
  switch (policy_) {
    case KvPolicy::mean: slots += n_core_ + n_coda_; break;
    case KvPolicy::per_step: slots += (int64_t)n_core_ * std::max(depth, 1) + n_coda_ * (per_exit ? depth : 1); break;
    case KvPolicy::last:
    case KvPolicy::first:  // the steps it ran; later steps point at one of them
      slots += (int64_t)n_core_ * std::max(steps_run, 1) + n_coda_ * (per_exit ? std::max(steps_run, 1) : 1);
      break;
  }
  return slots;
}

void KVCache::replicate(int row, int pos, int src, int from) {
  LOOPLM_ASSERT(!averaged_ && row < rows_ && pos < capacity_, "KV cache: replicate outside the cache");
  // Head-major (cache_ref.h): the position's values are one run of width / heads per head.
  const size_t hw = (size_t)width_ / n_heads_, eb = element_bytes(), n = eb * hw;
  auto copy = [&](size_t first_slot, int steps) {
    if (src >= steps) return;
    const op::CacheRef& a = slots_[first_slot + src];
    for (int s = from; s < steps; ++s) {
      const op::CacheRef& b = slots_[first_slot + s];
      for (int h = 0; h < n_heads_; ++h) {
        const size_t at = ((size_t)row * n_heads_ + h) * capacity_ + pos, off = eb * at * hw;
        std::memcpy(static_cast<char*>(b.k) + off, static_cast<const char*>(a.k) + off, n);
        std::memcpy(static_cast<char*>(b.v) + off, static_cast<const char*>(a.v) + off, n);
        if (a.k_scale) b.k_scale[at] = a.k_scale[at], b.v_scale[at] = a.v_scale[at];
      }
    }
  };
  for (int i = 0; i < n_core_; ++i) copy(n_prelude_ + (size_t)i * core_steps_, core_steps_);
  if (coda_steps_ > 1)
    for (int i = 0; i < n_coda_; ++i) copy(n_prelude_ + (size_t)n_core_ * core_steps_ + (size_t)i * coda_steps_, coda_steps_);
}

}  // namespace looplm
