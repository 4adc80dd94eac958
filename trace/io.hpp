// File helpers shared by the trace readers. Internal to trace/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vigil/trace.hpp"

namespace vigil::trace_io {

/// Python's json module writes non-finite floats as bare NaN / Infinity /
/// -Infinity, which strict JSON (and nlohmann) rejects. Copies `in` to `out`
/// with such whole tokens outside string literals quoted ("NaN"), and number
/// literals too large for a double too ("1e999", read as infinity), and returns
/// whether anything changed. `shifts` gets, per rewrite, the offset in `out`
/// after which positions are 2 bytes further right than in `in`; see
/// original_position. Example: `{"a": NaN}` -> `{"a": "NaN"}`, shifts {11}.
bool quote_bare_non_finite(std::string_view in, std::string& out, std::vector<std::size_t>& shifts);

/// Whether a JSON/CSV number literal is too large for a double (1e999, but
/// not 1e-999, which is 0).
bool overflows_double(std::string_view token);

/// Maps a byte position in quote_bare_non_finite's output back to its input.
std::size_t original_position(std::size_t pos, const std::vector<std::size_t>& shifts);

}  // namespace vigil::trace_io
