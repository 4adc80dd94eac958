// AST -> checked IR: names, types, templates, imports, actions.
#include "interp/checker.hpp"

#include <re2/re2.h>

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <sstream>

#include "grammar/parser.hpp"
#include "grammar/source_file.hpp"
#include "vigil/tensor.hpp"

namespace vigil::interp {
namespace {

using stdlib::ArgType;
using stdlib::FnKind;
using stdlib::FunctionDef;

/// A compile-time constant.
struct Const {
  std::variant<double, bool, std::string, ir::Dur> v;
};

std::string_view kind_name(const Const& c) {
  switch (c.v.index()) {
    case 0: return "a number";
    case 1: return "a boolean";
    case 2: return "a string";
    default: return "a duration";
  }
}

struct Scope;

/// A name bound to an expression written somewhere else (a template
/// argument or default, or a let), to be checked in the scope it was written in.
struct Binding {
  const ast::Expr* expr = nullptr;
  const Scope* scope = nullptr;
  std::uint32_t file = 0;
};

/// Declarations visible to the statements of one module: the user's files
/// (and their imports) form one module, the standard library another.
struct Module {
  struct Let {
    const ast::LetDecl* decl;
    std::uint32_t file;
  };
  struct Param {
    const ast::ParamDecl* decl;
    std::uint32_t file;
    Value value;
  };
  struct Template {
    const ast::RuleDecl* decl;
    std::uint32_t file;
  };
  std::map<std::string, Let, std::less<>> lets;
  std::map<std::string, Param, std::less<>> params;
  std::map<std::string, Template, std::less<>> templates;
};

struct Scope {
  const Module* module = nullptr;
  std::map<std::string, Binding, std::less<>> bindings;  // template parameters
};

struct ActionDef {
  const ast::ActionDecl* decl;
  std::uint32_t file;
};

/// A statement that makes a rule, in program order.
struct RuleStmt {
  const ast::Statement* stmt;
  std::uint32_t file;
};

class Checker {
 public:
  Checker(const CompileOptions& options, SourceSet& sources, std::vector<Diagnostic>& diags)
      : options_(options), sources_(sources), diags_(diags) {}

  CheckResult run(const std::vector<RootFile>& roots) {
    load_standard();
    for (const auto& root : roots) {
      std::uint32_t id = sources_.add(root.name, root.text);
      root_dir_ = root.dir;
      // A root file is on the import stack too: a file importing it back is
      // a cycle (one error), not a second load (spurious "already defined").
      std::error_code ec;
      auto key = std::filesystem::weakly_canonical(std::filesystem::absolute(root.name, ec), ec).string();
      imported_.insert(key);
      import_stack_.push_back(std::move(key));
      load(id, root.dir, user_, &user_rules_);
      import_stack_.pop_back();
    }
    apply_param_overrides();
    CheckResult result;
    for (const auto& [name, p] : user_.params) result.params[name] = p.value;
    for (const auto& rs : user_rules_) {
      if (too_many_errors()) break;
      if (auto rule = instantiate(rs)) {
        if (!rule_names_.insert(rule->info.name).second) {
          error("duplicate-rule", rs.file, rule->info.range,
                fmt::format("rule '{}' is already defined", rule->info.name));
          continue;
        }
        result.rules.push_back(std::move(*rule));
      }
    }
    check_unused_templates();
    for (const auto& [from, to] : options_.aliases) aliases_[from] = AliasDef{to, 0, {}};
    for (const auto& [from, def] : aliases_) result.aliases.emplace_back(from, def.to);
    result.series_uses = std::move(series_uses_);
    return result;
  }

 private:
  // ---- diagnostics --------------------------------------------------------

  bool too_many_errors() const {
    std::size_t n = 0;
    for (const auto& d : diags_) n += d.level == DiagLevel::error;
    return n >= options_.max_errors;
  }

  void error(std::string code, std::uint32_t file, SourceRange range, std::string message,
             std::string suggestion = {}, std::vector<std::string> notes = {}) {
    if (too_many_errors()) return;
    diags_.push_back(Diagnostic{DiagLevel::error, std::move(code), std::move(message), file, range,
                                std::move(suggestion), std::move(notes)});
  }
  void warning(std::string code, std::uint32_t file, SourceRange range, std::string message,
               std::string suggestion = {}) {
    diags_.push_back(Diagnostic{DiagLevel::warning, std::move(code), std::move(message), file,
                                range, std::move(suggestion), {}});
  }

