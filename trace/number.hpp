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

/// Digits from `p` on, appended to `w` (wrapping past 19 digits: the
/// caller counts them); returns the end of the run. Eight at a time while
/// eight digits follow, then one at a time. (Taking a shorter run's end in
/// one 8-byte load as well, padded with '0's, was measured slower: the
/// run's length is a data-dependent branch and shift.)
inline const char* digits(const char* p, const char* end, std::uint64_t& w) {
  while (end - p >= 8) {
    const std::uint64_t eight = fast_float::read_u64(p);
    if (!fast_float::is_made_of_eight_digits_fast(eight)) break;
    w = w * 100000000 + fast_float::parse_eight_digits_unrolled(eight);
    p += 8;
  }
  while (p != end && is_digit(*p)) w = w * 10 + static_cast<unsigned>(*p++ - '0');
  return p;
}

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

/// The common decimal spelling, read in one pass: `-?[0-9]+(\.[0-9]+)?`
/// then optionally `[eE][+-]?[0-9]+`, at most 19 digits in all, from `p` on
/// (what follows is the caller's to judge). Returns the end of the number
/// with `out` set, or nullptr to decline: no digit first, more than 19
/// digits, a '.' or an exponent without digits after it, or one of the rare
/// values Eisel-Lemire cannot decide alone. Whenever it returns non-null,
/// fast_float::from_chars(p, end) stops at the same byte with the same
/// bits: this is fast_float's own conversion (Clinger's fast path, else
/// compute_float and to_float, as in from_chars_advanced) without its digit
/// scan, which takes the integer and fraction digits one at a time except
/// for runs of eight (tests/csvhf/number_test.cpp and
/// tests/trace/jsonl_scan_test.cpp compare the two).
///
/// `nearest` must be fast_float::detail::rounds_to_nearest() (the thread's
/// rounding mode, which Clinger's path needs): a caller reading many numbers
/// at once asks once (the question is a volatile load and two float
/// operations, ~4% of the CSV reader when asked per number).
[[gnu::always_inline]] inline const char* fast_decimal(const char* p, const char* end, double& out, bool nearest) {
  const bool negative = p != end && *p == '-';
  if (negative) ++p;
  if (p == end || !detail::is_digit(*p)) return nullptr;
  std::uint64_t w = 0;
  const char* start = p;
  p = detail::digits(p, end, w);
  std::int64_t exponent = 0;
  // Significant digits: fast_float's limit of 19 does not count the zeros
  // that lead (0.000123 has three).
  std::size_t count = w == 0 ? 0 : static_cast<std::size_t>(p - start);
  if (p != end && *p == '.') {
    const char* fraction = ++p;
    if (w == 0)
      while (p != end && *p == '0') ++p;
    const char* significant = p;
    p = detail::digits(p, end, w);
    if (p == fraction) return nullptr;
    exponent = fraction - p;
    count += static_cast<std::size_t>(p - significant);
  }
  if (count > 19) return nullptr;
  if (p != end && (*p == 'e' || *p == 'E')) {
    ++p;
    const bool minus = p != end && *p == '-';
    if (p != end && (*p == '-' || *p == '+')) ++p;
    if (p == end || !detail::is_digit(*p)) return nullptr;
    std::int64_t e = 0;
    for (; p != end && detail::is_digit(*p); ++p) {
      if (e > 100000) return nullptr;  // far past any double: fast_float's to judge
      e = e * 10 + (*p - '0');
    }
    exponent += minus ? -e : e;
  }
  using format = fast_float::binary_format<double>;
  if (exponent >= format::min_exponent_fast_path() && exponent <= format::max_exponent_fast_path() &&
      w <= format::max_mantissa_fast_path()) {
    // fast_float takes another path when the thread does not round to nearest.
    if (!nearest) return nullptr;
    out = static_cast<double>(w);
    if (exponent < 0) out = out / format::exact_power_of_ten(-exponent);
    else out = out * format::exact_power_of_ten(exponent);
    if (negative) out = -out;
    return p;
  }
  const fast_float::adjusted_mantissa am = fast_float::compute_float<format>(exponent, w);
  if (am.power2 < 0) return nullptr;  // needs fast_float's digit comparison
  fast_float::to_float(negative, am, out);
  return p;
}

/// fast_decimal, asking for the rounding mode itself.
[[gnu::always_inline]] inline const char* fast_decimal(const char* p, const char* end, double& out) {
  return fast_decimal(p, end, out, fast_float::detail::rounds_to_nearest());
}

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
  // fast_decimal first (one pass over the digits), fast_float for what it
  // declines.
  if (!text.empty() && (detail::is_digit(text[0]) ||
                        (text[0] == '-' && text.size() > 1 && detail::is_digit(text[1])))) {
    const char* end = text.data() + text.size();
    if (fast_decimal(text.data(), end, out) == end) return true;
    const auto [ptr, ec] = fast_float::from_chars(text.data(), end, out);
    if (ec == std::errc{} && ptr == end) return true;
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
