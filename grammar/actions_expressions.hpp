// PEGTL actions for expressions: literals, durations, names, selectors,
// calls, subscripts, members, operators (precedence climbing over the
// operand and operator stacks in State). Included by parser.cpp only.
// Must not touch clauses or statements.
#pragma once

#include "grammar/parse_state.hpp"

namespace vigil::grammar {
namespace {

template <>
struct action<g::number_lit> {
  template <typename In>
  static void apply(const In& in, State& st) {
    std::string_view text = in.string_view();
    const bool percent = !text.empty() && text.back() == '%';
    if (percent) text.remove_suffix(1);
    double v = parse_number(text, st.offset(in.begin()));
    if (percent) v /= 100.0;
    st.push(st.range(in), ast::Number{v, percent});
  }
};

template <>
struct action<g::dur_number> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.push(st.range(in),
            ast::Number{parse_number(in.string_view(), st.offset(in.begin())), false});
  }
};

template <>
struct action<g::dur_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.push(st.range(in), ast::Name{in.string(), false});
  }
};

template <ast::DurUnit U>
struct set_unit {
  template <typename In>
  static void apply(const In&, State& st) {
    st.unit = U;
  }
};
template <>
struct action<g::unit_samples> : set_unit<ast::DurUnit::samples> {};
template <>
struct action<g::unit_steps> : set_unit<ast::DurUnit::steps> {};
template <>
struct action<g::unit_evals> : set_unit<ast::DurUnit::evals> {};
template <>
struct action<g::unit_epochs> : set_unit<ast::DurUnit::epochs> {};
template <>
struct action<g::unit_suffix> {
  template <typename In>
  static void apply(const In& in, State& st) {
    const char c = in.peek_char();
    st.unit =
        c == 's' ? ast::DurUnit::seconds : (c == 'm' ? ast::DurUnit::minutes : ast::DurUnit::hours);
  }
};

template <>
struct action<g::duration_lit> {
  template <typename In>
  static void apply(const In& in, State& st) {
    auto amount = st.pop_slot();
    st.push(st.range(in), ast::Duration{std::move(amount.expr), st.unit}, amount.depth,
            st.range(in));
  }
};

// `(n + 1) steps`: the parenthesised expression becomes a duration's amount.
template <>
struct action<g::paren_unit> {
  template <typename In>
  static void apply(const In& in, State& st) {
    auto amount = st.pop_slot();
    const ast::Range r{amount.expr->range.begin, st.offset(in.end())};
    st.push(r, ast::Duration{std::move(amount.expr), st.unit}, amount.depth + 1, st.range(in));
  }
};

template <>
struct action<g::string_lit> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.push(st.range(in), ast::String{std::move(st.last_string)});
  }
};

template <>
struct action<g::true_lit> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.push(st.range(in), ast::Bool{true});
  }
};
template <>
struct action<g::false_lit> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.push(st.range(in), ast::Bool{false});
  }
};

template <>
struct action<g::name_ref> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.push(st.range(in), ast::Name{in.string(), false});
  }
};

template <>
struct action<g::sel_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.sel_name = in.string();
    st.sel_name_range = st.range(in);
    st.sel_backticked = false;
    st.sel_has_matchers = false;
    st.matchers.clear();
  }
};
template <>
struct action<g::sel_backtick> {
  template <typename In>
  static void apply(const In& in, State& st) {
    std::string_view text = in.string_view();
    st.sel_name = std::string(text.substr(1, text.size() - 2));
    st.sel_name_range = st.range(in);
    st.sel_backticked = true;
    st.sel_has_matchers = false;
    st.matchers.clear();
  }
};
template <>
struct action<g::label_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.matcher = ast::LabelMatcher{};
    st.matcher.label = in.string();
  }
};
template <>
struct action<g::match_op> {
  template <typename In>
  static void apply(const In& in, State& st) {
    const std::string_view op = in.string_view();
    st.matcher.op = op == "=~"   ? ast::MatchOp::re
                    : op == "!~" ? ast::MatchOp::nre
                    : op == "!=" ? ast::MatchOp::ne
                                 : ast::MatchOp::eq;
  }
};
template <>
struct action<g::matcher_value> {
  template <typename In>
  static void apply(const In&, State& st) {
    st.matcher.value = std::move(st.last_string);
  }
};
template <>
struct action<g::matcher> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.matcher.range = st.range(in);
    st.matchers.push_back(std::move(st.matcher));
  }
};
struct mark_matchers {
  template <typename In>
  static void apply(const In&, State& st) {
    st.sel_has_matchers = true;
  }
};
template <>
struct action<g::sel_parens> : mark_matchers {};
template <>
struct action<g::sel_braces> : mark_matchers {};

void push_selector(const ast::Range r, State& st) {
  ast::Selector s;
  s.name = std::move(st.sel_name);
  s.backticked = st.sel_backticked;
  s.name_range = st.sel_name_range;
  s.matchers = std::move(st.matchers);
  st.matchers.clear();
  st.push(r, std::move(s));
}

template <>
struct action<g::selector> {
  template <typename In>
  static void apply(const In& in, State& st) {
    push_selector(st.range(in), st);
  }
};
template <>
struct action<g::backtick_ref> {
  template <typename In>
  static void apply(const In& in, State& st) {
    if (st.sel_has_matchers) {
      push_selector(st.range(in), st);
    } else {
      st.push(st.range(in), ast::Name{std::move(st.sel_name), true});
    }
  }
};

