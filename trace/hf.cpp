// Hugging Face `trainer_state.json` (SPEC §6): one JSON document whose
// top-level "log_history" array holds one object per Trainer log call:
//   {"epoch": 0.01, "learning_rate": 1.94e-06, "loss": 0.7504, "step": 100}
//   {"epoch": 1.0, "eval_loss": 0.31, "eval_wer": 12.5, "step": 900}
//
// Each entry is one observation: "step" is the step; every other numeric
// field is a series named as written ("epoch" too, so `for 2 epochs` works);
// non-numeric fields (strings, booleans, null, objects) are skipped. An entry
// with any "eval_*" key is an eval observation, any other a train one.
// Python writes non-finite floats as bare NaN / Infinity tokens: they are
// quoted before parsing and read as the non-finite values.
//
// Damage. The whole document is parsed once to find the first damage (its
// byte offset from nlohmann's parse_error). Independently, a small scanner
// that only follows strings and brackets locates each element of
// "log_history" with its byte range and line; every element that ends before
// the damage is parsed on its own and handed out, then the reader stops with
// the error (line and byte offset of the damage). So a file cut off while
// being written still yields every entry that was completely written.
// The file is read whole (Trainer rewrites it whole at each save, so it
// cannot be followed; `follow` is ignored).

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "trace/input.hpp"
#include "trace/io.hpp"
#include "trace/json_values.hpp"
#include "vigil/trace.hpp"

namespace vigil {

namespace {

using nlohmann::ordered_json;

struct Span {
  std::size_t begin = 0, end = 0;  // byte range of one element in the file
  std::uint64_t line = 0;          // 1-based line of `begin`
};

/// Walks the text following only strings and brackets (so it works on the
/// undamaged prefix of a broken document) and collects the byte ranges of the
/// complete elements of the top-level "log_history" array. `found` says
/// whether the array was seen at all.
class LogHistoryScanner {
 public:
  explicit LogHistoryScanner(std::string_view text) : text_(text) {}

  std::vector<Span> scan(bool& found) {
    std::vector<Span> spans;
    found = false;
    int depth = 0;
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (c == '"') {
        const std::size_t key_begin = i_ + 1;
        if (!skip_string()) return spans;
        const std::string_view key = text_.substr(key_begin, i_ - 1 - key_begin);
        if (depth == 1 && key == "log_history") {
          skip_space();
          if (i_ < text_.size() && text_[i_] == ':') {
            ++i_;
            skip_space();
            if (i_ < text_.size() && text_[i_] == '[') {
              ++i_;
              found = true;
              elements(spans);
              return spans;
            }
          }
        }
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      else if (c == '}' || c == ']') --depth;
      else if (c == '\n') ++line_;
      ++i_;
    }
    return spans;
  }

 private:
  void skip_space() {
    while (i_ < text_.size() && (text_[i_] == ' ' || text_[i_] == '\t' || text_[i_] == '\r' ||
                                 text_[i_] == '\n')) {
      if (text_[i_] == '\n') ++line_;
      ++i_;
    }
  }

  /// At an opening quote: moves past the closing one; false if none.
  bool skip_string() {
    for (++i_; i_ < text_.size(); ++i_) {
      if (text_[i_] == '\\') ++i_;
      else if (text_[i_] == '"') {
        ++i_;
        return true;
      } else if (text_[i_] == '\n') ++line_;
    }
    return false;
  }

  /// Inside the array: one span per complete element, up to ']' or the end.
  /// An element is whatever lies between separators at the array's depth.
  void elements(std::vector<Span>& spans) {
    for (;;) {
      skip_space();
      if (i_ >= text_.size() || text_[i_] == ']') return;
      if (text_[i_] == ',') {
        ++i_;
        continue;
      }
      Span span{i_, i_, line_};
      int depth = 0;
      bool complete = false;  // closed by its bracket, or followed by a separator
      while (i_ < text_.size()) {
        const char c = text_[i_];
        if (c == '"') {
          if (!skip_string()) return;
          continue;
        }
        if (depth == 0 && (c == ',' || c == ']')) {
          complete = true;
          break;
        }
        if (c == '{' || c == '[') ++depth;
        else if (c == '}' || c == ']') --depth;
        else if (c == '\n') ++line_;
        ++i_;
        if (depth == 0 && (c == '}' || c == ']')) {
          complete = true;
          break;
        }
      }
      if (!complete) return;  // cut off
      span.end = i_;
      spans.push_back(span);
    }
  }

  std::string_view text_;
  std::size_t i_ = 0;
  std::uint64_t line_ = 1;
};

std::uint64_t line_of(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<std::uint64_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}


class HfTrainerStateReader final : public TraceReader {
 public:
  HfTrainerStateReader(std::string path, std::string text, std::vector<Span> spans,
                       std::optional<TraceError> damage)
      : path_(std::move(path)),
        text_(std::move(text)),
        spans_(std::move(spans)),
        damage_(std::move(damage)) {
    description_ = fmt::format("trainer_state.json, {} log_history entries{}", spans_.size(),
                               damage_ ? " before the damage" : "");
  }

