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

namespace vigil::trace_io {

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

}  // namespace vigil::trace_io
