// Kernels and registry records of the built-in functions.
//
// NaN policy (SPEC §2): a NaN inside a window makes every numeric reduction
// NaN; count/first/last/changes look at samples as they are. Sums use
// Neumaier compensation; variances use Welford's update, which keeps equal
// samples at exactly zero variance.
//
// Owns: the built-in kernels and their records. Must not touch: series, windows' bounds
// (window.cpp) or rule state.
#include "stdlib/functions.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

namespace vigil::stdlib {
namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

bool any_nan_in(const double* v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::isnan(v[i])) return true;
  return false;
}

// Neumaier-compensated sum.
double sum_of(const double* v, std::size_t n) {
  double sum = 0, c = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double t = sum + v[i];
    if (std::abs(sum) >= std::abs(v[i]))
      c += (sum - t) + v[i];
    else
      c += (v[i] - t) + sum;
    sum = t;
  }
  // Infinities make the compensation NaN; the plain sum is right then.
  return std::isfinite(sum) ? sum + c : sum;
}

struct MeanVar {
  double mean = 0, m2 = 0;
  std::size_t n = 0;
  void add(double x) {
    ++n;
    double d = x - mean;
    mean += d / static_cast<double>(n);
    m2 += d * (x - mean);
  }
  [[nodiscard]] double var() const { return n ? m2 / static_cast<double>(n) : nan; }
};

MeanVar mean_var(const double* v, std::size_t n) {
  MeanVar mv;
  for (std::size_t i = 0; i < n; ++i) mv.add(v[i]);
  return mv;
}

// Linear interpolation between closest ranks (numpy's default, PromQL's
// quantile_over_time). Reorders `scratch` (a copy of the values).
double quantile_of(const double* v, std::size_t n, double q, double* scratch) {
  if (n == 0 || std::isnan(q) || q < 0 || q > 1) return nan;
  if (any_nan_in(v, n)) return nan;
  std::copy(v, v + n, scratch);
  double h = (static_cast<double>(n) - 1) * q;
  auto lo = static_cast<std::size_t>(std::floor(h));
  // Selection, not a full sort: linear time per window.
  std::nth_element(scratch, scratch + lo, scratch + n);
  // An exact rank needs no neighbour (and 0 * inf would make it NaN).
  if (lo + 1 >= n || h == static_cast<double>(lo)) return scratch[lo];
  const double next = *std::min_element(scratch + lo + 1, scratch + n);
  return scratch[lo] + (h - static_cast<double>(lo)) * (next - scratch[lo]);
}

// ---- elementwise ----------------------------------------------------------

double k_abs(std::span<const double> a) { return std::abs(a[0]); }
double k_sqrt(std::span<const double> a) { return std::sqrt(a[0]); }
double k_log(std::span<const double> a) { return std::log(a[0]); }
double k_exp(std::span<const double> a) { return std::exp(a[0]); }
double k_clamp(std::span<const double> a) {
  if (std::isnan(a[0]) || std::isnan(a[1]) || std::isnan(a[2])) return nan;
  return std::min(std::max(a[0], a[1]), a[2]);
}
double k_min2(std::span<const double> a) {
  return std::isnan(a[0]) || std::isnan(a[1]) ? nan : std::min(a[0], a[1]);
}
double k_max2(std::span<const double> a) {
  return std::isnan(a[0]) || std::isnan(a[1]) ? nan : std::max(a[0], a[1]);
}
double k_is_nan(std::span<const double> a) { return std::isnan(a[0]) ? 1 : 0; }
double k_is_finite(std::span<const double> a) { return std::isfinite(a[0]) ? 1 : 0; }
double k_any_nan_args(std::span<const double> a) {
  return any_nan_in(a.data(), a.size()) ? 1 : 0;
}

// ---- aggregations across series -------------------------------------------

