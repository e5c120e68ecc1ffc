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

class HfTokenizer {
 public:
  ~HfTokenizer();
  // `json_text` is the file's content; `origin` (the file name) starts every error message. Error
  // (exit 1) for anything this reader cannot run with the Rust library's meaning: an unsupported
  // model, normalizer, pre-tokenizer, post-processor or decoder type, a malformed regex, a merge
  // outside the vocabulary, an id used twice.
  static std::shared_ptr<const HfTokenizer> from_json(const std::string& json_text, const std::string& origin);
  static std::shared_ptr<const HfTokenizer> from_file(const std::string& path);

  // Error (naming the byte offset) when text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Error for an id outside the vocabulary. Invalid UTF-8 from byte tokens becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

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
