// Training checkpoints in a run directory, committed as one (docs/format.md, "The checkpoint
// protocol"). A checkpoint is the model's weights and the training state (AdamW's moments, the
// step, the data cursor); the two are one commit, so a resume never pairs weights of one step with
// the state of another:
//
//   1. DIR/checkpoints/model_step<N>.safetensors        atomic (temp file, fsync, rename, fsync dir)
//   2. DIR/checkpoints/train_state_step<N>.safetensors  atomic
//   3. DIR/checkpoint.json                              atomic: THE COMMIT. Names both files with
//                                                       their step, byte size and CRC-32C
//   4. DIR/model.safetensors (and model.best.safetensors when it is the best): hard links to (1)
//   5. train states other than (2) and model files beyond keep_checkpoints removed
//
// A kill or a full disk anywhere leaves checkpoint.json naming a whole, matching pair: the previous
// one before 3, the new one from 3 on. find_checkpoint verifies the pair before a resume uses it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "model/model.h"
#include "model/model_io.h"
#include "train/optimizer.h"

namespace looplm {

struct TrainState {
  int64_t step = 0;          // optimizer steps done
  uint64_t data_cursor = 0;  // batches drawn from the training stream
  double tokens_seen = 0;
  double best_val_loss = -1;  // < 0: none yet (model.best.safetensors holds that step's weights)
  int64_t best_step = -1;
};

// A verified checkpoint of a run directory.
struct FoundCheckpoint {
  int64_t step = 0;
  std::string model_path, state_path;  // full paths
  bool legacy = false;  // written by looplm before the manifest: the pair cannot be verified
  std::string run_id;   // the run that wrote it (the manifest's "run_id"); "": an older looplm's
};

// A run's identity: 16 hex digits drawn when a run starts (not on --resume), written into each
// checkpoint manifest and into DIR/config.json, so a checkpoint copied in from another run is told
// apart from the run's own (the trainer refuses to resume it). Not part of the model: training
// does not read it, and a config.json given as --config to a new run is not that run.
std::string new_run_id();
// DIR/config.json's "run_id"; "" when there is no config.json, it has no run_id (an older
// looplm), or it cannot be read as JSON (the run's config checks say so where it matters).
std::string config_json_run_id(const std::string& dir);

// DIR's checkpoint, verified: checkpoint.json is well formed and names this step's files, which
// exist with the recorded sizes and CRC-32C and agree on the step and config. std::nullopt when DIR
// holds no checkpoint (neither checkpoint.json nor the unverifiable pair of older versions,
// model.safetensors + train_state.safetensors). Error (exit 1) naming what does not match.
std::optional<FoundCheckpoint> find_checkpoint(const std::string& dir);

// "cannot resume DIR: WHY. Nothing in DIR was changed. To go on: --overwrite ..., or --init-from ...".
std::string resume_refused(const std::string& dir, const std::string& why);

// Writes step s.step's checkpoint into DIR by the protocol above (the manifest records `run_id`
// when it is not empty). `best`: this step's weights are
// the best so far (model.best.safetensors). Keeps the newest max(keep, 1) model files by step.
// On an Error (a full disk, a read-only directory) the files of this attempt are removed and the
// previous checkpoint is untouched.
void write_checkpoint(const std::string& dir, const Model& m, const AdamW& opt, const TrainState& s, bool best,
                      int keep, const std::string& run_id = "");

// After a kill between the commit and the links: model.safetensors (and, when `best`,
// model.best.safetensors) link to the committed weights again, and files no commit names (temp
// files, a newer attempt's step files, older train states) are removed.
void tidy_run_directory(const std::string& dir, const FoundCheckpoint& ck, bool best);

// The training state file of step s.step (AdamW's moments; step, cursor and counters in the
// metadata, with the config), written atomically.
io::WrittenFile save_train_state(const std::string& path, const Model& m, const AdamW& opt, const TrainState& s);

// The training state of a checkpoint into opt and s, every value checked against the model and
// config `c` (the step it must hold, the data cursor and counters that step implies, finite
// moments, v >= 0). Error naming the file and the value.
void load_train_state(const std::string& path, const Model& m, const Config& c, int64_t expected_step, AdamW& opt,
                      TrainState& s);

}  // namespace looplm
