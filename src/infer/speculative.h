// Self-speculative decoding of a looped model, loop-as-draft (speculative.cpp), and `auto`, which
// measures whether and how it pays on this machine (speculative_auto.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "looplm/looplm.h"
#include "model/model.h"
#include "tokenizer/text_stream.h"

namespace looplm {

// One sequence, after generate_batch has checked the prompt and the options. `ends`: the ids that
// end the sequence (not emitted); `textless`: ids never chosen (mask_textless); `text` (when set):
// the text the sequence ends with once it finds a stop string (the token that completes it is
// emitted).
std::vector<int32_t> generate_speculative(const Model& m, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                          const std::vector<int32_t>& ends, const std::vector<int32_t>& textless,
                                          TextStreamer* text, const std::function<void(int32_t)>& on_token);

// What `--speculative auto` measured and chose: K drafts at draft_depth (K = 0: plain decoding),
// the predicted tokens per second of plain decoding and of the choice, and why.
struct SpeculativeChoice {
  int K = 0, draft_depth = 0;
  double plain_tokens_per_s = 0, tokens_per_s = 0, acceptance = 0;
  double seconds = 0;  // the measurement's
  std::string why;
};

// Times plain decoding and, for a few draft depths r, a draft pass and the verification of 4 and
// 8 drafts on the prompt's tail (greedy, the drafts' agreement with the full model as the
// acceptance α), and picks the (K, r) whose predicted speed, (1 − α^K) / (1 − α) tokens per K
// drafts and one verification, is highest, or plain decoding when none beats it by 5%. A few dozen
// passes; generate_batch keeps the answer per model, depth, KV cache and thread count.
SpeculativeChoice measure_speculative(const Model& m, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                      const std::vector<int32_t>& textless);

}  // namespace looplm
