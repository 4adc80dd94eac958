// var/std/zscore/slope's read-outs (interp/window_state.hpp, Ziv's
// strategy): the running double-double approximations, with their error
// bound, decide the correctly rounded quantities RN(n·S2 - S1²),
// RN(n·latest - S1) and RN(n·Σdy - Σd·Σy) almost always; the exact
// multi-word read-out from the exact sums decides the rest. Checked here:
// 1. whenever the fast path gives a value it is the exact read-out's, bit
//    for bit, on windows built to be hard (cancellation 1e6 ± 1e-3, all
//    equal but one, ties, magnitudes from 1e-300 to 1e100, windows of
//    integers whose n·S2 - S1² is an exact midpoint between two doubles);
// 2. the exact read-out against independent exact oracles (int128 on
//    windows of scaled integers; an expanded exact sum on windows spanning
//    1e-100..1e100), so both are the correctly rounded value;
// 3. the fast path decides on ordinary metric windows (it is not vacuous);
// 4. a RunningWindow takes the exact read-out on a midpoint window (and
//    rounds it to even), rebuilding its exact sums from the window (they
//    are not maintained), and not on a metric's; on a window that cancels
//    beyond double-double, where every read-out is exact, it maintains
//    its exact sums again after two rebuilds;
// 5. a sliding RunningWindow's var/zscore/slope equal running_value_of's
//    (a fresh recompute with its own origin step) bit for bit: slope is
//    invariant under the origin's moves;
// 6. zscore's integer sums (NarrowMoments) read out the exact read-outs'
//    bits, refuse what they cannot hold without changing, and a zscore
//    window moves out of them and back (a far value passing through)
//    without changing a value.

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "interp/window_state.hpp"
#include "stdlib/functions.hpp"
#include "tests/reference/xorshift.hpp"

namespace {

using vigil::interp::ApproxSum;
using vigil::interp::ExactSum;
using vigil::interp::NarrowMoments;
using vigil::interp::RunKind;

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g (%a)", v, v);
  return buf;
}

using Rng = vigil_test::Xorshift;

/// The window's sums as a RunningWindow keeps them: exact Σx, Σx², Σd·x and
/// their approximations (fed the same two-product halves), exact Σd, Σd².
struct Sums {
  ExactSum s1, s2, sp;
  ApproxSum a1, a2, ap;
  __int128 sd = 0, sdd = 0;
  void put(double x, std::int64_t d, bool add) {
    const double sign = add ? 1 : -1;
    const double sq = x * x, sq_lo = std::fma(x, x, -sq);
    const auto dd = static_cast<double>(d);
    const double p = dd * x, p_lo = std::fma(dd, x, -p);
    if (add) {
      s1.add(x);
      s2.add_square(x);
      sp.add_product(d, x);
    } else {
      s1.remove(x);
      s2.remove_square(x);
      sp.remove_product(d, x);
    }
    a1.add(sign * x);
    a2.add2(sign * sq, sign * sq_lo);
    ap.add2(sign * p, sign * p_lo);
    sd += add ? d : -d;
    sdd += (add ? 1 : -1) * static_cast<__int128>(d) * d;
  }
  void refresh() {
    if (a1.stale()) a1.seed(s1);
    if (a2.stale()) a2.seed(s2);
    if (ap.stale()) ap.seed(sp);
  }
};

/// Value styles: 0 cancellation (1e6 ± 1e-3), 1 all equal but a few,
/// 2 ties (small integers), 3 magnitudes 1e-300..1e100, 4 {0, c} with c an
/// odd 27-bit integer (n·S2 - S1² = j(n - j)c²: exact midpoints when odd
/// and 54 bits wide), 5 a metric (2 + noise), 6 integers times 2^-20.
double value(Rng& next, int style, double c) {
  switch (style) {
    case 0: return 1e6 + (next.uniform() - 0.5) * 2e-3;
    case 1: return next() % 50 == 0 ? c + 1 : c;
    case 2: return static_cast<double>(next() % 4);
    case 3: {
      const double m = 1 + next.uniform();
      const double x = std::ldexp(m, static_cast<int>(next() % 1330) - 997);
      return (next() & 1) ? x : -x;
    }
    case 4: return (next() & 1) ? c : 0;
    case 5: return 2 + 0.1 * (next.uniform() - 0.5);
    default: return std::ldexp(static_cast<double>(static_cast<std::int64_t>(next() % (1ULL << 31)) - (1LL << 30)), -20);
  }
}

