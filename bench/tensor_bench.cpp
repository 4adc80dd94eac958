// Fused tensor statistics against single-purpose baselines on the same
// 64 MiB float32 tensor, in the same run:
//   BM_FusedStats/T        every stat of vigil::compute_stats, one pass, on T
//                          threads (vigil::set_stats_threading)
//   BM_RuleSetStats/N/T    only the stats a rule set reads (see rule_set_mask)
//   BM_EigenSquaredNorm    Eigen's squaredNorm alone (the memory-bandwidth floor
//                          for one pass over the data, one thread)
// T = 1 is measured in CPU time like Eigen; T = 2 in wall time (`/real_time`;
// the workers' CPU time is not the caller's), against Eigen's wall time in
// the same run (BM_EigenSquaredNorm/real_time).
//   BM_RuleSetStatsInCache/N, BM_EigenSquaredNormInCache
//                          the same on the tensor's first 1 MiB, which stays in
//                          L2 between iterations: what the pass costs when
//                          memory is not the limit (the compute a 64 MiB pass
//                          has to hide behind its loads), one thread
//   BM_SeparatePasses      the same stats as one simple loop per stat (what a
//                          host computing them one by one would do)
//   BM_FracOutside         the parameterised stat frac_outside(-2, 2), its own pass
//   BM_EigenFracOutside    the same count with Eigen array expressions
//   BM_FracDeadUnits       frac_dead_units(1.0) of the tensor as [256 x 65536]
//   BM_DeadUnitsByRows     the same by hand, row by row into per-unit counters
// bytes_per_second is the tensor's size over the time per iteration. Each
// baseline is first checked to compute the same values as Vigil (bench/verify.hpp):
// exactly for the counts, to rounding for double sums, to float rounding for
// Eigen's float squaredNorm.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <random>
#include <vector>

#include "bench/verify.hpp"
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

const std::int64_t shape_1d[] = {numel};

const vigil::TensorStats& fused() {
  static const vigil::TensorStats s =
      vigil::compute_stats({data().data(), vigil::DType::float32, shape_1d, {}});
  return s;
}

// The stats as one simple loop per stat.
struct Separate {
  double sum = 0, abs_sum = 0, sq = 0, var = 0, mn = INFINITY, mx = -INFINITY, zeros = 0, nans = 0,
         infs = 0;
};
Separate separate_passes(const std::vector<float>& v) {
  Separate r;
  for (float x : v) r.sum += x;
  for (float x : v) r.abs_sum += std::abs(x);
  for (float x : v) r.sq += static_cast<double>(x) * x;
  const double mean = r.sum / numel;
  for (float x : v) r.var += (x - mean) * (x - mean);
  r.var /= numel;
  for (float x : v) r.mn = std::min<double>(r.mn, x);
  for (float x : v) r.mx = std::max<double>(r.mx, x);
  for (float x : v) r.zeros += x == 0;
  for (float x : v) r.nans += std::isnan(x);
  for (float x : v) r.infs += std::isinf(x);
  return r;
}

// Runs the rest of a benchmark with `threads` threads per tensor and no
// size threshold; restores the previous setting after it.
struct Threads {
  vigil::StatsThreading saved = vigil::stats_threading();
  explicit Threads(std::int64_t threads) {
    vigil::set_stats_threading({static_cast<unsigned>(threads), 0});
  }
  ~Threads() { vigil::set_stats_threading(saved); }
};

