// Running windows (interp/window_state.hpp) against the naive recompute, on
// long windows that slide by samples, steps and time, with gaps:
// 1. every range function's value at every observation equals the
//    registry's own kernel applied to the window recomputed here from the
//    whole trace (the naive evaluation): exactly for min/max/count/median/
//    quantile/iqr_outlier/delta/rel_change/changes/any_nan, and for sum and
//    mean within the kernel's own rounding (the running sum is the correctly
//    rounded one, the kernel's Neumaier sum is within an ulp or two of it,
//    so the bound is 1e-13 of the sum of magnitudes); var/std/zscore/slope
//    within 1e-9 relative to a two-pass __float128 recompute (the
//    registry's Welford kernel is less accurate than the running window on
//    ill-conditioned windows, so it is not the oracle for those);
// 2. saving the engine's state anywhere and continuing in a fresh engine is
//    invisible: values after the split are bit-identical (a running window
//    is a function of its window's samples, rebuilt after restore).
//
// Programs: one rule `when F == F do log` (fires with F's value whenever F is
// defined and not NaN) with F = fn(x[W]) or fn((x * 2)[W]). Traces: up to
// 1500 observations of x, steps with gaps (0, 1, 2, 7, and rarely 60), times
// with gaps, values from a per-trace normal distribution mixed with ties,
// sometimes NaN and +-Inf.

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "interp/window_state.hpp"
#include "stdlib/functions.hpp"
#include "tests/reference/xorshift.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"

namespace {

namespace stdlib = vigil::stdlib;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

struct Obs {
  std::int64_t step;
  double time;  // NaN: none
  double x;
};

struct Case {
  std::string fn;
  double q = 0.5;  // quantile's q, iqr_outlier's k
  std::string unit;  // "", "steps", "s"
  int amount = 1;
  bool doubled = false;  // fn((x * 2)[W])
  std::vector<Obs> obs;
};

std::string call_text(const Case& c) {
  const std::string range =
      (c.doubled ? "(x * 2)" : "x") + std::string("[") + std::to_string(c.amount) +
      (c.unit.empty() ? "" : c.unit == "s" ? "s" : " steps") + "]";
  if (c.fn == "quantile" || c.fn == "iqr_outlier") {
    std::ostringstream q;
    q.precision(17);
    q << c.q;
    return c.fn + "(" + range + ", " + q.str() + ")";
  }
  if (c.fn == "count_true") return "count((x > 0.5)[" + range.substr(range.find('[') + 1) + ")";
  return c.fn + "(" + range + ")";
}

std::string program_text(const Case& c) {
  const std::string f = call_text(c);
  return "rule r: when " + f + " == " + f + " cooldown 1 samples do log\n";
}

/// var/std/zscore/slope recomputed two-pass in __float128: the registry's
/// one-pass Welford kernel is itself off by ~1e-8 relative on
/// ill-conditioned windows (1e6 +- 1e-3), where the running window's exact
/// sums are not, so it cannot be the oracle there.
std::optional<double> two_pass(const std::string& fn, const std::vector<double>& v,
                               const std::vector<std::int64_t>& steps) {
  using Q = __float128;  // 113 bits: exact enough to judge double-double results
  for (double x : v)
    if (std::isnan(x)) return std::nullopt;
  const std::size_t n = fn == "zscore" ? v.size() - 1 : v.size();
  Q mean = 0, mx = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mean += v[i];
    mx += static_cast<Q>(steps[i]);
  }
  mean /= static_cast<Q>(n);
  mx /= static_cast<Q>(n);
  Q m2 = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Q d = v[i] - mean, dx = static_cast<Q>(steps[i]) - mx;
    m2 += d * d;
    sxx += dx * dx;
    sxy += dx * d;
  }
  const Q var = m2 / static_cast<Q>(n);
  const long double sd = std::sqrt(static_cast<long double>(var));
  if (fn == "var") return static_cast<double>(var);
  if (fn == "std") return static_cast<double>(sd);
  if (fn == "slope") {
    if (sxx == 0) return std::nullopt;
    return static_cast<double>(sxy / sxx);
  }
  const Q diff = v.back() - mean;
  if (diff == 0) return 0.0;
  if (var == 0) return diff > 0 ? INFINITY : -INFINITY;
  return static_cast<double>(static_cast<long double>(diff) / sd);
}

