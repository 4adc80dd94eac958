// `rulecheck watch`: follow a growing trace, evaluate what arrives, print
// firings as they happen and run `--exec` for each.
//
// Written against the generic TraceReader with TraceOptions::follow, so every
// reader that implements follow mode (JSONL, CSV, TensorBoard) can be watched.
// One thread: read what is there, report, sleep --poll ms, repeat. Signals
// only set a flag; every wait in here (the poll sleep, an --exec command)
// checks it, so SIGINT/SIGTERM end the watch within ~10 ms plus the command's
// grace period.
//
// Owns: following a trace. Must not touch: rule evaluation (the engine) or --exec (exec.cpp).
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"
#include "tools/rulecheck/exec.hpp"

namespace rulecheck {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void on_stop_signal(int sig) { stop_signal = sig; }

bool stop_requested() { return stop_signal != 0; }

// No SA_RESTART: a signal interrupts the poll sleep (nanosleep returns EINTR).
// SIGPIPE is ignored so that an --exec command that does not read its stdin,
// or a closed stdout, shows up as an error code instead of killing the watch.
void install_signal_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

// Sleeps until `until` or a stop signal, whichever is first.
void sleep_until(Clock::time_point until) {
  while (!stop_requested()) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec req{static_cast<std::time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    ::nanosleep(&req, nullptr);  // EINTR: loop re-checks the flag
  }
}

// Numbers in --exec variables spelled as in the JSON output.
std::string env_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);
}

std::vector<std::pair<std::string, std::string>> firing_environment(const vigil::Firing& f,
                                                                    const std::string& trace) {
  std::string actions;
  if (f.actions != nullptr)
    for (const auto& a : *f.actions) actions += (actions.empty() ? "" : ",") + a.name;
  return {
      {"VIGIL_RULE", f.rule_name()},
      {"VIGIL_STEP", std::to_string(f.step)},
      {"VIGIL_MODE", escape_controls(f.mode)},
      {"VIGIL_TIME", std::isfinite(f.time) ? env_number(f.time) : ""},
      {"VIGIL_SEVERITY", std::string(vigil::to_string(f.severity))},
      // Escaped: a NUL in a label value would end the variable there.
      {"VIGIL_LABELS",
       f.labels != nullptr ? escape_controls(vigil::format_series_key("", *f.labels)) : ""},
      {"VIGIL_VALUE", f.value ? env_number(*f.value) : ""},
      {"VIGIL_ACTIONS", actions},
      {"VIGIL_PENDING_SINCE", std::to_string(f.pending_since)},
      {"VIGIL_TRACE", trace},
  };
}

// What the trace path looks like between two reads.
enum class FileState { same, gone, restarted };

class Watcher {
 public:
  Watcher(const WatchOptions& opts, const vigil::Program& program)
      : opts_(opts), program_(program), json_(opts.format == "json") {}

