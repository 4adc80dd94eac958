// vigil::torch::Monitor: the libtorch side of Vigil. The only translation unit
// of the adapter that includes <torch/torch.h> (9 s to parse).
//
// Owns: the libtorch side. Must not touch: rule evaluation (the engine does it).
#include "vigil/torch.hpp"

#include "activation_stats.hpp"
#include "interp/tensor_stats.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace vigil::torch {
namespace {

namespace fs = std::filesystem;

constexpr StatMask all_stat_bits = (StatMask{1} << stat_count) - 1;

// Alarms decide "last_good": a firing whose actions only log or save is not a
// sign of trouble (a `checkpoint` rule would otherwise spoil every checkpoint).
bool is_alarm(const Firing& f) {
  for (const Action& a : *f.actions)
    if (a.name != "log" && a.name != "alert" && a.name != "checkpoint") return true;
  return false;
}

std::string checkpoint_name(std::int64_t step) { return fmt::format("ckpt-{:012}.pt", step); }

// Parses `ckpt-<step>.pt`; false for anything else (temp files included).
bool parse_checkpoint_name(std::string_view name, std::int64_t& step) {
  constexpr std::string_view prefix = "ckpt-", suffix = ".pt";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return false;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  auto [ptr, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && ptr == last;
}

std::string errno_message(std::string_view what, const std::string& path) {
  return fmt::format("{} {}: {}", what, path, std::strerror(errno));
}

// temp file, fsync, rename, fsync of the directory: a reader (or a process
// restarted after SIGKILL / power loss) sees the old file or the new one, never
// a torn one.
bool write_atomically(const fs::path& path, std::string_view bytes, std::string& error) {
  const fs::path tmp = path.parent_path() / fmt::format(".{}.tmp.{}", path.filename().string(),
                                                         static_cast<long>(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = errno_message("cannot create", tmp.string());
    return false;
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = errno_message("cannot write", tmp.string());
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    error = errno_message("cannot fsync", tmp.string());
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    error = errno_message("cannot rename to", path.string());
    ::unlink(tmp.c_str());
    return false;
  }
  const int dir = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return true;
}

at::Tensor bytes_tensor(std::string_view bytes) {
  auto t = ::torch::empty({static_cast<std::int64_t>(bytes.size())}, ::torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel()));
}

volatile std::sig_atomic_t g_resume_signal = 0;
extern "C" void on_resume_signal(int) { g_resume_signal = 1; }

// The preemption notice: a signal handler may only touch lock-free atomics.
// Process-wide, as signal dispositions are; reset when the first Monitor
// installs its handlers.
std::atomic<int> g_preempted{0};
static_assert(std::atomic<int>::is_always_lock_free);
extern "C" void on_preemption_signal(int) { g_preempted.store(1, std::memory_order_relaxed); }
int g_preemption_installs = 0;

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

}  // namespace

double learning_rate(const ::torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  if (groups.empty()) return std::numeric_limits<double>::quiet_NaN();
  return groups.front().options().get_lr();
}

void set_learning_rate(::torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

double reduce_lr(::torch::optim::Optimizer& optimizer, double factor, double min_lr) {
  for (auto& group : optimizer.param_groups()) {
    const double lr = group.options().get_lr();
    if (lr <= min_lr) continue;
    group.options().set_lr(std::max(lr * factor, min_lr));
  }
  return learning_rate(optimizer);
}

std::vector<TensorStats> batched_stats(std::span<const at::Tensor> tensors, StatMask wanted,
                                       std::size_t* transferred) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<TensorStats> out(tensors.size());
  for (auto& st : out) {
    std::fill(std::begin(st.values), std::end(st.values), nan);
    st.values[static_cast<std::size_t>(Stat::numel)] = 0;
  }
  if (transferred) *transferred = 0;
  auto wants = [&](std::initializer_list<Stat> stats) {
    for (Stat s : stats)
      if (wanted & stat_bit(s)) return true;
    return false;
  };
  // The accumulators the wanted stats need (var/std as the CPU kernels do it:
  // sums shifted by each tensor's first finite element, so a constant tensor
  // has variance exactly 0, and NaN whenever the tensor holds NaN or Inf).
  const bool var = wants({Stat::var, Stat::std});
  const bool sum = wants({Stat::sum, Stat::mean});
  const bool abs_sum = wants({Stat::abs_sum, Stat::abs_mean});
  const bool sumsq = wants({Stat::norm});
  const bool min = wants({Stat::min}), max = wants({Stat::max}), abs_max = wants({Stat::abs_max});
  const bool zero = wants({Stat::frac_zero}), pos = wants({Stat::frac_pos}),
             neg = wants({Stat::frac_neg});
  const bool nans = var || wants({Stat::frac_nan, Stat::nan_count});
  const bool infs = var || wants({Stat::frac_inf, Stat::inf_count});

  // Non-empty tensors only (a segment of length 0 has no defined extremes).
  std::vector<std::size_t> which;
  std::vector<at::Tensor> flat_parts;
  std::vector<std::int64_t> lengths;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined() || t.numel() == 0) continue;
    which.push_back(i);
    flat_parts.push_back(t.detach().reshape({-1}));
    lengths.push_back(t.numel());
    out[i].values[static_cast<std::size_t>(Stat::numel)] = static_cast<double>(t.numel());
  }
  if (which.empty()) return out;
  const auto device = flat_parts.front().device();
  std::int64_t total = 0;
  for (auto n : lengths) total += n;
  // One buffer in double, written by one concatenation (which converts):
  // the same accumulation as the CPU kernels.
  at::Tensor flat = at::empty({total}, ::torch::TensorOptions().dtype(at::kDouble).device(device));
  at::cat_out(flat, flat_parts);
  const at::Tensor len = ::torch::tensor(lengths, ::torch::kLong).to(device);
  auto segment_sum = [&](const at::Tensor& x) {
    return at::segment_reduce(x, "sum", len, {}, {}, 0, /*unsafe=*/true);
  };
  auto count = [&](const at::Tensor& mask) { return segment_sum(mask.to(at::kDouble)); };

  std::vector<at::Tensor> rows;
  enum Acc : int { a_sum, a_abs_sum, a_sumsq, a_min, a_max, a_abs_max, a_zero, a_pos, a_neg,
                   a_nan, a_inf, a_s1, a_s2, acc_count };
  int row_of[acc_count];
  std::fill(std::begin(row_of), std::end(row_of), -1);
  auto add = [&](Acc a, at::Tensor r) {
    row_of[a] = static_cast<int>(rows.size());
    rows.push_back(std::move(r));
  };
  if (sum) add(a_sum, segment_sum(flat));
  if (abs_sum || abs_max) {
    const at::Tensor a = flat.abs();
    if (abs_sum) add(a_abs_sum, segment_sum(a));
    if (abs_max) add(a_abs_max, at::segment_reduce(a, "max", len, {}, {}, 0, true));
  }
  if (sumsq) add(a_sumsq, segment_sum(flat.square()));
  if (min) add(a_min, at::segment_reduce(flat, "min", len, {}, {}, 0, true));
  if (max) add(a_max, at::segment_reduce(flat, "max", len, {}, {}, 0, true));
  if (zero) add(a_zero, count(flat.eq(0)));
  if (pos) add(a_pos, count(flat.gt(0)));
  if (neg) add(a_neg, count(flat.lt(0)));
  if (nans) add(a_nan, count(flat.isnan()));
  if (infs) add(a_inf, count(flat.isinf()));
  if (var) {
    // Each segment's first element (its offset), 0 if not finite.
    const at::Tensor offsets = (len.cumsum(0) - len);
    const at::Tensor first = flat.index_select(0, offsets);
    const at::Tensor shift = at::where(first.isfinite(), first, at::zeros_like(first));
    const at::Tensor d = flat - shift.repeat_interleave(len, 0, flat.numel());
    add(a_s1, segment_sum(d));
    add(a_s2, segment_sum(d.square()));
  }
  if (rows.empty()) return out;
  // The one transfer: accumulators x tensors doubles.
  const at::Tensor host = at::stack(rows).to(at::kCPU).contiguous();
  if (transferred) *transferred = static_cast<std::size_t>(host.numel()) * sizeof(double);
  const double* h = host.data_ptr<double>();
  const std::size_t k = which.size();
  auto acc = [&](Acc a, std::size_t j) { return h[static_cast<std::size_t>(row_of[a]) * k + j]; };
  for (std::size_t j = 0; j < k; ++j) {
    TensorStats& st = out[which[j]];
    const double n = st.values[static_cast<std::size_t>(Stat::numel)];
    auto set = [&](Stat s, double v) {
      if (wanted & stat_bit(s)) st.values[static_cast<std::size_t>(s)] = v;
    };
    if (sum) set(Stat::sum, acc(a_sum, j)), set(Stat::mean, acc(a_sum, j) / n);
    if (abs_sum) set(Stat::abs_sum, acc(a_abs_sum, j)), set(Stat::abs_mean, acc(a_abs_sum, j) / n);
    if (sumsq) set(Stat::norm, std::sqrt(acc(a_sumsq, j)));
    if (min) set(Stat::min, acc(a_min, j));
    if (max) set(Stat::max, acc(a_max, j));
    if (abs_max) set(Stat::abs_max, acc(a_abs_max, j));
    if (zero) set(Stat::frac_zero, acc(a_zero, j) / n);
    if (pos) set(Stat::frac_pos, acc(a_pos, j) / n);
    if (neg) set(Stat::frac_neg, acc(a_neg, j) / n);
    if (nans) set(Stat::frac_nan, acc(a_nan, j) / n), set(Stat::nan_count, acc(a_nan, j));
    if (infs) set(Stat::frac_inf, acc(a_inf, j) / n), set(Stat::inf_count, acc(a_inf, j));
    if (var) {
      const double s1 = acc(a_s1, j), s2 = acc(a_s2, j);
      const double v = acc(a_nan, j) + acc(a_inf, j) > 0 ? nan : std::max(0.0, (s2 - s1 * s1 / n) / n);
      set(Stat::var, v);
      set(Stat::std, std::sqrt(v));
    }
  }
  return out;
}

