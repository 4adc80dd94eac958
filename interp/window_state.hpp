// Running windows: the per-(range node, series) state that lets a range
// function follow its window as it slides, instead of recomputing it from
// every sample at every observation (issue 14 §1).
//
// A RunningWindow covers the samples [lo, hi) of one History, named by their
// sample numbers (History::pushed). Each observation the executor asks the
// reader for the window's bounds; advance() adds the samples that entered
// and removes the ones that left, so a sliding window costs O(1) amortised
// per sample (sums, counts, monotonic deques) or O(log W) (the order
// statistic heaps of median/quantile).
//
// Exactness, and why there is no drift: sums are kept in ExactSum, a fixed
// point accumulator wide enough for every double, so adding and removing
// samples is exact and the sum read back is the correctly rounded sum of the
// window, whatever the order of additions and removals. Everything a
// RunningWindow returns is therefore a function of the window's samples
// alone: rebuilding it from the window (after restore_state, after a window
// moved backwards, after samples it needed were evicted) gives bit-identical
// values, and checkpoint/resume stays exact without saving it.
// var/std/zscore/slope are correctly rounded functions of exact sums
// (RN(n·Σx² - (Σx)²) and the like; slope's are invariant under its origin
// step's moves), read from running double-double approximations with a
// rigorous error bound whenever the bound decides the rounding, and from
// the exact sums -- rebuilt from the window on demand, O(W), when they are
// not maintained -- otherwise; zscore over a window of a narrow exponent
// range keeps exact integer sums instead (NarrowMoments) and reads them
// exactly: see docs/performance.md.
//
// Where a running window does not apply, value() returns nullopt and the
// executor recomputes from the window: windows that are not a contiguous run
// of held samples (evals windows; step windows over unsorted steps; time
// windows with untimed or out-of-order samples), sum-like functions while
// the window holds +-Inf or a sample beyond 1e150 in magnitude, robust_z,
// and the O(1) functions that need no state (count, first, last, before).
//
// Owns: the running state and its structures. Must not touch: histories
// (reads them), columns, rule state. Allocates only while a window grows
// past the largest size it has had (warm-up).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "interp/window.hpp"
#include "stdlib/functions.hpp"

