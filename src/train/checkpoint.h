// Checkpoints (SPEC §5, docs/format.md): DIR/model.safetensors holds the weights under their
// SPEC §6 names and the full config in the metadata; DIR/train_state.safetensors holds AdamW's
// moments, the step, the RNG/data cursor. Both written atomically (temp file, fsync, rename).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "train/optimizer.h"

namespace looplm {

namespace io { class SafetensorsFile; }

struct TrainState {
  int64_t step = 0;          // optimizer steps done
  uint64_t data_cursor = 0;  // batches drawn from the training stream
  double tokens_seen = 0;
};

void save_model(const std::string& path, const Model& m);
// Reads the config from the metadata, builds the model and fills every parameter (each must be
// present with its exact shape; an unexpected tensor is an error too).
std::unique_ptr<Model> load_model(const std::string& path);
void load_weights(const io::SafetensorsFile& f, Model& m);

void save_train_state(const std::string& path, const Model& m, const AdamW& opt, const TrainState& s);
void load_train_state(const std::string& path, const Model& m, AdamW& opt, TrainState& s);

}  // namespace looplm
