// Pre-tokenizers of Hugging Face tokenizer.json files (docs/data.md): they cut a normalized piece
// of text into the words the model encodes one by one. Supported: Sequence, Split (a string or a
// regex; Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel,
// Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation. The split semantics are the Rust
// library's.
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace looplm::hf {

// Words are views into the text being encoded or into strings a pre-tokenizer made (kept here
// until the words are encoded).
struct WordArena {
  std::deque<std::string> owned;
  std::string_view keep(std::string s) { return owned.emplace_back(std::move(s)); }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) every word of `words`. `at_start`: words[0] begins at offset 0 of
  // the input (Metaspace's prepend_scheme "first").
  virtual void run(std::vector<std::string_view>& words, WordArena& arena, bool at_start) const = 0;
};

struct PreTokenizerOptions {
  // ByteLevel leaves words as raw bytes instead of mapping each byte to its printable character:
  // the BPE model then looks the bytes up directly (HfTokenizer sets this when the model allows).
  bool raw_bytes = false;
};

// nullptr for a JSON null; Error naming `where` for an unknown type or a malformed entry.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where,
                                                 const PreTokenizerOptions& o);
// How many ByteLevel pre-tokenizers j holds, and whether the last step of j is one (the condition
// for raw_bytes: nothing after ByteLevel sees its mapped characters).
int count_byte_level(const nlohmann::json& j);
bool ends_with_byte_level(const nlohmann::json& j);

// GPT-2's byte <-> printable character table (bytes that are printable Latin-1 map to themselves,
// the others to U+0100 and up).
const std::string& byte_to_unicode(unsigned char b);  // UTF-8 of the character
int unicode_to_byte(char32_t c);                      // -1 when c is not in the table

}  // namespace looplm::hf
