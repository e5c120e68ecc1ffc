// A run directory (docs/format.md: the table at its top): the files a run writes there, whether a
// directory holds a run, its lock, its config, and what train() does with what an earlier run left
// (resume it, start over, or refuse) — one home for what was spread over the trainer.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "looplm/config.h"
#include "looplm/looplm.h"
#include "train/checkpoint.h"

namespace looplm {

using Log = std::function<void(const std::string&)>;

bool path_exists(const std::string& path);
// The directory and its parents, as needed (mkdir -p).
void make_dirs(const std::string& path);

// Whether `dir` holds any file a run writes (a checkpoint, weights, metrics, config.json, step files).
bool holds_run(const std::string& dir);
// Weights or training state a person could lose: what --resume never starts over.
bool holds_weights(const std::string& dir);
// The files a run writes (and nothing else: --overwrite removes only these).
void remove_run(const std::string& dir);

// The config's paths (data_train, data_val, tokenizer_file) made absolute, and a tokenizer.json
// selecting the hf tokenizer (a char or other tokenizer named with one is a usage error).
Config with_absolute_data_paths(Config c);
// The run's config with the resume-safe keys (resume_safe_keys) taken from `wanted`; any other
// difference is a usage error naming it.
Config resumed_config(const Config& saved, const Config& wanted, const std::string& dir);

// The run directory of one train() call: locked for this process alone (RunLock), and what an
// earlier run left there settled before anything is written — resumed from its verified
// checkpoint, started over (--overwrite, or a run that stopped before its first checkpoint), or
// refused: a run directory is never lost by accident. `c` becomes the config of a run resumed
// before its first checkpoint (its config.json).
struct RunDirectory {
  const std::string dir;
  RunLock lock;
  std::optional<FoundCheckpoint> found;  // --resume: the checkpoint to continue
  std::string run_id;                    // this run's (checkpoint.h): a resumed run keeps its own

  RunDirectory(const TrainOptions& opt, const Config& config_abs, Config& c, const Log& log);
};

}  // namespace looplm
