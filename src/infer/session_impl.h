// DecodeSession's state (src/infer/session.cpp), shared with generate_batch (language_model.cpp),
// whose stats read the decoder's counts.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "infer/decoder.h"
#include "infer/language_model_impl.h"
#include "looplm/looplm.h"

namespace looplm {

struct SessionSlot {
  bool used = false;
  SequenceOptions opt;
  Rng rng{0, kStreamSample};
  std::vector<int32_t> seq;  // prompt and new tokens: a window restart re-runs its tail
  int made = 0;              // tokens made
  int steps = 0;             // loop steps of the pass whose logits `last` holds
};

struct DecodeSession::Impl {
  const LanguageModel::Impl* lm;  // the tokenizer's textless ids, for the prompt check and the mask
  const Model& m;
  SessionOptions o;
  int depth;
  Decoder dec;
  std::vector<SessionSlot> slots;
  std::vector<float> last, z, work;
  std::vector<int> rows, row_steps;
  std::vector<int32_t> in;
  int64_t prompt_tokens = 0, new_tokens = 0, new_steps = 0;
  std::chrono::steady_clock::time_point checked = std::chrono::steady_clock::now();

  Impl(const LanguageModel::Impl& model_impl, const Model& model, const SessionOptions& so)
      : lm(&model_impl),
        m(model),
        o(so),
        depth(model.config().depth_or_R(so.depth)),
        dec(model, std::max(so.slots, 1), window(model, so), DecoderOptions{depth, so.exit, so.kv_policy, 0, kv_element(so.kv_cache)}) {}
  static int window(const Model& model, const SessionOptions& so) {
    return so.context > 0 ? std::min(so.context, model.config().context) : model.config().context;
  }

  int V() const { return m.config().vocab_size; }
  void prefill(int slot, int n) {
    adapt_threads();
    SessionSlot& s = slots[slot];
    dec.prefill(slot, s.seq.data() + s.seq.size() - n, n, last.data() + (size_t)slot * V());
    s.steps = depth;
  }
};

}  // namespace looplm
