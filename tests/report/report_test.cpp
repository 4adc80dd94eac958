// `rulecheck report` (size, escaping, exit status), `--trace DIR` over many
// runs (isolation, deterministic order, the fired-where table) and `rulecheck
// convert` (round trips), driving the built binary. The browser checks of the
// page are browser_check.cmake.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
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

const fs::path source = VIGIL_SOURCE_DIR;

class Rulecheck : public vigil::test::TempDirTest {
 protected:
  // Runs `rulecheck ARGS` (shell text) in the test's directory.
  Result rulecheck(const std::string& args) {
    return vigil::test::run_shell(dir_, "'" RULECHECK_PATH "' " + args);
  }
};

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// "rule@step{labels}" per firing, without the trace.
std::vector<std::string> firings(const std::string& json_output) {
  std::vector<std::string> ids;
  for (const auto& j : json_lines(json_output))
    ids.push_back(fmt::format("{}@{}{}", j["rule"].get<std::string>(), j["step"].get<long>(),
                              j["labels"].dump()));
  return ids;
}

// A trace of `sets` label sets x 20 steps; every label set is 1 at even steps
// and 0 at odd ones, so `x > 0.5` fires 10 times per label set.
std::string label_sets_trace(int sets) {
  std::string out;
  for (int step = 1; step <= 20; ++step) {
    out += fmt::format("{{\"step\": {}, \"values\": {{", step);
    for (int k = 0; k < sets; ++k)
      out += fmt::format("{}\"x{{run=\\\"{}\\\"}}\": {}", k ? ", " : "", k, step % 2 == 0 ? 1 : 0);
    out += "}}\n";
  }
  return out;
}

constexpr std::string_view flapping_rules =
    "rule x_high:\n    when x > 0.5\n    severity error\n    do log\n"
    "rule any_high:\n    when max(x) > 0.5\n    severity info\n    do log\n";

// Issue 11 §3: 1,000 label sets x 20 steps wrote 923 MB (every chart drew
// every label set's firings). The page is linear in samples + firings: a
// fixed part (dygraphs, the script) plus a bounded number of bytes per sample
// and per firing, also when every label set is drawn.
TEST_F(Rulecheck, ReportSizeIsLinearInSamplesPlusFirings) {
  write("r.rules", std::string(flapping_rules));
  auto size_for = [&](int sets, const std::string& extra) {
    write(fmt::format("t{}.jsonl", sets), label_sets_trace(sets));
    const auto r = rulecheck(fmt::format("report r.rules --trace t{0}.jsonl -o r{0}{1}.html {2}", sets,
                                         extra.empty() ? "" : "_all", extra));
    EXPECT_EQ(r.status, 1) << r.err;
    return static_cast<double>(fs::file_size(dir_ / fmt::format("r{}{}.html", sets, extra.empty() ? "" : "_all")));
  };
  for (const std::string extra : {"", "--top 100000"}) {
    const double one = size_for(1, extra), half = size_for(500, extra), full = size_for(1000, extra);
    // 1000 label sets: 20,000 samples and 10,000 + 10 firings.
    const double samples = 20000, fired = 10010;
    EXPECT_LT(full, one + 400 * (samples + fired)) << extra;  // about 10x the expected cost
    // Linear: doubling the label sets at most doubles the variable part
    // (quadratic growth would triple it).
    EXPECT_LT(full - one, 2.3 * (half - one)) << extra;
    RecordProperty("bytes_1000_label_sets" + std::string(extra.empty() ? "" : "_all_drawn"),
                   std::to_string(static_cast<long>(full)));
  }
}

