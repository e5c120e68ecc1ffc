// A string -> value hash map for tokenizer vocabularies and word caches: keys live back to back in
// one buffer and the table is open addressing over small entries, so a vocabulary of 262,144
// tokens is a few allocations (std::unordered_map makes one per token, which was most of the time
// of loading a large tokenizer.json) and a lookup touches one or two cache lines.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace looplm::hf {

template <class V>
class StringMap {
 public:
  struct Entry {
    uint32_t offset, length;
    uint64_t hash;
    V value;
  };

  void reserve(size_t n) {
    entries_.reserve(n);
    if (table_.size() < 2 * n) rehash(2 * n);
  }
  // Inserts, or (key present) overwrites the value: the last of a repeated key wins.
  void put(std::string_view key, const V& value) {
    if (2 * (entries_.size() + 1) > table_.size()) rehash(std::max<size_t>(64, 2 * table_.size()));
    const uint64_t h = hash(key);
    size_t i = h & mask_;
    for (; table_[i] >= 0; i = (i + 1) & mask_) {
      Entry& e = entries_[table_[i]];
      if (e.hash == h && this->key(e) == key) {
        e.value = value;
        return;
      }
    }
    table_[i] = static_cast<int32_t>(entries_.size());
    entries_.push_back({static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()), h, value});
    keys_.append(key);
  }
  const V* find(std::string_view key) const {
    if (table_.empty()) return nullptr;
    const uint64_t h = hash(key);
    for (size_t i = h & mask_; table_[i] >= 0; i = (i + 1) & mask_) {
      const Entry& e = entries_[table_[i]];
      if (e.hash == h && this->key(e) == key) return &e.value;
    }
    return nullptr;
  }
  size_t size() const { return entries_.size(); }
  // Entries in insertion order, with key(e) their key.
  const std::vector<Entry>& entries() const { return entries_; }
  std::string_view key(const Entry& e) const { return std::string_view(keys_).substr(e.offset, e.length); }
  void clear() {
    entries_.clear();
    keys_.clear();
    table_.assign(table_.size(), -1);
  }

 private:
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  void rehash(size_t want) {
    size_t cap = 64;
    while (cap < want) cap <<= 1;
    table_.assign(cap, -1);
    mask_ = cap - 1;
    for (size_t k = 0; k < entries_.size(); ++k) {
      size_t i = entries_[k].hash & mask_;
      while (table_[i] >= 0) i = (i + 1) & mask_;
      table_[i] = static_cast<int32_t>(k);
    }
  }
  std::string keys_;
  std::vector<Entry> entries_;
  std::vector<int32_t> table_;
  size_t mask_ = 0;
};

}  // namespace looplm::hf
