#include "train/checkpoint.h"

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace looplm {

static const char* kVersion = "0.1.0";

void save_model(const std::string& path, const Model& m) {
  std::vector<io::TensorRef> t;
  const ParamStore& ps = m.params();
  for (size_t i = 0; i < ps.infos().size(); ++i) {
    const ParamInfo& p = ps.infos()[i];
    t.push_back({p.name, io::DType::F32, p.shape, ps.value((int)i)});
  }
  io::write_safetensors(path, t, {{"format", "pt"}, {"config", m.config().to_json_text()}, {"looplm_version", kVersion}});
}

void load_weights(const io::SafetensorsFile& f, Model& m) {
  ParamStore& ps = m.params();
  std::set<std::string> expected;
  for (size_t i = 0; i < ps.infos().size(); ++i) {
    const ParamInfo& p = ps.infos()[i];
    expected.insert(p.name);
    if (!f.has(p.name))
      throw Error(f.path() + ": missing tensor '" + p.name + "' (shape " + io::shape_str(p.shape) +
                  ") required by the config");
    f.read_f32(p.name, p.shape, ps.value((int)i));
  }
  for (auto& n : f.names())
    if (!expected.count(n)) throw Error(f.path() + ": unexpected tensor '" + n + "' for this config");
}

std::unique_ptr<Model> load_model(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  auto it = f.metadata().find("config");
  if (it == f.metadata().end()) throw Error(path + ": no 'config' in the safetensors metadata (not a looplm checkpoint?)");
  Config c;
  try {
    c = Config::from_json_text(it->second, path + " (metadata 'config')");
    c.validate();
  } catch (const UsageError& e) {  // a bad file is a runtime error, not a usage error
    throw Error(e.what());
  }
  auto m = std::make_unique<Model>(c);
  load_weights(f, *m);
  return m;
}

void save_train_state(const std::string& path, const Model& m, const AdamW& opt, const TrainState& s) {
  std::vector<io::TensorRef> t;
  const ParamStore& ps = m.params();
  for (auto& p : ps.infos()) {
    t.push_back({"adam.m." + p.name, io::DType::F32, p.shape, opt.m.data() + p.offset});
    t.push_back({"adam.v." + p.name, io::DType::F32, p.shape, opt.v.data() + p.offset});
  }
  nlohmann::json j = {{"step", s.step}, {"adam_t", opt.t}, {"data_cursor", s.data_cursor}, {"tokens_seen", s.tokens_seen}};
  io::write_safetensors(path, t, {{"format", "pt"}, {"state", j.dump()}, {"config", m.config().to_json_text()}});
}

void load_train_state(const std::string& path, const Model& m, AdamW& opt, TrainState& s) {
  auto f = io::SafetensorsFile::open(path);
  auto it = f.metadata().find("state");
  if (it == f.metadata().end()) throw Error(path + ": no 'state' in the metadata (not a looplm train state)");
  try {
    auto j = nlohmann::json::parse(it->second);
    s.step = j.at("step").get<int64_t>();
    opt.t = j.at("adam_t").get<int64_t>();
    s.data_cursor = j.at("data_cursor").get<uint64_t>();
    s.tokens_seen = j.at("tokens_seen").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed 'state' metadata: " + e.what());
  }
  for (auto& p : m.params().infos()) {
    f.read_f32("adam.m." + p.name, p.shape, opt.m.data() + p.offset);
    f.read_f32("adam.v." + p.name, p.shape, opt.v.data() + p.offset);
  }
}

}  // namespace looplm
