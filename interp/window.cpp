// Windows over a series' history (see window.hpp): ring buffer growth,
// retention, and window bounds. Must not touch anything but its arguments.
#include "interp/window.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace vigil::interp {

namespace {

constexpr stdlib::Window no_window{nullptr, nullptr, 0, nullptr};

}  // namespace

void History::reserve(std::size_t c) {
  if (c >= size) {
    // The held samples are one contiguous span from at(0) (the mirror):
    // copied as spans, twice (the new mirror), not put() one by one; the
    // counts describe the same samples, so they stay.
    const std::size_t from = size ? at(0) : 0;
    auto grown = [&](auto& v) {
      std::remove_reference_t<decltype(v)> out(2 * c);
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(from), size, out.begin());
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(from), size,
                  out.begin() + static_cast<std::ptrdiff_t>(c));
      v.swap(out);
    };
    grown(value);
    grown(time);
    grown(step);
    grown(mode);
    cap = c;
    head = size == c ? 0 : size;
    return;
  }
  History h;
  h.cap = c;
  h.value.assign(2 * c, 0);
  h.time.assign(2 * c, 0);
  h.step.assign(2 * c, 0);
  h.mode.assign(2 * c, 0);
  for (std::size_t i = 0; i < size; ++i) {
    std::size_t p = at(i);
    h.put(value[p], step[p], time[p], mode[p]);
  }
  h.evals = evals;
  h.pushed = pushed;  // sample numbers survive growth
  *this = std::move(h);
}

namespace {

/// std::partition_point(a, a + size, outside) - a, for `outside` true on a
/// prefix of a: searched from index `hint` (any value) by a short scan when
/// the answer lies just at or after it, else by binary search. The same
/// index either way.
template <class T, class Outside>
std::size_t first_inside(const T* a, std::size_t size, std::size_t hint, Outside outside) {
  if (hint > size) hint = 0;
  if (hint > 0 && !outside(a[hint - 1])) return std::partition_point(a, a + hint - 1, outside) - a;
  // Everything before hint is outside: a slid window starts a few on.
  constexpr std::size_t scan = 4;
  for (std::size_t i = hint; i < hint + scan; ++i)
    if (i == size || !outside(a[i])) return i;
  return std::partition_point(a + hint + scan, a + size, outside) - a;
}

}  // namespace

WindowReader::Bounds WindowReader::sorted_bounds(const History& h, const ir::Dur& w,
                                                 const Clock& clock, std::uint64_t near) {
  const std::uint64_t first = h.first_held();
  // Held samples are contiguous from at(0) thanks to the mirror.
  const std::size_t base = h.size ? h.at(0) : 0;
  // The hint as an index into the held samples (out of range: none).
  const std::size_t hint =
      near >= first && near <= h.pushed ? static_cast<std::size_t>(near - first) : h.size + 1;
  switch (w.unit) {
    case ir::Unit::samples: return bounds(h, w, clock);
    case ir::Unit::steps: {
      if (!h.steps_sorted()) return {};
      // (cur - N, cur]: samples of other modes may lie above the current step.
      const std::int64_t lower = step_bound(clock.step, w.amount);
      const std::int64_t* steps = &h.step[base];
      const std::size_t lo =
          first_inside(steps, h.size, hint, [&](std::int64_t st) { return st <= lower; });
      // Usually the newest sample is this observation's: all are <= step.
      const std::size_t hi =
          h.size == 0 || steps[h.size - 1] <= clock.step
              ? h.size
              : std::partition_point(steps + lo, steps + h.size,
                                     [&](std::int64_t st) { return st <= clock.step; }) - steps;
      return {true, first + lo, first + hi};
    }
    case ir::Unit::seconds: {
      // (now - T, now]; samples taken without a time are in no time window.
      if (std::isnan(clock.time)) return {true, h.pushed, h.pushed};
      if (!h.times_sorted()) return {};
      const double lower = clock.time - w.amount;
      const double* times = &h.time[base];
      const std::size_t lo =
          first_inside(times, h.size, hint, [&](double t) { return !(t > lower); });
      const std::size_t hi =
          h.size == 0 || times[h.size - 1] <= clock.time
              ? h.size
              : std::partition_point(times + lo, times + h.size,
                                     [&](double t) { return t <= clock.time; }) - times;
      return {true, first + lo, first + hi};
    }
    case ir::Unit::evals:
    case ir::Unit::epochs: return {};
  }
  return {};
}