namespace vigil::interp {

/// Which running computation a range function gets (none: recomputed).
enum class RunKind : std::uint8_t {
  none,
  sum,
  mean,
  min,
  max,
  count_true,
  var,
  std_dev,
  median,
  quantile,
  delta,
  rel_change,
  slope,
  changes,
  any_nan,
  zscore,
  iqr_outlier,
};

/// The running kind of range function `fn` (none for functions recomputed
/// from the window: O(1) ones, robust_z, non-range functions).
RunKind running_kind(const stdlib::FunctionDef& fn);

/// A double-double: hi + lo, |lo| <= ulp(hi) / 2.
struct DoubleDouble {
  double hi = 0, lo = 0;
};

/// The exact sum of finite doubles under addition and removal.
///
/// Two representations of the same exact number, chosen per sum:
/// - fast (the usual one): a 256-bit two's complement integer times
///   2^(anchor - 1074), the anchor set 64 bits below the first summand's
///   lowest set bit (and moved down, the words shifted, when a later one
///   reaches lower while the sum has room). A summand whose bits lie within
///   [anchor, anchor + 223) is added with one carry chain over four words;
///   the integer stays below 2^255 for 2^30 additions (then it is checked).
///   Values of similar magnitude -- a metric's window -- always fit.
/// - digits: a signed fixed-point number of 68 32-bit digits (held in int64
///   so that 2^30 additions need no carry), covering every double's bits
///   with room for 2^31 samples. A summand outside the fast range moves the
///   sum here (exactly); every 4096 additions it moves back when the sum fits.
///
/// With track(true), a compensated (Neumaier) double sum and a rigorous
/// bound on its distance from the exact sum follow it; value() returns the
/// compensated sum rounded when the bound proves that is the correctly
/// rounded sum (almost always), and reads the exact sum only when it cannot
/// (then re-seeding the compensated sum from it). Either way the value is
/// the correctly rounded sum: a function of the summands.
///
/// Every read-out is a function of the exact sum alone, whatever the
/// representation, the anchor or the order of additions and removals.
class ExactSum {
 public:
  ExactSum() { clear(); }
  void clear();
  /// Follows the sum with the compensated double sum too (sum and mean).
  void track(bool on) { track_ = on; }
  void add(double x) { put(x, false); }
  void remove(double x) { put(x, true); }
  /// Adds (or removes) x·x exactly: the same sum as adding both halves of
  /// its two-product (two_prod(x, x), exact wherever x·x is not tiny), in one
  /// addition where the fast form can take the 106-bit square.
  void add_square(double x) { put_square(x, false); }
  void remove_square(double x) { put_square(x, true); }
  /// Adds (or removes) d·y exactly (|d| < 2^40, |y| <= 1e150): the same sum
  /// as both halves of two_prod(d, y), in one addition in the fast form.
  void add_product(std::int64_t d, double y) { put_product(d, y, false); }
  void remove_product(std::int64_t d, double y) { put_product(d, y, true); }
  /// The correctly rounded sum (+0.0 for an empty or cancelled sum).
  [[nodiscard]] double value();
  /// The sum as the canonical double-double: hi = the correctly rounded sum,
  /// lo = the correctly rounded rest (sum - hi); {hi, 0} if hi overflows.
  [[nodiscard]] DoubleDouble value_dd();
  /// Moves the sum into the digits (tests: both forms must read the same).
  void force_digits() {
    if (fast_) spill();
  }
  /// Adds m times `other` exactly (|m| < 2^40; not with track()). False,
  /// and nothing changed, if the result could leave the digits.
  bool add_scaled(ExactSum& other, std::int64_t m);
  /// The exact sum as sign · magnitude · 2^exp, the magnitude in `len`
  /// 64-bit words (least significant first, the top one non-zero; len 0 for
  /// a zero sum), exp >= -1074. For the exact read-outs of var/std/zscore/slope.
  struct Words {
    bool neg = false;
    int exp = 0;
    int len = 0;
    std::uint64_t w[36];
  };
  void exact_words(Words& out);
  /// RN(n·x - sum), exactly, where the sum is in the fast form and n·x
  /// (n < 2^53, x finite) lands within it: zscore's numerator, whose exact
  /// value sits on a rounding midpoint often (it has only a few bits more
  /// than a double). nullopt: not in the fast form's reach (multi-word then).
  [[nodiscard]] std::optional<double> scaled_minus(double x, std::uint64_t n) const;

