// Format detection (by content, not by name) and the shared file helpers.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "trace/io.hpp"

namespace vigil {

namespace trace_io {

bool open_file(const std::string& path, std::ifstream& in, std::uint64_t& size, TraceError& error) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    error = TraceError{path, 0, 0, "is a directory"};
    return false;
  }
  in.open(path, std::ios::binary);
  if (!in) {
    error = TraceError{path, 0, 0, fmt::format("cannot open: {}", std::strerror(errno))};
    return false;
  }
  const auto file_size = std::filesystem::file_size(path, ec);
  size = ec ? 0 : static_cast<std::uint64_t>(file_size);
  return true;
}

std::string head(const std::string& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string out(n, '\0');
  in.read(out.data(), static_cast<std::streamsize>(n));
  out.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return out;
}

}  // namespace trace_io

std::string_view to_string(TraceFormat f) {
  switch (f) {
    case TraceFormat::jsonl: return "jsonl";
    case TraceFormat::tensorboard: return "tensorboard";
    case TraceFormat::csv: return "csv";
    case TraceFormat::hf_trainer_state: return "hf_trainer_state";
  }
  return "jsonl";
}

namespace {

/// A TFRecord starts with an 8-byte length and a 4-byte masked CRC32C of it;
/// the first record of an event file is a short `file_version` Event, so a
/// small length and the "brain.Event" marker within the first bytes is a
/// reliable sign without checking the CRC here (the reader does).
bool looks_like_tfrecord(std::string_view bytes) {
  if (bytes.size() < 16) return false;
  std::uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  return len > 0 && len < (1u << 20) && bytes.find("brain.Event") != std::string_view::npos;
}

}  // namespace

std::optional<TraceFormat> detect_trace_format(const std::string& path, TraceError& error) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return TraceFormat::tensorboard;
  if (!std::filesystem::exists(path, ec)) {
    error = TraceError{path, 0, 0, fmt::format("cannot open: {}", std::strerror(ENOENT))};
    return std::nullopt;
  }
  std::string bytes = trace_io::head(path, 64 * 1024);
  if (looks_like_tfrecord(bytes)) return TraceFormat::tensorboard;
  std::string_view text = bytes;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 BOM
  const auto first = text.find_first_not_of(" \t\r\n\f\v");
  // An empty file is an empty JSONL trace (zero observations), not an error.
  if (first == std::string_view::npos) return TraceFormat::jsonl;
  if (text[first] == '{') {
    // trainer_state.json is one pretty-printed object holding "log_history";
    // JSONL has one object per line.
    if (text.find("\"log_history\"") != std::string_view::npos) return TraceFormat::hf_trainer_state;
    return TraceFormat::jsonl;
  }
  // CSV: a printable header line with commas, and (if there is one) a
  // second line with as many fields; rule text with a comma in a comment is not.
  auto lines = text.substr(first);
  auto take_line = [&]() {
    const auto eol = lines.find('\n');
    std::string_view line = lines.substr(0, eol);
    lines = eol == std::string_view::npos ? std::string_view{} : lines.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };
  const std::string_view header = take_line();
  const bool printable = std::all_of(header.begin(), header.end(), [](char c) {
    return c == '\t' || static_cast<unsigned char>(c) >= 0x20;
  });
  const auto commas = std::count(header.begin(), header.end(), ',');
  if (printable && commas > 0 && header[0] != '#') {
    std::string_view row;
    while (!lines.empty() && (row = take_line()).empty()) {
    }
    if (row.empty() || std::count(row.begin(), row.end(), ',') == commas) return TraceFormat::csv;
  }
  error = TraceError{path, 0, 0,
                     "unknown trace format (expected Vigil JSONL, TensorBoard event files, CSV "
                     "or a Hugging Face trainer_state.json)"};
  return std::nullopt;
}

std::unique_ptr<TraceReader> open_trace(const std::string& path, TraceError& error,
                                        const TraceOptions& options) {
  auto format = detect_trace_format(path, error);
  if (!format) return nullptr;
  switch (*format) {
    case TraceFormat::jsonl: return open_jsonl(path, error, options);
    case TraceFormat::tensorboard: return open_tensorboard(path, error, options);
    case TraceFormat::csv: return open_csv(path, error, options);
    case TraceFormat::hf_trainer_state: return open_hf_trainer_state(path, error, options);
  }
  return nullptr;
}

}  // namespace vigil