/// The naive evaluation: the window recomputed from the whole trace, the
/// registry's kernel applied to it. nullopt: no value (too few samples, NaN).
std::vector<std::optional<double>> naive(const Case& c) {
  const stdlib::FunctionDef* def = nullptr;
  const std::string name = c.fn == "count_true" ? "count" : c.fn;
  for (const auto* d : stdlib::standard_functions().lookup(name))
    if (d->kind == stdlib::FnKind::range &&
        (c.fn == "count_true") == (d->params[0].type == stdlib::ArgType::condition_range))
      def = d;
  std::vector<std::optional<double>> out;
  std::vector<double> values, scratch;
  std::vector<std::int64_t> steps;
  for (std::size_t i = 0; i < c.obs.size(); ++i) {
    const Obs& now = c.obs[i];
    values.clear();
    steps.clear();
    for (std::size_t j = 0; j <= i; ++j) {
      const Obs& o = c.obs[j];
      bool in = false;
      if (c.unit.empty())
        in = j + static_cast<std::size_t>(c.amount) > i;
      else if (c.unit == "steps")
        in = o.step > now.step - c.amount && o.step <= now.step;
      else
        in = !std::isnan(now.time) && o.time > now.time - c.amount && o.time <= now.time;
      if (!in) continue;
      double v = c.doubled ? o.x * 2 : o.x;
      if (c.fn == "count_true") v = v > 0.5 ? 1 : 0;
      values.push_back(v);
      steps.push_back(o.step);
    }
    if (c.unit.empty() && values.size() < static_cast<std::size_t>(c.amount)) values.clear();
    if (values.empty() || values.size() < def->min_samples) {
      out.emplace_back();
      continue;
    }
    const bool any_inf = std::any_of(values.begin(), values.end(), [](double x) { return std::isinf(x); });
    if (!any_inf && (c.fn == "var" || c.fn == "std" || c.fn == "zscore" || c.fn == "slope")) {
      out.push_back(two_pass(c.fn, values, steps));
      continue;
    }
    scratch.assign(2 * values.size(), 0);
    const stdlib::Window w{values.data(), steps.data(), values.size(), scratch.data()};
    const std::vector<double> consts{c.q};
    const double v = def->range(w, consts);
    out.push_back(std::isnan(v) ? std::nullopt : std::optional<double>(v));
  }
  return out;
}

/// The engine's value at each observation (nullopt: no firing); with
/// `split_at`, the engine is saved there and a fresh one restored.
std::vector<std::optional<double>> engine_values(const vigil::Program& program, const Case& c,
                                                 std::optional<std::size_t> split_at = {}) {
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  auto engine = std::make_unique<vigil::Engine>(program, options);
  std::vector<std::optional<double>> out;
  for (std::size_t i = 0; i < c.obs.size(); ++i) {
    if (split_at && i == *split_at) {
      const std::string state = engine->save_state();
      engine = std::make_unique<vigil::Engine>(program, options);
      engine->restore_state(state);
    }
    const auto x = *engine->series("x");
    const vigil::Sample s{x, c.obs[i].x};
    auto fs = engine->observe(c.obs[i].step, {&s, 1}, {.mode = "train", .time = c.obs[i].time});
    out.push_back(fs.empty() ? std::nullopt : fs[0].value);
  }
  return out;
}

bool exact_kind(const std::string& fn) {
  return fn != "sum" && fn != "mean" && fn != "var" && fn != "std" && fn != "zscore" &&
         fn != "slope";
}

/// The scale a value's rounding error is measured against.
double scale_of(const Case& c, std::size_t i, double want) {
  if (c.fn == "sum" || c.fn == "mean") {
    // Σ|x| over the window, per sample for the mean (a safe over-estimate:
    // the whole trace so far).
    double s = 0;
    std::size_t n = 0;
    for (std::size_t j = 0; j <= i; ++j) {
      const double v = std::abs(c.obs[j].x) * (c.doubled ? 2 : 1);
      if (std::isfinite(v)) {
        s += v;
        ++n;
      }
    }
    return c.fn == "sum" ? s : s / static_cast<double>(std::max<std::size_t>(n, 1));
  }
  // var/std/zscore/slope against the __float128 two-pass: relative to the
  // value, plus what double-double leaves of the magnitudes (2^-100 of the
  // largest square) where the variance cancels to almost nothing.
  double m = 0;
  for (std::size_t j = 0; j <= i; ++j)
    if (std::isfinite(c.obs[j].x)) m = std::max(m, std::abs(c.obs[j].x) * (c.doubled ? 2 : 1));
  return std::abs(want) + 1e-20 * m * m;
}

rc::Gen<Case> gen_case() {
  return rc::gen::exec([] {
    static const std::vector<std::string> fns{
        "sum",    "mean",       "min",   "max",     "count_true", "var",         "std",
        "median", "quantile",   "delta", "rel_change", "slope",   "changes",     "any_nan",
        "zscore", "iqr_outlier"};
    Case c;
    c.fn = *rc::gen::elementOf(fns);
    if (c.fn == "quantile") c.q = *rc::gen::elementOf(std::vector<double>{0, 0.1, 0.25, 0.5, 0.9, 0.95, 1});
    if (c.fn == "iqr_outlier") c.q = *rc::gen::elementOf(std::vector<double>{0.5, 1.5, 3});
    const int unit = *rc::gen::inRange(0, 3);
    c.unit = unit == 0 ? "" : unit == 1 ? "steps" : "s";
    c.amount = *rc::gen::inRange(1, 400);
    if (c.unit.empty() && c.amount < 3) c.amount = 3;  // the checker rejects x[1] for delta, zscore, ...
    c.doubled = c.fn != "count_true" && *rc::gen::inRange(0, 5) == 0;
    const int n = *rc::gen::inRange(1, 1500);
    const double mu = *rc::gen::elementOf(std::vector<double>{0, 1, -3.5, 1000, 1e6});
    const double sigma = *rc::gen::elementOf(std::vector<double>{1e-3, 0.1, 1, 50});
    const bool nans = *rc::gen::inRange(0, 2) == 0;
    const bool infs = *rc::gen::inRange(0, 4) == 0;
    // Half the traces are timed throughout (time windows slide as running
    // windows); the others have untimed observations (recomputed).
    const bool untimed = *rc::gen::inRange(0, 2) == 0;
    const std::uint64_t seed = *rc::gen::arbitrary<std::uint64_t>();
    vigil_test::Xorshift next{seed | 1};  // cheap randomness inside one case
    auto uniform = [&] { return next.uniform(); };
    std::int64_t step = *rc::gen::inRange(0, 100);
    double time = 1000;
    for (int i = 0; i < n; ++i) {
      Obs o{step, time, 0};
      const auto pick = next() % 1000;
      if (nans && pick < 4)
        o.x = nan;
      else if (infs && pick < 7)
        o.x = (pick & 1) ? INFINITY : -INFINITY;
      else if (pick < 150)
        o.x = static_cast<double>(next() % 3);  // ties
      else  // Box-Muller
        o.x = mu + sigma * std::sqrt(-2 * std::log(uniform() + 1e-300)) *
                       std::cos(6.283185307179586 * uniform());
      if (untimed && next() % 50 == 0) o.time = nan;
      c.obs.push_back(o);
      const auto gap = next() % 100;
      step += gap < 5 ? 0 : gap < 80 ? 1 : gap < 95 ? 2 : gap < 99 ? 7 : 60;
      time += static_cast<double>(next() % 4) * 0.5;
    }
    return c;
  });
}