  int run() {
    const auto deadline = opts_.timeout > 0
                              ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(opts_.timeout))
                              : Clock::time_point::max();
    const auto poll = std::chrono::milliseconds(opts_.poll_ms);
    // --from-end skips what exists now; a trace created after the start has
    // nothing that predates the watch.
    struct stat st{};
    bool skip_existing = opts_.from_end && ::stat(opts_.trace.c_str(), &st) == 0;
    bool gone_once = false;
    // The first pass always runs: what the trace holds at the start is read
    // whatever the --timeout and however late this process got the CPU.
    for (bool first = true; !stop_requested() && !failed_ && (first || Clock::now() < deadline);
         first = false) {
      if (!reader_) {
        if (!open()) {
          sleep_until(std::min(Clock::now() + poll, deadline));
          continue;
        }
        // --from-end: what is already written builds rule state silently.
        silent_ = skip_existing;
        skip_existing = false;
        const std::uint64_t before = observations_;
        drain();
        // Once per opening, after what was there has been read: a person (or a
        // test, or a supervisor) learns that the watch is live from here on.
        const std::uint64_t read = observations_ - before;
        if (!failed_)
          print_err(fmt::format("rulecheck: following '{}' ({} observation{} read{})\n",
                                opts_.trace, read, read == 1 ? "" : "s",
                                silent_ ? " without reporting" : ""));
      } else {
        drain();
      }
      silent_ = false;
      if (failed_) break;

      switch (file_state()) {
        case FileState::same: gone_once = false; break;
        case FileState::gone:
          // One poll of grace: rotation renames the file and creates a new one.
          if (gone_once) {
            print_err(fmt::format("rulecheck: '{}' was deleted; stopping\n", opts_.trace));
            return finish();
          }
          gone_once = true;
          break;
        case FileState::restarted:
          print_err(fmt::format(
              "{}: warning: trace was truncated or replaced; reading it again from the start "
              "with fresh rule state\n",
              opts_.trace));
          close();
          continue;  // reopen now, not after a poll
      }
      sleep_until(std::min(Clock::now() + poll, deadline));
    }
    return finish();
  }

 private:
  // Opens the trace once it exists and has content. Returns false to wait;
  // sets failed_ when it cannot be read at all.
  bool open() {
    struct stat st{};
    if (::stat(opts_.trace.c_str(), &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0)) {
      // The format is judged by content: an empty file has none yet.
      if (!announced_wait_)
        print_err(fmt::format("rulecheck: waiting for '{}' to appear\n", opts_.trace));
      announced_wait_ = true;
      return false;
    }
    vigil::TraceError error;
    reader_ = vigil::open_trace(opts_.trace, error,
                                {.step_column = opts_.step_column,
                                 .follow = true,
                                 .max_line_bytes = opts_.max_line});
    if (!reader_) {
      // A first line still being written may not tell its format yet; give up
      // only when the file stopped growing and still cannot be read.
      if (!last_failed_size_ || *last_failed_size_ != st.st_size) {
        last_failed_size_ = st.st_size;
        return false;
      }
      print_err(error.format() + "\n");
      failed_ = true;
      return false;
    }
    last_failed_size_.reset();
    identity_ = {st.st_dev, st.st_ino};
    regular_ = S_ISREG(st.st_mode);
    replay_.emplace(program_, opts_.trace, opts_.max_label_sets);
    return true;
  }

  void close() {
    finish_replay();
    reader_.reset();
  }

  // Reads and evaluates everything available now.
  void drain() {
    // Keyed: series are found by the reader's ids (the Replay was made for this reader).
    vigil::KeyedObservation obs;
    bool any = false;
    while (!stop_requested() && reader_->next_keyed(obs)) {
      ++observations_;
      any = true;
      const auto firings = replay_->feed(*reader_, obs);
      if (!silent_) report(firings);
    }
    if (any) {
      last_read_at_ = Clock::now();
    } else if (!std::isnan(replay_->last_time())) {
      // Nothing new: let the trace's clock run on by the wall time since its
      // last observation was read, so age(...) rules see a stall while it
      // lasts (the trace's own time base, whatever it is, stays consistent).
      const std::chrono::duration<double> idle = Clock::now() - last_read_at_;
      report(replay_->tick(replay_->last_time() + idle.count()));
    }
    if (const auto& error = reader_->error()) {
      // Firings before the damage are already out; a damaged live trace ends the watch.
      print_err(error->format() + "\n");
      failed_ = true;
    }
  }

  void report(std::span<const vigil::Firing> firings) {
    for (const auto& f : firings) {
      ++firings_;
      rules_fired_.insert(f.rule_name());
      out_.clear();
      if (json_) print_firing_json(f, opts_.trace, out_);
      else print_firing_text(f, replay_->engine(), opts_.explain, out_);
      std::fwrite(out_.data(), 1, out_.size(), stdout);
      if (std::fflush(stdout) != 0) {
        // Nobody reads our output any more (a closed pipe): nothing left to do.
        stop_signal = SIGPIPE;
        return;
      }
      if (!opts_.exec.empty()) exec(f);
    }
  }

  void exec(const vigil::Firing& f) {
    std::string json;
    print_firing_json(f, opts_.trace, json);
    const ExecOutcome r = run_command(opts_.exec, firing_environment(f, opts_.trace), json,
                                      opts_.exec_timeout, &stop_requested);
    if (!r.ok)
      print_err(fmt::format("rulecheck: warning: --exec for {} at step {}: {}\n", f.rule_name(),
                            f.step, r.problem));
  }

  FileState file_state() const {
    struct stat st{};
    if (::stat(opts_.trace.c_str(), &st) != 0) return FileState::gone;
    if (std::pair{st.st_dev, st.st_ino} != identity_) return FileState::restarted;
    // Shorter than what was read: truncated in place (a new run reusing the name).
    if (regular_ && static_cast<std::uint64_t>(st.st_size) < reader_->position())
      return FileState::restarted;
    return FileState::same;
  }

  void finish_replay() {
    if (!replay_) return;
    if (const auto skipped = replay_->engine().stats().out_of_order; skipped > 0)
      print_err(fmt::format(
          "{}: warning: {} observation{} ignored: step went backwards within a mode\n",
          opts_.trace, skipped, skipped == 1 ? "" : "s"));
    names_seen_.insert(replay_->names_seen().begin(), replay_->names_seen().end());
    modes_seen_.insert(replay_->modes_seen().begin(), replay_->modes_seen().end());
    replay_.reset();
  }

  int finish() {
    const bool opened = replay_.has_value() || !names_seen_.empty() || observations_ > 0;
    finish_replay();
    if (opened && !failed_) warn_missing_series(program_, opts_.trace, names_seen_, &modes_seen_);
    print_err(fmt::format("{} firing{} of {} rule{} over {} observation{}\n", firings_,
                          firings_ == 1 ? "" : "s", rules_fired_.size(),
                          rules_fired_.size() == 1 ? "" : "s", observations_,
                          observations_ == 1 ? "" : "s"));
    if (failed_) return exit_error;
    return firings_ > 0 ? exit_fired : exit_ok;
  }

  const WatchOptions& opts_;
  const vigil::Program& program_;
  const bool json_;

  std::unique_ptr<vigil::TraceReader> reader_;
  Clock::time_point last_read_at_ = Clock::now();
  std::optional<Replay> replay_;
  std::pair<dev_t, ino_t> identity_{};
  bool regular_ = true;
  bool silent_ = false;
  bool failed_ = false;
  bool announced_wait_ = false;
  std::optional<off_t> last_failed_size_;

  std::string out_;
  std::uint64_t firings_ = 0;
  std::uint64_t observations_ = 0;
  std::set<std::string> rules_fired_;
  std::unordered_set<std::string> names_seen_;  // over every (re)opening
  std::unordered_set<std::string> modes_seen_;
};

}  // namespace

int run_watch(const WatchOptions& opts) {
  if (opts.trace == "-") {
    // Following needs a file to look at again (growth, rotation); a pipe is
    // read to its end by `run`.
    print_err("rulecheck: watch follows a file; to read standard input use 'rulecheck run --trace -'\n");
    return exit_error;
  }
  const auto program = compile_with(opts.rules, opts.params, opts.aliases, opts.import_paths);
  if (!program) return exit_error;

  install_signal_handlers();
  Watcher watcher(opts, *program);
  return watcher.run();
}

}  // namespace rulecheck
