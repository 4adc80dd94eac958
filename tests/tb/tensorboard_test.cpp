// TensorBoard event files: the real Lightning run (expectations computed by
// tests/tb/tools/tfevents_summary.py, which shares no code with the reader),
// damaged copies of it, scalar tensor variants hand-encoded in protobuf wire
// format here (so the field numbers are checked independently of
// trace/event.proto), directory merging, modes, follow mode and the writer.

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "trace/tensorboard_record.hpp"
#include "tests/support/files.hpp"
#include "tests/tb/pb_builder.hpp"
#include "tests/support/traces.hpp"
#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path data_dir = VIGIL_TB_TEST_DATA;
const fs::path lightning_dir = data_dir / "lightning_lstm_textgen";
const fs::path lightning_file = lightning_dir / "events.out.tfevents.1716735746.99c8c45923de.3769.0";

using vigil::test::drain;
using vigil::test::read_all;
using vigil::test::ReadAll;
using vigil::test::value_of;

// Per-series summary, in reading order.
struct Series {
  std::size_t count = 0;
  std::int64_t first_step = 0, last_step = 0;
  double first = 0, last = 0, first_time = 0;
  std::string mode;
};

std::map<std::string, Series> summarize(const std::vector<vigil::Observation>& records) {
  std::map<std::string, Series> out;
  for (const auto& obs : records)
    for (const auto& [name, v] : obs.values) {
      auto& s = out[name];
      if (s.count++ == 0) {
        s.first_step = obs.step;
        s.first = v;
        s.first_time = obs.time;
        s.mode = obs.mode;
      }
      EXPECT_EQ(s.mode, obs.mode) << name;
      s.last_step = obs.step;
      s.last = v;
    }
  return out;
}

// Record boundaries of a TFRecord file, walked with the plain lengths (no CRC).
std::vector<std::size_t> record_starts(const std::string& bytes) {
  std::vector<std::size_t> starts;
  for (std::size_t at = 0; at + 12 <= bytes.size();) {
    std::uint64_t len;
    std::memcpy(&len, bytes.data() + at, 8);
    starts.push_back(at);
    at += 12 + len + 4;
  }
  return starts;
}

// Each test gets its own temporary directory (tests/support/files.hpp).
using vigil::test::slurp;
class TbTest : public vigil::test::TempDirTest {};

// ---- protobuf wire format, by hand ------------------------------------------

using vigil::test::le;
using vigil::test::Pb;

// TensorFlow's DataType numbers.
enum Dtype { kFloat = 1, kDouble = 2, kInt32 = 3, kString = 7, kInt64 = 9, kBfloat16 = 14, kHalf = 19 };

Pb tensor(int dtype, std::vector<std::int64_t> dims) {
  Pb t;
  t.u(1, static_cast<std::uint64_t>(dtype));
  Pb shape;
  for (auto d : dims) shape.bytes(2, Pb().u(1, static_cast<std::uint64_t>(d)).s);
  if (!dims.empty()) t.bytes(2, shape.s);
  return t;
}

std::string simple(const std::string& tag, float v) { return Pb().bytes(1, tag).f32(2, v).s; }

std::string tensor_value(const std::string& tag, const Pb& t, const std::string& plugin = "") {
  Pb v;
  v.bytes(1, tag);
  if (!plugin.empty()) v.bytes(9, Pb().bytes(1, Pb().bytes(1, plugin).s).s);
  v.bytes(8, t.s);
  return v.s;
}

std::string event(std::int64_t step, double time, const std::vector<std::string>& values) {
  Pb summary;
  for (const auto& v : values) summary.bytes(1, v);
  return Pb().f64(1, time).u(2, static_cast<std::uint64_t>(step)).bytes(5, summary.s).s;
}

std::string event_file(const std::vector<std::string>& events) {
  std::string out;
  vigil::tb::append_record(out, Pb().f64(1, 1.0).bytes(3, "brain.Event:2").s);
  for (const auto& e : events) vigil::tb::append_record(out, e);
  return out;
}

// ---- CRC32C -------------------------------------------------------------------

