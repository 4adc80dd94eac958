// The JSONL reader's On-Demand fast path (trace/jsonl_ondemand.hpp) against
// the simdjson DOM fast path it replaced (kept below as the reference, with
// the same acceptance rules): every line they see must be accepted by both
// with the same record, or refused by both (a refused line goes to the
// reader's general path, which judges it as before). On-Demand checks only
// what is read, so the risk is a line it accepts that the DOM parser would
// not (trailing content, a bad token after a value, an unclosed object):
// checked on hand-written edge cases, every line of the JSONL files in
// tests/, every line of the trace fuzz corpus, and mutated lines.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/support/files.hpp"
#include "trace/jsonl_ondemand.hpp"
#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;

struct Record {
  bool ok = false;
  std::int64_t step = 0;
  std::string mode;
  double time = 0;
  std::vector<std::pair<std::string, double>> values;  // in the line's order
};

// ---- the reference: trace/jsonl.cpp's DOM fast path before On-Demand ----
bool ref_number(const simdjson::dom::element& v, double& out) {
  switch (v.type()) {
    case simdjson::dom::element_type::INT64: out = static_cast<double>(v.get_int64().value_unsafe()); return true;
    case simdjson::dom::element_type::UINT64: out = static_cast<double>(v.get_uint64().value_unsafe()); return true;
    case simdjson::dom::element_type::DOUBLE: out = v.get_double().value_unsafe(); return true;
    default: return false;
  }
}
bool ref_sample(const simdjson::dom::element& v, double& out) {
  if (ref_number(v, out)) return true;
  std::string_view s;
  if (v.get_string().get(s)) return false;
  if (s == "NaN") out = std::numeric_limits<double>::quiet_NaN();
  else if (s == "Infinity") out = std::numeric_limits<double>::infinity();
  else if (s == "-Infinity") out = -std::numeric_limits<double>::infinity();
  else return false;
  return true;
}
bool ref_step(const simdjson::dom::element& v, std::int64_t& out) {
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
Record reference(simdjson::dom::parser& parser, std::string_view text) {
  Record r;
  simdjson::dom::element doc;
  if (parser.parse(text.data(), text.size(), true).get(doc)) return r;
  simdjson::dom::object fields;
  if (doc.get_object().get(fields)) return r;
  r.mode = "train";
  r.time = std::numeric_limits<double>::quiet_NaN();
  unsigned seen = 0;
  for (const auto field : fields) {
    const std::string_view key = field.key;
    const simdjson::dom::element value = field.value;
    unsigned bit;
    if (key == "step") {
      bit = 1;
      if (!ref_step(value, r.step)) return {};
    } else if (key == "mode") {
      bit = 2;
      std::string_view mode;
      if (value.get_string().get(mode) || mode.empty()) return {};
      r.mode = mode;
    } else if (key == "time") {
      bit = 4;
      if (!value.is_null() && !ref_number(value, r.time)) return {};
    } else if (key == "values") {
      bit = 8;
      simdjson::dom::object values;
      if (value.get_object().get(values)) return {};
      for (const auto sample : values) {
        double v;
        if (sample.key.empty() || !ref_sample(sample.value, v)) return {};
        r.values.emplace_back(std::string(sample.key), v);
      }
    } else {
      return {};
    }
    if ((seen & bit) != 0) return {};
    seen |= bit;
  }
  if ((seen & 1) == 0) return {};
  r.ok = true;
  return r;
}
// ----

bool same_bits(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

class OnDemandVsDom {
 public:
  ::testing::AssertionResult agree(std::string_view line) {
    // Padded as in the reader: the line sits in a buffer with room after it.
    buffer_.assign(line);
    buffer_.reserve(line.size() + simdjson::SIMDJSON_PADDING);
    const std::string_view text(buffer_.data(), line.size());
    const Record want = reference(dom_, text);
    vigil::Observation o;
    std::size_t n = 0;
    const bool got_ok = ondemand_.parse(text, buffer_.capacity(), o, n);
    ++lines;
    accepted += got_ok ? 1 : 0;
    // On-Demand leaves lines with a number of 19+ digits to the general path
    // (simdjson 3.0.1's On-Demand misreads them); nothing else may differ.
    if (!got_ok && want.ok && has_long_number(line)) {
      ++left_to_general;
      return ::testing::AssertionSuccess();
    }
    if (got_ok != want.ok)
      return ::testing::AssertionFailure()
             << "'" << line << "': DOM " << (want.ok ? "accepts" : "refuses") << ", On-Demand "
             << (got_ok ? "accepts" : "refuses");
    if (!got_ok) return ::testing::AssertionSuccess();
    bool same = o.step == want.step && o.mode == want.mode && same_bits(o.time, want.time) &&
                n == want.values.size();
    for (std::size_t i = 0; same && i < n; ++i)
      same = o.values[i].first == want.values[i].first &&
             same_bits(o.values[i].second, want.values[i].second);
    if (!same) return ::testing::AssertionFailure() << "'" << line << "': different records";
    return ::testing::AssertionSuccess();
  }
  std::size_t lines = 0, accepted = 0, left_to_general = 0;

  /// Whether `line` has a run of digits, '.' and '-' with 19 or more digits.
  static bool has_long_number(std::string_view line) {
    int digits = 0;
    for (const char c : line) {
      if (c >= '0' && c <= '9') {
        if (++digits >= 19) return true;
      } else if (c != '.' && c != '-') {
        digits = 0;
      }
    }
    return false;
  }

 private:
  simdjson::dom::parser dom_;
  vigil::trace_io::OnDemandLine ondemand_;
  std::string buffer_;
};

TEST(OnDemandLine, EdgeCasesAgreeWithTheDomParser) {
  OnDemandVsDom check;
  const char* lines[] = {
      R"({"step": 1, "values": {"loss": 0.5}})",
      R"({"step": 1, "mode": "eval", "time": 12.5, "values": {"a": 1, "b": -2, "c": 1e300}})",
      R"({"step": 1, "time": null, "values": {}})",
      R"({"step": -0, "values": {"x": -0}})",
      R"({"step": 12.0, "values": {"x": "NaN", "y": "Infinity", "z": "-Infinity"}})",
      R"({"step": 18446744073709551615, "values": {}})",
      R"({"step": 9223372036854775807, "values": {"u": 18446744073709551615}})",
      R"({"step": 9223372036854775808.0})",
      R"({"step": 1.5})",
      R"({"step": 1, "values": {"big": 100000000000000000000000}})",
      R"({"step": 1, "values": {"x": 1e999}})",
      R"({"step": 1, "values": {"x": NaN}})",
      R"({"step": 1, "values": {"x": null}})",
      R"({"step": 1, "values": {"x": true}})",
      R"({"step": 1, "values": {"x": [1]}})",
      R"({"step": 1, "values": {"x": "nan"}})",
      R"({"step": 1, "values": {"": 1}})",
      R"({"step": 1, "values": {"x": 01}})",
      R"({"step": 1, "values": {"x": 1.}})",
      R"({"step": 1, "values": {"x": .5}})",
      R"({"step": 1, "values": {"x": 1e}})",
      R"({"step": 1, "values": {"x": 1x}})",
      R"({"step": 1, "values": {"x": -}})",
      R"({"step": 1, "values": {"x": 1}} x)",
      R"({"step": 1, "values": {"x": 1}}})",
      R"({"step": 1, "values": {"x": 1}}{})",
      R"({"step": 1, "values": {"x": 1}},)",
      R"({"step": 1, "values": {"x": 1}} 1)",
      R"({"step": 1, "values": {"x": 1}} "s")",
      R"({"step": 1, "values": {"x": 1})",
      R"({"step": 1, "values": {"x": 1)",
      R"({"step": 1, "values": {"x": )",
      R"({"step": 1,})",
      R"({"step": 1,, "mode": "a"})",
      R"({"step": 1 "mode": "a"})",
      R"({"step" 1})",
      R"({"step": 1, "mode": ""})",
      R"({"step": 1, "mode": 3})",
      R"({"step": 1, "mode": "a", "mode": "b"})",
      R"({"step": 1, "step": 2})",
      R"({"mode": "a"})",
      R"({"step": 1, "extra": 2})",
      R"({"step": 1, "time": nul})",
      R"({"step": 1, "time": nullx})",
      R"({"step": 1, "time": null1})",
      R"({"step": 1, "time": "1"})",
      R"({"step": 1, "time": true})",
      R"({"st\u0065p": 1, "values": {"l\u006fss": 1, "\u00e9": 2}})",
      R"({"step": 1, "values": {"\ud800": 1}})",
      R"({"step": 1, "values": {"\ud83d\ude00": 1}})",
      R"({"step": 1, "values": {"a\"b": 1, "c\\d": 2}})",
      R"({"step": 1, "values": {"x": 1, "x": 2}})",
      "{\"step\": 1, \"values\": {\"a\tb\": 1}}",
      "{\"step\": 1, \"values\": {\"\xff\": 1}}",
      "{\"step\": 1, \"mode\": \"\xc3\"}",
      R"([1, 2])",
      R"("step")",
      R"(1)",
      R"(null)",
      R"({})",
      R"({"step": 1, "values": {"x": 1}, "values": {}})",
      R"({"step": 1, "values": {"a": {"b": 1}}})",
      R"(  {"step": 1}  )",
      R"({"step": 1} // comment)",
      // simdjson 3.0.1's On-Demand reads these as 0.0: left to the general path.
      R"({"step": 1, "values": {"x": 77978179693379230.56}})",
      R"({"step": 1, "values": {"x": 0.39902224599373507752e-18}})",
      R"({"step": 1, "values": {"x": 0.000123456789012345678}})",
      R"({"step": 1, "time": 1716735746.13700000001})",
      R"({"step": 1234567890123456789, "values": {}})",
  };
  for (const char* line : lines) EXPECT_TRUE(check.agree(line));
  EXPECT_GT(check.accepted, 5u);
  EXPECT_EQ(check.left_to_general, 6u);  // the five above and the 19- and 20-digit integers
}

