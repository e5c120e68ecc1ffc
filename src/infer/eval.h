// Deterministic evaluation (docs/cli.md, eval): noise off, fixed depth, consecutive non-overlapping
// windows of `context` tokens with targets shifted by one; the mean token loss at every exit
// r = 1..depth and the per-step diagnostics (the cosine of successive exit states, and every tensor
// the model's components name as a diagnostic: Graph::diagnostic).
#pragma once
#include <cstdint>
#include <vector>

#include "data/examples.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "ops/cache_ref.h"

namespace looplm {

// depth < 0: the trained R; 0: the loss of h_pre. max_windows < 0: all windows. window: tokens
// per window, 0 = the context (at most the context). calibrate: EvalResult::calibration too.
EvalResult evaluate_tokens(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                           int64_t max_windows = -1,
                           const std::function<void(int64_t, int64_t)>& progress = {},
                           const EarlyExit& early = {}, int window = 0, bool calibrate = false);
// The window length to score with: `window` (0 = the model's context); UsageError beyond the context.
int eval_window_length(const Model& m, int window);
// The same over examples (data_mode = examples): loss on the answer tokens, accuracy = the fraction
// of examples whose every answer token is the top-1 prediction. max_examples < 0: all.
EvalResult evaluate_examples(const Model& m, const Examples& ex, int depth, int batch, int64_t max_examples = -1,
                             const std::function<void(int64_t, int64_t)>& progress = {},
                             const EarlyExit& early = {}, bool calibrate = false);

// The windows of evaluate_tokens scored through incremental decoding (src/infer/eval_decode.cpp):
// each token fed one at a time through the KV cache, exiting by `early`, keys and values kept by
// `policy`, stored as `kv`. loss and accuracy at each token's exit; mean_steps, exit_fraction,
// kv_bytes_per_token.
EvalResult evaluate_incremental(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                                int64_t max_windows, const std::function<void(int64_t, int64_t)>& progress,
                                const EarlyExit& early, KvPolicy policy, op::KvElem kv = op::KvElem::f32, int window = 0);

}  // namespace looplm