  std::string where(std::uint32_t file, SourceRange r) const {
    auto lc = sources_.line_col(file, r.begin);
    return fmt::format("{}:{}:{}", sources_[file].name, lc.line, lc.col);
  }

  // ---- loading ------------------------------------------------------------

  const ast::File* parse(std::uint32_t id) {
    auto parsed = grammar::parse(sources_, id);
    for (auto& d : parsed.diagnostics) diags_.push_back(std::move(d));
    files_.push_back(std::make_unique<ast::File>(std::move(parsed.file)));
    return files_.back().get();
  }

  void load_standard() {
    std::uint32_t id = sources_.add("std/prelude.rules",
                                    std::string(stdlib::standard_actions_source()));
    load(id, {}, std_, nullptr);
    for (const auto& f : stdlib::standard_rule_files()) {
      id = sources_.add(std::string(f.name), std::string(f.text));
      load(id, {}, std_, nullptr);
    }
  }

  /// Registers the declarations of file `id` (and its imports, in place) in
  /// `module`; rule-making statements go to `rules` (null: the standard
  /// library, whose non-template rules are not run).
  void load(std::uint32_t id, const std::string& dir, Module& module,
            std::vector<RuleStmt>* rules) {
    const ast::File* file = parse(id);
    for (const auto& stmt : file->statements) {
      std::visit(
          [&](const auto& s) {
            using S = std::decay_t<decltype(s)>;
            if constexpr (std::is_same_v<S, ast::ImportDecl>) {
              load_import(s, id, dir, module, rules);
            } else if constexpr (std::is_same_v<S, ast::ParamDecl>) {
              if (declare(module.params, s.name, id, s.name_range, "param"))
                module.params.emplace(s.name, Module::Param{&s, id, param_value(s, id, module)});
            } else if constexpr (std::is_same_v<S, ast::LetDecl>) {
              if (declare(module.lets, s.name, id, s.name_range, "let"))
                module.lets.emplace(s.name, Module::Let{&s, id});
            } else if constexpr (std::is_same_v<S, ast::ActionDecl>) {
              declare_action(s, id);
            } else if constexpr (std::is_same_v<S, ast::RuleDecl>) {
              if (s.is_template) {
                if (declare(module.templates, s.name, id, s.name_range, "template"))
                  module.templates.emplace(s.name, Module::Template{&s, id});
              } else if (rules) {
                rules->push_back({&stmt, id});
              }
            } else if constexpr (std::is_same_v<S, ast::UseDecl>) {
              if (rules) rules->push_back({&stmt, id});
            } else if constexpr (std::is_same_v<S, ast::AliasDecl>) {
              declare_alias(s, id);
            }
          },
          stmt);
    }
  }

  template <class Map>
  bool declare(const Map& map, const std::string& name, std::uint32_t file, SourceRange range,
               std::string_view what) {
    auto it = map.find(name);
    if (it == map.end()) return true;
    error("duplicate", file, range, fmt::format("{} '{}' is already defined", what, name), {},
          {fmt::format("previous definition at {}", where(it->second.file,
                                                           it->second.decl->name_range))});
    return false;
  }

  /// Whether `canon` (a weakly canonical path: symlinks resolved) lies in
  /// `dir` or below it.
  static bool within(const std::filesystem::path& canon, const std::string& dir) {
    std::error_code ec;
    // absolute first: weakly_canonical leaves a relative path whose first
    // component does not exist relative.
    const auto base = std::filesystem::weakly_canonical(
        std::filesystem::absolute(dir.empty() ? "." : dir, ec), ec);
    if (ec) return false;
    const auto rel = canon.lexically_relative(base);
    return !rel.empty() && *rel.begin() != "..";
  }