 private:
  static constexpr int digits = 68;
  /// Summands whose lowest bit is at most this far above the anchor are
  /// added in the fast form (their top bit stays below 2^223).
  static constexpr int fast_span = 170;
  void put(double x, bool negate);
  void put_square(double x, bool negate);
  void put_product(std::int64_t d, double y, bool negate);
  /// Adds the integer v (below 2^106) times 2^(o + anchor - 1074), 0 <= o <= 117.
  void add_fast(unsigned __int128 v, int o, bool minus);
  /// Adds (or subtracts) a value below 2^96 placed at digit i: three digits.
  void add_at(int i, unsigned __int128 v, bool minus) {
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
  }
  void normalise();
  /// The negated digits, normalised, into `neg`; returns the top non-zero one.
  int negated(std::int64_t* neg) const;
  /// The normalised digits' magnitude (each in [0, 2^32)): d_ itself, or
  /// its negation written into `neg`; `top` its highest non-zero digit.
  /// Returns whether the sum is negative. Precondition: normalised, non-zero.
  bool magnitude_digits(std::int64_t* neg, const std::int64_t*& src, int& top) const;
  /// value() from the exact sum alone.
  double exact_value();
  /// Moves the fast form's anchor down to below bit `low` if the sum stays
  /// within the fast range; false (nothing changed) if it would not.
  bool reanchor(int low);
  /// The fast form's sum moved into the digits (exactly).
  void spill();
  /// The digits' sum moved into the fast form, if it fits there.
  void compact();
  /// add_scaled on the digits of both.
  bool add_scaled_digits(ExactSum& other, std::int64_t m);
  // What an addition in the fast form touches comes first (two cache lines;
  // the digits after them are touched only in the digits form).
  // fast form: a_ (two's complement, a_[3] the top word) times 2^(e_ - 1074);
  // e_ < 0 until the first non-zero summand sets it.
  bool fast_ = true;
  bool track_ = false;
  int e_ = -1;
  std::uint32_t ops_ = 0;       // additions since the last carry propagation (or check)
  std::uint32_t slow_ops_ = 0;  // additions in the digits since the last compact()
  std::uint64_t a_[4];
  // The compensated sum s_ + c_, within err_ of the exact sum.
  double s_ = 0, c_ = 0, err_ = 0;
  int lo_ = digits, hi_ = -1;  // digits in use
  std::int64_t d_[digits];
};

/// A running double-double approximation of an exact sum, with a rigorous
/// bound on its distance from it: |exact - (hi + lo)| <= err (1 + 2^-20)
/// + 2^-1000 while ops < 2^30 (see add()). var/std/zscore/slope read their
/// values from these almost always and from the exact sums only when the
/// bound cannot prove the correctly rounded result (Ziv's strategy).
struct ApproxSum {
  double hi = 0, lo = 0, err = 0;
  std::uint32_t ops = 0;  // additions since the last seed
  void clear() { *this = ApproxSum{}; }
  /// Adds the double x. Exact but for the one rounding of the low part
  /// (t + lo, at most 2^-53 of it), which err covers twice over (the second
  /// half covers err's own roundings, with the (1 + 2^-20) at the read-out).
  void add(double x);
  /// Adds p + e (a two-product's halves, the same two doubles ExactSum adds
  /// or whose exact sum it adds): two roundings of the low part.
  void add2(double p, double e);
  /// Re-seeds from the exact sum: its canonical double-double, within
  /// 2^-106 of it (err 2^-105 |hi|).
  void seed(ExactSum& s);
  /// Additions after which a read-out re-seeds (O(1) from the exact sum):
  /// each addition adds at most 2^-104 of the sum to err, so err stays
  /// within ~2^-92 of the sum (the bound's own roundings need < 2^30).
  static constexpr std::uint32_t reseed_after = 4096;
  /// Whether a read-out should re-seed first: reseed_after additions, or
  /// err above 2^-80 of the sum (it shrank by cancellation since the errors
  /// were made), or no finite value.
  [[nodiscard]] bool stale() const {
    return ops >= reseed_after || !(err <= std::abs(hi) * 0x1p-80);
  }
};

/// zscore's exact sums Σx and Σx² over a window whose values' exponents lie
/// within a fixed range, as integers times powers of two: Σx one int128 and
/// Σx² four words, times 2^(anchor - 1074) and its square. On a metric's
/// window this replaces, per observation, two ExactSum additions (~100
/// instructions each), the running approximations of Σx and Σx² and the
/// read-out's bound, which cannot decide the frequent exact midpoints of
/// the numerator: both read-outs are exact integer arithmetic rounded once.
///
/// The anchor is set `below` bits under the first non-zero summand's
/// mantissa; a summand is taken whole (all 53 bits) at offset o = its
/// exponent - the anchor, 0 <= o <= `span`: each is below 2^93 (its square
/// below 2^186), so fewer than 2^33 of them (a window's: a History of that
/// many samples would take hundreds of GiB) keep Σx below 2^126 and Σx²
/// below 2^219. put() refuses, changing nothing, outside that range
/// (subnormals, a value 2^24 times smaller or 2^16 times larger than the
/// first, an anchor outside [563, 1459]): the owner falls back to ExactSum
/// and the approximations then. The anchor's range keeps every non-zero
/// result normal and finite: with A = 2^(anchor - 1074) the numerator is an
/// integer times A, A >= 2^-511, and n·Σx² - (Σx)² (< 2^251) an integer
/// times A² >= 2^-1022, <= 2^770, so rounding the integer once and scaling it
/// is exact. Every value is also in both exact forms (x² and its two-product
/// halves are exact at these magnitudes): the read-outs give the same bits
/// as exact_n_deviation and exact_n2_moment.
class NarrowMoments {
 public:
  static constexpr int below = 24, span = 40;
  static constexpr int lowest_anchor = 563, highest_anchor = 1459;
  void clear() {
    s1_ = 0;
    s2_[0] = s2_[1] = s2_[2] = s2_[3] = s2_[4] = 0;
    e_ = -1;
  }
  /// Adds (Add) or removes x exactly; false (nothing changed) if x is out of range.
  template <bool Add>
  [[nodiscard]] bool put(double x);
  /// RN(n·x - Σx), exactly (+0 for an exact zero); nullopt if x's exponent
  /// is out of range or n >= 2^32.
  [[nodiscard]] std::optional<double> scaled_minus(double x, std::uint64_t n) const;
  /// RN(n·Σx² - (Σx)²), exactly; n (< 2^32) the summands held. Precondition:
  /// a non-zero summand was added (the anchor is set).
  [[nodiscard]] double n2_moment(std::uint64_t n) const;

