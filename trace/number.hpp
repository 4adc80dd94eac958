// Number cells of the text readers (CSV). Internal to trace/; a header so
// that the reader's per-cell call is inlined, and so that
// tests/csvhf/number_test.cpp can hold it to the std::from_chars reading it
// replaced.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <system_error>

#include <fast_float/fast_float.h>

namespace vigil::trace_io {

/// `s` without leading and trailing spaces and tabs.
inline std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

namespace detail {
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
/// ASCII case-insensitive equality with a lower-case `word`.
inline bool equals_lower(std::string_view s, std::string_view word) {
  if (s.size() != word.size()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != word[i]) return false;
  }
  return true;
}
}  // namespace detail

/// A sample, after trim_blanks: an optional sign ('+' or '-'), then either a
/// decimal number (digits with an optional '.' and an optional exponent;
/// at least one digit before the exponent; no hex) or a non-finite word
/// (nan, inf, infinity, any case). Nothing else: no "nan(x)", no inner
/// blanks, no second sign. Overflowing literals (1e999) are ±inf as in
/// Python and strtod, underflowing ones (1e-999) ±0, not errors. The value is
/// the correctly rounded double, the same bits as std::from_chars or strtod
/// give (tests/csvhf/number_test.cpp compares them). fast_float, inlined
/// here, is what GCC 12's std::from_chars runs inside libstdc++, less the
/// call and its wrapper: 8% fewer instructions per cell.
inline bool parse_number(std::string_view text, double& out) {
  // Nearly every cell: digits (or '-' and digits) with no blank around
  // them, which is fast_float's syntax exactly: one call, no trimming. Any
  // other cell, or one fast_float stops short in, takes the general path.
  if (!text.empty() && (detail::is_digit(text[0]) ||
                        (text[0] == '-' && text.size() > 1 && detail::is_digit(text[1])))) {
    const auto [ptr, ec] = fast_float::from_chars(text.data(), text.data() + text.size(), out);
    if (ec == std::errc{} && ptr == text.data() + text.size()) return true;
  }
  std::string_view s = trim_blanks(text);
  std::string_view word = s;
  bool negative = false;
  if (!word.empty() && (word[0] == '+' || word[0] == '-')) {
    negative = word[0] == '-';
    word.remove_prefix(1);
  }
  if (word.empty()) return false;
  if (detail::is_digit(word[0]) || word[0] == '.') {
    // fast_float reads a leading '-' (not '+'), then the decimal syntax
    // above; it stops before anything else, so a cell with more is bad.
    if (s[0] == '+') s.remove_prefix(1);
    const auto [ptr, ec] = fast_float::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && ptr == s.data() + s.size();
  }
  if (detail::equals_lower(word, "nan")) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (detail::equals_lower(word, "inf") || detail::equals_lower(word, "infinity")) {
    out = negative ? -std::numeric_limits<double>::infinity()
                   : std::numeric_limits<double>::infinity();
    return true;
  }
  return false;
}

}  // namespace vigil::trace_io
