// The TensorBoard reader's fast path: runs of the one-scalar record every
// writer makes, framed, checked and decoded in one inlined loop. Internal to
// trace/; a header so that tests/tb/fast_test.cpp can hold it to the general
// path (parse_record, then decode_event).
//
// Why: the general path costs a call per step (the framing, each CRC, the
// Event decoder, the tag lookup) and fills a WireEvent per record; for the
// plain record all of that is a few dozen instructions when inlined into one
// loop compiled for the CRC instruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "trace/tensorboard_record.hpp"

namespace vigil::tb {

/// The fields of a plain scalar record (below).
struct PlainScalar {
  double wall_time;
  std::int64_t step;
  std::string_view tag;  // a view into the record
  float value;
};

/// Reads [p, end), one record's data, if it is byte for byte
///   09 <wall_time: 8 bytes> 10 <step: varint> 2a <n> 0a <n - 2> 0a <k> <tag: k bytes> 15 <float: 4 bytes>
/// (wall_time, step, and a summary of one value holding a tag and a
/// simple_value, in field order, every length one byte and exactly what is
/// left, the step at most 9 bytes: a negative step takes 10). Such bytes
/// mean the same to protobuf and to decode_event (which calls this first):
/// a WireEvent with that wall_time and step and one simple value. False for
/// anything else, which decode_event's general decoder reads.
[[gnu::always_inline]] inline bool plain_scalar(const unsigned char* p, const unsigned char* end,
                                                PlainScalar& out) {
  if (end - p < 9 + 2 + 2 + 2 + 2 + 5 || p[0] != 0x09 || p[9] != 0x10) return false;
  double wall_time;
  std::memcpy(&wall_time, p + 1, 8);
  p += 10;
  // Steps below 2^28 (four bytes; the size check above guarantees them)
  // unrolled, longer ones in a loop.
  std::uint64_t step = p[0] & 0x7F;
  if (p[0] < 0x80) {
    p += 1;
  } else if (p[1] < 0x80) {
    step |= std::uint64_t{p[1]} << 7;
    p += 2;
  } else if (p[2] < 0x80) {
    step |= std::uint64_t{p[1] & 0x7Fu} << 7 | std::uint64_t{p[2]} << 14;
    p += 3;
  } else if (p[3] < 0x80) {
    step |= std::uint64_t{p[1] & 0x7Fu} << 7 | std::uint64_t{p[2] & 0x7Fu} << 14 | std::uint64_t{p[3]} << 21;
    p += 4;
  } else {
    step |= std::uint64_t{p[1] & 0x7Fu} << 7 | std::uint64_t{p[2] & 0x7Fu} << 14 | std::uint64_t{p[3] & 0x7Fu} << 21;
    p += 4;
    for (int shift = 28;; shift += 7) {
      if (shift == 63 || p == end) return false;
      const unsigned char b = *p++;
      step |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (b < 0x80) break;
    }
  }
  if (end - p < 6 || p[0] != 0x2a || p[1] >= 0x80 || p[1] != end - p - 2 || p[2] != 0x0a ||
      p[3] != end - p - 4 || p[4] != 0x0a || p[5] != end - p - 6 - 5)
    return false;
  const std::size_t tag_size = p[5];  // below 0x80, as the lengths around it
  p += 6;
  if (p[tag_size] != 0x15) return false;
  out.wall_time = wall_time;
  out.step = static_cast<std::int64_t>(step);
  out.tag = std::string_view(reinterpret_cast<const char*>(p), tag_size);
  std::memcpy(&out.value, p + tag_size + 1, 4);
  return true;
}

#if defined(__x86_64__)
#define VIGIL_TB_FAST_RECORDS 1

/// crc32c(std::string_view(p, n)), with the SSE4.2 instruction: for callers
/// compiled for it (take_plain_scalars), where it inlines.
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_inline(const char* p, std::size_t n) {
  std::uint64_t c = 0xFFFFFFFFu;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  if (n >= 4) {
    std::uint32_t w;
    std::memcpy(&w, p, 4);
    c32 = _mm_crc32_u32(c32, w);
    p += 4;
    n -= 4;
  }
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, static_cast<unsigned char>(*p));
  return ~c32;
}

/// Takes records from the front of `bytes` while each one is whole, has the
/// right length CRC and data CRC, is at most 255 bytes of data in
/// plain_scalar's layout, and has a tag that `id_of(tag)` (a uint32) gives
/// an id for other than `none`: for each, `take(scalar, id)`. Returns the
/// bytes taken (whole records). It stops, taking nothing of it, at the
/// first record that is anything else (damaged, cut short by the end of
/// `bytes`, another layout, an unknown tag), for the caller to read with
/// parse_record and decode_event, which give every record taken here the
/// same status, wall_time, step, tag and value.
/// Only to be called when crc32c_hardware() is true.
template <typename IdOf, typename Take>
__attribute__((target("sse4.2"))) std::size_t take_plain_scalars(std::string_view bytes, std::uint32_t none,
                                                               IdOf&& id_of, Take&& take) {
  const char* const begin = bytes.data();
  const char* const end = begin + bytes.size();
  const char* p = begin;
  constexpr std::size_t kMinRecord = kRecordHeaderSize + 22 + kRecordFooterSize;
  while (static_cast<std::size_t>(end - p) >= kMinRecord) {
    std::uint64_t length;
    std::uint32_t length_crc, data_crc;
    std::memcpy(&length, p, 8);
    std::memcpy(&length_crc, p + 8, 4);
    if (length > 255 || static_cast<std::size_t>(end - p) < kRecordHeaderSize + length + kRecordFooterSize) break;
    if (mask_crc(~static_cast<std::uint32_t>(_mm_crc32_u64(0xFFFFFFFFu, length))) != length_crc) break;
    const char* data = p + kRecordHeaderSize;
    std::memcpy(&data_crc, data + length, 4);
    if (mask_crc(crc32c_inline(data, length)) != data_crc) break;
    PlainScalar s;
    const auto* d = reinterpret_cast<const unsigned char*>(data);
    if (!plain_scalar(d, d + length, s)) break;
    const std::uint32_t id = id_of(s.tag);
    if (id == none) break;
    take(s, id);
    p = data + length + kRecordFooterSize;
  }
  return static_cast<std::size_t>(p - begin);
}
#endif

}  // namespace vigil::tb
