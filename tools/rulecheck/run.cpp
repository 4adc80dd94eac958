// `rulecheck check` and `rulecheck run` (SPEC §5).
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

// Replays one trace through a fresh engine, printing firings as they come.
void run_trace(const vigil::Program& program, const std::string& trace, const RunOptions& opts,
               Format format, bool multiple_traces, RunTotals& totals) {
  vigil::TraceError open_error;
  auto reader = vigil::open_trace(trace, open_error);
  if (!reader) {
    print_err(open_error.format() + "\n");
    totals.error = true;
    return;
  }

  Replay replay(program, trace);
  std::string out;
  bool header_printed = false;

  vigil::Observation obs;
  while (reader->next(obs)) {
    // Series outside the window still "appear in the trace" for the warning above.
    if (obs.step < opts.from || obs.step > opts.to) {
      replay.note(obs);
      continue;
    }

    ++totals.observations;
    const auto firings = replay.feed(obs);
    if (firings.empty()) continue;
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
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);

  if (const auto& error = reader->error()) {
    // Firings of the valid prefix are already printed; the damage is still an error.
    print_err(error->format() + "\n");
    totals.error = true;
    return;
  }
  if (const auto skipped = replay.engine().stats().out_of_order; skipped > 0)
    print_err(fmt::format("{}: warning: {} observation{} ignored: step went backwards within a mode\n",
                          trace, skipped, skipped == 1 ? "" : "s"));
  warn_missing_series(program, trace, replay.names_seen());
}

int run_run(const RunOptions& opts) {
  vigil::CompileOptions compile_options;
  if (!parse_params(opts.params, compile_options.params)) return exit_error;
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

}  // namespace

int run_check(const std::vector<std::string>& rules) {
  return compile(rules, {}) ? exit_ok : exit_error;
}

int run_run(const RunOptions& opts) {
  vigil::CompileOptions compile_options;
  if (!parse_params(opts.params, compile_options.params)) return exit_error;
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
