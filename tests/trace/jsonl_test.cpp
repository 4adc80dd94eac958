// Vigil JSONL reader/writer: real logs, every accepted spelling, and damaged
// files (each must give a positioned error after returning every complete
// record before the damage).

#include <bit>
#include <cmath>
#include <random>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "tests/support/files.hpp"
#include "tests/support/traces.hpp"
#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path data_dir = VIGIL_TRACE_TEST_DATA;

// Each test gets its own temporary directory (tests/support/files.hpp).
using vigil::test::slurp;
class JsonlTest : public vigil::test::TempDirTest {};

using vigil::test::drain;
using vigil::test::read_all;
using vigil::test::ReadAll;
using vigil::test::value_of;

TEST(JsonlReal, KerasImdbFit) {
  const auto r = read_all((data_dir / "keras_imdb_fit1.jsonl").string());
  ASSERT_FALSE(r.error) << r.error->format();
  ASSERT_EQ(r.records.size(), 20u);
  EXPECT_EQ(r.records.front().step, 1);
  EXPECT_EQ(r.records.front().mode, "train");
  EXPECT_TRUE(std::isnan(r.records.front().time));
  EXPECT_EQ(r.records.front().values.size(), 4u);
  EXPECT_DOUBLE_EQ(*value_of(r.records.front(), "loss"), 0.5103);
  // The textbook overfit: validation loss bottoms out at epoch 4 and climbs back.
  EXPECT_DOUBLE_EQ(*value_of(r.records[3], "val_loss"), 0.2735);
  EXPECT_EQ(r.records.back().step, 20);
  EXPECT_DOUBLE_EQ(*value_of(r.records.back(), "val_loss"), 0.6796);
  EXPECT_EQ(r.position, r.size);
  EXPECT_EQ(r.size, fs::file_size(data_dir / "keras_imdb_fit1.jsonl"));
}

TEST(JsonlReal, NanogptBareNaNTokensAndSparseSeries) {
  const auto r = read_all((data_dir / "nanogpt_muon_head.jsonl").string());
  ASSERT_FALSE(r.error) << r.error->format();
  ASSERT_EQ(r.records.size(), 200u);
  int nan_steps = 0, val_samples = 0;
  for (const auto& obs : r.records) {
    if (auto v = value_of(obs, "step_avg"); v && std::isnan(*v)) ++nan_steps;
    if (value_of(obs, "val_loss")) ++val_samples;
  }
  EXPECT_EQ(nan_steps, 13);  // steps 0..12 log step_avg as nan
  EXPECT_EQ(val_samples, 2);  // steps 0 and 125
  EXPECT_FALSE(value_of(r.records[0], "train_loss"));  // empty cell: no sample
  EXPECT_DOUBLE_EQ(*value_of(r.records[13], "step_avg"), 213.66);
  EXPECT_DOUBLE_EQ(*value_of(r.records[125], "val_loss"), 5.2017);
}

TEST_F(JsonlTest, TruncatedLastLineKeepsThePrefix) {
  const std::string full = slurp(data_dir / "keras_imdb_fit1.jsonl");
  // Cut the file in the middle of its last record, as a crash while writing would.
  const auto last_start = full.rfind('\n', full.size() - 2) + 1;
  const auto path = write("cut.jsonl", full.substr(0, last_start + 40));
  const auto r = read_all(path);
  ASSERT_EQ(r.records.size(), 19u);
  EXPECT_EQ(r.records.back().step, 19);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->file, path);
  EXPECT_EQ(r.error->line, 20u);
  EXPECT_EQ(r.error->offset, last_start);
  EXPECT_EQ(r.error->message, "truncated record (unexpected end of line)");
  EXPECT_EQ(r.error->format(), path + ":20: truncated record (unexpected end of line)");
}

