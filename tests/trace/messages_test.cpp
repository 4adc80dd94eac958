// Issue 11 §4 and §6, trace side: silent wrong answers become right answers
// or positioned errors, and messages a user can act on. Each test names the
// old behaviour it replaces.

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"
#include "tests/support/traces.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"
#include "trace/tensorboard_record.hpp"
#include "vigil/trace.hpp"

namespace {

using vigil::test::read_all;
using vigil::test::value_of;

class MessagesTest : public vigil::test::TempDirTest {};

// ---- duplicate keys (old: the last value silently won) ----------------------

TEST_F(MessagesTest, DuplicateKeyInJsonlIsAnErrorWithItsColumn) {
  const auto r = read_all(write("d.jsonl",
                                "{\"step\": 1, \"values\": {\"loss\": 1}}\n"
                                "{\"step\": 2, \"values\": {\"loss\": 2, \"loss\": 0.5}}\n"));
  ASSERT_EQ(r.records.size(), 1u);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 2u);
  EXPECT_EQ(r.error->message, "duplicate key \"loss\" at column 35");
  // A top-level key too, and after a rewritten NaN the column is still the file's.
  const auto top = read_all(write("t.jsonl", "{\"step\": 1, \"values\": {\"a\": NaN}, \"step\": 2}\n"));
  ASSERT_TRUE(top.error);
  EXPECT_EQ(top.error->message, "duplicate key \"step\" at column 35");
}

TEST_F(MessagesTest, DuplicateKeyInTrainerStateStopsThereWithALine) {
  const auto r = read_all(write("trainer_state.json",
                                "{\n  \"log_history\": [\n"
                                "    {\"loss\": 1.0, \"step\": 10},\n"
                                "    {\"loss\": 0.9, \"step\": 20, \"loss\": 0.1},\n"
                                "    {\"loss\": 0.8, \"step\": 30}\n  ]\n}\n"));
  ASSERT_EQ(r.records.size(), 1u);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 4u);
  EXPECT_EQ(r.error->message, "duplicate key \"loss\"");
}

// ---- label escapes (old: \u00ff became "u00ff") -----------------------------

TEST(SeriesKeys, UnicodeEscapesInLabelsAreDecodedToUtf8) {
  std::string name;
  vigil::Labels labels;
  ASSERT_TRUE(vigil::parse_series_key(R"(w{layer="caf\u00e9",emoji="\ud83d\ude00",tab="a\tb"})",
                                      name, labels));
  ASSERT_EQ(labels.size(), 3u);
  EXPECT_EQ(labels[0], (std::pair<std::string, std::string>{"emoji", "\xF0\x9F\x98\x80"}));
  EXPECT_EQ(labels[1], (std::pair<std::string, std::string>{"layer", "caf\xC3\xA9"}));
  EXPECT_EQ(labels[2], (std::pair<std::string, std::string>{"tab", "a\tb"}));
  // Malformed escapes make the key malformed, never a silent drop.
  EXPECT_FALSE(vigil::parse_series_key(R"(w{a="\u00"})", name, labels));
  EXPECT_FALSE(vigil::parse_series_key(R"(w{a="\ud83d"})", name, labels));
  EXPECT_FALSE(vigil::parse_series_key(R"(w{a="\uzzzz"})", name, labels));
}

// ---- one rule for overflowing literals (old: JSONL error, CSV inf) ---------

TEST_F(MessagesTest, OverflowingLiteralsAreInfinityInEveryTextFormat) {
  const auto jsonl = read_all(
      write("o.jsonl", "{\"step\": 1, \"values\": {\"a\": 1e999, \"b\": -1e999, \"c\": 1e-999}}\n"));
  ASSERT_FALSE(jsonl.error) << jsonl.error->format();
  EXPECT_EQ(*value_of(jsonl.records.at(0), "a"), INFINITY);
  EXPECT_EQ(*value_of(jsonl.records.at(0), "b"), -INFINITY);
  EXPECT_EQ(*value_of(jsonl.records.at(0), "c"), 0.0);
  const auto csv = read_all(write("o.csv", "step,a,b\n1,1e999,-1e999\n"));
  ASSERT_FALSE(csv.error);
  EXPECT_EQ(*value_of(csv.records.at(0), "a"), INFINITY);
  const auto hf = read_all(write("trainer_state.json",
                                 "{\"log_history\": [{\"step\": 1, \"loss\": 1e999}]}\n"));
  ASSERT_FALSE(hf.error) << hf.error->format();
  EXPECT_EQ(*value_of(hf.records.at(0), "loss"), INFINITY);
  // A string is still not a number, whatever it spells.
  const auto str = read_all(write("s.jsonl", "{\"step\": 1, \"values\": {\"a\": \"12\"}}\n"));
  EXPECT_TRUE(str.error);
}

// ---- CSV BOM (check: accepted) ------------------------------------------------

