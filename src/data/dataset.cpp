#include "data/dataset.h"

#include <sys/stat.h>

#include "core/memory.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/json_input.h"


#include <cerrno>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "looplm/error.h"

namespace looplm {

namespace {

constexpr size_t kHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);

std::string errno_text() { return std::strerror(errno); }

int32_t read_i32_le(const std::string& b, size_t off) {
  uint32_t v = 0;
  for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[off + k]);
  return static_cast<int32_t>(v);
}

void put_i32_le(std::string& b, size_t off, int32_t x) {
  const auto v = static_cast<uint32_t>(x);
  for (int k = 0; k < 4; ++k) b[off + k] = static_cast<char>((v >> (8 * k)) & 0xFF);
}

std::vector<int32_t> read_u16_le(const std::string& b, size_t off, size_t count) {
  std::vector<int32_t> out(count);
  const auto* p = reinterpret_cast<const unsigned char*>(b.data()) + off;
  for (size_t i = 0; i < count; ++i) out[i] = p[2 * i] | (p[2 * i + 1] << 8);
  return out;
}

bool has_extension(const std::string& path, const char* ext) {
  return std::filesystem::path(path).extension() == ext;
}

struct JsonlDoc {
  size_t line;
  std::string text;
};

std::vector<JsonlDoc> parse_jsonl(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  std::vector<JsonlDoc> docs;
  size_t line_no = 0;
  for (size_t pos = 0; pos < bytes.size();) {
    size_t end = bytes.find('\n', pos);
    if (end == std::string::npos) end = bytes.size();
    std::string_view line(bytes.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    const nlohmann::json j = io::parse_json(line, path + ":" + std::to_string(line_no));
    if (!j.is_object()) throw Error(where + "expected a JSON object with a string \"text\"");
    auto it = j.find("text");
    if (it == j.end()) throw Error(where + "the object has no \"text\" key");
    if (!it->is_string()) {
      throw Error(where + "\"text\" is a " + std::string(it->type_name()) + ", expected a string");
    }
    docs.push_back({line_no, it->get<std::string>()});
  }
  return docs;
}

// Shards: every id must index the tokenizer's vocabulary.
void check_vocab(const std::string& path, const std::vector<int32_t>& ids, const Tokenizer& tok,
                 const std::string& note) {
  const int V = tok.vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= V) {
      throw Error(path + ": token id " + std::to_string(ids[i]) + " at position " +
                  std::to_string(i) + " is outside the " + tok.kind_name() +
                  " tokenizer's vocabulary (" + std::to_string(V) +
                  "); the file was made with a different tokenizer" + note);
    }
  }
}

// An hf tokenizer's identity in a sidecar: the size and CRC-32C of its tokenizer.json.
std::string hf_identity(const Tokenizer& tok) {
  const std::string& j = tok.hf_json();
  return nlohmann::json{{"tokenizer", "hf"}, {"json_bytes", j.size()}, {"json_crc32c", io::crc32c_hex(io::crc32c(0, j.data(), j.size()))}}.dump();
}

// A shard records its tokenizer by its sidecar: `looplm data` writes a char tokenizer's alphabet
// beside the shard as PATH.chars, an hf tokenizer's identity as PATH.tokenizer, and none for the
// byte tokenizer. Ids in range say nothing about which tokenizer made them (a char shard's ids all
// fit a byte vocabulary), so the sidecar must agree with the model's tokenizer. A shard without
// one is accepted for an hf tokenizer: llm.c's own GPT-2 shards, say, with GPT-2's tokenizer.json.
void check_tokenizer_sidecar(const std::string& path, const Tokenizer& tok) {
  const std::string side = path + ".chars", hf_side = path + ".tokenizer";
  struct stat st;
  const bool has = ::stat(side.c_str(), &st) == 0;
  const bool has_hf = ::stat(hf_side.c_str(), &st) == 0;
  if (tok.kind() != Tokenizer::Kind::Hf && has_hf)
    throw Error(path + ": written by a Hugging Face tokenizer (" + hf_side + "), but the model uses the " +
                tok.kind_name() + " tokenizer: train with --set tokenizer_file=TOKENIZER.json on it");
  if (tok.kind() == Tokenizer::Kind::Hf) {
    if (has)
      throw Error(path + ": written by a char tokenizer (its alphabet is in " + side + "), but the model uses a Hugging "
                  "Face tokenizer; tokenize the text again with 'looplm data --tokenizer-file'");
    if (has_hf && read_file_bytes(hf_side) != hf_identity(tok))
      throw Error(path + ": written by another tokenizer.json than the model's (" + hf_side + " records " +
                  io::brief(read_file_bytes(hf_side), 120) + "); tokenize the text again with the model's tokenizer");
  }
  if (tok.kind() == Tokenizer::Kind::Byte && has)
    throw Error(path + ": written by a char tokenizer (its alphabet is in " + side +
                "), but the model uses the byte tokenizer: train with --set tokenizer=char on it, or make a byte "
                "shard with 'looplm data --tokenizer byte'");
  if (tok.kind() == Tokenizer::Kind::Char) {
    if (!has)
      throw Error(path + ": has no alphabet beside it (" + side + "), so it was not written by a char tokenizer, "
                  "but the model uses one; make the shard with 'looplm data --alphabet ALPHABET_FILE'");
    if (read_file_bytes(side) != tok.alphabet())
      throw Error(path + ": its char alphabet (" + side + ") differs from the model's; tokenize the text again with "
                  "'looplm data --alphabet' and the model's alphabet");
  }
}