double a_max(std::span<const double> v) {
  if (any_nan_in(v.data(), v.size())) return nan;
  return *std::max_element(v.begin(), v.end());
}
double a_min(std::span<const double> v) {
  if (any_nan_in(v.data(), v.size())) return nan;
  return *std::min_element(v.begin(), v.end());
}
double a_sum(std::span<const double> v) { return sum_of(v.data(), v.size()); }
double a_mean(std::span<const double> v) {
  return sum_of(v.data(), v.size()) / static_cast<double>(v.size());
}
double a_count(std::span<const double> v) { return static_cast<double>(v.size()); }
double a_count_true(std::span<const double> v) {
  return static_cast<double>(std::count_if(v.begin(), v.end(), [](double x) { return x != 0; }));
}
double a_any(std::span<const double> v) {
  return std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1 : 0;
}
double a_all(std::span<const double> v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1 : 0;
}

// ---- range reductions -----------------------------------------------------

double r_mean(const Window& w, std::span<const double>) {
  return sum_of(w.values, w.n) / static_cast<double>(w.n);
}
double r_sum(const Window& w, std::span<const double>) { return sum_of(w.values, w.n); }
double r_min(const Window& w, std::span<const double>) {
  return a_min({w.values, w.n});
}
double r_max(const Window& w, std::span<const double>) {
  return a_max({w.values, w.n});
}
double r_count(const Window& w, std::span<const double>) { return static_cast<double>(w.n); }
double r_count_true(const Window& w, std::span<const double>) {
  // Branch-free: a NaN is unequal to itself, so it is no true sample.
  std::int64_t n = 0;
  for (std::size_t i = 0; i < w.n; ++i) {
    const double v = w.values[i];
    n += static_cast<std::int64_t>((v != 0) & (v == v));
  }
  return static_cast<double>(n);
}
double r_var(const Window& w, std::span<const double>) {
  if (any_nan_in(w.values, w.n)) return nan;
  return mean_var(w.values, w.n).var();
}
double r_std(const Window& w, std::span<const double> c) { return std::sqrt(r_var(w, c)); }
double r_median(const Window& w, std::span<const double>) {
  return quantile_of(w.values, w.n, 0.5, w.scratch);
}
double r_quantile(const Window& w, std::span<const double> c) {
  return quantile_of(w.values, w.n, c[0], w.scratch);
}
double r_first(const Window& w, std::span<const double>) { return w.values[0]; }
double r_last(const Window& w, std::span<const double>) { return w.values[w.n - 1]; }
// delta and rel_change read only the ends, but they are numeric reductions:
// a NaN anywhere in the window makes them NaN (SPEC §2).
double r_delta(const Window& w, std::span<const double>) {
  if (any_nan_in(w.values, w.n)) return nan;
  return w.values[w.n - 1] - w.values[0];
}
double r_rel_change(const Window& w, std::span<const double>) {
  if (any_nan_in(w.values, w.n)) return nan;
  return (w.values[w.n - 1] - w.values[0]) / std::abs(w.values[0]);
}
double r_slope(const Window& w, std::span<const double>) {
  if (any_nan_in(w.values, w.n)) return nan;
  // Centre the step numbers first: they can be large (1e6) and the
  // uncentred normal equations lose all precision there.
  double sx = 0;
  for (std::size_t i = 0; i < w.n; ++i) sx += static_cast<double>(w.steps[i]);
  const double mx = sx / static_cast<double>(w.n);
  const double my = sum_of(w.values, w.n) / static_cast<double>(w.n);
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < w.n; ++i) {
    double dx = static_cast<double>(w.steps[i]) - mx;
    sxy += dx * (w.values[i] - my);
    sxx += dx * dx;
  }
  return sxx == 0 ? nan : sxy / sxx;
}
double r_changes(const Window& w, std::span<const double>) {
  double n = 0;
  for (std::size_t i = 1; i < w.n; ++i) {
    double a = w.values[i - 1], b = w.values[i];
    bool same = (std::isnan(a) && std::isnan(b)) || a == b;
    if (!same) n += 1;
  }
  return n;
}
double r_any_nan(const Window& w, std::span<const double>) {
  return any_nan_in(w.values, w.n) ? 1 : 0;
}

