#include "tests/reference/reference_evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <regex>
#include <sstream>
#include <type_traits>

namespace vigil::reference {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

bool same_double(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0 || a == b;  // 0.0 == -0.0 too
}

template <class T>
const T* as(const ast::Expr& e) {
  return std::get_if<T>(&e.node);
}

/// The correctly rounded sum of finite doubles (Shewchuk's exact partials,
/// then a round-half-even fix-up); with an infinity, the plain sum.
double exact_sum(const std::vector<double>& v) {
  for (double x : v)
    if (std::isinf(x)) {
      double plain = 0;
      for (double y : v) plain += y;
      return plain;
    }
  // partials: non-overlapping, increasing magnitude, summing exactly to the total.
  std::vector<double> partials;
  for (double x : v) {
    std::size_t kept = 0;
    for (double y : partials) {
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      const double hi = x + y;
      const double lo = y - (hi - x);
      if (lo != 0) partials[kept++] = lo;
      x = hi;
    }
    partials.resize(kept);
    partials.push_back(x);
  }
  if (partials.empty()) return 0;  // not reached: windows are never empty
  std::size_t n = partials.size();
  double hi = partials[--n];
  double lo = 0;
  while (n > 0) {
    const double x = hi;
    const double y = partials[--n];
    hi = x + y;
    lo = y - (hi - x);
    if (lo != 0) break;
  }
  // hi + lo is exact; when lo is exactly half an ulp and the rest of the
  // partials push the same way, round away instead of to even.
  if (n > 0 && ((lo < 0 && partials[n - 1] < 0) || (lo > 0 && partials[n - 1] > 0))) {
    const double y = lo * 2;
    const double x = hi + y;
    if (y == x - hi) hi = x;
  }
  return hi + 0.0;  // a sum starts from +0: the sum of -0.0 alone is +0.0
}

/// Reductions over the samples of a window, by the letter of the evaluation semantics (SPEC §2):
/// a NaN sample makes every numeric reduction NaN except count/first/last.
double reduce(const std::string& fn, const std::vector<double>& v) {
  if (fn == "count") return static_cast<double>(v.size());
  if (fn == "first") return v.front();
  if (fn == "last") return v.back();
  for (double x : v)
    if (std::isnan(x)) return nan;
  if (fn == "delta") return v.back() - v.front();
  if (fn == "min") return *std::min_element(v.begin(), v.end());
  if (fn == "max") return *std::max_element(v.begin(), v.end());
  // The exact sum, rounded once: sums are compensated (SPEC), and values such
  // as 1/3 from ranges over expressions are not exact in binary.
  const double sum = exact_sum(v);
  if (fn == "sum") return sum;
  if (fn == "mean") return sum / static_cast<double>(v.size());
  return nan;
}

bool is_stateful_fn(const std::string& fn) {
  return fn == "prev" || fn == "ewma" || fn == "best" || fn == "steps_since_best";
}

double seconds_per(ast::DurUnit u) {
  switch (u) {
    case ast::DurUnit::minutes: return 60;
    case ast::DurUnit::hours: return 3600;
    default: return 1;
  }
}

bool is_time_unit(ast::DurUnit u) {
  return u == ast::DurUnit::seconds || u == ast::DurUnit::minutes || u == ast::DurUnit::hours;
}

bool is_range_fn(const std::string& fn) {
  return fn == "mean" || fn == "min" || fn == "max" || fn == "sum" || fn == "count" ||
         fn == "delta" || fn == "first" || fn == "last" || fn == "before";
}

bool is_series(const ast::Expr& e) { return as<ast::Name>(e) || as<ast::Selector>(e); }

/// Whether an expression is a condition (boolean) rather than a number; the
/// reference decides this syntactically, which is exact for its subset.
bool is_bool(const ast::Expr& e) {
  if (as<ast::Bool>(e)) return true;
  if (const auto* u = as<ast::Unary>(e)) return u->op == ast::UnaryOp::not_;
  if (const auto* b = as<ast::Binary>(e)) {
    switch (b->op) {
      case ast::BinaryOp::add:
      case ast::BinaryOp::sub:
      case ast::BinaryOp::mul:
      case ast::BinaryOp::div:
      case ast::BinaryOp::mod:
      case ast::BinaryOp::pow: return false;
      default: return true;
    }
  }
  if (const auto* c = as<ast::Call>(e)) {
    if (c->fn == "is_nan") return true;
    if (c->fn == "default" && !c->args.empty()) return is_bool(*c->args[0]);
  }
  return false;
}

}  // namespace

