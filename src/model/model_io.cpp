#include "model/model_io.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "backend/cpu/weight_format.h"
#include "core/arena.h"
#include "tokenizer/tokenizer.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "looplm/types.h"

namespace looplm {

namespace {
// An hf tokenizer's tokenizer.json and a converted model's text conventions travel in the
// metadata (docs/format.md), not in the config.
void add_tokenizer(const Config& c, std::map<std::string, std::string>& meta) {
  if (!c.text.empty()) meta[kTextMetadataKey] = c.text.to_json_text();
  if (c.tokenizer != "hf") return;
  meta[kTokenizerMetadataKey] = c.tokenizer_json.empty() ? Tokenizer::from_config(c).hf_json() : c.tokenizer_json;
}
}  // namespace

io::WrittenFile save_model(const std::string& path, const Model& m, const std::map<std::string, std::string>& extra) {
  std::vector<io::TensorRef> t;
  const ParamStore& ps = m.params();
  for (size_t i = 0; i < ps.infos().size(); ++i) {
    const ParamInfo& p = ps.infos()[i];
    t.push_back({p.name, io::DType::F32, p.shape, ps.value((int)i)});
  }
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"config", m.config().to_json_text()}, {"looplm_version", kVersion}};
  add_tokenizer(m.config(), meta);
  for (auto& [k, v] : extra) meta[k] = v;
  return io::write_safetensors(path, t, meta);
}

void save_model_packed(const std::string& path, const Model& m, const std::map<std::string, std::string>& extra) {
  const ParamStore& ps = m.params();
  const WeightFormat* f = ps.packed_format();
  LOOPLM_ASSERT(f && f->pack && f->layout, "save_model_packed: the model has no weight format a checkpoint can hold");
  std::vector<bool> covered(ps.infos().size(), false);
  std::vector<io::TensorRef> t;
  nlohmann::json packed = nlohmann::json::array();
  for (const WeightMatrix& w : ps.matrices()) {
    nlohmann::json names = nlohmann::json::array();
    for (int i = w.first; i <= w.last; ++i) {
      covered[i] = true;
      names.push_back(ps.infos()[i].name);
    }
    const std::string tensor = "packed." + ps.infos()[w.first].name;
    const int64_t bytes = (int64_t)f->packed_bytes(w.packed.rows, w.packed.cols);
    t.push_back({tensor, io::DType::U8, {bytes}, w.packed.data});
    packed.push_back({{"tensor", tensor}, {"params", names}, {"rows", w.packed.rows}, {"cols", w.packed.cols}});
  }
  for (size_t i = 0; i < ps.infos().size(); ++i)
    if (!covered[i]) t.push_back({ps.infos()[i].name, io::DType::F32, ps.infos()[i].shape, ps.value((int)i)});
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"config", m.config().to_json_text()},
                                             {"looplm_version", kVersion}, {"weights", f->name},
                                             {"layout", f->layout}, {"packed", packed.dump()}};
  add_tokenizer(m.config(), meta);
  for (auto& [k, v] : extra) meta[k] = v;
  io::write_safetensors(path, t, meta);
}

