// A model's weights on disk (docs/format.md): model.safetensors holds every parameter under its
// checkpoint name and the full config in the metadata.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "io/safetensors.h"
#include "model/model.h"

namespace looplm {

// `extra` goes into the metadata beside the config (a training checkpoint adds its "step").
io::WrittenFile save_model(const std::string& path, const Model& m, const std::map<std::string, std::string>& extra = {});
// A checkpoint in the model's inference weight format (Model::prepare_inference, e.g. q8_0): each
// weight matrix as its packed bytes (tensor "packed.<first param>", dtype U8), the other params
// fp32; metadata "weights" names the format and "packed" lists the matrices (docs/format.md).
// load_model reads it back (the packed bytes as they are, not requantized), and `extra` goes into the metadata.
void save_model_packed(const std::string& path, const Model& m, const std::map<std::string, std::string>& extra = {});

struct LoadModelOptions {
  // Training (resume): values are copied and gradients allocated. Inference: no gradients, and the
  // file's tensors are used in place when they are fp32 in the model's own order (a looplm
  // checkpoint), so loading maps the file instead of copying it.
  bool for_training = false;
  // A tensor holding NaN or ±Inf is an error naming it, unless this is set.
  bool allow_nonfinite = false;
  // A quantized checkpoint, for inference in its own format: fp32 values only for the packed
  // matrices the model also reads as values (WeightMatrix::read_as_values); the others are
  // multiplied from the packed bytes and their fp32 values are never written, so they take no
  // memory (a q4_0 model's resident set is then its file, not its file plus an fp32 copy).
  // Packing into another format later fills them first (ParamStore::pack). Their finiteness is
  // still checked, one dequantized matrix at a time. The packed bytes are copied into working
  // memory (2 MB pages where the kernel gives them), each one's file pages released once copied.
  bool lean = false;
};
// A checkpoint's text conventions (metadata "looplm.text"; none when absent), checked: Error naming
// `path` and the field for a malformed one or an id outside the config's vocabulary.
TextConventions text_conventions_of(const Config& c, const std::map<std::string, std::string>& metadata, const std::string& path);

// Reads the config from the metadata and checks every tensor the config declares (name, shape,
// dtype, nothing unexpected) before anything is allocated, then builds the model and checks that
// every value is finite.
std::unique_ptr<Model> load_model(const std::string& path, const LoadModelOptions& o = {});

}  // namespace looplm