bool operator==(const Firing& a, const Firing& b) {
  if (a.rule != b.rule || a.step != b.step || a.labels != b.labels ||
      a.pending_since != b.pending_since || a.value.has_value() != b.value.has_value())
    return false;
  return !a.value || same_double(*a.value, *b.value);
}

std::string labels_string(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=" + v;
  }
  return out;
}

std::string to_string(const Firing& f) {
  std::ostringstream os;
  os.precision(17);
  os << f.rule << " @" << f.step << " {" << f.labels << "} value=";
  if (f.value)
    os << *f.value;
  else
    os << "none";
  os << " pending_since=" << f.pending_since;
  return os.str();
}

Evaluator::Evaluator(const std::string& text) {
  std::uint32_t file = sources_.add("gen.rules", text);
  parsed_ = grammar::parse(sources_, file);
  if (!parsed_.ok()) {
    error_ = format_diagnostics(parsed_.diagnostics, sources_);
    return;
  }
  for (const auto& st : parsed_.file.statements) {
    const auto* decl = std::get_if<ast::RuleDecl>(&st);
    if (decl == nullptr || decl->is_template || decl->name.empty() || !decl->clauses.when) {
      error_ = "reference supports named non-template rules only";
      return;
    }
    Rule r;
    r.name = decl->name;
    r.when = decl->clauses.when.get();
    r.for_ = span(decl->clauses.for_);
    r.after = span(decl->clauses.after);
    r.until = span(decl->clauses.until);
    r.every = span(decl->clauses.every);
    r.cooldown = span(decl->clauses.cooldown);
    r.mode = decl->clauses.mode;
    if (!error_.empty()) return;
    if (!check(*r.when)) {
      error_ = "reference does not support the condition of rule " + r.name;
      return;
    }
    collect_expression_ranges(*r.when);
    rules_.push_back(std::move(r));
  }
}

void Evaluator::collect_expression_ranges(const ast::Expr& e) {
  std::visit(
      [&](const auto& n) {
        using T = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<T, ast::Unary>) {
          collect_expression_ranges(*n.operand);
        } else if constexpr (std::is_same_v<T, ast::Binary>) {
          collect_expression_ranges(*n.lhs);
          collect_expression_ranges(*n.rhs);
        } else if constexpr (std::is_same_v<T, ast::Call>) {
          for (const auto& a : n.args) collect_expression_ranges(*a);
        } else if constexpr (std::is_same_v<T, ast::Subscript>) {
          if (is_series(*n.base)) return;
          collect_expression_ranges(*n.base);  // inner ranges first: E reads them
          expr_ranges_.push_back(&n);
          expr_history_[&n];
        }
      },
      e.node);
}

std::optional<Evaluator::Span> Evaluator::span(const ast::ExprPtr& e) {
  if (!e) return std::nullopt;
  const auto* d = as<ast::Duration>(*e);
  const ast::Number* n = d && d->amount ? as<ast::Number>(*d->amount) : nullptr;
  if (n == nullptr) {
    error_ = "reference supports only `N samples|steps|evals` and time durations";
    return std::nullopt;
  }
  // In clauses `evals` counts exactly as `samples` does (evaluations or
  // opportunities of the rule); only ranges distinguish them.
  if (d->unit == ast::DurUnit::evals) return Span{ast::DurUnit::samples, n->value};
  if (is_time_unit(d->unit)) return Span{ast::DurUnit::seconds, n->value * seconds_per(d->unit)};
  return Span{d->unit, n->value};
}