TEST(Crc32c, KnownVectors) {
  using vigil::tb::crc32c;
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the standard check value
  // RFC 3720 (iSCSI) appendix B.4 vectors.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
}

TEST(Crc32c, ContinuesAcrossPiecesOfAnyLength) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>(i * 7 + 3));
  const auto whole = vigil::tb::crc32c(text);
  for (std::size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u, 1000u})
    EXPECT_EQ(vigil::tb::crc32c(std::string_view(text).substr(cut),
                                vigil::tb::crc32c(std::string_view(text).substr(0, cut))),
              whole)
        << cut;
}

TEST(Crc32c, FramingMatchesTheRealFile) {
  // The first record of the real file, re-framed by append_record, is byte-identical.
  const std::string bytes = slurp(lightning_file);
  const auto starts = record_starts(bytes);
  ASSERT_GT(starts.size(), 2u);
  const std::string first = bytes.substr(0, starts[1]);
  std::string reframed;
  vigil::tb::append_record(reframed, first.substr(12, first.size() - 16));
  EXPECT_EQ(reframed, first);
}

// ---- the real Lightning run -----------------------------------------------------

// From `tfevents_summary.py tests/tb/data/lightning_lstm_textgen`: 15445 records,
// 15441 of them events with one scalar each.
void expect_lightning(const ReadAll& r) {
  ASSERT_FALSE(r.error) << r.error->format();
  EXPECT_EQ(r.records.size(), 15441u);
  const auto s = summarize(r.records);
  ASSERT_EQ(s.size(), 4u);
  const auto& train = s.at("train_loss");
  EXPECT_EQ(train.count, 7691u);
  EXPECT_EQ(train.mode, "train");
  EXPECT_EQ(train.first_step, 49);
  EXPECT_EQ(train.first, 2.0573372840881348);
  EXPECT_EQ(train.first_time, 1716735749.0009108);
  EXPECT_EQ(train.last_step, 384549);
  EXPECT_EQ(train.last, 0.23888538777828217);
  const auto& val = s.at("val_loss");
  EXPECT_EQ(val.count, 29u);
  EXPECT_EQ(val.mode, "eval");  // Lightning's `val_` prefix
  EXPECT_EQ(val.first_step, 13261);
  EXPECT_EQ(val.first, 0.3606380522251129);
  EXPECT_EQ(val.last_step, 384597);
  EXPECT_EQ(val.last, 0.2555515468120575);
  const auto& epoch = s.at("epoch");
  EXPECT_EQ(epoch.count, 7720u);
  EXPECT_EQ(epoch.first_step, 49);
  EXPECT_EQ(epoch.first, 0.0);
  EXPECT_EQ(epoch.last_step, 384597);
  EXPECT_EQ(epoch.last, 28.0);
  const auto& hp = s.at("hp_metric");
  EXPECT_EQ(hp.count, 1u);
  EXPECT_EQ(hp.first_step, 0);
  EXPECT_EQ(hp.first, -1.0);
  // Merged in step order.
  for (std::size_t i = 1; i < r.records.size(); ++i)
    ASSERT_LE(r.records[i - 1].step, r.records[i].step) << i;
  EXPECT_EQ(r.size, 733246u);
  EXPECT_EQ(r.position, r.size);
}

TEST(TbReal, LightningDirectory) { expect_lightning(read_all(lightning_dir.string())); }

TEST(TbReal, LightningSingleFile) {
  EXPECT_EQ(vigil::to_string(*[] {
              vigil::TraceError e;
              return vigil::detect_trace_format(lightning_file.string(), e);
            }()),
            "tensorboard");
  expect_lightning(read_all(lightning_file.string()));
}

// ---- damage -------------------------------------------------------------------

class TbDamage : public TbTest {
 protected:
  void SetUp() override {
    TbTest::SetUp();
    bytes_ = slurp(lightning_file);
    starts_ = record_starts(bytes_);
    ASSERT_EQ(starts_.size(), 15445u);
    damaged_ = starts_[8000];
    // What a clean cut at the damaged record's start gives: the valid prefix.
    prefix_ = read_all(write("prefix/events.out.tfevents.0", bytes_.substr(0, damaged_)));
    ASSERT_FALSE(prefix_.error);
    ASSERT_GT(prefix_.records.size(), 7000u);
  }

