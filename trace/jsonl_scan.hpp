// The JSONL reader's first parser: a one-pass scanner for a record in the
// plainest spelling, which is every line Vigil, Python's json and most
// loggers write. Internal to trace/; a header so that the reader inlines it
// and tests/trace/jsonl_scan_test.cpp can hold it to the general parser.
//
// It accepts a line only if the reader's other parsers (simdjson's DOM, then
// nlohmann) would accept it with the same meaning; anything it is not sure of
// it declines, and the line goes to them as before. So it changes no result
// and no error, only the cost of ordinary lines: simdjson's per-document
// work (two stages, a tape) is several times the ~90 bytes of such a line.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <system_error>
#include <vector>

#include <fast_float/fast_float.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "trace/number.hpp"

namespace vigil::trace_io {

struct ScannedLine {
  std::int64_t step = 0;
  std::string_view mode;  // empty: the field is absent
  double time = std::numeric_limits<double>::quiet_NaN();
  struct Sample {
    std::string_view key;
    double value;
  };
  std::vector<Sample> values;  // in the line's order
};

namespace scan_detail {

inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

struct Cursor {
  const char* p;
  const char* end;
  [[gnu::always_inline]] void skip_ws() {
    // Most writers put no blank between tokens: one test for that case.
    if (p == end || static_cast<unsigned char>(*p) > ' ') return;
    while (p != end && is_ws(*p)) ++p;
  }
  [[gnu::always_inline]] bool eat(char c) {
    if (p == end || *p != c) return false;
    ++p;
    return true;
  }
};

// A string of printable ASCII without escapes ('"' and '\\' excluded): its
// bytes are its value, to every parser. Anything else (escapes, UTF-8,
// control bytes) is declined, as the parsers disagree on what is valid.
// Per byte: 0 a plain string byte, 1 the closing quote, 2 anything else.
struct StringBytes {
  unsigned char kind[256];
  constexpr StringBytes() : kind() {
    for (int b = 0; b < 256; ++b) kind[b] = b < 0x20 || b >= 0x7F || b == '\\' ? 2 : b == '"' ? 1 : 0;
  }
};
inline constexpr StringBytes string_bytes;

[[gnu::always_inline]] inline bool plain_string(Cursor& c, std::string_view& out) {
  if (!c.eat('"')) return false;
  const char* start = c.p;
  const char* q = c.p;
#if defined(__SSE2__)
  // 16 bytes at a time while 16 are left: a bit per byte that is not a
  // plain string byte (as signed bytes, 0x80-0xFF are below ' ' too).
  for (; c.end - q >= 16; q += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m128i special =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('"')), _mm_cmpeq_epi8(b, _mm_set1_epi8('\\'))),
                     _mm_or_si128(_mm_cmplt_epi8(b, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(b, _mm_set1_epi8(0x7F))));
    if (const auto mask = static_cast<unsigned>(_mm_movemask_epi8(special)); mask != 0) {
      q += std::countr_zero(mask);
      goto found;
    }
  }
#endif
  while (q != c.end && string_bytes.kind[static_cast<unsigned char>(*q)] == 0) ++q;
#if defined(__SSE2__)
found:
#endif
  if (q == c.end || *q != '"') return false;
  out = std::string_view(start, static_cast<std::size_t>(q - start));
  c.p = q + 1;
  return true;
}

// A step: a JSON integer of up to 18 digits, an exact int64 as both parsers
// read it ("-0", which they may not read alike, and floats are declined).
inline bool integer(Cursor& c, std::int64_t& out) {
  const char* q = c.p;
  const bool negative = q != c.end && *q == '-';
  if (negative) ++q;
  if (q == c.end || !is_digit(*q)) return false;
  const char* digits = q;
  std::uint64_t u = 0;
  if (*q == '0') ++q;
  else q = detail::digits(q, c.end, u);  // exact up to 19 digits
  if (q - digits > 18 || (q != c.end && (*q == '.' || *q == 'e' || *q == 'E'))) return false;
  const auto v = static_cast<std::int64_t>(u);
  if (negative && v == 0) return false;
  out = negative ? -v : v;
  c.p = q;
  return true;
}

// A JSON number (RFC 8259 grammar) as a double: fast_float's correctly
// rounded reading, which is simdjson's and nlohmann's too (an integer
// below 2^63 included: converting the exact int64 rounds the same way).
// fast_float's own syntax is wider than JSON's only at the start (".5",
// "01", words) and after a '.' ("1.", "1.e5"): those are checked here, so
// the digits are scanned once. Declined: integers of more than 18 digits,
// results that overflow (simdjson refuses 1e999, the general path reads it
// as infinity), underflow to zero, or are -0 (which the parsers may not
// read alike).
inline bool number(Cursor& c, double& out) {
  const char* q = c.p;
  if (q != c.end && *q == '-') ++q;
  if (q == c.end || !is_digit(*q)) return false;
  if (*q == '0' && q + 1 != c.end && is_digit(q[1])) return false;
  // Nearly every number: fast_decimal's one pass (trace/number.hpp), which
  // takes only JSON's spelling after the leading-zero check above and
  // returns fast_float's bits. Zero, infinity and long integers go on to the
  // checks below.
  if (const char* e = fast_decimal(c.p, c.end, out); e != nullptr && out != 0 && !std::isinf(out)) {
    bool long_integer = e - q > 18;
    for (const char* d = q; long_integer && d != e; ++d) long_integer = is_digit(*d);
    if (!long_integer) {
      c.p = e;
      return true;
    }
  }
  const auto [ptr, ec] = fast_float::from_chars(c.p, c.end, out);
  if (ec != std::errc{}) return false;
  const auto n = static_cast<std::size_t>(ptr - q);
  const auto* dot = static_cast<const char*>(std::memchr(q, '.', n));
  if (dot != nullptr && (dot + 1 == ptr || !is_digit(dot[1]))) return false;
  if (dot == nullptr && n > 18 && std::memchr(q, 'e', n) == nullptr && std::memchr(q, 'E', n) == nullptr)
    return false;
  if (std::isinf(out)) return false;
  if (out == 0) {  // rare: -0, or an underflow (a non-zero digit before the exponent)
    if (std::signbit(out)) return false;
    for (const char* d = q; d != ptr && *d != 'e' && *d != 'E'; ++d)
      if (*d >= '1' && *d <= '9') return false;
  }
  c.p = ptr;
  return true;
}

