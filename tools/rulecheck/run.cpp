// `rulecheck check` and `rulecheck run` (SPEC §5).
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"
#include "tools/rulecheck/runs.hpp"

namespace rulecheck {
namespace {

enum class Format { text, json };

// Totals over all traces of one `run`, for the summary line and the exit status.
struct RunTotals {
  std::uint64_t firings = 0;
  std::uint64_t observations = 0;
  std::map<std::string, std::uint64_t> rules_fired;  // rule -> firings
  bool error = false;

  void add(const RunTotals& other) {
    firings += other.firings;
    observations += other.observations;
    for (const auto& [rule, n] : other.rules_fired) rules_fired[rule] += n;
    error = error || other.error;
  }
};

std::string plural(std::uint64_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

// "runs/a: 3 firings of 2 rules over 100 observations" (or the run's error).
std::string run_summary(const std::string& trace, const RunTotals& t) {
  return fmt::format("{}: {} of {} over {}{}\n", trace, plural(t.firings, "firing"),
                     plural(t.rules_fired.size(), "rule"), plural(t.observations, "observation"),
                     t.error ? " (error)" : "");
}

// Which rules fired where: a row per run, a column per rule that fired in any
// run, firing counts in the cells ("-" for none), aligned for a terminal.
std::string fired_where_table(const std::vector<std::string>& traces,
                              const std::vector<RunTotals>& per_run) {
  std::set<std::string> rules;
  for (const auto& t : per_run)
    for (const auto& [rule, _] : t.rules_fired) rules.insert(rule);
  std::size_t first = 3;
  for (const auto& trace : traces) first = std::max(first, trace.size());
  std::string out = fmt::format("which rules fired where (firings per run):\n{:<{}}", "run", first);
  for (const auto& rule : rules) out += fmt::format("  {}", rule);
  out += '\n';
  for (std::size_t i = 0; i < traces.size(); ++i) {
    out += fmt::format("{:<{}}", traces[i], first);
    for (const auto& rule : rules) {
      const auto it = per_run[i].rules_fired.find(rule);
      const std::string cell = per_run[i].error && it == per_run[i].rules_fired.end()
                                   ? "error"
                                   : it == per_run[i].rules_fired.end() ? "-" : std::to_string(it->second);
      out += fmt::format("  {:>{}}", cell, rule.size());
    }
    out += '\n';
  }
  return out;
}

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

// `--price-per-hour`: the money the rules would have saved on one trace — the
// wall time from the first stop-level firing (an action `stop` or `rollback`)
// to the trace's last observation, at the given price (docs/spot.md).
class CostSummary {
 public:
  explicit CostSummary(double price) : price_(price) {}

  void observe(std::int64_t step, double time) {
    if (!std::isfinite(time)) return;
    if (!std::isfinite(first_time_)) first_time_ = time;
    last_time_ = std::max(last_time_, time);
    last_step_ = step;
  }

  void fired(const vigil::Firing& f) {
    if (has_stop_ || f.actions == nullptr) return;
    for (const auto& a : *f.actions) {
      if (a.name != "stop" && a.name != "rollback") continue;
      has_stop_ = true;
      stop_rule_ = f.rule_name();
      stop_action_ = a.name;
      stop_step_ = f.step;
      stop_time_ = f.time;
      return;
    }
  }

  // Text: one line after the firings; JSON: one object under the key
  // "cost_summary" (firing objects have "rule"; this one does not).
  void print(const std::string& trace, Format format, std::string& out) const {
    const bool timed = std::isfinite(first_time_);
    const double total_h = timed ? (last_time_ - first_time_) / 3600 : NAN;
    const bool stop_timed = has_stop_ && timed && std::isfinite(stop_time_);
    const double at_h = stop_timed ? (stop_time_ - first_time_) / 3600 : NAN;
    const double saved_h = stop_timed ? total_h - at_h : (timed ? 0.0 : NAN);
    if (format == Format::json) {
      nlohmann::ordered_json j;
      auto number = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; };
      j["trace"] = trace;
      j["price_per_hour"] = price_;
      j["stop_rule"] = has_stop_ ? nlohmann::ordered_json(stop_rule_) : nullptr;
      j["stop_action"] = has_stop_ ? nlohmann::ordered_json(stop_action_) : nullptr;
      j["stop_step"] = has_stop_ ? nlohmann::ordered_json(stop_step_) : nullptr;
      j["stop_time"] = number(stop_time_);
      j["last_step"] = timed ? nlohmann::ordered_json(last_step_) : nullptr;
      j["run_hours"] = number(total_h);
      j["hours_at_stop"] = number(at_h);
      j["hours_saved"] = number(saved_h);
      j["cost_saved"] = number(saved_h * price_);
      nlohmann::ordered_json line;
      line["cost_summary"] = std::move(j);
      out += line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
      return;
    }
    const std::string price = fmt::format("${}/h", money(price_, 2));
    if (!timed) {
      out += fmt::format("cost: {} has no wall times; nothing to price at {}\n", trace, price);
    } else if (!has_stop_) {
      out += fmt::format("no stop or rollback firing: the whole run ran ({:.1f} h, ${} at {})\n",
                         total_h, money(total_h * price_, 0), price);
    } else if (!stop_timed) {
      out += fmt::format("{} at step {} ({}): the firing has no wall time; nothing to price\n",
                         stop_action_, grouped(stop_step_), stop_rule_);
    } else {
      out += fmt::format("{} at step {} ({:.1f} h of {:.1f} h, {}): {:.1f} h, ${} at {} not spent\n",
                         stop_action_, grouped(stop_step_), at_h, total_h, stop_rule_, saved_h,
                         money(saved_h * price_, 0), price);
    }
  }

 private:
  // 41000 -> "41,000".
  static std::string grouped(std::int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return n < 0 ? "-" + out : out;
  }
  // Whole units with thousands separators (cents when `decimals` is 2).
  static std::string money(double v, int decimals) {
    const double rounded = std::round(v * std::pow(10, decimals)) / std::pow(10, decimals);
    const auto whole = static_cast<std::int64_t>(std::floor(rounded));
    std::string out = grouped(whole);
    if (decimals > 0) out += fmt::format("{:.{}f}", rounded - static_cast<double>(whole), decimals).substr(1);
    return out;
  }

  double price_;
  double first_time_ = NAN, last_time_ = -INFINITY;
  std::int64_t last_step_ = 0;
  bool has_stop_ = false;
  std::string stop_rule_, stop_action_;
  std::int64_t stop_step_ = 0;
  double stop_time_ = NAN;
};

// Replays one trace through a fresh engine. With `stream`, firings are printed
// as they come (and a progress bar drawn); otherwise they are appended to
// `buffer`, for runs evaluated in parallel and printed in order afterwards.
void run_trace(const vigil::Program& program, const std::string& trace, const RunOptions& opts,
               Format format, bool multiple_traces, RunTotals& totals, bool stream,
               std::string& buffer) {
  vigil::TraceError open_error;
  auto reader = vigil::open_trace(
      trace, open_error, {.step_column = opts.step_column, .max_line_bytes = opts.max_line});
  if (!reader) {
    print_err(open_error.format() + "\n");
    totals.error = true;
    return;
  }

  Replay replay(program, trace, opts.max_label_sets);
  std::string out;
  bool header_printed = false;
  std::optional<ProgressBar> progress;
  if (stream) progress.emplace(*reader, trace);
  std::optional<CostSummary> cost;
  if (std::isfinite(opts.price_per_hour)) cost.emplace(opts.price_per_hour);

  auto emit = [&](std::span<const vigil::Firing> firings) {
    if (firings.empty()) return;
    out.clear();
    if (format == Format::text && multiple_traces && !header_printed) {
      out += fmt::format("== {}\n", trace);
      header_printed = true;
    }
    for (const auto& f : firings) {
      if (cost) cost->fired(f);
      ++totals.firings;
      ++totals.rules_fired[f.rule_name()];
      if (format == Format::json) print_firing_json(f, trace, out);
      else print_firing_text(f, replay.engine(), opts.explain, out);
    }
    if (!stream) {
      buffer += out;
      return;
    }
    progress->clear();
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);  // before the bar is drawn again on the same terminal
  };

