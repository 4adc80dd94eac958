// `rulecheck run` options of issue 3, end to end on a real log (the Keras
// IMDB fit): the progress bar (on a pseudo-terminal only), --keep-going,
// --alias, and the `trace` field with several traces.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <pty.h>

#include <cerrno>
#include <cstring>

#include "tests/watch/process.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using watch_test::slurp;

const fs::path data_dir = VIGIL_WATCH_TEST_DATA;


using vigil::test::Result;

// Runs `SHELL_COMMAND` in the data directory; RULECHECK in it is the binary.
Result shell(std::string command) {
  for (auto pos = command.find("RULECHECK"); pos != std::string::npos;
       pos = command.find("RULECHECK", pos))
    command.replace(pos, 9, "'" RULECHECK_PATH "'");
  return vigil::test::run_shell(data_dir, command);
}

// "rule@step trace" of each JSON firing.
std::vector<std::string> firings(const std::string& json_output) {
  std::vector<std::string> ids;
  std::istringstream in(json_output);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    ids.push_back(j["rule"].get<std::string>() + "@" + std::to_string(j["step"].get<long>()) + " " +
                  j["trace"].get<std::string>());
  }
  return ids;
}

const char* const alias = "--alias validation_loss=val_loss";

TEST(Alias, TraceSeriesReadUnderTheRulesName) {
  const auto r = shell(std::string("RULECHECK run keras.rules --trace keras_imdb_fit1.jsonl --format json ") + alias);
  EXPECT_EQ(r.status, 1) << r.err;
  // val_loss: 0.6080 at epoch 15, 0.5778 and 0.5906 after, 0.6204 at 18 (a new run of the rule).
  EXPECT_THAT(firings(r.out), ElementsAre("val_loss_high@15 keras_imdb_fit1.jsonl",
                                          "val_loss_high@18 keras_imdb_fit1.jsonl"));
  EXPECT_THAT(r.err, Not(HasSubstr("never appears")));
}

TEST(Alias, WithoutItTheSeriesIsMissingAndTheWarningSaysSo) {
  const auto r = shell("RULECHECK run keras.rules --trace keras_imdb_fit1.jsonl");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("series 'validation_loss' never appears in trace 'keras_imdb_fit1.jsonl'"));
}

TEST(Alias, MalformedIsAUsageError) {
  for (const char* bad : {"validation_loss", "=val_loss", "validation_loss=", "v{a=\"b\"}=val_loss"}) {
    const auto r = shell(std::string("RULECHECK run keras.rules --trace keras_imdb_fit1.jsonl --alias '") +
                         bad + "'");
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("--alias expects NEW=OLD")) << bad;
    EXPECT_EQ(r.out, "");
  }
}

TEST(KeepGoing, DamagedTraceIsAnErrorWithoutIt) {
  const auto r = shell(std::string("RULECHECK run keras.rules --trace keras_imdb_cut.jsonl --format json ") + alias);
  EXPECT_EQ(r.status, 2) << r.err;
  // The valid prefix (16 epochs) is still evaluated.
  EXPECT_THAT(firings(r.out), ElementsAre("val_loss_high@15 keras_imdb_cut.jsonl"));
  EXPECT_THAT(r.err, HasSubstr("keras_imdb_cut.jsonl:17: truncated record"));
  EXPECT_THAT(r.err, Not(HasSubstr("warning: truncated")));
}

TEST(KeepGoing, DamageBecomesAWarningAndTheStatusComesFromFirings) {
  const auto r = shell(std::string("RULECHECK run keras.rules --trace keras_imdb_cut.jsonl --format json --keep-going ") + alias);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(firings(r.out), ElementsAre("val_loss_high@15 keras_imdb_cut.jsonl"));
  EXPECT_THAT(r.err, HasSubstr("keras_imdb_cut.jsonl:17: warning: truncated record"));
  EXPECT_THAT(r.err, HasSubstr("1 firing of 1 rule over 16 observations"));
}