TEST_F(JsonlTest, WrongJsonInTheMiddle) {
  const std::string text =
      "{\"step\": 1, \"values\": {\"loss\": 2.5}}\n"
      "\n"
      "{\"step\": 2, \"values\": {\"loss\": 2.4}}\n"
      "{\"step\": 3, \"values\": {\"loss\": 2.3,}}\n"
      "{\"step\": 4, \"values\": {\"loss\": 2.2}}\n";
  const auto r = read_all(write("bad.jsonl", text));
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[1].step, 2);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 4u);  // the blank line counts
  EXPECT_EQ(r.error->offset, text.find("{\"step\": 3"));
  EXPECT_TRUE(r.error->message.starts_with("invalid json at column 36")) << r.error->message;
}

TEST_F(JsonlTest, ErrorColumnPointsIntoTheOriginalLine) {
  // Bare tokens are quoted before parsing; the column must not move.
  const auto r = read_all(write("col.jsonl", "{\"step\": 1, \"values\": {\"a\": NaN, \"b\": }}\n"));
  ASSERT_TRUE(r.error);
  EXPECT_TRUE(r.error->message.starts_with("invalid json at column 39")) << r.error->message;
}

struct BadLine {
  std::string line;
  std::string message;
};

TEST_F(JsonlTest, BadTypesArePositionedErrors) {
  const std::vector<BadLine> cases = {
      {R"({"step": "7"})", "\"step\" must be an integer"},
      {R"({"step": 1.5})", "\"step\" must be an integer"},
      {R"({"step": 1e30})", "\"step\" must be an integer"},
      {R"({"step": 18446744073709551615})", "\"step\" must be an integer"},
      {R"({"step": null})", "\"step\" must be an integer"},
      {R"({"values": {"loss": 1}})", "missing \"step\""},
      {R"({"step": 2, "mode": 3})", "\"mode\" must be a non-empty string"},
      {R"({"step": 2, "mode": ""})", "\"mode\" must be a non-empty string"},
      {R"({"step": 2, "time": "noon"})", "\"time\" must be a number"},
      {R"({"step": 2, "values": [1, 2]})", "\"values\" must be an object"},
      {R"({"step": 2, "values": {"loss": "abc"}})",
       "value of 'loss' must be a number, \"NaN\", \"Infinity\", \"-Infinity\" or null"},
      {R"({"step": 2, "values": {"loss": true}})",
       "value of 'loss' must be a number, \"NaN\", \"Infinity\", \"-Infinity\" or null"},
      {R"({"step": 2, "values": {"loss": {"x": 1}}})",
       "value of 'loss' must be a number, \"NaN\", \"Infinity\", \"-Infinity\" or null"},
      {R"({"step": 2, "values": {"": 1}})", "empty series name in \"values\""},
      {R"({"step": 2, "epoch": 1})", "unknown field \"epoch\""},
      {R"([1, 2])", "expected a json object"},
      {R"(42)", "expected a json object"},
  };
  const std::string good = R"({"step": 1, "values": {"loss": 1}})" "\n";
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const auto r = read_all(write("t.jsonl", good + c.line + "\n" + good));
    ASSERT_EQ(r.records.size(), 1u);
    ASSERT_TRUE(r.error);
    EXPECT_EQ(r.error->line, 2u);
    EXPECT_EQ(r.error->offset, good.size());
    EXPECT_EQ(r.error->message, c.message);
  }
}