std::string fmt17(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::string dump(const Case& c, std::size_t at) {
  std::ostringstream os;
  os.precision(17);
  os << program_text(c) << "at observation " << at << " of " << c.obs.size() << "\n";
  const std::size_t from = at > 12 ? at - 12 : 0;
  for (std::size_t i = from; i <= at && i < c.obs.size(); ++i)
    os << "  step " << c.obs[i].step << " t=" << c.obs[i].time << " x=" << c.obs[i].x << "\n";
  return os.str();
}

RC_GTEST_PROP(RunningWindowProperty, MatchesTheNaiveRecomputeAndSurvivesRestore, ()) {
  const Case c = *gen_case();
  auto compiled = vigil::compile_string(program_text(c), "window.rules");
  if (!compiled.ok()) RC_FAIL(program_text(c) + compiled.format_diagnostics());
  const auto want = naive(c);
  const auto got = engine_values(*compiled.program, c);
  RC_ASSERT(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!want[i] || !got[i]) {
      if (want[i].has_value() != got[i].has_value())
        RC_FAIL(std::string(got[i] ? "only the engine" : "only the naive") + " has a value\n" +
                dump(c, i));
      continue;
    }
    const double a = *got[i], b = *want[i];
    if (exact_kind(c.fn) || std::isinf(a) || std::isinf(b)) {
      if (!(a == b)) RC_FAIL("engine " + std::to_string(a) + " != naive " + std::to_string(b) +
                             "\n" + dump(c, i));
      continue;
    }
    const double tol = (c.fn == "sum" || c.fn == "mean" ? 1e-13 : 1e-9) * scale_of(c, i, b);
    if (!(std::abs(a - b) <= tol))
      RC_FAIL("engine " + fmt17(a) + " vs naive " + fmt17(b) + " beyond " +
              std::to_string(tol) + "\n" + dump(c, i));
  }
  // Checkpoint/resume: bit-identical continuation.
  const std::size_t split = *rc::gen::inRange<std::size_t>(0, c.obs.size());
  const auto resumed = engine_values(*compiled.program, c, split);
  for (std::size_t i = 0; i < got.size(); ++i) {
    // slope re-chooses its origin step on a rebuild: equal to double-double
    // precision (window_state.hpp); everything else to the bit.
    const bool same =
        got[i].has_value() == resumed[i].has_value() &&
        (!got[i] || *got[i] == *resumed[i] ||
         (c.fn == "slope" && std::abs(*got[i] - *resumed[i]) <= 1e-12 * std::abs(*got[i])));
    if (!same) RC_FAIL("restore at " + std::to_string(split) + " changed the value\n" + dump(c, i));
  }
}

// A long sum whose terms cancel: the running sum stays exact (the correctly
// rounded sum), where a running float sum would drift by the magnitudes it
// has seen.
bool same_bits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  std::uint64_t x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}

/// quantile of the window by a stable sort: the order (value, sample
/// number) the running structure keeps, so even the sign of a zero among
/// tied zeros must agree. stdlib's interpolation between closest ranks.
double sorted_quantile(std::vector<double> v, double q) {
  std::stable_sort(v.begin(), v.end(), [](double a, double b) { return a < b; });
  const double h = (static_cast<double>(v.size()) - 1) * q;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= v.size() || h == static_cast<double>(lo)) return v[lo];
  return v[lo] + (h - static_cast<double>(lo)) * (v[lo + 1] - v[lo]);
}

// The order statistics' storage (LineAllocator): a 4-ary heap's children of
// node i (4i + 1 to 4i + 4) and a block of doubles each start a cache line,
// at every capacity the vector grows through, and growth keeps the values.
TEST(LineAllocator, PutsElementFirstOnACacheLine) {
  using vigil::interp::LineAllocator;
  using vigil::interp::OrderNode;
  auto line_of = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64; };
  std::vector<OrderNode, LineAllocator<OrderNode, 1>> heap;
  std::vector<double, LineAllocator<double, 0>> pool;
  for (std::uint64_t i = 0; i < 70000; ++i) {
    heap.push_back({i * 3, i});
    pool.push_back(static_cast<double>(i));
    if (heap.size() == heap.capacity()) {  // about to move: check where it is now
      ASSERT_EQ(line_of(heap.data() + 1), 0u) << "capacity " << heap.capacity();
      ASSERT_EQ(line_of(pool.data()), 0u) << "capacity " << pool.capacity();
    }
  }
  for (std::uint64_t i = 0; i < 70000; ++i) {
    ASSERT_EQ(heap[i].key, i * 3);
    ASSERT_EQ(heap[i].k, i);
    ASSERT_EQ(pool[i], static_cast<double>(i));
  }
  ASSERT_EQ(line_of(heap.data() + 1), 0u);
}

