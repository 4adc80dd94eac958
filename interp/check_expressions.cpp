// Expressions: names (lets, params, template arguments, series), selectors,
// tensor stats, operators, function calls against the registry in CheckEnv,
// and ranges. Must not touch rule clauses or declarations.
#include <algorithm>
#include <unordered_set>

#include "interp/checker_impl.hpp"

namespace vigil::interp::checking {

ir::NodePtr Checker::node(ir::Op op, std::uint32_t file, SourceRange range) {
  auto n = std::make_shared<ir::Node>();
  n->op = op;
  n->file = file;
  n->range = range;
  return n;
}

ir::NodePtr Checker::constant(double v, ir::Type t, std::uint32_t file, SourceRange range) {
  auto n = node(ir::Op::constant, file, range);
  n->constant = v;
  n->type = t;
  return n;
}

ir::NodePtr Checker::expr(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
  if (++depth_ > 512) {  // lets and templates can nest beyond the parser's bound
    --depth_;
    error("depth", file, e.range, "expression nested too deeply (through lets or templates)");
    return nullptr;
  }
  auto out = expr_inner(e, scope, file);
  --depth_;
  return out;
}

ir::NodePtr Checker::expr_inner(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
  return std::visit(
      [&](const auto& n) -> ir::NodePtr {
        using N = std::decay_t<decltype(n)>;
        if constexpr (std::is_same_v<N, ast::Number>) {
          return constant(n.value, ir::Type::number, file, e.range);
        } else if constexpr (std::is_same_v<N, ast::Bool>) {
          return constant(n.value ? 1 : 0, ir::Type::boolean, file, e.range);
        } else if constexpr (std::is_same_v<N, ast::String>) {
          error("type", file, e.range, "a string is not a value here");
          return nullptr;
        } else if constexpr (std::is_same_v<N, ast::Duration>) {
          error("type", file, e.range,
                "a duration is only allowed in a range x[...] or a clause such as 'for'");
          return nullptr;
        } else if constexpr (std::is_same_v<N, ast::Name>) {
          return name(n, e, scope, file);
        } else if constexpr (std::is_same_v<N, ast::Selector>) {
          auto sel = selector(n, file);
          if (!sel) return nullptr;
          auto out = node(ir::Op::selector, file, e.range);
          out->selector = std::move(*sel);
          out->vector = true;
          series_uses_.push_back({n.name, file, n.name_range});
          return out;
        } else if constexpr (std::is_same_v<N, ast::Member>) {
          auto sel = series_ref(e, scope, file);
          if (!sel) return nullptr;
          auto out = node(ir::Op::selector, file, e.range);
          out->selector = std::move(*sel);
          out->vector = true;
          return out;
        } else if constexpr (std::is_same_v<N, ast::Subscript>) {
          error("type", file, e.range,
                "a range must be reduced by a function, e.g. mean(x[10]) or max(x[100 steps])");
          return nullptr;
        } else if constexpr (std::is_same_v<N, ast::Unary>) {
          auto operand = expr(*n.operand, scope, file);
          if (!operand) return nullptr;
          bool neg = n.op == ast::UnaryOp::neg;
          auto want = neg ? ir::Type::number : ir::Type::boolean;
          if (operand->type != want) {
            error(
                "type", file, n.op_range,
                neg ? "'-' needs a number, got a boolean" : "'not' needs a boolean, got a number");
            return nullptr;
          }
          auto out = node(neg ? ir::Op::neg : ir::Op::not_, file, e.range);
          out->type = want;
          out->vector = operand->vector;
          out->args.push_back(std::move(operand));
          return out;
        } else if constexpr (std::is_same_v<N, ast::Binary>) {
          return binary(n, e, scope, file);
        } else {
          return call(n, e, scope, file);
        }
      },
      e.node);
}

ir::NodePtr Checker::name(const ast::Name& n, const ast::Expr& e, const Scope& scope,
                          std::uint32_t file) {
  if (!n.backticked) {
    if (auto it = scope.bindings.find(n.name); it != scope.bindings.end())
      return expr(*it->second.expr, *it->second.scope, it->second.file);
    if (auto it = scope.module->lets.find(n.name); it != scope.module->lets.end()) {
      // A let's body reads only module-level names: it is checked once, and
      // every later use shares its node and repeats its series uses.
      const ast::LetDecl* decl = it->second.decl;
      if (auto done = let_ir_.find(decl); done != let_ir_.end()) {
        series_uses_.insert(series_uses_.end(), done->second.uses.begin(),
                            done->second.uses.end());
        return done->second.node;
      }
      if (!expanding_.insert(n.name).second) {
        error("let-cycle", file, e.range, fmt::format("let '{}' refers to itself", n.name));
        return nullptr;
      }
      const std::size_t uses_before = series_uses_.size();
      auto out = expr(*decl->value, *module_scope(scope.module), it->second.file);
      expanding_.erase(n.name);
      // The uses a let body adds, once each (a body reading `x1 + x1` holds
      // x1's uses twice; kept twice per level they would double again).
      LetIR& l = let_ir_[decl];
      l.node = out;
      for (auto u = series_uses_.begin() + static_cast<std::ptrdiff_t>(uses_before);
           u != series_uses_.end(); ++u) {
        const bool seen = std::any_of(l.uses.begin(), l.uses.end(), [&](const SeriesUse& s) {
          return s.file == u->file && s.range.begin == u->range.begin &&
                 s.range.end == u->range.end && s.name == u->name;
        });
        if (!seen) l.uses.push_back(*u);
      }
      return out;
    }
    if (auto it = scope.module->params.find(n.name); it != scope.module->params.end()) {
      const Value& v = it->second.value;
      if (const auto* d = std::get_if<double>(&v))
        return constant(*d, ir::Type::number, file, e.range);
      if (const auto* b = std::get_if<bool>(&v))
        return constant(*b ? 1 : 0, ir::Type::boolean, file, e.range);
      error("type", file, e.range, fmt::format("param '{}' is a string, not a value", n.name));
      return nullptr;
    }
    // A series. Warn when the name is one letter away from a declared name:
    // a typo there silently reads a series that never exists.
    std::vector<std::string> declared;
    for (const auto& [k, b] : scope.bindings) declared.push_back(k);
    for (const auto& [k, l] : scope.module->lets) declared.push_back(k);
    for (const auto& [k, p] : scope.module->params) declared.push_back(k);
    // Short names are too close to everything to guess from.
    std::string near = n.name.size() >= 4 ? closest_match(n.name, declared) : std::string();
    if (!near.empty())
      warning("series-typo", file, e.range,
              fmt::format("'{}' is read as a series, not a declared name", n.name), near);
  }
  auto out = node(ir::Op::selector, file, e.range);
  out->selector.name = n.name;
  out->vector = true;
  series_uses_.push_back({n.name, file, e.range});
  return out;
}

std::optional<ir::Selector> Checker::selector(const ast::Selector& s, std::uint32_t file) {
  ir::Selector out{s.name, {}};
  bool ok = true;
  for (const auto& m : s.matchers) {
    auto op = static_cast<ir::MatchOp>(static_cast<int>(m.op));
    if (op == ir::MatchOp::re || op == ir::MatchOp::nre) {
      RE2 re(m.value, RE2::Quiet);
      if (!re.ok()) {
        error("regex", file, m.range, fmt::format("invalid regular expression: {}", re.error()));
        ok = false;
      }
    }
    out.matchers.push_back({m.label, op, m.value});
  }
  if (!ok) return std::nullopt;
  return out;
}

ir::NodePtr Checker::binary(const ast::Binary& n, const ast::Expr& e, const Scope& scope,
                            std::uint32_t file) {
  // `mode == "min"` with a string parameter: decided at compile time, so a
  // template can pick a condition by a string argument:
  //   (mode == "min" and x < t) or (mode == "max" and x > t)
  if (n.op == ast::BinaryOp::eq || n.op == ast::BinaryOp::ne) {
    auto l = const_eval(*n.lhs, scope, file), r = const_eval(*n.rhs, scope, file);
    if (l && r && std::holds_alternative<std::string>(l->v) &&
        std::holds_alternative<std::string>(r->v)) {
      const bool same = std::get<std::string>(l->v) == std::get<std::string>(r->v);
      return constant((n.op == ast::BinaryOp::eq) == same ? 1 : 0, ir::Type::boolean, file,
                      e.range);
    }
  }
  const std::size_t uses_before_lhs = series_uses_.size();
  auto lhs = expr(*n.lhs, scope, file);
  const std::size_t uses_before_rhs = series_uses_.size();
  auto rhs = expr(*n.rhs, scope, file);
  if (!lhs || !rhs) return nullptr;
  using B = ast::BinaryOp;
  static constexpr std::string_view spelling[] = {
      "or", "and", "<", "<=", ">", ">=", "==", "!=", "+", "-", "*", "/", "%", "^"};
  const auto sp = spelling[static_cast<int>(n.op)];
  ir::Op op{};
  ir::Type want = ir::Type::number, result = ir::Type::number;
  switch (n.op) {
    case B::or_:
      op = ir::Op::or_;
      want = result = ir::Type::boolean;
      break;
    case B::and_:
      op = ir::Op::and_;
      want = result = ir::Type::boolean;
      break;
    case B::lt:
      op = ir::Op::lt;
      result = ir::Type::boolean;
      break;
    case B::le:
      op = ir::Op::le;
      result = ir::Type::boolean;
      break;
    case B::gt:
      op = ir::Op::gt;
      result = ir::Type::boolean;
      break;
    case B::ge:
      op = ir::Op::ge;
      result = ir::Type::boolean;
      break;
    case B::eq:
      op = ir::Op::eq;
      result = ir::Type::boolean;
      break;
    case B::ne:
      op = ir::Op::ne;
      result = ir::Type::boolean;
      break;
    case B::add: op = ir::Op::add; break;
    case B::sub: op = ir::Op::sub; break;
    case B::mul: op = ir::Op::mul; break;
    case B::div: op = ir::Op::div; break;
    case B::mod: op = ir::Op::mod; break;
    case B::pow: op = ir::Op::pow; break;
  }
  // == and != also compare two booleans.
  bool bool_eq = (op == ir::Op::eq || op == ir::Op::ne) && lhs->type == ir::Type::boolean &&
                 rhs->type == ir::Type::boolean;
  if (!bool_eq && (lhs->type != want || rhs->type != want)) {
    const auto& bad = lhs->type != want ? n.lhs : n.rhs;
    error("type", file, want == ir::Type::boolean ? bad->range : n.op_range,
          want == ir::Type::boolean
              ? fmt::format("'{}' needs true/false operands (comparisons), got a number", sp)
              : fmt::format("'{}' needs numbers, got a boolean (a comparison)", sp));
    return nullptr;
  }
  if (op == ir::Op::and_ || op == ir::Op::or_) {
    // A compile-time true/false side (a string parameter compared, as in
    // `(activation == "tanh" and ...) or (activation == "sigmoid" and ...)`)
    // decides here: the branch not taken is checked but not planned, so its
    // series are neither read nor computed, and the branch taken supplies
    // the firing's value.
    const bool absorbing = op == ir::Op::or_;  // true absorbs `or`, false absorbs `and`
    auto decided = [&](const ir::NodePtr& side) {
      return side->op == ir::Op::constant && (side->constant != 0) == absorbing;
    };
    auto neutral = [&](const ir::NodePtr& side) {
      return side->op == ir::Op::constant && (side->constant != 0) != absorbing;
    };
    if (decided(lhs) || neutral(rhs)) {
      series_uses_.resize(uses_before_rhs);
      return lhs;
    }
    if (decided(rhs) || neutral(lhs)) {
      series_uses_.erase(series_uses_.begin() + static_cast<std::ptrdiff_t>(uses_before_lhs),
                         series_uses_.begin() + static_cast<std::ptrdiff_t>(uses_before_rhs));
      return rhs;
    }
  }
  auto out = node(op, file, e.range);
  out->type = result;
  out->vector = lhs->vector || rhs->vector;
  out->args.push_back(std::move(lhs));
  out->args.push_back(std::move(rhs));
  return out;
}

ir::NodePtr Checker::call(const ast::Call& c, const ast::Expr& e, const Scope& scope,
                          std::uint32_t file) {
  const auto& registry = env_.functions;
  auto overloads = registry.lookup(c.fn);
  if (overloads.empty()) {
    error("unknown-function", file, c.fn_range, fmt::format("unknown function '{}'", c.fn),
          closest_match(c.fn, registry.names()));
    return nullptr;
  }
  // A subscripted first argument selects the range overloads.
  const bool ranged = !c.args.empty() && std::holds_alternative<ast::Subscript>(
                                             resolve(*c.args[0], scope, file).expr->node);
  const FunctionDef* fn = nullptr;
  for (const auto* d : overloads) {
    if ((d->kind == FnKind::range) != ranged) continue;
    const bool arity_ok =
        d->variadic ? c.args.size() >= d->params.size() : c.args.size() == d->params.size();
    if (!arity_ok) continue;
    fn = d;
    break;
  }
  if (!fn) {
    std::string forms;
    for (const auto* d : overloads) {
      std::string ps;
      for (const auto& p : d->params) {
        if (!ps.empty()) ps += ", ";
        ps += p.type == ArgType::range ? fmt::format("{}[...]", p.name) : std::string(p.name);
      }
      if (d->variadic) ps += ", ...";
      if (!forms.empty()) forms += " or ";
      forms += fmt::format("{}({})", c.fn, ps);
    }
    error("arity", file, e.range,
          fmt::format("no form of '{}' takes {} {}argument{}; expected {}", c.fn, c.args.size(),
                      ranged ? "range " : "", c.args.size() == 1 ? "" : "s", forms));
    return nullptr;
  }

  // A clock reads its series' samples directly, as a range does.
  const bool reads_selector = fn->kind == FnKind::range || fn->kind == FnKind::clock;
  auto out = node(reads_selector ? ir::Op::range_call : ir::Op::call, file, e.range);
  out->fn = fn;
  out->type = fn->result == ArgType::boolean ? ir::Type::boolean : ir::Type::number;
  bool ok = true;
  for (std::size_t i = 0; i < c.args.size(); ++i) {
    const auto& p = fn->params[std::min(i, fn->params.size() - 1)];
    const ast::Expr& arg = *c.args[i];
    if (p.type == ArgType::range) {
      ok &= range_arg(*out, arg, scope, file);
    } else if (p.type == ArgType::series) {
      auto sel = series_ref(arg, scope, file, fmt::format("a series ({}'s argument)", c.fn));
      if (sel) out->selector = std::move(*sel);
      out->window = ir::Dur{ir::Unit::samples, 1};
      out->vector = true;
      ok &= sel.has_value();
    } else if (p.constant) {
      auto v = const_eval(arg, scope, file);
      if (p.type == ArgType::string) {
        ok &= choice_arg(*out, *fn, p, v, arg, file);
      } else if (!v || !std::holds_alternative<double>(v->v)) {
        error("constant", file, arg.range,
              fmt::format("argument '{}' of {} must be a constant number", p.name, c.fn));
        ok = false;
      } else {
        // The registry states each constant's range (docs/functions.md).
        double x = std::get<double>(v->v);
        if (!p.accepts(x)) {
          error("range", file, arg.range,
                fmt::format("argument '{}' of {} must be {}, got {}", p.name, c.fn,
                            stdlib::range_text(p) == "any finite number"
                                ? "a finite number"
                                : stdlib::range_text(p),
                            x));
          ok = false;
        }
        out->const_args.push_back(x);
      }
    } else {
      auto a = expr(arg, scope, file);
      if (!a) {
        ok = false;
        continue;
      }
      auto want = p.type == ArgType::boolean ? ir::Type::boolean : ir::Type::number;
      if (fn->kind == FnKind::fallback) want = a->type;  // either kind; checked below
      if (fn->kind == FnKind::aggregate && a->type == ir::Type::boolean &&
          fn->params[0].type == ArgType::number) {
        // count(x > 1) counts the true elements: the boolean overload.
        for (const auto* d : overloads)
          if (d->kind == FnKind::aggregate && d->params[0].type == ArgType::boolean) {
            out->fn = d;
            out->type = d->result == ArgType::boolean ? ir::Type::boolean : ir::Type::number;
            want = ir::Type::boolean;
          }
      }
      if (a->type != want) {
        error("type", file, arg.range,
              fmt::format("argument '{}' of {} must be {}", p.name, c.fn,
                          want == ir::Type::number ? "a number, got a boolean"
                                                   : "a boolean (comparison), got a number"));
        ok = false;
        continue;
      }
      out->vector |= a->vector;
      out->args.push_back(std::move(a));
    }
  }
  if (!ok) return nullptr;
  if (fn->kind == FnKind::aggregate) out->vector = false;
  if (fn->kind == FnKind::range)
    out->vector = out->selector.name.empty() ? out->args[0]->vector : true;
  if (fn->kind == FnKind::fallback) {
    // default(x, v): x and v of one type, the result of that type.
    if (out->args[0]->type != out->args[1]->type) {
      error("type", file, e.range,
            "default(x, v) needs x and v of one kind: both numbers or both conditions");
      return nullptr;
    }
    out->type = out->args[0]->type;
  }
  return out;
}

bool Checker::choice_arg(ir::Node& out, const FunctionDef& fn, const stdlib::Param& p,
                         const std::optional<Const>& v, const ast::Expr& arg, std::uint32_t file) {
  std::vector<std::string> words;
  std::string_view rest = p.choices;
  while (!rest.empty()) {
    auto bar = rest.find('|');
    words.emplace_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 1);
  }
  std::string alternatives;
  for (const auto& w : words) alternatives += (alternatives.empty() ? "\"" : " or \"") + w + "\"";
  if (!v || !std::holds_alternative<std::string>(v->v)) {
    error("constant", file, arg.range,
          fmt::format("argument '{}' of {} must be {}", p.name, fn.name, alternatives));
    return false;
  }
  const auto& s = std::get<std::string>(v->v);
  auto at = std::find(words.begin(), words.end(), s);
  if (at == words.end()) {
    error("constant", file, arg.range,
          fmt::format("argument '{}' of {} must be {}", p.name, fn.name, alternatives),
          closest_match(s, words));
    return false;
  }
  out.const_args.push_back(static_cast<double>(at - words.begin()));
  return true;
}

