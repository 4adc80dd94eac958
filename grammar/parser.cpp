// Rule text -> AST: PEGTL actions over grammar.hpp, one statement at a time
// with recovery to the next statement line. See parser.hpp for the contract.
#include "grammar/parser.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <new>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "grammar/grammar.hpp"

namespace vigil::grammar {

namespace {

namespace pegtl = tao::pegtl;
namespace g = peg;

using Input = pegtl::memory_input<pegtl::tracking_mode::lazy, pegtl::eol::lf_crlf, const char*>;

// A syntax error raised by hand-written checks (as opposed to must<>), with
// the exact byte range to underline. Offsets are absolute in the file.
struct SyntaxError {
  std::string message;
  std::uint32_t begin;
  std::uint32_t end;
};

struct OpToken {
  ast::BinaryOp op;
  ast::Range range;
};

struct CallMark {
  std::size_t first_arg;  // index into State::exprs
  std::string name;
  ast::Range range;
};

// Everything the actions build, for the statement being parsed. Reset after
// every statement (success or error), so an error never leaks half a node
// into the next statement.
struct State {
  const char* base = nullptr;  // start of the file's text: offsets are relative to it
  std::size_t depth = 0;       // expression nesting, see peg::nested

  // Finished expression nodes with their tree depth (a leaf is 1). Depth is
  // tracked here, not just by grammar recursion, because left-associative
  // chains (`1 + 1 + ...`) build deep trees from a flat loop.
  struct Slot {
    ast::ExprPtr expr;
    std::uint32_t depth;
  };
  std::vector<Slot> exprs;
  std::vector<OpToken> ops;
  std::vector<CallMark> calls;

  std::string last_string;  // set by string_token
  ast::Range last_string_range;

  // Selector under construction (selectors never nest inside matchers).
  std::string sel_name;
  ast::Range sel_name_range;
  bool sel_backticked = false;
  bool sel_has_matchers = false;
  std::vector<ast::LabelMatcher> matchers;
  ast::LabelMatcher matcher;

  ast::DurUnit unit = ast::DurUnit::samples;

  // Statement parts.
  std::string pending_name;  // arg / decl / action name
  ast::Range pending_range;
  bool arg_named = false;
  std::vector<ast::Arg> args;
  std::string action_name;
  ast::Range action_name_range;
  ast::Clauses clauses;
  ast::RuleDecl rule;
  ast::UseDecl use;
  std::vector<ast::ActionParam> aparams;
  ast::AliasDecl alias;
  std::size_t escalate_actions_from = 0;  // st.clauses.actions index where `escalate ... do` began

  ast::File* out = nullptr;

  [[nodiscard]] std::uint32_t offset(const char* p) const {
    return static_cast<std::uint32_t>(p - base);
  }
  template <typename ActionInput>
  [[nodiscard]] ast::Range range(const ActionInput& in) const {
    return {offset(in.begin()), offset(in.end())};
  }

  Slot pop_slot() {
    // The grammar pushes exactly one node per operand before any action
    // pops it; an empty stack would be a grammar bug, reported not crashed.
    if (exprs.empty()) throw SyntaxError{g::error_message<g::internal_error>, 0, 0};
    Slot e = std::move(exprs.back());
    exprs.pop_back();
    return e;
  }
  ast::ExprPtr pop() { return pop_slot().expr; }
  OpToken pop_op() {
    if (ops.empty()) throw SyntaxError{g::error_message<g::internal_error>, 0, 0};
    auto op = ops.back();
    ops.pop_back();
    return op;
  }
  // Pushes a node whose deepest child has depth `child_depth`; `blame` is
  // what a too-deep error underlines (the operator that made it too deep).
  template <typename Node>
  void push(ast::Range r, Node&& node, std::uint32_t child_depth = 0, ast::Range blame = {}) {
    if (child_depth >= max_nesting) {
      throw SyntaxError{g::error_message<g::too_deep>, blame.begin, blame.end};
    }
    auto e = std::make_unique<ast::Expr>();
    e->range = r;
    e->node = std::forward<Node>(node);
    exprs.push_back(Slot{std::move(e), child_depth + 1});
  }

  void reset() {
    depth = 0;
    exprs.clear();
    ops.clear();
    calls.clear();
    matchers.clear();
    args.clear();
    aparams.clear();
    arg_named = false;
    clauses = ast::Clauses{};
    rule = ast::RuleDecl{};
    use = ast::UseDecl{};
  }
};

std::string word_at(const char* p) {
  const char* e = p;
  while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || *e == '_' ||
         (*e >= '0' && *e <= '9')) {
    ++e;
  }
  return std::string(p, e);
}

// Parses a number literal's text (no sign, no '%') with from_chars: never
// throws, never yields infinity.
double parse_number(std::string_view text, std::uint32_t begin) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    throw SyntaxError{g::error_message<g::number_out_of_range>, begin,
                      begin + static_cast<std::uint32_t>(text.size())};
  }
  return v;
}

}  // namespace

// string_token: hand-written so errors point at the backslash or the opening
// quote rather than wherever a generic rule would give up.
template <pegtl::apply_mode A, pegtl::rewind_mode M, template <typename...> class Action,
          template <typename...> class Control, typename ParseInput, typename St>
