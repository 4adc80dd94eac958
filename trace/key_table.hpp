// Interned strings with dense ids: the series keys (and modes) a reader hands
// out as KeyId / ModeId (include/vigil/trace.hpp). Internal to trace/.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

namespace vigil::trace_io {

/// Names by id (0, 1, 2, ... in order of addition), and the id of a name
/// found by its bytes: a small direct-mapped cache keyed by the name's length
/// and first and last 8 bytes (a hit costs two loads and a compare; for names
/// of up to 16 bytes that is the whole comparison), then an open-addressing
/// table with a hash of all the bytes, 8 at a time. Names that collide in the
/// cache only miss it: every hit is checked against the whole name.
///
/// The names live in fixed blocks that are never moved, so name(id) stays
/// valid for the table's life; memory is each name's bytes plus ~16 bytes
/// (its offset and length, and at most 8 bytes of hash slots).
class KeyTable {
 public:
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

  /// The id of `s`, kNone if it was never added. Inlined into the readers'
  /// per-record loops: a cache hit is a few instructions.
  [[nodiscard, gnu::always_inline]] std::uint32_t find(std::string_view s) {
    const Key key = key_of(s);
    Cached& c = cache_[key.slot()];
    if (c.id != kNone && c.key == key &&
        (s.size() <= 16 || name(c.id).substr(8, s.size() - 16) == s.substr(8, s.size() - 16)))
      return c.id;
    const std::uint32_t id = find_in_table(s);
    if (id != kNone) c = Cached{key, id};
    return id;
  }

  /// The id of `s`, added if it is new.
  std::uint32_t intern(std::string_view s) {
    const std::uint32_t id = find(s);
    return id != kNone ? id : add(s);
  }

  /// Adds a name not in the table; returns its id.
  std::uint32_t add(std::string_view s) {
    const auto id = static_cast<std::uint32_t>(names_.size());
    names_.push_back(store(s));
    if (2 * names_.size() > slots_.size()) {  // load at most 1/2
      slots_.assign(std::bit_ceil(std::max<std::size_t>(64, 2 * names_.size())), kNone);
      mask_ = slots_.size() - 1;
      for (std::uint32_t k = 0; k < names_.size(); ++k) place(k);
    } else {
      place(id);
    }
    return id;
  }

  [[nodiscard]] std::string_view name(std::uint32_t id) const { return names_[id]; }
  [[nodiscard]] std::size_t size() const { return names_.size(); }
  /// Bytes of the names held.
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  [[nodiscard]] std::uint32_t find_in_table(std::string_view s) const {
    if (slots_.empty()) return kNone;
    for (std::size_t i = hash(s) & mask_;; i = (i + 1) & mask_) {
      const std::uint32_t id = slots_[i];
      if (id == kNone) return kNone;
      if (names_[id] == s) return id;
    }
  }

  // Copies `s` into the current block (a new one when it does not fit; a
  // name longer than a block gets a block of its own).
  std::string_view store(std::string_view s) {
    if (s.empty()) return {};
    if (blocks_.empty() || block_size_ - used_ < s.size()) {
      const std::size_t size = std::max(kBlock, s.size());
      blocks_.push_back(std::make_unique_for_overwrite<char[]>(size));
      block_size_ = size;
      used_ = 0;
    }
    char* at = blocks_.back().get() + used_;
    std::memcpy(at, s.data(), s.size());
    used_ += s.size();
    bytes_ += s.size();
    return {at, s.size()};
  }

  static constexpr std::size_t kCache = 256;
  static constexpr std::size_t kBlock = std::size_t{64} << 10;
  // A name's length with its first and last 8 bytes (zero-padded when
  // shorter), loaded without a variable-length copy.
  struct Key {
    std::uint64_t first = 0, last = 0, size = 0;
    bool operator==(const Key&) const = default;
    [[nodiscard]] std::size_t slot() const {
      const std::uint64_t h = (first ^ std::rotl(last, 29) ^ size) * 0x9E3779B97F4A7C15ull;
      return static_cast<std::size_t>(h >> 56);  // kCache entries
    }
  };
  static Key key_of(std::string_view s) {
    Key k;
    k.size = s.size();
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    if (n >= 8) {
      std::memcpy(&k.first, p, 8);
      std::memcpy(&k.last, p + n - 8, 8);
    } else if (n >= 4) {
      std::uint32_t a, b;
      std::memcpy(&a, p, 4);
      std::memcpy(&b, p + n - 4, 4);
      k.first = a;
      k.last = b;
    } else if (n > 0) {
      k.first = p[0] | (std::uint64_t{p[n / 2]} << 8) | (std::uint64_t{p[n - 1]} << 16);
    }
    return k;
  }
  struct Cached {
    Key key;
    std::uint32_t id = kNone;
  };
  static std::uint64_t hash(std::string_view s) {
    constexpr std::uint64_t k = 0x9E3779B97F4A7C15ull;
    std::uint64_t h = s.size() * k;
    const char* p = s.data();
    std::size_t n = s.size();
    auto mix = [&](std::uint64_t w) {
      h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    };
    for (; n >= 8; p += 8, n -= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    if (n > 0) {
      std::uint64_t w = 0;
      std::memcpy(&w, p, n);
      mix(w);
    }
    return (h ^ (h >> 29)) * k >> 16;
  }
  void place(std::uint32_t id) {
    std::size_t i = hash(names_[id]) & mask_;
    while (slots_[i] != kNone) i = (i + 1) & mask_;
    slots_[i] = id;
  }

  std::vector<std::string_view> names_;  // views into blocks_
  std::vector<std::unique_ptr<char[]>> blocks_;
  std::size_t block_size_ = 0, used_ = 0;  // of the last block
  std::size_t bytes_ = 0;
  std::array<Cached, kCache> cache_{};
  std::vector<std::uint32_t> slots_;  // ids, kNone where empty; a power of two long
  std::size_t mask_ = 0;
};

}  // namespace vigil::trace_io
