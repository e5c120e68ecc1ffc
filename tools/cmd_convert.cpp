// `looplm convert`: a model from another format into a looplm run directory (docs/interchange.md).
// The directory appears whole or not at all: it is written under a temporary name and renamed.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "interchange/gguf_model.h"
#include "io/atomic_file.h"

namespace looplm::cli {

int cmd_convert(int argc, char** argv) {
  CLI::App app{"Convert a model from another format into a looplm run directory (DIR/model.safetensors).", "looplm convert"};
  std::string from, out;
  app.add_option("--from", from, "a GGUF file (arch llama or nanbeige)")->required()->type_name("FILE");
  app.add_option("--out", out, "the run directory to create (must not exist)")->required()->type_name("DIR");
  if (!parse(app, argc, argv, "convert")) return 0;
  namespace fs = std::filesystem;
  struct stat st;
  if (::stat(from.c_str(), &st) != 0) throw Error("convert: cannot read " + from + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw UsageError("convert: --from " + from + " is a directory; looplm converts GGUF files");
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (fs::exists(out)) throw UsageError("convert: --out " + out + " exists; name a new directory");
  const std::string tmp = out + ".tmp." + std::to_string(::getpid());
  fs::create_directories(tmp);
  try {
    const GgufImportReport r = import_gguf(from, tmp + "/model.safetensors");
    nlohmann::json prov = {{"converted_from", from}, {"format", "gguf"}, {"arch", r.arch}, {"weights", r.weights}};
    io::write_file_atomic(tmp + "/convert.json", prov.dump(2) + "\n");
    fs::rename(tmp, out);
    std::printf("%s: %s (GGUF arch %s, %d tensors) as a looplm %s checkpoint: %s/model.safetensors\n", out.c_str(), from.c_str(),
                r.arch.c_str(), r.tensors, r.weights.c_str(), out.c_str());
    for (const std::string& n : r.notes) std::printf("note: %s\n", n.c_str());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return 0;
}

}  // namespace looplm::cli
