// rulecheck: check rule files and dry-run them over recorded traces (SPEC §5).
//
//   rulecheck check RULES... [--import-path DIR]... [--strict]
//   rulecheck test TESTFILES... [--strict]
//   rulecheck run RULES... --trace PATH... [--format text|json] [--param k=v]...
//                 [--explain] [--from STEP] [--to STEP] [--keep-going]
//                 [--step-column NAME] [--alias NEW=OLD]... [--tick S] [--max-line BYTES]
//                 [--max-label-sets N] [--import-path DIR]...   (--trace -: standard input)
//   rulecheck watch RULES... --trace PATH [--exec CMD] [--poll MS] [--timeout S] ...
//   rulecheck report RULES... --trace PATH... -o REPORT.html [--top N] [--points N] ...
//   rulecheck convert INPUT -o OUTPUT [--to jsonl|csv|tensorboard]
//   rulecheck stdlib [NAME] [--markdown]
//
// Exit status (like diff): 0 nothing fired / no errors, 1 some rule fired,
// 2 usage, rule or trace error. Firings go to stdout, everything else
// (diagnostics, warnings, the summary) to stderr, so stdout stays machine-readable.
//
// This is the only translation unit that includes CLI11 (it is slow to compile).
//
// Owns: the command line. Must not touch: what a subcommand does (its own file).

#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"

namespace {

using namespace rulecheck;

// Usage errors: the message, then the help of the command that was being
// parsed, on stderr; always exit status 2 (CLI11 would use its own codes).
// A bad option value gets its message and the usage line only: the whole
// help would bury the one line that matters.
int usage_error(const CLI::App& app, const CLI::Error& e) {
  const CLI::App* target = &app;
  for (const CLI::App* sub : app.get_subcommands()) target = sub;
  const std::string help = target->help();
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) {
    const auto at = help.find("Usage:");
    const std::string usage =
        at == std::string::npos ? std::string() : help.substr(at, help.find('\n', at) - at);
    print_err(fmt::format("rulecheck: {}\n{}\nrun '{} --help' for the options\n", e.what(), usage,
                          target == &app ? "rulecheck" : "rulecheck " + target->get_name()));
    return exit_error;
  }
  print_err(fmt::format("rulecheck: {}\n\n{}", e.what(), help));
  return exit_error;
}

// Seconds (or any quantity) that must be a finite number >= 0 (> 0 if
// `positive`). CLI11's NonNegativeNumber prints its range as a 300-digit
// number and accepts nan.
CLI::Validator seconds(bool positive) {
  return CLI::Validator(
      [positive](std::string& text) -> std::string {
        double v = 0;
        const bool number = parse_finite(text, v);
        if (!number || v < 0 || (positive && v == 0))
          return fmt::format("must be a {} number of seconds, got '{}'",
                             positive ? "positive" : "non-negative", text);
        return {};
      },
      positive ? "SECONDS>0" : "SECONDS>=0");
}