TEST_F(MessagesTest, CsvWithABomIsRead) {
  const auto r = read_all(write("bom.csv", "\xEF\xBB\xBFstep,loss\n1,2\n"));
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(*value_of(r.records[0], "loss"), 2.0);
}

// ---- damaged TensorBoard text (old: "[libprotobuf ERROR ...]" on stderr) ----

// Protobuf wire format by hand: field `n` with a length-delimited payload.
std::string field(int n, const std::string& payload) {
  std::string out(1, static_cast<char>((n << 3) | 2));
  for (std::size_t len = payload.size();; len >>= 7) {
    out += static_cast<char>((len & 0x7f) | (len > 0x7f ? 0x80 : 0));
    if (len <= 0x7f) break;
  }
  return out + payload;
}

std::string frame(const std::string& data) {
  std::string out;
  vigil::tb::append_record(out, data);
  return out;
}

// An event file whose second record has a summary tag that is not UTF-8.
std::string event_file_with_binary_tag() {
  const std::string version = field(3, "brain.Event:2");
  std::string value = field(1, "\xff\xfe loss");           // tag
  value += std::string("\x15") + std::string("\x00\x00\x80\x3f", 4);  // simple_value = 1.0f
  const std::string event = std::string("\x10\x01") + field(5, field(1, value));  // step 1, summary
  return frame(version) + frame(event);
}

TEST_F(MessagesTest, TensorBoardTextThatIsNotUtf8IsAPositionedError) {
  const auto path = write("events.out.tfevents.1.host", event_file_with_binary_tag());
  testing::internal::CaptureStderr();
  const auto r = read_all(path);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");  // nothing from protobuf's own log
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message, "corrupt record: summary tag is not valid UTF-8");
  EXPECT_GT(r.error->offset, 0u);
}

#ifdef RULECHECK_PATH
vigil::test::Result rulecheck(const std::filesystem::path& dir, const std::string& args) {
  return vigil::test::run_shell(dir, "'" RULECHECK_PATH "' " + args);
}

std::vector<std::string> fired(const std::string& json_lines) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t nl; (nl = json_lines.find('\n', at)) != std::string::npos; at = nl + 1) {
    const auto j = nlohmann::json::parse(json_lines.substr(at, nl - at));
    out.push_back(fmt::format("{}@{}", j["rule"].get<std::string>(), j["step"].get<long>()));
  }
  return out;
}

// ---- aliases (old: chained, swapped pairs collapsed, an exact name lost) ---

TEST_F(MessagesTest, AliasesAreOneSimultaneousRenamingNeverChained) {
  write("chain.rules", "alias a = b\nalias b = c\nrule ra: when a > 1 do log\nrule rb: when b > 1 do log\n");
  // Trace b is read as a, trace c as b (not as a, through b).
  write("chain.jsonl", "{\"step\": 1, \"values\": {\"b\": 0}}\n{\"step\": 2, \"values\": {\"c\": 5}}\n");
  auto r = rulecheck(dir_, "run chain.rules --format json --trace chain.jsonl");
  EXPECT_EQ(fired(r.out), std::vector<std::string>{"rb@2"}) << r.err;

  write("swap.rules", "alias a = b\nalias b = a\nrule ra: when a > 1 do log\nrule rb: when b > 1 do log\n");
  write("swap.jsonl", "{\"step\": 1, \"values\": {\"a\": 5, \"b\": 0}}\n"
                      "{\"step\": 2, \"values\": {\"a\": 0, \"b\": 7}}\n");
  r = rulecheck(dir_, "run swap.rules --format json --trace swap.jsonl");
  EXPECT_EQ(fired(r.out), (std::vector<std::string>{"rb@1", "ra@2"})) << r.err;
}

TEST_F(MessagesTest, AnExactNameBeatsAnAliasAndTheCollisionIsReportedOnce) {
  write("x.rules", "alias loss = train_loss\nrule high: when loss > 5 do log\n");
  // Both orders within an observation; the trace's own loss (1) is read.
  write("x.jsonl", "{\"step\": 1, \"values\": {\"loss\": 1, \"train_loss\": 9}}\n"
                   "{\"step\": 2, \"values\": {\"train_loss\": 9, \"loss\": 1}}\n");
  auto r = rulecheck(dir_, "run x.rules --format json --trace x.jsonl");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(fired(r.out), std::vector<std::string>{});
  // The alias came first: the exact name takes over from its first appearance.
  write("y.jsonl", "{\"step\": 1, \"values\": {\"train_loss\": 9}}\n"
                   "{\"step\": 2, \"values\": {\"train_loss\": 9, \"loss\": 1}}\n"
                   "{\"step\": 3, \"values\": {\"train_loss\": 9, \"loss\": 2}}\n");
  r = rulecheck(dir_, "run x.rules --format json --trace y.jsonl");
  EXPECT_EQ(fired(r.out), std::vector<std::string>{"high@1"}) << r.err;
  const std::string warning = "trace series 'train_loss' and 'loss' are both read as 'loss'";
  const auto first = r.err.find(warning);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, first + 1), std::string::npos) << "reported once";
  EXPECT_NE(r.err.find("'loss' is used, 'train_loss' ignored"), std::string::npos) << r.err;
}

