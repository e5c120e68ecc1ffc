// A looplm checkpoint (model/model_io.h): load_model on arbitrary bytes, written to a file (it takes
// a path; io::SafetensorsFile::open maps it). That is the safetensors header, then the config in
// the metadata (parsed, validated, laid out), every tensor against it, the quantized "weights" /
// "layout" / "packed" list, and the model built from the file. Only looplm::Error may come out.
#define LOOPLM_FUZZ_SAFETENSORS_MUTATOR
#include "fuzz_common.h"

#include "looplm/error.h"
#include "model/model.h"
#include "model/model_io.h"

using namespace looplm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_dir() + "/model.safetensors";
  fuzz::write_scratch("model.safetensors", std::string_view((const char*)data, size));
  // The load options from the input's size, so an input always takes the same path: inference
  // (weights used in place or copied), lean (quantized matrices never expanded), training.
  LoadModelOptions o;
  o.lean = size & 1;
  o.allow_nonfinite = (size >> 1) & 1;
  o.for_training = (size & 12) == 12;
  try {
    std::unique_ptr<Model> m = load_model(path, o);
  } catch (const Error&) {
  }
  return 0;
}