/// Every line of every file under `dir` whose name passes `keep`.
template <class Keep>
std::vector<std::string> lines_under(const fs::path& dir, Keep keep) {
  std::vector<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || !keep(entry.path())) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      out.push_back(line);
    }
  }
  return out;
}

TEST(OnDemandLine, EveryTestAndCorpusLineAgrees) {
  const fs::path tests = fs::path(VIGIL_SOURCE_DIR) / "tests";
  auto lines = lines_under(tests, [](const fs::path& p) { return p.extension() == ".jsonl"; });
  const std::size_t jsonl_lines = lines.size();
  for (auto& l : lines_under(tests / "fuzz/corpus/trace", [](const fs::path&) { return true; }))
    lines.push_back(std::move(l));
  ASSERT_GT(jsonl_lines, 200u);  // the data are there
  OnDemandVsDom check;
  for (const auto& line : lines) ASSERT_TRUE(check.agree(line));
  EXPECT_GT(check.accepted, jsonl_lines / 2);
  std::printf("%zu lines (%zu from .jsonl files), %zu accepted, %zu left to the general path\n",
              check.lines, jsonl_lines, check.accepted, check.left_to_general);
}

TEST(OnDemandLine, MutatedLinesAgree) {
  const fs::path tests = fs::path(VIGIL_SOURCE_DIR) / "tests";
  auto seeds = lines_under(tests, [](const fs::path& p) { return p.extension() == ".jsonl"; });
  seeds.erase(std::remove_if(seeds.begin(), seeds.end(),
                             [](const std::string& s) { return s.size() > 400 || s.empty(); }),
              seeds.end());
  ASSERT_FALSE(seeds.empty());
  static constexpr std::string_view alphabet = "{}[]\":,. \t0123456789-+eE\\unlNaIfty\x01\xc3\xa9x";
  std::mt19937_64 rng(1402);
  OnDemandVsDom check;
  for (int i = 0; i < 150000; ++i) {
    std::string line = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % (line.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 4) {
        case 0:
          if (at < line.size()) line[at] = c;
          break;
        case 1: line.insert(line.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        case 2:
          if (at < line.size()) line.erase(at, 1);
          break;
        default: line.resize(at);  // a truncated line
      }
    }
    ASSERT_TRUE(check.agree(line));
  }
  // Both outcomes are exercised.
  EXPECT_GT(check.accepted, check.lines / 20);
  EXPECT_LT(check.accepted, check.lines);
}

TEST(OnDemandLine, TheReaderReadsLongNumbersRight) {
  // What On-Demand would misread as 0.0 reaches the caller with its value.
  const auto dir = vigil::test::make_temp_dir("ondemand_long");
  const auto path = dir / "long.jsonl";
  std::ofstream(path) << R"({"step": 1, "values": {"x": 77978179693379230.56, "y": 0.5}})" << "\n"
                      << R"({"step": 2, "time": 0.39902224599373507752e-18, "values": {}})" << "\n";
  vigil::TraceError error;
  auto reader = vigil::open_jsonl(path.string(), error);
  ASSERT_TRUE(reader);
  vigil::Observation o;
  ASSERT_TRUE(reader->next(o));
  ASSERT_EQ(o.values.size(), 2u);
  EXPECT_EQ(o.values[0].second, 77978179693379232.0);
  EXPECT_EQ(o.values[1].second, 0.5);
  ASSERT_TRUE(reader->next(o));
  EXPECT_EQ(o.time, 3.9902224599373506e-19);
  EXPECT_FALSE(reader->next(o));
  EXPECT_FALSE(reader->error());
  std::filesystem::remove_all(dir);
}

}  // namespace
