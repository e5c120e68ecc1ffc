// Hugging Face model directories into looplm checkpoints (docs/interchange.md, "Hugging Face
// checkpoints"): config.json + tokenizer.json + model.safetensors (or a sharded
// model.safetensors.index.json), bf16 / f16 / f32 tensors, for
//  * the Llama family: LlamaForCausalLM, MistralForCausalLM (no sliding window), Qwen2ForCausalLM
//    (q/k/v biases); grouped-query attention is expanded to one key/value head per query head
//    (the same function, larger k / v matrices: looplm has no grouped-query attention yet);
//  * NanbeigeForCausalLM (Nanbeige4.2: the whole stack looped num_loops times, the final norm
//    between loops unless skip_loop_final_norm: the residual rule's loop_norm);
//  * OuroForCausalLM (Ouro: peri_norm blocks, total_ut_steps loops with the final norm between
//    them, the learned exit gate: --exit-rule gate).
#pragma once
#include <string>
#include <vector>

#include "looplm/config.h"

namespace looplm {

struct HfImportReport {
  std::string arch;
  int tensors = 0, shards = 0;
  Config config;  // the converted model's
  std::vector<std::string> notes;
};

// Writes the looplm checkpoint of the model in `dir` to `out_file` (fp32; the tokenizer in its
// metadata). UsageError (exit 2) for an architecture or a config key looplm does not compute;
// Error (exit 1) naming the file and the problem for a missing shard, a tensor missing, extra or
// of the wrong shape or dtype, a truncated file, a tokenizer it cannot read.
HfImportReport import_hf(const std::string& dir, const std::string& out_file);

}  // namespace looplm