// Latest sample against the window without it.
double standardised(double diff, double scale) {
  if (diff == 0) return 0;
  if (scale == 0) return diff > 0 ? inf : -inf;
  return diff / scale;
}
double r_zscore(const Window& w, std::span<const double>) {
  if (any_nan_in(w.values, w.n)) return nan;
  MeanVar mv = mean_var(w.values, w.n - 1);
  return standardised(w.values[w.n - 1] - mv.mean, std::sqrt(mv.var()));
}
double r_robust_z(const Window& w, std::span<const double>) {
  if (any_nan_in(w.values, w.n)) return nan;
  const std::size_t m = w.n - 1;
  double med = quantile_of(w.values, m, 0.5, w.scratch);
  double* dev = w.scratch + w.n;  // second half: quantile_of sorts the first
  for (std::size_t i = 0; i < m; ++i) dev[i] = std::abs(w.values[i] - med);
  double mad = quantile_of(dev, m, 0.5, w.scratch);
  return standardised(0.6745 * (w.values[w.n - 1] - med), mad);
}
double r_iqr_outlier(const Window& w, std::span<const double> c) {
  if (any_nan_in(w.values, w.n)) return nan;
  const std::size_t m = w.n - 1;
  double q1 = quantile_of(w.values, m, 0.25, w.scratch);
  double q3 = quantile_of(w.values, m, 0.75, w.scratch);
  double iqr = q3 - q1, x = w.values[w.n - 1];
  return (x < q1 - c[0] * iqr || x > q3 + c[0] * iqr) ? 1 : 0;
}

// ---- stateful -------------------------------------------------------------
// DetectorState layout is per function; see each kernel. A NaN sample yields
// NaN and leaves the state as it was, so one bad batch does not poison a
// detector for the rest of the run.

double s_prev(DetectorState& st, double x, std::span<const double>) {
  if (std::isnan(x)) return nan;
  double out = st.n > 0 ? st.s[0] : nan;
  st.s[0] = x;
  ++st.n;
  return out;
}
// Counts every sample, NaN included: how many evaluations of x there were.
double s_samples_seen(DetectorState& st, double, std::span<const double>) {
  return static_cast<double>(++st.n);
}
double s_ewma(DetectorState& st, double x, std::span<const double> c) {
  if (std::isnan(x)) return nan;
  st.s[0] = st.n == 0 ? x : c[0] * x + (1 - c[0]) * st.s[0];
  ++st.n;
  return st.s[0];
}
// c[0]: 0 = "min", 1 = "max".
bool improves(double x, double best, double min_delta, double mode) {
  return mode == 0 ? x < best - min_delta : x > best + min_delta;
}
double s_best(DetectorState& st, double x, std::span<const double> c) {
  if (std::isnan(x)) return nan;
  if (st.n == 0 || improves(x, st.s[0], 0, c[0])) st.s[0] = x;
  ++st.n;
  return st.s[0];
}
double s_steps_since_best(DetectorState& st, double x, std::span<const double> c) {
  if (std::isnan(x)) return nan;
  if (st.n == 0 || improves(x, st.s[0], std::abs(c[0]), c[1])) {
    st.s[0] = x;
    st.k = 0;
  } else {
    ++st.k;
  }
  ++st.n;
  return static_cast<double>(st.k);
}
// PyTorch's ReduceLROnPlateau.step(), decision part only (the LR change is
// the reduce_lr action's): s[0] = best, s[1] = num_bad_epochs, s[2] =
// cooldown_counter; n = 0 until the first sample sets best to its initial
// +-inf. c = {mode (0 min, 1 max), threshold, threshold_mode (0 rel, 1 abs),
// patience, cooldown}. Returns num_bad_epochs as PyTorch compares it with
// patience (after the cooldown has zeroed it), and resets it when it exceeds
// patience, as a reduction does. Every operation is the same IEEE double
// operation as PyTorch's Python floats, so the boundaries agree exactly
// (a == best * (1 - threshold) is not better). NaN is a bad evaluation, as
// there (NaN < x is false): this kernel does not skip NaN like the others.
bool plateau_better(double a, double best, std::span<const double> c) {
  const bool min = c[0] == 0, rel = c[2] == 0;
  const double threshold = c[1];
  if (min && rel) return a < best * (1. - threshold);
  if (min) return a < best - threshold;
  if (rel) return a > best * (threshold + 1.);
  return a > best + threshold;
}
double s_plateau_bad_evals(DetectorState& st, double x, std::span<const double> c) {
  if (st.n++ == 0) st.s[0] = c[0] == 0 ? inf : -inf;
  if (plateau_better(x, st.s[0], c)) {
    st.s[0] = x;
    st.s[1] = 0;
  } else {
    st.s[1] += 1;
  }
  if (st.s[2] > 0) {  // in cooldown
    st.s[2] -= 1;
    st.s[1] = 0;
  }
  const double bad = st.s[1];
  if (bad > c[3]) {  // PyTorch reduces here
    st.s[2] = c[4];
    st.s[1] = 0;
  }
  return bad;
}

