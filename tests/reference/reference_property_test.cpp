// Properties of the streaming engine, checked on random programs and traces:
// 1. its firings equal those of the naive reference evaluator
//    (reference_evaluator.hpp), which recomputes everything from the full
//    history at every observation;
// 2. saving its state at any point and continuing in a fresh engine is
//    invisible in the firings.
//
// Programs: 1..4 rules over scalar series a, b, c, the often missing m and the
// labelled series v{k="1"}, v{k="2"}, v{k="3"} (v{k="4"} is never fed):
// comparisons of arithmetic expressions, and/or/not, aggregations over v,
// range reductions (incl. before) over x[N], x[N steps], x[N evals], x[Ns],
// ranges over expressions (`count((a > 1 and v < 2)[3])`, `mean((v - a)[2 steps])`,
// label-less and labelled series mixed), default(x, v) of numbers and of
// conditions, abs, is_nan, prev/ewma/best/steps_since_best, and the clauses
// for/after/until/every/cooldown (samples, steps, evals, seconds) and `in`.
// Traces: 1..60 observations, train/eval, steps non-decreasing per mode (eval
// sometimes counting its own steps, rarely an out-of-order observation),
// times mostly present, random subsets of series (sometimes one twice), values
// from a small set incl. NaN so that ties and true conditions are frequent.
// Firings (rule, step, labels, value, pending_since) must be identical; a
// failure prints the shrunk program and trace, which VIGIL_REF_CASE=FILE
// replays (ReferenceReplay.PrintedCase) after editing it by hand.
//
// The generator keeps to constructs whose meaning the semantics pin down:
// the leftmost path of a condition (which decides the firing value) is made of
// comparisons, and/or and default only; `not` and is_nan appear elsewhere; no
// delta over a single-sample window x[1]; steps_since_best only with
// min_delta 0; prev only of c, which is never NaN. VIGIL_REF_EXCLUDE=a,b
// leaves generator features out (to narrow a failure down; see below).

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/reference/reference_evaluator.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"

namespace ref = vigil::reference;

namespace vigil::reference {
// gtest prints a failed EXPECT_EQ of firings through this.
void PrintTo(const Firing& f, std::ostream* os) { *os << to_string(f); }
}  // namespace vigil::reference

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// VIGIL_REF_EXCLUDE=delta,nan,... leaves generator features out, to look past
/// a known engine bug while it is open. Features: function names, `nan`
/// (values), `not`, `is_nan`, clause keywords (for after until every cooldown
/// in), `evals`, `time`, `mix` (labelled series in unlabelled rules, label-less
/// ones in labelled expression ranges), `dup` (a series twice in one
/// observation), `order` (out-of-order observations), `evalsteps` (eval steps
/// counted apart from train steps), `statenan` (stateful functions only of the
/// never-NaN series c), `untimed` (single observations without a time in a
/// timed trace), `eval` (eval observations), `default` (default() and the
/// often missing series m), `exprrange` (ranges over expressions),
/// `beforetime` (before() over a time window), `beforeuntimed` (untimed
/// observations in traces of programs that use before()), `beforeevalsteps`
/// (eval steps counted apart, in traces of programs that use before()),
/// `orvalue` (`or` on the leftmost path, where the comparison that held gives the value),
/// `pow` (the `^` operator), `inf` (+-Inf sample values), `multikey` (the series w,
/// whose label sets have two keys), `epochs` (clauses in epochs, and an `epoch`
/// series in the trace), `timecadence` (`every` in seconds or epochs).

bool excluded(std::string_view feature) {
  static const std::string list = [] {
    const char* env = std::getenv("VIGIL_REF_EXCLUDE");
    return "," + std::string(env ? env : "") + ",";
  }();
  return list.find("," + std::string(feature) + ",") != std::string::npos;
}

template <class T>
std::vector<T> without_excluded(const std::vector<T>& xs) {
  std::vector<T> out;
  for (const auto& x : xs)
    if (!excluded(x)) out.push_back(x);
  return out;
}

// Picks ignore RapidCheck's size (inRange scales with it, which would make the
// early cases all-minimum) and shrink towards `lo`; chance() shrinks towards
// false, so a shrunk counterexample keeps only the clauses it needs.
int pick(int lo, int hi_inclusive) {
  return *rc::gen::resize(rc::kNominalSize, rc::gen::inRange(lo, hi_inclusive + 1));
}
bool chance(int percent) { return pick(0, 99) >= 100 - percent; }
template <class T>
const T& one_of(const std::vector<T>& xs) {
  return xs[static_cast<std::size_t>(pick(0, static_cast<int>(xs.size()) - 1))];
}

// ---- program generator -------------------------------------------------------

std::string literal() {
  static const std::vector<std::string> lits{"0", "1", "2", "0.5", "3"};
  std::string s = one_of(lits);
  return chance(15) ? "(-" + s + ")" : s;
}

std::string v_selector() {
  static const std::vector<std::string> sels{
      "v", "v", "v{k=\"1\"}", "v{k=~\"[12]\"}", "v{k!=\"2\"}", "v{k!~\"3\"}", "v{k=~\"1|3\"}", "v{k=\"3\"}"};
  // w: label sets of two keys, selected by one key, both, or a regex over one.
  static const std::vector<std::string> w_sels{
      "w", "w{j=\"x\"}", "w{k=\"1\"}", "w{j=\"y\",k=\"1\"}", "w{j=~\"x|y\",k!=\"2\"}"};
  if (chance(20) && !excluded("multikey")) return one_of(w_sels);
  return one_of(sels);
}

