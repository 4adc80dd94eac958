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
          eval_fallback(n, out);
        else if (n.fn->kind == stdlib::FnKind::stateful)
          eval_stateful(id, n, out);
        else
          eval_elementwise(n, out);
        break;
      default: eval_elementwise(n, out); break;
    }
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
inline void Executor::eval_fallback(const PlanNode& n, Column& out) {
  const bool has_x = !columns_[n.inputs[0]].values.empty();
  const std::uint32_t from = n.inputs[has_x ? 0 : 1];
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
  if (sl.size() < store_->labelsets.size()) sl.resize(store_->labelsets.size());
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

}  // namespace vigil::interp
