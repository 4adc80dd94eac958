// The keyed hand-out (TraceReader::next_keyed, include/vigil/trace.hpp) gives
// exactly what next(Observation&) gives: on every real trace in tests/ and
// examples/, on damaged copies of them (the same error at the same line and
// offset), on the trace fuzz corpus, and when a consumer mixes the two calls.
// And its ids keep their contract: dense, announced before use, names stable.

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/support/files.hpp"
#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path source_dir = VIGIL_SOURCE_DIR;

class KeyedTest : public vigil::test::TempDirTest {};

// Two observations are the same if every field is, values bit for bit (NaN
// payloads included: the keyed path must not change a value).
::testing::AssertionResult same(const vigil::Observation& a, const vigil::Observation& b) {
  auto bits = [](double v) { return std::bit_cast<std::uint64_t>(v); };
  if (a.step != b.step) return ::testing::AssertionFailure() << "step " << a.step << " vs " << b.step;
  if (a.mode != b.mode) return ::testing::AssertionFailure() << "mode " << a.mode << " vs " << b.mode;
  if (bits(a.time) != bits(b.time))
    return ::testing::AssertionFailure() << "time " << a.time << " vs " << b.time;
  if (a.values.size() != b.values.size())
    return ::testing::AssertionFailure() << a.values.size() << " vs " << b.values.size() << " values";
  for (std::size_t i = 0; i < a.values.size(); ++i)
    if (a.values[i].first != b.values[i].first || bits(a.values[i].second) != bits(b.values[i].second))
      return ::testing::AssertionFailure() << "value " << i << ": " << a.values[i].first << "="
                                           << a.values[i].second << " vs " << b.values[i].first << "="
                                           << b.values[i].second;
  return ::testing::AssertionSuccess();
}

// A keyed observation spelled out with the reader's names, checking the id
// contract on the way: every id below the count announced at return.
vigil::Observation spelled(const vigil::TraceReader& reader, const vigil::KeyedObservation& k) {
  vigil::Observation o;
  o.step = k.step;
  EXPECT_LT(k.mode, reader.mode_count());
  o.mode = std::string(reader.mode_name(k.mode));
  o.time = k.time;
  for (const auto& s : k.values) {
    EXPECT_LT(s.key, reader.key_count());
    o.values.emplace_back(std::string(reader.key_name(s.key)), s.value);
  }
  return o;
}

using Open = std::unique_ptr<vigil::TraceReader> (*)(const std::string&, vigil::TraceError&,
                                                      const vigil::TraceOptions&);

// Reads `path` twice, once with next() and once with next_keyed(), and
// expects the same observations, the same end (error or none), the same
// position. Returns the number of observations compared.
std::size_t expect_same_both_ways(const std::string& path, const vigil::TraceOptions& options = {},
                                  Open open = &vigil::open_trace) {
  SCOPED_TRACE(path);
  vigil::TraceError e1, e2;
  auto plain = open(path, e1, options);
  auto keyed = open(path, e2, options);
  EXPECT_EQ(plain == nullptr, keyed == nullptr);
  if (!plain || !keyed) {
    EXPECT_EQ(e1.format(), e2.format());
    return 0;
  }
  vigil::Observation obs;
  vigil::KeyedObservation k;
  std::size_t n = 0;
  // Names handed out stay valid for the reader's life: remembered as views.
  std::vector<std::string_view> names;
  std::vector<std::string> copies;
  for (;;) {
    const bool a = plain->next(obs);
    const bool b = keyed->next_keyed(k);
    EXPECT_EQ(a, b) << "after " << n << " observations";
    if (!a || !b) break;
    EXPECT_TRUE(same(obs, spelled(*keyed, k))) << "observation " << n;
    while (names.size() < keyed->key_count()) {
      names.push_back(keyed->key_name(static_cast<vigil::KeyId>(names.size())));
      copies.emplace_back(names.back());
    }
    ++n;
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i], copies[i]);
    EXPECT_EQ(keyed->key_name(static_cast<vigil::KeyId>(i)).data(), names[i].data());
  }
  EXPECT_EQ(plain->error().has_value(), keyed->error().has_value());
  if (plain->error() && keyed->error()) {
    EXPECT_EQ(plain->error()->format(), keyed->error()->format());
    EXPECT_EQ(plain->error()->line, keyed->error()->line);
    EXPECT_EQ(plain->error()->offset, keyed->error()->offset);
  }
  EXPECT_EQ(plain->position(), keyed->position());
  EXPECT_EQ(plain->size(), keyed->size());
  EXPECT_EQ(plain->mode_name(0), "train");
  return n;
}