/// Styles whose values are integers times 2^-20 (or exactly integers) with
/// small enough sums that int128 holds the exact quantities.
bool integral(int style) { return style == 1 || style == 2 || style == 4 || style == 6; }

RC_GTEST_PROP(MomentReadOut, FastPathIsTheExactOneBitForBit, ()) {
  const int style = *rc::gen::inRange(0, 7);
  const int n_obs = *rc::gen::inRange(2, 3000);
  const auto width = static_cast<std::size_t>(*rc::gen::inRange(2, 400));
  Rng next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  // An odd 27-bit c (style 4), a value to repeat (style 1).
  const double c = style == 4 ? static_cast<double>((std::uint64_t{1} << 26) | (next() % (1ULL << 26)) | 1)
                              : static_cast<double>(next() % 1000);
  std::vector<double> v;
  std::vector<std::int64_t> d;
  std::int64_t step = static_cast<std::int64_t>(next() % 1000);
  for (int i = 0; i < n_obs; ++i) {
    v.push_back(value(next, style, c));
    step += static_cast<std::int64_t>(next() % 3);
    d.push_back(step);  // as d = step - origin 0
  }
  Sums s;
  int decided = 0, asked = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    s.put(v[i], d[i], true);
    if (i >= width) s.put(v[i - width], d[i - width], false);
    const std::size_t lo = i >= width ? i - width + 1 : 0;
    const auto n = static_cast<double>(i + 1 - lo);
    s.refresh();
    const double latest = v[next() % v.size()];
    const double m = vigil::interp::exact_n2_moment(s.s1, s.s2, n);
    const double z = vigil::interp::exact_n_deviation(s.s1, latest, n);
    const double p = vigil::interp::exact_slope_numerator(s.sd, s.s1, s.sp, n);
    const auto fm = vigil::interp::approx_n2_moment(s.a1, s.a2, n);
    const auto fz = vigil::interp::approx_n_deviation(s.a1, latest, n);
    const auto fp = vigil::interp::approx_slope_numerator(s.sd, s.a1, s.ap, n);
    const std::string at = " after " + std::to_string(i) + " (style " + std::to_string(style) + ")";
    if (fm && !same_bits(*fm, m)) RC_FAIL("n·S2 - S1²: fast " + fmt(*fm) + " vs exact " + fmt(m) + at);
    if (fz && !same_bits(*fz, z)) RC_FAIL("n·latest - S1: fast " + fmt(*fz) + " vs exact " + fmt(z) + at);
    if (fp && !same_bits(*fp, p)) RC_FAIL("n·Σdy - Σd·Σy: fast " + fmt(*fp) + " vs exact " + fmt(p) + at);
    // Exact zeros (equal values) cannot be decided by a bound, by design;
    // nor can exact midpoints, which n·latest - S1 and, over short windows
    // of small steps, n·Σdy - Σd·Σy hit often (they have only a few bits
    // more than a double): the decision rate is asserted for n·S2 - S1²
    // (over 100 bits here: a midpoint is a 2^-50 event).
    asked += m != 0;
    decided += fm && m != 0;
    if (integral(style)) {
      // The oracle: the same quantities in int128, over integers k = x·2^20.
      __int128 k1 = 0, k2 = 0, kp = 0;
      for (std::size_t j = lo; j <= i; ++j) {
        const auto k = static_cast<__int128>(std::ldexp(v[j], 20));
        k1 += k;
        k2 += k * k;
        kp += k * d[j];
      }
      const auto ni = static_cast<__int128>(n);
      const double want_m = std::ldexp(static_cast<double>(ni * k2 - k1 * k1), -40);
      const double want_p = std::ldexp(static_cast<double>(ni * kp - s.sd * k1), -20);
      if (!same_bits(m, want_m)) RC_FAIL("exact n·S2 - S1² " + fmt(m) + " vs int128 " + fmt(want_m) + at);
      if (!same_bits(p, want_p)) RC_FAIL("exact slope numerator " + fmt(p) + " vs int128 " + fmt(want_p) + at);
      const auto kl = static_cast<__int128>(std::ldexp(latest, 20));
      const double want_z = std::ldexp(static_cast<double>(ni * kl - k1), -20);
      if (!same_bits(z, want_z)) RC_FAIL("exact n·latest - S1 " + fmt(z) + " vs int128 " + fmt(want_z) + at);
    }
  }
  // On a metric's values the bound decides (nearly) every read-out.
  if (style == 5) RC_ASSERT(decided == asked);
}

