#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/json_input.h"
#include "looplm/error.h"

// Tensor bytes are copied between memory and file as they are; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "looplm's safetensors I/O assumes a little-endian host");

namespace looplm::io {

namespace {

using ojson = nlohmann::ordered_json;  // the writer keeps its tensors' order in the header
// The reader parses into a sorted map: an ordered_json object finds each new key by a linear search,
// so a header of 50,000 tensors took 39 s. The file's order is its data order anyway (below).
using rjson = nlohmann::json;

// The safetensors reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeRow {
  DType t;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8}, {DType::I32, "I32", 4}, {DType::I16, "I16", 2}, {DType::I8, "I8", 1},
    {DType::U64, "U64", 8}, {DType::U32, "U32", 4}, {DType::U16, "U16", 2}, {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};

const DTypeRow& row(DType t) {
  for (const auto& r : kDTypes)
    if (r.t == t) return r;
  LOOPLM_ASSERT(false, "DType missing from kDTypes");
}

std::string known_dtypes() {
  std::string s;
  for (const auto& r : kDTypes) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

// product(shape) * elem, or false on overflow.
bool byte_size(const std::vector<int64_t>& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  *out = n;
  return true;
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf / nan
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

std::string offsets_str(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

// A JSON value as a non-negative integer that fits in int64, or false.
bool as_index(const rjson& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
  } else {
    return false;
  }
  return *out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

}  // namespace

size_t dtype_size(DType t) { return row(t).size; }
const char* dtype_name(DType t) { return row(t).name; }

bool dtype_from_name(const std::string& s, DType* out) {
  for (const auto& r : kDTypes)
    if (s == r.name) {
      *out = r.t;
      return true;
    }
  return false;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() > 8) s += ", ... (" + std::to_string(shape.size()) + " dimensions)";  // a message stays short
  return s + "]";
}

// ------------------------------------------------------------------------------------------ writer

WrittenFile write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const std::string where = "cannot write '" + path + "'";
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson meta = ojson::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty()) throw Error(where + ": a tensor has an empty name");
    if (t.name == "__metadata__") throw Error(where + ": '__metadata__' is reserved, not a tensor name");
    if (!seen.insert(t.name).second) throw Error(where + ": tensor '" + t.name + "' given twice");
    uint64_t nbytes = 0;
    if (!byte_size(t.shape, dtype_size(t.dtype), &nbytes))
      throw Error(where + ": tensor '" + t.name + "' has a bad shape " + shape_str(t.shape));
    if (nbytes > 0 && t.data == nullptr)
      throw Error(where + ": tensor '" + t.name + "' has no data for shape " + shape_str(t.shape));
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    sizes.push_back(nbytes);
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name or value that is not valid UTF-8
    throw Error(where + ": header cannot be encoded as JSON: " + plain_message(e));
  }
  // The data section starts 64-byte aligned (the header padded with spaces, as the format allows):
  // a mapped file's tensors are used in place, and a tensor whose rows start mid-cache-line makes
  // every 64-byte load of the matrix-vector kernels touch two lines (decoding was a fifth slower:
  // bench/README.md, "Kernel decisions"). Tensors of multiples of 64 bytes keep the next one aligned.
  text.append((64 - (8 + text.size()) % 64) % 64, ' ');

  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  AtomicWriter w(path);
  w.write(len, sizeof len);
  w.write(text.data(), text.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    if (sizes[i] > 0) w.write(tensors[i].data, sizes[i]);
  w.commit();
  return {w.bytes_written(), w.crc32c()};
}

// ------------------------------------------------------------------------------------------ reader

SafetensorsFile SafetensorsFile::open(const std::string& path) { return parse(map_file(path), path); }

SafetensorsFile SafetensorsFile::parse(std::string bytes, const std::string& origin) {
  return parse(hold_bytes(std::move(bytes)), origin);
}

