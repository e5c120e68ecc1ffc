// A Hugging Face tokenizer.json, read and run without the Hugging Face library (docs/data.md,
// "Hugging Face tokenizers"). Encoding follows the Rust library's pipeline:
//   1. added tokens with "normalized": false are cut out of the raw text (leftmost-longest match;
//      single_word, lstrip and rstrip honoured);
//   2. each remaining piece is normalized, and the added tokens with "normalized": true are cut
//      out of the result;
//   3. each remaining piece is pre-tokenized into words, and each word is encoded by the BPE model;
//   4. with add_special, the post-processor adds its special tokens (TemplateProcessing,
//      BertProcessing, RobertaProcessing; ByteLevel adds none).
// Decoding maps ids to token strings and runs the decoder chain. Checked id for id against
// Hugging Face's own implementation on real tokenizer files (tests/test_hf_tokenizer.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace looplm {

// The names a tokenizer's end- and begin-of-text special tokens go by, in order of preference (a
// model trained here has no other word on them; a converted model's own ids come first:
// Config::text).
const std::vector<std::string>& hf_end_of_text_names();
const std::vector<std::string>& hf_begin_of_text_names();

class HfTokenizer {
 public:
  ~HfTokenizer();
  // `json_text` is the file's content; `origin` (the file name) starts every error message. Error
  // (exit 1) for anything this reader cannot run with the Rust library's meaning: an unsupported
  // model, normalizer, pre-tokenizer, post-processor or decoder type, a malformed regex, a merge
  // outside the vocabulary, an id used twice.
  static std::shared_ptr<const HfTokenizer> from_json(const std::string& json_text, const std::string& origin);
  static std::shared_ptr<const HfTokenizer> from_file(const std::string& path);
  // A tokenizer.json's text (at most 512 MB: a device or a stream that does not end is refused).
  static std::string read_file_text(const std::string& path);

  // Error (naming the byte offset) when text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Error for an id outside the vocabulary. Invalid UTF-8 from byte tokens becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // Streaming (tokenizer/text_stream.h): decode's text as per-token pieces. `piecewise` is false when
  // the decoder chain reads tokens together in a way a piece cannot say (then a stream decodes its
  // whole text each token); `byte_fallback`: a run of <0xXX> tokens that is not UTF-8 becomes one
  // U+FFFD per byte; a Strip after the tokens are fused cuts up to strip_start copies of `strip`
  // from the text's start and strip_stop from its end.
  struct StreamPlan {
    bool piecewise = true, byte_fallback = false;
    std::string strip;
    size_t strip_start = 0, strip_stop = 0;
  };
  const StreamPlan& stream_plan() const;
  // Appends the raw bytes token `id` adds to decode's text (`first`: the token opens the text);
  // *byte_token: it is a ByteFallback byte. Error for an id outside the vocabulary.
  void append_piece(int32_t id, bool first, std::string& out, bool* byte_token = nullptr) const;

  // One more than the largest id (ids with no token in between are possible, and refused by
  // decode).
  int vocab_size() const;
  // The token string of an id ("" for a hole); the id of a token string.
  const std::string& token(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view token) const;
  bool is_special(int32_t id) const;
  // The first special token whose content is one of `names` (e.g. "<|endoftext|>", "</s>").
  std::optional<int32_t> find_special(const std::vector<std::string>& names) const;
  // The file's text, as given (what a checkpoint stores).
  const std::string& json() const;
  // The model's description for messages: "BPE, 50257 tokens, ByteLevel".
  std::string summary() const;

 private:
  HfTokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace looplm
