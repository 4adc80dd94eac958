// Windows over a series' history: the mirrored ring buffer that holds a
// series' samples, the retention rule that decides how long they stay, and
// the reader that turns a window (`x[10 steps]`, `before(x[5m])`) into the
// contiguous span a range kernel reads.
//
// Owns: History, the Clock it is read against, push/retention, WindowReader
// and its scratch. Must not touch: series identity (series_store), plan
// nodes or columns (executor), rule state. Everything here is a function of
// its arguments: the caller passes the clock explicitly, so a reader built
// on the stack (explain) sees exactly what the executor saw.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "interp/plan.hpp"
#include "stdlib/functions.hpp"

namespace vigil::interp {

/// Where the run is at the current observation: what windows and retention
/// are measured against. Mode 1 is "eval" (eval windows count its samples).
struct Clock {
  std::int64_t step = 0;
  double time = std::numeric_limits<double>::quiet_NaN();  // NaN: none given
  std::uint16_t mode = 0;
  std::int64_t low_step = 0;  // lowest latest step over the modes seen
  double last_time = std::numeric_limits<double>::quiet_NaN();  // latest time given
};

inline constexpr std::uint16_t eval_mode = 1;

/// A mirrored ring buffer of (value, step, time, mode) samples. Every sample
/// is written twice, at i and i + cap, so the newest n samples are always
/// one contiguous span: kernels read windows in place.
struct History {
  std::size_t cap = 0, size = 0, head = 0;  // head: next physical write index
  std::size_t evals = 0;                    // eval-mode samples held
  /// Samples ever put: the i-th oldest held sample is sample number
  /// pushed - size + i. Running windows (window_state.hpp) name samples by
  /// these numbers, which survive growth and eviction.
  std::uint64_t pushed = 0;
  /// Order of the held samples, kept as counts so that it is a function of
  /// the held samples alone (a restored history, rebuilt from them, agrees):
  /// adjacent pairs whose step (time) goes down, and samples without a time.
  std::size_t step_drops = 0, time_drops = 0, untimed = 0;
  /// Held steps never go down (train/eval may interleave otherwise).
  [[nodiscard]] bool steps_sorted() const { return step_drops == 0; }
  /// Every held sample has a time and times never go down: time windows are
  /// contiguous spans then.
  [[nodiscard]] bool times_sorted() const { return time_drops == 0 && untimed == 0; }
  std::vector<double> value, time;
  std::vector<std::int64_t> step;
  std::vector<std::uint16_t> mode;