TEST_F(JsonlTest, AcceptedSpellings) {
  const std::string text =
      "\xEF\xBB\xBF{\"step\": 12.0, \"mode\": \"eval\", \"time\": 1732871234.25, "
      "\"values\": {\"a\": \"NaN\", \"b\": \"Infinity\", \"c\": \"-Infinity\", \"d\": null}}\r\n"
      "   \r\n"
      "{\"step\": 13, \"values\": {\"a\": NaN, \"b\": Infinity, \"c\": -Infinity, \"d\": -2e-3}}\n"
      // Token-like text inside strings is left alone; keys are whatever the writer chose.
      "{\"step\": 14, \"mode\": \"NaN\", \"values\": {\"NaN\": 1, \"x{k=\\\"Infinity\\\"}\": 2}}\n"
      "{\"step\": 15, \"time\": null}";  // no final newline: still a complete record
  const auto r = read_all(write("ok.jsonl", text));
  ASSERT_FALSE(r.error) << r.error->format();
  ASSERT_EQ(r.records.size(), 4u);

  const auto& a = r.records[0];
  EXPECT_EQ(a.step, 12);
  EXPECT_EQ(a.mode, "eval");
  EXPECT_DOUBLE_EQ(a.time, 1732871234.25);
  ASSERT_EQ(a.values.size(), 3u);  // null = no sample
  EXPECT_TRUE(std::isnan(*value_of(a, "a")));
  EXPECT_EQ(*value_of(a, "b"), INFINITY);
  EXPECT_EQ(*value_of(a, "c"), -INFINITY);
  EXPECT_FALSE(value_of(a, "d"));

  const auto& b = r.records[1];
  EXPECT_EQ(b.mode, "train");
  EXPECT_TRUE(std::isnan(*value_of(b, "a")));
  EXPECT_EQ(*value_of(b, "b"), INFINITY);
  EXPECT_EQ(*value_of(b, "c"), -INFINITY);
  EXPECT_DOUBLE_EQ(*value_of(b, "d"), -2e-3);

  const auto& c = r.records[2];
  EXPECT_EQ(c.mode, "NaN");
  EXPECT_EQ(*value_of(c, "NaN"), 1);
  EXPECT_EQ(*value_of(c, "x{k=\"Infinity\"}"), 2);

  EXPECT_EQ(r.records[3].step, 15);
  EXPECT_TRUE(std::isnan(r.records[3].time));
  EXPECT_TRUE(r.records[3].values.empty());
  EXPECT_EQ(r.position, text.size());
}

