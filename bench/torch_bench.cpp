// libtorch adapter benchmarks (docs/performance.md, "Tensor statistics and
// the libtorch adapter"): the Monitor's overhead per training step of the
// example trainer, of a 5.3 M CNN and of a 6.9 M transformer (issue 14 goal 5,
// each paired with the same model unwatched), and Vigil's fused stats of a 64 MiB float tensor against
// Eigen's squaredNorm alone and the libtorch ops that compute the same stats.
// bench/CMakeLists.txt builds this file only when the adapter is built.
#include <benchmark/benchmark.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string_view>

#include <sys/resource.h>
#include <malloc.h>
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

// Issue 14 goal 5: the Monitor's cost per step on realistic models. Each
// benchmark trains one model twice in lockstep from the same seed on the same
// batches: one bare, one watched by a Monitor with the rules given. Each
// iteration is one step of each, in alternating order, so load drift hits
// both alike; both must end at the same loss (equal work). The overhead is
// the median over the step pairs of watched / bare step time; the Monitor's
// own cost is timed in the watched thread's CPU time.
double cpu_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double process_cpu_seconds() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }
double thread_cpu_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

long minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// What a forward pass hands to the Monitor, as a host following docs/torch.md
// writes it: `h = watch("relu1", torch::relu(...))`. The stats the Monitor
// takes in activation() (activation_stats_in_forward) are part of its cost:
// timed apart from after_backward, in this thread's CPU time.
struct Watch {
  vigil::torch::Monitor* monitor = nullptr;  // null for the bare model
  double cpu = 0;              // seconds of thread CPU in Monitor::activation
  std::int64_t elements = 0;   // activation elements handed over (read or not)
  torch::Tensor operator()(std::string_view name, torch::Tensor h) {
    if (monitor) {
      const double c0 = thread_cpu_seconds();
      monitor->activation(name, h);
      cpu += thread_cpu_seconds() - c0;
      elements += h.numel();
    }
    return h;
  }
};

// A model, its optimizer and its loss on the batch of a step (the forward
// pass handing its activations to the Watch).
struct Trainee {
  std::shared_ptr<torch::nn::Module> model;
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::function<torch::Tensor(std::int64_t step, Watch&)> loss;
};

// A training step's phases, in order. `forward` includes activation(),
// `monitor` after_backward and after_step.
enum Phase : std::size_t { forward, backward, monitor, optimizer, kPhases };
constexpr const char* phase_names[kPhases] = {"forward", "backward", "monitor", "optimizer"};

// One side of a pair, bare or watched, and what its steps took.
struct PairSide {
  Trainee trainee;
  std::unique_ptr<vigil::Engine> engine;
  std::unique_ptr<vigil::torch::Monitor> monitor;
  Watch watch;
  double first_loss = std::numeric_limits<double>::quiet_NaN(), loss = 0;
  double wall = 0, cpu = 0;  // seconds spent in steps
  double monitor_wall = 0;   // of which in after_backward and after_step
  double monitor_cpu = 0;    // the same in this thread's CPU time
  long faults = 0;           // minor page faults during steps
  double last_wall = 0, last_cpu = 0;  // of the latest step
  // The latest step's process CPU time by phase: where a watched step's
  // extra time goes (the Monitor's own work, or the model's phases slowed
  // by what the Monitor did to the caches).
  std::array<double, kPhases> last_phase{};
};

void paired_step(PairSide& r, std::int64_t step) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  const long faults0 = minor_faults();
  double mark = cpu0;
  auto phase_done = [&](Phase p) {
    const double now = process_cpu_seconds();
    r.last_phase[p] += now - mark;
    mark = now;
  };
  r.last_phase.fill(0);
  r.trainee.opt->zero_grad();
  auto loss = r.trainee.loss(step, r.watch);
  phase_done(forward);
  loss.backward();
  const double value = loss.item<double>();
  phase_done(backward);
  bool skip = false;
  auto m0 = std::chrono::steady_clock::now();
  double c0 = thread_cpu_seconds();
  if (r.monitor) skip = r.monitor->after_backward(step, value).skip_step;
  r.monitor_wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  r.monitor_cpu += thread_cpu_seconds() - c0;
  phase_done(monitor);
  if (!skip) r.trainee.opt->step();
  phase_done(optimizer);
  m0 = std::chrono::steady_clock::now();
  c0 = thread_cpu_seconds();
  if (r.monitor) r.monitor->after_step(step);
  r.monitor_wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  r.monitor_cpu += thread_cpu_seconds() - c0;
  phase_done(monitor);
  r.faults += minor_faults() - faults0;
  if (std::isnan(r.first_loss)) r.first_loss = value;
  r.loss = value;
  r.last_cpu = process_cpu_seconds() - cpu0;
  r.last_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  r.cpu += r.last_cpu;
  r.wall += r.last_wall;
}