  /// Grows (or first sizes) the buffer to `c` samples, keeping what it holds.
  void reserve(std::size_t c);
  /// Physical index of the i-th oldest sample held.
  [[nodiscard]] std::size_t at(std::size_t i) const {
    // head + cap - size + i < 2 cap: one conditional subtraction, no division
    // (this runs several times per sample on the hot path).
    const std::size_t p = head + (cap - size) + i;
    return p >= cap ? p - cap : p;
  }
  [[nodiscard]] std::size_t newest() const { return at(size - 1); }
  /// Writes a sample over the oldest when full (no retention check: see push).
  void put(double v, std::int64_t s, double t, std::uint16_t m) {
    if (size == cap && size >= 2) {
      // The oldest is overwritten: its pair with the next one leaves.
      const std::size_t o = at(0), n = at(1);
      step_drops -= step[n] < step[o];
      time_drops -= time[n] < time[o];
    }
    if (size == cap && size > 0) untimed -= std::isnan(time[at(0)]);
    if (size > 0) {
      step_drops += s < step[newest()];
      time_drops += t < time[newest()];
    }
    untimed += std::isnan(t);
    for (std::size_t p : {head, head + cap}) {
      value[p] = v;
      step[p] = s;
      time[p] = t;
      mode[p] = m;
    }
    head = head + 1 == cap ? 0 : head + 1;
    if (size < cap) ++size;
    ++pushed;
  }
  /// Sample number of the oldest held sample.
  [[nodiscard]] std::uint64_t first_held() const { return pushed - size; }
  /// Physical index of held sample number `k` (first_held() <= k < pushed).
  [[nodiscard]] std::size_t phys(std::uint64_t k) const {
    return at(static_cast<std::size_t>(k - first_held()));
  }
};

/// What a history starts with: room for a few samples, not for the longest
/// window (`max(x[10000000])` over one sample must not reserve 10 M); push()
/// doubles it while the window still needs the oldest sample.
inline std::size_t initial_capacity(std::size_t wanted) {
  return std::clamp<std::size_t>(wanted, 2, 64);
}

/// The step bound of a step window: sample steps `st` with st > bound lie
/// within `amount` steps of `step`. Integer arithmetic: steps can be
/// nanosecond timestamps (1.7e18), where a double has a 256-step
/// granularity. Saturates instead of overflowing.
inline std::int64_t step_bound(std::int64_t step, double amount) {
  // A step is an integer, so `st > step - amount` is `st > step - ceil(amount)`.
  const double a = std::ceil(amount);
  if (!(a < 9.2e18)) return std::numeric_limits<std::int64_t>::min();
  std::int64_t out;
  if (__builtin_sub_overflow(step, static_cast<std::int64_t>(a), &out))
    return std::numeric_limits<std::int64_t>::min();
  return out;
}

namespace window_detail {

/// Whether some held sample newer than the oldest satisfies `outside`
/// (lies before a window). `ordered`: the samples are in that order, so
/// the first one that does not satisfy it ends the search.
template <class Outside>
inline bool newer_outside(const History& h, bool ordered, Outside outside) {
  for (std::size_t i = 1; i < h.size; ++i) {
    if (outside(h.at(i))) return true;
    if (ordered) return false;
  }
  return false;
}

/// Whether the oldest held sample must survive the next push.
inline bool still_needed(const History& h, const Retention& need, const Clock& clock) {
  if (h.size < need.count) return true;
  const std::size_t oldest = h.at(0);
  if (need.steps > 0) {
    // A later observation of another mode may have a lower step than this
    // one, so step windows keep what the lowest current step of any mode
    // seen so far could still reach.
    const std::int64_t bound = step_bound(clock.low_step, need.steps);
    auto outside = [&](std::size_t p) { return h.step[p] <= bound; };
    if (!outside(oldest)) return true;
    // `before` needs the newest sample outside the window: the oldest
    // stays until a newer one is outside too.
    if (need.preceding_steps && !newer_outside(h, h.steps_sorted(), outside)) return true;
  }
  if (need.seconds > 0) {
    // Samples without a time are in no time window and never `before` one.
    const double bound = clock.last_time - need.seconds;
    if (h.time[oldest] > bound) return true;
    if (need.preceding_seconds && !std::isnan(h.time[oldest]) &&
        !newer_outside(h, h.times_sorted(), [&](std::size_t p) { return h.time[p] <= bound; }))
      return true;
  }
  if (need.evals > 0 && h.mode[oldest] == eval_mode && h.evals <= need.evals) return true;
  return false;
}

}  // namespace window_detail

/// A history stops growing at this many samples (push).
inline constexpr std::size_t max_history = std::size_t{1} << 24;

/// The capacity a full history grows to while its oldest sample is still
/// needed: double, except that a retention by count alone goes straight to
/// its count once that is at most four times what it holds (a 10,000-sample
/// window holds 10,001 samples, not 16,384, and skips the copy at 8,192:
/// memory the ring writes all of, and pages that cost ~6 µs each to map on
/// the virtual machines measured, docs/performance.md "Page faults").
inline std::size_t next_capacity(std::size_t cap, const Retention& need) {
  const bool by_count = need.steps == 0 && need.seconds == 0 && need.evals == 0;
  if (by_count && need.count > cap && need.count <= 4 * cap) return std::min(need.count, max_history);
  return 2 * cap;
}

/// Appends `v` as a sample of the observation `clock` describes, growing the
/// buffer while its oldest sample is still needed by `need` (warm-up;
/// bounded at 2^24 samples). Allocates only when it grows. Inline: it runs
/// once per sample on the hot path.
inline void push(History& h, const Retention& need, double v, const Clock& clock) {
  if (h.size == h.cap) {
    if (window_detail::still_needed(h, need, clock) && h.cap < max_history)
      h.reserve(next_capacity(h.cap, need));
    else if (h.mode[h.at(0)] == eval_mode)
      --h.evals;
  }
  h.put(v, clock.step, clock.time, clock.mode);
  if (clock.mode == eval_mode) ++h.evals;
}

/// Reads windows of histories. Owns the scratch the kernels and gathered
/// (non-contiguous) windows use: a returned Window is valid until the next
/// call on the same reader. Not thread-safe; one per executor (or explain).
class WindowReader {
 public:
  /// The window of `h` for `w` at `clock`, in time order: a span of the ring
  /// buffer when the samples are contiguous there, else gathered. n == 0: no
  /// window (too few samples, no time, epochs).
  ///
  ///   reader.window(series.hist, {ir::Unit::steps, 10}, clock)  // (step-10, step]
  stdlib::Window window(const History& h, const ir::Dur& w, const Clock& clock);
  /// The newest held sample older than window `w` (`before(x[w])`), as a
  /// window of one sample; n == 0 if there is none.
  stdlib::Window preceding(const History& h, const ir::Dur& w, const Clock& clock);
  /// What range function `fn` reads for `w`: preceding() or window().
  stdlib::Window read(const History& h, const ir::Dur& w, const stdlib::FunctionDef& fn,
                      const Clock& clock) {
    return fn.preceding ? preceding(h, w, clock) : window(h, w, clock);
  }

  /// The window of `h` for `w` at `clock` as sample numbers [lo, hi)
  /// (History::pushed), when it is a contiguous run of held samples: sample
  /// windows, step windows over sorted steps, time windows over sorted times.
  /// `contiguous` false: the window must be gathered (window() does).
  struct Bounds {
    bool contiguous = false;
    std::uint64_t lo = 0, hi = 0;
  };
  /// `near`: where the window began last time (a running window's first
  /// sample number), or no_hint. The result does not depend on it; a step or
  /// time window that slid by a few samples is then found in O(1) (a short
  /// scan from it) instead of by two binary searches over the history.
  static constexpr std::uint64_t no_hint = ~std::uint64_t{0};
  static Bounds bounds(const History& h, const ir::Dur& w, const Clock& clock,
                       std::uint64_t near = no_hint) {
    if (w.unit == ir::Unit::samples) {  // the common case, inline
      const auto n = static_cast<std::size_t>(w.amount);
      return {true, h.size < n ? h.pushed : h.pushed - n, h.pushed};
    }
    return sorted_bounds(h, w, clock, near);
  }

 private:
  /// bounds() of step and time windows (and the others' "not contiguous").
  static Bounds sorted_bounds(const History& h, const ir::Dur& w, const Clock& clock,
                              std::uint64_t near);
  template <class Keep>
  stdlib::Window gather(const History& h, Keep keep, std::size_t want);
  stdlib::Window one(const History& h, std::size_t p);

  std::vector<double> scratch_, values_;
  std::vector<std::int64_t> steps_;
};

}  // namespace vigil::interp
