// Running windows (see window_state.hpp): the exact accumulator, the
// monotonic deque, the two-heap and the sorted-block order statistics, and the
// per-function update
// and read-out. Must not touch anything but its arguments.
#include "interp/window_state.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <x86intrin.h>  // _addcarry_u64
#endif

namespace vigil::interp {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();
/// Samples beyond this magnitude (and +-Inf) are "special": squares and
/// products with steps (< 2^63) of smaller ones stay finite and exact in the
/// accumulators; a window holding a special sample is recomputed instead.
constexpr double special_above = 1e150;

bool excludes_last(RunKind k) { return k == RunKind::zscore || k == RunKind::iqr_outlier; }

/// Kinds whose value depends on samples beyond 1e150 or +-Inf (specials_):
/// their sums exclude them, so the window is recomputed while any is held.
bool reads_specials(RunKind k) {
  return k == RunKind::sum || k == RunKind::mean || k == RunKind::var || k == RunKind::std_dev ||
         k == RunKind::zscore || k == RunKind::slope;
}

/// How many ExactSums a kind keeps: sum/mean Σx; var/std/zscore Σx, Σx²;
/// slope Σy, Σd·y (d: the step less the window's origin step, whose own
/// sums are exact integers).
std::size_t sums_for(RunKind k) {
  switch (k) {
    case RunKind::sum:
    case RunKind::mean: return 1;
    case RunKind::var:
    case RunKind::std_dev:
    case RunKind::zscore: return 2;
    case RunKind::slope: return 2;
    default: return 0;
  }
}

// ---- double-double arithmetic (Dekker / Knuth) -----------------------------

[[gnu::always_inline]] inline DoubleDouble two_sum(double a, double b) {
  const double s = a + b;
  const double bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
[[gnu::always_inline]] inline DoubleDouble fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}
/// a·b as p + e exactly. std::fma is a library call without -mfma (this
/// code is built for any x86-64), so Dekker's product is used wherever its
/// splits cannot overflow and the error term cannot underflow: the same
/// exact e, so the same bits as fma.
/// The rare path out of line: inlined, two_prod is a few flops on the
/// running windows' per-sample path (a call and the libm fma were half of it).
[[gnu::noinline]] DoubleDouble two_prod_fma(double a, double b, double p) {
  return {p, std::fma(a, b, -p)};
}
[[gnu::always_inline]] inline DoubleDouble two_prod(double a, double b) {
  const double p = a * b;
  const double ap = std::abs(p);
  if (std::abs(a) < 0x1p900 && std::abs(b) < 0x1p900 && ap > 0x1p-900 && ap < 0x1p900) [[likely]] {
    constexpr double split = 0x1p27 + 1;
    const double ca = split * a, cb = split * b;
    const double ah = ca - (ca - a), al = a - ah;
    const double bh = cb - (cb - b), bl = b - bh;
    return {p, ((ah * bh - p) + ah * bl + al * bh) + al * bl};
  }
  return two_prod_fma(a, b, p);
}
[[gnu::always_inline]] inline DoubleDouble dd_mul(DoubleDouble a, DoubleDouble b) {
  DoubleDouble p = two_prod(a.hi, b.hi);
  p.lo += a.hi * b.lo + a.lo * b.hi;
  return fast_two_sum(p.hi, p.lo);
}
DoubleDouble dd_div(DoubleDouble a, double b) {
  const double q1 = a.hi / b;
  const DoubleDouble p = two_prod(q1, b);
  DoubleDouble r = two_sum(a.hi, -p.hi);
  r.lo += a.lo - p.lo;
  const double q2 = (r.hi + r.lo) / b;
  return fast_two_sum(q1, q2);
}
DoubleDouble dd_sub(DoubleDouble a, DoubleDouble b) {
  DoubleDouble s = two_sum(a.hi, -b.hi);
  s.lo += a.lo - b.lo;
  return fast_two_sum(s.hi, s.lo);
}
/// a·n, n a positive integer below 2^53 (exact as a double).
[[gnu::always_inline]] inline DoubleDouble dd_scale(DoubleDouble a, double n) {
  DoubleDouble p = two_prod(a.hi, n);
  p.lo += a.lo * n;
  return fast_two_sum(p.hi, p.lo);
}
/// Σx² - Σx·(Σx/n): n times the population variance, for windows where
/// n·Σx² would overflow (samples near 1e150 over more than ~13,000
/// samples): the division first keeps every term within n·max x².
DoubleDouble centred(DoubleDouble sxx, DoubleDouble sx, double n) {
  return dd_sub(sxx, dd_mul(sx, dd_div(sx, n)));
}

/// Steps further than this from the origin step of a slope's window are
/// recomputed: d² sums stay within int128 and d is exact as a double.
constexpr std::int64_t wide_step = std::int64_t{1} << 40;

DoubleDouble dd_of(__int128 v) {
  constexpr __int128 small = static_cast<__int128>(1) << 62;
  if (v > -small && v < small) {
    // The common case in int64 (128-bit conversions are library calls).
    const auto x = static_cast<std::int64_t>(v);
    const auto hi = static_cast<double>(x);
    return {hi, static_cast<double>(x - static_cast<std::int64_t>(hi))};
  }
  const auto hi = static_cast<double>(v);
  return {hi, static_cast<double>(v - static_cast<__int128>(hi))};
}

/// Latest sample against the window without it (stdlib's r_zscore rule).
double standardised(double diff, double scale) {
  if (diff == 0) return 0;
  if (scale == 0) return diff > 0 ? inf : -inf;
  return diff / scale;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

RunKind running_kind(const stdlib::FunctionDef& fn) {
  if (fn.kind != stdlib::FnKind::range || fn.preceding) return RunKind::none;
  const std::string_view n = fn.name;
  if (n == "sum") return RunKind::sum;
  if (n == "mean") return RunKind::mean;
  if (n == "min") return RunKind::min;
  if (n == "max") return RunKind::max;
  if (n == "count")
    return !fn.params.empty() && fn.params[0].type == stdlib::ArgType::condition_range
               ? RunKind::count_true
               : RunKind::none;
  if (n == "var") return RunKind::var;
  if (n == "std") return RunKind::std_dev;
  if (n == "median") return RunKind::median;
  if (n == "quantile") return RunKind::quantile;
  if (n == "delta") return RunKind::delta;
  if (n == "rel_change") return RunKind::rel_change;
  if (n == "slope") return RunKind::slope;
  if (n == "changes") return RunKind::changes;
  if (n == "any_nan") return RunKind::any_nan;
  if (n == "zscore") return RunKind::zscore;
  if (n == "iqr_outlier") return RunKind::iqr_outlier;
  return RunKind::none;
}

namespace {

/// Where a read-out finds its sums: the approximations, and the exact sums,
/// maintained or made exact on demand (a RunningWindow's make_exact; a
/// gathered window's are always exact: no window).
struct Source {
  ExactSum* sums;
  ApproxSum* approx;
  RunningWindow* w = nullptr;
  const History* h = nullptr;
  [[nodiscard]] bool live(int i) const { return w == nullptr || w->exact_live(i); }
  ExactSum& exact(int i) {
    if (w != nullptr) w->make_exact(i, *h);
    return sums[i];
  }
};

/// Re-seeds an approximation that needs it: every ApproxSum::reseed_after
/// additions while its exact sum is maintained (O(1)); otherwise only when
/// the bound's own rounding needs it (2^30 additions, O(W) then). Without a
/// re-seed err keeps growing (~2^-105 of the sum per addition) until a
/// read-out cannot be decided, which re-seeds it.
[[gnu::always_inline]] inline void refresh(Source& src, int i) {
  ApproxSum& a = src.approx[i];
  if (a.ops >= (1U << 30)) [[unlikely]]
    a.seed(src.exact(i));
  else if (a.stale() && src.live(i)) [[unlikely]]
    a.seed(src.sums[i]);
}

/// RN(n·S2 - S1²): from the approximations when their bound decides it,
/// else exactly from the sums (counted in `exact`; the approximations are
/// re-seeded, so an undecided read-out caused by their drift is not repeated).
double n2_moment(Source& src, double n, std::uint64_t& exact) {
  refresh(src, 0);
  refresh(src, 1);
  if (const auto m = approx_n2_moment(src.approx[0], src.approx[1], n)) [[likely]]
    return *m;
  ++exact;
  ExactSum& s1 = src.exact(0);
  ExactSum& s2 = src.exact(1);
  src.approx[0].seed(s1);
  src.approx[1].seed(s2);
  return exact_n2_moment(s1, s2, n);
}

/// The population variance RN(n·S2 - S1²) / (n·n) (S1 = Σx, S2 = Σx², exact),
/// 0 when all samples are equal (as Welford gives). Where n·S2 - S1²
/// overflows (samples near 1e150 in a window of more than ~13,000) it is
/// Σx² - Σx·(Σx/n) in double-double instead, divided by n.
double variance_of(Source& src, double n, bool all_equal, std::uint64_t& exact) {
  if (all_equal) return 0;
  const double m = n2_moment(src, n, exact);
  if (std::isfinite(m)) [[likely]]
    return std::max(0.0, m) / (n * n);
  // An infinite RN came from the exact read-out: the sums are exact.
  const DoubleDouble m2 = centred(src.sums[1].value_dd(), src.sums[0].value_dd(), n);
  return std::max(0.0, m2.hi + m2.lo) / n;
}

/// zscore over the window without its latest sample: RN(n·latest - S1) /
/// sqrt(RN(n·S2 - S1²)), standardised's 0 and ±Inf cases kept.
double zscore_of(Source& src, double n, bool all_equal, double latest, std::uint64_t& exact) {
  refresh(src, 0);
  double num;
  if (const auto v = approx_n_deviation(src.approx[0], latest, n)) [[likely]] {
    num = *v;
  } else if (const auto f = src.exact(0).scaled_minus(latest, static_cast<std::uint64_t>(n))) {
    num = *f;  // exact in the fast form: cheap (an exact midpoint is common here)
  } else {
    ++exact;
    num = exact_n_deviation(src.exact(0), latest, n);
    src.approx[0].seed(src.sums[0]);
  }
  if (all_equal) return standardised(num, 0);
  const double m = n2_moment(src, n, exact);
  if (std::isfinite(m)) [[likely]]
    return standardised(num, std::sqrt(std::max(0.0, m)));
  const DoubleDouble m2 = centred(src.sums[1].value_dd(), src.sums[0].value_dd(), n);
  return standardised(num / n, std::sqrt(std::max(0.0, m2.hi + m2.lo) / n));
}

/// slope from exact Σd, Σd² (d = step - origin), Σy and Σd·y:
/// RN(n·Σdy - Σd·Σy) / RN(n·Σd² - (Σd)²) (the n's of the covariance and the
/// variance cancelled). Both are invariant under a shift of the origin, so
/// the value does not depend on which origin the window has.
double slope_of(__int128 sd, __int128 sdd, Source& src, double n, std::uint64_t& exact) {
  refresh(src, 0);
  refresh(src, 1);
  double num;
  if (const auto v = approx_slope_numerator(sd, src.approx[0], src.approx[1], n)) [[likely]] {
    num = *v;
  } else {
    ++exact;
    ExactSum& sy = src.exact(0);
    ExactSum& sdy = src.exact(1);
    num = exact_slope_numerator(sd, sy, sdy, n);
    src.approx[0].seed(sy);
    src.approx[1].seed(sdy);
  }
  return num / exact_slope_denominator(sd, sdd, n);
}

}  // namespace

// ---- ExactSum -----------------------------------------------------------------

void ExactSum::clear() {
  std::memset(d_, 0, sizeof d_);
  std::memset(a_, 0, sizeof a_);
  fast_ = true;
  e_ = -1;
  lo_ = digits;
  hi_ = -1;
  ops_ = slow_ops_ = 0;
  s_ = c_ = err_ = 0;
}

namespace {

/// a += b (minus false) or a -= b (minus true), four-word two's complement,
/// without a branch on the sign: a + (b ^ ~0) + 1 = a - b.
inline void add_words(std::uint64_t* a, const std::uint64_t* b, bool minus) {
  const std::uint64_t mask = 0 - static_cast<std::uint64_t>(minus);
  std::uint64_t carry = minus ? 1 : 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned __int128 t = static_cast<unsigned __int128>(a[i]) + (b[i] ^ mask) + carry;
    a[i] = static_cast<std::uint64_t>(t);
    carry = static_cast<std::uint64_t>(t >> 64);
  }
}

/// a += t (minus false) or a -= t (minus true), t = (t0, t1, t2, t3) in
/// registers: the hot path's version of add_words, unrolled.
inline void add_words(std::uint64_t* a, std::uint64_t t0, std::uint64_t t1, std::uint64_t t2,
                      std::uint64_t t3, bool minus) {
  const std::uint64_t mask = 0 - static_cast<std::uint64_t>(minus);
  unsigned __int128 s = static_cast<unsigned __int128>(a[0]) + (t0 ^ mask) + (minus ? 1 : 0);
  a[0] = static_cast<std::uint64_t>(s);
  s = static_cast<unsigned __int128>(a[1]) + (t1 ^ mask) + static_cast<std::uint64_t>(s >> 64);
  a[1] = static_cast<std::uint64_t>(s);
  s = static_cast<unsigned __int128>(a[2]) + (t2 ^ mask) + static_cast<std::uint64_t>(s >> 64);
  a[2] = static_cast<std::uint64_t>(s);
  a[3] = a[3] + (t3 ^ mask) + static_cast<std::uint64_t>(s >> 64);
}

/// |a| into m; true if a is negative.
inline bool magnitude(const std::uint64_t* a, std::uint64_t* m) {
  const bool minus = (a[3] >> 63) != 0;
  m[0] = m[1] = m[2] = m[3] = 0;
  add_words(m, a[0], a[1], a[2], a[3], minus);  // 0 - a, or 0 + a
  return minus;
}

}  // namespace

void ExactSum::put(double x, bool negate) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  std::uint64_t mant = bits & ((std::uint64_t{1} << 52) - 1);
  if (biased == 0 && mant == 0) return;  // +-0
  // x = mant * 2^(pos - 1074): pos is the bit position of mant's bit 0.
  int pos = 0;
  if (biased != 0) {
    mant |= std::uint64_t{1} << 52;
    pos = biased - 1;
  }
  const bool minus = ((bits >> 63) != 0) != negate;
  bool added = false;
  if (fast_) {
    // Placed by its lowest set bit: a two-product's rest is a short number
    // far below its mantissa's bit 0.
    const int tz = std::countr_zero(mant);
    const int low = pos + tz;
    // The first summand sets the anchor, with room for 64 lower bits.
    if (e_ < 0) e_ = std::max(0, low - 64);
    int o = low - e_;
    // Lower than the anchor: move the anchor down if the sum has room.
    if (o < 0 && reanchor(low)) o = low - e_;
    if (o >= 0 && o <= fast_span) [[likely]] {
      // mt·2^o as four words, selected in registers (w <= 2).
      const unsigned __int128 v = static_cast<unsigned __int128>(mant >> tz) << (o & 63);
      const auto vl = static_cast<std::uint64_t>(v), vh = static_cast<std::uint64_t>(v >> 64);
      const int w = o >> 6;
      add_words(a_, w == 0 ? vl : 0, w == 0 ? vh : w == 1 ? vl : 0, w == 1 ? vh : w == 2 ? vl : 0,
                w == 2 ? vh : 0, minus);
      added = true;
      // Each summand is below 2^223: 2^30 of them keep a sum below 2^224
      // within 2^255; then the sum is checked against 2^224 again.
      if (++ops_ >= (1U << 30)) {
        ops_ = 0;
        std::uint64_t m[4];
        magnitude(a_, m);
        if ((m[3] >> 32) != 0) spill();
      }
    } else {
      spill();
    }
  }
  if (!added) {
    const int i = pos >> 5;
    add_at(i, static_cast<unsigned __int128>(mant) << (pos & 31), minus);
    lo_ = std::min(lo_, i);
    hi_ = std::max(hi_, i + 2);
    // Each digit moves by < 2^32 per call: 2^30 calls stay far from int64's range.
    if (++ops_ >= (1U << 30)) normalise();
    // Back to the fast form now and then (a far-off summand may have left).
    if (++slow_ops_ >= 4096) compact();
  }
  if (track_) {
    // Neumaier: the rounding error of s_ + y is exact and goes into c_;
    // adding it to c_ rounds by at most 2^-53 |c_| (2^-51 here also covers
    // the rounding of err_'s own additions).
    const double y = negate ? -x : x;
    const double t = s_ + y;
    c_ += std::abs(s_) >= std::abs(y) ? (s_ - t) + y : (y - t) + s_;
    s_ = t;
    err_ += std::abs(c_) * 0x1p-51;
  }
}