  void load_import(const ast::ImportDecl& s, std::uint32_t id, const std::string& dir,
                   Module& module, std::vector<RuleStmt>* rules) {
    namespace fs = std::filesystem;
    // Relative to the importing file; like a compiler's -I, an import root
    // (CompileOptions::import_paths) is searched when that file is not there.
    const fs::path written(s.path);
    fs::path path = written.is_absolute() ? written : fs::path(dir) / written;
    std::error_code ec;
    if (!written.is_absolute() && !fs::exists(path, ec))
      for (const auto& root : options_.import_paths)
        if (fs::exists(fs::path(root) / written, ec)) {
          path = fs::path(root) / written;
          break;
        }
    fs::path canon = fs::weakly_canonical(fs::absolute(path, ec), ec);
    if (ec) canon = fs::absolute(path, ec).lexically_normal();
    // A rule file reads what its author's directory holds, and what the user
    // allowed: an absolute path, or one that leaves the root rule file's
    // directory (`../../../root/.bashrc`, a symlink out), needs an import root.
    const bool in_roots = std::any_of(options_.import_paths.begin(), options_.import_paths.end(),
                                      [&](const std::string& r) { return within(canon, r); });
    if (!in_roots && (written.is_absolute() || !within(canon, root_dir_))) {
      error("import", id, s.path_range,
            fmt::format("import '{}' is {}; allow its directory with --import-path DIR "
                        "(CompileOptions::import_paths)",
                        s.path,
                        written.is_absolute() ? "an absolute path"
                                              : "outside the root rule file's directory"));
      return;
    }
    std::string key = canon.string();
    if (std::find(import_stack_.begin(), import_stack_.end(), key) != import_stack_.end()) {
      error("import-cycle", id, s.path_range, fmt::format("import cycle through '{}'", s.path));
      return;
    }
    if (!imported_.insert(key).second) return;  // each file once
    std::string text, reason;
    if (!grammar::read_source_file(path.string(), text, reason)) {
      error("import", id, s.path_range,
            fmt::format("cannot read imported file '{}': {}", s.path, reason));
      return;
    }
    std::uint32_t child = sources_.add(path.lexically_normal().string(), std::move(text));
    import_stack_.push_back(key);
    load(child, path.parent_path().string(), module, rules);
    import_stack_.pop_back();
  }

  void declare_alias(const ast::AliasDecl& s, std::uint32_t id) {
    for (std::size_t i = 0; i < s.targets.size(); ++i) {
      const auto& from = s.targets[i];
      if (from == s.name) continue;  // reading a series as itself
      auto [it, added] = aliases_.try_emplace(from, AliasDef{s.name, id, s.target_ranges[i]});
      if (!added && it->second.to != s.name)
        error("duplicate", id, s.target_ranges[i],
              fmt::format("series '{}' is already an alias of '{}'", from, it->second.to), {},
              {fmt::format("previous alias at {}", where(it->second.file, it->second.range))});
    }
  }

  void declare_action(const ast::ActionDecl& s, std::uint32_t id) {
    auto it = actions_.find(s.name);
    if (it != actions_.end()) {
      error("duplicate", id, s.name_range, fmt::format("action '{}' is already declared", s.name),
            {}, {fmt::format("previous declaration at {}",
                             where(it->second.file, it->second.decl->name_range))});
      return;
    }
    static const std::vector<std::string> types = {"number", "string", "bool", "duration"};
    for (const auto& p : s.params)
      if (std::find(types.begin(), types.end(), p.type) == types.end())
        error("type", id, p.type_range, fmt::format("unknown parameter type '{}'", p.type),
              closest_match(p.type, types));
    actions_.emplace(s.name, ActionDef{&s, id});
  }

  Value param_value(const ast::ParamDecl& s, std::uint32_t file, const Module& module) {
    Scope scope{&module, {}};
    auto c = const_eval(*s.value, scope, file);
    if (!c || c->v.index() == 3) {
      error("param", file, s.value->range,
            "a param's value must be a constant number, string or boolean");
      return 0.0;
    }
    return std::visit(
        [](const auto& v) -> Value {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, ir::Dur>)
            return 0.0;
          else
            return v;
        },
        c->v);
  }

  void apply_param_overrides() {
    for (const auto& [name, value] : options_.params) {
      auto it = user_.params.find(name);
      if (it == user_.params.end()) {
        // Point at the override itself, shown as the command line wrote it.
        std::vector<std::string> names;
        for (const auto& [n, p] : user_.params) names.push_back(n);
        std::uint32_t id = sources_.add("--param", name + "=" + to_string(value));
        error("unknown-param", id, {0, static_cast<std::uint32_t>(name.size())},
              fmt::format("no param named '{}' to override", name), closest_match(name, names));
        continue;
      }
      if (it->second.value.index() != value.index() &&
          !(std::holds_alternative<double>(it->second.value) &&
            std::holds_alternative<bool>(value))) {
        error("param", it->second.file, it->second.decl->name_range,
              fmt::format("override of param '{}' has the wrong kind", name));
        continue;
      }
      it->second.value = value;
    }
  }

