// Compiling rule files into an immutable, shareable Program.
//
//   auto result = vigil::compile_file("train.rules");
//   if (!result.ok()) { std::cerr << result.format_diagnostics(); return 2; }
//   vigil::Program program = *result.program;
//
// Compilation parses, resolves names (params, lets, templates, imports,
// actions, the standard library `std.`), type-checks, instantiates templates
// and plans the evaluation graph (shared subexpressions, folded constants,
// window lengths). All errors of all files are reported, never thrown.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "vigil/diagnostic.hpp"

namespace vigil {

namespace detail {
struct ProgramImpl;
}

/// A constant: a param value, an action argument.
using Value = std::variant<double, std::string, bool>;

/// Parses a `--param k=v` style value: a number (incl. `5%`, `nan`, `inf`),
/// `true`/`false`, else the text as a string.
Value parse_value(std::string_view text);
std::string to_string(const Value& v);

enum class Severity { info, warning, error, critical };
std::string_view to_string(Severity s);

/// One action invocation of a rule: `reduce_lr(factor = 0.5)`.
struct Action {
  std::string name;
  std::vector<std::pair<std::string, Value>> args;  // named, in declaration order

  /// The argument `key` as a number / string; `fallback` if absent or of another kind.
  [[nodiscard]] double number(std::string_view key, double fallback = 0) const;
  [[nodiscard]] std::string string(std::string_view key, std::string fallback = {}) const;
  [[nodiscard]] const Value* find(std::string_view key) const;
};

/// `escalate after N within DURATION do ACTIONS`: a firing that follows
/// `after` earlier firings of the same series, each within `within` (in
/// `unit`: "samples", "evals", "steps", "seconds", "epochs") of the next, runs
/// `actions` instead of the rule's. With several, the last one whose count is
/// reached wins.
struct Escalation {
  std::uint32_t after = 1;
  double within = 0;
  std::string unit;
  std::vector<Action> actions;
};

/// What a compiled rule is, for listing and reporting.
struct RuleInfo {
  std::string name;
  std::string description;
  Severity severity = Severity::warning;
  std::string mode;  // empty: any mode
  /// Where `in MODE` is written (for "mode never appears in the trace").
  std::uint32_t mode_file = 0;
  SourceRange mode_range;
  std::vector<Action> actions;
  std::vector<Escalation> escalations;
  /// The series names the rule's condition reads, sorted.
  std::vector<std::string> reads;
  /// The template a `use` instantiated (`loss_spike` for `use std.loss_spike(...)`);
  /// empty for a rule written out.
  std::string template_name;
  std::uint32_t file = 0;  // where the rule (or its `use`) is written
  SourceRange range;
};

/// A series name some rule reads, with where it is read (for "series never
/// appears in the trace" warnings).
struct SeriesUse {
  std::string name;
  std::uint32_t file = 0;
  SourceRange range;
};

/// An immutable compiled rule set. Copies share the same compiled data and
/// may be used from several threads at once (each Engine has its own state).
class Program {
 public:
  [[nodiscard]] const std::vector<RuleInfo>& rules() const;
  [[nodiscard]] const std::vector<SeriesUse>& series_uses() const;
  [[nodiscard]] const SourceSet& sources() const;
  /// Final values of the file's `param`s after overrides.
  [[nodiscard]] const std::map<std::string, Value>& params() const;
  /// Series renamings: trace series named `first` are read as `second`
  /// (from `alias` statements and CompileOptions::aliases).
  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& aliases() const;
  /// The name rules know a trace series by: its alias target, or itself.
  [[nodiscard]] std::string_view resolve_alias(std::string_view trace_name) const;
  /// Number of nodes in the shared evaluation graph (after CSE and folding).
  [[nodiscard]] std::size_t plan_size() const;

  [[nodiscard]] const detail::ProgramImpl& impl() const { return *impl_; }
  explicit Program(std::shared_ptr<const detail::ProgramImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const detail::ProgramImpl> impl_;
};

struct CompileOptions {
  /// Overrides for `param` declarations; naming an undeclared param is an error.
  std::map<std::string, Value> params;
  /// Extra series renamings, (trace name, rule name), e.g. from
  /// `rulecheck --alias loss=train/loss`; they override `alias` statements.
  std::vector<std::pair<std::string, std::string>> aliases;
  /// Import roots (`rulecheck --import-path DIR`), like a compiler's -I: an
  /// `import` may name a file below one of these directories by an absolute
  /// path or a path leaving the root rule file's directory, and a relative
  /// import not found next to its importer is looked up in them. Without
  /// one, imports stay below the root file's directory. See docs/limits.md.
  std::vector<std::string> import_paths;
  std::size_t max_errors = 50;
};

struct CompileResult {
  std::optional<Program> program;        // set iff there are no errors
  std::vector<Diagnostic> diagnostics;   // errors and warnings
  SourceSet sources;                     // what the diagnostics point into

  [[nodiscard]] bool ok() const { return program.has_value(); }
  [[nodiscard]] std::string format_diagnostics() const {
    return vigil::format_diagnostics(diagnostics, sources);
  }
};

/// Compiles one or more rule files as one program (their rules together).
CompileResult compile_files(const std::vector<std::string>& paths, const CompileOptions& options = {});
CompileResult compile_file(const std::string& path, const CompileOptions& options = {});
/// Compiles rule text; `name` is used in positions and anonymous rule names.
/// `import` paths are resolved relative to the current directory.
CompileResult compile_string(std::string_view text, std::string name = "<input>",
                             const CompileOptions& options = {});

}  // namespace vigil
