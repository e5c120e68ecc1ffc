#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/quant.h"
#include "io/atomic_file.h"
#include "looplm/error.h"

static_assert(std::endian::native == std::endian::little, "looplm's GGUF I/O assumes a little-endian host");

namespace looplm::io {

namespace {

struct TypeRow {
  uint32_t type;
  const char* name;
  int block_values, block_bytes;
};
constexpr TypeRow kTypes[] = {
    {kGgmlF32, "f32", 1, 4},       {kGgmlF16, "f16", 1, 2},         {kGgmlQ4_0, "q4_0", 32, 18},
    {kGgmlQ4_1, "q4_1", 32, 20},   {kGgmlQ5_0, "q5_0", 32, 22},     {kGgmlQ5_1, "q5_1", 32, 24},
    {kGgmlQ8_0, "q8_0", 32, 34},   {kGgmlQ8_1, "q8_1", 32, 36},     {kGgmlQ2_K, "q2_K", 256, 84},
    {kGgmlQ3_K, "q3_K", 256, 110}, {kGgmlQ4_K, "q4_K", 256, 144},   {kGgmlQ5_K, "q5_K", 256, 176},
    {kGgmlQ6_K, "q6_K", 256, 210}, {kGgmlQ8_K, "q8_K", 256, 292},   {kGgmlI8, "i8", 1, 1},
    {kGgmlI16, "i16", 1, 2},       {kGgmlI32, "i32", 1, 4},         {kGgmlI64, "i64", 1, 8},
    {kGgmlF64, "f64", 1, 8},       {kGgmlBF16, "bf16", 1, 2},
};
const TypeRow* type_row(uint32_t t) {
  for (const TypeRow& r : kTypes)
    if (r.type == t) return &r;
  return nullptr;
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Bounds-checked cursor over the header.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, const std::string& origin) : p_(p), n_(n), origin_(origin) {}
  uint64_t pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(origin_ + ": not a valid GGUF file: " + what + " (at byte " + std::to_string(pos_) + ")");
  }
  void need(uint64_t k, const char* what) const {
    if (k > n_ - pos_) fail(std::string("truncated: ") + what + " runs past the end of the file");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t n_, pos_ = 0;
  const std::string& origin_;
};

size_t scalar_size(uint32_t t) {
  switch (t) {
    case kGgufU8: case kGgufI8: case kGgufBool: return 1;
    case kGgufU16: case kGgufI16: return 2;
    case kGgufU32: case kGgufI32: case kGgufF32: return 4;
    case kGgufU64: case kGgufI64: case kGgufF64: return 8;
    default: return 0;
  }
}

// One scalar of a numeric type into v (integers into i or u, floats into f).
void read_scalar(Cursor& c, uint32_t t, GgufValue& v, const std::string& key) {
  switch (t) {
    case kGgufU8: v.u = c.read<uint8_t>("a value"); v.i = (int64_t)v.u; break;
    case kGgufI8: v.i = c.read<int8_t>("a value"); break;
    case kGgufU16: v.u = c.read<uint16_t>("a value"); v.i = (int64_t)v.u; break;
    case kGgufI16: v.i = c.read<int16_t>("a value"); break;
    case kGgufU32: v.u = c.read<uint32_t>("a value"); v.i = (int64_t)v.u; break;
    case kGgufI32: v.i = c.read<int32_t>("a value"); break;
    case kGgufU64: v.u = c.read<uint64_t>("a value"); v.i = (int64_t)std::min<uint64_t>(v.u, INT64_MAX); break;
    case kGgufI64: v.i = c.read<int64_t>("a value"); break;
    case kGgufF32: v.f = c.read<float>("a value"); break;
    case kGgufF64: v.f = c.read<double>("a value"); break;
    case kGgufBool: {
      const uint8_t b = c.read<uint8_t>("a value");
      if (b > 1) c.fail("key '" + key + "': a bool holds " + std::to_string(b));
      v.u = b;
      v.i = b;
      break;
    }
    default: c.fail("key '" + key + "': unknown value type " + std::to_string(t));
  }
  if (t == kGgufI8 || t == kGgufI16 || t == kGgufI32 || t == kGgufI64) v.u = v.i < 0 ? 0 : (uint64_t)v.i;
}

bool is_int(uint32_t t) {
  return t == kGgufU8 || t == kGgufI8 || t == kGgufU16 || t == kGgufI16 || t == kGgufU32 || t == kGgufI32 ||
         t == kGgufU64 || t == kGgufI64 || t == kGgufBool;
}

const char* value_type_name(uint32_t t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  return t < 13 ? names[t] : "unknown";
}

}  // namespace

