// PEGTL actions for rule clauses: when, for, after, until, every, cooldown,
// severity, mode, do / escalate, with their duplicate checks. Included by
// parser.cpp only. Must not touch statements or build expressions.
#pragma once

#include "grammar/parse_state.hpp"

namespace vigil::grammar {
namespace {

template <typename In>
[[noreturn]] void duplicate(const In& in, State& st) {
  const std::string word = word_at(in.begin());
  const std::uint32_t b = st.offset(in.begin());
  throw SyntaxError{fmt::format(fmt::runtime(g::error_message<g::duplicate_clause>), word), b,
                    b + static_cast<std::uint32_t>(word.size())};
}

template <ast::ExprPtr ast::Clauses::*Field>
struct set_duration_clause {
  template <typename In>
  static void apply(const In& in, State& st) {
    auto value = st.pop();
    if (st.clauses.*Field) duplicate(in, st);
    st.clauses.*Field = std::move(value);
  }
};
template <>
struct action<g::for_clause> : set_duration_clause<&ast::Clauses::for_> {};
template <>
struct action<g::after_clause> : set_duration_clause<&ast::Clauses::after> {};
template <>
struct action<g::until_clause> : set_duration_clause<&ast::Clauses::until> {};
template <>
struct action<g::every_clause> : set_duration_clause<&ast::Clauses::every> {};
template <>
struct action<g::cooldown_clause> : set_duration_clause<&ast::Clauses::cooldown> {};

template <>
struct action<g::severity_word> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.pending_name = in.string();
    st.pending_range = st.range(in);
  }
};
template <>
struct action<g::severity_clause> {
  template <typename In>
  static void apply(const In& in, State& st) {
    if (st.clauses.severity) duplicate(in, st);
    st.clauses.severity = std::move(st.pending_name);
    st.clauses.severity_range = st.pending_range;
  }
};
template <>
struct action<g::mode_word> : action<g::severity_word> {};
template <>
struct action<g::in_clause> {
  template <typename In>
  static void apply(const In& in, State& st) {
    if (st.clauses.mode) duplicate(in, st);
    st.clauses.mode = std::move(st.pending_name);
    st.clauses.mode_range = st.pending_range;
  }
};

template <>
struct action<g::when_kw> {
  template <typename In>
  static void apply(const In& in, State& st) {
    if (st.clauses.when) duplicate(in, st);
    st.clauses.when_keyword = st.range(in);
  }
};
template <>
struct action<g::condition> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.clauses.when = st.pop();
  }
};

template <>
struct action<g::arg_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.pending_name = in.string();
    st.pending_range = st.range(in);
    st.arg_named = true;
  }
};
template <>
struct action<g::arg> {
  template <typename In>
  static void apply(const In& in, State& st) {
    ast::Arg a;
    if (st.arg_named) {
      a.name = std::move(st.pending_name);
      a.name_range = st.pending_range;
    }
    st.arg_named = false;
    a.value = st.pop();
    a.range = st.range(in);
    st.args.push_back(std::move(a));
  }
};

template <>
struct action<g::action_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.action_name = in.string();
    st.action_name_range = st.range(in);
    st.args.clear();
  }
};
template <>
struct action<g::action_call> {
  template <typename In>
  static void apply(const In& in, State& st) {
    ast::ActionCall c;
    c.name = std::move(st.action_name);
    c.name_range = st.action_name_range;
    c.args = std::move(st.args);
    st.args.clear();
    c.range = st.range(in);
    st.clauses.actions.push_back(std::move(c));
  }
};
template <>
struct action<g::escalate_kw> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.escalate_actions_from = st.clauses.actions.size();
  }
};
template <>
struct action<g::escalate_clause> {
  template <typename In>
  static void apply(const In& in, State& st) {
    ast::Escalation e;
    e.within = st.pop();
    e.count = st.pop();
    auto& acts = st.clauses.actions;
    const auto from = acts.begin() + static_cast<std::ptrdiff_t>(st.escalate_actions_from);
    e.actions.assign(std::make_move_iterator(from), std::make_move_iterator(acts.end()));
    acts.erase(from, acts.end());
    e.range = st.range(in);
    st.clauses.escalations.push_back(std::move(e));
  }
};
template <>
struct action<g::do_clause> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.clauses.has_do = true;
  }
};

}  // namespace
}  // namespace vigil::grammar
