// safetensors reader and writer (format: https://github.com/huggingface/safetensors; layout and the
// checkpoint names in docs/format.md).
//
//   [u64 LE header length N][N bytes JSON header, space-padded][data section]
//   header = {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, ...}     offsets are relative to the data section
//
// The writer streams through an AtomicWriter (no second copy of the data in memory). The reader
// trusts nothing: every length, offset, shape and dtype is checked against the file, and each
// failure is a looplm::Error naming the file, the tensor and the mismatch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/mapped_file.h"

namespace looplm::io {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

size_t dtype_size(DType t);            // bytes per element
const char* dtype_name(DType t);       // the safetensors spelling: "F32", "BF16", ...
bool dtype_from_name(const std::string& s, DType* out);  // false for an unknown spelling
std::string shape_str(const std::vector<int64_t>& shape);  // "[24, 24]"; "[]" for a scalar

// One tensor to write. data holds product(shape) * dtype_size(dtype) bytes, little-endian, row-major
// (may be null when that is 0). shape {} is a 0-d scalar (1 element).
struct TensorRef {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// What was written: the file's bytes and their CRC-32C (io/crc32c.h), for a manifest to record.
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Writes PATH atomically. Tensors are laid out in the given order, the header lists them in that order
// after "__metadata__" (omitted when metadata is empty). Throws Error on a bad name (empty, duplicate,
// "__metadata__"), a negative dimension, null data for a non-empty tensor, or an I/O failure.
WrittenFile write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata);

class SafetensorsFile {
 public:
  struct TensorInfo {
    DType dtype;
    std::vector<int64_t> shape;
    const uint8_t* data;  // into the file buffer; valid while any copy of this SafetensorsFile lives
    size_t nbytes;
  };

  // Maps the file (read-only; nothing is copied) and validates it (see the file comment). Throws Error.
  static SafetensorsFile open(const std::string& path);
  // Same checks on bytes already in memory; `origin` names them in error messages.
  static SafetensorsFile parse(std::string bytes, const std::string& origin);
  static SafetensorsFile parse(std::shared_ptr<const Bytes> bytes, const std::string& origin);
  // Keeps the bytes (and so every TensorInfo::data) alive, e.g. for a model using them in place.
  std::shared_ptr<const Bytes> keep_alive() const { return bytes_; }
  // Done with tensor bytes [p, p + n) for now (Bytes::release: a mapped file's pages leave the
  // resident set).
  void release(const uint8_t* p, size_t n) const { bytes_->release(p, n); }

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const std::vector<std::string>& names() const { return names_; }  // in data-section order
  const TensorInfo& get(const std::string& name) const;  // Error "no tensor named 'x' in FILE"

  // Checked reads. The shape must equal expected_shape exactly (Error naming the tensor and both
  // shapes). F32 is copied; F64, BF16 and F16 are converted to float; other dtypes are an Error.
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape, float* out) const;
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  // I32 copied, I64 converted (Error if a value does not fit in int32); any shape.
  std::vector<int32_t> read_i32(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string where(const std::string& name) const;  // "PATH: tensor 'NAME'"

  std::string path_;
  std::shared_ptr<const Bytes> bytes_;  // whole file; shared so copies stay valid
  std::map<std::string, std::string> metadata_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, TensorInfo> index_;
};

}  // namespace looplm::io
