// The xorshift64 stream the window property tests draw their hard values
// from (seeded from RapidCheck, so a failing case replays): cheap, and
// every bit pattern reachable, unlike a distribution over doubles.
#pragma once

#include <cstdint>

namespace vigil_test {

struct Xorshift {
  std::uint64_t r;  // the state: never 0
  std::uint64_t operator()() {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    return r;
  }
  /// Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>((*this)() >> 11) / 9007199254740992.0; }
};

}  // namespace vigil_test
