// The fields of a TensorBoard Event record that the reader uses, decoded
// straight from the protobuf wire format. Internal to trace/.
//
// Why not the generated protobuf classes: parsing a record into a message
// object costs several hundred nanoseconds (allocations for strings and
// sub-messages, unknown-field bookkeeping), more than the rest of the reader
// per observation. This decoder walks the bytes once, keeps views into the
// record instead of copies, and reuses its vectors, so a record costs no
// allocation once warm.
//
// Contract: decode_event accepts exactly the byte strings that
// vigil::tb::Event::ParseFromArray (protobuf 3.21, trace/event.proto) accepts,
// and gives the same values for the fields below. That means, as protobuf:
//   - a field with a known number but another wire type is an unknown field
//     (skipped), except the repeated numeric tensor fields, which take both
//     the packed and the unpacked form;
//   - unknown fields of every wire type are skipped; groups must close with
//     their own number; wire types 6 and 7, field number 0, a tag 0 or an
//     end-group tag outside its group, and anything that runs past its
//     enclosing length are failures;
//   - varints take at most 10 bytes (tags and lengths at most 5; a length's
//     fifth byte below 8), overlong encodings allowed, high bits dropped;
//   - messages and groups nest at most 100 deep (protobuf's default
//     recursion limit);
//   - singular fields: the last one wins; singular messages merge; a oneof
//     member clears the others (file_version vs summary, simple_value vs
//     tensor); repeated fields concatenate.
// tests/tb/wire_test.cpp checks this against the generated code on every
// event file in tests/, the fuzz corpus and mutated records.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace vigil::tb {

/// A TensorProto, reduced to what tensor_scalar needs: for each repeated
/// value field, how many elements it held and the first one. `WireTensor{}`
/// is an empty tensor (no member initialisers, so that a WireValue that holds
/// no tensor does not pay for clearing one).
struct WireTensor {
  std::int32_t dtype;
  bool unknown_rank;
  bool dim_not_one;          // some dimension's size is not 1
  std::string_view content;  // tensor_content
  std::uint32_t float_n, double_n, int_n, int64_n, bool_n, half_n;
  float float0;
  double double0;
  std::int32_t int0;
  std::int64_t int640;
  bool bool0;
  std::int32_t half0;
};

struct WireValue {
  enum class Kind : std::uint8_t { none, simple, tensor };
  WireValue() {}  // NOLINT: user-provided, so that `tensor` is left alone
  std::string_view tag;
  bool has_metadata = false;
  std::string_view plugin_name;  // metadata.plugin_data.plugin_name
  Kind kind = Kind::none;
  float simple = 0;
  WireTensor tensor;  // set (from WireTensor{}) only when kind == tensor
};

struct WireEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  bool has_summary = false;
  /// summary.value, when has_summary. Views point into the decoded bytes.
  std::vector<WireValue> values;
};

/// Decodes one record's data into `out` (whose vector is reused). False if
/// the bytes are not an Event (see the contract above); `out` is then
/// unspecified.
bool decode_event(std::string_view data, WireEvent& out);

/// IEEE half / bfloat16 bits (the low 16 of `bits`) as a double, exactly.
double half_to_double(std::uint32_t bits);
double bfloat16_to_double(std::uint32_t bits);

/// The value of a tensor with exactly one element of a numeric type (float,
/// double, int8/16/32/64, uint8, bool, half, bfloat16), from the typed field
/// or from tensor_content; nullopt for anything else (histograms, images,
/// text, vectors), which the reader skips.
std::optional<double> tensor_scalar(const WireTensor& t);

}  // namespace vigil::tb
