// Reading a whole trace in tests: every observation, then the error (if any)
// and where the reader stopped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vigil/trace.hpp"

namespace vigil::test {

struct ReadAll {
  std::vector<Observation> records;
  std::optional<TraceError> error;
  std::uint64_t position = 0, size = 0;
  std::string describe;
};

/// Appends what `reader` still has to `r`, then its error and position.
inline void drain(TraceReader& reader, ReadAll& r) {
  Observation obs;
  while (reader.next(obs)) r.records.push_back(obs);
  r.error = reader.error();
  r.position = reader.position();
  r.size = reader.size();
}

/// Opens `path` (format detected) and reads it to the end or the damage; an
/// open error is returned as the error with no records.
inline ReadAll read_all(const std::string& path, const TraceOptions& options = {}) {
  ReadAll r;
  TraceError open_error;
  auto reader = open_trace(path, open_error, options);
  if (!reader) {
    r.error = open_error;
    return r;
  }
  r.describe = reader->describe();
  drain(*reader, r);
  return r;
}

/// The value of series `key` in `obs`, if it has a sample.
inline std::optional<double> value_of(const Observation& obs, const std::string& key) {
  for (const auto& [k, v] : obs.values)
    if (k == key) return v;
  return std::nullopt;
}

}  // namespace vigil::test
