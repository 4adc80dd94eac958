// Spot training (docs/spot.md): the preemption notice as a series, the run
// clock and cost, the checkpoint written before after_backward returns, and
// exact resume — a run interrupted by SIGTERM or SIGKILL several times ends
// bit for bit where an uninterrupted one does, with the same firings.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/torch.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("vigil-spot-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct SpotRig {
  torch::nn::Linear model{4, 4};
  torch::optim::SGD opt{model->parameters(), torch::optim::SGDOptions(0.1)};
  vigil::Engine engine;
  std::vector<std::string> log;
  std::unique_ptr<vigil::torch::Monitor> monitor;
  SpotRig(const std::string& rules, vigil::torch::MonitorOptions o,
          std::map<std::string, vigil::Value> params = {})
      : engine(*vigil::compile_string(rules).program, {.params = std::move(params)}) {
    o.log = [this](std::string_view m) { log.emplace_back(m); };
    monitor = std::make_unique<vigil::torch::Monitor>(engine, *model, opt, o);
  }
  // One step of the documented loop; returns the after_backward decision.
  vigil::torch::Decision step(std::int64_t s) {
    opt.zero_grad();
    auto loss = model->forward(torch::ones({2, 4})).pow(2).sum();
    loss.backward();
    auto d = monitor->after_backward(s, loss.item<double>());
    if (d.stop) return d;
    if (!d.skip_step) opt.step();
    monitor->after_step(s);
    return d;
  }
  std::string weights() const {
    std::string out;
    for (const auto& p : model->parameters()) {
      const auto c = p.detach().contiguous();
      out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
    }
    return out;
  }
};

double value_of(const vigil::Observation& o, const std::string& key) {
  for (const auto& [k, v] : o.values)
    if (k == key) return v;
  return std::nan("");
}

struct sigaction current_handler(int sig) {
  struct sigaction now {};
  ::sigaction(sig, nullptr, &now);
  return now;
}

}  // namespace

// SIGTERM only sets a flag; the next after_backward observes preempted = 1,
// spot_preemption checkpoints and stops, and the checkpoint (written before
// after_backward returns) holds the state before that step's update.
TEST(SpotPreemption, SigtermBecomesASeriesAndAStopWithACheckpoint) {
  const auto dir = fresh_dir("sigterm");
  std::string before_step_4, latest;
  {
    SpotRig rig("use std.spot_preemption()\n", {.checkpoint_dir = dir.string()});
    ASSERT_NE(current_handler(SIGTERM).sa_handler, SIG_DFL)
        << "a rule reads preempted: handler installed";
    for (int s = 1; s <= 3; ++s) ASSERT_FALSE(rig.step(s).stop);
    before_step_4 = rig.weights();
    ASSERT_EQ(::raise(SIGTERM), 0);  // the process survives: the handler only sets a flag
    EXPECT_TRUE(rig.monitor->preempted());
    const auto d = rig.step(4);
    ASSERT_TRUE(d.stop);
    EXPECT_EQ(d.stop_reason, "preempted");
    ASSERT_EQ(d.firings.size(), 1u);
    EXPECT_EQ(d.firings[0].rule, "spot_preemption");
    EXPECT_EQ(d.firings[0].step, 4);
    EXPECT_TRUE(d.errors.empty());
    // Named for step 3: a resumed host redoes step 4.
    latest = vigil::torch::Monitor::latest_checkpoint(dir.string());
    EXPECT_EQ(fs::path(latest).filename(), "ckpt-000000000003.pt");
  }  // the Monitor's handlers go; the notice is process-wide while one is installed

  SpotRig again("use std.spot_preemption()\n", {.checkpoint_dir = dir.string()});
  EXPECT_FALSE(again.monitor->preempted()) << "a new run starts without the notice";
  std::string error;
  ASSERT_EQ(again.monitor->resume(latest, &error), 3) << error;
  EXPECT_EQ(again.weights(), before_step_4);
  // The repeated step 4 is not observed again (its firing happened), step 5 is.
  const auto repeat = again.step(4);
  EXPECT_TRUE(repeat.firings.empty());
  EXPECT_FALSE(repeat.stop);
  EXPECT_FALSE(again.step(5).stop);
}

