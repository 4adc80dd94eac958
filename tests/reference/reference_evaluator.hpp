// A deliberately naive evaluator of Vigil rules, used as the oracle of the
// streaming engine in the RapidCheck property (reference_property_test.cpp).
//
// It walks the AST from vigil::grammar::parse directly and recomputes every
// expression from the FULL history of every series at every observation: no
// windows, no caches, no plan. The only state carried between observations is
// what the semantics define as state: per-element for/cooldown state and the
// per-rule after/every counters. Obviously correct beats fast here.
//
// Supported subset (what the generator produces; anything else is reported by
// `error()`): named rules with `when`, `for|after|until|every|cooldown
// N samples|steps|evals|epochs|Ns`, `in MODE`, `do ACTIONS`
// (actions ignored); numbers, true/false, series names and selectors with = != =~ !~ matchers;
// + - * / % ^ unary -; comparisons; and/or/not; abs, is_nan, default(x, v);
// aggregations max/min/sum/mean/count of one vector; range reductions
// mean/min/max/sum/count/delta/first/last/before over x[N], x[N steps], x[N evals],
// x[Ns|m|h], where x is a series or any expression E that reads one (`(a - b)[3]`; over a
// boolean E only count, which counts the samples where E held); stateful
// prev/ewma/best/steps_since_best of a series (not of an arbitrary expression).
// Observations whose step is below the previous step of their mode are ignored, as
// the engine does.
//
// An expression range `(E)[W]` keeps, per label set of E, the history of E's
// values at the observations where that element of E was fresh (from the first
// observation of the program on, whether or not a rule is evaluated there):
// that history is the one extra piece of state, recorded in observe() before
// the rules run, innermost ranges first. Sums (ranges and aggregations) are the
// exact sum rounded once, what the engine's compensated sums approximate.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/ast.hpp"
#include "grammar/parser.hpp"
#include "vigil/diagnostic.hpp"

namespace vigil::reference {

using Labels = std::vector<std::pair<std::string, std::string>>;

struct SeriesSample {
  std::string name;
  Labels labels;  // sorted by label name
  double value = 0;
};

struct Observation {
  std::int64_t step = 0;
  std::string mode = "train";
  std::vector<SeriesSample> samples;
  double time = std::numeric_limits<double>::quiet_NaN();  // NaN: none
};

/// What the property compares between engine and reference.
struct Firing {
  std::string rule;
  std::int64_t step = 0;
  std::string labels;  // `k=v,k2=v2`
  std::optional<double> value;
  std::int64_t pending_since = 0;

  /// Values compare bitwise-equal or both NaN.
  friend bool operator==(const Firing& a, const Firing& b);
};

std::string to_string(const Firing& f);
std::string labels_string(const Labels& labels);

class Evaluator {
 public:
  /// Parses `text`; on a parse error or a construct outside the subset,
  /// error() is non-empty and observe() returns nothing.
  explicit Evaluator(const std::string& text);
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  [[nodiscard]] const std::string& error() const { return error_; }

  /// Appends the observation to the history and returns the firings at it,
  /// rules in program order, elements in label-set order.
  std::vector<Firing> observe(const Observation& obs);

 private:
  struct Sample {
    std::int64_t step;
    std::size_t obs;  // index of the observation it came from
    double value;
    bool eval;    // taken in an observation of mode "eval"
    double time;  // NaN: the observation had none
  };
  struct Series {
    std::string name;
    Labels labels;
    std::vector<Sample> history;
  };
  struct Elem {
    double num = 0;
    bool truth = false;
    bool fresh = false;
    std::optional<double> decide;  // lhs of the deciding comparison
  };
  /// A value: per-label-set elements. `scalar` values broadcast against
  /// vectors; a scalar has at most one element (empty labels).
  struct Value {
    bool scalar = false;
    std::map<Labels, Elem> elems;
  };
  /// A clause duration; `unit` is samples (also for evals), steps, seconds
  /// (also for minutes and hours, scaled) or epochs.
  struct Span {
    ast::DurUnit unit = ast::DurUnit::samples;
    double amount = 0;
  };
  struct ElemState {
    std::int64_t run = 0;
    std::int64_t first_step = 0;
    double first_time = 0, first_epoch = 0;
    double last_fire_time = 0, last_fire_epoch = 0;
    bool fired = false;  // the current run has fired (edge triggering)
    bool ever_fired = false;  // some run has: the cooldown after it applies
    std::int64_t last_fire_step = 0;
    // Evaluations of the element (true or false) since its last firing: the
    // distance of a `cooldown N samples|evals`.
    std::int64_t evals_since_fire = 0;
  };
  struct Rule {
    std::string name;
    const ast::Expr* when = nullptr;
    std::optional<Span> for_, after, until, every, cooldown;
    std::optional<std::string> mode;
    // state
    std::map<Labels, ElemState> elems;
    std::int64_t opportunities = 0;  // before the current one; `after|until N samples`
    std::int64_t every_index = 0;
    std::optional<std::int64_t> last_evaluated_step;
    std::optional<double> last_evaluated_at;  // `every` in seconds or epochs
  };

  Value eval(const ast::Expr& e) const;
  Value eval_call(const ast::Call& c) const;
  Value eval_range(const std::string& fn, const ast::Subscript& s) const;
  /// Appends E's fresh elements to the history of every expression range.
  void record_expression_ranges();
  void collect_expression_ranges(const ast::Expr& e);
  double progress(const Span& s, std::int64_t opportunities_before) const;
  Value eval_stateful(const ast::Call& c) const;
  std::vector<const Series*> select(const ast::Expr& base) const;
  bool check(const ast::Expr& e);
  std::optional<Span> span(const ast::ExprPtr& e);
  /// The latest `epoch` sample (NaN before there is one).
  double epoch() const;
  void run_rule(Rule& rule, std::vector<Firing>& out);

  SourceSet sources_;
  grammar::ParseResult parsed_;
  std::string error_;
  std::vector<Rule> rules_;
  std::map<std::pair<std::string, Labels>, Series> series_;
  // Expression ranges in post-order (an inner range before the ones around
  // it) and their per-label-set histories.
  std::vector<const ast::Subscript*> expr_ranges_;
  std::map<const ast::Subscript*, std::map<Labels, std::vector<Sample>>> expr_history_;
  std::size_t obs_index_ = 0;
  std::int64_t step_ = 0;
  std::string mode_;
  double now_ = 0;                         // NaN: this observation has no time
  std::optional<double> first_time_;       // of the first observation with a time
  std::map<std::string, std::int64_t> last_step_;  // per mode, for out-of-order
};

}  // namespace vigil::reference
