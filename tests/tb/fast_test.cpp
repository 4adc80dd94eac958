// The TensorBoard reader's fast path (trace/tensorboard_fast.hpp,
// take_plain_scalars) against its general path: parse_record, then
// decode_event, then the known-scalar check the reader makes. The fast path
// may only take records the general path reads as a plain scalar of a known
// tag, with the same step, wall time, tag and value bits; it must take every
// plain record built by hand and stop exactly at the first record that is
// anything else (damaged, cut short, another layout, an unknown tag).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tb/pb_builder.hpp"
#include "trace/event.pb.h"
#include "trace/tensorboard_fast.hpp"
#include "trace/tensorboard_record.hpp"
#include "trace/tensorboard_wire.hpp"

namespace {

using vigil::test::le;
using vigil::test::Pb;

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// A scalar as read, with the bits of its floating-point fields (NaN == NaN).
struct Read {
  std::int64_t step;
  std::uint64_t time_bits;
  std::string tag;
  std::uint32_t value_bits;
  std::uint32_t id;
  bool operator==(const Read&) const = default;
};

struct Taken {
  std::vector<Read> reads;
  std::size_t consumed = 0;  // bytes of the records read
};

// Tags and their ids: what the reader's key table knows.
struct Known {
  std::vector<std::string> tags;
  std::uint32_t operator()(std::string_view tag) const {
    for (std::size_t i = 0; i < tags.size(); ++i)
      if (tags[i] == tag) return static_cast<std::uint32_t>(i);
    return kNone;
  }
};

// The general path: records read while each is whole and valid and decodes
// to one simple_value of a known, non-empty tag without metadata (what the
// reader's add_known_scalar takes); stops at the first other record.
Taken general(std::string_view bytes, const Known& known,
              std::size_t limit = std::numeric_limits<std::size_t>::max()) {
  Taken run;
  vigil::tb::WireEvent e;
  while (run.reads.size() < limit) {
    const auto r = vigil::tb::parse_record(bytes.substr(run.consumed));
    if (r.status != vigil::tb::RecordStatus::ok || !vigil::tb::decode_event(r.data, e)) break;
    if (!e.has_summary || e.values.size() != 1) break;
    const auto& v = e.values[0];
    if (v.kind != vigil::tb::WireValue::Kind::simple || v.has_metadata || v.tag.empty()) break;
    const std::uint32_t id = known(v.tag);
    if (id == kNone) break;
    run.reads.push_back({e.step, std::bit_cast<std::uint64_t>(e.wall_time), std::string(v.tag),
                         std::bit_cast<std::uint32_t>(v.simple), id});
    run.consumed += r.size;
  }
  return run;
}

#if VIGIL_TB_FAST_RECORDS
Taken fast(std::string_view bytes, const Known& known) {
  Taken run;
  run.consumed = vigil::tb::take_plain_scalars(
      bytes, kNone, [&](std::string_view tag) { return tag.empty() ? kNone : known(tag); },
      [&](const vigil::tb::PlainScalar& s, std::uint32_t id) {
        run.reads.push_back({s.step, std::bit_cast<std::uint64_t>(s.wall_time), std::string(s.tag),
                             std::bit_cast<std::uint32_t>(s.value), id});
      });
  return run;
}
#endif

// The plain layout, byte for byte: 09 time 10 step 2a n 0a n-2 0a k tag 15 value.
std::string plain_data(double time, std::uint64_t step, const std::string& tag, float value) {
  const std::string v = Pb().bytes(1, tag).f32(2, value).s;
  const std::string summary = Pb().bytes(1, v).s;
  return Pb().f64(1, time).u(2, step).bytes(5, summary).s;
}

std::string framed(std::string_view data) {
  std::string out;
  vigil::tb::append_record(out, data);
  return out;
}

class TbFast : public ::testing::Test {
 protected:
  void SetUp() override {
#if !VIGIL_TB_FAST_RECORDS
    GTEST_SKIP() << "no fast path on this architecture";
#else
    if (!vigil::tb::crc32c_hardware()) GTEST_SKIP() << "no CRC instruction: the reader never takes the fast path";
#endif
  }

