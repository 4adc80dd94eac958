// TFRecord framing of TensorBoard event files. Internal to trace/.
//
// A file is a sequence of records, each
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes)
//   | length bytes of data        | uint32 masked_crc32c(data)
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vigil::tb {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, continuing
/// from `crc` (the CRC of the preceding bytes; 0 to start).
/// Example: crc32c("123456789") == 0xE3069283.
/// Uses the CPU's crc32 instruction (SSE4.2) when it has one, chosen once at
/// start-up; crc32c_table otherwise. Both give the same result.
std::uint32_t crc32c(std::string_view data, std::uint32_t crc = 0);

/// The same CRC without the instruction (slicing-by-8 tables), for CPUs
/// without SSE4.2 and to check the fast path against.
std::uint32_t crc32c_table(std::string_view data, std::uint32_t crc = 0);

/// Whether crc32c uses the CPU instruction on this machine.
bool crc32c_hardware();

/// The masking TFRecord applies to stored CRCs.
constexpr std::uint32_t mask_crc(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline constexpr std::size_t kRecordHeaderSize = 12;  // length + its crc
inline constexpr std::size_t kRecordFooterSize = 4;   // data crc

enum class RecordStatus {
  ok,         // a whole, valid record: `data` is set
  need_more,  // the bytes end inside the record (at end of input: truncated)
  bad_length_crc,
  bad_data_crc,
  too_large,  // a length whose crc is right but that no writer produces
};

struct RecordView {
  RecordStatus status = RecordStatus::need_more;
  std::string_view data;  // the payload, when status == ok
  std::size_t size = 0;   // bytes of the whole record, when status == ok
};

/// Decodes the record that starts at the beginning of `bytes`.
RecordView parse_record(std::string_view bytes);

/// Appends one framed record holding `data` to `out`.
void append_record(std::string& out, std::string_view data);

}  // namespace vigil::tb
