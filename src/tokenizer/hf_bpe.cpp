#include "tokenizer/hf_bpe.h"

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <functional>

#include "tokenizer/hf_json.h"
#include "tokenizer/hf_json_reader.h"
#include "tokenizer/hf_pretokenizer.h"
#include "tokenizer/hf_unicode.h"

namespace looplm::hf {

void BpeModel::Merges::reserve(size_t n) {
  size_t cap = 16;
  shift = 60;
  while (cap < 2 * n + 16) { cap <<= 1; --shift; }
  slots.assign(cap, Slot{kEmpty, 0, 0});
  mask = cap - 1;
}

void BpeModel::Merges::put(int32_t a, int32_t b, uint32_t rank, int32_t id) {
  const uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  uint64_t i = (k * 0x9E3779B97F4A7C15ull) >> shift;
  while (slots[i].key != kEmpty && slots[i].key != k) i = (i + 1) & mask;
  slots[i] = Slot{k, rank, id};  // a pair listed twice keeps its last rank, as the Rust library's map does
}

BpeModel BpeModel::from_json(const nlohmann::json& m, const std::string& where, TokenizerJson* pre) {
  if (!m.is_object()) bad(where, "expected a JSON object");
  const std::string type = str_member(m, "type", where, "BPE");
  if (type != "BPE")
    bad(where + ".type", "model type '" + io::brief(type) + "' is not supported (only BPE; WordPiece, Unigram and "
                         "WordLevel tokenizers are not)");
  if (const nlohmann::json* d = member(m, "dropout", where)) {
    if (!d->is_number() || d->get<double>() != 0.0)
      bad(where + ".dropout", io::brief_json(*d) + ": BPE dropout (random merges) is for training a model, not supported here");
  }
  BpeModel b;
  if (pre && pre->has_vocab) {
    b.vocab_ = std::move(pre->vocab);
  } else {
    const nlohmann::json* vocab = member(m, "vocab", where);
    if (!vocab || !vocab->is_object()) bad(where + ".vocab", "expected an object of token -> id");
    b.vocab_.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      // Ids index tables of the vocabulary's size: bounded as a model's vocab_size is (2^24).
      if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= (int64_t{1} << 24))
        bad(where + ".vocab", "token '" + io::brief(it.key()) + "' has id " + io::brief_json(*it) +
                                  ", expected an integer in [0, 16777216)");
      b.vocab_.put(it.key(), static_cast<int32_t>(it->get<int64_t>()));
    }
  }
  b.prefix_ = str_member(m, "continuing_subword_prefix", where, "");
  b.suffix_ = str_member(m, "end_of_word_suffix", where, "");
  b.fuse_unk_ = bool_member(m, "fuse_unk", where, false);
  b.byte_fallback_ = bool_member(m, "byte_fallback", where, false);
  b.ignore_merges_ = bool_member(m, "ignore_merges", where, false);
  if (member(m, "unk_token", where)) {
    const std::string unk = str_member(m, "unk_token", where);
    const int32_t* id = b.vocab_.find(unk);
    if (!id) bad(where + ".unk_token", "'" + io::brief(unk) + "' is not in the vocabulary");
    b.unk_id_ = *id;
  }
  b.bmp_ids_.assign(0x10000, -1);
  for (const auto& e : b.vocab_.entries()) {
    const std::string_view tok = b.vocab_.key(e);
    const int32_t id = e.value;
    const auto lead = static_cast<unsigned char>(tok.empty() ? 0 : tok[0]);
    if (tok.empty() || tok.size() != cp_len(lead) || tok.size() > 3 || invalid_utf8_at(tok) != std::string::npos) continue;
    size_t i = 0;
    b.bmp_ids_[next_cp(tok, i)] = id;
  }
  for (int c = 0; c < 256; ++c) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", c);
    const int32_t* id = b.vocab_.find(std::string_view(name));
    b.fallback_ids_[c] = id ? *id : -1;
    b.byte_ids_[c] = -1;
  }

  const bool flat = pre && pre->has_merges;
  static const nlohmann::json no_merges = nlohmann::json::array();
  const auto& merges = flat ? no_merges : array_member(m, "merges", where);
  const size_t count = flat ? pre->merges.size() / 2 : merges.size();
  b.merges_.reserve(count);
  b.merge_count_ = count;
  auto id_of = [&](std::string_view t, size_t rank) {
    const int32_t* id = b.vocab_.find(t);
    if (!id) bad(where + ".merges[" + std::to_string(rank) + "]", "token '" + io::brief(t) + "' is not in the vocabulary");
    return *id;
  };
  // Merge r's two tokens: from the flat list, or from the DOM ("a b" or ["a", "b"]).
  auto pair_of = [&](size_t r, std::string_view& left, std::string_view& right) {
    if (flat) {
      left = pre->merges[2 * r];
      right = pre->merges[2 * r + 1];
      return;
    }
    const nlohmann::json& e = merges[r];
    if (e.is_string()) {  // "a b": the format before tokens could hold spaces
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        bad(where + ".merges[" + std::to_string(r) + "]", "'" + io::brief(s) + "' is not two tokens separated by one space");
      left = std::string_view(s).substr(0, sp);
      right = std::string_view(s).substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get_ref<const std::string&>();
      right = e[1].get_ref<const std::string&>();
    } else {
      bad(where + ".merges[" + std::to_string(r) + "]", "expected \"a b\" or [\"a\", \"b\"], got " + io::brief_json(e));
    }
  };
  std::string_view left, right;
  std::string merged;
  for (size_t r = 0; r < count; ++r) {
    pair_of(r, left, right);
    const int32_t a = id_of(left, r), c = id_of(right, r);
    // With a continuing-subword prefix the right part carries it; the merged token does not.
    merged.assign(left);
    if (!b.prefix_.empty() && right.substr(0, b.prefix_.size()) == b.prefix_) merged.append(right.substr(b.prefix_.size()));
    else merged.append(right);
    b.merges_.put(a, c, static_cast<uint32_t>(r), id_of(merged, r));
  }
  b.build_cuts();
  return b;
}

