// Token data: loading, llm.c shard writing, the training batch sampler and eval windows.
// Formats and choices are described in docs/data.md.
#pragma once
#include "looplm/util.h"
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace looplm {

enum class DataFormat {
  LlmcShard,  // .bin, first int32 == kLlmcMagic (uint16 tokens) or kLlmcMagic32 (uint32): 256 x int32 header, then tokens
  NanoGptBin, // .bin otherwise: headerless little-endian uint16 tokens
  Jsonl,      // .jsonl: one {"text": "..."} object per non-empty line
  Text,       // anything else: raw UTF-8 (or, for the byte tokenizer, any bytes)
};

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
// llm.c's shards for vocabularies beyond 65,536 ids (its Llama 3 data): uint32 tokens.
inline constexpr int32_t kLlmcMagic32 = 20240801;
inline constexpr int32_t kLlmcVersion32 = 7;
inline constexpr int kLlmcHeaderInts = 256;
// Separator placed between JSONL documents (there is no end-of-text id in byte/char vocabularies).
inline constexpr std::string_view kDocSeparator = "\n\n";

// Format by extension and, for .bin, by the first int32. Error if a .bin file cannot be opened.
DataFormat detect_format(const std::string& path);

// Tokens of any supported file. Text and JSONL are encoded with `tok`; shard ids are checked
// against tok.vocab_size(). Every Error message names `path`.
std::vector<int32_t> load_tokens(const std::string& path, const Tokenizer& tok);

// The text of a text or JSONL file (JSONL documents joined with kDocSeparator), e.g. to build a
// char alphabet. Error for .bin files (already tokenised).
std::string load_text(const std::string& path);

// Training and validation data of a run (docs/data.md): data_val, or, when it is empty, the last
// `val_split` of data_train's tokens held out (nanoGPT's 90/10 split: validation never overlaps
// training). `val_origin` names the validation data in messages.
struct TrainValTokens {
  std::vector<int32_t> train, val;
  std::string val_origin;
};
TrainValTokens load_train_val(const std::string& data_train, const std::string& data_val, double val_split,
                              const Tokenizer& tok);
// validation_name, read_file_bytes: include/looplm/util.h.
// The tail of `all` that the split holds out: [held, all.size()); held = all.size() - round(split x size).
size_t held_out_from(size_t n, double val_split);

// write_file_atomic: include/looplm/util.h.
// llm.c shard, written atomically: version 1 (uint16 tokens) when every id fits, else llm.c's
// uint32 layout (kLlmcMagic32, version 7). Error on a negative id.
void write_llmc_shard(const std::string& path, const std::vector<int32_t>& tokens);
// The sidecar that names an hf shard's tokenizer (PATH.tokenizer, docs/data.md): written beside a
// shard `looplm data` encodes with a Hugging Face tokenizer, checked when the shard is loaded.
void write_tokenizer_sidecar(const std::string& shard_path, const Tokenizer& tok);

// Counter-based random numbers: the value for (seed, counter) is a pure function, so any draw can
// be recomputed without replaying the ones before it. SplitMix64 (Steele et al. 2014) evaluated at
// an arbitrary position: key = mix64(seed ^ kDomain), out = mix64(key + (counter + 1) * golden).
uint64_t counter_rng_u64(uint64_t seed, uint64_t counter);
// Uniform integer in [0, n) from a 64-bit random value (Lemire's multiply-shift; bias < n / 2^64).
inline uint64_t uniform_below(uint64_t r, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64);
}

// Training batches: B windows of T+1 consecutive tokens at uniformly random offsets; x = the first
// T tokens, y = the last T (shifted by one). Window b of batch c starts at
//   uniform_below(counter_rng_u64(seed, c * B + b), N - T),
// so batch c depends only on (tokens, T, B, seed, c): the cursor (batches drawn so far) is the
// whole state needed to resume.
// Where training batches come from: a token stream (TokenStream) or a set of examples
// (ExampleStream, data/examples.h). Batch c depends only on the data, the seed and c, so the cursor
// (batches drawn so far) is the whole state needed to resume.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void next_batch(int32_t* x, int32_t* y) = 0;  // x, y: [B, T]; y < 0: no target
  virtual uint64_t cursor() const = 0;
  virtual void set_cursor(uint64_t c) = 0;
};

class TokenStream : public BatchSource {
 public:
  // Error if the data has fewer than T+1 tokens (message names `origin`); UsageError if T or B < 1.
  TokenStream(std::vector<int32_t> tokens, int T, int B, uint64_t seed, std::string origin = "");

  void next_batch(int32_t* x, int32_t* y) override;  // x, y: [B, T]; then cursor += 1
  uint64_t cursor() const override { return cursor_; }
  void set_cursor(uint64_t c) override { cursor_ = c; }

  int T() const { return T_; }
  int B() const { return B_; }
  uint64_t seed() const { return seed_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
  int T_, B_;
  uint64_t seed_;
  uint64_t cursor_ = 0;
};

// Evaluation: consecutive windows i = 0..n-1 with x = tokens[i*T, i*T+T) and
// y = tokens[i*T+1, i*T+T]; n = (N - 1) / T. Error if N < T+1 (message names `origin`).
int64_t eval_windows(std::span<const int32_t> tokens, int T, std::string_view origin = "");
void eval_window(std::span<const int32_t> tokens, int T, int64_t i, int32_t* x, int32_t* y);

}  // namespace looplm