struct Monitor::Impl {
  struct Param {
    std::string name;
    at::Tensor tensor;
    TensorId grad_id = 0;
    TensorId weight_id = 0;
  };
  // An action to carry out once observe() has returned: the engine must not
  // be re-entered (restore_state) from its own callbacks.
  struct Queued {
    Action action;
    std::string rule;
    std::string labels;
    std::int64_t step = 0;
    double value = 0;
    std::string explanation;  // only for pause_and_snapshot
  };

  Engine& engine;
  ::torch::nn::Module& model;
  ::torch::optim::Optimizer& optimizer;
  MonitorOptions options;

  std::vector<Param> params;

  // An activation series and what activation() needs to hand over its
  // stats itself: the derived series the engine would fill from the tensor
  // (`activation_frac_zero{layer="relu1"}`, `activation_frac_dead_units(1){...}`).
  struct ParamSeries {
    ParamStat stat = ParamStat::frac_outside;
    std::size_t nargs = 0;
    double args[max_param_stat_args] = {};
    SeriesId series = 0;
  };
  struct ActivationSeries {
    TensorId id = 0;
    StatMask used = 0;  // Engine::tensor_stats_used, fixed once interned
    SeriesId derived[stat_count] = {};
    std::vector<ParamSeries> params;
    bool forward = false;  // its stats may be taken in activation()
  };
  std::map<std::string, ActivationSeries, std::less<>> activation_series;  // node addresses are stable
  // One activation() call of this step: its stats taken at the call
  // (`computed`: stat bits in `stats`, plus param_stats_bit if its
  // parameterised stats are in param_values from `params_at`), and/or the
  // tensor itself, kept whenever some used stat was not taken.
  struct PendingActivation {
    const ActivationSeries* series = nullptr;
    at::Tensor tensor;
    StatMask computed = 0;
    TensorStats stats;
    std::size_t params_at = 0;
  };
  std::vector<PendingActivation> activations;
  std::vector<double> param_values;
  // The step the next after_backward is expected at (the previous one's
  // plus 1): what activation() asks tensor_stats_due about.
  std::optional<std::int64_t> next_step;
  std::map<std::string, SeriesId, std::less<>> scalar_ids;
  std::vector<Sample> host_samples;
  std::map<std::string, double, std::less<>> latest;  // last value of each host scalar, for "best"
  std::map<std::string, std::int64_t> host;
  SeriesId loss_id = 0, lr_id = 0, step_time_id = 0;
  std::optional<std::chrono::steady_clock::time_point> last_time;

  // Spot (docs/spot.md): the run clock, the preemption notice, the cost.
  SeriesId run_time_id = 0, preempted_id = 0, cost_id = 0;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  double run_time_base = 0;  // seconds saved in the checkpoint resumed from
  bool has_cost = false;
  double dollars_per_second = 0;
  mutable bool preemption_seen = false;  // sticky: the notice does not go away
  std::vector<std::pair<int, struct sigaction>> previous_handlers;
  // The RNG state when the previous after_step returned (the start of the
  // next step), for checkpoints written before a step's update.
  at::Tensor step_rng;
  // Only an evaluation that both checkpoints and stops uses step_rng: the
  // copy (a lock and a 5 KB tensor per step) is skipped for rule sets that
  // cannot do both.
  bool keep_step_rng = false;
  // Steps up to this one were observed by the engine state restored by
  // resume(): a repeated after_backward must not observe them again.
  std::int64_t observed_through = std::numeric_limits<std::int64_t>::min();