bool is_trace_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.ends_with(".jsonl") || name.ends_with(".csv") ||
         name.find("tfevents") != std::string::npos || name == "trainer_state.json";
}

// Every trace file in tests/ (the fuzz corpus apart) and examples/, and each
// directory holding event files (read as a TensorBoard run).
std::vector<std::string> real_traces() {
  std::vector<std::string> out;
  std::vector<std::string> dirs;
  for (const char* top : {"tests", "examples"})
    for (const auto& entry : fs::recursive_directory_iterator(source_dir / top)) {
      if (!entry.is_regular_file() || entry.path().string().find("/fuzz/") != std::string::npos)
        continue;
      if (!is_trace_file(entry.path())) continue;
      out.push_back(entry.path().string());
      if (entry.path().filename().string().find("tfevents") != std::string::npos)
        dirs.push_back(entry.path().parent_path().string());
    }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  out.insert(out.end(), dirs.begin(), dirs.end());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Keyed, EveryRealTraceGivesTheSameObservationsBothWays) {
  const auto traces = real_traces();
  ASSERT_GE(traces.size(), 40u);  // the suite's real traces: if they moved, find them again
  std::size_t observations = 0;
  for (const auto& path : traces) observations += expect_same_both_ways(path);
  EXPECT_GT(observations, 20000u);
}

TEST(Keyed, EachReaderByItsOwnOpenerToo) {
  // open_trace picks by content; each format's own opener on its files.
  expect_same_both_ways((source_dir / "tests/trace/data/nanogpt_muon_head.jsonl").string(), {},
                        &vigil::open_jsonl);
  expect_same_both_ways((source_dir / "tests/tb/data/lightning_lstm_textgen").string(), {},
                        &vigil::open_tensorboard);
  for (const auto& path : real_traces())
    if (path.ends_with(".csv")) expect_same_both_ways(path, {}, &vigil::open_csv);
}

// Damaged copies of every real trace file: cut at seven places, and one byte
// changed at seven others (a digit, a quote, a comma, a brace, a control
// byte): whatever each reader makes of it, both ways agree, error included.
TEST_F(KeyedTest, DamagedCopiesGiveTheSameErrorAtTheSamePosition) {
  std::size_t files = 0, errors = 0;
  for (const auto& path : real_traces()) {
    if (fs::is_directory(path)) continue;
    const std::string bytes = vigil::test::slurp(path);
    if (bytes.size() < 16) continue;
    const std::string ext = fs::path(path).filename().string().find("tfevents") != std::string::npos
                                ? "events.out.tfevents.1.x"
                                : fs::path(path).filename().string();
    static constexpr char replacements[] = {'7', '"', ',', '{', '\x01', 'x', '\n'};
    for (int k = 1; k <= 7; ++k) {
      const std::size_t at = bytes.size() * static_cast<std::size_t>(k) / 8;
      for (const bool cut : {true, false}) {
        std::string damaged = bytes;
        if (cut) damaged.resize(at);
        else damaged[at] = replacements[k - 1];
        const auto copy = (dir_ / (std::to_string(files++) + "_" + ext)).string();
        std::ofstream(copy, std::ios::binary) << damaged;
        expect_same_both_ways(copy);
        vigil::TraceError e;
        if (auto r = vigil::open_trace(copy, e)) {
          vigil::Observation o;
          while (r->next(o)) {
          }
          errors += r->error().has_value();
        }
      }
    }
  }
  EXPECT_GT(errors, 50u);  // the damage was seen as such, not only read past
}

// The trace fuzz corpus, read as tests/fuzz/trace_fuzz.cpp reads it: the
// first byte picks the reader (% 5), a 64-byte line cap (bit 3) and follow
// mode (bit 4); the rest is the file.
TEST(Keyed, FuzzCorpusGivesTheSameBothWays) {
  const fs::path corpus = source_dir / "tests/fuzz/corpus/trace";
  static constexpr Open openers[] = {&vigil::open_trace, &vigil::open_jsonl, &vigil::open_csv,
                                     &vigil::open_tensorboard, &vigil::open_hf_trainer_state};
  const int memfd = ::memfd_create("vigil-keyed-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  const std::string memfd_path = "/proc/self/fd/" + std::to_string(memfd);
  std::size_t inputs = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    const std::string bytes = vigil::test::slurp(entry.path());
    if (bytes.empty()) continue;
    const auto first = static_cast<unsigned char>(bytes[0]);
    vigil::TraceOptions options;
    if ((first & 0x08) != 0) options.max_line_bytes = 64;
    options.follow = (first & 0x10) != 0;
    // In one in-memory file, as the fuzz target does (a disk write per
    // input made this test I/O-bound).
    ASSERT_EQ(::ftruncate(memfd, 0), 0);
    ASSERT_EQ(::pwrite(memfd, bytes.data() + 1, bytes.size() - 1, 0),
              static_cast<ssize_t>(bytes.size() - 1));
    expect_same_both_ways(memfd_path, options, openers[first % 5]);
    ++inputs;
  }
  ::close(memfd);
  EXPECT_GT(inputs, 1000u);
}

