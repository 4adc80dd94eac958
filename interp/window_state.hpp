// Running windows: the per-(range node, series) state that lets a range
// function follow its window as it slides, instead of recomputing it from
// every sample at every observation (issue 14 §1).
//
// A RunningWindow covers the samples [lo, hi) of one History, named by their
// sample numbers (History::pushed). Each observation the executor asks the
// reader for the window's bounds; advance() adds the samples that entered
// and removes the ones that left, so a sliding window costs O(1) amortised
// per sample (sums, counts, monotonic deques) or O(log W) (the order
// statistic blocks of median/quantile).
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
  /// The window's values (NaN aside) as a sorted sequence cut into blocks of
  /// at most `cap` values: an insertion or removal binary-searches the
  /// blocks' largest values, then moves at most `cap` values in one block;
  /// a rank is found by summing block counts. O(W / cap + cap) per sample
  /// with small constants, cache friendly (the treap it replaces missed the
  /// cache at every level). Ties keep insertion order and a removal takes
  /// the oldest value with the same bits, so the order is (value, sample
  /// number) and kth() is a function of the window alone. Blocks split when
  /// full and merge while two neighbours fit in half a block, so there are
  /// at most 4 n / cap + 1; storage for that many is reserved as the window
  /// first reaches each size (no allocation once it stops growing).
  struct Sorted {
    static constexpr std::uint32_t cap = 128;
    std::vector<double> data;          // physical block b: data[b * cap, b * cap + cap)
    std::vector<std::uint32_t> order;  // physical blocks in value order
    std::vector<std::uint32_t> count;  // per block in value order: values held
    std::vector<double> last;          // per block in value order: its largest value
    std::vector<std::uint32_t> free;   // unused physical blocks
    std::uint32_t n = 0, reserved = 0;
    void clear();
    void insert(double v);
    void erase(double v);
    [[nodiscard]] double quantile(double q) const;

   private:
    double* block(std::size_t i) { return &data[std::size_t{order[i]} * cap]; }
    [[nodiscard]] const double* block(std::size_t i) const {
      return &data[std::size_t{order[i]} * cap];
    }
    void reserve_for(std::uint32_t values);
    void drop(std::size_t i);        // removes empty block i
    void merge_into(std::size_t i);  // appends block i + 1 to block i
    /// Block and offset of the value of rank r (0-based, r < n).
    [[nodiscard]] std::pair<std::size_t, std::uint32_t> locate(std::uint32_t r) const;
  };

  void rebuild(RunKind kind, const History& h, std::uint64_t lo, std::uint64_t hi);
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
  Sorted sorted_;
};

}  // namespace vigil::interp
