// The change detectors ewma_chart, cusum and page_hinkley against values
// worked by hand and against an independent implementation written from
// their definitions (docs/language.md, "Stateful functions"): two-pass
// statistics over the full history instead of the kernels' running
// (Welford) state, compared sample by sample on random series.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "stdlib/functions.hpp"

namespace {

using vigil::stdlib::DetectorState;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

// Feeds `xs` through the registry's kernel `name` with constants `c`.
std::vector<double> run_kernel(std::string_view name, const std::vector<double>& xs,
                               std::vector<double> c) {
  const auto defs = vigil::stdlib::standard_functions().lookup(name);
  EXPECT_EQ(defs.size(), 1u);
  DetectorState st;
  std::vector<double> out;
  for (double x : xs) out.push_back(defs[0]->stateful(st, x, c));
  return out;
}

// ---- the definitions, naively ------------------------------------------------

// A verdict and how far its statistic was from the threshold (to skip
// comparisons that rounding may decide either way).
struct Verdict {
  double value = nan;  // 1, 0 or NaN (NaN input)
  double margin = inf;
};

struct Prior {
  double mean = 0, sigma = 0;
};
Prior prior_of(const std::vector<double>& xs) {  // two-pass, population sigma
  Prior p;
  for (double x : xs) p.mean += x;
  p.mean /= static_cast<double>(xs.size());
  double ss = 0;
  for (double x : xs) ss += (x - p.mean) * (x - p.mean);
  p.sigma = std::sqrt(ss / static_cast<double>(xs.size()));
  return p;
}

// z = (x - mean) / sigma of the earlier samples; 0 for x == mean, +-inf for sigma 0.
double standard_score(double x, const Prior& p) {
  if (x == p.mean) return 0;
  if (p.sigma == 0) return x > p.mean ? inf : -inf;
  return (x - p.mean) / p.sigma;
}

// EWMA chart: z_1 = x_1, z_t = lambda x_t + (1 - lambda) z_{t-1}; from the
// third sample (two earlier ones), true when |z_t - mean| exceeds
// L sigma sqrt(lambda / (2 - lambda) (1 - (1 - lambda)^(2 (t - 1)))).
std::vector<Verdict> ewma_chart_ref(const std::vector<double>& xs, double lambda, double L) {
  std::vector<Verdict> out;
  std::vector<double> seen;
  double z = 0;
  for (double x : xs) {
    if (std::isnan(x)) {
      out.push_back({});
      continue;
    }
    z = seen.empty() ? x : lambda * x + (1 - lambda) * z;
    Verdict v{0, inf};
    if (seen.size() >= 2) {
      const Prior p = prior_of(seen);
      const double t = static_cast<double>(seen.size());
      const double width =
          L * p.sigma * std::sqrt(lambda / (2 - lambda) * (1 - std::pow(1 - lambda, 2 * t)));
      const double dev = std::abs(z - p.mean);
      v.value = dev > width ? 1 : 0;
      v.margin = std::abs(dev - width) / std::max(1.0, std::abs(width));
    }
    out.push_back(v);
    seen.push_back(x);
  }
  return out;
}

// Tabular CUSUM of the standard score against the earlier samples, from the
// third sample: S+ = max(0, S+ + z - k), S- = max(0, S- - z - k); true when
// either exceeds h.
std::vector<Verdict> cusum_ref(const std::vector<double>& xs, double k, double h) {
  std::vector<Verdict> out;
  std::vector<double> seen;
  double hi = 0, lo = 0;
  for (double x : xs) {
    if (std::isnan(x)) {
      out.push_back({});
      continue;
    }
    Verdict v{0, inf};
    if (seen.size() >= 2) {
      const double z = standard_score(x, prior_of(seen));
      hi = std::max(0.0, hi + z - k);
      lo = std::max(0.0, lo - z - k);
      v.value = hi > h || lo > h ? 1 : 0;
      const double top = std::max(hi, lo);
      v.margin = std::isinf(top) ? inf : std::abs(top - h) / std::max(1.0, std::abs(h));
    }
    out.push_back(v);
    seen.push_back(x);
  }
  return out;
}

// Page-Hinkley: m_t = sum over i <= t of (x_i - mean(x_1..x_i) - delta);
// true when m_t - min(m_1..m_t) exceeds lambda.
std::vector<Verdict> page_hinkley_ref(const std::vector<double>& xs, double delta,
                                      double lambda) {
  std::vector<Verdict> out;
  std::vector<double> seen;
  double m = 0, lowest = inf;
  for (double x : xs) {
    if (std::isnan(x)) {
      out.push_back({});
      continue;
    }
    seen.push_back(x);
    m += x - prior_of(seen).mean - delta;
    lowest = std::min(lowest, m);
    const double rise = m - lowest;
    out.push_back({rise > lambda ? 1.0 : 0.0, std::abs(rise - lambda) / std::max(1.0, std::abs(lambda))});
  }
  return out;
}

void expect_same(const std::vector<double>& got, const std::vector<Verdict>& want) {
  RC_ASSERT(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i].value)) {
      RC_ASSERT(std::isnan(got[i]));
    } else if (want[i].margin > 1e-9) {
      if (got[i] != want[i].value)
        RC_FAIL("sample " + std::to_string(i + 1) + ": got " + std::to_string(got[i]) +
                ", want " + std::to_string(want[i].value));
    }
  }
}

