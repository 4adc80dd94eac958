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

#include <cstddef>
#include <cstdint>
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
  bool steps_sorted = true;  // steps never went down (train/eval may interleave otherwise)
  std::vector<double> value, time;
  std::vector<std::int64_t> step;
  std::vector<std::uint16_t> mode;

  /// Grows (or first sizes) the buffer to `c` samples, keeping what it holds.
  void reserve(std::size_t c);
  /// Physical index of the i-th oldest sample held.
  [[nodiscard]] std::size_t at(std::size_t i) const { return (head + cap - size + i) % cap; }
  [[nodiscard]] std::size_t newest() const { return at(size - 1); }
  /// Writes a sample over the oldest when full (no retention check: see push).
  void put(double v, std::int64_t s, double t, std::uint16_t m) {
    if (size > 0 && s < step[newest()]) steps_sorted = false;
    for (std::size_t p : {head, head + cap}) {
      value[p] = v;
      step[p] = s;
      time[p] = t;
      mode[p] = m;
    }
    head = (head + 1) % cap;
    if (size < cap) ++size;
  }
};

/// Appends `v` as a sample of the observation `clock` describes, growing the
/// buffer while its oldest sample is still needed by `need` (warm-up;
/// bounded at 2^24 samples). Allocates only when it grows.
void push(History& h, const Retention& need, double v, const Clock& clock);

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

 private:
  template <class Keep>
  stdlib::Window gather(const History& h, Keep keep, std::size_t want);
  stdlib::Window one(const History& h, std::size_t p);

  std::vector<double> scratch_, values_;
  std::vector<std::int64_t> steps_;
};

}  // namespace vigil::interp
