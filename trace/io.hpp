// File helpers shared by the trace readers. Internal to trace/.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "vigil/trace.hpp"

namespace vigil::trace_io {

/// Opens a regular file for binary reading and reports its size (0 if
/// unknown); on failure fills `error` ("is a directory", "cannot open: ...")
/// and returns false.
bool open_file(const std::string& path, std::ifstream& in, std::uint64_t& size, TraceError& error);

/// Up to `n` bytes from the start of the file (fewer if it is shorter).
std::string head(const std::string& path, std::size_t n);

}  // namespace vigil::trace_io
