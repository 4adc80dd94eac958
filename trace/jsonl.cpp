// Vigil JSONL traces (SPEC §6): one observation per line,
//   {"step": 12, "mode": "train", "time": 1732871234.25, "values": {"loss": 0.53}}
//
// The reader streams line by line (never loads the file), validates every
// field and stops at the first damaged line with an error naming the file,
// the 1-based line and the byte offset where that line starts; every record
// before it has already been handed out.

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "trace/io.hpp"
#include "trace/json_values.hpp"
#include "vigil/trace.hpp"

namespace vigil {

std::string TraceError::format() const {
  if (line != 0) return fmt::format("{}:{}: {}", file, line, message);
  return fmt::format("{}: byte {}: {}", file, offset, message);
}

namespace {

using nlohmann::json;

// Bare NaN / Infinity tokens (Python's json) are quoted before parsing; the
// helpers are shared with the trainer_state.json reader (trace/io.hpp).
using trace_io::original_position;
using trace_io::quote_bare_non_finite;

// A sample value: a JSON number, or one of the three non-finite spellings.
// null means "no sample"; returns false for anything else.
bool sample_value(const json& v, std::optional<double>& out) {
  out = trace_io::json_number(v);
  return out.has_value() || v.is_null();
}


class JsonlReader final : public TraceReader {
 public:
  JsonlReader(std::string path, std::ifstream in, std::uint64_t size, bool follow)
      : path_(std::move(path)), in_(std::move(in)), size_(size), follow_(follow) {}

  bool next(Observation& out) override {
    if (error_) return false;
    // Following: the end of an earlier call was only the end of what had been
    // written by then; clearing eof lets getline see what was appended since.
    if (follow_) in_.clear();
    while (std::getline(in_, line_)) {
      const bool had_newline = !in_.eof();
      if (follow_) {
        // A last line without its newline is still being written: keep its
        // bytes (getline consumed them) until the rest arrives.
        if (!had_newline) {
          partial_ += line_;
          break;
        }
        if (!partial_.empty()) {
          line_.insert(0, partial_);
          partial_.clear();
        }
      }
      const std::uint64_t line_start = consumed_;
      consumed_ += line_.size() + (had_newline ? 1 : 0);
      if (consumed_ > size_) size_ = consumed_;  // grown since the last look (follow)
      ++line_no_;
      std::string_view text = line_;
      if (line_no_ == 1 && text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 BOM
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      if (text.find_first_not_of(" \t\r\f\v") == std::string_view::npos) continue;
      return parse_line(text, line_start, out);
    }
    if (in_.bad()) return fail(consumed_, fmt::format("read error: {}", std::strerror(errno)));
    if (follow_) {
      // The file grows while it is followed: keep size() current for progress.
      std::error_code ec;
      const auto now = std::filesystem::file_size(path_, ec);
      if (!ec) size_ = static_cast<std::uint64_t>(now);
    }
    return false;
  }

  [[nodiscard]] std::uint64_t position() const override { return consumed_; }
  [[nodiscard]] std::uint64_t size() const override { return size_; }

 private:
  bool fail(std::uint64_t line_start, std::string message) {
    error_ = TraceError{path_, line_no_, line_start, std::move(message)};
    return false;
  }

  bool parse_line(std::string_view text, std::uint64_t line_start, Observation& out) {
    std::string_view source = text;
    if (quote_bare_non_finite(text, rewritten_, shifts_)) source = rewritten_;
    json j;
    try {
      j = json::parse(source);
    } catch (const json::parse_error& e) {
      const std::size_t column = original_position(e.byte == 0 ? 0 : e.byte - 1, shifts_) + 1;
      std::string message = trace_io::short_json_error(e.what());
      // A last line without newline whose parse failed at its very end was cut
      // off mid-record (a crash while writing): the common damage, named as such.
      if (in_.eof() && e.byte >= source.size())
        return fail(line_start, "truncated record (unexpected end of line)");
      return fail(line_start, fmt::format("invalid json at column {}: {}", column, message));
    } catch (const json::exception& e) {
      return fail(line_start, fmt::format("invalid json: {}", trace_io::short_json_error(e.what())));
    }
    if (!j.is_object()) return fail(line_start, "expected a json object");

    Observation obs;
    bool has_step = false;
    for (const auto& [key, value] : j.items()) {
      if (key == "step") {
        if (!trace_io::json_step(value, obs.step)) return fail(line_start, "\"step\" must be an integer");
        has_step = true;
      } else if (key == "mode") {
        if (!value.is_string() || value.get_ref<const std::string&>().empty())
          return fail(line_start, "\"mode\" must be a non-empty string");
        obs.mode = value.get<std::string>();
      } else if (key == "time") {
        if (value.is_null()) continue;  // explicitly "no time"
        if (!value.is_number()) return fail(line_start, "\"time\" must be a number");
        obs.time = value.get<double>();
      } else if (key == "values") {
        if (!value.is_object()) return fail(line_start, "\"values\" must be an object");
        obs.values.reserve(value.size());
        for (const auto& [series, sample] : value.items()) {
          if (series.empty()) return fail(line_start, "empty series name in \"values\"");
          std::optional<double> v;
          if (!sample_value(sample, v))
            return fail(line_start,
                        fmt::format("value of '{}' must be a number, \"NaN\", \"Infinity\", "
                                    "\"-Infinity\" or null",
                                    series));
          if (v) obs.values.emplace_back(series, *v);
        }
      } else {
        return fail(line_start, fmt::format("unknown field \"{}\"", key));
      }
    }
    if (!has_step) return fail(line_start, "missing \"step\"");
    out = std::move(obs);
    return true;
  }

  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
  bool follow_ = false;
  std::string partial_;  // following: bytes of a last line whose newline has not arrived yet
  std::uint64_t consumed_ = 0;
  std::uint64_t line_no_ = 0;
  std::string line_;
  std::string rewritten_;  // reused: the line with bare NaN/Infinity quoted
  std::vector<std::size_t> shifts_;
};

}  // namespace

std::unique_ptr<TraceReader> open_jsonl(const std::string& path, TraceError& error,
                                        const TraceOptions& options) {
  std::ifstream in;
  std::uint64_t size = 0;
  if (!trace_io::open_file(path, in, size, error)) return nullptr;
  return std::make_unique<JsonlReader>(path, std::move(in), size, options.follow);
}

std::unique_ptr<JsonlWriter> JsonlWriter::create(const std::string& path, TraceError& error,
                                                 bool append) {
  std::FILE* f = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (f == nullptr) {
    error = TraceError{path, 0, 0, fmt::format("cannot open for writing: {}", std::strerror(errno))};
    return nullptr;
  }
  return std::unique_ptr<JsonlWriter>(new JsonlWriter(path, f));
}

JsonlWriter::~JsonlWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

bool JsonlWriter::write(const Observation& obs) {
  if (error_) return false;
  std::string line = to_jsonl(obs);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    error_ = TraceError{path_, 0, written_, fmt::format("write failed: {}", std::strerror(errno))};
    return false;
  }
  written_ += line.size();
  return true;
}

std::string to_jsonl(const Observation& obs) {
  auto number = [](double v) -> nlohmann::ordered_json {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    return v;
  };
  nlohmann::ordered_json j;
  j["step"] = obs.step;
  j["mode"] = obs.mode;
  if (std::isfinite(obs.time)) j["time"] = obs.time;
  auto& values = j["values"] = nlohmann::ordered_json::object();
  for (const auto& [key, value] : obs.values) values[key] = number(value);
  return j.dump();
}

}  // namespace vigil
