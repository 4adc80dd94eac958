// Reading and writing recorded traces (SPEC §6). A trace is a sequence of
// observations; readers are pull-based and stop at the first damage with an
// error that names the file and the byte offset / line, after having returned
// every complete record before it.
#pragma once

#include <cstdint>
#include <cstdio>
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

/// A series key's id within one reader (TraceReader::key_name): 0, 1, 2, ...
/// in the order the reader first met the keys, stable for the reader's life.
using KeyId = std::uint32_t;
/// A mode's id within one reader (TraceReader::mode_name); 0 is "train".
using ModeId = std::uint32_t;

struct KeyedSample {
  KeyId key = 0;
  double value = 0;
  bool operator==(const KeyedSample&) const = default;
};

/// One observation as TraceReader::next_keyed hands it out: the same content
/// as the Observation next() would give in its place (same step, mode, time,
/// and the same samples in the same order), with each series key and the
/// mode given as the reader's id instead of a string. Filling it copies no
/// name, and a consumer that maps ids to its own handles once (a vector
/// indexed by KeyId, grown when key_count() grows) needs no hashing or
/// string comparison per sample.
struct KeyedObservation {
  std::int64_t step = 0;
  ModeId mode = 0;
  double time = std::numeric_limits<double>::quiet_NaN();
  std::vector<KeyedSample> values;
};

namespace trace_io {
class KeyTable;  // trace/key_table.hpp
}
struct TraceOptions;

class TraceReader {
 public:
  TraceReader();
  virtual ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  /// Fills `out` with the next observation. Returns false at the end or at
  /// damage (then error() is set).
  virtual bool next(Observation& out) = 0;

  /// The same, with series keys and mode as ids (see KeyedObservation).
  /// next() and next_keyed() draw from one sequence: each call hands out the
  /// next observation, whichever form it takes, and errors are the same
  /// (same message, same line and offset). Every id in `out` is below
  /// key_count() / mode_count() when it returns; ids are never reused, and
  /// an id may be announced (key_count() grows) before or without appearing
  /// in an observation (e.g. a CSV header's columns). The default
  /// implementation interns the strings of next(); the built-in readers
  /// (JSONL, CSV, TensorBoard) fill it directly from their input.
  ///   vigil::KeyedObservation obs;
  ///   std::vector<Handle> handle;              // by KeyId
  ///   while (reader->next_keyed(obs)) {
  ///     while (handle.size() < reader->key_count())
  ///       handle.push_back(my_lookup(reader->key_name(handle.size())));
  ///     for (const auto& [key, value] : obs.values) use(handle[key], value);
  ///   }
  virtual bool next_keyed(KeyedObservation& out);

  /// Number of key ids handed out or announced so far; the name of one.
  /// Names are the trace form (`grad_norm{layer="fc1.weight"}`) and stay
  /// valid for the reader's life. The reader keeps every distinct key it
  /// met (their bytes + ~24 each), up to TraceOptions::max_keys and
  /// max_key_bytes (docs/limits.md).
  [[nodiscard]] std::size_t key_count() const;
  [[nodiscard]] std::string_view key_name(KeyId id) const;
  /// The same for modes.
  [[nodiscard]] std::size_t mode_count() const;
  [[nodiscard]] std::string_view mode_name(ModeId id) const;

  [[nodiscard]] const std::optional<TraceError>& error() const { return error_; }
  /// Bytes consumed so far and total size (for progress); total 0 if unknown.
  [[nodiscard]] virtual std::uint64_t position() const = 0;
  [[nodiscard]] virtual std::uint64_t size() const = 0;
  /// How the reader understood its input, for verbose output, e.g. "wide
  /// CSV, step column 'epoch', 2 train and 2 eval series"; empty if there is
  /// nothing to say.
  [[nodiscard]] virtual std::string describe() const { return {}; }

 protected:
  /// For readers that implement next_keyed: next() as a thin adapter over it
  /// (the names assigned over `out`'s strings, so nothing allocates once warm).
  bool next_from_keyed(Observation& out);
  /// The error message when the keys or modes held passed the limits of
  /// `options` (TraceOptions::max_keys; checked after each record); empty if not.
  [[nodiscard]] std::string key_limit_error(const TraceOptions& options) const;

  std::optional<TraceError> error_;
  // The reader's interned keys and modes ("train" is mode 0).
  std::unique_ptr<trace_io::KeyTable> keys_, modes_;

 private:
  KeyedObservation keyed_;  // next_from_keyed's
  Observation plain_;       // the default next_keyed's
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
  /// JSONL: the longest line, CSV: the longest record, in bytes (without the
  /// line end). A longer one is an error naming its line, and memory stays
  /// near this bound whatever the input (`rulecheck --max-line`; see
  /// docs/limits.md). trainer_state.json, read whole, may be 4x this size.
  std::uint64_t max_line_bytes = std::uint64_t{64} << 20;
  /// The distinct series names (and modes) one reader keeps, and their
  /// bytes (TraceReader::key_name): the record that passes either is an
  /// error naming it, so a trace of ever-new names cannot exhaust memory.
  std::size_t max_keys = std::size_t{1} << 22;
  std::size_t max_key_bytes = std::size_t{256} << 20;
};

