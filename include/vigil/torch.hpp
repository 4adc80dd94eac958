// The libtorch adapter (issue 4, docs/torch.md): a Monitor watches a
// torch::nn::Module and its optimizer, feeds a vigil::Engine, and implements
// the standard actions for real (checkpoint, rollback, reduce_lr, skip_step,
// stop, pause_and_snapshot, log, alert).
//
//   vigil::Engine engine(program);
//   vigil::torch::Monitor monitor(engine, *model, optimizer, {.checkpoint_dir = "run/ckpt"});
//   for (std::int64_t step = 1; step <= steps; ++step) {
//     optimizer.zero_grad();
//     auto loss = loss_fn(model->forward(x), y);     // forward calls monitor.activation(...)
//     loss.backward();
//     auto d = monitor.after_backward(step, loss.item<double>());
//     if (d.rolled_back) position = d.restored_step + 1;   // the data position
//     if (!d.skip_step) optimizer.step();
//     if (monitor.after_step(step).stop || d.stop) break;
//   }
//
// Series it observes (SPEC §1): tensor series `grad{layer="NAME"}` and
// `weight{layer="NAME"}` for every named parameter, `activation{layer="NAME"}`
// for every activation() call, and scalars `loss`, `lr` (first param group),
// `step_time` (seconds since the previous after_backward), the Spot series
// `run_time`, `preempted` and `cost` (docs/spot.md), plus whatever the host
// adds with scalar(). Observations carry the run clock (`run_time`) as their
// time, so `every 30m`, `for 10m` and `x[1h]` measure training time, across
// resumes. A tensor is only read when some rule uses one of
// its stats (Engine::tensor_stats_used): unused tensors cost a branch.
//
// Only this header and torch/*.cpp include torch headers; it pulls in
// <ATen/core/Tensor.h> only. Not thread-safe: one Monitor per training loop.
// Errors of the actions (an unwritable checkpoint dir, no checkpoint to roll
// back to) are reported through MonitorOptions::log and in Decision::errors,
// never thrown; vigil::Error is thrown only for API misuse (as the Engine).
#pragma once

#include <ATen/core/Tensor.h>

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vigil/engine.hpp"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace vigil::torch {

struct MonitorOptions {
  /// Where checkpoints (`ckpt-<step>.pt`) are written and rolled back from.
  /// Empty: checkpoint/rollback/pause_and_snapshot report an error and do nothing.
  std::string checkpoint_dir;
  /// Checkpoints kept on disk: the newest `keep_last`, plus the newest good
  /// one and the best one (so a rollback target is never deleted).
  int keep_last = 5;
  /// A host-side cadence: checkpoint in after_step every N steps (0: only when
  /// a rule says `checkpoint`).
  std::int64_t checkpoint_every = 0;
  /// "last_good": a checkpoint is good if no unquiet step lies within this
  /// many steps of it, before or after. A step is unquiet if some rule was
  /// pending or firing there (Engine::pending()) or an alarm fired (a firing
  /// with an action other than log/alert/checkpoint). 0: exactly "taken while
  /// no rule was pending or firing".
  std::int64_t quiet_steps = 10;
  /// rollback(to="best"): the checkpoint with the lowest value of this series
  /// at its step ("loss" or a key given to scalar()).
  std::string best_series = "loss";
  /// rollback also restores the engine's state (windows, pending counts). Off
  /// by default: the engine keeps the memory of the fault (so a repeat is seen
  /// as one, and the recorded trace replays to the live firings); the host then
  /// keeps its step counter increasing and only rewinds its data position.
  bool rollback_restores_engine = false;
  /// pause_and_snapshot: snapshots go to `<checkpoint_dir>/snapshots/step-<S>/`.
  /// The pause waits for a file `resume` or `stop` in that directory, or for
  /// SIGUSR1 (resume), at most this long; then `continue_after_pause_timeout`
  /// decides. 0 disables the wait (snapshot only, then continue).
  double pause_timeout_s = 600;
  bool continue_after_pause_timeout = false;
  /// Recent observations kept for snapshots (only if a rule uses pause_and_snapshot).
  std::size_t snapshot_window = 200;
  /// Messages of log/alert and of failed actions. Default: stderr.
  std::function<void(std::string_view)> log;
  /// Observe gradients / weights at all (a rule must still read their stats).
  bool watch_grads = true;
  bool watch_weights = true;
  /// Hand the engine a tensor only at the steps where some rule needs it,
  /// and only the stats due then (Engine::tensor_stats_due): a rule
  /// `every 10 steps` on grad_norm costs one step in ten. Firings are those
  /// of collecting every step. false: every tensor some rule reads, every
  /// step, all its stats (the reference the tests compare with).
  bool only_due_tensors = true;
  /// Take the stats of an activation in activation(), while the tensor the
  /// forward pass has just written is still in cache, instead of keeping it
  /// alive until after_backward and reading it there: the stats due at the
  /// step after the previous after_backward's (the usual loop), computed
  /// then, handed to the engine as its derived samples at after_backward
  /// (frac_zero and frac_dead_units together in one pass). If the step
  /// turns out to be another and needs a stat not taken, or before the first
  /// after_backward, the tensor is kept and read as before; so the firings
  /// are those of `false`. Off (as if false) for tensors on another device,
  /// for activations whose update stats or frac_changed some rule reads (the
  /// engine keeps their previous value), and when the engine gathers stats
  /// across processes (EngineOptions::allgather: combining them needs the
  /// tensors handed over). The stats are those of the value
  /// passed at the call, even if the model later changes it in place.
  bool activation_stats_in_forward = true;
  /// Compute the stats of the tensors the Monitor hands over (in
  /// after_backward and activation()) on the calling thread only, whatever
  /// vigil::set_stats_threading says for the rest of the process. In a
  /// training step the model's own work keeps the other cores busy: splitting
  /// a large gradient with a stats worker costs a wake-up and the worker's CPU
  /// time and saves no step time (docs/performance.md, goal 5: the 78
  /// gradients of the 6.9 M transformer in 1.31-1.42 ms of CPU and wall time
  /// on the calling thread, 1.45-1.52 ms with the pool). The stats are the same
  /// either way. false: the process-wide StatsThreading applies.
  bool stats_on_calling_thread = true;
  /// Where the stats of a tensor are computed (docs/torch.md, "Tensors on an
  /// accelerator"). `non_cpu`: a tensor on another device is reduced there
  /// by batched_stats() and only the stats come back; a CPU tensor is read
  /// in place by the engine's fused kernels. `always`: every eligible tensor
  /// goes through batched_stats(), CPU ones too (how the device path is
  /// tested on a CPU-only libtorch). `never`: tensors on another device are
  /// copied to the CPU. Tensors whose update or parameterised stats some
  /// rule reads always take the CPU path (the engine keeps their previous
  /// value and saves it in checkpoints).
  enum class DeviceStats { non_cpu, always, never };
  DeviceStats device_stats = DeviceStats::non_cpu;
  /// Multi-process jobs: applied to the loss before it is observed, e.g. the
  /// mean over the processes (vigil::torch::mean_across), so that every
  /// process sees the same loss. Empty: the process's own loss.
  std::function<double(double)> reduce_loss;

