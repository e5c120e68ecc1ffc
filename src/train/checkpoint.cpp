#include "train/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/fault.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "looplm/util.h"

namespace looplm {

namespace {

constexpr const char* kManifest = "checkpoint.json";
constexpr const char* kManifestFormat = "looplm checkpoint";
constexpr int kManifestVersion = 1;
constexpr uint64_t kMaxManifestBytes = 1 << 20;  // a manifest is a few hundred bytes

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// "checkpoints/model_step00000004.safetensors", relative to the run directory.
std::string step_file(const char* kind, int64_t step) {
  char b[96];
  std::snprintf(b, sizeof b, "checkpoints/%s_step%08lld.safetensors", kind, (long long)step);
  return b;
}

// The step of a file named KIND_step<N>.safetensors, or -1.
int64_t step_of(const std::string& name, const std::string& kind) {
  const std::string head = kind + "_step", tail = ".safetensors";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

// `to` becomes another name of `from`'s contents (a hard link: no copy), atomically; a copy where
// the file system has no links.
void link_as(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  if (::link(from.c_str(), tmp.c_str()) != 0) io::write_file_atomic(tmp, io::read_file(from));
  if (std::rename(tmp.c_str(), to.c_str()) != 0) {
    const int e = errno;
    std::filesystem::remove(tmp, ec);
    throw Error("cannot write '" + to + "': " + std::strerror(e));
  }
}

}  // namespace

// How a refused resume goes on (nothing has been changed).
static std::string ways_on(const std::string& dir) {
  const ArgumentSpelling& a = argument_spelling();
  return ". Nothing in " + dir + " was changed. To go on: " + a.overwrite + " starts this run over (its files are removed), or " +
         a.init_from + a.value_sep + "FILE " + a.out + a.value_sep + "NEW_DIR trains a new run from a model's weights (" + dir +
         "/model.safetensors, model.best.safetensors or a file in checkpoints/)";
}

std::string resume_refused(const std::string& dir, const std::string& why) {
  return "cannot resume " + dir + ": " + why + ways_on(dir);
}

namespace {

struct ManifestFile {
  std::string file;  // relative to the run directory
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

nlohmann::json manifest_entry(const std::string& rel, const io::WrittenFile& w) {
  return {{"file", rel}, {"bytes", w.bytes}, {"crc32c", io::crc32c_hex(w.crc32c)}};
}

ManifestFile parse_entry(const nlohmann::json& j, const char* key, const std::string& expected_file,
                         const std::string& where) {
  auto bad = [&](const std::string& what) { return Error(where + ": \"" + key + "\" " + what); };
  if (!j.contains(key) || !j[key].is_object()) throw bad("is missing or not an object");
  const nlohmann::json& e = j[key];
  ManifestFile f;
  if (!e.contains("file") || !e["file"].is_string()) throw bad("has no string \"file\"");
  f.file = e["file"].get<std::string>();
  // Only this step's own file name is accepted: the manifest cannot point anywhere else.
  if (f.file != expected_file) throw bad("names '" + io::brief(f.file) + "', expected '" + expected_file + "'");
  if (!e.contains("bytes") || !e["bytes"].is_number_unsigned()) throw bad("has no byte count");
  f.bytes = e["bytes"].get<uint64_t>();
  const std::string crc = e.contains("crc32c") && e["crc32c"].is_string() ? e["crc32c"].get<std::string>() : "";
  if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw bad("has no CRC-32C (8 lowercase hex digits)");
  f.crc = (uint32_t)std::stoul(crc, nullptr, 16);
  return f;
}

// The metadata key `key` of a safetensors file, or "".
std::string metadata_of(const std::string& path, const std::string& key) {
  auto f = io::SafetensorsFile::open(path);
  auto it = f.metadata().find(key);
  return it == f.metadata().end() ? "" : it->second;
}

// The JSON object in train_state's "state" metadata.
nlohmann::json state_json(const io::SafetensorsFile& f) {
  auto it = f.metadata().find("state");
  if (it == f.metadata().end()) throw Error(f.path() + ": no 'state' in the metadata (not a looplm train state)");
  nlohmann::json j = io::parse_json(it->second, f.path() + ": metadata 'state'");
  if (!j.is_object()) throw Error(f.path() + ": metadata 'state' is not a JSON object");
  return j;
}

int64_t state_int(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw Error(where + ": metadata 'state' has no integer \"" + key + "\"");
  if (j[key].is_number_unsigned() && j[key].get<uint64_t>() > (uint64_t)INT64_MAX)
    throw Error(where + ": metadata 'state' \"" + key + "\" is out of range");
  return j[key].get<int64_t>();
}

// The step a manifest commits, unverified; -1 when there is none or it cannot be read.
int64_t manifest_step(const std::string& manifest) {
  try {
    const nlohmann::json j = io::parse_json(io::read_file(manifest), manifest);
    return j.is_object() && j.contains("step") && j["step"].is_number_unsigned() ? j["step"].get<int64_t>() : -1;
  } catch (const Error&) {
    return -1;
  }
}

}  // namespace

std::optional<FoundCheckpoint> find_checkpoint(const std::string& dir) {
  const std::string manifest = dir + "/" + kManifest;
  FoundCheckpoint ck;
  if (!exists(manifest)) {
    // looplm before 0.3: the pair in place, without a manifest.
    if (!exists(dir + "/model.safetensors") || !exists(dir + "/train_state.safetensors")) return std::nullopt;
    ck.legacy = true;
    ck.model_path = dir + "/model.safetensors";
    ck.state_path = dir + "/train_state.safetensors";
    auto f = io::SafetensorsFile::open(ck.state_path);
    ck.step = state_int(state_json(f), "step", ck.state_path);
    if (ck.step < 0) throw Error(ck.state_path + ": metadata 'state' has a negative step" + ways_on(dir));
    if (metadata_of(ck.model_path, "config") != metadata_of(ck.state_path, "config"))
      throw Error("cannot resume " + dir + ": model.safetensors and train_state.safetensors were written with different "
                  "configs" + ways_on(dir));
    return ck;
  }
  struct stat st;
  if (::stat(manifest.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > kMaxManifestBytes)
    throw Error("cannot resume " + dir + ": " + manifest + " is not a manifest file (not a regular file of at most 1 MiB)" +
                ways_on(dir));
  nlohmann::json j;
  try {
    j = io::parse_json(io::read_file(manifest), manifest);
    if (!j.is_object() || j.value("format", "") != kManifestFormat)
      throw Error(manifest + ": not a looplm checkpoint manifest (\"format\" is not \"" + kManifestFormat + "\")");
    if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kManifestVersion)
      throw Error(manifest + ": manifest version " + io::brief_json(j.value("version", nlohmann::json())) + ", this looplm reads " +
                  std::to_string(kManifestVersion));
    if (!j.contains("step") || !j["step"].is_number_unsigned() || j["step"].get<uint64_t>() > (uint64_t)INT64_MAX)
      throw Error(manifest + ": no step (a non-negative integer)");
  } catch (const Error& e) {
    throw Error("cannot resume " + dir + ": " + e.what() + ways_on(dir));
  }
  ck.step = (int64_t)j["step"].get<uint64_t>();
  if (j.contains("run_id")) {
    if (!j["run_id"].is_string() || j["run_id"].get<std::string>().empty() || j["run_id"].get<std::string>().size() > 64)
      throw Error("cannot resume " + dir + ": " + manifest + ": \"run_id\" is " + io::brief_json(j["run_id"]) +
                  ", not a run id (a string of at most 64 characters)" + ways_on(dir));
    ck.run_id = j["run_id"].get<std::string>();
  }
  std::string config;
  for (const char* kind : {"model", "train_state"}) {
    ManifestFile f;
    try {
      f = parse_entry(j, kind, step_file(kind, ck.step), manifest);
    } catch (const Error& e) {
      throw Error("cannot resume " + dir + ": " + e.what() + ways_on(dir));
    }
    const std::string path = dir + "/" + f.file;
    const std::string what = manifest + " (step " + std::to_string(ck.step) + ") names " + f.file;
    if (!exists(path)) throw Error("cannot resume " + dir + ": " + what + ", which is missing (deleted?)" + ways_on(dir));
    uint64_t bytes = 0;
    const uint32_t crc = io::crc32c_file(path, &bytes);
    if (bytes != f.bytes || crc != f.crc)
      throw Error("cannot resume " + dir + ": " + what + ", which has changed since it was written (" + std::to_string(bytes) +
                  " bytes, CRC-32C " + io::crc32c_hex(crc) + "; the manifest says " + std::to_string(f.bytes) + " bytes, " +
                  io::crc32c_hex(f.crc) + ")" + ways_on(dir));
    // Each file says which step it is, and both were written from the same config.
    auto sf = io::SafetensorsFile::open(path);
    int64_t step = -1;
    if (std::string(kind) == "model") {
      auto it = sf.metadata().find("step");
      step = it == sf.metadata().end() ? -1 : std::atoll(it->second.c_str());
      ck.model_path = path;
    } else {
      step = state_int(state_json(sf), "step", path);
      ck.state_path = path;
    }
    if (step != ck.step)
      throw Error("cannot resume " + dir + ": " + path + " holds step " + std::to_string(step) + ", the manifest says " +
                  std::to_string(ck.step) + ways_on(dir));
    auto c = sf.metadata().find("config");
    if (c == sf.metadata().end()) throw Error("cannot resume " + dir + ": " + path + " has no config" + ways_on(dir));
    if (config.empty()) config = c->second;
    else if (config != c->second)
      throw Error("cannot resume " + dir + ": the model and the training state of step " + std::to_string(ck.step) +
                  " were written with different configs" + ways_on(dir));
  }
  return ck;
}

std::string new_run_id() {
  std::random_device rd;
  const uint64_t id = ((uint64_t)rd() << 32) ^ rd();
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)id);
  return b;
}

std::string config_json_run_id(const std::string& dir) {
  const std::string path = dir + "/config.json";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > kMaxManifestBytes) return "";
  try {
    const nlohmann::json j = io::parse_json(io::read_file(path), path);
    return j.is_object() && j.contains("run_id") && j["run_id"].is_string() ? j["run_id"].get<std::string>() : "";
  } catch (const Error&) {
    return "";
  }
}

