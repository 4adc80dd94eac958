// The libtorch adapter: the example trainer's recovery, checkpoints that
// survive SIGKILL and roll back bit for bit, record/replay through
// `rulecheck run`, and resume from a checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "trainer.hpp"
#include "vigil/engine.hpp"
#include "vigil/torch.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using vigil_example::FiringRecord;
using vigil_example::TrainConfig;
using vigil_example::train;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("vigil-torch-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

std::string describe(const FiringRecord& f) {
  return f.rule + f.labels + "@" + std::to_string(f.step) + "=" + std::to_string(f.value);
}

void expect_same_firings(const std::vector<FiringRecord>& a, const std::vector<FiringRecord>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].rule, b[i].rule) << i;
    EXPECT_EQ(a[i].step, b[i].step) << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << i;
    EXPECT_TRUE(same_value(a[i].value, b[i].value)) << describe(a[i]) << " vs " << describe(b[i]);
  }
}

TrainConfig guarded(const std::string& name) {
  TrainConfig c;
  c.rules = VIGIL_TRAINER_RULES;
  c.work_dir = fresh_dir(name).string();
  return c;
}

// ---- the example -----------------------------------------------------------

TEST(TorchTrainer, RulesBringTheFaultyRunBack) {
  auto with = train(guarded("trainer-with"));
  ASSERT_EQ(with.error, "");
  TrainConfig plain;
  const auto without = train(plain);

  // Without rules the NaN batch at step 120 poisons every weight.
  EXPECT_TRUE(std::isnan(without.final_loss));
  EXPECT_LT(with.final_loss, 0.1);
  EXPECT_GT(with.final_accuracy, 0.95);
  // What happened: the NaN batch skipped (one firing per parameter), the lr
  // spike at 250 seen at 251, rolled back to 225 (the checkpoint at 250 holds
  // the bad update and is not "last good"), lr halved.
  ASSERT_EQ(with.firings.size(), 7u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(with.firings[i].rule, "nonfinite_grad");
    EXPECT_EQ(with.firings[i].step, 120);
  }
  EXPECT_EQ(with.firings[6].rule, "loss_spike");
  EXPECT_EQ(with.firings[6].step, 251);
  EXPECT_EQ(with.rollbacks, 1);
  EXPECT_EQ(with.skipped_steps, 2);
  EXPECT_DOUBLE_EQ(with.final_lr, 0.005);
}

TEST(TorchTrainer, LrSpikeAloneRuinsTheUnguardedRun) {
  TrainConfig plain;
  plain.nan_batch_step = -1;
  const auto without = train(plain);
  TrainConfig c = guarded("trainer-spike");
  c.nan_batch_step = -1;
  const auto with = train(c);
  ASSERT_EQ(with.error, "");
  ASSERT_TRUE(std::isfinite(with.final_loss));
  EXPECT_TRUE(!std::isfinite(without.final_loss) || without.final_loss > 10 * with.final_loss)
      << without.final_loss << " vs " << with.final_loss;
  EXPECT_EQ(with.rollbacks, 1);
}

// ---- record / replay ---------------------------------------------------------

TEST(TorchTrainer, RecordedTraceReplaysToTheLiveFirings) {
  TrainConfig c = guarded("trainer-record");
  c.record_jsonl = (fs::path(c.work_dir) / "trace.jsonl").string();
  const auto live = train(c);
  ASSERT_EQ(live.error, "");
  ASSERT_FALSE(live.firings.empty());

  const std::string out = (fs::path(c.work_dir) / "replay.jsonl").string();
  const std::string cmd = std::string(VIGIL_RULECHECK) + " run " + VIGIL_TRAINER_RULES +
                          " --trace " + c.record_jsonl + " --format json > " + out;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);  // 1: rules fired
  std::vector<FiringRecord> replayed;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    vigil::Labels labels;
    for (const auto& [k, v] : j["labels"].items()) labels.emplace_back(k, v.get<std::string>());
    replayed.push_back({j["rule"], j["step"], vigil::format_series_key("", labels),
                        j["value"].is_null() ? std::nan("") : j["value"].get<double>()});
  }
  expect_same_firings(live.firings, replayed);
}

