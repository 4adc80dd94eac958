// The example libtorch trainer (examples/torch_trainer/README.md): a small MLP
// on a generated 3-class spiral dataset, with faults injected on purpose and a
// Vigil Monitor that keeps it alive. Torch-free interface, so `main` and the
// tests can drive it without knowing the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vigil_example {

struct TrainConfig {
  std::string rules;     // rule file; empty: train without a monitor (the baseline)
  std::string work_dir;  // checkpoints and snapshots (required with rules)
  std::int64_t steps = 400;
  std::int64_t checkpoint_every = 25;
  // Faults: a batch with a NaN feature, and the lr multiplied by a factor (an
  // operator typo, a broken schedule). Each happens once, at that global step; <0: none.
  std::int64_t nan_batch_step = 120;
  std::int64_t lr_spike_step = 250;
  double lr_spike_factor = 100;
  std::string record_jsonl;      // record every observation the engine evaluates
  std::int64_t stop_after = -1;  // checkpoint and return after this step (resume test)
  bool resume = false;           // continue from the newest checkpoint in work_dir
  bool verbose = false;          // print the monitor's log lines
};

struct FiringRecord {
  std::string rule;
  std::int64_t step = 0;
  std::string labels;
  double value = 0;
};

struct TrainResult {
  std::string error;          // set if the run could not start (bad rule file...)
  double final_loss = 0;      // cross-entropy on the held-out set (NaN if ruined)
  double final_accuracy = 0;  // on the held-out set
  double min_lr = 0, final_lr = 0;
  std::int64_t last_step = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t rollbacks = 0;
  bool stopped = false;
  std::string stop_reason;
  double seconds = 0;
  std::vector<FiringRecord> firings;
};

TrainResult train(const TrainConfig& config);

}  // namespace vigil_example
