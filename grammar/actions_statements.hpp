// PEGTL actions for statements: rule, template, use, param, let, import,
// action, alias; each finished statement is moved into the file's AST.
// Included by parser.cpp only. Must not build expressions or clauses.
#pragma once

#include "grammar/parse_state.hpp"

namespace vigil::grammar {
namespace {

template <>
struct action<g::rule_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.rule.name = in.string();
    st.rule.name_range = st.range(in);
  }
};
template <>
struct action<g::description> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.rule.description = std::move(st.last_string);
  }
};
template <>
struct action<g::tparam_open> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.rule.is_template = true;
  }
};
template <>
struct action<g::tparam_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.rule.params.push_back(ast::TemplateParam{in.string(), st.range(in), nullptr});
  }
};
template <>
struct action<g::tparam_default> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.rule.params.back().default_value = st.pop();
  }
};

void push_statement(State& st, ast::Statement s) { st.out->statements.push_back(std::move(s)); }

template <>
struct action<g::rule_decl> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.rule.clauses = std::move(st.clauses);
    st.rule.range = st.range(in);
    push_statement(st, std::move(st.rule));
  }
};
template <>
struct action<g::anon_rule> {
  template <typename In>
  static void apply(const In& in, State& st) {
    ast::RuleDecl r;
    r.clauses = std::move(st.clauses);
    r.range = st.range(in);
    push_statement(st, std::move(r));
  }
};

template <>
struct action<g::use_std> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.use.std_prefix = true;
  }
};
template <>
struct action<g::template_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.use.template_name = in.string();
  }
};
template <>
struct action<g::use_target> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.use.name_range = st.range(in);
  }
};
template <>
struct action<g::use_args> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.use.args = std::move(st.args);
    st.args.clear();
  }
};
template <>
struct action<g::alias_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.use.alias = in.string();
    st.use.alias_range = st.range(in);
  }
};
template <>
struct action<g::use_decl> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.use.overrides = std::move(st.clauses);
    st.use.range = st.range(in);
    push_statement(st, std::move(st.use));
  }
};

template <>
struct action<g::decl_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.pending_name = in.string();
    st.pending_range = st.range(in);
  }
};
template <typename Decl>
struct make_decl {
  template <typename In>
  static void apply(const In& in, State& st) {
    Decl d;
    d.name = std::move(st.pending_name);
    d.name_range = st.pending_range;
    d.value = st.pop();
    d.range = st.range(in);
    push_statement(st, std::move(d));
  }
};
template <>
struct action<g::param_decl> : make_decl<ast::ParamDecl> {};
template <>
struct action<g::let_decl> : make_decl<ast::LetDecl> {};

template <>
struct action<g::import_decl> {
  template <typename In>
  static void apply(const In& in, State& st) {
    push_statement(st,
                   ast::ImportDecl{std::move(st.last_string), st.last_string_range, st.range(in)});
  }
};

template <>
struct action<g::alias_target_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.alias.targets.push_back(in.string());
    st.alias.target_ranges.push_back(st.range(in));
  }
};
template <>
struct action<g::alias_target_backtick> {
  template <typename In>
  static void apply(const In& in, State& st) {
    const std::string_view text = in.string_view();
    st.alias.targets.emplace_back(text.substr(1, text.size() - 2));
    st.alias.target_ranges.push_back(st.range(in));
  }
};
template <>
struct action<g::alias_decl> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.alias.name = std::move(st.pending_name);
    st.alias.name_range = st.pending_range;
    st.alias.range = st.range(in);
    push_statement(st, std::exchange(st.alias, {}));
  }
};

template <>
struct action<g::action_decl_name> : action<g::decl_name> {};
template <>
struct action<g::aparam_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    ast::ActionParam p;
    p.name = in.string();
    p.name_range = st.range(in);
    st.aparams.push_back(std::move(p));
  }
};
template <>
struct action<g::aparam_type> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.aparams.back().type = in.string();
    st.aparams.back().type_range = st.range(in);
  }
};
template <>
struct action<g::aparam_default> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.aparams.back().default_value = st.pop();
  }
};
template <>
struct action<g::action_decl> {
  template <typename In>
  static void apply(const In& in, State& st) {
    ast::ActionDecl d;
    d.name = std::move(st.pending_name);
    d.name_range = st.pending_range;
    d.params = std::move(st.aparams);
    st.aparams.clear();
    d.range = st.range(in);
    push_statement(st, std::move(d));
  }
};

}  // namespace
}  // namespace vigil::grammar
