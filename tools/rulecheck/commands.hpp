// The rulecheck subcommands, one source file each; main.cpp parses the
// command line (CLI11) and calls them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "vigil/engine.hpp"

namespace rulecheck {

struct RunOptions {
  std::vector<std::string> rules;
  std::vector<std::string> traces;
  std::string format = "text";
  std::vector<std::string> params;
  bool explain = false;
  std::int64_t from = std::numeric_limits<std::int64_t>::min();
  std::int64_t to = std::numeric_limits<std::int64_t>::max();
  /// A damaged trace is a warning, not exit status 2 (its valid prefix still counts).
  bool keep_going = false;
  std::string step_column;           // CSV step column (TraceOptions::step_column)
  std::vector<std::string> aliases;  // `NEW=OLD`: trace series OLD read as NEW
  double tick = 0;  // seconds between clock ticks inserted into time gaps; 0: none
  unsigned jobs = 0;  // runs evaluated at once; 0: one per core
  std::uint64_t max_line = std::uint64_t{64} << 20;  // TraceOptions::max_line_bytes
  std::vector<std::string> import_paths;  // CompileOptions::import_paths
  std::size_t max_label_sets = vigil::default_max_label_sets;  // EngineOptions; 0: none
  /// `--price-per-hour P`: after each trace's firings, what the time after the
  /// first stop-level (stop/rollback) firing cost (docs/spot.md). NaN: off.
  double price_per_hour = std::numeric_limits<double>::quiet_NaN();
};

/// `rulecheck watch`: follow one growing trace.
struct WatchOptions {
  std::vector<std::string> rules;
  std::string trace;
  std::string exec;          // shell command run for each firing; empty: none
  double exec_timeout = 30;  // seconds before the command is killed
  int poll_ms = 500;
  double timeout = 0;        // seconds; 0: until a signal or the trace is deleted
  bool from_end = false;     // existing content builds rule state; only new firings reported
  std::string format = "text";
  std::vector<std::string> params;
  bool explain = false;
  std::string step_column;
  std::vector<std::string> aliases;
  std::uint64_t max_line = std::uint64_t{64} << 20;  // TraceOptions::max_line_bytes
  std::vector<std::string> import_paths;  // CompileOptions::import_paths
  std::size_t max_label_sets = vigil::default_max_label_sets;  // EngineOptions; 0: none
};

/// `rulecheck test`: rule unit tests in .rtest files (docs/rtest.md).
struct TestOptions {
  std::vector<std::string> files;
  bool strict = false;  // every firing must be expected, in every test
};

/// `rulecheck stdlib`: list the standard templates, document one, or render docs/stdlib.md.
struct StdlibOptions {
  std::string name;       // empty: list every template
  bool markdown = false;  // the whole reference as Markdown (docs/stdlib.md)
};

/// `rulecheck report`: one self-contained HTML page (docs/report.md): a
/// summary, the firings, and a chart per series the rules read.
struct ReportOptions {
  std::vector<std::string> rules;
  std::vector<std::string> traces;
  std::string output;
  std::vector<std::string> params;
  std::string step_column;
  std::vector<std::string> aliases;
  unsigned jobs = 0;        // traces read at once; 0: one per core
  std::size_t top = 12;     // charts per series name; more label sets are folded
  std::size_t points = 2000;  // points per line drawn before min/max downsampling
};

/// `rulecheck convert`: one trace rewritten in another format.
struct ConvertOptions {
  std::string input;
  std::string output;
  std::string to;  // jsonl, csv or tensorboard
  std::string step_column;
};

/// `strict`: warnings are errors (exit status 2), docs/rulecheck.md.
int run_check(const std::vector<std::string>& rules, const std::vector<std::string>& import_paths,
              bool strict = false);
/// Exit status like run: 0 nothing fired, 1 some rule fired, 2 an error.
int run_report(const ReportOptions& opts);
int run_run(const RunOptions& opts);
/// Exit status 0 all tests passed, 1 a test failed, 2 a file error.
int run_test(const TestOptions& opts);
int run_watch(const WatchOptions& opts);
/// Exit status 0, or 2 for an unknown name or a malformed doc block in stdlib/*.rules.
int run_stdlib(const StdlibOptions& opts);
/// Exit status 0, or 2 for a read or write error (what was read before damage is still written).
int run_convert(const ConvertOptions& opts);

}  // namespace rulecheck
