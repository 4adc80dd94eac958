// The executor's forward pass (see executor.hpp): which nodes to recompute,
// one dispatch per node kind, and the node kinds that are neither ranges nor
// operators (selectors, default(), aggregates, stateful functions). Must not
// touch series identity, rule state or firings.
#include "interp/executor.hpp"

#include <algorithm>
#include <cmath>

namespace vigil::interp {

Executor::Executor(const Plan& plan) : plan_(&plan) {
  columns_.resize(plan.nodes.size());
  slots.resize(plan.nodes.size());
  expr_hist.resize(plan.nodes.size());
  run_kind_.resize(plan.nodes.size(), RunKind::none);
  running_.resize(plan.nodes.size());
  running_ids_.resize(plan.nodes.size());
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const auto& n = plan.nodes[i];
    if (n.op == ir::Op::range_call && n.fn) run_kind_[i] = running_kind(*n.fn);
    if (n.op == ir::Op::constant) columns_[i].push(0, n.constant, false);
  }
  fallback_from_.resize(plan.nodes.size(), no_node);
  elementwise_.resize(plan.nodes.size());
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const auto& n = plan.nodes[i];
    elementwise_[i] = n.op != ir::Op::constant && n.op != ir::Op::selector &&
                      n.op != ir::Op::range_call &&
                      (n.op != ir::Op::call || n.fn->kind == stdlib::FnKind::elementwise);
  }
  args_.reserve(16);
}

inline bool Executor::touched(std::uint32_t id) const {
  const PlanNode& n = plan_->nodes[id];
  if (force_ || n.time_dependent) return true;
  if (n.selector != no_node) return store_->selector_stamp[n.selector] == at_.obs;
  for (auto in : n.inputs)
    if (columns_[in].computed == at_.obs) return true;
  return false;
}

void Executor::evaluate(const SeriesStore& store, const Observe& at) {
  store_ = &store;
  at_ = at;
  for (std::uint32_t id = 0; id < plan_->nodes.size(); ++id) {
    const PlanNode& n = plan_->nodes[id];
    if (n.op == ir::Op::constant || !touched(id)) continue;
    Column& out = columns_[id];
    out.was_lone = lone(id);
    // Operators and elementwise calls over scalars or lone elements: one
    // value, written over the column's (execute_operator.cpp). A whole
    // recomputation, so always right, and cheaper than the label
    // bookkeeping of a sparse update: tried first.
    const bool elementwise = elementwise_[id];
    if (!(elementwise && eval_scalar(n, out))) {
      // Windows by step or time change without a sample (and what reads
      // them): those nodes are recomputed whole, as is everything at the
      // first observation and after a restore.
      if (!force_ && !n.time_dependent && sparse(id, n, out)) {
        out.computed = at_.obs;
        continue;
      }
      out.clear();
      switch (n.op) {
        case ir::Op::selector: eval_selector(n, out); break;
        case ir::Op::range_call:
          if (n.selector == no_node)
            eval_expr_range(id, n, out);
          else
            eval_range(id, n, out);
          break;
        case ir::Op::call:
          if (n.fn->kind == stdlib::FnKind::aggregate)
            eval_aggregate(n, out);
          else if (n.fn->kind == stdlib::FnKind::fallback)
            eval_fallback(id, n, out);
          else if (n.fn->kind == stdlib::FnKind::stateful)
            eval_stateful(id, n, out);
          else
            eval_elementwise(n, out);
          break;
        default: eval_elementwise(n, out); break;
      }
    }
    out.full = true;
    out.delta.clear();
    out.computed = at_.obs;
  }
  force_ = false;
}

void Executor::copy_fresh(std::uint32_t in, Column& out) const {
  out.fresh.assign(columns_[in].fresh.begin(), columns_[in].fresh.end());
  if (columns_[in].computed != at_.obs) std::fill(out.fresh.begin(), out.fresh.end(), 0);
}

std::optional<double> Executor::element(std::uint32_t id, std::uint32_t label) const {
  const Column& c = columns_[id];
  if (c.values.empty()) return std::nullopt;
  if (!plan_->nodes[id].vector || lone(id)) return c.values[0];
  auto it = std::lower_bound(c.labels.begin(), c.labels.end(), label);
  if (it == c.labels.end() || *it != label) return std::nullopt;
  return c.values[static_cast<std::size_t>(it - c.labels.begin())];
}

inline void Executor::eval_selector(const PlanNode& n, Column& out) {
  for (SeriesId sid : store_->members[n.selector]) {
    const Series& s = store_->series[sid];
    if (s.hist.size == 0) continue;
    out.push(s.labels, s.hist.value[s.hist.newest()], s.stamp == at_.obs);
  }
}

