// Normalizers of Hugging Face tokenizer.json files (docs/data.md): the text of each piece between
// added tokens is rewritten by these before pre-tokenization. Supported: Sequence, NFC, NFD, NFKC,
// NFKD (ICU), Lowercase (ICU's full case mapping), Strip, Prepend, Replace (a string or a regex).
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace looplm::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites s (valid UTF-8) in place.
  virtual void apply(std::string& s) const = 0;
};

// nullptr for a JSON null; Error naming `origin` for an unknown type or a malformed entry.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& origin);

}  // namespace looplm::hf
