// The TensorBoard reader decodes Event records from the protobuf wire format
// itself (trace/tensorboard_wire.hpp). This test holds it to its contract:
// on every input, it accepts exactly what protobuf's generated parser for
// trace/event.proto accepts and reads the same values. The inputs: every
// record of every event file in tests/, every file of the trace fuzz corpus
// (as a record's data and through its TFRecord frames), hand-built events
// with every field kind, unknown fields of each wire type, packed and
// unpacked tensor values, negative and huge steps, overlong varints, oneof
// switches and merges, nesting at protobuf's depth limit; and seeded random
// mutations of all of those.
//
// The reference for tensor values is the reader's previous code, kept here:
// tensor_scalar over the generated TensorProto.

#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <google/protobuf/stubs/logging.h>

#include "trace/event.pb.h"
#include "trace/tensorboard_record.hpp"
#include "trace/tensorboard_wire.hpp"
#include "tests/tb/pb_builder.hpp"

namespace {

namespace fs = std::filesystem;

// ---- the reference: protobuf and the reader's former tensor_scalar ----------

// The half/bfloat16 conversions are the library's (their values are checked
// against known bit patterns in tensorboard_test.cpp); the reference differs
// in how it finds the element.
using vigil::tb::bfloat16_to_double;
using vigil::tb::half_to_double;

template <typename T>
double load_le(const std::string& bytes) {
  T v;
  std::memcpy(&v, bytes.data(), sizeof(T));
  return static_cast<double>(v);
}

std::optional<double> reference_scalar(const vigil::tb::TensorProto& t) {
  namespace tb = vigil::tb;
  const auto& shape = t.tensor_shape();
  if (shape.unknown_rank()) return std::nullopt;
  for (const auto& dim : shape.dim())
    if (dim.size() != 1) return std::nullopt;
  const std::string& content = t.tensor_content();
  auto from_content = [&](std::size_t width, auto load) -> std::optional<double> {
    if (content.size() != width) return std::nullopt;
    return load(content);
  };
  auto one = [](const auto& field) -> std::optional<double> {
    if (field.size() != 1) return std::nullopt;
    return static_cast<double>(field.Get(0));
  };
  const bool packed = !content.empty();
  switch (t.dtype()) {
    case tb::DT_FLOAT: return packed ? from_content(4, load_le<float>) : one(t.float_val());
    case tb::DT_DOUBLE: return packed ? from_content(8, load_le<double>) : one(t.double_val());
    case tb::DT_INT32: return packed ? from_content(4, load_le<std::int32_t>) : one(t.int_val());
    case tb::DT_INT16: return packed ? from_content(2, load_le<std::int16_t>) : one(t.int_val());
    case tb::DT_INT8: return packed ? from_content(1, load_le<std::int8_t>) : one(t.int_val());
    case tb::DT_UINT8: return packed ? from_content(1, load_le<std::uint8_t>) : one(t.int_val());
    case tb::DT_INT64: return packed ? from_content(8, load_le<std::int64_t>) : one(t.int64_val());
    case tb::DT_BOOL: return packed ? from_content(1, load_le<std::uint8_t>) : one(t.bool_val());
    case tb::DT_HALF:
    case tb::DT_BFLOAT16: {
      const auto convert = t.dtype() == tb::DT_HALF ? half_to_double : bfloat16_to_double;
      if (packed) {
        if (content.size() != 2) return std::nullopt;
        return convert(static_cast<std::uint8_t>(content[0]) |
                       (static_cast<std::uint32_t>(static_cast<std::uint8_t>(content[1])) << 8));
      }
      if (t.half_val_size() != 1) return std::nullopt;
      return convert(static_cast<std::uint32_t>(t.half_val(0)));
    }
    default: return std::nullopt;
  }
}

std::uint64_t bits(double d) { return std::bit_cast<std::uint64_t>(d); }

// Counts, so that a test can show it covered both outcomes.
struct Tally {
  std::size_t accepted = 0, rejected = 0;
};

// Decodes `data` both ways and compares everything the reader uses.
void same_as_protobuf(std::string_view data, Tally& tally, const std::string& what) {
  vigil::tb::Event e;
  bool pb_ok;
  {
    google::protobuf::LogSilencer quiet;
    pb_ok = e.ParseFromArray(data.data(), static_cast<int>(data.size()));
  }
  vigil::tb::WireEvent w;
  // Decoded twice into one object: the second decode must not see the first.
  vigil::tb::decode_event("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f\x10\x05\x2a\x07\x0a\x05\x0a\x01x\x15\x00", w);
  const bool wire_ok = vigil::tb::decode_event(data, w);
  ASSERT_EQ(wire_ok, pb_ok) << what;
  if (!pb_ok) {
    ++tally.rejected;
    return;
  }
  ++tally.accepted;
  EXPECT_EQ(bits(w.wall_time), bits(e.wall_time())) << what;
  EXPECT_EQ(w.step, e.step()) << what;
  ASSERT_EQ(w.has_summary, e.has_summary()) << what;
  if (!w.has_summary) return;
  const auto& values = e.summary().value();
  ASSERT_EQ(w.values.size(), static_cast<std::size_t>(values.size())) << what;
  for (int i = 0; i < values.size(); ++i) {
    const auto& pv = values[i];
    const auto& wv = w.values[static_cast<std::size_t>(i)];
    EXPECT_EQ(wv.tag, pv.tag()) << what;
    EXPECT_EQ(wv.has_metadata, pv.has_metadata()) << what;
    EXPECT_EQ(wv.plugin_name, pv.metadata().plugin_data().plugin_name()) << what;
    using Kind = vigil::tb::WireValue::Kind;
    const Kind expected = pv.value_case() == vigil::tb::Summary::Value::kSimpleValue ? Kind::simple
                          : pv.value_case() == vigil::tb::Summary::Value::kTensor   ? Kind::tensor
                                                                                    : Kind::none;
    ASSERT_EQ(wv.kind, expected) << what;
    if (expected == Kind::simple) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(wv.simple), std::bit_cast<std::uint32_t>(pv.simple_value()))
          << what;
    }
    if (expected == Kind::tensor) {
      const auto want = reference_scalar(pv.tensor());
      const auto got = vigil::tb::tensor_scalar(wv.tensor);
      ASSERT_EQ(got.has_value(), want.has_value()) << what;
      if (want) {
        EXPECT_EQ(bits(*got), bits(*want)) << what;
      }
    }
  }
}

