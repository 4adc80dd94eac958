// Rule state machines (see rule_state.hpp): gates, runs, `for`, cooldown,
// escalation, and the firing value. Must not touch columns beyond reading
// them, series, or actions.
#include "interp/rule_state.hpp"

#include <algorithm>
#include <cmath>

namespace vigil::interp {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// to - from: exact in int64 (steps can be nanosecond timestamps, 1.7e18,
/// where converting each to double first loses 256 steps); in double only
/// when the int64 subtraction of extreme host values would overflow.
double span(std::int64_t from, std::int64_t to) {
  std::int64_t d;
  if (!__builtin_sub_overflow(to, from, &d)) return static_cast<double>(d);
  return static_cast<double>(to) - static_cast<double>(from);
}

/// How far into the run this observation is, in `unit` (samples/evals:
/// the rule's evaluation opportunities before this one).
double progress(ir::Unit unit, std::uint64_t opportunity, const RuleClock& c) {
  switch (unit) {
    case ir::Unit::steps: return static_cast<double>(c.step);
    case ir::Unit::samples:
    case ir::Unit::evals: return static_cast<double>(opportunity);
    case ir::Unit::seconds: return c.time - c.first_time;
    case ir::Unit::epochs: return c.epoch;
  }
  return nan;
}

/// `after`, `until`, `every`: whether the rule is evaluated at all now.
bool gate(const ir::Rule& r, RuleState& rs, const RuleClock& c) {
  const std::uint64_t opportunity = rs.opportunities++;
  // `after`: from this point on; `until`: only before it. NaN progress
  // (no time or epoch yet) passes neither.
  if (r.after && !(progress(r.after->unit, opportunity, c) >= r.after->amount)) return false;
  if (r.until && !(progress(r.until->unit, opportunity, c) < r.until->amount)) return false;
  if (r.every) {
    const auto& e = *r.every;
    switch (e.unit) {
      case ir::Unit::samples:
      case ir::Unit::evals:
        if (rs.every_index++ % static_cast<std::uint64_t>(e.amount) != 0) return false;
        break;
      case ir::Unit::steps:
        if (rs.has_every &&
            span(rs.every_step, c.step) < e.amount)
          return false;
        break;
      case ir::Unit::seconds:
        // A time (epoch) cadence skips opportunities without a time (epoch):
        // one could not be placed on it, and would stall it for good.
        if (std::isnan(c.time) || (rs.has_every && !(c.time >= rs.every_time + e.amount))) return false;
        break;
      case ir::Unit::epochs:
        if (std::isnan(c.epoch) || (rs.has_every && !(c.epoch >= rs.every_epoch + e.amount)))
          return false;
        break;
    }
    rs.has_every = true;
    rs.every_step = c.step;
    rs.every_time = c.time;
    rs.every_epoch = c.epoch;
  }
  return true;
}

/// How far this evaluation is from the element's last firing, in `unit`.
double since_last_fire(ir::Unit unit, const ElemState& e, const RuleClock& c) {
  switch (unit) {
    case ir::Unit::samples:
    case ir::Unit::evals: return static_cast<double>(e.evals - e.last_fire_eval);
    case ir::Unit::steps: return span(e.last_fire_step, c.step);
    case ir::Unit::seconds: return c.time - e.last_fire_time;
    case ir::Unit::epochs: return c.epoch - e.last_fire_epoch;
  }
  return nan;
}

/// Whether an element whose run meets `for` fires now (SPEC §2). Without
/// `cooldown`: edge-triggered, once per run. With it: at any evaluation at
/// least the cooldown past the last firing, whether it re-fires the current
/// run or is the first firing of a new one; nothing fires inside the
/// cooldown. A distance that cannot be measured (a time or epoch cooldown
/// where the firing or this evaluation had no time or epoch) is not inside
/// the cooldown, but cannot re-fire a run either: the rule is then
/// edge-triggered, as without `cooldown`.
bool may_fire(const ir::Rule& r, const ElemState& e, const RuleClock& c) {
  if (!r.cooldown) return !e.fired;
  if (e.last_fire_eval == 0) return true;  // never fired
  const double since = since_last_fire(r.cooldown->unit, e, c);
  if (std::isnan(since)) return !e.fired;
  return since >= r.cooldown->amount;
}

/// The `for` clause holds for the element's current run.
bool satisfied(const ir::Rule& r, const ElemState& e, const RuleClock& c) {
  if (!r.for_) return true;
  const auto& d = *r.for_;
  switch (d.unit) {
    case ir::Unit::samples:
    case ir::Unit::evals: return static_cast<double>(e.run) >= d.amount;
    case ir::Unit::steps: return span(e.first_step, c.step) >= d.amount;
    case ir::Unit::seconds: return c.time - e.first_time >= d.amount;
    case ir::Unit::epochs: return c.epoch - e.first_epoch >= d.amount;
  }
  return false;
}

std::optional<double> decision_value(const PlanRule& pr, const Executor& exec, std::uint32_t label,
                                     std::int32_t at) {
  using Kind = Decision::Kind;
  if (at < 0 || static_cast<std::size_t>(at) >= pr.decisions.size()) return std::nullopt;
  const auto& d = pr.decisions[static_cast<std::size_t>(at)];
  auto holds = [&](std::int32_t k) {
    auto v = exec.element(pr.decisions[static_cast<std::size_t>(k)].node, label);
    return v && *v != 0 && !std::isnan(*v);
  };
  switch (d.kind) {
    case Kind::comparison: return exec.element(d.lhs, label);
    case Kind::and_: return decision_value(pr, exec, label, d.a);
    case Kind::or_: return decision_value(pr, exec, label, !holds(d.a) && holds(d.b) ? d.b : d.a);
    case Kind::fallback:
      return decision_value(
          pr, exec, label,
          exec.column(pr.decisions[static_cast<std::size_t>(d.a)].node).values.empty() ? d.b : d.a);
    case Kind::none: break;
  }
  return std::nullopt;
}

}  // namespace

