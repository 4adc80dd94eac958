// Fused tensor statistics against single-purpose baselines on the same
// 64 MiB float32 tensor, in the same run:
//   BM_FusedStats          every stat of vigil::compute_stats, one pass
//   BM_EigenSquaredNorm    Eigen's squaredNorm alone (the memory-bandwidth floor
//                          for one pass over the data)
//   BM_SeparatePasses      the same stats as one simple loop per stat (what a
//                          host computing them one by one would do)
//   BM_FracOutside         the parameterised stat frac_outside(-2, 2), its own pass
//   BM_EigenFracOutside    the same count with Eigen array expressions
//   BM_FracDeadUnits       frac_dead_units(1.0) of the tensor as [256 x 65536]
//   BM_DeadUnitsByRows     the same by hand, row by row into per-unit counters
// bytes_per_second is the tensor's size over the time per iteration.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <random>
#include <vector>

#include "vigil/tensor.hpp"

namespace {

constexpr std::int64_t numel = (64 << 20) / 4;

const std::vector<float>& data() {
  static const std::vector<float> v = [] {
    std::vector<float> out(numel);
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto& x : out) x = dist(rng);
    out[12345] = 0.0f;
    return out;
  }();
  return v;
}

void BM_FusedStats(benchmark::State& state) {
  const auto& v = data();
  const std::int64_t shape[] = {numel};
  const vigil::TensorView view{v.data(), vigil::DType::float32, shape, {}};
  for (auto _ : state) {
    auto s = vigil::compute_stats(view);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

void BM_EigenSquaredNorm(benchmark::State& state) {
  const auto& v = data();
  const Eigen::Map<const Eigen::VectorXf> m(v.data(), numel);
  for (auto _ : state) {
    float n = m.squaredNorm();
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

void BM_SeparatePasses(benchmark::State& state) {
  const auto& v = data();
  for (auto _ : state) {
    double sum = 0, abs_sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY, zeros = 0, nans = 0, infs = 0;
    for (float x : v) sum += x;
    for (float x : v) abs_sum += std::abs(x);
    for (float x : v) sq += static_cast<double>(x) * x;
    const double mean = sum / numel;
    double var = 0;
    for (float x : v) var += (x - mean) * (x - mean);
    for (float x : v) mn = std::min<double>(mn, x);
    for (float x : v) mx = std::max<double>(mx, x);
    for (float x : v) zeros += x == 0;
    for (float x : v) nans += std::isnan(x);
    for (float x : v) infs += std::isinf(x);
    benchmark::DoNotOptimize(sum + abs_sum + sq + var + mn + mx + zeros + nans + infs);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

void BM_FracOutside(benchmark::State& state) {
  const auto& v = data();
  const std::int64_t shape[] = {numel};
  const vigil::TensorView view{v.data(), vigil::DType::float32, shape, {}};
  const double bounds[] = {-2, 2};
  for (auto _ : state) {
    double f = vigil::compute_param_stat(vigil::ParamStat::frac_outside, bounds, view);
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

void BM_EigenFracOutside(benchmark::State& state) {
  const auto& v = data();
  const Eigen::Map<const Eigen::ArrayXf> a(v.data(), numel);
  for (auto _ : state) {
    double f = static_cast<double>(((a < -2.0f) || (a > 2.0f)).count()) / numel;
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

constexpr std::int64_t batch = 256, units = numel / batch;

void BM_FracDeadUnits(benchmark::State& state) {
  const auto& v = data();
  const std::int64_t shape[] = {batch, units};
  const vigil::TensorView view{v.data(), vigil::DType::float32, shape, {}};
  const double threshold[] = {1.0};
  for (auto _ : state) {
    double f = vigil::compute_param_stat(vigil::ParamStat::frac_dead_units, threshold, view);
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

void BM_DeadUnitsByRows(benchmark::State& state) {
  const auto& v = data();
  std::vector<std::int32_t> active(static_cast<std::size_t>(units));
  for (auto _ : state) {
    std::fill(active.begin(), active.end(), 0);
    for (std::int64_t b = 0; b < batch; ++b) {
      const float* row = v.data() + b * units;
      for (std::int64_t u = 0; u < units; ++u) active[static_cast<std::size_t>(u)] += row[u] > 0;
    }
    std::int64_t dead = 0;
    for (auto c : active) dead += 100.0 * c / batch < 1.0;
    double f = static_cast<double>(dead) / units;
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

BENCHMARK(BM_FusedStats)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenSquaredNorm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SeparatePasses)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FracOutside)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenFracOutside)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FracDeadUnits)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeadUnitsByRows)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