/// default(x, v): x's elements if it has any, else v's.
inline void Executor::eval_fallback(std::uint32_t id, const PlanNode& n, Column& out) {
  const bool has_x = !columns_[n.inputs[0]].values.empty();
  const std::uint32_t from = n.inputs[has_x ? 0 : 1];
  fallback_from_[id] = from;
  const Column& c = columns_[from];
  out.labels.assign(c.labels.begin(), c.labels.end());
  out.values.assign(c.values.begin(), c.values.end());
  copy_fresh(from, out);
}

inline void Executor::eval_aggregate(const PlanNode& n, Column& out) {
  const Column& in = columns_[n.inputs[0]];
  if (in.values.empty()) return;
  bool fresh = false;
  for (std::size_t i = 0; i < in.values.size(); ++i) fresh |= fresh_at(n.inputs[0], i) != 0;
  out.push(0, n.fn->aggregate(in.values), fresh);
}

inline void Executor::eval_stateful(std::uint32_t id, const PlanNode& n, Column& out) {
  const Column& in = columns_[n.inputs[0]];
  auto& sl = slots[id];
  // By label id, as far as the largest label this node has seen.
  if (!in.labels.empty() && sl.size() <= in.labels.back()) sl.resize(std::size_t{in.labels.back()} + 1);
  for (std::size_t i = 0; i < in.values.size(); ++i) {
    StatefulSlot& slot = sl[in.labels[i]];
    const bool fresh = fresh_at(n.inputs[0], i);
    if (fresh) {
      slot.out = n.fn->stateful(slot.state, in.values[i], n.const_args);
      slot.defined =
          slot.state.n >= static_cast<std::int64_t>(n.fn->min_samples) || std::isnan(in.values[i]);
    }
    if (!slot.defined) continue;
    out.push(in.labels[i], slot.out, fresh);
  }
}

// ---- sparse updates -------------------------------------------------------------
//
// A node whose inputs changed at a few label sets (a new sample of some
// series, a new label set) recomputes the elements at those labels and
// merges them into its kept column. Every element of a node that is not
// time-dependent is a function of its inputs' elements at the same label,
// of broadcast scalars, and of per-label state (detector slots, expression
// histories, running windows) that changes only with a fresh input element;
// so the elements at labels where no input changed are unchanged, and
// stale (not fresh). Whenever that argument does not hold, the node is
// recomputed whole: aggregates (a function of every element), a broadcast
// scalar or lone element that changed, a default() that switched sides, an
// input that was itself recomputed whole.

std::size_t Executor::find(const Column& c, std::uint32_t label) {
  auto it = std::lower_bound(c.labels.begin(), c.labels.end(), label);
  if (it == c.labels.end() || *it != label) return static_cast<std::size_t>(-1);
  return static_cast<std::size_t>(it - c.labels.begin());
}

std::optional<std::size_t> Executor::member(std::uint32_t selector, std::uint32_t label) const {
  const auto& m = store_->members[selector];
  auto it = std::lower_bound(m.begin(), m.end(), label, [&](SeriesId a, std::uint32_t l) {
    return store_->series[a].labels < l;
  });
  if (it == m.end() || store_->series[*it].labels != label) return std::nullopt;
  return static_cast<std::size_t>(it - m.begin());
}

bool Executor::input_delta(std::uint32_t in, bool fresh_only) {
  const Column& c = columns_[in];
  if (c.computed != at_.obs) return true;  // unchanged
  if (c.full) return false;
  for (auto l : c.delta) {
    if (fresh_only) {
      const std::size_t i = find(c, l);
      if (i == static_cast<std::size_t>(-1) || !c.fresh[i]) continue;
    }
    changed_.push_back(l);
  }
  return true;
}

