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
// alone (slope aside, below): rebuilding it from the window (after
// restore_state, after a window moved backwards, after samples it needed
// were evicted) gives bit-identical values, and checkpoint/resume stays
// exact without saving it. var/std/zscore/slope combine the exact sums in
// double-double arithmetic (about 2^-96 at worst relative to the sums of squares
// before cancellation): see docs/performance.md for the bound. slope
// measures steps from an origin step re-chosen as the window moves (so that
// nanosecond steps keep their precision): its value after a rebuild agrees
// to that double-double precision, not necessarily to the last bit.
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

#include <cstddef>
#include <cstdint>
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

/// The exact sum of finite doubles under addition and removal: a signed
/// fixed-point number of 68 32-bit digits (held in int64 so that 2^30
/// additions need no carry), covering every double's bits with room for
/// 2^31 samples. add/remove touch three digits; value() propagates carries
/// over the digits in use and rounds once (round to nearest, ties to even).
///
/// With track(true), a compensated (Neumaier) double sum and a rigorous
/// bound on its distance from the exact sum follow the digits; value()
/// returns the compensated sum rounded when the bound proves that is the
/// correctly rounded sum (almost always), and reads the digits only when
/// it cannot (then re-seeding the compensated sum from them). Either way
/// the value is the correctly rounded sum: a function of the summands.
class ExactSum {
 public:
  ExactSum() { clear(); }
  void clear();
  /// Follows the sum with the compensated double sum too (sum and mean).
  void track(bool on) { track_ = on; }
  void add(double x) { put(x, false); }
  void remove(double x) { put(x, true); }
  /// The correctly rounded sum (+0.0 for an empty or cancelled sum).
  [[nodiscard]] double value();
  /// The sum as hi + lo to 2^-96 relative at worst (hi is not necessarily
  /// the correctly rounded sum: value() is).
  [[nodiscard]] DoubleDouble value_dd();

 private:
  static constexpr int digits = 68;
  void put(double x, bool negate);
  void normalise();
  /// The negated digits, normalised, into `neg`; returns the top non-zero one.
  int negated(std::int64_t* neg) const;
  /// value() from the digits alone.
  double exact_value();
  std::int64_t d_[digits];
  int lo_ = digits, hi_ = -1;  // digits in use
  std::uint32_t ops_ = 0;      // additions since the last carry propagation
  bool track_ = false;
  // The compensated sum s_ + c_, within err_ of the exact sum.
  double s_ = 0, c_ = 0, err_ = 0;
};

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

  /// Rebuilds done (windows that moved backwards, jumped, or restarted):
  /// tests assert sliding windows do not rebuild.
  [[nodiscard]] std::uint64_t rebuilds() const { return rebuilds_; }

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
    void push(double v, std::uint64_t k, bool want_max);
    void expire(std::uint64_t lo);
  };
  /// One order statistic of the window (NaN aside), split at a rank r: a
  /// max-heap of the r + 1 lowest values and a min-heap of the others, so
  /// rank r and r + 1 (a quantile's interpolation) are the two tops. The
  /// order is (value, sample number): ties keep insertion order, +0 and -0
  /// are equal values, so a rank is a function of the window alone. Each
  /// sample's heap position is kept in a ring indexed by its sample number,
  /// so a removal needs no search. Both heaps are 4-ary (half the depth of
  /// a binary heap, siblings adjacent). Costs: an insertion or removal is
  /// O(1) expected on values that do not trend (a new value settles near
  /// the bottom; the one replacing a removed node comes from the bottom),
  /// O(log W) at worst; moving the split by one (the two sides got a value
  /// each, or the rank moved) is one pop and one push, O(log W). Both heaps
  /// and the ring are reserved for the whole window as it first reaches each
  /// size (no allocation once it stops growing).
  struct RankSplit {
    using Node = OrderNode;
    std::vector<Node> low, high;       // low: max-heap; high: min-heap
    std::vector<std::uint32_t> where;  // per sample (k & mask): heap index | in_high
    std::uint64_t mask = 0;
    static constexpr std::uint32_t in_high = 0x80000000U;
    void clear() {
      low.clear();
      high.clear();
    }
    [[nodiscard]] std::size_t size() const { return low.size() + high.size(); }
    /// Room for `values` values whose sample numbers span `span`.
    void reserve(std::size_t values, std::uint64_t span);
    void insert(double v, std::uint64_t k);
    /// Removes sample k (held: its value is not NaN).
    void erase(std::uint64_t k);
    /// Moves tops across until the max-heap holds `n_low` values.
    void split_at(std::size_t n_low);
    /// stdlib's quantile_of (linear interpolation between closest ranks);
    /// `h` gives a zero its sign (the value of its sample).
    [[nodiscard]] double quantile(double q, const History& h);

   private:
    template <bool High>
    void sift_up(std::vector<Node>& heap, std::size_t i, Node x);
    template <bool High>
    void sift_down(std::vector<Node>& heap, std::size_t i, Node x);
    template <bool High>
    void erase_at(std::vector<Node>& heap, std::size_t i);
    template <bool High>
    Node pop_top(std::vector<Node>& heap);
    template <bool High>
    void push(std::vector<Node>& heap, Node x) {
      heap.emplace_back();
      sift_up<High>(heap, heap.size() - 1, x);
    }
    void place(Node x, std::size_t i, bool high) {
      where[x.k & mask] = static_cast<std::uint32_t>(i) | (high ? in_high : 0);
    }
  };

  void rebuild(RunKind kind, const History& h, std::uint64_t lo, std::uint64_t hi);
  /// Values held by the order statistics (NaN aside).
  [[nodiscard]] std::size_t sorted_values() const { return split_[0].size(); }
  /// Room in the order statistics of `kind` (if any) for `values` values
  /// spanning `span` sample numbers.
  void reserve_splits(RunKind kind, std::size_t values, std::uint64_t span) {
    if (kind == RunKind::median || kind == RunKind::quantile || kind == RunKind::iqr_outlier)
      split_[0].reserve(values, span);
    if (kind == RunKind::iqr_outlier) split_[1].reserve(values, span);
  }
  /// Adds (Add) or removes sample k: one template, as both touch the same
  /// counts and sums with opposite signs.
  template <bool Add>
  void move(RunKind kind, const History& h, std::uint64_t k);

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
  Deque deque_;
  RankSplit split_[2];  // median/quantile: [0]; iqr_outlier: q1 [0], q3 [1]
};

}  // namespace vigil::interp