  bool next(Observation& out) override {
    if (error_) return false;
    if (next_ == spans_.size()) {
      if (damage_) error_ = damage_;
      position_ = damage_ ? damage_->offset : text_.size();
      return false;
    }
    const Span& span = spans_[next_++];
    position_ = span.end;
    const std::string_view element(text_.data() + span.begin, span.end - span.begin);
    std::string_view source = element;
    if (trace_io::quote_bare_non_finite(element, rewritten_, shifts_)) source = rewritten_;
    ordered_json entry;
    try {
      entry = ordered_json::parse(source);
    } catch (const ordered_json::exception& e) {
      // Only elements before the first damage of the whole document get here,
      // so this is not expected; still an error, never a crash.
      return fail(span, fmt::format("invalid json: {}", trace_io::short_json_error(e.what())));
    }
    if (!entry.is_object()) return fail(span, "log_history entry is not an object");

    Observation obs;
    bool has_step = false;
    for (const auto& [key, value] : entry.items()) {
      if (key == "step") {
        if (!trace_io::json_step(value, obs.step))
          return fail(span, "log_history entry: \"step\" must be an integer");
        has_step = true;
        continue;
      }
      const auto v = trace_io::json_number(value);
      if (!v) continue;  // strings, booleans, null, nested values
      if (key.starts_with("eval_")) obs.mode = "eval";
      obs.values.emplace_back(key, *v);
    }
    if (!has_step) return fail(span, "log_history entry has no \"step\"");
    out = std::move(obs);
    return true;
  }

  [[nodiscard]] std::uint64_t position() const override { return position_; }
  [[nodiscard]] std::uint64_t size() const override { return text_.size(); }
  [[nodiscard]] std::string describe() const override { return description_; }

 private:
  bool fail(const Span& span, std::string message) {
    error_ = TraceError{path_, span.line, span.begin, std::move(message)};
    return false;
  }

  std::string path_;
  std::string text_;
  std::vector<Span> spans_;
  std::optional<TraceError> damage_;  // reported after the last complete entry
  std::size_t next_ = 0;
  std::uint64_t position_ = 0;
  std::string description_;
  std::string rewritten_;  // reused scratch for quote_bare_non_finite
  std::vector<std::size_t> shifts_;
};

}  // namespace

namespace trace_io {
std::unique_ptr<TraceReader> open_hf_trainer_state(std::unique_ptr<Input> in, TraceError& error,
                                                   const TraceOptions& options) {
  const std::string path = in->name();
  std::string text;
  // Read whole (Trainer rewrites it whole); bounded all the same.
  if (!in->read_all(text, 4 * options.max_line_bytes, error)) return nullptr;

  // The first damage of the whole document, if any.
  std::optional<TraceError> damage;
  std::string rewritten;
  std::vector<std::size_t> shifts;
  const std::string_view source =
      trace_io::quote_bare_non_finite(text, rewritten, shifts) ? std::string_view(rewritten)
                                                               : std::string_view(text);
  ordered_json root;
  try {
    if (const auto dup = trace_io::parse_strict(source, root)) {
      const std::size_t at = trace_io::original_position(dup->offset, shifts);
      damage = TraceError{path, line_of(text, at), at,
                          fmt::format("duplicate key \"{}\"", dup->key)};
    }
  } catch (const ordered_json::parse_error& e) {
    // e.byte is 1-based: the byte at which parsing failed.
    const std::size_t at = trace_io::original_position(e.byte == 0 ? 0 : e.byte - 1, shifts);
    const auto line = line_of(text, at);
    const std::string message = e.byte >= source.size()
                                    ? std::string("truncated json (unexpected end of file)")
                                    : fmt::format("invalid json: {}", trace_io::short_json_error(e.what()));
    damage = TraceError{path, line, at, message};
  } catch (const ordered_json::exception& e) {
    damage = TraceError{path, 1, 0, fmt::format("invalid json: {}", trace_io::short_json_error(e.what()))};
  }
  if (!damage && !(root.is_object() && root.contains("log_history") &&
                   root["log_history"].is_array())) {
    error = TraceError{path, 1, 0, "no \"log_history\" array in trainer_state.json"};
    return nullptr;
  }

  bool found = false;
  std::vector<Span> spans = LogHistoryScanner(text).scan(found);
  if (damage) {
    const auto cut = std::find_if(spans.begin(), spans.end(),
                                  [&](const Span& s) { return s.end > damage->offset; });
    spans.erase(cut, spans.end());
    if (!found) {  // damaged before any log_history: nothing to read
      error = *damage;
      return nullptr;
    }
  }
  return std::make_unique<HfTrainerStateReader>(path, std::move(text), std::move(spans),
                                                std::move(damage));
}
}  // namespace trace_io

std::unique_ptr<TraceReader> open_hf_trainer_state(const std::string& path, TraceError& error,
                                                   const TraceOptions& options) {
  auto in = trace_io::Input::open(path, error);
  if (!in) return nullptr;
  return trace_io::open_hf_trainer_state(std::move(in), error, options);
}

}  // namespace vigil
