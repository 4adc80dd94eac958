// Checked IR: the output of the checker. Names are resolved (params and
// template arguments substituted, lets expanded), every node is typed, calls
// are bound to a registry overload, durations are normalised. Rules are
// fully instantiated (templates never appear here).
//
// The IR is a DAG owned by the Rules (shared_ptr): a let's body is checked
// once and every use of the let shares its node, so `let x2 = x1 + x1`
// chains cost what their text does, not 2^n (issue 11 §3). Nodes are not
// changed once built. Walks over the IR must visit a node once (memoise on
// its address); the planner turns the IR of all rules into one DAG with
// shared structural subexpressions.
//
// Owns: the IR types. Must not touch: parsing (grammar/) or planning.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stdlib/functions.hpp"
#include "vigil/diagnostic.hpp"
#include "vigil/program.hpp"

namespace vigil::ir {

/// A normalised duration: counts (samples, evals), steps, seconds or epochs.
enum class Unit { samples, evals, steps, seconds, epochs };

struct Dur {
  Unit unit = Unit::samples;
  double amount = 0;
};

/// The largest amount a clause or range duration may have (2^53: counts
/// and steps stay exact integers in a double; for seconds, 285 million
/// years). Larger ones, `for 1e308h` included, are an error.
inline constexpr double max_duration_amount = 9007199254740992.0;

inline const char* unit_word(Unit u) {
  switch (u) {
    case Unit::samples: return "samples";
    case Unit::evals: return "evals";
    case Unit::steps: return "steps";
    case Unit::seconds: return "seconds";
    case Unit::epochs: return "epochs";
  }
  return "";
}

enum class MatchOp { eq, ne, re, nre };

struct Matcher {
  std::string label;
  MatchOp op = MatchOp::eq;
  std::string value;
};

/// A series selector; `x` alone is a selector with no matchers.
struct Selector {
  std::string name;
  std::vector<Matcher> matchers;  // in source order
};

enum class Op {
  constant,  // number or boolean literal, folded param
  selector,  // vector of the latest samples
  neg, not_,
  add, sub, mul, div, mod, pow,
  lt, le, gt, ge, eq, ne,
  and_, or_,
  call,      // elementwise / aggregate / stateful over `args`
  range_call,  // range function over `selector`[`window`], or over the values
               // of `args[0]` when the selector has no name (+ constant args)
};

enum class Type { number, boolean };

struct Node {
  Op op = Op::constant;
  Type type = Type::number;
  bool vector = false;  // may carry labels (depends on a selector, not aggregated)
  double constant = 0;  // Op::constant
  Selector selector;    // Op::selector, Op::range_call
  Dur window;           // Op::range_call
  const stdlib::FunctionDef* fn = nullptr;  // call, range_call
  std::vector<double> const_args;           // range_call/stateful: constant params, in order
  std::vector<std::shared_ptr<Node>> args;  // operands / non-constant arguments
  std::uint32_t file = 0;
  SourceRange range;
};

using NodePtr = std::shared_ptr<Node>;

/// The most `escalate` clauses a rule may have: the checker rejects more, and
/// the engine's per-element state has room for exactly this many chains.
inline constexpr std::size_t max_escalations = 4;

struct Rule {
  RuleInfo info;
  NodePtr condition;  // boolean
  std::optional<Dur> for_, after, until, every, cooldown;
  /// Where each action is written: info.actions, then each escalation's.
  std::vector<std::pair<std::uint32_t, SourceRange>> action_sites;
  std::vector<Dur> escalation_within;  // parallel to info.escalations (<= max_escalations)
};

}  // namespace vigil::ir