// ---- inputs ---------------------------------------------------------------------

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The data of each whole, CRC-valid record at the start of `bytes`.
std::vector<std::string> records_of(std::string_view bytes) {
  std::vector<std::string> out;
  while (!bytes.empty()) {
    const auto r = vigil::tb::parse_record(bytes);
    if (r.status != vigil::tb::RecordStatus::ok) break;
    out.emplace_back(r.data);
    bytes.remove_prefix(r.size);
  }
  return out;
}

using vigil::test::le;
using vigil::test::Pb;

std::string nested_groups(int depth, std::uint64_t field) {
  std::string inner = Pb().u(1, 7).s;
  for (int i = 0; i < depth; ++i) inner = Pb().group(field, inner).s;
  return inner;
}

// Hand-built events: every field the reader reads, in every encoding
// protobuf accepts, and each kind of unknown field around them.
std::vector<std::string> built_events() {
  std::vector<std::string> out;
  const std::string unknown_all = Pb()
                                      .u(100, 1)
                                      .f64(101, 2.0)
                                      .bytes(102, "skip me")
                                      .group(103, Pb().u(1, 5).bytes(2, "in group").group(4, "").s)
                                      .f32(104, 3.0f)
                                      .u(536870911, 9)  // the largest field number
                                      .s;
  auto summary = [](std::vector<std::string> values) {
    Pb s;
    for (const auto& v : values) s.bytes(1, v);
    return s.s;
  };
  auto ev = [](std::int64_t step, double time, const std::string& summary_bytes) {
    return Pb().f64(1, time).u(2, static_cast<std::uint64_t>(step)).bytes(5, summary_bytes).s;
  };
  auto tensor = [](int dtype, std::vector<std::int64_t> dims) {
    Pb t;
    t.u(1, static_cast<std::uint64_t>(dtype));
    Pb shape;
    for (auto d : dims) shape.bytes(2, Pb().u(1, static_cast<std::uint64_t>(d)).s);
    t.bytes(2, shape.s);
    return t;
  };
  auto tv = [](const std::string& tag, const Pb& t, const std::string& plugin = "") {
    Pb v;
    v.bytes(1, tag);
    if (!plugin.empty()) v.bytes(9, Pb().bytes(1, Pb().bytes(1, plugin).s).s);
    v.bytes(8, t.s);
    return v.s;
  };
  auto sv = [](const std::string& tag, float x) { return Pb().bytes(1, tag).f32(2, x).s; };

  // Steps and times.
  for (std::int64_t step : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1}, std::int64_t{-5},
                            INT64_MAX, INT64_MIN, std::int64_t{1} << 62, std::int64_t{1700000000000000000}})
    out.push_back(ev(step, 1.5, summary({sv("loss", 0.5f)})));
  out.push_back(ev(3, std::nan(""), summary({sv("loss", std::nanf(""))})));
  out.push_back(ev(3, -0.0, summary({sv("loss", -INFINITY)})));
  out.push_back(Pb().bytes(3, "brain.Event:2").f64(1, 0).s);  // the file header
  out.push_back("");                                            // an empty Event
  out.push_back(Pb().u(2, 7).s);                                // no summary
  out.push_back(Pb().u(2, 7).bytes(5, "").s);                   // an empty summary

  // Every tensor kind, packed and unpacked, with shapes and content.
  std::vector<std::string> values = {
      tv("f_packed", tensor(1, {}).bytes(5, le(1.5f))),
      tv("f_packed2", tensor(1, {}).bytes(5, le(1.5f) + le(2.5f))),
      tv("f_unpacked", tensor(1, {1}).f32(5, -2.5f)),
      tv("f_unpacked2", tensor(1, {1}).f32(5, -2.5f).f32(5, 1.0f)),
      tv("f_mixed", tensor(1, {}).bytes(5, "").f32(5, 4.0f)),
      tv("d_packed", tensor(2, {}).bytes(6, le(0.1))),
      tv("d_unpacked", tensor(2, {1, 1}).f64(6, 1e300)),
      tv("i32", tensor(3, {}).bytes(7, Pb().varint(static_cast<std::uint64_t>(-7)).s)),
      tv("i32_unpacked", tensor(3, {}).u(7, 1ull << 40)),  // truncated to 32 bits
      tv("u8", tensor(4, {}).u(7, 300)),
      tv("i16", tensor(5, {}).u(7, static_cast<std::uint64_t>(-3))),
      tv("i8", tensor(6, {}).bytes(4, le(std::int8_t{-100}))),
      tv("i64", tensor(9, {1}).bytes(10, Pb().varint(1ull << 40).s)),
      tv("i64_unpacked", tensor(9, {}).u(10, static_cast<std::uint64_t>(INT64_MIN))),
      tv("bool", tensor(10, {}).u(11, 2)),
      tv("bool_packed", tensor(10, {}).bytes(11, Pb().varint(0).s)),
      tv("half", tensor(19, {}).bytes(13, Pb().varint(0xC500).s)),
      tv("half_unpacked", tensor(19, {}).u(13, 0x7C00)),
      tv("bf16", tensor(14, {}).u(13, 0x3FC0)),
      tv("c_float", tensor(1, {}).bytes(4, le(3.25f))),
      tv("c_double", tensor(2, {1}).bytes(4, le(-1e300))),
      tv("c_int64", tensor(9, {}).bytes(4, le(std::int64_t{-(1ll << 50)}))),
      tv("c_half", tensor(19, {}).bytes(4, le(std::uint16_t{0x3C00}))),
      tv("c_bool", tensor(10, {}).bytes(4, std::string(1, '\x02'))),
      tv("c_wrong_width", tensor(1, {}).bytes(4, le(1.0))),
      tv("vector", tensor(1, {3}).bytes(5, le(1.0f) + le(2.0f) + le(3.0f))),
      tv("dim0", tensor(1, {0}).bytes(5, le(1.0f))),
      tv("unknown_rank", tensor(1, {}).u(3, 1).bytes(5, le(1.0f))),
      tv("string", tensor(7, {}).bytes(8, "hello")),
      tv("dtype_huge", tensor(1, {}).bytes(5, le(1.0f)).u(1, (1ull << 32) + 1)),  // int32: 1
      tv("dtype_negative", tensor(1, {}).u(1, static_cast<std::uint64_t>(-1))),
      tv("histo", tensor(2, {}).bytes(6, le(1.0)), "histograms"),
      tv("scalars_plugin", tensor(2, {}).bytes(6, le(1.0)), "scalars"),
      tv("empty_tensor", Pb()),
      sv("simple", 0.25f),
      sv("", 1.0f),  // no tag
      Pb().f32(2, 2.0f).s,  // no tag at all
      Pb().bytes(1, "no_value").s,
      Pb().bytes(1, "first").bytes(1, "last").f32(2, 1.0f).s,  // the last tag wins
      // oneof: a simple value then a tensor, a tensor then a simple value,
      // two tensors (merged: two float elements, then not a scalar).
      Pb().bytes(1, "s_then_t").f32(2, 1.0f).bytes(8, tensor(1, {}).bytes(5, le(2.0f)).s).s,
      Pb().bytes(1, "t_then_s").bytes(8, tensor(1, {}).bytes(5, le(2.0f)).s).f32(2, 3.0f).s,
      Pb().bytes(1, "t_t").bytes(8, tensor(1, {}).s).bytes(8, Pb().bytes(5, le(2.0f)).s).s,
      Pb().bytes(1, "t_s_t").bytes(8, tensor(1, {}).bytes(5, le(2.0f)).s).f32(2, 3.0f)
          .bytes(8, Pb().f32(5, 4.0f).s).s,
      // metadata merged: plugin_data twice, plugin_name twice.
      Pb().bytes(1, "meta").bytes(9, Pb().bytes(1, Pb().bytes(1, "a").s).bytes(1, Pb().bytes(1, "b").s).s)
          .f32(2, 1.0f).s,
      Pb().bytes(1, "meta_empty").bytes(9, "").f32(2, 1.0f).s,
      // shapes merged: a second shape adds dimensions.
      Pb().bytes(1, "shape_merge").bytes(8, tensor(1, {1}).bytes(2, Pb().bytes(2, Pb().u(1, 2).s).s)
          .bytes(5, le(1.0f)).s).s,
      // A dimension whose size is written twice: the last one counts.
      Pb().bytes(1, "dim_twice").bytes(8, Pb().u(1, 1).bytes(2, Pb().bytes(2, Pb().u(1, 5).u(1, 1).s).s)
          .bytes(5, le(1.0f)).s).s,
      // Known field numbers with other wire types are unknown fields.
      Pb().bytes(1, "wrong_wire").u(2, 5).f64(8, 1.0).u(9, 1).f32(1, 1.0f).s,
      tv("wrong_wire_tensor", tensor(1, {}).f64(5, 1.0).f32(6, 1.0f).f32(7, 1.0f).f64(4, 1.0).bytes(1, "x")),
      // Text that is not UTF-8 (the decoder does not judge it: the reader does).
      sv(std::string("bad\xff", 4), 1.0f),
      // Unknown fields everywhere.
      unknown_all + sv("after_unknown", 1.0f) + unknown_all,
      Pb().bytes(1, "unknown_in_tensor").bytes(8, unknown_all + tensor(1, {}).bytes(5, le(1.0f)).s + unknown_all).s,
  };
  for (const auto& v : values) out.push_back(ev(12, 3.5, summary({v})));
  out.push_back(ev(12, 3.5, summary(values)));  // all of them in one event

  // The same event, repeated fields and oneofs across the whole record.
  out.push_back(ev(1, 1.0, summary({sv("a", 1)})) + ev(2, 2.0, summary({sv("b", 2)})));  // merged
  out.push_back(ev(1, 1.0, summary({sv("a", 1)})) + Pb().bytes(3, "v").s);  // file_version wins
  out.push_back(Pb().bytes(3, "v").s + ev(1, 1.0, summary({sv("a", 1)})));  // summary wins
  out.push_back(unknown_all + ev(4, 4.0, summary({sv("a", 1)})) + unknown_all);
  out.push_back(Pb().key(5, 2).varint(0).s + ev(1, 1, summary({sv("a", 1)})));

  // Overlong encodings: tags, lengths and values padded with 0x80 bytes.
  out.push_back(Pb().key(2, 0).overlong(5, 10).s);                       // a 10-byte varint
  out.push_back(Pb().key(2, 0).overlong(5, 11).s);                       // 11 bytes: rejected
  out.push_back(Pb().raw("\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f").s);  // high bits dropped
  out.push_back(Pb().overlong(2 << 3, 5).u(100, 1).s);                    // a 5-byte tag
  out.push_back(Pb().overlong(2 << 3, 6).varint(1).s);                    // a 6-byte tag
  out.push_back(Pb().raw("\x90\x80\x80\x80\x70").varint(1).s);            // tag bits past 32
  out.push_back(Pb().key(5, 2).overlong(0, 5).s);                          // a 5-byte length
  out.push_back(Pb().key(5, 2).raw("\x80\x80\x80\x80\x08").s);            // a length of 2^31
  out.push_back(Pb().key(5, 2).overlong(0, 6).s);                          // 6 bytes: rejected
  out.push_back(Pb().key(102, 2).raw("\x80\x80\x80\x80\x07").s);          // ~1.9 GB, not there

  // Malformed: wire types 6 and 7, field 0, stray end-group tags, groups
  // that do not close or close with another number.
  for (int wire : {6, 7}) out.push_back(Pb().key(100, wire).s);
  for (int wire : {0, 1, 2, 3, 4, 5}) out.push_back(Pb().key(0, wire).varint(0).s);
  out.push_back(Pb().key(100, 4).s);
  out.push_back(Pb().u(2, 1).raw(std::string(1, '\0')).s);  // a tag 0
  out.push_back(Pb().key(100, 3).u(1, 1).s);
  out.push_back(Pb().key(100, 3).key(101, 4).s);
  out.push_back(Pb().bytes(5, Pb().key(7, 4).s).s);
  out.push_back(Pb().bytes(5, Pb().bytes(1, Pb().raw(std::string(1, '\0')).s).s).s);

  // Nesting at protobuf's recursion limit (100): groups at the top level,
  // and below the five message levels of a tensor's dimension.
  for (int depth : {98, 99, 100, 101, 102}) out.push_back(nested_groups(depth, 50));
  for (int depth : {93, 94, 95, 96}) {
    const std::string dim = Pb().u(1, 1).raw(nested_groups(depth, 9)).s;
    const std::string t = Pb().u(1, 1).bytes(2, Pb().bytes(2, dim).s).bytes(5, le(1.0f)).s;
    out.push_back(ev(1, 1, summary({Pb().bytes(1, "deep").bytes(8, t).s})));
  }
  return out;
}

