// Rule state machines: per rule and label set, the run of true evaluations
// (`for`), firing and re-firing (`cooldown`), escalation chains, and the
// rule's gates (`after`, `until`, `every`, `mode`).
//
// Owns: RuleState / ElemState and the decision of which elements fire.
// Must not touch: columns (reads the rule's root column only), series,
// actions. It does not build Firings: the engine does, from the hits.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "interp/executor.hpp"
#include "interp/plan.hpp"

namespace vigil::interp {

/// One rule's state for one label set. Plain data (saved bytewise).
struct ElemState {
  std::int64_t run = 0;  // consecutive true evaluations
  std::int64_t first_step = 0;
  double first_time = std::numeric_limits<double>::quiet_NaN();
  double first_epoch = std::numeric_limits<double>::quiet_NaN();
  bool fired = false;
  std::uint64_t evals = 0, last_fire_eval = 0;
  std::int64_t last_fire_step = 0;
  double last_fire_time = std::numeric_limits<double>::quiet_NaN();
  double last_fire_epoch = std::numeric_limits<double>::quiet_NaN();
  std::int64_t recent[8] = {};  // steps of the latest true evaluations (for explain)
  std::uint32_t chain[ir::max_escalations] = {};  // per escalation: earlier firings in the chain
};

struct RuleState {
  std::vector<ElemState> elems;  // by label set id, up to the largest evaluated
  std::uint64_t opportunities = 0, every_index = 0;
  bool has_every = false;
  std::int64_t every_step = 0;
  double every_time = std::numeric_limits<double>::quiet_NaN();
  double every_epoch = std::numeric_limits<double>::quiet_NaN();
  /// How many elements are in a run (run > 0): pending() is O(1), not a
  /// scan of every label set (hosts ask at every step). Not saved: restore
  /// recounts it (count_running).
  std::size_t running = 0;

  /// Some element is in a run of true evaluations (pending or firing).
  [[nodiscard]] bool pending() const { return running > 0; }
  /// Recounts `running` from the elements.
  void count_running();
};

/// What a rule is evaluated at.
struct RuleClock {
  std::uint64_t obs = 0;  // observation number: the root is current if computed at it
  std::int64_t step = 0;
  double time = std::numeric_limits<double>::quiet_NaN();
  double first_time = std::numeric_limits<double>::quiet_NaN();  // first time given in the run
  double epoch = std::numeric_limits<double>::quiet_NaN();       // latest `epoch` sample
  std::string_view mode;
};

/// An element that fires at this evaluation.
struct RuleHit {
  std::uint32_t label = 0;
  int escalation = 0;  // 0: the rule's actions; k: its k-th escalate clause
  std::int64_t pending_since = 0;
};

/// The one entry point: evaluates rule `pr` over its root column at `clock`
/// and advances `rs`. Appends the elements that fire to `hits`, in column
/// order. Nothing happens when the rule's mode is another, its root was not
/// recomputed with a fresh element, or a gate (after/until/every) is closed.
/// Costs the root's changed elements (Column::delta), not every label set
/// it holds; `scratch` is reused between calls.
void advance_rule(const PlanRule& pr, RuleState& rs, const Column& root, const RuleClock& clock,
                  std::vector<RuleHit>& hits,
                  std::vector<std::size_t>& scratch);

/// Whether `advance_rule` may evaluate rule `pr` at an observation at `step`
/// in `mode` whose root is fresh, predicted from `rs` without changing it.
/// False only when that is certain: the rule runs in another mode, or a gate
/// in steps (`after N steps`, `until N steps`, `every N steps`) is closed at
/// `step`. A rule with a gate counted in samples or evals always answers
/// true: those count the observations where its root is fresh, which depends
/// on what the host hands over. Gates in seconds or epochs are not known
/// before the observation and count as open. Valid until `rs` changes.
bool may_evaluate(const PlanRule& pr, const RuleState& rs, std::int64_t step, std::string_view mode);

/// The firing's value for element `label`: the left-hand side of the
/// comparison that decided (interp::Decision), read from the columns.
std::optional<double> firing_value(const PlanRule& pr, const Executor& exec, std::uint32_t label);

}  // namespace vigil::interp
