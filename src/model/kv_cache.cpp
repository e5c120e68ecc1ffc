#include "model/kv_cache.h"

#include "looplm/error.h"

namespace looplm {

KVCache::KVCache(const Config& c, int B, int capacity, int max_depth, int64_t width)
    : n_prelude_(c.n_prelude), n_core_(c.n_core), capacity_(capacity), max_depth_(max_depth) {
  const int n_slots = c.n_prelude + c.n_core * max_depth + c.n_coda;
  const size_t per = (size_t)B * capacity * (width > 0 ? width : c.d_model);
  data_.assign(per * 2 * n_slots, 0.0f);
  slots_.resize(n_slots);
  for (int s = 0; s < n_slots; ++s) slots_[s] = {data_.data() + per * 2 * s, data_.data() + per * (2 * s + 1), capacity};
}

const KVSlot* KVCache::slot(int block, int step) const {
  int s;
  if (block < n_prelude_) s = block;
  else if (block < n_prelude_ + n_core_) {
    LOOPLM_ASSERT(step < max_depth_, "KV cache: loop step beyond the cache's depth");
    s = n_prelude_ + (block - n_prelude_) * max_depth_ + step;
  } else s = n_prelude_ + n_core_ * max_depth_ + (block - n_prelude_ - n_core_);
  return &slots_[s];
}

}  // namespace looplm
