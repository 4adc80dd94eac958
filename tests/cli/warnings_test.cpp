// Issue 11 §3/§4/§6 through the rulecheck binary: clauses a trace can never
// satisfy are warned about (`for N epochs` without an `epoch` series, `in
// MODE` of a mode the trace never has), `train/loss` without backticks gets
// the backticked name as a suggestion, and the label-set limit warns once.

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/files.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Warnings : public vigil::test::TempDirTest {
 protected:
  vigil::test::Result run(const std::string& rules, const std::string& trace,
                          const std::string& extra = "") {
    write("r.rules", rules);
    write("t.jsonl", trace);
    return vigil::test::run_shell(dir_, "'" RULECHECK_PATH "' run r.rules --trace t.jsonl " + extra);
  }
};

// Three observations of `loss` (and whatever `more` adds), in train mode,
// then one in eval mode.
std::string trace(const std::string& more = "") {
  std::string t;
  for (int step = 1; step <= 3; ++step)
    t += "{\"step\": " + std::to_string(step) + ", \"values\": {\"loss\": 2" + more + "}}\n";
  t += "{\"step\": 3, \"mode\": \"eval\", \"values\": {\"val_loss\": 2}}\n";
  return t;
}

TEST_F(Warnings, EpochDurationWithoutAnEpochSeries) {
  const auto r = run("rule r: when loss > 1 for 2 epochs do log\n", trace());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("r.rules:1:27: warning: '2 epochs' counts epochs by the series "
                               "'epoch', which never appears in trace 't.jsonl'"))
      << r.err;
  // With an epoch series, no warning (and the rule can fire).
  const auto ok = run("rule r: when loss > 1 for 0 epochs do log\n", trace(", \"epoch\": 1"));
  EXPECT_THAT(ok.err, Not(HasSubstr("never appears"))) << ok.err;
}

TEST_F(Warnings, ModeTheTraceNeverHas) {
  const auto r = run("rule r: when loss > 1 in validation do log\nrule q: when val_loss > 1 in eval do log\n",
                     trace());
  EXPECT_EQ(r.status, 1) << r.err;  // q fired
  EXPECT_THAT(r.err, HasSubstr("r.rules:1:26: warning: mode 'validation' never appears in trace "
                               "'t.jsonl' (its modes: eval, train): rules 'in validation' never run"))
      << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("mode 'eval'"))) << r.err;
}

TEST_F(Warnings, SlashNameWithoutBackticksSuggestsThem) {
  const std::string t = "{\"step\": 1, \"values\": {\"train/loss\": 2}}\n";
  const auto r = run("rule r: when train/loss > 1 do log\n", t);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: series 'train' never appears in trace 't.jsonl'; "
                               "'train/loss' divides series, a name with '/' is written in "
                               "backticks"))
      << r.err;
  EXPECT_THAT(r.err, HasSubstr("`train/loss`")) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("series 'loss' never appears"))) << r.err;  // once, not per part
  // Written with backticks: read, fires, no warning.
  const auto ok = run("rule r: when `train/loss` > 1 do log\n", t);
  EXPECT_THAT(ok.err, Not(HasSubstr("never appears"))) << ok.err;
  EXPECT_THAT(ok.err, HasSubstr("1 firing of 1 rule")) << ok.err;
  // A real division of a series by a number keeps the plain warning.
  const auto div = run("rule r: when tokens/2 > 1 do log\n", t);
  EXPECT_THAT(div.err, HasSubstr("series 'tokens' never appears in trace 't.jsonl'")) << div.err;
  EXPECT_THAT(div.err, Not(HasSubstr("backticks"))) << div.err;
}

TEST_F(Warnings, LabelSetLimitWarnsOnceAndDrops) {
  std::string t;
  for (int i = 0; i < 5; ++i)
    t += "{\"step\": " + std::to_string(i) + ", \"values\": {\"x{i=\\\"" + std::to_string(i) +
         "\\\"}\": 5}}\n";
  const auto r = run("rule r: when x > 1 do log\n", t, "--max-label-sets 2");
  EXPECT_EQ(r.status, 1) << r.err;  // fired
  const std::string warning =
      "t.jsonl: warning: series 'x' has more than 2 label sets; samples of new label sets are "
      "ignored (raise the limit with --max-label-sets N, 0 for none)\n";
  EXPECT_THAT(r.err, HasSubstr(warning)) << r.err;
  EXPECT_EQ(r.err.find(warning), r.err.rfind(warning)) << "one warning, not one per label set";
  EXPECT_THAT(r.err, HasSubstr("2 firings of 1 rule")) << r.err;
  const auto all = run("rule r: when x > 1 do log\n", t, "--max-label-sets 0");
  EXPECT_THAT(all.err, HasSubstr("5 firings of 1 rule")) << all.err;
}

}  // namespace
