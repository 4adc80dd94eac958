// A protobuf wire-format builder for hand-made records in the TensorBoard
// tests: fields of every wire type, overlong varints, groups, raw bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vigil::test {

struct Pb {
  std::string s;
  Pb& varint(std::uint64_t v) {
    do {
      s.push_back(static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0)));
      v >>= 7;
    } while (v != 0);
    return *this;
  }
  // A varint padded to `n` bytes (an overlong encoding protobuf accepts).
  Pb& overlong(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) {
      s.push_back(static_cast<char>((v & 0x7F) | (i + 1 < n ? 0x80 : 0)));
      v >>= 7;
    }
    return *this;
  }
  Pb& key(std::uint64_t field, int wire) { return varint(field << 3 | static_cast<unsigned>(wire)); }
  Pb& u(std::uint64_t field, std::uint64_t v) { return key(field, 0).varint(v); }
  Pb& f64(std::uint64_t field, double v) {
    key(field, 1);
    s.append(reinterpret_cast<const char*>(&v), 8);
    return *this;
  }
  Pb& f32(std::uint64_t field, float v) {
    key(field, 5);
    s.append(reinterpret_cast<const char*>(&v), 4);
    return *this;
  }
  Pb& bytes(std::uint64_t field, std::string_view b) {
    key(field, 2).varint(b.size());
    s.append(b);
    return *this;
  }
  Pb& group(std::uint64_t field, std::string_view inner) {
    key(field, 3);
    s.append(inner);
    return key(field, 4);
  }
  Pb& raw(std::string_view b) {
    s.append(b);
    return *this;
  }
};

template <typename T>
std::string le(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace vigil::test
