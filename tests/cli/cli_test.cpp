// End-to-end tests of the rulecheck binary (SPEC §5): exit statuses, the JSON
// firing format field by field, text output, warnings, --param/--from/--to.
// Each test runs the built binary in tests/cli/data so paths print as given.

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;



using vigil::test::Result;
using vigil::test::slurp;

// Runs `rulecheck ARGS` (ARGS is shell text) in the data directory.
Result rulecheck(const std::string& args) {
  return vigil::test::run_shell(VIGIL_CLI_TEST_DATA, "'" RULECHECK_PATH "' " + args);
}

std::vector<nlohmann::ordered_json> json_lines(const std::string& text) {
  std::vector<nlohmann::ordered_json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(nlohmann::ordered_json::parse(line));
  return lines;
}

std::vector<std::string> keys(const nlohmann::ordered_json& j) {
  std::vector<std::string> k;
  for (const auto& [key, _] : j.items()) k.push_back(key);
  return k;
}

// "rule@step" for each firing, in output order.
std::vector<std::string> firing_ids(const std::string& json_output) {
  std::vector<std::string> ids;
  for (const auto& j : json_lines(json_output))
    ids.push_back(j["rule"].get<std::string>() + "@" + std::to_string(j["step"].get<long>()));
  return ids;
}

TEST(Check, ValidFileExitsZeroQuietly) {
  const auto r = rulecheck("check basic.rules");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST(Check, SyntaxErrorExitsTwoWithPositionedDiagnostic) {
  const auto r = rulecheck("check basic.rules bad.rules");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("bad.rules:2:"));
  EXPECT_THAT(r.err, HasSubstr(": error: "));
}

// `check --strict` (promtool's --lint-fatal): warnings become errors, exit 2.
TEST(Check, WarningsExitZeroWithoutStrict) {
  const auto r = rulecheck("check let_typo.rules");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("let_typo.rules:3:14: warning: 'smoothd' is read as a series, "
                               "not a declared name; did you mean 'smoothed'?"));
}

TEST(Check, StrictTurnsTheTypodLetWarningIntoAnErrorExitTwo) {
  const auto r = rulecheck("check --strict let_typo.rules");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("let_typo.rules:3:14: error: 'smoothd' is read as a series, "
                               "not a declared name [--strict]; did you mean 'smoothed'?"));
  EXPECT_THAT(r.err, Not(HasSubstr("warning:")));
  EXPECT_THAT(r.err, HasSubstr("1 warning treated as error (--strict)"));
}

TEST(Check, StrictOnACleanFileStillExitsZeroQuietly) {
  const auto r = rulecheck("check --strict basic.rules");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST(Run, JsonFieldsFieldForField) {
  const auto r = rulecheck("run basic.rules --trace basic.jsonl --format json");
  ASSERT_EQ(r.status, 1) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  const std::vector<std::string> order = {"rule",  "step",   "mode",    "time",          "severity",
                                          "labels", "value", "actions", "pending_since", "trace"};
  for (const auto& j : lines) EXPECT_EQ(keys(j), order) << j.dump();

  const auto& a = lines[0];
  EXPECT_EQ(a["rule"], "loss_high");
  EXPECT_EQ(a["step"], 3);
  EXPECT_EQ(a["mode"], "train");
  EXPECT_EQ(a["time"], 1003.0);
  EXPECT_EQ(a["severity"], "error");
  EXPECT_EQ(a["labels"], nlohmann::ordered_json::object());
  EXPECT_EQ(a["value"], 7.0);
  EXPECT_EQ(a["actions"], nlohmann::ordered_json::array({"alert", "log"}));
  EXPECT_EQ(a["pending_since"], 2);
  EXPECT_EQ(a["trace"], "basic.jsonl");

  const auto& b = lines[1];
  EXPECT_EQ(b["rule"], "exploding_grad");
  EXPECT_EQ(b["step"], 4);
  EXPECT_EQ(b["time"], 1004.0);
  EXPECT_EQ(b["severity"], "critical");
  EXPECT_EQ(b["labels"], nlohmann::ordered_json({{"layer", "conv1.weight"}}));
  EXPECT_EQ(b["value"], 4e5);
  EXPECT_EQ(b["actions"], nlohmann::ordered_json::array({"pause_and_snapshot"}));
  EXPECT_EQ(b["pending_since"], 2);

  const auto& c = lines[2];  // edge-triggered: fires again only after a false evaluation
  EXPECT_EQ(c["rule"], "loss_high");
  EXPECT_EQ(c["step"], 7);
  EXPECT_TRUE(c["time"].is_null());  // step 7 has no time
  EXPECT_EQ(c["value"], 9.5);
  EXPECT_EQ(c["pending_since"], 6);

  EXPECT_THAT(r.err, HasSubstr("3 firings of 2 rules over 7 observations"));
}

TEST(Run, TextFormat) {
  const auto r = rulecheck("run basic.rules --trace basic.jsonl");
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out,
            "step 3 [train] loss_high (error) value=7 -> alert, log\n"
            "step 4 [train] exploding_grad (critical) {layer=\"conv1.weight\"} value=400000 -> "
            "pause_and_snapshot\n"
            "step 7 [train] loss_high (error) value=9.5 -> alert, log\n");
}

