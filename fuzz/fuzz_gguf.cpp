// GGUF files (io/gguf.h, interchange/gguf_model.h): GgufFile::parse on the input's own buffer, the
// typed metadata reads and read_f32 of every tensor it converts, then the same bytes as a file
// through import_gguf (`looplm convert --from`): arch and hyperparameters, vocabulary, every
// tensor's name, shape and type against the layout, the model built and written as a checkpoint.
// Only looplm::Error may come out.
#include "fuzz_common.h"

#include "interchange/gguf_model.h"
#include "io/gguf.h"
#include "looplm/error.h"

using namespace looplm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const io::GgufFile f = io::GgufFile::parse(fuzz::input_bytes(data, size), "fuzz");
    for (const char* key : {"general.architecture", "llama.block_count", "llama.rope.freq_base", "nanbeige.skip_loop_final_norm"}) {
      try { f.get_string(key); } catch (const Error&) {}
      try { f.get_uint(key); } catch (const Error&) {}
      try { f.get_float(key); } catch (const Error&) {}
      try { f.get_bool(key); } catch (const Error&) {}
    }
    for (const auto& t : f.tensors()) {
      if (!io::ggml_type_convertible(t.type) || t.numel() > (1 << 22)) continue;
      std::vector<float> out(t.numel());
      try { f.read_f32(t.name, t.shape(), out.data()); } catch (const Error&) {}
    }
  } catch (const Error&) {
  }
  static const std::string out = fuzz::scratch_dir() + "/converted.safetensors";
  try {
    import_gguf(fuzz::write_scratch("model.gguf", std::string_view((const char*)data, size)), out);
  } catch (const Error&) {
  }
  return 0;
}