// The exact read-outs on windows whose values span 1e-100..1e100 (the sums
// in ExactSum's digits, the multi-word path with wide alignments), against
// an oracle that never multiplies sums: each quantity expanded into terms
// that are exact as two-product halves and summed exactly by another
// ExactSum (correctly rounded: its own property above):
//   n·S2 - S1² = Σi n·xi² - Σi Σj xi·xj,  n·latest - S1 = n·latest - Σi xi,
//   n·Σdy - Σd·Σy = Σi (n·di - Σd)·yi.
RC_GTEST_PROP(MomentReadOut, ExactReadOutMatchesAnExpandedExactSum, ()) {
  const int n = *rc::gen::inRange(2, 30);
  Rng next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  std::vector<double> x;
  std::vector<std::int64_t> d;
  for (int i = 0; i < n; ++i) {
    const double m = 1 + next.uniform();
    const double v = std::ldexp(m, static_cast<int>(next() % 660) - 330);  // 1e-100..1e100
    x.push_back((next() & 1) ? v : -v);
    d.push_back(static_cast<std::int64_t>(next() % 100000));
  }
  const double latest = x[next() % x.size()] * ((next() & 1) ? 1 : -3);
  Sums s;
  for (int i = 0; i < n; ++i) s.put(x[i], d[i], true);
  const auto dn = static_cast<double>(n);
  auto add_prod = [](ExactSum& acc, double a, double b, double sign) {
    const double p = a * b, e = std::fma(a, b, -p);
    acc.add(sign * p);
    acc.add(sign * e);
  };
  ExactSum m, z, num;
  std::int64_t sd = 0;
  for (int i = 0; i < n; ++i) sd += d[i];
  for (int i = 0; i < n; ++i) {
    // n·xi²: xi² as exact halves, each times n as exact halves.
    const double p = x[i] * x[i], e = std::fma(x[i], x[i], -p);
    add_prod(m, dn, p, 1);
    add_prod(m, dn, e, 1);
    for (int j = 0; j < n; ++j) add_prod(m, x[i], x[j], -1);
    z.add(-x[i]);
    add_prod(num, static_cast<double>(n * d[i] - sd), x[i], 1);
  }
  add_prod(z, dn, latest, 1);
  const double want_m = m.value(), want_z = z.value(), want_p = num.value();
  const double got_m = vigil::interp::exact_n2_moment(s.s1, s.s2, dn);
  const double got_z = vigil::interp::exact_n_deviation(s.s1, latest, dn);
  const double got_p = vigil::interp::exact_slope_numerator(s.sd, s.s1, s.sp, dn);
  if (!same_bits(got_m, want_m)) RC_FAIL("n·S2 - S1²: " + fmt(got_m) + " vs " + fmt(want_m));
  if (!same_bits(got_z, want_z)) RC_FAIL("n·latest - S1: " + fmt(got_z) + " vs " + fmt(want_z));
  if (!same_bits(got_p, want_p)) RC_FAIL("n·Σdy - Σd·Σy: " + fmt(got_p) + " vs " + fmt(want_p));
}

/// A RunningWindow over a History, and the samples put so far.
struct Driver {
  vigil::interp::History h;
  vigil::interp::RunningWindow run;
  std::vector<double> vals;
  std::vector<std::int64_t> steps;
  Driver() { h.reserve(1 << 16); }

