// simdjson On-Demand over one JSONL line (see jsonl_ondemand.hpp).
#include "trace/jsonl_ondemand.hpp"

#include <cmath>
#include <limits>

namespace vigil::trace_io {

namespace {

namespace od = simdjson::ondemand;

/// The number at `v`, if simdjson 3.0.1's On-Demand reads it right: with 19
/// or more digits before the exponent its get_number() gives 0.0 and no
/// error (e.g. 77978179693379230.56; the DOM parser reads them right), so
/// such numbers are left to the general path. Leading zeros count: the
/// check is on the token as written.
bool get_number(od::value& v, od::number& n) {
  const std::string_view token = v.raw_json_token();
  int digits = 0;
  if (token.size() >= 19)  // shorter tokens have fewer digits
    for (const char c : token) {
      if (c >= '0' && c <= '9') ++digits;
      else if (c != '-' && c != '.') break;  // the exponent, or the token's end
    }
  return digits < 19 && !v.get_number().get(n);
}

/// A JSON number as the general path reads it (integers converted).
bool number(od::value& v, double& out) {
  od::number n;
  if (!get_number(v, n)) return false;
  switch (n.get_number_type()) {
    case od::number_type::signed_integer: out = static_cast<double>(n.get_int64()); return true;
    case od::number_type::unsigned_integer: out = static_cast<double>(n.get_uint64()); return true;
    case od::number_type::floating_point_number: out = n.get_double(); return true;
  }
  return false;
}

/// json_step's rules: an int64, or a double with an integral value in range.
bool step(od::value& v, std::int64_t& out) {
  od::number n;
  if (!get_number(v, n)) return false;
  switch (n.get_number_type()) {
    case od::number_type::signed_integer: out = n.get_int64(); return true;
    case od::number_type::floating_point_number: {
      const double d = n.get_double();
      // 2^63 is exactly representable; anything at or above it is out of range.
      if (!std::isfinite(d) || d != std::floor(d) || d < -9223372036854775808.0 ||
          d >= 9223372036854775808.0)
        return false;
      out = static_cast<std::int64_t>(d);
      return true;
    }
    default: return false;
  }
}

/// A sample: a number or one of the three non-finite strings (null, "no
/// sample", is left to the general path).
bool sample(od::value v, double& out) {
  od::json_type type;
  if (v.type().get(type)) return false;
  if (type == od::json_type::number) return number(v, out);
  std::string_view s;
  if (type != od::json_type::string || v.get_string().get(s)) return false;
  if (s == "NaN") out = std::numeric_limits<double>::quiet_NaN();
  else if (s == "Infinity") out = std::numeric_limits<double>::infinity();
  else if (s == "-Infinity") out = -std::numeric_limits<double>::infinity();
  else return false;
  return true;
}

}  // namespace

bool OnDemandLine::parse(std::string_view text, std::size_t capacity, Observation& o,
                         std::size_t& n) {
  od::document doc;
  if (parser_.iterate(text.data(), text.size(), capacity).get(doc)) return false;
  od::object fields;
  if (doc.get_object().get(fields)) return false;
  o.step = 0;
  o.mode.assign("train");
  o.time = std::numeric_limits<double>::quiet_NaN();
  n = 0;
  unsigned seen = 0;
  for (auto field_or_error : fields) {
    od::field field;
    std::string_view key;
    if (std::move(field_or_error).get(field) || field.unescaped_key().get(key)) return false;
    od::value value = field.value();
    unsigned bit;
    if (key == "step") {
      bit = 1;
      if (!step(value, o.step)) return false;
    } else if (key == "mode") {
      bit = 2;
      std::string_view mode;
      if (value.get_string().get(mode) || mode.empty()) return false;
      o.mode.assign(mode);
    } else if (key == "time") {
      bit = 4;
      od::json_type type;
      if (value.type().get(type)) return false;
      if (type == od::json_type::null) {
        bool null = false;
        if (value.is_null().get(null) || !null) return false;
      } else if (type != od::json_type::number || !number(value, o.time)) {
        return false;
      }
    } else if (key == "values") {
      bit = 8;
      od::object values;
      if (value.get_object().get(values)) return false;
      for (auto sample_or_error : values) {
        od::field s;
        std::string_view series;
        double v;
        if (std::move(sample_or_error).get(s) || s.unescaped_key().get(series) ||
            series.empty() || !sample(s.value(), v))
          return false;
        if (n < o.values.size()) {
          o.values[n].first.assign(series);
          o.values[n].second = v;
        } else {
          o.values.emplace_back(series, v);
        }
        ++n;
      }
    } else {
      return false;  // an unknown field
    }
    if ((seen & bit) != 0) return false;  // a duplicate key
    seen |= bit;
  }
  if ((seen & 1) == 0) return false;  // no step
  // On-Demand reads lazily: `{"step": 1} x` reads as the object alone. Only
  // when every structural character has been read is the location out of
  // bounds.
  return doc.current_location().error() == simdjson::OUT_OF_BOUNDS;
}

}  // namespace vigil::trace_io
