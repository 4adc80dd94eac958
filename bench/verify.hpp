// Benchmarks compare equal work: before anything is timed, each benchmark
// checks that its result equals what the thing it is compared with computes
// (the same stats, the same count, the same firings). A mismatch marks the
// benchmark as failed instead of timing it, and VIGIL_BENCHMARK_MAIN then
// exits non-zero, so the `bench.*.results_agree` tests (bench/CMakeLists.txt)
// fail in `make test`.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace vigil::bench {

inline bool& any_mismatch() {
  static bool mismatch = false;
  return mismatch;
}

/// Fails `state` (it is then not timed) unless `same`; returns `same`.
inline bool expect(benchmark::State& state, bool same, const std::string& what) {
  if (same) return true;
  state.SkipWithError(("results differ: " + what).c_str());
  any_mismatch() = true;
  return false;
}

/// Equal up to `rel` of the larger magnitude (NaN equals NaN, infinities
/// must match exactly).
inline bool close(double a, double b, double rel) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= rel * std::max({std::abs(a), std::abs(b), 1e-300});
}

}  // namespace vigil::bench

/// BENCHMARK_MAIN, but the exit status says whether every benchmark's results
/// agreed with its baseline.
#define VIGIL_BENCHMARK_MAIN()                                              \
  int main(int argc, char** argv) {                                         \
    ::benchmark::Initialize(&argc, argv);                                   \
    if (::benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;     \
    ::benchmark::RunSpecifiedBenchmarks();                                  \
    ::benchmark::Shutdown();                                                \
    return ::vigil::bench::any_mismatch() ? 1 : 0;                          \
  }