// ---- resume ------------------------------------------------------------------

TEST(TorchTrainer, StoppedAndResumedRunFiresLikeAnUninterruptedOne) {
  const auto full = train(guarded("trainer-full"));
  ASSERT_EQ(full.error, "");
  // Stops on the checkpoint cadence (25): an extra checkpoint would give a
  // rollback another target, a legitimately different run.
  for (std::int64_t stop : {100, 175, 225}) {
    TrainConfig c = guarded("trainer-resume");
    c.stop_after = stop;
    const auto first = train(c);
    ASSERT_EQ(first.error, "");
    ASSERT_EQ(first.last_step, stop);
    c.stop_after = -1;
    c.resume = true;
    const auto second = train(c);
    ASSERT_EQ(second.error, "") << stop;
    std::vector<FiringRecord> joined = first.firings;
    joined.insert(joined.end(), second.firings.begin(), second.firings.end());
    expect_same_firings(full.firings, joined);
    // Same model at the end, bit for bit.
    EXPECT_EQ(full.final_loss, second.final_loss) << "stopped at " << stop;
  }
}

// ---- checkpoints -----------------------------------------------------------

// Every byte of model parameters, Adam state, lr and the CPU RNG state.
std::vector<std::string> state_bytes(torch::nn::Module& model, torch::optim::Adam& opt) {
  std::vector<std::string> out;
  auto bytes = [&](const torch::Tensor& t) {
    auto c = t.contiguous();
    out.emplace_back(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  };
  for (auto& p : model.parameters()) {
    bytes(p);
    auto it = opt.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == opt.state().end()) {
      out.emplace_back("no state");
      continue;
    }
    auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
    bytes(s.exp_avg());
    bytes(s.exp_avg_sq());
    out.push_back(std::to_string(s.step()));
  }
  out.push_back(std::to_string(vigil::torch::learning_rate(opt)));
  bytes(at::detail::getDefaultCPUGenerator().get_state());
  return out;
}

struct Rig {
  torch::nn::Linear model{16, 16};
  torch::optim::Adam opt{model->parameters(), torch::optim::AdamOptions(0.001)};
  vigil::Engine engine;
  std::unique_ptr<vigil::torch::Monitor> monitor;
  explicit Rig(const std::string& dir, vigil::torch::MonitorOptions o = {},
               const char* rules = "rule never: when loss > 1e30 do skip_step\n")
      : engine(*vigil::compile_string(rules).program) {
    o.checkpoint_dir = dir;
    monitor = std::make_unique<vigil::torch::Monitor>(engine, *model, opt, o);
  }
  vigil::torch::Decision step(std::int64_t s) {
    opt.zero_grad();
    auto loss = model->forward(torch::randn({4, 16})).pow(2).sum();
    loss.backward();
    auto d = monitor->after_backward(s, loss.item<double>());
    opt.step();
    return d;
  }
};

TEST(TorchCheckpoint, RollbackRestoresModelOptimizerRngBitForBit) {
  const auto dir = fresh_dir("ckpt-bits");
  torch::manual_seed(3);
  Rig rig(dir.string());
  for (int s = 1; s <= 5; ++s) rig.step(s);
  ASSERT_FALSE(rig.monitor->checkpoint(5).empty());
  const auto saved = state_bytes(*rig.model, rig.opt);
  for (int s = 6; s <= 9; ++s) rig.step(s);
  vigil::torch::reduce_lr(rig.opt, 0.1);
  ASSERT_NE(state_bytes(*rig.model, rig.opt), saved);
  std::string error;
  EXPECT_EQ(rig.monitor->rollback("last_good", 9, &error), 5) << error;
  EXPECT_EQ(state_bytes(*rig.model, rig.opt), saved);
}