template <>
struct action<g::call_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.calls.push_back(CallMark{st.exprs.size(), in.string(), st.range(in)});
  }
};
template <>
struct action<g::call> {
  template <typename In>
  static void apply(const In& in, State& st) {
    if (st.calls.empty() || st.calls.back().first_arg > st.exprs.size()) {
      throw SyntaxError{g::error_message<g::internal_error>, st.offset(in.begin()),
                        st.offset(in.end())};
    }
    CallMark mark = std::move(st.calls.back());
    st.calls.pop_back();
    ast::Call c;
    c.fn = std::move(mark.name);
    c.fn_range = mark.range;
    std::uint32_t depth = 0;
    for (std::size_t i = mark.first_arg; i < st.exprs.size(); ++i) {
      depth = std::max(depth, st.exprs[i].depth);
      c.args.push_back(std::move(st.exprs[i].expr));
    }
    st.exprs.resize(mark.first_arg);
    st.push(st.range(in), std::move(c), depth, mark.range);
  }
};

template <>
struct action<g::subscript> {
  template <typename In>
  static void apply(const In& in, State& st) {
    auto size = st.pop_slot();
    auto base = st.pop_slot();
    const ast::Range r{base.expr->range.begin, st.offset(in.end())};
    const std::uint32_t depth = std::max(size.depth, base.depth);
    st.push(r, ast::Subscript{std::move(base.expr), std::move(size.expr)}, depth, st.range(in));
  }
};

// `.name` marks where its arguments (if any) start, like a call's name; the
// base is the slot just below. `member` then builds the node.
template <>
struct action<g::member_name> {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.calls.push_back(CallMark{st.exprs.size(), in.string(), st.range(in)});
  }
};
template <>
struct action<g::member> {
  template <typename In>
  static void apply(const In& in, State& st) {
    if (st.calls.empty() || st.calls.back().first_arg == 0 ||
        st.calls.back().first_arg > st.exprs.size()) {
      throw SyntaxError{g::error_message<g::internal_error>, st.offset(in.begin()),
                        st.offset(in.end())};
    }
    CallMark mark = std::move(st.calls.back());
    st.calls.pop_back();
    std::vector<ast::ExprPtr> args;
    std::uint32_t depth = 0;
    for (std::size_t i = mark.first_arg; i < st.exprs.size(); ++i) {
      depth = std::max(depth, st.exprs[i].depth);
      args.push_back(std::move(st.exprs[i].expr));
    }
    st.exprs.resize(mark.first_arg);
    auto base = st.pop_slot();
    depth = std::max(depth, base.depth);
    const ast::Range r{base.expr->range.begin, st.offset(in.end())};
    st.push(r, ast::Member{std::move(base.expr), std::move(mark.name), mark.range, std::move(args)},
            depth, mark.range);
  }
};

template <ast::BinaryOp Op>
struct push_op {
  template <typename In>
  static void apply(const In& in, State& st) {
    st.ops.push_back(OpToken{Op, st.range(in)});
  }
};
template <>
struct action<g::op_pow> : push_op<ast::BinaryOp::pow> {};
template <>
struct action<g::op_mul> : push_op<ast::BinaryOp::mul> {};
template <>
struct action<g::op_div> : push_op<ast::BinaryOp::div> {};
template <>
struct action<g::op_mod> : push_op<ast::BinaryOp::mod> {};
template <>
struct action<g::op_add> : push_op<ast::BinaryOp::add> {};
template <>
struct action<g::op_sub> : push_op<ast::BinaryOp::sub> {};
template <>
struct action<g::op_le> : push_op<ast::BinaryOp::le> {};
template <>
struct action<g::op_lt> : push_op<ast::BinaryOp::lt> {};
template <>
struct action<g::op_ge> : push_op<ast::BinaryOp::ge> {};
template <>
struct action<g::op_gt> : push_op<ast::BinaryOp::gt> {};
template <>
struct action<g::op_eq> : push_op<ast::BinaryOp::eq> {};
template <>
struct action<g::op_ne> : push_op<ast::BinaryOp::ne> {};
template <>
struct action<g::op_and> : push_op<ast::BinaryOp::and_> {};
template <>
struct action<g::op_or> : push_op<ast::BinaryOp::or_> {};

struct make_binary {
  template <typename In>
  static void apply(const In&, State& st) {
    auto rhs = st.pop_slot();
    auto lhs = st.pop_slot();
    const OpToken op = st.pop_op();
    const ast::Range r{lhs.expr->range.begin, rhs.expr->range.end};
    const std::uint32_t depth = std::max(lhs.depth, rhs.depth);
    st.push(r, ast::Binary{op.op, op.range, std::move(lhs.expr), std::move(rhs.expr)}, depth,
            op.range);
  }
};
template <>
struct action<g::pow_tail> : make_binary {};
template <>
struct action<g::mul_tail> : make_binary {};
template <>
struct action<g::add_tail> : make_binary {};
template <>
struct action<g::cmp_tail> : make_binary {};
template <>
struct action<g::and_tail> : make_binary {};
template <>
struct action<g::or_tail> : make_binary {};

template <ast::UnaryOp Op>
struct make_unary {
  template <typename In>
  static void apply(const In& in, State& st) {
    auto operand = st.pop_slot();
    const std::uint32_t b = st.offset(in.begin());
    const auto op_len = static_cast<std::uint32_t>(Op == ast::UnaryOp::neg ? 1 : 3);
    const ast::Range op_range{b, b + op_len};
    st.push(st.range(in), ast::Unary{Op, op_range, std::move(operand.expr)}, operand.depth,
            op_range);
  }
};
template <>
struct action<g::neg_expr> : make_unary<ast::UnaryOp::neg> {};
template <>
struct action<g::not_prefix> : make_unary<ast::UnaryOp::not_> {};

}  // namespace
}  // namespace vigil::grammar
