// libtorch adapter benchmarks (docs/performance.md, "Tensor statistics and
// the libtorch adapter"): the Monitor's overhead per training step of the
// example trainer, and Vigil's fused stats of a 64 MiB float tensor against
// Eigen's squaredNorm alone and the libtorch ops that compute the same stats.
// bench/CMakeLists.txt builds this file only when the adapter is built.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <limits>

#include <sys/resource.h>
#include <unistd.h>

#include "bench/verify.hpp"
#include "trainer.hpp"
#include "vigil/engine.hpp"
#include "vigil/tensor.hpp"
#include "vigil/torch.hpp"

namespace {

constexpr std::int64_t kSteps = 400;

vigil_example::TrainConfig trainer_config(bool rules, std::int64_t checkpoint_every) {
  vigil_example::TrainConfig c;
  if (rules) {
    c.rules = VIGIL_TRAINER_RULES;
    c.work_dir = (std::filesystem::temp_directory_path() /
                  ("vigil-torch-bench-" + std::to_string(::getpid())))
                     .string();
  }
  c.steps = kSteps;
  c.checkpoint_every = checkpoint_every;
  c.nan_batch_step = -1;  // a healthy run: what the monitor costs when nothing goes wrong
  c.lr_spike_step = -1;
  return c;
}

// The same run with and without the Monitor: a healthy run's rules never
// act, so both train the same model to the same loss (equal work).
double reference_loss() {
  static const double loss = vigil_example::train(trainer_config(false, 0)).final_loss;
  return loss;
}

void run_trainer(benchmark::State& state, bool rules, std::int64_t checkpoint_every) {
  const auto config = trainer_config(rules, checkpoint_every);
  if (rules) {
    const double loss = vigil_example::train(config).final_loss;
    if (!vigil::bench::expect(state, loss == reference_loss(),
                              "final loss with the Monitor " + std::to_string(loss) +
                                  " vs without " + std::to_string(reference_loss())))
      return;
  }
  for (auto _ : state) {
    auto r = vigil_example::train(config);
    benchmark::DoNotOptimize(r.final_loss);
  }
  state.counters["per_step"] = benchmark::Counter(static_cast<double>(state.iterations() * kSteps),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// 400 steps of the example trainer (MLP 2-64-64-3, batch 128, Adam), whole run.
void BM_Trainer_NoMonitor(benchmark::State& s) { run_trainer(s, false, 0); }
void BM_Trainer_Rules(benchmark::State& s) { run_trainer(s, true, 0); }
void BM_Trainer_RulesCheckpointEvery25(benchmark::State& s) { run_trainer(s, true, 25); }
BENCHMARK(BM_Trainer_NoMonitor)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Trainer_Rules)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Trainer_RulesCheckpointEvery25)->Unit(benchmark::kMillisecond);

// Issue 14 goal 5: the Monitor's cost per step on a realistic model. A CNN
// of 5.3 M parameters (three conv+ReLU+pool blocks, 2048-2048-512-10 fully
// connected; CIFAR-sized 32x32x3 inputs, batch 32, SGD with momentum) trains
// twice in lockstep from the same seed on the same batches: one model bare,
// one watched by a Monitor with examples/recommended.rules (gradient norm
// spike over a 20-step median, vanishing gradients on every gradient's
// abs_mean, dead ReLUs on the five ReLU outputs, loss rules). Each iteration
// is one step of each, in alternating order, so load drift hits both alike;
// both must end at the same loss (equal work).
double cpu_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double process_cpu_seconds() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }
double thread_cpu_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

