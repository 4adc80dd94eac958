// Running windows (see window_state.hpp): the exact accumulator, the
// monotonic deque, the order-statistic treap, and the per-function update
// and read-out. Must not touch anything but its arguments.
#include "interp/window_state.hpp"

#include <algorithm>
#include <array>
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
/// Σx² - (Σx)²/n: n times the population variance.
DoubleDouble centred(DoubleDouble sxx, DoubleDouble sx, double n) {
  return dd_sub(sxx, dd_div(dd_mul(sx, sx), n));
}
/// Σxy - Σx·Σy/n.
DoubleDouble co_centred(DoubleDouble sxy, DoubleDouble sx, DoubleDouble sy, double n) {
  return dd_sub(sxy, dd_div(dd_mul(sx, sy), n));
}

/// Steps further than this from the origin step of a slope's window are
/// recomputed: d² sums stay within int128 and d is exact as a double.
constexpr std::int64_t wide_step = std::int64_t{1} << 40;

DoubleDouble dd_of(__int128 v) {
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

std::uint32_t priority(std::uint64_t k) {
  // splitmix64: a fixed function of the sample number.
  k += 0x9e3779b97f4a7c15ULL;
  k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ULL;
  k = (k ^ (k >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<std::uint32_t>((k ^ (k >> 31)) >> 32);
}

bool key_less(double v, std::uint64_t k, double v2, std::uint64_t k2) {
  return v < v2 || (v == v2 && k < k2);
}

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
double variance_of(ExactSum& sx, ExactSum& sxx, double n, bool all_equal) {
  if (all_equal) return 0;
  const DoubleDouble m2 = centred(sxx.value_dd(), sx.value_dd(), n);
  return std::max(0.0, m2.hi + m2.lo) / n;
}

/// zscore from the exact sums of the window without its latest sample.
double zscore_of(ExactSum& sx, ExactSum& sxx, double n, bool all_equal, double latest) {
  // latest - mean as (n * latest - Σx) / n in double-double: a latest
  // sample close to a large mean keeps its digits.
  const DoubleDouble diff = dd_div(dd_sub(two_prod(latest, n), sx.value_dd()), n);
  return standardised(diff.hi + diff.lo, std::sqrt(variance_of(sx, sxx, n, all_equal)));
}

/// slope from exact Σd, Σd² (d = step - origin), Σy and Σd·y.
double slope_of(__int128 sd, __int128 sdd, ExactSum& sy, ExactSum& sdy, double n) {
  const DoubleDouble d = dd_of(sd);
  const DoubleDouble sxx = centred(dd_of(sdd), d, n);
  const DoubleDouble sxy = co_centred(sdy.value_dd(), d, sy.value_dd(), n);
  return (sxy.hi + sxy.lo) / (sxx.hi + sxx.lo);
}

}  // namespace

// ---- ExactSum -----------------------------------------------------------------

void ExactSum::clear() {
  std::memset(d_, 0, sizeof d_);
  lo_ = digits;
  hi_ = -1;
  ops_ = 0;
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
  const unsigned __int128 v = static_cast<unsigned __int128>(mant) << (pos & 31);
  const auto d0 = static_cast<std::int64_t>(static_cast<std::uint64_t>(v) & 0xffffffffU);
  const auto d1 = static_cast<std::int64_t>(static_cast<std::uint64_t>(v >> 32) & 0xffffffffU);
  const auto d2 = static_cast<std::int64_t>(static_cast<std::uint64_t>(v >> 64));
  if (minus) {
    d_[i] -= d0;
    d_[i + 1] -= d1;
    d_[i + 2] -= d2;
  } else {
    d_[i] += d0;
    d_[i + 1] += d1;
    d_[i + 2] += d2;
  }
  lo_ = std::min(lo_, i);
  hi_ = std::max(hi_, i + 2);
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

/// The top 96 bits of a normalised non-negative digit string (digits in
/// [0, 2^32), the top one `top` non-zero), and whether any bit below them
/// is set.
struct Top96 {
  unsigned __int128 bits;
  bool sticky;
};
Top96 top96(const std::int64_t* d, int lo, int top) {
  auto digit = [&](int i) {
    return i >= lo ? static_cast<unsigned __int128>(static_cast<std::uint64_t>(d[i])) : 0;
  };
  const unsigned __int128 t = (digit(top) << 64) | (digit(top - 1) << 32) | digit(top - 2);
  bool sticky = false;
  for (int i = lo; i <= top - 3; ++i) sticky |= d[i] != 0;
  return {t, sticky};
}

/// Rounds the digit string to the nearest double, ties to even: the top 96
/// bits, doubled, plus one for any bit below them (a sticky bit between the
/// truncation and the next value up rounds like the exact value).
double round_digits(const std::int64_t* d, int lo, int top) {
  const Top96 t = top96(d, lo, top);
  const unsigned __int128 twice = (t.bits << 1) | (t.sticky ? 1 : 0);
  const double r = static_cast<double>(twice);
  if (top - 2 >= 1 && top - 2 < 64) return r * digit_scale(top - 2);
  return std::ldexp(r, 32 * (top - 2) - 1074 - 1);
}

/// hi + lo of the digit string: hi its top 96 bits rounded, lo what is
/// left of them plus the next digit (about 2^-120 of the value).
DoubleDouble dd_digits(const std::int64_t* d, int lo, int top) {
  const Top96 t = top96(d, lo, top);
  const double hi = static_cast<double>(t.bits);
  // hi <= 2^96 is an integer: the remainder is exact and small.
  const auto rest = static_cast<__int128>(t.bits) - static_cast<__int128>(static_cast<unsigned __int128>(hi));
  const double below = top - 3 >= lo ? static_cast<double>(d[top - 3]) * 0x1p-32 : 0.0;
  const double rem = static_cast<double>(rest) + below;
  if (top - 2 >= 1 && top - 2 < 64) {
    const double scale = digit_scale(top - 2) * 2;  // no sticky shift here
    return fast_two_sum(hi * scale, rem * scale);
  }
  const int e = 32 * (top - 2) - 1074;
  return fast_two_sum(std::ldexp(hi, e), std::ldexp(rem, e));
}

}  // namespace

double ExactSum::value() {
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

// ---- Tree ---------------------------------------------------------------------

void RunningWindow::Tree::clear() {
  pool.clear();
  free.clear();
  root = -1;
}

void RunningWindow::Tree::split(std::int32_t t, double v, std::uint64_t k, std::int32_t& a,
                                std::int32_t& b) {
  if (t < 0) {
    a = b = -1;
    return;
  }
  if (key_less(pool[t].v, pool[t].k, v, k)) {
    split(pool[t].r, v, k, pool[t].r, b);
    a = t;
  } else {
    split(pool[t].l, v, k, a, pool[t].l);
    b = t;
  }
  pull(t);
}

std::int32_t RunningWindow::Tree::merge(std::int32_t a, std::int32_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (pool[a].prio > pool[b].prio) {
    pool[a].r = merge(pool[a].r, b);
    pull(a);
    return a;
  }
  pool[b].l = merge(a, pool[b].l);
  pull(b);
  return b;
}

void RunningWindow::Tree::insert(double v, std::uint64_t k) {
  std::int32_t x;
  if (!free.empty()) {
    x = free.back();
    free.pop_back();
  } else {
    x = static_cast<std::int32_t>(pool.size());
    pool.emplace_back();
    // Room for every node on the free list: erasing never allocates.
    if (free.capacity() < pool.capacity()) free.reserve(pool.capacity());
  }
  pool[x] = {v, k, priority(k), 1, -1, -1};
  std::int32_t a, b;
  split(root, v, k, a, b);
  root = merge(merge(a, x), b);
}

std::int32_t RunningWindow::Tree::erase_at(std::int32_t t, double v, std::uint64_t k) {
  if (t < 0) return t;  // not held (cannot happen: removals mirror insertions)
  Node& n = pool[t];
  if (n.v == v && n.k == k) {
    free.push_back(t);
    return merge(n.l, n.r);
  }
  if (key_less(v, k, n.v, n.k))
    pool[t].l = erase_at(n.l, v, k);
  else
    pool[t].r = erase_at(n.r, v, k);
  pull(t);
  return t;
}

void RunningWindow::Tree::erase(double v, std::uint64_t k) { root = erase_at(root, v, k); }

double RunningWindow::Tree::kth(std::uint32_t i) const {
  std::int32_t t = root;
  while (t >= 0) {
    const std::uint32_t left = sz(pool[t].l);
    if (i < left) {
      t = pool[t].l;
    } else if (i == left) {
      return pool[t].v;
    } else {
      i -= left + 1;
      t = pool[t].r;
    }
  }
  return nan;
}

double RunningWindow::Tree::quantile(std::uint32_t n, double q) const {
  // stdlib's quantile_of: linear interpolation between closest ranks.
  if (n == 0 || std::isnan(q) || q < 0 || q > 1) return nan;
  const double h = (static_cast<double>(n) - 1) * q;
  const auto lo = static_cast<std::uint32_t>(std::floor(h));
  const double at_lo = kth(lo);
  if (lo + 1 >= n || h == static_cast<double>(lo)) return at_lo;
  const double next = kth(lo + 1);
  return at_lo + (h - static_cast<double>(lo)) * (next - at_lo);
}

// ---- RunningWindow ------------------------------------------------------------

void RunningWindow::rebuild(RunKind kind, const History& h, std::uint64_t lo, std::uint64_t hi) {
  if (valid_) ++rebuilds_;
  valid_ = true;
  lo_ = hi_ = lo;
  nans_ = specials_ = trues_ = changes_ = 0;
  vchange_ = schange_ = lo;
  removed_ = 0;
  wide_ = 0;
  sd_ = sdd_ = 0;
  k0_ = lo < hi ? h.step[h.phys(lo)] : 0;  // the origin of a slope's steps
  if (sums_.size() != sums_for(kind)) sums_.resize(sums_for(kind));
  for (auto& s : sums_) s.clear();
  deque_.clear();
  // The pool keeps its capacity: clear() then re-inserting allocates nothing.
  tree_.clear();
  for (std::uint64_t k = lo; k < hi; ++k) add(kind, h, k);
}

void RunningWindow::add(RunKind kind, const History& h, std::uint64_t k) {
  const std::size_t p = h.phys(k);
  const double v = h.value[p];
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
  const bool is_nan = std::isnan(v);
  nans_ += is_nan;
  trues_ += (v != 0) & !is_nan;
  if (is_nan) return;
  const bool special = !(std::abs(v) <= special_above);
  specials_ += special;
  switch (kind) {
    case RunKind::min: deque_.push(v, k, false); break;
    case RunKind::max: deque_.push(v, k, true); break;
    case RunKind::median:
    case RunKind::quantile:
    case RunKind::iqr_outlier: tree_.insert(v, k); break;
    case RunKind::sum:
    case RunKind::mean:
      if (!special) sums_[0].add(v);
      break;
    case RunKind::var:
    case RunKind::std_dev:
    case RunKind::zscore:
      if (!special) {
        sums_[0].add(v);
        const DoubleDouble sq = two_prod(v, v);
        sums_[1].add(sq.hi);
        sums_[1].add(sq.lo);
      }
      break;
    case RunKind::slope:
      if (!special) {
        std::int64_t d;
        if (__builtin_sub_overflow(h.step[p], k0_, &d) || d <= -wide_step || d >= wide_step) {
          ++wide_;
          break;
        }
        sums_[0].add(v);
        sd_ += d;
        sdd_ += static_cast<__int128>(d) * d;
        const DoubleDouble dy = two_prod(static_cast<double>(d), v);
        sums_[1].add(dy.hi);
        sums_[1].add(dy.lo);
      }
      break;
    default: break;
  }
}

void RunningWindow::remove(RunKind kind, const History& h, std::uint64_t k) {
  const std::size_t p = h.phys(k);
  const double v = h.value[p];
  if (kind == RunKind::changes && k + 1 < hi_ && !same(v, h.value[h.phys(k + 1)])) --changes_;
  lo_ = k + 1;
  const bool is_nan = std::isnan(v);
  nans_ -= is_nan;
  trues_ -= (v != 0) & !is_nan;
  if (is_nan) return;
  const bool special = !(std::abs(v) <= special_above);
  specials_ -= special;
  switch (kind) {
    case RunKind::median:
    case RunKind::quantile:
    case RunKind::iqr_outlier: tree_.erase(v, k); break;
    case RunKind::sum:
    case RunKind::mean:
      if (!special) sums_[0].remove(v);
      break;
    case RunKind::var:
    case RunKind::std_dev:
    case RunKind::zscore:
      if (!special) {
        sums_[0].remove(v);
        const DoubleDouble sq = two_prod(v, v);
        sums_[1].remove(sq.hi);
        sums_[1].remove(sq.lo);
      }
      break;
    case RunKind::slope:
      if (!special) {
        std::int64_t d;
        if (__builtin_sub_overflow(h.step[p], k0_, &d) || d <= -wide_step || d >= wide_step) {
          --wide_;
          break;
        }
        sums_[0].remove(v);
        sd_ -= d;
        sdd_ -= static_cast<__int128>(d) * d;
        const DoubleDouble dy = two_prod(static_cast<double>(d), v);
        sums_[1].remove(dy.hi);
        sums_[1].remove(dy.lo);
      }
      break;
    default: break;  // deques expire lazily
  }
}

std::optional<double> RunningWindow::update(RunKind kind, const History& h, std::uint64_t lo,
                                            std::uint64_t hi, std::span<const double> consts) {
  const std::uint64_t end = excludes_last(kind) ? hi - 1 : hi;
  // A slope re-centres its steps once the window has moved on by its own
  // length (amortised O(1)): the origin stays near the window.
  const bool recentre = kind == RunKind::slope && removed_ > std::max<std::uint64_t>(64, 2 * (hi - lo));
  if (!valid_ || lo < lo_ || end < hi_ || lo > hi_ || lo_ < h.first_held() ||
      sums_.size() != sums_for(kind) || recentre) {
    rebuild(kind, h, lo, end);
  } else {
    for (std::uint64_t k = hi_; k < end; ++k) add(kind, h, k);
    for (std::uint64_t k = lo_; k < lo; ++k) remove(kind, h, k);
    removed_ += lo - lo_;
    lo_ = lo;
    if (kind == RunKind::min || kind == RunKind::max) deque_.expire(lo);
  }
  const double latest = h.value[h.phys(hi - 1)];
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
    case RunKind::median: return nans_ ? nan : tree_.quantile(static_cast<std::uint32_t>(n), 0.5);
    case RunKind::quantile:
      return nans_ ? nan : tree_.quantile(static_cast<std::uint32_t>(n), consts[0]);
    case RunKind::delta:
      if (nans_) return nan;
      return latest - h.value[h.phys(lo_)];
    case RunKind::rel_change: {
      if (nans_) return nan;
      const double first = h.value[h.phys(lo_)];
      return (latest - first) / std::abs(first);
    }
    case RunKind::slope:
      if (nans_) return nan;
      if (specials_ || wide_) return std::nullopt;
      if (schange_ <= lo_) return nan;  // one step: no line
      return slope_of(sd_, sdd_, sums_[0], sums_[1], n);
    case RunKind::changes: return static_cast<double>(changes_);
    case RunKind::any_nan: return nans_ ? 1 : 0;
    case RunKind::zscore:
      if (nans_ || std::isnan(latest)) return nan;
      if (specials_ || !(std::abs(latest) <= special_above)) return std::nullopt;
      return zscore_of(sums_[0], sums_[1], n, vchange_ <= lo_, latest);
    case RunKind::iqr_outlier: {
      if (nans_ || std::isnan(latest)) return nan;
      const auto m = static_cast<std::uint32_t>(n);
      const double q1 = tree_.quantile(m, 0.25), q3 = tree_.quantile(m, 0.75);
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