  /// Preemption notice (docs/spot.md). When some rule reads the series
  /// `preempted`, the Monitor installs handlers for these signals that only
  /// set an atomic flag (the previous handlers come back in ~Monitor); the
  /// next after_backward observes `preempted = 1`, and from then on every
  /// step. Without such a rule nothing is installed, so SIGTERM keeps its
  /// usual meaning. Empty: no signal handler.
  std::vector<int> preemption_signals = {SIGTERM};
  /// A file whose appearance is the notice (what a cloud agent or a sidecar
  /// polling the metadata endpoint writes); checked with one stat() per
  /// after_backward. Empty: none.
  std::string preemption_file;
};

/// One firing, copied out of the engine (the engine's Firing is only valid
/// until the next observe).
struct FiredRule {
  std::string rule;
  std::int64_t step = 0;
  std::string labels;  // `{layer="fc1.weight"}` or empty
  double value = 0;    // NaN if the rule has no deciding comparison
};

/// What the host must do after after_backward / after_step.
struct Decision {
  bool skip_step = false;            // do not call optimizer.step() this step
  bool stop = false;                 // end training (stop action or a pause that said stop)
  std::string stop_reason;
  bool rolled_back = false;          // model/optimizer/RNG were restored
  std::int64_t restored_step = -1;   // the restored checkpoint's step
  bool lr_changed = false;           // reduce_lr ran
  std::vector<FiredRule> firings;    // the firings of this evaluation
  std::vector<std::string> errors;   // actions that could not be carried out
};

/// What the Monitor has handed over so far (Monitor::stats()).
struct MonitorStats {
  /// Tensors handed to the engine, by view or as device-computed stats.
  std::uint64_t tensors_observed = 0;
  /// Of those, the ones reduced by batched_stats() (the device path).
  std::uint64_t tensors_reduced_on_device = 0;
  /// batched_stats() calls (one per device per step that has any).
  std::uint64_t device_batches = 0;
  /// Bytes copied from devices to the CPU for stats (one small vector per
  /// batch; the tensors themselves never move on the device path).
  std::uint64_t device_bytes = 0;
  /// Of tensors_observed, the activations whose stats were taken in
  /// activation() (MonitorOptions::activation_stats_in_forward).
  std::uint64_t activations_in_forward = 0;
};

struct CheckpointInfo {
  std::int64_t step = 0;
  std::string path;
  double metric = 0;  // best_series at that step (NaN if unknown)
};