bool Executor::sparse(std::uint32_t id, const PlanNode& n, Column& out) {
  changed_.clear();
  bool sorted = true;  // changed_ came sorted and unique from one input
  const bool over_series =
      n.op == ir::Op::selector || (n.op == ir::Op::range_call && n.selector != no_node);
  if (over_series) {
    if (lone_series(id, n, out)) return true;
    // touched(): the selector has a sample at this observation.
    for (SeriesId sid : store_->selector_fresh[n.selector])
      changed_.push_back(store_->series[sid].labels);
    sorted = false;
  } else if (n.op == ir::Op::range_call) {
    // Only fresh values join an expression's history.
    if (!input_delta(n.inputs[0], true)) return false;
  } else if (n.op == ir::Op::call && n.fn->kind == stdlib::FnKind::aggregate) {
    return false;
  } else if (n.op == ir::Op::call && n.fn->kind == stdlib::FnKind::fallback) {
    const std::uint32_t from = n.inputs[columns_[n.inputs[0]].values.empty() ? 1 : 0];
    if (from != fallback_from_[id] || !input_delta(from, false)) return false;
  } else if (n.op == ir::Op::call && n.fn->kind == stdlib::FnKind::stateful) {
    if (!input_delta(n.inputs[0], false)) return false;
  } else {
    std::size_t sources = 0;
    for (auto in : n.inputs) {
      const Column& c = columns_[in];
      if (c.computed != at_.obs) continue;
      if (c.full) return false;
      if (c.delta.empty()) continue;
      // A broadcast value that changed changes every element; so does a
      // vector that became or stopped being lone (it broadcasts then).
      if (!plan_->nodes[in].vector || c.was_lone || lone(in)) return false;
      changed_.insert(changed_.end(), c.delta.begin(), c.delta.end());
      ++sources;
    }
    sorted = sources <= 1;
  }
  if (!sorted && changed_.size() > 1) {
    std::sort(changed_.begin(), changed_.end());
    changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
  }
  // The elements fresh at the previous computation are among its changed ones.
  if (out.full) {
    std::fill(out.fresh.begin(), out.fresh.end(), 0);
  } else {
    for (auto l : out.delta)
      if (const std::size_t i = find(out, l); i != static_cast<std::size_t>(-1)) out.fresh[i] = 0;
  }
  updates_.clear();
  for (auto l : changed_) sparse_element(id, n, l);
  apply(out);
  out.delta.swap(changed_);
  out.full = false;
  return true;
}

/// sparse() of a selector, or a range over one, whose only member is an
/// unlabelled series with a sample now (`loss`): the column is that one
/// element, so it is written directly, without the label bookkeeping.
bool Executor::lone_series(std::uint32_t id, const PlanNode& n, Column& out) {
  const auto& members = store_->members[n.selector];
  const auto& fresh = store_->selector_fresh[n.selector];
  if (members.size() != 1 || fresh.size() != 1 || out.labels.size() > 1) return false;
  const SeriesId sid = members[0];
  const Series& s = store_->series[sid];
  if (s.labels != 0 || fresh[0] != sid || s.stamp != at_.obs) return false;
  if (n.op == ir::Op::range_call && n.fn->kind == stdlib::FnKind::clock) return false;
  out.clear();
  if (n.op == ir::Op::selector) {
    if (s.hist.size != 0) out.push(0, s.hist.value[s.hist.newest()], true);
  } else if (const RunKind kind = run_kind_[id]; kind == RunKind::none) {
    reduce(n, kind, nullptr, s.hist, 0, true, out);
  } else {
    // running_ids_ is a subsequence of the members: empty or this one.
    if (running_ids_[id].empty()) {
      running_ids_[id].push_back(sid);
      running_[id].emplace_back();
    }
    reduce(n, kind, running_[id].data(), s.hist, 0, true, out);
  }
  out.delta.assign(1, 0);
  out.full = false;
  return true;
}

void Executor::sparse_element(std::uint32_t id, const PlanNode& n, std::uint32_t label) {
  one_.clear();
  if (n.op == ir::Op::selector || (n.op == ir::Op::range_call && n.selector != no_node)) {
    if (const auto m = member(n.selector, label)) {
      const SeriesId sid = store_->members[n.selector][*m];
      const Series& s = store_->series[sid];
      const bool fresh = s.stamp == at_.obs;
      if (n.op == ir::Op::selector) {
        if (s.hist.size != 0) one_.push(s.labels, s.hist.value[s.hist.newest()], fresh);
      } else if (const RunKind kind = run_kind_[id]; kind == RunKind::none) {
        reduce(n, kind, nullptr, s.hist, s.labels, fresh, one_);
      } else {
        // running_ids_ is a subsequence of the members, in their (label)
        // order: eval_range's full walk fills in what is missing.
        auto& ids = running_ids_[id];
        auto it = std::lower_bound(ids.begin(), ids.end(), label, [&](SeriesId a, std::uint32_t l) {
          return store_->series[a].labels < l;
        });
        const auto pos = it - ids.begin();
        if (it == ids.end() || *it != sid) {
          ids.insert(it, sid);
          running_[id].insert(running_[id].begin() + pos, RunningWindow{});
        }
        reduce(n, kind, &running_[id][static_cast<std::size_t>(pos)], s.hist, s.labels, fresh, one_);
      }
    }
  } else if (n.op == ir::Op::range_call) {
    // A range over an expression: `label`'s input element is fresh.
    const Column& c = columns_[n.inputs[0]];
    const std::size_t i = find(c, label);
    auto& hs = expr_hist[id];
    auto it = std::lower_bound(hs.begin(), hs.end(), label,
                               [](const ExprHistory& h, std::uint32_t l) { return h.labels < l; });
    if (it == hs.end() || it->labels != label) {
      ExprHistory fresh;
      fresh.labels = label;
      fresh.hist.reserve(initial_capacity(n.history.count));
      it = hs.insert(it, std::move(fresh));
    }
    push(it->hist, n.history, c.values[i], at_.clock);
    it->stamp = at_.obs;
    const RunKind kind = run_kind_[id];
    reduce(n, kind, kind == RunKind::none ? nullptr : &it->run, it->hist, label, true, one_);
  } else if (n.op == ir::Op::call && n.fn->kind == stdlib::FnKind::fallback) {
    const std::uint32_t from = fallback_from_[id];
    const Column& c = columns_[from];
    if (const std::size_t i = find(c, label); i != static_cast<std::size_t>(-1))
      one_.push(label, c.values[i], fresh_at(from, i));
  } else if (n.op == ir::Op::call && n.fn->kind == stdlib::FnKind::stateful) {
    const Column& in = columns_[n.inputs[0]];
    if (const std::size_t i = find(in, label); i != static_cast<std::size_t>(-1)) {
      auto& sl = slots[id];
      if (sl.size() <= label) sl.resize(std::size_t{label} + 1);
      StatefulSlot& slot = sl[label];
      const bool fresh = fresh_at(n.inputs[0], i);
      if (fresh) {
        slot.out = n.fn->stateful(slot.state, in.values[i], n.const_args);
        slot.defined = slot.state.n >= static_cast<std::int64_t>(n.fn->min_samples) ||
                       std::isnan(in.values[i]);
      }
      if (slot.defined) one_.push(label, slot.out, fresh);
    }
  } else {
    sparse_elementwise(n, label);
  }
  if (one_.values.empty())
    updates_.push_back({label, 0.0, false, false});
  else
    updates_.push_back({label, one_.values[0], true, one_.fresh[0] != 0});
}