  std::vector<Queued> queue;
  std::vector<std::int64_t> alarms;  // steps of alarm firings, ascending
  std::vector<CheckpointInfo> checkpoints;  // ascending by step
  bool checkpoint_due = false;

  bool uses_pause = false;
  std::deque<Observation> window;
  std::function<void(const Observation&)> user_recorder;

  // Per-step scratch, reused so a step allocates nothing after warm-up.
  std::vector<Sample> samples;
  std::vector<TensorSample> tensors;
  std::vector<at::Tensor> keep;
  // The device path: tensors whose stats batched_stats() computes, and the
  // stats (TensorSample::stats points into it; filled before any pointer is taken).
  struct DeviceItem {
    TensorId id = 0;
    at::Tensor tensor;
    StatMask due = 0;
  };
  std::vector<DeviceItem> device_items;
  std::vector<at::Tensor> device_batch;
  std::vector<TensorStats> device_results;
  MonitorStats counters;
  std::size_t unwatched_params = 0;

  Impl(Engine& e, ::torch::nn::Module& m, ::torch::optim::Optimizer& o, MonitorOptions opts)
      : engine(e), model(m), optimizer(o), options(std::move(opts)) {
    if (!options.log) options.log = [](std::string_view msg) { std::cerr << msg << '\n'; };
    for (const auto& item : model.named_parameters(/*recurse=*/true)) {
      Param p;
      p.name = item.key();
      p.tensor = item.value();
      const Labels labels{{"layer", p.name}};
      const auto grad_id = engine.tensor(format_series_key("grad", labels));
      const auto weight_id = engine.tensor(format_series_key("weight", labels));
      // Refused past EngineOptions::max_label_sets (counted in
      // EngineStats::label_limit_drops): that parameter is not watched.
      if (!grad_id || !weight_id) {
        ++unwatched_params;
        continue;
      }
      p.grad_id = *grad_id;
      p.weight_id = *weight_id;
      params.push_back(std::move(p));
    }
    if (unwatched_params != 0)
      options.log(fmt::format("vigil: {} parameter tensors are not watched: past the label-set limit "
                              "(EngineOptions::max_label_sets)",
                              unwatched_params));
    loss_id = *engine.series("loss");
    lr_id = *engine.series("lr");
    step_time_id = *engine.series("step_time");
    run_time_id = *engine.series("run_time");
    preempted_id = *engine.series("preempted");
    cost_id = *engine.series("cost");
    bool reads_preempted = false;
    bool checkpoints = false, stops = false;
    for (const RuleInfo& rule : engine.program().rules()) {
      for (const Action& a : rule.actions)
        if (a.name == "pause_and_snapshot") uses_pause = true;
      auto scan = [&](const std::vector<Action>& actions) {
        for (const Action& a : actions) {
          checkpoints |= a.name == "checkpoint";
          stops |= a.name == "stop" || a.name == "pause_and_snapshot";
        }
      };
      scan(rule.actions);
      for (const auto& e : rule.escalations) scan(e.actions);
      if (std::binary_search(rule.reads.begin(), rule.reads.end(), std::string("preempted")))
        reads_preempted = true;
    }
    // `param price_per_hour` (and `param processes`) make the cost series.
    const auto& params = engine.program().params();
    if (auto it = params.find("price_per_hour"); it != params.end() && std::holds_alternative<double>(it->second)) {
      double processes = 1;
      if (auto p = params.find("processes"); p != params.end() && std::holds_alternative<double>(p->second))
        processes = std::get<double>(p->second);
      has_cost = true;
      dollars_per_second = std::get<double>(it->second) * processes / 3600.0;
    }
    keep_step_rng = checkpoints && stops && !options.checkpoint_dir.empty();
    if (reads_preempted) install_preemption_handlers();
    step_rng = cpu_rng_state();
    bind();
    install_recorder();
  }

  ~Impl() {
    for (auto it = previous_handlers.rbegin(); it != previous_handlers.rend(); ++it)
      ::sigaction(it->first, &it->second, nullptr);
    if (!previous_handlers.empty()) --g_preemption_installs;
  }

  void install_preemption_handlers() {
    if (g_preemption_installs++ == 0) g_preempted.store(0);
    struct sigaction action {};
    action.sa_handler = on_preemption_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // a notice must not fail the host's read() or write()
    for (int sig : options.preemption_signals) {
      struct sigaction previous {};
      if (::sigaction(sig, &action, &previous) == 0) previous_handlers.emplace_back(sig, previous);
      else options.log(fmt::format("vigil: cannot watch signal {} for preemption: {}", sig, std::strerror(errno)));
    }
    if (previous_handlers.empty()) --g_preemption_installs;
  }

  double run_time() const {
    return run_time_base + std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }

  bool poll_preemption() const {
    if (!preemption_seen) {
      if (g_preempted.load(std::memory_order_relaxed) != 0 && !previous_handlers.empty())
        preemption_seen = true;
      else if (!options.preemption_file.empty() && ::access(options.preemption_file.c_str(), F_OK) == 0)
        preemption_seen = true;
    }
    return preemption_seen;
  }

  void bind() {
    for (const char* name :
         {"log", "alert", "checkpoint", "reduce_lr", "rollback", "skip_step", "stop",
          "pause_and_snapshot"}) {
      engine.on(name, [this](const Firing& f, const Action& a) {
        Queued q{a, f.rule_name(), format_series_key("", *f.labels), f.step,
                 f.value ? *f.value : std::numeric_limits<double>::quiet_NaN(), {}};
        if (a.name == "pause_and_snapshot")
          q.explanation = fmt::format("rule {}{} fired at step {}:\n{}", q.rule, q.labels, q.step,
                                      engine.explain(f));
        queue.push_back(std::move(q));
      });
    }
  }

  void install_recorder() {
    if (!uses_pause && !user_recorder) {
      engine.record({});
      return;
    }
    engine.record([this](const Observation& obs) {
      if (uses_pause) {
        window.push_back(obs);
        while (window.size() > options.snapshot_window) window.pop_front();
      }
      if (user_recorder) user_recorder(obs);
    });
  }