TEST_F(MessagesTest, ASecondAliasFlagForTheSameSeriesIsAnError) {
  write("a.rules", "rule high: when loss > 5 do log\n");
  write("a.jsonl", "{\"step\": 1, \"values\": {\"tl\": 9}}\n");
  const auto r = rulecheck(dir_, "run a.rules --trace a.jsonl --alias loss=tl --alias val=tl");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("series 'tl' is already read as 'loss'"), std::string::npos) << r.err;
}

// ---- messages -----------------------------------------------------------------

TEST_F(MessagesTest, UnreadableRuleFileGivesTheReasonAndNoCaretLine) {
  const auto r = rulecheck(dir_, "check no-such.rules");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot read rule file 'no-such.rules': No such file or directory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find('^'), std::string::npos) << r.err;
  const auto dir = rulecheck(dir_, "check .");
  EXPECT_NE(dir.err.find("cannot read rule file '.': is a directory"), std::string::npos) << dir.err;
}

TEST_F(MessagesTest, BadTickIsAShortError) {
  write("a.rules", "rule high: when loss > 5 do log\n");
  write("a.jsonl", "{\"step\": 1, \"values\": {\"loss\": 1}}\n");
  for (const char* tick : {"-1", "nan", "inf", "1e999", "soon"}) {
    SCOPED_TRACE(tick);
    const auto r = rulecheck(dir_, fmt::format("run a.rules --trace a.jsonl --tick {}", tick));
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("--tick: must be a non-negative number of seconds"), std::string::npos)
        << r.err;
    EXPECT_LT(r.err.size(), 400u) << "no full help, no 300-digit number";
    EXPECT_NE(r.err.find("Usage:"), std::string::npos);
  }
}

TEST_F(MessagesTest, TerminalEscapesFromLabelsAreEscapedInTextOutput) {
  write("a.rules", "rule high: when loss > 5 do log\n");
  // The label value holds ESC [ 2 J (clear screen) and a C1 CSI.
  write("a.jsonl",
        "{\"step\": 1, \"mode\": \"tr\\u001bain\", \"values\": "
        "{\"loss{host=\\\"a\\u001b[2J\\u0085b\\\"}\": 9}}\n");
  const auto r = rulecheck(dir_, "run a.rules --trace a.jsonl");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\xC2\x85"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(R"({host="a\u001b[2J\u0085b"})"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(R"([tr\u001bain])"), std::string::npos) << r.out;
  // JSON output escapes them as JSON does.
  const auto j = rulecheck(dir_, "run a.rules --format json --trace a.jsonl");
  EXPECT_EQ(j.out.find('\x1b'), std::string::npos) << j.out;
}

TEST_F(MessagesTest, MaxLineFlagBoundsTheLine) {
  write("a.rules", "rule high: when loss > 5 do log\n");
  write("a.jsonl", "{\"step\": 1, \"values\": {\"loss\": 9}}\n{\"step\": 2, \"values\": {\"" +
                       std::string(5000, 'x') + "\": 1}}\n");
  auto r = rulecheck(dir_, "run a.rules --trace a.jsonl --max-line 4K");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("a.jsonl:2: line longer than 4096 bytes"), std::string::npos) << r.err;
  r = rulecheck(dir_, "run a.rules --trace a.jsonl --max-line 1M");
  EXPECT_EQ(r.status, 1) << r.err;
  r = rulecheck(dir_, "run a.rules --trace a.jsonl --max-line 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--max-line: must be a positive size"), std::string::npos) << r.err;
}

TEST_F(MessagesTest, ExecChildrenSeeWholeLabelsAndNoTraceDescriptor) {
  // A label value with a NUL (JSON \u0000) must not end VIGIL_LABELS there,
  // and the child must not hold the trace open (close-on-exec).
  write("a.rules", "rule high: when loss > 5 do log\n");
  const auto trace = write("a.jsonl", "{\"step\": 1, \"values\": {\"loss{host=\\\"a\\u0000b\\\"}\": 9}}\n");
  const auto r = rulecheck(
      dir_,
      "watch a.rules --trace a.jsonl --timeout 3 --exec "
      "'printf \"%s\" \"$VIGIL_LABELS\" > labels.txt; ls -l /proc/$$/fd > fds.txt'");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(vigil::test::slurp(dir_ / "labels.txt"), R"({host="a\u0000b"})");
  const std::string fds = vigil::test::slurp(dir_ / "fds.txt");
  EXPECT_NE(fds, "");
  EXPECT_EQ(fds.find(trace), std::string::npos) << fds;
}
#endif

}  // namespace
