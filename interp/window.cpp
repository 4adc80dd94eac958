// Windows over a series' history (see window.hpp): ring buffer growth,
// retention, and window bounds. Must not touch anything but its arguments.
#include "interp/window.hpp"

#include <algorithm>
#include <cmath>

namespace vigil::interp {

namespace {

constexpr stdlib::Window no_window{nullptr, nullptr, 0, nullptr};

}  // namespace

void History::reserve(std::size_t c) {
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
  h.steps_sorted = steps_sorted;
  *this = std::move(h);
}

stdlib::Window WindowReader::window(const History& h, const ir::Dur& w, const Clock& clock) {
  const std::int64_t step = clock.step;
  const double time = clock.time;
  // Held samples are contiguous from at(0) thanks to the mirror.
  const std::size_t base = h.size ? h.at(0) : 0;
  std::size_t lo = 0, hi = h.size;  // the window is [lo, hi) of the held samples
  switch (w.unit) {
    case ir::Unit::samples: {
      const auto n = static_cast<std::size_t>(w.amount);
      if (h.size < n) return no_window;
      lo = h.size - n;
      break;
    }
    case ir::Unit::steps: {
      // (cur - N, cur]: samples of other modes may lie above the current step.
      const double lower = static_cast<double>(step) - w.amount;
      auto before = [&](std::int64_t st) { return static_cast<double>(st) <= lower; };
      auto in = [&](std::int64_t st) { return !before(st) && st <= step; };
      auto held_in = [&](std::size_t p) { return in(h.step[p]); };
      if (!h.steps_sorted) return gather(h, held_in, 0);
      const std::int64_t* first = &h.step[base];
      const std::int64_t* last = first + h.size;
      lo = static_cast<std::size_t>(std::partition_point(first, last, before) - first);
      hi = static_cast<std::size_t>(
          std::partition_point(first, last, [&](std::int64_t st) { return st <= step; }) - first);
      break;
    }
    case ir::Unit::seconds: {
      // (now - T, now]; samples taken without a time are in no time window.
      if (std::isnan(time)) return no_window;
      auto in = [&](std::size_t p) { return h.time[p] > time - w.amount && h.time[p] <= time; };
      return gather(h, in, 0);
    }
    case ir::Unit::evals: {
      auto is_eval = [&](std::size_t p) { return h.mode[p] == eval_mode; };
      return gather(h, is_eval, static_cast<std::size_t>(w.amount));
    }
    case ir::Unit::epochs: return no_window;
  }
  const std::size_t n = hi > lo ? hi - lo : 0;
  if (n == 0) return no_window;
  if (scratch_.size() < 2 * n) scratch_.resize(2 * n);
  return {&h.value[base + lo], &h.step[base + lo], n, scratch_.data()};
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
    case ir::Unit::steps:
      return newest_where([&](std::size_t p) {
        return static_cast<double>(h.step[p]) <= static_cast<double>(step) - w.amount;
      });
    case ir::Unit::seconds:
      if (std::isnan(time)) return no_window;
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
