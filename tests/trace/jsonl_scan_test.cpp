// The JSONL reader's plain-line scanner (trace/jsonl_scan.hpp) against the
// general parser (nlohmann, the reader's reference meaning): every line it
// accepts must be a valid record with the same step, mode, time and values,
// bit for bit. Lines: edge spellings, every line of every JSONL file in
// tests/ and examples/, the trace fuzz corpus split into lines, and seeded
// mutations of them. It must also accept nearly every real line (else it
// would save nothing).

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"
#include "trace/jsonl_scan.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using vigil::trace_io::scan_plain_line;
using vigil::trace_io::ScannedLine;

const fs::path source_dir = VIGIL_SOURCE_DIR;

std::uint64_t bits(double v) { return std::bit_cast<std::uint64_t>(v); }

// If the scanner accepts `line`, the general parser must read the same
// record. Returns whether it accepted.
bool check(const std::string& line) {
  ScannedLine s;
  if (!scan_plain_line(line, s)) return false;
  SCOPED_TRACE(line);
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    ADD_FAILURE() << "accepted, but the general parser says: " << e.what();
    return true;
  }
  EXPECT_TRUE(j.is_object());
  EXPECT_TRUE(j.contains("step") && j["step"].is_number_integer());
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return true;
  EXPECT_EQ(j["step"].get<std::int64_t>(), s.step);
  if (j.contains("mode")) EXPECT_EQ(j["mode"].get<std::string>(), s.mode);
  else EXPECT_TRUE(s.mode.empty());
  if (j.contains("time") && !j["time"].is_null()) EXPECT_EQ(bits(j["time"].get<double>()), bits(s.time));
  else EXPECT_TRUE(std::isnan(s.time));
  for (const auto& [key, _] : j.items())
    EXPECT_TRUE(key == "step" || key == "mode" || key == "time" || key == "values") << key;
  const json values = j.contains("values") ? j["values"] : json::object();
  // nlohmann keeps the last of repeated keys; the reader refuses them (the
  // scanner leaves that to it), so compare only lines without.
  std::vector<std::string> keys;
  for (const auto& v : s.values) keys.emplace_back(v.key);
  std::sort(keys.begin(), keys.end());
  if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) return true;
  EXPECT_EQ(values.size(), s.values.size());
  for (const auto& v : s.values) {
    const std::string key(v.key);
    if (!values.contains(key)) {
      ADD_FAILURE() << "missing " << key;
      continue;
    }
    const json& x = values[key];
    double want;
    if (x.is_number()) want = x.get<double>();
    else if (x == "NaN") want = std::numeric_limits<double>::quiet_NaN();
    else if (x == "Infinity") want = std::numeric_limits<double>::infinity();
    else if (x == "-Infinity") want = -std::numeric_limits<double>::infinity();
    else {
      ADD_FAILURE() << key << " is not a sample: " << x.dump();
      continue;
    }
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(v.value)) << key;
    else EXPECT_EQ(bits(want), bits(v.value)) << key << ": " << want << " vs " << v.value;
  }
  return true;
}

