// The round-trip property: for random ASTs, print -> parse gives back the
// same tree (ranges aside), and printing that again gives the same text.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "grammar/parser.hpp"
#include "test_util.hpp"

namespace vigil::grammar {
namespace {

using test::dump;
using test::parse_text;

// Identifiers that are not keywords, including words that are special
// elsewhere (unit words, `std`, `nan`) to exercise those paths.
std::string gen_ident() {
  static const std::vector<std::string> pool = {
      "loss", "val_loss", "x", "n", "k", "grad_norm", "layer", "steps", "samples", "epoch",
      "std", "nan", "inf", "e", "s", "m", "h", "max", "mean", "f", "_tmp9", "eval"};
  return *rc::gen::elementOf(pool);
}

std::string gen_text(bool allow_newline) {
  const auto chars = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 100));
  std::string out;
  for (int c : chars) {
    // Printable ASCII; names (no newline allowed) cannot hold a backtick.
    if (c < 95) out += (!allow_newline && ' ' + c == '`') ? 'b' : static_cast<char>(' ' + c);
    else if (c < 97) out += allow_newline ? '\n' : 'n';
    else out += allow_newline ? '\t' : 't';
  }
  return out;
}

ast::ExprPtr make(auto node) {
  auto e = std::make_unique<ast::Expr>();
  e->node = std::move(node);
  return e;
}

ast::ExprPtr gen_number(bool allow_percent) {
  // Values as the parser produces them: non-negative, finite, and from text.
  static const std::vector<double> values = {0, 1, 2, 3, 0.5, 0.1, 1e-7, 1e5, 1e20, 123.456, 1e300,
                                             2.5e-300, 7, 100, 0.05};
  double v = *rc::gen::elementOf(values);
  if (*rc::gen::inRange(0, 3) == 0) v = *rc::gen::inRange(0, 1000000) / 1000.0;
  const bool percent = allow_percent && *rc::gen::inRange(0, 5) == 0;
  return make(ast::Number{percent ? v / 100.0 : v, percent});
}

ast::ExprPtr gen_duration() {
  ast::Duration d;
  const int unit = *rc::gen::inRange(0, 7);
  d.unit = static_cast<ast::DurUnit>(unit);
  // s/m/h attach to a number directly (`30s`); a name takes only unit words.
  const int amount = *rc::gen::inRange(0, 3);
  if (unit < 4 && amount == 0) {
    d.amount = make(ast::Name{gen_ident(), false});
  } else if (unit < 4 && amount == 1) {  // `(n + 1) steps`: an expression in parentheses
    ast::Binary b;
    b.op = ast::BinaryOp::add;
    b.lhs = make(ast::Name{gen_ident(), false});
    b.rhs = gen_number(false);
    d.amount = make(std::move(b));
  } else {
    d.amount = gen_number(false);
  }
  return make(std::move(d));
}

ast::ExprPtr gen_expr(int depth) {
  const int kind = *rc::gen::inRange(0, depth > 0 ? 13 : 7);
  switch (kind) {
    case 0: return gen_number(true);
    case 1: return make(ast::String{gen_text(true)});
    case 2: return make(ast::Bool{*rc::gen::arbitrary<bool>()});
    case 3: {
      const bool bt = *rc::gen::inRange(0, 4) == 0;
      return make(ast::Name{bt ? "a/" + gen_text(false) : gen_ident(), bt});
    }
    case 4: {
      ast::Selector s;
      s.backticked = *rc::gen::inRange(0, 4) == 0;
      s.name = s.backticked ? "train/" + gen_text(false) : gen_ident();
      const int n = *rc::gen::inRange(0, 3);
      for (int i = 0; i < n; ++i) {
        ast::LabelMatcher m;
        m.label = *rc::gen::elementOf(std::vector<std::string>{"layer", "rank", "in", "mode"});
        m.op = static_cast<ast::MatchOp>(*rc::gen::inRange(0, 4));
        m.value = gen_text(true);
        s.matchers.push_back(std::move(m));
      }
      return make(std::move(s));
    }
    case 5:
    case 6: return gen_duration();
    case 7: return make(ast::Subscript{gen_expr(depth - 1), gen_expr(depth - 1)});
    case 8: {
      ast::Call c;
      c.fn = gen_ident();
      const int n = *rc::gen::inRange(1, 4);
      for (int i = 0; i < n; ++i) c.args.push_back(gen_expr(depth - 1));
      return make(std::move(c));
    }
    case 12: {
      ast::Member m{gen_expr(depth - 1), gen_ident(), {}, {}};
      const int n = *rc::gen::inRange(0, 3);  // 0: `x.stat`; else `x.stat(a, ...)`
      for (int i = 0; i < n; ++i) m.args.push_back(gen_expr(depth - 1));
      return make(std::move(m));
    }
    case 9: {
      ast::Unary u;
      u.op = *rc::gen::arbitrary<bool>() ? ast::UnaryOp::neg : ast::UnaryOp::not_;
      u.operand = gen_expr(depth - 1);
      return make(std::move(u));
    }
    default: {
      ast::Binary b;
      b.op = static_cast<ast::BinaryOp>(*rc::gen::inRange(0, 14));
      b.lhs = gen_expr(depth - 1);
      b.rhs = gen_expr(depth - 1);
      return make(std::move(b));
    }
  }
}