// The median of `v` and its 95% bootstrap interval (2000 resamples of the
// pairs, a fixed seed so a run's numbers are reproducible from its ratios):
// what tells an overhead under 2% from noise. Pairs close in time share the
// load, so this interval is a little narrower than the truth.
struct MedianInterval {
  double median = 0, lo = 0, hi = 0;
};
MedianInterval median_interval(const std::vector<double>& v) {
  MedianInterval out;
  out.median = median(v);
  if (v.size() < 2) {
    out.lo = out.hi = out.median;
    return out;
  }
  std::mt19937_64 rng(14);
  std::uniform_int_distribution<std::size_t> pick(0, v.size() - 1);
  std::vector<double> medians, sample(v.size());
  constexpr int kResamples = 2000;
  medians.reserve(kResamples);
  for (int i = 0; i < kResamples; ++i) {
    for (double& x : sample) x = v[pick(rng)];
    medians.push_back(median(sample));
  }
  std::sort(medians.begin(), medians.end());
  out.lo = medians[kResamples / 40];
  out.hi = medians[kResamples - 1 - kResamples / 40];
  return out;
}

// `make` is called after torch::manual_seed(1) for each side, so both start
// from the same weights.
using Tweak = std::function<void(vigil::torch::MonitorOptions&)>;
void make_side(PairSide& r, const std::function<Trainee()>& make, const vigil::Program* rules,
               const std::string& dir, bool only_due, const Tweak& tweak) {
  torch::manual_seed(1);
  r.trainee = make();
  if (!rules) return;
  r.engine = std::make_unique<vigil::Engine>(*rules);
  vigil::torch::MonitorOptions o;
  o.checkpoint_dir = dir;
  o.only_due_tensors = only_due;
  if (tweak) tweak(o);
  r.monitor = std::make_unique<vigil::torch::Monitor>(*r.engine, *r.trainee.model, *r.trainee.opt, o);
  r.watch.monitor = r.monitor.get();
}