TEST(TorchCheckpoint, RollbackTargets) {
  const auto dir = fresh_dir("ckpt-targets");
  Rig rig(dir.string(), {.keep_last = 10});
  for (int s = 1; s <= 40; ++s) {
    rig.step(s);
    if (s % 10 == 0) {
      ASSERT_FALSE(rig.monitor->checkpoint(s).empty());
    }
  }
  std::string error;
  EXPECT_EQ(rig.monitor->rollback("15", 40, &error), 20) << error;  // newest <= 25
  EXPECT_EQ(rig.monitor->checkpoints().size(), 2u);  // 30 was on the abandoned path
  EXPECT_EQ(rig.monitor->rollback("nonsense", 40, &error), -1);
  EXPECT_EQ(error, "rollback: to must be \"last_good\", \"best\" or a step count, not \"nonsense\"");
  EXPECT_EQ(rig.monitor->rollback("100", 40, &error), -1);
  EXPECT_EQ(error, "rollback(to=\"100\"): no checkpoint to roll back to");
}

TEST(TorchCheckpoint, KeepsTheLastNOnDisk) {
  const auto dir = fresh_dir("ckpt-keep");
  Rig rig(dir.string(), {.keep_last = 3});
  for (int s = 1; s <= 8; ++s) {
    rig.step(s);
    ASSERT_FALSE(rig.monitor->checkpoint(s).empty());
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  // The best one (lowest loss) is kept as well as the newest three.
  EXPECT_GE(names.size(), 3u);
  EXPECT_LE(names.size(), 4u);
  EXPECT_EQ(names.back(), "ckpt-000000000008.pt");
  EXPECT_EQ(vigil::torch::Monitor::latest_checkpoint(dir.string()), (dir / names.back()).string());
}

TEST(TorchActions, PauseAndSnapshotWritesTheSnapshotAndWaitsForResume) {
  const auto dir = fresh_dir("pause");
  std::vector<std::string> log;
  Rig rig(dir.string(),
          // The timeout is only a deadlock guard: it would stop training,
          // which the checks below tell from a resume.
          {.pause_timeout_s = 600, .log = [&](std::string_view m) { log.emplace_back(m); }},
          "rule big_grad: when grad_norm{layer=\"weight\"} > 0 do pause_and_snapshot\n");
  const auto snap = dir / "snapshots" / "step-1";
  std::thread resumer([&] {
    // The snapshot's README is the pause's last file: then the operator answers.
    while (!fs::exists(snap / "README.txt")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ofstream(snap / "resume").put('\n');
  });
  const auto d = rig.step(1);
  resumer.join();
  EXPECT_FALSE(d.stop) << "resumed by the resume file, not stopped by the timeout";
  ASSERT_EQ(d.firings.size(), 1u);
  EXPECT_TRUE(fs::exists(snap / "ckpt-000000000001.pt"));
  std::ifstream window(snap / "window.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(window, line));
  EXPECT_NE(line.find("grad_norm{layer=\\\"weight\\\"}"), std::string::npos) << line;
  std::ifstream explanation(snap / "explanation.txt");
  std::string text((std::istreambuf_iterator<char>(explanation)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("big_grad"), std::string::npos) << text;
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back(), "vigil: continuing after pause at step 1");
}

TEST(TorchActions, PauseStopsOnAStopFileOrTimeout) {
  const auto dir = fresh_dir("pause-stop");
  Rig rig(dir.string(), {.pause_timeout_s = 0.3, .log = [](std::string_view) {}},
          "rule big_grad: when grad_norm{layer=\"weight\"} > 0 do pause_and_snapshot\n");
  const auto d = rig.step(1);  // nobody answers: the timeout stops training
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.stop_reason, "stopped after pause_and_snapshot");
}

TEST(TorchActions, ReduceLrSkipStopAndOncePerRule) {
  const auto dir = fresh_dir("actions");
  Rig rig(dir.string(), {.log = [](std::string_view) {}},
          "rule any_grad: when grad_norm > 0 do reduce_lr(factor = 0.5, min_lr = 0.0003), skip_step\n"
          "rule halt: when loss > 0 do stop(\"enough\")\n");
  const auto d = rig.step(1);  // fires for weight and bias: the lr is halved once
  EXPECT_EQ(d.firings.size(), 3u);
  EXPECT_TRUE(d.skip_step);
  EXPECT_TRUE(d.lr_changed);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.stop_reason, "enough");
  EXPECT_DOUBLE_EQ(vigil::torch::learning_rate(rig.opt), 0.0005);
  vigil::torch::reduce_lr(rig.opt, 0.5, 0.0003);
  EXPECT_DOUBLE_EQ(vigil::torch::learning_rate(rig.opt), 0.0003);  // floor
  vigil::torch::reduce_lr(rig.opt, 0.5, 0.0003);
  EXPECT_DOUBLE_EQ(vigil::torch::learning_rate(rig.opt), 0.0003);
}

TEST(TorchActions, RollbackWithoutCheckpointDirIsAnErrorNotACrash) {
  Rig rig("", {.log = [](std::string_view) {}}, "rule r: when loss > 0 do rollback, checkpoint\n");
  const auto d = rig.step(1);
  EXPECT_FALSE(d.rolled_back);
  ASSERT_EQ(d.errors.size(), 1u);
  EXPECT_EQ(d.errors[0], "rollback(to=\"last_good\"): no checkpoint to roll back to");
  const auto after = rig.monitor->after_step(1);
  ASSERT_EQ(after.errors.size(), 1u);
  EXPECT_EQ(after.errors[0], "checkpoint: no checkpoint_dir configured");
}

// Reads from `fd` until `word` has arrived, EOF, or the deadlock guard
// (`limit`) runs out; whether the word arrived.
bool await_word(int fd, std::string_view word, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::string got;
  while (got.find(word) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

// A child checkpoints in a loop and is SIGKILLed at random moments, 30 times:
// the newest checkpoint always loads, holds exactly the state of its step,
// and a rollback to it restores that state bit for bit. The kill clock starts
// when the child reports its first checkpoint, so every round has one to
// verify whatever the machine's load; the random delay then lands the kill
// anywhere in the following checkpoints, mid-write included.
TEST(TorchCheckpoint, SurvivesSigkillAtRandomMoments) {
  const auto dir = fresh_dir("ckpt-kill");
  std::mt19937 gen(42);
  std::uniform_int_distribution<int> delay_ms(0, 300);
  int verified = 0;
  std::int64_t last_step = 0;
  for (int round = 0; round < 30; ++round) {
    const std::string d = dir.string();
    char* args[] = {const_cast<char*>(VIGIL_KILL_CHILD), const_cast<char*>(d.c_str()), nullptr};
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, VIGIL_KILL_CHILD, &actions, nullptr, args, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ASSERT_EQ(spawned, 0);
    const bool ready = await_word(out[0], "checkpointed", std::chrono::seconds(120));
    ::close(out[0]);
    if (ready) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(gen)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(ready) << "round " << round << ": the child never reported a checkpoint";
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited by itself, status " << status;

    const std::string latest = vigil::torch::Monitor::latest_checkpoint(d);
    ASSERT_FALSE(latest.empty()) << "round " << round << ": no checkpoint after one was reported";
    torch::nn::Linear model(16, 16);
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.001));
    vigil::Engine engine(*vigil::compile_string("rule never: when loss > 1e30 do skip_step\n").program);
    vigil::torch::Monitor monitor(engine, *model, opt, {.checkpoint_dir = d, .keep_last = 3});
    std::string error;
    const std::int64_t step = monitor.resume(latest, &error);
    ASSERT_GE(step, 1) << latest << ": " << error;
    ASSERT_GE(step, last_step);
    last_step = step;
    EXPECT_EQ(monitor.host_state()["step"], step);
    float base = static_cast<float>(step) * 0.001f;
    for (auto& p : model->parameters()) {
      auto flat = p.view({-1});
      for (std::int64_t i = 0; i < flat.numel(); ++i)
        ASSERT_EQ(flat[i].item<float>(), base + static_cast<float>(i)) << "step " << step;
      base += 0.5f;
    }
    torch::manual_seed(static_cast<std::uint64_t>(step));
    const auto expected_rng = at::detail::getDefaultCPUGenerator().get_state();
    const auto restored = state_bytes(*model, opt);
    EXPECT_EQ(restored.back(), std::string(static_cast<const char*>(expected_rng.data_ptr()),
                                           expected_rng.numel()));
    // Move away, then roll back: the same bytes again.
    opt.zero_grad();
    model->forward(torch::ones({4, 16})).sum().backward();
    opt.step();
    torch::manual_seed(999);
    ASSERT_EQ(monitor.rollback("last_good", step + 1, &error), step) << error;
    EXPECT_EQ(state_bytes(*model, opt), restored);
    ++verified;
  }
  EXPECT_EQ(verified, 30);
}

// SPEC §4: two processes of a data-parallel job (Gloo over 127.0.0.1), each
// with different activations and losses, report the same firings with the
// job-wide values: rank 0's own activations never exceed 5 and its own loss
// is 1, 2, 3; the whole's abs_max is 10 at step 2, its mean 1.44, 2.4, 1.44,
// the mean loss 2, 4, 6.
TEST(TorchDistributed, TwoProcessesSeeTheSameCombinedValues) {
  const fs::path dir = fresh_dir("dist");
  pid_t pids[2] = {};
  std::string outs[2];
  auto spawn = [&](int rank, const std::string& port, const posix_spawn_file_actions_t* actions) {
    outs[rank] = (dir / ("rank" + std::to_string(rank) + ".txt")).string();
    const std::string rank_text = std::to_string(rank);
    char* args[] = {const_cast<char*>(VIGIL_DIST_WORKER), const_cast<char*>(rank_text.c_str()),
                    const_cast<char*>(port.c_str()), const_cast<char*>(outs[rank].c_str()),
                    nullptr};
    return posix_spawn(&pids[rank], VIGIL_DIST_WORKER, actions, nullptr, args, environ);
  };
  // Rank 0 binds port 0 and says which port it got; rank 1 joins it.
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  const int spawned = spawn(0, "0", &actions);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ASSERT_EQ(spawned, 0);
  std::string said;
  for (char c; said.find('\n') == std::string::npos && ::read(out[0], &c, 1) == 1;) said += c;
  ::close(out[0]);
  unsigned port = 0;
  if (std::sscanf(said.c_str(), "port %u", &port) != 1 || port == 0) {
    ::kill(pids[0], SIGKILL);
    ::waitpid(pids[0], nullptr, 0);
    FAIL() << "rank 0 did not report its port: '" << said << "'";
  }
  ASSERT_EQ(spawn(1, std::to_string(port), nullptr), 0);
  // Bounded: a hung collective must fail the test, not the CI run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pids[0], SIGKILL);
        ::kill(pids[1], SIGKILL);
        ::waitpid(pids[0], nullptr, 0);
        ::waitpid(pids[1], nullptr, 0);
        FAIL() << "the two workers did not finish within 240 s";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker status " << status;
  }
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string expected =
      "act_mean 1 1.44\nloss_mean 1 2\n"
      "act_big 2 10\nact_mean 2 2.4\nloss_mean 2 4\n"
      "act_mean 3 1.44\nloss_mean 3 6\n"
      "gather_failures 0\n";
  EXPECT_EQ(slurp(outs[0]), expected);
  EXPECT_EQ(slurp(outs[1]), expected);
}

}  // namespace
