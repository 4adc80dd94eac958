// Vigil JSONL traces (SPEC §6): one observation per line,
//   {"step": 12, "mode": "train", "time": 1732871234.25, "values": {"loss": 0.53}}
//
// The reader streams line by line (never loads the file), validates every
// field and stops at the first damaged line with an error naming the file,
// the 1-based line and the byte offset where that line starts; every record
// before it has already been handed out.
//
// Two parsers, one meaning. Every line first goes to simdjson's DOM parser
// (SIMD, parsing in place in the read buffer, no allocation once warm) and is
// accepted there only if it is an ordinary record: the four known fields,
// each once, numbers and the three non-finite strings as values. Anything
// else (a syntax error, a duplicate key, bare NaN, 1e999, a null value, an
// unknown field) goes to the general path below, nlohmann with its strict
// SAX, which accepts it the same way or reports the error with its position,
// exactly as the reader always has. simdjson is the stricter of the two
// (lone surrogate escapes, out-of-range numbers): what it rejects the general
// path judges.

#include <cctype>
#include <cerrno>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "trace/input.hpp"
#include "trace/io.hpp"
#include "trace/json_values.hpp"
#include "trace/jsonl_scan.hpp"
#include "trace/key_table.hpp"
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
  JsonlReader(std::unique_ptr<trace_io::Input> in, const TraceOptions& options)
      : in_(std::move(in)),
        path_(in_->name()),
        size_(in_->size()),
        follow_(options.follow),
        max_line_(options.max_line_bytes),
        options_(options) {}

  bool next(Observation& out) override { return next_from_keyed(out); }

  bool next_keyed(KeyedObservation& out) override {
    if (error_) return false;
    for (;;) {
      std::string_view line;
      if (!next_line(line)) return false;
      const std::uint64_t line_start = consumed_;
      consumed_ += line.size() + (line_has_newline_ ? 1 : 0);
      if (consumed_ > size_) size_ = consumed_;  // grown since the last look (follow), or a pipe
      ++line_no_;
      std::string_view text = line;
      if (line_no_ == 1 && text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 BOM
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      if (text.find_first_not_of(" \t\r\f\v") == std::string_view::npos) continue;
      if (!parse_line(text, line_start, out)) return false;
      // Every record's keys are kept (ids are stable): bounded here, checked
      // when a line added a key or a mode (the tables only grow).
      if (const std::size_t known = keys_->size() + modes_->size(); known != checked_keys_) [[unlikely]] {
        checked_keys_ = known;
        if (auto limit = key_limit_error(options_); !limit.empty()) return fail(line_start, std::move(limit));
      }
      return true;
    }
  }

  [[nodiscard]] std::uint64_t position() const override { return consumed_; }
  [[nodiscard]] std::uint64_t size() const override { return size_; }

 private:
  /// The next line (without its newline) into `line`, a view of buf_ valid
  /// until the next call. False at the end of the data (following: of what
  /// is written so far; an unterminated last line stays buffered) or at an
  /// error. The buffer never holds more than one line of max_line_ bytes
  /// plus one chunk, so memory is bounded whatever the input.
  bool next_line(std::string_view& line) {
    for (;;) {
      const std::size_t nl = buf_.find('\n', scan_);
      if (nl != std::string::npos) {
        if (nl - pos_ > max_line_) return too_long();
        line = std::string_view(buf_).substr(pos_, nl - pos_);
        line_has_newline_ = true;
        pos_ = scan_ = nl + 1;
        return true;
      }
      scan_ = buf_.size();
      if (buf_.size() - pos_ > max_line_) return too_long();
      if (!fill()) {
        if (in_->failed()) return fail(consumed_, in_->failure());
        // Following: a last line without its newline is still being written.
        if (follow_ || pos_ == buf_.size()) {
          if (follow_) size_ = std::max(size_, in_->size());  // keep progress current
          return false;
        }
        line = std::string_view(buf_).substr(pos_);
        line_has_newline_ = false;
        at_end_ = true;
        pos_ = scan_ = buf_.size();
        return true;
      }
    }
  }

  /// Appends one chunk of input to buf_ (first dropping consumed bytes);
  /// false if nothing came.
  bool fill() {
    constexpr std::size_t chunk = 64 * 1024;
    if (pos_ > 0) {
      buf_.erase(0, pos_);
      scan_ -= pos_;
      pos_ = 0;
    }
    const std::size_t old = buf_.size();
    // simdjson reads up to SIMDJSON_PADDING bytes past a line's end: the
    // buffer's capacity always leaves that much room after its data.
    buf_.reserve(old + chunk + simdjson::SIMDJSON_PADDING);
    buf_.resize(old + chunk);
    const std::size_t got = in_->read(buf_.data() + old, chunk);
    buf_.resize(old + got);
    return got > 0;
  }

  bool too_long() {
    ++line_no_;
    return fail(consumed_, fmt::format("line longer than {} bytes (the --max-line limit; see "
                                       "docs/limits.md)",
                                       max_line_));
  }

  bool fail(std::uint64_t line_start, std::string message) {
    error_ = TraceError{path_, line_no_, line_start, std::move(message)};
    return false;
  }

  /// The fast path: true with `out` filled if `text` is an ordinary record
  /// (see the top of the file); false leaves `out` alone and the line to
  /// parse_line's general path.
  bool parse_ordinary(std::string_view text, KeyedObservation& out) {
    // The plain spelling first (trace/jsonl_scan.hpp): one pass, no tape.
    if (trace_io::scan_plain_line(text, scanned_)) {
      KeyedObservation& o = scratch_;
      o.step = scanned_.step;
      o.mode = scanned_.mode.empty() ? 0 : modes_->intern(scanned_.mode);
      o.time = scanned_.time;
      o.values.clear();
      for (const auto& sample : scanned_.values) o.values.push_back({keys_->intern(sample.key), sample.value});
      return hand_out(out);
    }
    const auto offset = static_cast<std::size_t>(text.data() - buf_.data());
    if (buf_.capacity() < offset + text.size() + simdjson::SIMDJSON_PADDING) return false;
    // A huge line leaves the parser with buffers its size: give them back.
    if (text.size() > (std::size_t{16} << 20)) release_parser_ = true;
    simdjson::dom::element doc;
    if (parser_.parse(text.data(), text.size(), false).get(doc)) return false;
    simdjson::dom::object fields;
    if (doc.get_object().get(fields)) return false;
    KeyedObservation& o = scratch_;
    o.step = 0;
    o.mode = 0;  // "train"
    o.time = std::numeric_limits<double>::quiet_NaN();
    o.values.clear();  // keeps its capacity: no allocation once warm
    unsigned seen = 0;
    for (const auto field : fields) {
      const std::string_view key = field.key;
      const simdjson::dom::element value = field.value;
      unsigned bit;
      if (key == "step") {
        bit = 1;
        if (!ordinary_step(value, o.step)) return false;
      } else if (key == "mode") {
        bit = 2;
        std::string_view mode;
        if (value.get_string().get(mode) || mode.empty()) return false;
        o.mode = modes_->intern(mode);
      } else if (key == "time") {
        bit = 4;
        if (!value.is_null() && !ordinary_number(value, o.time)) return false;
      } else if (key == "values") {
        bit = 8;
        simdjson::dom::object values;
        if (value.get_object().get(values)) return false;
        for (const auto sample : values) {
          double v;
          if (sample.key.empty() || !ordinary_sample(sample.value, v)) return false;
          // The key's bytes (unescaped by simdjson) are looked up in the
          // reader's table: a cache hit compares its length and first and
          // last 8 bytes, and no name is copied.
          o.values.push_back({keys_->intern(sample.key), v});
        }
      } else {
        return false;
      }
      if ((seen & bit) != 0) return false;  // a duplicate key
      seen |= bit;
    }
    if ((seen & 1) == 0) return false;
    return hand_out(out);
  }

  /// Hands scratch_ out as `out` (swapped: `out`'s buffers are reused for the
  /// next line), its values in key order; false if a key is repeated.
  bool hand_out(KeyedObservation& out) {
    KeyedObservation& o = scratch_;
    // The general path hands series out in key order (nlohmann's objects
    // are sorted maps); sorted, a repeated series name is a neighbour, and
    // one name is one id.
    if (o.values.size() > 1) {
      auto by_name = [&](const KeyedSample& a, const KeyedSample& b) {
        return a.key != b.key && keys_->name(a.key) < keys_->name(b.key);
      };
      if (!std::is_sorted(o.values.begin(), o.values.end(), by_name))
        std::sort(o.values.begin(), o.values.end(), by_name);
      for (std::size_t i = 1; i < o.values.size(); ++i)
        if (o.values[i - 1].key == o.values[i].key) return false;
    }
    std::swap(out, o);  // `out`'s old buffers are reused for the next line
    return true;
  }

  /// A JSON number as the general path reads it (integers converted).
  static bool ordinary_number(const simdjson::dom::element& v, double& out) {
    switch (v.type()) {
      case simdjson::dom::element_type::INT64: out = static_cast<double>(v.get_int64().value_unsafe()); return true;
      case simdjson::dom::element_type::UINT64: out = static_cast<double>(v.get_uint64().value_unsafe()); return true;
      case simdjson::dom::element_type::DOUBLE: out = v.get_double().value_unsafe(); return true;
      default: return false;
    }
  }

  /// A sample: a number or one of the non-finite strings (json_number's
  /// rules; null, which means "no sample", is left to the general path).
  static bool ordinary_sample(const simdjson::dom::element& v, double& out) {
    if (ordinary_number(v, out)) return true;
    std::string_view s;
    if (v.get_string().get(s)) return false;
    if (s == "NaN") out = std::numeric_limits<double>::quiet_NaN();
    else if (s == "Infinity") out = std::numeric_limits<double>::infinity();
    else if (s == "-Infinity") out = -std::numeric_limits<double>::infinity();
    else return false;
    return true;
  }

  /// json_step's rules: an int64, or a double with an integral value in range.
  static bool ordinary_step(const simdjson::dom::element& v, std::int64_t& out) {
    switch (v.type()) {
      case simdjson::dom::element_type::INT64: out = v.get_int64().value_unsafe(); return true;
      case simdjson::dom::element_type::DOUBLE: {
        const double d = v.get_double().value_unsafe();
        if (!std::isfinite(d) || d != std::floor(d) || d < -9223372036854775808.0 ||
            d >= 9223372036854775808.0)
          return false;
        out = static_cast<std::int64_t>(d);
        return true;
      }
      default: return false;
    }
  }

  bool parse_line(std::string_view text, std::uint64_t line_start, KeyedObservation& out) {
    const bool ordinary = parse_ordinary(text, out);
    if (release_parser_) {
      parser_ = simdjson::dom::parser();
      release_parser_ = false;
    }
    if (ordinary) return true;
    std::string_view source = text;
    if (quote_bare_non_finite(text, rewritten_, shifts_)) source = rewritten_;
    json j;
    try {
      if (const auto dup = trace_io::parse_strict(source, j))
        return fail(line_start,
                    fmt::format("duplicate key \"{}\" at column {}", dup->key,
                                original_position(dup->offset, shifts_) + 1));
    } catch (const json::parse_error& e) {
      const std::size_t column = original_position(e.byte == 0 ? 0 : e.byte - 1, shifts_) + 1;
      std::string message = trace_io::short_json_error(e.what());
      // A last line without newline whose parse failed at its very end was cut
      // off mid-record (a crash while writing): the common damage, named as such.
      if (at_end_ && e.byte >= source.size())
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
    out.step = obs.step;
    out.mode = modes_->intern(obs.mode);
    out.time = obs.time;
    out.values.clear();
    for (const auto& [series, value] : obs.values) out.values.push_back({keys_->intern(series), value});
    return true;
  }

  std::unique_ptr<trace_io::Input> in_;
  std::string path_;
  std::uint64_t size_ = 0;
  bool follow_ = false;
  std::uint64_t max_line_;
  TraceOptions options_;  // the key limits
  std::size_t checked_keys_ = 0;  // keys + modes when the limits were last checked
  std::string buf_;          // input bytes from the start of the current line on
  std::size_t pos_ = 0;      // start of the next line in buf_
  std::size_t scan_ = 0;     // buf_ before this holds no newline after pos_
  bool line_has_newline_ = false;
  bool at_end_ = false;      // the last line, which had no newline, was handed out
  std::uint64_t consumed_ = 0;
  std::uint64_t line_no_ = 0;
  simdjson::dom::parser parser_;  // the fast path's, reused from line to line
  bool release_parser_ = false;
  KeyedObservation scratch_;  // the fast path fills it, then swaps it with the caller's
  trace_io::ScannedLine scanned_;  // scan_plain_line's, reused
  std::string rewritten_;  // reused: the line with bare NaN/Infinity quoted
  std::vector<std::size_t> shifts_;
};

}  // namespace

namespace trace_io {
std::unique_ptr<TraceReader> open_jsonl(std::unique_ptr<Input> in, TraceError& /*error*/,
                                        const TraceOptions& options) {
  in->set_follow(options.follow);
  return std::make_unique<JsonlReader>(std::move(in), options);
}
}  // namespace trace_io

std::unique_ptr<TraceReader> open_jsonl(const std::string& path, TraceError& error,
                                        const TraceOptions& options) {
  auto in = trace_io::Input::open(path, error);
  if (!in) return nullptr;
  return trace_io::open_jsonl(std::move(in), error, options);
}

std::unique_ptr<JsonlWriter> JsonlWriter::create(const std::string& path, TraceError& error,
                                                 bool append) {
  // "e": close-on-exec, so no --exec child inherits the descriptor.
  std::FILE* f = std::fopen(path.c_str(), append ? "abe" : "wbe");
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
