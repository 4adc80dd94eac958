// JSON value conventions shared by the JSON-based readers (Vigil JSONL,
// trainer_state.json). Internal to trace/; templates so that both
// nlohmann::json and nlohmann::ordered_json documents use them.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace vigil::trace_io {

bool overflows_double(std::string_view token);  // trace/io.hpp

/// A number, or one of the non-finite spellings "NaN", "Infinity",
/// "-Infinity" (what the bare tokens become once quoted); nullopt otherwise.
template <class Json>
std::optional<double> json_number(const Json& v) {
  if (v.is_number()) return v.template get<double>();
  if (v.is_string()) {
    const auto& s = v.template get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    // A literal too large for a double, quoted by quote_bare_non_finite.
    if (overflows_double(s)) return s.front() == '-' ? -std::numeric_limits<double>::infinity()
                                                     : std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

/// A step: an integer, or a float with an integral value (some writers only
/// have doubles: 12.0) within int64 range.
template <class Json>
bool json_step(const Json& v, std::int64_t& out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.template get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      return false;
    out = v.template get<std::int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.template get<double>();
    // 2^63 is exactly representable; anything at or above it is out of range.
    if (!std::isfinite(d) || d != std::floor(d) || d < -9223372036854775808.0 ||
        d >= 9223372036854775808.0)
      return false;
    out = static_cast<std::int64_t>(d);
    return true;
  }
  return false;
}

/// nlohmann's message without its "[json.exception...] parse error at line
/// 1, column 5: " prefix (positions are reported the reader's own way).
inline std::string short_json_error(std::string_view what) {
  if (auto pos = what.find("] "); pos != std::string_view::npos) what.remove_prefix(pos + 2);
  if (auto pos = what.find(": "); pos != std::string_view::npos && what.starts_with("parse error"))
    what.remove_prefix(pos + 2);
  return std::string(what);
}

/// A key that appears twice in one JSON object.
struct DuplicateKey {
  std::string key;
  std::size_t offset = 0;  // of the second occurrence's opening quote in the text
};

namespace detail {

/// Forwards every SAX event to nlohmann's DOM builder and stops at the first
/// key already present in the object being read (nlohmann would silently
/// keep the last one). Key sets are hashed: a hostile object with many keys
/// stays linear.
template <class Json>
class StrictSax {
 public:
  explicit StrictSax(Json& out) : dom_(out, /*allow_exceptions=*/true) {}
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    ++key_count_;
    if (!keys_.back().insert(k).second) {
      duplicate_ = k;
      return false;
    }
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return dom_.start_array(n); }
  bool end_array() { return dom_.end_array(); }
  template <class Exception>
  bool parse_error(std::size_t pos, const std::string& token, const Exception& ex) {
    return dom_.parse_error(pos, token, ex);  // throws ex, as Json::parse does
  }

  std::optional<std::string> duplicate_;
  std::size_t key_count_ = 0;  // keys seen, the duplicate included

 private:
  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::vector<std::unordered_set<std::string>> keys_;
};

/// The offset of the opening quote of the `n`th (1-based) object key in
/// `text`: a string followed by ':' (JSON syntax makes that unambiguous).
inline std::size_t nth_key_offset(std::string_view text, std::size_t n) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '"') continue;
    const std::size_t begin = i;
    for (++i; i < text.size() && text[i] != '"'; ++i)
      if (text[i] == '\\') ++i;
    std::size_t j = i + 1;
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r'))
      ++j;
    if (j < text.size() && text[j] == ':' && --n == 0) return begin;
  }
  return 0;
}

}  // namespace detail

/// Json::parse(text), except that a key repeated within one object is
/// returned (with its position) instead of one of its values being kept
/// silently. Throws Json's parse_error on malformed text, as parse does.
template <class Json>
std::optional<DuplicateKey> parse_strict(std::string_view text, Json& out) {
  detail::StrictSax<Json> sax(out);
  if (Json::sax_parse(text, &sax) || !sax.duplicate_) return std::nullopt;
  return DuplicateKey{*sax.duplicate_, detail::nth_key_offset(text, sax.key_count_)};
}

}  // namespace vigil::trace_io
