// The CSV reader's number cells (trace/number.hpp, fast_float) against the
// reading they replaced (std::from_chars with a strtod fallback on range
// errors, kept below verbatim as the reference): the same cells accepted,
// the same ones rejected, the same bits. Checked on every cell of the real
// CSVs in data/, on the shortest round-trip strings of random doubles of
// every magnitude, on random decimal strings (long mantissas, huge and tiny
// exponents, subnormals, signs, dots), on mutated cells and on the edge
// spellings the reader has always accepted or refused.

#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "trace/number.hpp"

namespace {

namespace fs = std::filesystem;

// ---- the reference: csv.cpp's parse_number before fast_float ----
std::string_view ref_trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
bool ref_iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}
bool reference_parse(std::string_view text, double& out) {
  std::string_view s = ref_trim(text);
  bool negative = false;
  std::string_view word = s;
  if (!word.empty() && (word[0] == '+' || word[0] == '-')) {
    negative = word[0] == '-';
    word.remove_prefix(1);
  }
  if (ref_iequals(word, "nan")) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (ref_iequals(word, "inf") || ref_iequals(word, "infinity")) {
    out = negative ? -std::numeric_limits<double>::infinity()
                   : std::numeric_limits<double>::infinity();
    return true;
  }
  if (word.empty() || !(std::isdigit(static_cast<unsigned char>(word[0])) || word[0] == '.'))
    return false;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ptr != s.data() + s.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    const std::string copy(s);
    out = std::strtod(copy.c_str(), nullptr);
    return true;
  }
  return ec == std::errc{};
}
// ----

/// Both readings of `cell` agree: accepted by both with the same bits (any
/// NaN matches any NaN: the reader makes one kind), or refused by both.
::testing::AssertionResult agree(std::string_view cell) {
  double want = -12345.0, got = -12345.0;
  const bool want_ok = reference_parse(cell, want);
  const bool got_ok = vigil::trace_io::parse_number(cell, got);
  if (want_ok != got_ok)
    return ::testing::AssertionFailure()
           << "'" << cell << "': reference " << (want_ok ? "accepts" : "refuses") << ", fast_float "
           << (got_ok ? "accepts" : "refuses");
  if (!want_ok) return ::testing::AssertionSuccess();
  if (std::isnan(want) && std::isnan(got)) return ::testing::AssertionSuccess();
  if (std::bit_cast<std::uint64_t>(want) != std::bit_cast<std::uint64_t>(got))
    return ::testing::AssertionFailure() << "'" << cell << "': reference " << want << " ("
                                         << std::hexfloat << want << "), fast_float " << got
                                         << " (" << got << ")" << std::defaultfloat;
  return ::testing::AssertionSuccess();
}

TEST(CsvNumbers, EdgeSpellingsKeepTodaysAcceptedSet) {
  // Accepted today: signs, words in any case, dots at either end, exponents
  // of any size (overflow to inf, underflow to 0), blanks around.
  const char* accepted[] = {
      "0", "-0", "+0", "1", "+1", "-1", "1.", ".5", "-.5", "+.5", "1.5e3", "1.5E+3", "1.5e-3",
      "00012", "0.000", "1e999", "-1e999", "+1e999", "1e-999", "-1e-999", "0e999999",
      "1e99999999999999999999", "4.9e-324", "2.4703282292062327e-324", "2.4703282292062328e-324",
      "2.2250738585072011e-308", "2.2250738585072014e-308", "1.7976931348623157e308",
      "1.7976931348623158e308", "1.7976931348623159e308", "9007199254740993",
      "123456789012345678901234567890", "0.1000000000000000055511151231257827021181583404541015625",
      "1e22", "1e23", "9007199254740992e22", "9007199254740993e-22", "-0.0", "0e-5", "0.e5",
      "1234567890123456789", "12345678901234567890", "00000000000000000001", "0.12345678",
      "12345678.12345678", "1234567812345678.5", "1.7976931348623157e+308", "5e-324", "1e-400",
      "nan", "NaN", "-nan", "+NAN", "inf", "-Inf", "+INF", "infinity", "-Infinity", "INFINITY",
      "  1.5", "1.5\t", " \t-2 "};
  for (const char* cell : accepted) {
    double v = 0;
    EXPECT_TRUE(vigil::trace_io::parse_number(cell, v)) << cell;
    EXPECT_TRUE(agree(cell));
  }
  // Refused today: hex, words with more, a second sign, inner blanks,
  // a dangling exponent, thousands separators, nothing.
  const char* refused[] = {
      "", " ", "+", "-", ".", "-.", "e5", ".e5", "0x1p3", "0x10", "1e", "1e+", "1e-", "1.5.2",
      "--1", "+-1", "-+1", "1 000", "1,5", "1_000", "nan(x)", "nan(123)", "nanx", "infin", "+-inf",
      "- 1", "1-", "1e5.5", "1ee5", "abc", "true", "1d5", "1f", "١"};
  for (const char* cell : refused) {
    double v = 0;
    EXPECT_FALSE(vigil::trace_io::parse_number(cell, v)) << cell;
    EXPECT_TRUE(agree(cell));
  }
  double v = 0;
  ASSERT_TRUE(vigil::trace_io::parse_number("1e999", v));
  EXPECT_EQ(v, std::numeric_limits<double>::infinity());
  ASSERT_TRUE(vigil::trace_io::parse_number("-1e-999", v));
  EXPECT_TRUE(v == 0 && std::signbit(v));
}