// The reader has a fast path for ordinary records and the general
// (nlohmann) path for the rest (trace/jsonl.cpp). A sample that is null
// means "no sample" and sends its line to the general path: each random
// record is written twice, plainly and with such a null, and both lines must
// read to the same observation, bit for bit (series order, -0, 17-digit
// doubles, large integers, escaped label keys, any field order and spacing).
TEST_F(JsonlTest, FastAndGeneralPathsReadOrdinaryRecordsAlike) {
  std::mt19937_64 rng(20261201);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const char* const names[] = {"loss", "lr", "grad_norm{layer=\\\"fc1\\\"}", "a\\\\b", "x/y",
                               "val_loss", "z", "A", "epoch", "tok\\/s"};
  auto number = [&]() -> std::string {
    switch (pick(7)) {
      case 0: return "-0";
      case 1: return std::to_string(static_cast<std::int64_t>(rng()));  // any int64
      case 2: return "-0.0";
      case 3: return "\"NaN\"";
      case 4: return pick(2) ? "\"Infinity\"" : "\"-Infinity\"";
      case 5: return fmt::format("{:.17g}", std::bit_cast<double>(rng() & ~(0x7ffULL << 52) |
                                                                    (pick(2046) + 1) << 52));
      default: return fmt::format("{}e{}", static_cast<std::int64_t>(rng() % 2000000) - 1000000,
                                  static_cast<int>(pick(40)) - 20);
    }
  };
  std::string plain, with_null;
  std::size_t records = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::string> values;
    std::vector<bool> used(std::size(names));
    for (std::size_t k = pick(5); k > 0; --k) {
      const std::size_t n = pick(std::size(names));
      if (used[n]) continue;
      used[n] = true;
      values.push_back(fmt::format("\"{}\"{}:{}{}", names[n], pick(2) ? " " : "", pick(2) ? " " : "",
                                   number()));
    }
    std::vector<std::string> fields;
    const std::string step = pick(4) == 0 ? fmt::format("{}.0", pick(1000000))
                                          : std::to_string(static_cast<std::int64_t>(rng()) >> pick(63));
    fields.push_back("\"step\": " + step);
    if (pick(2)) fields.push_back(pick(2) ? "\"mode\":\"eval\"" : "\"mode\": \"te\\\"st\"");
    if (pick(2)) fields.push_back("\"time\": " + (pick(4) == 0 ? std::string("null") : number()));
    if (fields.back().find('"', 8) != std::string::npos && fields.back().starts_with("\"time\""))
      fields.pop_back();  // a string time is an error, not an ordinary record
    auto line = [&](bool null) {
      std::vector<std::string> v = values;
      if (null) v.insert(v.begin() + static_cast<std::ptrdiff_t>(pick(v.size() + 1)), "\"skipped\": null");
      std::string vals = "\"values\": {" + fmt::format("{}", fmt::join(v, ",")) + "}";
      std::vector<std::string> f = fields;
      f.insert(f.begin() + static_cast<std::ptrdiff_t>(pick(f.size() + 1)), vals);
      return (pick(2) ? " {" : "{") + fmt::format("{}", fmt::join(f, pick(2) ? ", " : ",")) + "}" +
             (pick(2) ? " \n" : "\n");
    };
    plain += line(false);
    with_null += line(true);
    ++records;
  }
  const auto a = read_all(write("plain.jsonl", plain));
  const auto b = read_all(write("null.jsonl", with_null));
  ASSERT_FALSE(a.error) << a.error->format();
  ASSERT_FALSE(b.error) << b.error->format();
  ASSERT_EQ(a.records.size(), records);
  ASSERT_EQ(b.records.size(), records);
  for (std::size_t i = 0; i < records; ++i) {
    const auto& x = a.records[i];
    const auto& y = b.records[i];
    SCOPED_TRACE(fmt::format("record {}", i + 1));
    EXPECT_EQ(x.step, y.step);
    EXPECT_EQ(x.mode, y.mode);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(x.time), std::bit_cast<std::uint64_t>(y.time));
    ASSERT_EQ(x.values.size(), y.values.size());
    for (std::size_t k = 0; k < x.values.size(); ++k) {
      EXPECT_EQ(x.values[k].first, y.values[k].first);
      EXPECT_EQ(std::bit_cast<std::uint64_t>(x.values[k].second),
                std::bit_cast<std::uint64_t>(y.values[k].second))
          << x.values[k].first << ": " << x.values[k].second << " vs " << y.values[k].second;
    }
  }
}

TEST_F(JsonlTest, OrdinaryLinesStillReportDuplicatesAndReuseNothingStale) {
  // A record with two values, then one with one: no value of the first may
  // survive into the second (the reader reuses the caller's observation).
  const auto r = read_all(write("r.jsonl", "{\"step\":1,\"values\":{\"b\":2,\"a\":1}}\n"
                                           "{\"step\":2,\"values\":{\"c\":3}}\n"
                                           "{\"step\":3,\"values\":{\"c\":3,\"c\":4}}\n"));
  ASSERT_EQ(r.records.size(), 2u);
  ASSERT_EQ(r.records[0].values.size(), 2u);
  EXPECT_EQ(r.records[0].values[0].first, "a");  // key order, as the general path gives
  ASSERT_EQ(r.records[1].values.size(), 1u);
  EXPECT_EQ(r.records[1].values[0].first, "c");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 3u);
  EXPECT_EQ(r.error->message, "duplicate key \"c\" at column 27");
}

TEST_F(JsonlTest, BareTokensNeedWordBoundaries) {
  // "NaNx" is not the NaN token: it stays invalid JSON.
  const auto r = read_all(write("b.jsonl", "{\"step\": 1, \"values\": {\"a\": NaNx}}\n"));
  ASSERT_TRUE(r.error);
  EXPECT_TRUE(r.error->message.starts_with("invalid json")) << r.error->message;
}