// The order statistics of median/quantile/iqr_outlier (RunningWindow::RankSplit:
// two heaps split at the quantile's rank; iqr_outlier's OrderBlocks, or its
// two splits past a bound set low here) driven directly: windows of up to
// 3000 samples (the rank's split moved, the position ring regrown) that slide by random amounts,
// change length, jump and move back (rebuilds), over values with many
// ties, both zeros and both infinities, sometimes NaN. Every value must be
// bit-identical to a stable sort of the window, and equal to the registry's
// kernel.
RC_GTEST_PROP(OrderStatistics, RankSplitMatchesASortOfTheWindow, ()) {
  using vigil::interp::RunKind;
  const auto kind = *rc::gen::elementOf(
      std::vector<RunKind>{RunKind::median, RunKind::quantile, RunKind::iqr_outlier});
  const double q = kind == RunKind::quantile
                       ? *rc::gen::elementOf(std::vector<double>{0, 0.01, 0.25, 0.5, 0.9, 0.999, 1})
                       : kind == RunKind::iqr_outlier ? *rc::gen::elementOf(std::vector<double>{0.5, 1.5})
                                                      : 0.5;
  const int n = *rc::gen::inRange(1, 4000);
  const int palette = *rc::gen::inRange(0, 3);  // 0: few values (ties), 1: spread, 2: mixed
  const bool nans = *rc::gen::inRange(0, 4) == 0;
  vigil_test::Xorshift next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  vigil::interp::History h;
  h.reserve(8192);  // nothing is evicted: every window below stays held
  const double few[] = {0.0, -0.0, 1.0, -1.0, 2.5, INFINITY, -INFINITY};
  std::vector<double> values;
  for (int i = 0; i < n; ++i) {
    const auto pick = next() % 1000;
    double v;
    if (nans && pick < 2)
      v = nan;
    else if (palette == 0 || (palette == 2 && pick < 500))
      v = few[next() % 7];
    else
      v = static_cast<double>(static_cast<std::int64_t>(next() % 2000001) - 1000000) / 1000.0;
    values.push_back(v);
  }
  const stdlib::FunctionDef* def = nullptr;
  const char* name = kind == RunKind::median ? "median" : kind == RunKind::quantile ? "quantile" : "iqr_outlier";
  for (const auto* d : stdlib::standard_functions().lookup(name))
    if (d->kind == stdlib::FnKind::range) def = d;
  RC_ASSERT(def != nullptr);
  const double consts[] = {q};
  const std::size_t min_n = kind == RunKind::iqr_outlier ? 3 : 1;

  vigil::interp::RunningWindow run;
  // iqr_outlier: its sorted blocks (the default bound), the two heaps from
  // the start, or the blocks until the window grows past a bound and the heaps after.
  if (kind == RunKind::iqr_outlier)
    run.set_iqr_blocks_up_to(*rc::gen::elementOf(std::vector<std::size_t>{std::size_t{1} << 16, 0, 100, 1000}));
  std::vector<double> scratch;
  std::uint64_t lo = 0, hi = 0;
  std::size_t width = 1 + next() % 3000;
  for (int i = 0; i < n; ++i) {
    h.put(values[static_cast<std::size_t>(i)], i, static_cast<double>(i), 0);
    const auto how = next() % 100;
    if (how < 3) width = 1 + next() % 3000;           // a new length
    hi = static_cast<std::uint64_t>(i) + 1;
    if (how >= 3 && how < 5 && hi > 1) hi -= next() % std::min<std::uint64_t>(hi - 1, 50);  // back
    lo = hi > width ? hi - width : 0;
    if (hi - lo < min_n) continue;
    const auto got = run.update(kind, h, lo, hi, consts);
    RC_ASSERT(got.has_value());
    // Checked against the O(W log W) sorts at one step in 16 and around
    // every jump (the structure is updated at every step all the same).
    if (how >= 5 && next() % 16 != 0) continue;
    std::vector<double> w(values.begin() + static_cast<std::ptrdiff_t>(lo),
                          values.begin() + static_cast<std::ptrdiff_t>(hi));
    double want;
    if (std::any_of(w.begin(), w.end(), [](double v) { return std::isnan(v); })) {
      want = nan;
    } else if (kind == RunKind::iqr_outlier) {
      const double latest = w.back();
      w.pop_back();
      const double q1 = sorted_quantile(w, 0.25), q3 = sorted_quantile(w, 0.75);
      const double iqr = q3 - q1;
      want = (latest < q1 - q * iqr || latest > q3 + q * iqr) ? 1 : 0;
    } else {
      want = sorted_quantile(w, q);
    }
    if (!same_bits(*got, want))
      RC_FAIL(std::string(name) + " over [" + std::to_string(lo) + ", " + std::to_string(hi) + "): " +
              fmt17(*got) + " vs sorted " + fmt17(want));
    std::vector<std::int64_t> steps(w.size() + 1, 0);
    std::vector<double> kw(values.begin() + static_cast<std::ptrdiff_t>(lo),
                           values.begin() + static_cast<std::ptrdiff_t>(hi));
    scratch.resize(2 * kw.size());
    const double kernel = def->range({kw.data(), steps.data(), kw.size(), scratch.data()}, std::span<const double>(consts));
    if (!(kernel == *got || (std::isnan(kernel) && std::isnan(*got))))
      RC_FAIL(std::string(name) + ": " + fmt17(*got) + " vs kernel " + fmt17(kernel));
  }
}