std::vector<int32_t> load_bin(const std::string& path, const Tokenizer& tok) {
  check_tokenizer_sidecar(path, tok);
  const std::string b = read_file_bytes(path);
  const int32_t first = b.size() >= 4 ? read_i32_le(b, 0) : 0;
  if (b.size() >= 4 && first == kLlmcMagic32) {
    if (b.size() < kHeaderBytes)
      throw Error(path + ": truncated llm.c shard: " + std::to_string(b.size()) + " bytes, but the header alone is " +
                  std::to_string(kHeaderBytes) + " bytes");
    const int32_t version = read_i32_le(b, 4), count = read_i32_le(b, 8);
    if (version != kLlmcVersion32)
      throw Error(path + ": llm.c uint32 shard version " + std::to_string(version) + " is not supported (expected " +
                  std::to_string(kLlmcVersion32) + ")");
    if (count < 0) throw Error(path + ": llm.c shard header has a negative token count " + std::to_string(count));
    const uint64_t expect = kHeaderBytes + 4ull * static_cast<uint64_t>(count);
    if (b.size() != expect)
      throw Error(path + ": llm.c shard header says " + std::to_string(count) + " uint32 tokens (" + std::to_string(expect) +
                  " bytes) but the file has " + std::to_string(b.size()) + " bytes (" +
                  (b.size() < expect ? "truncated" : "trailing data") + ")");
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t v = read_i32_le(b, kHeaderBytes + 4 * i);
      if (v < 0) throw Error(path + ": token id " + std::to_string((uint32_t)v) + " at position " + std::to_string(i) + " is out of range");
      ids[i] = v;
    }
    check_vocab(path, ids, tok, "");
    return ids;
  }
  if (b.size() >= 4 && first == kLlmcMagic) {
    if (b.size() < kHeaderBytes) {
      throw Error(path + ": truncated llm.c shard: " + std::to_string(b.size()) +
                  " bytes, but the header alone is " + std::to_string(kHeaderBytes) + " bytes");
    }
    const int32_t version = read_i32_le(b, 4);
    if (version != kLlmcVersion) {
      throw Error(path + ": llm.c shard version " + std::to_string(version) +
                  " is not supported (expected " + std::to_string(kLlmcVersion) +
                  ": uint16 tokens)" + (version == 2 ? "; version 2 (uint32 tokens) is not read (llm.c writes uint32 "
                                                       "shards with magic " + std::to_string(kLlmcMagic32) + ", read here)" : ""));
    }
    const int32_t count = read_i32_le(b, 8);
    if (count < 0) {
      throw Error(path + ": llm.c shard header has a negative token count " + std::to_string(count));
    }
    const uint64_t expect = kHeaderBytes + 2ull * static_cast<uint64_t>(count);
    if (b.size() != expect) {
      throw Error(path + ": llm.c shard header says " + std::to_string(count) + " tokens (" +
                  std::to_string(expect) + " bytes) but the file has " + std::to_string(b.size()) +
                  " bytes (" + (b.size() < expect ? "truncated" : "trailing data") + ")");
    }
    std::vector<int32_t> ids = read_u16_le(b, kHeaderBytes, static_cast<size_t>(count));
    check_vocab(path, ids, tok, "");
    return ids;
  }
  if (b.size() % 2 != 0) {
    throw Error(path + ": headerless nanoGPT token file has an odd size (" +
                std::to_string(b.size()) + " bytes); expected uint16 tokens");
  }
  std::vector<int32_t> ids = read_u16_le(b, 0, b.size() / 2);
  check_vocab(path, ids, tok,
              " (read as a headerless nanoGPT uint16 file because its first int32 is " +
                  std::to_string(first) + ", not the llm.c magic " + std::to_string(kLlmcMagic) +
                  ")");
  return ids;
}

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string origin_or(std::string_view origin) {
  return origin.empty() ? std::string("data") : std::string(origin);
}

}  // namespace

