// `rulecheck check` and `rulecheck run` (SPEC §5).
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <set>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"

namespace rulecheck {
namespace {

enum class Format { text, json };

// Totals over all traces of one `run`, for the summary line and the exit status.
struct RunTotals {
  std::uint64_t firings = 0;
  std::uint64_t observations = 0;
  std::set<std::string> rules_fired;
  bool error = false;
};

// A one-line progress bar on stderr while a trace is replayed, only when
// stderr is a terminal (a log file or a pipe gets nothing). Redrawn at most
// ten times a second, so it costs nothing measurable per observation.
class ProgressBar {
 public:
  ProgressBar(const vigil::TraceReader& reader, std::string label)
      : reader_(reader), label_(std::move(label)), enabled_(::isatty(STDERR_FILENO) == 1) {
    winsize ws{};
    if (enabled_ && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
      columns_ = ws.ws_col;
  }
  ~ProgressBar() { clear(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Called per observation: a clock read only every 64 calls.
  void tick() {
    if (!enabled_ || (++calls_ & 63) != 1) return;
    const auto now = Clock::now();
    if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw();
  }

  /// Removes the bar (before firings are printed to the same terminal, and at the end).
  void clear() {
    if (!drawn_) return;
    print_err("\r\x1b[K");
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;

  static std::string bytes(std::uint64_t n) {
    if (n < 1024 * 1024) return fmt::format("{:.1f} KiB", n / 1024.0);
    if (n < 1024ull * 1024 * 1024) return fmt::format("{:.1f} MiB", n / (1024.0 * 1024));
    return fmt::format("{:.2f} GiB", n / (1024.0 * 1024 * 1024));
  }

  void draw() {
    const std::uint64_t pos = reader_.position(), total = reader_.size();
    std::string line;
    if (total > 0) {
      const double fraction = std::min(1.0, static_cast<double>(pos) / static_cast<double>(total));
      const std::string numbers =
          fmt::format(" {:3.0f}% {} of {}", fraction * 100, bytes(pos), bytes(total));
      // Label, bar and numbers on one line of the terminal; the label gives way first.
      const std::size_t bar = 30;
      std::string label = label_;
      const std::size_t room = columns_ > bar + numbers.size() + 4 ? columns_ - bar - numbers.size() - 4 : 0;
      if (label.size() > room) label = room > 3 ? "..." + label.substr(label.size() - (room - 3)) : "";
      const auto filled = static_cast<std::size_t>(fraction * bar);
      line = fmt::format("{} [{}{}]{}", label, std::string(filled, '#'), std::string(bar - filled, '.'),
                         numbers);
    } else {
      line = fmt::format("{} {} read", label_, bytes(pos));
    }
    print_err("\r\x1b[K" + line);
    drawn_ = true;
  }

  const vigil::TraceReader& reader_;
  std::string label_;
  bool enabled_;
  std::size_t columns_ = 80;
  std::uint64_t calls_ = 0;
  bool drawn_ = false;
  Clock::time_point last_draw_;
};

// `--tick S`: what a live monitor polling every S seconds would have seen
// between the last observation and one at `next` — clock ticks at last + S,
// last + 2S, ... before `next`. A gap of more than max_ticks ticks gets
// max_ticks evenly spread ones (a clock rule fires at the first tick past its
// threshold, so coarser ticks only report it later within the gap).
template <class Emit>
void tick_until(Replay& replay, double next, double every, Emit& emit) {
  constexpr double max_ticks = 100000;
  const double last = replay.last_time();
  if (!(next > last)) return;  // NaN times, or no gap
  const double step = std::max(every, (next - last) / max_ticks);
  for (double k = 1; last + k * step < next; ++k) emit(replay.tick(last + k * step));
}

// Replays one trace through a fresh engine, printing firings as they come.
void run_trace(const vigil::Program& program, const std::string& trace, const RunOptions& opts,
               Format format, bool multiple_traces, RunTotals& totals) {
  vigil::TraceError open_error;
  auto reader = vigil::open_trace(
      trace, open_error, {.step_column = opts.step_column, .max_line_bytes = opts.max_line});
  if (!reader) {
    print_err(open_error.format() + "\n");
    totals.error = true;
    return;
  }

  Replay replay(program, trace);
  std::string out;
  bool header_printed = false;
  ProgressBar progress(*reader, trace);

  auto emit = [&](std::span<const vigil::Firing> firings) {
    if (firings.empty()) return;
    out.clear();
    if (format == Format::text && multiple_traces && !header_printed) {
      out += fmt::format("== {}\n", trace);
      header_printed = true;
    }
    for (const auto& f : firings) {
      ++totals.firings;
      totals.rules_fired.insert(f.rule_name());
      if (format == Format::json) print_firing_json(f, trace, out);
      else print_firing_text(f, replay.engine(), opts.explain, out);
    }
    progress.clear();
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);  // before the bar is drawn again on the same terminal
  };

  vigil::Observation obs;
  while (reader->next(obs)) {
    progress.tick();
    // Series outside the window still "appear in the trace" for the warning above.
    if (obs.step < opts.from || obs.step > opts.to) {
      replay.note(obs);
      continue;
    }

    ++totals.observations;
    if (opts.tick > 0) tick_until(replay, obs.time, opts.tick, emit);
    emit(replay.feed(obs));
  }
  progress.clear();
  std::fflush(stdout);

  if (const auto& error = reader->error()) {
    // Firings of the valid prefix are already printed; the damage is an
    // error, or with --keep-going a warning that leaves the status to firings.
    if (opts.keep_going) {
      vigil::TraceError warning = *error;
      warning.message = "warning: " + warning.message + " (--keep-going: rest of the trace skipped)";
      print_err(warning.format() + "\n");
    } else {
      print_err(error->format() + "\n");
      totals.error = true;
      return;
    }
  }
  if (const auto skipped = replay.engine().stats().out_of_order; skipped > 0)
    print_err(fmt::format("{}: warning: {} observation{} ignored: step went backwards within a mode\n",
                          trace, skipped, skipped == 1 ? "" : "s"));
  warn_missing_series(program, trace, replay.names_seen());
}

}  // namespace

int run_check(const std::vector<std::string>& rules, const std::vector<std::string>& import_paths) {
  vigil::CompileOptions options;
  options.import_paths = import_paths;
  return compile(rules, options) ? exit_ok : exit_error;
}

int run_run(const RunOptions& opts) {
  vigil::CompileOptions compile_options;
  if (!parse_params(opts.params, compile_options.params)) return exit_error;
  if (!parse_aliases(opts.aliases, compile_options.aliases)) return exit_error;
  compile_options.import_paths = opts.import_paths;
  const auto program = compile(opts.rules, compile_options);
  if (!program) return exit_error;

  const Format format = opts.format == "json" ? Format::json : Format::text;
  RunTotals totals;
  for (const auto& trace : opts.traces)
    run_trace(*program, trace, opts, format, opts.traces.size() > 1, totals);

  print_err(fmt::format("{} firing{} of {} rule{} over {} observation{}\n", totals.firings,
                        totals.firings == 1 ? "" : "s", totals.rules_fired.size(),
                        totals.rules_fired.size() == 1 ? "" : "s", totals.observations,
                        totals.observations == 1 ? "" : "s"));
  if (totals.error) return exit_error;
  return totals.firings > 0 ? exit_fired : exit_ok;
}

}  // namespace rulecheck