  // A CPU view of `t` in a dtype the core reads; the converted tensor (if any)
  // is kept alive in `keep` until observe() returns.
  TensorView view_of(const at::Tensor& t) {
    // A CPU tensor the core reads as is: a view of `t` itself, which the
    // caller keeps alive through observe (a parameter, its gradient, a kept
    // activation); no handle or conversion, so nothing is allocated.
    if (const auto d = core_dtype(t); d && t.device().is_cpu())
      return TensorView{t.data_ptr(), *d, {t.sizes().data(), t.sizes().size()},
                        {t.strides().data(), t.strides().size()}};
    at::Tensor x = t.detach();
    if (!x.device().is_cpu()) x = x.cpu();
    DType dtype = DType::float32;
    switch (x.scalar_type()) {
      case at::kFloat: dtype = DType::float32; break;
      case at::kDouble: dtype = DType::float64; break;
      case at::kHalf: dtype = DType::float16; break;
      case at::kBFloat16: dtype = DType::bfloat16; break;
      default: x = x.to(at::kFloat); break;
    }
    keep.push_back(x);
    const at::Tensor& k = keep.back();
    return TensorView{k.data_ptr(), dtype, {k.sizes().data(), k.sizes().size()},
                      {k.strides().data(), k.strides().size()}};
  }

  static std::optional<DType> core_dtype(const at::Tensor& t) {
    switch (t.scalar_type()) {
      case at::kFloat: return DType::float32;
      case at::kDouble: return DType::float64;
      case at::kHalf: return DType::float16;
      case at::kBFloat16: return DType::bfloat16;
      default: return std::nullopt;
    }
  }

  // The activation series `name`, interned as `id`: which of its stats the
  // rules read and the derived series they go to, and whether activation()
  // may take them (see MonitorOptions::activation_stats_in_forward).
  ActivationSeries describe_activation(TensorId id, std::string_view name) {
    ActivationSeries a;
    a.id = id;
    a.used = engine.tensor_stats_used(id);
    constexpr StatMask keeps_previous = stat_bit(Stat::update_norm) | stat_bit(Stat::update_ratio);
    bool ok = a.used != 0 && options.activation_stats_in_forward && !engine.gathers() &&
              options.device_stats != MonitorOptions::DeviceStats::always &&
              (a.used & keeps_previous) == 0;
    const Labels labels{{"layer", std::string(name)}};
    for (std::size_t i = 0; ok && i < stat_count; ++i) {
      const Stat st = static_cast<Stat>(i);
      if ((a.used & stat_bit(st)) == 0) continue;
      // Interned by engine.tensor() already: this finds it.
      const auto sid = engine.series(format_series_key("activation_" + std::string(stat_name(st)), labels));
      if (sid) a.derived[i] = *sid;
      else ok = false;
    }
    if (ok && (a.used & param_stats_bit) != 0) {
      // The engine derives a parameterised series for every selector of the
      // plan named `activation_<stat>(<args>)`: the names the rules read.
      std::set<std::string, std::less<>> seen;
      for (const RuleInfo& rule : engine.program().rules())
        for (const std::string& read : rule.reads) {
          ParamStatRef ref;
          if (!parse_param_stat_series(read, ref) || ref.tensor != "activation" ||
              !seen.insert(read).second)
            continue;
          if (ref.stat == ParamStat::frac_changed) ok = false;  // keeps the previous value
          const auto sid = engine.series(format_series_key(read, labels));
          if (!sid) {
            ok = false;
            continue;
          }
          ParamSeries p;
          p.stat = ref.stat;
          p.nargs = ref.nargs;
          std::copy_n(ref.args, ref.nargs, p.args);
          p.series = *sid;
          a.params.push_back(p);
        }
      if (a.params.empty()) ok = false;  // read through a name not seen here: the engine's way
    }
    a.forward = ok;
    return a;
  }

  // activation(): takes the stats due at next_step from `x` now, while it is
  // in cache, and keeps `x` only if some stat the rules read was not taken.
  void take_activation(const ActivationSeries& a, const at::Tensor& x) {
    PendingActivation& p = activations.emplace_back();
    p.series = &a;
    if (!a.forward || !next_step || !x.defined() || !x.device().is_cpu()) {
      p.tensor = x.detach();
      return;
    }
    const StatMask due =
        options.only_due_tensors ? engine.tensor_stats_due(a.id, *next_step) : ~StatMask{0};
    const StatMask emit = a.used & all_stat_bits & due;
    const bool params = (a.used & due & param_stats_bit) != 0;
    if (emit == 0 && !params) {
      // Nothing due at the expected step; kept in case the step is another.
      p.tensor = x.detach();
      return;
    }
    at::Tensor converted;
    const at::Tensor* t = &x;
    DType dtype = DType::float32;
    if (const auto d = core_dtype(x)) {
      dtype = *d;
    } else {
      converted = x.detach().to(at::kFloat);
      t = &converted;
    }
    const TensorView v{t->data_ptr(), dtype, {t->sizes().data(), t->sizes().size()},
                       {t->strides().data(), t->strides().size()}};
    p.params_at = param_values.size();
    std::optional<vigil::detail::StatsOnCallingThread> one_thread;
    if (options.stats_on_calling_thread) one_thread.emplace();
    if (!(params && fused_zero_and_dead_units(a, v, emit, p))) {
      if (emit != 0) p.stats = compute_stats(v, emit);
      if (params)
        for (const ParamSeries& ps : a.params)
          param_values.push_back(
              compute_param_stat(ps.stat, std::span<const double>(ps.args, ps.nargs), v));
    }
    p.computed = emit | (params ? param_stats_bit : 0);
    // Whatever the step turns out to be, nothing beyond `used` can be due.
    if ((a.used & ~p.computed) != 0) p.tensor = x.detach();
  }

  // dead_relu's pair (frac_zero and frac_dead_units, or either) of a
  // contiguous float32 tensor in one pass (activation_stats.hpp), equal to
  // the engine's two. False (nothing written) for anything else.
  bool fused_zero_and_dead_units(const ActivationSeries& a, const TensorView& v, StatMask emit,
                                 PendingActivation& p) {
    if ((emit & ~stat_bit(Stat::frac_zero)) != 0 || v.dtype != DType::float32 ||
        v.shape.size() < 2 || !v.contiguous())
      return false;
    for (const ParamSeries& ps : a.params)
      if (ps.stat != ParamStat::frac_dead_units || ps.nargs != 1) return false;
    const std::int64_t batch = v.shape[0];
    const std::int64_t n = v.numel();
    if (batch < 1 || n < 1 || batch >= (std::int64_t{1} << 31)) return false;
    const std::int64_t units = n / batch;
    std::int64_t zeros = 0;
    for (const ParamSeries& ps : a.params) {
      std::int64_t dead = 0;
      detail::count_zeros_and_dead_units(static_cast<const float*>(v.data), batch, units,
                                         ps.args[0], zeros, dead);
      param_values.push_back(static_cast<double>(dead) / static_cast<double>(units));
    }
    if (emit != 0) {
      std::fill(std::begin(p.stats.values), std::end(p.stats.values),
                std::numeric_limits<double>::quiet_NaN());
      p.stats.values[static_cast<std::size_t>(Stat::numel)] = static_cast<double>(n);
      p.stats.values[static_cast<std::size_t>(Stat::frac_zero)] =
          static_cast<double>(zeros) / static_cast<double>(n);
    }
    return true;
  }