using vigil_test::Xorshift;

// The sorted blocks of iqr_outlier (interp::OrderBlocks) driven directly,
// both cursors read at independent quantiles: values with many ties, both
// zeros and both infinities slide through windows of 1 to 6,000 (blocks
// split, merge, empty and regroup), sometimes cleared and refilled as a
// rebuild does. Every quantile must be bit-identical to a stable sort of
// the window (the sign of a zero among tied zeros included), and the block
// count must stay within its bound.
RC_GTEST_PROP(OrderStatistics, OrderBlocksMatchASortOfTheWindow, ()) {
  const int n = *rc::gen::inRange(1, 9000);
  const int palette = *rc::gen::inRange(0, 3);  // 0: few values (ties), 1: spread, 2: mixed
  Xorshift next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  const double few[] = {0.0, -0.0, 1.0, -1.0, 2.5, INFINITY, -INFINITY};
  std::vector<double> values;
  for (int i = 0; i < n; ++i) {
    const auto pick = next() % 1000;
    if (palette == 0 || (palette == 2 && pick < 500))
      values.push_back(few[next() % 7]);
    else
      values.push_back(static_cast<double>(static_cast<std::int64_t>(next() % 2000001) - 1000000) / 1000.0);
  }
  const double qs[] = {0, 1, 0.25, 0.75, 0.5, 0.01, 0.999};
  auto pick_q = [&] {
    return next() % 2 ? qs[next() % 7] : static_cast<double>(next() % 1000001) / 1e6;
  };
  auto widths = [&]() -> std::size_t {
    switch (next() % 4) {
      case 0: return 1;
      case 1: return 1 + next() % 40;
      default: return 1 + next() % 6000;
    }
  };
  vigil::interp::OrderBlocks blocks;
  std::size_t lo = 0, width = widths();
  for (std::size_t hi = 1; hi <= values.size(); ++hi) {
    blocks.reserve(hi - lo);
    blocks.insert(values[hi - 1]);
    while (hi - lo > width) blocks.erase(values[lo++]);
    const auto how = next() % 100;
    if (how < 2) width = widths();
    if (how == 2) {  // as a rebuild: cleared, the window inserted again
      blocks.clear();
      for (std::size_t k = lo; k < hi; ++k) blocks.insert(values[k]);
    }
    RC_ASSERT(blocks.size() == hi - lo);
    RC_ASSERT(blocks.blocks() <= 8 * blocks.size() / (3 * vigil::interp::OrderBlocks::C) + 1);
    if (how > 2 && next() % 8 != 0) continue;
    const std::vector<double> w(values.begin() + static_cast<std::ptrdiff_t>(lo),
                                values.begin() + static_cast<std::ptrdiff_t>(hi));
    for (int c = 0; c < 2; ++c) {
      const double q = pick_q();
      const double got = blocks.quantile(c, q), want = sorted_quantile(w, q);
      if (!same_bits(got, want))
        RC_FAIL("cursor " + std::to_string(c) + " at q " + fmt17(q) + " over [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "): " + fmt17(got) + " vs sorted " + fmt17(want));
    }
  }
}

// A long window: 50,000 values sliding over 200,000 (a trend, a random walk
// and noise with ties), both quartiles read at every step (the cursors move
// a little at a time, as in a replay) and checked against a sort now and
// then; the directory has more groups than it scans (binary search).
TEST(OrderStatistics, OrderBlocksOverALongWindow) {
  Xorshift next{14};
  std::vector<double> values;
  double walk = 0;
  for (int i = 0; i < 200000; ++i) {
    const double noise = static_cast<double>(next() % 2001) / 1000.0 - 1.0;
    walk += noise;
    const int part = i / 70000;
    values.push_back(part == 0 ? 1e4 - 0.1 * i + noise : part == 1 ? walk : std::round(noise * 4) / 4);
  }
  vigil::interp::OrderBlocks blocks;
  const std::size_t width = 50000;
  std::size_t lo = 0;
  for (std::size_t hi = 1; hi <= values.size(); ++hi) {
    blocks.reserve(hi - lo);
    blocks.insert(values[hi - 1]);
    if (hi - lo > width) blocks.erase(values[lo++]);
    const double q1 = blocks.quantile(0, 0.25), q3 = blocks.quantile(1, 0.75);
    if (hi % 9973 != 0) continue;
    const std::vector<double> w(values.begin() + static_cast<std::ptrdiff_t>(lo),
                                values.begin() + static_cast<std::ptrdiff_t>(hi));
    EXPECT_TRUE(same_bits(q1, sorted_quantile(w, 0.25))) << hi;
    EXPECT_TRUE(same_bits(q3, sorted_quantile(w, 0.75))) << hi;
    EXPECT_LE(blocks.blocks(), 8 * blocks.size() / (3 * vigil::interp::OrderBlocks::C) + 1);
    // More than 64 directory groups: the groups are binary-searched.
    if (hi > width) {
      EXPECT_GT(blocks.blocks(), 64 * vigil::interp::OrderBlocks::G) << hi;
    }
  }
}