std::string read_file_bytes(const std::string& path) {
  // A data file is held as its bytes and, tokenized, as 32-bit ids: about 5 bytes per byte. A
  // regular file is refused by its size before it is read; a pipe or device (a FIFO, /dev/zero)
  // once it has given more than the budget allows.
  const uint64_t budget = memory_budget();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    require_memory(5.0 * (double)st.st_size, path + " (" + format_bytes((double)st.st_size) + ", held with its 32-bit token ids)",
                   "use a smaller file, or split it");
  try {
    return io::read_file(path, budget ? budget / 5 : UINT64_MAX);
  } catch (const io::FileTooLarge&) {
    throw Error(path + " gave more than " + format_bytes((double)budget / 5) + " without ending (not a regular file); held with "
                  "its 32-bit token ids that needs more than the " + format_bytes((double)budget) + " looplm may use here "
                  "(the memory available, or LOOPLM_MEMORY_LIMIT)");
  }
}

size_t held_out_from(size_t n, double val_split) {
  return n - (size_t)std::llround((double)n * val_split);
}

std::string validation_name(const std::string& data_train, const std::string& data_val, double val_split) {
  if (!data_val.empty()) return data_val;
  char pct[32];
  std::snprintf(pct, sizeof pct, "%g%%", 100 * val_split);
  return "the last " + std::string(pct) + " of " + data_train + " (val_split)";
}

TrainValTokens load_train_val(const std::string& data_train, const std::string& data_val, double val_split,
                              const Tokenizer& tok) {
  TrainValTokens d;
  d.train = load_tokens(data_train, tok);
  d.val_origin = validation_name(data_train, data_val, val_split);
  if (!data_val.empty()) {
    d.val = load_tokens(data_val, tok);
    return d;
  }
  const size_t from = held_out_from(d.train.size(), val_split);
  d.val.assign(d.train.begin() + (std::ptrdiff_t)from, d.train.end());
  d.train.resize(from);
  return d;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  io::write_file_atomic(path, bytes.data(), bytes.size());
}

void write_llmc_shard(const std::string& path, const std::vector<int32_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    throw Error("cannot write '" + path + "': " + std::to_string(tokens.size()) +
                " tokens do not fit the llm.c header's int32 count");
  }
  bool wide = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0)
      throw Error("cannot write '" + path + "': token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is negative");
    wide = wide || tokens[i] > 0xFFFF;
  }
  const size_t width = wide ? 4 : 2;
  std::string b(kHeaderBytes + width * tokens.size(), '\0');
  put_i32_le(b, 0, wide ? kLlmcMagic32 : kLlmcMagic);
  put_i32_le(b, 4, wide ? kLlmcVersion32 : kLlmcVersion);
  put_i32_le(b, 8, static_cast<int32_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i)
    for (size_t k = 0; k < width; ++k) b[kHeaderBytes + width * i + k] = static_cast<char>((tokens[i] >> (8 * k)) & 0xFF);
  write_file_atomic(path, b);
}

void write_tokenizer_sidecar(const std::string& shard_path, const Tokenizer& tok) {
  LOOPLM_ASSERT(tok.kind() == Tokenizer::Kind::Hf, "write_tokenizer_sidecar: an hf tokenizer only");
  write_file_atomic(shard_path + ".tokenizer", hf_identity(tok));
}

DataFormat detect_format(const std::string& path) {
  if (has_extension(path, ".jsonl")) return DataFormat::Jsonl;
  if (!has_extension(path, ".bin")) return DataFormat::Text;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot open '" + path + "': " + errno_text());
  unsigned char h[4];
  const size_t n = std::fread(h, 1, 4, f);
  std::fclose(f);
  const int32_t first = static_cast<int32_t>(h[0] | (h[1] << 8) | (h[2] << 16) |
                                             (static_cast<uint32_t>(h[3]) << 24));
  return n == 4 && (first == kLlmcMagic || first == kLlmcMagic32) ? DataFormat::LlmcShard : DataFormat::NanoGptBin;
}

