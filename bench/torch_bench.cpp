// libtorch adapter benchmarks (docs/performance.md, "Tensor statistics and
// the libtorch adapter"): the Monitor's overhead per training step of the
// example trainer, and Vigil's fused stats of a 64 MiB float tensor against
// Eigen's squaredNorm alone and the libtorch ops that compute the same stats.
// bench/CMakeLists.txt builds this file only when the adapter is built.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <Eigen/Core>
#include <array>
#include <filesystem>
#include <iterator>

#include <unistd.h>

#include "bench/verify.hpp"
#include "trainer.hpp"
#include "vigil/tensor.hpp"

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