/// A value built to be hard for an exact sum, in one of four styles (mixed
/// with the others by `pick`): sums at or next to a halfway point between
/// doubles (1 and 2 with their half-ulps, 2^-53 and 2^-54, and crumbs far
/// below, 2^-106...), wide magnitudes, the negation of an earlier value of
/// `v` (cancellation), else `plain(sign)`; never beyond 1e150.
template <class Plain>
double hard_value(Xorshift& next, int style, std::uint64_t pick, const std::vector<double>& v,
                  Plain plain) {
  const double sign = (next() & 1) ? 1.0 : -1.0;
  double x;
  if (style == 0 || pick == 0) {
    static constexpr int exps[] = {0, 1, 52, 53, 54, 106, 107, 160};
    x = sign * std::ldexp(1.0 + static_cast<double>(next() % 2), -exps[next() % 8]);
  } else if (style == 1 || pick == 1) {
    x = sign * std::ldexp(static_cast<double>(next() >> 11) + 1, static_cast<int>(next() % 1200) - 1050);
  } else if (style == 2 && pick < 4 && !v.empty()) {
    x = -v[next() % v.size()];
  } else {
    x = plain(sign);
  }
  return std::abs(x) <= 1e150 ? x : 1;
}

// ExactSum's compensated fast path (track(true), used by sum and mean)
// against the digits alone: after every addition or removal of a sliding
// window of values built to be hard -- magnitudes from 1e-300 to 1e150,
// sums at and next to halfway points (ties to even), sums that cancel to
// nothing or to a tiny rest -- value() must be bit-identical to an
// untracked ExactSum fed the same values. (Returning the compensated sum
// without the bound's check fails here within the first few cases.)
RC_GTEST_PROP(ExactSumProperty, CompensatedReadOutIsTheCorrectlyRoundedSum, ()) {
  const int n = *rc::gen::inRange(1, 3000);
  const auto width = static_cast<std::size_t>(*rc::gen::inRange(1, 200));
  const int style = *rc::gen::inRange(0, 4);
  Xorshift next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    const auto pick = next() % 8;
    v.push_back(hard_value(next, style, pick, v, [&](double sign) {
      return sign * (static_cast<double>(next() >> 11) / 9007199254740992.0) * 1000;
    }));
  }
  vigil::interp::ExactSum fast, digits;
  fast.track(true);
  for (std::size_t i = 0; i < v.size(); ++i) {
    fast.add(v[i]);
    digits.add(v[i]);
    if (i >= width) {
      fast.remove(v[i - width]);
      digits.remove(v[i - width]);
    }
    const double a = fast.value(), b = digits.value();
    if (!same_bits(a, b))
      RC_FAIL("after " + std::to_string(i) + ": compensated " + fmt17(a) + " vs digits " + fmt17(b));
  }
}

// The double-double read-out (var/std/zscore/slope) is canonical -- hi the
// correctly rounded sum, lo the correctly rounded rest -- whichever form
// holds the sum: the fast 256-bit form (anchored at the first summand, moved
// down as lower ones come, left for the digits when a summand is too far
// off) and the digits must give the same bits, and so must the one-step
// squares and products against their two-product halves. Values as above,
// plus squares and step products of metric-like values.
RC_GTEST_PROP(ExactSumProperty, DoubleDoubleReadOutIsCanonicalInEitherForm, ()) {
  const int n = *rc::gen::inRange(1, 1500);
  const auto width = static_cast<std::size_t>(*rc::gen::inRange(1, 200));
  const int style = *rc::gen::inRange(0, 4);
  Xorshift next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  std::vector<double> v;
  std::vector<std::int64_t> d;
  for (int i = 0; i < n; ++i) {
    const auto pick = next() % 8;
    v.push_back(hard_value(next, style, pick, v, [&](double sign) {
      // Metric-like: near 2, some with one decimal.
      const double x = sign * (2 + static_cast<double>(next() >> 11) / 9007199254740992.0);
      return pick == 2 ? std::round(x * 10) / 10 : x;
    }));
    d.push_back(pick == 3 ? static_cast<std::int64_t>(next() % (std::uint64_t{1} << 40)) - (std::int64_t{1} << 39)
                          : static_cast<std::int64_t>(next() % 20000) - 10000);
  }
  using vigil::interp::ExactSum;
  ExactSum fast, digits, sq, sq_halves, prod, prod_halves;
  auto halves = [](double a, double b) {
    const double p = a * b;
    return std::pair{p, std::fma(a, b, -p)};
  };
  auto step = [&](std::size_t i, bool add) {
    const double x = v[i];
    const double sign = add ? 1 : -1;
    if (add) {
      fast.add(x);
      digits.add(x);
      sq.add_square(x);
      prod.add_product(d[i], x);
    } else {
      fast.remove(x);
      digits.remove(x);
      sq.remove_square(x);
      prod.remove_product(d[i], x);
    }
    const auto [s_hi, s_lo] = halves(x, x);
    sq_halves.add(sign * s_hi);
    sq_halves.add(sign * s_lo);
    const auto [p_hi, p_lo] = halves(static_cast<double>(d[i]), x);
    prod_halves.add(sign * p_hi);
    prod_halves.add(sign * p_lo);
  };
  auto same_dd = [](vigil::interp::DoubleDouble a, vigil::interp::DoubleDouble b) {
    return same_bits(a.hi, b.hi) && same_bits(a.lo, b.lo);
  };
  for (std::size_t i = 0; i < v.size(); ++i) {
    step(i, true);
    if (i >= width) step(i - width, false);
    digits.force_digits();
    prod_halves.force_digits();
    const auto a = fast.value_dd(), b = digits.value_dd();
    if (!same_dd(a, b))
      RC_FAIL("after " + std::to_string(i) + ": fast " + fmt17(a.hi) + " + " + fmt17(a.lo) + " vs digits " +
              fmt17(b.hi) + " + " + fmt17(b.lo));
    // hi: the correctly rounded sum; lo: the correctly rounded sum - hi.
    ExactSum rest;
    for (std::size_t k = i >= width ? i - width + 1 : 0; k <= i; ++k) rest.add(v[k]);
    RC_ASSERT(same_bits(a.hi, rest.value()));
    rest.remove(a.hi);
    RC_ASSERT(same_bits(a.lo, rest.value()));
    if (!same_dd(sq.value_dd(), sq_halves.value_dd())) RC_FAIL("square sums differ after " + std::to_string(i));
    if (!same_dd(prod.value_dd(), prod_halves.value_dd())) RC_FAIL("product sums differ after " + std::to_string(i));
  }
}