  /// What one observation gives: the running window's value and
  /// running_value_of's over the same samples.
  struct Values {
    std::optional<double> got, want;
  };
  /// Puts sample x at `step` (its time: its index), then moves the window
  /// to the last `w` samples; nullopt while it holds fewer than `least`.
  std::optional<Values> slide(RunKind kind, double x, std::int64_t step, std::uint64_t w,
                              std::uint64_t least) {
    h.put(x, step, static_cast<double>(vals.size()), 0);
    vals.push_back(x);
    steps.push_back(step);
    const std::uint64_t hi = vals.size(), lo = hi > w ? hi - w : 0;
    if (hi - lo < least) return std::nullopt;
    const double consts[] = {0};
    std::vector<double> scratch(2 * (hi - lo));
    return Values{run.update(kind, h, lo, hi, consts),
                  vigil::interp::running_value_of(
                      kind, {vals.data() + lo, steps.data() + lo, static_cast<std::size_t>(hi - lo), scratch.data()})};
  }
};

// A window {0, c} of two samples, c = 2^27 - 1: n·S2 - S1² = c² =
// 2^54 - 2^28 + 1 is odd and 54 bits wide, exactly halfway between two
// doubles. The approximations hold it exactly, so the bound cannot place it
// on either side: the read-out is the exact one, rounded to even.
TEST(MomentReadOut, MidpointWindowTakesTheExactReadOutAndRoundsToEven) {
  constexpr double c = 134217727;  // 2^27 - 1
  const __int128 m = static_cast<__int128>(134217727) * 134217727;
  const double rn = static_cast<double>(m);  // ties to even
  ASSERT_NE(static_cast<__int128>(rn), m);  // it is a midpoint: not representable
  Driver d;
  d.h.put(0, 0, 0, 0);
  d.h.put(c, 1, 1, 0);
  const double consts[] = {0};
  const auto var = d.run.update(RunKind::var, d.h, 0, 2, consts);
  ASSERT_TRUE(var.has_value());
  EXPECT_TRUE(same_bits(*var, rn / 4)) << fmt(*var) << " vs " << fmt(rn / 4);
  EXPECT_EQ(d.run.exact_readouts(), 1u);
  EXPECT_EQ(d.run.exact_rebuilds(), 1u);  // the sums were not maintained: rebuilt once
  // The gathered recompute gives the same bits.
  const double vals[] = {0, c};
  const std::int64_t steps[] = {0, 1};
  double scratch[4];
  const auto again = vigil::interp::running_value_of(RunKind::var, {vals, steps, 2, scratch});
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(same_bits(*again, *var));
}

// A metric's window (a decaying loss with noise) over 20,000 observations,
// window 1,000: no read-out needs the multi-word exact arithmetic (the
// approximations decide, re-seeded from the exact sums every few thousand
// additions in O(1); zscore's numerator on a midpoint is exact in the fast
// form).
TEST(MomentReadOut, MetricWindowsStayOnTheFastPath) {
  for (const RunKind kind : {RunKind::var, RunKind::zscore, RunKind::slope}) {
    Driver d;
    Rng next{12345};
    const double consts[] = {0};
    for (int i = 0; i < 20000; ++i) {
      d.h.put(2 + 3 * std::exp(-i / 5000.0) + 0.05 * (next.uniform() - 0.5), i, i, 0);
      const auto hi = static_cast<std::uint64_t>(i) + 1;
      if (hi < 3) continue;
      ASSERT_TRUE(d.run.update(kind, d.h, hi > 1000 ? hi - 1000 : 0, hi, consts).has_value());
    }
    // slope: its numerator's exact midpoints (few here: long windows of
    // large steps make it wide) take the multi-word read-out.
    EXPECT_LE(d.run.exact_readouts(), kind == RunKind::slope ? 20u : 0u) << static_cast<int>(kind);
    EXPECT_EQ(d.run.exact_rebuilds(), d.run.exact_readouts());
    EXPECT_EQ(d.run.rebuilds(), 0u);
    // The exact sums are not maintained (zscore keeps Σx for its numerator).
    EXPECT_EQ(d.run.exact_live(0), kind == RunKind::zscore);
    EXPECT_FALSE(d.run.exact_live(1));
  }
}