bool Evaluator::check(const ast::Expr& e) {
  return std::visit(
      [&](const auto& n) -> bool {
        using T = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<T, ast::Number> || std::is_same_v<T, ast::Bool>) {
          return true;
        } else if constexpr (std::is_same_v<T, ast::Name> || std::is_same_v<T, ast::Selector>) {
          return true;
        } else if constexpr (std::is_same_v<T, ast::Unary>) {
          return check(*n.operand);
        } else if constexpr (std::is_same_v<T, ast::Binary>) {
          return check(*n.lhs) && check(*n.rhs);
        } else if constexpr (std::is_same_v<T, ast::Call>) {
          if (is_stateful_fn(n.fn)) {
            if (n.args.empty() || (!as<ast::Name>(*n.args[0]) && !as<ast::Selector>(*n.args[0])))
              return false;
            for (std::size_t i = 1; i < n.args.size(); ++i)
              if (!as<ast::Number>(*n.args[i]) && !as<ast::String>(*n.args[i])) return false;
            return n.args.size() == (n.fn == "prev" ? 1u : n.fn == "steps_since_best" ? 3u : 2u);
          }
          if (n.fn == "default")
            return n.args.size() == 2 && check(*n.args[0]) && check(*n.args[1]) &&
                   is_bool(*n.args[0]) == is_bool(*n.args[1]);
          if (n.args.size() != 1) return false;
          if (const auto* s = as<ast::Subscript>(*n.args[0])) {
            if (!is_range_fn(n.fn)) return false;
            if (!is_series(*s->base)) {
              // A range over an expression; over a condition only count.
              if (!check(*s->base)) return false;
              if (is_bool(*s->base) && n.fn != "count") return false;
            }
            if (const auto* num = as<ast::Number>(*s->size)) return num->value >= 1;
            const auto* d = as<ast::Duration>(*s->size);
            return d && d->amount && as<ast::Number>(*d->amount) &&
                   d->unit != ast::DurUnit::epochs;
          }
          if (n.fn == "abs" || n.fn == "is_nan" || n.fn == "max" || n.fn == "min" || n.fn == "sum" ||
              n.fn == "mean" || n.fn == "count")
            return check(*n.args[0]);
          return false;
        } else {
          return false;
        }
      },
      e.node);
}

std::vector<const Evaluator::Series*> Evaluator::select(const ast::Expr& base) const {
  std::string name;
  const std::vector<ast::LabelMatcher>* matchers = nullptr;
  if (const auto* n = as<ast::Name>(base)) {
    name = n->name;
  } else if (const auto* s = as<ast::Selector>(base)) {
    name = s->name;
    matchers = &s->matchers;
  }
  std::vector<const Series*> out;
  for (const auto& [key, series] : series_) {
    if (series.name != name || series.history.empty()) continue;
    bool ok = true;
    for (std::size_t i = 0; ok && matchers && i < matchers->size(); ++i) {
      const auto& m = (*matchers)[i];
      std::string value;  // a missing label matches as ""
      for (const auto& [k, v] : series.labels)
        if (k == m.label) value = v;
      switch (m.op) {
        case ast::MatchOp::eq: ok = value == m.value; break;
        case ast::MatchOp::ne: ok = value != m.value; break;
        // std::regex_match is a whole-string match: anchored, as RE2 FullMatch.
        case ast::MatchOp::re: ok = std::regex_match(value, std::regex(m.value)); break;
        case ast::MatchOp::nre: ok = !std::regex_match(value, std::regex(m.value)); break;
      }
    }
    if (ok) out.push_back(&series);
  }
  return out;
}

