#include "model/model_io.h"

#include <cmath>
#include <set>

#include "io/safetensors.h"
#include "looplm/looplm.h"

namespace looplm {


void save_model(const std::string& path, const Model& m) {
  std::vector<io::TensorRef> t;
  const ParamStore& ps = m.params();
  for (size_t i = 0; i < ps.infos().size(); ++i) {
    const ParamInfo& p = ps.infos()[i];
    t.push_back({p.name, io::DType::F32, p.shape, ps.value((int)i)});
  }
  io::write_safetensors(path, t, {{"format", "pt"}, {"config", m.config().to_json_text()}, {"looplm_version", kVersion}});
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadModelOptions& o) {
  auto f = io::SafetensorsFile::open(path);
  auto it = f.metadata().find("config");
  if (it == f.metadata().end()) throw Error(path + ": no 'config' in the safetensors metadata (not a looplm checkpoint?)");
  Config c;
  std::vector<ParamInfo> layout;
  try {
    c = Config::from_json_text(it->second, path + " (metadata 'config')");
    layout = Model::layout(c);  // validates; allocates no parameters
  } catch (const UsageError& e) {  // a bad file is a runtime error, not a usage error
    throw Error(e.what());
  }

  // Every declared tensor is there with its shape and a float dtype, nothing else is; the
  // safetensors reader has already checked each tensor's bytes against the file.
  std::set<std::string> expected;
  bool in_place = !o.for_training;  // fp32, in the model's order, back to back
  const uint8_t* base = nullptr;
  size_t next = 0;
  for (const ParamInfo& p : layout) {
    expected.insert(p.name);
    if (!f.has(p.name))
      throw Error(path + ": missing tensor '" + p.name + "' (shape " + io::shape_str(p.shape) + ") required by the config");
    const auto& t = f.get(p.name);
    if (t.shape != p.shape)
      throw Error(path + ": tensor '" + p.name + "': shape " + io::shape_str(t.shape) + " in the file, the config needs " +
                  io::shape_str(p.shape));
    if (t.dtype != io::DType::F32 && t.dtype != io::DType::F64 && t.dtype != io::DType::BF16 && t.dtype != io::DType::F16)
      throw Error(path + ": tensor '" + p.name + "': dtype " + io::dtype_name(t.dtype) + ", expected a float type");
    if (!base) base = t.data;
    in_place = in_place && t.dtype == io::DType::F32 && t.data == base + next;
    next += t.nbytes;
  }
  for (auto& n : f.names())
    if (!expected.count(n)) throw Error(path + ": unexpected tensor '" + n + "' for this config");

  std::unique_ptr<Model> m;
  if (in_place && base && reinterpret_cast<uintptr_t>(base) % alignof(float) == 0) {
    ParamStorage s;
    s.grads = false;
    s.external = const_cast<float*>(reinterpret_cast<const float*>(base));  // read-only mapping: never written
    s.owner = f.keep_alive();
    m = std::make_unique<Model>(c, s);
  } else {
    ParamStorage s;
    s.grads = o.for_training;
    m = std::make_unique<Model>(c, s);
    for (size_t i = 0; i < layout.size(); ++i) f.read_f32(layout[i].name, layout[i].shape, m->params().value((int)i));
  }
  if (!o.allow_nonfinite) {
    const ParamStore& ps = m->params();
    for (size_t i = 0; i < ps.infos().size(); ++i) {
      const float* v = ps.value((int)i);
      for (size_t j = 0; j < ps.infos()[i].numel; ++j)
        if (!std::isfinite(v[j]))
          throw Error(path + ": tensor '" + ps.infos()[i].name + "' holds " + (std::isnan(v[j]) ? "NaN" : "Inf") +
                      " (element " + std::to_string(j) +
                      "): a diverged or corrupted checkpoint (--allow-nonfinite loads it anyway)");
    }
  }
  return m;
}

}  // namespace looplm
