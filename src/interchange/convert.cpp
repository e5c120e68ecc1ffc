// The library's interchange entry points (include/looplm/looplm.h, docs/interchange.md): a run
// directory from another format, committed by rename; a checkpoint as GGUF.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "interchange/gguf_model.h"
#include "interchange/hf_model.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "looplm/looplm.h"
#include "model/model_io.h"

namespace looplm {

ConvertResult convert_model(const std::string& from, const std::string& out_dir) {
  namespace fs = std::filesystem;
  struct stat st;
  if (::stat(from.c_str(), &st) != 0) throw Error("convert: cannot read " + from + ": " + std::strerror(errno));
  std::string out = out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty()) throw UsageError("convert: name the run directory to create");
  if (fs::exists(out)) throw UsageError("convert: " + out + " exists; name a new directory");
  const std::string tmp = out + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    ConvertResult r;
    if (S_ISDIR(st.st_mode)) {
      const HfImportReport h = import_hf(from, tmp + "/model.safetensors");
      r = {"huggingface", h.arch, "fp32", h.tensors, h.shards, h.config, h.notes};
    } else {
      const GgufImportReport g = import_gguf(from, tmp + "/model.safetensors");
      r = {"gguf", g.arch, g.weights, g.tensors, 1, Config{}, g.notes};
      const auto f = io::SafetensorsFile::open(tmp + "/model.safetensors");
      r.config = Config::from_json_text(f.metadata().at("config"), tmp);
      r.config.text = text_conventions_of(r.config, f.metadata(), tmp);
    }
    const nlohmann::json prov = {{"converted_from", from}, {"format", r.format}, {"arch", r.arch}, {"weights", r.weights}};
    io::write_file_atomic(tmp + "/convert.json", prov.dump(2) + "\n");
    fs::rename(tmp, out);
    return r;
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

ExportResult export_model(const std::string& checkpoint, const std::string& out_file, const ExportOptions& o) {
  if (o.format != "gguf") throw UsageError("export: format '" + o.format + "' (looplm exports gguf)");
  std::string in = checkpoint;
  struct stat st;
  if (::stat(in.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) in += "/model.safetensors";
  if (::stat(out_file.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw UsageError("export: " + out_file + " is a directory; name the file to write (e.g. " + out_file + "/model.gguf)");
  {  // an unsupported layout is refused before the weights are read
    const auto f = io::SafetensorsFile::open(in);
    auto it = f.metadata().find("config");
    if (it != f.metadata().end()) {
      Config c = Config::from_json_text(it->second, in);
      auto tok = f.metadata().find(kTokenizerMetadataKey);  // an hf tokenizer's text travels beside the config
      if (c.tokenizer == "hf" && tok != f.metadata().end()) c.tokenizer_json = tok->second;
      if (std::string why = gguf_export_refusal(c); !why.empty())
        throw UsageError("export: cannot write " + in + " as GGUF: " + why + ". " + kGgufWayOut);
    }
  }
  std::unique_ptr<Model> m = load_model(in);
  GgufExportOptions go;
  go.type = o.type;
  go.name = o.name;
  const GgufExportReport g = export_gguf(*m, out_file, go);
  return {g.arch, g.type, g.tensors, g.bytes, g.exact_codes, m->config(), g.notes};
}

}  // namespace looplm
