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

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void run(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a JSON null; Error naming `where` for an unknown type or a malformed entry.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace looplm::hf