  void expect_prefix_then(const ReadAll& r, const std::string& path, const std::string& message) {
    ASSERT_TRUE(r.error);
    EXPECT_EQ(r.error->file, path);
    EXPECT_EQ(r.error->offset, damaged_);
    EXPECT_EQ(r.error->message, message);
    EXPECT_EQ(r.error->format(), path + ": byte " + std::to_string(damaged_) + ": " + message);
    ASSERT_EQ(r.records.size(), prefix_.records.size());
    EXPECT_EQ(r.records.back().step, prefix_.records.back().step);
    EXPECT_EQ(r.records.back().values, prefix_.records.back().values);
  }

  std::string bytes_;
  std::vector<std::size_t> starts_;
  std::size_t damaged_ = 0;
  ReadAll prefix_;
};

TEST_F(TbDamage, TruncatedInTheData) {
  const auto path = write("cut/events.out.tfevents.1", bytes_.substr(0, damaged_ + 20));
  expect_prefix_then(read_all(path), path, "truncated record");
}

TEST_F(TbDamage, TruncatedInTheHeader) {
  const auto path = write("cut/events.out.tfevents.1", bytes_.substr(0, damaged_ + 5));
  expect_prefix_then(read_all(path), path, "truncated record");
}

TEST_F(TbDamage, TruncatedBeforeTheDataCrc) {
  const auto path = write("cut/events.out.tfevents.1", bytes_.substr(0, starts_[8001] - 1));
  expect_prefix_then(read_all(path), path, "truncated record");
}

TEST_F(TbDamage, FlippedDataByte) {
  std::string bad = bytes_;
  bad[damaged_ + 12 + 3] ^= 0x01;
  const auto path = write("flip/events.out.tfevents.1", bad);
  expect_prefix_then(read_all(path), path, "corrupt record: data crc mismatch");
}

TEST_F(TbDamage, FlippedLengthCrcByte) {
  std::string bad = bytes_;
  bad[damaged_ + 9] ^= 0x40;
  const auto path = write("flip/events.out.tfevents.1", bad);
  expect_prefix_then(read_all(path), path, "corrupt record: length crc mismatch");
}

TEST_F(TbDamage, FlippedLengthByte) {
  std::string bad = bytes_;
  bad[damaged_ + 6] ^= 0x10;  // a huge length: caught by its crc, not by reading on
  const auto path = write("flip/events.out.tfevents.1", bad);
  expect_prefix_then(read_all(path), path, "corrupt record: length crc mismatch");
}

TEST_F(TbDamage, DataCrcRightButNotAnEvent) {
  std::string bad = bytes_.substr(0, damaged_);
  vigil::tb::append_record(bad, "\xFF\xFF\xFF");  // invalid wire format, valid framing
  const auto path = write("junk/events.out.tfevents.1", bad);
  expect_prefix_then(read_all(path), path, "corrupt record: not an event protobuf");
}

TEST_F(TbDamage, OtherFilesInTheDirectoryStillRead) {
  // One damaged run among several: every good record of all files comes out
  // (merged), then the damaged file's error.
  std::string bad = bytes_;
  bad[damaged_ + 12 + 3] ^= 0x01;
  const auto bad_path = write("run/a/events.out.tfevents.1", bad);
  write("run/b/events.out.tfevents.2",
        event_file({event(1, 5.0, {simple("other", 1.5f)}), event(999999, 6.0, {simple("other", 2.5f)})}));
  const auto r = read_all((dir_ / "run").string());
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->file, bad_path);
  EXPECT_EQ(r.error->offset, damaged_);
  ASSERT_EQ(r.records.size(), prefix_.records.size() + 2);
  EXPECT_EQ(r.records.back().step, 999999);
  EXPECT_EQ(*value_of(r.records.back(), "other"), 2.5);
}

