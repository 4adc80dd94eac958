// The `.rtest` rule unit test format (docs/rtest.md): parsing a test file
// into plain structs, and the compact series notation (`1 0.9 _ NaN 0.5x3
// 1+1x10`). Evaluation lives in test.cpp; nothing here touches an engine.
//
// Positions are byte offsets into the .rtest text, turned into
// `file:line:col` only when a diagnostic is printed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vigil/diagnostic.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"

namespace rulecheck::rtest {

/// `series KEY [in MODE]: VALUES`.
struct SeriesSpec {
  std::string key;  // canonical (format_series_key), as the engine interns it
  std::string name;
  std::string mode = "train";
  std::vector<std::optional<double>> values;  // nullopt: no sample at that step
  std::uint32_t offset = 0;
};

/// `expect fire RULE at STEPS [clauses]` or `expect no fire RULE [clauses]`.
struct Expectation {
  bool fire = true;
  /// `expect no eval`: the rule's condition is never evaluated (for those
  /// labels / that mode). A plain `expect no fire` requires at least one
  /// evaluation, so that a test whose inputs never reach the rule fails.
  bool no_eval = false;
  std::string rule;
  vigil::SourceRange rule_range;  // of the rule name (for "unknown rule")
  std::optional<vigil::Labels> labels;  // unset: any label set
  std::optional<std::string> mode;      // unset: any mode
  std::vector<std::int64_t> steps;      // fire only; in the order written
  std::optional<std::vector<std::string>> actions;
  std::optional<vigil::Severity> severity;
  /// `value X`: set; `value none`: set to nullopt (a firing without value).
  std::optional<std::optional<double>> value;
  std::optional<std::int64_t> pending_since;
  std::uint32_t line = 0;  // 1-based line of the expectation, for messages
};

/// Settings that a test inherits from the file and may override.
struct Settings {
  /// `rules "FILE"` paths, joined to the .rtest file's directory.
  std::vector<std::string> rule_files;
  /// The same paths as written in the .rtest file (anonymous rules of a file
  /// are named after them: `spike.rules:3`).
  std::vector<std::string> rule_files_as_written;
  /// All `rules inline:` blocks, padded with empty lines so that line
  /// numbers and columns are those of the .rtest file: diagnostics and
  /// anonymous rule names then point into the .rtest file itself.
  std::optional<std::string> inline_rules;
  std::map<std::string, vigil::Value> params;
  bool strict = false;
};

struct TestCase {
  std::string name;
  std::uint32_t line = 0;
  Settings settings;
  std::int64_t step_start = 0;
  std::int64_t step_stride = 1;
  std::optional<std::vector<std::int64_t>> steps;  // `steps: LIST` (explicit step numbers)
  std::vector<std::optional<double>> times;        // `times: LIST`; nullopt/absent: no time
  std::vector<SeriesSpec> series;
  std::vector<Expectation> expects;
};

struct TestFile {
  std::string path;  // as given on the command line
  Settings settings;
  std::vector<TestCase> tests;
};

/// Upper bound on the entries one `.rtest` file expands to: series values,
/// `times:` and `steps:` lists and expectation step lists (`0..999`)
/// together. Each token is also capped (a count or range of at most
/// 999,999), but a file of many such tokens would otherwise grow without
/// bound (16 bytes a value) from a few hundred bytes of text. Ten million
/// is enough to fill the largest range a rule can read (`x[10000000]`).
/// Passing it is a positioned error at the token that passes it.
inline constexpr std::size_t max_values_per_file = 10'000'000;

/// Parses a .rtest file. `file` is the index of `text` in `sources` (the
/// diagnostics point into it). Returns false if any error was reported;
/// every malformed line is reported, not only the first. `max_values` is
/// the file's budget of expanded entries (rulecheck always uses the default;
/// the fuzz target a small one, so that its error path is reached cheaply).
bool parse_test_file(const vigil::SourceSet& sources, std::uint32_t file, TestFile& out,
                     std::vector<vigil::Diagnostic>& diagnostics,
                     std::size_t max_values = max_values_per_file);

/// Why a series notation did not parse: the offending token's offset within
/// the text given to expand_values, and a message.
struct NotationError {
  std::size_t offset = 0;
  std::size_t length = 0;
  std::string message;
  bool over_budget = false;  // the text expands past the budget given
};

/// Expands compact series notation into one entry per step:
///   `1 0.9`      values;  `_` no sample;  `NaN` `Inf` `-Inf` non-finite values
///   `AxN`        A repeated N times (`_xN`: N steps without a sample)
///   `A+BxN`      A, A+B, ..., A+N*B (N+1 values, as promtool's `a+bxn`)
///   `A-BxN`      A, A-B, ..., A-N*B
/// Appends to `out`, at most `budget` entries: a text that expands to more
/// is an error at the token that passes the budget (the parser passes what
/// is left of max_values_per_file). On error `out` is unspecified.
std::optional<NotationError> expand_values(std::string_view text,
                                           std::vector<std::optional<double>>& out,
                                           std::size_t budget = max_values_per_file);

/// A number as the notation spells it: decimal / exponent, `NaN`, `Inf`,
/// `+Inf`, `-Inf` (any case; `Infinity` too). Nullopt when not a number.
std::optional<double> parse_number(std::string_view text);

}  // namespace rulecheck::rtest
