// `looplm export`: a checkpoint to llama.cpp's GGUF (docs/interchange.md), so llama.cpp and ollama
// run a looplm model: arch llama for a dense stack, nanbeige for a looped one. The library's
// export_model does the work.
#include <cstdio>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_export(int argc, char** argv) {
  CLI::App app{"Write a checkpoint as a GGUF file for llama.cpp / ollama (Llama blocks, dense or looped).", "looplm export"};
  std::string in, out;
  ExportOptions o;
  app.add_option("--checkpoint", in, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--format", o.format, "the file format: gguf")->check(CLI::IsMember({"gguf"}));
  app.add_option("--type", o.type,
                 "GGUF type of the weight matrices: " + joined(available_gguf_types()) + " (norms stay f32). Default: the "
                 "checkpoint's own (f32 for fp32; a q8_0 / q4_0 checkpoint is copied code for code)")
      ->check(CLI::IsMember(available_gguf_types()));
  app.add_option("--name", o.name, "general.name in the file (default looplm)");
  app.add_option("--out", out, "the .gguf file to write")->required()->type_name("FILE");
  if (!parse(app, argc, argv, "export")) return 0;
  const ExportResult r = export_model(in, out, o);
  std::printf("%s: GGUF arch %s, %d tensors, weight matrices %s%s, %.2f MB\n", out.c_str(), r.arch.c_str(), r.tensors,
              r.type.c_str(), r.exact_codes ? " (the checkpoint's codes, copied)" : "", r.bytes / 1e6);
  for (const std::string& n : r.notes) std::printf("note: %s\n", n.c_str());
  if (r.arch == "nanbeige")
    std::printf("looped: llama.cpp runs its %d block(s) %d times (nanbeige.num_loops), every token to the full depth\n",
                r.config.n_core, r.config.R);
  return 0;
}

}  // namespace looplm::cli