// --max-line: bytes, with an optional K/M/G (KiB/MiB/GiB) suffix.
CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t v = 0;
        if (!parse_byte_size(text, v) || v == 0)
          return fmt::format("must be a positive size in bytes (K, M, G suffixes allowed), got '{}'",
                             text);
        text = std::to_string(v);
        return {};
      },
      "BYTES");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rulecheck: check Vigil rule files and dry-run them over recorded traces"};
  app.name("rulecheck");
  app.require_subcommand(1);
  app.footer("exit status: 0 ok / nothing fired, 1 some rule fired (run, watch) or a test failed (test), 2 usage, rule or trace error");

  std::vector<std::string> check_rules;
  auto* check = app.add_subcommand("check", "parse and type-check rule files; print diagnostics");
  check->add_option("RULES", check_rules, "rule files")->required();
  std::vector<std::string> check_import_paths;
  const char* import_help =
      "a directory imports may reach outside the rule file's own (absolute or ../ paths), "
      "also searched for relative imports (repeatable)";
  check->add_option("--import-path", check_import_paths, import_help)
      ->allow_extra_args(false)
      ->check(CLI::ExistingDirectory);
  bool check_strict = false;
  check->add_flag("--strict", check_strict,
                  "treat warnings as errors (exit status 2), like promtool's --lint-fatal");

  RunOptions run_opts;
  auto* run = app.add_subcommand("run", "dry-run rules over recorded traces");
  run->add_option("RULES", run_opts.rules, "rule files")->required();
  run->add_option("--trace", run_opts.traces,
                  "trace files (format detected from content; - for standard input), or "
                  "directories of runs (one run per file or subdirectory)")
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
  run->add_flag("--keep-going", run_opts.keep_going,
                "a damaged trace is a warning (its valid prefix is used), not exit status 2");
  run->add_option("--step-column", run_opts.step_column, "CSV: the column holding the step");
  run->add_option("--tick", run_opts.tick,
                  "replay time gaps as a live monitor polling every S seconds would see them "
                  "(clock ticks for age(...) rules)")
      ->check(seconds(false));
  run->add_option("--price-per-hour", run_opts.price_per_hour,
                  "after the firings, say what the run cost after the first stop/rollback "
                  "firing at this price per hour (needs wall times in the trace)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double v = 0;
            if (!parse_finite(text, v) || v <= 0)
              return fmt::format("must be a positive price per hour, got '{}'", text);
            return {};
          },
          "PRICE>0"));
  run->add_option("--jobs", run_opts.jobs, "runs evaluated at once (default: one per core)")
      ->check(CLI::Range(1u, 4096u));
  run->add_option("--max-line", run_opts.max_line,
                  "longest JSONL line / CSV record read, in bytes (K, M, G suffixes; default 64M)")
      ->transform(byte_size());
  run->add_option("--max-label-sets", run_opts.max_label_sets,
                  "most label sets per series name; samples of more are ignored, with one "
                  "warning (default 100000; 0: no limit)");
  run->add_option("--import-path", run_opts.import_paths, import_help)
      ->allow_extra_args(false)
      ->check(CLI::ExistingDirectory);
  run->add_option("--alias", run_opts.aliases,
                  "read trace series OLD as NEW, NEW=OLD (repeatable; overrides alias statements)")
      ->allow_extra_args(false)
      ->take_all();

  WatchOptions watch_opts;
  auto* watch = app.add_subcommand("watch", "follow a live trace, printing firings as they happen");
  watch->add_option("RULES", watch_opts.rules, "rule files")->required();
  watch->add_option("--trace", watch_opts.trace, "the trace to follow (may not exist yet)")
      ->required();
  watch->add_option("--exec", watch_opts.exec,
                    "run CMD (/bin/sh -c) for each firing: VIGIL_* variables, JSON on stdin");
  watch->add_option("--exec-timeout", watch_opts.exec_timeout,
                    "seconds before an --exec command is killed (default 30)")
      ->check(seconds(true));
  watch->add_option("--poll", watch_opts.poll_ms, "milliseconds between reads (default 500)")
      ->check(CLI::Range(1, 3'600'000));
  watch->add_option("--timeout", watch_opts.timeout, "stop after S seconds")
      ->check(seconds(false));
  watch->add_option("--max-line", watch_opts.max_line,
                    "longest JSONL line / CSV record read or buffered, in bytes (default 64M)")
      ->transform(byte_size());
  watch->add_option("--max-label-sets", watch_opts.max_label_sets,
                    "most label sets per series name (default 100000; 0: no limit)");
  bool from_start = false;  // the default; the flag exists to say so explicitly
  auto* from_start_flag = watch->add_flag("--from-start", from_start,
                                          "report firings of what is already written (default)");
  watch->add_flag("--from-end", watch_opts.from_end,
                  "what is already written only builds rule state; report new firings")
      ->excludes(from_start_flag);
  watch->add_option("--format", watch_opts.format, "output format")
      ->check(CLI::IsMember({"text", "json"}));
  watch->add_option("--param", watch_opts.params, "override a rule file param, KEY=VALUE (repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  watch->add_flag("--explain", watch_opts.explain, "print the inputs behind each firing (text)");
  watch->add_option("--step-column", watch_opts.step_column, "CSV: the column holding the step");
  watch->add_option("--import-path", watch_opts.import_paths, import_help)
      ->allow_extra_args(false)
      ->check(CLI::ExistingDirectory);
  watch->add_option("--alias", watch_opts.aliases, "read trace series OLD as NEW, NEW=OLD (repeatable)")
      ->allow_extra_args(false)
      ->take_all();

  TestOptions test_opts;
  auto* test = app.add_subcommand("test", "run rule unit tests (*.rtest files, see docs/rtest.md)");
  test->add_option("TESTFILES", test_opts.files, ".rtest files")->required();
  test->add_flag("--strict", test_opts.strict, "fail on any firing no expectation covers");

  StdlibOptions stdlib_opts;
  auto* stdlib = app.add_subcommand("stdlib", "list the standard library, or document one template");
  stdlib->add_option("NAME", stdlib_opts.name, "a template (e.g. early_stopping); none: list all");
  stdlib->add_flag("--markdown", stdlib_opts.markdown, "print the whole reference as Markdown (docs/stdlib.md)");

  ReportOptions report_opts;
  auto* report = app.add_subcommand("report", "write an HTML report: firings, and charts of the series rules read with firings marked");
  report->add_option("RULES", report_opts.rules, "rule files")->required();
  report->add_option("--trace", report_opts.traces,
                     "trace files (format detected from content), or directories of runs")
      ->required()
      ->expected(1, -1);
  report->add_option("-o,--output", report_opts.output, "the HTML file to write")->required();
  report->add_option("--param", report_opts.params, "override a rule file param, KEY=VALUE (repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  report->add_option("--step-column", report_opts.step_column, "CSV: the column holding the step");
  report->add_option("--jobs", report_opts.jobs, "traces read at once (default: one per core)")
      ->check(CLI::Range(1u, 4096u));
  report->add_option("--top", report_opts.top,
                     "charts per series name; label sets beyond it (fewest firings) are folded "
                     "(default 12)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}));
  report->add_option("--points", report_opts.points,
                     "points per line drawn before min/max downsampling (default 2000)")
      ->check(CLI::Range(std::size_t{16}, std::size_t{100000000}));
  report->add_option("--alias", report_opts.aliases, "read trace series OLD as NEW, NEW=OLD (repeatable)")
      ->allow_extra_args(false)
      ->take_all();

  ConvertOptions convert_opts;
  auto* convert = app.add_subcommand("convert", "rewrite a trace as Vigil JSONL, long CSV or a TensorBoard event file");
  convert->add_option("INPUT", convert_opts.input, "the trace to read (any format rulecheck reads)")->required();
  convert->add_option("-o,--output", convert_opts.output,
                      "the file to write (*.jsonl, *.csv), or a directory for a TensorBoard event file")
      ->required();
  convert->add_option("--to", convert_opts.to, "the format to write (default: from the output name)")
      ->check(CLI::IsMember({"jsonl", "csv", "tensorboard"}));
  convert->add_option("--step-column", convert_opts.step_column, "CSV input: the column holding the step");

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
    if (*check) return run_check(check_rules, check_import_paths, check_strict);
    if (*run) return run_run(run_opts);
    if (*test) return run_test(test_opts);
    if (*watch) return run_watch(watch_opts);
    if (*stdlib) return run_stdlib(stdlib_opts);
    if (*report) return run_report(report_opts);
    if (*convert) return run_convert(convert_opts);
  } catch (const std::exception& e) {
    // Only API misuse throws (vigil::Error); data never does. Still exit 2, never abort.
    print_err(fmt::format("rulecheck: internal error: {}\n", e.what()));
    return exit_error;
  }
  return exit_error;
}