void BpeModel::build_cuts() {
  // Prefixes and suffixes change a symbol's spelling by its place in the word, and a merge of
  // <0xXX> tokens would join bytes no token spells: no cuts then.
  cuts_ = prefix_.empty() && suffix_.empty();
  for (int c = 0; cuts_ && c < 256; ++c)
    if (fallback_ids_[c] >= 0)
      for (int d = 0; cuts_ && d < 256; ++d) {
        uint32_t r;
        int32_t id;
        if (fallback_ids_[d] >= 0 && merges_.get(fallback_ids_[c], fallback_ids_[d], r, id)) cuts_ = false;
      }
  if (!cuts_) return;
  size_t n = 0;
  for (const auto& e : vocab_.entries()) n += e.length;
  size_t cap = 64;
  while (cap < 2 * n) cap <<= 1;
  pairs_.assign(cap, ~uint64_t{0});
  pairs_mask_ = cap - 1;
  for (const auto& e : vocab_.entries()) {
    const std::string_view tok = vocab_.key(e);
    if (invalid_utf8_at(tok) != std::string::npos) continue;
    size_t i = 0;
    char32_t prev = tok.empty() ? 0 : next_cp(tok, i);
    while (i < tok.size()) {
      const char32_t c = next_cp(tok, i);
      const uint64_t k = (static_cast<uint64_t>(prev) << 32) | c;
      uint64_t h = (k * 0x9E3779B97F4A7C15ull) & pairs_mask_;
      while (pairs_[h] != ~uint64_t{0} && pairs_[h] != k) h = (h + 1) & pairs_mask_;
      pairs_[h] = k;
      prev = c;
    }
  }
  join_bits_.assign((kJoinSlots * kJoinSlots + 63) / 64, 0);
  auto cp_of = [](int slot) { return slot < 0x250 ? static_cast<char32_t>(slot) : char32_t{0x2581}; };
  for (int x = 0; x < kJoinSlots; ++x)
    for (int y = 0; y < kJoinSlots; ++y)
      if (joinable_slow(cp_of(x), cp_of(y))) {
        const size_t bit = static_cast<size_t>(x) * kJoinSlots + y;
        join_bits_[bit >> 6] |= uint64_t{1} << (bit & 63);
      }
}