bool ExactSum::reanchor(int low) {
  const int e = std::max(0, low - 32);
  const int k = e_ - e;  // > 0: the sum's words move up by k bits
  std::uint64_t m[4];
  const bool minus = magnitude(a_, m);
  int top = -1;
  for (int i = 3; i >= 0; --i)
    if (m[i] != 0) {
      top = 64 * i + 63 - std::countl_zero(m[i]);
      break;
    }
  if (top + k > 222) return false;  // the sum would leave the fast range
  if (top >= 0) {
    std::uint64_t r[4] = {0, 0, 0, 0};
    const int w = k >> 6, sh = k & 63;
    for (int i = 3; i >= w; --i) {
      r[i] = m[i - w] << sh;
      if (sh != 0 && i - w - 1 >= 0) r[i] |= m[i - w - 1] >> (64 - sh);
    }
    std::memset(a_, 0, sizeof a_);
    add_words(a_, r, minus);
  }
  e_ = e;
  return true;
}

void ExactSum::put_square(double x, bool negate) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  if (fast_ && biased >= 600 && e_ >= 0) {
    // |x| >= 2^-423: x = mt·2^(low - 1074) with mt odd, x·x = mt²·2^(2 low - 2148),
    // whose lowest bit is at 2 low - 1074 >= 0 (two_prod is exact here: the
    // same sum as its two halves).
    std::uint64_t mant = (bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
    const int tz = std::countr_zero(mant);
    mant >>= tz;
    const int low2 = 2 * (biased - 1 + tz) - 1074;
    const int o = low2 - e_;
    // mt² < 2^106 at o <= 117 stays below 2^223, within three words.
    if (o >= 0 && o <= 117) [[likely]] {
      add_fast(static_cast<unsigned __int128>(mant) * mant, o, negate);
      return;
    }
  }
  const DoubleDouble sq = two_prod(x, x);
  put(sq.hi, negate);
  put(sq.lo, negate);
}

void ExactSum::add_fast(unsigned __int128 v, int o, bool minus) {
  const int sh = o & 63, w = o >> 6;  // w <= 1
  const unsigned __int128 lo = v << sh;
  const auto top = sh == 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(v >> (128 - sh));
  const auto l0 = static_cast<std::uint64_t>(lo), l1 = static_cast<std::uint64_t>(lo >> 64);
  add_words(a_, w == 0 ? l0 : 0, w == 0 ? l1 : l0, w == 0 ? top : l1, w == 0 ? 0 : top, minus);
  if (++ops_ >= (1U << 30)) {
    ops_ = 0;
    std::uint64_t m[4];
    magnitude(a_, m);
    if ((m[3] >> 32) != 0) spill();
  }
}