 private:
  static constexpr std::uint64_t mantissa = (std::uint64_t{1} << 52) - 1;
  __int128 s1_ = 0;
  // Little-endian words; s2_[4] stays 0 (a square added at word 1 carries
  // into it, by nothing: Σx² < 2^256).
  std::uint64_t s2_[5] = {0, 0, 0, 0, 0};
  int e_ = -1;  // the anchor; < 0 until the first non-zero summand
};

/// var/std/zscore/slope's correctly rounded quantities (docs/performance.md,
/// "Exactness"): with S1 = Σx, S2 = Σx² (the exact sums) and n the samples,
/// RN(n·S2 - S1²); zscore's RN(n·latest - S1); slope's RN(n·Σdy - Σd·Σy).
/// `approx_*` evaluate them in double-double from the running approximations
/// with an error bound and return the value only when the bound proves it is
/// the correctly rounded one (nullopt otherwise: then the exact one, from
/// the exact sums, multi-word). Both give the same bits whenever the first
/// gives a value; `exact_*` are the fallback. Public for the tests.
std::optional<double> approx_n2_moment(const ApproxSum& s1, const ApproxSum& s2, double n);
double exact_n2_moment(ExactSum& s1, ExactSum& s2, double n);
std::optional<double> approx_n_deviation(const ApproxSum& s1, double latest, double n);
double exact_n_deviation(ExactSum& s1, double latest, double n);
std::optional<double> approx_slope_numerator(__int128 sd, const ApproxSum& sy, const ApproxSum& sdy,
                                             double n);
double exact_slope_numerator(__int128 sd, ExactSum& sy, ExactSum& sdy, double n);
/// RN(n·Σd² - (Σd)²), exactly (int128 where it fits, else multi-word).
double exact_slope_denominator(__int128 sd, __int128 sdd, double n);

/// The running kind's value computed afresh from a window that is not a
/// contiguous run of held samples (gathered), with the same exact sums and
/// formulas as a RunningWindow, so that a value never depends on how its
/// window was found. nullopt: use the registry kernel (its value is already
/// the same: min/max/quantiles/counts; or the window holds a special sample).
std::optional<double> running_value_of(RunKind kind, const stdlib::Window& w);

/// A value in an order statistic: (value, sample number), compared as one
/// 128-bit number.
struct OrderNode {
  std::uint64_t key;  // the value's bits as an unsigned order (both zeros as +0)
  std::uint64_t k;    // sample number
};

/// An allocator whose element `First` starts a 64-byte cache line: the
/// order statistics' hot groups of values (a 4-ary heap's four children of
/// 16 bytes, First = 1; a block of sorted doubles, First = 0) then span one
/// line (or whole lines) instead of straddling two.
template <class T, std::size_t First>
struct LineAllocator {
  static constexpr std::size_t line = 64;
  static constexpr std::size_t skew = (line - First * sizeof(T) % line) % line;  // element 0's offset in its line
  using value_type = T;
  template <class U>
  struct rebind {
    using other = LineAllocator<U, First>;
  };
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U, First>& /*other*/) {}
  T* allocate(std::size_t n) {
    auto* p = static_cast<char*>(::operator new(n * sizeof(T) + skew, std::align_val_t{line}));
    return reinterpret_cast<T*>(p + skew);
  }
  void deallocate(T* p, std::size_t n) {
    ::operator delete(reinterpret_cast<char*>(p) - skew, n * sizeof(T) + skew, std::align_val_t{line});
  }
  friend bool operator==(const LineAllocator&, const LineAllocator&) { return true; }
};