std::string scalar_series() {
  static const std::vector<std::string> names{"a", "b", "c"};
  return one_of(names);
}

/// The window of a range function: x[N], x[N steps], x[Ns] or x[N evals].
/// delta over a single sample (x[1]) is left out: its meaning is not pinned.
std::string window(const std::string& fn) {
  int kind = pick(0, 9);
  const bool no_time = excluded("time") || (fn == "before" && excluded("beforetime"));
  if (kind < 4) return std::to_string(pick(fn == "delta" ? 2 : 1, 4));
  if (kind < 7 || (excluded("evals") && no_time)) return std::to_string(pick(1, 6)) + " steps";
  if (kind < 9 && !no_time) {
    static const std::vector<std::string> times{"1s", "2s", "3s", "5s", "10s"};
    return one_of(times);
  }
  return std::to_string(pick(fn == "delta" ? 2 : 1, 3)) + " evals";
}

std::string range_of(const std::string& series) {
  static const std::vector<std::string> fns = without_excluded<std::string>(
      {"mean", "min", "max", "sum", "count", "delta", "last", "first", "before"});
  const std::string& fn = one_of(fns);
  return fn + "(" + series + "[" + window(fn) + "])";
}

std::string num_expr(int depth, bool labelled);
std::string bool_expr(int depth, bool labelled, bool left_path);

std::string arith_op() {
  static const std::vector<std::string> ops =
      without_excluded<std::string>({"+", "-", "*", "/", "%", "+", "-", "*", "/", "^"});
  if (ops.empty()) return "+";
  std::string op = one_of(ops);
  if (op == "^" && excluded("pow")) op = "*";
  return op == "%" && chance(50) ? "+" : op;  // % rarely: it is mostly NaN on this value set
}

/// A series leaf for an expression range's E: v selectors in labelled rules,
/// a, b, c or the often missing m otherwise; now and then the other kind, so
/// that label-less series broadcast into labelled ones inside E.
std::string series_leaf(bool labelled) {
  static const std::vector<std::string> scalars{"a", "b", "c", "m"};
  if (chance(25) && !excluded("mix")) labelled = !labelled;
  return labelled ? v_selector() : one_of(scalars);
}

/// `fn((E)[W])`: count over a condition E, or a reduction of a numeric E.
/// E always reads a series (a range over constants is not a series).
std::string expr_range(int depth, bool labelled) {
  if (chance(40)) {
    static const std::vector<std::string> cmps{"<", "<=", ">", ">=", "==", "!="};
    std::string cond = "(" + series_leaf(labelled) + " " + one_of(cmps) + " " +
                       (chance(60) ? literal() : num_expr(depth - 1, labelled)) + ")";
    if (chance(40))
      cond = "(" + cond + (chance(50) ? " and " : " or ") + bool_expr(depth - 1, labelled, false) + ")";
    return "count(" + cond + "[" + window("count") + "])";
  }
  static const std::vector<std::string> fns = without_excluded<std::string>(
      {"mean", "max", "sum", "last", "before", "mean", "max", "sum", "last", "before", "min",
       "first", "delta", "count"});
  if (fns.empty()) return literal();
  const std::string& fn = one_of(fns);
  std::string lhs = series_leaf(labelled), rhs = num_expr(depth - 1, labelled);
  if (chance(50)) std::swap(lhs, rhs);
  return fn + "((" + lhs + " " + arith_op() + " " + rhs + ")[" + window(fn) + "])";
}

/// `default(x, v)` where x is often missing: m is absent from many traces,
/// v{k="4"} from all.
std::string default_num(int depth, bool labelled) {
  static const std::vector<std::string> missing_scalar{"m", "m", "max(v{k=\"4\"})", "a"};
  static const std::vector<std::string> missing_vector{"v{k=\"4\"}", "v{k=\"4\"}", "v{k=\"1\"}", "v"};
  std::string x;
  if (chance(25))
    x = range_of(labelled ? "v{k=\"4\"}" : "m");
  else
    x = labelled ? one_of(missing_vector) : one_of(missing_scalar);
  return "default(" + x + ", " + num_expr(depth - 1, labelled) + ")";
}

/// A condition default: x is a comparison over an often missing series.
std::string default_bool(int depth, bool labelled) {
  std::string x = "(" + std::string(labelled ? "v{k=~\"[34]\"}" : "m") + " > " + literal() + ")";
  std::string v = chance(40) ? (chance(50) ? "true" : "false") : bool_expr(depth - 1, labelled, false);
  return "default(" + x + ", " + v + ")";
}

/// An expression that is statically a vector over v (for aggregations).
std::string vec_expr(int depth) {
  int choice = depth <= 0 ? pick(0, 1) : pick(0, 5);
  if (choice == 5 && excluded("exprrange")) choice = 1;
  switch (choice) {
    case 0: return v_selector();
    case 1: return range_of(v_selector());
    case 2: return "abs(" + vec_expr(depth - 1) + ")";
    case 3: return "(-" + vec_expr(depth - 1) + ")";
    case 5: {
      // A range over a labelled E: (v op E')[W].
      std::string rhs = num_expr(depth - 1, chance(50));
      static const std::vector<std::string> fns{"mean", "max", "sum", "last", "before"};
      const std::string& fn = one_of(fns);
      return fn + "((" + v_selector() + " " + arith_op() + " " + rhs + ")[" + window(fn) + "])";
    }
    default: {
      std::string lhs = vec_expr(depth - 1), rhs = num_expr(depth - 1, true);
      if (chance(50)) std::swap(lhs, rhs);
      return "(" + lhs + " " + arith_op() + " " + rhs + ")";
    }
  }
}