namespace {
// The matrices of a quantized checkpoint: packed tensor, its params (indices into the layout),
// rows and cols, all checked against the config and the file.
struct PackedEntry {
  std::string tensor;
  int first = -1, last = -1;
  int64_t rows = 0, cols = 0;
};
std::vector<PackedEntry> packed_entries(const std::string& path, const io::SafetensorsFile& f,
                                        const std::vector<ParamInfo>& layout, const WeightFormat& wf) {
  std::vector<PackedEntry> out;
  auto it = f.metadata().find("packed");
  if (it == f.metadata().end()) throw Error(path + ": weights '" + wf.name + "' but no 'packed' list in the metadata");
  const nlohmann::json j = io::parse_json(it->second, path + ": metadata 'packed'");
  if (!j.is_array()) throw Error(path + ": metadata 'packed' is not a list");
  auto index = [&](const std::string& name) {
    for (size_t i = 0; i < layout.size(); ++i)
      if (layout[i].name == name) return (int)i;
    throw Error("it names '" + io::brief(name) + "', which the config does not declare");
  };
  for (const auto& e : j) {
    PackedEntry p;
    try {
      if (!e.is_object()) throw Error("not an object");
      for (const char* k : {"tensor", "params", "rows", "cols"})
        if (!e.contains(k)) throw Error(std::string("no \"") + k + "\"");
      if (!e["tensor"].is_string() || !e["params"].is_array() || !e["rows"].is_number_integer() ||
          !e["cols"].is_number_integer())
        throw Error("expected a string \"tensor\", a list \"params\" and integers \"rows\" and \"cols\"");
      p.tensor = e["tensor"].get<std::string>();
      std::vector<std::string> names;
      for (const auto& n : e["params"]) {
        if (!n.is_string()) throw Error("\"params\" holds a JSON " + std::string(n.type_name()) + ", expected names");
        names.push_back(n.get<std::string>());
      }
      p.rows = e["rows"].get<int64_t>();
      p.cols = e["cols"].get<int64_t>();
      if (names.empty()) throw Error("no params");
      p.first = index(names.front());
      p.last = index(names.back());
      if (p.last < p.first || p.last - p.first + 1 != (int)names.size()) throw Error("params not consecutive");
      for (size_t k = 0; k < names.size(); ++k)
        if (layout[p.first + k].name != names[k]) throw Error("params not consecutive");
      // The tensor is named after the first param it packs (save_model_packed), so two entries
      // cannot share a tensor and the list cannot point one matrix at another's bytes.
      if (p.tensor != "packed." + names.front())
        throw Error("its tensor should be 'packed." + names.front() + "', not '" + io::brief(p.tensor) + "'");
    } catch (const Error& ex) {
      throw Error(path + ": a 'packed' entry " + io::brief_json(e) + " is malformed: " + ex.what());
    }
    // rows and cols are checked before they are multiplied (no overflow on crafted sizes).
    uint64_t numel = 0;
    for (int i = p.first; i <= p.last; ++i) numel += layout[i].numel;
    if (p.rows <= 0 || p.cols <= 0 || (uint64_t)p.rows > numel || (uint64_t)p.cols > numel ||
        (uint64_t)p.rows * (uint64_t)p.cols != numel)
      throw Error(path + ": packed matrix '" + p.tensor + "' is " + std::to_string(p.rows) + " x " + std::to_string(p.cols) +
                  ", its params hold " + std::to_string(numel) + " values");
    if (!f.has(p.tensor)) throw Error(path + ": missing packed tensor '" + p.tensor + "'");
    const auto& t = f.get(p.tensor);
    if (t.dtype != io::DType::U8 || t.shape.size() != 1 || (size_t)t.shape[0] != wf.packed_bytes(p.rows, p.cols))
      throw Error(path + ": packed tensor '" + p.tensor + "' must be U8 [" + std::to_string(wf.packed_bytes(p.rows, p.cols)) +
                  "] for " + wf.name + " " + std::to_string(p.rows) + " x " + std::to_string(p.cols));
    out.push_back(p);
  }
  return out;
}
}  // namespace

TextConventions text_conventions_of(const Config& c, const std::map<std::string, std::string>& metadata, const std::string& path) {
  auto it = metadata.find(kTextMetadataKey);
  if (it == metadata.end()) return {};
  TextConventions t = TextConventions::from_json_text(it->second, path);
  auto check = [&](int32_t id, const char* field) {
    if (id >= c.vocab_size)
      throw Error(path + ": metadata '" + kTextMetadataKey + "' field '" + field + "' holds id " + std::to_string(id) +
                  ", outside the model's vocabulary (" + std::to_string(c.vocab_size) + " ids)");
  };
  for (int32_t id : t.eos_token_ids) check(id, "eos_token_ids");
  if (t.bos_token_id >= 0) check(t.bos_token_id, "bos_token_id");
  return t;
}