/// All order statistics of the window (NaN aside) at once, for
/// iqr_outlier's two quartiles: the values themselves, sorted by (value,
/// age) in blocks of at most C, a directory of the blocks' counts and last
/// values (and every G-th of those, so a search scans ~nb/G + G + a block
/// with SIMD compares instead of branchy binary searches; past 64 groups
/// the groups are binary-searched), and one rank
/// cursor per quantile (a block and the count before it), which moves by
/// at most a block per change. Ties keep insertion order (a value goes
/// after its equals; a leaving value, the window's oldest, is the first of
/// its equals), so the doubles stored are the samples' own, a zero's sign
/// included, and the order is (value, sample number) without storing the
/// sample number. Costs: an insertion or a removal is two short scans and
/// a move within one block (a few hundred bytes up to 2^16 values); a
/// quantile read is O(1) amortised. Two heaps cost less per quantile
/// (median, quantile), but one of these costs less than two splits. The
/// directory is a flat array (a split or merge moves its tail, O(W/C)),
/// so RunningWindow uses it up to 2^16 values only (then two RankSplits).
///
/// Blocks split at C into halves and merge while two neighbours hold at
/// most 3C/4 (or one is empty), so any two neighbours hold more than 3C/4:
/// at most 8n/(3C) + 1 blocks. Room is reserved for a window as it first
/// reaches each size (doubling): no allocation once it stops growing.
/// Unused slots hold NaN, which no comparison counts.
class OrderBlocks {
 public:
  static constexpr std::size_t C = 64;  // values per block, at most
  static constexpr std::size_t G = 16;  // blocks per directory group
  [[nodiscard]] std::size_t size() const { return n_; }
  /// Blocks in use (tests: at most 8·size()/(3C) + 1).
  [[nodiscard]] std::size_t blocks() const { return nb_; }
  void clear();
  /// Room for a window of `values` values: at most 8n/(3C) + 1 blocks,
  /// and one more while a full block splits.
  void reserve(std::size_t values) {
    const std::size_t want = 8 * values / (3 * C) + 2 + G;
    if (want > capacity_) grow(want);
  }
  /// v goes after every value equal to it (it is the window's newest).
  void insert(double v);
  /// Removes the first value equal to v (the window's oldest sample, of
  /// value v, is the first of its equals). Precondition: v is held.
  void erase(double v);
  /// stdlib's quantile_of over the values, read with cursor `c` (0 or 1).
  [[nodiscard]] double quantile(int c, double q);

 private:
  struct Cursor {
    std::size_t j = 0, before = 0;  // a block, and the values in blocks before it
  };
  double* block(std::size_t j) { return pool_.data() + static_cast<std::size_t>(id_[j]) * C; }
  template <bool Upper>
  [[nodiscard]] std::size_t find_block(double v) const;
  void grow(std::size_t want);
  void set_last(std::size_t j, double v);
  void regroup(std::size_t from_group);
  void split(std::size_t j);
  /// Merges block m + 1 into m.
  void merge(std::size_t m);
  /// Merges around block j while two neighbours hold at most 3C/4 or one is empty.
  void rebalance(std::size_t j);
  [[nodiscard]] double at(Cursor& c, std::size_t r);