const char* ggml_type_name(uint32_t type) {
  const TypeRow* r = type_row(type);
  return r ? r->name : nullptr;
}

bool ggml_type_block(uint32_t type, int* block_values, int* block_bytes) {
  const TypeRow* r = type_row(type);
  if (!r) return false;
  *block_values = r->block_values;
  *block_bytes = r->block_bytes;
  return true;
}

uint64_t ggml_row_bytes(uint32_t type, int64_t n) {
  const TypeRow* r = type_row(type);
  if (!r || n < 0 || n % r->block_values) return 0;
  return (uint64_t)(n / r->block_values) * r->block_bytes;
}

bool ggml_type_convertible(uint32_t t) {
  return t == kGgmlF32 || t == kGgmlF16 || t == kGgmlBF16 || t == kGgmlQ8_0 || t == kGgmlQ4_0;
}

void quantize_row_ggml(uint32_t type, const float* x, int64_t n, uint8_t* out) {
  switch (type) {
    case kGgmlF32: std::memcpy(out, x, n * sizeof(float)); return;
    case kGgmlF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case kGgmlQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t dh = fp32_to_fp16(d);
        std::memcpy(out, &dh, 2);
        for (int j = 0; j < 32; ++j) out[2 + j] = (uint8_t)(int8_t)std::round(x[j] * id);
      }
      return;
    case kGgmlQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 18) {
        float amax = 0, max = 0;  // the value of largest |x|, the first one on a tie
        for (int j = 0; j < 32; ++j)
          if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
        const float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t dh = fp32_to_fp16(d);
        std::memcpy(out, &dh, 2);
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(15, (int)(int8_t)(x[j] * id + 8.5f));
          const int hi = std::min(15, (int)(int8_t)(x[j + 16] * id + 8.5f));
          out[2 + j] = (uint8_t)(lo | hi << 4);
        }
      }
      return;
    default: LOOPLM_ASSERT(false, "quantize_row_ggml: a type looplm does not write");
  }
}

void dequantize_row_ggml(uint32_t type, const uint8_t* in, int64_t n, float* out) {
  uint16_t h;
  switch (type) {
    case kGgmlF32: std::memcpy(out, in, n * sizeof(float)); return;
    case kGgmlF16:
      for (int64_t i = 0; i < n; ++i) std::memcpy(&h, in + 2 * i, 2), out[i] = fp16_to_fp32(h);
      return;
    case kGgmlBF16:
      for (int64_t i = 0; i < n; ++i) std::memcpy(&h, in + 2 * i, 2), out[i] = bf16_to_f32(h);
      return;
    case kGgmlQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, in += 34, out += 32) {
        std::memcpy(&h, in, 2);
        const float d = fp16_to_fp32(h);
        for (int j = 0; j < 32; ++j) out[j] = d * (float)(int8_t)in[2 + j];
      }
      return;
    case kGgmlQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, in += 18, out += 32) {
        std::memcpy(&h, in, 2);
        const float d = fp16_to_fp32(h);
        for (int j = 0; j < 16; ++j) {
          out[j] = d * (float)((in[2 + j] & 15) - 8);
          out[j + 16] = d * (float)((in[2 + j] >> 4) - 8);
        }
      }
      return;
    default: LOOPLM_ASSERT(false, "dequantize_row_ggml: a type it does not convert");
  }
}

// ---------------------------------------------------------------- reader

