// Hugging Face model directories into looplm checkpoints (docs/interchange.md, "Hugging Face
// checkpoints"): config.json + tokenizer.json + model.safetensors (or a sharded
// model.safetensors.index.json), bf16 / f16 / f32 tensors, for
//  * the Llama family: LlamaForCausalLM, MistralForCausalLM (no sliding window), Qwen2ForCausalLM
//    (q/k/v biases); grouped-query attention is kept (n_kv_heads);
//  * NanbeigeForCausalLM (Nanbeige4.2: the whole stack looped num_loops times, the final norm
//    between loops unless skip_loop_final_norm: the residual rule's loop_norm);
//  * OuroForCausalLM (Ouro: peri_norm blocks, total_ut_steps loops with the final norm between
//    them, the learned exit gate: --exit-rule gate);
//  * RavenForCausalLM (Huginn-0125: prelude, a sandwich core looped with the linear injection, coda).
// Beside the weights, the model's text conventions (its end tokens, BOS convention and chat
// template: generation_config.json, tokenizer_config.json) go into Config::text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "looplm/config.h"

namespace looplm {

class Tokenizer;

struct HfImportReport {
  std::string arch;
  int tensors = 0, shards = 0;
  Config config;  // the converted model's
  std::vector<std::string> notes;
};

// Writes the looplm checkpoint of the model in `dir` to `out_file` (fp32; the tokenizer and the text
// conventions in its metadata). UsageError (exit 2) for an architecture or a config key looplm does
// not compute; Error (exit 1) naming the file and the problem for a missing shard, a tensor missing,
// extra or of the wrong shape or dtype, a truncated file, a tokenizer it cannot read, a malformed
// generation_config.json or tokenizer_config.json field.
HfImportReport import_hf(const std::string& dir, const std::string& out_file);

// ---- the binding table (hf_bindings.cpp): which file tensor fills each looplm parameter.

enum class HfFamily { llama, nanbeige, ouro, huginn };

// How a looplm parameter is filled, as llama.cpp's loader marks tensors required or not:
//  * required: the tensor must be in the files (its absence is an Error naming it and why);
//  * optional: the tensor when the files have it, else zeros (a bias some models of the family
//    have and others do not: zero is the model without it);
//  * absent: the family has no such tensor (looplm's `bias` key puts a bias on every linear, the
//    family only on some): zeros, and the tensor in a file is an extra one (refused).
enum class HfNeed { required, optional, absent };

struct HfBinding {
  std::string param;   // looplm's parameter
  std::string tensor;  // the file's tensor ("" for absent)
  HfNeed need = HfNeed::required;
  std::string why;     // for a message: what asks for it (required) or what zero means (optional, absent)
  std::vector<int64_t> file_shape;  // the tensor's shape in the file; empty: the parameter's own
  int64_t offset = 0;               // the parameter's first element within a fused tensor
  bool pair_rope = false;           // q / k rows stored for adjacent-pair RoPE (Huginn): reordered
};

// The family's table for the model `c` describes (the config as converted; `arch` the
// architectures[0] name, which decides Qwen2's fixed q/k/v biases and names the family in messages).
std::vector<HfBinding> hf_bindings(HfFamily family, const std::string& arch, const Config& c, bool qkv_bias);
// Error naming the first parameter of c's layout that no binding fills, and `arch`; and any binding
// of a parameter the layout lacks (a table out of step with the layout). Every parameter is then
// filled from a tensor or, declared so, with zeros: nothing is left at zero silently.
void check_hf_bindings(const std::vector<HfBinding>& table, const Config& c, const std::string& arch);

// ---- text conventions (hf_text.cpp)

// The model's text conventions from `dir`'s generation_config.json and tokenizer_config.json
// (docs/interchange.md, "What is read from a model"): end tokens (generation_config.json's
// eos_token_id first, then tokenizer_config.json's eos_token, deduplicated), the BOS id and whether
// a prompt starts with it, the chat template, clean_up_tokenization_spaces. A missing file or field
// is not stored; a malformed one is an Error naming the file and the field. `vocab_size` is the
// model's (ids at or past it are refused). `notes` get a line for each thing read.
TextConventions read_hf_text_conventions(const std::string& dir, const Tokenizer& tok, int vocab_size, std::vector<std::string>& notes);

}  // namespace looplm