TEST_F(TbDamage, FollowWaitsForAnIncompleteRecord) {
  const auto path = write("live/events.out.tfevents.1", bytes_.substr(0, damaged_ + 20));
  vigil::TraceError open_error;
  vigil::TraceOptions options;
  options.follow = true;
  auto reader = vigil::open_tensorboard((dir_ / "live").string(), open_error, options);
  ASSERT_TRUE(reader) << open_error.format();
  ReadAll first;
  drain(*reader, first);
  EXPECT_FALSE(first.error);
  EXPECT_EQ(first.records.size(), prefix_.records.size());
  EXPECT_EQ(first.position, damaged_);
  // The trainer finishes writing the record and the file.
  std::ofstream(path, std::ios::binary | std::ios::app) << bytes_.substr(damaged_ + 20);
  ReadAll rest;
  drain(*reader, rest);
  EXPECT_FALSE(rest.error);
  EXPECT_EQ(first.records.size() + rest.records.size(), 15441u);
  EXPECT_EQ(rest.records.back().step, 384597);
  EXPECT_EQ(rest.position, bytes_.size());
}

TEST_F(TbDamage, FollowStillReportsACorruptRecord) {
  std::string bad = bytes_;
  bad[damaged_ + 12 + 3] ^= 0x01;
  const auto path = write("live/events.out.tfevents.1", bad);
  vigil::TraceError open_error;
  vigil::TraceOptions options;
  options.follow = true;
  auto reader = vigil::open_tensorboard(path, open_error, options);
  ASSERT_TRUE(reader);
  ReadAll r;
  drain(*reader, r);
  expect_prefix_then(r, path, "corrupt record: data crc mismatch");
}

// ---- scalar tensors -------------------------------------------------------------

TEST_F(TbTest, ScalarTensorVariants) {
  auto packed_floats = [](std::vector<float> v) {
    std::string s;
    for (float f : v) s += le(f);
    return s;
  };
  const std::vector<std::string> values = {
      simple("simple", 0.25f),
      tensor_value("float_packed", tensor(kFloat, {}).bytes(5, packed_floats({1.5f}))),
      tensor_value("float_unpacked", tensor(kFloat, {1}).f32(5, -2.5f)),
      tensor_value("double", tensor(kDouble, {}).bytes(6, le(0.1))),
      tensor_value("int32", tensor(kInt32, {}).bytes(7, Pb().varint(static_cast<std::uint64_t>(-7)).s)),
      tensor_value("int64", tensor(kInt64, {1, 1}).bytes(10, Pb().varint(1ull << 40).s)),
      // 0x3C00 is 1.0 in fp16, 0xC500 is -5.0, 0x0001 the smallest subnormal.
      tensor_value("half", tensor(kHalf, {}).bytes(13, Pb().varint(0xC500).s)),
      tensor_value("half_subnormal", tensor(kHalf, {}).bytes(13, Pb().varint(0x0001).s)),
      tensor_value("bfloat16", tensor(kBfloat16, {}).bytes(13, Pb().varint(0x3FC0).s)),
      tensor_value("content_float", tensor(kFloat, {}).bytes(4, le(3.25f))),
      tensor_value("content_double", tensor(kDouble, {1}).bytes(4, le(-1e300))),
      tensor_value("content_int32", tensor(kInt32, {}).bytes(4, le(std::int32_t{-123456}))),
      tensor_value("content_int64", tensor(kInt64, {}).bytes(4, le(std::int64_t{-(1ll << 50)}))),
      tensor_value("content_half", tensor(kHalf, {}).bytes(4, le(std::uint16_t{0x3C00}))),
      tensor_value("content_nan", tensor(kFloat, {}).bytes(4, le(std::nanf("")))),
      // Skipped, not errors: a vector, a string, a histogram-plugin tensor,
      // content of the wrong width, a tensor with no value.
      tensor_value("vector", tensor(kFloat, {3}).bytes(5, packed_floats({1, 2, 3}))),
      tensor_value("text", tensor(kString, {}).bytes(8, "hello")),
      tensor_value("histo", tensor(kDouble, {}).bytes(6, le(1.0)), "histograms"),
      tensor_value("bad_width", tensor(kFloat, {}).bytes(4, le(1.0))),
      tensor_value("empty", tensor(kFloat, {})),
  };
  const auto path = write("events.out.tfevents.1", event_file({event(7, 100.5, values)}));
  const auto r = read_all(path);
  ASSERT_FALSE(r.error) << r.error->format();
  ASSERT_EQ(r.records.size(), 1u);
  const auto& obs = r.records[0];
  EXPECT_EQ(obs.step, 7);
  EXPECT_EQ(obs.time, 100.5);
  EXPECT_EQ(obs.mode, "train");
  const std::map<std::string, double> expected = {
      {"simple", 0.25},         {"float_packed", 1.5},      {"float_unpacked", -2.5},
      {"double", 0.1},          {"int32", -7},              {"int64", 1099511627776.0},
      {"half", -5.0},           {"half_subnormal", std::ldexp(1.0, -24)},
      {"bfloat16", 1.5},        {"content_float", 3.25},    {"content_double", -1e300},
      {"content_int32", -123456}, {"content_int64", -1125899906842624.0},
      {"content_half", 1.0}};
  std::map<std::string, double> got;
  for (const auto& [k, v] : obs.values)
    if (k != "content_nan") got[k] = v;
  EXPECT_EQ(got, expected);
  ASSERT_TRUE(value_of(obs, "content_nan"));
  EXPECT_TRUE(std::isnan(*value_of(obs, "content_nan")));
}