int64_t GgufFile::Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufFile GgufFile::open(const std::string& path) { return parse(map_file(path), path); }

GgufFile GgufFile::parse(std::shared_ptr<const Bytes> bytes, const std::string& origin) {
  GgufFile f;
  f.origin_ = origin;
  f.bytes_ = bytes;
  Cursor c(bytes->data(), bytes->size(), f.origin_);
  if (bytes->size() < 4 || std::memcmp(bytes->data(), "GGUF", 4) != 0)
    throw Error(origin + ": not a GGUF file (it does not start with \"GGUF\")");
  c.read<uint32_t>("the magic");
  f.version_ = c.read<uint32_t>("the version");
  if (f.version_ != 2 && f.version_ != 3)
    throw Error(origin + ": GGUF version " + std::to_string(f.version_) + " (looplm reads versions 2 and 3)");
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count"), n_kv = c.read<uint64_t>("the key count");
  // Each key takes at least 12 bytes and each tensor 24: a count beyond what the file can hold is
  // refused before anything is allocated for it.
  if (n_kv > bytes->size() / 12) c.fail(std::to_string(n_kv) + " keys cannot fit in the file");
  if (n_tensors > bytes->size() / 24) c.fail(std::to_string(n_tensors) + " tensors cannot fit in the file");
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.str("a key");
    if (key.empty()) c.fail("an empty key");
    if (f.kv_.count(key)) c.fail("key '" + key + "' appears twice");
    GgufValue v;
    v.type = c.read<uint32_t>("a value type");
    if (v.type == kGgufString) {
      v.s = c.str("a string value");
    } else if (v.type == kGgufArray) {
      v.elem_type = c.read<uint32_t>("an array type");
      const uint64_t n = c.read<uint64_t>("an array length");
      if (v.elem_type == kGgufString) {
        if (n > (bytes->size() - c.pos()) / 8) c.fail("key '" + key + "': " + std::to_string(n) + " strings cannot fit in the file");
        v.strings.reserve(n);
        for (uint64_t i = 0; i < n; ++i) v.strings.push_back(c.str("an array string"));
      } else if (v.elem_type == kGgufArray) {
        c.fail("key '" + key + "': an array of arrays (looplm reads none)");
      } else {
        const size_t es = scalar_size(v.elem_type);
        if (es == 0) c.fail("key '" + key + "': unknown array element type " + std::to_string(v.elem_type));
        if (n > (bytes->size() - c.pos()) / es)  // checked before n * es, which a huge n overflows
          c.fail("key '" + key + "': " + std::to_string(n) + " values cannot fit in the file");
        const bool fl = v.elem_type == kGgufF32 || v.elem_type == kGgufF64;
        (fl ? v.floats.reserve(n) : v.ints.reserve(n));
        for (uint64_t i = 0; i < n; ++i) {
          GgufValue e;
          read_scalar(c, v.elem_type, e, key);
          if (fl) v.floats.push_back(e.f);
          else v.ints.push_back(v.elem_type == kGgufU64 ? (int64_t)std::min<uint64_t>(e.u, INT64_MAX) : e.i);
        }
      }
    } else {
      read_scalar(c, v.type, v, key);
    }
    f.kv_.emplace(std::move(key), std::move(v));
  }
  uint64_t align = 32;
  if (f.has("general.alignment")) {
    align = f.get_uint("general.alignment");
    if (align == 0 || (align & (align - 1)) || align > (1u << 20))
      throw Error(origin + ": general.alignment " + std::to_string(align) + " is not a power of two up to 1 MiB");
  }
  f.tensors_.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    Tensor x;
    x.name = c.str("a tensor name");
    if (x.name.empty() || x.name.size() > 256) c.fail("a tensor name of " + std::to_string(x.name.size()) + " bytes");
    if (f.index_.count(x.name)) c.fail("tensor '" + x.name + "' appears twice");
    const uint32_t nd = c.read<uint32_t>("a tensor's dimension count");
    if (nd == 0 || nd > 4) c.fail("tensor '" + x.name + "' has " + std::to_string(nd) + " dimensions (1 to 4)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t e = c.read<uint64_t>("a tensor dimension");
      if (e == 0 || e > (uint64_t)INT64_MAX || numel > (uint64_t)INT64_MAX / e)
        c.fail("tensor '" + x.name + "' has a dimension of " + std::to_string(e));
      numel *= e;
      x.ne.push_back((int64_t)e);
    }
    x.type = c.read<uint32_t>("a tensor type");
    const TypeRow* tr = type_row(x.type);
    if (!tr) c.fail("tensor '" + x.name + "' has ggml type " + std::to_string(x.type) + ", which looplm does not know");
    if (x.ne[0] % tr->block_values)
      c.fail("tensor '" + x.name + "': its rows of " + std::to_string(x.ne[0]) + " values are not whole " + tr->name + " blocks of " +
             std::to_string(tr->block_values));
    const uint64_t blocks = numel / tr->block_values;
    if (blocks > UINT64_MAX / tr->block_bytes) c.fail("tensor '" + x.name + "' is too large");
    x.nbytes = blocks * tr->block_bytes;
    x.offset = c.read<uint64_t>("a tensor offset");
    if (x.offset % align) c.fail("tensor '" + x.name + "' starts at " + std::to_string(x.offset) + ", not a multiple of the alignment");
    f.index_[x.name] = f.tensors_.size();
    f.tensors_.push_back(std::move(x));
  }
  const uint64_t data_start = (c.pos() + align - 1) / align * align;
  if (data_start > bytes->size() && n_tensors > 0) c.fail("the data section starts past the end of the file");
  const uint64_t data_size = bytes->size() - std::min<uint64_t>(data_start, bytes->size());
  for (Tensor& x : f.tensors_) {
    if (x.offset > data_size || x.nbytes > data_size - x.offset)
      throw Error(origin + ": truncated: tensor '" + x.name + "' (" + std::to_string(x.nbytes) + " bytes at " +
                  std::to_string(x.offset) + ") runs past the end of the file's " + std::to_string(data_size) + "-byte data section");
    x.data = bytes->data() + data_start + x.offset;
  }
  return f;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) throw Error(origin_ + ": no metadata key '" + key + "'");
  return it->second;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type != kGgufString) throw Error(origin_ + ": key '" + key + "' is " + value_type_name(v.type) + ", expected a string");
  return v.s;
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue& v = get(key);
  if (!is_int(v.type) || v.type == kGgufBool || (v.i < 0 && v.type != kGgufU64))
    throw Error(origin_ + ": key '" + key + "' is " + value_type_name(v.type) + (is_int(v.type) ? " " + std::to_string(v.i) : std::string()) +
                ", expected a non-negative integer");
  return v.type == kGgufU64 ? v.u : (uint64_t)v.i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type != kGgufF32 && v.type != kGgufF64) throw Error(origin_ + ": key '" + key + "' is " + value_type_name(v.type) + ", expected a float");
  return v.f;
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = get(key);
  if (v.type != kGgufBool) throw Error(origin_ + ": key '" + key + "' is " + value_type_name(v.type) + ", expected a bool");
  return v.u != 0;
}

