// Parser tests: expressions (as canonical text), statements (AST fields and
// byte ranges) and error positions/messages.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "grammar/parser.hpp"
#include "test_util.hpp"

namespace vigil::grammar {
namespace {

using test::parse_text;

// Parses `let x = TEXT` and returns the printed expression, or
// "error: MESSAGE @COLUMN" (column within TEXT, 1-based).
std::string expr_result(const std::string& text) {
  const std::string prefix = "let x = ";
  auto p = parse_text(prefix + text);
  if (!p.result.ok()) {
    const auto& d = p.result.diagnostics.front();
    return "error: " + d.message + " @" + std::to_string(d.range.begin - prefix.size() + 1);
  }
  if (p.result.file.statements.size() != 1) return "statements: " + std::to_string(p.result.file.statements.size());
  return print(*std::get<ast::LetDecl>(p.result.file.statements[0]).value);
}

struct ExprCase {
  const char* input;
  const char* expected;
};

class ExprTable : public ::testing::TestWithParam<ExprCase> {};

TEST_P(ExprTable, PrintsCanonicalForm) {
  EXPECT_EQ(expr_result(GetParam().input), GetParam().expected) << GetParam().input;
}

INSTANTIATE_TEST_SUITE_P(
    Precedence, ExprTable,
    ::testing::Values(
        ExprCase{"1 + 2 * 3", "1 + 2 * 3"}, ExprCase{"(1 + 2) * 3", "(1 + 2) * 3"},
        ExprCase{"1 - 2 - 3", "1 - 2 - 3"}, ExprCase{"1 - (2 - 3)", "1 - (2 - 3)"},
        ExprCase{"a / b / c", "a / b / c"}, ExprCase{"a / (b * c)", "a / (b * c)"},
        ExprCase{"a % b", "a % b"}, ExprCase{"2 ^ 3 ^ 4", "2 ^ 3 ^ 4"},
        ExprCase{"(2 ^ 3) ^ 4", "(2 ^ 3) ^ 4"}, ExprCase{"-2 ^ 2", "-2 ^ 2"},
        ExprCase{"(-2) ^ 2", "(-2) ^ 2"}, ExprCase{"2 ^ -3", "2 ^ -3"},
        ExprCase{"--x", "--x"}, ExprCase{"- - x", "--x"}, ExprCase{"-(a + b)", "-(a + b)"},
        ExprCase{"a or b and c", "a or b and c"}, ExprCase{"(a or b) and c", "(a or b) and c"},
        ExprCase{"not a and b", "not a and b"}, ExprCase{"not (a and b)", "not (a and b)"},
        ExprCase{"not not a", "not not a"}, ExprCase{"not a < b", "not a < b"},
        ExprCase{"(not a) < b", "(not a) < b"}, ExprCase{"a < b == true", "error: comparison operators cannot be chained; use 'and' @7"},
        ExprCase{"(a < b) == true", "(a < b) == true"},
        ExprCase{"a <= b", "a <= b"}, ExprCase{"a >= b", "a >= b"}, ExprCase{"a != b", "a != b"},
        ExprCase{"a+b*c-d", "a + b * c - d"}, ExprCase{"((((a))))", "a"},
        ExprCase{"x[10] * 2", "x[10] * 2"}, ExprCase{"(a + b)[3]", "(a + b)[3]"},
        ExprCase{"a and b or c and d", "a and b or c and d"},
        ExprCase{"a * -b", "a * -b"}, ExprCase{"-a * b", "-a * b"}));

INSTANTIATE_TEST_SUITE_P(
    Literals, ExprTable,
    ::testing::Values(
        ExprCase{"3", "3"}, ExprCase{"0.5", "0.5"}, ExprCase{".5", "0.5"}, ExprCase{"1e-7", "1e-07"},
        ExprCase{"1E+3", "1000"}, ExprCase{"5%", "5%"}, ExprCase{"0.1%", "0.1%"},
        ExprCase{"5 % 3", "5 % 3"}, ExprCase{"5% % 3", "5% % 3"},
        ExprCase{"\"a\\\"b\\\\c\\nd\\te\"", "\"a\\\"b\\\\c\\nd\\te\""}, ExprCase{"true", "true"},
        ExprCase{"false", "false"}, ExprCase{"nan", "nan"}, ExprCase{"inf", "inf"},
        ExprCase{"1e999999", "error: number out of range @1"},
        ExprCase{"\"abc", "error: unterminated string @1"},
        ExprCase{"\"a\\qb\"", "error: unknown escape sequence in string @3"}));

INSTANTIATE_TEST_SUITE_P(
    Durations, ExprTable,
    ::testing::Values(
        ExprCase{"3 samples", "3 samples"}, ExprCase{"1 sample", "1 samples"},
        ExprCase{"100 steps", "100 steps"}, ExprCase{"2 evals", "2 evals"},
        ExprCase{"1 epoch", "1 epochs"}, ExprCase{"30s", "30s"}, ExprCase{"10m", "10m"},
        ExprCase{"2h", "2h"}, ExprCase{"n steps", "n steps"}, ExprCase{"x[10m]", "x[10m]"},
        ExprCase{"x[100 steps]", "x[100 steps]"}, ExprCase{"mean(loss[window])", "mean(loss[window])"},
        ExprCase{"stepsize", "stepsize"}, ExprCase{"3 stepsize", "error: expected a statement (rule, when, use, param, let, import, action or alias) @3"}));

INSTANTIATE_TEST_SUITE_P(
    SelectorsAndCalls, ExprTable,
    ::testing::Values(
        ExprCase{"grad_norm(layer=~\"conv.*\")", "grad_norm{layer=~\"conv.*\"}"},
        ExprCase{"grad_norm{layer=~\"conv.*\", rank!=\"0\"}", "grad_norm{layer=~\"conv.*\", rank!=\"0\"}"},
        ExprCase{"g(a!~\"x\", b=\"y\")", "g{a!~\"x\", b=\"y\"}"},
        ExprCase{"loss()", "loss{}"}, ExprCase{"loss{}", "loss{}"},
        ExprCase{"max(a, b)", "max(a, b)"}, ExprCase{"f(a == b)", "f(a == b)"},
        ExprCase{"f(g(x)[3], 2)", "f(g(x)[3], 2)"},
        ExprCase{"`train/loss`", "`train/loss`"},
        ExprCase{"`train/loss`{rank=\"0\"}", "`train/loss`{rank=\"0\"}"},
        ExprCase{"`train/loss`(rank=\"0\")", "`train/loss`{rank=\"0\"}"},
        ExprCase{"`a b`[10]", "`a b`[10]"},
        ExprCase{"f(a=1)", "error: label matcher value must be a string @5"},
        ExprCase{"f(a, b", "error: expected ')' @7"},
        ExprCase{"x[3", "error: expected ']' @4"},
        ExprCase{"a + @", "error: unexpected character '@' @5"},
        ExprCase{"a +", "error: expected expression @4"}));

INSTANTIATE_TEST_SUITE_P(
    TensorStats, ExprTable,
    ::testing::Values(
        ExprCase{"grad.norm", "grad.norm"},
        ExprCase{"activation.frac_outside(-9.4999, 9.4999)", "activation.frac_outside(-9.4999, 9.4999)"},
        ExprCase{"activation.frac_outside(-9.4999,9.4999)", "activation.frac_outside(-9.4999, 9.4999)"},
        ExprCase{"activation{layer=~\"relu.*\"}.frac_dead_units(1.0) * 100",
                 "activation{layer=~\"relu.*\"}.frac_dead_units(1) * 100"},
        ExprCase{"w.frac_changed(rtol, atol * 2) > 0", "w.frac_changed(rtol, atol * 2) > 0"},
        ExprCase{"t.frac_outside(a.frac_outside(1, 2), 3)", "t.frac_outside(a.frac_outside(1, 2), 3)"},
        ExprCase{"(a.norm)(1)", "error: expected a statement (rule, when, use, param, let, import, action or alias) @9"},
        ExprCase{"x.frac_outside()", "error: expected expression @16"},
        ExprCase{"x.frac_outside(1, 2", "error: expected ')' @20"},
        ExprCase{"x.frac_outside(1,)", "error: expected expression @18"}));

// ---- statements ----

TEST(Statements, NamedRuleFieldsAndRanges) {
  const std::string text =
      "rule exploding \"grads blow up\":\n"
      "    when grad_norm(layer=~\"conv.*\") > 1e5 for 3 samples\n"
      "    after 100 steps every 10 steps cooldown 5m\n"
      "    severity critical in train\n"
      "    do pause_and_snapshot, alert(message = \"boom\")\n";
  auto p = parse_text(text);
  ASSERT_TRUE(p.result.ok()) << format_diagnostics(p.result.diagnostics, p.sources);
  ASSERT_EQ(p.result.file.statements.size(), 1u);
  const auto& r = std::get<ast::RuleDecl>(p.result.file.statements[0]);
  EXPECT_EQ(r.name, "exploding");
  EXPECT_EQ(text.substr(r.name_range.begin, r.name_range.end - r.name_range.begin), "exploding");
  EXPECT_EQ(r.description, "grads blow up");
  EXPECT_FALSE(r.is_template);
  EXPECT_EQ(r.range.begin, 0u);
  EXPECT_EQ(r.range.end, text.size() - 1);  // up to the last action, not the newline
  const auto& c = r.clauses;
  ASSERT_TRUE(c.when);
  EXPECT_EQ(print(*c.when), "grad_norm{layer=~\"conv.*\"} > 100000");
  EXPECT_EQ(text.substr(c.when->range.begin, c.when->range.end - c.when->range.begin),
            "grad_norm(layer=~\"conv.*\") > 1e5");
  const auto& cmp = std::get<ast::Binary>(c.when->node);
  EXPECT_EQ(cmp.op, ast::BinaryOp::gt);
  EXPECT_EQ(text.substr(cmp.op_range.begin, 1), ">");
  EXPECT_EQ(text.substr(c.when_keyword.begin, 4), "when");
  ASSERT_TRUE(c.for_ && c.after && c.every && c.cooldown);
  EXPECT_EQ(print(*c.for_), "3 samples");
  EXPECT_EQ(std::get<ast::Duration>(c.after->node).unit, ast::DurUnit::steps);
  EXPECT_EQ(print(*c.every), "10 steps");
  EXPECT_EQ(std::get<ast::Duration>(c.cooldown->node).unit, ast::DurUnit::minutes);
  EXPECT_EQ(c.severity, "critical");
  EXPECT_EQ(text.substr(c.severity_range.begin, c.severity_range.end - c.severity_range.begin), "critical");
  EXPECT_EQ(c.mode, "train");
  EXPECT_TRUE(c.has_do);
  ASSERT_EQ(c.actions.size(), 2u);
  EXPECT_EQ(c.actions[0].name, "pause_and_snapshot");
  EXPECT_EQ(c.actions[1].name, "alert");
  ASSERT_EQ(c.actions[1].args.size(), 1u);
  EXPECT_EQ(c.actions[1].args[0].name, "message");
  EXPECT_EQ(text.substr(c.actions[1].range.begin, c.actions[1].range.end - c.actions[1].range.begin),
            "alert(message = \"boom\")");
}

TEST(Statements, SelectorRangesAndMatchers) {
  const std::string text = "let g = grad_norm{layer=~\"conv.*\", rank!=\"0\"}";
  auto p = parse_text(text);
  ASSERT_TRUE(p.result.ok());
  const auto& let = std::get<ast::LetDecl>(p.result.file.statements[0]);
  const auto& sel = std::get<ast::Selector>(let.value->node);
  EXPECT_EQ(sel.name, "grad_norm");
  EXPECT_EQ(sel.name_range.begin, 8u);
  EXPECT_EQ(sel.name_range.end, 17u);
  ASSERT_EQ(sel.matchers.size(), 2u);
  EXPECT_EQ(sel.matchers[0].op, ast::MatchOp::re);
  EXPECT_EQ(sel.matchers[0].value, "conv.*");
  EXPECT_EQ(sel.matchers[1].op, ast::MatchOp::ne);
  EXPECT_EQ(text.substr(sel.matchers[1].range.begin, sel.matchers[1].range.end - sel.matchers[1].range.begin),
            "rank!=\"0\"");
  EXPECT_EQ(let.value->range.end, text.size());
}

TEST(Statements, TemplateUseParamLetImportAction) {
  const std::string text =
      "param lr_factor = 0.5  # comment\n"
      "let gn = grad_norm(layer=~\"conv.*\")\n"
      "import \"team/common.rules\"\n"
      "rule spike(metric = loss, k = 5, window = 100, required):\n"
      "    when metric > k * median(metric[window]) for 3 samples do alert\n"
      "use spike(metric = val_loss, k = 3) as val_spike do reduce_lr(factor = lr_factor)\n"
      "use std.exploding_tensor(only_nan = true) severity error do stop\n"
      "action notify(channel: string, level: number = 2)\n"
      "action ping\n"
      "rule empty():\n when x do log\n";
  auto p = parse_text(text);
  ASSERT_TRUE(p.result.ok()) << format_diagnostics(p.result.diagnostics, p.sources);
  const auto& s = p.result.file.statements;
  ASSERT_EQ(s.size(), 9u) << test::dump(p.result.file);
  EXPECT_EQ(std::get<ast::ParamDecl>(s[0]).name, "lr_factor");
  EXPECT_EQ(std::get<ast::LetDecl>(s[1]).name, "gn");
  const auto& imp = std::get<ast::ImportDecl>(s[2]);
  EXPECT_EQ(imp.path, "team/common.rules");
  EXPECT_EQ(text.substr(imp.path_range.begin, imp.path_range.end - imp.path_range.begin),
            "\"team/common.rules\"");
  const auto& spike = std::get<ast::RuleDecl>(s[3]);
  EXPECT_TRUE(spike.is_template);
  ASSERT_EQ(spike.params.size(), 4u);
  EXPECT_EQ(spike.params[0].name, "metric");
  EXPECT_EQ(print(*spike.params[0].default_value), "loss");
  EXPECT_EQ(spike.params[3].name, "required");
  EXPECT_EQ(spike.params[3].default_value, nullptr);
  const auto& use = std::get<ast::UseDecl>(s[4]);
  EXPECT_FALSE(use.std_prefix);
  EXPECT_EQ(use.template_name, "spike");
  ASSERT_EQ(use.args.size(), 2u);
  EXPECT_EQ(use.args[1].name, "k");
  EXPECT_EQ(use.alias, "val_spike");
  EXPECT_EQ(use.overrides.when, nullptr);
  ASSERT_EQ(use.overrides.actions.size(), 1u);
  EXPECT_EQ(use.overrides.actions[0].args[0].name, "factor");
  const auto& use2 = std::get<ast::UseDecl>(s[5]);
  EXPECT_TRUE(use2.std_prefix);
  EXPECT_EQ(use2.template_name, "exploding_tensor");
  EXPECT_EQ(text.substr(use2.name_range.begin, use2.name_range.end - use2.name_range.begin),
            "std.exploding_tensor");
  EXPECT_EQ(use2.overrides.severity, "error");
  const auto& act = std::get<ast::ActionDecl>(s[6]);
  EXPECT_EQ(act.name, "notify");
  ASSERT_EQ(act.params.size(), 2u);
  EXPECT_EQ(act.params[0].type, "string");
  EXPECT_EQ(act.params[1].type, "number");
  EXPECT_EQ(print(*act.params[1].default_value), "2");
  EXPECT_EQ(std::get<ast::ActionDecl>(s[7]).params.size(), 0u);
  const auto& empty = std::get<ast::RuleDecl>(s[8]);
  EXPECT_TRUE(empty.is_template);
  EXPECT_TRUE(empty.params.empty());
}

TEST(Statements, AnonymousRulesAndStatementBoundaries) {
  const std::string text =
      "when loss > 10 do stop\n"
      "when\n  val_loss > 1.1 * mean(loss[100 steps])\n  in eval\n  do log when x do log\n";
  auto p = parse_text(text);
  ASSERT_TRUE(p.result.ok()) << format_diagnostics(p.result.diagnostics, p.sources);
  ASSERT_EQ(p.result.file.statements.size(), 3u);
  const auto& a = std::get<ast::RuleDecl>(p.result.file.statements[0]);
  EXPECT_TRUE(a.name.empty());
  EXPECT_EQ(a.clauses.when_keyword.begin, 0u);
  const auto& b = std::get<ast::RuleDecl>(p.result.file.statements[1]);
  EXPECT_EQ(b.clauses.mode, "eval");
  EXPECT_EQ(p.sources.line_col(0, b.clauses.when_keyword.begin).line, 2u);
  const auto& c = std::get<ast::RuleDecl>(p.result.file.statements[2]);
  EXPECT_EQ(p.sources.line_col(0, c.clauses.when_keyword.begin).line, 5u);
}

TEST(Statements, UseWithWhenOverrideAndNoParens) {
  auto p = parse_text("use std.terminate_on_nan when is_nan(loss) for 2 samples\n");
  ASSERT_TRUE(p.result.ok()) << format_diagnostics(p.result.diagnostics, p.sources);
  const auto& u = std::get<ast::UseDecl>(p.result.file.statements[0]);
  ASSERT_TRUE(u.overrides.when);
  EXPECT_EQ(print(*u.overrides.when), "is_nan(loss)");
  EXPECT_FALSE(u.overrides.has_do);
  EXPECT_EQ(print(p.result.file), "use std.terminate_on_nan() when is_nan(loss) for 2 samples\n");
}

TEST(Statements, ClauseDurationMayBeAName) {
  auto p = parse_text("rule r(n = 3 samples): when x > 1 for n do log");
  ASSERT_TRUE(p.result.ok());
  const auto& r = std::get<ast::RuleDecl>(p.result.file.statements[0]);
  EXPECT_EQ(std::get<ast::Name>(r.clauses.for_->node).name, "n");
}

// ---- errors ----

struct ErrorCase {
  const char* input;
  const char* message;
  unsigned line;
  unsigned col;
};

class ErrorTable : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ErrorTable, ReportsMessageAtPosition) {
  auto p = parse_text(GetParam().input);
  ASSERT_FALSE(p.result.ok()) << GetParam().input;
  const auto& d = p.result.diagnostics.front();
  EXPECT_EQ(d.code, "parse");
  EXPECT_EQ(d.message, GetParam().message) << GetParam().input;
  const auto lc = p.sources.line_col(0, d.range.begin);
  EXPECT_EQ(lc.line, GetParam().line) << GetParam().input;
  EXPECT_EQ(lc.col, GetParam().col) << GetParam().input;
}

INSTANTIATE_TEST_SUITE_P(
    Syntax, ErrorTable,
    ::testing::Values(
        ErrorCase{"rule r when x do log", "expected ':' after rule header", 1, 8},
        ErrorCase{"rule r: when x > 1", "expected 'do' and at least one action", 1, 19},
        ErrorCase{"rule r: when x > 1 fro 3 samples do log", "expected 'do' and at least one action", 1, 20},
        ErrorCase{"rule r: when x > 1 for 3 do log", "expected duration unit (samples, steps, evals, epochs) or s/m/h suffix", 1, 26},
        ErrorCase{"rule r: when do log", "expected expression", 1, 14},
        ErrorCase{"rule r: do log", "expected 'when' and a condition", 1, 9},
        ErrorCase{"rule: when x do log", "expected rule name after 'rule'", 1, 5},
        ErrorCase{"when x for 1 samples for 2 samples do log", "duplicate 'for' clause", 1, 22},
        ErrorCase{"when x do", "expected action name", 1, 10},
        ErrorCase{"when x do log,", "expected action name", 1, 15},
        ErrorCase{"param = 3", "expected name", 1, 7},
        ErrorCase{"let a 3", "expected '='", 1, 7},
        ErrorCase{"let a == 3", "expected '='", 1, 7},
        ErrorCase{"import team", "expected a string path after 'import'", 1, 8},
        ErrorCase{"use", "expected template name after 'use'", 1, 4},
        ErrorCase{"use std.", "expected template name after 'std.'", 1, 9},
        ErrorCase{"use t() as", "expected name after 'as'", 1, 11},
        ErrorCase{"action a(x)", "expected ':' and a type after parameter name", 1, 11},
        ErrorCase{"x > 3", "expected a statement (rule, when, use, param, let, import, action or alias)", 1, 1},
        ErrorCase{"when x > 1 do log extra", "expected a statement (rule, when, use, param, let, import, action or alias)", 1, 19},
        ErrorCase{"let a = `unterminated", "unterminated backtick name", 1, 9},
        ErrorCase{"let a = ``", "empty name in backticks", 1, 9},
        ErrorCase{"let a = f{x=~3}", "label matcher value must be a string", 1, 14},
        ErrorCase{"let a = f{x=\"1\",}", "expected label matcher (label=\"value\")", 1, 17},
        ErrorCase{"let a = 1 < 2 < 3", "comparison operators cannot be chained; use 'and'", 1, 15},
        ErrorCase{"let a = (1 + 2", "expected ')'", 1, 15},
        ErrorCase{"let a = \"x\ny\"", "unterminated string", 1, 9},
        ErrorCase{"let a = 1 $ 2", "unexpected character '$'", 1, 11},
        ErrorCase{"when x severity do log", "expected severity after 'severity'", 1, 17},
        ErrorCase{"when x in do log", "expected mode name after 'in'", 1, 11}));

TEST(Errors, RecoveryReportsEveryBrokenStatement) {
  const std::string text =
      "rule a: when x > do log\n"
      "rule b: when y > 1 do log\n"
      "let c = (1 +\n"
      "  2\n"
      "when z > 1 for 3 do log\n"
      "param ok = 1\n";
  auto p = parse_text(text);
  ASSERT_EQ(p.result.diagnostics.size(), 3u) << format_diagnostics(p.result.diagnostics, p.sources);
  EXPECT_EQ(p.sources.line_col(0, p.result.diagnostics[0].range.begin).line, 1u);
  // Cut short by the next statement: reported just past the last token.
  EXPECT_EQ(p.sources.line_col(0, p.result.diagnostics[1].range.begin).line, 4u);
  EXPECT_EQ(p.result.diagnostics[1].message, "expected ')'");
  EXPECT_EQ(p.sources.line_col(0, p.result.diagnostics[2].range.begin).line, 5u);
  ASSERT_EQ(p.result.file.statements.size(), 2u);
  EXPECT_EQ(std::get<ast::RuleDecl>(p.result.file.statements[0]).name, "b");
  EXPECT_EQ(std::get<ast::ParamDecl>(p.result.file.statements[1]).name, "ok");
}

TEST(Errors, SuggestsMisspeltKeywords) {
  auto p = parse_text("parm k = 3\nrule r:\n  when x > 1\n  cooldwn 10m\n  do log\n");
  ASSERT_EQ(p.result.diagnostics.size(), 2u);
  EXPECT_EQ(p.result.diagnostics[0].suggestion, "param");
  EXPECT_EQ(p.result.diagnostics[1].suggestion, "cooldown");
}

TEST(Errors, StopsAtMaxErrors) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "let x = \n";
  auto p = parse_text(text);
  EXPECT_EQ(p.result.diagnostics.size(), max_errors);
}

}  // namespace
}  // namespace vigil::grammar

namespace vigil {
namespace {

TEST(Statements, AliasDeclaration) {
  auto p = grammar::test::parse_text("alias loss = `train/loss`, train_loss\n");
  ASSERT_TRUE(p.result.ok()) << format_diagnostics(p.result.diagnostics, p.sources);
  ASSERT_EQ(p.result.file.statements.size(), 1u);
  const auto& a = std::get<ast::AliasDecl>(p.result.file.statements[0]);
  EXPECT_EQ(a.name, "loss");
  EXPECT_EQ(a.targets, (std::vector<std::string>{"train/loss", "train_loss"}));
  ASSERT_EQ(a.target_ranges.size(), 2u);
  EXPECT_EQ(a.target_ranges[0].begin, 13u);  // the opening backtick
  EXPECT_EQ(a.target_ranges[1].begin, 27u);
}

}  // namespace
}  // namespace vigil
