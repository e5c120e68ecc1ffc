// looplm models to and from llama.cpp's GGUF (docs/interchange.md).
//
// Two llama.cpp architectures compute what a looplm model of the Llama block computes:
//  * `llama`: a dense stack (n_prelude = n_coda = 0, R = 1) of pre_norm blocks with RMSNorm,
//    SwiGLU, RoPE and no biases;
//  * `nanbeige`: the same blocks as a plain loop, 0 + K × R + 0 with the residual rule: GGUF
//    block_count = K physical blocks, `nanbeige.num_loops` = R, each loop slot with its own KV.
//    `nanbeige.skip_loop_final_norm` is the residual rule's loop_norm negated (false: the final norm
//    also between loops, as Nanbeige4.2 itself runs).
// Every other layout (a prelude or coda, another loop rule or block, LayerNorm, GELU, learned
// positions, biases) is refused with the reason: no llama.cpp architecture computes it.
//
// RoPE: looplm rotates the channel pairs (i, i + hd/2) (rotate-half); llama.cpp's `llama` and
// `nanbeige` rotate (2i, 2i + 1). q.k is unchanged when q's and k's rows are permuted alike
// within each head, so export writes row 2i = old row i, 2i + 1 = old row i + hd/2, and import
// undoes it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "looplm/config.h"
#include "model/model.h"

namespace looplm {

// "" when the config can be exported, else why not (one sentence naming the first obstacle).
// check_tokenizer false: the layout alone (the caller builds the vocabulary, which says why not).
std::string gguf_export_refusal(const Config& c, bool check_tokenizer = true);
// What a refusal adds: the presets that do export.
extern const char* const kGgufWayOut;

struct GgufExportOptions {
  // f32 | f16 | q8_0 | q4_0; "" = the checkpoint's own (f32 for fp32 and bf16 checkpoints, q8_0 /
  // q4_0 for checkpoints quantized to those).
  std::string type;
  std::string name = "looplm";  // general.name
};

struct GgufExportReport {
  std::string arch, type;
  int tensors = 0;
  uint64_t bytes = 0;
  // The weight matrices were copied code for code from the checkpoint's own quantization
  // (q8_0 / q4_0 into the same GGUF type) rather than quantized again.
  bool exact_codes = false;
  std::vector<std::string> notes;  // e.g. a normalizer llama.cpp does not run
};

// Writes `m` (loaded for inference; its fp32 values present, i.e. not a lean load) to `path`
// atomically. UsageError (exit 2) for a layout or type that cannot be exported.
GgufExportReport export_gguf(Model& m, const std::string& path, const GgufExportOptions& o);

struct GgufImportReport {
  std::string arch, weights;  // weights: the checkpoint's format (fp32, q8_0, q4_0)
  int tensors = 0;
  std::vector<std::string> notes;
};

// Reads a GGUF of arch llama or nanbeige and writes a looplm checkpoint (safetensors) to
// `out_file` atomically. Weight matrices stored as q8_0 / q4_0 are kept code for code (a q8_0 /
// q4_0 checkpoint); f32 / f16 / bf16 give an fp32 checkpoint; a file mixing types is read as
// fp32 values (exact) with a note. The file's end tokens, BOS convention and chat template go into
// Config::text (gguf_vocab.h). Error (exit 1) naming the file and the problem for anything else:
// another arch, a tensor missing or of the wrong shape, a vocabulary looplm cannot represent, an
// end-token or BOS id outside the vocabulary.
GgufImportReport import_gguf(const std::string& gguf_path, const std::string& out_file);

}  // namespace looplm
