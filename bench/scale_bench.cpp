// The scale table (issue 14 §7): cost per observation and memory held as one
// dimension of the workload grows, the others fixed. docs/performance.md
// ("Scale") has the table, the command and the expected shape of each curve.
//
//   BM_Rules/N           N rules (four kinds, below) over 10 series, each
//                        observation samples all 10: expected linear in N
//   BM_Series/S          S series sampled per observation, 10 rules reading
//                        10 of them: linear in S (ingest), flat per sample
//   BM_LabelSets/L       three rules over the vector x{i=...} of L label sets
//                        (up to the default limit, 100k); each observation
//                        samples 10 of them: flat in L (an observation costs
//                        the label sets it changes)
//   BM_LabelSets_StepWindow/L  the same with a window by steps (`x[10 steps]`),
//                        which can change without a sample: linear in L
//   BM_Window_<fn>/W     one rule over fn(loss[W]): flat in W for mean, max
//                        and var (running windows), O(1) expected for median
//                        on values that do not trend (two heaps split at the
//                        rank), memory linear in W
//   BM_TraceSize/T       the 10-rule workload over a trace of T observations:
//                        flat per observation, memory flat (windows bounded)
//
// Time per iteration is one observe() (BM_TraceSize: the `s/obs` counter).
// Memory: `bytes` is the heap held by the engine after warm-up (every window
// full, every label set seen), counted by replacing operator new/delete in
// this binary (malloc_usable_size of each live block: what the allocator
// really holds for it, not what was asked for).
//
// Before timing, each benchmark checks that its rules fire (so the workload
// is not vacuous): a silent workload fails `bench.scale_bench.results_agree`.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/verify.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"

// ---- live heap bytes -----------------------------------------------------------

namespace {
std::atomic<long long> live_bytes{0};

void* counted(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
void release(void* p) noexcept {
  if (p == nullptr) return;
  live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
std::size_t aligned_size(std::size_t n, std::align_val_t a) {
  const auto al = static_cast<std::size_t>(a);
  return (n + al - 1) / al * al;
}
}  // namespace

void* operator new(std::size_t n) { return counted(std::malloc(n ? n : 1)); }
void* operator new[](std::size_t n) { return counted(std::malloc(n ? n : 1)); }
void* operator new(std::size_t n, std::align_val_t a) {
  return counted(std::aligned_alloc(static_cast<std::size_t>(a), aligned_size(n ? n : 1, a)));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted(std::aligned_alloc(static_cast<std::size_t>(a), aligned_size(n ? n : 1, a)));
}
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }

namespace {

using vigil::bench::expect;

vigil::Program compile(const std::string& text) {
  auto r = vigil::compile_string(text);
  if (!r.ok()) {
    fmt::print(stderr, "{}", r.format_diagnostics());
    std::abort();
  }
  return *r.program;
}

vigil::EngineOptions options(std::size_t max_label_sets = vigil::default_max_label_sets) {
  vigil::EngineOptions o;
  o.unbound = vigil::UnboundActions::record;
  o.max_label_sets = max_label_sets;
  return o;
}

/// Rule i of the generated rule sets, over series `x`: four kinds (a
/// threshold held for 3 samples, a window mean, a spike against an ewma, a
/// window range with a cooldown), thresholds distinct per rule so that no
/// two rules are one plan node.
std::string rule(int i, const std::string& x) {
  const double t = 0.9 + 1e-5 * i;
  switch (i % 4) {
    case 0: return fmt::format("rule r{}: when {} > {} for 3 samples do log\n", i, x, t);
    case 1: return fmt::format("rule r{}: when mean({}[20]) > {} do log\n", i, x, t - 0.4);
    case 2: return fmt::format("rule r{}: when {} > {} * ewma({}, 0.1) do log\n", i, x, 1 + t, x);
    default:
      return fmt::format("rule r{}: when max({}[50]) - min({}[50]) > {} cooldown 10 steps do log\n", i,
                         x, x, t);
  }
}

/// Uniform values in [0, 1): a pool cycled through (values only; steps grow).
std::vector<double> value_pool(std::size_t n) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

/// Runs the observation loop: `fill(step, samples)` builds the samples of
/// one observation. Warm-up first (and the check that something fires),
/// then the timed loop; reports the heap the engine holds after warm-up.
template <class Fill>
void run(benchmark::State& state, const vigil::Program& program, const vigil::EngineOptions& o,
         std::int64_t warmup, Fill fill) {
  std::vector<vigil::Sample> samples;
  const long long before = live_bytes.load();
  vigil::Engine e(program, o);
  std::uint64_t fired = 0;
  std::int64_t step = 0;
  for (; step < warmup; ++step) {
    fill(e, step, samples);
    fired += e.observe(step, samples).size();
  }
  const long long held = live_bytes.load() - before;
  if (!expect(state, fired > 0, "no rule fired during warm-up")) return;
  for (auto _ : state) {
    fill(e, step, samples);
    benchmark::DoNotOptimize(e.observe(step, samples).size());
    ++step;
  }
  state.counters["bytes"] = static_cast<double>(held);
}

// ---- rules ---------------------------------------------------------------------

std::vector<vigil::SeriesId> intern_all(vigil::Engine& e, const std::string& pattern, int n) {
  std::vector<vigil::SeriesId> ids;
  for (int i = 0; i < n; ++i) ids.push_back(*e.series(fmt::format(fmt::runtime(pattern), i)));
  return ids;
}

void BM_Rules(benchmark::State& state) {
  const int rules = static_cast<int>(state.range(0));
  std::string text;
  for (int i = 0; i < rules; ++i) text += rule(i, fmt::format("m{}", i % 10));
  const auto program = compile(text);
  const auto pool = value_pool(4096);
  std::vector<vigil::SeriesId> ids;
  run(state, program, options(), 200, [&](vigil::Engine& e, std::int64_t step, auto& samples) {
    if (ids.empty()) ids = intern_all(e, "m{}", 10);
    samples.clear();
    for (std::size_t k = 0; k < ids.size(); ++k)
      samples.push_back({ids[k], pool[(static_cast<std::size_t>(step) * 10 + k) % pool.size()]});
  });
  state.counters["rules"] = rules;
}
BENCHMARK(BM_Rules)->Arg(10)->Arg(100)->Arg(1000);

// ---- series --------------------------------------------------------------------

void BM_Series(benchmark::State& state) {
  const int series = static_cast<int>(state.range(0));
  std::string text;
  for (int i = 0; i < 10; ++i) text += rule(i, fmt::format("s{}", i));
  const auto program = compile(text);
  const auto pool = value_pool(4096);
  std::vector<vigil::SeriesId> ids;
  run(state, program, options(), 200, [&](vigil::Engine& e, std::int64_t step, auto& samples) {
    if (ids.empty()) ids = intern_all(e, "s{}", series);
    samples.clear();
    for (std::size_t k = 0; k < ids.size(); ++k)
      samples.push_back({ids[k], pool[(static_cast<std::size_t>(step) * 7 + k) % pool.size()]});
  });
  state.counters["series"] = series;
  state.counters["s/sample"] = benchmark::Counter(
      static_cast<double>(series), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Series)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000);

// ---- label sets ----------------------------------------------------------------

/// Three rules over the vector x{i=...}; `window` is the mean's window.
void label_sets(benchmark::State& state, const std::string& window) {
  const int labels = static_cast<int>(state.range(0));
  const auto program = compile(
      "rule held: when x > 0.99 for 3 samples do log\n"
      "rule smooth: when mean(x[" + window + "]) > 0.8 do log\n"
      "rule spike: when x > 1.9 * ewma(x, 0.1) do log\n");
  const auto pool = value_pool(4096);
  std::vector<vigil::SeriesId> ids;
  constexpr int per_obs = 10;
  // Warm-up: every label set gets 20 samples (its windows full), in
  // observations of up to 1000 samples; then 10 per observation, rotating.
  const std::int64_t batch = std::min(labels, 1000);
  const std::int64_t warmup = 20 * labels / batch;
  std::int64_t next = 0;
  run(state, program, options(), warmup, [&](vigil::Engine& e, std::int64_t step, auto& samples) {
    if (ids.empty()) ids = intern_all(e, "x{{i=\"{}\"}}", labels);
    samples.clear();
    const std::int64_t n = step < warmup ? batch : per_obs;
    for (std::int64_t k = 0; k < n; ++k, ++next)
      samples.push_back({ids[static_cast<std::size_t>(next % labels)],
                         pool[static_cast<std::size_t>(next) % pool.size()]});
  });
  state.counters["label_sets"] = labels;
}

void BM_LabelSets(benchmark::State& state) { label_sets(state, "10"); }
BENCHMARK(BM_LabelSets)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000);

void BM_LabelSets_StepWindow(benchmark::State& state) { label_sets(state, "10 steps"); }
BENCHMARK(BM_LabelSets_StepWindow)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000);