// n·Σx² - (Σx)² whose top bit lies below the smallest subnormal's (the
// product (Σx)² reaches 2^-2148): the exact read-out's rounding keeps no bit
// and rounds by the guard and sticky bits alone. It shifted by a negative
// count there (UBSan found it on a random window of tiny values).
TEST(MomentReadOut, ExactReadOutBelowTheSubnormalsRounds) {
  auto moment = [](std::initializer_list<double> xs) {
    ExactSum s1, s2;
    for (double x : xs) {
      s1.add(x);
      s2.add_square(x);
    }
    return vigil::interp::exact_n2_moment(s1, s2, static_cast<double>(xs.size()));
  };
  // Squares below 2^-1074 do not reach Σx² (the exact sums hold multiples
  // of 2^-1074), (Σx)² = 9e-600 does: M is a tiny negative, rounded to 0.
  EXPECT_EQ(moment({1e-300, 2e-300}), 0.0);
  // {0, x} with x² = 2^-1074 exactly: one bit kept.
  EXPECT_EQ(moment({0.0, std::ldexp(1.0, -537)}), std::ldexp(1.0, -1074));
}

// A hard stretch (1e6 ± 1e-3: every read-out exact, the sums maintained
// after two rebuilds) followed by a metric's values: four window lengths
// after the last exact read-out the window stops maintaining them again.
TEST(MomentReadOut, MaintainedSumsAreDroppedAfterTheHardStretch) {
  Driver d;
  Rng next{99};
  bool was_live = false;
  for (int i = 0; i < 6000; ++i) {
    const auto v = d.slide(RunKind::var, value(next, i < 2000 ? 0 : 5, 0), i, 300, 2);
    if (!v) continue;
    ASSERT_TRUE(v->got.has_value());
    ASSERT_TRUE(same_bits(*v->got, *v->want)) << "at " << i;
    if (i == 1999) was_live = d.run.exact_live(1);
  }
  EXPECT_TRUE(was_live);
  EXPECT_FALSE(d.run.exact_live(0));
  EXPECT_FALSE(d.run.exact_live(1));
  EXPECT_LE(d.run.exact_rebuilds(), 3u);
}

// A sliding RunningWindow (slope: its origin step moves every two window
// lengths) against running_value_of on the same window (origin: the
// window's first step): bit for bit at every observation, for values that
// cancel (1e6 ± 1e-3: the exact read-out), a metric's, and gappy large steps.
TEST(MomentReadOut, SlidingValuesEqualAFreshRecomputeBitForBit) {
  for (const RunKind kind : {RunKind::var, RunKind::std_dev, RunKind::zscore, RunKind::slope}) {
    for (const int style : {0, 5, 3}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(kind)) + " style " + std::to_string(style));
      Driver d;
      Rng next{777 + static_cast<std::uint64_t>(style)};
      std::int64_t step = 1000000000000;
      for (int i = 0; i < 3000; ++i) {
        const double x = value(next, style, 0);
        step += 1 + static_cast<std::int64_t>(next() % 1000);
        const auto v = d.slide(kind, x, step, 300, 3);
        if (!v) continue;
        ASSERT_TRUE(v->got.has_value()) << i;
        ASSERT_TRUE(v->want.has_value()) << i;
        ASSERT_TRUE(same_bits(*v->got, *v->want)) << "at " << i << ": " << fmt(*v->got) << " vs " << fmt(*v->want);
      }
      EXPECT_EQ(d.run.rebuilds(), 0u);
      if (kind == RunKind::zscore) {
        // zscore's integer sums hold these windows but 1e-300..1e100's
        // (then ExactSum and the approximations, as var's), and their
        // read-outs are exact: no bound, no exact read-out to count.
        EXPECT_EQ(d.run.narrow(), style != 3);
        if (style != 3) {
          EXPECT_EQ(d.run.exact_readouts(), 0u);
        }
      } else if (style == 0 && kind != RunKind::slope) {
        // 1e6 ± 1e-3: n·S2 - S1² cancels beyond double-double's reach, so
        // every read-out is exact; after two on-demand rebuilds within a
        // window the exact sums are maintained again (not O(W) each time).
        EXPECT_GT(d.run.exact_readouts(), 2000u);
        EXPECT_LE(d.run.exact_rebuilds(), 2u);
        EXPECT_TRUE(d.run.exact_live(1));
      }
    }
  }
}