// ---- the tests -------------------------------------------------------------------

TEST(TbWire, EventFilesInTheTree) {
  Tally tally;
  for (const auto& entry : fs::recursive_directory_iterator(VIGIL_SOURCE_DIR "/tests")) {
    if (!entry.is_regular_file() || entry.path().filename().string().find("tfevents") == std::string::npos)
      continue;
    const std::string bytes = slurp(entry.path());
    const auto records = records_of(bytes);
    for (std::size_t i = 0; i < records.size(); ++i)
      same_as_protobuf(records[i], tally, entry.path().string() + " record " + std::to_string(i));
  }
  EXPECT_GT(tally.accepted, 1000u);  // the Lightning run alone has thousands
}

TEST(TbWire, FuzzCorpus) {
  Tally tally;
  const fs::path corpus = VIGIL_SOURCE_DIR "/tests/fuzz/corpus/trace";
  for (const auto& entry : fs::directory_iterator(corpus)) {
    const std::string bytes = slurp(entry.path());
    const std::string name = entry.path().filename().string();
    // The whole file as a record's data, without the byte that picks the
    // fuzzed reader, and each valid frame inside it (from either start).
    same_as_protobuf(bytes, tally, name);
    if (!bytes.empty()) same_as_protobuf(std::string_view(bytes).substr(1), tally, name + " [1:]");
    for (const std::string_view from : {std::string_view(bytes), std::string_view(bytes).substr(bytes.empty() ? 0 : 1)})
      for (const auto& r : records_of(from)) same_as_protobuf(r, tally, name + " frame");
  }
  EXPECT_GT(tally.accepted, 10u);
  EXPECT_GT(tally.rejected, 100u);
}

