// TraceReader's keyed hand-out (include/vigil/trace.hpp): the id tables every
// reader has, next_keyed over next() for readers that do not fill it
// themselves, and next() over next_keyed() for those that do.
#include <fmt/format.h>

#include "trace/key_table.hpp"
#include "vigil/trace.hpp"

namespace vigil {

TraceReader::TraceReader()
    : keys_(std::make_unique<trace_io::KeyTable>()), modes_(std::make_unique<trace_io::KeyTable>()) {
  modes_->add("train");
}

TraceReader::~TraceReader() = default;

std::size_t TraceReader::key_count() const { return keys_->size(); }
std::string_view TraceReader::key_name(KeyId id) const { return keys_->name(id); }
std::size_t TraceReader::mode_count() const { return modes_->size(); }
std::string_view TraceReader::mode_name(ModeId id) const { return modes_->name(id); }

std::string TraceReader::key_limit_error(const TraceOptions& options) const {
  for (const auto* t : {keys_.get(), modes_.get()})
    if (t->size() > options.max_keys || t->bytes() > options.max_key_bytes)
      return fmt::format("more than {} distinct series names (or modes), or {} bytes of them, in "
                         "one trace (TraceOptions::max_keys, max_key_bytes; docs/limits.md)",
                         options.max_keys, options.max_key_bytes);
  return {};
}

bool TraceReader::next_keyed(KeyedObservation& out) {
  if (!next(plain_)) return false;
  out.step = plain_.step;
  out.mode = modes_->intern(plain_.mode);
  out.time = plain_.time;
  out.values.resize(plain_.values.size());
  for (std::size_t i = 0; i < plain_.values.size(); ++i)
    out.values[i] = {keys_->intern(plain_.values[i].first), plain_.values[i].second};
  return true;
}

bool TraceReader::next_from_keyed(Observation& out) {
  if (!next_keyed(keyed_)) return false;
  out.step = keyed_.step;
  out.mode.assign(modes_->name(keyed_.mode));
  out.time = keyed_.time;
  const std::size_t n = keyed_.values.size();
  // Assigned over the caller's previous values: their strings keep their
  // buffers. (resize, not clear + emplace: a shrink keeps the strings.)
  out.values.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.values[i].first.assign(keys_->name(keyed_.values[i].key));
    out.values[i].second = keyed_.values[i].value;
  }
  return true;
}

}  // namespace vigil
