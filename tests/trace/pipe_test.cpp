// Issue 11 §1: a trace read through a pipe or FIFO loses nothing. Every
// format is written once as a file and once into a FIFO by a writer thread;
// reading either must give the same observations, and `rulecheck run` the
// same firings. Before the fix, format detection opened the path a second
// time and ate the start of the pipe (CSV: 0 observations).
//
// No test here can hang: the writer opens the FIFO non-blocking and retries
// only until a deadline (a deadlock guard, not a timing assumption), and a
// reader that waits for a writer's event does so with a bounded wait.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/files.hpp"
#include "tests/support/traces.hpp"
#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;
using vigil::test::ReadAll;

constexpr auto deadlock_guard = std::chrono::seconds(60);

// Writes `bytes` into the FIFO at `path` from a thread: opens it once a
// reader has it open (non-blocking open fails with ENXIO until then), then
// writes with ordinary blocking writes. `between` (optional) runs after
// `first` bytes are written and before the rest, e.g. to wait for the reader.
// Deadlock guard: a reader that opens the FIFO a second time (the old
// detection did) would wait for a writer forever; if the reader is not done
// within the guard, the writer opens and closes the FIFO once more, so that
// reader sees an empty stream and the test fails instead of hanging.
class FifoWriter {
 public:
  FifoWriter(std::string path, std::string bytes, std::size_t first = std::string::npos,
             std::function<void()> between = {})
      : ignore_sigpipe_((std::signal(SIGPIPE, SIG_IGN), true)),
        thread_([this, path = std::move(path), bytes = std::move(bytes), first,
                 between = std::move(between)] { run(path, bytes, first, between); }) {}
  ~FifoWriter() {
    {
      std::lock_guard lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void run(const std::string& path, const std::string& bytes, std::size_t first,
           const std::function<void()>& between) {
    const auto deadline = std::chrono::steady_clock::now() + deadlock_guard;
    int fd = -1;
    while ((fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0 &&
           errno == ENXIO && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    if (fd < 0) return;  // the reader never opened it: the test fails on its own
    ::fcntl(fd, F_SETFL, 0);  // blocking writes from here on
    auto write_all = [&](std::string_view part) {
      while (!part.empty()) {
        const ssize_t n = ::write(fd, part.data(), part.size());
        if (n <= 0) return;
        part.remove_prefix(static_cast<std::size_t>(n));
      }
    };
    const std::string_view all = bytes;
    const std::size_t cut = std::min(first, all.size());
    write_all(all.substr(0, cut));
    if (between) between();
    write_all(all.substr(cut));
    ::close(fd);
    std::unique_lock lock(m_);
    if (!cv_.wait_for(lock, deadlock_guard, [&] { return done_; })) {
      const int again = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (again >= 0) ::close(again);
    }
  }

  bool ignore_sigpipe_;  // a reader that stops early must fail the test, not kill it
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// One synthetic run: 3000 steps (well past the 64 KiB that detection may
// look at), a labelled series, an eval series every 100 steps, NaN once.
std::vector<vigil::Observation> run_observations() {
  std::vector<vigil::Observation> out;
  for (int step = 1; step <= 3000; ++step) {
    vigil::Observation o;
    o.step = step;
    o.time = 1000.0 + step;
    o.values = {{"loss", 2.0 / step + (step % 7 == 0 ? 0.5 : 0.0)},
                {"grad_norm{layer=\"fc1\"}", step == 1500 ? std::nan("") : step * 0.25}};
    out.push_back(o);
    if (step % 100 == 0) {
      vigil::Observation e;
      e.step = step;
      e.time = o.time;
      e.mode = "eval";
      e.values = {{"eval_loss", 1.0 + (step > 2000 ? 0.001 * step : 0.0)}};
      out.push_back(e);
    }
  }
  return out;
}

std::string as_jsonl(const std::vector<vigil::Observation>& obs) {
  std::string s;
  for (const auto& o : obs) s += vigil::to_jsonl(o) + "\n";
  return s;
}

// Wide CSV; the labelled series' header quoted as RFC 4180 wants.
std::string as_csv(const std::vector<vigil::Observation>& obs) {
  std::string s = "step,wall_time,loss,\"grad_norm{layer=\"\"fc1\"\"}\",eval_loss\n";
  for (const auto& o : obs) {
    if (o.mode == "eval") {
      s += fmt::format("{},{},,,{}\n", o.step, o.time, o.values[0].second);
    } else {
      s += fmt::format("{},{},{},{},\n", o.step, o.time, o.values[0].second,
                       std::isnan(o.values[1].second) ? "nan" : fmt::format("{}", o.values[1].second));
    }
  }
  return s;
}

// Long CSV: tag,step,value,wall_time.
std::string as_long_csv(const std::vector<vigil::Observation>& obs) {
  std::string s = "tag,step,value,wall_time\n";
  for (const auto& o : obs)
    for (const auto& [k, v] : o.values)
      if (k.find('{') == std::string::npos)
        s += fmt::format("{},{},{},{}\n", k, o.step, v, o.time);
  return s;
}

std::string as_trainer_state(const std::vector<vigil::Observation>& obs) {
  std::string s = "{\n  \"best_metric\": null,\n  \"epoch\": 3.0,\n  \"log_history\": [\n";
  bool first = true;
  for (const auto& o : obs) {
    if (!first) s += ",\n";
    first = false;
    s += fmt::format("    {{\"step\": {}", o.step);
    for (const auto& [k, v] : o.values)
      if (k.find('{') == std::string::npos) s += fmt::format(", \"{}\": {}", k, v);
    s += "}";
  }
  s += "\n  ],\n  \"global_step\": 3000\n}\n";
  return s;
}

class PipeTest : public vigil::test::TempDirTest {
 protected:
  std::string fifo(const std::string& name) {
    const auto path = (dir_ / name).string();
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
    return path;
  }

  // The file and the FIFO carrying the same bytes read the same.
  void expect_same_through_fifo(const std::string& name, const std::string& bytes) {
    SCOPED_TRACE(name);
    const ReadAll from_file = vigil::test::read_all(write(name, bytes));
    ASSERT_FALSE(from_file.error) << from_file.error->format();
    ASSERT_GT(from_file.records.size(), 100u);
    const std::string path = fifo(name + ".fifo");
    ReadAll from_fifo;
    {
      FifoWriter writer(path, bytes);
      from_fifo = vigil::test::read_all(path);
    }
    ASSERT_FALSE(from_fifo.error) << from_fifo.error->format();
    ASSERT_EQ(from_fifo.records.size(), from_file.records.size());
    for (std::size_t i = 0; i < from_file.records.size(); ++i) {
      const auto& a = from_file.records[i];
      const auto& b = from_fifo.records[i];
      ASSERT_EQ(a.step, b.step) << i;
      ASSERT_EQ(a.mode, b.mode) << i;
      ASSERT_EQ(a.values.size(), b.values.size()) << i;
      for (std::size_t k = 0; k < a.values.size(); ++k) {
        ASSERT_EQ(a.values[k].first, b.values[k].first);
        if (std::isnan(a.values[k].second)) ASSERT_TRUE(std::isnan(b.values[k].second));
        else ASSERT_EQ(a.values[k].second, b.values[k].second);
      }
    }
    EXPECT_EQ(from_fifo.position, from_file.position);
  }
};

TEST_F(PipeTest, EveryFormatReadsTheSameThroughAFifo) {
  const auto obs = run_observations();
  expect_same_through_fifo("run.jsonl", as_jsonl(obs));
  expect_same_through_fifo("run.csv", as_csv(obs));
  expect_same_through_fifo("long.csv", as_long_csv(obs));
  expect_same_through_fifo("trainer_state.json", as_trainer_state(obs));

  // TensorBoard: the writer's own file, whose bytes then go through a FIFO.
  vigil::TraceError error;
  const auto tb_path = (dir_ / "events.out.tfevents.1.host").string();
  {
    auto w = vigil::TensorBoardWriter::create(tb_path, error);
    ASSERT_TRUE(w) << error.format();
    for (const auto& o : obs) {
      vigil::Observation t = o;
      if (t.mode == "eval") t.values = {{"eval/loss", o.values[0].second}};
      t.mode = "train";
      ASSERT_TRUE(w->write(t));
    }
  }
  expect_same_through_fifo("copy.tfevents", vigil::test::slurp(tb_path));
}

TEST_F(PipeTest, APipeIsReadAsItArrivesNotAfterTheDetectionWindow) {
  // A live producer: the first 3 records, then nothing until the reader has
  // handed out the first observation. Reading 64 KiB ahead for detection
  // would wait for the producer forever (the bounded wait below fails).
  for (const std::string name : {"live.jsonl", "live.csv"}) {
    SCOPED_TRACE(name);
    const auto obs = run_observations();
    const std::string bytes = name.ends_with(".csv") ? as_csv(obs) : as_jsonl(obs);
    std::size_t first = 0;
    for (int lines = 0; lines < 3; ++lines) first = bytes.find('\n', first) + 1;
    std::mutex m;
    std::condition_variable cv;
    bool got_first = false;
    bool waited_ok = true;
    const std::string path = fifo(name);
    ReadAll r;
    {
      FifoWriter writer(path, bytes, first, [&] {
        std::unique_lock lock(m);
        waited_ok = cv.wait_for(lock, deadlock_guard, [&] { return got_first; });
      });
      vigil::TraceError error;
      auto reader = vigil::open_trace(path, error);
      ASSERT_TRUE(reader) << error.format();
      vigil::Observation o;
      ASSERT_TRUE(reader->next(o));
      EXPECT_EQ(o.step, 1);
      {
        std::lock_guard lock(m);
        got_first = true;
      }
      cv.notify_all();
      r.records.push_back(o);
      vigil::test::drain(*reader, r);
    }
    EXPECT_TRUE(waited_ok);
    ASSERT_FALSE(r.error) << r.error->format();
    EXPECT_EQ(r.records.size(), obs.size());
  }
}

TEST_F(PipeTest, DashIsStandardInputInAChildProcess) {
  // open_trace("-") reads fd 0: run in a child whose stdin is a file.
  const auto path = write("in.csv", as_csv(run_observations()));
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ::dup2(fd, 0);
    vigil::TraceError error;
    auto reader = vigil::open_trace("-", error);
    if (!reader) ::_exit(2);
    ReadAll r;
    vigil::test::drain(*reader, r);
    ::_exit(!r.error && r.records.size() == run_observations().size() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(PipeTest, ReadersOpenTracesCloseOnExec) {
  // `watch --exec` children must not inherit the trace: every descriptor the
  // readers hold is FD_CLOEXEC.
  const auto path = write("t.jsonl", as_jsonl(run_observations()));
  vigil::TraceError error;
  auto reader = vigil::open_trace(path, error);
  ASSERT_TRUE(reader);
  int found = 0;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = fs::read_symlink(entry.path(), ec);
    if (ec || target != fs::path(path)) continue;
    ++found;
    const int fd = std::stoi(entry.path().filename().string());
    EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC) << "fd " << fd;
  }
  EXPECT_EQ(found, 1);  // one open, not one for detection and one for reading
}

#ifdef RULECHECK_PATH
// `rulecheck run` prints the same firings for a trace file and for the same
// bytes through a FIFO, in every format.
TEST_F(PipeTest, RulecheckFiresTheSameThroughAFifo) {
  const auto rules = write("r.rules",
                           "rule loss_spike: when loss > 0.4 for 2 samples do log\n"
                           "rule eval_up: when eval_loss > 2.5 do log\n"
                           "rule grad_nan: when is_nan(grad_norm) do log\n");
  const auto obs = run_observations();
  vigil::TraceError error;
  const auto tb_path = (dir_ / "events.out.tfevents.1.host").string();
  {
    auto w = vigil::TensorBoardWriter::create(tb_path, error);
    ASSERT_TRUE(w);
    for (const auto& o : obs) ASSERT_TRUE(w->write(o));
  }
  const std::vector<std::pair<std::string, std::string>> traces = {
      {"a.jsonl", as_jsonl(obs)},
      {"a.csv", as_csv(obs)},
      {"long.csv", as_long_csv(obs)},
      {"trainer_state.json", as_trainer_state(obs)},
      {"b.tfevents", vigil::test::slurp(tb_path)}};
  for (const auto& [name, bytes] : traces) {
    SCOPED_TRACE(name);
    const auto file = write(name, bytes);
    const auto expected = vigil::test::run_shell(
        dir_, fmt::format("'{}' run r.rules --format json --trace '{}'", RULECHECK_PATH, file));
    ASSERT_EQ(expected.status, 1) << expected.err;  // something fired
    const std::string path = fifo(name + ".fifo");
    vigil::test::Result through;
    {
      FifoWriter writer(path, bytes);
      // timeout: a deadlock guard (a reader that opens the FIFO twice waits
      // for a second writer forever).
      through = vigil::test::run_shell(
          dir_, fmt::format("timeout 120 '{}' run r.rules --format json --trace '{}'",
                            RULECHECK_PATH, path));
    }
    EXPECT_EQ(through.status, 1) << through.err;
    // The "trace" field names the path given; compare the firings without it.
    auto strip = [](std::string s, const std::string& p) {
      for (std::size_t at; (at = s.find(p)) != std::string::npos;) s.replace(at, p.size(), "T");
      return s;
    };
    EXPECT_EQ(strip(through.out, path), strip(expected.out, file));
    // And standard input through a pipe.
    const auto piped = vigil::test::run_shell(
        dir_, fmt::format("{{ cat '{}' | '{}' run r.rules --format json --trace -; }}", file,
                          RULECHECK_PATH));
    EXPECT_EQ(piped.status, 1) << piped.err;
    EXPECT_EQ(strip(piped.out, "\"-\""), strip(expected.out, "\"" + file + "\""));
  }
}
#endif

}  // namespace