std::string aggregation(int depth) {
  static const std::vector<std::string> aggs =
      without_excluded<std::string>({"max", "min", "sum", "max", "min", "sum", "mean", "count"});
  return one_of(aggs) + "(" + vec_expr(depth - 1) + ")";
}

/// prev/ewma/best/steps_since_best of a series. prev only of c (never NaN):
/// the engine documents prev as "NaN samples included", the semantics say a
/// NaN input leaves the state unchanged; that question is a test of its own.
/// steps_since_best only with min_delta 0, where "best" needs no definition.
std::string stateful(bool labelled) {
  static const std::vector<std::string> fns =
      without_excluded<std::string>({"prev", "ewma", "best", "steps_since_best"});
  if (fns.empty()) return literal();
  std::string fn = one_of(fns);
  std::string series = labelled ? v_selector() : (chance(50) ? "c" : scalar_series());
  // statenan: only the never-NaN series c (no NaN inputs to stateful functions).
  if (excluded("statenan")) {
    if (labelled) return literal();
    series = "c";
  }
  if (fn == "prev") {
    if (labelled) fn = "ewma";
    else series = "c";
  }
  std::string mode = chance(50) ? "\"max\"" : "\"min\"";
  if (fn == "prev") return "prev(" + series + ")";
  if (fn == "ewma") return "ewma(" + series + ", 0.5)";
  if (fn == "best") return "best(" + series + ", " + mode + ")";
  return "steps_since_best(" + series + ", 0, " + mode + ")";
}

/// A numeric expression; `labelled` selects v-based leaves, else a/b/c.
std::string num_expr(int depth, bool labelled) {
  static const std::vector<int> leaves{0, 1, 2, 7};
  int choice = depth <= 0 ? one_of(leaves) : pick(0, 9);
  if (choice == 8 && excluded("exprrange")) choice = 2;
  if (choice == 9 && excluded("default")) choice = 6;
  switch (choice) {
    case 0:
      // Now and then a labelled series where the rule is about a, b, c: the
      // pairing by identical label sets then drops every element.
      if (!labelled && chance(5) && !excluded("mix")) return v_selector();
      return labelled ? v_selector() : scalar_series();
    case 1: return chance(30) ? literal() : (labelled ? v_selector() : scalar_series());
    case 2: return range_of(labelled ? v_selector() : chance(20) ? "m" : scalar_series());
    case 3: return aggregation(depth);
    case 4: return "abs(" + num_expr(depth - 1, labelled) + ")";
    case 5: return "(-" + num_expr(depth - 1, labelled) + ")";
    case 7: return chance(50) ? stateful(labelled) : literal();
    case 8: return expr_range(depth, labelled);
    case 9: return default_num(depth, labelled);
    default: {
      return "(" + num_expr(depth - 1, labelled) + " " + arith_op() + " " +
             num_expr(depth - 1, labelled) + ")";
    }
  }
}

std::string comparison(int depth, bool labelled) {
  static const std::vector<std::string> ops{"<", "<=", ">", ">=", "==", "!="};
  std::string lhs = num_expr(depth, labelled);
  std::string rhs = chance(60) ? literal() : num_expr(depth, labelled);
  return "(" + lhs + " " + one_of(ops) + " " + rhs + ")";
}

/// A boolean expression. On the leftmost path only comparisons, and/or and
/// default (the firing value is the left operand of the deciding comparison:
/// A's for `A and B`, B's for `A or B` when only B holds, the taken side's for
/// default; docs/semantics.md).
std::string bool_expr(int depth, bool labelled, bool left_path) {
  int choice = depth <= 0 || chance(40) ? 0 : pick(0, 5);
  // On the leftmost path (it gives the firing value) no not/is_nan.
  if (left_path && (choice == 3 || choice == 4)) choice = 0;
  if (choice == 2 && left_path && excluded("orvalue")) choice = 1;
  if (choice == 3 && excluded("not")) choice = 0;
  if (choice == 4 && excluded("is_nan")) choice = 0;
  if (choice == 5 && excluded("default")) choice = 0;
  switch (choice) {
    case 0: return comparison(depth - 1, labelled);
    case 1:
    case 2:
      return "(" + bool_expr(depth - 1, labelled, left_path) + (choice == 1 ? " and " : " or ") +
             bool_expr(depth - 1, labelled, false) + ")";
    case 3: return "(not " + bool_expr(depth - 1, labelled, false) + ")";
    case 4: return "is_nan(" + num_expr(depth - 1, labelled) + ")";
    default: return default_bool(depth, labelled);
  }
}

/// `lo_time`: the least number of seconds or epochs (`every` needs 1).
std::string duration(int lo_samples, int hi_samples, int lo_steps, int hi_steps,
                     bool allow_time = true, int hi_seconds = 10, int lo_time = 0) {
  if (allow_time && chance(15) && !excluded("time"))
    return std::to_string(pick(lo_time, hi_seconds)) + "s";
  if (allow_time && chance(8) && !excluded("epochs"))
    return std::to_string(pick(lo_time, 3)) + (chance(50) ? " epochs" : " epoch");
  if (chance(10) && !excluded("evals")) return std::to_string(pick(lo_samples, hi_samples)) + " evals";
  if (chance(50)) return std::to_string(pick(lo_samples, hi_samples)) + " samples";
  return std::to_string(pick(lo_steps, hi_steps)) + " steps";
}