void write_checkpoint(const std::string& dir, const Model& m, const AdamW& opt, const TrainState& s, bool best,
                      int keep, const std::string& run_id) {
  const std::string model_rel = step_file("model", s.step), state_rel = step_file("train_state", s.step);
  const std::string manifest = dir + "/" + kManifest;
  std::error_code mk;
  std::filesystem::create_directories(dir + "/checkpoints", mk);
  if (mk) throw Error("cannot write '" + dir + "/checkpoints': " + mk.message() + " (the checkpoint of step " +
                      std::to_string(s.step) + " was not written; the previous one in " + dir + " is intact)");
  // A step is committed once: rewriting a committed step's files would break the pair in place.
  if (exists(dir + "/" + model_rel) && manifest_step(manifest) == s.step) return;
  try {
    const io::WrittenFile mw = save_model(dir + "/" + model_rel, m, {{"step", std::to_string(s.step)}});
    io::fault_point("checkpoint.model_written");
    const io::WrittenFile sw = save_train_state(dir + "/" + state_rel, m, opt, s);
    io::fault_point("checkpoint.state_written");
    nlohmann::json j = {{"format", kManifestFormat},
                        {"version", kManifestVersion},
                        {"step", s.step},
                        {"model", manifest_entry(model_rel, mw)},
                        {"train_state", manifest_entry(state_rel, sw)}};
    if (!run_id.empty()) j["run_id"] = run_id;
    const std::string text = j.dump(2) + "\n";
    io::write_file_atomic(manifest, text);  // the commit
  } catch (const Error& e) {
    std::error_code ec;  // best effort: the directory may have turned read-only
    std::filesystem::remove(dir + "/" + model_rel, ec);
    std::filesystem::remove(dir + "/" + state_rel, ec);
    throw Error(std::string(e.what()) + " (the checkpoint of step " + std::to_string(s.step) +
                " was not written; the previous one in " + dir + " is intact)");
  }
  io::fault_point("checkpoint.committed");
  try {
    link_as(dir + "/" + model_rel, dir + "/model.safetensors");
    if (best) link_as(dir + "/" + model_rel, dir + "/model.best.safetensors");
    io::fault_point("checkpoint.linked");
    FoundCheckpoint ck;
    ck.step = s.step;
    ck.model_path = dir + "/" + model_rel;
    ck.state_path = dir + "/" + state_rel;
    tidy_run_directory(dir, ck, false);
    // The newest max(keep, 1) model files at or before this step stay.
    std::vector<std::pair<int64_t, std::string>> models;
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(dir + "/checkpoints", ec)) {
      const int64_t step = step_of(e.path().filename().string(), "model");
      if (step >= 0 && step <= s.step) models.push_back({step, e.path().string()});
    }
    std::sort(models.begin(), models.end());
    for (size_t i = 0; i + std::max(keep, 1) < models.size(); ++i) std::filesystem::remove(models[i].second);
  } catch (const std::exception& e) {
    throw Error("the checkpoint of step " + std::to_string(s.step) + " is committed in " + dir + ", but " +
                plain_message(e));
  }
}