TEST_F(Rulecheck, ReportKeepsTheExitStatusContractAndSummarises) {
  const auto cli = source / "tests/cli/data";
  auto r = rulecheck(fmt::format("report '{0}/basic.rules' --trace '{0}/basic.jsonl' -o out.html", cli.string()));
  EXPECT_EQ(r.status, 1) << r.err;  // like run: rules fired
  EXPECT_THAT(r.err, HasSubstr("wrote out.html: 3 firings, 3 charts, 1 trace"));
  const std::string html = slurp(dir_ / "out.html");
  EXPECT_THAT(html, HasSubstr("id=\"rule-summary\""));
  EXPECT_THAT(html, HasSubstr("id=\"trace-summary\""));
  EXPECT_THAT(html, Not(HasSubstr("src=\"http")));  // self-contained: nothing fetched
  EXPECT_THAT(html, HasSubstr("Dygraph"));          // the library is inlined

  r = rulecheck(fmt::format("report '{0}/quiet.rules' --trace '{0}/basic.jsonl' -o quiet.html", cli.string()));
  EXPECT_EQ(r.status, 0) << r.err;
  r = rulecheck(fmt::format("report '{0}/basic.rules' --trace no_such.jsonl -o broken.html", cli.string()));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("no_such.jsonl"));
}