TEST(SpotPreemption, HandlersComeBackAndAreOnlyInstalledWhenARuleReadsPreempted) {
  const auto before = current_handler(SIGTERM).sa_handler;
  {
    SpotRig rig("rule r: when loss > 1e30 do stop\n", {});
    EXPECT_EQ(current_handler(SIGTERM).sa_handler, before) << "no rule reads preempted";
  }
  {
    SpotRig rig("use std.spot_preemption()\n", {.preemption_signals = {SIGTERM, SIGUSR2}});
    EXPECT_NE(current_handler(SIGUSR2).sa_handler, SIG_DFL);
    ASSERT_EQ(::raise(SIGUSR2), 0);  // a configured notice signal
    const auto d = rig.step(1);
    EXPECT_TRUE(d.stop);
    ASSERT_EQ(d.errors.size(), 1u) << "no checkpoint_dir: an error, not a crash";
    EXPECT_EQ(d.errors[0], "checkpoint: no checkpoint_dir configured");
  }
  EXPECT_EQ(current_handler(SIGTERM).sa_handler, before);
  EXPECT_EQ(current_handler(SIGUSR2).sa_handler, SIG_DFL);
}

TEST(SpotPreemption, ANoticeFileIsANoticeToo) {
  const auto dir = fresh_dir("notice-file");
  const auto notice = dir / "preemption-notice";
  SpotRig rig("use std.spot_preemption()\n", {.checkpoint_dir = (dir / "ckpt").string(),
                                              .preemption_signals = {},
                                              .preemption_file = notice.string()});
  EXPECT_FALSE(rig.step(1).stop);
  EXPECT_FALSE(rig.step(2).stop);
  std::ofstream(notice) << "terminate at 12:00\n";
  const auto d = rig.step(3);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(fs::path(vigil::torch::Monitor::latest_checkpoint((dir / "ckpt").string())).filename(),
            "ckpt-000000000002.pt");
}

// run_time goes on across a resume; cost = run_time / 3600 * price * processes;
// both are observed at every step (with run_time as the observation's time).
TEST(SpotClock, RunTimeIsCarriedAcrossResumeAndCostFollowsIt) {
  const auto dir = fresh_dir("clock");
  const char* rules =
      "param price_per_hour = 36\nparam processes = 2\n"
      "use std.max_run(limit = 1e9)\nuse std.budget(limit = 1e9)\n";
  std::vector<vigil::Observation> seen;
  double saved_run_time = 0;
  {
    SpotRig rig(rules, {.checkpoint_dir = dir.string()});
    rig.monitor->record([&](const vigil::Observation& o) { seen.push_back(o); });
    for (int s = 1; s <= 3; ++s) rig.step(s);
    saved_run_time = rig.monitor->run_time();
    ASSERT_FALSE(rig.monitor->checkpoint(3).empty());
  }
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& o : seen) {
    const double run_time = value_of(o, "run_time");
    EXPECT_EQ(o.time, run_time);
    EXPECT_EQ(value_of(o, "preempted"), 0);
    EXPECT_DOUBLE_EQ(value_of(o, "cost"), run_time / 3600 * 36 * 2);
  }
  EXPECT_LT(seen[0].time, seen[2].time);
  SpotRig resumed(rules, {.checkpoint_dir = dir.string()});
  std::string error;
  ASSERT_EQ(resumed.monitor->resume(vigil::torch::Monitor::latest_checkpoint(dir.string()), &error),
            3)
      << error;
  EXPECT_GE(resumed.monitor->run_time(), saved_run_time);
}

// max_run and budget stop with a checkpoint before after_backward returns:
// a host that breaks out at once still has it. Limits of 0 fire at step 1.
TEST(SpotClock, MaxRunAndBudgetStopWithACheckpoint) {
  for (const char* rules :
       {"use std.max_run(limit = 0)\n", "param price_per_hour = 10\nuse std.budget(limit = 0)\n"}) {
    const auto dir = fresh_dir("limits");
    SpotRig rig(rules, {.checkpoint_dir = dir.string()});
    const auto d = rig.step(1);
    EXPECT_TRUE(d.stop) << rules;
    EXPECT_TRUE(d.stop_reason == "max_run" || d.stop_reason == "budget") << d.stop_reason;
    EXPECT_EQ(fs::path(vigil::torch::Monitor::latest_checkpoint(dir.string())).filename(),
              "ckpt-000000000000.pt");
  }
  // Without price_per_hour there is no cost series: budget is never evaluated.
  SpotRig rig("use std.budget(limit = 0)\n", {});
  EXPECT_FALSE(rig.step(1).stop);
}

// ---- exact resume, across processes ----------------------------------------