TEST(JsonlScan, EdgeSpellings) {
  struct Case {
    const char* line;
    bool accepted;
  };
  const Case cases[] = {
      {R"({"step": 1, "values": {"loss": 0.5}})", true},
      {R"({"step":1,"mode":"eval","time":1732871234.25,"values":{"a":1,"b":"NaN","c":"Infinity","d":"-Infinity"}})", true},
      {R"(  {"step": 0, "values": {}}  )", true},
      {R"({"step": -0})", false},  // declined: -0 is not read alike by every parser
      {R"({"step": 1, "values": {"a": -0}})", false},
      {R"({"step": -12, "values": {"a": -7}})", true},
      {"{\t\"step\"\r: 3 ,\"values\" :{ \"x\" : 0.0 } }", true},
      {R"({"step": 3, "values": {"x": -0.0}})", false},  // -0: declined, as -0 above
      {R"({"step": 3, "values": {"x": 1.e5}})", false},
      {R"({"step": 3, "values": {"x": 12345678901234567890}})", false},
      {R"({"step": 3, "values": {"x": 1234567890123456789e0}})", true},
      {R"({"step": 3, "values": {"x": inf}})", false},
      {R"({"step": 1, "time": null})", true},
      {R"({"step": 1, "time": 17})", true},
      {R"({"step": 999999999999999999})", true},       // 18 digits
      {R"({"step": 1000000000000000000})", false},     // 19: the other parsers
      {R"({"step": 1.0})", false},                     // a float step: the other parsers
      {R"({"step": 1e3})", false},
      {R"({"step": 01})", false},
      {R"({"step": 1, "values": {"a": 1e999}})", false},   // overflow: infinity on the general path
      {R"({"step": 1, "values": {"a": 1e-999}})", false},  // underflow
      {R"({"step": 1, "values": {"a": 4.9e-324}})", true},
      {R"({"step": 1, "values": {"a": 0e-999}})", true},
      {R"({"step": 1, "values": {"a": 1.}})", false},
      {R"({"step": 1, "values": {"a": .5}})", false},
      {R"({"step": 1, "values": {"a": -}})", false},
      {R"({"step": 1, "values": {"a": 1e}})", false},
      {R"({"step": 1, "values": {"a": +1}})", false},
      {R"({"step": 1, "values": {"a": NaN}})", false},
      {R"({"step": 1, "values": {"a": null}})", false},
      {R"({"step": 1, "values": {"a": "nan"}})", false},
      {R"({"step": 1, "values": {"a": true}})", false},
      {R"({"step": 1, "values": {"a\"b": 1}})", false},
      {R"({"step": 1, "values": {"a\u0041": 1}})", false},
      {"{\"step\": 1, \"values\": {\"\xC3\xA9\": 1}}", false},
      {R"({"step": 1, "values": {"": 1}})", false},
      {R"({"step": 1, "values": {"a": 1, "a": 2}})", true},  // accepted; the reader refuses repeats
      {R"({"step": 1, "step": 2})", false},
      {R"({"step": 1, "extra": 2})", false},
      {R"({"values": {"a": 1}})", false},
      {R"({"step": 1, "mode": ""})", false},
      {R"({"step": 1, "mode": 3})", false},
      {R"({"step": 1} x)", false},
      {R"({"step": 1}{})", false},
      {R"({"step": 1,})", false},
      {R"({"step": 1, "values": {"a": 1,}})", false},
      {R"({"step": 1, "values": {"a": 1})", false},
      {R"({"step": 1, "values": {"a": 1}}})", false},
      {R"({"step": 1, "time": nul})", false},
      {R"({"step": 1, "time": nullx})", false},
      {"{\"step\": 1}\f", false},
      {R"({"step": 1, "values": {"a": 123456789012345678901234567890}})", false},
      {R"({"step": 1, "values": {"a": 1234567890123456789.5e-3}})", true},
      {R"({"step": 1, "values": {"a": 77978179693379230.56}})", true},
      {R"([1])", false},
      {"", false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    EXPECT_EQ(check(c.line), c.accepted);
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
    start = nl + 1;
  }
  return out;
}

std::vector<std::string> real_lines() {
  std::vector<std::string> lines;
  for (const char* top : {"tests", "examples"})
    for (const auto& e : fs::recursive_directory_iterator(source_dir / top))
      if (e.is_regular_file() && e.path().extension() == ".jsonl" &&
          e.path().string().find("/fuzz/") == std::string::npos)
        for (auto& l : split_lines(vigil::test::slurp(e.path()))) lines.push_back(std::move(l));
  return lines;
}

TEST(JsonlScan, RealLinesAreAcceptedAsTheGeneralParserReadsThem) {
  const auto lines = real_lines();
  ASSERT_GT(lines.size(), 1000u);
  std::size_t accepted = 0, records = 0;
  for (const auto& line : lines) {
    accepted += check(line);
    // A line the general parser reads as a plain record (an object with an
    // integer step) that the scanner declines: counted, to see coverage.
    records += line.find("\"step\"") != std::string::npos;
  }
  std::printf("%zu of %zu lines naming a step accepted by the scanner\n", accepted, records);
  // The traces in tests/ hold bare NaN tokens, nulls and damaged lines on
  // purpose; most lines are still plain.
  EXPECT_GT(accepted * 10, records * 6);
}

TEST(JsonlScan, FuzzCorpusAndMutatedLines) {
  std::vector<std::string> lines = real_lines();
  for (const auto& e : fs::directory_iterator(source_dir / "tests/fuzz/corpus/trace")) {
    const std::string bytes = vigil::test::slurp(e.path());
    if (bytes.size() > 1)
      for (auto& l : split_lines(bytes.substr(1))) lines.push_back(std::move(l));
  }
  std::size_t accepted = 0;
  for (const auto& line : lines) accepted += check(line);
  // Mutations: bytes replaced, inserted or deleted, from JSON's own
  // alphabet, where a parser is most likely to be fooled.
  std::mt19937_64 rng(14);
  static constexpr char alphabet[] = "{}[]\":,.-+eE0123456789 \t\\nulrtaNIfy\x01\x7f\xc3";
  std::size_t mutated = 0, mutated_accepted = 0;
  for (int round = 0; round < 120'000; ++round) {
    std::string line = lines[rng() % lines.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits && !line.empty(); ++k) {
      const std::size_t at = rng() % line.size();
      const char c = alphabet[rng() % (sizeof alphabet - 1)];
      switch (rng() % 3) {
        case 0: line[at] = c; break;
        case 1: line.insert(line.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: line.erase(at, 1); break;
      }
    }
    ++mutated;
    mutated_accepted += check(line);
  }
  std::printf("%zu corpus lines (%zu accepted), %zu mutations (%zu accepted)\n", lines.size(), accepted,
              mutated, mutated_accepted);
  EXPECT_GT(mutated_accepted, 1000u);  // the mutations did reach the accepting paths
}

}  // namespace