  // `prefix` taken whole by both paths, then the records after it: the fast
  // path must stop right after the prefix, and never disagree.
  void expect_stops_after(const std::string& prefix, std::size_t prefix_records, const std::string& rest,
                          const Known& known, const std::string& what) {
#if VIGIL_TB_FAST_RECORDS
    const std::string bytes = prefix + rest;
    const Taken f = fast(bytes, known), g = general(bytes, known);
    ASSERT_EQ(f.reads.size(), prefix_records) << what;
    ASSERT_EQ(f.consumed, prefix.size()) << what;
    ASSERT_LE(f.reads.size(), g.reads.size()) << what;
    for (std::size_t i = 0; i < f.reads.size(); ++i) ASSERT_EQ(f.reads[i], g.reads[i]) << what << ", record " << i;
#endif
  }

  // Whatever the bytes, every record the fast path takes the general path
  // reads the same, in the same place.
  static void expect_agrees(std::string_view bytes, const Known& known, const std::string& what) {
#if VIGIL_TB_FAST_RECORDS
    const Taken f = fast(bytes, known), g = general(bytes, known, f.reads.size() + 1);
    ASSERT_LE(f.reads.size(), g.reads.size()) << what;
    for (std::size_t i = 0; i < f.reads.size(); ++i) ASSERT_EQ(f.reads[i], g.reads[i]) << what << ", record " << i;
    // The bytes taken are the taken records' whole frames.
    std::size_t frames = 0;
    for (std::size_t i = 0; i < f.reads.size(); ++i)
      frames += vigil::tb::parse_record(bytes.substr(frames)).size;
    ASSERT_EQ(f.consumed, frames) << what;
#endif
  }
};

// Steps of every varint width, tags of 1-118 bytes (the longest whose
// summary length still takes one byte), wall times and values of every
// kind: all taken, with the general path's values.
TEST_F(TbFast, PlainRecordsAreAllTaken) {
  const std::uint64_t steps[] = {0,       1,          127,        128,           16383,
                                 16384,   (1u << 21) - 1, 1u << 21, (1u << 28) - 1, 1u << 28,
                                 std::uint64_t{1} << 35, std::uint64_t{1} << 62,
                                 static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())};
  const double times[] = {1716735746.25, 0.0, -0.0, std::numeric_limits<double>::quiet_NaN(),
                          std::numeric_limits<double>::infinity(), 5e-324};
  const float values[] = {0.125f, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::infinity(), 1e-45f, 3.4e38f};
  Known known;
  std::string bytes;
  std::size_t n = 0;
  for (std::size_t tag_size = 1; tag_size <= 118; ++tag_size) known.tags.push_back(std::string(tag_size, 'a' + tag_size % 26));
  for (const std::uint64_t step : steps)
    for (const double time : times)
      for (const float value : values)
        for (std::size_t tag_size : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{16}, std::size_t{17}, std::size_t{110}, std::size_t{118}}) {
          bytes += framed(plain_data(time, step, known.tags[tag_size - 1], value));
          ++n;
        }
  for (std::size_t t = 0; t < known.tags.size(); ++t) {
    bytes += framed(plain_data(1.5, t, known.tags[t], 2.5f));
    ++n;
  }
  expect_stops_after(bytes, n, "", known, "plain records");
  // The values are the ones written (the general path is held to protobuf
  // in wire_test.cpp; here a spot check that both read what was meant).
#if VIGIL_TB_FAST_RECORDS
  const Taken f = fast(bytes, known);
  ASSERT_EQ(f.reads.size(), n);
  EXPECT_EQ(f.reads.back().step, 117);
  EXPECT_EQ(f.reads.back().tag, known.tags.back());
  EXPECT_EQ(std::bit_cast<float>(f.reads.back().value_bits), 2.5f);
  EXPECT_EQ(std::bit_cast<double>(f.reads.back().time_bits), 1.5);
