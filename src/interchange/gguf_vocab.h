// A model's vocabulary as GGUF's tokenizer.ggml.* keys and back (docs/interchange.md, "Vocabulary"):
// looplm's byte vocabulary, and Hugging Face byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2 / 3,
// looplm's own `data --tokenizer-train bpe`) as llama.cpp's `gpt2` tokenizer model with the
// pre-tokenizer llama.cpp names for their split pattern.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace looplm {

namespace io {
class GgufWriter;
class GgufFile;
}  // namespace io

struct GgufVocab {
  std::string model = "gpt2";  // tokenizer.ggml.model
  std::string pre = "default";  // tokenizer.ggml.pre: llama.cpp's name of the split pattern
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // llama.cpp's token types: 1 normal, 3 control, 4 user-defined, 5 unused
  std::vector<std::string> merges;  // "left right", by rank
  int32_t bos = -1, eos = -1;
  bool add_bos = false;
  std::vector<std::string> notes;  // what the user should know (a normalizer llama.cpp does not run)
};

// The byte vocabulary of a model with V ids (ids 256.. are placeholders: the tokenizer never makes them).
GgufVocab gguf_byte_vocab(int64_t V);
// A tokenizer.json as a GGUF vocabulary of V ids (V >= the tokenizer's size; the ids past it are
// placeholders, as llama.cpp's own converter pads). UsageError saying why when llama.cpp has no
// tokenizer that computes it (SentencePiece-style BPE, an unknown split pattern, ...).
GgufVocab gguf_vocab_of_hf(const std::string& tokenizer_json, int64_t V);
void write_gguf_vocab(io::GgufWriter& w, const GgufVocab& v);

// The file's vocabulary: {"byte", ""} for looplm's byte vocabulary, {"hf", tokenizer.json text}
// for a `gpt2` BPE with a pre-tokenizer this table knows. Error naming `path` otherwise.
struct ImportedVocab {
  std::string kind;  // "byte" | "hf"
  std::string tokenizer_json;
  int64_t size = 0;
};
ImportedVocab read_gguf_vocab(const io::GgufFile& f, const std::string& path);

}  // namespace looplm
