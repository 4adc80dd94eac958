// save_state / restore_state: EngineState as bytes. One function, transfer(),
// walks every saved field once for both directions (an archive that writes
// or one that reads), so the two cannot drift apart. Must not touch
// configuration (program, options, callbacks, recorder) or scratch.
//
// Format "VIGILST4" (all integers and doubles in host byte order):
//   magic, program fingerprint,
//   modes (name, latest step), label sets (as `x{...}` keys),
//   series (key, stamp, history), tensors (key, previous value, combined norm),
//   obs, step, time, first_time, epoch, low_step, last_time, mode, stats,
//   per stateful node: its slots by label id; per expression range node: its
//   histories; per rule: its element states by label id, then its gates.
// A history is its size, then (value, step, time, mode) oldest first.
// Changing any of this needs a new magic and a reader for the old one.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "interp/engine_impl.hpp"
#include "interp/program_impl.hpp"

namespace vigil {

namespace {

constexpr std::string_view magic = "VIGILST4";

[[noreturn]] void corrupt(const char* what) {
  throw Error(std::string("engine state is corrupt (") + what + ")");
}

struct Writer {
  static constexpr bool reading = false;
  std::string out;

  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  /// Writes a count; returns it (what the reader gets back).
  std::uint64_t count(std::uint64_t n, std::size_t /*min_item_bytes*/ = 1) {
    pod(n);
    return n;
  }
  void str(std::string_view s) {
    pod<std::uint64_t>(s.size());
    out.append(s);
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    pod<std::uint64_t>(v.size());
    for (const auto& x : v) pod(x);
  }
};

struct Reader {
  static constexpr bool reading = true;
  std::string_view in;

  template <class T>
  void pod(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (in.size() < sizeof(T)) throw Error("engine state is truncated or corrupt");
    std::memcpy(&v, in.data(), sizeof v);
    in.remove_prefix(sizeof v);
  }
  template <class T>
  T pod() {
    T v;
    pod(v);
    return v;
  }
  /// A count of items of at least `min_item_bytes` each that must still fit
  /// in the remaining bytes (so a corrupt count cannot make us read past
  /// them or reserve gigabytes).
  std::uint64_t count(std::uint64_t /*unused*/ = 0, std::size_t min_item_bytes = 1) {
    auto n = pod<std::uint64_t>();
    if (n > in.size() / std::max<std::size_t>(min_item_bytes, 1))
      throw Error("engine state is truncated or corrupt");
    return n;
  }
  void str(std::string& s) {
    auto n = count(0, 1);
    s.assign(in.substr(0, n));
    in.remove_prefix(n);
  }
  template <class T>
  void vec(std::vector<T>& v) {
    auto n = count(0, sizeof(T));
    v.clear();
    v.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) v.push_back(pod<T>());
  }
};

/// A history: its size, then its samples oldest first. Read into an empty
/// history of at least `cap` samples.
template <class A, class H>
void transfer_history(A& a, H& h, std::size_t cap, std::size_t modes) {
  const auto size = a.count(h.size, 8);
  if constexpr (A::reading) {
    h = interp::History{};
    h.reserve(std::max(interp::initial_capacity(cap), static_cast<std::size_t>(size)));
    for (std::uint64_t i = 0; i < size; ++i) {
      double v, t;
      std::int64_t st;
      std::uint16_t m;
      a.pod(v);
      a.pod(st);
      a.pod(t);
      a.pod(m);
      if (m >= modes) corrupt("mode");
      h.put(v, st, t, m);
      if (m == interp::eval_mode) ++h.evals;
    }
  } else {
    for (std::size_t i = 0; i < size; ++i) {
      const std::size_t p = h.at(i);
      a.pod(h.value[p]);
      a.pod(h.step[p]);
      a.pod(h.time[p]);
      a.pod(h.mode[p]);
    }
  }
}

/// Per-label state (a vector by label id). Read: moved to the fresh label
/// ids of `label_map` (saved id -> fresh id), in a vector by fresh label id.
template <class A, class V>
void transfer_by_label(A& a, V& by_label, const std::vector<std::uint32_t>& label_map,
                       std::size_t label_count) {
  if constexpr (A::reading) {
    V saved;
    a.vec(saved);
    if (saved.size() > label_map.size()) corrupt("label state");
    // As far as the largest label held (the state is kept by label id up to
    // the largest one evaluated, not for every label set of the engine).
    std::size_t size = 0;
    for (std::size_t i = 0; i < saved.size(); ++i) size = std::max<std::size_t>(size, label_map[i] + 1);
    by_label.assign(std::min(size, label_count), {});
    for (std::size_t i = 0; i < saved.size(); ++i)
      if (label_map[i] < by_label.size()) by_label[label_map[i]] = saved[i];
  } else {
    a.vec(by_label);
  }
}

/// Every saved field of `s`, once. S is `const EngineState` when writing and
/// `EngineState` (fresh, with the current engine's series and tensors
/// already interned, so host ids stay valid) when reading. Label-set ids are
/// remapped: the saved ones are read into `label_map`.
template <class A, class S>
void transfer(A& a, S& s, const interp::Plan& plan) {
  auto& store = s.store;

  const auto modes = a.count(store.modes.size());
  if constexpr (A::reading) {
    store.modes.clear();
    store.last_step_by_mode.clear();
  }
  for (std::size_t i = 0; i < modes; ++i) {
    if constexpr (A::reading) {
      store.modes.emplace_back();
      store.last_step_by_mode.emplace_back();
    }
    a.str(store.modes[i]);
    a.pod(store.last_step_by_mode[i]);
  }
  if constexpr (A::reading)
    if (store.modes.size() < 2 || store.modes[0] != "train" || store.modes[1] != "eval")
      corrupt("modes");

  std::vector<std::uint32_t> label_map;  // saved label id -> fresh id (reading)
  const auto labelsets = a.count(store.labelsets.size());
  for (std::size_t i = 0; i < labelsets; ++i) {
    if constexpr (A::reading) {
      std::string key, name;
      Labels labels;
      a.str(key);
      if (!parse_series_key(key, name, labels)) corrupt("labels");
      label_map.push_back(store.intern_labels(labels));
    } else {
      a.str(format_series_key("x", *store.labelsets[i]));
    }
  }

  const auto series = a.count(store.series.size());
  for (std::size_t i = 0; i < series; ++i) {
    std::size_t id = i;
    if constexpr (A::reading) {
      std::string key;
      a.str(key);
      auto interned = store.intern_rule_series(key);
      if (!interned) corrupt("series");
      id = *interned;
    } else {
      a.str(store.key(static_cast<SeriesId>(i)));
    }
    auto& sr = store.series[id];
    a.pod(sr.stamp);
    transfer_history(a, sr.hist, sr.need.count, store.modes.size());
  }

  const auto tensors = a.count(store.tensors.size());
  for (std::size_t i = 0; i < tensors; ++i) {
    std::size_t id = i;
    if constexpr (A::reading) {
      std::string key;
      a.str(key);
      auto interned = store.intern_tensor(key, false);
      if (!interned) corrupt("tensors");
      id = *interned;
    } else {
      a.str(format_series_key(store.tensors[i].name, store.tensors[i].labels));
    }
    auto& t = store.tensors[id];
    a.pod(t.has_prev);
    a.pod(t.prev_dtype);
    a.vec(t.prev_shape);
    a.vec(t.prev);
    a.pod(t.combined_norm);
  }

  a.pod(s.obs);
  a.pod(s.clock.step);
  a.pod(s.clock.time);
  a.pod(s.first_time);
  a.pod(s.epoch);
  a.pod(s.clock.low_step);
  a.pod(s.clock.last_time);
  a.pod(s.clock.mode);
  // The four counters of format 4, field by field: counters added to
  // EngineStats since (label_limit_drops) are this process's, not saved.
  a.pod(s.stats.observations);
  a.pod(s.stats.out_of_order);
  a.pod(s.stats.firings);
  a.pod(s.stats.gather_failures);

  const std::size_t label_count = store.labelsets.size();
  for (auto& slots : s.exec.slots) transfer_by_label(a, slots, label_map, label_count);

  for (std::size_t node = 0; node < s.exec.expr_hist.size(); ++node) {
    auto& hs = s.exec.expr_hist[node];
    const auto n = a.count(hs.size());
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (A::reading) {
        interp::ExprHistory h;
        const auto saved = a.template pod<std::uint32_t>();
        if (saved >= label_map.size()) corrupt("label state");
        h.labels = label_map[saved];
        a.pod(h.stamp);
        transfer_history(a, h.hist, plan.nodes[node].history.count, store.modes.size());
        hs.push_back(std::move(h));
      } else {
        a.pod(hs[i].labels);
        a.pod(hs[i].stamp);
        transfer_history(a, hs[i].hist, 0, 0);
      }
    }
    if constexpr (A::reading)
      std::sort(hs.begin(), hs.end(),
                [](const auto& x, const auto& y) { return x.labels < y.labels; });
  }