Evaluator::Value Evaluator::eval_range(const std::string& fn, const ast::Subscript& s) const {
  Value out;
  double amount = 0;
  ast::DurUnit unit = ast::DurUnit::samples;
  if (const auto* num = as<ast::Number>(*s.size)) {
    amount = num->value;
  } else {
    const auto& d = std::get<ast::Duration>(s.size->node);
    amount = std::get<ast::Number>(d.amount->node).value;
    unit = d.unit;
  }
  const bool by_steps = unit == ast::DurUnit::steps;
  const bool by_time = is_time_unit(unit);
  if (by_time && std::isnan(now_)) return out;  // undefined without a current time
  const double seconds = amount * seconds_per(unit);

  // The histories to reduce: a series' samples, or an expression range's
  // record of E (per label set; a boolean E stored as 1 / 0).
  std::vector<std::pair<const Labels*, const std::vector<Sample>*>> histories;
  bool counts_truth = false;
  if (is_series(*s.base)) {
    for (const Series* series : select(*s.base)) histories.emplace_back(&series->labels, &series->history);
  } else {
    counts_truth = is_bool(*s.base);
    for (const auto& [labels, h] : expr_history_.at(&s)) histories.emplace_back(&labels, &h);
  }

  for (const auto& [labels, hp] : histories) {
    const auto& h = *hp;
    if (h.empty()) continue;
    Elem e;
    e.fresh = h.back().obs == obs_index_;
    if (fn == "before") {
      // The newest sample older than the window, by arrival.
      const Sample* found = nullptr;
      std::int64_t skip = static_cast<std::int64_t>(amount);  // x[N]: the (N+1)-th newest
      for (auto it = h.rbegin(); it != h.rend() && !found; ++it) {
        if (by_steps) {
          if (static_cast<double>(it->step) <= static_cast<double>(step_) - amount) found = &*it;
        } else if (by_time) {
          if (it->time <= now_ - seconds) found = &*it;  // NaN times never match
        } else if (unit != ast::DurUnit::evals || it->eval) {
          if (skip-- == 0) found = &*it;
        }
      }
      if (!found) continue;
      e.num = found->value;
      out.elems[*labels] = e;
      continue;
    }
    std::vector<double> window;
    if (by_steps || by_time) {
      // (cur - N, cur] by step number, or (now - T, now] by time; samples
      // without a time are in no time window.
      for (const auto& sm : h) {
        bool in = by_steps ? static_cast<double>(sm.step) > static_cast<double>(step_) - amount &&
                                 sm.step <= step_
                           : sm.time > now_ - seconds && sm.time <= now_;
        if (in) window.push_back(sm.value);
      }
      std::size_t need = fn == "delta" ? 2 : 1;
      if (window.size() < need) continue;
    } else {
      // x[N] / x[N evals]: the last N samples (taken in eval observations);
      // defined once there are N of them.
      std::vector<double> all;
      for (const auto& sm : h)
        if (unit != ast::DurUnit::evals || sm.eval) all.push_back(sm.value);
      auto n = static_cast<std::ptrdiff_t>(amount);
      if (static_cast<std::ptrdiff_t>(all.size()) < n) continue;
      window.assign(all.end() - n, all.end());
    }
    if (counts_truth) {
      // count over a condition: the samples where it held.
      e.num = static_cast<double>(std::count(window.begin(), window.end(), 1.0));
    } else {
      e.num = reduce(fn, window);
    }
    out.elems[*labels] = e;
  }
  return out;
}

void Evaluator::record_expression_ranges() {
  for (const ast::Subscript* s : expr_ranges_) {
    const bool truth = is_bool(*s->base);
    Value v = eval(*s->base);
    auto& hist = expr_history_.at(s);
    for (const auto& [labels, e] : v.elems) {
      if (!e.fresh) continue;
      hist[labels].push_back({step_, obs_index_, truth ? (e.truth ? 1.0 : 0.0) : e.num,
                              mode_ == "eval", now_});
    }
  }
}

/// Stateful functions, recomputed by replaying the series' whole history.
/// A NaN input yields NaN and leaves the state unchanged (evaluation semantics).
Evaluator::Value Evaluator::eval_stateful(const ast::Call& c) const {
  Value out;
  auto number_arg = [&](std::size_t i) { return std::get<ast::Number>(c.args[i]->node).value; };
  auto string_arg = [&](std::size_t i) { return std::get<ast::String>(c.args[i]->node).value; };
  for (const Series* series : select(*c.args[0])) {
    std::optional<double> state;  // prev: last value; ewma: s; best/ssb: best
    std::int64_t since = 0;
    double result = nan;
    bool defined = false;
    for (const auto& sm : series->history) {
      const double x = sm.value;
      if (std::isnan(x)) {
        result = nan;
        defined = c.fn != "prev" || state.has_value();
        continue;
      }
      if (c.fn == "prev") {
        defined = state.has_value();
        result = state.value_or(nan);
        state = x;
      } else if (c.fn == "ewma") {
        const double alpha = number_arg(1);
        state = state ? alpha * x + (1 - alpha) * *state : x;
        result = *state;
        defined = true;
      } else {
        const bool is_best = c.fn == "best";
        const double min_delta = is_best ? 0 : std::fabs(number_arg(1));
        const bool max_mode = string_arg(is_best ? 1 : 2) == "max";
        const bool improves =
            !state || (max_mode ? x > *state + min_delta : x < *state - min_delta);
        if (improves) {
          state = x;
          since = 0;
        } else {
          ++since;
        }
        result = is_best ? *state : static_cast<double>(since);
        defined = true;
      }
    }
    if (!defined) continue;
    out.elems[series->labels] =
        Elem{result, false, series->history.back().obs == obs_index_, std::nullopt};
  }
  return out;
}