std::vector<ast::Arg> gen_args(int min) {
  std::vector<ast::Arg> args;
  const int n = *rc::gen::inRange(min, 4);
  for (int i = 0; i < n; ++i) {
    ast::Arg a;
    if (*rc::gen::arbitrary<bool>()) a.name = gen_ident();
    a.value = gen_expr(2);
    args.push_back(std::move(a));
  }
  return args;
}

ast::ExprPtr gen_clause_duration() {
  return *rc::gen::inRange(0, 4) == 0 ? make(ast::Name{gen_ident(), false}) : gen_duration();
}

ast::Clauses gen_clauses(bool rule) {
  ast::Clauses c;
  auto maybe = [] { return *rc::gen::inRange(0, 3) == 0; };
  if (rule || maybe()) c.when = gen_expr(3);
  if (maybe()) c.for_ = gen_clause_duration();
  if (maybe()) c.after = gen_clause_duration();
  if (maybe()) c.until = gen_clause_duration();
  if (maybe()) c.every = gen_clause_duration();
  if (maybe()) c.cooldown = gen_clause_duration();
  if (maybe()) c.severity = *rc::gen::elementOf(std::vector<std::string>{"info", "warning", "critcal"});
  if (maybe()) c.mode = *rc::gen::elementOf(std::vector<std::string>{"train", "eval"});
  if (rule || maybe()) {
    c.has_do = true;
    const int n = *rc::gen::inRange(1, 3);
    for (int i = 0; i < n; ++i) {
      ast::ActionCall a;
      a.name = gen_ident();
      a.args = gen_args(0);
      c.actions.push_back(std::move(a));
    }
    // Escalations follow a `do`; rules always have one.
    if (maybe() && (rule || !c.actions.empty())) {
      ast::Escalation e;
      e.count = make(ast::Number{static_cast<double>(*rc::gen::inRange(1, 5))});
      e.within = gen_clause_duration();
      ast::ActionCall a;
      a.name = gen_ident();
      e.actions.push_back(std::move(a));
      c.escalations.push_back(std::move(e));
    }
  }
  return c;
}

ast::Statement gen_statement() {
  switch (*rc::gen::inRange(0, 8)) {
    case 0:
    case 1: {
      ast::RuleDecl r;
      if (*rc::gen::arbitrary<bool>()) {
        r.name = gen_ident();
        if (*rc::gen::arbitrary<bool>()) r.description = gen_text(true);
        r.is_template = *rc::gen::arbitrary<bool>();
        if (r.is_template) {
          const int n = *rc::gen::inRange(0, 3);
          for (int i = 0; i < n; ++i) {
            ast::TemplateParam p;
            p.name = gen_ident();
            if (*rc::gen::arbitrary<bool>()) p.default_value = gen_expr(2);
            r.params.push_back(std::move(p));
          }
        }
      }
      r.clauses = gen_clauses(true);
      return r;
    }
    case 2: {
      ast::UseDecl u;
      u.std_prefix = *rc::gen::arbitrary<bool>();
      u.template_name = gen_ident();
      u.args = gen_args(0);
      if (*rc::gen::arbitrary<bool>()) u.alias = gen_ident();
      u.overrides = gen_clauses(false);
      return u;
    }
    case 3: return ast::ParamDecl{gen_ident(), {}, gen_expr(3), {}};
    case 4: return ast::LetDecl{gen_ident(), {}, gen_expr(3), {}};
    case 5: return ast::ImportDecl{gen_text(true), {}, {}};
    case 6: {
      ast::AliasDecl a;
      a.name = gen_ident();
      const int n = *rc::gen::inRange(1, 4);
      for (int i = 0; i < n; ++i) a.targets.push_back("a/" + gen_text(false));
      return a;
    }
    default: {
      ast::ActionDecl a;
      a.name = gen_ident();
      const int n = *rc::gen::inRange(0, 3);
      for (int i = 0; i < n; ++i) {
        ast::ActionParam p;
        p.name = gen_ident();
        p.type = *rc::gen::elementOf(std::vector<std::string>{"number", "string", "duration"});
        if (*rc::gen::arbitrary<bool>()) p.default_value = gen_expr(1);
        a.params.push_back(std::move(p));
      }
      return a;
    }
  }
}