std::optional<ir::Selector> Checker::series_ref(const ast::Expr& e, const Scope& scope,
                                                std::uint32_t file, std::string_view what) {
  Binding b = resolve(e, scope, file);
  if (const auto* n = std::get_if<ast::Name>(&b.expr->node)) {
    if (b.scope->module->params.count(n->name)) {
      error("type", b.file, b.expr->range,
            fmt::format("'{}' is a param, but {} is needed here", n->name, what));
      return std::nullopt;
    }
    series_uses_.push_back({n->name, b.file, b.expr->range});
    return ir::Selector{n->name, {}};
  }
  if (const auto* s = std::get_if<ast::Selector>(&b.expr->node)) {
    auto sel = selector(*s, b.file);
    if (sel) series_uses_.push_back({s->name, b.file, s->name_range});
    return sel;
  }
  if (const auto* m = std::get_if<ast::Member>(&b.expr->node)) {
    auto suffix = stat_suffix(*m, *b.scope, b.file);
    if (!suffix) return std::nullopt;
    const auto before = series_uses_.size();
    auto base = series_ref(*m->base, *b.scope, b.file, "a tensor series");
    if (!base) return std::nullopt;
    // grad{...}.norm reads grad_norm{...}; a.frac_outside(-1, 1) reads
    // a_frac_outside(-1,1){...} (the canonical name, param_stat_suffix).
    base->name += "_" + *suffix;
    series_uses_.resize(before);
    series_uses_.push_back({base->name, b.file, b.expr->range});
    return base;
  }
  error("type", b.file, b.expr->range,
        fmt::format("{} is needed here, e.g. loss, grad_norm{{layer=\"fc1\"}} or grad.norm", what));
  return std::nullopt;
}

