#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "looplm/error.h"
#include "looplm/util.h"
#include "model/model_io.h"
#include "tokenizer/tokenizer.h"

namespace looplm {

bool path_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

void make_dirs(const std::string& p) {
  std::string cur;
  std::stringstream ss(p);
  std::string part;
  if (!p.empty() && p[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error("cannot create directory '" + cur + "': " + std::strerror(errno));
  }
}

const std::vector<std::string>& resume_safe_keys() {
  static const std::vector<std::string> k = {"steps",      "lr",           "min_lr_ratio", "warmup",
                                             "weight_decay", "grad_clip",  "eval_every",   "eval_batches",
                                             "log_every",  "data_val",     "keep_checkpoints"};
  return k;
}

bool has_checkpoint(const std::string& dir) {
  return path_exists(dir + "/checkpoint.json") || (path_exists(dir + "/model.safetensors") && path_exists(dir + "/train_state.safetensors"));
}

namespace {
Config config_of(const std::string& model_path) {
  auto f = io::SafetensorsFile::open(model_path);
  auto it = f.metadata().find("config");
  if (it == f.metadata().end()) throw Error(model_path + ": no 'config' in the metadata");
  try {
    Config c = Config::from_json_text(it->second, model_path + " (metadata 'config')");
    if (auto t = f.metadata().find(kTokenizerMetadataKey); c.tokenizer == "hf" && t != f.metadata().end())
      c.tokenizer_json = t->second;
    c.text = text_conventions_of(c, f.metadata(), model_path);
    return c;
  } catch (const UsageError& e) {  // a damaged file is a runtime error
    throw Error(e.what());
  }
}
}  // namespace

Config run_config(const std::string& dir) {
  if (auto ck = find_checkpoint(dir)) return config_of(ck->model_path);
  if (path_exists(dir + "/model.safetensors")) return config_of(dir + "/model.safetensors");
  if (path_exists(dir + "/config.json")) {
    try {
      return Config::from_file(dir + "/config.json");
    } catch (const UsageError& e) {
      throw Error(e.what());
    }
  }
  throw Error(dir + " holds no run (no checkpoint.json, model.safetensors or config.json)");
}

Config resumed_config(const Config& saved, const Config& wanted, const std::string& dir) {
  const auto a = nlohmann::json::parse(saved.to_json_text()), b = nlohmann::json::parse(wanted.to_json_text());
  Config c = saved;
  std::string changed;
  for (auto it = b.begin(); it != b.end(); ++it) {
    if (a.contains(it.key()) && a.at(it.key()) == it.value()) continue;
    if (it.key() == "tokenizer_chars" && it.value() == "") continue;  // derived from the data at the start
    const auto& safe = resume_safe_keys();
    // data_val to or from "" moves the held-out part of data_train in or out of training.
    if (it.key() == "data_val" && (a.value("data_val", "").empty() != it.value().get<std::string>().empty()))
      throw UsageError("cannot resume " + dir + " with data_val " + it.value().dump() + ": the run " +
                       (a.value("data_val", "").empty() ? "holds out the end of data_train for validation"
                                                        : "trains on all of data_train") +
                       ", and changing that changes its training data (start a new run, e.g. with " + argument_spelling().init_from + ")");
    if (std::find(safe.begin(), safe.end(), it.key()) != safe.end()) {
      c.set(it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
      continue;
    }
    changed += (changed.empty() ? "" : ", ") + it.key() + " (the run has " +
               (a.contains(it.key()) ? a.at(it.key()).dump() : std::string("no such key")) + ", asked " + it.value().dump() + ")";
  }
  if (!changed.empty()) {
    std::string safe;
    for (auto& k : resume_safe_keys()) safe += (safe.empty() ? "" : ", ") + k;
    throw UsageError("cannot resume " + dir + " with a different " + changed + ": only " + safe +
                     " may change on " + argument_spelling().resume + " (start a new run with another " + argument_spelling().out + " for the rest)");
  }
  return c;
}

namespace {

// The files a run writes in its directory (and nothing else is ever removed by --overwrite):
// these, and DIR/checkpoints/{model,train_state}_step<N>.safetensors.
const char* const kRunFiles[] = {"checkpoint.json", "model.safetensors", "model.best.safetensors", "metrics.jsonl",
                                 "config.json", "train_state.safetensors"};

bool is_step_file(const std::string& name) {
  return (name.rfind("model_step", 0) == 0 || name.rfind("train_state_step", 0) == 0) &&
         name.find(".safetensors") != std::string::npos;
}

}  // namespace

bool holds_run(const std::string& dir) {
  for (const char* f : kRunFiles)
    if (path_exists(dir + "/" + f)) return true;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir + "/checkpoints", ec))
    if (is_step_file(e.path().filename().string())) return true;
  return false;
}

// Weights or training state a person could lose: what --resume never starts over.
bool holds_weights(const std::string& dir) {
  for (const char* f : {"checkpoint.json", "model.safetensors", "model.best.safetensors", "train_state.safetensors"})
    if (path_exists(dir + "/" + f)) return true;
  return false;
}

void remove_run(const std::string& dir) {
  std::error_code ec;
  for (const char* f : kRunFiles) std::filesystem::remove(dir + "/" + f, ec);
  for (auto& e : std::filesystem::directory_iterator(dir + "/checkpoints", ec))
    if (is_step_file(e.path().filename().string())) std::filesystem::remove(e.path(), ec);
  std::filesystem::remove(dir + "/checkpoints", ec);  // only if now empty
}

// One trainer per run directory: a second `looplm train --out DIR` (another terminal, a job
// scheduler starting a job twice) would interleave two runs' checkpoints. flock on DIR/train.lock:
// released by the kernel when the process ends, however it ends. flock conflicts between two
// opens of the file even in one process, so the holds of one process share one descriptor.
struct RunLock::Held {
  int fd = -1;
  ~Held() {
    if (fd >= 0) ::close(fd);
  }
};

RunLock::RunLock(const std::string& dir) {
  make_dirs(dir);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) throw Error("cannot use '" + dir + "': " + std::strerror(errno));
  static std::mutex mu;
  static std::map<std::pair<dev_t, ino_t>, std::weak_ptr<Held>> held;
  std::lock_guard<std::mutex> g(mu);
  if ((held_ = held[{st.st_dev, st.st_ino}].lock())) return;
  const std::string path = dir + "/train.lock";
  auto h = std::make_shared<Held>();
  h->fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (h->fd < 0) throw Error("cannot write '" + path + "': " + std::strerror(errno));
  if (::flock(h->fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char pid[32] = {0};
    (void)!::pread(h->fd, pid, sizeof pid - 1, 0);
    if (e == EWOULDBLOCK)
      throw Error(dir + " is in use by another looplm train (pid " + std::string(pid) +
                  "); wait for it to end, or choose another " + argument_spelling().out);
    throw Error("cannot lock '" + path + "': " + std::strerror(e));
  }
  const std::string me = std::to_string(::getpid());
  (void)!::ftruncate(h->fd, 0);
  (void)!::pwrite(h->fd, me.data(), me.size(), 0);
  held[{st.st_dev, st.st_ino}] = h;
  held_ = h;
}

RunLock::~RunLock() = default;

Config with_absolute_data_paths(Config c) {
  for (std::string* p : {&c.data_train, &c.data_val, &c.tokenizer_file})
    if (!p->empty()) *p = std::filesystem::absolute(*p).lexically_normal().string();
  // A tokenizer.json selects the hf tokenizer (over the default byte; a char config is a conflict).
  if (!c.tokenizer_file.empty() && c.tokenizer == "byte") c.tokenizer = "hf";
  if (!c.tokenizer_file.empty() && c.tokenizer != "hf")
    throw UsageError("tokenizer_file " + c.tokenizer_file + " is a Hugging Face tokenizer, but the config says tokenizer " +
                     c.tokenizer + "; leave one of them out");
  return c;
}

RunDirectory::RunDirectory(const TrainOptions& opt, const Config& config_abs, Config& c, const Log& log)
    : dir(opt.out_dir), lock(dir) {
  found = opt.resume ? find_checkpoint(dir) : std::nullopt;  // a damaged one is refused (checkpoint.h)
  const std::string own = opt.resume ? config_json_run_id(dir) : "";
  if (found && !found->run_id.empty() && !own.empty() && found->run_id != own)
    throw Error(resume_refused(dir, "its checkpoint (step " + std::to_string(found->step) + ", checkpoint.json) was written by run " +
                                        found->run_id + ", but its config.json is run " + own +
                                        "'s: a checkpoint copied in from another run? (A run moves whole: its config.json with it)"));
  run_id = found && !found->run_id.empty() ? found->run_id : !own.empty() ? own : new_run_id();
  if (!opt.resume && holds_run(dir) && !holds_weights(dir) && !opt.overwrite) {
    // What a run that failed before its first checkpoint left (its config, its log): nothing of
    // value, and a retry into the same directory is the natural next step.
    remove_run(dir);
    log("note: " + dir + " held a run that stopped before its first checkpoint (no weights); starting over");
  }
  if (!opt.resume && holds_run(dir)) {
    if (!opt.overwrite) {
      std::string at;
      try {
        if (auto ck = find_checkpoint(dir)) at = " (checkpoint at step " + std::to_string(ck->step) + ")";
      } catch (const Error&) {
      }
      throw UsageError(dir + " already holds a run" + at + "; continue it with " + argument_spelling().resume + ", start over with " +
                       argument_spelling().overwrite + ", or choose another " + argument_spelling().out);
    }
    remove_run(dir);
    log(argument_spelling().overwrite + ": removed the previous run in " + dir);
  }
  if (opt.resume && !found) {
    if (holds_weights(dir))
      throw Error("cannot resume " + dir + ": it holds a run's weights but no checkpoint to resume from "
                  "(checkpoint.json is missing, and there is no train_state.safetensors of an older looplm). Nothing in " +
                  dir + " was changed. To go on: " + argument_spelling().overwrite + " starts this run over (its files are removed), or " +
                  argument_spelling().init_from + argument_spelling().value_sep + dir + "/model.safetensors " + argument_spelling().out +
                  argument_spelling().value_sep + "NEW_DIR trains a new run from its weights");
    if (path_exists(dir + "/config.json")) {
      // Stopped before its first checkpoint: the same run again from step 0, with its own config.
      c = resumed_config(with_absolute_data_paths(run_config(dir)), config_abs, dir);
      log(argument_spelling().resume + ": " + dir + " holds no checkpoint yet (it stopped before its first); starting it again "
          "from step 0 with its config.json");
    } else {
      log(argument_spelling().resume + ": no checkpoint in " + dir + ", starting a new run");
    }
    remove_run(dir);  // what an unfinished first attempt left
  }
}

Config with_own_data(Config c, bool sets_data_train, bool sets_data_val, std::string* note) {
  std::string said;
  if (sets_data_train && !sets_data_val && !c.data_val.empty()) {
    said = "data_train is set and data_val is not: validating on " + validation_name(c.data_train, "", c.val_split) +
           ", not on " + c.data_val + " (" + set_arg("data_val", "FILE") + " for another file)";
    c.data_val = "";
  } else if (sets_data_val && !sets_data_train) {
    said = "data_val is set and data_train is not: training on " + c.data_train;
  }
  if (note) *note = said;
  return c;
}

}  // namespace looplm
