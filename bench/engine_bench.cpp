// Engine and compiler benchmarks (Google Benchmark). What is measured, how to
// run it and the latest numbers are in docs/performance.md.
//
//   BM_Observe_100x100      100 rules over 100 series, one observe() per iteration
//   BM_Observe_HandWritten  the same 100 conditions hand-coded over ring buffers:
//                           the floor an interpreter can be compared against
//   BM_Observe/N            N = 10, 100, 1000 rules over the same 100 series
//   BM_Compile_1000_rules   compile_string of a generated 1000-rule file
//   BM_Parse_1000_rules     grammar::parse alone of the same text
//   BM_CountOverCondition   count((cpu_util > 90 and gpu_util < 10)[100]) over 8
//                           GPUs (a range over an expression, cpu_util broadcast)
//   BM_CountOverCondition_HandWritten  the same with a ring of flags and a
//                           running count per GPU; ..._HandWrittenRecount
//                           recounts the ring at each observation, as the
//                           engine does for every range function
//   BM_Window/<case>        one rule with a window of 10,000 over a 100k-step
//                           trace fed from memory (threshold: the baseline)
//   BM_WindowTrace/<case>   the same replays read from a JSONL file with
//                           open_jsonl, as `rulecheck run` does (issue 14 §1)
//
// The workload is generated from one table of rule specs (`make_specs`), which
// is rendered both as rule text for the engine and as a hand-written evaluator
// over the same data, and the two are checked to fire the same number of times
// before anything is timed, so the ratio compares equal work: every benchmark
// runs the check for its own workload (any rule count; each hand-written
// variant of the count over a condition) before its timing loop.
#include <sys/mman.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench/verify.hpp"
#include "grammar/parser.hpp"
#include "stdlib/functions.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"
#include "vigil/trace.hpp"

namespace {

// ---- the workload ----------------------------------------------------------

constexpr int scalar_series = 84;  // metric_00 .. metric_83
constexpr int layer_series = 16;   // grad_norm{layer="conv0".."conv7","fc0".."fc7"}
constexpr int total_series = scalar_series + layer_series;
// Distinct observations cycled through (values only; steps keep increasing).
constexpr int pool_size = 512;
// Observations before timing: longer than the longest window (100 steps).
constexpr int warmup = 300;

std::string layer_name(int i) { return i < 8 ? fmt::format("conv{}", i) : fmt::format("fc{}", i - 8); }

/// Label selections over the 16 layers, as a regex and as the members it
/// matches (the hand-written baseline "knows" its layers).
struct LayerGroup {
  const char* regex;
  std::vector<int> members;  // indices into the layers
};

const std::vector<LayerGroup>& layer_groups() {
  static const std::vector<LayerGroup> groups{
      {"conv.*", {0, 1, 2, 3, 4, 5, 6, 7}},
      {"fc.*", {8, 9, 10, 11, 12, 13, 14, 15}},
      {"conv[0-3]", {0, 1, 2, 3}},
      {"(conv|fc)[4-7]", {4, 5, 6, 7, 12, 13, 14, 15}},
      {".*1", {1, 9}},
  };
  return groups;
}

enum class Kind {
  threshold_for,   // x > t for n samples
  mean_samples,    // mean(x[W]) > t
  median_steps,    // x > k * median(x[W steps])
  spread_samples,  // max(x[W]) - min(x[W]) < t
  vector_for,      // grad_norm{layer=~G} > t for n samples   (per-layer state)
  ewma,            // ewma(x, alpha) > t
  aggregate_max,   // max(grad_norm{layer=~G}) > t
  and_mean_steps,  // x > 0.5 and mean(x[W steps]) > t for n samples
  vector_vs_mean,  // grad_norm{layer=~G} > k * mean(grad_norm{layer=~G}[W])
  max_steps,       // max(x[W steps]) < t
};
constexpr int kind_count = 10;

struct Spec {
  Kind kind;
  int series = 0;  // scalar series index, or layer group index for vector kinds
  int window = 0;
  double t = 0;    // threshold or factor
  int for_n = 1;
  double alpha = 0;
};

/// `n` rules cycling through the kinds; series, windows and thresholds vary
/// with the rule index so that few rules are structurally identical (the
/// planner would otherwise merge them).
std::vector<Spec> make_specs(int n) {
  std::vector<Spec> specs;
  for (int i = 0; i < n; ++i) {
    const int round = i / kind_count;
    const int s = (i * 7 + round) % scalar_series;
    const int g = round % static_cast<int>(layer_groups().size());
    const double jitter = 0.0001 * i;
    switch (static_cast<Kind>(i % kind_count)) {
      case Kind::threshold_for: specs.push_back({Kind::threshold_for, s, 0, 0.9 + jitter, 3}); break;
      case Kind::mean_samples: specs.push_back({Kind::mean_samples, s, 20 + round % 3 * 5, 0.6 + jitter}); break;
      case Kind::median_steps: specs.push_back({Kind::median_steps, s, 50 - round % 4 * 8, 1.95 + jitter}); break;
      case Kind::spread_samples: specs.push_back({Kind::spread_samples, s, 32, 0.85 - jitter}); break;
      case Kind::vector_for: specs.push_back({Kind::vector_for, g, 0, 0.95 + jitter / 10, 2}); break;
      case Kind::ewma: specs.push_back({Kind::ewma, s, 0, 0.65 + jitter, 1, 0.1 + round % 3 * 0.05}); break;
      case Kind::aggregate_max: specs.push_back({Kind::aggregate_max, g, 0, 0.995 + jitter / 100}); break;
      case Kind::and_mean_steps: specs.push_back({Kind::and_mean_steps, s, 10 + round % 2 * 10, 0.65 + jitter, 2}); break;
      case Kind::vector_vs_mean: specs.push_back({Kind::vector_vs_mean, g, 16, 1.9 + jitter}); break;
      case Kind::max_steps: specs.push_back({Kind::max_steps, s, 100 - round % 3 * 10, 0.97 - jitter / 10}); break;
    }
  }
  return specs;
}

std::string scalar_name(int s) { return fmt::format("metric_{:02}", s); }

std::string render_rules(const std::vector<Spec>& specs) {
  std::string out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const Spec& r = specs[i];
    const std::string x = scalar_name(r.series);
    const auto& groups = layer_groups();
    const std::string g =
        r.series < static_cast<int>(groups.size())
            ? fmt::format("grad_norm{{layer=~\"{}\"}}", groups[static_cast<std::size_t>(r.series)].regex)
            : std::string();
    std::string cond;
    switch (r.kind) {
      case Kind::threshold_for: cond = fmt::format("{} > {} for {} samples", x, r.t, r.for_n); break;
      case Kind::mean_samples: cond = fmt::format("mean({}[{}]) > {}", x, r.window, r.t); break;
      case Kind::median_steps: cond = fmt::format("{} > {} * median({}[{} steps])", x, r.t, x, r.window); break;
      case Kind::spread_samples:
        cond = fmt::format("max({0}[{1}]) - min({0}[{1}]) < {2}", x, r.window, r.t);
        break;
      case Kind::vector_for: cond = fmt::format("{} > {} for {} samples", g, r.t, r.for_n); break;
      case Kind::ewma: cond = fmt::format("ewma({}, {}) > {}", x, r.alpha, r.t); break;
      case Kind::aggregate_max: cond = fmt::format("max({}) > {}", g, r.t); break;
      case Kind::and_mean_steps:
        cond = fmt::format("{0} > 0.5 and mean({0}[{1} steps]) > {2} for {3} samples", x, r.window, r.t,
                           r.for_n);
        break;
      case Kind::vector_vs_mean: cond = fmt::format("{0} > {1} * mean({0}[{2}])", g, r.t, r.window); break;
      case Kind::max_steps: cond = fmt::format("max({}[{} steps]) < {}", x, r.window, r.t); break;
    }
    out += fmt::format("rule r{}: when {} do log\n", i, cond);
  }
  return out;
}