  // after_backward: hands over each activation of the step, from the stats
  // taken at the call when they hold what is due at `step`, else its tensor.
  void collect_activations(std::int64_t step) {
    for (PendingActivation& p : activations) {
      const ActivationSeries& a = *p.series;
      if (p.computed != 0) {
        const StatMask due =
            options.only_due_tensors ? engine.tensor_stats_due(a.id, step) : ~StatMask{0};
        const StatMask emit = a.used & all_stat_bits & due;
        const bool params = (a.used & due & param_stats_bit) != 0;
        if ((emit & ~p.computed) == 0 && (!params || (p.computed & param_stats_bit) != 0)) {
          if (emit == 0 && !params) continue;
          ++counters.tensors_observed;
          ++counters.activations_in_forward;
          for (std::size_t i = 0; i < stat_count; ++i)
            if (emit & stat_bit(static_cast<Stat>(i))) samples.push_back({a.derived[i], p.stats.values[i]});
          if (params)
            for (std::size_t j = 0; j < a.params.size(); ++j)
              samples.push_back({a.params[j].series, param_values[p.params_at + j]});
          continue;
        }
      }
      collect(a.id, p.tensor, step);  // kept whenever a used stat was not taken
    }
  }

  // Whether `t` (of a tensor series whose used stats are `used`) goes
  // through batched_stats(): only tensors whose stats need nothing the
  // engine keeps (a previous value for update stats and frac_changed) and no
  // parameterised stat.
  bool on_device_path(const at::Tensor& t, StatMask used) const {
    constexpr StatMask engine_only =
        stat_bit(Stat::update_norm) | stat_bit(Stat::update_ratio) | param_stats_bit;
    if ((used & engine_only) != 0) return false;
    switch (options.device_stats) {
      case MonitorOptions::DeviceStats::always: return true;
      case MonitorOptions::DeviceStats::non_cpu: return !t.device().is_cpu();
      case MonitorOptions::DeviceStats::never: return false;
    }
    return false;
  }

  // Hands tensor `t` of series `id` over at `step` if the rules need it then.
  void collect(TensorId id, const at::Tensor& t, std::int64_t step) {
    const StatMask used = engine.tensor_stats_used(id);
    if (used == 0 || !t.defined()) return;
    const StatMask due = options.only_due_tensors ? engine.tensor_stats_due(id, step) : ~StatMask{0};
    if (due == 0) return;
    ++counters.tensors_observed;
    if (on_device_path(t, used)) {
      device_items.push_back({id, t, due});
      return;
    }
    tensors.push_back({id, view_of(t), due});
  }

  // The device path: one batched_stats() per device over the tensors
  // collected for it, then a TensorSample per tensor carrying its stats.
  // Every parameter-free stat is computed (a multi-process engine combines
  // them all); it is a few more kernels, not more transfers.
  void reduce_on_devices() {
    if (device_items.empty()) return;
    device_results.clear();
    device_results.reserve(device_items.size());  // pointers into it are taken below
    order.clear();
    for (std::size_t i = 0; i < device_items.size(); ++i) {
      if (!device_items[i].tensor.defined()) continue;  // reduced with an earlier device's batch
      const auto device = device_items[i].tensor.device();
      device_batch.clear();
      const std::size_t first = order.size();
      for (std::size_t j = i; j < device_items.size(); ++j) {
        const at::Tensor& t = device_items[j].tensor;
        if (!t.defined() || t.device() != device) continue;
        device_batch.push_back(t);
        order.push_back(j);
      }
      std::size_t bytes = 0;
      const auto stats = batched_stats(device_batch, ~StatMask{0}, &bytes);
      device_results.insert(device_results.end(), stats.begin(), stats.end());
      for (std::size_t r = first; r < order.size(); ++r) device_items[order[r]].tensor.reset();
      ++counters.device_batches;
      counters.device_bytes += bytes;
      counters.tensors_reduced_on_device += order.size() - first;
    }
    device_batch.clear();
    for (std::size_t r = 0; r < order.size(); ++r) {
      const DeviceItem& item = device_items[order[r]];
      tensors.push_back({item.id, TensorView{}, item.due, &device_results[r]});
    }
    device_items.clear();
  }
  std::vector<std::size_t> order;  // device_results[r] belongs to device_items[order[r]]

  bool is_good(const CheckpointInfo& c) const {
    auto it = std::lower_bound(alarms.begin(), alarms.end(), c.step - options.quiet_steps);
    return it == alarms.end() || *it > c.step + options.quiet_steps;
  }

