// Training checkpoints (SPEC §5, docs/format.md): DIR/model.safetensors (model/model_io.h) and
// DIR/train_state.safetensors with AdamW's moments, the step and the data cursor. Both written
// atomically (temp file, fsync, rename).
#pragma once
#include <cstdint>
#include <memory>
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

void save_train_state(const std::string& path, const Model& m, const AdamW& opt, const TrainState& s);
void load_train_state(const std::string& path, const Model& m, AdamW& opt, TrainState& s);

}  // namespace looplm