TEST(TbWire, BuiltEvents) {
  Tally tally;
  const auto events = built_events();
  for (std::size_t i = 0; i < events.size(); ++i)
    same_as_protobuf(events[i], tally, "built event " + std::to_string(i));
  EXPECT_GT(tally.accepted, 60u);
  EXPECT_GT(tally.rejected, 15u);
}

// The plain scalar record (wall_time, step, one value of a tag and a
// simple_value, in that order: what writers make) has a path of its own in
// decode_event. Steps of every varint width (1-4 bytes unrolled, more in a
// loop, 10 for a negative one), tags of 0-127 bytes (lengths at the one-byte
// limit), and every such record cut short or with a byte added: each read
// as protobuf reads it.
TEST(TbWire, PlainScalarRecords) {
  Tally tally;
  const std::int64_t steps[] = {0, 1, 127, 128, 16383, 16384, (1 << 21) - 1, 1 << 21, (1 << 28) - 1, 1 << 28,
                                std::int64_t{1} << 35, std::int64_t{1} << 62, INT64_MAX, -1, INT64_MIN};
  for (const std::int64_t step : steps)
    for (const std::size_t tag_size : {0, 1, 9, 100, 110, 111, 112, 113, 127}) {
      vigil::tb::Event e;
      e.set_wall_time(1716735746.25 + static_cast<double>(step));
      e.set_step(step);
      auto* v = e.mutable_summary()->add_value();
      v->set_tag(std::string(tag_size, 'a'));
      v->set_simple_value(0.125f);
      const std::string data = e.SerializeAsString();
      const std::string what = "step " + std::to_string(step) + ", tag of " + std::to_string(tag_size);
      same_as_protobuf(data, tally, what);
      for (std::size_t cut = 0; cut < data.size(); ++cut) same_as_protobuf(data.substr(0, cut), tally, what + ", cut");
      same_as_protobuf(data + '\x00', tally, what + ", a byte more");
      same_as_protobuf(data + "\x15\x00\x00\x80\x3f", tally, what + ", a second simple_value");
    }
  EXPECT_GT(tally.accepted, 200u);
  EXPECT_GT(tally.rejected, 1000u);
}

