// A model's vocabulary as GGUF's tokenizer.ggml.* keys and back (docs/interchange.md, "Vocabulary"):
// looplm's byte vocabulary, Hugging Face byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2 / 3,
// looplm's own `data --tokenizer-train bpe`) as llama.cpp's `gpt2` tokenizer model with the
// pre-tokenizer llama.cpp names for their split pattern, and SentencePiece-style BPE tokenizers
// (byte fallback, "▁" for spaces: Llama 2, Mistral, Gemma) as llama.cpp's `llama` (SentencePiece)
// tokenizer model, each token scored by the rank of the first merge that makes it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "looplm/config.h"

namespace looplm {

namespace io {
class GgufWriter;
class GgufFile;
}  // namespace io

struct GgufVocab {
  std::string model = "gpt2";  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre = "default";  // tokenizer.ggml.pre: llama.cpp's name of the split pattern
  std::vector<std::string> tokens;
  // llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // gpt2: "left right", by rank
  std::vector<float> scores;  // llama: the merge priority of each token (higher merges first)
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  int32_t eot = -1, eom = -1;  // llama.cpp's end of a turn and of a message (apply_text_conventions)
  bool add_bos = false;
  std::string chat_template;  // tokenizer.chat_template; "": none
  bool add_space_prefix = false;  // llama: "▁" before the text and after each special token
  std::vector<std::string> notes;  // what the user should know (a normalizer llama.cpp does not run)
};

// The byte vocabulary of a model with V ids (ids 256.. are placeholders: the tokenizer never makes them).
GgufVocab gguf_byte_vocab(int64_t V);
// A tokenizer.json as a GGUF vocabulary of V ids (V >= the tokenizer's size; the ids past it are
// placeholders, as llama.cpp's own converter pads). UsageError saying why when llama.cpp has no
// tokenizer that computes it (SentencePiece-style BPE, an unknown split pattern, ...).
GgufVocab gguf_vocab_of_hf(const std::string& tokenizer_json, int64_t V);
// A checkpoint's own text conventions (Config::text: a converted model's end tokens, BOS convention
// and chat template) over the ones gguf_vocab_of_hf guesses by name.
void apply_text_conventions(GgufVocab& v, const TextConventions& t);
void write_gguf_vocab(io::GgufWriter& w, const GgufVocab& v);

// The file's vocabulary: {"byte", ""} for looplm's byte vocabulary, {"hf", tokenizer.json text}
// for a `gpt2` BPE with a pre-tokenizer this table knows or a `llama` (SentencePiece BPE)
// vocabulary with byte tokens. Error naming `path` otherwise.
struct ImportedVocab {
  std::string kind;  // "byte" | "hf"
  std::string tokenizer_json;
  int64_t size = 0;
};
ImportedVocab read_gguf_vocab(const io::GgufFile& f, const std::string& path);
// The file's text conventions: end tokens (tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id,
// in that order, each once), the BOS and add_bos_token, tokenizer.chat_template. Not the ids of
// looplm's byte vocabulary (placeholders llama.cpp needs; the byte vocabulary has none). Error naming
// `path` and the key for an id outside the vocabulary. `notes` get a line for each thing read.
TextConventions read_gguf_text_conventions(const io::GgufFile& f, const std::string& path, const ImportedVocab& v,
                                           std::vector<std::string>& notes);

}  // namespace looplm