TEST_F(TbTest, PluginMetadataIsRememberedPerTag) {
  // TensorBoard writes a tag's metadata with its first value only: later
  // values of a histogram tag carry no metadata and must still be skipped.
  const auto path = write(
      "events.out.tfevents.1",
      event_file({event(1, 1, {tensor_value("h", tensor(kDouble, {}).bytes(6, le(1.0)), "histograms"),
                               tensor_value("s", tensor(kFloat, {}).bytes(5, le(2.0f)), "scalars")}),
                  event(2, 2, {tensor_value("h", tensor(kDouble, {}).bytes(6, le(3.0))),
                               tensor_value("s", tensor(kFloat, {}).bytes(5, le(4.0f)))})}));
  const auto r = read_all(path);
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].values, (std::vector<std::pair<std::string, double>>{{"s", 2.0}}));
  EXPECT_EQ(r.records[1].values, (std::vector<std::pair<std::string, double>>{{"s", 4.0}}));
}

// Tags are found by their bytes through a small cache keyed by their length
// and first and last 8 bytes: tags that share all of those (only the middle
// differs) must still be told apart, short and long, and across events.
// The caller's observation is reused and scribbled on, as rulecheck does.
TEST_F(TbTest, TagsThatShareTheirEndsStayApart) {
  std::vector<std::string> tags;
  for (int i = 0; i < 300; ++i) tags.push_back("train/aaaaaaaa" + std::to_string(1000 + i) + "zzzzzzzz_loss");
  for (int i = 0; i < 40; ++i) tags.push_back(std::string(1, static_cast<char>('a' + i % 26)) + std::to_string(i % 3));
  tags.push_back("x");
  tags.push_back("eval/aaaaaaaa1000zzzzzzzz_loss");  // the same ends, another mode
  std::vector<std::string> events;
  for (int e = 0; e < 3; ++e) {
    std::vector<std::string> values;
    for (std::size_t i = 0; i < tags.size(); ++i)
      values.push_back(simple(tags[i], static_cast<float>(e * 1000 + static_cast<int>(i))));
    events.push_back(event(e + 1, e + 1.0, values));
  }
  const auto path = write("events.out.tfevents.1", event_file(events));
  vigil::TraceError error;
  auto reader = vigil::open_tensorboard(path, error);
  ASSERT_TRUE(reader) << error.format();
  vigil::Observation obs;
  int seen = 0;
  while (reader->next(obs)) {
    const int e = static_cast<int>(obs.step) - 1;
    std::map<std::string, double> expected;
    for (std::size_t i = 0; i < tags.size(); ++i)
      if ((obs.mode == "eval") == tags[i].starts_with("eval/"))
        expected[tags[i]] = e * 1000 + static_cast<double>(i);
    const std::map<std::string, double> got(obs.values.begin(), obs.values.end());
    EXPECT_EQ(got.size(), obs.values.size()) << "a tag handed out twice";
    EXPECT_EQ(got, expected) << obs.step << " " << obs.mode;
    ++seen;
    obs.values.emplace_back("scribbled over by the caller, long enough for the heap", 1);
    obs.values.front().first = "y";
    obs.mode = "scribbled";
  }
  EXPECT_FALSE(reader->error());
  EXPECT_EQ(seen, 6);  // a train and an eval observation per event
}