namespace {

constexpr std::int64_t kSteps = 240;

struct Child {
  pid_t pid = -1;
  int out = -1;        // its stdout
  int in = -1;         // its stdin (closed: it may go past its hold step)
  std::string buffer;  // unread output
};

Child spawn_child(const std::string& dir, std::int64_t hold) {
  const std::string steps = std::to_string(kSteps), h = std::to_string(hold);
  char* args[] = {const_cast<char*>(VIGIL_SPOT_CHILD), const_cast<char*>(dir.c_str()),
                  const_cast<char*>(steps.c_str()), const_cast<char*>(h.c_str()), nullptr};
  int out[2], in[2];
  Child c;
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) return c;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  if (posix_spawn(&c.pid, VIGIL_SPOT_CHILD, &actions, nullptr, args, environ) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(in[0]);
  c.out = out[0];
  c.in = in[1];
  return c;
}

// The next line of the child's output; false at EOF (or after the deadlock
// guard: no line for two minutes).
bool next_line(Child& c, std::string& line) {
  for (;;) {
    if (auto nl = c.buffer.find('\n'); nl != std::string::npos) {
      line = c.buffer.substr(0, nl);
      c.buffer.erase(0, nl + 1);
      return true;
    }
    pollfd p{c.out, POLLIN, 0};
    const int ready = ::poll(&p, 1, 120000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(c.out, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    c.buffer.append(buf, static_cast<std::size_t>(n));
  }
}

struct Firing {
  std::string text;  // "rule step labels value"
  std::int64_t step = 0;
  int child = 0;
};

struct RunResult {
  std::vector<Firing> firings;
  std::string final_state;
  int stops = 0;                      // children stopped by spot_preemption
  int kills = 0;                      // children killed
  std::vector<std::int64_t> resumed;  // per child: the step it resumed from (0: fresh)
  std::vector<int> killed;            // the children SIGKILLed
  std::string error;
};

// Reads a child's output to its end; `on_step` may act on `step K` lines.
template <class OnStep>
bool drain(Child& c, int index, RunResult& r, std::int64_t& resumed_from, OnStep on_step) {
  std::string line;
  bool done = false;
  while (next_line(c, line)) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "fire") {
      Firing f;
      std::string rule;
      in >> rule >> f.step;
      f.text = line.substr(5);
      f.child = index;
      r.firings.push_back(std::move(f));
    } else if (word == "step") {
      std::int64_t k = 0;
      in >> k;
      on_step(k);
    } else if (word == "resumed") {
      in >> resumed_from;
    } else if (word == "stopped") {
      ++r.stops;
    } else if (word == "done") {
      done = true;
    }
  }
  return done;
}

// Trains to kSteps, interrupting one child per entry of `signals` with that
// signal at a step drawn from `seed` (sent when the child reports the chosen
// step; the child waits for its stdin to close a few steps later, so the
// signal always lands before the run could end); a last child finishes.
RunResult train_interrupted(const fs::path& dir, const std::vector<int>& signals, unsigned seed) {
  RunResult r;
  if (signals.size() > 5) {
    r.error = "at most 5 interruptions fit in kSteps";
    return r;
  }
  const int rounds = static_cast<int>(signals.size());
  std::mt19937 gen(seed);
  std::int64_t reached = 0;  // last step a child reported
  for (int round = 0; round <= rounds; ++round) {
    const bool interrupt = round < rounds;
    const int sig = interrupt ? signals[static_cast<std::size_t>(round)] : 0;
    std::int64_t k = kSteps, hold = kSteps;
    if (interrupt) {
      // At most 5 rounds of 38 steps: every signal lands before kSteps.
      k = std::uniform_int_distribution<std::int64_t>(reached + 1, reached + 30)(gen);
      hold = k + std::uniform_int_distribution<std::int64_t>(0, 8)(gen);
    }
    Child c = spawn_child(dir.string(), hold);
    if (c.pid < 0) {
      r.error = "cannot spawn the child";
      return r;
    }
    if (!interrupt) {
      ::close(c.in);
      c.in = -1;
    }
    std::int64_t resumed_from = 0;
    bool signalled = false;
    const bool done = drain(c, round, r, resumed_from, [&](std::int64_t step) {
      reached = step;
      if (interrupt && !signalled && step >= k) {
        ::kill(c.pid, sig);
        signalled = true;
        ::close(c.in);  // past its hold step only after the signal
        c.in = -1;
      }
    });
    if (c.in >= 0) ::close(c.in);
    ::close(c.out);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    // A killed child's firings after the checkpoint the next child resumes
    // from are redone by that child: drop them once it says where it resumed.
    if (interrupt && sig == SIGKILL) {
      if (!WIFSIGNALED(status)) {
        r.error = "round " + std::to_string(round) + ": the child was not killed";
        return r;
      }
      ++r.kills;
      r.killed.push_back(round);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      r.error = "round " + std::to_string(round) + ": child status " + std::to_string(status);
      return r;
    }
    if (interrupt && done) {
      r.error = "round " + std::to_string(round) + ": the child finished before the signal";
      return r;
    }
    if (!interrupt && !done) {
      r.error = "the last child did not finish";
      return r;
    }
    r.resumed.push_back(resumed_from);
  }
  r.final_state = read_file(dir / "final.bin");
  return r;
}

// The firings of the whole run, spot_preemption's left out. A killed child's
// firings past the step the next child resumed from are dropped: the next
// child fires them again. (A child stopped by spot_preemption has nothing
// redone: its checkpoint has seen its last step.)
std::vector<std::string> joined_firings(const RunResult& r) {
  std::vector<std::string> out;
  for (const auto& f : r.firings) {
    if (f.text.rfind("spot_preemption ", 0) == 0) continue;
    const auto next = static_cast<std::size_t>(f.child + 1);
    const bool killed = std::find(r.killed.begin(), r.killed.end(), f.child) != r.killed.end();
    if (killed && next < r.resumed.size() && f.step > r.resumed[next]) continue;
    out.push_back(f.text);
  }
  return out;
}

}  // namespace