Evaluator::Value Evaluator::eval_call(const ast::Call& c) const {
  if (is_stateful_fn(c.fn)) return eval_stateful(c);
  if (c.fn == "default") {
    // x's elements (with their freshness and deciding comparison) if it has
    // any now, else v's.
    Value x = eval(*c.args[0]);
    return x.elems.empty() ? eval(*c.args[1]) : x;
  }
  if (const auto* s = as<ast::Subscript>(*c.args[0])) return eval_range(c.fn, *s);
  Value arg = eval(*c.args[0]);
  if (c.fn == "abs" || c.fn == "is_nan") {
    for (auto& [labels, e] : arg.elems) {
      if (c.fn == "abs") {
        e.num = std::fabs(e.num);
      } else {
        e.truth = std::isnan(e.num);
      }
      e.decide.reset();
    }
    return arg;
  }
  // Aggregation: one scalar, undefined over an empty vector.
  Value out;
  out.scalar = true;
  if (arg.elems.empty()) return out;
  if (c.fn == "mean" || c.fn == "count" || c.fn == "sum") {
    // Sums are exact then rounded once, as in ranges (compensated in the
    // engine); values like 1/3 from mean(v[3]) are not exact in binary.
    Elem r;
    std::vector<double> xs;
    for (const auto& [labels, e] : arg.elems) {
      r.fresh = r.fresh || e.fresh;
      xs.push_back(e.num);
    }
    auto n = static_cast<double>(arg.elems.size());
    r.num = c.fn == "count" ? n : reduce(c.fn, xs);
    out.elems[{}] = r;
    return out;
  }
  Elem r;
  bool first = true;
  for (const auto& [labels, e] : arg.elems) {
    r.fresh = r.fresh || e.fresh;
    if (first) {
      r.num = e.num;
      first = false;
      continue;
    }
    if (std::isnan(r.num) || std::isnan(e.num)) {
      r.num = nan;  // NaN propagates through aggregations as through ranges
    } else if (c.fn == "max") {
      r.num = std::max(r.num, e.num);
    } else if (c.fn == "min") {
      r.num = std::min(r.num, e.num);
    } else {
      r.num += e.num;
    }
  }
  out.elems[{}] = r;
  return out;
}