  std::vector<double, LineAllocator<double, 0>> pool_;  // block b: pool_[b·C, b·C + C)
  std::vector<std::uint32_t> free_;   // unused block ids
  std::vector<std::uint32_t> id_, count_;  // the directory, in order
  std::vector<double> last_;          // each block's last value (NaN past nb_)
  std::vector<double> group_last_;    // last_ of each group's last block (NaN past)
  std::size_t nb_ = 0, groups_ = 0, n_ = 0, capacity_ = 0;
  Cursor cursor_[2];
};

/// The running state of one range function over one history.
class RunningWindow {
 public:
  /// Moves the window to samples [lo, hi) of `h` (rebuilding when it moved
  /// backwards or lost samples it would have to remove), then returns the
  /// function's value, or nullopt when it must be recomputed from the window.
  /// Precondition: [lo, hi) are held in `h`, hi - lo >= the function's
  /// minimum samples.
  std::optional<double> update(RunKind kind, const History& h, std::uint64_t lo,
                               std::uint64_t hi, std::span<const double> consts);

  /// The first sample of the window it covers (WindowReader::no_hint when
  /// it covers none): bounds()'s hint for the next observation.
  [[nodiscard]] std::uint64_t first() const { return valid_ ? lo_ : WindowReader::no_hint; }
  /// Rebuilds done (windows that moved backwards, jumped, or restarted):
  /// tests assert sliding windows do not rebuild.
  [[nodiscard]] std::uint64_t rebuilds() const { return rebuilds_; }
  /// Read-outs of var/std/zscore/slope that could not be decided from the
  /// running approximations and read the exact sums (tests: rare, and taken
  /// on constructed near-midpoint windows).
  [[nodiscard]] std::uint64_t exact_readouts() const { return exact_readouts_; }
  /// Times an exact sum that was not maintained was rebuilt from the window
  /// (O(W)) for an exact read-out (tests: rare; at most twice before the
  /// sums are maintained again, see make_exact).
  [[nodiscard]] std::uint64_t exact_rebuilds() const { return exact_rebuilds_; }
  /// Test hook: iqr_outlier keeps its quartiles in OrderBlocks while the
  /// window holds at most `n` values, in two RankSplits beyond (O(log W)).
  void set_iqr_blocks_up_to(std::size_t n) { iqr_blocks_up_to_ = n; }
  /// Whether iqr_outlier's quartiles are in the heaps now (tests).
  [[nodiscard]] bool iqr_in_heaps() const { return iqr_heaps_; }
  /// Whether sums_[i] follows the window exactly (else only its
  /// approximation does, and make_exact rebuilds it on demand).
  [[nodiscard]] bool exact_live(int i) const { return live_[i]; }
  /// Makes sums_[i] the window's exact sum: nothing if it is maintained,
  /// else a rebuild from the window's samples in `h` (O(W)). A second such
  /// rebuild within one window length of the previous one (a window whose
  /// read-outs the approximations keep failing to decide: cancellation,
  /// tiny values) makes the sums maintained again, until no read-out has
  /// needed them for four window lengths.
  void make_exact(int i, const History& h);
  /// Whether zscore's sums are in its NarrowMoments now (tests).
  [[nodiscard]] bool narrow() const { return narrow_; }