// ---- modes and merging --------------------------------------------------------

TEST_F(TbTest, EvalTagsBecomeEvalObservations) {
  const auto path = write(
      "events.out.tfevents.1",
      event_file({event(10, 1, {simple("train/loss", 1), simple("eval/loss", 2), simple("lr", 3),
                                simple("val_acc", 4), simple("test/acc", 5)}),
                  event(11, 2, {simple("Validation/loss", 6), simple("valid_loss", 7),
                                simple("evaluation_time", 8)})}));
  const auto r = read_all(path);
  ASSERT_FALSE(r.error);
  ASSERT_EQ(r.records.size(), 5u);
  using Values = std::vector<std::pair<std::string, double>>;
  // One event with several modes: one observation per mode, same step and time.
  EXPECT_EQ(r.records[0].mode, "train");
  EXPECT_EQ(r.records[0].values, (Values{{"train/loss", 1}, {"lr", 3}}));
  EXPECT_EQ(r.records[1].mode, "eval");
  EXPECT_EQ(r.records[1].values, (Values{{"eval/loss", 2}, {"val_acc", 4}}));
  EXPECT_EQ(r.records[1].step, 10);
  EXPECT_EQ(r.records[1].time, 1);
  EXPECT_EQ(r.records[2].mode, "test");
  EXPECT_EQ(r.records[3].mode, "eval");
  EXPECT_EQ(r.records[3].values, (Values{{"Validation/loss", 6}, {"valid_loss", 7}}));
  // `evaluation_time` is not an eval/ or eval_ prefix: a train series.
  EXPECT_EQ(r.records[4].mode, "train");
  EXPECT_EQ(r.records[4].values, (Values{{"evaluation_time", 8}}));
}

TEST_F(TbTest, DirectoryRunsMergeInStepThenTimeOrder) {
  // A restarted process writes a second file; Keras writes train/ and
  // validation/ runs with the same tags.
  write("logs/version_0/events.out.tfevents.100.host.1.0",
        event_file({event(1, 10, {simple("loss", 1)}), event(3, 30, {simple("loss", 3)}),
                    event(5, 50, {simple("loss", 5)})}));
  write("logs/version_0/events.out.tfevents.200.host.2.0",
        event_file({event(2, 20, {simple("loss", 2)}), event(3, 29, {simple("lr", 0.1f)}),
                    event(4, 40, {simple("loss", 4)})}));
  write("logs/validation/events.out.tfevents.300.host.1.v2",
        event_file({event(3, 31, {simple("loss", 0.5f)})}));
  write("logs/notes.txt", "not an event file");
  const auto r = read_all((dir_ / "logs").string());
  ASSERT_FALSE(r.error) << r.error->format();
  std::vector<std::tuple<std::int64_t, double, std::string>> got;
  for (const auto& obs : r.records) got.emplace_back(obs.step, obs.time, obs.mode);
  const std::vector<std::tuple<std::int64_t, double, std::string>> expected = {
      {1, 10, "train"}, {2, 20, "train"}, {3, 29, "train"}, {3, 30, "train"},
      {3, 31, "eval"},  {4, 40, "train"}, {5, 50, "train"}};
  EXPECT_EQ(got, expected);
  EXPECT_EQ(*value_of(r.records[4], "loss"), 0.5);
}

TEST_F(TbTest, OpenErrors) {
  vigil::TraceError e;
  EXPECT_FALSE(vigil::open_tensorboard((dir_ / "missing").string(), e));
  EXPECT_EQ(e.message, "cannot open: No such file or directory");
  write("empty/notes.txt", "x");
  EXPECT_FALSE(vigil::open_tensorboard((dir_ / "empty").string(), e));
  EXPECT_EQ(e.file, (dir_ / "empty").string());
  EXPECT_EQ(e.message, "no TensorBoard event files (names containing 'tfevents') here");
}