#endif
}

// After two plain records, one that is anything else: the fast path takes
// the two and stops there, whether the general path reads the third (as
// another layout or an unknown tag) or fails on it (damage, cut short).
TEST_F(TbFast, StopsAtTheFirstOtherRecord) {
  Known known{{"loss", "lr", "a_tag_of_more_than_sixteen_bytes"}};
  const std::string prefix = framed(plain_data(10.0, 1, "loss", 1.0f)) + framed(plain_data(11.0, 2, "lr", 0.5f));
  const std::string plain = plain_data(12.0, 3, "loss", 0.25f);
  const std::string summary = Pb().bytes(1, Pb().bytes(1, "loss").f32(2, 1).s).s;
  std::vector<std::pair<std::string, std::string>> others = {
      {"unknown tag", framed(plain_data(12.0, 3, "los", 0.25f))},
      {"unknown tag, same first and last bytes", framed(plain_data(12.0, 3, "lossloss", 0.25f))},
      {"empty tag", framed(plain_data(12.0, 3, "", 0.25f))},
      {"negative step (10 bytes)", framed(plain_data(12.0, static_cast<std::uint64_t>(-3), "loss", 0.25f))},
      {"no wall_time", framed(Pb().u(2, 3).bytes(5, Pb().bytes(1, Pb().bytes(1, "loss").f32(2, 1).s).s).s)},
      {"no step", framed(Pb().f64(1, 12.0).bytes(5, Pb().bytes(1, Pb().bytes(1, "loss").f32(2, 1).s).s).s)},
      {"fields in another order",
       framed(Pb().u(2, 3).f64(1, 12.0).bytes(5, Pb().bytes(1, Pb().bytes(1, "loss").f32(2, 1).s).s).s)},
      {"a second value",
       framed(Pb().f64(1, 12.0).u(2, 3).bytes(5, Pb().bytes(1, Pb().bytes(1, "loss").f32(2, 1).s)
                                                    .bytes(1, Pb().bytes(1, "lr").f32(2, 1).s).s).s)},
      {"metadata", framed(Pb().f64(1, 12.0).u(2, 3).bytes(5, Pb().bytes(1, Pb().bytes(1, "loss").bytes(9, Pb().bytes(1, Pb().bytes(1, "scalars").s).s).f32(2, 1).s).s).s)},
      {"tensor value",
       framed(Pb().f64(1, 12.0).u(2, 3).bytes(5, Pb().bytes(1, Pb().bytes(1, "loss").bytes(8, Pb().u(1, 1).f32(5, 1).s).s).s).s)},
      {"a fixed32 field other than simple_value",
       framed(Pb().f64(1, 12.0).u(2, 3).bytes(5, Pb().bytes(1, Pb().bytes(1, "lr").key(3, 5).raw(le(1.0f)).s).s).s)},
      {"file_version", framed(Pb().f64(1, 12.0).bytes(3, "brain.Event:2").s)},
      {"a byte more", framed(plain + '\x00')},
      {"a second step after the summary", framed(plain + Pb().u(2, 99).s)},
      {"a 2-byte summary length", framed(Pb().f64(1, 12.0).u(2, 3).key(5, 2).overlong(summary.size(), 2).raw(summary).s)},
      {"data over 255 bytes",
       framed(Pb().f64(1, 12.0).u(2, 3).bytes(5, Pb().bytes(1, Pb().bytes(1, std::string(300, 'x')).f32(2, 1).s).s).s)},
      {"not an event", framed("\xFF\xFF\xFF")},
  };
  // Damage: every byte of a plain record's frame flipped in turn.
  const std::string good = framed(plain);
  for (std::size_t at = 0; at < good.size(); ++at) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    others.emplace_back("flipped byte " + std::to_string(at), bad);
  }
  for (const auto& [what, record] : others) {
    // And a plain record after it, which must not be reached.
    expect_stops_after(prefix, 2, record + good, known, what);
    if (HasFatalFailure()) return;
  }
  // Cut short: every length of a plain record's frame, at the end of the bytes.
  for (std::size_t cut = 0; cut < good.size(); ++cut) {
    expect_stops_after(prefix, 2, good.substr(0, cut), known, "cut at " + std::to_string(cut));
    if (HasFatalFailure()) return;
  }
  // The general path does read some of them as known scalars: the fast path
  // declining those costs only time.
  EXPECT_EQ(general(prefix + framed(Pb().u(2, 3).f64(1, 12.0).bytes(5, Pb().bytes(1, Pb().bytes(1, "loss").f32(2, 1).s).s).s), known).reads.size(), 3u);
}