TEST(KeepGoing, DoesNotExcuseAMissingFile) {
  const auto r = shell("RULECHECK run keras.rules --trace no_such.jsonl --keep-going");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no_such.jsonl"));
}

TEST(SeveralTraces, EachFiringNamesItsTrace) {
  const auto r = shell(std::string("RULECHECK run keras.rules --trace keras_imdb_fit1.jsonl "
                                   "keras_imdb_cut.jsonl --format json --keep-going ") + alias);
  EXPECT_EQ(r.status, 1) << r.err;
  // Each trace has its own engine: the cut one's rule state starts fresh.
  EXPECT_THAT(firings(r.out), ElementsAre("val_loss_high@15 keras_imdb_fit1.jsonl",
                                          "val_loss_high@18 keras_imdb_fit1.jsonl",
                                          "val_loss_high@15 keras_imdb_cut.jsonl"));
  EXPECT_THAT(r.err, HasSubstr("3 firings of 1 rule over 36 observations"));
}

TEST(StepColumn, NamesTheCsvStepColumn) {
  const auto without = shell("RULECHECK run watch.rules --trace it_steps.csv");
  EXPECT_EQ(without.status, 2);
  EXPECT_THAT(without.err, HasSubstr("it_steps.csv"));
  const auto with = shell("RULECHECK run watch.rules --trace it_steps.csv --step-column it --format json");
  EXPECT_EQ(with.status, 1) << with.err;
  EXPECT_THAT(firings(with.out), ElementsAre("loss_high@2 it_steps.csv"));
}

TEST(Progress, NothingWhenStderrIsNotATerminal) {
  const auto r = shell(std::string("RULECHECK run keras.rules --trace keras_imdb_fit1.jsonl ") + alias);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, Not(HasSubstr("\x1b[")));
  EXPECT_THAT(r.err, Not(HasSubstr("\r")));
  EXPECT_THAT(r.err, Not(HasSubstr("%")));
}

// Runs rulecheck with ARGS in the data directory on a pseudo-terminal of our
// own (stdin, stdout and stderr all on it) and returns its exit status and
// everything it showed. Nothing to skip: forkpty is part of glibc.
Result on_terminal(const std::vector<std::string>& args) {
  Result r;
  std::vector<char*> argv{const_cast<char*>(RULECHECK_PATH)};  // built before forking
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string dir = data_dir.string();
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execv(RULECHECK_PATH, argv.data());
    ::_exit(127);
  }
  if (pid < 0) {
    r.err = std::string("forkpty: ") + std::strerror(errno);
    return r;
  }
  // Read until the child closes the terminal (EIO once it has exited).
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) r.out.append(buf, static_cast<std::size_t>(n));
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  ::close(master);
  int raw = 0;
  ::waitpid(pid, &raw, 0);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return r;
}

TEST(Progress, BarOnATerminalThenCleared) {
  const auto r = on_terminal({"run", "keras.rules", "--trace", "keras_imdb_fit1.jsonl", "--alias",
                              "validation_loss=val_loss"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  // Drawn at least once (the first observation), with the trace, a bar and a percentage...
  const auto bar = r.out.find("\r\x1b[Kkeras_imdb_fit1.jsonl [");
  ASSERT_NE(bar, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("% ", bar), std::string::npos);
  EXPECT_NE(r.out.find(" KiB of 2.2 KiB", bar), std::string::npos);
  // ...and erased before the firings and the summary are printed.
  const auto last_bar = r.out.rfind("\r\x1b[Kkeras_imdb_fit1.jsonl [");
  const auto first_firing = r.out.find("step 15 [train] val_loss_high");
  ASSERT_NE(first_firing, std::string::npos) << r.out;
  EXPECT_LT(last_bar, first_firing);
  const auto erased = r.out.find("\r\x1b[K", last_bar + 1);
  EXPECT_LT(erased, first_firing) << r.out;
  EXPECT_NE(r.out.find("2 firings of 1 rule over 20 observations", first_firing), std::string::npos)
      << r.out;
}

}  // namespace