void tidy_run_directory(const std::string& dir, const FoundCheckpoint& ck, bool best) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // model.safetensors: the committed weights (a kill may have come between the commit and the link).
  auto same_file = [](const std::string& x, const std::string& y) {
    struct stat a, b;
    return ::stat(x.c_str(), &a) == 0 && ::stat(y.c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
  };
  if (!ck.legacy && !same_file(ck.model_path, dir + "/model.safetensors")) link_as(ck.model_path, dir + "/model.safetensors");
  if (!ck.legacy && best && !same_file(ck.model_path, dir + "/model.best.safetensors"))
    link_as(ck.model_path, dir + "/model.best.safetensors");
  // Temp files of a writer that was killed, and step files no commit names.
  const char* const run_files[] = {"model.safetensors", "model.best.safetensors", "config.json", "metrics.jsonl",
                                   kManifest, "train_state.safetensors"};
  for (auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    for (const char* f : run_files)
      if (name.rfind(std::string(f) + ".tmp.", 0) == 0) fs::remove(e.path(), ec);
  }
  if (!ck.legacy) fs::remove(dir + "/train_state.safetensors", ec);  // an older looplm's, superseded
  for (auto& e : fs::directory_iterator(dir + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    const int64_t m = step_of(name, "model"), t = step_of(name, "train_state");
    if (name.find(".tmp.") != std::string::npos || m > ck.step || (t >= 0 && e.path().string() != ck.state_path))
      fs::remove(e.path(), ec);
  }
}

io::WrittenFile save_train_state(const std::string& path, const Model& m, const AdamW& opt, const TrainState& s) {
  std::vector<io::TensorRef> t;
  const ParamStore& ps = m.params();
  for (auto& p : ps.infos()) {
    t.push_back({"adam.m." + p.name, io::DType::F32, p.shape, opt.m.data() + p.offset});
    t.push_back({"adam.v." + p.name, io::DType::F32, p.shape, opt.v.data() + p.offset});
  }
  nlohmann::json j = {{"step", s.step},         {"adam_t", opt.t},
                      {"data_cursor", s.data_cursor}, {"tokens_seen", s.tokens_seen},
                      {"best_val_loss", s.best_val_loss}, {"best_step", s.best_step}};
  return io::write_safetensors(path, t, {{"format", "pt"}, {"state", j.dump()}, {"config", m.config().to_json_text()}});
}

void load_train_state(const std::string& path, const Model& m, const Config& c, int64_t expected_step, AdamW& opt,
                      TrainState& s) {
  auto f = io::SafetensorsFile::open(path);
  const nlohmann::json j = state_json(f);
  auto bad = [&](const std::string& what) { return Error(path + ": metadata 'state': " + what); };
  s.step = state_int(j, "step", path);
  opt.t = state_int(j, "adam_t", path);
  const int64_t cursor = state_int(j, "data_cursor", path);
  if (!j.contains("tokens_seen") || !j["tokens_seen"].is_number()) throw bad("no number \"tokens_seen\"");
  s.tokens_seen = j["tokens_seen"].get<double>();
  const nlohmann::json best_loss = j.value("best_val_loss", nlohmann::json(-1.0));  // absent before 0.2
  const nlohmann::json best_step = j.value("best_step", nlohmann::json(-1));
  if (!best_loss.is_number() || !best_step.is_number_integer()) throw bad("\"best_val_loss\" / \"best_step\" are not numbers");
  s.best_val_loss = best_loss.get<double>();
  s.best_step = best_step.get<int64_t>();
  // Every counter follows from the step: one AdamW step, grad_accum batches and B x T x grad_accum
  // tokens per step (the sums are exact in a double below 2^53 tokens).
  if (s.step != expected_step)
    throw bad("step " + std::to_string(s.step) + ", expected " + std::to_string(expected_step));
  if (opt.t != s.step) throw bad("adam_t " + std::to_string(opt.t) + " differs from step " + std::to_string(s.step));
  if (cursor < 0 || (uint64_t)cursor != (uint64_t)s.step * (uint64_t)c.grad_accum)
    throw bad("data_cursor " + std::to_string(cursor) + ", but " + std::to_string(s.step) + " steps of grad_accum " +
              std::to_string(c.grad_accum) + " draw " + std::to_string((uint64_t)s.step * c.grad_accum) + " batches");
  s.data_cursor = (uint64_t)cursor;
  const double tokens = (double)s.step * c.batch_size * c.context * c.grad_accum;
  auto num = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.17g", x);
    return std::string(b);
  };
  if (!(s.tokens_seen == tokens))
    throw bad("tokens_seen " + num(s.tokens_seen) + ", but " + std::to_string(s.step) + " steps see " + num(tokens));
  if (s.best_step < -1 || s.best_step > s.step || (s.best_step >= 0) != (s.best_val_loss >= 0) ||
      !std::isfinite(s.best_val_loss))
    throw bad("best_step " + std::to_string(s.best_step) + " / best_val_loss " + num(s.best_val_loss) +
              " do not describe a step at or before " + std::to_string(s.step));
  for (auto& p : m.params().infos()) {
    f.read_f32("adam.m." + p.name, p.shape, opt.m.data() + p.offset);
    f.read_f32("adam.v." + p.name, p.shape, opt.v.data() + p.offset);
  }
  if (f.names().size() != 2 * m.params().infos().size())
    throw Error(path + ": holds " + std::to_string(f.names().size()) + " tensors, the model's AdamW state is " +
                std::to_string(2 * m.params().infos().size()));
  for (size_t i = 0; i < opt.m.size(); ++i)
    if (!std::isfinite(opt.m[i]) || !std::isfinite(opt.v[i]) || opt.v[i] < 0)
      throw Error(path + ": AdamW moment " + std::to_string(i) + " is " +
                  (!std::isfinite(opt.m[i]) ? "not finite (m)" : opt.v[i] < 0 ? "negative (v)" : "not finite (v)") +
                  ": a damaged training state");
}

}  // namespace looplm