void RuleState::count_running() {
  running = static_cast<std::size_t>(
      std::count_if(elems.begin(), elems.end(), [](const ElemState& e) { return e.run > 0; }));
}

void advance_rule(const PlanRule& pr, RuleState& rs, const Column& root, const RuleClock& clock,
                  std::vector<RuleHit>& hits,
                  std::vector<std::size_t>& fresh) {
  const ir::Rule& r = pr.rule;
  if (!r.info.mode.empty() && r.info.mode != clock.mode) return;
  if (root.computed != clock.obs) return;
  // The fresh elements: among the changed ones when the column was updated
  // in place (executor.hpp), so a rule over many label sets costs what
  // changed, not what it holds.
  fresh.clear();
  if (root.full) {
    for (std::size_t i = 0; i < root.values.size(); ++i)
      if (root.fresh[i]) fresh.push_back(i);
  } else {
    for (auto l : root.delta) {
      auto it = std::lower_bound(root.labels.begin(), root.labels.end(), l);
      if (it == root.labels.end() || *it != l) continue;
      const auto i = static_cast<std::size_t>(it - root.labels.begin());
      if (root.fresh[i]) fresh.push_back(i);
    }
  }
  if (fresh.empty()) return;
  if (!gate(r, rs, clock)) return;
  // By label id, as far as the largest this rule has evaluated: a rule over
  // `loss` holds one element however many label sets other series have.
  if (const std::uint32_t top = root.labels[fresh.back()]; rs.elems.size() <= top)
    rs.elems.resize(std::size_t{top} + 1);
  for (const std::size_t i : fresh) {
    const std::uint32_t label = root.labels[i];
    ElemState& e = rs.elems[label];
    ++e.evals;
    const double v = root.values[i];
    if (!(v != 0) || std::isnan(v)) {
      if (e.run > 0) --rs.running;
      e.run = 0;
      e.fired = false;
      continue;
    }
    if (++e.run == 1) {
      ++rs.running;
      e.first_step = clock.step;
      e.first_time = clock.time;
      e.first_epoch = clock.epoch;
    }
    e.recent[(e.run - 1) % 8] = clock.step;
    if (!satisfied(r, e, clock)) continue;
    if (!may_fire(r, e, clock)) continue;
    // Escalation: count this firing's chain of earlier firings, each
    // within the clause's span of the next (measured before updating
    // last_fire), and take the last clause whose count is reached.
    const bool fired_before = e.last_fire_eval > 0;
    int level = 0;
    for (std::size_t k = 0; k < r.escalation_within.size(); ++k) {
      const auto& w = r.escalation_within[k];
      e.chain[k] =
          fired_before && since_last_fire(w.unit, e, clock) <= w.amount ? e.chain[k] + 1 : 0;
      if (e.chain[k] >= r.info.escalations[k].after) level = static_cast<int>(k) + 1;
    }
    e.fired = true;
    e.last_fire_eval = e.evals;
    e.last_fire_step = clock.step;
    e.last_fire_time = clock.time;
    e.last_fire_epoch = clock.epoch;
    hits.push_back({label, level, e.first_step});
  }
}

bool may_evaluate(const PlanRule& pr, const RuleState& rs, std::int64_t step, std::string_view mode) {
  const ir::Rule& r = pr.rule;
  if (!r.info.mode.empty() && r.info.mode != mode) return false;
  // A gate counted in samples or evals counts the observations where the
  // root is fresh, which depends on what the host hands over: always open.
  for (const auto* g : {&r.after, &r.until, &r.every})
    if (*g && ((*g)->unit == ir::Unit::samples || (*g)->unit == ir::Unit::evals)) return true;
  // gate() without its side effects, for the gates a step number decides.
  // Seconds and epochs are only known once the observation arrives: open.
  const RuleClock at{0, step, nan, nan, nan, mode};
  if (r.after && r.after->unit == ir::Unit::steps &&
      !(progress(ir::Unit::steps, 0, at) >= r.after->amount))
    return false;
  if (r.until && r.until->unit == ir::Unit::steps &&
      !(progress(ir::Unit::steps, 0, at) < r.until->amount))
    return false;
  if (r.every && r.every->unit == ir::Unit::steps && rs.has_every &&
      span(rs.every_step, step) < r.every->amount)
    return false;
  return true;
}

std::optional<double> firing_value(const PlanRule& pr, const Executor& exec, std::uint32_t label) {
  return decision_value(pr, exec, label, 0);
}

}  // namespace vigil::interp