class Monitor {
 public:
  /// Binds the standard actions on `engine` (replacing earlier callbacks) and
  /// interns a grad/weight tensor series per named parameter. `engine`,
  /// `model` and `optimizer` must outlive the Monitor.
  Monitor(Engine& engine, ::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
          MonitorOptions options = {});
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  /// Records activation tensor `activation{layer="name"}` for the next
  /// after_backward, only if a rule reads it: its stats due then are taken
  /// now (MonitorOptions::activation_stats_in_forward), else the tensor is
  /// kept alive until then. Returns `x`.
  const at::Tensor& activation(std::string_view name, const at::Tensor& x);
  /// A host scalar (`accuracy`, `val_loss`...) observed with the next after_backward.
  void scalar(std::string_view key, double value);
  /// Host integers saved in checkpoints and restored by rollback/resume (a
  /// data position, an epoch counter...).
  std::map<std::string, std::int64_t>& host_state();

  /// Evaluates the rules on this step's loss, gradients, weights (before the
  /// update), activations, lr and step time, and carries out the actions.
  /// Call after backward() and before optimizer.step().
  ///
  /// When one evaluation both stops and checkpoints (spot_preemption,
  /// max_run, budget), the checkpoint is written before this returns, so a
  /// host that breaks out of its loop at once loses nothing: it holds the
  /// state *before* this step's update (model, optimizer, host_state(), the
  /// RNG as it was when the previous after_step returned) and is named for
  /// step - 1, so resume() returns step - 1 and the host redoes this step.
  /// The engine state in it has already seen this step; after resume the
  /// repeated after_backward of this step does not observe again (its
  /// firings already happened) and returns an empty Decision.
  Decision after_backward(std::int64_t step, double loss);
  /// Carries out checkpoints due at this step (a `checkpoint` action of the
  /// step, or checkpoint_every), so that a checkpoint holds the updated model.
  Decision after_step(std::int64_t step);

  /// Writes a checkpoint now (atomically: temp file, fsync, rename, fsync
  /// dir) and prunes old ones. Returns its path, or empty with `error` set.
  std::string checkpoint(std::int64_t step, std::string* error = nullptr);
  /// Restores the checkpoint chosen by `to` ("last_good", "best", or a number
  /// N: the newest one at least N steps before `step`). Model, optimizer and
  /// RNG state come back bit for bit; the engine too if rollback_restores_engine.
  /// Returns the checkpoint's step, or -1 with `error` set.
  std::int64_t rollback(std::string_view to, std::int64_t step, std::string* error = nullptr);
  /// Restores everything a checkpoint holds, the engine state and the
  /// monitor's own bookkeeping included (a restarted process continuing a run).
  /// Returns the checkpoint's step, or -1 with `error` set.
  std::int64_t resume(const std::string& path, std::string* error = nullptr);
  /// The newest checkpoint in `dir` (by step), empty if none.
  static std::string latest_checkpoint(const std::string& dir);

  /// Seconds of training so far: this process's time since the Monitor was
  /// constructed plus the run time saved in the checkpoint it resumed from.
  [[nodiscard]] double run_time() const;
  /// Whether a preemption notice (signal or file) has been seen.
  [[nodiscard]] bool preempted() const;

  [[nodiscard]] const std::vector<CheckpointInfo>& checkpoints() const;
  /// The checkpoint last_good would pick now, or null.
  [[nodiscard]] const CheckpointInfo* last_good() const;

  /// Hands every observation to `recorder` too (see Engine::record; the
  /// Monitor owns the engine's recorder slot).
  void record(std::function<void(const Observation&)> recorder);

  /// Counts of the tensors handed over (tests and benchmarks read them).
  [[nodiscard]] const MonitorStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The parameter-free stats (all but update_norm and update_ratio, which are
/// NaN) of each of `tensors`, computed where the tensors are: the tensors are
/// flattened into one float64 buffer on their device (one concatenation),
/// each accumulator is one elementwise kernel and one segmented reduction
/// over all of them at once (at::segment_reduce), and the results, stacked,
/// come to the CPU in one copy of `accumulators x tensors` doubles (at most
/// 13 x 8 = 104 bytes per tensor; `*transferred` gets the byte count). So a step costs
/// a few kernels per stat, not one per stat per tensor, and never moves a
/// tensor off its device. Accumulation is in double like the CPU kernels
/// (equal to them within 1e-9 relative); NaN and Inf follow the same rules
/// (docs/tensors.md). `wanted` limits the work to those stats (the others
/// are NaN, numel is always set). All tensors must be on one device;
/// undefined or empty tensors give numel 0 and NaN. Throws what libtorch
/// throws (a tensor of a non-floating dtype is converted first).
///   auto st = vigil::torch::batched_stats(grads, vigil::stat_bit(vigil::Stat::norm));
std::vector<TensorStats> batched_stats(std::span<const at::Tensor> tensors,
                                       StatMask wanted = ~StatMask{0},
                                       std::size_t* transferred = nullptr);

/// Multiplies the lr of every param group by `factor`, not going below
/// `min_lr` (a group already below it is left alone). Returns the new lr of
/// the first group.
double reduce_lr(::torch::optim::Optimizer& optimizer, double factor, double min_lr = 0);
/// The lr of the first param group (NaN if the optimizer has none).
double learning_rate(const ::torch::optim::Optimizer& optimizer);
/// Sets the lr of every param group.
void set_learning_rate(::torch::optim::Optimizer& optimizer, double lr);

}  // namespace vigil::torch