std::string rule_text(int index) {
  bool labelled = chance(50);
  std::string cond = chance(5) && !excluded("is_nan") ? "is_nan(" + num_expr(1, labelled) + ")"
                               : bool_expr(pick(1, 3), labelled, true);
  std::string text = "rule r" + std::to_string(index) + ":\n  when " + cond;
  if (chance(40) && !excluded("for")) text += " for " + duration(1, 3, 1, 6);
  if (chance(25) && !excluded("after")) text += "\n  after " + duration(1, 4, 0, 10);
  // until: long enough, mostly, that the rule is evaluated a while first.
  if (chance(25) && !excluded("until")) text += "\n  until " + duration(1, 12, 1, 40, true, 40);
  if (chance(25) && !excluded("every"))
    text += "\n  every " + duration(1, 3, 1, 5, !excluded("timecadence"), 4, 1);
  if (chance(35) && !excluded("cooldown")) text += "\n  cooldown " + duration(1, 3, 1, 5);
  if (chance(25) && !excluded("in")) text += chance(50) ? "\n  in train" : "\n  in eval";
  return text + "\n  do log\n";
}

// ---- trace generator ---------------------------------------------------------

struct Trace {
  std::vector<ref::Observation> obs;
};

/// `m_percent`: how often the series m (absent from many traces) is fed.
ref::Observation gen_observation(std::int64_t step, const std::string& mode, int m_percent) {
  static const std::vector<double> finite{0, 1, 2, -1, 0.5, nan, 3, 1};
  static const std::vector<double> with_inf{0, 1, 2, -1, 0.5, nan, 3, 1, INFINITY, -INFINITY};
  const auto& values = excluded("inf") ? finite : with_inf;
  static const std::vector<ref::SeriesSample> all{
      {"a", {}, 0}, {"b", {}, 0}, {"c", {}, 0},
      {"v", {{"k", "1"}}, 0}, {"v", {{"k", "2"}}, 0}, {"v", {{"k", "3"}}, 0},
      {"w", {{"j", "x"}, {"k", "1"}}, 0}, {"w", {{"j", "y"}, {"k", "1"}}, 0},
      {"w", {{"j", "x"}, {"k", "2"}}, 0}};
  ref::Observation o;
  o.step = step;
  o.mode = mode;
  for (const auto& s : all) {
    if (!chance(50) || (s.name == "w" && excluded("multikey"))) continue;
    auto sample = s;
    do {
      sample.value = one_of(values);
    } while (std::isnan(sample.value) && (excluded("nan") || s.name == "c"));  // c: never NaN
    o.samples.push_back(sample);
  }
  if (m_percent > 0 && chance(m_percent)) o.samples.push_back({"m", {}, one_of(values)});
  // The same series twice in one observation: the last value wins.
  if (!o.samples.empty() && chance(5) && !excluded("dup")) {
    auto again = o.samples[static_cast<std::size_t>(pick(0, static_cast<int>(o.samples.size()) - 1))];
    again.value = one_of(values);
    if (again.name == "c" && std::isnan(again.value)) again.value = 2;
    o.samples.push_back(again);
  }
  // Feed in a random order: firing order must not depend on it.
  if (o.samples.size() > 1 && chance(50)) {
    std::size_t k = static_cast<std::size_t>(pick(1, static_cast<int>(o.samples.size()) - 1));
    std::rotate(o.samples.begin(), o.samples.begin() + static_cast<std::ptrdiff_t>(k),
                o.samples.end());
  }
  return o;
}

/// Steps never decrease within a mode, except for the odd deliberately
/// out-of-order observation (ignored by the engine). In some traces eval
/// observations count their own steps, below the training steps. Times
/// (seconds) never decrease; a few observations have none.
///
/// A mode never first appears below the latest step of the modes already
/// seen: step windows are exact only then (docs/semantics.md, "Step windows
/// across modes"), so traces with their own eval steps open with an empty
/// eval and an empty train observation at step 0.
Trace gen_trace(const std::string& program) {
  static const std::vector<int> gaps{0, 1, 1, 1, 2, 5};
  static const std::vector<double> time_gaps{0, 0.5, 1, 1, 2, 5};
  Trace t;
  int n = pick(1, 60);
  const bool uses_before = program.find("before(") != std::string::npos;
  const bool own_eval_steps =
      chance(30) && !excluded("evalsteps") && !(uses_before && excluded("beforeevalsteps"));
  const bool timed = chance(80) && !excluded("time");
  const bool with_epochs = chance(50) && !excluded("epochs");
  double epoch = pick(0, 1);
  const bool no_untimed = excluded("untimed") || (uses_before && excluded("beforeuntimed"));
  // m, the argument of default(): absent from half the traces, else sparse or frequent.
  static const std::vector<int> m_rates{0, 0, 0, 0, 10, 30, 60, 90};
  const int m_percent = excluded("default") ? 0 : one_of(m_rates);
  std::int64_t step = pick(0, 3), eval_step = 0;
  double time = 1000;
  std::set<std::string> seen;
  if (own_eval_steps) {
    // Both modes open at step 0: the eval counter runs behind training, and
    // training may come in only after eval observations moved its counter on.
    for (const char* mode : {"eval", "train"}) {
      ref::Observation opening;
      opening.step = 0;
      opening.mode = mode;
      opening.time = time;
      t.obs.push_back(std::move(opening));
      seen.insert(mode);
    }
  }
  for (int i = 0; i < n; ++i) {
    std::string mode = chance(25) && !excluded("eval") ? "eval" : "train";
    std::int64_t& counter = own_eval_steps && mode == "eval" ? eval_step : step;
    std::int64_t at = counter;
    if (counter > 0 && seen.count(mode) && chance(4) && !excluded("order"))
      at = counter - pick(1, 2);
    seen.insert(mode);
    auto o = gen_observation(at, mode, m_percent);
    if (timed && (!chance(5) || no_untimed)) o.time = time;
    // The epoch, as trainers log it: now and then, never decreasing.
    if (with_epochs && chance(60)) {
      if (chance(15)) epoch += 1;
      o.samples.push_back({"epoch", {}, epoch});
    }
    t.obs.push_back(std::move(o));
    if (at == counter) counter += one_of(gaps);
    time += one_of(time_gaps);
  }
  return t;
}

