// GGUF, llama.cpp's model file (docs/format.md, "GGUF"): a reader that trusts nothing and a
// streaming writer. The format:
//
//   "GGUF" u32 version (2 or 3) u64 n_tensors u64 n_kv
//   n_kv × (string key, u32 value type, value)        strings are u64 length + UTF-8 bytes
//   n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset)
//   padding to general.alignment (default 32), then the data section; each tensor's offset is
//   relative to it and a multiple of the alignment.
//
// ne[0] is the fastest-varying dimension: a row-major matrix [rows, cols] has ne = {cols, rows}.
// Block-quantized types pack ne[0] in blocks (q8_0 / q4_0: 32 values per block), so ne[0] must be
// a multiple of the block.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"

namespace looplm::io {

// ggml's tensor types that GGUF files carry. Sizes are known for all of these (so any file's
// layout can be checked); the conversions (dequantize_row) cover F32, F16, BF16, Q8_0 and Q4_0.
enum GgmlType : uint32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7, kGgmlQ8_0 = 8,
  kGgmlQ8_1 = 9, kGgmlQ2_K = 10, kGgmlQ3_K = 11, kGgmlQ4_K = 12, kGgmlQ5_K = 13, kGgmlQ6_K = 14,
  kGgmlQ8_K = 15, kGgmlI8 = 24, kGgmlI16 = 25, kGgmlI32 = 26, kGgmlI64 = 27, kGgmlF64 = 28, kGgmlBF16 = 30,
};
// "q4_0", "f32", ...; nullptr for a type id this table does not know.
const char* ggml_type_name(uint32_t type);
// Values per block and bytes per block; false for an unknown type.
bool ggml_type_block(uint32_t type, int* block_values, int* block_bytes);
// Bytes of a row of n values (n a multiple of the block). 0 for an unknown type.
uint64_t ggml_row_bytes(uint32_t type, int64_t n);

// ggml's reference quantizers (the rounding llama.cpp's own quantize uses), one row of n values
// (n a multiple of 32): q8_0 d = amax / 127, q = round(x / d); q4_0 d = m / −8 with m the value
// of largest |x|, q = min(15, trunc(x / d + 8.5)). And the conversions back to float.
void quantize_row_ggml(uint32_t type, const float* x, int64_t n, uint8_t* out);  // F32, F16, Q8_0, Q4_0
void dequantize_row_ggml(uint32_t type, const uint8_t* in, int64_t n, float* out); // F32, F16, BF16, Q8_0, Q4_0
bool ggml_type_convertible(uint32_t type);  // dequantize_row_ggml handles it

// The GGUF value types.
enum GgufType : uint32_t {
  kGgufU8 = 0, kGgufI8, kGgufU16, kGgufI16, kGgufU32, kGgufI32, kGgufF32, kGgufBool, kGgufString,
  kGgufArray, kGgufU64, kGgufI64, kGgufF64,
};

// One metadata value. Scalars: integers in i (signed types) or u (unsigned and bool), floats in f,
// a string in s. Arrays: elem_type and one of the vectors (integers and bools in ints, floats
// in floats, strings in strings).
struct GgufValue {
  uint32_t type = kGgufU32;
  uint32_t elem_type = 0;  // arrays
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
};

class GgufFile {
 public:
  struct Tensor {
    std::string name;
    uint32_t type = 0;
    std::vector<int64_t> ne;   // ggml order: ne[0] fastest
    uint64_t offset = 0;       // in the data section
    const uint8_t* data = nullptr;
    uint64_t nbytes = 0;
    int64_t numel() const;
    // Row-major shape (reversed ne): [rows, cols] for a matrix.
    std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  };

  // Maps the file and checks every count, length, type, shape and offset against it. Error naming
  // the file and the problem.
  static GgufFile open(const std::string& path);
  static GgufFile parse(std::shared_ptr<const Bytes> bytes, const std::string& origin);

  const std::string& origin() const { return origin_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  // Typed reads; Error naming the file and key for a missing key or another type.
  const GgufValue& get(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;  // any unsigned or non-negative signed integer type
  double get_float(const std::string& key) const;   // F32 / F64
  bool get_bool(const std::string& key) const;
  uint64_t get_uint(const std::string& key, uint64_t fallback) const { return has(key) ? get_uint(key) : fallback; }
  double get_float(const std::string& key, double fallback) const { return has(key) ? get_float(key) : fallback; }
  bool get_bool(const std::string& key, bool fallback) const { return has(key) ? get_bool(key) : fallback; }

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;  // nullptr if absent
  // The tensor as float, checked against the expected row-major shape (Error naming both shapes,
  // or a type dequantize_row_ggml does not convert).
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const;

 private:
  std::string origin_;
  uint32_t version_ = 0;
  std::shared_ptr<const Bytes> bytes_;
  std::map<std::string, GgufValue> kv_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
};

// Streaming writer: metadata and tensor descriptions first, then write() produces each tensor's
// bytes when it is its turn (one tensor in memory at a time) through an AtomicWriter: PATH is
// the whole new file or untouched.
class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  // `produce` fills exactly ggml_row_bytes(type, ne[0]) · (rows) bytes when called.
  using Producer = std::function<void(uint8_t* out)>;
  void add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& ne, Producer produce);
  // Bytes of the file write() will write.
  uint64_t file_bytes() const;
  void write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    uint64_t nbytes, offset;
    Producer produce;
  };
  std::string header_kv_;  // the encoded key-value pairs
  uint64_t n_kv_ = 0;
  std::vector<Pending> tensors_;
  uint64_t data_bytes_ = 0;
  static constexpr uint64_t kAlign = 32;
  std::string header() const;
};

}  // namespace looplm::io