void run_pair(benchmark::State& state, const vigil::CompileResult& rules, bool only_due,
              const std::function<Trainee()>& make, const Tweak& tweak = {}) {
  if (!vigil::bench::expect(state, rules.ok(), rules.format_diagnostics())) return;
  // glibc gives freed tensor memory back to the kernel (its dynamic mmap and
  // trim thresholds) and faults it in again: ~1,800 page faults per
  // transformer step on either side, which move single steps by +-10% and
  // hide a 2% effect in the pairs' ratios (the Monitor does not cause them:
  // the watched side faults no more than the bare one). Keeping the heap, as
  // a long training process ends up doing, makes the pairs comparable.
  static const bool heap_kept = [] {
    return ::mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ::mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  }();
  (void)heap_kept;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("vigil-pair-bench-" + std::to_string(::getpid()))).string();
  PairSide plain, watched;
  make_side(plain, make, nullptr, dir, only_due, tweak);
  make_side(watched, make, &*rules.program, dir, only_due, tweak);
  std::int64_t params = 0;
  for (const auto& p : plain.trainee.model->parameters()) params += p.numel();
  std::int64_t step = 0;
  // Per step pair: the watched step's time over the bare one's. Their median
  // is robust to the bursts of a loaded machine, which a ratio of sums is not.
  std::vector<double> wall_ratio, cpu_ratio;
  // Per step pair and phase: the watched phase's CPU time minus the bare
  // one's, over the bare step's CPU time.
  std::array<std::vector<double>, kPhases> phase_delta;
  std::vector<std::vector<double>> pair_log;
  for (auto _ : state) {
    ++step;
    if (step % 2) {
      paired_step(plain, step);
      paired_step(watched, step);
    } else {
      paired_step(watched, step);
      paired_step(plain, step);
    }
    wall_ratio.push_back(watched.last_wall / plain.last_wall);
    cpu_ratio.push_back(watched.last_cpu / plain.last_cpu);
    for (std::size_t p = 0; p < kPhases; ++p)
      phase_delta[p].push_back((watched.last_phase[p] - plain.last_phase[p]) / plain.last_cpu);
    auto& log = pair_log.emplace_back();
    log = {plain.last_wall, watched.last_wall, plain.last_cpu, watched.last_cpu};
    log.insert(log.end(), plain.last_phase.begin(), plain.last_phase.end());
    log.insert(log.end(), watched.last_phase.begin(), watched.last_phase.end());
  }
  if (const char* dump = std::getenv("VIGIL_PAIR_DUMP")) {
    // One line per step pair, for a look at the distribution behind the
    // medians: step, which side went first, bare and watched wall and CPU.
    if (std::FILE* f = std::fopen(dump, "a")) {
      std::fprintf(f, "# pairs of %zu steps\n", pair_log.size());
      for (std::size_t i = 0; i < pair_log.size(); ++i) {
        const auto& r = pair_log[i];
        std::fprintf(f, "%zu %d %.6f %.6f %.6f %.6f", i + 1, (i + 1) % 2 ? 0 : 1, r[0], r[1], r[2], r[3]);
        for (std::size_t k = 4; k < r.size(); ++k) std::fprintf(f, " %.6f", r[k]);
        std::fprintf(f, "\n");
      }
      std::fclose(f);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!vigil::bench::expect(state, plain.loss == watched.loss,
                            "loss with the Monitor " + std::to_string(watched.loss) +
                                " vs without " + std::to_string(plain.loss)))
    return;
  const double n = static_cast<double>(step);
  state.counters["params"] = static_cast<double>(params);
  state.counters["loss_first"] = plain.first_loss;
  state.counters["loss_last"] = plain.loss;
  state.counters["bare_ms"] = 1e3 * plain.wall / n;
  state.counters["monitor_ms"] = 1e3 * watched.wall / n;
  const MedianInterval wall = median_interval(wall_ratio), cpu = median_interval(cpu_ratio);
  state.counters["overhead_%"] = 100 * (wall.median - 1);
  state.counters["overhead_lo_%"] = 100 * (wall.lo - 1);
  state.counters["overhead_hi_%"] = 100 * (wall.hi - 1);
  state.counters["cpu_overhead_%"] = 100 * (cpu.median - 1);
  state.counters["cpu_overhead_lo_%"] = 100 * (cpu.lo - 1);
  state.counters["cpu_overhead_hi_%"] = 100 * (cpu.hi - 1);
  state.counters["pairs"] = n;
  // Where the CPU overhead goes: the median per phase (they need not add up
  // to the median of the whole).
  for (std::size_t p = 0; p < kPhases; ++p)
    state.counters[std::string("d_") + phase_names[p] + "_cpu_%"] = 100 * median(phase_delta[p]);
  state.counters["sum_overhead_%"] = 100 * (watched.wall - plain.wall) / plain.wall;
  state.counters["in_monitor_ms"] = 1e3 * watched.monitor_wall / n;
  state.counters["in_monitor_%"] = 100 * watched.monitor_wall / plain.wall;
  state.counters["in_monitor_cpu_%"] = 100 * watched.monitor_cpu / plain.cpu;
  state.counters["in_activation_cpu_%"] = 100 * watched.watch.cpu / plain.cpu;
  state.counters["act_elems_handed/step"] = static_cast<double>(watched.watch.elements) / n;
  state.counters["faults_bare"] = static_cast<double>(plain.faults) / n;
  state.counters["faults_watched"] = static_cast<double>(watched.faults) / n;
  state.counters["tensors/step"] =
      static_cast<double>(watched.monitor->stats().tensors_observed) / n;
}

// Rules that sample the tensors every 10 steps: with only_due_tensors the
// Monitor collects them on one step in ten; without, every step.
constexpr const char* kSampledRules =
    "rule dead: when activation.frac_dead_units(1) > 0.5 every 10 steps do alert(\"dead ReLUs\")\n"
    "rule vanishing: when grad_abs_mean < 1e-7 every 10 steps do alert(\"vanishing gradient\")\n"
    "rule exploding: when grad_norm > 1e4 every 10 steps do alert(\"exploding gradient\")\n";