/// One pre-built observation per pool entry: every series, values uniform in
/// [0, 1) from a fixed seed. Sample i is series id i (interned in that order).
struct Data {
  std::vector<std::vector<vigil::Sample>> samples;  // [pool][series]
  std::vector<std::array<double, total_series>> values;
};

const Data& data() {
  static const Data d = [] {
    Data out;
    std::mt19937_64 rng(20240601);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    out.samples.resize(pool_size);
    out.values.resize(pool_size);
    for (int p = 0; p < pool_size; ++p) {
      for (int s = 0; s < total_series; ++s) {
        const double v = u(rng);
        out.values[static_cast<std::size_t>(p)][static_cast<std::size_t>(s)] = v;
        out.samples[static_cast<std::size_t>(p)].push_back({static_cast<vigil::SeriesId>(s), v});
      }
    }
    return out;
  }();
  return d;
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "engine_bench: %s\n", message.c_str());
  std::exit(2);
}

/// An engine over `specs` with all series interned (ids 0..99 in data order)
/// and a `log` callback that counts.
struct EngineSetup {
  vigil::Engine engine;
  std::uint64_t logged = 0;

  explicit EngineSetup(const std::vector<Spec>& specs) : engine(compile(render_rules(specs))) {
    engine.on("log", [this](const vigil::Firing&, const vigil::Action&) { ++logged; });
    for (int s = 0; s < total_series; ++s) {
      const std::string key = s < scalar_series
                                  ? scalar_name(s)
                                  : fmt::format("grad_norm{{layer=\"{}\"}}", layer_name(s - scalar_series));
      auto id = engine.series(key);
      if (!id || *id != static_cast<vigil::SeriesId>(s)) die("unexpected series id for " + key);
    }
  }

  static vigil::Program compile(const std::string& text) {
    auto result = vigil::compile_string(text, "bench.rules");
    if (!result.ok()) die("workload does not compile:\n" + result.format_diagnostics());
    return *result.program;
  }
};

// ---- the hand-written baseline ------------------------------------------------

/// The same conditions coded directly: a mirrored ring buffer per series (the
/// newest W samples are one contiguous span), one state struct per rule and
/// layer, a switch per rule. Same firing semantics as the engine: `for n`
/// counts consecutive true evaluations, a rule fires once per run of truth.
class HandWritten {
 public:
  explicit HandWritten(std::vector<Spec> specs) : specs_(std::move(specs)), state_(specs_.size()) {}

  /// Feeds one observation (all series at once); returns the firings.
  int observe(const std::array<double, total_series>& v) {
    for (int s = 0; s < total_series; ++s) rings_[static_cast<std::size_t>(s)].put(v[static_cast<std::size_t>(s)]);
    ++count_;
    int fired = 0;
    for (std::size_t i = 0; i < specs_.size(); ++i) fired += evaluate(specs_[i], state_[i], v);
    return fired;
  }

