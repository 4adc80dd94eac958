// Reading rule files from disk, safely. Internal to the compiler stages.
//
// Rule files come from other people (shared team libraries, imports): a path
// may name a device (/dev/zero would be read until memory runs out), a FIFO
// (which would block forever), a directory, a huge file, or a file that is
// not rule text at all (/proc/self/environ, a binary), whose content must
// not end up printed inside a diagnostic. read_source_file is the one place
// where rule text is read from a path.
#pragma once

#include <cstdint>
#include <string>

namespace vigil::grammar {

/// The largest rule file read (16 MiB); docs/limits.md.
inline constexpr std::uint64_t max_source_bytes = std::uint64_t{16} << 20;

/// Reads `path` into `text` if it is a regular file of at most `max_bytes`
/// bytes holding text (no NUL bytes or other control characters than tab,
/// CR, LF and form feed). Otherwise returns false with `error` set to a short
/// reason that never quotes the content, e.g. "No such file or directory",
/// "is a directory", "is not a regular file (a device, FIFO or socket)",
/// "is larger than 16777216 bytes", "is not rule text (binary data at byte
/// 12)". Never blocks on a FIFO; the descriptor is close-on-exec.
bool read_source_file(const std::string& path, std::string& text, std::string& error,
                      std::uint64_t max_bytes = max_source_bytes);

}  // namespace vigil::grammar