// NarrowMoments against ExactSum's exact read-outs, bit for bit, on sliding
// windows: RN(n·latest - Σx) and RN(n·Σx² - (Σx)²). Values: the styles
// above (cancellation 1e6 ± 1e-3, ties, all equal but a few, odd 27-bit
// midpoint makers, a metric, integers times 2^-20), a metric rounded to 0.1
// every 7th sample (exact midpoints of the numerator), signs mixed, exponents
// spread over the whole span, and now and then a value out of range (a
// subnormal, or 2^30 times smaller or larger than the window), which put()
// must refuse without changing the sums. latest is drawn from the window,
// from out of range, or is ±0.
RC_GTEST_PROP(NarrowMomentsProperty, ReadOutsAreTheExactOnesBitForBit, ()) {
  const int style = *rc::gen::inRange(0, 10);
  const int n_obs = *rc::gen::inRange(2, 2000);
  const auto width = static_cast<std::size_t>(*rc::gen::inRange(1, 300));
  Rng next{*rc::gen::arbitrary<std::uint64_t>() | 1};
  const double c = style == 4 ? static_cast<double>((std::uint64_t{1} << 26) | (next() % (1ULL << 26)) | 1)
                              : static_cast<double>(next() % 1000 + 1);
  const double scale = std::ldexp(1.0, static_cast<int>(next() % 600) - 300);
  auto draw = [&](int i) -> double {
    switch (style) {
      case 7: {  // a metric, rounded to 0.1 every 7th sample
        const double x = 2 + 3 * std::exp(-i / 500.0) + 0.05 * (next.uniform() - 0.5);
        return i % 7 == 0 ? std::round(x * 10) / 10 : x;
      }
      case 8: {  // signs and exponents spread over the span, scaled
        const double x = std::ldexp(1 + next.uniform(), static_cast<int>(next() % 36) - 18) * scale;
        return (next() & 1) ? x : -x;
      }
      case 9: return (next() % 5 == 0) ? 0.0 : value(next, 5, c) * scale;
      default: return value(next, style, c);
    }
  };
  std::vector<double> held;  // the values put() took, oldest first
  std::vector<double> window;
  Sums s;
  NarrowMoments nm;
  nm.clear();
  bool anchored = false;
  for (int i = 0; i < n_obs; ++i) {
    double x = draw(i);
    const auto r = next() % 100;
    if (r == 0) x = std::ldexp(x == 0 ? 1.0 : x, 30);  // far larger
    if (r == 1) x = std::ldexp(x == 0 ? 1.0 : x, -30);  // far smaller
    if (r == 2) x = 4e-320;  // subnormal
    if (nm.put<true>(x)) {
      window.push_back(x);
      s.put(x, 0, true);
      anchored |= x != 0;
    }
    if (window.size() > width) {
      RC_ASSERT(nm.put<false>(window.front()));  // what was added can leave
      s.put(window.front(), 0, false);
      window.erase(window.begin());
    }
    if (window.empty()) continue;
    const auto n = static_cast<std::uint64_t>(window.size());
    const auto dn = static_cast<double>(n);
    const std::string at = " after " + std::to_string(i) + " (style " + std::to_string(style) + ")";
    const auto pick = next() % 8;
    const double latest = pick == 0 ? 0.0
                          : pick == 1 ? -0.0
                          : pick == 2 ? std::ldexp(window.back() == 0 ? 1.0 : window.back(), 45)
                                      : window[next() % window.size()] * ((next() & 1) ? 1 : -1);
    const auto z = nm.scaled_minus(latest, n);
    if (z) {
      const double want = vigil::interp::exact_n_deviation(s.s1, latest, dn);
      if (!same_bits(*z, want)) RC_FAIL("n·latest - Σx: " + fmt(*z) + " vs exact " + fmt(want) + at);
    } else {
      RC_ASSERT(pick == 2);  // only a latest out of range is refused
    }
    if (anchored) {
      const double m = nm.n2_moment(n);
      const double want = vigil::interp::exact_n2_moment(s.s1, s.s2, dn);
      if (!same_bits(m, want)) RC_FAIL("n·Σx² - (Σx)²: " + fmt(m) + " vs exact " + fmt(want) + at);
    }
  }
}

