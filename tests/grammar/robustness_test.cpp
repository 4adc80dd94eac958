// Robustness: pathological and random inputs never crash, hang or overflow
// the stack; they give diagnostics (or a file) with sensible positions.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <variant>

#include "grammar/parser.hpp"
#include "test_util.hpp"

namespace vigil::grammar {
namespace {

using test::parse_text;

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

void expect_too_deep(const std::string& text) {
  auto p = parse_text(text);
  ASSERT_EQ(p.result.diagnostics.size(), 1u) << format_diagnostics(p.result.diagnostics, p.sources).substr(0, 500);
  EXPECT_EQ(p.result.diagnostics[0].message, "expression nested too deeply");
  EXPECT_TRUE(p.result.file.statements.empty());
}

TEST(Robustness, HundredThousandNestedParens) {
  expect_too_deep("let x = " + repeat("(", 100000) + "1" + repeat(")", 100000) + "\n");
}

TEST(Robustness, HundredThousandUnaryMinus) {
  expect_too_deep("let x = " + repeat("-", 100000) + "1\n");
}

TEST(Robustness, HundredThousandNot) {
  expect_too_deep("when " + repeat("not ", 100000) + "x do log\n");
}

TEST(Robustness, HundredThousandNestedCalls) {
  expect_too_deep("let x = " + repeat("f(", 100000) + "1" + repeat(")", 100000) + "\n");
}

TEST(Robustness, LongPowerChainAndSubscripts) {
  expect_too_deep("let x = " + repeat("2 ^ ", 100000) + "2\n");
  expect_too_deep("let x = a" + repeat("[a", 100000) + repeat("]", 100000) + "\n");
}

TEST(Robustness, NestingJustBelowTheLimitParses) {
  // The `let` value itself is depth 0; each paren adds one level.
  const std::size_t n = max_nesting - 1;
  auto p = parse_text("let x = " + repeat("(", n) + "1" + repeat(")", n));
  EXPECT_TRUE(p.result.ok()) << format_diagnostics(p.result.diagnostics, p.sources).substr(0, 300);
}

TEST(Robustness, LongFlatChainsAreBoundedToo) {
  // Left-associative chains are loops in the grammar but still build deep
  // trees, so their length counts towards the nesting limit.
  expect_too_deep("let x = 1" + repeat(" + 1", 100000));
  expect_too_deep("let x = a" + repeat(" and a", 100000));
  auto p = parse_text("let x = 1" + repeat(" + 1", 200));
  EXPECT_TRUE(p.result.ok());
}

TEST(Robustness, HugeExponentIsOutOfRange) {
  auto p = parse_text("let x = 1e999999");
  ASSERT_EQ(p.result.diagnostics.size(), 1u);
  EXPECT_EQ(p.result.diagnostics[0].message, "number out of range");
  EXPECT_EQ(p.result.diagnostics[0].range.begin, 8u);
  EXPECT_EQ(p.result.diagnostics[0].range.end, 16u);
}

TEST(Robustness, OneMegabyteOfRules) {
  const std::string block =
      "rule loss_spike_{} \"spike\":\n"
      "    when loss > 3 * median(loss[100 steps]) and grad_norm{layer=~\"conv.*\"} > 1e5\n"
      "    for 3 samples cooldown 10m severity critical\n"
      "    do alert(message = \"spike\"), reduce_lr(factor = 0.5)  # comment\n"
      "when `train/loss` > 10 do stop\n";
  std::string text;
  std::size_t rules = 0;
  while (text.size() < (1u << 20)) {
    std::string b = block;
    b.replace(b.find("{}"), 2, std::to_string(rules));
    text += b;
    rules += 2;
  }
  auto p = parse_text(text);
  ASSERT_TRUE(p.result.ok());
  EXPECT_EQ(p.result.file.statements.size(), rules);
  const auto& last = std::get<ast::RuleDecl>(p.result.file.statements.back());
  EXPECT_EQ(last.range.end, text.size() - 1);
}

TEST(Robustness, EmptyAndBlankFiles) {
  for (const char* text : {"", "\n\n", "   # only a comment", "# c\n# d\n"}) {
    auto p = parse_text(text);
    EXPECT_TRUE(p.result.ok()) << text;
    EXPECT_TRUE(p.result.file.statements.empty()) << text;
  }
}

TEST(Robustness, NulAndHighBytes) {
  auto p = parse_text(std::string("let x = 1\0\n", 11));
  ASSERT_EQ(p.result.diagnostics.size(), 1u);
  EXPECT_EQ(p.result.diagnostics[0].message, "unexpected character '\\x00'");
  auto q = parse_text("let x = \xff\n");
  ASSERT_EQ(q.result.diagnostics.size(), 1u);
  EXPECT_EQ(q.result.diagnostics[0].message, "unexpected character '\\xff'");
}

// Random bytes: the parser returns either statements or diagnostics, every
// diagnostic lies inside the file, and nothing crashes.
RC_GTEST_PROP(RobustnessProp, RandomBytesNeverCrash, (const std::string& bytes)) {
  auto p = parse_text(bytes);
  RC_ASSERT(p.result.diagnostics.size() <= max_errors);
  for (const auto& d : p.result.diagnostics) {
    RC_ASSERT(d.range.begin <= bytes.size());
    RC_ASSERT(d.range.end <= bytes.size());
    RC_ASSERT(d.range.begin <= d.range.end);
    RC_ASSERT(!format_diagnostic(d, p.sources).empty());
  }
}

// Random token soup is far likelier than random bytes to reach deep grammar paths.
RC_GTEST_PROP(RobustnessProp, RandomTokensNeverCrash, ()) {
  static const std::vector<std::string> tokens = {
      "rule", "when", "for", "after", "every", "cooldown", "severity", "in", "do", "use", "as",
      "import", "param", "let", "action", "and", "or", "not", "true", "false", "std", ".", "x",
      "loss", "`a/b`", "3", "0.5", "5%", "1e5", "10m", "steps", "samples", "\"s\"", "\"\\q\"",
      "(", ")", "[", "]", "{", "}", ",", ":", "=", "==", "=~", "!~", "!=", "<", "<=", ">", "+",
      "-", "*", "/", "%", "^", "\n", "#c\n", "@"};
  const auto picks = *rc::gen::container<std::vector<std::size_t>>(
      rc::gen::inRange<std::size_t>(0, tokens.size()));
  std::string text;
  for (auto i : picks) text += tokens[i] + " ";
  auto p = parse_text(text);
  for (const auto& d : p.result.diagnostics) {
    RC_ASSERT(d.range.end <= text.size());
    RC_ASSERT(!d.message.empty());
  }
  if (p.result.ok()) {
    // Whatever parsed must print and re-parse cleanly.
    auto again = parse_text(print(p.result.file));
    RC_ASSERT(again.result.ok());
    RC_ASSERT(test::dump(again.result.file) == test::dump(p.result.file));
  }
}

}  // namespace
}  // namespace vigil::grammar
