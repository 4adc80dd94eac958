// Range functions (`mean(x[10 steps])`, `before(x[5m])`, `age(x)`, ranges
// over expressions): windows of histories reduced to one value per label
// set. Must not touch series identity, rule state or firings; window bounds
// are window.cpp's.
#include <algorithm>
#include <cmath>

#include "interp/executor.hpp"

namespace vigil::interp {

/// One range function over one history: pushes its value if defined. A
/// contiguous window with a running kind is followed by its running state;
/// anything else is recomputed from the window (window_state.hpp says when).
void Executor::reduce(const PlanNode& n, RunKind kind, RunningWindow* run, const History& h,
                      std::uint32_t labels, bool fresh, Column& out) {
  if (run) {
    const auto b = WindowReader::bounds(h, n.window, at_.clock, run->first());
    if (b.contiguous) {
      const auto count = static_cast<std::size_t>(b.hi - b.lo);
      if (count == 0 || count < n.fn->min_samples) return;
      if (auto v = run->update(kind, h, b.lo, b.hi, n.const_args)) {
        out.push(labels, *v, fresh);
        return;
      }
    }
  }
  auto w = reader_.read(h, n.window, *n.fn, at_.clock);
  if (w.n == 0 || w.n < n.fn->min_samples) return;
  if (kind != RunKind::none)
    if (auto v = running_value_of(kind, w)) {
      out.push(labels, *v, fresh);
      return;
    }
  out.push(labels, n.fn->range(w, n.const_args), fresh);
}

void Executor::eval_range(std::uint32_t id, const PlanNode& n, Column& out) {
  if (n.fn->kind == stdlib::FnKind::clock) return eval_age(n, out);
  const RunKind kind = run_kind_[id];
  const auto& members = store_->members[n.selector];
  auto& running = running_[id];
  auto& ids = running_ids_[id];
  for (std::size_t i = 0; i < members.size(); ++i) {
    const SeriesId sid = members[i];
    const Series& s = store_->series[sid];
    if (kind == RunKind::none) {
      reduce(n, kind, nullptr, s.hist, s.labels, s.stamp == at_.obs, out);
      continue;
    }
    // Parallel to the members (sorted by label, only ever inserted into): a
    // new series gets its running window where it was inserted (warm-up).
    if (i >= ids.size() || ids[i] != sid) {
      ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(i), sid);
      running.insert(running.begin() + static_cast<std::ptrdiff_t>(i), RunningWindow{});
    }
    reduce(n, kind, &running[i], s.hist, s.labels, s.stamp == at_.obs, out);
  }
}

/// age(x): a clock reading, fresh at every observation that has a time.
void Executor::eval_age(const PlanNode& n, Column& out) {
  const double time = at_.clock.time;
  if (std::isnan(time)) return;
  for (SeriesId sid : store_->members[n.selector]) {
    const History& h = store_->series[sid].hist;
    if (h.size == 0 || std::isnan(h.time[h.newest()])) continue;
    out.push(store_->series[sid].labels, time - h.time[h.newest()], true);
  }
}

/// A range over an expression: its fresh values join the per-label
/// histories, then each history is reduced like a series' window.
void Executor::eval_expr_range(std::uint32_t id, const PlanNode& n, Column& out) {
  auto& hs = expr_hist[id];
  const std::uint32_t in = n.inputs[0];
  const Column& c = columns_[in];
  if (c.computed == at_.obs) {
    for (std::size_t i = 0; i < c.values.size(); ++i) {
      if (!c.fresh[i]) continue;
      auto it =
          std::lower_bound(hs.begin(), hs.end(), c.labels[i],
                           [](const ExprHistory& h, std::uint32_t l) { return h.labels < l; });
      if (it == hs.end() || it->labels != c.labels[i]) {
        ExprHistory fresh;
        fresh.labels = c.labels[i];
        fresh.hist.reserve(initial_capacity(n.history.count));
        it = hs.insert(it, std::move(fresh));
      }
      push(it->hist, n.history, c.values[i], at_.clock);
      it->stamp = at_.obs;
    }
  }
  const RunKind kind = run_kind_[id];
  for (auto& h : hs)
    reduce(n, kind, kind == RunKind::none ? nullptr : &h.run, h.hist, h.labels, h.stamp == at_.obs, out);
}

}  // namespace vigil::interp