std::string d_steps_since_best(const DetectorState& st, std::span<const double> c) {
  return fmt::format("best = {:.6g}, {} sample{} since an improvement of more than {:.6g}", st.s[0],
                     st.k, st.k == 1 ? "" : "s", std::abs(c[0]));
}
// Running mean/variance of the samples before the current one: s[1] mean,
// s[2] M2, n count.
void welford(DetectorState& st, double x) {
  ++st.n;
  double d = x - st.s[1];
  st.s[1] += d / static_cast<double>(st.n);
  st.s[2] += d * (x - st.s[1]);
}
double prior_sigma(const DetectorState& st) {
  return std::sqrt(st.s[2] / static_cast<double>(st.n));
}
// EWMA control chart: s[0] = z, k = number of EWMA updates. c = {lambda, L}.
// s[3] and s[4] keep the centre (prior mean) and half-width of the last limits
// for d_ewma_chart: the prior mean is gone once welford() takes in x.
double s_ewma_chart(DetectorState& st, double x, std::span<const double> c) {
  if (std::isnan(x)) return nan;
  const double lambda = c[0], L = c[1];
  double out = 0;
  if (st.n == 0) {
    st.s[0] = x;
  } else {
    st.s[0] = lambda * x + (1 - lambda) * st.s[0];
    ++st.k;
    if (st.n >= 2) {
      double t = static_cast<double>(st.k);
      double width = L * prior_sigma(st) *
                     std::sqrt(lambda / (2 - lambda) * (1 - std::pow(1 - lambda, 2 * t)));
      out = std::abs(st.s[0] - st.s[1]) > width ? 1 : 0;
      st.s[3] = st.s[1];
      st.s[4] = width;
    }
  }
  welford(st, x);
  return out;
}
std::string d_ewma_chart(const DetectorState& st, std::span<const double> c) {
  if (st.n < 3) return fmt::format("EWMA = {:.6g}, no control limits before the 3rd sample", st.s[0]);
  return fmt::format("EWMA = {:.6g}, control limits mean +- L*sigma_ewma = {:.6g} +- {:.6g} = "
                     "[{:.6g}, {:.6g}] (L = {:.6g})",
                     st.s[0], st.s[3], st.s[4], st.s[3] - st.s[4], st.s[3] + st.s[4], c[1]);
}
// Tabular CUSUM on the sample standardised by the prior mean/sigma:
// s[3] = S+, s[4] = S-. c = {k, h}.
double s_cusum(DetectorState& st, double x, std::span<const double> c) {
  if (std::isnan(x)) return nan;
  double out = 0;
  if (st.n >= 2) {
    double z = standardised(x - st.s[1], prior_sigma(st));
    st.s[3] = std::max(0.0, st.s[3] + z - c[0]);
    st.s[4] = std::max(0.0, st.s[4] - z - c[0]);
    out = (st.s[3] > c[1] || st.s[4] > c[1]) ? 1 : 0;
  }
  welford(st, x);
  return out;
}
std::string d_cusum(const DetectorState& st, std::span<const double> c) {
  if (st.n < 3) return "no statistic before the 3rd sample";
  return fmt::format("S+ = {:.6g}, S- = {:.6g} (prior standard deviations, slack k = {:.6g}), "
                     "threshold h = {:.6g}",
                     st.s[3], st.s[4], c[0], c[1]);
}
// Page-Hinkley test for an increase in the mean: s[3] = m_t, s[4] = min m_t.
// c = {delta, lambda}.
double s_page_hinkley(DetectorState& st, double x, std::span<const double> c) {
  if (std::isnan(x)) return nan;
  welford(st, x);  // the running mean includes the current sample
  st.s[3] += x - st.s[1] - c[0];
  st.s[4] = st.n == 1 ? st.s[3] : std::min(st.s[4], st.s[3]);
  return st.s[3] - st.s[4] > c[1] ? 1 : 0;
}
std::string d_page_hinkley(const DetectorState& st, std::span<const double> c) {
  return fmt::format("m_t - min m = {:.6g}, threshold lambda = {:.6g}", st.s[3] - st.s[4], c[1]);
}