// Label values and series names end up in tables, legends and the embedded
// JSON: none may close the script element or open a tag.
TEST_F(Rulecheck, ReportEscapesScriptPayloads) {
  write("r.rules", "rule x_high:\n    when x > 0.5\n    do log\n");
  write("t.jsonl",
        "{\"step\": 1, \"values\": {\"x{l=\\\"</script><script>alert(1)</script><!--\\\"}\": 1}}\n");
  const auto r = rulecheck("report r.rules --trace t.jsonl -o out.html");
  ASSERT_EQ(r.status, 1) << r.err;
  const std::string html = slurp(dir_ / "out.html");
  EXPECT_THAT(html, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(html, Not(HasSubstr("<!--")));
  EXPECT_THAT(html, HasSubstr("&lt;/script&gt;&lt;script&gt;alert(1)"));  // shown, as text
}

// A sweep: 30 runs as files, two as subdirectories, a README and a hidden
// file that are not runs. Run k has x = 1 at its two steps; a rule needing
// three true samples in a row fires only if state leaked from one run into
// the next (steps continue across runs), or in the runs that have three.
TEST_F(Rulecheck, ManyRunsAreIsolatedAndReportedInOrder) {
  write("r.rules", "rule x_stuck:\n    when x > 0.5 for 3 samples\n    severity error\n    do log\n");
  std::vector<std::string> expected_traces;
  for (int k = 0; k < 30; ++k) {
    std::string trace;
    const int n = k % 7 == 0 ? 3 : 2;  // runs 0, 7, 14, 21, 28 have three
    for (int i = 1; i <= n; ++i) trace += fmt::format("{{\"step\": {}, \"values\": {{\"x\": 1}}}}\n", 10 * k + i);
    write(fmt::format("runs/run_{:02}.jsonl", k), trace);
    if (n == 3) expected_traces.push_back(fmt::format("runs/run_{:02}.jsonl", k));
  }
  write("runs/sub_a/trace.jsonl", "{\"step\": 1, \"values\": {\"x\": 1}}\n{\"step\": 2, \"values\": {\"x\": 1}}\n"
                                  "{\"step\": 3, \"values\": {\"x\": 1}}\n");
  expected_traces.push_back("runs/sub_a/trace.jsonl");
  write("runs/sub_b/metrics.csv", "step,x\n1,1\n2,1\n");
  write("runs/README.md", "# my sweep\n");
  write("runs/.hidden.jsonl", "{\"step\": 1, \"values\": {\"x\": 1}}\n");

  const auto serial = rulecheck("run r.rules --trace runs --format json --jobs 1");
  const auto parallel = rulecheck("run r.rules --trace runs/ --format json --jobs 8");
  ASSERT_EQ(serial.status, 1) << serial.err;
  EXPECT_EQ(parallel.status, 1);
  std::vector<std::string> traces;
  for (const auto& j : json_lines(serial.out)) {
    traces.push_back(j["trace"]);
    EXPECT_EQ(j["step"].get<long>() % 10, 3) << j.dump();  // the third sample of its own run
  }
  EXPECT_EQ(traces, expected_traces);
  // The same output, byte for byte, however many workers (runs/ and runs name the same runs).
  std::string parallel_out = parallel.out, parallel_err = parallel.err;
  for (std::size_t at; (at = parallel_out.find("runs//")) != std::string::npos;) parallel_out.erase(at, 1);
  for (std::size_t at; (at = parallel_err.find("runs//")) != std::string::npos;) parallel_err.erase(at, 1);
  EXPECT_EQ(parallel_out, serial.out);
  EXPECT_EQ(parallel_err, serial.err);

  // One summary line per run, in order, then the table, then the total.
  EXPECT_THAT(serial.err, HasSubstr("runs/run_00.jsonl: 1 firing of 1 rule over 3 observations\n"
                                    "runs/run_01.jsonl: 0 firings of 0 rules over 2 observations\n"));
  EXPECT_THAT(serial.err, HasSubstr("runs/sub_b/metrics.csv: 0 firings of 0 rules over 2 observations\n"));
  EXPECT_THAT(serial.err, HasSubstr("which rules fired where (firings per run):\n"));
  EXPECT_THAT(serial.err, HasSubstr("runs/run_07.jsonl             1\n"));
  EXPECT_THAT(serial.err, HasSubstr("runs/run_08.jsonl             -\n"));
  EXPECT_THAT(serial.err, HasSubstr("6 firings of 1 rule over 70 observations\n"));
  EXPECT_THAT(serial.err, Not(HasSubstr("README")));
  EXPECT_THAT(serial.err, Not(HasSubstr("hidden")));

  // The report reads the same runs.
  const auto report = rulecheck("report r.rules --trace runs -o sweep.html");
  EXPECT_EQ(report.status, 1) << report.err;
  EXPECT_THAT(report.err, HasSubstr("6 firings, 1 chart, 32 traces"));
  EXPECT_THAT(slurp(dir_ / "sweep.html"), HasSubstr("id=\"fired-where\""));
}

TEST_F(Rulecheck, RunDirectoryWithSeveralTracesIsAnErrorForThatRunOnly) {
  write("r.rules", "rule x_high:\n    when x > 0.5\n    do log\n");
  write("runs/a/trace.jsonl", "{\"step\": 1, \"values\": {\"x\": 1}}\n");
  write("runs/b/one.jsonl", "{\"step\": 1, \"values\": {\"x\": 1}}\n");
  write("runs/b/two.jsonl", "{\"step\": 1, \"values\": {\"x\": 1}}\n");
  write("runs/c/notes.txt", "nothing to see\n");
  const auto r = rulecheck("run r.rules --trace runs --format json");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(json_lines(r.out).size(), 1u);
  EXPECT_THAT(r.err, HasSubstr("runs/b: several traces in one run directory (one.jsonl, two.jsonl)"));
  EXPECT_THAT(r.err, HasSubstr("runs/c: warning: no trace in this run directory, skipped"));
}

// A directory holding TensorBoard event files is one run, as before.
TEST_F(Rulecheck, TensorBoardDirectoryIsStillOneRun) {
  const auto r = rulecheck(fmt::format("run '{0}/tests/tb/rules/lightning_overfit.rules' --trace "
                                       "'{0}/tests/tb/data/lightning_lstm_textgen'",
                                       source.string()));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out, "step 251977 [eval] early_stop (warning) value=5 -> stop\n");
  EXPECT_THAT(r.err, Not(HasSubstr("which rules fired where")));
}

// convert: JSONL -> X -> JSONL gives the same observations (TensorBoard:
// values at float precision), and rules fire the same on the converted trace.
class Convert : public Rulecheck {
 protected:
  std::string to_jsonl(const std::string& input, const std::string& name) {
    const auto r = rulecheck(fmt::format("convert '{}' -o {}", input, name));
    EXPECT_EQ(r.status, 0) << r.err;
    return slurp(dir_ / name);
  }
};