 private:
  struct Entry {
    double v;
    std::uint64_t k;  // sample number
  };
  /// A monotonic deque (min or max of a sliding window), ring-buffered.
  struct Deque {
    std::vector<Entry> buf;
    std::size_t head = 0, size = 0;
    void clear() { head = size = 0; }
    Entry& at(std::size_t i) { return buf[(head + i) & (buf.size() - 1)]; }
    /// Appends sample k (a max deque: Max; else a min deque).
    template <bool Max>
    void push(double v, std::uint64_t k);
    void grow();
    /// Drops the entries of samples before lo (inline: once per observation).
    void expire(std::uint64_t lo) {
      while (size > 0 && at(0).k < lo) {
        head = (head + 1) & (buf.size() - 1);
        --size;
      }
    }
  };
  /// One order statistic of the window (NaN aside), split at a rank r: a
  /// max-heap of the r + 1 lowest values and a min-heap of the others, so
  /// rank r and r + 1 (a quantile's interpolation) are the two tops. The
  /// order is (value, sample number): ties keep insertion order, +0 and -0
  /// are equal values, so a rank is a function of the window alone.
  ///
  /// Removal is lazy. Samples leave a running window oldest first, so a
  /// node is dead exactly when its sample number is below the window's
  /// first (`lo`): a removal only tells the heap it was in (every node of
  /// the max-heap is below every node of the min-heap, dead or alive, so
  /// its top tells) to count one live node less, and dead nodes are dropped
  /// when they reach a top, or all at once when a heap holds more dead than
  /// live nodes (O(n) then, amortised O(1) per removal). Nodes never need
  /// their position tracked, so moving one is a plain copy.
  ///
  /// Both heaps are 4-ary (half the depth of a binary heap, siblings
  /// adjacent). Costs: an insertion is O(1) expected on values that do not
  /// trend (a new value settles near the bottom), O(log W) at worst; a
  /// removal O(1) amortised; moving the split by one (the two sides got a
  /// value each, or the rank moved) one pop and one push, O(log W). Each
  /// heap is reserved for twice the window as it first reaches each size
  /// (no allocation once it stops growing).
  struct RankSplit {
    using Node = OrderNode;
    using Heap = std::vector<Node, LineAllocator<Node, 1>>;  // 4-ary: children of i at 4i + 1
    Heap low, high;  // low: max-heap; high: min-heap (live and dead nodes)
    std::size_t live_low = 0, live_high = 0;
    void clear() {
      low.clear();
      high.clear();
      live_low = live_high = 0;
    }
    [[nodiscard]] std::size_t size() const { return live_low + live_high; }
    /// Room for a window of `values` values (inline: the steady slide asks
    /// once per sample, and the answer is almost always "there is").
    void reserve(std::size_t values) {
      if (std::min(low.capacity(), high.capacity()) < 2 * values + 2 * trim_slack) grow(values);
    }
    /// Dead nodes a heap may hold beyond as many as its live ones.
    static constexpr std::size_t trim_slack = 64;
    void insert(double v, std::uint64_t k);
    /// Sample k, of value v, left the window; `lo`: the window's first sample now.
    void erase(double v, std::uint64_t k, std::uint64_t lo);
    /// stdlib's quantile_of (linear interpolation between closest ranks)
    /// over the live nodes (sample numbers from `lo`); `h` gives a zero its
    /// sign (the value of its sample).
    [[nodiscard]] double quantile(double q, std::uint64_t lo, const History& h);

   private:
    void grow(std::size_t values);
    /// Moves live tops across until the max-heap holds `n_low` live values;
    /// both tops are live after it.
    void split_at(std::size_t n_low, std::uint64_t lo);
    /// Drops dead tops.
    void settle(std::uint64_t lo);
    /// Drops every dead node of `heap` when they outnumber its live ones.
    template <bool High>
    void trim(Heap& heap, std::size_t live, std::uint64_t lo);
    template <bool High>
    static void sift_up(Node* heap, std::size_t i, Node x);
    template <bool High>
    static Node pop_top(Heap& heap);
    /// Pushes x, which belongs above every node of `heap`.
    template <bool High>
    static void push_root(Heap& heap, Node x);
    template <bool High>
    static void push(Heap& heap, Node x) {
      heap.emplace_back();
      sift_up<High>(heap.data(), heap.size() - 1, x);
    }
  };