bool peg::string_token::match(ParseInput& in, St& st) {
  if (in.empty() || in.peek_char() != '"') return false;
  const char* open = in.current();
  const char* end = in.end();
  std::string value;
  const char* p = open + 1;
  for (;;) {
    if (p == end || *p == '\n') {
      const char* line_end = p;
      if (line_end > open + 1 && line_end[-1] == '\r') --line_end;
      throw SyntaxError{error_message<unterminated_string>, st.offset(open), st.offset(line_end)};
    }
    const char c = *p;
    if (c == '"') break;
    if (c == '\\') {
      const char n = (p + 1 == end) ? '\0' : p[1];
      switch (n) {
        case '"': value += '"'; break;
        case '\\': value += '\\'; break;
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        default: {
          const std::uint32_t b = st.offset(p);
          const bool has_next = p + 1 != end && n != '\n';
          throw SyntaxError{error_message<unknown_escape>, b, b + (has_next ? 2u : 1u)};
        }
      }
      p += 2;
      continue;
    }
    value += c;
    ++p;
  }
  ++p;  // closing quote
  if constexpr (A == pegtl::apply_mode::action) {
    st.last_string = std::move(value);
    st.last_string_range = {st.offset(open), st.offset(p)};
  }
  in.bump(static_cast<std::size_t>(p - open));
  return true;
}

template <pegtl::apply_mode A, pegtl::rewind_mode M, template <typename...> class Action,
          template <typename...> class Control, typename ParseInput, typename St>
bool peg::backtick_name::match(ParseInput& in, St& st) {
  if (in.empty() || in.peek_char() != '`') return false;
  const char* open = in.current();
  const char* p = open + 1;
  while (p != in.end() && *p != '`' && *p != '\n' && *p != '\r') ++p;
  if (p == in.end() || *p != '`') {
    throw SyntaxError{error_message<unterminated_backtick>, st.offset(open), st.offset(p)};
  }
  if (p == open + 1) {
    throw SyntaxError{error_message<empty_backtick>, st.offset(open), st.offset(p + 1)};
  }
  in.bump(static_cast<std::size_t>(p + 1 - open));
  return true;
}

namespace {

template <typename Rule>
struct action : pegtl::nothing<Rule> {};

// ---- expressions ----

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
    st.push(st.range(in), ast::Number{parse_number(in.string_view(), st.offset(in.begin())), false});
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
    st.unit = c == 's' ? ast::DurUnit::seconds
                       : (c == 'm' ? ast::DurUnit::minutes : ast::DurUnit::hours);
  }
};

template <>
struct action<g::duration_lit> {
  template <typename In>
  static void apply(const In& in, State& st) {
    auto amount = st.pop_slot();
    st.push(st.range(in), ast::Duration{std::move(amount.expr), st.unit}, amount.depth, st.range(in));
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
    st.push(st.range(in), ast::Unary{Op, op_range, std::move(operand.expr)}, operand.depth, op_range);
  }
};
template <>
struct action<g::neg_expr> : make_unary<ast::UnaryOp::neg> {};
template <>
struct action<g::not_prefix> : make_unary<ast::UnaryOp::not_> {};

// ---- clauses ----

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

// ---- statements ----

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
    push_statement(st, ast::ImportDecl{std::move(st.last_string), st.last_string_range, st.range(in)});
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

// ---- driver ----

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Characters that can begin or continue some token of the language; an error
// at any other byte is reported as that unexpected character.
bool is_language_char(char c) {
  if (is_ident_char(c)) return true;
  return std::string_view(" \t\r\n\v\f#\"`()[]{},.:=<>!~+-*/%^").find(c) != std::string_view::npos;
}

// The extent of the token at `pos`, for the caret underline.
std::uint32_t token_end(std::string_view text, std::uint32_t pos) {
  if (pos >= text.size()) return pos;
  std::uint32_t e = pos;
  if (is_ident_char(text[pos])) {
    while (e < text.size() && (is_ident_char(text[e]) || text[e] == '.')) ++e;
    return e;
  }
  static constexpr std::string_view two[] = {"<=", ">=", "==", "!=", "=~", "!~"};
  for (auto t : two) {
    if (text.substr(pos, 2) == t) return pos + 2;
  }
  return pos + 1;
}

bool starts_statement(std::string_view text, std::size_t pos);

bool at_line_start(std::string_view text, std::size_t pos) {
  while (pos > 0 && (text[pos - 1] == ' ' || text[pos - 1] == '\t')) --pos;
  return pos == 0 || text[pos - 1] == '\n';
}

// A statement cut short at the end of the file, or by the next statement
// (`let w = (a +` followed by `rule ...`), is reported just past its last
// token, where the missing text belongs, rather than at the next statement.
std::uint32_t pull_back_to_last_token(std::string_view text, std::uint32_t pos) {
  bool cut = true;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      cut = i == pos && at_line_start(text, pos) && starts_statement(text, pos);
      break;
    }
  }
  if (!cut) return pos;
  while (pos > 0) {
    const char c = text[pos - 1];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') break;
    --pos;
  }
  return pos;
}

