#include "train/checkpoint.h"

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace looplm {

void save_train_state(const std::string& path, const Model& m, const AdamW& opt, const TrainState& s) {
  std::vector<io::TensorRef> t;
  const ParamStore& ps = m.params();
  for (auto& p : ps.infos()) {
    t.push_back({"adam.m." + p.name, io::DType::F32, p.shape, opt.m.data() + p.offset});
    t.push_back({"adam.v." + p.name, io::DType::F32, p.shape, opt.v.data() + p.offset});
  }
  nlohmann::json j = {{"step", s.step},         {"adam_t", opt.t},
                      {"data_cursor", s.data_cursor}, {"tokens_seen", s.tokens_seen},
                      {"best_val_loss", s.best_val_loss}, {"best_step", s.best_step}};
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
    s.best_val_loss = j.value("best_val_loss", -1.0);  // absent in checkpoints before 0.2
    s.best_step = j.value("best_step", (int64_t)-1);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed 'state' metadata: " + plain_message(e));
  }
  for (auto& p : m.params().infos()) {
    f.read_f32("adam.m." + p.name, p.shape, opt.m.data() + p.offset);
    f.read_f32("adam.v." + p.name, p.shape, opt.v.data() + p.offset);
  }
}

}  // namespace looplm
