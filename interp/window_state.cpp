// Running windows (see window_state.hpp): the exact accumulator, the
// monotonic deque, the two-heap order statistics, and the per-function update
// and read-out. Must not touch anything but its arguments.
#include "interp/window_state.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

namespace vigil::interp {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();
/// Samples beyond this magnitude (and +-Inf) are "special": squares and
/// products with steps (< 2^63) of smaller ones stay finite and exact in the
/// accumulators; a window holding a special sample is recomputed instead.
constexpr double special_above = 1e150;

bool excludes_last(RunKind k) { return k == RunKind::zscore || k == RunKind::iqr_outlier; }

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

DoubleDouble two_sum(double a, double b) {
  const double s = a + b;
  const double bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
DoubleDouble fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}
DoubleDouble two_prod(double a, double b) {
  const double p = a * b;
  return {p, std::fma(a, b, -p)};
}
DoubleDouble dd_mul(DoubleDouble a, DoubleDouble b) {
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
DoubleDouble dd_scale(DoubleDouble a, double n) {
  DoubleDouble p = two_prod(a.hi, n);
  p.lo += a.lo * n;
  return fast_two_sum(p.hi, p.lo);
}
/// n·Σxy - Σx·Σy: n² times the population covariance (variance: x = y),
/// without a division (the read-outs' latency is mostly divisions).
DoubleDouble n_co_centred(DoubleDouble sxy, DoubleDouble sx, DoubleDouble sy, double n) {
  return dd_sub(dd_scale(sxy, n), dd_mul(sx, sy));
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

/// The population variance, from Σx and Σx² (exact); 0 when all
/// samples are equal, as Welford gives.
/// n² times the population variance, n·Σx² - (Σx)², or nullopt when that
/// overflows (samples near 1e150 in a long window).
std::optional<double> n2_variance(DoubleDouble sx, DoubleDouble sxx, double n) {
  const DoubleDouble m = n_co_centred(sxx, sx, sx, n);
  if (!std::isfinite(m.hi)) return std::nullopt;
  return std::max(0.0, m.hi + m.lo);
}

double variance_of(ExactSum& sx, ExactSum& sxx, double n, bool all_equal) {
  if (all_equal) return 0;
  const DoubleDouble s = sx.value_dd(), s2 = sxx.value_dd();
  if (const auto m = n2_variance(s, s2, n)) return *m / (n * n);
  const DoubleDouble m2 = centred(s2, s, n);
  return std::max(0.0, m2.hi + m2.lo) / n;
}

/// zscore from the exact sums of the window without its latest sample:
/// (n·latest - Σx) / sqrt(n·Σx² - (Σx)²), both in double-double (a latest
/// sample close to a large mean keeps its digits), one division and one
/// square root.
double zscore_of(ExactSum& sx, ExactSum& sxx, double n, bool all_equal, double latest) {
  const DoubleDouble sum = sx.value_dd();  // read once: the digits are most of the cost
  const DoubleDouble num = dd_sub(two_prod(latest, n), sum);
  if (all_equal) return standardised(num.hi + num.lo, 0);
  const DoubleDouble s2 = sxx.value_dd();
  if (const auto m = n2_variance(sum, s2, n)) return standardised(num.hi + num.lo, std::sqrt(*m));
  const DoubleDouble m2 = centred(s2, sum, n);
  const DoubleDouble diff = dd_div(num, n);
  return standardised(diff.hi + diff.lo, std::sqrt(std::max(0.0, m2.hi + m2.lo) / n));
}

/// slope from exact Σd, Σd² (d = step - origin), Σy and Σd·y:
/// (n·Σdy - Σd·Σy) / (n·Σd² - (Σd)²), the n's of the covariance and the
/// variance cancelled (|d| < 2^40 and |y| <= 1e150: no overflow).
double slope_of(__int128 sd, __int128 sdd, ExactSum& sy, ExactSum& sdy, double n) {
  const DoubleDouble d = dd_of(sd);
  const DoubleDouble sxx = n_co_centred(dd_of(sdd), d, d, n);
  const DoubleDouble sxy = n_co_centred(sdy.value_dd(), d, sy.value_dd(), n);
  return (sxy.hi + sxy.lo) / (sxx.hi + sxx.lo);
}

}  // namespace

// ---- ExactSum -----------------------------------------------------------------

void ExactSum::clear() {
  std::memset(d_, 0, sizeof d_);
  lo_ = digits;
  hi_ = -1;
  ops_ = 0;
  s_ = c_ = err_ = 0;
}

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
  const int i = pos >> 5;
  add_at(i, static_cast<unsigned __int128>(mant) << (pos & 31), minus);
  lo_ = std::min(lo_, i);
  hi_ = std::max(hi_, i + 2);
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
  // Each digit moves by < 2^32 per call: 2^30 calls stay far from int64's range.
  if (++ops_ >= (1U << 30)) normalise();
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

/// hi + lo of the digit string (top digit `top` non-zero): hi its top 96
/// bits rounded, lo what is left of them plus the next digit (about 2^-97
/// of the value at worst, when the top digit is 1). The same pair as a
/// 128-bit conversion gives, without its library calls.
DoubleDouble dd_digits(const std::int64_t* d, int lo, int top) {
  // d_top 2^64 >= 2^64 > d_top-1 2^32: a fast two-sum is exact, and its
  // error is an integer below 2^43, so adding digit top - 2 is exact too;
  // a second one gives hi = the top 96 bits rounded and their exact rest,
  // small enough to take the next digit without rounding away its bits
  // (adding that digit before hi absorbs the top ones would, when the top
  // digit is small).
  const DoubleDouble s = fast_two_sum(static_cast<double>(digit_at(d, lo, top)) * 0x1p64,
                                      static_cast<double>(digit_at(d, lo, top - 1)) * 0x1p32);
  const DoubleDouble v = fast_two_sum(s.hi, s.lo + static_cast<double>(digit_at(d, lo, top - 2)));
  const double below = top - 3 >= lo ? static_cast<double>(d[top - 3]) * 0x1p-32 : 0.0;
  const double rem = v.lo + below;
  if (top - 2 >= 1 && top - 2 < 64) {
    const double scale = digit_scale(top - 2) * 2;
    return fast_two_sum(v.hi * scale, rem * scale);
  }
  const int e = 32 * (top - 2) - 1074;
  return fast_two_sum(std::ldexp(v.hi, e), std::ldexp(rem, e));
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
    // Undecided: the digits, and the compensated sum re-seeded from them
    // (value_dd is within 2^-97 of the sum where it is this large).
    const double exact = exact_value();
    const DoubleDouble dd = value_dd();
    s_ = dd.hi;
    c_ = dd.lo;
    const double a = std::abs(dd.hi);
    err_ = a == 0 ? 0 : a >= 0x1p-900 && a <= 0x1p900 ? a * 0x1p-90 : inf;
    return exact;
  }
  return exact_value();
}

double ExactSum::exact_value() {
  normalise();
  if (hi_ < lo_) return 0.0;
  if (d_[hi_] > 0) return round_digits(d_, lo_, hi_);
  // Negative: round the negated digits (normalised again) and negate.
  std::int64_t neg[digits];
  const int top = negated(neg);
  return -round_digits(neg, lo_, top);
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
  normalise();
  if (hi_ < lo_) return {0.0, 0.0};
  if (d_[hi_] > 0) return dd_digits(d_, lo_, hi_);
  std::int64_t neg[digits];
  const int top = negated(neg);
  const DoubleDouble v = dd_digits(neg, lo_, top);
  return {-v.hi, -v.lo};
}

bool ExactSum::add_scaled(ExactSum& other, std::int64_t m) {
  other.normalise();
  if (other.hi_ < other.lo_ || m == 0) return true;
  // |other| as non-negative normalised digits, its sign folded into m.
  std::int64_t neg[digits];
  const std::int64_t* src = other.d_;
  int top = other.hi_;
  if (other.d_[top] < 0) {
    top = other.negated(neg);
    src = neg;
    m = -m;
  }
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

// ---- Deque --------------------------------------------------------------------

void RunningWindow::Deque::push(double v, std::uint64_t k, bool want_max) {
  // Ties: the newer sample replaces the older (it stays longer).
  while (size > 0 && (want_max ? at(size - 1).v <= v : at(size - 1).v >= v)) --size;
  if (size == buf.size()) {
    std::vector<Entry> grown(std::max<std::size_t>(16, buf.size() * 2));
    for (std::size_t i = 0; i < size; ++i) grown[i] = at(i);
    buf = std::move(grown);
    head = 0;
  }
  at(size++) = {v, k};
}

void RunningWindow::Deque::expire(std::uint64_t lo) {
  while (size > 0 && at(0).k < lo) {
    head = (head + 1) & (buf.size() - 1);
    --size;
  }
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
/// Dead nodes a heap may hold beyond as many as its live ones.
constexpr std::size_t trim_slack = 64;

}  // namespace

void RunningWindow::RankSplit::reserve(std::size_t values) {
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
RunningWindow::RankSplit::Node RunningWindow::RankSplit::pop_top(std::vector<Node>& heap) {
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
    // A tournament (two independent comparisons, then one), without branches.
    const std::size_t l = above<High>(a[first + 1], a[first]) ? first + 1 : first;
    const std::size_t r = above<High>(a[first + 3], a[first + 2]) ? first + 3 : first + 2;
    const std::size_t best = above<High>(a[r], a[l]) ? r : l;
    a[i] = a[best];
    i = best;
  }
  sift_up<High>(a, i, x);
  return top;
}

template <bool High>
void RunningWindow::RankSplit::trim(std::vector<Node>& heap, std::size_t live, std::uint64_t lo) {
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
void RunningWindow::RankSplit::push_root(std::vector<Node>& heap, Node x) {
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
  const auto r = static_cast<std::size_t>(std::floor(at));
  split_at(r + 1, lo);
  // A zero's key does not say which zero: its sample does.
  auto value = [&](const Node& x) { return x.key == order_key(0.0) ? h.value[h.phys(x.k)] : key_value(x.key); };
  const double at_r = value(low[0]);
  if (r + 1 >= n || at == static_cast<double>(r)) return at_r;
  return at_r + (at - static_cast<double>(r)) * (value(high[0]) - at_r);
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
  deque_.clear();
  // The heaps keep their capacity: clear() then re-inserting allocates nothing.
  for (auto& s : split_) s.clear();
  reserve_splits(kind, hi - lo);
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
  if (!sums_[1].add_scaled(sums_[0], -delta)) return false;
  const auto n = static_cast<__int128>(hi_ - lo_) - nans_ - specials_;
  const auto dl = static_cast<__int128>(delta);
  sdd_ = sdd_ - 2 * dl * sd_ + n * dl * dl;
  sd_ -= n * dl;
  k0_ = k0;
  removed_ = 0;
  return true;
}

template <bool Add>
void RunningWindow::move(RunKind kind, const History& h, std::uint64_t k) {
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
  trues_ += sign * ((v != 0) & !is_nan);
  if (is_nan) return;
  const bool special = !(std::abs(v) <= special_above);
  specials_ += sign * special;
  auto put = [](ExactSum& s, double x) {
    if constexpr (Add) s.add(x);
    else s.remove(x);
  };
  switch (kind) {
    case RunKind::min:
    case RunKind::max:
      if constexpr (Add) deque_.push(v, k, kind == RunKind::max);
      break;  // deques expire lazily
    case RunKind::median:
    case RunKind::quantile:
      if constexpr (Add) split_[0].insert(v, k);
      else split_[0].erase(v, k, lo_);
      break;
    case RunKind::iqr_outlier:
      for (auto& s : split_) {
        if constexpr (Add) s.insert(v, k);
        else s.erase(v, k, lo_);
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
        put(sums_[0], v);
        const DoubleDouble sq = two_prod(v, v);
        put(sums_[1], sq.hi);
        put(sums_[1], sq.lo);
      }
      break;
    case RunKind::slope:
      if (!special) {
        std::int64_t d;
        if (__builtin_sub_overflow(h.step[p], k0_, &d) || d <= -wide_step || d >= wide_step) {
          wide_ += sign;
          break;
        }
        put(sums_[0], v);
        sd_ += sign * d;
        sdd_ += sign * (static_cast<__int128>(d) * d);
        const DoubleDouble dy = two_prod(static_cast<double>(d), v);
        put(sums_[1], dy.hi);
        put(sums_[1], dy.lo);
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
  if (!valid_ || lo < lo_ || end < hi_ || lo > hi_ || lo_ < h.first_held() || kind != kind_) {
    rebuild(kind, h, lo, end);
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
    if (lo + 16 < end) __builtin_prefetch(&h.value[h.phys(lo + 16)]);
    lo_ = lo;
    if (kind == RunKind::min || kind == RunKind::max) deque_.expire(lo);
    if (recentre && !recentre_slope(h)) rebuild(kind, h, lo, end);
  }
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
      const double var = variance_of(sums_[0], sums_[1], n, vchange_ <= lo_);
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
      return slope_of(sd_, sdd_, sums_[0], sums_[1], n);
    case RunKind::changes: return static_cast<double>(changes_);
    case RunKind::any_nan: return nans_ ? 1 : 0;
    case RunKind::zscore: {
      const double latest = newest();
      if (nans_ || std::isnan(latest)) return nan;
      if (specials_ || !(std::abs(latest) <= special_above)) return std::nullopt;
      return zscore_of(sums_[0], sums_[1], n, vchange_ <= lo_, latest);
    }
    case RunKind::iqr_outlier: {
      const double latest = newest();
      if (nans_ || std::isnan(latest)) return nan;
      const double q1 = split_[0].quantile(0.25, lo_, h), q3 = split_[1].quantile(0.75, lo_, h);
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
  ExactSum a, b;
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
        const DoubleDouble sq = two_prod(w.values[i], w.values[i]);
        b.add(sq.hi);
        b.add(sq.lo);
      }
      if (kind == RunKind::zscore) return zscore_of(a, b, dn, all_equal, w.values[w.n - 1]);
      const double var = variance_of(a, b, dn, all_equal);
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
        const DoubleDouble dy = two_prod(static_cast<double>(d), w.values[i]);
        b.add(dy.hi);
        b.add(dy.lo);
      }
      return slope_of(sd, sdd, a, b, dn);
    }
    default: return std::nullopt;
  }
}

}  // namespace vigil::interp