using T = ArgType;
constexpr Param num(std::string_view n) { return {n, T::number}; }
constexpr Param cnum(std::string_view n) { return {n, T::number, true}; }
/// A constant number in [lo, hi] (an end excluded if open).
constexpr Param cnum(std::string_view n, double lo, bool lo_open, double hi, bool hi_open) {
  Param p{n, T::number, true};
  p.lo = lo;
  p.lo_open = lo_open;
  p.hi = hi;
  p.hi_open = hi_open;
  return p;
}
constexpr Param positive(std::string_view n) { return cnum(n, 0, true, inf, false); }
constexpr Param non_negative(std::string_view n) { return cnum(n, 0, false, inf, false); }
/// A smoothing weight: 0 < w <= 1.
constexpr Param weight(std::string_view n) { return cnum(n, 0, true, 1, false); }
constexpr Param rng(std::string_view n) { return {n, T::range}; }

FunctionDef ew(std::string_view name, std::vector<Param> ps, ElementwiseKernel k,
               std::string_view doc, std::string_view ex, T result = T::number) {
  FunctionDef d;
  d.name = name;
  d.kind = FnKind::elementwise;
  d.params = std::move(ps);
  d.elementwise = k;
  d.result = result;
  d.doc = doc;
  d.example = ex;
  return d;
}
FunctionDef agg(std::string_view name, AggregateKernel k, std::string_view doc,
                std::string_view ex, T arg = T::number, T result = T::number) {
  FunctionDef d;
  d.name = name;
  d.kind = FnKind::aggregate;
  d.params = {{"v", arg}};
  d.aggregate = k;
  d.result = result;
  d.doc = doc;
  d.example = ex;
  return d;
}
FunctionDef rf(std::string_view name, std::vector<Param> ps, RangeKernel k, std::size_t min_n,
               std::string_view doc, std::string_view ex, T result = T::number,
               std::string_view warmup = {}) {
  FunctionDef d;
  d.name = name;
  d.kind = FnKind::range;
  d.params = std::move(ps);
  d.range = k;
  d.min_samples = min_n;
  d.result = result;
  d.doc = doc;
  d.example = ex;
  d.warmup = warmup;
  return d;
}
FunctionDef sf(std::string_view name, std::vector<Param> ps, StatefulKernel k,
               std::string_view doc, std::string_view ex, std::string_view warmup,
               T result = T::number) {
  FunctionDef d;
  d.name = name;
  d.kind = FnKind::stateful;
  d.params = std::move(ps);
  d.stateful = k;
  d.result = result;
  d.doc = doc;
  d.example = ex;
  d.warmup = warmup;
  return d;
}