  void rebuild(RunKind kind, const History& h, std::uint64_t lo, std::uint64_t hi);
  /// slope: moves the origin step to the window's first step in O(1) with
  /// exact integer and ExactSum arithmetic (the same sums a rebuild would
  /// make); false when it cannot (a wide or unsorted window: rebuild).
  bool recentre_slope(const History& h);
  /// Stops maintaining the exact sums again (keep_exact_) once no read-out
  /// has needed them for four window lengths.
  void relax_exact();
  /// sums_[i] rebuilt from the window's samples (O(W)).
  void fill_exact(int i, const History& h);
  /// zscore: the sums leave the NarrowMoments (a summand out of its range)
  /// for exact Σx and approximated Σx², from the window (O(W)); narrow is
  /// tried again four window lengths later.
  void leave_narrow(const History& h);
  /// zscore: the sums back into a NarrowMoments from the window (O(W)), if they fit.
  void try_narrow(const History& h);
  /// zscore: try_narrow once the window has moved on by four lengths (at least 64 samples each).
  void retry_narrow_later() { narrow_retry_ = hi_ + 4 * std::max<std::uint64_t>(64, hi_ - lo_); }
  /// Values held by the order statistics (NaN aside).
  [[nodiscard]] std::size_t sorted_values() const { return split_[0].size() + blocks_.size(); }
  /// Room in the order statistics of `kind` (if any) for `values` values.
  void reserve_splits(RunKind kind, std::size_t values) {
    const bool iqr = kind == RunKind::iqr_outlier;
    if (kind == RunKind::median || kind == RunKind::quantile || (iqr && iqr_heaps_)) split_[0].reserve(values);
    if (iqr && iqr_heaps_) split_[1].reserve(values);
    if (iqr && !iqr_heaps_) blocks_.reserve(values);
  }
  /// Adds (Add) or removes sample k: one template, as both touch the same
  /// counts and sums with opposite signs.
  template <bool Add>
  void move(RunKind kind, const History& h, std::uint64_t k);
  /// move() compiled for one kind.
  template <bool Add, RunKind kind>
  void move_as(const History& h, std::uint64_t k);
  /// The steady slide of update() (sample hi_ enters, lo_ leaves; the window
  /// becomes [lo, end)), compiled for one kind.
  template <RunKind kind>
  void slide(const History& h, std::uint64_t lo, std::uint64_t end);

  bool valid_ = false;
  RunKind kind_ = RunKind::none;  // the kind the state was built for
  std::uint64_t lo_ = 0, hi_ = 0;  // the samples covered
  std::int64_t nans_ = 0, specials_ = 0, trues_ = 0, changes_ = 0;
  std::uint64_t vchange_ = 0, schange_ = 0;  // newest sample differing from its predecessor
  std::uint64_t rebuilds_ = 0;
  std::uint64_t removed_ = 0;  // samples removed since the last rebuild
  // slope: steps as d = step - k0_, with exact integer Σd and Σd²; wide_
  // counts samples too far from k0_ (recomputed while any is in the window).
  std::int64_t k0_ = 0, wide_ = 0;
  __int128 sd_ = 0, sdd_ = 0;
  std::vector<ExactSum> sums_;  // per kind: see window_state.cpp
  ApproxSum approx_[2];         // var/std/zscore, slope: sums_[0], sums_[1] approximated
  std::uint64_t exact_readouts_ = 0, exact_rebuilds_ = 0;
  // var/std/zscore/slope: which exact sums are maintained (zscore keeps Σx:
  // its numerator is often an exact midpoint, read exactly in O(1)).
  bool live_[2] = {true, true};
  bool keep_exact_ = false;       // the guard tripped: maintain them again
  bool exact_before_ = false;     // an on-demand rebuild happened since the last rebuild
  std::uint64_t rebuilt_hi_ = 0;  // hi_ at the last on-demand rebuild
  std::uint64_t needed_hi_ = 0;   // hi_ when a read-out last needed the exact sums
  // zscore: while narrow_, Σx and Σx² are in narrow_sums_ alone (sums_ and
  // approx_ are not maintained; Σx counts as live, exact in that form);
  // otherwise narrow is tried again once hi_ reaches narrow_retry_.
  bool narrow_ = false;
  std::uint64_t narrow_retry_ = 0;
  NarrowMoments narrow_sums_;
  Deque deque_;
  // median/quantile: split_[0]. iqr_outlier: blocks_, q1 by cursor 0 and q3
  // by cursor 1, up to iqr_blocks_up_to_ values; split_[0] (q1) and
  // split_[1] (q3) beyond (iqr_heaps_), chosen at a rebuild.
  RankSplit split_[2];
  OrderBlocks blocks_;
  std::size_t iqr_blocks_up_to_ = std::size_t{1} << 16;
  bool iqr_heaps_ = false;
};

}  // namespace vigil::interp