/// The formats open_trace tells apart.
enum class TraceFormat { jsonl, tensorboard, csv, hf_trainer_state };
std::string_view to_string(TraceFormat f);

/// The format of `path` judged by its content (a directory: TensorBoard
/// event files below it), or nullopt with `error` set. It reads the start of
/// the file: for a pipe, call open_trace instead, which keeps those bytes.
std::optional<TraceFormat> detect_trace_format(const std::string& path, TraceError& error);

/// Opens a trace, detecting its format from its content. The path is opened
/// once and the bytes detection looked at are the reader's first bytes, so a
/// pipe or FIFO (`<(cat fit.csv)`) loses nothing; "-" is standard input.
/// Every descriptor is opened close-on-exec. Returns null and sets `error` if
/// the file cannot be opened or its format is unknown.
std::unique_ptr<TraceReader> open_trace(const std::string& path, TraceError& error,
                                        const TraceOptions& options = {});

/// Vigil JSONL: one observation per line (SPEC §6). Accepts "NaN",
/// "Infinity", "-Infinity" strings and bare NaN/Infinity/-Infinity tokens.
std::unique_ptr<TraceReader> open_jsonl(const std::string& path, TraceError& error,
                                        const TraceOptions& options = {});

/// TensorBoard event files: one `events.out.tfevents.*` file, or a directory
/// searched recursively for files whose name contains `tfevents` (records of
/// all files merged in (step, wall time) order, stable). Scalars from
/// `simple_value` and scalar tensor summaries; the tag is the series name and
/// the mode is "eval" for eval-looking tags (`eval/`, `val_`, ...; see
/// docs/traces.md). Damage in a file stops that file; its error is reported
/// after every good record of all files has been returned. In follow mode
/// records are handed out as they are completed, files re-scanned each time
/// next() runs dry.
std::unique_ptr<TraceReader> open_tensorboard(const std::string& path, TraceError& error,
                                              const TraceOptions& options = {});

/// Writes observations as a TensorBoard event file that open_tensorboard (and
/// TensorBoard itself) reads back: a `file_version` record, then one Event per
/// observation (step, wall time, one `simple_value` per series; values are
/// stored as float, as TensorBoard's scalars are). The mode is not part of the
/// format: name eval series so that the reader maps them back (`eval/loss`,
/// `val_loss`; see docs/traces.md).
///   vigil::TraceError err;
///   auto w = vigil::TensorBoardWriter::create("run/events.out.tfevents.1.host", err);
///   w->write({.step = 10, .values = {{"train/loss", 0.5}}});
/// Not thread-safe; writes are buffered until flush() or destruction.
class TensorBoardWriter {
 public:
  /// Creates or truncates `path`. Null with `error` set if it cannot be opened.
  static std::unique_ptr<TensorBoardWriter> create(const std::string& path, TraceError& error);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  /// Appends one Event (no record if `obs` has no values). False once a
  /// write has failed (see error()).
  bool write(const Observation& obs);
  /// Hands buffered records to the OS, so a follower sees them.
  bool flush();
  [[nodiscard]] const std::optional<TraceError>& error() const;

 private:
  struct Impl;
  explicit TensorBoardWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// CSV, wide (a step column and one column per series; empty cell = no
/// sample) or long (`tag,step,value[,wall_time]`); Lightning `metrics.csv`
/// and Keras `CSVLogger` files are wide CSVs.
std::unique_ptr<TraceReader> open_csv(const std::string& path, TraceError& error,
                                      const TraceOptions& options = {});

/// Hugging Face `trainer_state.json` (`log_history`; `eval_*` entries are
/// eval-mode observations).
std::unique_ptr<TraceReader> open_hf_trainer_state(const std::string& path, TraceError& error,
                                                   const TraceOptions& options = {});

/// Appends observations to a Vigil JSONL file, one line each, handed to the
/// OS after every line so that a follower (`rulecheck watch`) or a crash
/// loses at most the line being written.
///   auto w = vigil::JsonlWriter::create("run/trace.jsonl", err);
///   engine.record([&](const vigil::Observation& o) { w->write(o); });
class JsonlWriter {
 public:
  /// Creates or truncates `path` (appends if `append`). Null with `error` set
  /// if it cannot be opened.
  static std::unique_ptr<JsonlWriter> create(const std::string& path, TraceError& error,
                                             bool append = false);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  /// False once a write has failed (see error()).
  bool write(const Observation& obs);
  [[nodiscard]] const std::optional<TraceError>& error() const { return error_; }

 private:
  JsonlWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_ = nullptr;
  std::uint64_t written_ = 0;
  std::optional<TraceError> error_;
};

/// Formats one observation as a Vigil JSONL line (no trailing newline);
/// non-finite values as "NaN" / "Infinity" / "-Infinity" strings.
std::string to_jsonl(const Observation& obs);

}  // namespace vigil