// Seeded mutations of the built events and of the Lightning run's records:
// byte changes, cuts, insertions and deletions reach the failure paths
// (truncated varints, lengths past their message, broken groups) from
// inputs that are otherwise well-formed.
TEST(TbWire, Mutations) {
  std::vector<std::string> seeds = built_events();
  const auto real = records_of(slurp(VIGIL_SOURCE_DIR
                                     "/tests/tb/data/lightning_lstm_textgen/"
                                     "events.out.tfevents.1716735746.99c8c45923de.3769.0"));
  for (std::size_t i = 0; i < real.size(); i += 97) seeds.push_back(real[i]);
  std::mt19937_64 rng(14);
  Tally tally;
  for (int round = 0; round < 40; ++round)
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      std::string m = seeds[i];
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = m.empty() ? 0 : rng() % m.size();
        switch (rng() % 5) {
          case 0: if (!m.empty()) m[at] = static_cast<char>(rng()); break;
          case 1: if (!m.empty()) m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8))); break;
          case 2: m.resize(at); break;
          case 3: m.insert(at, 1, static_cast<char>(rng())); break;
          case 4: if (!m.empty()) m.erase(at, 1 + rng() % 3); break;
        }
      }
      same_as_protobuf(m, tally, "mutation " + std::to_string(round) + "/" + std::to_string(i));
      if (HasFatalFailure()) return;
    }
  EXPECT_GT(tally.accepted, 1000u);
  EXPECT_GT(tally.rejected, 1000u);
}

TEST(TbWire, Crc32cInstructionMatchesTheTables) {
  std::mt19937_64 rng(32);
  std::string data(4096, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  for (std::size_t offset = 0; offset < 9; ++offset)
    for (std::size_t n = 0; n < 200; ++n) {
      const std::string_view piece = std::string_view(data).substr(offset, n);
      const std::uint32_t seed = static_cast<std::uint32_t>(rng());
      ASSERT_EQ(vigil::tb::crc32c(piece, seed), vigil::tb::crc32c_table(piece, seed)) << offset << " " << n;
    }
  EXPECT_EQ(vigil::tb::crc32c(data), vigil::tb::crc32c_table(data));
  EXPECT_EQ(vigil::tb::crc32c_table("123456789"), 0xE3069283u);
  std::printf("crc32c uses the %s\n", vigil::tb::crc32c_hardware() ? "SSE4.2 instruction" : "tables");
}

}  // namespace