std::string series_key(const ref::SeriesSample& s) {
  std::string key = s.name;
  if (!s.labels.empty()) {
    key += '{';
    for (std::size_t i = 0; i < s.labels.size(); ++i) {
      if (i) key += ',';
      key += s.labels[i].first + "=\"" + s.labels[i].second + "\"";
    }
    key += '}';
  }
  return key;
}

std::string dump_trace(const Trace& t) {
  std::ostringstream os;
  os.precision(17);  // exact doubles: the dump must replay the case
  for (const auto& o : t.obs) {
    os << "  step " << o.step << " " << o.mode;
    if (!std::isnan(o.time)) os << " t=" << o.time;
    os << ":";
    for (const auto& s : o.samples) os << " " << series_key(s) << "=" << s.value;
    os << "\n";
  }
  return os.str();
}

std::string dump_firings(const std::vector<ref::Firing>& fs) {
  std::string out;
  for (const auto& f : fs) out += "  " + ref::to_string(f) + "\n";
  return out.empty() ? "  (none)\n" : out;
}

/// Runs the engine over the trace. With `split_at` set, the observations from
/// that index on go to a fresh engine restored from the first one's state.
std::vector<ref::Firing> run_engine(const vigil::Program& program, const Trace& t,
                                    std::optional<std::size_t> split_at = std::nullopt) {
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;  // `log` is recorded, not called
  auto engine = std::make_unique<vigil::Engine>(program, options);
  std::vector<ref::Firing> out;
  for (std::size_t i = 0; i < t.obs.size(); ++i) {
    if (split_at && i == *split_at) {
      std::string state = engine->save_state();
      engine = std::make_unique<vigil::Engine>(program, options);
      engine->restore_state(state);
    }
    const auto& o = t.obs[i];
    std::vector<vigil::Sample> samples;
    for (const auto& s : o.samples) samples.push_back({*engine->series(series_key(s)), s.value});
    for (const auto& f : engine->observe(o.step, samples, {.mode = o.mode, .time = o.time}))
      out.push_back({f.rule_name(), f.step, ref::labels_string(*f.labels), f.value, f.pending_since});
  }
  return out;
}

std::vector<ref::Firing> run_reference(ref::Evaluator& evaluator, const Trace& t) {
  std::vector<ref::Firing> out;
  for (const auto& o : t.obs) {
    auto fs = evaluator.observe(o);
    out.insert(out.end(), fs.begin(), fs.end());
  }
  return out;
}

// ---- the reference checked by hand first -------------------------------------

/// The reference's firings for a hand-written case; the engine must agree on
/// it too (a failure names which side moved).
std::vector<ref::Firing> run_reference_text(const std::string& text, const Trace& t) {
  ref::Evaluator evaluator(text);
  EXPECT_EQ(evaluator.error(), "");
  auto want = run_reference(evaluator, t);
  auto compiled = vigil::compile_string(text, "hand.rules");
  EXPECT_TRUE(compiled.ok()) << compiled.format_diagnostics();
  if (compiled.ok()) {
    auto got = run_engine(*compiled.program, t);
    EXPECT_EQ(got, want) << "engine disagrees with the reference on\n"
                         << text << "\ntrace:\n" << dump_trace(t) << "engine:\n" << dump_firings(got)
                         << "reference:\n" << dump_firings(want);
  }
  return want;
}

Trace scalar_trace(const std::vector<double>& a, std::int64_t first_step = 1) {
  Trace t;
  for (std::size_t i = 0; i < a.size(); ++i)
    t.obs.push_back({first_step + static_cast<std::int64_t>(i), "train", {{"a", {}, a[i]}}});
  return t;
}

std::vector<std::int64_t> steps_of(const std::vector<ref::Firing>& fs) {
  std::vector<std::int64_t> out;
  for (const auto& f : fs) out.push_back(f.step);
  return out;
}