enum class Field { unknown, step, mode, time, values };

// Up to 8 bytes as a little-endian word (a literal compared with one load).
constexpr std::uint64_t word_of(std::string_view s) {
  std::uint64_t w = 0;
  for (std::size_t i = 0; i < s.size(); ++i) w |= std::uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
  return w;
}

// A field name: its literal bytes compared 8 at a time when the line has 8
// left (every known name with its quotes fits), else the string read and
// compared. The same result either way: a literal match is exactly the
// string plain_string would read.
[[gnu::always_inline]] inline Field field_name(Cursor& c) {
  if constexpr (std::endian::native == std::endian::little) {
    if (c.end - c.p >= 8) {
      constexpr std::uint64_t step = word_of("\"step\""), mode = word_of("\"mode\""),
                              time = word_of("\"time\""), values = word_of("\"values\"");
      std::uint64_t w;
      std::memcpy(&w, c.p, 8);
      const std::uint64_t six = w & ((std::uint64_t{1} << 48) - 1);
      Field f = Field::unknown;
      if (six == step) f = Field::step;
      else if (six == mode) f = Field::mode;
      else if (six == time) f = Field::time;
      if (f != Field::unknown) {
        c.p += 6;
        return f;
      }
      if (w == values) {
        c.p += 8;
        return Field::values;
      }
    }
  }
  std::string_view name;
  if (!plain_string(c, name)) return Field::unknown;
  if (name == "step") return Field::step;
  if (name == "mode") return Field::mode;
  if (name == "time") return Field::time;
  if (name == "values") return Field::values;
  return Field::unknown;
}

// A sample: a number, or exactly "NaN", "Infinity" or "-Infinity".
inline bool sample(Cursor& c, double& out) {
  if (c.p != c.end && *c.p == '"') {
    std::string_view s;
    if (!plain_string(c, s)) return false;
    if (s == "NaN") out = std::numeric_limits<double>::quiet_NaN();
    else if (s == "Infinity") out = std::numeric_limits<double>::infinity();
    else if (s == "-Infinity") out = -std::numeric_limits<double>::infinity();
    else return false;
    return true;
  }
  return number(c, out);
}

}  // namespace scan_detail

/// True with `out` filled if `text` is a record in the plain spelling: an
/// object of "step" (an integer of up to 18 digits), optional "mode" (a
/// non-empty string), "time" (a number or null) and "values" (an object of
/// numbers and "NaN" / "Infinity" / "-Infinity" strings), each at most once,
/// strings of printable ASCII without escapes, JSON whitespace anywhere
/// between tokens and nothing after the object. False declines the line (it
/// may still be valid: the reader's other parsers judge it). Values come in
/// the line's order; repeated keys in "values" are left to the caller.
inline bool scan_plain_line(std::string_view text, ScannedLine& out) {
  using namespace scan_detail;
  Cursor c{text.data(), text.data() + text.size()};
  out.mode = {};
  out.time = std::numeric_limits<double>::quiet_NaN();
  out.values.clear();
  c.skip_ws();
  if (!c.eat('{')) return false;
  unsigned seen = 0;
  for (;;) {
    c.skip_ws();
    const Field field = field_name(c);
    if (field == Field::unknown) return false;
    c.skip_ws();
    if (!c.eat(':')) return false;
    c.skip_ws();
    unsigned bit;
    if (field == Field::step) {
      bit = 1;
      if (!integer(c, out.step)) return false;
    } else if (field == Field::values) {
      bit = 8;
      if (!c.eat('{')) return false;
      c.skip_ws();
      if (!c.eat('}')) {
        for (;;) {
          std::string_view key;
          if (!plain_string(c, key) || key.empty()) return false;
          c.skip_ws();
          if (!c.eat(':')) return false;
          c.skip_ws();
          double v;
          if (!sample(c, v)) return false;
          out.values.push_back({key, v});
          c.skip_ws();
          if (c.eat('}')) break;
          if (!c.eat(',')) return false;
          c.skip_ws();
        }
      }
    } else if (field == Field::mode) {
      bit = 2;
      if (!plain_string(c, out.mode) || out.mode.empty()) return false;
    } else {
      bit = 4;
      if (c.end - c.p >= 4 && std::memcmp(c.p, "null", 4) == 0) c.p += 4;
      else if (!number(c, out.time)) return false;
    }
    if ((seen & bit) != 0) return false;
    seen |= bit;
    c.skip_ws();
    if (c.eat('}')) break;
    if (!c.eat(',')) return false;
  }
  c.skip_ws();
  return c.p == c.end && (seen & 1) != 0;
}

}  // namespace vigil::trace_io
