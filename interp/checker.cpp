// AST -> checked IR (see checker.hpp): the entry point, diagnostics, loading
// the standard library, root files and imports (through the SourceLoader),
// declarations (params, lets, actions, aliases) and constant evaluation.
// Rules and templates are check_rules.cpp's, expressions check_expressions.cpp's.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <utility>

#include "interp/checker_impl.hpp"

namespace vigil::interp::checking {

CheckResult Checker::run(const std::vector<RootFile>& roots) {
  load_standard();
  for (const auto& root : roots) {
    std::uint32_t id = sources_.add(root.name, root.text);
    root_dir_ = root.dir;
    // A root file is on the import stack too: a file importing it back is
    // a cycle (one error), not a second load (spurious "already defined").
    std::string key = env_.loader.resolve({}, root.name).key;
    imported_.insert(key);
    import_stack_.push_back(std::move(key));
    load(id, root.dir, user_, &user_rules_);
    import_stack_.pop_back();
  }
  apply_param_overrides();
  const_memo_on_ = true;  // param values are final from here on
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

bool Checker::too_many_errors() const {
  std::size_t n = 0;
  for (const auto& d : diags_) n += d.level == DiagLevel::error;
  return n >= options_.max_errors;
}

void Checker::error(std::string code, std::uint32_t file, SourceRange range, std::string message,
                    std::string suggestion, std::vector<std::string> notes) {
  if (too_many_errors()) return;
  diags_.push_back(Diagnostic{DiagLevel::error, std::move(code), std::move(message), file, range,
                              std::move(suggestion), std::move(notes)});
}

void Checker::warning(std::string code, std::uint32_t file, SourceRange range, std::string message,
                      std::string suggestion) {
  diags_.push_back(Diagnostic{DiagLevel::warning,
                              std::move(code),
                              std::move(message),
                              file,
                              range,
                              std::move(suggestion),
                              {}});
}

std::string Checker::where(std::uint32_t file, SourceRange r) const {
  auto lc = sources_.line_col(file, r.begin);
  return fmt::format("{}:{}:{}", sources_[file].name, lc.line, lc.col);
}

const ast::File* Checker::parse(std::uint32_t id) {
  auto parsed = grammar::parse(sources_, id);
  for (auto& d : parsed.diagnostics) diags_.push_back(std::move(d));
  files_.push_back(std::make_unique<ast::File>(std::move(parsed.file)));
  return files_.back().get();
}

namespace {

// The standard library's files as parsed once per process: the same ~50 KB
// of embedded text in every compile, which parsing anew made most of the
// cost of compiling a small rule file (three quarters of it, measured with
// the compile fuzz target). The trees are immutable and the checker only
// reads them (Module entries point into them), so all compiles share them.
// Their file ids are those of `sources`, which holds every standard file in
// the order load_standard adds them. Each file is parsed on first use: a
// rule file that uses no standard template never pays for the templates'
// files (most of the parse; `rulecheck check` of such a file spent half its
// instructions there), and a one-shot process such as `rulecheck run` is
// all first use.
class StandardFiles {
 public:
  StandardFiles() {
    sources.add("std/prelude.rules", std::string(stdlib::standard_actions_source()));
    for (const auto& f : stdlib::standard_rule_files()) sources.add(std::string(f.name), std::string(f.text));
    parsed_ = std::make_unique<Lazy[]>(sources.size());
  }
  /// File `id`'s tree; thread-safe (compiles may run concurrently).
  const grammar::ParseResult& parsed(std::uint32_t id) const {
    Lazy& l = parsed_[id];
    std::call_once(l.once, [&] { l.result = grammar::parse(sources, id); });
    return l.result;
  }

  SourceSet sources;

 private:
  struct Lazy {
    std::once_flag once;
    grammar::ParseResult result;
  };
  std::unique_ptr<Lazy[]> parsed_;
};

const StandardFiles& standard_files() {
  static const StandardFiles files;
  return files;
}

}  // namespace

void Checker::load_standard() {
  const StandardFiles& standard = standard_files();
  if (sources_.size() != 0) {
    // Files already added before the standard library: the shared trees'
    // file ids would not match, so parse copies (not the case for compile_*).
    for (std::uint32_t i = 0; i < standard.sources.size(); ++i) {
      const auto id = sources_.add(standard.sources[i].name, standard.sources[i].text);
      load(id, parse(id), {}, std_, nullptr);
    }
    return;
  }
  sources_ = standard.sources;  // a copy with its line index: no rescan of the text
  // The prelude (the standard actions) now; the template files when a
  // template is first looked up (std_templates()).
  load_shared_standard(0);
  std_pending_ = 1;
}

void Checker::load_shared_standard(std::uint32_t id) {
  const grammar::ParseResult& parsed = standard_files().parsed(id);
  for (const auto& d : parsed.diagnostics) diags_.push_back(d);
  load(id, &parsed.file, {}, std_, nullptr);
}

const Module& Checker::std_templates() {
  for (; std_pending_ != 0 && std_pending_ < standard_files().sources.size(); ++std_pending_)
    load_shared_standard(std_pending_);
  std_pending_ = 0;
  return std_;
}

void Checker::load(std::uint32_t id, const std::string& dir, Module& module,
                   std::vector<RuleStmt>* rules) {
  load(id, parse(id), dir, module, rules);
}

void Checker::load(std::uint32_t id, const ast::File* file, const std::string& dir,
                   Module& module, std::vector<RuleStmt>* rules) {
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
bool Checker::declare(const Map& map, const std::string& name, std::uint32_t file,
                      SourceRange range, std::string_view what) {
  auto it = map.find(name);
  if (it == map.end()) return true;
  error("duplicate", file, range, fmt::format("{} '{}' is already defined", what, name), {},
        {fmt::format("previous definition at {}",
                     where(it->second.file, it->second.decl->name_range))});
  return false;
}

void Checker::load_import(const ast::ImportDecl& s, std::uint32_t id, const std::string& dir,
                          Module& module, std::vector<RuleStmt>* rules) {
  const ImportTarget target = env_.loader.resolve(dir, s.path);
  // A rule file reads what its author's directory holds, and what the user
  // allowed: an absolute path, or one that leaves the root rule file's
  // directory (`../../../root/.bashrc`, a symlink out), needs an import root.
  const bool absolute = std::filesystem::path(s.path).is_absolute();  // lexical only
  const bool in_roots =
      std::any_of(options_.import_paths.begin(), options_.import_paths.end(),
                  [&](const std::string& r) { return env_.loader.within(target.key, r); });
  if (!in_roots && (absolute || !env_.loader.within(target.key, root_dir_))) {
    error("import", id, s.path_range,
          fmt::format("import '{}' is {}; allow its directory with --import-path DIR "
                      "(CompileOptions::import_paths)",
                      s.path,
                      absolute ? "an absolute path" : "outside the root rule file's directory"));
    return;
  }
  if (std::find(import_stack_.begin(), import_stack_.end(), target.key) != import_stack_.end()) {
    error("import-cycle", id, s.path_range, fmt::format("import cycle through '{}'", s.path));
    return;
  }
  if (!imported_.insert(target.key).second) return;  // each file once
  std::string reason;
  auto text = env_.loader.read(target.path, reason);
  if (!text) {
    error("import", id, s.path_range,
          fmt::format("cannot read imported file '{}': {}", s.path, reason));
    return;
  }
  std::uint32_t child = sources_.add(target.name, std::move(*text));
  import_stack_.push_back(target.key);
  load(child, target.dir, module, rules);
  import_stack_.pop_back();
}

void Checker::declare_alias(const ast::AliasDecl& s, std::uint32_t id) {
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

void Checker::declare_action(const ast::ActionDecl& s, std::uint32_t id) {
  auto it = actions_.find(s.name);
  if (it != actions_.end()) {
    error("duplicate", id, s.name_range, fmt::format("action '{}' is already declared", s.name), {},
          {fmt::format("previous declaration at {}",
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

Value Checker::param_value(const ast::ParamDecl& s, std::uint32_t file, const Module& module) {
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

void Checker::apply_param_overrides() {
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

Binding Checker::resolve(const ast::Expr& expr, const Scope& scope, std::uint32_t file, int depth) {
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

Scope* Checker::module_scope(const Module* m) {
  auto& s = module_scopes_[m];
  if (!s) s = std::make_unique<Scope>(Scope{m, {}});
  return s.get();
}

std::optional<Const> Checker::const_eval(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                         int depth) {
  if (depth > 64) {
    const_cut_ = true;
    return std::nullopt;
  }
  Binding b = resolve(e, scope, file);
  // Only binary nodes fork the walk (and only they are memoised: they are
  // the file's own AST nodes, never a temporary whose address is reused).
  if (!const_memo_on_ || !std::holds_alternative<ast::Binary>(b.expr->node))
    return const_eval_at(b, depth);
  const auto key = std::make_pair(b.expr, b.scope);
  if (auto it = const_memo_.find(key); it != const_memo_.end()) return it->second;
  const bool cut_before = std::exchange(const_cut_, false);
  auto v = const_eval_at(b, depth);
  if (!const_cut_) const_memo_.emplace(key, v);  // a result cut short by depth may differ
  const_cut_ |= cut_before;
  return v;
}

std::optional<Const> Checker::const_eval_at(const Binding& b, int depth) {
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
    if (!l || !std::holds_alternative<double>(l->v)) return std::nullopt;
    auto r = const_eval(*bin->rhs, *b.scope, b.file, depth + 1);
    if (!r || !std::holds_alternative<double>(r->v)) return std::nullopt;
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

std::optional<ir::Dur> Checker::duration(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                         std::string_view clause) {
  auto c = const_eval(e, scope, file);
  if (!c || !std::holds_alternative<ir::Dur>(c->v)) {
    error("duration", file, e.range,
          fmt::format("'{}' needs a duration such as '3 samples', '100 steps' or '10m'", clause));
    return std::nullopt;
  }
  auto d = std::get<ir::Dur>(c->v);
  bool counted = d.unit == ir::Unit::samples || d.unit == ir::Unit::evals;
  // `for 1e308h` is a number, but not one a clock reaches (and `every` turns
  // counts into integers): say so, with the limit, not "non-negative".
  if (d.amount > ir::max_duration_amount) {
    error("duration", file, e.range,
          fmt::format("'{}' duration is out of range: at most {} {}", clause,
                      static_cast<std::int64_t>(ir::max_duration_amount), ir::unit_word(d.unit)));
    return std::nullopt;
  }
  if (!(d.amount >= 0) || !std::isfinite(d.amount) ||
      (counted && d.amount != std::floor(d.amount))) {
    error("duration", file, e.range,
          fmt::format("'{}' duration must be a non-negative{} number", clause,
                      counted ? " whole" : ""));
    return std::nullopt;
  }
  // Epochs are counted by the trace's `epoch` series: a use of it, so a
  // trace without one is warned about ("never appears") instead of the
  // clause silently never completing.
  if (d.unit == ir::Unit::epochs) series_uses_.push_back({"epoch", file, e.range});
  return d;
}

}  // namespace vigil::interp::checking

namespace vigil::interp {

CheckResult check(const std::vector<RootFile>& roots, const CompileOptions& options,
                  const CheckEnv& env, SourceSet& sources, std::vector<Diagnostic>& diags) {
  return checking::Checker(options, env, sources, diags).run(roots);
}

}  // namespace vigil::interp