namespace {

// The checkpoint's config (with its tokenizer and text conventions) from the safetensors metadata;
// a bad one is a runtime error (a damaged file), not a usage error.
Config checkpoint_config(const io::SafetensorsFile& f, const std::string& path) {
  auto it = f.metadata().find("config");
  if (it == f.metadata().end()) throw Error(path + ": no 'config' in the safetensors metadata (not a looplm checkpoint?)");
  try {
    Config c = Config::from_json_text(it->second, path + " (metadata 'config')");
    (void)Model::layout(c);  // validates; allocates no parameters
    c.tokenizer_json = Tokenizer::from_checkpoint(c, f.metadata(), path).hf() ? f.metadata().at(kTokenizerMetadataKey) : "";
    c.text = text_conventions_of(c, f.metadata(), path);
    return c;
  } catch (const UsageError& e) {
    throw Error(e.what());
  }
}

// A quantized checkpoint's format (metadata 'weights', its matrices packed: save_model_packed), or
// null for fp32. Only the formats with a byte layout are ever written to a checkpoint (bf16 is a
// load-time copy), in this looplm's layout; training needs the fp32 one.
const WeightFormat* packed_format(const io::SafetensorsFile& f, const std::string& path, const LoadModelOptions& o) {
  auto w = f.metadata().find("weights");
  if (w == f.metadata().end() || w->second == "fp32") return nullptr;
  const WeightFormat* wf = find_weight_format(w->second);
  if (!wf || !wf->pack || !wf->layout) {
    std::string saved;
    for (const WeightFormat* x : weight_formats())
      if (x->pack && x->layout) saved += (saved.empty() ? "" : ", ") + std::string(x->name);
    throw Error(path + ": metadata 'weights' is '" + io::brief(w->second) + "', not a format a checkpoint holds (fp32, " +
                saved + ")");
  }
  if (o.for_training) throw Error(path + ": a " + w->second + " checkpoint is for inference; training needs the fp32 one");
  auto lay = f.metadata().find("layout");
  const std::string layout_name = lay == f.metadata().end() ? "rows4" : lay->second;  // files before the key: rows4
  if (layout_name != wf->layout)
    throw Error(path + ": its " + w->second + " matrices are packed in the '" + io::brief(layout_name) + "' layout, this looplm reads '" +
                wf->layout + "'; quantize the fp32 checkpoint again (looplm quantize)");
  return wf;
}

// Every value loaded is finite (those left unset were checked one packed matrix at a time).
void check_finite(const ParamStore& ps, const std::vector<bool>& unset, const std::string& path) {
  for (size_t i = 0; i < ps.infos().size(); ++i) {
    if (unset[i]) continue;
    const float* v = ps.value((int)i);
    for (size_t j = 0; j < ps.infos()[i].numel; ++j)
      if (!std::isfinite(v[j]))
        throw Error(path + ": tensor '" + ps.infos()[i].name + "' holds " + (std::isnan(v[j]) ? "NaN" : "Inf") +
                    " (element " + std::to_string(j) +
                    "): a diverged or corrupted checkpoint (--allow-nonfinite loads it anyway)");
  }
}

}  // namespace

// A checkpoint's tensors against the config's layout: every declared tensor is there with its shape
// and a float dtype (or inside a packed matrix, once), nothing else is; the safetensors reader has
// already checked each tensor's bytes against the file.
struct TensorPlan {
  std::vector<PackedEntry> packed;  // a quantized checkpoint's packed matrices (save_model_packed)
  std::vector<bool> covered;        // per layout entry: inside a packed matrix
  bool in_place = false;            // fp32, in the model's order, back to back from `base`
  const uint8_t* base = nullptr;
};

