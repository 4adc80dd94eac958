// rulecheck: check rule files and dry-run them over recorded traces (SPEC §5).
//
//   rulecheck check RULES...
//   rulecheck run RULES... --trace PATH... [--format text|json] [--param k=v]...
//                 [--explain] [--from STEP] [--to STEP]
//
// Exit status (like diff): 0 nothing fired / no errors, 1 some rule fired,
// 2 usage, rule or trace error. Firings go to stdout, everything else
// (diagnostics, warnings, the summary) to stderr, so stdout stays machine-readable.
//
// This is the only translation unit that includes CLI11 (it is slow to compile).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vigil/diagnostic.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"
#include "vigil/trace.hpp"

namespace {

constexpr int exit_ok = 0;
constexpr int exit_fired = 1;
constexpr int exit_error = 2;

enum class Format { text, json };

struct RunOptions {
  std::vector<std::string> rules;
  std::vector<std::string> traces;
  std::string format = "text";
  std::vector<std::string> params;
  bool explain = false;
  std::int64_t from = std::numeric_limits<std::int64_t>::min();
  std::int64_t to = std::numeric_limits<std::int64_t>::max();
};

// Totals over all traces of one `run`, for the summary line and the exit status.
struct RunTotals {
  std::uint64_t firings = 0;
  std::uint64_t observations = 0;
  std::set<std::string> rules_fired;
  bool error = false;
};

void print_err(std::string_view text) { std::fwrite(text.data(), 1, text.size(), stderr); }

// Compiles and prints every diagnostic (warnings included) to stderr.
std::optional<vigil::Program> compile(const std::vector<std::string>& paths,
                                      const vigil::CompileOptions& options) {
  vigil::CompileResult result = vigil::compile_files(paths, options);
  print_err(result.format_diagnostics());
  if (!result.ok()) return std::nullopt;
  return std::move(*result.program);
}

int run_check(const std::vector<std::string>& rules) {
  return compile(rules, {}) ? exit_ok : exit_error;
}

// `--param k=v` values; false (and a message) on a malformed one.
bool parse_params(const std::vector<std::string>& raw, std::map<std::string, vigil::Value>& out) {
  for (const auto& item : raw) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      print_err(fmt::format("rulecheck: --param expects KEY=VALUE, got '{}'\n", item));
      return false;
    }
    out[item.substr(0, eq)] = vigil::parse_value(std::string_view(item).substr(eq + 1));
  }
  return true;
}

// Non-finite numbers as the trace format spells them (JSON has no NaN).
nlohmann::ordered_json json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

void print_firing_text(const vigil::Firing& f, const vigil::Engine& engine, bool explain,
                       std::string& out) {
  out += fmt::format("step {} [{}] {} ({})", f.step, f.mode, f.rule_name(),
                     vigil::to_string(f.severity));
  if (f.labels != nullptr && !f.labels->empty()) out += " " + vigil::format_series_key("", *f.labels);
  if (f.value) out += fmt::format(" value={}", *f.value);
  if (f.actions != nullptr && !f.actions->empty()) {
    out += " ->";
    for (std::size_t i = 0; i < f.actions->size(); ++i)
      out += (i == 0 ? " " : ", ") + (*f.actions)[i].name;
  }
  out += '\n';
  if (explain) {
    // Indented under its firing so the firing lines stay scannable.
    const std::string explanation = engine.explain(f);
    std::string_view text = explanation;
    while (!text.empty()) {
      const auto nl = text.find('\n');
      const auto line = text.substr(0, nl);
      // The engine may already indent its account; don't double it.
      if (!line.starts_with(' ') && !line.starts_with('\t')) out += "    ";
      out += line;
      out += '\n';
      if (nl == std::string_view::npos) break;
      text.remove_prefix(nl + 1);
    }
  }
}

void print_firing_json(const vigil::Firing& f, const std::string& trace, std::string& out) {
  nlohmann::ordered_json j;
  j["rule"] = f.rule_name();
  j["step"] = f.step;
  j["mode"] = std::string(f.mode);
  j["time"] = std::isfinite(f.time) ? nlohmann::ordered_json(f.time) : nullptr;
  j["severity"] = std::string(vigil::to_string(f.severity));
  auto& labels = j["labels"] = nlohmann::ordered_json::object();
  if (f.labels != nullptr)
    for (const auto& [k, v] : *f.labels) labels[k] = v;
  j["value"] = f.value ? json_number(*f.value) : nullptr;
  auto& actions = j["actions"] = nlohmann::ordered_json::array();
  if (f.actions != nullptr)
    for (const auto& a : *f.actions) actions.push_back(a.name);
  j["pending_since"] = f.pending_since;
  j["trace"] = trace;
  out += j.dump();
  out += '\n';
}