std::vector<FunctionDef> make_defs() {
  const Param mode{"mode", T::string, true, "min|max"};
  std::vector<FunctionDef> d;
  // Elementwise.
  d.push_back(ew("abs", {num("x")}, k_abs, "absolute value", "abs(delta(loss[10])) > 1"));
  d.push_back(ew("sqrt", {num("x")}, k_sqrt, "square root (NaN for x < 0)", "sqrt(grad_var) > 1"));
  d.push_back(ew("log", {num("x")}, k_log, "natural logarithm", "log(loss) > 2"));
  d.push_back(ew("exp", {num("x")}, k_exp, "e to the power x", "exp(loss) > 1000"));
  d.push_back(ew("clamp", {num("x"), num("lo"), num("hi")}, k_clamp,
                 "x limited to [lo, hi]", "clamp(loss, 0, 10) == 10"));
  d.push_back(ew("min", {num("a"), num("b")}, k_min2, "the smaller of a and b",
                 "min(loss, val_loss) < 0.1"));
  d.push_back(ew("max", {num("a"), num("b")}, k_max2, "the larger of a and b",
                 "max(loss, val_loss) > 5"));
  d.push_back(ew("is_nan", {num("x")}, k_is_nan, "true if x is NaN", "is_nan(loss)", T::boolean));
  d.push_back(ew("is_finite", {num("x")}, k_is_finite, "true if x is neither NaN nor infinite",
                 "not is_finite(loss)", T::boolean));
  {
    auto f = ew("any_nan", {num("x")}, k_any_nan_args, "true if any argument is NaN",
                "any_nan(loss, grad_norm)", T::boolean);
    f.variadic = true;
    d.push_back(std::move(f));
  }
  // Aggregations across series.
  d.push_back(agg("max", a_max, "largest element of a vector", "max(grad_norm) > 100"));
  d.push_back(agg("min", a_min, "smallest element of a vector", "min(weight_norm) < 1e-6"));
  d.push_back(agg("sum", a_sum, "sum of a vector's elements", "sum(step_time) > 60"));
  d.push_back(agg("mean", a_mean, "mean of a vector's elements", "mean(grad_norm) > 10"));
  d.push_back(agg("count", a_count, "number of elements", "count(grad_norm) < 12"));
  d.push_back(agg("count", a_count_true, "number of true elements", "count(grad_norm > 100) > 3",
                  T::boolean));
  d.push_back(agg("any", a_any, "true if any element is true", "any(grad_norm > 1e3)",
                  T::boolean, T::boolean));
  d.push_back(agg("all", a_all, "true if every element is true", "all(grad_norm < 1e-7)",
                  T::boolean, T::boolean));
  // Range reductions.
  d.push_back(rf("mean", {rng("r")}, r_mean, 1, "mean of the window", "mean(loss[100]) > 2"));
  d.push_back(rf("min", {rng("r")}, r_min, 1, "smallest sample", "min(loss[50 steps]) > 3"));
  d.push_back(rf("max", {rng("r")}, r_max, 1, "largest sample", "max(grad_norm[10]) > 1e3"));
  d.push_back(rf("sum", {rng("r")}, r_sum, 1, "sum of the samples (compensated)",
                 "sum(skipped[100 steps]) > 5"));
  d.push_back(rf("count", {rng("r")}, r_count, 1, "number of samples in the window",
                 "count(loss[10m]) < 1"));
  d.push_back(rf("count", {{"c", T::condition_range}}, r_count_true, 1,
                 "number of samples in the window where the condition held",
                 "count((cpu_util > 90)[500]) > 250"));
  d.push_back(rf("std", {rng("r")}, r_std, 2, "population standard deviation",
                 "std(loss[100]) < 1e-4"));
  d.push_back(rf("var", {rng("r")}, r_var, 2, "population variance", "var(loss[100]) < 1e-8"));
  d.push_back(rf("median", {rng("r")}, r_median, 1, "median (linear interpolation)",
                 "loss > 2 * median(loss[100])"));
  {
    Param q = cnum("q", 0, false, 1, false);
    d.push_back(rf("quantile", {rng("r"), q}, r_quantile, 1,
                   "q-quantile, 0 <= q <= 1, linear between closest ranks (numpy default)",
                   "step_time > quantile(step_time[500], 0.95)"));
  }
  d.push_back(rf("first", {rng("r")}, r_first, 1, "oldest sample", "first(loss[100]) < last(loss[100])"));
  d.push_back(rf("last", {rng("r")}, r_last, 1, "newest sample", "last(lr[10]) == 0"));
  {
    auto f = rf("before", {rng("r")}, r_last, 1,
                "the newest sample older than the window: with x[N steps], the newest at least "
                "N steps before the current step; with x[N], the (N+1)-th newest",
                "loss >= before(loss[10 steps])", T::number,
                "needs a sample older than the window");
    f.preceding = true;
    d.push_back(std::move(f));
  }
  d.push_back(rf("delta", {rng("r")}, r_delta, 2, "last - first", "delta(loss[100 steps]) > 0"));
  d.push_back(rf("rel_change", {rng("r")}, r_rel_change, 2, "(last - first) / |first|",
                 "rel_change(loss[100 steps]) > -0.001"));
  d.push_back(rf("slope", {rng("r")}, r_slope, 2,
                 "least-squares slope of the samples against their step numbers",
                 "slope(loss[500 steps]) > 0"));
  d.push_back(rf("changes", {rng("r")}, r_changes, 1,
                 "how many times consecutive samples differ (NaN to NaN is no change)",
                 "changes(lr[100]) > 10"));
  d.push_back(rf("any_nan", {rng("r")}, r_any_nan, 1, "true if the window holds a NaN",
                 "any_nan(loss[10])", T::boolean));
  d.push_back(rf("zscore", {rng("r")}, r_zscore, 3,
                 "(latest - mean) / std of the window's other samples",
                 "zscore(loss[100]) > 4", T::number,
                 "needs the full window: N samples of x[N]"));
  d.push_back(rf("robust_z", {rng("r")}, r_robust_z, 3,
                 "0.6745 * (latest - median) / MAD of the window's other samples",
                 "robust_z(loss[100]) > 5", T::number,
                 "needs the full window: N samples of x[N]"));
  d.push_back(rf("iqr_outlier", {rng("r"), non_negative("k")}, r_iqr_outlier, 3,
                 "true if latest lies outside [Q1 - k*IQR, Q3 + k*IQR] of the other samples",
                 "iqr_outlier(step_time[200], 3)", T::boolean,
                 "needs the full window: N samples of x[N]"));
  // Undefined values.
  {
    FunctionDef f;
    f.name = "default";
    f.kind = FnKind::fallback;
    f.params = {num("x"), num("v")};
    f.doc = "x where it has a value, else v (x and v: both numbers or both conditions)";
    f.example = "default(max(val_loss), 0) > 5 or loss > 10";
    d.push_back(std::move(f));
  }
  // The clock.
  {
    FunctionDef f;
    f.name = "age";
    f.kind = FnKind::clock;
    f.params = {{"x", T::series}};
    f.doc = "seconds since x's latest sample: the observation's time minus that sample's time; "
            "re-read at every observation that has a time, samples or not";
    f.example = "age(step_time) > 1800";
    f.warmup = "needs times: undefined for a sample or an observation without one";
    d.push_back(std::move(f));
  }
  // Stateful over the whole history.
  {
    auto f = sf("prev", {num("x")}, s_prev, "the previous non-NaN sample of x",
                "loss > 2 * prev(loss)", "defined from the 2nd sample");
    f.min_samples = 2;
    d.push_back(std::move(f));
  }
  d.push_back(sf("samples_seen", {num("x")}, s_samples_seen,
                 "number of samples of x so far, this one and NaN samples included",
                 "samples_seen(val_loss) >= 3 and val_loss > 1", "defined from the 1st sample"));
  d.push_back(sf("ewma", {num("x"), weight("alpha")}, s_ewma,
                 "exponentially weighted moving average, s = alpha*x + (1-alpha)*s, s0 = x0",
                 "loss > 1.5 * ewma(loss, 0.1)", "defined from the 1st sample"));
  d.push_back(sf("best", {num("x"), mode}, s_best, "best value so far (\"min\" or \"max\")",
                 "val_loss > 1.2 * best(val_loss, \"min\")", "defined from the 1st sample"));
  d.push_back(sf("steps_since_best", {num("x"), cnum("min_delta"), mode}, s_steps_since_best,
                 "samples since the last improvement of at least min_delta (0 when improving)",
                 "steps_since_best(val_loss, 0.001, \"min\") >= 5",
                 "0 at the 1st sample; can reach N after N+1 samples"));
  d.back().describe = d_steps_since_best;
  d.push_back(sf("plateau_bad_evals",
                 {num("x"), mode, non_negative("threshold"), {"threshold_mode", T::string, true, "rel|abs"},
                  non_negative("patience"), non_negative("cooldown")},
                 s_plateau_bad_evals,
                 "PyTorch ReduceLROnPlateau's num_bad_epochs at this sample: evaluations without "
                 "an improvement beyond threshold (\"rel\": a < best * (1 - threshold) in mode "
                 "\"min\", a > best * (1 + threshold) in \"max\"; \"abs\": best -/+ threshold), "
                 "0 for `cooldown` samples after it exceeded patience; it exceeds patience exactly "
                 "where PyTorch reduces the LR, and restarts from 0 there",
                 "plateau_bad_evals(val_loss, \"min\", 1e-4, \"rel\", 10, 0) > 10",
                 "defined from the 1st sample"));
  d.push_back(sf("ewma_chart", {num("x"), weight("lambda"), positive("L")}, s_ewma_chart,
                 "EWMA control chart: true when the EWMA leaves mean +- L*sigma_ewma of the prior "
                 "samples",
                 "ewma_chart(loss, 0.2, 3)", "can be true from the 3rd sample", T::boolean));
  d.back().describe = d_ewma_chart;
  d.push_back(sf("cusum", {num("x"), non_negative("k"), positive("h")}, s_cusum,
                 "two-sided tabular CUSUM of the standardised sample; true when S+ or S- > h",
                 "cusum(loss, 0.5, 5)", "can be true from the 3rd sample", T::boolean));
  d.back().describe = d_cusum;
  d.push_back(sf("page_hinkley", {num("x"), non_negative("delta"), positive("lambda")}, s_page_hinkley,
                 "Page-Hinkley test for an increase of the mean; true when m_t - min m > lambda",
                 "page_hinkley(loss, 0.005, 50)", "can be true from the 2nd sample", T::boolean));
  d.back().describe = d_page_hinkley;
  return d;
}

}  // namespace

