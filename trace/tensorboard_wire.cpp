// Event records decoded from the protobuf wire format (see the header for
// the contract: the same acceptance and values as protobuf 3.21's generated
// parser for trace/event.proto).
#include "trace/tensorboard_wire.hpp"

#include "trace/tensorboard_fast.hpp"

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace vigil::tb {

namespace {

using Byte = unsigned char;

// Field numbers and wire types, as in event.proto.
enum Wire : std::uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

constexpr std::uint32_t key(std::uint32_t field, Wire wire) { return field << 3 | wire; }

// protobuf's default recursion limit (io::CodedInputStream).
constexpr int kMaxDepth = 100;

template <typename T>
T load(const Byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (tensorboard_record.cpp asserts it)
  return v;
}

class Decoder {
 public:
  explicit Decoder(WireEvent& out) : out_(out) {}

  bool event(const Byte* p, const Byte* end) {
    out_.wall_time = 0;
    out_.step = 0;
    out_.has_summary = false;
    out_.values.clear();
    while (p < end) {
      std::uint32_t tag;
      if (!read_tag(p, end, tag)) return false;
      switch (tag) {
        case key(1, kFixed64):
          if (end - p < 8) return false;
          out_.wall_time = load<double>(p);
          p += 8;
          continue;
        case key(2, kVarint): {
          std::uint64_t v;
          if (!read_varint(p, end, v)) return false;
          out_.step = static_cast<std::int64_t>(v);
          continue;
        }
        case key(3, kLen): {  // file_version: the oneof drops a summary read before
          std::string_view ignored;
          if (!read_bytes(p, end, ignored)) return false;
          out_.has_summary = false;
          out_.values.clear();
          continue;
        }
        case key(5, kLen): {
          const bool ok = nested(p, end, [&](const Byte* q, const Byte* e) {
            if (!out_.has_summary) {
              out_.has_summary = true;
              out_.values.clear();
            }
            return summary(q, e);
          });
          if (!ok) return false;
          continue;
        }
        default:
          if (!unknown(tag, p, end)) return false;
      }
    }
    return true;
  }

 private:
  // ---- wire primitives: each advances `p` and fails past `end` -------------

  // A varint of at most 10 bytes; bits past 64 are dropped, as protobuf does.
  static bool read_varint(const Byte*& p, const Byte* end, std::uint64_t& out) {
    if (p != end && *p < 0x80) {  // one byte: most varints
      out = *p++;
      return true;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < 10; ++i) {
      if (p == end) return false;
      const Byte b = *p++;
      v |= static_cast<std::uint64_t>(b & 0x7F) << (7 * i);
      if (b < 0x80) {
        out = v;
        return true;
      }
    }
    return false;
  }

  // A tag: at most 5 bytes, kept modulo 2^32 (protobuf's ReadTag).
  static bool read_tag(const Byte*& p, const Byte* end, std::uint32_t& out) {
    if (p != end && *p < 0x80) {  // one byte: every field number below 16
      out = *p++;
      return true;
    }
    std::uint32_t v = 0;
    for (int i = 0; i < 5; ++i) {
      if (p == end) return false;
      const Byte b = *p++;
      v += static_cast<std::uint32_t>(b & 0x7F) << (7 * i);
      if (b < 0x80) {
        out = v;
        return true;
      }
    }
    return false;
  }

  // A length: at most 5 bytes, the fifth below 8, under INT_MAX - 16
  // (protobuf's ReadSize), and within the enclosing bytes.
  static bool read_size(const Byte*& p, const Byte* end, std::size_t& out) {
    if (p != end && *p < 0x80) {  // one byte: lengths below 128
      const std::size_t n = *p++;
      if (static_cast<std::size_t>(end - p) < n) return false;
      out = n;
      return true;
    }
    std::uint32_t v = 0;
    for (int i = 0; i < 5; ++i) {
      if (p == end) return false;
      const Byte b = *p++;
      if (i == 4 && b >= 8) return false;
      v |= static_cast<std::uint32_t>(b & 0x7F) << (7 * i);
      if (b < 0x80) {
        if (v > static_cast<std::uint32_t>(INT_MAX - 16)) return false;
        if (static_cast<std::size_t>(end - p) < v) return false;
        out = v;
        return true;
      }
    }
    return false;
  }

  static bool read_bytes(const Byte*& p, const Byte* end, std::string_view& out) {
    std::size_t n;
    if (!read_size(p, end, n)) return false;
    out = std::string_view(reinterpret_cast<const char*>(p), n);
    p += n;
    return true;
  }

  // A nested message: its length, and one level of the recursion limit.
  bool enter(const Byte*& p, const Byte* end, const Byte*& sub_end) {
    std::size_t n;
    if (!read_size(p, end, n)) return false;
    if (--depth_ < 0) return false;
    sub_end = p + n;
    return true;
  }
  void leave() { ++depth_; }
  // A nested message read by `parse(p, sub_end)`, one level deeper; p moves past it.
  template <class Parse>
  bool nested(const Byte*& p, const Byte* end, Parse&& parse) {
    const Byte* sub_end;
    if (!enter(p, end, sub_end) || !parse(p, sub_end)) return false;
    leave();
    p = sub_end;
    return true;
  }

  // A field this decoder does not read, of any wire type. A tag 0 or an
  // end-group tag here ends a message early, which protobuf rejects
  // wherever it is not closing a group.
  bool unknown(std::uint32_t tag, const Byte*& p, const Byte* end) {
    if ((tag >> 3) == 0) return false;
    switch (tag & 7) {
      case kVarint: {
        std::uint64_t ignored;
        return read_varint(p, end, ignored);
      }
      case kFixed64:
        if (end - p < 8) return false;
        p += 8;
        return true;
      case kLen: {
        std::string_view ignored;
        return read_bytes(p, end, ignored);
      }
      case kStartGroup: {
        if (--depth_ < 0) return false;
        while (p < end) {
          std::uint32_t inner;
          if (!read_tag(p, end, inner)) return false;
          if ((inner & 7) == kEndGroup) {
            if (inner != tag + 1) return false;  // another group's end
            ++depth_;
            return true;
          }
          if (!unknown(inner, p, end)) return false;
        }
        return false;  // the enclosing bytes end inside the group
      }
      case kFixed32:
        if (end - p < 4) return false;
        p += 4;
        return true;
      default:  // an end-group tag out of place, or wire types 6 and 7
        return false;
    }
  }

  // ---- the messages ----------------------------------------------------------

  bool summary(const Byte* p, const Byte* end) {
    while (p < end) {
      std::uint32_t tag;
      if (!read_tag(p, end, tag)) return false;
      if (tag == key(1, kLen)) {
        const bool ok = nested(p, end, [&](const Byte* q, const Byte* e) {
          return value(out_.values.emplace_back(), q, e);
        });
        if (!ok) return false;
      } else if (!unknown(tag, p, end)) {
        return false;
      }
    }
    return true;
  }

  bool value(WireValue& v, const Byte* p, const Byte* end) {
    while (p < end) {
      std::uint32_t tag;
      if (!read_tag(p, end, tag)) return false;
      switch (tag) {
        case key(1, kLen):
          if (!read_bytes(p, end, v.tag)) return false;
          continue;
        case key(2, kFixed32):  // oneof value: drops a tensor read before
          if (end - p < 4) return false;
          v.kind = WireValue::Kind::simple;
          v.simple = load<float>(p);
          p += 4;
          continue;
        case key(8, kLen): {  // oneof value: a second tensor merges into the first
          const bool ok = nested(p, end, [&](const Byte* q, const Byte* e) {
            if (v.kind != WireValue::Kind::tensor) {
              v.kind = WireValue::Kind::tensor;
              v.tensor = WireTensor{};
            }
            return tensor(v.tensor, q, e);
          });
          if (!ok) return false;
          continue;
        }
        case key(9, kLen): {  // metadata { plugin_data { plugin_name } }, merged
          const bool ok = nested(p, end, [&](const Byte* q, const Byte* e) {
            v.has_metadata = true;
            return metadata(v, q, e);
          });
          if (!ok) return false;
          continue;
        }
        default:
          if (!unknown(tag, p, end)) return false;
      }
    }
    return true;
  }

  bool metadata(WireValue& v, const Byte* p, const Byte* end) {
    while (p < end) {
      std::uint32_t tag;
      if (!read_tag(p, end, tag)) return false;
      if (tag == key(1, kLen)) {
        if (!nested(p, end, [&](const Byte* q, const Byte* e) { return plugin_data(v, q, e); }))
          return false;
      } else if (!unknown(tag, p, end)) {
        return false;
      }
    }
    return true;
  }

  bool plugin_data(WireValue& v, const Byte* p, const Byte* end) {
    while (p < end) {
      std::uint32_t tag;
      if (!read_tag(p, end, tag)) return false;
      if (tag == key(1, kLen)) {
        if (!read_bytes(p, end, v.plugin_name)) return false;
      } else if (!unknown(tag, p, end)) {
        return false;
      }
    }
    return true;
  }

  // Repeated fixed-width elements, packed: a whole number of them.
  template <typename T, typename First>
  static bool packed_fixed(const Byte*& p, const Byte* end, std::uint32_t& n, First& first) {
    std::size_t size;
    if (!read_size(p, end, size)) return false;
    if (size % sizeof(T) != 0) return false;
    if (n == 0 && size > 0) first = static_cast<First>(load<T>(p));
    n += static_cast<std::uint32_t>(size / sizeof(T));
    p += size;
    return true;
  }

  // Repeated varints, packed: the bytes must hold whole varints exactly.
  template <typename First>
  static bool packed_varint(const Byte*& p, const Byte* end, std::uint32_t& n, First& first) {
    std::size_t size;
    if (!read_size(p, end, size)) return false;
    const Byte* q = p;
    const Byte* packed_end = p + size;
    while (q < packed_end) {
      std::uint64_t v;
      if (!read_varint(q, packed_end, v)) return false;
      if (n++ == 0) first = convert<First>(v);
    }
    p = packed_end;
    return true;
  }

  template <typename First>
  static bool one_varint(const Byte*& p, const Byte* end, std::uint32_t& n, First& first) {
    std::uint64_t v;
    if (!read_varint(p, end, v)) return false;
    if (n++ == 0) first = convert<First>(v);
    return true;
  }

  // A varint as protobuf stores it in a field of type T: int32 and int64
  // truncate, bool is "not zero".
  template <typename T>
  static T convert(std::uint64_t v) {
    if constexpr (std::is_same_v<T, bool>) return v != 0;
    else return static_cast<T>(v);
  }

  template <typename T>
  static bool one_fixed(const Byte*& p, const Byte* end, std::uint32_t& n, T& first) {
    if (static_cast<std::size_t>(end - p) < sizeof(T)) return false;
    if (n++ == 0) first = load<T>(p);
    p += sizeof(T);
    return true;
  }

  bool tensor(WireTensor& t, const Byte* p, const Byte* end) {
    while (p < end) {
      std::uint32_t tag;
      if (!read_tag(p, end, tag)) return false;
      bool ok = true;
      switch (tag) {
        case key(1, kVarint): {
          std::uint64_t v = 0;
          if (!read_varint(p, end, v)) return false;
          t.dtype = static_cast<std::int32_t>(v);
          break;
        }
        case key(2, kLen):  // tensor_shape, merged
          ok = nested(p, end, [&](const Byte* q, const Byte* e) { return shape(t, q, e); });
          break;
        case key(4, kLen): ok = read_bytes(p, end, t.content); break;
        case key(5, kLen): ok = packed_fixed<float>(p, end, t.float_n, t.float0); break;
        case key(5, kFixed32): ok = one_fixed(p, end, t.float_n, t.float0); break;
        case key(6, kLen): ok = packed_fixed<double>(p, end, t.double_n, t.double0); break;
        case key(6, kFixed64): ok = one_fixed(p, end, t.double_n, t.double0); break;
        case key(7, kLen): ok = packed_varint(p, end, t.int_n, t.int0); break;
        case key(7, kVarint): ok = one_varint(p, end, t.int_n, t.int0); break;
        case key(10, kLen): ok = packed_varint(p, end, t.int64_n, t.int640); break;
        case key(10, kVarint): ok = one_varint(p, end, t.int64_n, t.int640); break;
        case key(11, kLen): ok = packed_varint(p, end, t.bool_n, t.bool0); break;
        case key(11, kVarint): ok = one_varint(p, end, t.bool_n, t.bool0); break;
        case key(13, kLen): ok = packed_varint(p, end, t.half_n, t.half0); break;
        case key(13, kVarint): ok = one_varint(p, end, t.half_n, t.half0); break;
        default: ok = unknown(tag, p, end);
      }
      if (!ok) return false;
    }
    return true;
  }

  bool shape(WireTensor& t, const Byte* p, const Byte* end) {
    while (p < end) {
      std::uint32_t tag;
      if (!read_tag(p, end, tag)) return false;
      if (tag == key(2, kLen)) {  // dim { size }: each one a new dimension
        const Byte* sub_end;
        if (!enter(p, end, sub_end)) return false;
        std::int64_t size = 0;
        while (p < sub_end) {
          std::uint32_t inner;
          if (!read_tag(p, sub_end, inner)) return false;
          if (inner == key(1, kVarint)) {
            std::uint64_t v;
            if (!read_varint(p, sub_end, v)) return false;
            size = static_cast<std::int64_t>(v);
          } else if (!unknown(inner, p, sub_end)) {
            return false;
          }
        }
        leave();
        if (size != 1) t.dim_not_one = true;
      } else if (tag == key(3, kVarint)) {
        std::uint64_t v;
        if (!read_varint(p, end, v)) return false;
        t.unknown_rank = v != 0;
      } else if (!unknown(tag, p, end)) {
        return false;
      }
    }
    return true;
  }

  WireEvent& out_;
  int depth_ = kMaxDepth;
};


// TensorFlow's DataType numbers (event.proto).
enum DataType : std::int32_t {
  DT_FLOAT = 1, DT_DOUBLE = 2, DT_INT32 = 3, DT_UINT8 = 4, DT_INT16 = 5, DT_INT8 = 6,
  DT_INT64 = 9, DT_BOOL = 10, DT_BFLOAT16 = 14, DT_HALF = 19,
};

}  // namespace

double half_to_double(std::uint32_t bits) {
  const std::uint32_t sign = (bits >> 15) & 1u, exponent = (bits >> 10) & 0x1Fu,
                      mantissa = bits & 0x3FFu;
  double v;
  if (exponent == 0) v = std::ldexp(static_cast<double>(mantissa), -24);  // subnormal or zero
  else if (exponent == 31) v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                                        : std::numeric_limits<double>::infinity();
  else v = std::ldexp(static_cast<double>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return sign ? -v : v;
}

double bfloat16_to_double(std::uint32_t bits) {
  const std::uint32_t f32 = (bits & 0xFFFFu) << 16;
  float f;
  std::memcpy(&f, &f32, 4);
  return f;
}

bool decode_event(std::string_view data, WireEvent& out) {
  const auto* p = reinterpret_cast<const Byte*>(data.data());
  // The record nearly every writer makes for a scalar: read in one pass
  // (trace/tensorboard_fast.hpp), with the same meaning as to the Decoder.
  if (PlainScalar s; plain_scalar(p, p + data.size(), s)) {
    out.wall_time = s.wall_time;
    out.step = s.step;
    out.has_summary = true;
    out.values.clear();
    WireValue& v = out.values.emplace_back();
    v.tag = s.tag;
    v.kind = WireValue::Kind::simple;
    v.simple = s.value;
    return true;
  }
  return Decoder(out).event(p, p + data.size());
}

std::optional<double> tensor_scalar(const WireTensor& t) {
  if (t.unknown_rank || t.dim_not_one) return std::nullopt;
  const std::string_view content = t.content;
  const bool packed = !content.empty();
  auto from_content = [&](auto zero) -> std::optional<double> {
    using T = decltype(zero);
    if (content.size() != sizeof(T)) return std::nullopt;
    return static_cast<double>(load<T>(reinterpret_cast<const Byte*>(content.data())));
  };
  auto one = [](std::uint32_t n, auto first) -> std::optional<double> {
    if (n != 1) return std::nullopt;
    return static_cast<double>(first);
  };
  switch (t.dtype) {
    case DT_FLOAT: return packed ? from_content(float{}) : one(t.float_n, t.float0);
    case DT_DOUBLE: return packed ? from_content(double{}) : one(t.double_n, t.double0);
    case DT_INT32: return packed ? from_content(std::int32_t{}) : one(t.int_n, t.int0);
    case DT_INT16: return packed ? from_content(std::int16_t{}) : one(t.int_n, t.int0);
    case DT_INT8: return packed ? from_content(std::int8_t{}) : one(t.int_n, t.int0);
    case DT_UINT8: return packed ? from_content(std::uint8_t{}) : one(t.int_n, t.int0);
    case DT_INT64: return packed ? from_content(std::int64_t{}) : one(t.int64_n, t.int640);
    case DT_BOOL: return packed ? from_content(std::uint8_t{}) : one(t.bool_n, t.bool0);
    case DT_HALF:
    case DT_BFLOAT16: {
      const auto convert = t.dtype == DT_HALF ? half_to_double : bfloat16_to_double;
      if (packed) {
        if (content.size() != 2) return std::nullopt;
        return convert(static_cast<std::uint8_t>(content[0]) |
                       (static_cast<std::uint32_t>(static_cast<std::uint8_t>(content[1])) << 8));
      }
      if (t.half_n != 1) return std::nullopt;
      return convert(static_cast<std::uint32_t>(t.half0));
    }
    default:
      return std::nullopt;
  }
}

}  // namespace vigil::tb