struct Cnn : torch::nn::Module {
  Cnn() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    conv3 = register_module("conv3", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 128, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(128 * 4 * 4, 2048));
    fc2 = register_module("fc2", torch::nn::Linear(2048, 512));
    fc3 = register_module("fc3", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x, vigil::torch::Monitor* mon) {
    auto watch = [&](const char* name, torch::Tensor h) {
      if (mon) {
        // The stats the Monitor takes here (activation_stats_in_forward)
        // are part of its cost: timed apart from after_backward.
        const double c0 = thread_cpu_seconds();
        mon->activation(name, h);
        activation_cpu += thread_cpu_seconds() - c0;
      }
      return h;
    };
    x = torch::max_pool2d(watch("relu1", torch::relu(conv1->forward(x))), 2);
    x = torch::max_pool2d(watch("relu2", torch::relu(conv2->forward(x))), 2);
    x = torch::max_pool2d(watch("relu3", torch::relu(conv3->forward(x))), 2);
    x = watch("relu4", torch::relu(fc1->forward(x.flatten(1))));
    x = watch("relu5", torch::relu(fc2->forward(x)));
    return fc3->forward(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  double activation_cpu = 0;  // seconds of thread CPU in Monitor::activation
};

struct CnnRun {
  std::shared_ptr<Cnn> model;
  std::unique_ptr<torch::optim::SGD> opt;
  std::unique_ptr<vigil::Engine> engine;
  std::unique_ptr<vigil::torch::Monitor> monitor;
  double loss = 0;
  double wall = 0, cpu = 0;  // seconds spent in steps
  double monitor_wall = 0;   // of which in after_backward and after_step
  double monitor_cpu = 0;    // the same in this thread's CPU time
  long faults = 0;           // minor page faults during steps
  double last_wall = 0, last_cpu = 0;  // of the latest step
};

long minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void cnn_step(CnnRun& r, std::int64_t step, const torch::Tensor& x, const torch::Tensor& y) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  const long faults0 = minor_faults();
  r.opt->zero_grad();
  auto loss = torch::nn::functional::cross_entropy(r.model->forward(x, r.monitor.get()), y);
  loss.backward();
  const double value = loss.item<double>();
  bool skip = false;
  auto m0 = std::chrono::steady_clock::now();
  double c0 = thread_cpu_seconds();
  if (r.monitor) skip = r.monitor->after_backward(step, value).skip_step;
  r.monitor_wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  r.monitor_cpu += thread_cpu_seconds() - c0;
  if (!skip) r.opt->step();
  m0 = std::chrono::steady_clock::now();
  c0 = thread_cpu_seconds();
  if (r.monitor) r.monitor->after_step(step);
  r.monitor_wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  r.monitor_cpu += thread_cpu_seconds() - c0;
  r.faults += minor_faults() - faults0;
  r.loss = value;
  r.last_cpu = process_cpu_seconds() - cpu0;
  r.last_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  r.cpu += r.last_cpu;
  r.wall += r.last_wall;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

CnnRun make_cnn_run(const vigil::Program* rules, const std::string& dir, bool only_due) {
  CnnRun r;
  torch::manual_seed(1);
  r.model = std::make_shared<Cnn>();
  r.opt = std::make_unique<torch::optim::SGD>(r.model->parameters(),
                                              torch::optim::SGDOptions(0.01).momentum(0.9));
  if (rules) {
    r.engine = std::make_unique<vigil::Engine>(*rules);
    vigil::torch::MonitorOptions o;
    o.checkpoint_dir = dir;
    o.only_due_tensors = only_due;
    r.monitor = std::make_unique<vigil::torch::Monitor>(*r.engine, *r.model, *r.opt, o);
  }
  return r;
}

void run_cnn(benchmark::State& state, const vigil::CompileResult& rules, bool only_due) {
  if (!vigil::bench::expect(state, rules.ok(), rules.format_diagnostics())) return;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("vigil-cnn-bench-" + std::to_string(::getpid()))).string();
  CnnRun plain = make_cnn_run(nullptr, dir, only_due);
  CnnRun watched = make_cnn_run(&*rules.program, dir, only_due);
  std::int64_t params = 0;
  for (const auto& p : plain.model->parameters()) params += p.numel();
  // Four fixed batches of random images and labels, cycled.
  torch::manual_seed(2);
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(torch::randn({32, 3, 32, 32}));
    ys.push_back(torch::randint(0, 10, {32}, torch::kLong));
  }
  std::int64_t step = 0;
  // Per step pair: the watched step's time over the bare one's. Their median
  // is robust to the bursts of a loaded machine, which a ratio of sums is not.
  std::vector<double> wall_ratio, cpu_ratio;
  for (auto _ : state) {
    ++step;
    const auto& x = xs[step % 4];
    const auto& y = ys[step % 4];
    if (step % 2) {
      cnn_step(plain, step, x, y);
      cnn_step(watched, step, x, y);
    } else {
      cnn_step(watched, step, x, y);
      cnn_step(plain, step, x, y);
    }
    wall_ratio.push_back(watched.last_wall / plain.last_wall);
    cpu_ratio.push_back(watched.last_cpu / plain.last_cpu);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!vigil::bench::expect(state, plain.loss == watched.loss,
                            "loss with the Monitor " + std::to_string(watched.loss) +
                                " vs without " + std::to_string(plain.loss)))
    return;
  const double n = static_cast<double>(step);
  state.counters["params"] = static_cast<double>(params);
  state.counters["bare_ms"] = 1e3 * plain.wall / n;
  state.counters["monitor_ms"] = 1e3 * watched.wall / n;
  state.counters["overhead_%"] = 100 * (median(wall_ratio) - 1);
  state.counters["cpu_overhead_%"] = 100 * (median(cpu_ratio) - 1);
  state.counters["sum_overhead_%"] = 100 * (watched.wall - plain.wall) / plain.wall;
  state.counters["in_monitor_ms"] = 1e3 * watched.monitor_wall / n;
  state.counters["in_monitor_%"] = 100 * watched.monitor_wall / plain.wall;
  state.counters["in_monitor_cpu_%"] = 100 * watched.monitor_cpu / plain.cpu;
  state.counters["in_activation_cpu_%"] = 100 * watched.model->activation_cpu / plain.cpu;
  state.counters["faults_bare"] = static_cast<double>(plain.faults) / n;
  state.counters["faults_watched"] = static_cast<double>(watched.faults) / n;
  state.counters["tensors/step"] =
      static_cast<double>(watched.monitor->stats().tensors_observed) / n;
}