  const CheckpointInfo* last_good() const {
    for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it)
      if (is_good(*it)) return &*it;
    return nullptr;
  }

  const CheckpointInfo* best() const {
    const CheckpointInfo* b = nullptr;
    for (const auto& c : checkpoints)
      if (std::isfinite(c.metric) && (!b || c.metric < b->metric)) b = &c;
    return b;
  }

  // Monitor bookkeeping saved in every checkpoint, as text: host integers,
  // alarm steps, the checkpoint table.
  std::string metadata() const {
    std::string out;
    for (const auto& [k, v] : host) out += fmt::format("host {} {}\n", v, k);
    for (std::int64_t a : alarms) out += fmt::format("alarm {}\n", a);
    for (const auto& c : checkpoints) out += fmt::format("ckpt {} {}\n", c.step, c.metric);
    out += fmt::format("run_time {}\n", run_time());
    return out;
  }

  struct Loaded {
    std::int64_t step = 0;
    std::map<std::string, std::int64_t> host;
    std::vector<std::int64_t> alarms;
    std::vector<std::pair<std::int64_t, double>> table;
    std::string engine_state;
    double run_time = 0;
    std::int64_t observed = std::numeric_limits<std::int64_t>::min();  // engine's last step
  };

  static void parse_metadata(const std::string& text, Loaded& out) {
    std::istringstream in(text);
    std::string kind;
    while (in >> kind) {
      if (kind == "host") {
        std::int64_t v = 0;
        std::string key;
        in >> v;
        in.get();
        std::getline(in, key);
        out.host[key] = v;
      } else if (kind == "alarm") {
        std::int64_t a = 0;
        in >> a;
        out.alarms.push_back(a);
      } else if (kind == "ckpt") {
        std::int64_t s = 0;
        std::string metric;
        in >> s >> metric;
        out.table.emplace_back(s, std::strtod(metric.c_str(), nullptr));
      } else if (kind == "run_time") {
        std::string v;
        in >> v;
        out.run_time = std::strtod(v.c_str(), nullptr);
      } else if (kind == "observed") {
        in >> out.observed;
      } else {
        std::string rest;
        std::getline(in, rest);
      }
    }
  }

  // `rng`: the generator state to save (default: the current one);
  // `observed`: the engine's last observed step when it is past `step`.
  std::string serialize(std::int64_t step, const at::Tensor* rng = nullptr,
                        std::optional<std::int64_t> observed = std::nullopt) {
    ::torch::serialize::OutputArchive archive;
    ::torch::serialize::OutputArchive model_archive, optimizer_archive;
    model.save(model_archive);
    optimizer.save(optimizer_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    // libtorch's Optimizer::load restores the per-parameter state but not the
    // param groups' options (lr, betas...): saved here, group by group.
    const auto& groups = optimizer.param_groups();
    archive.write("vigil_groups", ::torch::tensor(static_cast<std::int64_t>(groups.size()), ::torch::kInt64));
    for (std::size_t i = 0; i < groups.size(); ++i) {
      ::torch::serialize::OutputArchive group_archive;
      groups[i].options().serialize(group_archive);
      archive.write(fmt::format("vigil_group_{}", i), group_archive);
    }
    archive.write("vigil_step", ::torch::tensor(step, ::torch::kInt64));
    archive.write("vigil_rng", rng ? *rng : cpu_rng_state());
    archive.write("vigil_engine", bytes_tensor(engine.save_state()));
    std::string meta = metadata();
    if (observed) meta += fmt::format("observed {}\n", *observed);
    archive.write("vigil_monitor", bytes_tensor(meta));
    std::string bytes;
    archive.save_to([&bytes](const void* data, std::size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
    return bytes;
  }

  // Loads `path` and applies model, optimizer and RNG state; returns the rest.
  // The whole file is read and parsed before anything is applied.
  bool load(const std::string& path, Loaded& out, std::string& error) {
    try {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        error = fmt::format("cannot open checkpoint {}", path);
        return false;
      }
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ::torch::serialize::InputArchive archive;
      archive.load_from(bytes.data(), bytes.size());
      ::torch::serialize::InputArchive model_archive, optimizer_archive;
      at::Tensor step, rng, engine_state, meta;
      archive.read("model", model_archive);
      archive.read("optimizer", optimizer_archive);
      archive.read("vigil_step", step);
      archive.read("vigil_rng", rng);
      archive.read("vigil_engine", engine_state);
      archive.read("vigil_monitor", meta);
      at::Tensor group_count;
      archive.read("vigil_groups", group_count);
      auto& groups = optimizer.param_groups();
      if (group_count.item<std::int64_t>() != static_cast<std::int64_t>(groups.size())) {
        error = fmt::format("cannot load checkpoint {}: {} param groups, the optimizer has {}", path,
                            group_count.item<std::int64_t>(), groups.size());
        return false;
      }
      std::vector<::torch::serialize::InputArchive> group_archives(groups.size());
      for (std::size_t i = 0; i < groups.size(); ++i)
        archive.read(fmt::format("vigil_group_{}", i), group_archives[i]);
      model.load(model_archive);
      // State of parameters the checkpoint has none for (no step taken yet)
      // must go too, or the restored optimizer would differ from the saved one.
      optimizer.state().clear();
      optimizer.load(optimizer_archive);
      for (std::size_t i = 0; i < groups.size(); ++i) groups[i].options().serialize(group_archives[i]);
      {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(rng);
      }
      out.step = step.item<std::int64_t>();
      out.engine_state = tensor_bytes(engine_state);
      parse_metadata(tensor_bytes(meta), out);
      return true;
    } catch (const std::exception& e) {
      // c10::Error messages carry a C++ backtrace; the first line is the message.
      std::string what = e.what();
      what = what.substr(0, what.find('\n'));
      error = fmt::format("cannot load checkpoint {}: {}", path, what);
      return false;
    }
  }

  std::string checkpoint(std::int64_t step, std::string& error, const at::Tensor* rng = nullptr,
                         std::optional<std::int64_t> observed = std::nullopt) {
    if (options.checkpoint_dir.empty()) {
      error = "checkpoint: no checkpoint_dir configured";
      return {};
    }
    std::error_code ec;
    fs::create_directories(options.checkpoint_dir, ec);
    const fs::path path = fs::path(options.checkpoint_dir) / checkpoint_name(step);
    auto it = latest.find(options.best_series);
    const double metric =
        it == latest.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
    // The table inside the file includes the file itself.
    std::erase_if(checkpoints, [&](const CheckpointInfo& c) { return c.step >= step; });
    checkpoints.push_back({step, path.string(), metric});
    if (!write_atomically(path, serialize(step, rng, observed), error)) {
      checkpoints.pop_back();
      return {};
    }
    prune();
    return path.string();
  }

  void prune() {
    const std::size_t keep_last = static_cast<std::size_t>(std::max(options.keep_last, 1));
    if (checkpoints.size() <= keep_last) return;
    std::set<std::int64_t> kept;
    for (std::size_t i = checkpoints.size() - keep_last; i < checkpoints.size(); ++i)
      kept.insert(checkpoints[i].step);
    if (const auto* g = last_good()) kept.insert(g->step);
    if (const auto* b = best()) kept.insert(b->step);
    std::vector<CheckpointInfo> rest;
    for (auto& c : checkpoints) {
      if (kept.count(c.step)) {
        rest.push_back(std::move(c));
      } else {
        std::error_code ec;
        fs::remove(c.path, ec);
      }
    }
    checkpoints = std::move(rest);
  }

  std::int64_t rollback(std::string_view to, std::int64_t step, std::string& error) {
    std::vector<const CheckpointInfo*> candidates;  // newest first
    if (to == "last_good") {
      for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it)
        if (it->step <= step && is_good(*it)) candidates.push_back(&*it);
    } else if (to == "best") {
      if (const auto* b = best()) candidates.push_back(b);
    } else {
      std::int64_t back = 0;
      auto [ptr, ec] = std::from_chars(to.data(), to.data() + to.size(), back);
      if (ec != std::errc() || ptr != to.data() + to.size() || back < 0) {
        error = fmt::format("rollback: to must be \"last_good\", \"best\" or a step count, not \"{}\"", to);
        return -1;
      }
      for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it)
        if (it->step <= step - back) candidates.push_back(&*it);
    }
    if (candidates.empty()) {
      error = fmt::format("rollback(to=\"{}\"): no checkpoint to roll back to", to);
      return -1;
    }
    // A damaged file (a disk problem) falls back to the next older candidate.
    for (const CheckpointInfo* c : candidates) {
      Loaded loaded;
      std::string why;
      if (!load(c->path, loaded, why)) {
        error = why;
        continue;
      }
      error.clear();
      host = std::move(loaded.host);
      if (options.rollback_restores_engine) {
        engine.restore_state(loaded.engine_state);
        alarms = std::move(loaded.alarms);
      }
      // Checkpoints after the target belong to the abandoned trajectory.
      const std::int64_t target = loaded.step;
      std::erase_if(checkpoints, [&](const CheckpointInfo& k) {
        if (k.step <= target) return false;
        std::error_code ec;
        fs::remove(k.path, ec);
        return true;
      });
      return target;
    }
    return -1;
  }

  std::int64_t resume(const std::string& path, std::string& error) {
    Loaded loaded;
    if (!load(path, loaded, error)) return -1;
    try {
      engine.restore_state(loaded.engine_state);
    } catch (const std::exception& e) {
      error = fmt::format("cannot restore engine state from {}: {}", path, e.what());
      return -1;
    }
    host = std::move(loaded.host);
    alarms = std::move(loaded.alarms);
    // The run clock goes on from the saved reading (this process's own time
    // since construction is added: start-up is paid for too).
    run_time_base = loaded.run_time;
    observed_through = std::max(loaded.observed, loaded.step);
    step_rng = cpu_rng_state();
    checkpoints.clear();
    const fs::path dir = fs::path(path).parent_path();
    for (const auto& [s, metric] : loaded.table) {
      const fs::path p = dir / checkpoint_name(s);
      if (fs::exists(p)) checkpoints.push_back({s, p.string(), metric});
    }
    last_time.reset();
    next_step = loaded.step + 1;
    return loaded.step;
  }

  // pause_and_snapshot: checkpoint + recent window + explanations into
  // <dir>/snapshots/step-S/, then wait for `resume` / `stop` / SIGUSR1.
  // Returns false if training should stop.
  bool pause_and_snapshot(std::int64_t step, const std::string& explanations,
                          std::vector<std::string>& errors) {
    if (options.checkpoint_dir.empty()) {
      errors.push_back("pause_and_snapshot: no checkpoint_dir configured");
      return true;
    }
    const fs::path dir = fs::path(options.checkpoint_dir) / "snapshots" / fmt::format("step-{}", step);
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::string window_text;
    for (const Observation& o : window) window_text += to_jsonl(o) + "\n";
    std::string error;
    const std::string readme = fmt::format(
        "vigil paused training at step {}.\n"
        "create a file named `resume` here (or send SIGUSR1 to pid {}) to continue,\n"
        "or a file named `stop` to end training; after {} s it {}.\n",
        step, static_cast<long>(::getpid()), options.pause_timeout_s,
        options.continue_after_pause_timeout ? "continues" : "stops");
    if (!write_atomically(dir / checkpoint_name(step), serialize(step), error) ||
        !write_atomically(dir / "window.jsonl", window_text, error) ||
        !write_atomically(dir / "explanation.txt", explanations, error) ||
        !write_atomically(dir / "README.txt", readme, error)) {
      errors.push_back("pause_and_snapshot: " + error);
      return true;
    }
    options.log(fmt::format("vigil: paused at step {}, snapshot in {}", step, dir.string()));
    if (options.pause_timeout_s <= 0) return true;

    struct sigaction action {}, previous{};
    action.sa_handler = on_resume_signal;
    sigemptyset(&action.sa_mask);
    g_resume_signal = 0;
    ::sigaction(SIGUSR1, &action, &previous);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(options.pause_timeout_s);
    bool go_on = options.continue_after_pause_timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (g_resume_signal || fs::exists(dir / "resume")) {
        go_on = true;
        break;
      }
      if (fs::exists(dir / "stop")) {
        go_on = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::sigaction(SIGUSR1, &previous, nullptr);
    options.log(fmt::format("vigil: {} after pause at step {}", go_on ? "continuing" : "stopping", step));
    return go_on;
  }

  void run_queue(std::int64_t step, Decision& d) {
    std::set<std::pair<std::string, std::string>> done;  // (rule, action): once per evaluation
    std::string explanations;
    for (const Queued& q : queue)
      if (q.action.name == "pause_and_snapshot") explanations += q.explanation + "\n";
    bool paused = false;
    for (const Queued& q : queue) {
      const std::string& name = q.action.name;
      if (name != "log" && name != "alert" && !done.insert({q.rule, name}).second) continue;
      if (name == "log") {
        options.log(fmt::format("vigil: step {}: {}{} fired (value {})", q.step, q.rule, q.labels, q.value));
      } else if (name == "alert") {
        options.log(fmt::format("vigil: ALERT step {}: {}{}: {}", q.step, q.rule, q.labels,
                                q.action.string("message")));
      } else if (name == "checkpoint") {
        checkpoint_due = true;
      } else if (name == "skip_step") {
        d.skip_step = true;
      } else if (name == "stop") {
        d.stop = true;
        d.stop_reason = q.action.string("reason");
        if (d.stop_reason.empty()) d.stop_reason = q.rule;
      } else if (name == "reduce_lr") {
        const double lr = reduce_lr(optimizer, q.action.number("factor", 0.1), q.action.number("min_lr", 0));
        d.lr_changed = true;
        options.log(fmt::format("vigil: step {}: {} -> reduce_lr, lr now {}", step, q.rule, lr));
      } else if (name == "rollback") {
        if (d.rolled_back) continue;
        std::string error;
        const std::string to = q.action.string("to", "last_good");
        const std::int64_t target = rollback(to, step, error);
        if (target < 0) {
          d.errors.push_back(error);
          options.log("vigil: " + error);
          continue;
        }
        d.rolled_back = true;
        d.restored_step = target;
        d.skip_step = true;  // the gradients belong to the abandoned state
        options.log(fmt::format("vigil: step {}: {} -> rollback to checkpoint of step {}", step, q.rule, target));
      } else if (name == "pause_and_snapshot") {
        if (paused) continue;
        paused = true;
        if (!pause_and_snapshot(step, explanations, d.errors)) {
          d.stop = true;
          d.stop_reason = "stopped after pause_and_snapshot";
        }
      }
    }
    queue.clear();
  }
};