RC_GTEST_PROP(RoundTrip, ExpressionPrintParsePrint, ()) {
  const auto e = gen_expr(*rc::gen::inRange(0, 6));
  const std::string text = print(*e);
  auto p = parse_text("let x = " + text);
  RC_ASSERT(p.result.ok());
  RC_ASSERT(p.result.file.statements.size() == 1u);
  const auto& back = *std::get<ast::LetDecl>(p.result.file.statements[0]).value;
  RC_ASSERT(print(back) == text);
  RC_ASSERT(dump(back) == dump(*e));
}

RC_GTEST_PROP(RoundTrip, FilePrintParsePrint, ()) {
  ast::File f;
  const int n = *rc::gen::inRange(0, 6);
  for (int i = 0; i < n; ++i) f.statements.push_back(gen_statement());
  const std::string text = print(f);
  auto p = parse_text(text);
  if (!p.result.ok()) RC_FAIL(text + "\n" + format_diagnostics(p.result.diagnostics, p.sources));
  RC_ASSERT(print(p.result.file) == text);
  RC_ASSERT(dump(p.result.file) == dump(f));
}

TEST(RoundTrip, ParsedRangesCoverTheirText) {
  // Ranges of the re-parsed tree point at the printed text of each node.
  const std::string text = "let x = a + f(b, c[3]) * -2 ^ `d e`{k=\"v\"}";
  auto p = parse_text(text);
  ASSERT_TRUE(p.result.ok());
  const auto& e = *std::get<ast::LetDecl>(p.result.file.statements[0]).value;
  EXPECT_EQ(text.substr(e.range.begin, e.range.end - e.range.begin),
            "a + f(b, c[3]) * -2 ^ `d e`{k=\"v\"}");
  const auto& mul = *std::get<ast::Binary>(e.node).rhs;
  EXPECT_EQ(text.substr(mul.range.begin, mul.range.end - mul.range.begin), "f(b, c[3]) * -2 ^ `d e`{k=\"v\"}");
  const auto& call = std::get<ast::Call>(std::get<ast::Binary>(mul.node).lhs->node);
  EXPECT_EQ(text.substr(call.fn_range.begin, call.fn_range.end - call.fn_range.begin), "f");
  const auto& sub = *call.args[1];
  EXPECT_EQ(text.substr(sub.range.begin, sub.range.end - sub.range.begin), "c[3]");
}

TEST(RoundTrip, CallWhoseFirstArgLooksLikeAMatcher) {
  // `f(a != "x")` reads as a selector; the printer must keep it a call.
  auto p = parse_text("let x = f((a != \"x\"), 1)");
  ASSERT_TRUE(p.result.ok());
  const auto& e = *std::get<ast::LetDecl>(p.result.file.statements[0]).value;
  ASSERT_TRUE(std::holds_alternative<ast::Call>(e.node));
  EXPECT_EQ(print(e), "f((a != \"x\"), 1)");
}

TEST(RoundTrip, UseFollowedByAnonymousRuleOnNextLine) {
  auto p = parse_text("use std.terminate_on_nan()\nwhen loss > 10 do stop\n");
  ASSERT_TRUE(p.result.ok());
  ASSERT_EQ(p.result.file.statements.size(), 2u);
  EXPECT_EQ(std::get<ast::UseDecl>(p.result.file.statements[0]).overrides.when, nullptr);
  EXPECT_EQ(print(p.result.file), "use std.terminate_on_nan()\nwhen loss > 10 do stop\n");
}

}  // namespace
}  // namespace vigil::grammar
