// The BPE model of a Hugging Face tokenizer.json (docs/data.md): a vocabulary (token -> id) and a
// ranked list of merges. A word starts as one symbol per character (or per byte, in raw-byte
// mode), and the adjacent pair of lowest merge rank is merged until no pair has a rank; among
// equal ranks the leftmost goes first (the Rust library's order). Options: unk_token, fuse_unk,
// byte_fallback (<0xXX> tokens for characters outside the vocabulary), ignore_merges (a word that
// is a token is that token), continuing_subword_prefix, end_of_word_suffix.
//
// Speed: merge ranks are found in an open-addressing table keyed by the pair of ids; a short word
// merges by scanning its pairs, a long one with a heap over a linked list; an encode call keeps a
// cache of the words it has seen. SentencePiece-style files have no pre-tokenizer, so a whole
// sentence is one word: it is cut first where no merge can ever join the two sides (no token holds
// the two characters next to each other: every token a merge across the cut makes would), which
// gives the same ids as merging it whole, and the pieces are short and repeat.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/hf_string_map.h"

namespace looplm::hf {

struct TokenizerJson;  // tokenizer/hf_json_reader.h

using TokenMap = StringMap<int32_t>;

// Words already encoded during one encode call: word -> its ids.
class WordCache {
 public:
  const int32_t* find(std::string_view w, size_t& n) const {
    const auto* span = map_.find(w);
    if (!span) return nullptr;
    n = span->second;
    return ids_.data() + span->first;
  }
  void put(std::string_view w, const int32_t* ids, size_t n) {
    if (map_.size() >= kMaxWords) return;
    map_.put(w, {static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)});
    ids_.insert(ids_.end(), ids, ids + n);
  }

 private:
  static constexpr size_t kMaxWords = 1 << 20;
  StringMap<std::pair<uint32_t, uint32_t>> map_;
  std::vector<int32_t> ids_;
};

class BpeModel {
 public:
  // `model` is the tokenizer.json's "model" object; Error naming `where` when it is malformed, a
  // merge names a token outside the vocabulary, or the type is not BPE.
  // `pre`: the vocabulary and merges read_tokenizer_json took out of the DOM (they are moved).
  static BpeModel from_json(const nlohmann::json& model, const std::string& where, TokenizerJson* pre = nullptr);

  // Raw-byte mode: words arrive as bytes and byte b stands for the token of GPT-2's character for
  // b. Possible when all 256 are in the vocabulary and there is no prefix or suffix; returns
  // whether it was switched on.
  bool enable_raw_bytes();

  // Appends the ids of one word (empty words give none).
  void encode_word(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const;

  const TokenMap& vocab() const { return vocab_; }
  size_t merge_count() const { return merge_count_; }

 private:
  // Pair (a, b) -> (rank, merged id), open addressing with linear probing.
  // Each rank names one pair, so a candidate merge is still valid when its pair has that rank.
  struct Merges {
    struct Slot {
      uint64_t key;  // a << 32 | b
      uint32_t rank;
      int32_t id;
    };
    std::vector<Slot> slots;  // key and value side by side: one cache line per probe
    uint64_t mask = 0;
    int shift = 64;
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    void reserve(size_t n);
    void put(int32_t a, int32_t b, uint32_t rank, int32_t id);
    bool get(int32_t a, int32_t b, uint32_t& rank, int32_t& id) const {
      const uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
      for (uint64_t i = (k * 0x9E3779B97F4A7C15ull) >> shift;; i = (i + 1) & mask) {
        const Slot& s = slots[i];
        if (s.key == k) { rank = s.rank; id = s.id; return true; }
        if (s.key == kEmpty) return false;
      }
    }
  };

  // Words of this many bytes or more are cut (when cuts are on) before merging.
  static constexpr size_t kCutFrom = 24;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, WordCache* cache) const;
  void build_cuts();
  bool joinable(char32_t a, char32_t b) const;
  bool joinable_slow(char32_t a, char32_t b) const;
  // joinable() for the common characters, precomputed: Latin and IPA (below U+0250) and
  // SentencePiece's U+2581, which stands between every two words.
  static constexpr int kJoinSlots = 0x251;
  static int join_slot(char32_t c) { return c < 0x250 ? static_cast<int>(c) : c == 0x2581 ? 0x250 : -1; }
  void initial_symbols(std::string_view word, std::vector<int32_t>& syms) const;
  void merge(std::vector<int32_t>& syms) const;
  void merge_long(std::vector<int32_t>& syms) const;

  TokenMap vocab_;
  TokenMap raw_vocab_;  // raw-byte mode with ignore_merges: the vocabulary spelled in bytes
  Merges merges_;
  size_t merge_count_ = 0;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false, raw_bytes_ = false;
  std::string prefix_, suffix_;
  int32_t byte_ids_[256];      // raw-byte mode: byte -> id
  int32_t fallback_ids_[256];  // byte_fallback: byte -> id of <0xXX>, -1 when absent
  std::vector<int32_t> bmp_ids_;  // a one-character token's id by code point (below U+10000), -1 when absent
  // Cuts: the set of adjacent code-point pairs inside any token (open addressing, a << 32 | b).
  bool cuts_ = false;
  std::vector<uint64_t> pairs_;
  uint64_t pairs_mask_ = 0;
  std::vector<uint64_t> join_bits_;  // kJoinSlots x kJoinSlots bits
};

}  // namespace looplm::hf
