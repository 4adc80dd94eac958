// The JSONL reader's first parser (trace/jsonl.cpp): simdjson's On-Demand
// API over one line, accepting only ordinary records. Internal to trace/;
// a unit of its own so that tests/trace/ondemand_test.cpp can hold it to the
// DOM-parser rules it replaced.
#pragma once

#include <cstddef>
#include <string_view>

#include <simdjson.h>

#include "vigil/trace.hpp"

namespace vigil::trace_io {

class OnDemandLine {
 public:
  /// True if `text` is an ordinary record: a JSON object of the known fields
  /// (step, mode, time, values), each at most once, step present and an
  /// int64 or a double with an integral value in range, mode a non-empty
  /// string, time a number or null, values an object of non-empty names to
  /// numbers or the strings "NaN" / "Infinity" / "-Infinity", and nothing
  /// after the object. Then `o` holds the record (mode "train" and time NaN
  /// when absent) and its first `n` values the samples in the line's order
  /// (their strings reused; entries past `n` are stale). Repeated series
  /// names are not checked here. False for anything else (`o` then holds
  /// junk), which the caller's general parser judges; also false for a
  /// record with a number of 19 or more digits before its exponent, which
  /// simdjson 3.0.1's On-Demand misreads (jsonl_ondemand.cpp).
  ///
  /// `text` must have `capacity` readable bytes from its start, at least
  /// text.size() + simdjson::SIMDJSON_PADDING (simdjson reads ahead).
  ///
  /// On-Demand checks only what is read, so every value is read, and after
  /// the object no structural character may be left. Stage 1 (structure,
  /// UTF-8, unescaped control characters) runs on simdjson's run-time
  /// selected kernel, as the DOM parser's does.
  bool parse(std::string_view text, std::size_t capacity, Observation& o, std::size_t& n);

  /// Gives back the parser's buffers (they grow to the longest line).
  void release() { parser_ = simdjson::ondemand::parser(); }

 private:
  simdjson::ondemand::parser parser_;
};

}  // namespace vigil::trace_io
