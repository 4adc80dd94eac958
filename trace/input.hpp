// The byte source every trace reader reads from. Internal to trace/.
//
// Why not std::ifstream: format detection must look at the first bytes and
// then hand the *same* bytes to the reader. Opening the path twice loses them
// when the path is a pipe or FIFO (`--trace <(cat fit.csv)`), so detection
// peeks through this buffer and the reader starts where detection started.
// It also opens with O_CLOEXEC, so a child started by `rulecheck watch --exec`
// never inherits the trace's descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "vigil/trace.hpp"

namespace vigil::trace_io {

class Input {
 public:
  /// Opens `path` for reading ("-": a close-on-exec duplicate of standard
  /// input, named "<stdin>" in errors). Directories are refused ("is a
  /// directory"). Null with `error` set on failure.
  static std::unique_ptr<Input> open(const std::string& path, TraceError& error);
  ~Input();
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  /// Copies up to `n` bytes (peeked ones first) to `dst`. Returns the count;
  /// 0 at the end of the data (when following, only of the data so far) or on
  /// a read error (failed() then says so). With follow set on a pipe or FIFO,
  /// returns 0 instead of blocking when nothing is ready.
  std::size_t read(char* dst, std::size_t n);
  /// The bytes peeked so far, after one more read of up to `limit` bytes in
  /// all (one read(2): on a pipe, whatever the writer has written). False at
  /// the end of the data or when `limit` bytes are already peeked.
  bool peek_more(std::size_t limit);
  [[nodiscard]] std::string_view peeked() const {
    return std::string_view(peeked_).substr(peeked_pos_);
  }
  /// Reads everything left, up to `limit` bytes; false (and `error` set) if
  /// the data is longer or cannot be read.
  bool read_all(std::string& out, std::uint64_t limit, TraceError& error);

  void set_follow(bool follow) { follow_ = follow; }
  [[nodiscard]] bool failed() const { return errno_ != 0; }
  /// "read error: <OS reason>" after a failed read.
  [[nodiscard]] std::string failure() const;
  /// The size of a regular file now (it may grow), 0 for pipes and devices.
  [[nodiscard]] std::uint64_t size() const;
  [[nodiscard]] bool regular() const { return regular_; }
  [[nodiscard]] int fd() const { return fd_; }
  /// The name errors use: the path, or "<stdin>".
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  Input(int fd, std::string name, bool regular) : fd_(fd), name_(std::move(name)), regular_(regular) {}
  std::size_t read_fd(char* dst, std::size_t n);

  int fd_ = -1;
  std::string name_;
  bool regular_ = false;
  bool follow_ = false;
  int errno_ = 0;
  std::string peeked_;  // bytes read ahead by peek(), handed out first
  std::size_t peeked_pos_ = 0;
};

/// open_trace's readers take an already opened input (whose peeked bytes
/// are the start of the data); the public open_* functions open the path.
std::unique_ptr<TraceReader> open_jsonl(std::unique_ptr<Input> in, TraceError& error,
                                        const TraceOptions& options);
std::unique_ptr<TraceReader> open_csv(std::unique_ptr<Input> in, TraceError& error,
                                      const TraceOptions& options);
std::unique_ptr<TraceReader> open_hf_trainer_state(std::unique_ptr<Input> in, TraceError& error,
                                                   const TraceOptions& options);
std::unique_ptr<TraceReader> open_tensorboard_file(std::unique_ptr<Input> in, TraceError& error,
                                                   const TraceOptions& options);

/// The format of a trace from its first bytes (up to 64 KiB); nullopt if
/// they fit none. An empty input is JSONL (zero observations).
std::optional<TraceFormat> detect_format(std::string_view bytes);
/// Whether `bytes` (a prefix of the input) already decide detect_format, so
/// that a pipe need not be read further before the reader starts: a
/// TFRecord header, a first line that is a whole JSON object, or a text
/// header and one more line.
bool format_decided(std::string_view bytes);

}  // namespace vigil::trace_io
