// `looplm convert`: a model from another format (GGUF, a Hugging Face directory) into a looplm run
// directory (docs/interchange.md).
// The directory appears whole or not at all: it is written under a temporary name and renamed.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "interchange/gguf_model.h"
#include "interchange/hf_model.h"
#include "io/atomic_file.h"

namespace looplm::cli {

int cmd_convert(int argc, char** argv) {
  CLI::App app{"Convert a model from another format into a looplm run directory (DIR/model.safetensors).", "looplm convert"};
  std::string from, out;
  app.add_option("--from", from,
                 "a GGUF file (arch llama or nanbeige), or a Hugging Face model directory (config.json, tokenizer.json, "
                 "model.safetensors or its sharded index: Llama, Mistral, Qwen2, Nanbeige4.2, Ouro)")
      ->required()
      ->type_name("FILE|DIR");
  app.add_option("--out", out, "the run directory to create (must not exist)")->required()->type_name("DIR");
  if (!parse(app, argc, argv, "convert")) return 0;
  namespace fs = std::filesystem;
  struct stat st;
  if (::stat(from.c_str(), &st) != 0) throw Error("convert: cannot read " + from + ": " + std::strerror(errno));
  const bool hf = S_ISDIR(st.st_mode);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (fs::exists(out)) throw UsageError("convert: --out " + out + " exists; name a new directory");
  const std::string tmp = out + ".tmp." + std::to_string(::getpid());
  fs::create_directories(tmp);
  try {
    std::vector<std::string> notes;
    if (hf) {
      const HfImportReport r = import_hf(from, tmp + "/model.safetensors");
      nlohmann::json prov = {{"converted_from", from}, {"format", "huggingface"}, {"arch", r.arch}, {"weights", "fp32"}};
      io::write_file_atomic(tmp + "/convert.json", prov.dump(2) + "\n");
      fs::rename(tmp, out);
      const Config& c = r.config;
      std::printf("%s: %s (%s, %d tensors in %d file(s)) as a looplm fp32 checkpoint: %s/model.safetensors\n", out.c_str(),
                  from.c_str(), r.arch.c_str(), r.tensors, r.shards, out.c_str());
      std::printf("layout: %d block(s) of %s x %d loop(s)%s%s, d %d, %d heads, vocab %d, tokenizer.json carried along\n", c.n_core,
                  c.block.c_str(), c.R, c.get_bool("loop_norm") ? ", the final norm between loops" : "",
                  c.get_bool("exit_gate") ? ", a learned exit gate (--exit-rule gate)" : "", c.d_model, c.n_heads, c.vocab_size);
      notes = r.notes;
    } else {
      const GgufImportReport r = import_gguf(from, tmp + "/model.safetensors");
      nlohmann::json prov = {{"converted_from", from}, {"format", "gguf"}, {"arch", r.arch}, {"weights", r.weights}};
      io::write_file_atomic(tmp + "/convert.json", prov.dump(2) + "\n");
      fs::rename(tmp, out);
      std::printf("%s: %s (GGUF arch %s, %d tensors) as a looplm %s checkpoint: %s/model.safetensors\n", out.c_str(), from.c_str(),
                  r.arch.c_str(), r.tensors, r.weights.c_str(), out.c_str());
      notes = r.notes;
    }
    for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return 0;
}

}  // namespace looplm::cli
