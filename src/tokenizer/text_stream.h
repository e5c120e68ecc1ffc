// Token ids to text as they arrive: the one path from a model's tokens to the text a person sees
// (generate, serve, the Python module and training's sample go through it; the public face is
// looplm::TextStream in include/looplm/looplm.h).
//
// Each token adds its raw bytes (HfTokenizer::append_piece: the decoder chain applied to that token
// alone, for the chains that act token by token). Text leaves in whole UTF-8 characters: the bytes
// of a character split across tokens wait for the rest, and a ByteFallback run of <0xXX> tokens
// waits for its end (decode turns a run that is not UTF-8 into one U+FFFD per byte, so its text
// is known only then). Text that may begin a stop string is held back; once one is found the text
// ends before it and later tokens are ignored. Each token costs its piece plus the held-back tail
// (at most the longest stop string): O(1) amortised. The text equals decode(ids): invalid UTF-8
// repaired where decode repairs it (a Hugging Face decoder), left as bytes where it does not (the
// byte tokenizer: what a terminal shows as it would the file's bytes); a decoder chain that reads tokens
// together (BPEDecoder, a regex replaced over the joined text) decodes the whole text per token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace looplm {

class TextStreamer {
 public:
  struct Options {
    std::vector<std::string> stop;  // the text ends before the first of these (empty strings ignored)
    // The tokens open the text (a SentencePiece decoder drops the first token's space, a Strip
    // cuts the text's start) rather than continue a prompt's.
    bool at_start = false;
  };
  // `tok` must outlive the stream.
  TextStreamer(const Tokenizer& tok, Options o);
  // The text ready after this token (often empty: held back). Error for an id outside the vocabulary.
  std::string push(int32_t id);
  // Everything held back: an unfinished character becomes U+FFFD, as decode makes it.
  std::string finish();
  bool stopped() const { return stopped_; }
  // Bytes of text decided so far: given out, or held back only because a stop string may begin there.
  size_t text_bytes() const { return given_ + held_.size(); }

 private:
  std::string text_of_bytes(const std::string& bytes, bool is_byte_token, bool last);
  std::string release(std::string chunk, bool last);

  const Tokenizer& tok_;
  Options o_;
  const HfTokenizer::StreamPlan* plan_ = nullptr;  // hf tokenizers
  bool first_ = true;        // the next token is the first of the decoded list
  std::string raw_;          // bytes ending in an unfinished character
  std::string run_;          // ByteFallback: the open run of byte tokens
  size_t strip_left_ = 0;    // copies of plan_->strip still to cut from the text's start
  std::string held_;         // text that may begin a stop string (or end in a stripped tail)
  size_t given_ = 0;
  bool stopped_ = false;
  // a chain that is not piecewise: every id, and the text decoded so far
  std::vector<int32_t> ids_;
  std::string whole_;
};

}  // namespace looplm