TEST(Run, ExplainIsIndentedUnderItsFiring) {
  const auto r = rulecheck("run basic.rules --trace basic.jsonl --explain");
  ASSERT_EQ(r.status, 1) << r.err;
  std::istringstream in(r.out);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, "step 3 [train] loss_high (error) value=7 -> alert, log");
  EXPECT_TRUE(second.starts_with("    ")) << r.out;
}

TEST(Run, ExplainShowsTheValuesOfARangeOverAnExpression) {
  const auto r = rulecheck("run stall.rules --trace stall.jsonl --explain");
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("step 2 [train] busy (warning) value=2 -> log\n"
                               "    count((step_time > 5)[3]): 3 samples [1@0 1@1 0@2]\n"))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr("    age(step_time) for step_time: 0 s since its sample at step 3\n"))
      << r.out;
}

TEST(Run, TickReplaysTimeGapsForClockRules) {
  // Without ticks the stall (no step from t=1020 to t=1150) is seen when the
  // stalled step ends; with --tick 10 at the first tick past 60 s (t=1090),
  // with the step and the age then.
  const auto plain = rulecheck("run stall.rules --trace stall.jsonl --format json");
  ASSERT_EQ(plain.status, 1) << plain.err;
  auto ids = firing_ids(plain.out);
  EXPECT_THAT(ids, ::testing::Contains("stalled@3"));
  const auto ticked = rulecheck("run stall.rules --trace stall.jsonl --format json --tick 10");
  ASSERT_EQ(ticked.status, 1) << ticked.err;
  bool seen = false;
  for (const auto& j : json_lines(ticked.out)) {
    if (j["rule"] != "stalled") continue;
    EXPECT_FALSE(seen) << "the stall fires once: " << ticked.out;
    seen = true;
    EXPECT_EQ(j["step"], 2);
    EXPECT_EQ(j["time"], 1090.0);
    EXPECT_EQ(j["value"], 70.0);
  }
  EXPECT_TRUE(seen) << ticked.out;
}

TEST(Run, TickSpreadsAtMostAHundredThousandTicksOverAHugeGap) {
  // A gap of 10^9 s at --tick 1 would be 10^9 ticks; it is 10^5 spread
  // evenly (one every 10^4 s), so the stall is seen at the first of them.
  const auto r = rulecheck("run stall.rules --trace gap.jsonl --format json --tick 1");
  ASSERT_EQ(r.status, 1) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_FALSE(lines.empty()) << r.out;
  EXPECT_EQ(lines[0]["rule"], "stalled");
  EXPECT_EQ(lines[0]["step"], 0);
  EXPECT_EQ(lines[0]["time"], 10000.0);
}

TEST(Run, NothingFiresExitsZero) {
  const auto r = rulecheck("run quiet.rules --trace basic.jsonl --format json");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("0 firings of 0 rules over 7 observations"));
}