Evaluator::Value Evaluator::eval(const ast::Expr& e) const {
  if (const auto* n = as<ast::Number>(e)) {
    Value v;
    v.scalar = true;
    v.elems[{}] = Elem{n->value, false, false, std::nullopt};
    return v;
  }
  if (as<ast::Name>(e) || as<ast::Selector>(e)) {
    Value v;
    for (const Series* s : select(e))
      v.elems[s->labels] = Elem{s->history.back().value, false, s->history.back().obs == obs_index_,
                                std::nullopt};
    return v;
  }
  if (const auto* u = as<ast::Unary>(e)) {
    Value v = eval(*u->operand);
    for (auto& [labels, el] : v.elems) {
      if (u->op == ast::UnaryOp::neg)
        el.num = -el.num;
      else
        el.truth = !el.truth;
      el.decide.reset();
    }
    return v;
  }
  if (const auto* bl = as<ast::Bool>(e)) {
    Value v;
    v.scalar = true;
    v.elems[{}] = Elem{0, bl->value, false, std::nullopt};
    return v;
  }
  if (const auto* c = as<ast::Call>(e)) return eval_call(*c);
  const auto& b = std::get<ast::Binary>(e.node);
  Value l = eval(*b.lhs);
  Value r = eval(*b.rhs);
  auto combine = [&](const Elem& x, const Elem& y) {
    Elem o;
    o.fresh = x.fresh || y.fresh;
    bool nan_in = std::isnan(x.num) || std::isnan(y.num);
    switch (b.op) {
      case ast::BinaryOp::add: o.num = x.num + y.num; break;
      case ast::BinaryOp::sub: o.num = x.num - y.num; break;
      case ast::BinaryOp::mul: o.num = x.num * y.num; break;
      case ast::BinaryOp::div: o.num = x.num / y.num; break;
      case ast::BinaryOp::mod: o.num = std::fmod(x.num, y.num); break;
      case ast::BinaryOp::pow: o.num = std::pow(x.num, y.num); break;
      // Every comparison involving NaN is false, `!=` included.
      case ast::BinaryOp::lt: o.truth = !nan_in && x.num < y.num; o.decide = x.num; break;
      case ast::BinaryOp::le: o.truth = !nan_in && x.num <= y.num; o.decide = x.num; break;
      case ast::BinaryOp::gt: o.truth = !nan_in && x.num > y.num; o.decide = x.num; break;
      case ast::BinaryOp::ge: o.truth = !nan_in && x.num >= y.num; o.decide = x.num; break;
      case ast::BinaryOp::eq: o.truth = !nan_in && x.num == y.num; o.decide = x.num; break;
      case ast::BinaryOp::ne: o.truth = !nan_in && x.num != y.num; o.decide = x.num; break;
      case ast::BinaryOp::and_: o.truth = x.truth && y.truth; o.decide = x.decide; break;
      // `A or B` reports B's comparison when only B holds (it decided), else A's.
      case ast::BinaryOp::or_:
        o.truth = x.truth || y.truth;
        o.decide = y.truth && !x.truth ? y.decide : x.decide;
        break;
    }
    return o;
  };
  Value out;
  out.scalar = l.scalar && r.scalar;
  auto lone = [](const Value& v) { return v.elems.size() == 1 && v.elems.begin()->first.empty(); };
  if (l.scalar && !r.scalar) {
    if (l.elems.empty()) return out;
    for (const auto& [labels, y] : r.elems) out.elems[labels] = combine(l.elems.begin()->second, y);
  } else if (!l.scalar && r.scalar) {
    if (r.elems.empty()) return out;
    for (const auto& [labels, x] : l.elems) out.elems[labels] = combine(x, r.elems.begin()->second);
  } else if (lone(l) && !lone(r)) {
    // A series without labels pairs with every element of a labelled vector.
    for (const auto& [labels, y] : r.elems) out.elems[labels] = combine(l.elems.begin()->second, y);
  } else if (lone(r) && !lone(l)) {
    for (const auto& [labels, x] : l.elems) out.elems[labels] = combine(x, r.elems.begin()->second);
  } else {
    // vector op vector (and scalar op scalar): pair by identical label sets
    for (const auto& [labels, x] : l.elems) {
      auto it = r.elems.find(labels);
      if (it != r.elems.end()) out.elems[labels] = combine(x, it->second);
    }
  }
  return out;
}

/// The run's progress in a clause's unit: the step, the rule's earlier
/// opportunities, seconds since the first observation that had a time (NaN
/// without one), or the latest `epoch` value (NaN before there is one).
double Evaluator::progress(const Span& s, std::int64_t opportunities_before) const {
  switch (s.unit) {
    case ast::DurUnit::steps: return static_cast<double>(step_);
    case ast::DurUnit::seconds: return first_time_ ? now_ - *first_time_ : nan;
    case ast::DurUnit::epochs: return epoch();
    default: return static_cast<double>(opportunities_before);
  }
}

double Evaluator::epoch() const {
  auto it = series_.find({"epoch", {}});
  return it == series_.end() || it->second.history.empty() ? nan : it->second.history.back().value;
}

