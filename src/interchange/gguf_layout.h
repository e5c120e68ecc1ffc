// What export and import share (docs/interchange.md): the looplm ↔ GGUF tensor names of the
// Llama block, the RoPE row order, and the byte vocabulary.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace looplm::gguf_layout {

// One tensor of a block: looplm's name after "core.<i>." and GGUF's after "blk.<i>.".
struct BlockTensor {
  const char* looplm;
  const char* gguf;
  bool rope_rows;  // q and k: rows permuted between rotate-half and adjacent pairs
};
inline const std::vector<BlockTensor>& block_tensors() {
  static const std::vector<BlockTensor> t = {
      {"attn_norm.weight", "attn_norm.weight", false}, {"attn.q.weight", "attn_q.weight", true},
      {"attn.k.weight", "attn_k.weight", true},        {"attn.v.weight", "attn_v.weight", false},
      {"attn.o.weight", "attn_output.weight", false},  {"mlp_norm.weight", "ffn_norm.weight", false},
      {"mlp.gate.weight", "ffn_gate.weight", false},   {"mlp.up.weight", "ffn_up.weight", false},
      {"mlp.down.weight", "ffn_down.weight", false},
  };
  return t;
}

// Row r of a permuted q / k matrix (adjacent pairs, llama.cpp) comes from row rope_source_row(r)
// of looplm's (rotate-half): within a head of hd rows, 2i <- i and 2i + 1 <- i + hd/2.
inline int64_t rope_source_row(int64_t r, int64_t hd) {
  const int64_t h = r / hd, j = r % hd;
  return h * hd + (j % 2 == 0 ? j / 2 : j / 2 + hd / 2);
}
// The inverse: looplm's row r comes from row rope_target_row(r) of the GGUF matrix.
inline int64_t rope_target_row(int64_t r, int64_t hd) {
  const int64_t h = r / hd, j = r % hd;
  return h * hd + (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
}

// The byte vocabulary as GPT-2's byte-level BPE spells it (each byte a printable code point: the
// printable ASCII and Latin-1 bytes stand for themselves, the rest map to U+0100 upward in order),
// so token id b is byte b and llama.cpp's `gpt2` tokenizer, given no merges, splits any text into
// its bytes.
inline std::vector<std::string> byte_level_tokens() {
  std::vector<std::string> out(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) s += (char)cp;
    else s += (char)(0xC0 | (cp >> 6)), s += (char)(0x80 | (cp & 0x3F));  // every cp < 0x800
    out[b] = s;
  }
  return out;
}

}  // namespace looplm::gguf_layout
