// Rules and templates: instantiating `rule` and `use` statements (template
// arguments, overrides), their clauses (for, after, until, every, cooldown,
// severity, mode), actions and escalations. Expressions are checked by
// check_expressions.cpp; this file must not type-check one itself.
#include <algorithm>

#include "interp/checker_impl.hpp"

namespace vigil::interp::checking {

std::optional<ir::Rule> Checker::instantiate(const RuleStmt& rs) {
  if (const auto* rule = std::get_if<ast::RuleDecl>(rs.stmt)) {
    Scope* scope = module_scope(&user_);
    ir::Rule out;
    out.info.name = rule->name.empty() ? anonymous_name(rs.file, rule->clauses) : rule->name;
    out.info.description = rule->description.value_or("");
    out.info.file = rs.file;
    out.info.range = rule->range;
    if (!build(out, rule->clauses, nullptr, *scope, rs.file, *scope, rs.file)) return std::nullopt;
    return out;
  }
  const auto& use = std::get<ast::UseDecl>(*rs.stmt);
  const Module& from = use.std_prefix ? std_templates() : user_;
  auto it = from.templates.find(use.template_name);
  if (it == from.templates.end()) {
    std::vector<std::string> names;
    for (const auto& [n, t] : from.templates) names.push_back(n);
    std::string suggestion = closest_match(use.template_name, names);
    if (!suggestion.empty() && use.std_prefix) suggestion = "std." + suggestion;
    if (suggestion.empty() && !use.std_prefix && std_templates().templates.count(use.template_name))
      suggestion = "std." + use.template_name;
    error("unknown-template", rs.file, use.name_range,
          fmt::format("unknown template '{}{}'", use.std_prefix ? "std." : "", use.template_name),
          suggestion);
    return std::nullopt;
  }
  const ast::RuleDecl& tmpl = *it->second.decl;
  const std::uint32_t tfile = it->second.file;
  Scope* use_scope = module_scope(&user_);
  auto& body_scope = template_scopes_.emplace_back(std::make_unique<Scope>());
  body_scope->module = &from;
  Scope* tmpl_module_scope = module_scope(&from);

  bool ok = true;
  std::size_t positional = 0;
  std::set<std::string> given;
  for (const auto& arg : use.args) {
    const ast::TemplateParam* param = nullptr;
    if (arg.name.empty()) {
      if (positional < tmpl.params.size()) param = &tmpl.params[positional++];
      if (!param) {
        error("arity", rs.file, arg.range,
              fmt::format("too many arguments for template '{}' ({} parameters)", use.template_name,
                          tmpl.params.size()));
        ok = false;
        continue;
      }
    } else {
      for (const auto& p : tmpl.params)
        if (p.name == arg.name) param = &p;
      if (!param) {
        std::vector<std::string> names;
        for (const auto& p : tmpl.params) names.push_back(p.name);
        error("unknown-argument", rs.file, arg.name_range,
              fmt::format("template '{}' has no parameter '{}'", use.template_name, arg.name),
              closest_match(arg.name, names));
        ok = false;
        continue;
      }
    }
    if (!given.insert(param->name).second) {
      error("duplicate", rs.file, arg.range,
            fmt::format("parameter '{}' is given twice", param->name));
      ok = false;
      continue;
    }
    if (param->default_value) {
      std::string want = arg_kind(*param->default_value, *tmpl_module_scope, tfile);
      std::string got = arg_kind(*arg.value, *use_scope, rs.file);
      if (want != got && want != "an expression" && got != "an expression") {
        error("type", rs.file, arg.value->range,
              fmt::format("argument '{}' must be {} like its default, got {}", param->name, want,
                          got));
        ok = false;
        continue;
      }
    }
    body_scope->bindings[param->name] = Binding{arg.value.get(), use_scope, rs.file};
  }
  for (const auto& p : tmpl.params) {
    if (body_scope->bindings.count(p.name)) continue;
    if (!p.default_value) {
      error(
          "missing-argument", rs.file, use.name_range,
          fmt::format("template '{}' needs a value for parameter '{}'", use.template_name, p.name));
      ok = false;
      continue;
    }
    body_scope->bindings[p.name] = Binding{p.default_value.get(), tmpl_module_scope, tfile};
  }
  if (!ok) return std::nullopt;

  ir::Rule out;
  out.info.name = use.alias.value_or(use.template_name);
  out.info.template_name = use.template_name;
  out.info.description = tmpl.description.value_or("");
  out.info.file = rs.file;
  out.info.range = use.range;
  if (!build(out, tmpl.clauses, &use.overrides, *body_scope, tfile, *use_scope, rs.file))
    return std::nullopt;
  return out;
}

void Checker::check_unused_templates() {
  std::set<std::string> used;
  for (const auto& rs : user_rules_)
    if (const auto* u = std::get_if<ast::UseDecl>(rs.stmt); u && !u->std_prefix)
      used.insert(u->template_name);
  const auto uses_before = series_uses_.size();
  for (const auto& [name, t] : user_.templates) {
    if (used.count(name) || too_many_errors()) continue;
    if (std::any_of(t.decl->params.begin(), t.decl->params.end(),
                    [](const auto& p) { return !p.default_value; }))
      continue;
    Scope scope{&user_, {}};
    for (const auto& p : t.decl->params)
      scope.bindings[p.name] = Binding{p.default_value.get(), module_scope(&user_), t.file};
    ir::Rule unused;
    build(unused, t.decl->clauses, nullptr, scope, t.file, scope, t.file);
  }
  series_uses_.resize(uses_before);  // an unused template reads nothing
}

std::string Checker::arg_kind(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
  if (auto c = const_eval(e, scope, file)) return std::string(kind_name(*c));
  Binding b = resolve(e, scope, file);
  if (std::holds_alternative<ast::Name>(b.expr->node) ||
      std::holds_alternative<ast::Selector>(b.expr->node) ||
      std::holds_alternative<ast::Member>(b.expr->node))
    return "a series";
  return "an expression";
}

std::string Checker::anonymous_name(std::uint32_t file, const ast::Clauses& c) {
  auto lc = sources_.line_col(file, c.when_keyword.begin);
  return fmt::format("{}:{}", sources_[file].name, lc.line);
}

bool Checker::build(ir::Rule& out, const ast::Clauses& base, const ast::Clauses* over,
                    const Scope& scope, std::uint32_t file, const Scope& oscope,
                    std::uint32_t ofile) {
  std::size_t errors_before = error_count();
  auto pick = [&](const ast::ExprPtr ast::Clauses::*m)
      -> std::tuple<const ast::Expr*, const Scope*, std::uint32_t> {
    if (over && (over->*m)) return {(over->*m).get(), &oscope, ofile};
    return {(base.*m).get(), &scope, file};
  };
  auto [when, wscope, wfile] = pick(&ast::Clauses::when);
  if (!when) {
    error("syntax", file, base.when_keyword, "rule has no 'when' condition");
    return false;
  }
  out.condition = expr(*when, *wscope, wfile);
  if (out.condition && out.condition->type != ir::Type::boolean) {
    error("type", wfile, when->range,
          "a condition must be true or false, e.g. a comparison such as 'x > 1'");
  }
  auto dur = [&](const ast::ExprPtr ast::Clauses::*m, std::string_view name,
                 std::optional<ir::Dur>& slot) {
    auto [e, s, f] = pick(m);
    if (e) slot = duration(*e, *s, f, name);
  };
  dur(&ast::Clauses::for_, "for", out.for_);
  dur(&ast::Clauses::after, "after", out.after);
  dur(&ast::Clauses::until, "until", out.until);
  dur(&ast::Clauses::every, "every", out.every);
  dur(&ast::Clauses::cooldown, "cooldown", out.cooldown);
  if (out.every && out.every->amount <= 0) {
    auto [e, s, f] = pick(&ast::Clauses::every);
    error("duration", f, e->range, "'every' needs a positive duration");
  }

  // severity / mode
  const bool sev_over = over && over->severity;
  const auto& sev = sev_over ? over->severity : base.severity;
  if (sev) {
    static const std::vector<std::string> words = {"info", "warning", "error", "critical"};
    auto at = std::find(words.begin(), words.end(), *sev);
    if (at == words.end())
      error("severity", sev_over ? ofile : file,
            sev_over ? over->severity_range : base.severity_range,
            fmt::format("unknown severity '{}' (info, warning, error, critical)", *sev),
            closest_match(*sev, words));
    else
      out.info.severity = static_cast<Severity>(at - words.begin());
  }
  // `in MODE`: the word, or the string value of a parameter of that name
  // (a template can take `mode = "eval"`).
  auto mode_word = [&](const std::string& word, const Scope& s, std::uint32_t f) {
    ast::Expr ref;
    ref.node = ast::Name{word, false};
    auto c = const_eval(ref, s, f);
    return c && std::holds_alternative<std::string>(c->v) ? std::get<std::string>(c->v) : word;
  };
  const bool mode_over = over && over->mode;
  if (mode_over) {
    out.info.mode = mode_word(*over->mode, oscope, ofile);
    out.info.mode_file = ofile;
    out.info.mode_range = over->mode_range;
  } else if (base.mode) {
    out.info.mode = mode_word(*base.mode, scope, file);
    out.info.mode_file = file;
    out.info.mode_range = base.mode_range;
  }

  // actions: a `use` with `do` replaces the template's actions.
  const bool act_over = over && over->has_do;
  const auto& calls = act_over ? over->actions : base.actions;
  const Scope& ascope = act_over ? oscope : scope;
  const std::uint32_t afile = act_over ? ofile : file;
  for (const auto& call : calls) {
    if (auto a = action(call, ascope, afile)) {
      out.info.actions.push_back(std::move(*a));
      out.action_sites.emplace_back(afile, call.range);
    }
  }
  if (calls.empty()) error("syntax", file, base.when_keyword, "rule has no 'do' action");

  // escalations: a `use` that lists any replaces the template's.
  const bool esc_over = over && !over->escalations.empty();
  const auto& escs = esc_over ? over->escalations : base.escalations;
  const Scope& escope = esc_over ? oscope : scope;
  const std::uint32_t efile = esc_over ? ofile : file;
  if (escs.size() > ir::max_escalations)
    error("escalate", efile, escs[ir::max_escalations].range,
          fmt::format("a rule can have at most {} 'escalate' clauses", ir::max_escalations));
  for (const auto& e : escs) {
    auto count = const_eval(*e.count, escope, efile);
    const double n =
        count && std::holds_alternative<double>(count->v) ? std::get<double>(count->v) : -1;
    if (!(n >= 1 && n <= 1e6 && n == std::floor(n))) {
      error("escalate", efile, e.count->range,
            "'escalate after' needs a whole number of earlier firings, 1 or more");
      continue;
    }
    auto within = duration(*e.within, escope, efile, "within");
    if (!within) continue;
    static constexpr std::string_view units[] = {"samples", "evals", "steps", "seconds", "epochs"};
    Escalation esc{static_cast<std::uint32_t>(n),
                   within->amount,
                   std::string(units[static_cast<int>(within->unit)]),
                   {}};
    for (const auto& call : e.actions) {
      if (auto a = action(call, escope, efile)) {
        esc.actions.push_back(std::move(*a));
        out.action_sites.emplace_back(efile, call.range);
      }
    }
    out.info.escalations.push_back(std::move(esc));
    out.escalation_within.push_back(*within);
  }
  return error_count() == errors_before && out.condition;
}

std::size_t Checker::error_count() const {
  std::size_t n = 0;
  for (const auto& d : diags_) n += d.level == DiagLevel::error;
  return n;
}

std::optional<Action> Checker::action(const ast::ActionCall& call, const Scope& scope,
                                      std::uint32_t file) {
  auto it = actions_.find(call.name);
  if (it == actions_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, a] : actions_) names.push_back(n);
    std::string near = closest_match(call.name, names);
    std::vector<std::string> notes;
    if (near.empty())
      notes.push_back(fmt::format("a host action must be declared: action {}(...)", call.name));
    error("unknown-action", file, call.name_range, fmt::format("unknown action '{}'", call.name),
          near, std::move(notes));
    return std::nullopt;
  }
  const ast::ActionDecl& decl = *it->second.decl;
  Action out{call.name, {}};
  std::vector<const ast::Expr*> values(decl.params.size(), nullptr);
  std::vector<std::uint32_t> vfiles(decl.params.size(), file);
  std::vector<const Scope*> vscopes(decl.params.size(), &scope);
  std::size_t positional = 0;
  bool ok = true;
  for (const auto& arg : call.args) {
    std::size_t idx = decl.params.size();
    if (arg.name.empty()) {
      idx = positional++;
    } else {
      for (std::size_t i = 0; i < decl.params.size(); ++i)
        if (decl.params[i].name == arg.name) idx = i;
      if (idx == decl.params.size()) {
        std::vector<std::string> names;
        for (const auto& p : decl.params) names.push_back(p.name);
        error("unknown-argument", file, arg.name_range,
              fmt::format("action '{}' has no parameter '{}'", call.name, arg.name),
              closest_match(arg.name, names));
        ok = false;
        continue;
      }
    }
    if (idx >= decl.params.size()) {
      error("arity", file, arg.range, fmt::format("too many arguments for action '{}'", call.name));
      ok = false;
      continue;
    }
    values[idx] = arg.value.get();
  }
  for (std::size_t i = 0; i < decl.params.size(); ++i) {
    const auto& p = decl.params[i];
    const ast::Expr* e = values[i];
    const Scope* s = vscopes[i];
    std::uint32_t f = vfiles[i];
    if (!e) {
      if (!p.default_value) {
        error("missing-argument", file, call.range,
              fmt::format("action '{}' needs a value for '{}'", call.name, p.name));
        ok = false;
        continue;
      }
      e = p.default_value.get();
      s = module_scope(&std_);
      f = it->second.file;
    }
    auto c = const_eval(*e, *s, f);
    bool fits = c && ((p.type == "number" && std::holds_alternative<double>(c->v)) ||
                      (p.type == "string" && std::holds_alternative<std::string>(c->v)) ||
                      (p.type == "bool" && std::holds_alternative<bool>(c->v)) ||
                      (p.type == "duration" && std::holds_alternative<ir::Dur>(c->v)));
    if (!fits) {
      error("type", f, e->range,
            fmt::format("argument '{}' of action '{}' must be a constant {}", p.name, call.name,
                        p.type));
      ok = false;
      continue;
    }
    Value v = std::visit(
        [](const auto& x) -> Value {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, ir::Dur>)
            return x.amount;
          else
            return x;
        },
        c->v);
    out.args.emplace_back(p.name, std::move(v));
  }
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace vigil::interp::checking
