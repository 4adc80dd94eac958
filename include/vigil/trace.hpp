// Reading and writing recorded traces (SPEC §6). A trace is a sequence of
// observations; readers are pull-based and stop at the first damage with an
// error that names the file and the byte offset / line, after having returned
// every complete record before it.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace vigil {

/// One observation as read from a trace. Series are keyed by their trace
/// form, e.g. `grad_norm{layer="fc1.weight"}`.
struct Observation {
  std::int64_t step = 0;
  std::string mode = "train";
  double time = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<std::string, double>> values;
};

struct TraceError {
  std::string file;
  std::uint64_t line = 0;    // 1-based; 0 if the format has no lines
  std::uint64_t offset = 0;  // byte offset of the damaged record
  std::string message;
  /// "FILE:LINE: MESSAGE" or "FILE: byte OFFSET: MESSAGE".
  [[nodiscard]] std::string format() const;
};

class TraceReader {
 public:
  virtual ~TraceReader() = default;
  /// Fills `out` with the next observation. Returns false at the end or at
  /// damage (then error() is set).
  virtual bool next(Observation& out) = 0;
  [[nodiscard]] const std::optional<TraceError>& error() const { return error_; }
  /// Bytes consumed so far and total size (for progress); total 0 if unknown.
  [[nodiscard]] virtual std::uint64_t position() const = 0;
  [[nodiscard]] virtual std::uint64_t size() const = 0;

 protected:
  std::optional<TraceError> error_;
};

/// Opens a trace, detecting its format from its content. Returns null and
/// sets `error` if the file cannot be opened or its format is unknown.
std::unique_ptr<TraceReader> open_trace(const std::string& path, TraceError& error);

/// Vigil JSONL: one observation per line (SPEC §6). Accepts "NaN",
/// "Infinity", "-Infinity" strings and bare NaN/Infinity/-Infinity tokens.
std::unique_ptr<TraceReader> open_jsonl(const std::string& path, TraceError& error);

/// Formats one observation as a Vigil JSONL line (no trailing newline);
/// non-finite values as "NaN" / "Infinity" / "-Infinity" strings.
std::string to_jsonl(const Observation& obs);

}  // namespace vigil