void Evaluator::run_rule(Rule& rule, std::vector<Firing>& out) {
  if (rule.mode && *rule.mode != mode_) return;
  Value cond = eval(*rule.when);
  bool any_fresh = false;
  for (const auto& [labels, e] : cond.elems) any_fresh = any_fresh || e.fresh;
  if (!any_fresh) return;  // not an opportunity (also when undefined)

  // Every opportunity counts, also those that after/until skip. NaN progress
  // passes neither clause (comparisons with NaN are false).
  const std::int64_t before = rule.opportunities++;
  if (rule.after && !(progress(*rule.after, before) >= rule.after->amount)) return;
  if (rule.until && !(progress(*rule.until, before) < rule.until->amount)) return;
  if (rule.every) {
    if (rule.every->unit == ast::DurUnit::steps) {
      if (rule.last_evaluated_step &&
          static_cast<double>(step_) < static_cast<double>(*rule.last_evaluated_step) + rule.every->amount)
        return;
      rule.last_evaluated_step = step_;
    } else if (rule.every->unit == ast::DurUnit::seconds || rule.every->unit == ast::DurUnit::epochs) {
      // A time (epoch) cadence: the first opportunity with a time (epoch) is
      // evaluated, then the next one at least N past the last evaluated one;
      // an opportunity without a time (epoch) is not evaluated.
      const double at = rule.every->unit == ast::DurUnit::seconds ? now_ : epoch();
      if (std::isnan(at)) return;
      if (rule.last_evaluated_at && !(at >= *rule.last_evaluated_at + rule.every->amount)) return;
      rule.last_evaluated_at = at;
    } else if (rule.every_index++ % static_cast<std::int64_t>(rule.every->amount) != 0) {
      return;
    }
  }

  for (const auto& [labels, e] : cond.elems) {
    if (!e.fresh) continue;  // stale elements keep their state
    ElemState& st = rule.elems[labels];
    ++st.evals_since_fire;  // counts false evaluations too: cooldown spans runs
    if (!e.truth) {
      st.run = 0;
      st.fired = false;
      continue;
    }
    if (++st.run == 1) {
      st.first_step = step_;
      st.first_time = now_;
      st.first_epoch = epoch();
    }
    bool satisfied = true;
    if (rule.for_) {
      switch (rule.for_->unit) {
        case ast::DurUnit::steps:
          satisfied = static_cast<double>(step_ - st.first_step) >= rule.for_->amount;
          break;
        case ast::DurUnit::seconds:  // NaN times: never satisfied
          satisfied = now_ - st.first_time >= rule.for_->amount;
          break;
        case ast::DurUnit::epochs:  // likewise NaN epochs
          satisfied = epoch() - st.first_epoch >= rule.for_->amount;
          break;
        default: satisfied = static_cast<double>(st.run) >= rule.for_->amount;
      }
    }
    if (!satisfied) continue;
    // SPEC §2: without cooldown, once per run. With it, nothing fires within
    // the cooldown after the element's last firing (same run or a new one);
    // at or past its end, a run meeting `for` fires. An unmeasurable
    // distance (NaN time or epoch) is neither inside nor past the cooldown:
    // the rule is then edge-triggered.
    bool fire = !st.fired;
    if (rule.cooldown && st.ever_fired) {
      double distance = 0;
      switch (rule.cooldown->unit) {
        case ast::DurUnit::steps: distance = static_cast<double>(step_ - st.last_fire_step); break;
        case ast::DurUnit::seconds: distance = now_ - st.last_fire_time; break;
        case ast::DurUnit::epochs: distance = epoch() - st.last_fire_epoch; break;
        default: distance = static_cast<double>(st.evals_since_fire);
      }
      if (distance >= rule.cooldown->amount) fire = true;        // past the cooldown
      else if (distance < rule.cooldown->amount) fire = false;   // inside it
    }
    if (!fire) continue;
    st.fired = true;
    st.ever_fired = true;
    st.last_fire_step = step_;
    st.last_fire_time = now_;
    st.last_fire_epoch = epoch();
    st.evals_since_fire = 0;
    out.push_back(Firing{rule.name, step_, labels_string(labels), e.decide, st.first_step});
  }
}

std::vector<Firing> Evaluator::observe(const Observation& obs) {
  std::vector<Firing> out;
  if (!error_.empty()) return out;
  // A step below the previous step of the same mode: the observation is
  // ignored entirely.
  auto last = last_step_.find(obs.mode);
  if (last != last_step_.end() && obs.step < last->second) return out;
  last_step_[obs.mode] = obs.step;
  ++obs_index_;
  step_ = obs.step;
  mode_ = obs.mode;
  now_ = obs.time;
  if (!first_time_ && !std::isnan(obs.time)) first_time_ = obs.time;
  for (const auto& s : obs.samples) {
    Series& series = series_[{s.name, s.labels}];
    series.name = s.name;
    series.labels = s.labels;
    if (!series.history.empty() && series.history.back().obs == obs_index_)
      series.history.back().value = s.value;  // the last value in one observation wins
    else
      series.history.push_back({obs.step, obs_index_, s.value, obs.mode == "eval", obs.time});
  }
  record_expression_ranges();
  for (auto& rule : rules_) run_rule(rule, out);
  return out;
}

}  // namespace vigil::reference
