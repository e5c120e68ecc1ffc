// Training a byte-level BPE tokenizer on a corpus (docs/data.md, "Training a BPE tokenizer"), the
// scheme of GPT-2: text is cut into words by GPT-2's regex, each word is its UTF-8 bytes, and the
// most frequent adjacent pair of symbols (counted over the corpus's words) is merged into a new
// symbol until the vocabulary is full. The result is a tokenizer.json that Hugging Face's
// libraries load (ByteLevel pre-tokenizer, post-processor and decoder; BPE model).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace looplm {

struct BpeTrainOptions {
  int vocab_size = 4096;            // 256 byte tokens + merges + special tokens
  int64_t min_frequency = 2;        // a pair seen fewer times is never merged
  std::vector<std::string> special_tokens = {"<|endoftext|>"};  // added tokens, at the end of the ids
};

struct BpeTrainResult {
  std::string tokenizer_json;
  int vocab_size = 0;     // may be below the asked size when the corpus runs out of pairs
  int merges = 0;
  int64_t words = 0;      // distinct words of the corpus
};

// UsageError for a vocab_size below 256 + specials (+1 merge); Error for a corpus that is empty or
// not UTF-8. Ties between equally frequent pairs go to the smaller pair of ids (as the Rust
// library's trainer breaks them), so the result is a pure function of the corpus and the options.
BpeTrainResult train_byte_level_bpe(std::string_view corpus, const BpeTrainOptions& o);

}  // namespace looplm