const vigil::CompileResult& recommended_rules() {
  static const auto rules = vigil::compile_file(VIGIL_SOURCE_DIR "/examples/recommended.rules");
  return rules;
}
const vigil::CompileResult& sampled_rules() {
  static const auto rules = vigil::compile_string(kSampledRules, "sampled.rules");
  return rules;
}
// The Monitor with no tensor rule (a NaN guard on the loss): its fixed cost
// per step and the noise floor of the pairing, against which the other rows
// are read.
const vigil::CompileResult& loss_rule_only() {
  static const auto rules = vigil::compile_string("use std.terminate_on_nan()\n", "loss.rules");
  return rules;
}

// The recommended rules with the stats pool allowed (MonitorOptions::
// stats_on_calling_thread = false): by default the Monitor computes its
// stats on the calling thread; this row splits tensors >= 4 MiB over the
// cores (StatsThreading), as the Monitor did before.
void run_pair_stats_pool(benchmark::State& state, const std::function<Trainee()>& make) {
  run_pair(state, recommended_rules(), true, make,
           [](vigil::torch::MonitorOptions& o) { o.stats_on_calling_thread = false; });
}

// The worst case: a CNN of 5.3 M parameters (three conv+ReLU+pool blocks,
// 2048-2048-512-10 fully connected; CIFAR-sized 32x32x3 inputs, batch 32, SGD
// with momentum) on four fixed batches of random images and labels, cycled.
// 4.2 M of its parameters are fc1, used once per sample: a step does ~6 FLOPs
// per parameter per sample, little against reading every gradient once.
// examples/recommended.rules reads all 12 gradients (norm, abs_mean) and the
// five ReLU outputs (frac_dead_units, frac_zero).
struct Cnn : torch::nn::Module {
  Cnn() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    conv3 = register_module("conv3", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 128, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(128 * 4 * 4, 2048));
    fc2 = register_module("fc2", torch::nn::Linear(2048, 512));
    fc3 = register_module("fc3", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x, Watch& watch) {
    x = torch::max_pool2d(watch("relu1", torch::relu(conv1->forward(x))), 2);
    x = torch::max_pool2d(watch("relu2", torch::relu(conv2->forward(x))), 2);
    x = torch::max_pool2d(watch("relu3", torch::relu(conv3->forward(x))), 2);
    x = watch("relu4", torch::relu(fc1->forward(x.flatten(1))));
    x = watch("relu5", torch::relu(fc2->forward(x)));
    return fc3->forward(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

Trainee make_cnn() {
  struct Batches {
    std::vector<torch::Tensor> xs, ys;
  };
  // A generator of their own: the global one is left as manual_seed(1) set
  // it, for the model's initial weights.
  static const Batches batches = [] {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
    Batches b;
    for (int i = 0; i < 4; ++i) {
      b.xs.push_back(torch::randn({32, 3, 32, 32}, gen));
      b.ys.push_back(torch::randint(0, 10, {32}, gen, torch::kLong));
    }
    return b;
  }();
  auto model = std::make_shared<Cnn>();
  Trainee t;
  t.model = model;
  t.opt = std::make_unique<torch::optim::SGD>(model->parameters(),
                                              torch::optim::SGDOptions(0.01).momentum(0.9));
  t.loss = [model](std::int64_t step, Watch& watch) {
    return torch::nn::functional::cross_entropy(model->forward(batches.xs[step % 4], watch),
                                                batches.ys[step % 4]);
  };
  return t;
}

void BM_Cnn5M_RecommendedRules(benchmark::State& s) { run_pair(s, recommended_rules(), true, make_cnn); }
void BM_Cnn5M_Every10Steps_OnlyDue(benchmark::State& s) { run_pair(s, sampled_rules(), true, make_cnn); }
void BM_Cnn5M_Every10Steps_EveryStep(benchmark::State& s) { run_pair(s, sampled_rules(), false, make_cnn); }
void BM_Cnn5M_LossRuleOnly(benchmark::State& s) { run_pair(s, loss_rule_only(), true, make_cnn); }
void BM_Cnn5M_RecommendedRules_StatsPool(benchmark::State& s) { run_pair_stats_pool(s, make_cnn); }
BENCHMARK(BM_Cnn5M_RecommendedRules)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cnn5M_RecommendedRules_StatsPool)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cnn5M_Every10Steps_OnlyDue)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cnn5M_Every10Steps_EveryStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cnn5M_LossRuleOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

// A small decoder-only transformer, the kind of model the issue calls
// realistic: each weight is used at every token of the batch, so a step does
// ~6 FLOPs per parameter per token and reading the gradients once is small
// against it. Token and position embeddings, kBlocks pre-LN blocks (causal
// multi-head self-attention, an MLP with ReLU whose output goes to the
// Monitor as "blockN.relu", as std.dead_relu selects by name), a final
// LayerNorm and an LM head; AdamW.
constexpr std::int64_t kVocab = 4096, kContext = 64, kModel = 256, kHeads = 4, kFF = 1024,
                       kBlocks = 6, kBatch = 8;

struct Block : torch::nn::Module {
  Block() {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kModel})));
    attn = register_module("attn", torch::nn::MultiheadAttention(
                                       torch::nn::MultiheadAttentionOptions(kModel, kHeads)));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kModel})));
    up = register_module("up", torch::nn::Linear(kModel, kFF));
    down = register_module("down", torch::nn::Linear(kFF, kModel));
  }
  // x: [context, batch, model] (libtorch 1.13's MultiheadAttention has no
  // batch_first); `causal` masks the future (true = not attended).
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& causal, const std::string& relu_name,
                        Watch& watch) {
    auto h = ln1->forward(x);
    x = x + std::get<0>(attn->forward(h, h, h, {}, /*need_weights=*/false, causal));
    return x + down->forward(watch(relu_name, torch::relu(up->forward(ln2->forward(x)))));
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::MultiheadAttention attn{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
};

struct Transformer : torch::nn::Module {
  Transformer() {
    tokens = register_module("tokens", torch::nn::Embedding(kVocab, kModel));
    positions = register_module("positions", torch::nn::Embedding(kContext, kModel));
    for (std::int64_t i = 0; i < kBlocks; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>()));
      relu_names.push_back("block" + std::to_string(i) + ".relu");
    }
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kModel})));
    head = register_module("head", torch::nn::Linear(kModel, kVocab));
    causal = torch::ones({kContext, kContext}, torch::kBool).triu(1);
    position_ids = torch::arange(kContext, torch::kLong);
  }
  // ids: [batch, context] -> logits [batch * context, vocab]
  torch::Tensor forward(const torch::Tensor& ids, Watch& watch) {
    auto x = (tokens->forward(ids) + positions->forward(position_ids)).transpose(0, 1);
    for (std::size_t i = 0; i < blocks.size(); ++i)
      x = blocks[i]->forward(x, causal, relu_names[i], watch);
    return head->forward(ln->forward(x).transpose(0, 1)).reshape({-1, kVocab});
  }
  torch::nn::Embedding tokens{nullptr}, positions{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
  std::vector<std::string> relu_names;
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor causal, position_ids;
};