std::string load_text(const std::string& path) {
  if (has_extension(path, ".bin")) {
    throw Error(path + ": is a token file (.bin), not text; it has no text to read");
  }
  if (!has_extension(path, ".jsonl")) return read_file_bytes(path);
  std::string out;
  bool first = true;
  for (const JsonlDoc& d : parse_jsonl(path)) {
    if (!first) out += kDocSeparator;
    out += d.text;
    first = false;
  }
  return out;
}

std::vector<int32_t> load_tokens(const std::string& path, const Tokenizer& tok) {
  if (has_extension(path, ".bin")) return load_bin(path, tok);
  if (has_extension(path, ".jsonl")) {
    std::vector<JsonlDoc> docs = parse_jsonl(path);
    std::vector<int32_t> sep;
    if (docs.size() > 1) {
      try {
        sep = tok.encode(kDocSeparator);
      } catch (const Error& e) {
        throw Error(path + ": cannot encode the document separator \"\\n\\n\": " + e.what());
      }
    }
    std::vector<int32_t> ids;
    for (size_t k = 0; k < docs.size(); ++k) {
      if (k > 0) ids.insert(ids.end(), sep.begin(), sep.end());
      try {
        std::vector<int32_t> d = tok.encode(docs[k].text);
        ids.insert(ids.end(), d.begin(), d.end());
      } catch (const Error& e) {
        throw Error(path + ":" + std::to_string(docs[k].line) + ": " + e.what() +
                    " (offset within this document's text)");
      }
    }
    return ids;
  }
  const std::string text = read_file_bytes(path);
  try {
    return tok.encode(text);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

uint64_t counter_rng_u64(uint64_t seed, uint64_t counter) {
  // kDomain separates this stream from other users of the same seed (ASCII "looplmDT").
  constexpr uint64_t kDomain = 0x6C6F6F706C6D4454ull;
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  const uint64_t key = mix64(seed ^ kDomain);
  return mix64(key + (counter + 1) * kGolden);
}

TokenStream::TokenStream(std::vector<int32_t> tokens, int T, int B, uint64_t seed,
                         std::string origin)
    : tokens_(std::move(tokens)), T_(T), B_(B), seed_(seed) {
  if (T < 1) throw UsageError("context must be >= 1 (got " + std::to_string(T) + ")");
  if (B < 1) throw UsageError("batch_size must be >= 1 (got " + std::to_string(B) + ")");
  if (tokens_.size() < static_cast<size_t>(T) + 1) {
    throw Error(origin_or(origin) + ": " + std::to_string(tokens_.size()) +
                " tokens are too few for context " + std::to_string(T) + " (a training window needs " +
                std::to_string(T + 1ll) + " tokens)");
  }
}

void TokenStream::next_batch(int32_t* x, int32_t* y) {
  const uint64_t n_offsets = tokens_.size() - static_cast<uint64_t>(T_);  // starts 0..N-T-1
  for (int b = 0; b < B_; ++b) {
    const uint64_t r = counter_rng_u64(seed_, cursor_ * static_cast<uint64_t>(B_) + b);
    const int32_t* w = tokens_.data() + uniform_below(r, n_offsets);
    std::memcpy(x + static_cast<size_t>(b) * T_, w, sizeof(int32_t) * T_);
    std::memcpy(y + static_cast<size_t>(b) * T_, w + 1, sizeof(int32_t) * T_);
  }
  ++cursor_;
}

int64_t eval_windows(std::span<const int32_t> tokens, int T, std::string_view origin) {
  if (T < 1) throw UsageError("context must be >= 1 (got " + std::to_string(T) + ")");
  if (tokens.size() < static_cast<size_t>(T) + 1) {
    throw Error(origin_or(origin) + ": " + std::to_string(tokens.size()) +
                " tokens are too few for context " + std::to_string(T) + " (an eval window needs " +
                std::to_string(T + 1ll) + " tokens)");
  }
  return static_cast<int64_t>((tokens.size() - 1) / static_cast<size_t>(T));
}

void eval_window(std::span<const int32_t> tokens, int T, int64_t i, int32_t* x, int32_t* y) {
  LOOPLM_ASSERT(T >= 1 && i >= 0 && static_cast<size_t>(i + 1) * T + 1 <= tokens.size(),
                "eval window index out of range");
  const int32_t* w = tokens.data() + static_cast<size_t>(i) * T;
  std::memcpy(x, w, sizeof(int32_t) * T);
  std::memcpy(y, w + 1, sizeof(int32_t) * T);
}

}  // namespace looplm
