// `rulecheck watch` end to end: the built binary follows a trace that another
// process writes, prints firings as they happen, runs --exec for each, and
// stops on SIGTERM, --timeout or deletion of the trace. Every wait is bounded
// (a hung watch is killed after 20 s and the test fails).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/watch/process.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using watch_test::Child;
using watch_test::count_lines;
using watch_test::eventually;
using watch_test::slurp;

const fs::path data_dir = VIGIL_WATCH_TEST_DATA;
const std::string rulecheck = RULECHECK_PATH;

// Each test works in its own temporary directory (the watch runs there, so
// the trace prints as `trace.jsonl`).
class Watch : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("vigil_watch_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts `rulecheck watch RULES --trace trace.jsonl ARGS` in the test directory.
  std::unique_ptr<Child> watch(const std::string& args, const std::string& rules = "watch.rules",
                               const std::string& trace = "trace.jsonl") {
    const std::string cmd = "cd '" + dir_.string() + "' && exec '" + rulecheck + "' watch '" +
                            (data_dir / rules).string() + "' --trace " + trace + " --poll 50 " +
                            args;
    auto child = std::make_unique<Child>(cmd, dir_ / "out.txt", dir_ / "err.txt");
    EXPECT_TRUE(child->started());
    return child;
  }

  void write_trace(const std::string& text, std::ios::openmode mode = std::ios::trunc) {
    std::ofstream(dir_ / "trace.jsonl", std::ios::binary | std::ios::out | mode) << text;
  }

  std::string out() const { return slurp(dir_ / "out.txt"); }
  std::string err() const { return slurp(dir_ / "err.txt"); }

  // "rule@step" of each JSON firing printed so far.
  std::vector<std::string> firings() const {
    std::vector<std::string> ids;
    std::istringstream in(out());
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      ids.push_back(j["rule"].get<std::string>() + "@" + std::to_string(j["step"].get<long>()));
    }
    return ids;
  }

  fs::path dir_;
};

// Steps 1-7 as append_trace.sh writes them, at once.
const char* const whole_trace =
    R"({"step": 1, "time": 1001, "values": {"loss": 1, "grad_norm{layer=\"conv1\"}": 10}}
{"step": 2, "time": 1002, "values": {"loss": 6, "grad_norm{layer=\"conv1\"}": 2e5}}
{"step": 3, "time": 1003, "values": {"loss": 7, "grad_norm{layer=\"conv1\"}": 3e5}}
{"step": 4, "time": 1004.5, "values": {"loss": 8, "grad_norm{layer=\"conv1\"}": 4e5}}
{"step": 5, "time": 1005, "values": {"loss": 1, "grad_norm{layer=\"conv1\"}": 1}}
)";

TEST_F(Watch, FollowsAnotherProcessWritingAndRunsExecForEachFiring) {
  // The command records its variables and its stdin: that is its visible effect.
  auto watcher = watch(
      "--format json --exec 'printf \"%s %s\\n\" \"$VIGIL_RULE\" \"$VIGIL_STEP\" >> effects.txt; "
      "cat >> effects.txt; env | grep ^VIGIL_ | sort > env_$VIGIL_STEP.txt'");
  Child writer("exec sh '" + (data_dir / "append_trace.sh").string() + "' '" +
                   (dir_ / "trace.jsonl").string() + "'",
               dir_ / "writer_out.txt", dir_ / "writer_err.txt");
  ASSERT_TRUE(writer.started());

  // Firings are printed as they happen: step 3's while the writer still has
  // ~1.2 s of lines to go.
  bool seen_while_writing = false;
  ASSERT_TRUE(eventually(
      [&] {
        if (out().find("\"step\":3") == std::string::npos) return false;
        seen_while_writing = writer.running();
        return true;
      },
      10s))
      << err();
  EXPECT_TRUE(seen_while_writing);
  ASSERT_EQ(writer.wait(10s), 0) << slurp(dir_ / "writer_err.txt");

  // Three firings, two lines of effect each.
  EXPECT_TRUE(eventually([&] { return count_lines(slurp(dir_ / "effects.txt")) == 6; }, 10s))
      << slurp(dir_ / "effects.txt") << err();
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 1) << "SIGTERM ends the watch cleanly; 1: something fired\n" << err();

  EXPECT_THAT(firings(), ElementsAre("loss_high@3", "exploding_grad@4", "loss_high@7"));
  // Each --exec got the firing's JSON, exactly as printed, on its stdin.
  std::istringstream printed(out());
  std::string expected_effects;
  for (const char* head : {"loss_high 3", "exploding_grad 4", "loss_high 7"}) {
    std::string json;
    std::getline(printed, json);
    expected_effects += std::string(head) + "\n" + json + "\n";
  }
  EXPECT_EQ(slurp(dir_ / "effects.txt"), expected_effects);
  EXPECT_EQ(slurp(dir_ / "env_4.txt"),
            "VIGIL_ACTIONS=pause_and_snapshot\n"
            "VIGIL_LABELS={layer=\"conv1\"}\n"
            "VIGIL_MODE=train\n"
            "VIGIL_PENDING_SINCE=2\n"
            "VIGIL_RULE=exploding_grad\n"
            "VIGIL_SEVERITY=critical\n"
            "VIGIL_STEP=4\n"
            "VIGIL_TIME=1004.5\n"
            "VIGIL_TRACE=trace.jsonl\n"
            "VIGIL_VALUE=400000\n");
  EXPECT_EQ(slurp(dir_ / "env_7.txt"),
            "VIGIL_ACTIONS=alert,log\n"
            "VIGIL_LABELS=\n"
            "VIGIL_MODE=train\n"
            "VIGIL_PENDING_SINCE=6\n"
            "VIGIL_RULE=loss_high\n"
            "VIGIL_SEVERITY=error\n"
            "VIGIL_STEP=7\n"
            "VIGIL_TIME=\n"
            "VIGIL_TRACE=trace.jsonl\n"
            "VIGIL_VALUE=9.5\n");
  EXPECT_THAT(err(), HasSubstr("waiting for 'trace.jsonl' to appear"));
  EXPECT_THAT(err(), HasSubstr("3 firings of 2 rules over 7 observations"));
  EXPECT_THAT(err(), Not(HasSubstr("truncated"))) << "the half-written line is not damage";
}