void BM_FusedStats(benchmark::State& state) {
  const Threads threads(state.range(0));
  const auto& v = data();
  const vigil::TensorView view{v.data(), vigil::DType::float32, shape_1d, {}};
  using vigil::Stat;
  const auto& f = fused();
  const Separate b = separate_passes(v);
  const double same[][2] = {{f[Stat::sum], b.sum},        {f[Stat::abs_sum], b.abs_sum},
                            {f[Stat::norm], std::sqrt(b.sq)}, {f[Stat::var], b.var},
                            {f[Stat::min], b.mn},         {f[Stat::max], b.mx},
                            {f[Stat::frac_zero] * numel, b.zeros}, {f[Stat::nan_count], b.nans},
                            {f[Stat::inf_count], b.infs}};
  for (const auto& [got, want] : same)
    if (!vigil::bench::expect(state, vigil::bench::close(got, want, 1e-9),
                              "fused " + std::to_string(got) + " vs separate " + std::to_string(want)))
      return;
  for (auto _ : state) {
    auto s = vigil::compute_stats(view);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

// The stats a rule set reads, computed alone (compute_stats with a mask):
//   0: `grad_norm`  (examples/torch_trainer/trainer.rules, std.grad_norm_spike)
//   1: `abs_max`    (std.sagemaker's NaN/Inf check reads `grad.abs_max`)
//   2: `norm`, `abs_max`, `frac_nan`  (the two together, plus a NaN fraction)
//   3: `mean`, `std`, `frac_zero`  (activation rules)
// Checked first against the full pass (each stat to 1e-9).
vigil::StatMask rule_set_mask(std::int64_t set) {
  using vigil::Stat;
  using vigil::stat_bit;
  switch (set) {
    case 0: return stat_bit(Stat::norm);
    case 1: return stat_bit(Stat::abs_max);
    case 2: return stat_bit(Stat::norm) | stat_bit(Stat::abs_max) | stat_bit(Stat::frac_nan);
    default: return stat_bit(Stat::mean) | stat_bit(Stat::std) | stat_bit(Stat::frac_zero);
  }
}

void BM_RuleSetStats(benchmark::State& state) {
  const Threads threads(state.range(1));
  const auto& v = data();
  const vigil::TensorView view{v.data(), vigil::DType::float32, shape_1d, {}};
  const vigil::StatMask mask = rule_set_mask(state.range(0));
  const auto some = vigil::compute_stats(view, mask);
  for (std::size_t i = 0; i < vigil::stat_count; ++i)
    if ((mask & vigil::stat_bit(static_cast<vigil::Stat>(i))) != 0 &&
        !vigil::bench::expect(state, vigil::bench::close(some.values[i], fused().values[i], 1e-9),
                              std::string(vigil::stat_name(static_cast<vigil::Stat>(i))) +
                                  " masked vs full pass"))
      return;
  for (auto _ : state) {
    auto s = vigil::compute_stats(view, mask);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

constexpr std::int64_t in_cache = (1 << 20) / 4;
const std::int64_t shape_in_cache[] = {in_cache};

// N = 0-3 as BM_RuleSetStats, 4 = every stat.
void BM_RuleSetStatsInCache(benchmark::State& state) {
  const Threads threads(1);
  const vigil::TensorView view{data().data(), vigil::DType::float32, shape_in_cache, {}};
  const vigil::StatMask mask = state.range(0) == 4 ? ~vigil::StatMask{0} : rule_set_mask(state.range(0));
  for (auto _ : state) {
    auto s = vigil::compute_stats(view, mask);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * in_cache * 4);
}

void BM_EigenSquaredNormInCache(benchmark::State& state) {
  const Eigen::Map<const Eigen::VectorXf> m(data().data(), in_cache);
  for (auto _ : state) {
    float n = m.squaredNorm();
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(state.iterations() * in_cache * 4);
}

void BM_EigenSquaredNorm(benchmark::State& state) {
  const auto& v = data();
  const Eigen::Map<const Eigen::VectorXf> m(v.data(), numel);
  const double norm = fused()[vigil::Stat::norm];
  // Eigen sums in float: over 16 M terms its rounding error is about 0.1%
  // (Vigil accumulates in double), so "the same" means within 1%.
  if (!vigil::bench::expect(state, vigil::bench::close(m.squaredNorm(), norm * norm, 1e-2),
                            "squaredNorm " + std::to_string(m.squaredNorm()) + " vs fused norm^2 " +
                                std::to_string(norm * norm)))
    return;
  for (auto _ : state) {
    float n = m.squaredNorm();
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

// Checked against the fused stats in BM_FusedStats.
void BM_SeparatePasses(benchmark::State& state) {
  const auto& v = data();
  for (auto _ : state) {
    const Separate r = separate_passes(v);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

void BM_FracOutside(benchmark::State& state) {
  const auto& v = data();
  const std::int64_t shape[] = {numel};
  const vigil::TensorView view{v.data(), vigil::DType::float32, shape, {}};
  const double bounds[] = {-2, 2};
  const Eigen::Map<const Eigen::ArrayXf> a(v.data(), numel);
  const double eigen = static_cast<double>(((a < -2.0f) || (a > 2.0f)).count()) / numel;
  if (!vigil::bench::expect(
          state, vigil::compute_param_stat(vigil::ParamStat::frac_outside, bounds, view) == eigen,
          "frac_outside vs Eigen's count"))
    return;
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

// frac_dead_units(1.0) by hand, row by row into per-unit counters.
double dead_units_by_rows(const std::vector<float>& v, std::vector<std::int32_t>& active) {
  std::fill(active.begin(), active.end(), 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* row = v.data() + b * units;
    for (std::int64_t u = 0; u < units; ++u) active[static_cast<std::size_t>(u)] += row[u] > 0;
  }
  std::int64_t dead = 0;
  for (auto c : active) dead += 100.0 * c / batch < 1.0;
  return static_cast<double>(dead) / units;
}

void BM_DeadUnitsByRows(benchmark::State& state) {
  const auto& v = data();
  std::vector<std::int32_t> active(static_cast<std::size_t>(units));
  const std::int64_t shape[] = {batch, units};
  const double threshold[] = {1.0};
  const double vigil_value = vigil::compute_param_stat(
      vigil::ParamStat::frac_dead_units, threshold, {v.data(), vigil::DType::float32, shape, {}});
  if (!vigil::bench::expect(state, dead_units_by_rows(v, active) == vigil_value,
                            "frac_dead_units vs by hand"))
    return;
  for (auto _ : state) {
    double f = dead_units_by_rows(v, active);
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(state.iterations() * numel * 4);
}

BENCHMARK(BM_FusedStats)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FusedStats)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RuleSetStats)->ArgsProduct({{0, 1, 2, 3}, {1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RuleSetStats)->ArgsProduct({{0, 1, 2, 3}, {2}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenSquaredNorm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenSquaredNorm)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RuleSetStatsInCache)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EigenSquaredNormInCache)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SeparatePasses)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FracOutside)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenFracOutside)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FracDeadUnits)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeadUnitsByRows)->Unit(benchmark::kMillisecond);

}  // namespace

VIGIL_BENCHMARK_MAIN()