// Next-token data with structure to learn: sequences of a fixed random Markov
// chain in which each token has 4 equally likely successors (the loss can fall
// from ln 4096 = 8.3 towards ln 4 = 1.4). 32 batches of [batch, context + 1]
// tokens, cycled; inputs are the first kContext tokens, targets the last.
std::vector<torch::Tensor> markov_batches() {
  constexpr int kSuccessors = 4, kCount = 32;
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::int64_t> token(0, kVocab - 1);
  std::uniform_int_distribution<int> pick(0, kSuccessors - 1);
  std::vector<std::array<std::int64_t, kSuccessors>> next(kVocab);
  for (auto& n : next)
    for (auto& t : n) t = token(rng);
  std::vector<torch::Tensor> out;
  for (int b = 0; b < kCount; ++b) {
    auto seq = torch::empty({kBatch, kContext + 1}, torch::kLong);
    auto a = seq.accessor<std::int64_t, 2>();
    for (std::int64_t i = 0; i < kBatch; ++i) {
      a[i][0] = token(rng);
      for (std::int64_t j = 1; j <= kContext; ++j) a[i][j] = next[a[i][j - 1]][pick(rng)];
    }
    out.push_back(seq);
  }
  return out;
}

Trainee make_transformer() {
  static const std::vector<torch::Tensor> batches = markov_batches();
  auto model = std::make_shared<Transformer>();
  Trainee t;
  t.model = model;
  t.opt = std::make_unique<torch::optim::AdamW>(model->parameters(),
                                                torch::optim::AdamWOptions(1e-3));
  t.loss = [model](std::int64_t step, Watch& watch) {
    const auto& seq = batches[step % batches.size()];
    return torch::nn::functional::cross_entropy(
        model->forward(seq.narrow(1, 0, kContext), watch),
        seq.narrow(1, 1, kContext).reshape({-1}));
  };
  return t;
}