stdlib::Window WindowReader::window(const History& h, const ir::Dur& w, const Clock& clock) {
  switch (w.unit) {
    case ir::Unit::steps:
      if (!h.steps_sorted()) {
        const std::int64_t lower = step_bound(clock.step, w.amount);
        return gather(
            h, [&](std::size_t p) { return h.step[p] > lower && h.step[p] <= clock.step; }, 0);
      }
      break;
    case ir::Unit::seconds:
      if (std::isnan(clock.time)) return no_window;
      if (!h.times_sorted()) {
        const double time = clock.time;
        auto in = [&](std::size_t p) { return h.time[p] > time - w.amount && h.time[p] <= time; };
        return gather(h, in, 0);
      }
      break;
    case ir::Unit::evals: {
      auto is_eval = [&](std::size_t p) { return h.mode[p] == eval_mode; };
      return gather(h, is_eval, static_cast<std::size_t>(w.amount));
    }
    case ir::Unit::epochs: return no_window;
    case ir::Unit::samples: break;
  }
  const Bounds b = bounds(h, w, clock);
  const std::size_t n = static_cast<std::size_t>(b.hi - b.lo);
  if (n == 0) return no_window;
  if (scratch_.size() < 2 * n) scratch_.resize(2 * n);
  const std::size_t p = h.phys(b.lo);
  return {&h.value[p], &h.step[p], n, scratch_.data()};
}

/// Copies the held samples that satisfy `keep`, newest first and at most
/// `want` of them (0: all), into the gather buffers in time order. With
/// `want`, fewer than `want` samples is no window at all.
template <class Keep>
stdlib::Window WindowReader::gather(const History& h, Keep keep, std::size_t want) {
  values_.clear();
  steps_.clear();
  for (std::size_t i = h.size; i-- > 0 && (want == 0 || values_.size() < want);) {
    const std::size_t p = h.at(i);
    if (!keep(p)) continue;
    values_.push_back(h.value[p]);
    steps_.push_back(h.step[p]);
  }
  if (values_.empty() || (want && values_.size() < want)) return no_window;
  std::reverse(values_.begin(), values_.end());
  std::reverse(steps_.begin(), steps_.end());
  if (scratch_.size() < 2 * values_.size()) scratch_.resize(2 * values_.size());
  return {values_.data(), steps_.data(), values_.size(), scratch_.data()};
}

stdlib::Window WindowReader::one(const History& h, std::size_t p) {
  values_.assign(1, h.value[p]);
  steps_.assign(1, h.step[p]);
  if (scratch_.size() < 2) scratch_.resize(2);
  return {values_.data(), steps_.data(), 1, scratch_.data()};
}

stdlib::Window WindowReader::preceding(const History& h, const ir::Dur& w, const Clock& clock) {
  if (h.size == 0) return no_window;
  const std::int64_t step = clock.step;
  const double time = clock.time;
  // Newest first: the first sample outside the window that `outside` names.
  auto newest_where = [&](auto outside) {
    for (std::size_t i = h.size; i-- > 0;)
      if (outside(h.at(i))) return one(h, h.at(i));
    return no_window;
  };
  switch (w.unit) {
    case ir::Unit::samples: {
      const auto n = static_cast<std::size_t>(w.amount);
      return h.size > n ? one(h, h.at(h.size - 1 - n)) : no_window;
    }
    case ir::Unit::steps: {
      const std::int64_t lower = step_bound(step, w.amount);
      if (h.steps_sorted()) {
        // The window's first sample follows the newest one outside it.
        const Bounds b = bounds(h, w, clock);
        return b.lo > h.first_held() ? one(h, h.phys(b.lo - 1)) : no_window;
      }
      return newest_where([&](std::size_t p) { return h.step[p] <= lower; });
    }
    case ir::Unit::seconds:
      if (std::isnan(time)) return no_window;
      if (h.times_sorted()) {
        const double* first_time = &h.time[h.at(0)];
        const auto lo = std::partition_point(first_time, first_time + h.size,
                                             [&](double t) { return t <= time - w.amount; });
        return lo > first_time ? one(h, h.at(static_cast<std::size_t>(lo - first_time) - 1))
                               : no_window;
      }
      return newest_where([&](std::size_t p) { return h.time[p] <= time - w.amount; });
    case ir::Unit::evals: {
      std::size_t seen = 0;
      return newest_where([&](std::size_t p) {
        return h.mode[p] == eval_mode && seen++ == static_cast<std::size_t>(w.amount);
      });
    }
    case ir::Unit::epochs: return no_window;
  }
  return no_window;
}

}  // namespace vigil::interp
