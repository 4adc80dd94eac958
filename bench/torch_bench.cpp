// libtorch adapter benchmarks (docs/performance.md, "Tensor statistics and
// the libtorch adapter"): the Monitor's overhead per training step of the
// example trainer, and Vigil's fused stats of a 64 MiB float tensor against
// Eigen's squaredNorm alone and the libtorch ops that compute the same stats.
// bench/CMakeLists.txt builds this file only when the adapter is built.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <Eigen/Core>
#include <filesystem>

#include "trainer.hpp"
#include "vigil/tensor.hpp"

namespace {

constexpr std::int64_t kSteps = 400;

vigil_example::TrainConfig trainer_config(bool rules, std::int64_t checkpoint_every) {
  vigil_example::TrainConfig c;
  if (rules) {
    c.rules = VIGIL_TRAINER_RULES;
    c.work_dir = (std::filesystem::temp_directory_path() / "vigil-torch-bench").string();
  }
  c.steps = kSteps;
  c.checkpoint_every = checkpoint_every;
  c.nan_batch_step = -1;  // a healthy run: what the monitor costs when nothing goes wrong
  c.lr_spike_step = -1;
  return c;
}

void run_trainer(benchmark::State& state, bool rules, std::int64_t checkpoint_every) {
  const auto config = trainer_config(rules, checkpoint_every);
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

void BM_Stats64MiB_VigilFusedAll(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  const std::int64_t shape[] = {t.numel()};
  const vigil::TensorView v{t.data_ptr(), vigil::DType::float32, shape, {}};
  for (auto _ : state) benchmark::DoNotOptimize(vigil::compute_stats(v));
  set_bytes(state);
}

void BM_Stats64MiB_EigenSquaredNorm(benchmark::State& state) {
  const auto& t = big();
  Eigen::Map<const Eigen::VectorXf> m(t.data_ptr<float>(), t.numel());
  for (auto _ : state) benchmark::DoNotOptimize(m.squaredNorm());
  set_bytes(state);
}

void BM_Stats64MiB_TorchNorm(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  for (auto _ : state) benchmark::DoNotOptimize(torch::norm(t).item<float>());
  set_bytes(state);
}

// The libtorch ops a host would write for the stats Vigil fuses, one pass (or
// more) each, over `d` (the tensor in the accumulation dtype) and `t` (the
// original, for the counts).
void torch_all_stats(const torch::Tensor& d, const torch::Tensor& t) {
  auto a = d.abs();
  const double n = static_cast<double>(t.numel());
  const double stats[] = {
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
  benchmark::DoNotOptimize(stats);
}

// Double accumulation, as Vigil does.
void BM_Stats64MiB_TorchAllStats(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  for (auto _ : state) torch_all_stats(t.to(torch::kDouble), t);
  set_bytes(state);
}

// float32 accumulation (what `t.norm()` etc. do by default): cheaper, but
// loses precision on large tensors.
void BM_Stats64MiB_TorchAllStatsFloat(benchmark::State& state) {
  torch::set_num_threads(1);
  const auto& t = big();
  for (auto _ : state) torch_all_stats(t, t);
  set_bytes(state);
}

BENCHMARK(BM_Stats64MiB_VigilFusedAll)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_EigenSquaredNorm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_TorchNorm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_TorchAllStats)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stats64MiB_TorchAllStatsFloat)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