bool BpeModel::joinable(char32_t a, char32_t b) const {
  const int sa = join_slot(a), sb = join_slot(b);
  if (sa >= 0 && sb >= 0) {
    const size_t bit = static_cast<size_t>(sa) * kJoinSlots + sb;
    return (join_bits_[bit >> 6] >> (bit & 63)) & 1;
  }
  return joinable_slow(a, b);
}

bool BpeModel::joinable_slow(char32_t a, char32_t b) const {
  const uint64_t k = (static_cast<uint64_t>(a) << 32) | b;
  for (uint64_t h = (k * 0x9E3779B97F4A7C15ull) & pairs_mask_;; h = (h + 1) & pairs_mask_) {
    if (pairs_[h] == k) return true;
    if (pairs_[h] == ~uint64_t{0}) break;
  }
  // fuse_unk joins neighbouring unknown characters into one unk symbol.
  auto unknown = [&](char32_t c) {
    if (c < 0x10000) return bmp_ids_[c] < 0;
    std::string s;
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
    return vocab_.find(s) == nullptr;
  };
  return fuse_unk_ && unknown(a) && unknown(b);
}

bool BpeModel::enable_raw_bytes() {
  if (!prefix_.empty() || !suffix_.empty()) return false;
  for (int c = 0; c < 256; ++c)
    if (!vocab_.find(byte_to_unicode(static_cast<unsigned char>(c)))) return false;
  for (int c = 0; c < 256; ++c) {
    byte_ids_[c] = *vocab_.find(byte_to_unicode(static_cast<unsigned char>(c)));
  }
  if (ignore_merges_) {
    raw_vocab_.reserve(vocab_.size());
    for (const auto& e : vocab_.entries()) {
      const std::string_view tok = vocab_.key(e);
      std::string raw;
      bool ok = invalid_utf8_at(tok) == std::string::npos;
      for (size_t i = 0; ok && i < tok.size();) {
        const int byte = unicode_to_byte(next_cp(tok, i));
        if (byte < 0) ok = false;
        else raw += static_cast<char>(byte);
      }
      if (ok) raw_vocab_.put(raw, e.value);  // tokens outside the byte alphabet never match a word
    }
  }
  raw_bytes_ = true;
  cuts_ = false;  // words come from a pre-tokenizer, short; and cuts are computed on characters
  pairs_.clear();
  pairs_.shrink_to_fit();
  return true;
}

void BpeModel::initial_symbols(std::string_view w, std::vector<int32_t>& syms) const {
  syms.clear();
  if (raw_bytes_) {
    for (char c : w) syms.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    return;
  }
  bool prev_unk = false;
  std::string piece;
  for (size_t i = 0; i < w.size();) {
    const size_t start = i;
    next_cp(w, i);
    int32_t id = -1;
    if (prefix_.empty() && suffix_.empty()) {
      if (i - start < 4) {
        size_t k = start;
        id = bmp_ids_[next_cp(w, k)];
      } else if (const int32_t* found = vocab_.find(w.substr(start, i - start))) {
        id = *found;
      }
    } else {
      piece.clear();
      if (start > 0) piece += prefix_;
      piece.append(w.substr(start, i - start));
      if (i == w.size()) piece += suffix_;
      if (const int32_t* found = vocab_.find(piece)) id = *found;
    }
    if (id >= 0) {
      syms.push_back(id);
      prev_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = start; k < i; ++k) all = all && fallback_ids_[static_cast<unsigned char>(w[k])] >= 0;
      if (all) {
        for (size_t k = start; k < i; ++k) syms.push_back(fallback_ids_[static_cast<unsigned char>(w[k])]);
        prev_unk = false;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (!(fuse_unk_ && prev_unk)) syms.push_back(unk_id_);
      prev_unk = true;
    }
    // No unk token: the character is dropped, as the Rust library does.
  }
}