// The Lightning run's records and seeded mutations of runs of plain
// records (bytes changed, cut, inserted, deleted): whatever the fast path
// takes, the general path reads the same.
TEST_F(TbFast, RealRecordsAndMutations) {
  std::ifstream in(VIGIL_SOURCE_DIR "/tests/tb/data/lightning_lstm_textgen/"
                                    "events.out.tfevents.1716735746.99c8c45923de.3769.0",
                   std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  const std::string real = s.str();
  ASSERT_GT(real.size(), 100000u);
  // Every tag of the run known, then none.
  Known known;
  {
    vigil::tb::WireEvent e;
    std::set<std::string> tags;
    for (std::string_view rest = real; !rest.empty();) {
      const auto r = vigil::tb::parse_record(rest);
      ASSERT_EQ(r.status, vigil::tb::RecordStatus::ok);
      ASSERT_TRUE(vigil::tb::decode_event(r.data, e));
      for (const auto& v : e.values) tags.emplace(v.tag);
      rest.remove_prefix(r.size);
    }
    known.tags.assign(tags.begin(), tags.end());
  }
  // As the reader goes: the fast path from each record where it stopped
  // on, that record read by the general path. Nearly every record of the
  // run is plain (the first of each tag carries the plugin's metadata).
  std::size_t taken = 0, declined = 0;
  for (std::string_view rest = real; !rest.empty();) {
    expect_agrees(rest, known, "the Lightning run at byte " + std::to_string(real.size() - rest.size()));
    expect_agrees(rest, Known{}, "the Lightning run, no tag known");
    if (HasFatalFailure()) return;
#if VIGIL_TB_FAST_RECORDS
    const Taken f = fast(rest, known);
    taken += f.reads.size();
    rest.remove_prefix(f.consumed);
#endif
    if (rest.empty()) break;
    rest.remove_prefix(vigil::tb::parse_record(rest).size);
    ++declined;
  }
#if VIGIL_TB_FAST_RECORDS
  EXPECT_EQ(taken + declined, 15445u);
  EXPECT_GT(taken, 15000u);
#endif

  std::mt19937_64 rng(6);
  Known few{{"loss", "lr", "val_loss", "a_tag_of_more_than_sixteen_bytes"}};
  std::string seed;
  for (int i = 0; i < 12; ++i)
    seed += framed(plain_data(100.0 + i, static_cast<std::uint64_t>(i) << (3 * i), few.tags[i % 4], 0.5f * i));
  std::size_t taken_some = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string m = seed;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % m.size();
      switch (rng() % 5) {
        case 0: m[at] = static_cast<char>(rng()); break;
        case 1: m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8))); break;
        case 2: m.resize(std::max<std::size_t>(at, 1)); break;
        case 3: m.insert(at, 1, static_cast<char>(rng())); break;
        case 4: m.erase(at, 1 + rng() % 3); break;
      }
      if (m.empty()) m = "x";
    }
    expect_agrees(m, few, "mutation " + std::to_string(round));
    if (HasFatalFailure()) return;
#if VIGIL_TB_FAST_RECORDS
    taken_some += fast(m, few).reads.empty() ? 0 : 1;
#endif
  }
#if VIGIL_TB_FAST_RECORDS
  EXPECT_GT(taken_some, 10000u);
#endif
}

}  // namespace