void BM_Cnn5M_RecommendedRules(benchmark::State& s) {
  static const auto rules = vigil::compile_file(VIGIL_SOURCE_DIR "/examples/recommended.rules");
  run_cnn(s, rules, true);
}
// Rules that sample the tensors every 10 steps: with only_due_tensors the
// Monitor collects them on one step in ten; without, every step.
constexpr const char* kSampledRules =
    "rule dead: when activation.frac_dead_units(1) > 0.5 every 10 steps do alert(\"dead ReLUs\")\n"
    "rule vanishing: when grad_abs_mean < 1e-7 every 10 steps do alert(\"vanishing gradient\")\n"
    "rule exploding: when grad_norm > 1e4 every 10 steps do alert(\"exploding gradient\")\n";
void BM_Cnn5M_Every10Steps_OnlyDue(benchmark::State& s) {
  static const auto rules = vigil::compile_string(kSampledRules, "sampled.rules");
  run_cnn(s, rules, true);
}
void BM_Cnn5M_Every10Steps_EveryStep(benchmark::State& s) {
  static const auto rules = vigil::compile_string(kSampledRules, "sampled.rules");
  run_cnn(s, rules, false);
}
// The Monitor with no tensor rule (a NaN guard on the loss): its fixed cost
// per step and the noise floor of the pairing, against which the rows above
// are read.
void BM_Cnn5M_LossRuleOnly(benchmark::State& s) {
  static const auto rules = vigil::compile_string("use std.terminate_on_nan()\n", "loss.rules");
  run_cnn(s, rules, true);
}
BENCHMARK(BM_Cnn5M_RecommendedRules)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cnn5M_Every10Steps_OnlyDue)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cnn5M_Every10Steps_EveryStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cnn5M_LossRuleOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

// 64 MiB of float32, normal values.
const torch::Tensor& big() {
  static const torch::Tensor t = [] {
    torch::manual_seed(0);
    return torch::randn({16 * 1024 * 1024});
  }();
  return t;
}

void set_bytes(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * big().numel() * 4);
}

const vigil::TensorStats& fused() {
  static const vigil::TensorStats s = [] {
    const std::int64_t shape[] = {big().numel()};
    return vigil::compute_stats({big().data_ptr(), vigil::DType::float32, shape, {}});
  }();
  return s;
}

void BM_Stats64MiB_VigilFusedAll(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  const std::int64_t shape[] = {t.numel()};
  const vigil::TensorView v{t.data_ptr(), vigil::DType::float32, shape, {}};
  for (auto _ : state) benchmark::DoNotOptimize(vigil::compute_stats(v));
  set_bytes(state);
}