const GgufFile::Tensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

void GgufFile::read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const {
  const Tensor* t = find(name);
  if (!t) throw Error(origin_ + ": no tensor '" + name + "'");
  // Trailing and leading 1s are the same data: compare without them.
  auto squeeze = [](std::vector<int64_t> s) {
    s.erase(std::remove(s.begin(), s.end(), int64_t{1}), s.end());
    return s;
  };
  if (squeeze(t->shape()) != squeeze(shape))
    throw Error(origin_ + ": tensor '" + name + "' has shape " + shape_text(t->shape()) + ", expected " + shape_text(shape));
  if (!ggml_type_convertible(t->type))
    throw Error(origin_ + ": tensor '" + name + "' is " + ggml_type_name(t->type) +
                "; looplm reads f32, f16, bf16, q8_0 and q4_0 tensors (with llama.cpp, quantize with --pure to one of these)");
  const int64_t cols = t->ne[0], rows = t->numel() / cols;
  const uint64_t rb = ggml_row_bytes(t->type, cols);
  for (int64_t r = 0; r < rows; ++r) dequantize_row_ggml(t->type, t->data + r * rb, cols, out + r * cols);
}

// ---------------------------------------------------------------- writer

namespace {
void put_str(std::string& out, const std::string& s) {
  const uint64_t n = s.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += s;
}
template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
}  // namespace

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  put_str(header_kv_, key), put<uint32_t>(header_kv_, kGgufString), put_str(header_kv_, v), ++n_kv_;
}
void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  put_str(header_kv_, key), put<uint32_t>(header_kv_, kGgufU32), put(header_kv_, v), ++n_kv_;
}
void GgufWriter::add_f32(const std::string& key, float v) {
  put_str(header_kv_, key), put<uint32_t>(header_kv_, kGgufF32), put(header_kv_, v), ++n_kv_;
}
void GgufWriter::add_bool(const std::string& key, bool v) {
  put_str(header_kv_, key), put<uint32_t>(header_kv_, kGgufBool), put<uint8_t>(header_kv_, v ? 1 : 0), ++n_kv_;
}
void GgufWriter::add_strings(const std::string& key, const std::vector<std::string>& v) {
  put_str(header_kv_, key), put<uint32_t>(header_kv_, kGgufArray), put<uint32_t>(header_kv_, kGgufString);
  put<uint64_t>(header_kv_, v.size());
  for (const std::string& s : v) put_str(header_kv_, s);
  ++n_kv_;
}
void GgufWriter::add_f32s(const std::string& key, const std::vector<float>& v) {
  put_str(header_kv_, key), put<uint32_t>(header_kv_, kGgufArray), put<uint32_t>(header_kv_, kGgufF32);
  put<uint64_t>(header_kv_, v.size());
  for (float x : v) put(header_kv_, x);
  ++n_kv_;
}
void GgufWriter::add_i32s(const std::string& key, const std::vector<int32_t>& v) {
  put_str(header_kv_, key), put<uint32_t>(header_kv_, kGgufArray), put<uint32_t>(header_kv_, kGgufI32);
  put<uint64_t>(header_kv_, v.size());
  for (int32_t x : v) put(header_kv_, x);
  ++n_kv_;
}