FunctionRegistry::FunctionRegistry(std::vector<FunctionDef> defs) : defs_(std::move(defs)) {}

std::vector<const FunctionDef*> FunctionRegistry::lookup(std::string_view name) const {
  std::vector<const FunctionDef*> out;
  for (const auto& d : defs_)
    if (d.name == name) out.push_back(&d);
  return out;
}

std::vector<std::string> FunctionRegistry::names() const {
  std::set<std::string> s;
  for (const auto& d : defs_) s.emplace(d.name);
  return {s.begin(), s.end()};
}

std::string range_text(const Param& p) {
  const bool has_lo = std::isfinite(p.lo), has_hi = std::isfinite(p.hi);
  auto num = [](double v) { return fmt::format("{}", v); };
  if (has_lo && has_hi)
    return fmt::format("{} {} {} {} {}", num(p.lo), p.lo_open ? "<" : "<=", p.name,
                       p.hi_open ? "<" : "<=", num(p.hi));
  if (has_lo) return fmt::format("{} {} {}", p.name, p.lo_open ? ">" : ">=", num(p.lo));
  if (has_hi) return fmt::format("{} {} {}", p.name, p.hi_open ? "<" : "<=", num(p.hi));
  return "any finite number";
}

const FunctionRegistry& standard_functions() {
  static const FunctionRegistry registry(make_defs());
  return registry;
}

}  // namespace vigil::stdlib