void BpeModel::merge(std::vector<int32_t>& syms) const {
  size_t n = syms.size();
  if (n < 2) return;
  constexpr size_t kShort = 48;
  if (n > kShort) return merge_long(syms);
  uint32_t rank[kShort];
  int32_t nid[kShort];
  constexpr uint32_t kNone = ~uint32_t{0};
  for (size_t i = 0; i + 1 < n; ++i)
    if (!merges_.get(syms[i], syms[i + 1], rank[i], nid[i])) rank[i] = kNone;
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNone) break;
    syms[best] = nid[best];
    // Drop symbol best+1 and pair best; the pairs on either side of the new symbol change.
    std::memmove(&syms[best + 1], &syms[best + 2], (n - best - 2) * sizeof(int32_t));
    std::memmove(&rank[best], &rank[best + 1], (n - best - 2) * sizeof(uint32_t));
    std::memmove(&nid[best], &nid[best + 1], (n - best - 2) * sizeof(int32_t));
    --n;
    if (best > 0 && !merges_.get(syms[best - 1], syms[best], rank[best - 1], nid[best - 1])) rank[best - 1] = kNone;
    if (best + 1 < n && !merges_.get(syms[best], syms[best + 1], rank[best], nid[best])) rank[best] = kNone;
  }
  syms.resize(n);
}

void BpeModel::merge_long(std::vector<int32_t>& syms) const {
  const size_t n = syms.size();
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<uint64_t> heap;  // rank << 32 | position of the pair's left symbol: a min-heap
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  uint32_t r;
  int32_t id;
  for (size_t i = 0; i + 1 < n; ++i)
    if (merges_.get(syms[i], syms[i + 1], r, id)) heap.push_back((static_cast<uint64_t>(r) << 32) | i);
  const auto later = std::greater<uint64_t>();
  std::make_heap(heap.begin(), heap.end(), later);
  auto push = [&](uint32_t rank, int32_t pos) {
    heap.push_back((static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos));
    std::push_heap(heap.begin(), heap.end(), later);
  };
  constexpr int32_t kGone = -1;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto p = static_cast<int32_t>(top & 0xFFFFFFFFu);
    const auto rank = static_cast<uint32_t>(top >> 32);
    if (syms[p] == kGone || next[p] < 0) continue;
    const int32_t q = next[p];
    // Stale when a symbol of the pair was merged since: the pair there now has another rank.
    if (!merges_.get(syms[p], syms[q], r, id) || r != rank) continue;
    syms[p] = id;
    syms[q] = kGone;
    next[p] = next[q];
    if (next[p] >= 0) prev[next[p]] = p;
    if (prev[p] >= 0 && merges_.get(syms[prev[p]], syms[p], r, id)) push(r, prev[p]);
    if (next[p] >= 0 && merges_.get(syms[p], syms[next[p]], r, id)) push(r, p);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (syms[i] != kGone) syms[k++] = syms[i];
  syms.resize(k);
}

void BpeModel::encode_piece(std::string_view w, std::vector<int32_t>& out, WordCache* cache) const {
  size_t n = 0;
  if (cache)
    if (const int32_t* ids = cache->find(w, n)) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
  thread_local std::vector<int32_t> syms;
  initial_symbols(w, syms);
  merge(syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (cache && w.size() < 256) cache->put(w, syms.data(), syms.size());
}

void BpeModel::encode_word(std::string_view w, std::vector<int32_t>& out, WordCache* cache) const {
  if (w.empty()) return;
  if (ignore_merges_) {
    const TokenMap& v = raw_bytes_ ? raw_vocab_ : vocab_;
    if (const int32_t* id = v.find(w)) {
      out.push_back(*id);
      return;
    }
  }
  if (!cuts_ || w.size() < kCutFrom) return encode_piece(w, out, cache);
  size_t start = 0, i = 0;
  char32_t prev = next_cp(w, i);
  while (i < w.size()) {
    const size_t at = i;
    const char32_t c = next_cp(w, i);
    if (!joinable(prev, c)) {
      encode_piece(w.substr(start, at - start), out, cache);
      start = at;
    }
    prev = c;
  }
  encode_piece(w.substr(start), out, cache);
}

}  // namespace looplm::hf