TEST(CsvNumbers, ShortestStringsOfRandomDoublesRoundTrip) {
  std::mt19937_64 rng(20261202);
  char buf[64];
  for (int i = 0; i < 400000; ++i) {
    // Every finite bit pattern is equally likely: all magnitudes, subnormals.
    double d = std::bit_cast<double>(rng());
    if (!std::isfinite(d)) continue;
    const auto fmt = i % 3 == 0 ? std::chars_format::general
                     : i % 3 == 1 ? std::chars_format::scientific
                                  : std::chars_format{};
    const char* end = fmt == std::chars_format{} ? std::to_chars(buf, buf + sizeof buf, d).ptr
                                                 : std::to_chars(buf, buf + sizeof buf, d, fmt).ptr;
    const std::string_view cell(buf, static_cast<std::size_t>(end - buf));
    double got = 0;
    ASSERT_TRUE(vigil::trace_io::parse_number(cell, got)) << cell;
    ASSERT_EQ(std::bit_cast<std::uint64_t>(got), std::bit_cast<std::uint64_t>(d)) << cell;
    ASSERT_TRUE(agree(cell));
  }
}

TEST(CsvNumbers, RandomDecimalStringsAgreeWithFromChars) {
  std::mt19937_64 rng(7);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  for (int i = 0; i < 300000; ++i) {
    std::string cell;
    if (pick(4) == 0) cell += pick(2) == 0 ? '-' : '+';
    const int int_digits = pick(5) == 0 ? pick(40) : pick(4);
    for (int k = 0; k < int_digits; ++k) cell += static_cast<char>('0' + pick(10));
    if (pick(2) == 0) {
      cell += '.';
      const int frac_digits = pick(5) == 0 ? pick(40) : pick(18);
      for (int k = 0; k < frac_digits; ++k) cell += static_cast<char>('0' + pick(10));
    }
    if (pick(2) == 0) {
      cell += pick(2) == 0 ? 'e' : 'E';
      if (pick(2) == 0) cell += pick(2) == 0 ? '-' : '+';
      cell += std::to_string(pick(3) == 0 ? pick(400) : pick(3) == 0 ? pick(100000) : pick(30));
    }
    ASSERT_TRUE(agree(cell));
  }
}

TEST(CsvNumbers, MutatedCellsAgreeWithFromChars) {
  // Valid cells with one byte changed, inserted or removed: the boundary
  // between accepted and refused is where the two could differ.
  static constexpr std::string_view alphabet = "0123456789+-.eEnNaAiIfFtTyYx \t,";
  const std::string seeds[] = {"1.5e-3", "-0.000123", "12345678901234567890.5", "inf", "-nan",
                               "Infinity", "3.14159", ".5", "7.", "1e308", "2e-308", "+42"};
  std::mt19937_64 rng(99);
  for (int i = 0; i < 200000; ++i) {
    std::string cell = seeds[rng() % std::size(seeds)];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = cell.empty() ? 0 : rng() % (cell.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          if (at < cell.size()) cell[at] = c;
          break;
        case 1: cell.insert(cell.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default:
          if (at < cell.size()) cell.erase(at, 1);
      }
    }
    ASSERT_TRUE(agree(cell));
  }
}