void GgufWriter::add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& ne, Producer produce) {
  LOOPLM_ASSERT(!ne.empty() && ne.size() <= 4, "GgufWriter: 1 to 4 dimensions");
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  const uint64_t rb = ggml_row_bytes(type, ne[0]);
  LOOPLM_ASSERT(rb > 0, "GgufWriter: rows must be whole blocks of a known type");
  const uint64_t nbytes = rb * rows;
  tensors_.push_back({name, type, ne, nbytes, data_bytes_, std::move(produce)});
  data_bytes_ += (nbytes + kAlign - 1) / kAlign * kAlign;
}

std::string GgufWriter::header() const {
  std::string h = "GGUF";
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, n_kv_);
  h += header_kv_;
  for (const Pending& t : tensors_) {
    put_str(h, t.name);
    put<uint32_t>(h, (uint32_t)t.ne.size());
    for (int64_t e : t.ne) put<uint64_t>(h, (uint64_t)e);
    put<uint32_t>(h, t.type);
    put<uint64_t>(h, t.offset);
  }
  h.resize((h.size() + kAlign - 1) / kAlign * kAlign, '\0');
  return h;
}

uint64_t GgufWriter::file_bytes() const { return header().size() + data_bytes_; }

void GgufWriter::write(const std::string& path) const {
  AtomicWriter w(path);
  const std::string h = header();
  w.write(h.data(), h.size());
  std::vector<uint8_t> buf;
  for (const Pending& t : tensors_) {
    const uint64_t padded = (t.nbytes + kAlign - 1) / kAlign * kAlign;
    buf.assign(padded, 0);
    t.produce(buf.data());
    w.write(buf.data(), buf.size());
  }
  w.commit();
}

}  // namespace looplm::io