 private:
  static constexpr std::size_t cap = 128;  // >= the longest window
  struct Ring {
    std::array<double, 2 * cap> buf{};
    std::size_t head = 0;
    void put(double x) {
      buf[head] = buf[head + cap] = x;
      head = (head + 1) % cap;
    }
    /// The newest n samples, oldest first.
    [[nodiscard]] const double* last(std::size_t n) const { return &buf[head + cap - n]; }
  };
  struct Elem {
    int run = 0;
    bool fired = false;
    /// One evaluation; returns whether it fires.
    bool step(bool cond, int for_n) {
      if (!cond) {
        run = 0;
        fired = false;
        return false;
      }
      ++run;
      if (run < for_n || fired) return false;
      fired = true;
      return true;
    }
  };
  struct State {
    std::array<Elem, layer_series> elems{};
    double ewma = 0;
    bool ewma_started = false;
  };

  static double mean(const double* p, std::size_t n) {
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += p[i];
    return sum / static_cast<double>(n);
  }
  double median(const double* p, std::size_t n) {
    std::copy(p, p + n, scratch_.begin());
    auto* b = scratch_.data();
    const std::size_t lo = (n - 1) / 2;
    std::nth_element(b, b + lo, b + n);
    if (n % 2 == 1) return b[lo];
    const double hi = *std::min_element(b + lo + 1, b + n);
    return b[lo] + 0.5 * (hi - b[lo]);
  }
  /// Samples held of a window of `w` steps (one sample per step here).
  [[nodiscard]] std::size_t step_window(int w) const {
    return std::min<std::size_t>(count_, static_cast<std::size_t>(w));
  }

  int evaluate(const Spec& r, State& st, const std::array<double, total_series>& v) {
    const auto s = static_cast<std::size_t>(r.series);
    const Ring& ring = rings_[s];
    const double x = v[s];
    const auto w = static_cast<std::size_t>(r.window);
    switch (r.kind) {
      case Kind::threshold_for: return st.elems[0].step(x > r.t, r.for_n);
      case Kind::mean_samples:
        return count_ >= w && st.elems[0].step(mean(ring.last(w), w) > r.t, 1);
      case Kind::median_steps: {
        const std::size_t n = step_window(r.window);
        return st.elems[0].step(x > r.t * median(ring.last(n), n), 1);
      }
      case Kind::spread_samples: {
        if (count_ < w) return 0;
        const auto [lo, hi] = std::minmax_element(ring.last(w), ring.last(w) + w);
        return st.elems[0].step(*hi - *lo < r.t, 1);
      }
      case Kind::vector_for: {
        int fired = 0;
        for (int m : layer_groups()[s].members)
          fired += st.elems[static_cast<std::size_t>(m)].step(
              v[static_cast<std::size_t>(scalar_series + m)] > r.t, r.for_n);
        return fired;
      }
      case Kind::ewma:
        st.ewma = st.ewma_started ? r.alpha * x + (1 - r.alpha) * st.ewma : x;
        st.ewma_started = true;
        return st.elems[0].step(st.ewma > r.t, 1);
      case Kind::aggregate_max: {
        double m = -1;
        for (int l : layer_groups()[s].members) m = std::max(m, v[static_cast<std::size_t>(scalar_series + l)]);
        return st.elems[0].step(m > r.t, 1);
      }
      case Kind::and_mean_steps: {
        const std::size_t n = step_window(r.window);
        return st.elems[0].step(x > 0.5 && mean(ring.last(n), n) > r.t, r.for_n);
      }
      case Kind::vector_vs_mean: {
        if (count_ < w) return 0;
        int fired = 0;
        for (int m : layer_groups()[s].members) {
          const auto series = static_cast<std::size_t>(scalar_series + m);
          fired += st.elems[static_cast<std::size_t>(m)].step(
              v[series] > r.t * mean(rings_[series].last(w), w), 1);
        }
        return fired;
      }
      case Kind::max_steps: {
        const std::size_t n = step_window(r.window);
        return st.elems[0].step(*std::max_element(ring.last(n), ring.last(n) + n) < r.t, 1);
      }
    }
    return 0;
  }

  std::vector<Spec> specs_;
  std::vector<State> state_;
  std::array<Ring, total_series> rings_{};
  std::array<double, cap> scratch_{};
  std::size_t count_ = 0;
};

/// Runs engine and baseline side by side over `n` observations and stops the
/// program if they disagree on any observation's firing count: the baseline
/// is only a floor if it does the same work.
void check_equivalent(const std::vector<Spec>& specs, int n) {
  EngineSetup e(specs);
  HandWritten h(specs);
  const Data& d = data();
  std::uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const auto p = static_cast<std::size_t>(i % pool_size);
    const auto fe = e.engine.observe(i, d.samples[p]).size();
    const auto fh = static_cast<std::size_t>(h.observe(d.values[p]));
    if (fe != fh)
      die(fmt::format("engine and hand-written baseline disagree at step {}: {} vs {} firings", i, fe, fh));
    total += fe;
  }
  if (total == 0) die("workload never fires: thresholds are off");
}

// ---- observe benchmarks --------------------------------------------------------

/// check_equivalent once per rule count (benchmarks are entered repeatedly).
void check_once(int rules) {
  static std::vector<int> checked;
  if (std::find(checked.begin(), checked.end(), rules) != checked.end()) return;
  check_equivalent(make_specs(rules), 2 * pool_size);
  checked.push_back(rules);
}