TEST(Run, AnonymousRuleIsNamedFileLine) {
  const auto r = rulecheck("run anon.rules --trace basic.jsonl --format json");
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(firing_ids(r.out), std::vector<std::string>{"anon.rules:2@6"});
}

TEST(Run, ParamOverridesTheFile) {
  auto r = rulecheck("run basic.rules --trace basic.jsonl --format json --param limit=8");
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(firing_ids(r.out), (std::vector<std::string>{"exploding_grad@4", "loss_high@7"}));

  r = rulecheck("run basic.rules --param limit=100 --param limit=1000 --trace basic.jsonl --format json");
  ASSERT_EQ(r.status, 1) << r.err;  // the last of repeated params wins
  EXPECT_EQ(firing_ids(r.out), std::vector<std::string>{"exploding_grad@4"});

  r = rulecheck("run basic.rules --trace basic.jsonl --param nonsense");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--param expects KEY=VALUE"));

  r = rulecheck("run basic.rules --trace basic.jsonl --param undeclared=1");
  EXPECT_EQ(r.status, 2);  // overriding an undeclared param is a compile error
  EXPECT_EQ(r.out, "");
}

TEST(Run, FromAndToLimitTheSteps) {
  auto r = rulecheck("run basic.rules --trace basic.jsonl --format json --from 5");
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(firing_ids(r.out), std::vector<std::string>{"loss_high@7"});
  EXPECT_THAT(r.err, HasSubstr("1 firing of 1 rule over 3 observations"));

  r = rulecheck("run basic.rules --trace basic.jsonl --format json --to 3");
  ASSERT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(firing_ids(r.out), std::vector<std::string>{"loss_high@3"});

  // One true evaluation of a `for 2 samples` rule is not enough.
  r = rulecheck("run basic.rules --trace basic.jsonl --from 4 --to 4");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");

  r = rulecheck("run basic.rules --trace basic.jsonl --from 5 --to 4");
  EXPECT_EQ(r.status, 2);
}

TEST(Run, MissingSeriesWarningWithSuggestion) {
  const auto r = rulecheck("run missing.rules --trace basic.jsonl");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("missing.rules:3:10: warning: series 'gradnorm' never appears in "
                               "trace 'basic.jsonl'; did you mean 'grad_norm'?"));
  EXPECT_THAT(r.err, HasSubstr("warning: series 'val_acc' never appears in trace 'basic.jsonl'\n"));
  // Series the trace has are not reported.
  EXPECT_THAT(r.err, Not(HasSubstr("series 'loss'")));
}

TEST(Run, SeveralTracesEachGetAFreshEngine) {
  const auto r = rulecheck("run basic.rules --trace basic.jsonl ./basic.jsonl --format json");
  ASSERT_EQ(r.status, 1) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0]["trace"], "basic.jsonl");
  EXPECT_EQ(lines[3]["trace"], "./basic.jsonl");
  EXPECT_EQ(lines[3]["step"], 3);  // state did not carry over from the first trace
}

TEST(Run, DamagedTraceKeepsPrefixFiringsAndExitsTwo) {
  const auto r = rulecheck("run basic.rules --trace damaged.jsonl --format json");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(firing_ids(r.out), std::vector<std::string>{"loss_high@3"});
  EXPECT_THAT(r.err, HasSubstr("damaged.jsonl:4: truncated record (unexpected end of line)\n"));
}

TEST(Run, TraceErrorsExitTwo) {
  auto r = rulecheck("run basic.rules --trace basic.rules");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("basic.rules: byte 0: unknown trace format"));

  r = rulecheck("run basic.rules --trace no_such.jsonl");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("no_such.jsonl: byte 0: cannot open"));
}

TEST(Run, RuleErrorsExitTwoBeforeReading) {
  const auto r = rulecheck("run bad.rules --trace basic.jsonl");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("bad.rules:2:"));
}