/// fast_decimal (the one-pass reading the CSV and JSONL readers try first)
/// on `text`: if it takes a number, fast_float must stop at the same byte
/// with the same bits.
::testing::AssertionResult decimal_agrees(std::string_view text) {
  double got = -12345.0, want = -12345.0;
  const char* end = text.data() + text.size();
  const char* p = vigil::trace_io::fast_decimal(text.data(), end, got);
  if (p == nullptr) return ::testing::AssertionSuccess();
  const auto [ptr, ec] = fast_float::from_chars(text.data(), end, want);
  if (ec != std::errc{} || ptr != p)
    return ::testing::AssertionFailure() << "'" << text << "': fast_decimal took "
                                         << (p - text.data()) << " bytes, fast_float "
                                         << (ec != std::errc{} ? -1 : ptr - text.data());
  if (std::bit_cast<std::uint64_t>(want) != std::bit_cast<std::uint64_t>(got))
    return ::testing::AssertionFailure() << "'" << text << "': fast_decimal " << std::hexfloat << got
                                         << ", fast_float " << want << std::defaultfloat;
  return ::testing::AssertionSuccess();
}

TEST(CsvNumbers, FastDecimalStopsWhereFastFloatDoes) {
  // Runs of 0-19 digits before and after the '.', then every byte value:
  // the eight-at-a-time scan must find the run's end whatever follows it
  // (bytes above '9', below '0', with the high bit set), at every distance
  // from the end of the text.
  std::mt19937_64 rng(31);
  std::size_t taken = 0;
  for (int int_digits = 1; int_digits <= 20; ++int_digits)
    for (int frac_digits = -1; frac_digits <= 20; ++frac_digits)
      for (int b = 0; b < 256; ++b) {
        std::string text;
        if (b % 2 == 0) text += '-';
        for (int k = 0; k < int_digits; ++k) text += static_cast<char>('0' + rng() % 10);
        if (frac_digits >= 0) text += '.';
        for (int k = 0; k < frac_digits; ++k) text += static_cast<char>('0' + rng() % 10);
        text += static_cast<char>(b);
        text.append(rng() % 10, '7');
        ASSERT_TRUE(decimal_agrees(text));
        // The same text cut at every length, so that the end of the text
        // falls inside and after the run.
        for (std::size_t n = 1; n < text.size(); ++n) ASSERT_TRUE(decimal_agrees(std::string_view(text).substr(0, n)));
        double v;
        taken += vigil::trace_io::fast_decimal(text.data(), text.data() + text.size(), v) != nullptr;
      }
  // What it must take: every spelling of up to 19 digits with a digit
  // after the '.' (the others fall back to fast_float).
  EXPECT_GT(taken, 20u * 18 * 256 / 2);
  // Exponents, and random shortest strings of all magnitudes.
  for (const char* s : {"1e5", "1E+05", "2.5e-3", "7e22", "7e23", "9007199254740993", "1e-400", "1e400",
                        "2.2250738585072011e-308", "4.9e-324", "1.7976931348623157e308", "0.1e", "1.e5",
                        "1e+", "-0", "-0.0e0", "00012.50", "123456789012345678901"})
    ASSERT_TRUE(decimal_agrees(s));
  char buf[64];
  for (int i = 0; i < 300000; ++i) {
    const double d = std::bit_cast<double>(rng());
    if (!std::isfinite(d)) continue;
    const char* end = std::to_chars(buf, buf + sizeof buf, d).ptr;
    ASSERT_TRUE(decimal_agrees(std::string_view(buf, static_cast<std::size_t>(end - buf))));
  }
}

TEST(CsvNumbers, EveryCellOfTheRealCsvsAgrees) {
  std::size_t cells = 0;
  for (const auto& entry : fs::recursive_directory_iterator(VIGIL_CSVHF_TEST_DATA)) {
    if (entry.path().extension() != ".csv") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      std::string_view rest = line;
      if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
      for (;;) {
        const auto comma = rest.find(',');
        EXPECT_TRUE(agree(rest.substr(0, comma))) << entry.path();
        ++cells;
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
  }
  EXPECT_GT(cells, 1000u);  // the data are there
}

}  // namespace