Monitor::Monitor(Engine& engine, ::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
                 MonitorOptions options)
    : impl_(std::make_unique<Impl>(engine, model, optimizer, std::move(options))) {}

Monitor::~Monitor() {
  // The engine outlives the Monitor: leave it no callback into freed memory.
  impl_->engine.record({});
  for (const char* name : {"log", "alert", "checkpoint", "reduce_lr", "rollback", "skip_step",
                           "stop", "pause_and_snapshot"})
    impl_->engine.on(name, [](const Firing&, const Action&) {});
}

const at::Tensor& Monitor::activation(std::string_view name, const at::Tensor& x) {
  Impl& m = *impl_;
  auto it = m.activation_series.find(name);
  if (it == m.activation_series.end()) {
    const auto id = m.engine.tensor(format_series_key("activation", {{"layer", std::string(name)}}));
    if (!id) return x;
    it = m.activation_series.emplace(std::string(name), m.describe_activation(*id, name)).first;
  }
  if (it->second.used != 0) m.take_activation(it->second, x);
  return x;
}

void Monitor::scalar(std::string_view key, double value) {
  Impl& m = *impl_;
  auto it = m.scalar_ids.find(key);
  if (it == m.scalar_ids.end()) {
    const auto id = m.engine.series(key);
    if (!id) return;
    it = m.scalar_ids.emplace(std::string(key), *id).first;
  }
  m.host_samples.push_back({it->second, value});
  m.latest.insert_or_assign(std::string(key), value);
}

