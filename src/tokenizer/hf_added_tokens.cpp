#include "tokenizer/hf_added_tokens.h"

#include <algorithm>

#include "tokenizer/hf_unicode.h"

namespace looplm::hf {

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens, const std::vector<int>& which)
    : tokens_(tokens), nodes_(1) {
  std::fill(std::begin(root_), std::end(root_), -1);
  for (int t : which) {
    const std::string& s = tokens[t].content;
    if (s.empty()) continue;
    int32_t node = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      int32_t child = -1;
      if (node == 0) {
        child = root_[c];
      } else {
        for (const auto& [b, n] : nodes_[node].next)
          if (b == c) child = n;
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        if (node == 0) root_[c] = child;
        else nodes_[node].next.emplace_back(c, child);
      }
      node = child;
    }
    if (nodes_[node].token < 0) nodes_[node].token = t;  // the same content twice: the first wins
  }
}

int AddedTokenSplitter::find(std::string_view s, size_t from, size_t& b, size_t& e) const {
  for (size_t i = from; i < s.size(); ++i) {
    int32_t node = root_[static_cast<unsigned char>(s[i])];
    if (node < 0) continue;
    int best = -1;
    size_t best_end = 0;
    for (size_t j = i + 1;; ++j) {
      if (nodes_[node].token >= 0) { best = nodes_[node].token; best_end = j; }
      if (j >= s.size()) break;
      const auto c = static_cast<unsigned char>(s[j]);
      int32_t child = -1;
      for (const auto& [bb, n] : nodes_[node].next)
        if (bb == c) { child = n; break; }
      if (child < 0) break;
      node = child;
    }
    if (best >= 0) {
      b = i;
      e = best_end;
      return best;
    }
  }
  return -1;
}

void AddedTokenSplitter::split(std::string_view text, std::vector<Piece>& out) const {
  out.clear();
  size_t start_offset = 0, pos = 0, b, e;
  int t;
  while (pos < text.size() && (t = find(text, pos, b, e)) >= 0) {
    pos = e;
    const AddedToken& tok = tokens_[t];
    if (tok.single_word) {
      // A whole word only: no word character touches either end.
      bool ok = true;
      if (b > 0) {
        size_t i = prev_cp_start(text, b);
        ok = !is_word_char(next_cp(text, i));
      }
      if (ok && e < text.size()) {
        size_t i = e;
        ok = !is_word_char(next_cp(text, i));
      }
      if (!ok) continue;
    }
    if (tok.lstrip) {  // takes the whitespace before it, not what an earlier match took
      size_t nb = b;
      while (nb > start_offset) {
        const size_t p = prev_cp_start(text, nb);
        size_t i = p;
        if (!is_white_space(next_cp(text, i))) break;
        nb = p;
      }
      b = nb;
    }
    if (tok.rstrip) {
      while (e < text.size()) {
        size_t i = e;
        if (!is_white_space(next_cp(text, i))) break;
        e = i;
      }
      pos = e;
    }
    if (start_offset < b) out.push_back({start_offset, b, -1});
    out.push_back({b, e, tok.id});
    start_offset = e;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace looplm::hf
