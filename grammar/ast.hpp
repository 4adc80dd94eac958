// The abstract syntax tree of a rule file: what the parser produces and the
// checker consumes. Every node knows its byte range in the source file so that
// later stages can point at it. The AST is purely syntactic: names are not
// resolved, types are not known, durations are not normalised.
//
// Ownership: a File owns its whole tree through unique_ptrs. Nodes are not
// shared. The tree depth is bounded by the parser (see parser.hpp), so
// recursive walks over it cannot exhaust the stack.
//
// Owns: the syntax types. Must not touch: names, types, or any later stage.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "vigil/diagnostic.hpp"

namespace vigil::ast {

using Range = SourceRange;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// `label="v"`, `label!="v"`, `label=~"re"`, `label!~"re"`.
enum class MatchOp { eq, ne, re, nre };

struct LabelMatcher {
  std::string label;
  MatchOp op = MatchOp::eq;
  std::string value;  // unescaped string contents
  Range range;        // whole matcher
};

/// Units as written. `10m` is {10, minutes}; normalisation is the checker's.
enum class DurUnit { samples, steps, evals, epochs, seconds, minutes, hours };

// ---- expression nodes -----------------------------------------------------

/// `3`, `0.5`, `1e-7`; `5%` is stored as 0.05 with percent = true.
struct Number {
  double value = 0;
  bool percent = false;
};

/// `"..."` with escapes already resolved.
struct String {
  std::string value;
};

/// `true` / `false`.
struct Bool {
  bool value = false;
};

/// A bare identifier or a backticked name with no label matchers:
/// `loss`, `` `train/loss` ``. It may name a param, a let, a template
/// parameter or a series; the checker decides.
struct Name {
  std::string name;
  bool backticked = false;
};

/// A selector with explicit matchers: `grad_norm(layer=~"conv.*")`,
/// `grad_norm{layer=~"conv.*"}`, `` `train/loss`{rank="0"} ``.
/// `name()` / `name{}` (empty matcher list) is also a Selector.
struct Selector {
  std::string name;
  bool backticked = false;
  Range name_range;
  std::vector<LabelMatcher> matchers;
};

/// A duration literal: `3 samples`, `100 steps`, `2 evals`, `1 epochs`,
/// `30s`, `10m`, `2h`. The amount is a Number or a Name (a template parameter
/// or param, e.g. `for n samples`).
struct Duration {
  std::unique_ptr<Expr> amount;
  DurUnit unit = DurUnit::samples;
};

/// `base[size]`: base is a Name or Selector (or anything; the checker
/// complains); size is a Number (`x[10]`, a sample count), a Duration
/// (`x[100 steps]`, `x[10m]`) or a Name bound to one of those.
struct Subscript {
  ExprPtr base;
  ExprPtr size;
};

/// `base.field` or `base.field(arg, ...)`: a derived series of a tensor
/// series, `grad{layer="fc1"}.norm` is `grad_norm{layer="fc1"}`. Lets
/// templates take the tensor (`tensor = grad`) and read any of its stats.
/// A parameterised stat takes arguments (`activation.frac_outside(-9, 9)`);
/// `args` is empty when no parentheses were written.
struct Member {
  ExprPtr base;
  std::string field;
  Range field_range;
  std::vector<ExprPtr> args;
};

/// `fn(arg, ...)` where the arguments are expressions (not label matchers).
struct Call {
  std::string fn;
  Range fn_range;
  std::vector<ExprPtr> args;
};

enum class UnaryOp { neg, not_ };

struct Unary {
  UnaryOp op = UnaryOp::neg;
  Range op_range;
  ExprPtr operand;
};

enum class BinaryOp { or_, and_, lt, le, gt, ge, eq, ne, add, sub, mul, div, mod, pow };

struct Binary {
  BinaryOp op = BinaryOp::add;
  Range op_range;  // the operator token itself, for error carets
  ExprPtr lhs;
  ExprPtr rhs;
};

struct Expr {
  Range range;  // the whole expression (parentheses excluded)
  std::variant<Number, String, Bool, Name, Selector, Duration, Subscript, Member, Call, Unary,
               Binary>
      node;
};

// ---- statements -----------------------------------------------------------

/// `key = value` (named) or `value` (positional; name empty), in action calls,
/// `use` arguments and template parameter lists.
struct Arg {
  std::string name;  // empty for positional
  Range name_range;
  ExprPtr value;
  Range range;  // whole argument
};

/// `do NAME` or `do NAME(args)`.
struct ActionCall {
  std::string name;
  Range name_range;
  std::vector<Arg> args;
  Range range;
};

/// `escalate after N within DURATION do ACTIONS`: a firing that follows N
/// earlier firings of the same series, each within DURATION of the next,
/// runs these actions instead of the rule's `do` actions.
struct Escalation {
  ExprPtr count;   // a Number or a Name bound to one
  ExprPtr within;  // a Duration or a Name bound to one
  std::vector<ActionCall> actions;
  Range range;
};

/// The clauses of a rule or the overrides of a `use`. Each optional clause
/// keeps a range for error reporting: the duration clauses through their
/// Expr's range (the value), severity and mode through the range of the word
/// (so "unknown severity" underlines just the word).
/// Durations are Exprs holding a Duration (or a Name bound to one).
struct Clauses {
  ExprPtr when;  // null for `use` without a when override
  ExprPtr for_;
  ExprPtr after;
  ExprPtr until;
  ExprPtr every;
  ExprPtr cooldown;
  std::optional<std::string> severity;  // the word as written
  Range severity_range;
  std::optional<std::string> mode;  // `in MODE`
  Range mode_range;
  bool has_do = false;
  std::vector<ActionCall> actions;
  std::vector<Escalation> escalations;  // in source order
  Range when_keyword;  // the `when` token; the line of an anonymous rule
};

/// A template parameter: `name = default` or just `name` (required).
struct TemplateParam {
  std::string name;
  Range name_range;
  ExprPtr default_value;  // may be null
};

/// `rule NAME ["desc"] [(params)]: clauses` or an anonymous `when ... do ...`.
struct RuleDecl {
  std::string name;  // empty for anonymous rules
  Range name_range;
  std::optional<std::string> description;
  bool is_template = false;  // a parameter list was written (even `()`)
  std::vector<TemplateParam> params;
  Clauses clauses;
  Range range;
};

/// `use [std.]NAME(args) [as ALIAS] [clause overrides] [do actions]`.
struct UseDecl {
  bool std_prefix = false;
  std::string template_name;
  Range name_range;  // includes `std.` when present
  std::vector<Arg> args;
  std::optional<std::string> alias;
  Range alias_range;
  Clauses overrides;
  Range range;
};

/// `param NAME = EXPR`.
struct ParamDecl {
  std::string name;
  Range name_range;
  ExprPtr value;
  Range range;
};

/// `let NAME = EXPR`.
struct LetDecl {
  std::string name;
  Range name_range;
  ExprPtr value;
  Range range;
};

/// `import "path"` (relative to the importing file).
struct ImportDecl {
  std::string path;
  Range path_range;
  Range range;
};

/// `name: type [= default]` in an action declaration. Types are words:
/// `number`, `string`, `bool`, `duration`.
struct ActionParam {
  std::string name;
  Range name_range;
  std::string type;
  Range type_range;
  ExprPtr default_value;  // may be null
};

/// `action NAME[(params)]`.
struct ActionDecl {
  std::string name;
  Range name_range;
  std::vector<ActionParam> params;
  Range range;
};

/// `alias NAME = SERIES {, SERIES}`: trace series named SERIES are read as
/// NAME (`alias loss = \`train/loss\`, train_loss`).
struct AliasDecl {
  std::string name;
  Range name_range;
  std::vector<std::string> targets;
  std::vector<Range> target_ranges;
  Range range;
};

using Statement =
    std::variant<RuleDecl, UseDecl, ParamDecl, LetDecl, ImportDecl, ActionDecl, AliasDecl>;

struct File {
  std::uint32_t file = 0;  // index in the SourceSet
  std::vector<Statement> statements;
};

}  // namespace vigil::ast