void BM_Transformer7M_RecommendedRules(benchmark::State& s) {
  run_pair(s, recommended_rules(), true, make_transformer);
}
void BM_Transformer7M_Every10Steps_OnlyDue(benchmark::State& s) {
  run_pair(s, sampled_rules(), true, make_transformer);
}
void BM_Transformer7M_Every10Steps_EveryStep(benchmark::State& s) {
  run_pair(s, sampled_rules(), false, make_transformer);
}
void BM_Transformer7M_LossRuleOnly(benchmark::State& s) {
  run_pair(s, loss_rule_only(), true, make_transformer);
}
void BM_Transformer7M_RecommendedRules_StatsPool(benchmark::State& s) {
  run_pair_stats_pool(s, make_transformer);
}
BENCHMARK(BM_Transformer7M_RecommendedRules)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Transformer7M_RecommendedRules_StatsPool)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Transformer7M_Every10Steps_OnlyDue)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Transformer7M_Every10Steps_EveryStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Transformer7M_LossRuleOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

// Where a watched step's extra time goes, on one model without pairing
// noise: the recommended rules' gradient stats (norm and abs_mean of all 78
// gradients, 27 MB) right after backward, by step in turn: none (the
// baseline), on the calling thread, or with the stats pool splitting the
// tensors >= 4 MiB over two threads. Timed: the stats (process CPU and wall)
// and the next phases (the optimizer, the next step's backward) in this
// thread's CPU time, which would grow if the read evicted what they need.
void BM_Transformer7M_GradStatsAfterBackward(benchmark::State& state) {
  torch::manual_seed(1);
  Trainee t = make_transformer();
  Watch none;
  std::int64_t step = 0;
  const vigil::StatMask mask = vigil::stat_bit(vigil::Stat::norm) | vigil::stat_bit(vigil::Stat::abs_mean);
  const vigil::StatsThreading saved = vigil::stats_threading();
  enum Way { no_stats, calling_thread, pool, kWays };
  std::vector<double> stats_cpu[kWays], stats_wall[kWays], opt_cpu[kWays], bwd_cpu[kWays];
  int way = no_stats;  // of the previous step, for the backward after it
  for (auto _ : state) {
    t.opt->zero_grad();
    auto loss = t.loss(++step, none);
    double c0 = thread_cpu_seconds();
    loss.backward();
    bwd_cpu[way].push_back(thread_cpu_seconds() - c0);
    way = static_cast<int>(step % kWays);
    vigil::set_stats_threading({way == pool ? 2u : 1u, saved.min_bytes});
    c0 = process_cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    if (way != no_stats)
      for (const auto& p : t.model->parameters()) {
        const auto g = p.grad();
        const vigil::TensorView v{g.data_ptr(), vigil::DType::float32,
                                  {g.sizes().data(), g.sizes().size()},
                                  {g.strides().data(), g.strides().size()}};
        benchmark::DoNotOptimize(vigil::compute_stats(v, mask));
      }
    stats_cpu[way].push_back(process_cpu_seconds() - c0);
    stats_wall[way].push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
    c0 = thread_cpu_seconds();
    t.opt->step();
    opt_cpu[way].push_back(thread_cpu_seconds() - c0);
  }
  vigil::set_stats_threading(saved);
  const char* names[kWays] = {"none", "calling", "pool"};
  for (int k = 0; k < kWays; ++k) {
    const std::string n = names[k];
    state.counters["stats_cpu_ms_" + n] = 1e3 * median(stats_cpu[k]);
    state.counters["stats_wall_ms_" + n] = 1e3 * median(stats_wall[k]);
    state.counters["optimizer_ms_after_" + n] = 1e3 * median(opt_cpu[k]);
    state.counters["backward_ms_after_" + n] = 1e3 * median(bwd_cpu[k]);
  }
}
BENCHMARK(BM_Transformer7M_GradStatsAfterBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

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