TensorPlan plan_tensors(const io::SafetensorsFile& f, const std::string& path, const std::vector<ParamInfo>& layout,
                        const WeightFormat* wf, bool for_training) {
  TensorPlan plan;
  if (wf) plan.packed = packed_entries(path, f, layout, *wf);
  plan.covered.assign(layout.size(), false);
  for (const PackedEntry& p : plan.packed)
    for (int i = p.first; i <= p.last; ++i) {
      if (plan.covered[i]) throw Error(path + ": param '" + layout[i].name + "' is in two packed matrices");
      plan.covered[i] = true;
    }
  std::set<std::string> expected;
  for (const PackedEntry& p : plan.packed) expected.insert(p.tensor);
  plan.in_place = !for_training && !wf;
  size_t next = 0;
  for (size_t pi = 0; pi < layout.size(); ++pi) {
    const ParamInfo& p = layout[pi];
    if (plan.covered[pi]) continue;
    expected.insert(p.name);
    if (!f.has(p.name))
      throw Error(path + ": missing tensor '" + p.name + "' (shape " + io::shape_str(p.shape) + ") required by the config");
    const auto& t = f.get(p.name);
    if (t.shape != p.shape)
      throw Error(path + ": tensor '" + p.name + "': shape " + io::shape_str(t.shape) + " in the file, the config needs " +
                  io::shape_str(p.shape));
    if (t.dtype != io::DType::F32 && t.dtype != io::DType::F64 && t.dtype != io::DType::BF16 && t.dtype != io::DType::F16)
      throw Error(path + ": tensor '" + p.name + "': dtype " + io::dtype_name(t.dtype) + ", expected a float type");
    if (!plan.base) plan.base = t.data;
    plan.in_place = plan.in_place && t.dtype == io::DType::F32 && t.data == plan.base + next;
    next += t.nbytes;
  }
  for (auto& n : f.names())
    if (!expected.count(n)) throw Error(path + ": unexpected tensor '" + n + "' for this config");
  return plan;
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadModelOptions& o) {
  auto f = io::SafetensorsFile::open(path);
  const Config c = checkpoint_config(f, path);
  const std::vector<ParamInfo> layout = Model::layout(c);
  const WeightFormat* wf = packed_format(f, path, o);
  const TensorPlan plan = plan_tensors(f, path, layout, wf, o.for_training);
  const std::vector<PackedEntry>& packed = plan.packed;
  const std::vector<bool>& covered = plan.covered;
  const uint8_t* base = plan.base;

  std::unique_ptr<Model> m;
  std::vector<bool> unset(layout.size(), false);  // lean: values never written
  if (plan.in_place && base && reinterpret_cast<uintptr_t>(base) % alignof(float) == 0) {
    ParamStorage s;
    s.grads = false;
    s.external = const_cast<float*>(reinterpret_cast<const float*>(base));  // read-only mapping: never written
    s.owner = f.keep_alive();
    m = std::make_unique<Model>(c, s);
  } else {
    ParamStorage s;
    s.grads = o.for_training;
    m = std::make_unique<Model>(c, s);
    for (size_t i = 0; i < layout.size(); ++i)
      if (!covered[i]) f.read_f32(layout[i].name, layout[i].shape, m->params().value((int)i));
    // Packed matrices: their fp32 values (for lookups that read them, e.g. a tied embedding) are
    // the dequantized ones; products use the packed bytes (ParamStore::set_prepacked).
    // Lean: only the matrices read as values are dequantized in place; the others one at a time
    // into a scratch matrix, for the finiteness check below, and their values are left unset.
    // Lean (an inference load): the packed bytes are copied into one block of working memory,
    // which takes 2 MB pages where the kernel gives them (alloc_working), and each tensor's pages
    // of the file are released once copied, so the resident set stays about the file's size. A
    // batch-1 product streams every matrix once per token, and from the file's 4 KB pages an
    // Ouro-1.4B-shaped q4_0 model decoded slower (bench/README.md, "Weights in 2 MB pages").
    // Otherwise the packed bytes are used where the file has them when they are aligned for the
    // formats' blocks (fp16 scales: every file looplm writes keeps each packed tensor 16-byte
    // aligned); misaligned ones (a file from another writer, or crafted) are copied to aligned
    // memory first, as misaligned fp32 values are above.
    struct Owner {
      std::shared_ptr<const void> file;
      std::unique_ptr<void, FreeDeleter> block;
      std::vector<std::vector<std::max_align_t>> copies;
    };
    auto owner = std::make_shared<Owner>();
    auto slot = [&](const PackedEntry& p) { return (f.get(p.tensor).nbytes + 63) / 64 * 64; };  // each on a cache line
    size_t block_at = 0;  // where the next copy goes
    if (o.lean) {
      size_t bytes = 0;
      for (const PackedEntry& p : packed) bytes += slot(p);
      owner->block.reset(alloc_working(bytes));
    } else {
      owner->file = f.keep_alive();
    }
    std::map<int, const void*> data;
    std::vector<float> scratch;
    for (const PackedEntry& p : packed) {  // each packed matrix is one the model multiplies with
      const WeightMatrix* w = nullptr;
      for (const WeightMatrix& x : m->params().matrices())
        if (x.first == p.first && x.last == p.last && x.node->rows == p.rows && x.node->cols == p.cols) w = &x;
      if (!w) throw Error(path + ": packed tensor '" + p.tensor + "' is not one of the model's weight matrices");
      const auto& t = f.get(p.tensor);
      const void* bytes = t.data;
      if (o.lean) {
        uint8_t* copy = static_cast<uint8_t*>(owner->block.get()) + block_at;
        block_at += slot(p);
        std::memcpy(copy, t.data, t.nbytes);
        f.release(t.data, t.nbytes);
        bytes = copy;
      } else if (reinterpret_cast<uintptr_t>(bytes) % alignof(std::max_align_t) != 0) {
        const size_t n = t.nbytes;
        auto& copy = owner->copies.emplace_back((n + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
        std::memcpy(copy.data(), bytes, n);
        bytes = copy.data();
      }
      data[p.first] = bytes;
      if (!o.lean || w->read_as_values) {
        wf->unpack(bytes, p.rows, p.cols, m->params().value(p.first));
        continue;
      }
      for (int i = p.first; i <= p.last; ++i) unset[i] = true;
      if (o.allow_nonfinite) continue;
      scratch.resize((size_t)(p.rows * p.cols));
      wf->unpack(bytes, p.rows, p.cols, scratch.data());
      for (size_t j = 0; j < scratch.size(); ++j)
        if (!std::isfinite(scratch[j]))
          throw Error(path + ": packed tensor '" + p.tensor + "' holds " + (std::isnan(scratch[j]) ? "NaN" : "Inf") +
                      " (element " + std::to_string(j) + "): a corrupted checkpoint (--allow-nonfinite loads it anyway)");
    }
    if (wf) m->params().set_prepacked(*wf, std::move(data), std::move(owner), o.lean);
  }
  if (!o.allow_nonfinite) check_finite(m->params(), unset, path);
  // Every page has been read by now: a file overwritten in place while it was loaded is refused
  // here rather than used half old, half new.
  io::check_mapped_files();
  return m;
}

}  // namespace looplm
