// Decoders of Hugging Face tokenizer.json files (docs/data.md): they turn the token strings of a
// list of ids back into text, as the Rust library's chain does (each step rewrites the list of
// strings; the result is their concatenation). Supported: Sequence, ByteLevel, Metaspace,
// ByteFallback, Fuse, Strip, Replace, BPEDecoder.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace looplm::hf {

// What the steps before one know while a token's piece is made (Decoder::piece).
struct PieceState {
  bool first = false;       // the token opens the text (Metaspace drops its prefix space there)
  bool fused = false;       // an earlier step joined the tokens into one string (ByteLevel, Fuse)
  bool byte_token = false;  // a <0xXX> token ByteFallback turned into its byte
  bool byte_fallback = false;  // the chain has ByteFallback (a run of byte tokens that is not UTF-8 is one U+FFFD per byte)
  // A Strip after the tokens were fused cuts copies of `strip` at the ends of the whole text:
  // the stream does that (at most strip_start at its start, strip_stop at its end).
  std::string strip;
  size_t strip_start = 0, strip_stop = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void run(std::vector<std::string>& tokens) const = 0;
  // Streaming (tokenizer/text_stream.h): this step applied to one token's string `s` as the chain
  // applies it to that token amid others, its bytes left raw (the stream repairs UTF-8 over the
  // whole text). False when the step reads the tokens around it in a way one token cannot say
  // (BPEDecoder's rule for the last token, a pattern replaced across tokens): the stream then
  // decodes its whole text for every token.
  virtual bool piece(std::string& s, PieceState& st) const = 0;
};

// nullptr for a JSON null; Error naming `where` for an unknown type or a malformed entry.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace looplm::hf