TEST(Usage, ErrorsExitTwoWithUsageOnStderr) {
  for (const char* args : {"", "frobnicate", "run basic.rules", "run basic.rules --trace",
                           "run basic.rules --trace basic.jsonl --bogus",
                           "run basic.rules --trace basic.jsonl --format xml",
                           "run basic.rules --trace basic.jsonl --from soon", "check"}) {
    SCOPED_TRACE(args);
    const auto r = rulecheck(args);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_THAT(r.err, HasSubstr("rulecheck: "));
    EXPECT_THAT(r.err, HasSubstr("Usage:"));
  }
}

TEST(Usage, HelpListsPlannedSubcommands) {
  const auto r = rulecheck("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* sub : {"check", "run", "test", "watch", "report", "stdlib"})
    EXPECT_THAT(r.out, HasSubstr(sub));
}

TEST(Usage, ReportNeedsAnOutputFile) {
  const auto r = rulecheck("report basic.rules --trace basic.jsonl");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--output is required"));
}

TEST(Report, WritesFiringsAndAChartPerSeriesRead) {
  const std::string out = testing::TempDir() + "/vigil_report.html";
  const auto r = rulecheck("report basic.rules --trace basic.jsonl -o " + out);
  EXPECT_EQ(r.status, 1);  // like run: rules fired
  std::ifstream in(out);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("loss_high"));
  // The charts are drawn by the page from its embedded data (tests/report
  // checks them in a browser): one per series key the rules read.
  EXPECT_THAT(html, HasSubstr("\"key\":\"loss\""));
  std::size_t charts = 0;
  for (auto at = html.find("\"key\":"); at != std::string::npos; at = html.find("\"key\":", at + 1)) ++charts;
  EXPECT_EQ(charts, 3u);  // loss and the two grad_norm series of the trace
  EXPECT_THAT(r.err, HasSubstr("wrote " + out));
}

// rulecheck maps large blocks and its heap's growth in bulk
// (tools/rulecheck/memory.cpp): a 10,000-sample window's history and heaps
// (~1 MB) cost a handful of page faults over a threshold rule's run, not
// one per page (~450). Counts the faults taken (the kernel's software
// event, inherited by the children; getrusage would count the pages
// populated in bulk too), not time.
TEST(Memory, ALongWindowIsMappedInBulk) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers replace operator new: rulecheck keeps theirs";
#endif
  void* probe = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool populates = ::madvise(probe, 1 << 16, 23 /* MADV_POPULATE_WRITE */) == 0;
  ::munmap(probe, 1 << 16);
  if (!populates) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)";
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_PAGE_FAULTS;
  attr.inherit = 1;
  attr.disabled = 1;
  const int counter = static_cast<int>(::syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
  if (counter < 0) GTEST_SKIP() << "perf_event_open: " << std::strerror(errno);

  const fs::path dir = vigil::test::make_temp_dir("memory");
  {
    std::ofstream trace(dir / "trace.jsonl");
    for (int i = 0; i < 30000; ++i)
      trace << "{\"step\": " << i << ", \"values\": {\"loss\": " << 2 + (i * 7919 % 1000) / 1000.0 << "}}\n";
    std::ofstream(dir / "threshold.rules") << "rule r: when loss > 100 do log\n";
    std::ofstream(dir / "window.rules") << "rule r: when median(loss[10000]) > 100 do log\n";
  }
  // The count so far (the children's are added as they exit; a reset
  // would not clear those).
  auto count = [&] {
    std::uint64_t n = 0;
    EXPECT_EQ(::read(counter, &n, sizeof n), static_cast<ssize_t>(sizeof n));
    return static_cast<std::int64_t>(n);
  };
  ::ioctl(counter, PERF_EVENT_IOC_ENABLE, 0);
  auto faults = [&](const std::string& rules) {
    const std::int64_t before = count();
    const auto r = vigil::test::run_shell(dir, "'" RULECHECK_PATH "' run " + rules + " --trace trace.jsonl --jobs 1");
    EXPECT_EQ(r.status, 0) << r.err;
    return count() - before;
  };
  const std::int64_t threshold = faults("threshold.rules");
  const std::int64_t window = faults("window.rules");
  ::close(counter);
  fs::remove_all(dir);
  EXPECT_LT(window - threshold, 120) << "threshold rule: " << threshold << " faults, window: " << window;
}

}  // namespace