TEST_F(Watch, SigtermWithNothingFiredExitsZero) {
  write_trace("{\"step\": 1, \"values\": {\"loss\": 1}}\n");
  auto watcher = watch("");
  // Let it read the line (the summary counts it), then stop it.
  std::this_thread::sleep_for(300ms);
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 0) << err();
  EXPECT_EQ(out(), "");
  EXPECT_THAT(err(), HasSubstr("0 firings of 0 rules over 1 observation"));
}

TEST_F(Watch, TimeoutStopsAndTextFormatIsTheRunFormat) {
  write_trace(whole_trace);
  auto watcher = watch("--timeout 0.5");
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_EQ(out(),
            "step 3 [train] loss_high (error) value=7 -> alert, log\n"
            "step 4 [train] exploding_grad (critical) {layer=\"conv1\"} value=400000 -> "
            "pause_and_snapshot\n");
}

TEST_F(Watch, IdleTraceTicksTheClockSoAStallFiresWhileItLasts) {
  // The trace's times are its own (1001, 1002): the clock runs on from the
  // last one by the wall time since it was read, so `age(loss) > 1` fires
  // about a second after the last line, at its step, while nothing is appended.
  write_trace(R"({"step": 1, "time": 1001, "values": {"loss": 1}}
{"step": 2, "time": 1002, "values": {"loss": 1}}
)");
  auto watcher = watch("--format json --timeout 6", "stall.rules");
  EXPECT_TRUE(eventually([&] { return firings().size() == 1; }, 10s)) << out() << err();
  EXPECT_THAT(firings(), ElementsAre("stalled@2"));
  const auto j = nlohmann::json::parse(out());
  EXPECT_GT(j["time"].get<double>(), 1003.0);
  EXPECT_GT(j["value"].get<double>(), 1.0);
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_EQ(firings().size(), 1u) << "fires once while the stall lasts: " << out();
}

TEST_F(Watch, StopsWhenTheTraceIsDeleted) {
  write_trace("{\"step\": 1, \"values\": {\"loss\": 1}}\n");
  auto watcher = watch("");
  std::this_thread::sleep_for(200ms);
  fs::remove(dir_ / "trace.jsonl");
  EXPECT_EQ(watcher->wait(20s), 0) << err();
  EXPECT_THAT(err(), HasSubstr("'trace.jsonl' was deleted; stopping"));
}

TEST_F(Watch, FromEndReportsOnlyNewFiringsWithStateFromExistingData) {
  // The firings at steps 3 and 4 are history; steps 6 and 7 arrive later.
  write_trace(whole_trace);
  auto watcher = watch("--format json --from-end --timeout 3");
  std::this_thread::sleep_for(400ms);
  write_trace(
      "{\"step\": 6, \"values\": {\"loss\": 9}}\n{\"step\": 7, \"values\": {\"loss\": 9.5}}\n",
      std::ios::app);
  ASSERT_TRUE(eventually([&] { return out().find("\"step\":7") != std::string::npos; }, 10s))
      << err();
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_THAT(firings(), ElementsAre("loss_high@7"));
}

TEST_F(Watch, FromEndKeepsRuleStateAcrossTheStart) {
  // The existing data leaves loss_high pending (step 2 true); step 3, new,
  // completes its `for 2 samples`: only possible if step 2 was evaluated.
  write_trace(
      "{\"step\": 1, \"values\": {\"loss\": 1}}\n{\"step\": 2, \"values\": {\"loss\": 6}}\n");
  auto watcher = watch("--format json --from-end --timeout 3");
  std::this_thread::sleep_for(400ms);
  write_trace("{\"step\": 3, \"values\": {\"loss\": 7}}\n", std::ios::app);
  ASSERT_TRUE(eventually([&] { return out().find("\"step\":3") != std::string::npos; }, 10s))
      << err();
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_THAT(firings(), ElementsAre("loss_high@3"));
}

