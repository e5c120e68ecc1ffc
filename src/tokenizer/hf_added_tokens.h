// Added tokens of a Hugging Face tokenizer.json (docs/data.md): strings cut out of the text before
// the model sees it, matched leftmost-longest as the Rust library's Aho-Corasick automaton does,
// with its single_word, lstrip and rstrip rules.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace looplm::hf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, normalized = false, lstrip = false, rstrip = false, single_word = false;
};

// A piece of text, or (id >= 0) an added token.
struct Piece {
  size_t begin = 0, end = 0;  // byte range in the text that was split
  int32_t id = -1;
};

class AddedTokenSplitter {
 public:
  // `tokens` outlives the splitter; `which` lists the indices of the tokens to match.
  AddedTokenSplitter(const std::vector<AddedToken>& tokens, const std::vector<int>& which);
  bool empty() const { return nodes_.size() == 1; }
  // Cuts text into pieces: the added tokens found (with the whitespace an lstrip / rstrip token
  // takes) and the text between them.
  void split(std::string_view text, std::vector<Piece>& out) const;

 private:
  // Leftmost-longest match at or after `from`: index into tokens_, or -1.
  int find(std::string_view s, size_t from, size_t& b, size_t& e) const;
  struct Node {
    int token = -1;
    std::vector<std::pair<unsigned char, int32_t>> next;
  };
  const std::vector<AddedToken>& tokens_;
  std::vector<Node> nodes_;
  int32_t root_[256];
};

}  // namespace looplm::hf
