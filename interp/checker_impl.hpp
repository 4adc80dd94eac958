// The checker's internals, shared by its three files (one class, split by
// what it checks):
//   checker.cpp            entry point, diagnostics, loading files and imports,
//                          declarations (params, lets, actions, aliases), constants
//   check_rules.cpp        rules and templates: `use`, clauses, actions, escalation
//   check_expressions.cpp  expressions: names, selectors, operators, calls, ranges
// Internal to interp/: nothing outside the checker includes it. Must not touch
// the planner or the engine; reads files only through CheckEnv::loader and
// functions only through CheckEnv::functions.
#pragma once

#include <re2/re2.h>

#include <fmt/format.h>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "grammar/parser.hpp"
#include "interp/checker.hpp"
#include "vigil/tensor.hpp"

namespace vigil::interp::checking {

using stdlib::ArgType;
using stdlib::FnKind;
using stdlib::FunctionDef;

/// A compile-time constant.
struct Const {
  std::variant<double, bool, std::string, ir::Dur> v;
};

inline std::string_view kind_name(const Const& c) {
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
  Checker(const CompileOptions& options, const CheckEnv& env, SourceSet& sources,
          std::vector<Diagnostic>& diags)
      : options_(options), env_(env), sources_(sources), diags_(diags) {}

  CheckResult run(const std::vector<RootFile>& roots);

 private:
  // ---- diagnostics (checker.cpp) -----------------------------------------

  bool too_many_errors() const;

  void error(std::string code, std::uint32_t file, SourceRange range, std::string message,
             std::string suggestion = {}, std::vector<std::string> notes = {});
  void warning(std::string code, std::uint32_t file, SourceRange range, std::string message,
               std::string suggestion = {});

  std::string where(std::uint32_t file, SourceRange r) const;

  // ---- loading (checker.cpp) ---------------------------------------------

  const ast::File* parse(std::uint32_t id);

  /// Adds the standard library: its files' text, and the declarations of
  /// the prelude; the template files load on first use (std_templates()).
  void load_standard();
  void load_shared_standard(std::uint32_t id);
  /// The standard module with every template loaded.
  const Module& std_templates();

  /// Registers the declarations of file `id` (and its imports, in place) in
  /// `module`; rule-making statements go to `rules` (null: the standard
  /// library, whose non-template rules are not run).
  void load(std::uint32_t id, const std::string& dir, Module& module, std::vector<RuleStmt>* rules);
  /// The same for a file already parsed (the shared standard library trees).
  void load(std::uint32_t id, const ast::File* file, const std::string& dir, Module& module,
            std::vector<RuleStmt>* rules);

  template <class Map>
  bool declare(const Map& map, const std::string& name, std::uint32_t file, SourceRange range,
               std::string_view what);

  void load_import(const ast::ImportDecl& s, std::uint32_t id, const std::string& dir,
                   Module& module, std::vector<RuleStmt>* rules);

  void declare_alias(const ast::AliasDecl& s, std::uint32_t id);

  void declare_action(const ast::ActionDecl& s, std::uint32_t id);

  Value param_value(const ast::ParamDecl& s, std::uint32_t file, const Module& module);

  void apply_param_overrides();

  // ---- constants (checker.cpp) -------------------------------------------

  /// Resolves `expr` through Name bindings to the expression it stands for
  /// (a template argument, a let's value), with the scope to check it in.
  /// Params and series names resolve to themselves.
  Binding resolve(const ast::Expr& expr, const Scope& scope, std::uint32_t file, int depth = 0);

  Scope* module_scope(const Module* m);

  std::optional<Const> const_eval(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                  int depth = 0);
  /// const_eval of an expression resolved through names.
  std::optional<Const> const_eval_at(const Binding& b, int depth);

  /// A clause duration (`for 3 samples`, `cooldown n`).
  std::optional<ir::Dur> duration(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                  std::string_view clause);

  // ---- rules (check_rules.cpp) -------------------------------------------

  std::optional<ir::Rule> instantiate(const RuleStmt& rs);

  /// A template no `use` instantiates is still checked, with its defaults,
  /// so a typo in it is found before someone first uses it. Templates with
  /// a required parameter cannot be checked alone.
  void check_unused_templates();

  std::string arg_kind(const ast::Expr& e, const Scope& scope, std::uint32_t file);

  std::string anonymous_name(std::uint32_t file, const ast::Clauses& c);

  /// Fills `out` from a rule's clauses, each possibly overridden by `over`
  /// (a `use`). Template clauses are checked in `scope`/`file`, overrides in
  /// `oscope`/`ofile`.
  bool build(ir::Rule& out, const ast::Clauses& base, const ast::Clauses* over, const Scope& scope,
             std::uint32_t file, const Scope& oscope, std::uint32_t ofile);

  std::size_t error_count() const;

  std::optional<Action> action(const ast::ActionCall& call, const Scope& scope, std::uint32_t file);

  // ---- expressions (check_expressions.cpp) -------------------------------

  ir::NodePtr node(ir::Op op, std::uint32_t file, SourceRange range);

  ir::NodePtr constant(double v, ir::Type t, std::uint32_t file, SourceRange range);

  ir::NodePtr expr(const ast::Expr& e, const Scope& scope, std::uint32_t file);

  ir::NodePtr expr_inner(const ast::Expr& e, const Scope& scope, std::uint32_t file);

  ir::NodePtr name(const ast::Name& n, const ast::Expr& e, const Scope& scope, std::uint32_t file);

  std::optional<ir::Selector> selector(const ast::Selector& s, std::uint32_t file);

  ir::NodePtr binary(const ast::Binary& n, const ast::Expr& e, const Scope& scope,
                     std::uint32_t file);

  ir::NodePtr call(const ast::Call& c, const ast::Expr& e, const Scope& scope, std::uint32_t file);

  bool choice_arg(ir::Node& out, const FunctionDef& fn, const stdlib::Param& p,
                  const std::optional<Const>& v, const ast::Expr& arg, std::uint32_t file);

  /// The series `e` denotes (through lets and template arguments): a series
  /// name, a selector, or a tensor stat `T.stat`; the use is recorded. Errors
  /// (a param, an expression) say `what` was expected.
  std::optional<ir::Selector> series_ref(const ast::Expr& e, const Scope& scope, std::uint32_t file,
                                         std::string_view what = "a series");

  /// Whether `e` names a series (through lets and template arguments) rather
  /// than computing something: `loss`, `grad{layer="a"}`, `grad.norm`, a param.
  bool names_series(const ast::Expr& e, const Scope& scope, std::uint32_t file);

  static bool reads_series(const ir::Node& n);

  /// The derived-series suffix of `T.stat` or `T.stat(args)`: the stat name,
  /// and for a parameterised stat its constant arguments in canonical form.
  std::optional<std::string> stat_suffix(const ast::Member& m, const Scope& scope,
                                         std::uint32_t file);

  bool range_arg(ir::Node& out, const ast::Expr& arg, const Scope& scope, std::uint32_t file);

  const CompileOptions& options_;
  const CheckEnv& env_;
  SourceSet& sources_;
  std::vector<Diagnostic>& diags_;
  std::vector<std::unique_ptr<ast::File>> files_;
  Module user_, std_;
  std::uint32_t std_pending_ = 0;  // the next standard file to load; 0: none left
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
  /// Each let's checked body (null if it has errors, reported once) and the
  /// series uses it adds, by declaration.
  struct LetIR {
    ir::NodePtr node;
    std::vector<SeriesUse> uses;
  };
  std::map<const ast::LetDecl*, LetIR> let_ir_;
  /// const_eval's results for binary expressions by (expression, scope),
  /// filled once params are final: a let chain of constants is evaluated
  /// once per let, not 2^n times.
  std::map<std::pair<const ast::Expr*, const Scope*>, std::optional<Const>> const_memo_;
  bool const_memo_on_ = false;
  bool const_cut_ = false;  // const_eval hit its depth bound (not memoised)
  std::set<std::string> rule_names_;
  std::vector<SeriesUse> series_uses_;
  int depth_ = 0;
};

}  // namespace vigil::interp::checking