TEST(SpotResume, SigtermAtRandomStepsEndsBitForBitLikeAnUninterruptedRun) {
  const auto base = fresh_dir("resume-term");
  const RunResult full = train_interrupted(base / "full", {}, 0);
  ASSERT_EQ(full.error, "");
  ASSERT_FALSE(full.final_state.empty());
  const RunResult cut = train_interrupted(base / "cut", {SIGTERM, SIGTERM, SIGTERM, SIGTERM}, 2026);
  ASSERT_EQ(cut.error, "");
  EXPECT_EQ(cut.stops, 4) << "every SIGTERM stopped a child through spot_preemption";
  EXPECT_TRUE(cut.final_state == full.final_state)
      << "model, Adam state and RNG differ from the uninterrupted run's";
  // A stopped child's checkpoint has seen its last step: nothing is redone,
  // so the firings simply add up.
  const auto a = joined_firings(full), b = joined_firings(cut);
  EXPECT_GT(a.size(), 10u) << "the rules fire along the run";
  EXPECT_EQ(a, b);
  // Each stop wrote a checkpoint named for the step before the one it stopped
  // at, and the next child resumed from it.
  ASSERT_EQ(cut.resumed.size(), 5u);
  for (std::size_t i = 1; i < cut.resumed.size(); ++i)
    EXPECT_GT(cut.resumed[i], cut.resumed[i - 1]);
}

// SIGKILL between checkpoints: the work since the newest checkpoint is lost
// and redone by the next child; the end is still bit for bit the same.
TEST(SpotResume, SigkillAtRandomStepsEndsBitForBitLikeAnUninterruptedRun) {
  const auto base = fresh_dir("resume-kill");
  const RunResult full = train_interrupted(base / "full", {}, 0);
  ASSERT_EQ(full.error, "");
  const RunResult cut =
      train_interrupted(base / "cut", {SIGKILL, SIGKILL, SIGKILL, SIGKILL, SIGKILL}, 4242);
  ASSERT_EQ(cut.error, "");
  EXPECT_EQ(cut.kills, 5);
  EXPECT_EQ(cut.stops, 0);
  EXPECT_TRUE(cut.final_state == full.final_state)
      << "model, Adam state and RNG differ from the uninterrupted run's";
  EXPECT_EQ(joined_firings(full), joined_firings(cut));
}

// Both, alternating: the resume point may be a stop's pre-step checkpoint or
// a periodic one, and a kill may land before the next periodic checkpoint.
TEST(SpotResume, MixedSigtermAndSigkillEndBitForBitLikeAnUninterruptedRun) {
  const auto base = fresh_dir("resume-mixed");
  const RunResult full = train_interrupted(base / "full", {}, 0);
  ASSERT_EQ(full.error, "");
  const RunResult cut = train_interrupted(base / "cut", {SIGTERM, SIGKILL, SIGTERM, SIGKILL}, 99);
  ASSERT_EQ(cut.error, "");
  EXPECT_EQ(cut.stops, 2);
  EXPECT_EQ(cut.kills, 2);
  EXPECT_TRUE(cut.final_state == full.final_state);
  EXPECT_EQ(joined_firings(full), joined_firings(cut));
}