SafetensorsFile SafetensorsFile::parse(std::shared_ptr<const Bytes> bytes, const std::string& origin) {
  SafetensorsFile f;
  f.path_ = origin;
  f.bytes_ = bytes;
  const std::string& P = origin;
  const size_t size = bytes->size();
  auto fail = [&](const std::string& msg) -> Error { return Error(P + ": " + msg); };

  if (size < 8)
    throw fail("file is " + std::to_string(size) +
               " bytes, too short for the 8-byte header length of a safetensors file");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes->data()[i]) << (8 * i);
  if (n > kMaxHeaderBytes && n > size - 8)
    throw fail("header length " + std::to_string(n) + " is absurd (limit " + std::to_string(kMaxHeaderBytes) +
               ", file is " + std::to_string(size) + " bytes); not a safetensors file?");
  if (n > size - 8)
    throw fail("header length " + std::to_string(n) + " runs past the end of the file (" +
               std::to_string(size) + " bytes; at most " + std::to_string(size - 8) +
               " header bytes fit); truncated file?");
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " exceeds the limit of " +
               std::to_string(kMaxHeaderBytes) + " bytes");
  const char* hbeg = reinterpret_cast<const char*>(bytes->data()) + 8;
  const uint8_t* data = reinterpret_cast<const uint8_t*>(hbeg + n);
  const uint64_t data_size = size - 8 - n;

  // Parse: nesting bounded, a key given twice in any object refused (io/json_input.h).
  const rjson header = parse_json<rjson>(std::string_view(hbeg, n), P + ": header");
  if (!header.is_object()) throw fail(std::string("header is a JSON ") + header.type_name() + ", expected an object");

  struct Span {
    uint64_t begin, end;
    size_t order;
    const std::string* name;
  };
  std::vector<Span> spans;
  size_t order = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const rjson& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) throw fail(std::string("__metadata__ is a JSON ") + e.type_name() + ", expected an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string())
          throw fail("__metadata__ key '" + brief(m.key()) + "' has a JSON " + m.value().type_name() +
                     " value, expected a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string W = P + ": tensor '" + brief(name) + "'";
    if (!e.is_object()) throw Error(W + ": entry is a JSON " + e.type_name() + ", expected an object");
    for (const char* k : {"dtype", "shape", "data_offsets"})
      if (!e.contains(k)) throw Error(W + ": entry has no \"" + k + "\"");

    TensorInfo info{};
    const rjson& jd = e["dtype"];
    if (!jd.is_string()) throw Error(W + ": dtype is a JSON " + jd.type_name() + ", expected a string");
    if (!dtype_from_name(jd.get<std::string>(), &info.dtype))
      throw Error(W + ": unknown dtype '" + brief(jd.get<std::string>()) + "' (known: " + known_dtypes() + ")");

    const rjson& js = e["shape"];
    if (!js.is_array()) throw Error(W + ": shape is a JSON " + js.type_name() + ", expected an array");
    for (const auto& d : js) {
      uint64_t v = 0;
      if (!as_index(d, &v))
        throw Error(W + ": shape " + brief_json(js) + " has " + brief_json(d) +
                    ", expected non-negative integers");
      info.shape.push_back(static_cast<int64_t>(v));
    }

    const rjson& jo = e["data_offsets"];
    uint64_t b = 0, en = 0;
    if (!jo.is_array() || jo.size() != 2 || !as_index(jo[0], &b) || !as_index(jo[1], &en))
      throw Error(W + ": data_offsets " + brief_json(jo) + " is not [begin, end] with non-negative integers");
    if (b > en) throw Error(W + ": data_offsets " + offsets_str(b, en) + " has begin > end");
    if (en > data_size)
      throw Error(W + ": data_offsets " + offsets_str(b, en) + " run past the data section, which holds " +
                  std::to_string(data_size) + " bytes (truncated file?)");
    uint64_t need = 0;
    if (!byte_size(info.shape, dtype_size(info.dtype), &need))
      throw Error(W + ": shape " + shape_str(info.shape) + " of " + dtype_name(info.dtype) +
                  " overflows 64-bit byte count");
    if (need != en - b)
      throw Error(W + ": data_offsets " + offsets_str(b, en) + " hold " + std::to_string(en - b) +
                  " bytes but shape " + shape_str(info.shape) + " of " + dtype_name(info.dtype) + " needs " +
                  std::to_string(need));
    info.data = data + b;
    info.nbytes = static_cast<size_t>(en - b);
    auto [slot, inserted] = f.index_.emplace(name, std::move(info));
    LOOPLM_ASSERT(inserted, "duplicate keys were rejected above");
    spans.push_back({b, en, order++, &slot->first});
  }

  // File order = data order (ties, i.e. empty tensors at the same offset, in name order).
  std::stable_sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  const Span* prev = nullptr;  // last non-empty span
  for (const Span& s : spans) {
    f.names_.push_back(*s.name);
    if (s.begin == s.end) continue;  // an empty tensor occupies no bytes, so cannot overlap
    if (prev && s.begin < prev->end)
      throw fail("tensor '" + brief(*s.name) + "' data_offsets " + offsets_str(s.begin, s.end) +
                 " overlap tensor '" + brief(*prev->name) + "' data_offsets " + offsets_str(prev->begin, prev->end));
    prev = &s;
  }
  return f;
}

std::string SafetensorsFile::where(const std::string& name) const { return path_ + ": tensor '" + brief(name) + "'"; }

const SafetensorsFile::TensorInfo& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error("no tensor named '" + brief(name) + "' in " + path_);
  return it->second;
}

void SafetensorsFile::read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                               float* out) const {
  const TensorInfo& t = get(name);
  if (t.shape != expected_shape)
    throw Error(where(name) + ": shape " + shape_str(t.shape) + " in the file, expected " +
                shape_str(expected_shape));
  const size_t n = t.nbytes / dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::F32:
      if (n) std::memcpy(out, t.data, t.nbytes);
      return;
    case DType::F64:
      for (size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, t.data + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      return;
    case DType::BF16:
    case DType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return;
    default:
      throw Error(where(name) + ": dtype " + dtype_name(t.dtype) + ", expected a float type (F32, F64, BF16, F16)");
  }
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name,
                                             const std::vector<int64_t>& expected_shape) const {
  const TensorInfo& t = get(name);
  std::vector<float> out(t.nbytes / dtype_size(t.dtype));
  read_f32(name, expected_shape, out.data());
  return out;
}

std::vector<int32_t> SafetensorsFile::read_i32(const std::string& name) const {
  const TensorInfo& t = get(name);
  const size_t n = t.nbytes / dtype_size(t.dtype);
  std::vector<int32_t> out(n);
  if (t.dtype == DType::I32) {
    if (n) std::memcpy(out.data(), t.data, t.nbytes);
  } else if (t.dtype == DType::I64) {
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        throw Error(where(name) + ": element " + std::to_string(i) + " = " + std::to_string(v) +
                    " does not fit in int32");
      out[i] = static_cast<int32_t>(v);
    }
  } else {
    throw Error(where(name) + ": dtype " + dtype_name(t.dtype) + ", expected an integer type (I32, I64)");
  }
  return out;
}

}  // namespace looplm::io
