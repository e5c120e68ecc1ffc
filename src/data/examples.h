// Example data (config data_mode = examples): one example per line, `prompt<TAB>answer`, e.g. a
// ListOps expression and its value (looplm data listops). The model reads prompt + answer as one
// sequence and is trained and evaluated on the answer tokens only: the target of position p is
// token p + 1 when that token belongs to the answer, none otherwise (docs/data.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "tokenizer/tokenizer.h"

namespace looplm {

struct Examples {
  std::vector<int32_t> tokens;     // all sequences back to back
  std::vector<int64_t> offset;     // example i: tokens[offset[i], offset[i + 1])
  std::vector<int32_t> prompt_len; // its first prompt_len[i] tokens are the prompt
  int64_t size() const { return (int64_t)prompt_len.size(); }
  int length(int64_t i) const { return (int)(offset[i + 1] - offset[i]); }
};

// The examples of a text file (lines without a tab, with an empty prompt or answer, or longer than
// context + 1 tokens are errors naming the file and line; blank lines are skipped). Error if none.
Examples load_examples(const std::string& path, const Tokenizer& tok, int context);

// The last examples of `all` held out for validation (data_val empty: the last val_split of them),
// removed from `all`.
Examples hold_out_examples(Examples& all, double val_split);

// Row x, y [T] of example i: x = its first length − 1 tokens then padding (id 0), y = the answer
// tokens at the positions that predict them, −1 elsewhere. Returns how many targets it set.
int fill_example(const Examples& ex, int64_t i, int T, int32_t* x, int32_t* y);

// Training batches of B examples drawn uniformly with replacement: example b of batch c is
//   uniform_below(counter_rng_u64(seed, c * B + b), n).
class ExampleStream : public BatchSource {
 public:
  ExampleStream(Examples ex, int T, int B, uint64_t seed);
  void next_batch(int32_t* x, int32_t* y) override;
  uint64_t cursor() const override { return cursor_; }
  void set_cursor(uint64_t c) override { cursor_ = c; }

 private:
  Examples ex_;
  int T_, B_;
  uint64_t seed_, cursor_ = 0;
};

}  // namespace looplm