// ---- window length -------------------------------------------------------------

/// `threshold`: one the value crosses (uniform values: var is about 1/12).
void window(benchmark::State& state, const char* fn, double threshold = 0.1) {
  const int w = static_cast<int>(state.range(0));
  const auto program = compile(fmt::format("rule r: when {}(loss[{}]) > {} do log\n", fn, w, threshold));
  const auto pool = value_pool(4096);
  std::vector<vigil::SeriesId> ids;
  run(state, program, options(), w + 10, [&](vigil::Engine& e, std::int64_t step, auto& samples) {
    if (ids.empty()) ids = intern_all(e, "loss", 1);
    samples.clear();
    samples.push_back({ids[0], pool[static_cast<std::size_t>(step) % pool.size()]});
  });
  state.counters["window"] = w;
}

void BM_Window_mean(benchmark::State& state) { window(state, "mean"); }
void BM_Window_max(benchmark::State& state) { window(state, "max"); }
void BM_Window_median(benchmark::State& state) { window(state, "median"); }
void BM_Window_var(benchmark::State& state) { window(state, "var", 0.05); }
BENCHMARK(BM_Window_mean)->Arg(10)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Window_max)->Arg(10)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Window_median)->Arg(10)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Window_var)->Arg(10)->Arg(1000)->Arg(100000);

// ---- trace size ----------------------------------------------------------------

void BM_TraceSize(benchmark::State& state) {
  const std::int64_t steps = state.range(0);
  std::string text;
  for (int i = 0; i < 10; ++i) text += rule(i, fmt::format("m{}", i));
  const auto program = compile(text);
  const auto pool = value_pool(4096);
  std::vector<vigil::Sample> samples;
  long long held = 0;
  std::uint64_t fired = 0;
  for (auto _ : state) {
    const long long before = live_bytes.load();
    vigil::Engine e(program, options());
    const auto ids = intern_all(e, "m{}", 10);
    for (std::int64_t step = 0; step < steps; ++step) {
      samples.clear();
      for (std::size_t k = 0; k < ids.size(); ++k)
        samples.push_back({ids[k], pool[(static_cast<std::size_t>(step) * 10 + k) % pool.size()]});
      fired += e.observe(step, samples).size();
    }
    held = live_bytes.load() - before;
  }
  expect(state, fired > 0, "no rule fired");
  state.counters["bytes"] = static_cast<double>(held);
  state.counters["s/obs"] = benchmark::Counter(
      static_cast<double>(steps), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TraceSize)->Arg(1000)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

}  // namespace

VIGIL_BENCHMARK_MAIN();
