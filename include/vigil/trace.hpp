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
#include <string_view>
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

struct TraceOptions {
  /// CSV: the step column, when it is not one of step, global_step,
  /// iteration, epoch.
  std::string step_column;
  /// Follow a growing trace (rulecheck watch): at the end of the data next()
  /// returns false with no error, and an incomplete last record is "not yet
  /// written" rather than damage; a later next() goes on with what was
  /// appended since. Formats that cannot be followed ignore it.
  bool follow = false;
};

/// The formats open_trace tells apart.
enum class TraceFormat { jsonl, tensorboard, csv, hf_trainer_state };
std::string_view to_string(TraceFormat f);

/// The format of `path` judged by its content (a directory: TensorBoard
/// event files below it), or nullopt with `error` set.
std::optional<TraceFormat> detect_trace_format(const std::string& path, TraceError& error);

/// Opens a trace, detecting its format from its content. Returns null and
/// sets `error` if the file cannot be opened or its format is unknown.
std::unique_ptr<TraceReader> open_trace(const std::string& path, TraceError& error,
                                        const TraceOptions& options = {});

/// Vigil JSONL: one observation per line (SPEC §6). Accepts "NaN",
/// "Infinity", "-Infinity" strings and bare NaN/Infinity/-Infinity tokens.
std::unique_ptr<TraceReader> open_jsonl(const std::string& path, TraceError& error,
                                        const TraceOptions& options = {});

/// TensorBoard event files: one `events.out.tfevents.*` file, or a directory
/// searched recursively (files merged in step order per run). Scalars from
/// `simple_value` and scalar tensor summaries; the tag is the series name.
std::unique_ptr<TraceReader> open_tensorboard(const std::string& path, TraceError& error,
                                              const TraceOptions& options = {});

/// CSV, wide (a step column and one column per series; empty cell = no
/// sample) or long (`tag,step,value[,wall_time]`); Lightning `metrics.csv`
/// and Keras `CSVLogger` files are wide CSVs.
std::unique_ptr<TraceReader> open_csv(const std::string& path, TraceError& error,
                                      const TraceOptions& options = {});

/// Hugging Face `trainer_state.json` (`log_history`; `eval_*` entries are
/// eval-mode observations).
std::unique_ptr<TraceReader> open_hf_trainer_state(const std::string& path, TraceError& error,
                                                   const TraceOptions& options = {});

/// Formats one observation as a Vigil JSONL line (no trailing newline);
/// non-finite values as "NaN" / "Infinity" / "-Infinity" strings.
std::string to_jsonl(const Observation& obs);

}  // namespace vigil