/// eval_elementwise (execute_operator.cpp) at one label: the same driver and
/// broadcasts (sparse() ensured that no input's lone status changed).
void Executor::sparse_elementwise(const PlanNode& n, std::uint32_t label) {
  const std::uint32_t driver = elementwise_driver(n);
  const bool broadcast_lone = !lone(driver);
  args_.clear();
  bool fresh = false;
  for (auto in : n.inputs) {
    const Column& c = columns_[in];
    std::size_t j = 0;
    if (!plan_->nodes[in].vector || (broadcast_lone && in != driver && lone(in))) {
      if (c.values.empty()) return;
    } else {
      j = find(c, label);
      if (j == static_cast<std::size_t>(-1)) return;
    }
    args_.push_back(c.values[j]);
    fresh |= fresh_at(in, j);
  }
  double v;
  if (n.op == ir::Op::call)
    v = n.fn->elementwise(args_);
  else if (n.inputs.size() == 1)
    v = apply_unary(n.op, args_[0]);
  else
    v = apply_binary(n.op, args_[0], args_[1]);
  one_.push(label, v, fresh);
}

/// Merges updates_ (sorted by label) into `out`: in place when they are few
/// (a new label set is usually the largest id: an append; one update is the
/// usual case of an unlabelled series), else by one linear merge.
void Executor::apply(Column& out) {
  const std::size_t n = out.labels.size();
  if (updates_.size() == 1 || updates_.size() * 16 < n) {
    for (const Update& u : updates_) {
      auto it = std::lower_bound(out.labels.begin(), out.labels.end(), u.label);
      const auto i = it - out.labels.begin();
      const bool has = it != out.labels.end() && *it == u.label;
      if (u.present && has) {
        out.values[static_cast<std::size_t>(i)] = u.value;
        out.fresh[static_cast<std::size_t>(i)] = u.fresh;
      } else if (u.present) {
        out.labels.insert(it, u.label);
        out.values.insert(out.values.begin() + i, u.value);
        out.fresh.insert(out.fresh.begin() + i, u.fresh);
      } else if (has) {
        out.labels.erase(it);
        out.values.erase(out.values.begin() + i);
        out.fresh.erase(out.fresh.begin() + i);
      }
    }
    return;
  }
  merged_.clear();
  std::size_t i = 0;
  for (const Update& u : updates_) {
    for (; i < n && out.labels[i] < u.label; ++i) merged_.push(out.labels[i], out.values[i], out.fresh[i]);
    if (i < n && out.labels[i] == u.label) ++i;
    if (u.present) merged_.push(u.label, u.value, u.fresh);
  }
  for (; i < n; ++i) merged_.push(out.labels[i], out.values[i], out.fresh[i]);
  out.labels.swap(merged_.labels);
  out.values.swap(merged_.values);
  out.fresh.swap(merged_.fresh);
}

}  // namespace vigil::interp