// Series with level shifts, plateaus (sigma 0), noise and the odd NaN.
std::vector<double> gen_series() {
  const int n = *rc::gen::inRange(1, 80);
  std::vector<double> xs;
  double level = *rc::gen::inRange(-20, 20) / 4.0;
  for (int i = 0; i < n; ++i) {
    switch (*rc::gen::inRange(0, 20)) {
      case 0: xs.push_back(nan); continue;
      case 1: level += *rc::gen::inRange(-40, 41) / 4.0; break;  // a shift
      default: break;
    }
    const int noise = *rc::gen::inRange(0, 3) == 0 ? 0 : *rc::gen::inRange(-8, 9);
    xs.push_back(level + noise / 16.0);
  }
  return xs;
}

RC_GTEST_PROP(Detectors, EwmaChartFollowsItsDefinition, ()) {
  const auto xs = gen_series();
  const double lambda = *rc::gen::element(0.05, 0.2, 0.5, 1.0);
  const double L = *rc::gen::element(0.5, 1.0, 3.0);
  expect_same(run_kernel("ewma_chart", xs, {lambda, L}), ewma_chart_ref(xs, lambda, L));
}

RC_GTEST_PROP(Detectors, CusumFollowsItsDefinition, ()) {
  const auto xs = gen_series();
  const double k = *rc::gen::element(0.0, 0.5, 1.0);
  const double h = *rc::gen::element(0.5, 2.0, 5.0);
  expect_same(run_kernel("cusum", xs, {k, h}), cusum_ref(xs, k, h));
}

RC_GTEST_PROP(Detectors, PageHinkleyFollowsItsDefinition, ()) {
  const auto xs = gen_series();
  const double delta = *rc::gen::element(0.0, 0.005, 0.5);
  const double lambda = *rc::gen::element(0.1, 1.0, 5.0);
  expect_same(run_kernel("page_hinkley", xs, {delta, lambda}), page_hinkley_ref(xs, delta, lambda));
}

// ---- worked by hand ------------------------------------------------------------

TEST(Detectors, EwmaChartByHand) {
  // lambda 0.5, L 1 over 0, 2, 2, 10:
  //   3rd: earlier {0, 2}: mean 1, sigma 1; z = 0.5*2 + 0.5*1 = 1.5; t = 2:
  //        width = sqrt(1/3 * (1 - 0.5^4)) = 0.5590; |1.5 - 1| = 0.5 -> false
  //   4th: earlier {0, 2, 2}: mean 4/3, sigma 0.9428; z = 0.5*10 + 0.5*1.5 = 5.75;
  //        t = 3: width = 0.9428 * sqrt(1/3 * (1 - 0.5^6)) = 0.5399 -> true
  const auto got = run_kernel("ewma_chart", {0, 2, 2, 10}, {0.5, 1});
  EXPECT_EQ(got, (std::vector<double>{0, 0, 0, 1}));
  // Two equal earlier samples: sigma 0, any move of the EWMA is out of control.
  EXPECT_EQ(run_kernel("ewma_chart", {1, 1, 1.5}, {0.2, 3}), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(run_kernel("ewma_chart", {1, 1, 1}, {0.2, 3}), (std::vector<double>{0, 0, 0}));
}

TEST(Detectors, CusumByHand) {
  // k 0.5, h 1 over 0, 2, 4, 4:
  //   3rd: earlier {0, 2}: mean 1, sigma 1; z = 3: S+ = 2.5 > 1 -> true
  //   4th: earlier {0, 2, 4}: mean 2, sigma 1.633; z = 1.2247: S+ = 3.2247 -> true
  EXPECT_EQ(run_kernel("cusum", {0, 2, 4, 4}, {0.5, 1}), (std::vector<double>{0, 0, 1, 1}));
  // k 0.5, h 3: 3rd: S+ = 2.5 (no), 4th: 3.2247 (yes).
  EXPECT_EQ(run_kernel("cusum", {0, 2, 4, 4}, {0.5, 3}), (std::vector<double>{0, 0, 0, 1}));
  // Downward: 3rd sample -3 against {0, 2}: z = -4, S- = 3.5 > 3.
  EXPECT_EQ(run_kernel("cusum", {0, 2, -3}, {0.5, 3}), (std::vector<double>{0, 0, 1}));
}

TEST(Detectors, PageHinkleyByHand) {
  // delta 0, lambda 1 over 0, 0, 3:
  //   m1 = 0, m2 = 0, m3 = 3 - 1 = 2; min 0: 2 > 1 -> true at the 3rd sample
  EXPECT_EQ(run_kernel("page_hinkley", {0, 0, 3}, {0, 1}), (std::vector<double>{0, 0, 1}));
  // The 2nd sample can already be true: 0, 4: m2 = 4 - 2 = 2 > 1.
  EXPECT_EQ(run_kernel("page_hinkley", {0, 4}, {0, 1}), (std::vector<double>{0, 1}));
  // A decrease never raises m_t above its minimum.
  EXPECT_EQ(run_kernel("page_hinkley", {4, 0, 0, 0}, {0, 1}), (std::vector<double>{0, 0, 0, 0}));
}

TEST(Detectors, NanLeavesTheStateAsItWas) {
  const auto with = run_kernel("cusum", {0, 2, nan, 4, 4}, {0.5, 1});
  ASSERT_TRUE(std::isnan(with[2]));
  EXPECT_EQ(with[3], 1);
  EXPECT_EQ(with[4], 1);
  const auto ph = run_kernel("page_hinkley", {0, nan, 4}, {0, 1});
  EXPECT_TRUE(std::isnan(ph[1]));
  EXPECT_EQ(ph[2], 1);
}

}  // namespace