// Warns (as diagnostics at the rule text) about series the rules read that
// the trace never contains: usually a naming mismatch between logger and rules.
void warn_missing_series(const vigil::Program& program, const std::string& trace,
                         const std::unordered_set<std::string>& names_seen) {
  const std::vector<std::string> candidates(names_seen.begin(), names_seen.end());
  std::unordered_set<std::string> warned;  // one warning per series name, at its first use
  std::vector<vigil::Diagnostic> warnings;
  for (const auto& use : program.series_uses()) {
    if (names_seen.contains(use.name) || !warned.insert(use.name).second) continue;
    vigil::Diagnostic d;
    d.level = vigil::DiagLevel::warning;
    d.code = "missing-series";
    d.message = fmt::format("series '{}' never appears in trace '{}'", use.name, trace);
    d.file = use.file;
    d.range = use.range;
    d.suggestion = vigil::closest_match(use.name, candidates);
    warnings.push_back(std::move(d));
  }
  print_err(vigil::format_diagnostics(warnings, program.sources()));
}

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

  vigil::EngineOptions engine_options;
  engine_options.unbound = vigil::UnboundActions::record;  // rulecheck records, never executes
  vigil::Engine engine(program, engine_options);
  // Key -> interned id, so each distinct key is parsed once per trace;
  // nullopt marks a malformed key (warned about once, then ignored).
  std::unordered_map<std::string, std::optional<vigil::SeriesId>> ids;
  std::unordered_set<std::string> names_seen;
  std::vector<vigil::Sample> samples;
  std::string out;
  bool header_printed = false;

  vigil::Observation obs;
  while (reader->next(obs)) {
    samples.clear();
    for (const auto& [key, value] : obs.values) {
      auto it = ids.find(key);
      if (it == ids.end()) {
        std::string name;
        vigil::Labels labels;
        std::optional<vigil::SeriesId> id;
        if (vigil::parse_series_key(key, name, labels)) {
          names_seen.insert(name);
          id = engine.series(key);
        }
        if (!id) print_err(fmt::format("{}: warning: malformed series key '{}' ignored\n", trace, key));
        it = ids.emplace(key, id).first;
      }
      if (it->second) samples.push_back({*it->second, value});
    }
    // Series outside the window still "appear in the trace" for the warning above.
    if (obs.step < opts.from || obs.step > opts.to) continue;

    ++totals.observations;
    const auto firings = engine.observe(obs.step, samples, {.mode = obs.mode, .time = obs.time});
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
      else print_firing_text(f, engine, opts.explain, out);
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
  if (const auto skipped = engine.stats().out_of_order; skipped > 0)
    print_err(fmt::format("{}: warning: {} observation{} ignored: step went backwards within a mode\n",
                          trace, skipped, skipped == 1 ? "" : "s"));
  warn_missing_series(program, trace, names_seen);
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

// Usage errors: the message, then the help of the command that was being
// parsed, on stderr; always exit status 2 (CLI11 would use its own codes).
int usage_error(const CLI::App& app, const CLI::Error& e) {
  const CLI::App* target = &app;
  for (const CLI::App* sub : app.get_subcommands()) target = sub;
  print_err(fmt::format("rulecheck: {}\n\n{}", e.what(), target->help()));
  return exit_error;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rulecheck: check Vigil rule files and dry-run them over recorded traces"};
  app.name("rulecheck");
  app.require_subcommand(1);
  app.footer("exit status: 0 ok / nothing fired, 1 some rule fired (run), 2 usage, rule or trace error");

  std::vector<std::string> check_rules;
  auto* check = app.add_subcommand("check", "parse and type-check rule files; print diagnostics");
  check->add_option("RULES", check_rules, "rule files")->required();

  RunOptions run_opts;
  auto* run = app.add_subcommand("run", "dry-run rules over recorded traces");
  run->add_option("RULES", run_opts.rules, "rule files")->required();
  run->add_option("--trace", run_opts.traces, "trace files (format detected from content)")
      ->required()
      ->expected(1, -1);
  run->add_option("--format", run_opts.format, "output format")
      ->check(CLI::IsMember({"text", "json"}));
  run->add_option("--param", run_opts.params, "override a rule file param, KEY=VALUE (repeatable)")
      ->allow_extra_args(false)  // one value per --param, so RULES may follow it
      ->take_all();
  run->add_flag("--explain", run_opts.explain, "print the inputs behind each firing (text)");
  run->add_option("--from", run_opts.from, "ignore observations before this step");
  run->add_option("--to", run_opts.to, "ignore observations after this step");

  // Planned subcommands: listed in --help, refused when run.
  const std::pair<const char*, const char*> planned[] = {
      {"test", "run rule unit tests (*.rtest)"},
      {"watch", "follow a live trace"},
      {"report", "write an HTML report of series with firings marked"},
      {"stdlib", "list / document the standard library"},
  };
  std::vector<CLI::App*> planned_apps;
  for (const auto& [name, description] : planned) {
    auto* sub = app.add_subcommand(name, std::string(description) + " (not implemented yet)");
    sub->allow_extras();
    planned_apps.push_back(sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // --help: to stdout, status 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e);
  }
  if (run_opts.from > run_opts.to) {
    print_err(fmt::format("rulecheck: --from {} is after --to {}\n", run_opts.from, run_opts.to));
    return exit_error;
  }

  try {
    if (*check) return run_check(check_rules);
    if (*run) return run_run(run_opts);
    for (const auto* sub : planned_apps) {
      if (*sub) {
        print_err(fmt::format("rulecheck: '{}' is not implemented yet\n", sub->get_name()));
        return exit_error;
      }
    }
  } catch (const std::exception& e) {
    // Only API misuse throws (vigil::Error); data never does. Still exit 2, never abort.
    print_err(fmt::format("rulecheck: internal error: {}\n", e.what()));
    return exit_error;
  }
  return exit_error;
}
