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

namespace {
bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.';
}
}  // namespace

bool quote_bare_non_finite(std::string_view in, std::string& out, std::vector<std::size_t>& shifts) {
  static constexpr std::string_view tokens[] = {"-Infinity", "Infinity", "NaN"};
  bool changed = false;
  bool in_string = false;
  out.clear();
  shifts.clear();
  for (std::size_t i = 0; i < in.size();) {
    const char c = in[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < in.size()) {
        out += in[i + 1];
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      ++i;
      continue;
    }
    bool replaced = false;
    if ((c == '-' || c == 'I' || c == 'N') && (i == 0 || !is_word_char(in[i - 1]))) {
      for (std::string_view token : tokens) {
        if (in.substr(i, token.size()) != token) continue;
        const std::size_t end = i + token.size();
        if (end < in.size() && is_word_char(in[end])) continue;
        out += '"';
        out += token;
        out += '"';
        shifts.push_back(out.size());
        i = end;
        replaced = changed = true;
        break;
      }
    }
    if (!replaced) {
      out += c;
      ++i;
    }
  }
  return changed;
}

std::size_t original_position(std::size_t pos, const std::vector<std::size_t>& shifts) {
  // shifts is increasing: count the rewrites that end at or before pos.
  const auto n = static_cast<std::size_t>(
      std::upper_bound(shifts.begin(), shifts.end(), pos) - shifts.begin());
  const std::size_t shift = 2 * n;
  return pos >= shift ? pos - shift : 0;
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
  // CSV: a printable header record with commas, and (if there is one) a
  // second record with as many fields; rule text with a comma in a comment is
  // not. Fields are counted outside double quotes (RFC 4180: quoted fields may
  // hold commas and newlines). A header naming a step column is CSV whatever
  // the next row holds, so a damaged first row gets the reader's positioned
  // error rather than "unknown format".
  auto rest = text.substr(first);
  struct Record {
    std::size_t fields = 1;
    bool printable = true;
    bool step_name = false;  // one of the step column names, unquoted or quoted
    bool empty = true;
  };
  auto take_record = [&rest]() {
    Record r;
    bool quoted = false;
    std::size_t field_start = 0, i = 0;
    auto end_field = [&](std::size_t end) {
      std::string_view f = rest.substr(field_start, end - field_start);
      if (!f.empty() && f.back() == '\r') f.remove_suffix(1);
      if (f.size() >= 2 && f.front() == '"' && f.back() == '"') f = f.substr(1, f.size() - 2);
      r.step_name = r.step_name || f == "step" || f == "global_step" || f == "iteration" ||
                    f == "epoch";
    };
    for (; i < rest.size(); ++i) {
      const char c = rest[i];
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) {
        end_field(i);
        field_start = i + 1;
        ++r.fields;
      } else if (c == '\n' && !quoted) break;
      else if (c != '\t' && c != '\r' && c != '\n' && static_cast<unsigned char>(c) < 0x20)
        r.printable = false;
      if (c != '\r') r.empty = false;
    }
    end_field(i);
    rest = i < rest.size() ? rest.substr(i + 1) : std::string_view{};
    return r;
  };
  const Record header = take_record();
  if (header.printable && header.fields > 1 && text[first] != '#') {
    if (header.step_name) return TraceFormat::csv;
    Record row;
    while (!rest.empty() && (row = take_record()).empty) {
    }
    if (row.empty || row.fields == header.fields) return TraceFormat::csv;
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
