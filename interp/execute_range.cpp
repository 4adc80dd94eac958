// Range functions (`mean(x[10 steps])`, `before(x[5m])`, `age(x)`, ranges
// over expressions): windows of histories reduced to one value per label
// set. Must not touch series identity, rule state or firings; window bounds
// are window.cpp's.
#include <algorithm>
#include <cmath>

#include "interp/executor.hpp"

namespace vigil::interp {

/// One range function over one history: pushes its value if defined.
void Executor::reduce(const PlanNode& n, const History& h, std::uint32_t labels, bool fresh,
                      Column& out) {
  auto w = reader_.read(h, n.window, *n.fn, at_.clock);
  if (w.n == 0 || w.n < n.fn->min_samples) return;
  out.push(labels, n.fn->range(w, n.const_args), fresh);
}

void Executor::eval_range(const PlanNode& n, Column& out) {
  if (n.fn->kind == stdlib::FnKind::clock) return eval_age(n, out);
  for (SeriesId sid : store_->members[n.selector]) {
    const Series& s = store_->series[sid];
    reduce(n, s.hist, s.labels, s.stamp == at_.obs, out);
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
        fresh.hist.reserve(std::max<std::size_t>(n.history.count, 2));
        it = hs.insert(it, std::move(fresh));
      }
      push(it->hist, n.history, c.values[i], at_.clock);
      it->stamp = at_.obs;
    }
  }
  for (const auto& h : hs) reduce(n, h.hist, h.labels, h.stamp == at_.obs, out);
}

}  // namespace vigil::interp