TEST(RunningWindow, SumOfCancellingTermsStaysExact) {
  auto compiled = vigil::compile_string("rule r: when sum(x[3]) == sum(x[3]) cooldown 1 samples do log\n", "s.rules");
  ASSERT_TRUE(compiled.ok());
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  vigil::Engine engine(*compiled.program, options);
  const auto x = *engine.series("x");
  // 1e20, 1, -1e20 repeating: every window of three sums to exactly 1.
  const double cycle[] = {1e20, 1, -1e20};
  for (int i = 0; i < 30000; ++i) {
    const vigil::Sample s{x, cycle[i % 3]};
    auto fs = engine.observe(i, {&s, 1});
    if (i >= 2) {
      ASSERT_EQ(fs.size(), 1u);
      ASSERT_EQ(*fs[0].value, 1.0) << "at step " << i;
    }
  }
}

// var/std/zscore read n·Σx² - (Σx)² (no division before the last one); near
// the overflow limit (samples of 8e149 and 9e149 over 20,000 samples: n·Σx²
// is beyond 1.8e308) they fall back to Σx² - (Σx)²/n and stay right.
TEST(RunningWindow, VarianceNearTheOverflowLimitFallsBack) {
  constexpr int n = 20000;
  auto compiled = vigil::compile_string(
      "rule v: when var(x[20000]) == var(x[20000]) cooldown 1 samples do log\n"
      "rule s: when std(x[20000]) == std(x[20000]) cooldown 1 samples do log\n"
      "rule z: when zscore(x[20001]) == zscore(x[20001]) cooldown 1 samples do log\n",
      "v.rules");
  ASSERT_TRUE(compiled.ok());
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  vigil::Engine engine(*compiled.program, options);
  const auto x = *engine.series("x");
  const double a = 9e149, b = 8e149;
  std::map<std::string, double> last;
  for (int i = 0; i < n + 1; ++i) {
    const vigil::Sample smp{x, i % 2 == 0 ? a : b};
    for (const auto& f : engine.observe(i, {&smp, 1})) last[f.rule_name()] = *f.value;
  }
  // The window of var/std: samples 1..20000, half a and half b; zscore's:
  // the same less its latest (sample 20000, an a) against samples 0..19999.
  const long double half = (static_cast<long double>(a) - b) / 2;
  const double var = static_cast<double>(half * half);
  EXPECT_NEAR(last["v"] / var, 1.0, 1e-12);
  EXPECT_NEAR(last["s"] / std::sqrt(var), 1.0, 1e-12);
  EXPECT_NEAR(last["z"], 1.0, 1e-9);  // a is one std above the mean of a and b
}

// slope moves its origin step to the window once the window has moved on
// by twice its length, in O(1) (exact integer and ExactSum arithmetic, the
// sums a rebuild would make): over a long trace with large, gappy steps and
// a NaN now and then, every value agrees with a two-pass recompute.
TEST(RunningWindow, SlopeRecentresExactly) {
  // Steps 7 apart, and 1e8 apart (origin moves of ~1e10: products of three digits).
  for (const std::int64_t spacing : {std::int64_t{7}, std::int64_t{100000007}}) {
  SCOPED_TRACE(spacing);
  constexpr int w = 50, n = 6000;
  auto compiled = vigil::compile_string(
      "rule s: when slope(x[50]) == slope(x[50]) cooldown 1 samples do log\n", "s.rules");
  ASSERT_TRUE(compiled.ok());
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  vigil::Engine engine(*compiled.program, options);
  const auto x = *engine.series("x");
  std::vector<std::int64_t> steps;
  std::vector<double> values;
  int checked = 0;
  for (int i = 0; i < n; ++i) {
    const std::int64_t step = 1000000000000LL + spacing * i + (i % 3);
    const double v = i % 997 == 500 ? NAN : 1e6 + 100 * std::sin(i * 0.7) + 0.01 * i;
    steps.push_back(step);
    values.push_back(v);
    const vigil::Sample smp{x, v};
    const auto fs = engine.observe(step, {&smp, 1});
    if (i + 1 < w) continue;
    bool any_nan = false;
    long double mx = 0, my = 0;
    for (int k = i + 1 - w; k <= i; ++k) {
      any_nan |= std::isnan(values[static_cast<std::size_t>(k)]);
      mx += static_cast<long double>(steps[static_cast<std::size_t>(k)] - steps[0]);
      my += values[static_cast<std::size_t>(k)];
    }
    if (any_nan) {
      EXPECT_TRUE(fs.empty()) << "at " << i;  // NaN == NaN is false
      continue;
    }
    mx /= w;
    my /= w;
    long double sxy = 0, sxx = 0;
    for (int k = i + 1 - w; k <= i; ++k) {
      const long double dx = static_cast<long double>(steps[static_cast<std::size_t>(k)] - steps[0]) - mx;
      sxy += dx * (values[static_cast<std::size_t>(k)] - my);
      sxx += dx * dx;
    }
    const double want = static_cast<double>(sxy / sxx);
    ASSERT_EQ(fs.size(), 1u) << "at " << i;
    ASSERT_NEAR(*fs[0].value, want, 1e-9 * std::abs(want) + 1e-12) << "at " << i;
    ++checked;
  }
  EXPECT_GT(checked, n - 2 * w * (n / 997 + 1));
  }
}

