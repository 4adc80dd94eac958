// The compiled plan: the IR trees of all rules merged into one DAG.
//
// Nodes are stored in topological order (inputs before users), so the
// executor evaluates them with one forward pass. Structurally equal
// subexpressions of different rules are one node (common subexpression
// elimination), constant subtrees are folded, and each selector records how
// much history its series must keep (the longest window read through it),
// so the executor sizes its ring buffers ahead of time.
//
// Owns: the plan's data types. Must not touch: evaluation (executor) or rule state.
#pragma once

#include <re2/re2.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "interp/ir.hpp"

namespace vigil::interp {

inline constexpr std::uint32_t no_node = UINT32_MAX;

/// How much history a series read through a selector must keep.
struct Retention {
  std::size_t count = 1;    // last N samples
  double steps = 0;         // samples within N steps of the current one
  double seconds = 0;       // samples within N seconds of now
  std::size_t evals = 0;    // the last N eval-mode samples
  /// Also the newest sample older than the step / time window (`before`).
  bool preceding_steps = false, preceding_seconds = false;

  /// Widens this retention to cover `window` (read by `fn`).
  void cover(const ir::Dur& window, const stdlib::FunctionDef& fn);
  /// Widens this retention to keep everything `other` keeps.
  void widen(const Retention& other);
};

struct PlanNode {
  ir::Op op = ir::Op::constant;
  ir::Type type = ir::Type::number;
  bool vector = false;
  double constant = 0;
  /// selector; range_call over a series. A range_call without a selector
  /// ranges over the values of its input expression `inputs[0]`, which the
  /// executor keeps per label set (`history` says how many).
  std::uint32_t selector = no_node;
  ir::Dur window;                    // range_call
  Retention history;                 // range_call without a selector
  const stdlib::FunctionDef* fn = nullptr;
  std::vector<double> const_args;
  std::vector<std::uint32_t> inputs;
  /// Its value can change without a new sample (windows by step or time).
  bool time_dependent = false;
  std::uint32_t file = 0;
  SourceRange range;
};

struct PlanSelector {
  ir::Selector selector;
  /// Compiled anchored regexes, parallel to selector.matchers (null for = / !=).
  std::vector<std::shared_ptr<const RE2>> regexes;
  Retention retention;

  [[nodiscard]] bool matches(std::string_view name,
                             const std::vector<std::pair<std::string, std::string>>& labels) const;
};

/// How a firing's value is found: the condition's and/or/default structure
/// down to its comparisons, whose left-hand side is the value. `and` takes
/// its left operand; `or` its left operand unless only the right one holds;
/// `default(x, v)` the side it took. Anything else has no value.
struct Decision {
  enum class Kind : std::uint8_t { none, comparison, and_, or_, fallback };
  Kind kind = Kind::none;
  std::uint32_t node = no_node;  // this subexpression (its truth, its definedness)
  std::uint32_t lhs = no_node;   // comparison: its left-hand side
  std::int32_t a = -1, b = -1;   // operands, as indices into PlanRule::decisions
};

struct PlanRule {
  ir::Rule rule;  // info, clauses; rule.condition is released into the DAG
  std::uint32_t root = no_node;
  /// decisions[0] is the condition's; empty when it has no value at all.
  std::vector<Decision> decisions;
  /// Selector and range nodes the condition reads, ranges over expressions
  /// followed by what they read (for explain and RuleInfo::reads).
  std::vector<std::uint32_t> leaves;
};

struct Plan {
  std::vector<PlanNode> nodes;
  std::vector<PlanSelector> selectors;
  std::vector<PlanRule> rules;
};

/// Builds the plan from checked rules (consumes their condition trees).
Plan make_plan(std::vector<ir::Rule> rules);

/// Shared scalar semantics of the operators, used by constant folding and by
/// the executor alike. Booleans are 0/1; every comparison involving NaN is
/// false (SPEC §2), `!=` included.
double apply_unary(ir::Op op, double a);
double apply_binary(ir::Op op, double a, double b);

}  // namespace vigil::interp