bool Checker::names_series(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
  const auto& node = resolve(e, scope, file).expr->node;
  return std::holds_alternative<ast::Name>(node) || std::holds_alternative<ast::Selector>(node) ||
         std::holds_alternative<ast::Member>(node);
}

bool Checker::reads_series(const ir::Node& n) {
  // The IR is a DAG: each node once, or a let chain costs 2^n.
  std::vector<const ir::Node*> todo{&n};
  std::unordered_set<const ir::Node*> seen{&n};
  while (!todo.empty()) {
    const ir::Node* x = todo.back();
    todo.pop_back();
    if (x->op == ir::Op::selector || !x->selector.name.empty()) return true;
    for (const auto& a : x->args)
      if (seen.insert(a.get()).second) todo.push_back(a.get());
  }
  return false;
}

std::optional<std::string> Checker::stat_suffix(const ast::Member& m, const Scope& scope,
                                                std::uint32_t file) {
  const SourceRange args_range =
      m.args.empty() ? m.field_range
                     : SourceRange{m.args.front()->range.begin, m.args.back()->range.end};
  vigil::Stat stat;
  if (vigil::parse_stat(m.field, stat)) {
    if (!m.args.empty()) {
      error("stat-args", file, args_range,
            fmt::format("tensor stat '{}' takes no arguments", m.field));
      return std::nullopt;
    }
    return m.field;
  }
  vigil::ParamStat ps;
  if (!vigil::parse_param_stat(m.field, ps)) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < vigil::stat_count; ++i)
      names.emplace_back(vigil::stat_name(static_cast<vigil::Stat>(i)));
    for (std::size_t i = 0; i < vigil::param_stat_count; ++i)
      names.emplace_back(vigil::param_stat_name(static_cast<vigil::ParamStat>(i)));
    error("unknown-stat", file, m.field_range, fmt::format("unknown tensor stat '{}'", m.field),
          closest_match(m.field, names));
    return std::nullopt;
  }
  const std::size_t arity = vigil::param_stat_arity(ps);
  if (m.args.size() != arity) {
    error("stat-args", file, args_range,
          m.args.empty()
              ? fmt::format("tensor stat '{}' needs {} argument{} ({})", m.field, arity,
                            arity == 1 ? "" : "s", vigil::param_stat_params(ps))
              : fmt::format("tensor stat '{}' takes {} argument{} ({}), got {}", m.field, arity,
                            arity == 1 ? "" : "s", vigil::param_stat_params(ps), m.args.size()));
    return std::nullopt;
  }
  double values[vigil::max_param_stat_args] = {};
  bool ok = true;
  for (std::size_t i = 0; i < arity; ++i) {
    auto c = const_eval(*m.args[i], scope, file);
    if (!c || !std::holds_alternative<double>(c->v)) {
      error("constant", file, m.args[i]->range,
            fmt::format("arguments of tensor stat '{}' must be constant numbers ({}){}", m.field,
                        vigil::param_stat_params(ps),
                        c ? fmt::format(", got {}", kind_name(*c)) : std::string()));
      ok = false;
      continue;
    }
    // -0 and 0 read the same elements: one canonical series, not two.
    values[i] = std::get<double>(c->v) == 0 ? 0.0 : std::get<double>(c->v);
  }
  if (!ok) return std::nullopt;
  return vigil::param_stat_suffix(ps, std::span<const double>(values, arity));
}