// A time cadence skips observations without a time; epochs count from the
// `epoch` series in for and cooldown too.
TEST(ReferenceSelf, TimeCadenceAndEpochs) {
  Trace cadence;
  auto obs = [](std::int64_t step, double time, double a) {
    return ref::Observation{step, "train", {{"a", {}, a}}, time};
  };
  for (const auto& o : {obs(0, nan, 1), obs(1, 1000, 1), obs(2, nan, 1), obs(3, 1001, 0),
                        obs(4, 1002, 0), obs(5, 1003, 1), obs(6, 1004, 1)})
    cadence.obs.push_back(o);
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 every 2s do log", cadence)),
            (std::vector<std::int64_t>{1, 6}));

  Trace epochs;
  const double epoch_at[] = {0, 0, 1, 1, 2, 3};
  for (std::int64_t i = 0; i < 6; ++i)
    epochs.obs.push_back({i + 1, "train", {{"epoch", {}, epoch_at[i]}, {"a", {}, 1}}});
  EXPECT_EQ(steps_of(run_reference_text(
                "rule r: when a > 0 for 1 epoch cooldown 2 epochs do log", epochs)),
            (std::vector<std::int64_t>{3, 6}));
}

// `^`, infinite samples, and label sets of two keys.
TEST(ReferenceSelf, PowerInfinityAndTwoLabelKeys) {
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a ^ 2 > 3 do log",
                                        scalar_trace({2, INFINITY, -INFINITY, 1, -2}))),
            (std::vector<std::int64_t>{1, 5}));
  Trace t;
  t.obs.push_back({1, "train", {{"w", {{"j", "x"}, {"k", "1"}}, 2}, {"w", {{"j", "y"}, {"k", "1"}}, 5},
                                {"w", {{"j", "x"}, {"k", "2"}}, 0}}});
  t.obs.push_back({2, "train", {{"w", {{"j", "x"}, {"k", "2"}}, 3}}});
  const auto fired = run_reference_text("rule r: when w{j=\"x\"} > 1 do log", t);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].step, 1);
  EXPECT_EQ(fired[0].labels, "j=x,k=1");
  EXPECT_EQ(fired[1].step, 2);
  EXPECT_EQ(fired[1].labels, "j=x,k=2");
}

TEST(ReferenceSelf, ForCooldownAndEdge) {
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 1 for 3 samples do log",
                                        scalar_trace({2, 2, 0, 2, 2, 2, 2}))),
            (std::vector<std::int64_t>{6}));
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 1 do log", scalar_trace({2, 2, 0, 2}))),
            (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 1 for 2 samples cooldown 3 steps do log",
                                        scalar_trace({2, 2, 2, 2, 2, 2, 2, 2, 0, 2, 2}, 0))),
            (std::vector<std::int64_t>{1, 4, 7, 10}));
  // SPEC §2: the cooldown also holds across runs (steps 1..8).
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 cooldown 5 steps do log",
                                        scalar_trace({1, 0, 1, 1, 1, 1, 0, 1}))),
            (std::vector<std::int64_t>{1, 6}));
  // Evaluation cooldowns count false evaluations too.
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 cooldown 3 samples do log",
                                        scalar_trace({1, 0, 1, 1, 1, 1, 1}))),
            (std::vector<std::int64_t>{1, 4, 7}));
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 every 2 samples after 1 samples "
                                        "cooldown 1 samples do log",
                                        scalar_trace({1, 1, 1, 1, 1, 1}))),
            (std::vector<std::int64_t>{2, 4, 6}));
}

TEST(ReferenceSelf, VectorsRangesAndValues) {
  Trace t;
  t.obs.push_back({1, "train", {{"v", {{"k", "1"}}, 1}, {"v", {{"k", "2"}}, 5}}});
  t.obs.push_back({3, "train", {{"v", {{"k", "1"}}, 3}}});
  t.obs.push_back({4, "eval", {{"v", {{"k", "2"}}, nan}, {"a", {}, 1}}});
  auto fs = run_reference_text(
      "rule r: when sum(v[3 steps]) > 3 cooldown 1 samples do log\n"
      "rule m: when max(v) - 1 >= 3 cooldown 1 samples do log\n"
      "rule n: when v{k!~\"1\"} != 0 or max(v) > 100 do log\n",
      t);
  // step 1: r: k=1 sum 1, k=2 sum 5 (fires); m: max 5 - 1 = 4 (fires).
  // step 3: r: only k=1 fresh, window (0,3]: 1+3 = 4 (fires, value 4); m: 5-1 again.
  //         n: k=2 is stale but fresh through the scalar max(v): still true, no re-fire.
  // step 4: r: k=2 window (1,4] = NaN -> false; m: max with NaN is NaN -> false;
  //         n: NaN != 0 is false, NaN > 100 is false.
  std::vector<ref::Firing> want{{"r", 1, "k=2", 5.0, 1},
                                {"m", 1, "", 4.0, 1},
                                {"n", 1, "k=2", 5.0, 1},
                                {"r", 3, "k=1", 4.0, 3},
                                {"m", 3, "", 4.0, 1}};
  EXPECT_EQ(fs, want) << dump_firings(fs);
}

TEST(ReferenceSelf, UntilClause) {
  const auto ones = scalar_trace({1, 1, 1, 1, 1, 1});
  // Progress of `N samples` = opportunities before this one; skipped ones count.
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 until 3 samples cooldown 1 samples do log", ones)),
            (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(steps_of(run_reference_text(
                "rule r: when a > 0 after 1 samples until 3 samples cooldown 1 samples do log", ones)),
            (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 until 3 steps cooldown 1 samples do log", ones)),
            (std::vector<std::int64_t>{1, 2}));
  // every counts only the opportunities that passed after and until (2..5 here).
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 after 1 samples until 5 samples every 2 samples "
                                        "cooldown 1 samples do log",
                                        ones)),
            (std::vector<std::int64_t>{2, 4}));
  // Seconds since the first timed observation; an untimed one (NaN progress) passes neither.
  Trace timed = scalar_trace({1, 1, 1, 1, 1});
  const double times[] = {10, 11, nan, 12, 13};
  for (std::size_t i = 0; i < timed.obs.size(); ++i) timed.obs[i].time = times[i];
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 until 2s cooldown 1 samples do log", timed)),
            (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(steps_of(run_reference_text("rule r: when a > 0 after 1s cooldown 1 samples do log", timed)),
            (std::vector<std::int64_t>{2, 4, 5}));
}