std::map<std::string, std::int64_t>& Monitor::host_state() { return impl_->host; }

Decision Monitor::after_backward(std::int64_t step, double loss) {
  Impl& m = *impl_;
  Decision d;
  const auto now = std::chrono::steady_clock::now();
  m.samples.clear();
  m.tensors.clear();
  m.keep.clear();
  m.next_step = step + 1;
  if (step <= m.observed_through) {
    // Resumed from a checkpoint written before this step's update: the
    // engine has seen this step, and its firings were handled then.
    m.host_samples.clear();
    m.activations.clear();
    m.param_values.clear();
    m.last_time = now;
    return d;
  }
  if (m.options.reduce_loss) loss = m.options.reduce_loss(loss);
  m.samples.push_back({m.loss_id, loss});
  m.latest.insert_or_assign("loss", loss);
  m.samples.push_back({m.lr_id, learning_rate(m.optimizer)});
  if (m.last_time)
    m.samples.push_back({m.step_time_id, std::chrono::duration<double>(now - *m.last_time).count()});
  m.last_time = now;
  const double run_time = m.run_time();
  m.samples.push_back({m.run_time_id, run_time});
  m.samples.push_back({m.preempted_id, m.poll_preemption() ? 1.0 : 0.0});
  if (m.has_cost) m.samples.push_back({m.cost_id, run_time * m.dollars_per_second});
  m.samples.insert(m.samples.end(), m.host_samples.begin(), m.host_samples.end());
  m.host_samples.clear();

  // keep must not reallocate while views point into its tensors' metadata:
  // views hold pointers into TensorImpl (stable), not into the handles, so
  // reallocation is harmless; reserve anyway to stay allocation-free.
  m.keep.reserve(2 * m.params.size() + m.activations.size());
  for (const auto& p : m.params) {
    if (m.options.watch_grads) m.collect(p.grad_id, p.tensor.grad(), step);
    if (m.options.watch_weights) m.collect(p.weight_id, p.tensor, step);
  }
  m.collect_activations(step);
  m.reduce_on_devices();

  // The run clock is the observations' time: `every 30m` is 30 minutes of
  // training, and goes on across resumes with the engine state.
  ObserveOptions observe_options;
  observe_options.time = run_time;
  // The engine computes the tensors' stats inside observe, on this thread.
  std::optional<vigil::detail::StatsOnCallingThread> one_thread;
  if (m.options.stats_on_calling_thread) one_thread.emplace();
  const auto firings = m.engine.observe(step, m.samples, m.tensors, observe_options);
  one_thread.reset();
  for (const Firing& f : firings) {
    d.firings.push_back({f.rule_name(), f.step, format_series_key("", *f.labels),
                         f.value ? *f.value : std::numeric_limits<double>::quiet_NaN()});
    if (is_alarm(f) && (m.alarms.empty() || m.alarms.back() != step)) m.alarms.push_back(step);
  }
  // A step where some rule is pending or firing is not quiet either: no
  // checkpoint near it counts as "last_good".
  if (m.engine.pending() && (m.alarms.empty() || m.alarms.back() != step)) m.alarms.push_back(step);
  m.activations.clear();
  m.param_values.clear();
  m.keep.clear();
  m.tensors.clear();
  m.run_queue(step, d);
  if (d.stop && m.checkpoint_due && !d.rolled_back) {
    // The host may leave its loop now without after_step: write the
    // checkpoint here, as the state before this step's update (named for the
    // previous step, so a resumed host redoes this one).
    m.checkpoint_due = false;
    std::string error;
    if (m.checkpoint(step - 1, error, &m.step_rng, step).empty()) {
      d.errors.push_back(error);
      m.options.log("vigil: " + error);
    }
  }
  return d;
}

Decision Monitor::after_step(std::int64_t step) {
  Impl& m = *impl_;
  Decision d;
  const bool periodic = m.options.checkpoint_every > 0 && step % m.options.checkpoint_every == 0;
  if (m.checkpoint_due || periodic) {
    m.checkpoint_due = false;
    std::string error;
    if (m.checkpoint(step, error).empty()) {
      d.errors.push_back(error);
      m.options.log("vigil: " + error);
    }
  }
  if (m.keep_step_rng) m.step_rng = cpu_rng_state();
  return d;
}

std::string Monitor::checkpoint(std::int64_t step, std::string* error) {
  std::string e;
  std::string path = impl_->checkpoint(step, e);
  if (error) *error = e;
  return path;
}

std::int64_t Monitor::rollback(std::string_view to, std::int64_t step, std::string* error) {
  std::string e;
  const std::int64_t s = impl_->rollback(to, step, e);
  if (error) *error = e;
  return s;
}

std::int64_t Monitor::resume(const std::string& path, std::string* error) {
  std::string e;
  const std::int64_t s = impl_->resume(path, e);
  if (error) *error = e;
  return s;
}

std::string Monitor::latest_checkpoint(const std::string& dir) {
  std::int64_t best_step = -1;
  std::string best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::int64_t s = 0;
    if (parse_checkpoint_name(entry.path().filename().string(), s) && s > best_step) {
      best_step = s;
      best = entry.path().string();
    }
  }
  return best;
}

const MonitorStats& Monitor::stats() const { return impl_->counters; }

double Monitor::run_time() const { return impl_->run_time(); }
bool Monitor::preempted() const { return impl_->poll_preemption(); }

const std::vector<CheckpointInfo>& Monitor::checkpoints() const { return impl_->checkpoints; }
const CheckpointInfo* Monitor::last_good() const { return impl_->last_good(); }

void Monitor::record(std::function<void(const Observation&)> recorder) {
  impl_->user_recorder = std::move(recorder);
  impl_->install_recorder();
}

}  // namespace vigil::torch
