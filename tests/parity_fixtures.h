// Frozen outputs of the live references (Hugging Face's tokenizers.js, llama.cpp), for the parity
// tests that must also check something where npm cannot be reached: tests/fixtures/tokenizer_parity/
// and tests/fixtures/llamacpp/ (their README.md say what is there and how it is regenerated).
//
// A long id sequence is frozen as its count, a digest (FNV-1a 64 over each id as 4 little-endian
// bytes), its first `head` ids and the digest of every `chunk` ids, so a mismatch still says where
// it starts (exactly within the head, to a chunk after it); a short one as the ids themselves.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace looplm::test {

inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}
inline uint64_t fnv1a64(const std::string& s) { return fnv1a64(s.data(), s.size()); }
inline uint64_t fnv1a64_ids(const int32_t* ids, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    const unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    h = fnv1a64(b, 4, h);
  }
  return h;
}
inline uint64_t fnv1a64_ids(const std::vector<int32_t>& ids) { return fnv1a64_ids(ids.data(), ids.size()); }
inline std::string hex64(uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A text frozen by its size and digest.
inline nlohmann::json freeze_text(const std::string& s) { return {{"bytes", s.size()}, {"fnv64", hex64(fnv1a64(s))}}; }
inline bool same_text(const std::string& s, const nlohmann::json& frozen) {
  return frozen.at("bytes").get<size_t>() == s.size() && frozen.at("fnv64").get<std::string>() == hex64(fnv1a64(s));
}

// An id sequence as a fixture holds it: the ids themselves when there are at most `head`, else the
// digest form (count, fnv64, head, chunk, chunk_fnv64).
inline nlohmann::json freeze_ids(const std::vector<int32_t>& ids, size_t head = 2048, size_t chunk = 2048) {
  if (ids.size() <= head) return ids;
  nlohmann::json chunks = nlohmann::json::array();
  for (size_t at = 0; at < ids.size(); at += chunk) chunks.push_back(hex64(fnv1a64_ids(ids.data() + at, std::min(chunk, ids.size() - at))));
  return {{"count", ids.size()}, {"fnv64", hex64(fnv1a64_ids(ids))}, {"head", std::vector<int32_t>(ids.begin(), ids.begin() + head)},
          {"chunk", chunk}, {"chunk_fnv64", chunks}};
}

// "" when `got` is the frozen sequence, else where they part.
inline std::string compare_frozen_ids(const std::vector<int32_t>& got, const nlohmann::json& frozen) {
  auto first_difference = [&](const std::vector<int32_t>& want) {
    size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    return i;
  };
  auto around = [](const std::vector<int32_t>& v, size_t at) {
    std::string s;
    for (size_t i = at > 3 ? at - 3 : 0; i < std::min(v.size(), at + 5); ++i) s += (i == at ? " >" : " ") + std::to_string(v[i]);
    return s;
  };
  if (frozen.is_array()) {
    const auto want = frozen.get<std::vector<int32_t>>();
    if (got == want) return "";
    const size_t i = first_difference(want);
    return "got " + std::to_string(got.size()) + " ids, frozen " + std::to_string(want.size()) + "; the first difference at id " +
           std::to_string(i) + ": got" + around(got, i) + ", frozen" + around(want, i);
  }
  const size_t count = frozen.at("count").get<size_t>();
  if (got.size() == count && hex64(fnv1a64_ids(got)) == frozen.at("fnv64").get<std::string>()) return "";
  std::string msg = "got " + std::to_string(got.size()) + " ids, frozen " + std::to_string(count);
  const auto head = frozen.at("head").get<std::vector<int32_t>>();
  const size_t i = first_difference(head);
  if (i < head.size()) return msg + "; the first difference at id " + std::to_string(i) + ": got" + around(got, i) + ", frozen" + around(head, i);
  const size_t chunk = frozen.at("chunk").get<size_t>();
  const auto& chunks = frozen.at("chunk_fnv64");
  for (size_t c = 0; c < chunks.size(); ++c) {
    const size_t at = c * chunk;
    if (at >= got.size() || hex64(fnv1a64_ids(got.data() + at, std::min(chunk, got.size() - at))) != chunks[c].get<std::string>())
      return msg + "; the first " + std::to_string(head.size()) + " agree, the first difference is in ids " + std::to_string(at) +
             ".." + std::to_string(at + chunk - 1);
  }
  return msg + "; every frozen chunk agrees (the difference is past the end)";
}

// "" when two JSON objects are equal, else each key that differs, a line each.
inline std::string object_differences(const nlohmann::json& got, const nlohmann::json& frozen) {
  std::string s;
  for (const auto& [k, v] : frozen.items()) {
    if (!got.contains(k)) s += "\n  " + k + ": missing (frozen " + v.dump() + ")";
    else if (got.at(k) != v) s += "\n  " + k + ": " + got.at(k).dump() + ", frozen " + v.dump();
  }
  for (const auto& [k, v] : got.items())
    if (!frozen.contains(k)) s += "\n  " + k + ": " + v.dump() + " (not frozen)";
  return s;
}

// Decompresses an .xz fixture to `dst`: with xz (Debian's xz-utils) when there is one, else with
// python3's lzma module. "" on success, else why not.
inline std::string unxz(const std::string& src, const std::string& dst) {
  const CmdResult r = run_shell("{ xz -dc '" + src + "' 2>/dev/null || /usr/bin/python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' '" +
                                src + "'; } > '" + dst + "'");
  return r.code == 0 ? "" : "cannot decompress " + src + " (neither xz nor /usr/bin/python3's lzma): " + r.out;
}

// JSON as the fixtures are written: objects one key a line, arrays of numbers and strings on one
// line (so a fixture diffs by line without a line per id).
inline void write_fixture_json(std::ostream& os, const nlohmann::json& j, int indent = 0) {
  const std::string pad(indent, ' '), in(indent + 2, ' ');
  if (j.is_object() && !j.empty()) {
    os << "{\n";
    size_t k = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++k) {
      os << in << nlohmann::json(it.key()).dump() << ": ";
      write_fixture_json(os, it.value(), indent + 2);
      os << (k + 1 < j.size() ? ",\n" : "\n");
    }
    os << pad << "}";
  } else if (j.is_array() && std::any_of(j.begin(), j.end(), [](const nlohmann::json& v) { return v.is_structured(); })) {
    os << "[\n";
    for (size_t k = 0; k < j.size(); ++k) {
      os << in;
      write_fixture_json(os, j[k], indent + 2);
      os << (k + 1 < j.size() ? ",\n" : "\n");
    }
    os << pad << "]";
  } else {
    os << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  }
}

}  // namespace looplm::test