TEST_F(JsonlTest, OpenTraceDetectsFormatByContent) {
  vigil::TraceError error;
  // Leading blank space before the first '{' is fine, whatever the extension.
  EXPECT_NE(vigil::open_trace(write("x.log", "\n  {\"step\": 1}\n"), error), nullptr);

  // Neither JSON, TensorBoard, CSV nor trainer_state.json.
  const auto odd = write("m.bin", std::string("\x01\x02\x03 binary", 10));
  EXPECT_EQ(vigil::open_trace(odd, error), nullptr);
  EXPECT_TRUE(error.message.starts_with("unknown trace format")) << error.message;
  EXPECT_TRUE(error.format().starts_with(odd + ": byte 0: unknown trace format"));
  EXPECT_EQ(vigil::detect_trace_format(write("m.csv", "step,loss\n1,2\n"), error),
            vigil::TraceFormat::csv);
  EXPECT_EQ(vigil::detect_trace_format(write("s.json", "{\n  \"log_history\": []\n}\n"), error),
            vigil::TraceFormat::hf_trainer_state);
  EXPECT_EQ(vigil::detect_trace_format(dir_.string(), error), vigil::TraceFormat::tensorboard);

  const auto missing = (dir_ / "nope.jsonl").string();
  EXPECT_EQ(vigil::open_trace(missing, error), nullptr);
  EXPECT_EQ(error.file, missing);
  EXPECT_EQ(error.message, "cannot open: No such file or directory");


  const auto empty = read_all(write("e.jsonl", ""));
  EXPECT_FALSE(empty.error);
  EXPECT_TRUE(empty.records.empty());
}

TEST_F(JsonlTest, ErrorIsSticky) {
  vigil::TraceError open_error;
  auto reader = vigil::open_jsonl(write("s.jsonl", "oops\n{\"step\": 1}\n"), open_error);
  ASSERT_NE(reader, nullptr);
  vigil::Observation obs;
  EXPECT_FALSE(reader->next(obs));
  ASSERT_TRUE(reader->error());
  EXPECT_EQ(reader->error()->line, 1u);
  EXPECT_FALSE(reader->next(obs));  // stays stopped at the damage
}

TEST(JsonlWrite, FormatsNonFiniteAsStrings) {
  vigil::Observation obs;
  obs.step = 7;
  obs.mode = "eval";
  obs.values = {{"loss", 0.5}, {"grad_norm{layer=\"fc1\"}", NAN}, {"x", INFINITY}, {"y", -INFINITY}};
  EXPECT_EQ(vigil::to_jsonl(obs),
            R"({"step":7,"mode":"eval","values":{"loss":0.5,"grad_norm{layer=\"fc1\"}":"NaN",)"
            R"("x":"Infinity","y":"-Infinity"}})");
  obs.time = 1732871234.25;
  obs.values.clear();
  EXPECT_EQ(vigil::to_jsonl(obs), R"({"step":7,"mode":"eval","time":1732871234.25,"values":{}})");
}

TEST_F(JsonlTest, WriteThenReadRoundTrips) {
  vigil::Observation obs;
  obs.step = -3;
  obs.time = 0.1;
  obs.values = {{"a", 0.1 + 0.2}, {"b", 1e-300}, {"c", NAN}, {"d", -INFINITY}};
  const auto r = read_all(write("rt.jsonl", vigil::to_jsonl(obs) + "\n"));
  ASSERT_FALSE(r.error) << r.error->format();
  ASSERT_EQ(r.records.size(), 1u);
  const auto& back = r.records[0];
  EXPECT_EQ(back.step, -3);
  EXPECT_EQ(back.mode, "train");
  EXPECT_EQ(back.time, 0.1);
  EXPECT_EQ(*value_of(back, "a"), 0.1 + 0.2);  // shortest round-trip digits, bit-exact
  EXPECT_EQ(*value_of(back, "b"), 1e-300);
  EXPECT_TRUE(std::isnan(*value_of(back, "c")));
  EXPECT_EQ(*value_of(back, "d"), -INFINITY);
}

}  // namespace