// Growth with the samples held: a window of ten million over a short trace
// does not reserve ten million samples (issue 11 §3). The bound is checked
// in the alloc test's bytes; here, behaviour: the window is still right.
TEST(RunningWindow, HugeWindowOverAShortTraceIsExact) {
  auto compiled =
      vigil::compile_string("rule r: when max(x[10000000 steps]) > 2 cooldown 1 samples do log\n", "m.rules");
  ASSERT_TRUE(compiled.ok());
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  vigil::Engine engine(*compiled.program, options);
  const auto x = *engine.series("x");
  int fired = 0;
  for (int i = 0; i < 1000; ++i) {
    const vigil::Sample s{x, i == 10 ? 3.0 : 1.0};
    fired += static_cast<int>(engine.observe(i, {&s, 1}).size());
  }
  EXPECT_EQ(fired, 990);  // from step 10 on, 3 stays in the window
}

// WindowReader::bounds with a hint (a running window's previous first
// sample) finds the same window as without one and as a naive scan, for any
// hint: just before or after the answer, far from it, evicted, past the end,
// none; on histories that evict, with repeated and gapped steps and times,
// sometimes out of order (not contiguous then), and clocks behind the newest
// sample (another mode's lower step).
RC_GTEST_PROP(WindowBounds, AHintNeverChangesTheWindow, ()) {
  using vigil::interp::WindowReader;
  const bool steps = *rc::gen::arbitrary<bool>();
  const double amount = *rc::gen::inRange(0, 40) + (*rc::gen::inRange(0, 3) == 0 ? 0.5 : 0.0);
  namespace ir = vigil::ir;
  const ir::Dur w{steps ? ir::Unit::steps : ir::Unit::seconds, amount};
  const int n = *rc::gen::inRange(1, 300);
  const bool disorder = *rc::gen::inRange(0, 5) == 0;
  vigil_test::Xorshift next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  vigil::interp::History h;
  h.reserve(static_cast<std::size_t>(*rc::gen::inRange(2, 64)));  // evicts past it
  std::int64_t step = 0;
  double time = 100;
  std::uint64_t prev_lo = WindowReader::no_hint;
  for (int i = 0; i < n; ++i) {
    const auto gap = next() % 10;
    step += gap < 3 ? 0 : gap < 8 ? 1 : static_cast<std::int64_t>(next() % 20);
    time += gap < 3 ? 0 : gap < 8 ? 1 : static_cast<double>(next() % 20);
    const bool back = disorder && next() % 8 == 0;
    h.put(0, back ? step - 5 : step, back ? time - 5 : time, 0);
    vigil::interp::Clock clock;
    clock.step = next() % 6 == 0 ? step - static_cast<std::int64_t>(next() % 4) : step;
    clock.time = next() % 6 == 0 ? time - static_cast<double>(next() % 4) : time;
    const auto plain = WindowReader::bounds(h, w, clock);
    // The naive window: held samples with key in (now - amount, now].
    const bool sorted = steps ? h.steps_sorted() : h.times_sorted();
    RC_ASSERT(plain.contiguous == sorted);
    if (sorted) {
      std::uint64_t lo = h.pushed, hi = h.first_held();
      for (std::uint64_t k = h.first_held(); k < h.pushed; ++k) {
        const std::size_t p = h.phys(k);
        const bool in = steps ? h.step[p] > vigil::interp::step_bound(clock.step, amount) &&
                                    h.step[p] <= clock.step
                              : h.time[p] > clock.time - amount && h.time[p] <= clock.time;
        if (in) {
          lo = std::min(lo, k);
          hi = k + 1;
        }
      }
      if (lo == h.pushed) {
        RC_ASSERT(plain.lo == plain.hi);
      } else {
        RC_ASSERT(plain.lo == lo);
        RC_ASSERT(plain.hi == hi);
      }
    }
    const std::uint64_t first = h.first_held();
    const std::uint64_t hints[] = {prev_lo,
                                   WindowReader::no_hint,
                                   plain.lo,
                                   plain.lo + 1,
                                   plain.lo > 0 ? plain.lo - 1 : 0,
                                   plain.lo + 6,
                                   plain.lo > 6 ? plain.lo - 6 : 0,
                                   first,
                                   first > 0 ? first - 1 : 0,
                                   h.pushed,
                                   h.pushed + 1,
                                   first + next() % (h.size + 2)};
    for (const std::uint64_t hint : hints) {
      const auto b = WindowReader::bounds(h, w, clock, hint);
      RC_ASSERT(b.contiguous == plain.contiguous);
      RC_ASSERT(b.lo == plain.lo);
      RC_ASSERT(b.hi == plain.hi);
    }
    prev_lo = plain.lo;
  }
}

}  // namespace
