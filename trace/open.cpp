// Format detection (by content, not by name) and the shared file helpers.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "trace/input.hpp"
#include "trace/io.hpp"

namespace vigil {

namespace trace_io {

bool overflows_double(std::string_view token) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (ec != std::errc::result_out_of_range || ptr != token.data() + token.size()) return false;
  const std::string copy(token);
  return std::isinf(std::strtod(copy.c_str(), nullptr));  // not an underflow to 0
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
    if (!replaced && (c == '-' || (c >= '0' && c <= '9')) && (i == 0 || !is_word_char(in[i - 1]))) {
      // A number too large for a double (1e999) is read as ±infinity, as
      // Python's json and the CSV reader do (docs/traces.md): quoted here,
      // json_number turns the string into the infinity.
      std::size_t end = i + 1;
      bool exponent = false;
      while (end < in.size() && ((in[end] >= '0' && in[end] <= '9') || in[end] == '.' ||
                                 in[end] == 'e' || in[end] == 'E' || in[end] == '+' || in[end] == '-')) {
        exponent = exponent || in[end] == 'e' || in[end] == 'E';
        ++end;
      }
      const std::string_view token = in.substr(i, end - i);
      const bool quote = (exponent || token.size() > 300) && overflows_double(token);
      if (quote) out += '"';
      out += token;
      if (quote) {
        out += '"';
        shifts.push_back(out.size());
        changed = true;
      }
      i = end;
      replaced = true;
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

namespace trace_io {

bool format_decided(std::string_view bytes) {
  if (looks_like_tfrecord(bytes)) return true;
  std::string_view text = bytes;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const auto first = text.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string_view::npos) return false;
  text.remove_prefix(first);
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) return false;
  if (text[0] == '{') {
    // One line holding a whole object is JSONL; trainer_state.json opens
    // with a lone '{' and needs its "log_history" key found.
    const auto end = text.substr(0, nl).find_last_not_of(" \t\r");
    return end != std::string_view::npos && end > 0 && text[end] == '}';
  }
  return text.find('\n', nl + 1) != std::string_view::npos;
}

std::optional<TraceFormat> detect_format(std::string_view bytes) {
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
  return std::nullopt;
}

}  // namespace trace_io

namespace {

constexpr std::size_t detect_bytes = 64 * 1024;

void unknown_format(const std::string& name, TraceError& error) {
  error = TraceError{name, 0, 0,
                     "unknown trace format (expected Vigil JSONL, TensorBoard event files, CSV "
                     "or a Hugging Face trainer_state.json)"};
}

}  // namespace

std::optional<TraceFormat> detect_trace_format(const std::string& path, TraceError& error) {
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec)) return TraceFormat::tensorboard;
  auto in = trace_io::Input::open(path, error);
  if (!in) return std::nullopt;
  while (!trace_io::format_decided(in->peeked()) && in->peek_more(detect_bytes)) {
  }
  auto format = trace_io::detect_format(in->peeked());
  if (!format) unknown_format(in->name(), error);
  return format;
}

std::unique_ptr<TraceReader> open_trace(const std::string& path, TraceError& error,
                                        const TraceOptions& options) {
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec))
    return open_tensorboard(path, error, options);
  // One open, one read: the reader gets the bytes detection looked at.
  auto in = trace_io::Input::open(path, error);
  if (!in) return nullptr;
  // A pipe is read only until its first bytes decide the format, so a live
  // producer (`train.py | rulecheck run r.rules --trace -`) is not held up.
  while (!trace_io::format_decided(in->peeked()) && in->peek_more(detect_bytes)) {
  }
  const auto format = trace_io::detect_format(in->peeked());
  in->set_follow(options.follow);
  if (!format) {
    if (in->failed()) error = TraceError{in->name(), 0, 0, in->failure()};
    else unknown_format(in->name(), error);
    return nullptr;
  }
  switch (*format) {
    case TraceFormat::jsonl: return trace_io::open_jsonl(std::move(in), error, options);
    case TraceFormat::tensorboard: return trace_io::open_tensorboard_file(std::move(in), error, options);
    case TraceFormat::csv: return trace_io::open_csv(std::move(in), error, options);
    case TraceFormat::hf_trainer_state:
      return trace_io::open_hf_trainer_state(std::move(in), error, options);
  }
  return nullptr;
}

}  // namespace vigil