// What NarrowMoments refuses, and that a refusal changes nothing.
TEST(NarrowMoments, RefusesValuesOutOfRangeAndKeepsItsSums) {
  NarrowMoments nm;
  nm.clear();
  EXPECT_TRUE(nm.put<true>(0.0));  // zeros always fit (and set no anchor)
  EXPECT_FALSE(nm.put<true>(1e-300));  // an anchor below the range
  EXPECT_TRUE(nm.put<true>(3.0));  // the anchor: 24 bits below 3's mantissa
  EXPECT_TRUE(nm.put<true>(std::ldexp(3.0, -24)));
  EXPECT_FALSE(nm.put<true>(std::ldexp(3.0, -25)));
  EXPECT_TRUE(nm.put<true>(std::ldexp(1.0, 17)));  // 2^16 times 2^1, the top of the span
  EXPECT_FALSE(nm.put<true>(std::ldexp(1.0, 18)));
  EXPECT_FALSE(nm.put<true>(5e-324));
  EXPECT_FALSE(nm.scaled_minus(1e-300, 3).has_value());
  EXPECT_FALSE(nm.scaled_minus(1.0, std::uint64_t{1} << 32).has_value());
  ExactSum s1, s2;
  for (const double x : {3.0, std::ldexp(3.0, -24), std::ldexp(1.0, 17)}) {
    s1.add(x);
    s2.add_square(x);
  }
  EXPECT_TRUE(same_bits(*nm.scaled_minus(7.5, 3), vigil::interp::exact_n_deviation(s1, 7.5, 3)));
  EXPECT_TRUE(same_bits(nm.n2_moment(3), vigil::interp::exact_n2_moment(s1, s2, 3)));
  // An empty sum: n·x rounded once; an exact zero is +0 either way.
  NarrowMoments empty;
  empty.clear();
  EXPECT_TRUE(same_bits(*empty.scaled_minus(0.1, 3), 0.1 * 3));
  EXPECT_TRUE(same_bits(*empty.scaled_minus(-0.0, 3), 0.0));
  EXPECT_TRUE(same_bits(*nm.scaled_minus(0.0, 0), -s1.value()));
}

// A zscore window over a metric through which a far value passes (1e30,
// then 1e-30; and a NaN, then an Inf, which make the value NaN / recomputed):
// it leaves its integer sums when the value enters, reads the same bits
// from ExactSum and the approximations meanwhile, and goes back to them once
// the window has moved on (four window lengths after leaving), bit for bit
// against running_value_of at every observation.
TEST(NarrowMoments, ZscoreLeavesAndReturnsWithoutChangingAValue) {
  Driver d;
  Rng next{4242};
  int narrow_changes = 0;
  bool was_narrow = true;
  for (int i = 0; i < 6000; ++i) {
    double x = 2 + 3 * std::exp(-i / 2000.0) + 0.05 * (next.uniform() - 0.5);
    if (i % 7 == 0) x = std::round(x * 10) / 10;
    if (i == 500) x = 1e30;
    if (i == 2500) x = -1e-30;
    if (i == 4000) x = std::nan("");
    if (i == 4500) x = std::numeric_limits<double>::infinity();
    const auto v = d.slide(RunKind::zscore, x, i, 200, 3);
    if (!v) continue;
    ASSERT_EQ(v->got.has_value(), v->want.has_value()) << "at " << i;
    if (v->got) {
      ASSERT_TRUE(same_bits(*v->got, *v->want)) << "at " << i << ": " << fmt(*v->got) << " vs " << fmt(*v->want);
    }
    if (d.run.narrow() != was_narrow) {
      ++narrow_changes;
      was_narrow = d.run.narrow();
    }
    if (i == 499 || i == 2499) {
      EXPECT_TRUE(d.run.narrow()) << i;
    }
    if (i == 500 || i == 2500) {
      EXPECT_FALSE(d.run.narrow()) << i;  // latest out of range
    }
  }
  EXPECT_TRUE(d.run.narrow());
  EXPECT_EQ(narrow_changes, 4);  // out and back, twice
  EXPECT_EQ(d.run.rebuilds(), 0u);
}

}  // namespace