  // Keyed: series are found by the reader's ids, not by hashing their names.
  vigil::KeyedObservation obs;
  while (reader->next_keyed(obs)) {
    if (progress) progress->tick();
    // Series outside the window still "appear in the trace" for the warning above.
    if (obs.step < opts.from || obs.step > opts.to) {
      replay.note(*reader, obs);
      continue;
    }

    ++totals.observations;
    if (cost) cost->observe(obs.step, obs.time);
    if (opts.tick > 0) tick_until(replay, obs.time, opts.tick, emit);
    emit(replay.feed(*reader, obs));
  }
  if (progress) progress->clear();
  if (stream) std::fflush(stdout);

  if (cost) {
    out.clear();
    cost->print(trace, format, out);
    if (stream) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
    } else {
      buffer += out;
    }
  }

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
  warn_missing_series(program, trace, replay.names_seen(), &replay.modes_seen());
}

}  // namespace

int run_check(const std::vector<std::string>& rules, const std::vector<std::string>& import_paths,
              bool strict) {
  vigil::CompileOptions options;
  options.import_paths = import_paths;
  return compile(rules, options, strict) ? exit_ok : exit_error;
}

int run_run(const RunOptions& opts) {
  const auto program = compile_with(opts.rules, opts.params, opts.aliases, opts.import_paths);
  if (!program) return exit_error;

  const Format format = opts.format == "json" ? Format::json : Format::text;
  bool dirs_expanded = false;
  const auto runs = expand_runs(opts.traces, dirs_expanded);
  RunTotals totals;
  if (runs.size() == 1 && runs.front().error.empty()) {
    // One run: stream firings as they come, with a progress bar on a terminal.
    std::string unused;
    run_trace(*program, runs.front().trace, opts, format, false, totals, true, unused);
  } else {
    // Several runs: each on its own engine in a worker; output (firings on
    // stdout, diagnostics and a summary line on stderr) printed run by run in
    // input order as soon as every earlier run is done.
    struct Result {
      RunTotals totals;
      std::string out, err;
    };
    std::vector<Result> results(runs.size());
    std::vector<RunTotals> per_run(runs.size());
    std::vector<std::string> names;
    for (const auto& r : runs) names.push_back(r.trace);
    ordered_parallel(
        runs.size(), worker_count(runs.size(), opts.jobs),
        [&](std::size_t i) {
          auto& r = results[i];
          ErrCapture capture(r.err);
          if (!runs[i].error.empty()) {
            print_err(fmt::format("{}: {}\n", runs[i].trace, runs[i].error));
            r.totals.error = true;
            return;
          }
          run_trace(*program, runs[i].trace, opts, format, true, r.totals, false, r.out);
        },
        [&](std::size_t i) {
          auto& r = results[i];
          std::fwrite(r.out.data(), 1, r.out.size(), stdout);
          std::fflush(stdout);
          print_err(r.err);
          print_err(run_summary(runs[i].trace, r.totals));
          totals.add(r.totals);
          per_run[i] = std::move(r.totals);
          r = Result{};  // a sweep's output is not held twice
        });
    print_err(fired_where_table(names, per_run));
  }

  print_err(fmt::format("{} firing{} of {} rule{} over {} observation{}\n", totals.firings,
                        totals.firings == 1 ? "" : "s", totals.rules_fired.size(),
                        totals.rules_fired.size() == 1 ? "" : "s", totals.observations,
                        totals.observations == 1 ? "" : "s"));
  if (totals.error) return exit_error;
  return totals.firings > 0 ? exit_fired : exit_ok;
}

}  // namespace rulecheck
