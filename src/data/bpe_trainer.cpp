#include "data/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_pretokenizer.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_unicode.h"
#include "looplm/error.h"

namespace looplm {

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

// GPT-2's pre-tokenizer pattern: the same one the ByteLevel pre-tokenizer of the written file runs.
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

BpeTrainResult train_byte_level_bpe(std::string_view corpus, const BpeTrainOptions& o) {
  const int specials = static_cast<int>(o.special_tokens.size());
  if (o.vocab_size < 256 + specials + 1)
    throw UsageError("a byte-level BPE vocabulary holds the 256 bytes" + std::string(specials ? " and the special tokens" : "") +
                     ", so --vocab-size must be at least " + std::to_string(256 + specials + 1) + " (got " +
                     std::to_string(o.vocab_size) + ")");
  if (corpus.empty()) throw Error("the corpus is empty: nothing to learn merges from");
  if (const size_t bad = hf::invalid_utf8_at(corpus); bad != std::string_view::npos)
    throw Error("invalid UTF-8 at byte offset " + std::to_string(bad) + "; a byte-level BPE tokenizer reads UTF-8 text");

  // The corpus's words and their counts.
  std::unordered_map<std::string_view, int64_t> seen;
  const hf::Regex re = hf::Regex::compile(kGpt2Pattern, "GPT-2's pre-tokenizer pattern");
  size_t pos = 0, b, e;
  while (pos < corpus.size() && re.find(corpus, pos, b, e)) {
    if (e == b) {  // cannot happen with this pattern; step on rather than loop
      pos = b + 1;
      continue;
    }
    ++seen[corpus.substr(b, e - b)];
    pos = e;
  }
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> count;
  words.reserve(seen.size());
  for (const auto& [w, c] : seen) {
    words.emplace_back(w.begin(), w.end());
    for (int32_t& s : words.back()) s &= 0xFF;  // a char may be signed
    count.push_back(c);
  }
  // Deterministic order (the map's is not): by the words' bytes.
  {
    std::vector<size_t> order(words.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return words[x] < words[y]; });
    std::vector<std::vector<int32_t>> w2;
    std::vector<int64_t> c2;
    for (size_t i : order) {
      w2.push_back(std::move(words[i]));
      c2.push_back(count[i]);
    }
    words.swap(w2);
    count.swap(c2);
  }

  std::vector<std::string> token(256);
  for (int c = 0; c < 256; ++c) token[c] = hf::byte_to_unicode(static_cast<unsigned char>(c));
  std::unordered_map<uint64_t, int64_t> pairs;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // words that held the pair (may repeat, may be stale)
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t k = pair_key(words[w][i], words[w][i + 1]);
      pairs[k] += count[w];
      where[k].push_back(static_cast<int32_t>(w));
    }
  // Most frequent first; among equals the smaller pair (~key is larger for a smaller key).
  std::priority_queue<std::pair<int64_t, uint64_t>> heap;
  for (const auto& [k, c] : pairs)
    if (c >= o.min_frequency) heap.push({c, ~k});

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<int32_t> stamp(words.size(), -1);
  const int target = o.vocab_size - specials;
  std::vector<int32_t> fresh;
  while (static_cast<int>(token.size()) < target && !heap.empty()) {
    const auto [c, nk] = heap.top();
    heap.pop();
    const uint64_t k = ~nk;
    const auto it = pairs.find(k);
    const int64_t now = it == pairs.end() ? 0 : it->second;
    if (now != c) {  // stale: its count fell since it was pushed
      if (now >= o.min_frequency) heap.push({now, nk});
      continue;
    }
    const auto a = static_cast<int32_t>(k >> 32), bb = static_cast<int32_t>(k & 0xFFFFFFFFu);
    const auto z = static_cast<int32_t>(token.size());
    token.push_back(token[a] + token[bb]);
    merges.push_back({a, bb});
    std::vector<int32_t> holders = std::move(where[k]);
    where.erase(k);
    for (int32_t w : holders) {
      if (stamp[w] == z) continue;
      stamp[w] = z;
      std::vector<int32_t>& s = words[w];
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == a && s[i + 1] == bb;
      if (!has) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) pairs[pair_key(s[i], s[i + 1])] -= count[w];
      fresh.clear();
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == bb) {
          fresh.push_back(z);
          i += 2;
        } else {
          fresh.push_back(s[i++]);
        }
      }
      s = fresh;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t p = pair_key(s[i], s[i + 1]);
        const int64_t n = pairs[p] += count[w];
        if (s[i] == z || s[i + 1] == z) {  // a new pair: its count only grows from here
          where[p].push_back(w);
          if (n >= o.min_frequency) heap.push({n, ~p});
        }
      }
    }
    pairs.erase(k);
  }

  // The tokenizer.json, written by hand to keep the vocabulary in id order.
  BpeTrainResult r;
  r.merges = static_cast<int>(merges.size());
  r.words = static_cast<int64_t>(words.size());
  std::string vocab = "{";
  for (size_t id = 0; id < token.size(); ++id) vocab += (id ? ", " : "") + json_string(token[id]) + ": " + std::to_string(id);
  std::string added = "[";
  int32_t next_id = static_cast<int32_t>(token.size());
  for (const std::string& sp : o.special_tokens) {
    bool clash = false;
    for (const std::string& t : token) clash = clash || t == sp;
    if (clash) throw UsageError("special token '" + sp + "' is also a merged token of the corpus");
    const std::string id = std::to_string(next_id++);
    vocab += ", " + json_string(sp) + ": " + id;
    added += std::string(added.size() > 1 ? ", " : "") + "{\"id\": " + id + ", \"content\": " + json_string(sp) +
             ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}";
  }
  vocab += "}";
  added += "]";
  std::string merge_list = "[";
  for (size_t i = 0; i < merges.size(); ++i)
    merge_list += std::string(i ? ", " : "") + "[" + json_string(token[merges[i].first]) + ", " + json_string(token[merges[i].second]) + "]";
  merge_list += "]";
  r.vocab_size = next_id;
  r.tokenizer_json =
      "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": " + added +
      ",\n  \"normalizer\": null,\n"
      "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
      "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n"
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
      "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null, "
      "\"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n"
      "    \"vocab\": " + vocab + ",\n    \"merges\": " + merge_list + "}\n}\n";
  return r;
}

}  // namespace looplm