  for (auto& rs : s.rules) {
    transfer_by_label(a, rs.elems, label_map, label_count);
    a.pod(rs.opportunities);
    a.pod(rs.every_index);
    a.pod(rs.has_every);
    a.pod(rs.every_step);
    a.pod(rs.every_time);
    a.pod(rs.every_epoch);
    if constexpr (A::reading) rs.count_running();
  }
}

}  // namespace

std::string Engine::Impl::save() const {
  Writer w;
  w.out = magic;
  w.pod(program.impl().fingerprint);
  transfer(w, state, *plan);
  return std::move(w.out);
}

void Engine::Impl::restore(std::string_view bytes) {
  if (bytes.substr(0, magic.size()) != magic) throw Error("not a Vigil engine state");
  Reader r{bytes.substr(magic.size())};
  if (r.pod<std::uint64_t>() != program.impl().fingerprint)
    throw Error("engine state was saved by a different rule program");
  // The host's series and tensor ids stay valid: the fresh state first
  // interns this engine's keys in id order, then takes the saved state by key.
  EngineState fresh(program, options.max_label_sets);
  for (SeriesId id = 0; id < state.store.series.size(); ++id)
    fresh.store.intern_rule_series(state.store.key(id));
  for (const auto& t : state.store.tensors)
    fresh.store.intern_tensor(format_series_key(t.name, t.labels), false);
  transfer(r, fresh, *plan);
  if (!r.in.empty()) throw Error("engine state has trailing bytes");
  fresh.exec.force_all();
  state = std::move(fresh);
  firings.clear();
  open_obs = UINT64_MAX;  // tensor_stats_due's cache described the old rule states
}

}  // namespace vigil