void ExactSum::put_product(std::int64_t d, double y, bool negate) {
  std::uint64_t bits;
  std::memcpy(&bits, &y, sizeof bits);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  if (d == 0 || (biased == 0 && (bits << 1) == 0)) return;  // a zero product
  if (fast_ && biased != 0 && e_ >= 0) {
    // y = mt·2^(low - 1074), d·y = (|d|·mt)·2^(low - 1074): below 2^93.
    std::uint64_t mant = (bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
    const int tz = std::countr_zero(mant);
    mant >>= tz;
    const int o = biased - 1 + tz - e_;
    if (o >= 0 && o <= 117) [[likely]] {
      const auto ud = static_cast<std::uint64_t>(d < 0 ? -d : d);
      const bool minus = ((d < 0) != ((bits >> 63) != 0)) != negate;
      add_fast(static_cast<unsigned __int128>(ud) * mant, o, minus);
      return;
    }
  }
  const DoubleDouble p = two_prod(static_cast<double>(d), y);
  put(p.hi, negate);
  put(p.lo, negate);
}

void ExactSum::spill() {
  fast_ = false;
  slow_ops_ = 0;
  if (e_ >= 0) {
    std::uint64_t m[4];
    const bool minus = magnitude(a_, m);
    // Eight 32-bit pieces at bit e_ + 32 c: two digits each. The digits are
    // all zero in the fast form.
    for (int c = 0; c < 8; ++c) {
      const std::uint64_t piece = (m[c >> 1] >> (32 * (c & 1))) & 0xffffffffU;
      if (piece == 0) continue;
      const int bit = e_ + 32 * c;
      const int i = bit >> 5;
      const std::uint64_t v = piece << (bit & 31);
      const auto d0 = static_cast<std::int64_t>(v & 0xffffffffU);
      const auto d1 = static_cast<std::int64_t>(v >> 32);
      d_[i] += minus ? -d0 : d0;
      // The sum is below 2^1055 (2^31 doubles): a non-zero d1 is within the digits.
      if (d1 != 0) d_[i + 1] += minus ? -d1 : d1;
      lo_ = std::min(lo_, i);
      hi_ = std::max(hi_, i + 1);
    }
  }
  ops_ = 2;
  std::memset(a_, 0, sizeof a_);
  e_ = -1;
}

void ExactSum::compact() {
  slow_ops_ = 0;
  normalise();
  std::uint64_t m[4] = {0, 0, 0, 0};
  int e = -1;
  bool minus = false;
  if (hi_ >= lo_) {
    std::int64_t neg[digits];
    const std::int64_t* src;
    int top;
    minus = magnitude_digits(neg, src, top);
    e = std::max(0, 32 * lo_ - 64);
    if (32 * (top + 1) - e > 222) return;  // too wide: stays in the digits
    for (int i = lo_; i <= top; ++i) {
      const auto v = static_cast<std::uint64_t>(src[i]);
      const int bit = 32 * i - e, w = bit >> 6, sh = bit & 63;
      m[w] |= v << sh;
      if (sh > 32) m[w + 1] |= v >> (64 - sh);
    }
  }
  std::memset(a_, 0, sizeof a_);
  add_words(a_, m, minus);
  e_ = e;
  fast_ = true;
  std::memset(d_, 0, sizeof d_);
  lo_ = digits;
  hi_ = -1;
  ops_ = 0;
}

void ExactSum::normalise() {
  ops_ = 0;
  if (hi_ < lo_) return;
  std::int64_t carry = 0;
  int i = lo_;
  for (; i < digits - 1 && (i <= hi_ || carry != 0); ++i) {
    const std::int64_t d = d_[i] + carry;
    carry = d >> 32;  // floor division: the digit stays in [0, 2^32)
    d_[i] = d - carry * (std::int64_t{1} << 32);
  }
  if (carry != 0) d_[i] += carry;  // the top digit keeps the sign
  hi_ = std::max(hi_, i);
  while (hi_ >= lo_ && d_[hi_] == 0) --hi_;
  while (lo_ <= hi_ && d_[lo_] == 0) ++lo_;
  if (hi_ < lo_) {
    lo_ = digits;
    hi_ = -1;
  }
}

namespace {

/// 2^(32 i - 1074 - 1): the weight of bit 0 of a 97-bit window whose lowest
/// digit is digit i (the -1: the window is shifted left for the sticky
/// bit). Scaling by it is exact wherever the result is a normal double.
/// Only for 1 <= i < 64 (powers of two from 2^-1043 to 2^941: exact).
double digit_scale(int i) {
  static const auto table = [] {
    std::array<double, 64> t{};
    for (int k = 1; k < 64; ++k) t[static_cast<std::size_t>(k)] = std::ldexp(1.0, 32 * k - 1074 - 1);
    return t;
  }();
  return table[static_cast<std::size_t>(i)];
}

/// Digit i of a normalised digit string whose lowest digit in use is `lo`.
std::uint64_t digit_at(const std::int64_t* d, int lo, int i) {
  return i >= lo ? static_cast<std::uint64_t>(d[i]) : 0;
}

/// Rounds the normalised non-negative digit string (top digit `top`
/// non-zero) to the nearest double, ties to even: its top 96 bits cut to 62
/// significant bits with a sticky bit for everything below (53 bits, a
/// guard bit and a sticky bit round like the exact value), converted by the
/// hardware's int64 -> double, which rounds to nearest even.
double round_digits(const std::int64_t* d, int lo, int top) {
  const unsigned __int128 t = (static_cast<unsigned __int128>(digit_at(d, lo, top)) << 64) |
                              (static_cast<unsigned __int128>(digit_at(d, lo, top - 1)) << 32) |
                              digit_at(d, lo, top - 2);
  bool sticky = false;
  for (int i = lo; i <= top - 3; ++i) sticky |= d[i] != 0;
  // The top bit is bit 95 - z; keep bits [shift, 96) with shift >= 3.
  const int shift = 34 - std::countl_zero(static_cast<std::uint32_t>(d[top]));
  sticky |= (t & ((static_cast<unsigned __int128>(1) << shift) - 1)) != 0;
  const auto m = static_cast<std::int64_t>(static_cast<std::uint64_t>(t >> shift) | (sticky ? 1 : 0));
  const double r = static_cast<double>(m);
  // r * 2^(shift + 32 (top - 2) - 1074): exact wherever the result is normal.
  if (top - 2 >= 1 && top - 2 < 64) return static_cast<double>(std::uint64_t{1} << (shift + 1)) * r * digit_scale(top - 2);
  return std::ldexp(r, shift + 32 * (top - 2) - 1074);
}

/// 2^k, exactly, for -1074 <= k <= 1023.
double pow2(int k) {
  const std::uint64_t bits = k >= -1022 ? static_cast<std::uint64_t>(k + 1023) << 52
                                        : std::uint64_t{1} << (k + 1074);
  return std::bit_cast<double>(bits);
}

/// The non-zero magnitude m (four words) rounded to nearest, ties to even,
/// as r·2^shift: r an integer-valued double (at most 2^62). Its top 62 bits
/// with a sticky bit for everything below round like the exact value in
/// the hardware's int64 -> double conversion.
struct Rounded {
  double r;
  int shift;
};
Rounded round_words(const std::uint64_t* m) {
  int t = 3;
  while (m[t] == 0) --t;
  const int b = 64 * t + 63 - std::countl_zero(m[t]);  // the top bit
  if (b < 62) return {static_cast<double>(static_cast<std::int64_t>(m[0])), 0};
  const int shift = b - 61, w = shift >> 6, sh = shift & 63;
  std::uint64_t top = m[w] >> sh;
  if (sh != 0 && w + 1 < 4) top |= m[w + 1] << (64 - sh);
  bool sticky = (m[w] & ((std::uint64_t{1} << sh) - 1)) != 0;
  for (int i = 0; i < w; ++i) sticky |= m[i] != 0;
  return {static_cast<double>(static_cast<std::int64_t>(top | (sticky ? 1 : 0))), shift};
}

/// The top set bit of x (not 0).
inline int top_bit(unsigned __int128 x) {
  const auto h = static_cast<std::uint64_t>(x >> 64);
  return h != 0 ? 127 - std::countl_zero(h) : 63 - std::countl_zero(static_cast<std::uint64_t>(x));
}

/// The low `n` bits of x (0 <= n < 128).
inline unsigned __int128 low_bits(unsigned __int128 x, int n) {
  return x & ((static_cast<unsigned __int128>(1) << n) - 1);
}

/// x (non-zero) rounded to nearest, ties to even, as a double.
inline double round_u128(unsigned __int128 x) {
  if ((x >> 62) == 0) return static_cast<double>(static_cast<std::int64_t>(x));
  const int sh = top_bit(x) - 61;
  const auto top = static_cast<std::uint64_t>(x >> sh) | (low_bits(x, sh) != 0 ? 1 : 0);
  return static_cast<double>(static_cast<std::int64_t>(top)) * pow2(sh);  // exact: a normal double
}

/// The canonical double-double of a·2^(e - 1074) (a: four-word two's
/// complement): hi correctly rounded, lo the rest correctly rounded. A sum
/// of doubles is a multiple of 2^-1074, so below 2^-1022 it has at most 52
/// significant bits and r·2^k is exact there too: one rounding in all.
DoubleDouble words_dd(const std::uint64_t* a, int e, bool want_lo) {
  std::uint64_t m[4];
  const bool minus = magnitude(a, m);
  const unsigned __int128 lo = (static_cast<unsigned __int128>(m[1]) << 64) | m[0];
  const unsigned __int128 hi = (static_cast<unsigned __int128>(m[3]) << 64) | m[2];
  if ((lo | hi) == 0) return {0.0, 0.0};
  // The top 62 bits from bit `shift`, and a sticky bit for the rest.
  const int b = hi != 0 ? 128 + top_bit(hi) : top_bit(lo);
  int shift = 0;
  std::uint64_t top;
  bool sticky = false;
  if (b < 62) {
    top = static_cast<std::uint64_t>(lo);
  } else {
    shift = b - 61;
    if (shift >= 128) {
      top = static_cast<std::uint64_t>(hi >> (shift - 128));
      sticky = lo != 0 || low_bits(hi, shift - 128) != 0;
    } else {
      top = static_cast<std::uint64_t>((lo >> shift) | (shift > 0 ? hi << (128 - shift) : 0));
      sticky = low_bits(lo, shift) != 0;
    }
  }
  const double r = static_cast<double>(static_cast<std::int64_t>(top | (sticky ? 1 : 0)));
  const double h = r * pow2(shift + e - 1074);
  if (!want_lo || !std::isfinite(h)) return {minus ? -h : h, 0.0};
  double l;
  if (shift <= 100) {
    // The rest, m - r·2^shift = (top - r)·2^shift + (m's bits below shift),
    // with |top - r| <= 2^9: within 2^110, one signed 128-bit number.
    const __int128 rest = (static_cast<__int128>(static_cast<std::int64_t>(top) -
                                                 static_cast<std::int64_t>(r))
                           << shift) +
                          static_cast<__int128>(shift > 0 ? low_bits(lo, shift) : 0);
    if (rest == 0) {
      l = 0.0;
    } else {
      const double x = round_u128(static_cast<unsigned __int128>(rest < 0 ? -rest : rest)) * pow2(e - 1074);
      l = rest < 0 ? -x : x;
    }
  } else {
    // A sum spanning more than 160 bits: the rest in four words.
    const auto ri = static_cast<std::uint64_t>(r);
    std::uint64_t rw[4] = {0, 0, 0, 0};
    const int w = shift >> 6, sh = shift & 63;
    rw[w] = ri << sh;
    if (w + 1 < 4) rw[w + 1] = (ri >> 1) >> (63 - sh);
    add_words(m, rw, true);
    std::uint64_t rest[4];
    const bool rest_minus = magnitude(m, rest);
    l = 0.0;
    if ((rest[0] | rest[1] | rest[2] | rest[3]) != 0) {
      const Rounded q = round_words(rest);
      l = q.r * pow2(q.shift + e - 1074);
      if (rest_minus) l = -l;
    }
  }
  // A zero rest is +0 whatever the sign (as the digits give it).
  return minus ? DoubleDouble{-h, l == 0 ? 0.0 : -l} : DoubleDouble{h, l};
}

}  // namespace

double ExactSum::value() {
  if (track_) {
    const double r = s_ + c_;
    if (r == 0 && err_ == 0) return 0.0;  // the exact sum is 0
    const double ar = std::abs(r);
    // Sterbenz: with |c_| <= |s_| / 2, r is within a factor 2 of s_ and
    // s_ - r is exact; d = s_ + c_ - r then rounds by at most 2^-53 |d|.
    if (ar >= 0x1p-960 && ar <= 0x1p960 && std::abs(c_) <= std::abs(s_) / 2) {
      const double d = (s_ - r) + c_;
      // Half the gap from |r| to its neighbour towards zero (the smaller
      // one): an exact sum strictly closer to r than that rounds to r.
      std::uint64_t bits;
      std::memcpy(&bits, &ar, sizeof bits);
      --bits;
      double below;
      std::memcpy(&below, &bits, sizeof below);
      if (std::abs(d) * (1 + 0x1p-51) + err_ < (ar - below) * 0.5) return r;
    }
    // Undecided: the exact sum, and the compensated sum re-seeded from it
    // (value_dd is within 2^-106 of the sum where it is this large).
    const DoubleDouble dd = value_dd();
    const double exact = dd.hi;
    s_ = dd.hi;
    c_ = dd.lo;
    const double a = std::abs(dd.hi);
    err_ = a == 0 ? 0 : a >= 0x1p-900 && a <= 0x1p900 ? a * 0x1p-90 : inf;
    return exact;
  }
  return exact_value();
}

double ExactSum::exact_value() {
  if (fast_) return words_dd(a_, e_, false).hi;
  normalise();
  if (hi_ < lo_) return 0.0;
  std::int64_t neg[digits];
  const std::int64_t* src;
  int top;
  const bool minus = magnitude_digits(neg, src, top);
  const double r = round_digits(src, lo_, top);
  return minus ? -r : r;
}

bool ExactSum::magnitude_digits(std::int64_t* neg, const std::int64_t*& src, int& top) const {
  if (d_[hi_] >= 0) {
    src = d_;
    top = hi_;
    return false;
  }
  top = negated(neg);
  src = neg;
  return true;
}

int ExactSum::negated(std::int64_t* neg) const {
  std::int64_t carry = 0;
  for (int i = lo_; i <= hi_; ++i) {
    const std::int64_t d = -d_[i] + carry;
    carry = d >> 32;
    neg[i] = d - carry * (std::int64_t{1} << 32);
  }
  int top = hi_;
  while (top >= lo_ && neg[top] == 0) --top;
  return top;
}

DoubleDouble ExactSum::value_dd() {
  if (fast_) return words_dd(a_, e_, true);
  // The digits (a summand far from the others is in the window): the rest
  // is the sum less hi, rounded again. A copy: this is the rare path.
  const double hi = exact_value();
  if (hi == 0 || !std::isfinite(hi)) return {hi, 0.0};
  ExactSum rest = *this;
  rest.track_ = false;
  rest.remove(hi);
  return {hi, rest.exact_value()};
}

bool ExactSum::add_scaled(ExactSum& other, std::int64_t m) {
  // In the digits (rare: a slope re-centring), then back to the fast form.
  if (fast_) spill();
  if (other.fast_) other.spill();
  const bool ok = add_scaled_digits(other, m);
  compact();
  other.compact();
  return ok;
}

bool ExactSum::add_scaled_digits(ExactSum& other, std::int64_t m) {
  other.normalise();
  if (other.hi_ < other.lo_ || m == 0) return true;
  // |other| as non-negative normalised digits, its sign folded into m.
  std::int64_t neg[digits];
  const std::int64_t* src;
  int top;
  if (other.magnitude_digits(neg, src, top)) m = -m;
  if (top + 2 >= digits) return false;
  const bool minus = m < 0;
  const auto um = static_cast<std::uint64_t>(minus ? -m : m);  // < 2^40
  for (int i = other.lo_; i <= top; ++i) {
    // < 2^72: three digits, the top one below 2^8.
    add_at(i, static_cast<unsigned __int128>(um) * static_cast<std::uint64_t>(src[i]), minus);
  }
  lo_ = std::min(lo_, other.lo_);
  hi_ = std::max(hi_, top + 2);
  // Each digit moved by at most three terms below 2^32: three additions' worth.
  ops_ += 3;
  if (ops_ >= (1U << 30)) normalise();
  return true;
}

void ExactSum::exact_words(Words& out) {
  out.neg = false;
  out.exp = 0;
  out.len = 0;
  if (fast_) {
    if (e_ < 0) return;
    std::uint64_t m[4];
    out.neg = magnitude(a_, m);
    int len = 4;
    while (len > 0 && m[len - 1] == 0) --len;
    for (int i = 0; i < len; ++i) out.w[i] = m[i];
    out.len = len;
    out.exp = e_ - 1074;
    if (len == 0) out.neg = false;
    return;
  }
  normalise();
  if (hi_ < lo_) return;
  std::int64_t neg[digits];
  const std::int64_t* src;
  int top;
  out.neg = magnitude_digits(neg, src, top);
  // Digits lo_..top (each in [0, 2^32)), two to a word.
  const int count = top - lo_ + 1;
  out.len = (count + 1) / 2;
  for (int i = 0; i < out.len; ++i) {
    const int d = lo_ + 2 * i;
    const auto low = static_cast<std::uint64_t>(src[d]);
    const auto high = d + 1 <= top ? static_cast<std::uint64_t>(src[d + 1]) : 0;
    out.w[i] = low | (high << 32);
  }
  while (out.len > 0 && out.w[out.len - 1] == 0) --out.len;
  out.exp = 32 * lo_ - 1074;
}

std::optional<double> ExactSum::scaled_minus(double x, std::uint64_t n) const {
  if (!fast_) return std::nullopt;
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  std::uint64_t mant = bits & ((std::uint64_t{1} << 52) - 1);
  if (e_ < 0 || (biased == 0 && mant == 0) || n == 0) {
    // A zero sum (n·x rounded once), or a zero product (-sum rounded).
    const double r = e_ < 0 ? x * static_cast<double>(n) : -words_dd(a_, e_, false).hi;
    return r == 0 ? 0.0 : r;  // an exact zero is +0, as the multi-word read-out gives it
  }
  int pos = 0;
  if (biased != 0) {
    mant |= std::uint64_t{1} << 52;
    pos = biased - 1;
  }
  const int tz = std::countr_zero(mant);
  const int o = pos + tz - e_;
  // n·mt < 2^106 at o <= 117: below 2^223, as a summand of the fast form.
  if (o < 0 || o > 117) return std::nullopt;
  const unsigned __int128 v = static_cast<unsigned __int128>(mant >> tz) * n;
  const int sh = o & 63, w = o >> 6;
  const unsigned __int128 lo = v << sh;
  const auto top = sh == 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(v >> (128 - sh));
  const auto l0 = static_cast<std::uint64_t>(lo), l1 = static_cast<std::uint64_t>(lo >> 64);
  // t = 0 - sum, then ± n·x: the sum is below 2^224, the result below 2^225.
  std::uint64_t t[4] = {0, 0, 0, 0};
  add_words(t, a_, true);
  add_words(t, w == 0 ? l0 : 0, w == 0 ? l1 : l0, w == 0 ? top : l1, w == 0 ? 0 : top, (bits >> 63) != 0);
  return words_dd(t, e_, false).hi;
}

// ---- ApproxSum ------------------------------------------------------------------

namespace {
// The bodies of ApproxSum::add/add2, inlined into the running windows' moves.
[[gnu::always_inline]] inline void approx_add(ApproxSum& a, double x) {
  const DoubleDouble s = two_sum(a.hi, x);  // exact
  const double w = s.lo + a.lo;             // the one rounding: <= 2^-53 |w|
  const DoubleDouble r = two_sum(s.hi, w);
  a.hi = r.hi;
  a.lo = r.lo;
  a.err += std::abs(w) * 0x1p-52;
  ++a.ops;
}
[[gnu::always_inline]] inline void approx_add2(ApproxSum& a, double p, double e) {
  const DoubleDouble s = two_sum(a.hi, p);
  const double w1 = s.lo + a.lo;  // <= 2^-53 |w1|
  const double w2 = w1 + e;       // <= 2^-53 |w2|
  const DoubleDouble r = two_sum(s.hi, w2);
  a.hi = r.hi;
  a.lo = r.lo;
  a.err += (std::abs(w1) + std::abs(w2)) * 0x1p-52;
  ++a.ops;
}
/// A sample v entering (Add) or leaving a pair of approximated sums: Σv
/// and the sum of the exact term t (v², or d·v), given as its two-product.
template <bool Add>
[[gnu::always_inline]] inline void approx_move(ApproxSum* a, double v, DoubleDouble t) {
  if constexpr (Add) {
    approx_add(a[0], v);
    approx_add2(a[1], t.hi, t.lo);
  } else {
    approx_add(a[0], -v);
    approx_add2(a[1], -t.hi, -t.lo);
  }
}
}  // namespace

void ApproxSum::add(double x) { approx_add(*this, x); }
void ApproxSum::add2(double p, double e) { approx_add2(*this, p, e); }

void ApproxSum::seed(ExactSum& s) {
  const DoubleDouble dd = s.value_dd();
  hi = dd.hi;
  lo = dd.lo;
  // Canonical: |sum - (hi + lo)| <= ulp(lo) / 2 <= 2^-106 |hi| (and at most
  // 2^-1075 where lo is subnormal: the read-out's 2^-1000 covers it). An
  // overflowing hi (sums of squares near 1e150 over 2^26 samples) is not
  // finite: stale, and the read-outs go exact.
  err = std::isfinite(hi) ? std::abs(hi) * 0x1p-105 : inf;
  ops = 0;
}

// ---- NarrowMoments ---------------------------------------------------------------

namespace {
/// out = a + b + c, returning the carry out (one adc on x86-64).
[[gnu::always_inline]] inline unsigned char add_carry(unsigned char c, std::uint64_t a, std::uint64_t b,
                                                      std::uint64_t& out) {
#if defined(__x86_64__)
  unsigned long long r;
  c = _addcarry_u64(c, a, b, &r);
  out = r;
  return c;
#else
  const unsigned __int128 t = static_cast<unsigned __int128>(a) + b + c;
  out = static_cast<std::uint64_t>(t);
  return static_cast<unsigned char>(t >> 64);
#endif
}
}  // namespace

template <bool Add>
[[gnu::always_inline]] inline bool NarrowMoments::put(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  if (biased == 0) return (bits << 1) == 0;  // +-0 adds nothing; subnormals do not fit
  if (e_ < 0) [[unlikely]] {
    const int e = biased - 1 - below;
    if (e < lowest_anchor || e > highest_anchor) return false;
    e_ = e;
  }
  const auto o = static_cast<unsigned>(biased - 1 - e_);
  if (o > span) return false;
  const std::uint64_t m = (bits & mantissa) | (mantissa + 1);
  // Shifts by at most 63 (the (v >> 1) >> (63 - k) form has no shift by 64):
  // x = m·2^o in two words, x² = m²·2^(2o) in three from word (2o) / 64.
  const std::uint64_t x0 = m << o, x1 = (m >> 1) >> (63 - o);
  const auto sq = static_cast<unsigned __int128>(m) * m;
  const auto q0 = static_cast<std::uint64_t>(sq), q1 = static_cast<std::uint64_t>(sq >> 64);
  const unsigned sh = (2 * o) & 63;
  const std::uint64_t w0 = q0 << sh, w1 = (q1 << sh) | ((q0 >> 1) >> (63 - sh)), w2 = (q1 >> 1) >> (63 - sh);
  std::uint64_t* p = s2_ + (2 * o >= 64);
  // a ± t as a + (t ^ mask) + carry: mask all ones and a first carry of 1 subtract.
  const bool minus_x = ((bits >> 63) != 0) == Add;
  const auto vx = static_cast<__int128>((static_cast<unsigned __int128>(x1) << 64) | x0);
  s1_ += minus_x ? -vx : vx;  // |Σx| < 2^126: no overflow
  constexpr std::uint64_t mask = Add ? 0 : ~std::uint64_t{0};
  unsigned char c = add_carry(Add ? 0 : 1, p[0], w0 ^ mask, p[0]);
  c = add_carry(c, p[1], w1 ^ mask, p[1]);
  c = add_carry(c, p[2], w2 ^ mask, p[2]);
  add_carry(c, p[3], mask, p[3]);
  return true;
}
template bool NarrowMoments::put<true>(double);
template bool NarrowMoments::put<false>(double);

std::optional<double> NarrowMoments::scaled_minus(double x, std::uint64_t n) const {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  const auto o = static_cast<unsigned>(biased - 1 - e_);
  // v = n·x - Σx in two's complement (|v| < 2^127: n·mantissa < 2^85, at
  // o <= 40 below 2^125; Σx below 2^126).
  auto v = -static_cast<unsigned __int128>(s1_);
  if (e_ >= 0 && biased != 0 && o <= span && n < (std::uint64_t{1} << 32)) [[likely]] {
    const auto p = static_cast<unsigned __int128>((bits & mantissa) | (mantissa + 1)) * n;
    const auto sign = static_cast<unsigned __int128>(0) - (bits >> 63);  // 0 or all ones
    v += ((p << o) ^ sign) - sign;
  } else if (e_ < 0 && n < (std::uint64_t{1} << 32)) {
    // An empty (or zero) sum: n·x rounded once; an exact zero is +0.
    const double r = x * static_cast<double>(n);
    return r == 0 ? 0.0 : r;
  } else if ((bits << 1) != 0 || n >= (std::uint64_t{1} << 32)) {
    return std::nullopt;  // x out of range (x = +-0 leaves v = -Σx)
  }
  // RN(|v|): below 2^64 the 64-bit conversion (to nearest even); above, the
  // top 63 bits (the leading one at bit 62) with a sticky bit 0 for the
  // rest go through the signed one, which rounds at bit 10: the sticky bit
  // lies below the rounding bit, so the result is that of the exact value.
  const bool neg = static_cast<__int128>(v) < 0;
  const auto u = neg ? -v : v;
  const auto top = static_cast<std::uint64_t>(u >> 64), low = static_cast<std::uint64_t>(u);
  double r;
  if (top == 0) {
    r = static_cast<double>(low);
  } else {
    const int z = std::countl_zero(top) - 1;  // 0..62: u << z has its leading bit at 126
    const std::uint64_t head = (top << z) | ((low >> 1) >> (63 - z));
    r = static_cast<double>(static_cast<std::int64_t>(head | ((low << z) != 0))) * pow2(64 - z);
  }
  // Exact: a non-zero integer times 2^(e_ - 1074) >= 2^-511 (a zero v gives +0).
  return (neg ? -r : r) * pow2(e_ - 1074);
}

double NarrowMoments::n2_moment(std::uint64_t n) const {
  // (Σx)² = (a1·2^64 + a0)² with a1 < 2^62, and n·Σx², in four words each.
  const auto a = s1_ < 0 ? -static_cast<unsigned __int128>(s1_) : static_cast<unsigned __int128>(s1_);
  const auto a0 = static_cast<std::uint64_t>(a), a1 = static_cast<std::uint64_t>(a >> 64);
  using U = unsigned __int128;
  const U p00 = static_cast<U>(a0) * a0, p01 = (static_cast<U>(a0) * a1) << 1, p11 = static_cast<U>(a1) * a1;
  std::uint64_t q[4];
  q[0] = static_cast<std::uint64_t>(p00);
  unsigned char c = add_carry(0, static_cast<std::uint64_t>(p00 >> 64), static_cast<std::uint64_t>(p01), q[1]);
  c = add_carry(c, static_cast<std::uint64_t>(p11), static_cast<std::uint64_t>(p01 >> 64), q[2]);
  add_carry(c, static_cast<std::uint64_t>(p11 >> 64), 0, q[3]);
  // M = n·Σx² - (Σx)², word by word (M >= 0: Cauchy-Schwarz, exactly).
  const U t0 = static_cast<U>(s2_[0]) * n;
  const U t1 = static_cast<U>(s2_[1]) * n + static_cast<std::uint64_t>(t0 >> 64);
  const U t2 = static_cast<U>(s2_[2]) * n + static_cast<std::uint64_t>(t1 >> 64);
  const std::uint64_t t3 = s2_[3] * n + static_cast<std::uint64_t>(t2 >> 64);
  std::uint64_t m0, m1, m2, m3;
  unsigned char b = add_carry(1, static_cast<std::uint64_t>(t0), ~q[0], m0);
  b = add_carry(b, static_cast<std::uint64_t>(t1), ~q[1], m1);
  b = add_carry(b, static_cast<std::uint64_t>(t2), ~q[2], m2);
  add_carry(b, t3, ~q[3], m3);
  // RN(M): its top word, the next and a sticky bit for the rest (the
  // unsigned 64-bit conversion rounds to nearest even, below the sticky bit).
  std::uint64_t top, next, rest;
  int base;
  if (m3 != 0) {
    top = m3, next = m2, rest = m1 | m0, base = 192;
  } else if (m2 != 0) {
    top = m2, next = m1, rest = m0, base = 128;
  } else if (m1 != 0) {
    top = m1, next = m0, rest = 0, base = 64;
  } else {
    return static_cast<double>(m0) * pow2(2 * (e_ - 1074));  // exact: normal or 0
  }
  const int z = std::countl_zero(top);
  const std::uint64_t head = (top << z) | ((next >> 1) >> (63 - z));
  const double r = static_cast<double>(head | (((next << z) | rest) != 0));
  // r·2^(base - z) <= 2^256; then the anchor's A², exactly (a normal result).
  return r * pow2(base - z) * pow2(2 * (e_ - 1074));
}

namespace {

// ---- The read-outs: fast (double-double with a bound) and exact ------------

/// A bound on the read-out's distance from the exact quantity: `e` (the
/// approximations' bounds propagated and the double-double evaluation's
/// roundings) widened for the roundings of the bound's own arithmetic
/// (relative 2^-20, far more than the few 2^-53's and the 2^30 additions'
/// worth of err's roundings), plus 2^-1000 for everything that can
/// underflow (products of tiny low parts: each loses at most 2^-1075).
double widen(double e) { return e * (1 + 0x1p-20) + 0x1p-1000; }

/// RN(exact), if the interval m ± err (m = hi + lo, hi = RN(m)) lies strictly
/// inside hi's rounding interval: then every value in it rounds to hi.
/// The boundaries of that interval are the midpoints between hi and its
/// neighbours (where ties-to-even decides): strictly inside, no tie can
/// occur. The smaller of the two gaps is used (hi a power of two has a
/// half-size gap below). Tiny or non-finite values are left undecided.
[[gnu::always_inline]] inline std::optional<double> decided(DoubleDouble m, double err) {
  const double ah = std::abs(m.hi);
  if (!(ah >= 0x1p-900 && ah <= 0x1p1000)) return std::nullopt;
  std::uint64_t bits;
  std::memcpy(&bits, &ah, sizeof bits);
  --bits;
  double below;
  std::memcpy(&below, &bits, sizeof below);
  const double half_gap = (ah - below) * 0.5;  // both exact (Sterbenz; a power of two)
  // (|lo| + err) rounded, then enlarged past both roundings of this test.
  if ((std::abs(m.lo) + err) * (1 + 0x1p-50) < half_gap) return m.hi;
  return std::nullopt;
}

/// a - b in double-double, the final normalisation by two_sum (exact for
/// any magnitudes, as cancellation can leave the low part the larger).
[[gnu::always_inline]] inline DoubleDouble dd_sub_exact(DoubleDouble a, DoubleDouble b) {
  DoubleDouble s = two_sum(a.hi, -b.hi);
  s.lo += a.lo - b.lo;
  return two_sum(s.hi, s.lo);
}

}  // namespace

// Evaluation errors of the double-double formulas below (u = 2^-53, X and Y
// the magnitudes of the two products): n·B (two_prod exact, b.lo·n and the
// sum rounded) within 3.01 u² X; A·A (two_prod exact, two cross products,
// their sum and its sum with the error term rounded, a.lo² dropped) within
// 8.02 u² Y; the difference (two low-part roundings) within 3.03 u² (X + Y):
// 12 u² (X + Y) < 2^-102 (X + Y) in all; 2^-100 (X + Y) is used.

std::optional<double> approx_n2_moment(const ApproxSum& s1, const ApproxSum& s2, double n) {
  const double ah = std::abs(s1.hi), bh = s2.hi;
  // Magnitudes where every product below is a normal double.
  if (!(bh >= 0x1p-400 && bh <= 0x1p900 && ah <= 0x1p450 && n * bh <= 0x1p1000)) return std::nullopt;
  const DoubleDouble m = dd_sub_exact(dd_scale({s2.hi, s2.lo}, n), dd_mul({s1.hi, s1.lo}, {s1.hi, s1.lo}));
  // |n·S2 - n·B| <= n err2; |S1² - A²| = |S1 - A| |S1 + A| <= err1 (2|A| + err1).
  const double x = n * bh, y = ah * ah;
  const double e = n * s2.err + s1.err * (2 * ah * (1 + 0x1p-50) + s1.err) + (x + y) * 0x1p-100;
  return decided(m, widen(e));
}

std::optional<double> approx_n_deviation(const ApproxSum& s1, double latest, double n) {
  const double ah = std::abs(s1.hi), x = n * std::abs(latest);
  if (!(ah <= 0x1p1000 && x <= 0x1p1000 && (x >= 0x1p-800 || x == 0))) return std::nullopt;
  // n·latest exactly as two_prod's halves (normal: x is not tiny or is 0).
  const DoubleDouble m = dd_sub_exact(two_prod(latest, n), {s1.hi, s1.lo});
  // The difference's two low-part roundings: within 2^-100 (x + |A|).
  const double e = s1.err + (x + ah) * 0x1p-100;
  return decided(m, widen(e));
}

std::optional<double> approx_slope_numerator(__int128 sd, const ApproxSum& sy, const ApproxSum& sdy,
                                             double n) {
  const DoubleDouble d = dd_of(sd);  // exact: |Σd| < 2^106
  const double ad = std::abs(d.hi), ay = std::abs(sy.hi), ap = std::abs(sdy.hi);
  if (!(ap <= 0x1p900 && n * ap <= 0x1p1000 && ad <= 0x1p100 && ay <= 0x1p800)) return std::nullopt;
  const DoubleDouble m = dd_sub_exact(dd_scale({sdy.hi, sdy.lo}, n), dd_mul(d, {sy.hi, sy.lo}));
  // Σd is exact: |Σd·Σy - D·Y| <= |D| err_y; dd_mul's errors as A·A's.
  const double x = n * ap, y = ad * ay;
  const double e = n * sdy.err + ad * (1 + 0x1p-50) * sy.err + (x + y) * 0x1p-100;
  return decided(m, widen(e));
}

namespace {

/// A signed multi-word number: ±(Σ w[i]·2^(64 i))·2^exp. Wide enough for
/// n·S2 - S1² aligned at S1²'s lowest bit: S1, S2 lie within [2^-1074,
/// 2^1102) (68 digits of 32 bits), n < 2^53, so every operand and result
/// spans fewer than 4,420 bits (70 words).
struct Big {
  static constexpr int words = 80;
  bool neg = false;
  int exp = 0;
  int len = 0;  // words in use (the top one may be 0 after arithmetic)
  std::uint64_t w[words];
};

void big_from(Big& b, const ExactSum::Words& s) {
  b.neg = s.neg;
  b.exp = s.exp;
  b.len = s.len;
  for (int i = 0; i < s.len; ++i) b.w[i] = s.w[i];
}

void big_from(Big& b, unsigned __int128 mag, bool neg, int exp) {
  b.neg = neg;
  b.exp = exp;
  b.w[0] = static_cast<std::uint64_t>(mag);
  b.w[1] = static_cast<std::uint64_t>(mag >> 64);
  b.len = b.w[1] != 0 ? 2 : b.w[0] != 0 ? 1 : 0;
}

/// A finite double, exactly.
void big_from(Big& b, double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  std::uint64_t mant = bits & ((std::uint64_t{1} << 52) - 1);
  if (biased != 0) mant |= std::uint64_t{1} << 52;
  big_from(b, mant, (bits >> 63) != 0, (biased != 0 ? biased - 1 : 0) - 1074);
}

/// out = a·b (out distinct from both).
void big_mul(const Big& a, const Big& b, Big& out) {
  out.neg = a.neg != b.neg;
  out.exp = a.exp + b.exp;
  out.len = a.len + b.len;
  for (int i = 0; i < out.len; ++i) out.w[i] = 0;
  for (int i = 0; i < a.len; ++i) {
    std::uint64_t carry = 0;
    for (int j = 0; j < b.len; ++j) {
      const unsigned __int128 t =
          static_cast<unsigned __int128>(a.w[i]) * b.w[j] + out.w[i + j] + carry;
      out.w[i + j] = static_cast<std::uint64_t>(t);
      carry = static_cast<std::uint64_t>(t >> 64);
    }
    out.w[i + b.len] = carry;
  }
}

/// The magnitude of `b` shifted left by `sh` bits into `out` (`words` long).
void shifted(const Big& b, int sh, std::uint64_t* out, int words) {
  for (int i = 0; i < words; ++i) out[i] = 0;
  const int ws = sh >> 6, bs = sh & 63;
  for (int i = 0; i < b.len && i + ws < words; ++i) {
    out[i + ws] |= b.w[i] << bs;
    if (bs != 0 && i + ws + 1 < words) out[i + ws + 1] |= b.w[i] >> (64 - bs);
  }
}

/// out = a - b.
void big_sub(const Big& a, const Big& b, Big& out) {
  const int e = std::min(a.len ? a.exp : b.exp, b.len ? b.exp : a.exp);
  const int sa = a.exp - e, sb = b.exp - e;
  int len = std::max(a.len * 64 + sa, b.len * 64 + sb) / 64 + 2;
  len = std::min(len, Big::words);
  std::uint64_t x[Big::words], y[Big::words];
  shifted(a, a.len ? sa : 0, x, len);
  shifted(b, b.len ? sb : 0, y, len);
  // a - b = sign_a·x - sign_b·y: add magnitudes when the signs differ.
  const bool bneg = !b.neg;
  out.exp = e;
  out.len = len;
  if (a.neg == bneg) {
    std::uint64_t carry = 0;
    for (int i = 0; i < len; ++i) {
      const unsigned __int128 t = static_cast<unsigned __int128>(x[i]) + y[i] + carry;
      out.w[i] = static_cast<std::uint64_t>(t);
      carry = static_cast<std::uint64_t>(t >> 64);
    }
    out.neg = a.neg;
    return;
  }
  // Subtract the smaller magnitude from the larger.
  int cmp = 0;
  for (int i = len - 1; i >= 0 && cmp == 0; --i)
    if (x[i] != y[i]) cmp = x[i] > y[i] ? 1 : -1;
  const std::uint64_t* big = cmp >= 0 ? x : y;
  const std::uint64_t* small = cmp >= 0 ? y : x;
  std::uint64_t borrow = 0;
  for (int i = 0; i < len; ++i) {
    const std::uint64_t t = big[i] - small[i];
    const std::uint64_t r = t - borrow;
    borrow = (big[i] < small[i]) || (t < borrow) ? 1 : 0;
    out.w[i] = r;
  }
  out.neg = cmp >= 0 ? a.neg : bneg;
}

/// 64 bits of the magnitude from bit `from` (>= 0).
std::uint64_t bits_at(const Big& b, int from) {
  const int i = from >> 6, sh = from & 63;
  const std::uint64_t lo = i < b.len ? b.w[i] >> sh : 0;
  const std::uint64_t hi = sh != 0 && i + 1 < b.len ? b.w[i + 1] << (64 - sh) : 0;
  return lo | hi;
}

/// Whether any bit of the magnitude below bit `to` is set.
bool any_below(const Big& b, int to) {
  const int i = to >> 6, sh = to & 63;
  for (int k = 0; k < std::min(i, b.len); ++k)
    if (b.w[k] != 0) return true;
  return i < b.len && sh != 0 && (b.w[i] & ((std::uint64_t{1} << sh) - 1)) != 0;
}

/// The number rounded to the nearest double, ties to even (±Inf beyond the
/// largest; subnormal results rounded at 2^-1074 like the hardware does).
double big_round(const Big& b) {
  int len = b.len;
  while (len > 0 && b.w[len - 1] == 0) --len;
  if (len == 0) return 0.0;
  const int t = 64 * (len - 1) + 63 - std::countl_zero(b.w[len - 1]);  // the top bit
  const long top = static_cast<long>(t) + b.exp;                         // its weight
  double r;
  if (top >= 1024) {
    r = inf;
  } else {
    const long q = std::max(top - 52, -1074L);  // the weight of the last bit kept
    const long rel = q - b.exp;
    if (rel <= 0) {
      // Every bit fits (at most 53 of them): exact.
      r = std::ldexp(static_cast<double>(b.w[0]), b.exp);
    } else {
      const int from = static_cast<int>(rel);
      // The bits kept: none when the number lies wholly below the smallest
      // subnormal's bit (it rounds to 0 or to 2^-1074 then).
      const int kept = t - from + 1;
      std::uint64_t m = kept > 0 ? bits_at(b, from) & ((std::uint64_t{1} << kept) - 1) : 0;
      const bool guard = ((bits_at(b, from - 1)) & 1) != 0;
      const bool sticky = any_below(b, from - 1);
      if (guard && (sticky || (m & 1) != 0)) ++m;
      r = std::ldexp(static_cast<double>(m), static_cast<int>(q));  // exact, or Inf past the top
    }
  }
  return b.neg ? -r : r;
}

/// A non-negative integer below 2^53 (n), exactly.
void big_from_count(Big& b, double n) {
  big_from(b, static_cast<unsigned __int128>(static_cast<std::uint64_t>(n)), false, 0);
}

}  // namespace

double exact_n2_moment(ExactSum& s1, ExactSum& s2, double n) {
  ExactSum::Words w;
  Big a, b, nb, sq, prod, out;
  s1.exact_words(w);
  big_from(a, w);
  s2.exact_words(w);
  big_from(b, w);
  big_from_count(nb, n);
  big_mul(a, a, sq);
  big_mul(nb, b, prod);
  big_sub(prod, sq, out);
  return big_round(out);
}

double exact_n_deviation(ExactSum& s1, double latest, double n) {
  if (const auto fast = s1.scaled_minus(latest, static_cast<std::uint64_t>(n))) return *fast;
  ExactSum::Words w;
  Big a, x, nb, prod, out;
  s1.exact_words(w);
  big_from(a, w);
  big_from(x, latest);
  big_from_count(nb, n);
  big_mul(nb, x, prod);
  big_sub(prod, a, out);
  return big_round(out);
}

double exact_slope_numerator(__int128 sd, ExactSum& sy, ExactSum& sdy, double n) {
  ExactSum::Words w;
  Big y, p, d, nb, left, right, out;
  sy.exact_words(w);
  big_from(y, w);
  sdy.exact_words(w);
  big_from(p, w);
  big_from(d, static_cast<unsigned __int128>(sd < 0 ? -sd : sd), sd < 0, 0);
  big_from_count(nb, n);
  big_mul(nb, p, left);
  big_mul(d, y, right);
  big_sub(left, right, out);
  return big_round(out);
}

double exact_slope_denominator(__int128 sd, __int128 sdd, double n) {
  if (n < 0x1p32 && sdd < (static_cast<__int128>(1) << 95) &&
      (sd < 0 ? -sd : sd) < (static_cast<__int128>(1) << 63)) {
    // Through int64 and round_u128: the double <-> int128 conversions are
    // library calls. n·Σd² >= (Σd)² (Cauchy-Schwarz).
    const __int128 d = static_cast<__int128>(static_cast<std::int64_t>(n)) * sdd - sd * sd;
    return d > 0 ? round_u128(static_cast<unsigned __int128>(d)) : 0.0;
  }
  Big d, dd, nb, left, right, out;
  big_from(d, static_cast<unsigned __int128>(sd < 0 ? -sd : sd), sd < 0, 0);
  big_from(dd, static_cast<unsigned __int128>(sdd), false, 0);
  big_from_count(nb, n);
  big_mul(nb, dd, left);
  big_mul(d, d, right);
  big_sub(left, right, out);
  return big_round(out);
}

// ---- Deque --------------------------------------------------------------------

template <bool Max>
void RunningWindow::Deque::push(double v, std::uint64_t k) {
  // Ties: the newer sample replaces the older (it stays longer).
  while (size > 0 && (Max ? at(size - 1).v <= v : at(size - 1).v >= v)) --size;
  if (size == buf.size()) [[unlikely]]
    grow();
  at(size++) = {v, k};
}

void RunningWindow::Deque::grow() {
  std::vector<Entry> grown(std::max<std::size_t>(16, buf.size() * 2));
  for (std::size_t i = 0; i < size; ++i) grown[i] = at(i);
  buf = std::move(grown);
  head = 0;
}

// ---- RankSplit ----------------------------------------------------------------

namespace {

using Node = OrderNode;

/// The bits of `v` (not NaN) as an unsigned number in the order of the
/// values: negative values' bits flipped, positive ones' sign bit set. Both
/// zeros map to +0's key: they are equal values.
std::uint64_t order_key(double v) {
  if (v == 0) v = 0.0;
  std::uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b >> 63) != 0 ? ~b : b | (std::uint64_t{1} << 63);
}

double key_value(std::uint64_t key) {
  const std::uint64_t b = (key >> 63) != 0 ? key & ~(std::uint64_t{1} << 63) : ~key;
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

/// (value, sample number) order, without a branch: the two words compared
/// as one 128-bit number.
bool before(const Node& a, const Node& b) {
  return ((static_cast<unsigned __int128>(a.key) << 64) | a.k) <
         ((static_cast<unsigned __int128>(b.key) << 64) | b.k);
}

/// Whether `a` belongs above `b` in the max-heap (High false) or the min-heap.
template <bool High>
bool above(const Node& a, const Node& b) {
  return High ? before(a, b) : before(b, a);
}

constexpr std::size_t arity = 4;
// LineAllocator<Node, 1> (RankSplit::Heap) puts each node's children on one line.
static_assert(arity * sizeof(Node) == 64);

/// The best of a[first, first + N): a tournament, without branches.
template <bool High, std::size_t N>
std::size_t best_of(const Node* a, std::size_t first) {
  if constexpr (N == 1) {
    return first;
  } else {
    const std::size_t l = best_of<High, N / 2>(a, first);
    const std::size_t r = best_of<High, N / 2>(a, first + N / 2);
    return above<High>(a[r], a[l]) ? r : l;
  }
}

}  // namespace

void RunningWindow::RankSplit::grow(std::size_t values) {
  // A heap holds at most twice its live nodes plus a slack (trim), and
  // either may hold the whole window while the split is moved.
  const std::size_t want = 2 * values + 2 * trim_slack;
  if (low.capacity() < want) low.reserve(std::max(want, 2 * low.capacity()));
  if (high.capacity() < want) high.reserve(std::max(want, 2 * high.capacity()));
}

template <bool High>
void RunningWindow::RankSplit::sift_up(Node* heap, std::size_t i, Node x) {
  while (i > 0) {
    const std::size_t parent = (i - 1) / arity;
    if (!above<High>(x, heap[parent])) break;
    heap[i] = heap[parent];
    i = parent;
  }
  heap[i] = x;
}

template <bool High>
RunningWindow::RankSplit::Node RunningWindow::RankSplit::pop_top(Heap& heap) {
  const Node top = heap[0];
  const Node x = heap.back();
  heap.pop_back();
  const std::size_t n = heap.size();
  if (n == 0) return top;
  // Floyd's pop: the hole at the root moves down to the better child to
  // the bottom (the last node, which fills it, almost always belongs near
  // the bottom), then that node rises from there: no comparison with it on
  // the way down.
  Node* a = heap.data();
  std::size_t i = 0;
  for (;;) {
    const std::size_t first = arity * i + 1;
    if (first + arity > n) {
      if (first < n) {
        std::size_t best = first;
        for (std::size_t c = first + 1; c < n; ++c)
          if (above<High>(a[c], a[best])) best = c;
        a[i] = a[best];
        i = best;
      }
      break;
    }
    // The grandchildren, while the children are compared: the next level's
    // loads are the path's latency (a long window's lower levels are beyond L1).
    const std::size_t grand = arity * first + 1;
    if (grand < n) {
      const char* g = reinterpret_cast<const char*>(a + grand);
      for (std::size_t b = 0; b < arity * arity * sizeof(Node); b += 64) __builtin_prefetch(g + b);
    }
    const std::size_t best = best_of<High, arity>(a, first);
    a[i] = a[best];
    i = best;
  }
  sift_up<High>(a, i, x);
  return top;
}

template <bool High>
void RunningWindow::RankSplit::trim(Heap& heap, std::size_t live, std::uint64_t lo) {
  if (heap.size() <= 2 * live + trim_slack) return;
  // Keep the live nodes, then heapify bottom-up (Floyd): O(n).
  heap.erase(std::remove_if(heap.begin(), heap.end(), [lo](const Node& x) { return x.k < lo; }),
             heap.end());
  Node* a = heap.data();
  const std::size_t n = heap.size();
  for (std::size_t i = n > 1 ? (n - 2) / arity + 1 : 0; i-- > 0;) {
    const Node x = a[i];
    std::size_t at = i;
    for (;;) {
      const std::size_t first = arity * at + 1;
      if (first >= n) break;
      std::size_t best = first;
      for (std::size_t c = first + 1; c < std::min(n, first + arity); ++c)
        if (above<High>(a[c], a[best])) best = c;
      if (!above<High>(a[best], x)) break;
      a[at] = a[best];
      at = best;
    }
    a[at] = x;
  }
}

void RunningWindow::RankSplit::insert(double v, std::uint64_t k) {
  const Node x{order_key(v), k};
  if (!low.empty() && before(x, low[0])) {
    push<false>(low, x);
    ++live_low;
  } else {
    push<true>(high, x);
    ++live_high;
  }
}

void RunningWindow::RankSplit::erase(double v, std::uint64_t k, std::uint64_t lo) {
  // In the max-heap exactly when not above its top (which may be dead: it
  // still separates the heaps).
  const Node x{order_key(v), k};
  if (!low.empty() && !before(low[0], x)) {
    --live_low;
    trim<false>(low, live_low, lo);
  } else {
    --live_high;
    trim<true>(high, live_high, lo);
  }
}

void RunningWindow::RankSplit::settle(std::uint64_t lo) {
  while (!low.empty() && low[0].k < lo) pop_top<false>(low);
  while (!high.empty() && high[0].k < lo) pop_top<true>(high);
}

template <bool High>
void RunningWindow::RankSplit::push_root(Heap& heap, Node x) {
  // x is above every node (it comes from the other heap's top): the path
  // from the new leaf to the root moves down one level, no comparisons.
  heap.emplace_back();
  Node* a = heap.data();
  std::size_t i = heap.size() - 1;
  while (i > 0) {
    const std::size_t parent = (i - 1) / arity;
    a[i] = a[parent];
    i = parent;
  }
  a[0] = x;
}

void RunningWindow::RankSplit::split_at(std::size_t n_low, std::uint64_t lo) {
  // A top crossing over is beyond every node of the other heap (the max-heap's
  // nodes are all below the min-heap's): it becomes that heap's root.
  settle(lo);
  while (live_low > n_low) {
    push_root<true>(high, pop_top<false>(low));
    --live_low;
    ++live_high;
    settle(lo);
  }
  while (live_low < n_low && live_high > 0) {
    push_root<false>(low, pop_top<true>(high));
    ++live_low;
    --live_high;
    settle(lo);
  }
}

double RunningWindow::RankSplit::quantile(double q, std::uint64_t lo, const History& h) {
  const std::size_t n = size();
  if (n == 0 || std::isnan(q) || q < 0 || q > 1) return nan;
  const double at = (static_cast<double>(n) - 1) * q;
  const auto r = static_cast<std::size_t>(at);  // floor: at >= 0
  split_at(r + 1, lo);
  // A zero's key does not say which zero: its sample does.
  auto value = [&](const Node& x) { return x.key == order_key(0.0) ? h.value[h.phys(x.k)] : key_value(x.key); };
  const double at_r = value(low[0]);
  if (r + 1 >= n || at == static_cast<double>(r)) return at_r;
  return at_r + (at - static_cast<double>(r)) * (value(high[0]) - at_r);
}

// ---- OrderBlocks ---------------------------------------------------------------

namespace {

/// How many of a[0, len) are below v (Upper: not above v); len a multiple
/// of 4. NaN (an unused slot) is neither. Branch-free, four values per
/// iteration in two independent chains: a block is scanned at the speed of
/// its loads instead of one mispredicted branch per level of a binary search.
template <bool Upper>
std::size_t count_below(const double* a, std::size_t len, double v) {
#if defined(__SSE2__)
  const __m128d x = _mm_set1_pd(v);
  __m128i acc0 = _mm_setzero_si128(), acc1 = _mm_setzero_si128();
  for (std::size_t i = 0; i < len; i += 4) {
    const __m128d y0 = _mm_loadu_pd(a + i), y1 = _mm_loadu_pd(a + i + 2);
    // A true lane is all ones: -1.
    acc0 = _mm_sub_epi64(acc0, _mm_castpd_si128(Upper ? _mm_cmple_pd(y0, x) : _mm_cmplt_pd(y0, x)));
    acc1 = _mm_sub_epi64(acc1, _mm_castpd_si128(Upper ? _mm_cmple_pd(y1, x) : _mm_cmplt_pd(y1, x)));
  }
  const __m128i acc = _mm_add_epi64(acc0, acc1);
  return static_cast<std::size_t>(_mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#else
  std::size_t k = 0;
  for (std::size_t i = 0; i < len; ++i) k += Upper ? a[i] <= v : a[i] < v;
  return k;
#endif
}

/// n rounded up to the scan's step.
std::size_t round4(std::size_t n) { return (n + 3) & ~std::size_t{3}; }

}  // namespace

void OrderBlocks::clear() {
  // Every slot back to NaN (the scans count whole pairs), ids back to free.
  for (std::size_t j = 0; j < nb_; ++j) {
    std::fill_n(block(j), count_[j], nan);
    free_.push_back(id_[j]);
    last_[j] = nan;
  }
  std::fill_n(group_last_.data(), groups_, nan);
  nb_ = groups_ = n_ = 0;
  cursor_[0] = cursor_[1] = Cursor{};
}

void OrderBlocks::grow(std::size_t want) {
  const std::size_t cap = (std::max(want, 2 * capacity_) + G - 1) / G * G;
  pool_.resize(cap * C, nan);
  free_.reserve(cap);
  for (std::size_t b = cap; b-- > capacity_;) free_.push_back(static_cast<std::uint32_t>(b));
  id_.resize(cap);
  count_.resize(cap);
  last_.resize(cap, nan);
  group_last_.resize(cap / G + 4, nan);  // + 4: the scan reads groups of four
  capacity_ = cap;
}

template <bool Upper>
std::size_t OrderBlocks::find_block(double v) const {
  // The first group whose last value is above v (Upper) / not below it,
  // then the first such block in it: both scans over last values in order.
  std::size_t g;
  if (groups_ <= 64) {
    g = count_below<Upper>(group_last_.data(), round4(groups_), v);
  } else {  // a long window: O(log) (the groups' last values are not NaN)
    const double* a = group_last_.data();
    g = static_cast<std::size_t>((Upper ? std::upper_bound(a, a + groups_, v) : std::lower_bound(a, a + groups_, v)) - a);
  }
  if (g >= groups_) return nb_;
  return G * g + count_below<Upper>(last_.data() + G * g, G, v);
}

void OrderBlocks::set_last(std::size_t j, double v) {
  last_[j] = v;
  if (j % G == G - 1 || j + 1 == nb_) group_last_[j / G] = v;
}

void OrderBlocks::regroup(std::size_t from_group) {
  const std::size_t groups = (nb_ + G - 1) / G;
  for (std::size_t g = from_group; g < std::max(groups, groups_); ++g)
    group_last_[g] = g < groups ? last_[std::min(nb_, G * g + G) - 1] : nan;
  groups_ = groups;
}

void OrderBlocks::insert(double v) {
  if (nb_ == 0) {
    id_[0] = free_.back();
    free_.pop_back();
    count_[0] = 0;
    nb_ = 1;
    regroup(0);
  }
  // After every value equal to v: in the first block whose last is above
  // v, else at the very end.
  const std::size_t j = std::min(find_block<true>(v), nb_ - 1);
  double* b = block(j);
  const std::size_t c = count_[j];
  const std::size_t pos = count_below<true>(b, round4(c), v);
  std::memmove(b + pos + 1, b + pos, (c - pos) * sizeof(double));
  b[pos] = v;
  count_[j] = static_cast<std::uint32_t>(c + 1);
  if (pos == c) set_last(j, v);
  ++n_;
  for (auto& cu : cursor_) cu.before += j < cu.j;
  if (c + 1 == C) split(j);
}

void OrderBlocks::split(std::size_t j) {
  const std::uint32_t fresh = free_.back();
  free_.pop_back();
  const std::size_t tail = nb_ - j - 1;
  std::memmove(&id_[j + 2], &id_[j + 1], tail * sizeof id_[0]);
  std::memmove(&count_[j + 2], &count_[j + 1], tail * sizeof count_[0]);
  std::memmove(&last_[j + 2], &last_[j + 1], tail * sizeof last_[0]);
  ++nb_;
  id_[j + 1] = fresh;
  double* b = block(j);
  std::memcpy(block(j + 1), b + C / 2, C / 2 * sizeof(double));
  std::fill_n(b + C / 2, C / 2, nan);
  count_[j] = count_[j + 1] = C / 2;
  last_[j + 1] = last_[j];
  last_[j] = b[C / 2 - 1];
  regroup(j / G);
  for (auto& cu : cursor_) cu.j += j < cu.j;  // the values before it are the same
  // A small neighbour next to a half block: keep every pair above 3C/4.
  rebalance(j + 1);
  rebalance(j);
}

void OrderBlocks::erase(double v) {
  // The first value equal to v: in the first block whose last is not below v.
  const std::size_t j = find_block<false>(v);
  double* b = block(j);
  const std::size_t c = count_[j];
  const std::size_t pos = count_below<false>(b, round4(c), v);
  std::memmove(b + pos, b + pos + 1, (c - pos - 1) * sizeof(double));
  b[c - 1] = nan;
  count_[j] = static_cast<std::uint32_t>(c - 1);
  if (pos == c - 1 && c > 1) set_last(j, b[c - 2]);
  --n_;
  for (auto& cu : cursor_) cu.before -= j < cu.j;
  rebalance(j);
}

void OrderBlocks::rebalance(std::size_t j) {
  // A merged block holds at most 3C/4 (< C: it never splits again at once);
  // a pair of neighbours only grows by a merge next to it, so looping over
  // the block that absorbed restores the invariant.
  auto small = [&](std::size_t a) {
    return count_[a] == 0 || count_[a + 1] == 0 || count_[a] + count_[a + 1] <= 3 * C / 4;
  };
  while (nb_ > 1) {
    if (j + 1 < nb_ && small(j)) {
      merge(j);
    } else if (j > 0 && small(j - 1)) {
      merge(j - 1);
      --j;
    } else {
      break;
    }
  }
}

void OrderBlocks::merge(std::size_t m) {
  double* a = block(m);
  double* b = block(m + 1);
  const std::size_t cm = count_[m], cb = count_[m + 1];
  std::memcpy(a + cm, b, cb * sizeof(double));
  std::fill_n(b, cb, nan);
  count_[m] = static_cast<std::uint32_t>(cm + cb);
  if (cb != 0) last_[m] = last_[m + 1];
  free_.push_back(id_[m + 1]);
  const std::size_t tail = nb_ - m - 2;
  std::memmove(&id_[m + 1], &id_[m + 2], tail * sizeof id_[0]);
  std::memmove(&count_[m + 1], &count_[m + 2], tail * sizeof count_[0]);
  std::memmove(&last_[m + 1], &last_[m + 2], tail * sizeof last_[0]);
  --nb_;
  last_[nb_] = nan;
  regroup(m / G);
  for (auto& cu : cursor_) {
    if (cu.j == m + 1) {
      cu.j = m;
      cu.before -= cm;
    } else if (cu.j > m + 1) {
      --cu.j;
    }
  }
}

double OrderBlocks::at(Cursor& c, std::size_t r) {
  // From where the cursor was: the rank moved by a few values at most.
  while (r < c.before) {
    --c.j;
    c.before -= count_[c.j];
  }
  while (r >= c.before + count_[c.j]) {
    c.before += count_[c.j];
    ++c.j;
  }
  return block(c.j)[r - c.before];
}

double OrderBlocks::quantile(int which, double q) {
  if (n_ == 0 || std::isnan(q) || q < 0 || q > 1) return nan;
  Cursor& c = cursor_[which];
  const double at_q = (static_cast<double>(n_) - 1) * q;
  const auto r = static_cast<std::size_t>(at_q);  // floor: at_q >= 0
  const double at_r = at(c, r);
  if (r + 1 >= n_ || at_q == static_cast<double>(r)) return at_r;
  const std::size_t i = r + 1 - c.before;
  const double next = i < count_[c.j] ? block(c.j)[i] : block(c.j + 1)[0];
  return at_r + (at_q - static_cast<double>(r)) * (next - at_r);
}

// ---- RunningWindow ------------------------------------------------------------

void RunningWindow::rebuild(RunKind kind, const History& h, std::uint64_t lo, std::uint64_t hi) {
  if (valid_) ++rebuilds_;
  valid_ = true;
  kind_ = kind;
  lo_ = hi_ = lo;
  nans_ = specials_ = trues_ = changes_ = 0;
  vchange_ = schange_ = lo;
  removed_ = 0;
  wide_ = 0;
  sd_ = sdd_ = 0;
  k0_ = lo < hi ? h.step[h.phys(lo)] : 0;  // the origin of a slope's steps
  if (sums_.size() != sums_for(kind)) sums_.resize(sums_for(kind));
  for (auto& s : sums_) {
    s.clear();
    s.track(kind == RunKind::sum || kind == RunKind::mean);
  }
  for (auto& a : approx_) a.clear();
  // var/std/slope follow their sums by the approximations alone (the exact
  // sums are rebuilt from the window when a read-out needs them); zscore
  // keeps Σx exact (its numerator); sum/mean keep theirs (their read-out).
  const bool moments = kind == RunKind::var || kind == RunKind::std_dev || kind == RunKind::slope;
  live_[0] = !moments;
  live_[1] = kind != RunKind::zscore && !moments;
  keep_exact_ = exact_before_ = false;
  // zscore's sums in the NarrowMoments while the window's values fit it.
  narrow_ = kind == RunKind::zscore;
  narrow_sums_.clear();
  deque_.clear();
  // The heaps keep their capacity: clear() then re-inserting allocates nothing.
  for (auto& s : split_) s.clear();
  blocks_.clear();
  iqr_heaps_ = hi - lo > iqr_blocks_up_to_;
  // + 1: a steady slide holds one sample more while the next enters; room
  // for exactly hi - lo would double the order statistics at the first slide.
  reserve_splits(kind, hi - lo + 1);
  for (std::uint64_t k = lo; k < hi; ++k) move<true>(kind, h, k);
}

bool RunningWindow::recentre_slope(const History& h) {
  // Sorted steps put every step of the window between its first and its
  // newest; a wide sample is not in the sums (a rebuild re-counts them).
  if (wide_ != 0 || !h.steps_sorted() || lo_ >= hi_) return false;
  const std::int64_t k0 = h.step[h.phys(lo_)];
  std::int64_t delta, span;
  if (__builtin_sub_overflow(k0, k0_, &delta) || delta <= -wide_step || delta >= wide_step ||
      __builtin_sub_overflow(h.step[h.phys(hi_ - 1)], k0, &span) || span >= wide_step)
    return false;
  // d' = d - delta over the n samples in the sums: Σd' = Σd - n·delta,
  // Σd'² = Σd² - 2·delta·Σd + n·delta², Σd'y = Σdy - delta·Σy (exact).
  if (!live_[0] || !live_[1]) {
    // The exact sums are not maintained: Σd, Σd² and the approximation of
    // Σd·y afresh from the window (O(W) once per two window lengths:
    // amortised O(1); the exact sums, rebuilt on demand, use the new origin).
    k0_ = k0;
    sd_ = sdd_ = 0;
    approx_[1].clear();
    for (std::uint64_t k = lo_; k < hi_; ++k) {
      const std::size_t p = h.phys(k);
      const double v = h.value[p];
      if (std::isnan(v) || !(std::abs(v) <= special_above)) continue;
      const std::int64_t d = h.step[p] - k0;  // within 2^40: checked above
      sd_ += d;
      sdd_ += static_cast<__int128>(d) * d;
      const DoubleDouble pr = two_prod(static_cast<double>(d), v);
      approx_[1].add2(pr.hi, pr.lo);
    }
    removed_ = 0;
    live_[1] = false;  // Σd·y (if it was exact) is for the old origin
    return true;
  }
  if (!sums_[1].add_scaled(sums_[0], -delta)) return false;
  const auto n = static_cast<__int128>(hi_ - lo_) - nans_ - specials_;
  const auto dl = static_cast<__int128>(delta);
  sdd_ = sdd_ - 2 * dl * sd_ + n * dl * dl;
  sd_ -= n * dl;
  k0_ = k0;
  removed_ = 0;
  approx_[1].seed(sums_[1]);  // Σdy changed (exactly)
  return true;
}

void RunningWindow::make_exact(int i, const History& h) {
  needed_hi_ = hi_;  // see relax_exact
  if (live_[i]) return;
  if (!exact_before_ || rebuilt_hi_ != hi_) {  // not the same read-out's other sum
    // A second on-demand rebuild within a window length: this window's
    // read-outs keep needing the exact sums; maintain them from now on.
    if (exact_before_ && hi_ - rebuilt_hi_ < std::max<std::uint64_t>(64, hi_ - lo_)) keep_exact_ = true;
    ++exact_rebuilds_;
    exact_before_ = true;
    rebuilt_hi_ = hi_;
  }
  fill_exact(i, h);
  live_[i] = keep_exact_;
}

void RunningWindow::fill_exact(int i, const History& h) {
  ExactSum& s = sums_[static_cast<std::size_t>(i)];
  s.clear();
  for (std::uint64_t k = lo_; k < hi_; ++k) {
    const std::size_t p = h.phys(k);
    const double v = h.value[p];
    if (std::isnan(v) || !(std::abs(v) <= special_above)) continue;
    if (kind_ == RunKind::slope) {
      std::int64_t d;
      if (__builtin_sub_overflow(h.step[p], k0_, &d) || d <= -wide_step || d >= wide_step) continue;
      if (i == 0) s.add(v);
      else s.add_product(d, v);
    } else {
      if (i == 0) s.add(v);
      else s.add_square(v);
    }
  }
}

void RunningWindow::leave_narrow(const History& h) {
  narrow_ = false;
  // As a rebuild leaves them: Σx exact, Σx² approximated (both seeded).
  fill_exact(0, h);
  fill_exact(1, h);
  approx_[0].seed(sums_[0]);
  approx_[1].seed(sums_[1]);
  live_[0] = true;
  live_[1] = false;
  retry_narrow_later();
}

void RunningWindow::try_narrow(const History& h) {
  NarrowMoments s;
  s.clear();
  for (std::uint64_t k = lo_; k < hi_; ++k) {
    const double v = h.value[h.phys(k)];
    if (std::isnan(v) || !(std::abs(v) <= special_above)) continue;
    if (!s.put<true>(v)) {
      retry_narrow_later();
      return;
    }
  }
  narrow_sums_ = s;
  narrow_ = true;
  // Neither sums_ nor approx_ follow the window from here (leave_narrow refills them).
  keep_exact_ = exact_before_ = false;
  live_[0] = true;
  live_[1] = false;
}

void RunningWindow::relax_exact() {
  // Maintained since the guard tripped, and not needed for four window
  // lengths: the hard stretch has passed, back to the approximations.
  if (hi_ - needed_hi_ <= 4 * std::max<std::uint64_t>(64, hi_ - lo_)) return;
  keep_exact_ = exact_before_ = false;
  const bool zscore = kind_ == RunKind::zscore;
  live_[0] = zscore;
  live_[1] = false;
}

/// Calls f(std::integral_constant<RunKind, kind>{}): code written for one
/// kind, the kind's branches folded at compile time.
template <class F>
decltype(auto) with_kind(RunKind kind, F&& f) {
  using K = RunKind;
  switch (kind) {
#define VIGIL_KIND(k) \
  case K::k: return f(std::integral_constant<K, K::k>{});
    VIGIL_KIND(none) VIGIL_KIND(sum) VIGIL_KIND(mean) VIGIL_KIND(min) VIGIL_KIND(max)
    VIGIL_KIND(count_true) VIGIL_KIND(var) VIGIL_KIND(std_dev) VIGIL_KIND(median)
    VIGIL_KIND(quantile) VIGIL_KIND(delta) VIGIL_KIND(rel_change) VIGIL_KIND(slope)
    VIGIL_KIND(changes) VIGIL_KIND(any_nan) VIGIL_KIND(zscore) VIGIL_KIND(iqr_outlier)
#undef VIGIL_KIND
  }
  return f(std::integral_constant<K, K::none>{});
}

template <bool Add>
void RunningWindow::move(RunKind kind, const History& h, std::uint64_t k) {
  with_kind(kind, [&](auto c) { move_as<Add, decltype(c)::value>(h, k); });
}

template <RunKind kind>
void RunningWindow::slide(const History& h, std::uint64_t lo, std::uint64_t end) {
  if constexpr (kind == RunKind::median || kind == RunKind::quantile)
    reserve_splits(kind, sorted_values() + 1);
  ++removed_;
  move_as<true, kind>(h, hi_);
  move_as<false, kind>(h, lo_);  // lo_ becomes lo
  // The samples that leave next (see the general path in update()).
  if (lo + 16 < end) {
    const std::size_t ahead = h.phys(lo + 16);
    __builtin_prefetch(&h.value[ahead]);
    if constexpr (kind == RunKind::slope) __builtin_prefetch(&h.step[ahead]);
  }
  if constexpr (kind == RunKind::min || kind == RunKind::max) deque_.expire(lo);
}

template <bool Add, RunKind kind>
void RunningWindow::move_as(const History& h, std::uint64_t k) {
  const std::size_t p = h.phys(k);
  const double v = h.value[p];
  constexpr std::int64_t sign = Add ? 1 : -1;
  if constexpr (Add) {
    // Neighbour comparisons only for the kinds that read them.
    const bool pairs = kind == RunKind::changes || kind == RunKind::var ||
                       kind == RunKind::std_dev || kind == RunKind::zscore || kind == RunKind::slope;
    if (pairs) {
      if (k != lo_) {  // the window was not empty
        const std::size_t q = h.phys(k - 1);
        if (!same(h.value[q], v)) {
          ++changes_;
          vchange_ = k;
        }
        if (h.step[q] != h.step[p]) schange_ = k;
      } else {
        vchange_ = schange_ = k;
      }
    }
    hi_ = k + 1;
  } else {
    if (kind == RunKind::changes && k + 1 < hi_ && !same(v, h.value[h.phys(k + 1)])) --changes_;
    lo_ = k + 1;
  }
  const bool is_nan = std::isnan(v);
  nans_ += sign * is_nan;
  // Only count_true reads trues_, and only the sum-like kinds specials_
  // (the kind is fixed between rebuilds, which zero both): the others do
  // not pay for them on every sample.
  if (kind == RunKind::count_true) trues_ += sign * ((v != 0) & !is_nan);
  if (is_nan) return;
  const bool special = !(std::abs(v) <= special_above);
  if (reads_specials(kind)) specials_ += sign * special;
  auto put = [](ExactSum& s, double x) {
    if constexpr (Add) s.add(x);
    else s.remove(x);
  };
  switch (kind) {
    case RunKind::min:
    case RunKind::max:
      if constexpr (Add) {
        if constexpr (kind == RunKind::max) deque_.push<true>(v, k);
        else deque_.push<false>(v, k);
      }
      break;  // deques expire lazily
    case RunKind::median:
    case RunKind::quantile:
      if constexpr (Add) split_[0].insert(v, k);
      else split_[0].erase(v, k, lo_);
      break;
    case RunKind::iqr_outlier:
      if (iqr_heaps_) {
        for (auto& s : split_) {
          if constexpr (Add) s.insert(v, k);
          else s.erase(v, k, lo_);
        }
      } else {
        if constexpr (Add) blocks_.insert(v);
        else blocks_.erase(v);
      }
      break;
    case RunKind::sum:
    case RunKind::mean:
      if (!special) put(sums_[0], v);
      break;
    case RunKind::var:
    case RunKind::std_dev:
    case RunKind::zscore:
      if (!special) {
        if (kind == RunKind::zscore && narrow_) {
          if (narrow_sums_.put<Add>(v)) [[likely]]
            break;
          leave_narrow(h);  // from the window, this sample's move included
          break;
        }
        if (live_[0]) put(sums_[0], v);
        if (live_[1]) {
          if constexpr (Add) sums_[1].add_square(v);
          else sums_[1].remove_square(v);
        }
        approx_move<Add>(approx_, v, two_prod(v, v));
      }
      break;
    case RunKind::slope:
      if (!special) {
        std::int64_t d;
        if (__builtin_sub_overflow(h.step[p], k0_, &d) || d <= -wide_step || d >= wide_step) {
          wide_ += sign;
          break;
        }
        sd_ += sign * d;
        sdd_ += sign * (static_cast<__int128>(d) * d);
        if (live_[0]) put(sums_[0], v);
        if (live_[1]) {
          if constexpr (Add) sums_[1].add_product(d, v);
          else sums_[1].remove_product(d, v);
        }
        approx_move<Add>(approx_, v, two_prod(static_cast<double>(d), v));
      }
      break;
    default: break;
  }
}

std::optional<double> RunningWindow::update(RunKind kind, const History& h, std::uint64_t lo,
                                            std::uint64_t hi, std::span<const double> consts) {
  const std::uint64_t end = excludes_last(kind) ? hi - 1 : hi;
  // A slope re-centres its steps once the window has moved on by its own
  // length (amortised O(1)): the origin stays near the window.
  const bool recentre = kind == RunKind::slope && removed_ > std::max<std::uint64_t>(64, 2 * (hi - lo));
  if (valid_ && lo == lo_ + 1 && end == hi_ + 1 && kind == kind_ && lo_ >= h.first_held() &&
      !recentre &&
      (kind != RunKind::iqr_outlier || iqr_heaps_ || end - lo <= iqr_blocks_up_to_)) [[likely]] {
    // The steady slide (one sample in, one out): the general branch below
    // without its loops and checks, the same moves in the same order,
    // compiled per kind.
    with_kind(kind, [&](auto c) { slide<decltype(c)::value>(h, lo, end); });
  } else if (!valid_ || lo < lo_ || end < hi_ || lo > hi_ || lo_ < h.first_held() || kind != kind_) {
    rebuild(kind, h, lo, end);
  } else if (kind == RunKind::iqr_outlier && !iqr_heaps_ && end - lo > iqr_blocks_up_to_) {
    // Grown past the blocks' range: into the heaps, once (not counted as a
    // rebuild: the window slid).
    const std::uint64_t rebuilds = rebuilds_;
    rebuild(kind, h, lo, end);
    rebuilds_ = rebuilds;
  } else {
    // Samples are added before the old ones leave: room for both.
    if (end > hi_) reserve_splits(kind, sorted_values() + (end - hi_));
    // Counted before the removals, which advance lo_ themselves.
    removed_ += lo - lo_;
    for (std::uint64_t k = hi_; k < end; ++k) move<true>(kind, h, k);
    for (std::uint64_t k = lo_; k < lo; ++k) move<false>(kind, h, k);
    // The samples that leave next, a few lines ahead: the oldest end of a
    // long window is touched once per line of samples, seldom enough (a
    // trace reader streaming in between) to have left the cache.
    if (lo + 16 < end) {
      const std::size_t ahead = h.phys(lo + 16);
      __builtin_prefetch(&h.value[ahead]);
      // slope reads the leaving samples' steps too.
      if (kind == RunKind::slope) __builtin_prefetch(&h.step[ahead]);
    }
    lo_ = lo;
    if (kind == RunKind::min || kind == RunKind::max) deque_.expire(lo);
    if (recentre && !recentre_slope(h)) rebuild(kind, h, lo, end);
  }
  if (keep_exact_) [[unlikely]]
    relax_exact();
  // Read only by the kinds that need it (a load and an index computation
  // the others should not pay for).
  auto newest = [&] { return h.value[h.phys(hi - 1)]; };
  const auto n = static_cast<double>(hi_ - lo_);
  switch (kind) {
    case RunKind::none: return std::nullopt;
    case RunKind::sum:
      if (nans_) return nan;
      if (specials_) return std::nullopt;
      return sums_[0].value();
    case RunKind::mean:
      if (nans_) return nan;
      if (specials_) return std::nullopt;
      return sums_[0].value() / n;
    case RunKind::min:
    case RunKind::max: return nans_ ? nan : deque_.at(0).v;
    case RunKind::count_true: return static_cast<double>(trues_);
    case RunKind::var:
    case RunKind::std_dev: {
      if (nans_) return nan;
      if (specials_) return std::nullopt;
      Source src{sums_.data(), approx_, this, &h};
      const double var = variance_of(src, n, vchange_ <= lo_, exact_readouts_);
      return kind == RunKind::var ? var : std::sqrt(var);
    }
    case RunKind::median: return nans_ ? nan : split_[0].quantile(0.5, lo_, h);
    case RunKind::quantile:
      return nans_ ? nan : split_[0].quantile(consts[0], lo_, h);
    case RunKind::delta:
      if (nans_) return nan;
      return newest() - h.value[h.phys(lo_)];
    case RunKind::rel_change: {
      if (nans_) return nan;
      const double first = h.value[h.phys(lo_)];
      return (newest() - first) / std::abs(first);
    }
    case RunKind::slope:
      if (nans_) return nan;
      if (specials_ || wide_) return std::nullopt;
      if (schange_ <= lo_) return nan;  // one step: no line
      {
        Source src{sums_.data(), approx_, this, &h};
        return slope_of(sd_, sdd_, src, n, exact_readouts_);
      }
    case RunKind::changes: return static_cast<double>(changes_);
    case RunKind::any_nan: return nans_ ? 1 : 0;
    case RunKind::zscore: {
      const double latest = newest();
      if (nans_ || std::isnan(latest)) return nan;
      if (specials_ || !(std::abs(latest) <= special_above)) return std::nullopt;
      if (!narrow_ && hi_ >= narrow_retry_) [[unlikely]]
        try_narrow(h);
      if (narrow_) {
        // Numerator and denominator exactly from the integer sums: no bound
        // to decide (the numerator's exact midpoints cost nothing here).
        if (const auto num = narrow_sums_.scaled_minus(latest, hi_ - lo_)) [[likely]] {
          if (vchange_ <= lo_) return standardised(*num, 0);  // all equal
          return standardised(*num, std::sqrt(narrow_sums_.n2_moment(hi_ - lo_)));
        }
        leave_narrow(h);  // latest is out of range: it enters the sums next
      }
      Source src{sums_.data(), approx_, this, &h};
      return zscore_of(src, n, vchange_ <= lo_, latest, exact_readouts_);
    }
    case RunKind::iqr_outlier: {
      const double latest = newest();
      if (nans_ || std::isnan(latest)) return nan;
      const double q1 = iqr_heaps_ ? split_[0].quantile(0.25, lo_, h) : blocks_.quantile(0, 0.25);
      const double q3 = iqr_heaps_ ? split_[1].quantile(0.75, lo_, h) : blocks_.quantile(1, 0.75);
      const double iqr = q3 - q1;
      return (latest < q1 - consts[0] * iqr || latest > q3 + consts[0] * iqr) ? 1 : 0;
    }
  }
  return std::nullopt;
}

}  // namespace vigil::interp

namespace vigil::interp {

std::optional<double> running_value_of(RunKind kind, const stdlib::Window& w) {
  // Only the kinds whose running value is not the kernel's bit for bit.
  if (kind != RunKind::sum && kind != RunKind::mean && kind != RunKind::var &&
      kind != RunKind::std_dev && kind != RunKind::zscore && kind != RunKind::slope)
    return std::nullopt;
  const std::size_t n = kind == RunKind::zscore ? w.n - 1 : w.n;
  for (std::size_t i = 0; i < w.n; ++i)
    if (std::isnan(w.values[i])) return nan;
  for (std::size_t i = 0; i < w.n; ++i)
    if (!(std::abs(w.values[i]) <= special_above)) return std::nullopt;  // the kernel's
  ExactSum ab_sums[2];
  ExactSum& a = ab_sums[0];
  ExactSum& b = ab_sums[1];
  ApproxSum approx[2];  // seeded from a and b: the running windows' read-outs
  Source src{ab_sums, approx};
  std::uint64_t exact = 0;
  bool all_equal = true, one_step = true;
  for (std::size_t i = 0; i < n; ++i) {
    all_equal &= w.values[i] == w.values[0];
    one_step &= w.steps[i] == w.steps[0];
  }
  const auto dn = static_cast<double>(n);
  switch (kind) {
    case RunKind::sum:
    case RunKind::mean:
      for (std::size_t i = 0; i < n; ++i) a.add(w.values[i]);
      return kind == RunKind::sum ? a.value() : a.value() / dn;
    case RunKind::var:
    case RunKind::std_dev:
    case RunKind::zscore: {
      for (std::size_t i = 0; i < n; ++i) {
        a.add(w.values[i]);
        b.add_square(w.values[i]);
      }
      approx[0].seed(a);
      approx[1].seed(b);
      if (kind == RunKind::zscore) return zscore_of(src, dn, all_equal, w.values[w.n - 1], exact);
      const double var = variance_of(src, dn, all_equal, exact);
      return kind == RunKind::var ? var : std::sqrt(var);
    }
    case RunKind::slope: {
      if (one_step) return nan;
      __int128 sd = 0, sdd = 0;
      for (std::size_t i = 0; i < n; ++i) {
        std::int64_t d;
        if (__builtin_sub_overflow(w.steps[i], w.steps[0], &d) || d <= -wide_step || d >= wide_step)
          return std::nullopt;
        sd += d;
        sdd += static_cast<__int128>(d) * d;
        a.add(w.values[i]);
        b.add_product(d, w.values[i]);
      }
      approx[0].seed(a);
      approx[1].seed(b);
      return slope_of(sd, sdd, src, dn, exact);
    }
    default: return std::nullopt;
  }
}

}  // namespace vigil::interp