  // ---- constants ----------------------------------------------------------

  /// Resolves `expr` through Name bindings to the expression it stands for
  /// (a template argument, a let's value), with the scope to check it in.
  /// Params and series names resolve to themselves.
  Binding resolve(const ast::Expr& expr, const Scope& scope, std::uint32_t file, int depth = 0) {
    const auto* name = std::get_if<ast::Name>(&expr.node);
    if (!name || depth > 64) return {&expr, &scope, file};
    if (auto it = scope.bindings.find(name->name); it != scope.bindings.end())
      return resolve(*it->second.expr, *it->second.scope, it->second.file, depth + 1);
    if (auto it = scope.module->lets.find(name->name); it != scope.module->lets.end()) {
      Scope* ms = module_scope(scope.module);
      return resolve(*it->second.decl->value, *ms, it->second.file, depth + 1);
    }
    return {&expr, &scope, file};
  }

  Scope* module_scope(const Module* m) {
    auto& s = module_scopes_[m];
    if (!s) s = std::make_unique<Scope>(Scope{m, {}});
    return s.get();
  }

  std::optional<Const> const_eval(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                  int depth = 0) {
    if (depth > 64) return std::nullopt;
    Binding b = resolve(e, scope, file);
    const ast::Expr& x = *b.expr;
    if (const auto* n = std::get_if<ast::Number>(&x.node)) return Const{n->value};
    if (const auto* s = std::get_if<ast::String>(&x.node)) return Const{s->value};
    if (const auto* bl = std::get_if<ast::Bool>(&x.node)) return Const{bl->value};
    if (const auto* n = std::get_if<ast::Name>(&x.node)) {
      if (auto it = b.scope->module->params.find(n->name); it != b.scope->module->params.end())
        return std::visit([](const auto& v) { return Const{v}; }, it->second.value);
      return std::nullopt;
    }
    if (const auto* d = std::get_if<ast::Duration>(&x.node)) {
      auto amount = const_eval(*d->amount, *b.scope, b.file, depth + 1);
      if (!amount || !std::holds_alternative<double>(amount->v)) return std::nullopt;
      double a = std::get<double>(amount->v);
      switch (d->unit) {
        case ast::DurUnit::samples: return Const{ir::Dur{ir::Unit::samples, a}};
        case ast::DurUnit::evals: return Const{ir::Dur{ir::Unit::evals, a}};
        case ast::DurUnit::steps: return Const{ir::Dur{ir::Unit::steps, a}};
        case ast::DurUnit::epochs: return Const{ir::Dur{ir::Unit::epochs, a}};
        case ast::DurUnit::seconds: return Const{ir::Dur{ir::Unit::seconds, a}};
        case ast::DurUnit::minutes: return Const{ir::Dur{ir::Unit::seconds, a * 60}};
        case ast::DurUnit::hours: return Const{ir::Dur{ir::Unit::seconds, a * 3600}};
      }
    }
    if (const auto* u = std::get_if<ast::Unary>(&x.node)) {
      auto v = const_eval(*u->operand, *b.scope, b.file, depth + 1);
      if (!v) return std::nullopt;
      if (u->op == ast::UnaryOp::neg && std::holds_alternative<double>(v->v))
        return Const{-std::get<double>(v->v)};
      if (u->op == ast::UnaryOp::not_ && std::holds_alternative<bool>(v->v))
        return Const{!std::get<bool>(v->v)};
      return std::nullopt;
    }
    if (const auto* bin = std::get_if<ast::Binary>(&x.node)) {
      auto l = const_eval(*bin->lhs, *b.scope, b.file, depth + 1);
      auto r = const_eval(*bin->rhs, *b.scope, b.file, depth + 1);
      if (!l || !r || !std::holds_alternative<double>(l->v) ||
          !std::holds_alternative<double>(r->v))
        return std::nullopt;
      double a = std::get<double>(l->v), c = std::get<double>(r->v);
      switch (bin->op) {
        case ast::BinaryOp::add: return Const{a + c};
        case ast::BinaryOp::sub: return Const{a - c};
        case ast::BinaryOp::mul: return Const{a * c};
        case ast::BinaryOp::div: return Const{a / c};
        case ast::BinaryOp::mod: return Const{std::fmod(a, c)};
        case ast::BinaryOp::pow: return Const{std::pow(a, c)};
        default: return std::nullopt;
      }
    }
    return std::nullopt;
  }