bool Checker::range_arg(ir::Node& out, const ast::Expr& arg, const Scope& scope,
                        std::uint32_t file) {
  Binding b = resolve(arg, scope, file);
  const auto& sub = std::get<ast::Subscript>(b.expr->node);
  if (names_series(*sub.base, *b.scope, b.file)) {
    auto sel = series_ref(*sub.base, *b.scope, b.file, "a series to range over");
    if (!sel) return false;
    out.selector = std::move(*sel);
  } else {
    // A range over an expression: its values at the observations where it
    // has a new sample, kept per label set.
    auto x = expr(*sub.base, *b.scope, b.file);
    if (!x) return false;
    if (!reads_series(*x)) {
      error("range", b.file, sub.base->range,
            "a range needs an expression that reads a series, e.g. (loss > 2)[10]");
      return false;
    }
    if (x->type == ir::Type::boolean) {
      const FunctionDef* cond = nullptr;
      for (const auto* d : env_.functions.lookup(out.fn->name))
        if (!d->params.empty() && d->params[0].type == ArgType::condition_range) cond = d;
      if (!cond) {
        error("type", b.file, sub.base->range,
              fmt::format("{} needs a range of numbers; over a range of a condition only "
                          "count(...) is defined (the samples where it held)",
                          out.fn->name));
        return false;
      }
      out.fn = cond;
    }
    out.args.insert(out.args.begin(), std::move(x));
  }
  auto size = const_eval(*sub.size, *b.scope, b.file);
  if (size && std::holds_alternative<double>(size->v))
    size = Const{ir::Dur{ir::Unit::samples, std::get<double>(size->v)}};
  if (!size || !std::holds_alternative<ir::Dur>(size->v)) {
    error("range", b.file, sub.size->range,
          "a range needs a sample count or a duration, e.g. x[10], x[100 steps], x[10m]");
    return false;
  }
  auto d = std::get<ir::Dur>(size->v);
  bool counted = d.unit == ir::Unit::samples || d.unit == ir::Unit::evals;
  if (d.unit == ir::Unit::epochs) {
    error("range", b.file, sub.size->range, "ranges over epochs are not supported; use steps");
    return false;
  }
  if (d.amount > ir::max_duration_amount && !counted) {
    error("range", b.file, sub.size->range,
          fmt::format("a range's duration is out of range: at most {} {}",
                      static_cast<std::int64_t>(ir::max_duration_amount), ir::unit_word(d.unit)));
    return false;
  }
  if (!(d.amount > 0) || !std::isfinite(d.amount) ||
      (counted && (d.amount != std::floor(d.amount) || d.amount > 1e7))) {
    error("range", b.file, sub.size->range,
          counted ? "a range's sample count must be a whole number from 1 to 10000000"
                  : "a range's duration must be positive");
    return false;
  }
  if (counted && d.amount < static_cast<double>(out.fn->min_samples)) {
    error("range", b.file, sub.size->range,
          fmt::format("{} needs at least {} samples", out.fn->name, out.fn->min_samples));
    return false;
  }
  out.window = d;
  return true;
}

}  // namespace vigil::interp::checking
