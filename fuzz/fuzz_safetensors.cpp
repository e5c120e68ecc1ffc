// The safetensors reader (io/safetensors.h) on arbitrary bytes: SafetensorsFile::parse, then every
// tensor through the checked reads. Only looplm::Error may come out; anything else is a finding.
#define LOOPLM_FUZZ_SAFETENSORS_MUTATOR
#include "fuzz_common.h"

#include "io/safetensors.h"
#include "looplm/error.h"

using namespace looplm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // The input's own buffer, not a copy: a read past its end is an ASan report (fuzz_common.h).
    const io::SafetensorsFile f = io::SafetensorsFile::parse(fuzz::input_bytes(data, size), "fuzz");
    for (const std::string& name : f.names()) {
      const io::SafetensorsFile::TensorInfo& t = f.get(name);
      try {
        f.read_f32(name, t.shape);
      } catch (const Error&) {
      }
      try {
        std::vector<int64_t> other = t.shape;  // a shape mismatch is an Error, never a read
        other.push_back(2);
        f.read_f32(name, other);
      } catch (const Error&) {
      }
      try {
        f.read_i32(name);
      } catch (const Error&) {
      }
    }
    try {
      f.get("no such tensor");
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
  return 0;
}
