// Fused tensor statistics against single-purpose baselines on the same
// 64 MiB float32 tensor, in the same run:
//   BM_FusedStats          every stat of vigil::compute_stats, one pass
//   BM_EigenSquaredNorm    Eigen's squaredNorm alone (the memory-bandwidth floor
//                          for one pass over the data)
//   BM_SeparatePasses      the same stats as one simple loop per stat (what a
//                          host computing them one by one would do)
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

BENCHMARK(BM_FusedStats)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenSquaredNorm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SeparatePasses)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