void run_observe(benchmark::State& state, int rules) {
  const auto specs = make_specs(rules);
  check_once(rules);
  EngineSetup e(specs);
  const Data& d = data();
  std::int64_t step = 0;
  for (; step < warmup; ++step) e.engine.observe(step, d.samples[static_cast<std::size_t>(step % pool_size)]);
  std::uint64_t firings = 0;
  for (auto _ : state) {
    auto fired = e.engine.observe(step, d.samples[static_cast<std::size_t>(step % pool_size)]);
    firings += fired.size();
    ++step;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["rules"] = rules;
  state.counters["plan_nodes"] = static_cast<double>(e.engine.program().plan_size());
  state.counters["firings/obs"] =
      benchmark::Counter(static_cast<double>(firings), benchmark::Counter::kAvgIterations);
}

void BM_Observe_100x100(benchmark::State& state) { run_observe(state, 100); }
BENCHMARK(BM_Observe_100x100);

void BM_Observe_HandWritten(benchmark::State& state) {
  check_once(100);
  HandWritten h(make_specs(100));
  const Data& d = data();
  std::int64_t step = 0;
  for (; step < warmup; ++step) h.observe(d.values[static_cast<std::size_t>(step % pool_size)]);
  std::uint64_t firings = 0;
  for (auto _ : state) {
    firings += static_cast<std::uint64_t>(h.observe(d.values[static_cast<std::size_t>(step % pool_size)]));
    ++step;
  }
  benchmark::DoNotOptimize(firings);
  state.SetItemsProcessed(state.iterations());
  state.counters["rules"] = 100;
  state.counters["firings/obs"] =
      benchmark::Counter(static_cast<double>(firings), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_Observe_HandWritten);

void BM_Observe(benchmark::State& state) { run_observe(state, static_cast<int>(state.range(0))); }
BENCHMARK(BM_Observe)->Arg(10)->Arg(100)->Arg(1000);

// ---- a range over an expression -------------------------------------------------

// cpu_util (no labels) against 8 gpu_util{gpu=...}: per GPU, how many of the
// last 100 observations had a busy CPU and an idle GPU (SageMaker's
// CPUBottleneck). The data makes the count cross the threshold now and then.
constexpr int gpus = 8;
constexpr int joint_window = 100;
constexpr int joint_threshold = 20;
constexpr const char* joint_rule =
    "rule bottleneck: when count((cpu_util > 90 and gpu_util < 10)[100]) > 20 do log";

struct JointData {
  std::vector<std::array<double, gpus + 1>> values;  // cpu, then the GPUs
  JointData() : values(pool_size) {
    std::mt19937_64 rng(11);
    for (int i = 0; i < pool_size; ++i) {
      // Busy phases (joint probability ~0.3) alternate with calm ones (0.01).
      const bool busy = (i / 128) % 2 == 0;
      std::uniform_real_distribution<double> cpu(busy ? 82 : 0, 100), gpu(0, busy ? 18 : 100);
      values[static_cast<std::size_t>(i)][0] = cpu(rng);
      for (int g = 1; g <= gpus; ++g) values[static_cast<std::size_t>(i)][static_cast<std::size_t>(g)] = gpu(rng);
    }
  }
};

const JointData& joint_data() {
  static const JointData d;
  return d;
}

struct JointEngine {
  vigil::Engine engine;
  std::array<vigil::SeriesId, gpus + 1> ids{};
  std::array<vigil::Sample, gpus + 1> samples{};
  JointEngine() : engine(compile(), options()) {
    ids[0] = *engine.series("cpu_util");
    for (int g = 0; g < gpus; ++g)
      ids[static_cast<std::size_t>(g + 1)] = *engine.series(fmt::format("gpu_util{{gpu=\"{}\"}}", g));
  }
  std::size_t observe(std::int64_t step, const std::array<double, gpus + 1>& v) {
    for (std::size_t i = 0; i < v.size(); ++i) samples[i] = {ids[i], v[i]};
    return engine.observe(step, samples).size();
  }
  static vigil::Program compile() {
    auto r = vigil::compile_string(joint_rule, "bench.rules");
    if (!r.ok()) die(r.format_diagnostics());
    return *r.program;
  }
  static vigil::EngineOptions options() {
    vigil::EngineOptions o;
    o.unbound = vigil::UnboundActions::record;
    return o;
  }
};

/// The same rule by hand: a ring of flags per GPU and the edge trigger. The
/// count is kept running (`Recount = false`: what one would write for this
/// one rule), or recounted over the ring at every observation as the engine
/// does for every range function (`Recount = true`).
template <bool Recount>
struct JointHandWritten {
  std::array<std::array<std::uint8_t, joint_window>, gpus> flags{};
  std::array<int, gpus> count{};
  std::array<bool, gpus> fired{};
  std::size_t n = 0;
  std::size_t observe(const std::array<double, gpus + 1>& v) {
    const std::size_t slot = n % joint_window;
    std::size_t firings = 0;
    for (std::size_t g = 0; g < gpus; ++g) {
      const std::uint8_t f = v[0] > 90 && v[g + 1] < 10;
      count[g] += f - flags[g][slot];
      flags[g][slot] = f;
      if constexpr (Recount) {
        int c = 0;
        for (auto x : flags[g]) c += x;
        count[g] = c;
      }
      if (n + 1 < joint_window) continue;
      const bool holds = count[g] > joint_threshold;
      firings += holds && !fired[g];
      fired[g] = holds;
    }
    ++n;
    return firings;
  }
};

/// The engine and a hand-written variant fire identically at every
/// observation (once per variant: benchmarks are entered repeatedly).
template <bool Recount>
void check_joint_once() {
  static bool checked = false;
  if (checked) return;
  const JointData& d = joint_data();
  JointEngine e;
  JointHandWritten<Recount> h;
  std::size_t total = 0;
  for (int i = 0; i < 4 * pool_size; ++i) {
    const auto& v = d.values[static_cast<std::size_t>(i % pool_size)];
    const auto fe = e.observe(i, v), fh = h.observe(v);
    if (fe != fh)
      die(fmt::format("count over condition: engine {} vs hand-written{} {} at {}", fe,
                      Recount ? " (recount)" : "", fh, i));
    total += fe;
  }
  if (total == 0) die("count over condition: workload never fires");
  checked = true;
}

void BM_CountOverCondition(benchmark::State& state) {
  const JointData& d = joint_data();
  check_joint_once<false>();
  JointEngine e;
  std::int64_t step = 0;
  for (; step < 2 * joint_window; ++step) e.observe(step, d.values[static_cast<std::size_t>(step % pool_size)]);
  std::size_t firings = 0;
  for (auto _ : state) {
    firings += e.observe(step, d.values[static_cast<std::size_t>(step % pool_size)]);
    ++step;
  }
  benchmark::DoNotOptimize(firings);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountOverCondition);

template <bool Recount>
void BM_CountOverCondition_HandWritten(benchmark::State& state) {
  check_joint_once<Recount>();
  const JointData& d = joint_data();
  JointHandWritten<Recount> h;
  std::size_t i = 0;
  for (; i < 2 * joint_window; ++i) h.observe(d.values[i % pool_size]);
  std::size_t firings = 0;
  for (auto _ : state) firings += h.observe(d.values[i++ % pool_size]);
  benchmark::DoNotOptimize(firings);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountOverCondition_HandWritten<false>)->Name("BM_CountOverCondition_HandWritten");
BENCHMARK(BM_CountOverCondition_HandWritten<true>)->Name("BM_CountOverCondition_HandWrittenRecount");

// ---- long windows (issue 14 §1) ----------------------------------------------------

// One rule over one series for a 100,000-step trace, a window of 10,000
// samples (or steps, or seconds): the cost of the whole replay against the
// same replay with a plain threshold rule (BM_Window/threshold), in the same
// run. Values: a noisy decaying loss with ties (quantised now and then) and
// a rare spike, one observation per step, one second apart; the `_walk`
// cases (engine alone) a random walk with the same ties instead, whose
// window neither trends one way nor stays put.
constexpr int window_trace_steps = 100000;

struct WindowCase {
  const char* name;
  const char* fn;      // registry name ("" : the threshold baseline)
  const char* window;  // "10000", "10000 steps", "10000s"
  const char* arg;     // a constant argument ("" : none)
  const char* test;    // what the value is compared with to fire (rarely; "": a condition)
  bool walk = false;   // over the random walk (BM_Window only)
};

const std::vector<WindowCase>& window_cases() {
  static const std::vector<WindowCase> cases{
      {"threshold", "", "", "", "> 100"},
      {"mean", "mean", "10000", "", "> 100"},
      {"sum", "sum", "10000", "", "> 1e9"},
      {"max", "max", "10000", "", "> 100"},
      {"min", "min", "10000", "", "< -100"},
      {"count_over_condition", "count", "10000", "", "> 9999"},
      {"var", "var", "10000", "", "> 100"},
      {"std", "std", "10000", "", "> 100"},
      {"slope", "slope", "10000", "", "> 1"},
      {"delta", "delta", "10000", "", "> 100"},
      {"rel_change", "rel_change", "10000", "", "> 100"},
      {"changes", "changes", "10000", "", "> 20000"},
      {"median", "median", "10000", "", "> 100"},
      {"quantile", "quantile", "10000", "0.95", "> 100"},
      {"zscore", "zscore", "10000", "", "> 1e6"},
      {"iqr_outlier", "iqr_outlier", "10000", "30", ""},  // a condition itself
      {"mean_steps", "mean", "10000 steps", "", "> 100"},
      {"max_seconds", "max", "10000s", "", "> 100"},
      {"median_seconds", "median", "10000s", "", "> 100"},
      {"median_walk", "median", "10000", "", "> 1000", true},
      {"iqr_outlier_walk", "iqr_outlier", "10000", "30", "", true},
  };
  return cases;
}

/// The range call of a case: `fn(loss[W])`, `fn(loss[W], arg)`, or for the
/// count over a condition `count((loss > 3)[W])`.
std::string window_call(const WindowCase& c) {
  if (std::string_view(c.name) == "count_over_condition")
    return fmt::format("count((loss > 3)[{}])", c.window);
  if (*c.arg) return fmt::format("{}(loss[{}], {})", c.fn, c.window, c.arg);
  return fmt::format("{}(loss[{}])", c.fn, c.window);
}

std::string window_rule(const WindowCase& c) {
  if (!*c.fn) return fmt::format("rule r: when loss {} do log\n", c.test);
  if (!*c.test) return fmt::format("rule r: when {} do log\n", window_call(c));
  return fmt::format("rule r: when {} {} do log\n", window_call(c), c.test);
}

const std::vector<double>& random_walk_trace() {
  static const std::vector<double> v = [] {
    std::mt19937_64 rng(15);
    std::normal_distribution<double> noise(0, 0.05);
    std::vector<double> out(window_trace_steps);
    double x = 3.0;
    for (int i = 0; i < window_trace_steps; ++i) {
      x += noise(rng);
      out[static_cast<std::size_t>(i)] = i % 7 == 0 ? std::round(x * 10) / 10 : x;  // ties
    }
    return out;
  }();
  return v;
}

const std::vector<double>& window_trace(bool walk = false) {
  if (walk) return random_walk_trace();
  static const std::vector<double> v = [] {
    std::mt19937_64 rng(14);
    std::normal_distribution<double> noise(0, 0.05);
    std::vector<double> out(window_trace_steps);
    for (int i = 0; i < window_trace_steps; ++i) {
      double x = 2.0 + 3.0 * std::exp(-i / 20000.0) + noise(rng);
      if (i % 7 == 0) x = std::round(x * 10) / 10;  // ties
      if (i % 33331 == 0) x += 50;                   // a spike
      out[static_cast<std::size_t>(i)] = x;
    }
    return out;
  }();
  return v;
}

vigil::EngineOptions record_options() {
  vigil::EngineOptions o;
  o.unbound = vigil::UnboundActions::record;
  return o;
}

/// Replays the trace through `program`; calls `each(i, firings)` per step.
template <class Each>
void replay_window_trace(const vigil::Program& program, Each each, bool walk = false) {
  vigil::Engine engine(program, record_options());
  const auto id = *engine.series("loss");
  const auto& v = window_trace(walk);
  for (int i = 0; i < window_trace_steps; ++i) {
    const vigil::Sample s{id, v[static_cast<std::size_t>(i)]};
    each(i, engine.observe(i, {&s, 1}, {.mode = "train", .time = 1000.0 + i}));
  }
}

vigil::Program compile_or_die(const std::string& text) {
  auto r = vigil::compile_string(text, "bench.rules");
  if (!r.ok()) die(r.format_diagnostics());
  return *r.program;
}

/// The engine's value of the case's range call agrees with the naive
/// recompute (the registry's kernel over the window's 10,000 samples) at
/// every 97th step once the window is full: exactly, except the sums and
/// what is built on them (1e-9 relative: see docs/semantics.md).
bool window_case_agrees(const WindowCase& c, std::string& why) {
  if (!*c.fn) return true;
  const std::string f = window_call(c);
  const auto program = compile_or_die("rule r: when " + f + " == " + f + " cooldown 1 samples do log\n");
  std::vector<double> got(window_trace_steps, std::nan(""));
  replay_window_trace(
      program,
      [&](int i, std::span<const vigil::Firing> fs) {
        if (!fs.empty() && fs[0].value) got[static_cast<std::size_t>(i)] = *fs[0].value;
      },
      c.walk);
  const bool condition = std::string_view(c.name) == "count_over_condition";
  const vigil::stdlib::FunctionDef* def = nullptr;
  for (const auto* d : vigil::stdlib::standard_functions().lookup(c.fn))
    if (d->kind == vigil::stdlib::FnKind::range &&
        condition == (d->params[0].type == vigil::stdlib::ArgType::condition_range))
      def = d;
  const std::vector<double> consts{*c.arg ? std::stod(c.arg) : 0.0};
  const std::string_view fn = c.fn;
  const bool exact = fn != "sum" && fn != "mean" && fn != "var" && fn != "std" &&
                     fn != "slope" && fn != "zscore";
  const auto& v = window_trace(c.walk);
  std::vector<double> values(10000), scratch(20000);
  std::vector<std::int64_t> steps(10000);
  // One sample per step and per second: every window kind holds the newest 10,000.
  for (int i = 9999 + 13; i < window_trace_steps; i += 97) {
    for (int k = 0; k < 10000; ++k) {
      const double x = v[static_cast<std::size_t>(i - 9999 + k)];
      values[static_cast<std::size_t>(k)] = condition ? (x > 3 ? 1 : 0) : x;
      steps[static_cast<std::size_t>(k)] = i - 9999 + k;
    }
    const vigil::stdlib::Window w{values.data(), steps.data(), values.size(), scratch.data()};
    const double want = def->range(w, consts);
    const double have = got[static_cast<std::size_t>(i)];
    const bool ok = exact ? (have == want || (std::isnan(have) && std::isnan(want)))
                          : vigil::bench::close(have, want, 1e-9);
    if (!ok) {
      why = fmt::format("{} at step {}: engine {} vs naive {}", f, i, have, want);
      return false;
    }
  }
  return true;
}

void BM_Window(benchmark::State& state, const WindowCase* c) {
  static std::vector<const WindowCase*> checked;
  if (std::find(checked.begin(), checked.end(), c) == checked.end()) {
    std::string why;
    if (!vigil::bench::expect(state, window_case_agrees(*c, why), why)) return;
    checked.push_back(c);
  }
  const auto program = compile_or_die(window_rule(*c));
  std::size_t firings = 0;
  for (auto _ : state)
    replay_window_trace(program, [&](int, std::span<const vigil::Firing> fs) { firings += fs.size(); }, c->walk);
  benchmark::DoNotOptimize(firings);
  state.SetItemsProcessed(state.iterations() * window_trace_steps);
  state.counters["firings"] = static_cast<double>(firings) / static_cast<double>(state.iterations());
}

// ---- the same windows over a JSONL replay ------------------------------------------

// BM_WindowTrace/<case>: the replay issue 14 measured (`rulecheck run` over a
// 100,000-step JSONL trace): the same trace written once to a JSONL file, read
// in every iteration with open_jsonl (the reader rulecheck uses) and fed to an
// engine the way rulecheck's Replay does: read keyed, each new key id of the
// reader interned with the engine once. The
// ratio against BM_WindowTrace/threshold is the measure: reading and
// parsing cost the same for every rule, a window's cost is what it adds.

/// The trace as a JSONL file in a fresh temp directory, removed at exit.
/// `{}` prints the shortest text that reads back as the same double, so the
/// reader hands the engine exactly the values of window_trace().
class WindowTraceFile {
 public:
  WindowTraceFile() {
    std::string dir = (std::filesystem::temp_directory_path() / "vigil_window_trace_XXXXXX").string();
    if (!::mkdtemp(dir.data())) die("mkdtemp: " + std::string(std::strerror(errno)));
    dir_ = dir;
    path_ = dir_ / "trace.jsonl";
    std::string text;
    const auto& v = window_trace();
    for (int i = 0; i < window_trace_steps; ++i)
      fmt::format_to(std::back_inserter(text), "{{\"step\": {}, \"time\": {}, \"values\": {{\"loss\": {}}}}}\n", i,
                     1000 + i, v[static_cast<std::size_t>(i)]);
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
      die("cannot write " + path_.string());
  }
  ~WindowTraceFile() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  WindowTraceFile(const WindowTraceFile&) = delete;
  WindowTraceFile& operator=(const WindowTraceFile&) = delete;
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  std::filesystem::path dir_, path_;
};

const WindowTraceFile& window_trace_file() {
  static const WindowTraceFile file;
  return file;
}

/// Replays the JSONL trace through `program`; calls `each(step, firings)` per
/// observation. Returns the number of observations read (dies on damage).
/// Read keyed, as rulecheck's Replay reads: each new key id of the reader
/// mapped to the engine's series once, no name looked up per sample.
template <class Each>
std::size_t replay_window_jsonl(const vigil::Program& program, Each each) {
  vigil::Engine engine(program, record_options());
  vigil::TraceError error;
  auto reader = vigil::open_jsonl(window_trace_file().path(), error);
  if (!reader) die(error.format());
  std::vector<std::optional<vigil::SeriesId>> ids;
  std::vector<vigil::Sample> samples;
  vigil::KeyedObservation obs;
  std::size_t n = 0;
  while (reader->next_keyed(obs)) {
    while (ids.size() < reader->key_count()) ids.push_back(engine.series(reader->key_name(ids.size())));
    samples.clear();
    for (const auto& s : obs.values)
      if (const auto& id = ids[s.key]) samples.push_back({*id, s.value});
    each(obs.step, engine.observe(obs.step, samples, {.mode = reader->mode_name(obs.mode), .time = obs.time}));
    ++n;
  }
  if (reader->error()) die(reader->error()->format());
  return n;
}

/// Every firing of `program` as (step, value), in memory and from the JSONL
/// file: equal (and the file holds every step) or `why` says where not.
bool window_trace_replays_agree(const vigil::Program& program, std::string& why) {
  using Fired = std::vector<std::pair<std::int64_t, double>>;
  auto record = [](Fired& out) {
    return [&out](std::int64_t step, std::span<const vigil::Firing> fs) {
      for (const auto& f : fs) out.emplace_back(step, f.value ? *f.value : std::nan(""));
    };
  };
  Fired memory, jsonl;
  auto to_memory = record(memory);
  replay_window_trace(program, [&](int i, std::span<const vigil::Firing> fs) { to_memory(i, fs); });
  const std::size_t n = replay_window_jsonl(program, record(jsonl));
  if (n != static_cast<std::size_t>(window_trace_steps)) {
    why = fmt::format("the JSONL trace gave {} observations, not {}", n, window_trace_steps);
    return false;
  }
  auto same = [](const auto& a, const auto& b) {
    return a.first == b.first && (a.second == b.second || (std::isnan(a.second) && std::isnan(b.second)));
  };
  if (memory.size() == jsonl.size() && std::equal(memory.begin(), memory.end(), jsonl.begin(), same))
    return true;
  why = fmt::format("{} firings in memory, {} from the JSONL trace", memory.size(), jsonl.size());
  const auto [m, j] = std::mismatch(memory.begin(), memory.end(), jsonl.begin(), jsonl.end(), same);
  if (m != memory.end()) why += fmt::format("; in memory: step {} value {}", m->first, m->second);
  if (j != jsonl.end()) why += fmt::format("; JSONL: step {} value {}", j->first, j->second);
  return false;
}

void BM_WindowTrace(benchmark::State& state, const WindowCase* c) {
  const auto program = compile_or_die(window_rule(*c));
  static std::vector<const WindowCase*> checked;
  if (std::find(checked.begin(), checked.end(), c) == checked.end()) {
    std::string why;
    // The timed rule fires rarely: the range call's value at every step
    // (`f == f` fires with it) must agree too.
    const std::string f = *c->fn ? window_call(*c) : std::string("loss");
    const auto every = compile_or_die("rule r: when " + f + " == " + f + " cooldown 1 samples do log\n");
    if (!vigil::bench::expect(state, window_trace_replays_agree(program, why) &&
                                         window_trace_replays_agree(every, why),
                              std::string(c->name) + ": " + why))
      return;
    checked.push_back(c);
  }
  std::size_t firings = 0;
  for (auto _ : state)
    replay_window_jsonl(program, [&](std::int64_t, std::span<const vigil::Firing> fs) { firings += fs.size(); });
  benchmark::DoNotOptimize(firings);
  state.SetItemsProcessed(state.iterations() * window_trace_steps);
  state.counters["firings"] = static_cast<double>(firings) / static_cast<double>(state.iterations());
}

const bool window_benchmarks_registered = [] {
  for (const auto& c : window_cases())
    benchmark::RegisterBenchmark(("BM_Window/" + std::string(c.name)).c_str(), BM_Window, &c)
        ->Unit(benchmark::kMillisecond);
  for (const auto& c : window_cases())
    if (!c.walk)
      benchmark::RegisterBenchmark(("BM_WindowTrace/" + std::string(c.name)).c_str(), BM_WindowTrace, &c)
          ->Unit(benchmark::kMillisecond);
  return true;
}();

// ---- compile benchmarks -------------------------------------------------------

/// A 1000-rule file in the shape of real ones: params, lets, templates and
/// their uses (local and std.), named rules with descriptions and every
/// clause, anonymous one-liners, actions with arguments.
const std::string& thousand_rules() {
  static const std::string text = [] {
    std::string out =
        "# generated benchmark rules\n"
        "param spike_k = 2.5\nparam floor = 1e-7\nparam factor = 0.5\n"
        "let gn_typical = median(grad_norm[200])\n"
        "let conv = grad_norm{layer=~\"conv.*\"}\n"
        "action notify(channel: string)\n"
        "rule spike(metric = metric_00, k = 3, window = 50):\n"
        "    when metric > k * median(metric[window]) for 2 samples\n"
        "    severity warning\n"
        "    do log\n"
        "rule stuck(metric = metric_00, n = 20):\n"
        "    when max(metric[n]) - min(metric[n]) < floor\n"
        "    do alert(\"series stuck\")\n"
        "rule drift(metric = metric_00, alpha = 0.1, limit = 0.8):\n"
        "    when ewma(metric, alpha) > limit\n"
        "    cooldown 10 steps\n"
        "    do reduce_lr(factor = factor)\n";
    for (int i = 0; i < 1000; ++i) {
      const std::string x = scalar_name(i % scalar_series);
      switch (i % 8) {
        case 0:
          out += fmt::format(
              "rule grad_{0} \"gradient norm of group {0} far above typical\":\n"
              "    when max(conv) > spike_k * gn_typical for {1} samples\n"
              "    after 100 steps\n    severity error\n    do skip_step, alert(\"grad spike {0}\")\n",
              i, 2 + i % 3);
          break;
        case 1: out += fmt::format("use spike(metric = {}, k = {}) as spike_{}\n", x, 2 + i % 4, i); break;
        case 2:
          out += fmt::format("use stuck(metric = {}, n = {}) as stuck_{} do notify(channel = \"#ml\")\n", x,
                             10 + i % 20, i);
          break;
        case 3:
          out += fmt::format("when {} > {} and mean({}[{} steps]) > 0.5 for 3 samples do log\n", x,
                             0.9 + 0.0001 * i, x, 10 + i % 50);
          break;
        case 4:
          out += fmt::format(
              "rule val_{0}: when rel_change(val_loss[5 evals]) > -0.82% in eval cooldown 2 evals "
              "severity info do log\n",
              i);
          break;
        case 5: out += fmt::format("use drift(metric = {}, alpha = 0.{}) as drift_{}\n", x, 1 + i % 8, i); break;
        case 6:
          out += fmt::format(
              "rule trend_{0} \"slope positive over a window\":\n"
              "    when slope({1}[{2} steps]) > 0 and not is_nan({1})\n"
              "    every {3} steps\n    severity critical\n    do checkpoint, stop(\"trend {0}\")\n",
              i, x, 100 + i % 400, 10 + i % 90);
          break;
        case 7:
          out += fmt::format("use std.loss_spike(metric = {}, k = {}, window = {}) as loss_spike_{}\n", x,
                             3 + i % 3, 50 + i % 100, i);
          break;
      }
    }
    return out;
  }();
  return text;
}

void BM_Compile_1000_rules(benchmark::State& state) {
  const std::string& text = thousand_rules();
  std::size_t rules = 0;
  for (auto _ : state) {
    auto result = vigil::compile_string(text, "bench.rules");
    if (!result.ok()) {
      state.SkipWithError(result.format_diagnostics().c_str());
      return;
    }
    rules = result.program->rules().size();
    benchmark::DoNotOptimize(result);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["rules"] = static_cast<double>(rules);
}
BENCHMARK(BM_Compile_1000_rules)->Unit(benchmark::kMillisecond);

void BM_Parse_1000_rules(benchmark::State& state) {
  vigil::SourceSet sources;
  const std::uint32_t file = sources.add("bench.rules", thousand_rules());
  std::size_t statements = 0;
  for (auto _ : state) {
    auto result = vigil::grammar::parse(sources, file);
    if (!result.ok()) {
      state.SkipWithError("parse failed");
      return;
    }
    statements = result.file.statements.size();
    benchmark::DoNotOptimize(result);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * thousand_rules().size()));
  state.counters["statements"] = static_cast<double>(statements);
}
BENCHMARK(BM_Parse_1000_rules)->Unit(benchmark::kMillisecond);

// BM_FreshPages/<how>: what rulecheck's memory costs before it holds
// anything (docs/performance.md, "Page faults"): 8 MiB of fresh anonymous
// memory written one byte per page, each page faulted in on first touch
// (touch) or all mapped first by one madvise(MADV_POPULATE_WRITE)
// (populate, what tools/rulecheck/memory.cpp does). Both must leave every
// page holding its byte; populate is skipped where the kernel lacks it.
void BM_FreshPages(benchmark::State& state, bool populate) {
  constexpr std::size_t bytes = std::size_t{8} << 20, page = 4096;
  std::size_t pages = 0;
  for (auto _ : state) {
    auto* p = static_cast<unsigned char*>(
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      return;
    }
    if (populate && ::madvise(p, bytes, 23 /* MADV_POPULATE_WRITE */) != 0) {
      ::munmap(p, bytes);
      state.SkipWithError("no MADV_POPULATE_WRITE here (Linux < 5.14)");
      return;
    }
    for (std::size_t i = 0; i < bytes; i += page) p[i] = static_cast<unsigned char>(i / page);
    pages = 0;
    for (std::size_t i = 0; i < bytes; i += page) pages += p[i] == static_cast<unsigned char>(i / page);
    ::munmap(p, bytes);
  }
  if (!vigil::bench::expect(state, pages == bytes / page, "a page lost its byte")) return;
  state.counters["per_page"] =
      benchmark::Counter(static_cast<double>(state.iterations() * pages),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK_CAPTURE(BM_FreshPages, touch, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FreshPages, populate, true)->Unit(benchmark::kMillisecond);

}  // namespace

VIGIL_BENCHMARK_MAIN()
