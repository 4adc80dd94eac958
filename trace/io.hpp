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
/// with such whole tokens outside string literals quoted ("NaN"), and returns
/// whether anything changed. `shifts` gets, per rewrite, the offset in `out`
/// after which positions are 2 bytes further right than in `in`; see
/// original_position. Example: `{"a": NaN}` -> `{"a": "NaN"}`, shifts {11}.
bool quote_bare_non_finite(std::string_view in, std::string& out, std::vector<std::size_t>& shifts);

/// Maps a byte position in quote_bare_non_finite's output back to its input.
std::size_t original_position(std::size_t pos, const std::vector<std::size_t>& shifts);

}  // namespace vigil::trace_io