  /// A clause duration (`for 3 samples`, `cooldown n`).
  std::optional<ir::Dur> duration(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                  std::string_view clause) {
    auto c = const_eval(e, scope, file);
    if (!c || !std::holds_alternative<ir::Dur>(c->v)) {
      error("duration", file, e.range,
            fmt::format("'{}' needs a duration such as '3 samples', '100 steps' or '10m'", clause));
      return std::nullopt;
    }
    auto d = std::get<ir::Dur>(c->v);
    bool counted = d.unit == ir::Unit::samples || d.unit == ir::Unit::evals;
    if (!(d.amount >= 0) || !std::isfinite(d.amount) || (counted && d.amount != std::floor(d.amount))) {
      error("duration", file, e.range,
            fmt::format("'{}' duration must be a non-negative{} number", clause,
                        counted ? " whole" : ""));
      return std::nullopt;
    }
    return d;
  }

  // ---- rules --------------------------------------------------------------

  std::optional<ir::Rule> instantiate(const RuleStmt& rs) {
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
    const Module& from = use.std_prefix ? std_ : user_;
    auto it = from.templates.find(use.template_name);
    if (it == from.templates.end()) {
      std::vector<std::string> names;
      for (const auto& [n, t] : from.templates) names.push_back(n);
      std::string suggestion = closest_match(use.template_name, names);
      if (!suggestion.empty() && use.std_prefix) suggestion = "std." + suggestion;
      if (suggestion.empty() && !use.std_prefix &&
          std_.templates.count(use.template_name))
        suggestion = "std." + use.template_name;
      error("unknown-template", rs.file, use.name_range,
            fmt::format("unknown template '{}{}'", use.std_prefix ? "std." : "",
                        use.template_name),
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
                fmt::format("too many arguments for template '{}' ({} parameters)",
                            use.template_name, tmpl.params.size()));
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
        error("missing-argument", rs.file, use.name_range,
              fmt::format("template '{}' needs a value for parameter '{}'", use.template_name,
                          p.name));
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

  /// A template no `use` instantiates is still checked, with its defaults,
  /// so a typo in it is found before someone first uses it. Templates with
  /// a required parameter cannot be checked alone.
  void check_unused_templates() {
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

  std::string arg_kind(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
    if (auto c = const_eval(e, scope, file)) return std::string(kind_name(*c));
    Binding b = resolve(e, scope, file);
    if (std::holds_alternative<ast::Name>(b.expr->node) ||
        std::holds_alternative<ast::Selector>(b.expr->node) ||
        std::holds_alternative<ast::Member>(b.expr->node))
      return "a series";
    return "an expression";
  }

  std::string anonymous_name(std::uint32_t file, const ast::Clauses& c) {
    auto lc = sources_.line_col(file, c.when_keyword.begin);
    return fmt::format("{}:{}", sources_[file].name, lc.line);
  }

  /// Fills `out` from a rule's clauses, each possibly overridden by `over`
  /// (a `use`). Template clauses are checked in `scope`/`file`, overrides in
  /// `oscope`/`ofile`.
  bool build(ir::Rule& out, const ast::Clauses& base, const ast::Clauses* over,
             const Scope& scope, std::uint32_t file, const Scope& oscope, std::uint32_t ofile) {
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
    if (mode_over)
      out.info.mode = mode_word(*over->mode, oscope, ofile);
    else if (base.mode)
      out.info.mode = mode_word(*base.mode, scope, file);

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
    if (escs.size() > max_escalations)
      error("escalate", efile, escs[max_escalations].range,
            fmt::format("a rule can have at most {} 'escalate' clauses", max_escalations));
    for (const auto& e : escs) {
      auto count = const_eval(*e.count, escope, efile);
      const double n = count && std::holds_alternative<double>(count->v) ? std::get<double>(count->v) : -1;
      if (!(n >= 1 && n <= 1e6 && n == std::floor(n))) {
        error("escalate", efile, e.count->range,
              "'escalate after' needs a whole number of earlier firings, 1 or more");
        continue;
      }
      auto within = duration(*e.within, escope, efile, "within");
      if (!within) continue;
      static constexpr std::string_view units[] = {"samples", "evals", "steps", "seconds", "epochs"};
      Escalation esc{static_cast<std::uint32_t>(n), within->amount,
                     std::string(units[static_cast<int>(within->unit)]), {}};
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

  std::size_t error_count() const {
    std::size_t n = 0;
    for (const auto& d : diags_) n += d.level == DiagLevel::error;
    return n;
  }

  std::optional<Action> action(const ast::ActionCall& call, const Scope& scope,
                               std::uint32_t file) {
    auto it = actions_.find(call.name);
    if (it == actions_.end()) {
      std::vector<std::string> names;
      for (const auto& [n, a] : actions_) names.push_back(n);
      std::string near = closest_match(call.name, names);
      std::vector<std::string> notes;
      if (near.empty())
        notes.push_back(fmt::format("a host action must be declared: action {}(...)", call.name));
      error("unknown-action", file, call.name_range,
            fmt::format("unknown action '{}'", call.name), near, std::move(notes));
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
        error("arity", file, arg.range,
              fmt::format("too many arguments for action '{}'", call.name));
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

  // ---- expressions --------------------------------------------------------

  ir::NodePtr node(ir::Op op, std::uint32_t file, SourceRange range) {
    auto n = std::make_unique<ir::Node>();
    n->op = op;
    n->file = file;
    n->range = range;
    return n;
  }

  ir::NodePtr constant(double v, ir::Type t, std::uint32_t file, SourceRange range) {
    auto n = node(ir::Op::constant, file, range);
    n->constant = v;
    n->type = t;
    return n;
  }

  ir::NodePtr expr(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
    if (++depth_ > 512) {  // lets and templates can nest beyond the parser's bound
      --depth_;
      error("depth", file, e.range, "expression nested too deeply (through lets or templates)");
      return nullptr;
    }
    auto out = expr_inner(e, scope, file);
    --depth_;
    return out;
  }

  ir::NodePtr expr_inner(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
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
              error("type", file, n.op_range,
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

  ir::NodePtr name(const ast::Name& n, const ast::Expr& e, const Scope& scope,
                   std::uint32_t file) {
    if (!n.backticked) {
      if (auto it = scope.bindings.find(n.name); it != scope.bindings.end())
        return expr(*it->second.expr, *it->second.scope, it->second.file);
      if (auto it = scope.module->lets.find(n.name); it != scope.module->lets.end()) {
        if (!expanding_.insert(n.name).second) {
          error("let-cycle", file, e.range, fmt::format("let '{}' refers to itself", n.name));
          return nullptr;
        }
        auto out = expr(*it->second.decl->value, *module_scope(scope.module), it->second.file);
        expanding_.erase(n.name);
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

  std::optional<ir::Selector> selector(const ast::Selector& s, std::uint32_t file) {
    ir::Selector out{s.name, {}};
    bool ok = true;
    for (const auto& m : s.matchers) {
      auto op = static_cast<ir::MatchOp>(static_cast<int>(m.op));
      if (op == ir::MatchOp::re || op == ir::MatchOp::nre) {
        RE2 re(m.value, RE2::Quiet);
        if (!re.ok()) {
          error("regex", file, m.range,
                fmt::format("invalid regular expression: {}", re.error()));
          ok = false;
        }
      }
      out.matchers.push_back({m.label, op, m.value});
    }
    if (!ok) return std::nullopt;
    return out;
  }

  ir::NodePtr binary(const ast::Binary& n, const ast::Expr& e, const Scope& scope,
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
    static constexpr std::string_view spelling[] = {"or", "and", "<", "<=", ">", ">=", "==",
                                                    "!=", "+", "-", "*", "/", "%", "^"};
    const auto sp = spelling[static_cast<int>(n.op)];
    ir::Op op{};
    ir::Type want = ir::Type::number, result = ir::Type::number;
    switch (n.op) {
      case B::or_: op = ir::Op::or_; want = result = ir::Type::boolean; break;
      case B::and_: op = ir::Op::and_; want = result = ir::Type::boolean; break;
      case B::lt: op = ir::Op::lt; result = ir::Type::boolean; break;
      case B::le: op = ir::Op::le; result = ir::Type::boolean; break;
      case B::gt: op = ir::Op::gt; result = ir::Type::boolean; break;
      case B::ge: op = ir::Op::ge; result = ir::Type::boolean; break;
      case B::eq: op = ir::Op::eq; result = ir::Type::boolean; break;
      case B::ne: op = ir::Op::ne; result = ir::Type::boolean; break;
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

  ir::NodePtr call(const ast::Call& c, const ast::Expr& e, const Scope& scope,
                   std::uint32_t file) {
    const auto& registry = stdlib::standard_functions();
    auto overloads = registry.lookup(c.fn);
    if (overloads.empty()) {
      error("unknown-function", file, c.fn_range, fmt::format("unknown function '{}'", c.fn),
            closest_match(c.fn, registry.names()));
      return nullptr;
    }
    // A subscripted first argument selects the range overloads.
    const bool ranged =
        !c.args.empty() &&
        std::holds_alternative<ast::Subscript>(resolve(*c.args[0], scope, file).expr->node);
    const FunctionDef* fn = nullptr;
    for (const auto* d : overloads) {
      if ((d->kind == FnKind::range) != ranged) continue;
      const bool arity_ok = d->variadic ? c.args.size() >= d->params.size()
                                        : c.args.size() == d->params.size();
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
            fmt::format("no form of '{}' takes {} {}argument{}; expected {}", c.fn,
                        c.args.size(), ranged ? "range " : "", c.args.size() == 1 ? "" : "s",
                        forms));
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
          double x = std::get<double>(v->v);
          if (fn->name == "quantile" && !(x >= 0 && x <= 1)) {
            error("range", file, arg.range, "quantile must be between 0 and 1");
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

  bool choice_arg(ir::Node& out, const FunctionDef& fn, const stdlib::Param& p,
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

  /// The series `e` denotes (through lets and template arguments): a series
  /// name, a selector, or a tensor stat `T.stat`; the use is recorded. Errors
  /// (a param, an expression) say `what` was expected.
  std::optional<ir::Selector> series_ref(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                         std::string_view what = "a series") {
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

  /// Whether `e` names a series (through lets and template arguments) rather
  /// than computing something: `loss`, `grad{layer="a"}`, `grad.norm`, a param.
  bool names_series(const ast::Expr& e, const Scope& scope, std::uint32_t file) {
    const auto& node = resolve(e, scope, file).expr->node;
    return std::holds_alternative<ast::Name>(node) || std::holds_alternative<ast::Selector>(node) ||
           std::holds_alternative<ast::Member>(node);
  }

  static bool reads_series(const ir::Node& n) {
    if (n.op == ir::Op::selector || !n.selector.name.empty()) return true;
    return std::any_of(n.args.begin(), n.args.end(), [](const auto& a) { return reads_series(*a); });
  }

  /// The derived-series suffix of `T.stat` or `T.stat(args)`: the stat name,
  /// and for a parameterised stat its constant arguments in canonical form.
  std::optional<std::string> stat_suffix(const ast::Member& m, const Scope& scope,
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

  bool range_arg(ir::Node& out, const ast::Expr& arg, const Scope& scope, std::uint32_t file) {
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
        for (const auto* d : stdlib::standard_functions().lookup(out.fn->name))
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

  /// Escalation levels an element's state tracks (ElemState in the engine).
  static constexpr std::size_t max_escalations = 4;

  const CompileOptions& options_;
  SourceSet& sources_;
  std::vector<Diagnostic>& diags_;
  std::vector<std::unique_ptr<ast::File>> files_;
  Module user_, std_;
  std::vector<RuleStmt> user_rules_;
  std::map<std::string, ActionDef, std::less<>> actions_;
  struct AliasDef {
    std::string to;
    std::uint32_t file;
    SourceRange range;
  };
  std::map<std::string, AliasDef> aliases_;  // trace name -> rule name
  std::map<const Module*, std::unique_ptr<Scope>> module_scopes_;
  std::vector<std::unique_ptr<Scope>> template_scopes_;
  std::vector<std::string> import_stack_;
  std::string root_dir_;  // the directory of the root file being loaded; imports stay below it
  std::set<std::string> imported_;
  std::set<std::string> expanding_;
  std::set<std::string> rule_names_;
  std::vector<SeriesUse> series_uses_;
  int depth_ = 0;
};

}  // namespace

CheckResult check(const std::vector<RootFile>& roots, const CompileOptions& options,
                  SourceSet& sources, std::vector<Diagnostic>& diags) {
  return Checker(options, sources, diags).run(roots);
}

}  // namespace vigil::interp