// Float accumulations over 16 M terms are off by about 0.1% (Vigil accumulates
// in double): for them "the same" means within 1%.
constexpr double float_rounding = 1e-2;

void BM_Stats64MiB_EigenSquaredNorm(benchmark::State& state) {
  const auto& t = big();
  Eigen::Map<const Eigen::VectorXf> m(t.data_ptr<float>(), t.numel());
  const double norm = fused()[vigil::Stat::norm];
  if (!vigil::bench::expect(state, vigil::bench::close(m.squaredNorm(), norm * norm, float_rounding),
                            "Eigen squaredNorm " + std::to_string(m.squaredNorm()) +
                                " vs fused norm^2 " + std::to_string(norm * norm)))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(m.squaredNorm());
  set_bytes(state);
}

void BM_Stats64MiB_TorchNorm(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  if (!vigil::bench::expect(state,
                            vigil::bench::close(torch::norm(t).item<float>(),
                                                fused()[vigil::Stat::norm], float_rounding),
                            "torch::norm vs fused norm"))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(torch::norm(t).item<float>());
  set_bytes(state);
}

// The libtorch ops a host would write for the stats Vigil fuses, one pass (or
// more) each, over `d` (the tensor in the accumulation dtype) and `t` (the
// original, for the counts), in the order of `torch_stat_order`.
using vigil::Stat;
constexpr Stat torch_stat_order[] = {
    Stat::norm,     Stat::sum,       Stat::abs_sum,   Stat::mean,      Stat::abs_mean,
    Stat::var,      Stat::std,       Stat::min,       Stat::max,       Stat::abs_max,
    Stat::frac_zero, Stat::frac_pos, Stat::frac_neg,  Stat::frac_nan,  Stat::frac_inf,
    Stat::nan_count, Stat::inf_count};
constexpr std::size_t torch_stat_count = std::size(torch_stat_order);

std::array<double, torch_stat_count> torch_all_stats(const torch::Tensor& d, const torch::Tensor& t) {
  auto a = d.abs();
  const double n = static_cast<double>(t.numel());
  return {
      torch::norm(d).item<double>(),         d.sum().item<double>(),
      a.sum().item<double>(),                d.mean().item<double>(),
      a.mean().item<double>(),               d.var(false).item<double>(),
      d.std(false).item<double>(),           d.min().item<double>(),
      d.max().item<double>(),                a.max().item<double>(),
      t.eq(0).sum().item<double>() / n,      t.gt(0).sum().item<double>() / n,
      t.lt(0).sum().item<double>() / n,      t.isnan().sum().item<double>() / n,
      t.isinf().sum().item<double>() / n,    t.isnan().sum().item<double>(),
      t.isinf().sum().item<double>(),
  };
}

// Checks every stat libtorch computed against the fused one.
bool same_as_fused(benchmark::State& state, const std::array<double, torch_stat_count>& got,
                   double rel) {
  for (std::size_t i = 0; i < torch_stat_count; ++i) {
    const double want = fused()[torch_stat_order[i]];
    if (!vigil::bench::expect(state, vigil::bench::close(got[i], want, rel),
                              std::string(vigil::stat_name(torch_stat_order[i])) + ": libtorch " +
                                  std::to_string(got[i]) + " vs fused " + std::to_string(want)))
      return false;
  }
  return true;
}

// Double accumulation, as Vigil does.
void BM_Stats64MiB_TorchAllStats(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  if (!same_as_fused(state, torch_all_stats(t.to(torch::kDouble), t), 1e-9)) return;
  for (auto _ : state) benchmark::DoNotOptimize(torch_all_stats(t.to(torch::kDouble), t));
  set_bytes(state);
}

// float32 accumulation (what `t.norm()` etc. do by default): cheaper, but
// loses precision on large tensors.
void BM_Stats64MiB_TorchAllStatsFloat(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  if (!same_as_fused(state, torch_all_stats(t, t), float_rounding)) return;
  for (auto _ : state) benchmark::DoNotOptimize(torch_all_stats(t, t));
  set_bytes(state);
}

BENCHMARK(BM_Stats64MiB_VigilFusedAll)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_EigenSquaredNorm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_TorchNorm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_TorchAllStats)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_TorchAllStatsFloat)->Unit(benchmark::kMillisecond);

}  // namespace

VIGIL_BENCHMARK_MAIN()