// ---- follow and the writer -------------------------------------------------------

TEST_F(TbTest, FollowPicksUpAppendedRecordsAndNewFiles) {
  const auto run = dir_ / "run";
  fs::create_directories(run);
  vigil::TraceError e;
  vigil::TraceOptions options;
  options.follow = true;
  auto reader = vigil::open_tensorboard(run.string(), e, options);
  ASSERT_TRUE(reader) << e.format();
  vigil::Observation obs;
  EXPECT_FALSE(reader->next(obs));  // nothing written yet: not an error
  EXPECT_FALSE(reader->error());

  auto writer = vigil::TensorBoardWriter::create((run / "events.out.tfevents.1.host").string(), e);
  ASSERT_TRUE(writer);
  ASSERT_TRUE(writer->write({.step = 1, .time = 10, .values = {{"loss", 2.0}}}));
  ASSERT_TRUE(writer->write({.step = 2, .time = 11, .values = {{"loss", 1.5}, {"eval/loss", 1.75}}}));
  ASSERT_TRUE(writer->flush());
  ReadAll r;
  drain(*reader, r);
  EXPECT_FALSE(r.error);
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.records[2].mode, "eval");
  EXPECT_EQ(r.records[2].values, (std::vector<std::pair<std::string, double>>{{"eval/loss", 1.75}}));

  // Half a record: not yet written.
  std::string partial;
  vigil::tb::append_record(partial, event(3, 12, {simple("loss", 1.25f)}));
  {
    std::ofstream(run / "events.out.tfevents.1.host", std::ios::binary | std::ios::app)
        << partial.substr(0, 10);
  }
  EXPECT_FALSE(reader->next(obs));
  EXPECT_FALSE(reader->error());
  {
    std::ofstream(run / "events.out.tfevents.1.host", std::ios::binary | std::ios::app)
        << partial.substr(10);
  }
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 3);
  EXPECT_EQ(*value_of(obs, "loss"), 1.25);

  // A new writer (a restarted process) in a subdirectory.
  auto second = vigil::TensorBoardWriter::create((run / "sub" / "x").string(), e);
  EXPECT_FALSE(second);  // the directory does not exist: a positioned open error
  EXPECT_EQ(e.file, (run / "sub" / "x").string());
  fs::create_directories(run / "sub");
  second = vigil::TensorBoardWriter::create((run / "sub" / "events.out.tfevents.2.host").string(), e);
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->write({.step = 4, .values = {{"loss", 1.0}}}));
  ASSERT_TRUE(second->flush());
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 4);
  EXPECT_FALSE(reader->next(obs));
  EXPECT_FALSE(reader->error());
}

TEST_F(TbTest, WriterRoundTripsThroughTheReader) {
  const auto path = (dir_ / "events.out.tfevents.9.host").string();
  {
    vigil::TraceError e;
    auto w = vigil::TensorBoardWriter::create(path, e);
    ASSERT_TRUE(w);
    for (int i = 0; i < 5000; ++i)  // more than one write buffer
      ASSERT_TRUE(w->write({.step = i, .time = 1000.0 + i, .values = {{"a", i * 0.5}, {"b", -i}}}));
    ASSERT_TRUE(w->write({.step = 5000, .values = {}}));  // nothing to write
    ASSERT_TRUE(w->write({.step = 5001, .values = {{"a", std::numeric_limits<double>::infinity()}}}));
  }  // flushed on destruction
  const auto r = read_all(path);
  ASSERT_FALSE(r.error) << r.error->format();
  ASSERT_EQ(r.records.size(), 5001u);
  EXPECT_EQ(r.records[4999].step, 4999);
  EXPECT_EQ(r.records[4999].time, 5999.0);
  EXPECT_EQ(*value_of(r.records[4999], "a"), 2499.5);
  EXPECT_EQ(*value_of(r.records[4999], "b"), -4999.0);
  EXPECT_TRUE(std::isinf(*value_of(r.records[5000], "a")));
  // The independent framing walk agrees with the writer's framing.
  EXPECT_EQ(record_starts(slurp(path)).size(), 5002u);
}

}  // namespace