TEST(ReferenceSelf, DefaultAndBefore) {
  Trace t;
  t.obs.push_back({1, "train", {{"a", {}, 2}}});
  t.obs.push_back({2, "train", {{"a", {}, 0}, {"m", {}, 5}}});
  t.obs.push_back({3, "train", {{"a", {}, 3}}});
  t.obs.push_back({4, "train", {{"m", {}, 0}}});
  // step 1: m missing, a's fresh 2; step 2: m's 5; step 3: m stale (no
  // opportunity, although a is fresh); step 4: m's 0 is false.
  auto fs = run_reference_text("rule d: when default(m, a) > 1 cooldown 1 samples do log", t);
  EXPECT_EQ(fs, (std::vector<ref::Firing>{{"d", 1, "", 2.0, 1}, {"d", 2, "", 5.0, 1}})) << dump_firings(fs);

  Trace u;
  const std::pair<std::int64_t, double> samples[] = {{1, 10}, {2, 20}, {4, 40}, {7, 70}};
  for (const auto& [step, value] : samples) u.obs.push_back({step, "train", {{"a", {}, value}}});
  fs = run_reference_text(
      "rule b: when before(a[2]) >= 0 cooldown 1 samples do log\n"
      "rule s: when before(a[3 steps]) >= 0 cooldown 1 samples do log\n",
      u);
  // before(a[2]) is the 3rd newest sample; before(a[3 steps]) the newest with step <= cur - 3.
  EXPECT_EQ(fs, (std::vector<ref::Firing>{{"b", 4, "", 10.0, 4},
                                          {"s", 4, "", 10.0, 4},
                                          {"b", 7, "", 20.0, 4},
                                          {"s", 7, "", 40.0, 4}}))
      << dump_firings(fs);
}

TEST(ReferenceSelf, FiringValueOfOrAndDefault) {
  Trace t;
  t.obs.push_back({1, "train", {{"a", {}, 0}, {"b", {}, 2}}});
  t.obs.push_back({2, "train", {{"a", {}, 7}, {"b", {}, 3}, {"m", {}, 4}}});
  // `A or B`: B's left operand when only B holds, else A's; default: the taken side's.
  auto fs = run_reference_text(
      "rule o: when a > 5 or b > 1 cooldown 1 samples do log\n"
      "rule d: when default(m > 1, b > 1) cooldown 1 samples do log\n",
      t);
  EXPECT_EQ(fs, (std::vector<ref::Firing>{{"o", 1, "", 2.0, 1},
                                          {"d", 1, "", 2.0, 1},
                                          {"o", 2, "", 7.0, 1},
                                          {"d", 2, "", 4.0, 1}}))
      << dump_firings(fs);
}

TEST(ReferenceSelf, ExpressionRanges) {
  Trace t;
  const double a[] = {2, 0, 3, 0, nan};
  for (std::int64_t i = 0; i < 5; ++i) {
    ref::Observation o{i + 1, "train", {{"a", {}, a[i]}}};
    if (i % 2 == 0) o.samples.push_back({"b", {}, 1});
    t.obs.push_back(o);
  }
  auto fs = run_reference_text(
      "rule c: when count((a > 1)[3]) >= 0 cooldown 1 samples do log\n"
      "rule m: when mean((a - b)[2 steps]) >= -100 cooldown 1 samples do log\n",
      t);
  // a > 1: T F T F F (NaN is false) -> counts 2, 1, 1 from step 3.
  // a - b is fresh at every step (a is): 1 -1 2 -1 NaN -> (cur-2, cur] means 1 0 0.5 0.5 NaN.
  EXPECT_EQ(fs, (std::vector<ref::Firing>{{"m", 1, "", 1.0, 1},
                                          {"m", 2, "", 0.0, 1},
                                          {"c", 3, "", 2.0, 3},
                                          {"m", 3, "", 0.5, 1},
                                          {"c", 4, "", 1.0, 3},
                                          {"m", 4, "", 0.5, 1},
                                          {"c", 5, "", 1.0, 3}}))
      << dump_firings(fs);

  // A label-less series broadcast into a labelled one: a new `a` makes every
  // element of v - a fresh, so each label set's history gets a sample.
  Trace v;
  v.obs.push_back({1, "train", {{"v", {{"k", "1"}}, 3}, {"v", {{"k", "2"}}, 1}}});
  v.obs.push_back({2, "train", {{"a", {}, 1}}});
  v.obs.push_back({3, "train", {{"v", {{"k", "1"}}, 5}}});
  v.obs.push_back({4, "train", {{"a", {}, 0}}});
  fs = run_reference_text("rule l: when sum((v - a)[2]) > 0 cooldown 1 samples do log", v);
  EXPECT_EQ(fs, (std::vector<ref::Firing>{{"l", 3, "k=1", 6.0, 3},
                                          {"l", 4, "k=1", 9.0, 3},
                                          {"l", 4, "k=2", 1.0, 4}}))
      << dump_firings(fs);
}

