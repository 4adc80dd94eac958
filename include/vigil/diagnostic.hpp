// Diagnostics: errors and warnings about rule text, as values with positions.
//
// Every stage (parser, checker, planner, engine binding checks) reports problems
// as `Diagnostic`s that point at a byte range of a source file held in a
// `SourceSet`. Positions stay byte offsets until printing, where
// `format_diagnostic` turns them into `file:line:col`, the source line and a
// caret underline (clang style):
//
//   train.rules:3:10: error: unknown series 'val_los'; did you mean 'val_loss'?
//       when val_los > 2
//            ^~~~~~~
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vigil {

/// A half-open byte range [begin, end) in one source file.
struct SourceRange {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
};

/// One loaded source text. `name` is the path as the user gave it.
struct SourceFile {
  std::string name;
  std::string text;
};

/// 1-based line and column (column counts bytes).
struct LineCol {
  std::uint32_t line = 1;
  std::uint32_t col = 1;
};

/// The source files of one compilation, addressed by index. Append-only, so
/// indices stay valid; cheap to move.
class SourceSet {
 public:
  /// Adds a file and returns its index.
  std::uint32_t add(std::string name, std::string text);
  /// Reads the file at `path` the way rule files are read (a regular file of
  /// at most 16 MiB holding text; never blocks on a FIFO, never quotes the
  /// content; docs/limits.md) and adds it. Returns nullopt with `error` set
  /// to a short reason ("is not a regular file (a device, FIFO or socket)").
  std::optional<std::uint32_t> load(const std::string& path, std::string& error);
  [[nodiscard]] const SourceFile& operator[](std::uint32_t file) const { return files_.at(file); }
  [[nodiscard]] std::size_t size() const { return files_.size(); }
  /// Line/column of a byte offset (offsets past the end clamp to the end).
  [[nodiscard]] LineCol line_col(std::uint32_t file, std::uint32_t offset) const;

 private:
  std::vector<SourceFile> files_;
  // Byte offset of the start of every line, per file, so line_col is a binary
  // search instead of a scan from the start of the file.
  std::vector<std::vector<std::uint32_t>> line_starts_;
};

enum class DiagLevel { error, warning, note };

struct Diagnostic {
  DiagLevel level = DiagLevel::error;
  /// Short stable identifier, e.g. "parse", "unknown-series", "type".
  std::string code;
  /// Lowercase, no trailing period, no position.
  std::string message;
  /// Index into the SourceSet the diagnostic was produced with.
  std::uint32_t file = 0;
  SourceRange range;
  /// If non-empty, printed as "; did you mean 'SUGGESTION'?" after the message.
  std::string suggestion;
  /// Extra lines printed after the caret, e.g. "note: template declared here".
  std::vector<std::string> notes;
};

/// Renders one diagnostic:
///   FILE:LINE:COL: LEVEL: MESSAGE[; did you mean 'S'?]
///       <source line>
///       ^~~~~            (caret at begin, '~' to the end of the range on that line)
///   note lines, one per note, as "note: ..."
/// Tabs in the source line are kept so the caret lines up.
std::string format_diagnostic(const Diagnostic& d, const SourceSet& sources);

/// Renders all diagnostics in order, each followed by a newline.
std::string format_diagnostics(const std::vector<Diagnostic>& ds, const SourceSet& sources);

/// Edit distance counting insertions, deletions, substitutions and swaps of
/// adjacent characters (optimal string alignment), for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word` if it is close enough to be a plausible
/// typo (distance <= max(1, len/3)), else an empty string.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace vigil