std::string describe_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7F) return std::string(1, c);
  return fmt::format("\\x{:02x}", u);
}

bool starts_statement(std::string_view text, std::size_t pos) {
  static constexpr std::string_view words[] = {"rule", "when", "use",    "param",
                                               "let",  "import", "action", "alias"};
  for (auto w : words) {
    if (text.substr(pos, w.size()) == w &&
        (pos + w.size() == text.size() || !is_ident_char(text[pos + w.size()]))) {
      return true;
    }
  }
  return false;
}

// The start of the first line after `pos` that begins (after blanks) with a
// statement keyword, or text.size().
std::size_t recovery_point(std::string_view text, std::size_t pos) {
  std::size_t line = text.find('\n', pos);
  while (line != std::string_view::npos) {
    std::size_t p = line + 1;
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t' || text[p] == '\r')) ++p;
    if (starts_statement(text, p)) return p;
    line = text.find('\n', p);
  }
  return text.size();
}

// "did you mean" for a misspelt keyword where a clause or statement was expected.
std::string suggest_keyword(std::string_view text, std::uint32_t at, std::string_view message) {
  if (at >= text.size() || !is_ident_char(text[at])) return {};
  std::size_t e = at;
  while (e < text.size() && is_ident_char(text[e])) ++e;
  const std::string_view word = text.substr(at, e - at);
  if (message == g::error_message<g::do_clause>) {
    return closest_match(word, {"do", "for", "after", "until", "every", "cooldown", "severity", "in"});
  }
  if (message == g::error_message<g::statement>) {
    return closest_match(word, {"rule", "when", "use", "param", "let", "import", "action", "alias"});
  }
  return {};
}

Diagnostic make_error(std::uint32_t file, std::string message, std::uint32_t begin,
                      std::uint32_t end) {
  Diagnostic d;
  d.level = DiagLevel::error;
  d.code = "parse";
  d.message = std::move(message);
  d.file = file;
  d.range = {begin, end};
  return d;
}

}  // namespace

ParseResult parse(const SourceSet& sources, std::uint32_t file) {
  ParseResult result;
  result.file.file = file;
  if (file >= sources.size()) {
    result.diagnostics.push_back(make_error(file, "no such source file", 0, 0));
    return result;
  }
  const std::string& text = sources[file].text;
  if (text.size() >= std::numeric_limits<std::uint32_t>::max()) {
    result.diagnostics.push_back(make_error(file, "file too large (4 GiB limit)", 0, 0));
    return result;
  }
  const std::string_view view(text);

  State st;
  st.base = text.data();
  st.out = &result.file;

  std::size_t pos = 0;
  while (pos <= text.size() && result.diagnostics.size() < max_errors) {
    Input in(text.data() + pos, text.data() + text.size(), sources[file].name.c_str());
    std::optional<Diagnostic> error;
    std::uint32_t resume_at = 0;  // where the failure was detected, for recovery
    try {
      pegtl::parse<g::next_statement, action, g::control>(in, st);
      if (!st.exprs.empty() || !st.ops.empty()) {
        throw SyntaxError{g::error_message<g::internal_error>, st.offset(in.current()),
                          st.offset(in.current())};
      }
      if (in.empty()) break;
      pos = static_cast<std::size_t>(in.current() - text.data());
    } catch (const pegtl::parse_error& e) {
      auto at = static_cast<std::uint32_t>(pos + e.positions().front().byte);
      std::string message(e.message());
      if (at < text.size() && !is_language_char(text[at])) {
        message = fmt::format(fmt::runtime(g::error_message<g::unexpected_character>),
                              describe_char(text[at]));
      }
      const std::uint32_t shown = pull_back_to_last_token(view, at);
      error = make_error(file, std::move(message), shown, token_end(view, shown));
      error->suggestion = suggest_keyword(view, at, e.message());
      resume_at = at;
    } catch (const SyntaxError& e) {
      error = make_error(file, e.message, e.begin, e.end);
      resume_at = e.begin;
    } catch (const std::bad_alloc&) {
      error = make_error(file, "out of memory", static_cast<std::uint32_t>(pos),
                         static_cast<std::uint32_t>(pos));
      resume_at = static_cast<std::uint32_t>(pos);
    } catch (const std::exception&) {
      // Nothing else is expected to throw; if it does, it is still a value.
      error = make_error(file, g::error_message<g::internal_error>, static_cast<std::uint32_t>(pos),
                         static_cast<std::uint32_t>(pos));
      resume_at = static_cast<std::uint32_t>(pos);
    }
    st.reset();
    if (error) {
      const std::uint32_t at = resume_at;
      result.diagnostics.push_back(std::move(*error));
      // An error right at a statement keyword that starts its line (e.g. a
      // missing ')' noticed at the next `rule`) leaves that statement intact.
      if (at > pos && at_line_start(view, at) && starts_statement(view, at)) {
        pos = at;
        continue;
      }
      pos = recovery_point(view, std::max<std::size_t>(at, pos));
      if (pos >= text.size()) break;
    }
  }
  return result;
}

}  // namespace vigil::grammar