TEST_F(Convert, CsvRoundTripIsExact) {
  // Labels with quotes and commas, NaN and infinities, times, eval series by name.
  write("t.jsonl",
        "{\"step\": 1, \"mode\": \"train\", \"time\": 1001.25, \"values\": {\"loss\": 0.1, "
        "\"grad_norm{layer=\\\"a,b\\\"}\": \"NaN\", \"x\": \"Infinity\"}}\n"
        "{\"step\": 2, \"mode\": \"eval\", \"time\": 1002.5, \"values\": {\"eval/loss\": 0.30000000000000004}}\n"
        "{\"step\": 3, \"mode\": \"train\", \"values\": {\"x\": \"-Infinity\", \"loss\": 1e-300}}\n");
  const std::string original = to_jsonl("t.jsonl", "a.jsonl");
  auto r = rulecheck("convert a.jsonl -o t.csv");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("warning")));  // every mode is implied by the names
  EXPECT_THAT(slurp(dir_ / "t.csv"), HasSubstr("\"grad_norm{layer=\"\"a,b\"\"}\",1,nan,1001.25\n"));
  EXPECT_EQ(to_jsonl("t.csv", "b.jsonl"), original);
}

TEST_F(Convert, TensorBoardRoundTripKeepsStepsTimesAndFloatValues) {
  const auto head = (source / "tests/trace/data/nanogpt_muon_head.jsonl").string();
  auto r = rulecheck(fmt::format("convert '{}' -o tb/", head));
  ASSERT_EQ(r.status, 0) << r.err;
  // val_loss is logged with train series in the input; TensorBoard has no mode.
  EXPECT_THAT(r.err, HasSubstr("warning: TensorBoard stores no mode: 'val_loss' at step 0 is train"));
  const auto original = json_lines(to_jsonl(head, "a.jsonl"));
  const auto back = json_lines(to_jsonl("tb", "b.jsonl"));
  // Flatten to (step, series, value) in order: the reader splits an event by mode.
  auto flat = [](const std::vector<nlohmann::json>& obs, bool to_float) {
    std::vector<std::string> out;
    for (const auto& o : obs)
      for (const auto& [key, v] : o["values"].items()) {
        std::string value = v.is_string() ? v.get<std::string>()
                                          : fmt::format("{}", to_float ? static_cast<float>(v.get<double>())
                                                                       : v.get<double>());
        out.push_back(fmt::format("{} {} {}", o["step"].get<long>(), key, value));
      }
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(flat(back, false), flat(original, true));

  // The rules see the same firings.
  const auto rules = (source / "tests/report/data/head.rules").string();
  const auto a = rulecheck(fmt::format("run '{}' --trace '{}' --format json", rules, head));
  const auto b = rulecheck(fmt::format("run '{}' --trace tb --format json", rules));
  EXPECT_EQ(a.status, 1);
  EXPECT_EQ(firings(b.out), firings(a.out));
}

TEST_F(Convert, ReadsEveryFormatAndReportsErrors) {
  const auto hf = (source / "tests/csvhf/data/huggingface/mt5_summarization_healthy/trainer_state.json").string();
  auto r = rulecheck(fmt::format("convert '{}' -o hf.jsonl", hf));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("wrote hf.jsonl: "));
  // An HF run replayed from the converted JSONL fires as from the original.
  const auto rules = (source / "tests/csvhf/data/e2e/eval_loss.rules").string();
  EXPECT_EQ(firings(rulecheck(fmt::format("run '{}' --trace hf.jsonl --format json", rules)).out),
            firings(rulecheck(fmt::format("run '{}' --trace '{}' --format json", rules, hf)).out));

  r = rulecheck("convert no_such.jsonl -o x.jsonl");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("no_such.jsonl"));
  write("t.jsonl", "{\"step\": 1, \"values\": {\"x\": 1}}\n");
  r = rulecheck("convert t.jsonl -o out.txt");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--to jsonl|csv|tensorboard"));
  // Damage: what came before it is written, the status is 2.
  write("damaged.jsonl", "{\"step\": 1, \"values\": {\"x\": 1}}\n{\"step\": 2, \"val");
  r = rulecheck("convert damaged.jsonl -o d.csv");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("damaged.jsonl:2:"));
  EXPECT_EQ(slurp(dir_ / "d.csv"), "tag,step,value,wall_time\nx,1,1,\n");
}

}  // namespace