TEST_F(Watch, FromEndReportsEverythingOfATraceCreatedLater) {
  auto watcher = watch("--format json --from-end --timeout 3");
  // Created after the watch started: wait for it to say so (a fixed sleep
  // lost the race under load, and the trace then counted as existing).
  ASSERT_TRUE(eventually([&] { return err().find("waiting for") != std::string::npos; }, 10s))
      << err();
  write_trace(whole_trace);
  ASSERT_TRUE(eventually([&] { return firings().size() == 2; }, 10s)) << err();
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_THAT(firings(), ElementsAre("loss_high@3", "exploding_grad@4"));
}

TEST_F(Watch, TruncationRestartsFromTheStartWithFreshState) {
  write_trace(whole_trace);
  auto watcher = watch("--format json");
  ASSERT_TRUE(eventually([&] { return firings().size() == 2; }, 10s)) << err();
  // A new run reuses the file name: shorter content, same inode.
  write_trace(
      "{\"step\": 1, \"values\": {\"loss\": 6}}\n{\"step\": 2, \"values\": {\"loss\": 6}}\n");
  ASSERT_TRUE(eventually([&] { return firings().size() == 3; }, 10s)) << err();
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_THAT(firings(), ElementsAre("loss_high@3", "exploding_grad@4", "loss_high@2"));
  EXPECT_THAT(err(), HasSubstr("trace.jsonl: warning: trace was truncated or replaced"));
}

TEST_F(Watch, FailingOrHangingExecIsAWarningAndTheWatchGoesOn) {
  write_trace(whole_trace);
  auto failing = watch("--format json --timeout 1 --exec 'exit 3'");
  EXPECT_EQ(failing->wait(20s), 1) << err();
  EXPECT_THAT(firings(), ElementsAre("loss_high@3", "exploding_grad@4"));
  EXPECT_THAT(err(), HasSubstr("warning: --exec for loss_high at step 3: exited with status 3"));
  EXPECT_THAT(err(), HasSubstr("warning: --exec for exploding_grad at step 4: exited with status 3"));

  const auto start = std::chrono::steady_clock::now();
  auto hanging = watch("--format json --timeout 1 --exec-timeout 0.2 --exec 'sleep 30'");
  EXPECT_EQ(hanging->wait(20s), 1) << err();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "sleep 30 was killed";
  EXPECT_THAT(firings(), ElementsAre("loss_high@3", "exploding_grad@4"));
  EXPECT_THAT(err(), HasSubstr("warning: --exec for loss_high at step 3: timed out after 0.2 s, killed"));
}

TEST_F(Watch, DamagedLineEndsTheWatchWithStatusTwo) {
  write_trace(std::string(whole_trace) + "{\"step\": 6, \"values\": oops}\n");
  auto watcher = watch("--format json");
  EXPECT_EQ(watcher->wait(20s), 2) << err();
  EXPECT_THAT(firings(), ElementsAre("loss_high@3", "exploding_grad@4"));
  EXPECT_THAT(err(), HasSubstr("trace.jsonl:6: invalid json"));
}

TEST_F(Watch, FollowsACsvThroughTheGenericReaderWithStepColumn) {
  // The watch loop knows no format: a CSV whose step column needs
  // --step-column, its row 2 written in two halves.
  auto watcher = watch("--format json --step-column it", "watch.rules", "trace.csv");
  std::this_thread::sleep_for(200ms);
  auto append = [&](const char* text) {
    std::ofstream(dir_ / "trace.csv", std::ios::binary | std::ios::app) << text;
    std::this_thread::sleep_for(200ms);
  };
  append("it,loss\n1,6\n");
  append("2,");
  append("7\n3,1\n");
  ASSERT_TRUE(eventually([&] { return firings().size() == 1; }, 10s)) << err();
  watcher->signal(SIGTERM);
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_THAT(firings(), ElementsAre("loss_high@2"));
  EXPECT_THAT(err(), HasSubstr("1 firing of 1 rule over 3 observations"));
}

TEST_F(Watch, AliasRenamesSeries) {
  fs::copy_file(data_dir / "keras_imdb_fit1.jsonl", dir_ / "trace.jsonl");
  auto watcher = watch("--format json --timeout 0.5 --alias validation_loss=val_loss", "keras.rules");
  EXPECT_EQ(watcher->wait(20s), 1) << err();
  EXPECT_THAT(firings(), ElementsAre("val_loss_high@15", "val_loss_high@18"));
  EXPECT_THAT(err(), Not(HasSubstr("never appears")));
}

}  // namespace
