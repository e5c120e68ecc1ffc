// `looplm convert`: a model from another format (GGUF, a Hugging Face directory) into a looplm run
// directory (docs/interchange.md); the library's convert_model does the work.
#include <cstdio>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_convert(int argc, char** argv) {
  CLI::App app{"Convert a model from another format into a looplm run directory (DIR/model.safetensors).", "looplm convert"};
  std::string from, out;
  app.add_option("--from", from,
                 "a GGUF file (arch llama or nanbeige), or a Hugging Face model directory (config.json, tokenizer.json, "
                 "model.safetensors or its sharded index: Llama, Mistral, Qwen2, Nanbeige4.2, Ouro, Huginn-0125)")
      ->required()
      ->type_name("FILE|DIR");
  app.add_option("--out", out, "the run directory to create (must not exist)")->required()->type_name("DIR");
  if (!parse(app, argc, argv, "convert")) return 0;
  const ConvertResult r = convert_model(from, out);
  const Config& c = r.config;
  if (r.format == "gguf")
    std::printf("%s: %s (GGUF arch %s, %d tensors) as a looplm %s checkpoint: %s/model.safetensors\n", out.c_str(), from.c_str(),
                r.arch.c_str(), r.tensors, r.weights.c_str(), out.c_str());
  else
    std::printf("%s: %s (%s, %d tensors in %d file(s)) as a looplm %s checkpoint: %s/model.safetensors\n", out.c_str(), from.c_str(),
                r.arch.c_str(), r.tensors, r.files, r.weights.c_str(), out.c_str());
  std::printf("layout: %d + %d block(s) of %s x %d loop(s) + %d, rule %s%s%s, d %d, %d heads of %d (%d key/value), vocab %d, tokenizer %s\n", c.n_prelude,
              c.n_core, c.block.c_str(), c.R, c.n_coda, c.loop_rule.c_str(),
              c.loop_rule == "residual" && c.get_bool("loop_norm") ? ", the final norm between loops" : "",
              c.exit_gate ? ", a learned exit gate (--exit-rule gate)" : "", c.d_model,
              c.n_heads, c.head_dim(), c.kv_heads(), c.vocab_size, c.tokenizer.c_str());
  for (const std::string& n : r.notes) std::printf("note: %s\n", n.c_str());
  return 0;
}

}  // namespace looplm::cli