// ---- replaying a printed case ---------------------------------------------------

/// Parses a failure message as printed by the property (`program:` lines, then
/// `trace:` lines `  step N MODE [t=T]: key=value ...`), so that a case can be
/// edited by hand and rerun: VIGIL_REF_CASE=file reference_property_test
/// --gtest_filter='*Replay*'.
bool parse_case(const std::string& text, std::string& program, Trace& trace) {
  auto p = text.find("program:\n"), t = text.find("trace:\n");
  if (p == std::string::npos || t == std::string::npos || t < p) return false;
  program = text.substr(p + 9, t - p - 9);
  std::istringstream lines(text.substr(t + 7));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string word;
    if (!(in >> word) || word != "step") break;
    ref::Observation o;
    std::string mode;
    in >> o.step >> mode;
    if (!mode.empty() && mode.back() == ':') mode.pop_back();
    o.mode = mode;
    while (in >> word) {
      if (word.rfind("t=", 0) == 0) {
        if (word.back() == ':') word.pop_back();
        o.time = std::strtod(word.c_str() + 2, nullptr);
        continue;
      }
      if (word == ":") continue;
      auto eq = word.rfind('=');
      ref::SeriesSample sample;
      std::string key = word.substr(0, eq);
      sample.value = std::strtod(word.c_str() + eq + 1, nullptr);
      auto brace = key.find('{');
      sample.name = key.substr(0, brace);
      if (brace != std::string::npos) {
        // {k="v",k2="w"}
        std::string body = key.substr(brace + 1, key.size() - brace - 2);
        std::size_t at = 0;
        while (at < body.size()) {
          auto e = body.find('=', at);
          auto q2 = body.find('"', e + 2);
          sample.labels.emplace_back(body.substr(at, e - at), body.substr(e + 2, q2 - e - 2));
          at = q2 + 2;
        }
      }
      o.samples.push_back(sample);
    }
    trace.obs.push_back(o);
  }
  return true;
}

TEST(ReferenceReplay, PrintedCase) {
  const char* path = std::getenv("VIGIL_REF_CASE");
  if (path == nullptr) GTEST_SKIP() << "set VIGIL_REF_CASE to a printed failure to replay it";
  std::ifstream file(path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  std::string program;
  Trace trace;
  ASSERT_TRUE(parse_case(buffer.str(), program, trace)) << "no program:/trace: sections in " << path;
  auto want = run_reference_text(program, trace);
  std::cout << "program:\n" << program << "trace:\n" << dump_trace(trace) << "reference:\n"
            << dump_firings(want);
}

// ---- the property --------------------------------------------------------------

RC_GTEST_PROP(ReferenceProperty, EngineFiringsEqualReference, ()) {
  int rules = pick(1, 4);
  std::string text;
  for (int i = 0; i < rules; ++i) text += rule_text(i);
  Trace trace = gen_trace(text);

  ref::Evaluator evaluator(text);
  if (!evaluator.error().empty())
    RC_FAIL("reference cannot run the generated program:\n" + text + "\n" + evaluator.error());
  auto compiled = vigil::compile_string(text, "gen.rules");
  if (!compiled.ok())
    RC_FAIL("engine rejects the generated program:\n" + text + "\n" + compiled.format_diagnostics());

  auto want = run_reference(evaluator, trace);
  auto got = run_engine(*compiled.program, trace);
  // Shows in the run summary that most cases exercise firings.
  RC_TAG(want.empty() ? "no firing" : want.size() < 5 ? "1-4 firings" : "5+ firings");
  // ... and how often the newer constructs come up.
  RC_CLASSIFY(text.find("until") != std::string::npos, "until");
  RC_CLASSIFY(text.find("default(") != std::string::npos, "default");
  RC_CLASSIFY(text.find("before(") != std::string::npos, "before");
  RC_CLASSIFY(text.find(")[") != std::string::npos, "expression range");
  RC_CLASSIFY(text.find(" ^ ") != std::string::npos, "^");
  RC_CLASSIFY(text.find("epoch") != std::string::npos, "epochs");
  if (got != want) {
    RC_FAIL("engine and reference disagree\nprogram:\n" + text + "trace:\n" + dump_trace(trace) +
            "engine:\n" + dump_firings(got) + "reference:\n" + dump_firings(want));
  }
}

// Saving the engine state at any point and continuing in a fresh engine is
// invisible in the firings (SPEC §4: a resumed run continues its rules).
RC_GTEST_PROP(ReferenceProperty, SaveRestoreIsInvisible, ()) {
  int rules = pick(1, 4);
  std::string text;
  for (int i = 0; i < rules; ++i) text += rule_text(i);
  Trace trace = gen_trace(text);
  auto split = static_cast<std::size_t>(pick(0, static_cast<int>(trace.obs.size())));
  auto compiled = vigil::compile_string(text, "gen.rules");
  if (!compiled.ok())
    RC_FAIL("engine rejects the generated program:\n" + text + "\n" + compiled.format_diagnostics());
  auto whole = run_engine(*compiled.program, trace);
  auto resumed = run_engine(*compiled.program, trace, split);
  if (whole != resumed) {
    RC_FAIL("save/restore changes the firings (split before observation " + std::to_string(split) +
            ")\nprogram:\n" + text + "trace:\n" + dump_trace(trace) + "uninterrupted:\n" +
            dump_firings(whole) + "resumed:\n" + dump_firings(resumed));
  }
}

}  // namespace