// next() and next_keyed() draw from one sequence: alternating them on one
// reader gives what either gives alone.
TEST(Keyed, MixingTheTwoCallsOnOneReaderKeepsTheSequence) {
  for (const char* rel : {"tests/trace/data/nanogpt_muon_head.jsonl", "tests/tb/data/lightning_lstm_textgen",
                          "tests/csvhf/data/keras/3.5-classifying-movie-reviews.fit1.csv"}) {
    const auto path = (source_dir / rel).string();
    SCOPED_TRACE(path);
    vigil::TraceError e;
    auto reference = vigil::open_trace(path, e);
    auto mixed = vigil::open_trace(path, e);
    ASSERT_TRUE(reference && mixed);
    vigil::Observation want, got;
    vigil::KeyedObservation k;
    std::size_t n = 0;
    while (reference->next(want)) {
      if (n % 3 == 1) {
        ASSERT_TRUE(mixed->next_keyed(k));
        got = spelled(*mixed, k);
      } else {
        ASSERT_TRUE(mixed->next(got));
      }
      EXPECT_TRUE(same(want, got)) << "observation " << n;
      ++n;
    }
    EXPECT_FALSE(mixed->next_keyed(k));
    EXPECT_GT(n, 10u);
  }
}

// Ids are dense and in order of first meeting; a CSV header announces its
// series columns before any row; a JSONL key and a mode keep their id.
TEST_F(KeyedTest, IdsAreDenseStableAndAnnounced) {
  const auto csv = write("m.csv", "step,loss,val_loss,epoch\n1,0.5,,0\n2,,0.4,0\n");
  vigil::TraceError e;
  auto r = vigil::open_csv(csv, e);
  ASSERT_TRUE(r) << e.format();
  EXPECT_EQ(r->key_count(), 3u);  // loss, val_loss, epoch: the header's
  EXPECT_EQ(r->key_name(0), "loss");
  EXPECT_EQ(r->key_name(1), "val_loss");
  EXPECT_EQ(r->key_name(2), "epoch");
  vigil::KeyedObservation k;
  ASSERT_TRUE(r->next_keyed(k));
  EXPECT_EQ(r->mode_name(k.mode), "train");
  ASSERT_EQ(k.values.size(), 2u);  // shared columns first (epoch), then the mode's
  EXPECT_EQ(k.values[0].key, 2u);
  EXPECT_EQ(k.values[1].key, 0u);
  ASSERT_TRUE(r->next_keyed(k));
  EXPECT_EQ(r->mode_name(k.mode), "eval");
  EXPECT_EQ(k.values[1].key, 1u);

  const auto jsonl = write("t.jsonl",
                           "{\"step\": 1, \"values\": {\"b\": 1, \"a\": 2}}\n"
                           "{\"step\": 2, \"mode\": \"eval\", \"values\": {\"a\": 3, \"c{x=\\\"1\\\"}\": 4}}\n"
                           "{\"step\": 3, \"values\": {\"a\": null, \"b\": NaN}}\n");
  r = vigil::open_jsonl(jsonl, e);
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->next_keyed(k));
  ASSERT_EQ(k.values.size(), 2u);
  const vigil::KeyId a = k.values[0].key, b = k.values[1].key;  // in key order: a, b
  EXPECT_EQ(r->key_name(a), "a");
  EXPECT_EQ(r->key_name(b), "b");
  EXPECT_EQ(r->key_count(), 2u);
  ASSERT_TRUE(r->next_keyed(k));  // the fast path
  EXPECT_EQ(r->mode_name(k.mode), "eval");
  ASSERT_EQ(k.values.size(), 2u);
  EXPECT_EQ(k.values[0].key, a);
  EXPECT_EQ(r->key_name(k.values[1].key), "c{x=\"1\"}");
  EXPECT_EQ(k.values[1].key, 2u);
  ASSERT_TRUE(r->next_keyed(k));  // the general path (null, bare NaN): the same ids
  EXPECT_EQ(k.mode, 0u);
  ASSERT_EQ(k.values.size(), 1u);
  EXPECT_EQ(k.values[0].key, b);
  EXPECT_TRUE(std::isnan(k.values[0].value));
  EXPECT_FALSE(r->next_keyed(k));
  EXPECT_FALSE(r->error());
}

}  // namespace
