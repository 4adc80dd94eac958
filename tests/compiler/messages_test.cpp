// Issue 11 §4/§6 (compiler side): constant arguments out of their range,
// durations out of range, a byte order mark, and what the compiler records
// so rulecheck can warn about clauses a trace can never satisfy (`for N
// epochs` without an `epoch` series, `in MODE` of a mode never seen).

#include <gtest/gtest.h>

#include <string>

#include "stdlib/functions.hpp"
#include "vigil/program.hpp"

namespace {

std::string errors_of(const vigil::CompileResult& r) { return r.format_diagnostics(); }

// The one error of compiling `text`, with its column; fails if not exactly one.
struct OneError {
  std::string message;
  std::uint32_t col = 0;
};
OneError one_error(const std::string& text) {
  const auto r = vigil::compile_string(text, "t.rules");
  OneError out;
  int n = 0;
  for (const auto& d : r.diagnostics) {
    if (d.level != vigil::DiagLevel::error) continue;
    ++n;
    out.message = d.message;
    out.col = r.sources.line_col(d.file, d.range.begin).col;
  }
  EXPECT_EQ(n, 1) << errors_of(r);
  return out;
}

TEST(ConstantRanges, EwmaAlphaMustBeAWeight) {
  auto e = one_error("rule r: when ewma(loss, 2) > 1 do log\n");
  EXPECT_EQ(e.message, "argument 'alpha' of ewma must be 0 < alpha <= 1, got 2");
  EXPECT_EQ(e.col, 25u);  // at the argument
  e = one_error("rule r: when ewma(loss, -1) > 1 do log\n");
  EXPECT_EQ(e.message, "argument 'alpha' of ewma must be 0 < alpha <= 1, got -1");
  e = one_error("rule r: when ewma(loss, 0) > 1 do log\n");
  EXPECT_NE(e.message.find("0 < alpha <= 1"), std::string::npos);
  EXPECT_TRUE(vigil::compile_string("rule r: when ewma(loss, 1) > 1 do log\n").ok());
  EXPECT_TRUE(vigil::compile_string("rule r: when ewma(loss, 0.1) > 1 do log\n").ok());
}

TEST(ConstantRanges, CusumRejectsBothNegativeArguments) {
  const auto r = vigil::compile_string("rule r: when cusum(loss, -1, -1) do log\n", "t.rules");
  ASSERT_FALSE(r.ok());
  const std::string text = errors_of(r);
  EXPECT_NE(text.find("t.rules:1:26: error: argument 'k' of cusum must be k >= 0, got -1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("t.rules:1:30: error: argument 'h' of cusum must be h > 0, got -1"),
            std::string::npos)
      << text;
}

TEST(ConstantRanges, EveryRangedFunctionChecksItsConstants) {
  // One out-of-range call per function with a ranged constant, through a
  // let and a param too (the value is what is checked, wherever written).
  for (const char* text : {
           "rule r: when quantile(x[10], 1.5) > 1 do log\n",
           "rule r: when iqr_outlier(x[10], -0.5) do log\n",
           "rule r: when ewma_chart(x, 1.5, 3) do log\n",
           "rule r: when ewma_chart(x, 0.2, 0) do log\n",
           "rule r: when page_hinkley(x, -1, 50) do log\n",
           "rule r: when page_hinkley(x, 0.1, 0) do log\n",
           "let a = 3 - 4\nrule r: when ewma(x, a) > 1 do log\n",
           "param a = 7\nrule r: when ewma(x, a) > 1 do log\n",
           "rule r: when steps_since_best(x, 1 / 0, \"min\") > 1 do log\n",
       }) {
    const auto r = vigil::compile_string(text);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_NE(errors_of(r).find("error: argument '"), std::string::npos) << text << errors_of(r);
  }
  for (const char* text : {
           "rule r: when quantile(x[10], 0) > 1 and quantile(x[10], 1) > 1 do log\n",
           "rule r: when iqr_outlier(x[10], 0) do log\n",
           "rule r: when ewma_chart(x, 1, 3) and cusum(x, 0, 5) do log\n",
           "rule r: when page_hinkley(x, 0, 50) do log\n",
           "rule r: when steps_since_best(x, -0.01, \"min\") > 1 do log\n",  // |min_delta|
       }) {
    const auto r = vigil::compile_string(text);
    EXPECT_TRUE(r.ok()) << text << errors_of(r);
  }
}

TEST(ConstantRanges, EveryConstantNumberOfTheRegistryHasItsRangeInTheDocs) {
  // The docs are rendered from the registry (FunctionReference test keeps
  // docs/functions.md equal to the rendering); the rendering must show each
  // constant's range.
  const auto& reg = vigil::stdlib::standard_functions();
  const std::string docs = vigil::stdlib::render_function_reference(reg);
  for (const auto& d : reg.all())
    for (const auto& p : d.params)
      if (p.constant && p.type == vigil::stdlib::ArgType::number)
        EXPECT_NE(docs.find(std::string(p.name) + " (constant, " + vigil::stdlib::range_text(p) + ")"),
                  std::string::npos)
            << d.name << " " << p.name;
}

TEST(Durations, HugeDurationIsOutOfRangeWithTheLimit) {
  auto e = one_error("rule r: when x > 1 for 1e308h do log\n");
  EXPECT_EQ(e.message, "'for' duration is out of range: at most 9007199254740992 seconds");
  EXPECT_EQ(e.col, 24u);
  e = one_error("rule r: when x > 1 cooldown 1e20 steps do log\n");
  EXPECT_EQ(e.message, "'cooldown' duration is out of range: at most 9007199254740992 steps");
  e = one_error("rule r: when max(x[1e308h]) > 1 do log\n");
  EXPECT_EQ(e.message, "a range's duration is out of range: at most 9007199254740992 seconds");
  EXPECT_TRUE(vigil::compile_string("rule r: when x > 1 for 9007199254740992 steps do log\n").ok());
}

TEST(ByteOrderMark, ARuleFileMayStartWithOne) {
  const auto ok = vigil::compile_string("\xEF\xBB\xBFrule r: when x > 1 do log\n");
  EXPECT_TRUE(ok.ok()) << errors_of(ok);
  // Columns on the first line do not count it.
  const auto with = one_error("\xEF\xBB\xBFrule r: when x > do log\n");
  const auto without = one_error("rule r: when x > do log\n");
  EXPECT_EQ(with.col, without.col);
  EXPECT_EQ(with.message, without.message);
  // Only at the start: elsewhere it is still not rule text.
  EXPECT_FALSE(vigil::compile_string("rule r: when x > 1 do log\n\xEF\xBB\xBF").ok());
}

TEST(TraceDependentClauses, EpochDurationsReadTheEpochSeries) {
  const auto r = vigil::compile_string("rule r: when x > 1 for 2 epochs do log\n", "t.rules");
  ASSERT_TRUE(r.ok()) << errors_of(r);
  bool epoch = false;
  for (const auto& u : r.program->series_uses())
    if (u.name == "epoch") {
      epoch = true;
      EXPECT_EQ(r.sources.line_col(u.file, u.range.begin).col, 24u);  // at `2 epochs`
    }
  EXPECT_TRUE(epoch);
}

TEST(TraceDependentClauses, RuleInfoSaysWhereItsModeIsWritten) {
  const auto r = vigil::compile_string("rule r: when x > 1 in validation do log\n", "t.rules");
  ASSERT_TRUE(r.ok()) << errors_of(r);
  const auto& info = r.program->rules().at(0);
  EXPECT_EQ(info.mode, "validation");
  EXPECT_EQ(r.sources.line_col(info.mode_file, info.mode_range.begin).col, 23u);
}

}  // namespace
