// Parser internals shared by the action files: the per-statement State the
// PEGTL actions build into, the hand-written token matchers, helpers, and
// the primary `action` template. Included by parser.cpp only (through the
// action headers); PEGTL types never leave grammar/.
//
// Owns: State and its reset. Must not touch: checking (names, types), which
// is the checker's.
#pragma once

#include <algorithm>
#include <charconv>
#include <limits>
#include <new>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "grammar/grammar.hpp"
#include "grammar/parser.hpp"

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

}  // namespace
}  // namespace vigil::grammar
