// The streaming evaluator: series store, one forward pass over the plan per
// observation (a whole column of series per node), rule state machines,
// dispatch, explain, and state save/restore.
//
// Allocation: columns, ring buffers and per-label state grow while new series
// and labels appear (warm-up); once every series has been seen and windows
// are full, observe() does not allocate.
#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <unordered_map>

#include "interp/program_impl.hpp"
#include "vigil/engine.hpp"

namespace vigil {

CompileResult recompile_with(const Program& program, const std::map<std::string, Value>& params);

namespace {

using interp::no_node;
using interp::PlanNode;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// ---- series keys ------------------------------------------------------------

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':';
}

// At rest[j] == 'u' of a \uXXXX escape: appends the code point as UTF-8 and
// leaves j on the escape's last hex digit. A high surrogate must be followed
// by \u and a low one. False if malformed.
bool decode_unicode_escape(std::string_view rest, std::size_t& j, std::string& out) {
  auto hex4 = [&](std::size_t at, std::uint32_t& v) {
    if (at + 4 > rest.size()) return false;
    v = 0;
    for (std::size_t k = at; k < at + 4; ++k) {
      const char c = rest[k];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<std::uint32_t>(d);
    }
    return true;
  };
  std::uint32_t cp = 0;
  if (!hex4(j + 1, cp)) return false;
  j += 4;
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    std::uint32_t low = 0;
    if (j + 2 >= rest.size() || rest[j + 1] != '\\' || rest[j + 2] != 'u' || !hex4(j + 3, low) ||
        low < 0xDC00 || low > 0xDFFF)
      return false;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    j += 6;
  } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return false;
  }
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return true;
}

}  // namespace

bool parse_series_key(std::string_view key, std::string& name, Labels& labels) {
  labels.clear();
  auto brace = key.find('{');
  name.assign(key.substr(0, brace));
  if (name.empty()) return false;
  if (brace == std::string_view::npos) return true;
  if (key.back() != '}') return false;
  std::string_view rest = key.substr(brace + 1, key.size() - brace - 2);
  while (!rest.empty()) {
    std::size_t i = 0;
    while (i < rest.size() && is_ident_char(rest[i])) ++i;
    if (i == 0 || i + 1 >= rest.size() || rest[i] != '=' || rest[i + 1] != '"') return false;
    std::string label(rest.substr(0, i)), value;
    std::size_t j = i + 2;
    for (; j < rest.size() && rest[j] != '"'; ++j) {
      if (rest[j] == '\\') {
        if (++j >= rest.size()) return false;
        if (rest[j] == 'u') {
          // \uXXXX (and a surrogate pair), as JSON and Prometheus write
          // label values: decoded to UTF-8, never dropped.
          if (!decode_unicode_escape(rest, j, value)) return false;
          continue;
        }
        value += rest[j] == 'n' ? '\n' : rest[j] == 't' ? '\t' : rest[j];
      } else {
        value += rest[j];
      }
    }
    if (j >= rest.size()) return false;
    labels.emplace_back(std::move(label), std::move(value));
    rest = rest.substr(j + 1);
    if (!rest.empty()) {
      if (rest[0] != ',') return false;
      rest.remove_prefix(1);
    }
  }
  std::sort(labels.begin(), labels.end());
  for (std::size_t i = 1; i < labels.size(); ++i)
    if (labels[i].first == labels[i - 1].first) return false;
  return true;
}

std::string format_series_key(std::string_view name, const Labels& labels) {
  std::string out(name);
  if (labels.empty()) return out;
  out += '{';
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

namespace {

// ---- history: a mirrored ring buffer ----------------------------------------
// Every sample is written twice, at i and i + cap, so the newest n samples
// are always one contiguous span: kernels read windows in place.

struct History {
  std::size_t cap = 0, size = 0, head = 0;  // head: next physical write index
  std::size_t evals = 0;                    // eval-mode samples held
  bool steps_sorted = true;  // steps never went down (train/eval may interleave otherwise)
  std::vector<double> value, time;
  std::vector<std::int64_t> step;
  std::vector<std::uint16_t> mode;

  void reserve(std::size_t c) {
    History h;
    h.cap = c;
    h.value.assign(2 * c, 0);
    h.time.assign(2 * c, 0);
    h.step.assign(2 * c, 0);
    h.mode.assign(2 * c, 0);
    for (std::size_t i = 0; i < size; ++i) {
      std::size_t p = at(i);
      h.put(value[p], step[p], time[p], mode[p]);
    }
    h.evals = evals;
    h.steps_sorted = steps_sorted;
    *this = std::move(h);
  }
  /// Physical index of the i-th oldest sample held.
  [[nodiscard]] std::size_t at(std::size_t i) const { return (head + cap - size + i) % cap; }
  [[nodiscard]] std::size_t newest() const { return at(size - 1); }
  void put(double v, std::int64_t s, double t, std::uint16_t m) {
    if (size > 0 && s < step[newest()]) steps_sorted = false;
    for (std::size_t p : {head, head + cap}) {
      value[p] = v;
      step[p] = s;
      time[p] = t;
      mode[p] = m;
    }
    head = (head + 1) % cap;
    if (size < cap) ++size;
  }
};

/// The values of an expression that a range reads (`(x > 1)[10]`), for one
/// label set.
struct ExprHistory {
  std::uint32_t labels = 0;
  History hist;
  std::uint64_t stamp = 0;  // observation number of the newest sample
};

struct Series {
  std::string name;
  std::uint32_t labels = 0;
  History hist;
  interp::Retention need;
  std::uint64_t stamp = 0;  // observation number of the newest sample
};

/// One node's value: a column of (label set, value) sorted by label set id.
struct Column {
  std::vector<std::uint32_t> labels;
  std::vector<double> values;
  std::vector<std::uint8_t> fresh;
  std::uint64_t computed = 0;  // observation number of the last computation
  void clear() {
    labels.clear();
    values.clear();
    fresh.clear();
  }
  void push(std::uint32_t l, double v, bool f) {
    labels.push_back(l);
    values.push_back(v);
    fresh.push_back(f);
  }
};

/// A tensor series the host hands over: which stats rules read, the derived
/// series they become, and the previous value when update stats are read.
struct TensorSeries {
  std::string name;
  Labels labels;
  StatMask mask = 0;
  std::array<SeriesId, stat_count> derived{};  // where mask has the bit
  /// The parameterised stats some rule reads (`T_frac_outside(-1,1)`), each
  /// computed by its own pass.
  struct ParamRequest {
    ParamStat stat = ParamStat::frac_outside;
    std::size_t nargs = 0;
    double args[max_param_stat_args] = {};
    SeriesId series = 0;
  };
  std::vector<ParamRequest> params;
  bool needs_prev = false;  // an update stat or frac_changed is read
  bool has_prev = false;
  /// Multi-process: the whole tensor's norm at its previous observation
  /// (update_ratio of combined stats divides by it).
  double combined_norm = std::numeric_limits<double>::quiet_NaN();
  DType prev_dtype = DType::float32;
  std::vector<std::int64_t> prev_shape;
  std::vector<std::byte> prev;  // packed row-major copy

  /// The kept previous value (valid until `prev` changes), and whether there is one.
  [[nodiscard]] TensorView previous() const { return {prev.data(), prev_dtype, prev_shape, {}}; }
  [[nodiscard]] bool has_previous() const { return needs_prev && has_prev; }
};

constexpr StatMask update_stats = stat_bit(Stat::update_norm) | stat_bit(Stat::update_ratio);

struct StatefulSlot {
  stdlib::DetectorState state;
  double out = nan;
  bool defined = false;  // warmed up, or just fed a NaN (which yields NaN)
};

struct ElemState {
  std::int64_t run = 0;
  std::int64_t first_step = 0;
  double first_time = nan, first_epoch = nan;
  bool fired = false;
  std::uint64_t evals = 0, last_fire_eval = 0;
  std::int64_t last_fire_step = 0;
  double last_fire_time = nan, last_fire_epoch = nan;
  std::int64_t recent[8] = {};  // steps of the latest true evaluations (for explain)
  std::uint32_t chain[4] = {};  // per escalation: earlier firings in the current chain
};

struct RuleState {
  std::vector<ElemState> elems;  // by label set id
  std::uint64_t opportunities = 0, every_index = 0;
  bool has_every = false;
  std::int64_t every_step = 0;
  double every_time = nan, every_epoch = nan;
};

/// Bytes writer/reader for save_state/restore_state.
struct Writer {
  std::string out;
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
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
  std::string_view in;
  template <class T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    if (in.size() < sizeof(T)) throw Error("engine state is truncated or corrupt");
    T v;
    std::memcpy(&v, in.data(), sizeof v);
    in.remove_prefix(sizeof v);
    return v;
  }
  /// A count of items of at least `elem` bytes each that must still fit in
  /// the remaining bytes (so a corrupt count cannot make us read past them
  /// or reserve gigabytes).
  std::uint64_t count(std::size_t elem = 1) {
    auto n = pod<std::uint64_t>();
    if (n > in.size() / std::max<std::size_t>(elem, 1))
      throw Error("engine state is truncated or corrupt");
    return n;
  }
  std::string str() {
    auto n = count();
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }
  template <class T>
  std::vector<T> vec() {
    auto n = count(sizeof(T));
    std::vector<T> v;
    v.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) v.push_back(pod<T>());
    return v;
  }
};

}  // namespace

struct Engine::Impl {
  Program program;
  const interp::Plan* plan;
  EngineOptions options;
  std::unordered_map<std::string, ActionCallback> callbacks;
  bool bindings_checked = false;
  bool dispatching = false;  // inside an action callback: observe() is not reentrant
  std::function<void(const Observation&)> recorder;
  Observation recorded;  // reused by the recorder

  std::vector<std::unique_ptr<Labels>> labelsets;  // id -> labels (stable addresses)
  std::unordered_map<std::string, std::uint32_t> labelset_ids;
  std::vector<std::string> modes{"train", "eval"};
  std::vector<std::int64_t> last_step_by_mode{INT64_MIN, INT64_MIN};
  std::vector<Series> series;
  /// Key -> id, looked up by string_view without building a string.
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view k) const { return std::hash<std::string_view>{}(k); }
  };
  std::unordered_map<std::string, SeriesId, KeyHash, std::equal_to<>> series_ids;  // rule-side keys
  std::unordered_map<std::string, std::optional<SeriesId>, KeyHash, std::equal_to<>> trace_ids;
  struct TraceOwner {
    std::string key;  // the trace series (canonical trace key) read into a series
    bool exact = false;  // read under its own name, not through an alias
    std::vector<std::string> raw_keys;  // its spellings in trace_ids
  };
  std::unordered_map<SeriesId, TraceOwner> owners;
  std::vector<TensorSeries> tensors;
  std::unordered_map<std::string, TensorId, KeyHash, std::equal_to<>> tensor_ids;
  std::vector<Sample> with_tensors;  // samples + derived stats of one observe
  // Multi-process (EngineOptions::allgather): this process's stats of the
  // tensors of one observe, every process's, and the tensors they belong to.
  std::vector<double> gather_local, gather_all;
  std::vector<TensorId> gathered;
  std::vector<TensorStats> parts;
  std::vector<double> part_values, part_numels;

  std::vector<std::vector<SeriesId>> members;  // per plan selector
  std::optional<SeriesId> epoch_series;

  std::vector<Column> columns;                     // per plan node
  std::vector<std::vector<StatefulSlot>> slots;    // per stateful node, by label id
  std::vector<std::vector<ExprHistory>> expr_hist;  // per range-over-expression node, by labels
  std::vector<RuleState> rules;
  std::vector<Firing> firings;
  std::vector<double> scratch, gather_v;
  std::vector<std::int64_t> gather_s;
  std::vector<double> args;

  std::uint64_t obs = 0;  // observation counter (0: none yet)
  bool force = true;      // recompute every node (first observation, after restore)
  std::int64_t step = 0;
  double time = nan, first_time = nan, epoch = nan;
  std::int64_t low_step = 0;  // lowest latest step over the modes seen
  double last_time = nan;     // latest time given
  std::uint16_t mode = 0;
  EngineStats stats;

  Impl(Program p, EngineOptions o)
      : program(std::move(p)), plan(&program.impl().plan), options(std::move(o)) {
    labelsets.push_back(std::make_unique<Labels>());
    labelset_ids.emplace("", 0);
    members.resize(plan->selectors.size());
    columns.resize(plan->nodes.size());
    slots.resize(plan->nodes.size());
    expr_hist.resize(plan->nodes.size());
    rules.resize(plan->rules.size());
    for (std::size_t i = 0; i < plan->nodes.size(); ++i) {
      const auto& n = plan->nodes[i];
      if (n.op == ir::Op::constant) columns[i].push(0, n.constant, false);
    }
    args.reserve(16);
  }

  // ---- interning ------------------------------------------------------------

  std::uint32_t intern_labels(const Labels& labels) {
    std::string key = format_series_key("", labels);
    auto [it, added] = labelset_ids.try_emplace(key, static_cast<std::uint32_t>(labelsets.size()));
    if (added) {
      labelsets.push_back(std::make_unique<Labels>(labels));
      // Room for every rule to fire for every series at once, so the
      // observation where everything goes wrong does not allocate.
      firings.reserve(plan->rules.size() * labelsets.size());
    }
    return it->second;
  }

  SeriesId add_series(const std::string& key, std::string name, const Labels& labels) {
    Series s;
    s.name = std::move(name);
    s.labels = intern_labels(labels);
    const auto id = static_cast<SeriesId>(series.size());
    for (std::size_t i = 0; i < plan->selectors.size(); ++i) {
      const auto& sel = plan->selectors[i];
      if (!sel.matches(s.name, labels)) continue;
      s.need.widen(sel.retention);
      auto& m = members[i];
      auto pos = std::lower_bound(m.begin(), m.end(), s.labels, [&](SeriesId a, std::uint32_t l) {
        return series[a].labels < l;
      });
      m.insert(pos, id);
    }
    s.hist.reserve(std::max<std::size_t>(s.need.count, 2));
    if (s.name == "epoch" && labels.empty()) epoch_series = id;
    series.push_back(std::move(s));
    series_ids.emplace(key, id);
    return id;
  }

  /// A series by its rule-side key (aliases already applied): derived
  /// tensor stats and restored state.
  std::optional<SeriesId> intern_rule_series(std::string_view key) {
    if (auto it = series_ids.find(key); it != series_ids.end()) return it->second;
    std::string name;
    Labels labels;
    if (!parse_series_key(key, name, labels)) return std::nullopt;
    std::string canonical = format_series_key(name, labels);
    if (auto it = series_ids.find(canonical); it != series_ids.end()) return it->second;
    return add_series(canonical, name, labels);
  }

  /// A trace's series key -> the series the rules read (aliases applied).
  /// Trace keys are cached apart from rule-side keys, so an alias's target is
  /// never looked up as a trace name again: aliases are one simultaneous
  /// renaming (`alias a = b` + `alias b = c` reads trace `c` as `b`, never as
  /// `a`). Two trace series landing on one name: an exact name beats an alias
  /// (from its first appearance on), otherwise the first to appear keeps the
  /// name; the loser's key gives nullopt (SPEC: docs/language.md, alias).
  std::optional<SeriesId> intern_series(std::string_view key) {
    if (auto it = trace_ids.find(key); it != trace_ids.end()) return it->second;
    std::string name;
    Labels labels;
    if (!parse_series_key(key, name, labels)) return std::nullopt;
    const std::string_view rule_name = program.resolve_alias(name);
    const bool exact = rule_name == name;
    std::string trace_canonical = format_series_key(name, labels);
    const std::string canonical = format_series_key(rule_name, labels);
    std::optional<SeriesId> id;
    if (auto it = series_ids.find(canonical); it == series_ids.end()) {
      id = add_series(canonical, std::string(rule_name), labels);
      owners.emplace(*id, TraceOwner{std::move(trace_canonical), exact, {std::string(key)}});
    } else {
      id = it->second;
      auto [o, added] = owners.try_emplace(*id, TraceOwner{trace_canonical, exact, {}});
      if (!added && o->second.key != trace_canonical) {
        if (exact && !o->second.exact) {
          for (const auto& k : o->second.raw_keys) trace_ids[k] = std::nullopt;
          o->second = TraceOwner{std::move(trace_canonical), true, {}};
        } else {
          id = std::nullopt;
        }
      }
      if (id) o->second.raw_keys.emplace_back(key);
    }
    trace_ids.emplace(std::string(key), id);
    return id;
  }

  std::optional<TensorId> intern_tensor(std::string_view key) {
    if (auto it = tensor_ids.find(key); it != tensor_ids.end()) return it->second;
    TensorSeries t;
    if (!parse_series_key(key, t.name, t.labels)) return std::nullopt;
    for (std::size_t i = 0; i < stat_count; ++i) {
      const auto stat = static_cast<Stat>(i);
      const std::string derived = t.name + "_" + std::string(stat_name(stat));
      const bool read = std::any_of(plan->selectors.begin(), plan->selectors.end(),
                                    [&](const auto& sel) { return sel.selector.name == derived; });
      if (!read) continue;
      t.mask |= stat_bit(stat);
      t.derived[i] = *intern_rule_series(format_series_key(derived, t.labels));
    }
    t.needs_prev = (t.mask & update_stats) != 0;
    // Parameterised stats: the selector name is the canonical derived name
    // `T_stat(a,b)`, so the request (stat and arguments) is read back from it.
    for (const auto& sel : plan->selectors) {
      ParamStatRef ref;
      if (!parse_param_stat_series(sel.selector.name, ref) || ref.tensor != t.name) continue;
      const SeriesId sid = *intern_rule_series(format_series_key(sel.selector.name, t.labels));
      if (std::any_of(t.params.begin(), t.params.end(), [&](const auto& p) { return p.series == sid; }))
        continue;  // several selectors (other matchers) read the same series
      TensorSeries::ParamRequest req;
      req.stat = ref.stat;
      req.nargs = ref.nargs;
      std::copy(ref.args, ref.args + ref.nargs, req.args);
      req.series = sid;
      t.params.push_back(req);
      t.needs_prev |= ref.stat == ParamStat::frac_changed;
    }
    const auto id = static_cast<TensorId>(tensors.size());
    tensors.push_back(std::move(t));
    tensor_ids.emplace(std::string(key), id);
    return id;
  }

  /// Appends the derived stat samples of `ts` (only the stats rules read).
  void derive(const TensorSample& ts) {
    if (ts.tensor >= tensors.size()) return;  // not an id of this engine: ignored
    TensorSeries& t = tensors[ts.tensor];
    if (t.mask == 0 && t.params.empty()) return;
    const TensorView prev = t.previous();
    const TensorView* previous = t.has_previous() ? &prev : nullptr;
    if (t.mask != 0) emit_stats(t, compute_stats(ts.view, previous).values);
    for (const auto& p : t.params)
      with_tensors.push_back(
          {p.series, compute_param_stat(p.stat, std::span<const double>(p.args, p.nargs), ts.view,
                                        previous)});
    keep_previous(t, ts.view);
  }

  void keep_previous(TensorSeries& t, const TensorView& v) {
    if (!t.needs_prev) return;
    t.has_prev = pack_tensor(v, t.prev);
    t.prev_dtype = v.dtype;
    t.prev_shape.assign(v.shape.begin(), v.shape.end());
  }

  void emit_stats(const TensorSeries& t, const double (&values)[stat_count]) {
    for (std::size_t i = 0; i < stat_count; ++i)
      if (t.mask & stat_bit(static_cast<Stat>(i))) with_tensors.push_back({t.derived[i], values[i]});
  }

  /// Multi-process: every stat of every tensor some rule reads, gathered from
  /// all processes and combined before the derived samples are appended. A
  /// tensor's block in the buffer: its stat_count stats, then its
  /// parameterised stats.
  void derive_gathered(std::span<const TensorSample> samples) {
    gather_local.clear();
    gathered.clear();
    for (const auto& ts : samples) {
      if (ts.tensor >= tensors.size()) continue;
      TensorSeries& t = tensors[ts.tensor];
      if (t.mask == 0 && t.params.empty()) continue;
      const TensorView prev = t.previous();
      const TensorView* previous = t.has_previous() ? &prev : nullptr;
      const TensorStats st = compute_stats(ts.view, previous);
      gather_local.insert(gather_local.end(), std::begin(st.values), std::end(st.values));
      for (const auto& p : t.params)
        gather_local.push_back(compute_param_stat(
            p.stat, std::span<const double>(p.args, p.nargs), ts.view, previous));
      keep_previous(t, ts.view);
      gathered.push_back(ts.tensor);
    }
    if (gathered.empty()) return;
    const std::size_t len = gather_local.size();
    std::size_t ranks = 1;
    const double* all = gather_local.data();
    if (options.allgather(gather_local, gather_all) && !gather_all.empty() &&
        gather_all.size() % len == 0) {
      ranks = gather_all.size() / len;
      all = gather_all.data();
    } else {
      ++stats.gather_failures;
    }
    parts.resize(ranks);
    part_values.resize(ranks);
    part_numels.resize(ranks);
    std::size_t at = 0;
    for (TensorId id : gathered) {
      TensorSeries& t = tensors[id];
      for (std::size_t r = 0; r < ranks; ++r) {
        std::copy_n(all + r * len + at, stat_count, parts[r].values);
        part_numels[r] = parts[r][Stat::numel];
      }
      const TensorStats whole = combine_stats(parts, t.combined_norm);
      t.combined_norm = whole[Stat::norm];
      emit_stats(t, whole.values);
      at += stat_count;
      for (const auto& p : t.params) {
        for (std::size_t r = 0; r < ranks; ++r) part_values[r] = all[r * len + at];
        with_tensors.push_back({p.series, combine_param_stat(p.stat, part_values, part_numels)});
        ++at;
      }
    }
  }

  std::uint16_t intern_mode(std::string_view m) {
    for (std::size_t i = 0; i < modes.size(); ++i)
      if (modes[i] == m) return static_cast<std::uint16_t>(i);
    modes.emplace_back(m);
    last_step_by_mode.push_back(INT64_MIN);
    return static_cast<std::uint16_t>(modes.size() - 1);
  }

  // ---- ingest ---------------------------------------------------------------

  /// Whether some held sample newer than the oldest satisfies `outside`
  /// (lies before a window). `ordered`: the samples are in that order, so
  /// the first one that does not satisfy it ends the search.
  template <class Outside>
  static bool newer_outside(const History& h, bool ordered, Outside outside) {
    for (std::size_t i = 1; i < h.size; ++i) {
      if (outside(h.at(i))) return true;
      if (ordered) return false;
    }
    return false;
  }

  /// Whether the oldest held sample must survive the next push.
  bool still_needed(const History& h, const interp::Retention& need) const {
    if (h.size < need.count) return true;
    const std::size_t oldest = h.at(0);
    if (need.steps > 0) {
      // A later observation of another mode may have a lower step than this
      // one, so step windows keep what the lowest current step of any mode
      // seen so far could still reach.
      const double bound = static_cast<double>(low_step) - need.steps;
      auto outside = [&](std::size_t p) { return static_cast<double>(h.step[p]) <= bound; };
      if (!outside(oldest)) return true;
      // `before` needs the newest sample outside the window: the oldest
      // stays until a newer one is outside too.
      if (need.preceding_steps && !newer_outside(h, h.steps_sorted, outside)) return true;
    }
    if (need.seconds > 0) {
      // Samples without a time are in no time window and never `before` one.
      const double bound = last_time - need.seconds;
      if (h.time[oldest] > bound) return true;
      if (need.preceding_seconds && !std::isnan(h.time[oldest]) &&
          !newer_outside(h, false, [&](std::size_t p) { return h.time[p] <= bound; }))
        return true;
    }
    if (need.evals > 0 && h.mode[oldest] == 1 && h.evals <= need.evals) return true;
    return false;
  }

  /// Appends a sample of this observation, growing the buffer while the
  /// oldest sample is still needed (warm-up; bounded at 2^24 samples).
  void push(History& h, const interp::Retention& need, double v) {
    if (h.size == h.cap) {
      if (still_needed(h, need) && h.cap < (std::size_t{1} << 24))
        h.reserve(h.cap * 2);
      else if (h.mode[h.at(0)] == 1)
        --h.evals;
    }
    h.put(v, step, time, mode);
    if (mode == 1) ++h.evals;
  }

  void ingest(const Sample& smp) {
    if (smp.series >= series.size()) return;  // not an id of this engine: ignored
    Series& s = series[smp.series];
    auto& h = s.hist;
    if (s.stamp == obs && h.size > 0) {  // same series twice in one observation: last wins
      std::size_t p = h.newest();
      h.value[p] = h.value[p + h.cap] = smp.value;
      return;
    }
    push(h, s.need, smp.value);
    s.stamp = obs;
    if (epoch_series && *epoch_series == smp.series) epoch = smp.value;
  }

  // ---- evaluation -------------------------------------------------------------

  [[nodiscard]] bool fresh_at(std::uint32_t node, std::size_t i) const {
    return columns[node].computed == obs && columns[node].fresh[i];
  }

  bool touched(std::uint32_t id) const {
    const PlanNode& n = plan->nodes[id];
    if (force || n.time_dependent) return true;
    if (n.selector != no_node) {
      for (SeriesId s : members[n.selector])
        if (series[s].stamp == obs) return true;
      return false;
    }
    for (auto in : n.inputs)
      if (columns[in].computed == obs) return true;
    return false;
  }

  void evaluate_plan() {
    for (std::uint32_t id = 0; id < plan->nodes.size(); ++id) {
      const PlanNode& n = plan->nodes[id];
      if (n.op == ir::Op::constant || !touched(id)) continue;
      Column& out = columns[id];
      out.clear();
      switch (n.op) {
        case ir::Op::selector: eval_selector(n, out); break;
        case ir::Op::range_call:
          if (n.selector == no_node)
            eval_expr_range(id, n, out);
          else
            eval_range(n, out);
          break;
        case ir::Op::call:
          if (n.fn->kind == stdlib::FnKind::aggregate)
            eval_aggregate(n, out);
          else if (n.fn->kind == stdlib::FnKind::fallback)
            eval_fallback(n, out);
          else if (n.fn->kind == stdlib::FnKind::stateful)
            eval_stateful(id, n, out);
          else
            eval_elementwise(n, out);
          break;
        default: eval_elementwise(n, out); break;
      }
      out.computed = obs;
    }
  }

  void eval_selector(const PlanNode& n, Column& out) {
    for (SeriesId sid : members[n.selector]) {
      const Series& s = series[sid];
      if (s.hist.size == 0) continue;
      out.push(s.labels, s.hist.value[s.hist.newest()], s.stamp == obs);
    }
  }

  /// The window of `h` for `w`, in time order: a span of the ring buffer
  /// when the samples are contiguous there, else gathered.
  stdlib::Window window(const History& h, const ir::Dur& w) {
    const stdlib::Window none{nullptr, nullptr, 0, nullptr};
    // Held samples are contiguous from at(0) thanks to the mirror.
    const std::size_t base = h.size ? h.at(0) : 0;
    std::size_t lo = 0, hi = h.size;  // the window is [lo, hi) of the held samples
    switch (w.unit) {
      case ir::Unit::samples: {
        const auto n = static_cast<std::size_t>(w.amount);
        if (h.size < n) return none;
        lo = h.size - n;
        break;
      }
      case ir::Unit::steps: {
        // (cur - N, cur]: samples of other modes may lie above the current step.
        auto in = [&](std::int64_t st) {
          return static_cast<double>(st) > static_cast<double>(step) - w.amount && st <= step;
        };
        if (!h.steps_sorted) return gather(h, [&](std::size_t p) { return in(h.step[p]); }, 0);
        const std::int64_t* first = &h.step[base];
        lo = static_cast<std::size_t>(
            std::partition_point(first, first + h.size,
                                 [&](std::int64_t st) {
                                   return static_cast<double>(st) <=
                                          static_cast<double>(step) - w.amount;
                                 }) -
            first);
        hi = static_cast<std::size_t>(
            std::partition_point(first, first + h.size, [&](std::int64_t st) { return st <= step; }) -
            first);
        break;
      }
      case ir::Unit::seconds:
        // (now - T, now]; samples taken without a time are in no time window.
        if (std::isnan(time)) return none;
        return gather(h, [&](std::size_t p) {
          return h.time[p] > time - w.amount && h.time[p] <= time;
        }, 0);
      case ir::Unit::evals:
        return gather(h, [&](std::size_t p) { return h.mode[p] == 1; },
                      static_cast<std::size_t>(w.amount));
      case ir::Unit::epochs: return none;
    }
    const std::size_t n = hi > lo ? hi - lo : 0;
    if (n == 0) return none;
    if (scratch.size() < 2 * n) scratch.resize(2 * n);
    return {&h.value[base + lo], &h.step[base + lo], n, scratch.data()};
  }

  /// Copies the held samples that satisfy `keep`, newest first and at most
  /// `want` of them (0: all), into the gather buffers in time order. With
  /// `want`, fewer than `want` samples is no window at all.
  template <class Keep>
  stdlib::Window gather(const History& h, Keep keep, std::size_t want) {
    gather_v.clear();
    gather_s.clear();
    for (std::size_t i = h.size; i-- > 0 && (want == 0 || gather_v.size() < want);) {
      const std::size_t p = h.at(i);
      if (!keep(p)) continue;
      gather_v.push_back(h.value[p]);
      gather_s.push_back(h.step[p]);
    }
    if (gather_v.empty() || (want && gather_v.size() < want)) return {nullptr, nullptr, 0, nullptr};
    std::reverse(gather_v.begin(), gather_v.end());
    std::reverse(gather_s.begin(), gather_s.end());
    if (scratch.size() < 2 * gather_v.size()) scratch.resize(2 * gather_v.size());
    return {gather_v.data(), gather_s.data(), gather_v.size(), scratch.data()};
  }

  /// The newest held sample older than window `w` (`before(x[w])`), as a
  /// window of one sample; empty if there is none.
  stdlib::Window preceding(const History& h, const ir::Dur& w) {
    const stdlib::Window none{nullptr, nullptr, 0, nullptr};
    auto one = [&](std::size_t p) {
      gather_v.assign(1, h.value[p]);
      gather_s.assign(1, h.step[p]);
      if (scratch.size() < 2) scratch.resize(2);
      return stdlib::Window{gather_v.data(), gather_s.data(), 1, scratch.data()};
    };
    // Newest first: the first sample outside the window that `outside` names.
    auto newest_where = [&](auto outside) {
      for (std::size_t i = h.size; i-- > 0;)
        if (outside(h.at(i))) return one(h.at(i));
      return none;
    };
    switch (w.unit) {
      case ir::Unit::samples: {
        const auto n = static_cast<std::size_t>(w.amount);
        return h.size > n ? one(h.at(h.size - 1 - n)) : none;
      }
      case ir::Unit::steps:
        return newest_where([&](std::size_t p) {
          return static_cast<double>(h.step[p]) <= static_cast<double>(step) - w.amount;
        });
      case ir::Unit::seconds:
        if (std::isnan(time)) return none;
        return newest_where([&](std::size_t p) { return h.time[p] <= time - w.amount; });
      case ir::Unit::evals: {
        std::size_t seen = 0;
        return newest_where([&](std::size_t p) {
          return h.mode[p] == 1 && seen++ == static_cast<std::size_t>(w.amount);
        });
      }
      case ir::Unit::epochs: return none;
    }
    return none;
  }

  /// One range function over one history: pushes its value if defined.
  void reduce(const PlanNode& n, const History& h, std::uint32_t labels, bool fresh, Column& out) {
    auto w = n.fn->preceding ? preceding(h, n.window) : window(h, n.window);
    if (w.n == 0 || w.n < n.fn->min_samples) return;
    out.push(labels, n.fn->range(w, n.const_args), fresh);
  }

  void eval_range(const PlanNode& n, Column& out) {
    if (n.fn->kind == stdlib::FnKind::clock) return eval_age(n, out);
    for (SeriesId sid : members[n.selector]) {
      const Series& s = series[sid];
      reduce(n, s.hist, s.labels, s.stamp == obs, out);
    }
  }

  /// age(x): a clock reading, fresh at every observation that has a time.
  void eval_age(const PlanNode& n, Column& out) {
    if (std::isnan(time)) return;
    for (SeriesId sid : members[n.selector]) {
      const History& h = series[sid].hist;
      if (h.size == 0 || std::isnan(h.time[h.newest()])) continue;
      out.push(series[sid].labels, time - h.time[h.newest()], true);
    }
  }

  /// A range over an expression: its fresh values join the per-label
  /// histories, then each history is reduced like a series' window.
  void eval_expr_range(std::uint32_t id, const PlanNode& n, Column& out) {
    auto& hs = expr_hist[id];
    const std::uint32_t in = n.inputs[0];
    const Column& c = columns[in];
    if (c.computed == obs) {
      for (std::size_t i = 0; i < c.values.size(); ++i) {
        if (!c.fresh[i]) continue;
        auto it = std::lower_bound(hs.begin(), hs.end(), c.labels[i],
                                   [](const ExprHistory& h, std::uint32_t l) { return h.labels < l; });
        if (it == hs.end() || it->labels != c.labels[i]) {
          ExprHistory fresh;
          fresh.labels = c.labels[i];
          fresh.hist.reserve(std::max<std::size_t>(n.history.count, 2));
          it = hs.insert(it, std::move(fresh));
        }
        push(it->hist, n.history, c.values[i]);
        it->stamp = obs;
      }
    }
    for (const auto& h : hs) reduce(n, h.hist, h.labels, h.stamp == obs, out);
  }

  /// default(x, v): x's elements if it has any, else v's.
  void eval_fallback(const PlanNode& n, Column& out) {
    const bool has_x = !columns[n.inputs[0]].values.empty();
    const std::uint32_t from = n.inputs[has_x ? 0 : 1];
    const Column& c = columns[from];
    out.labels.assign(c.labels.begin(), c.labels.end());
    out.values.assign(c.values.begin(), c.values.end());
    copy_fresh(from, out);
  }

  void eval_aggregate(const PlanNode& n, Column& out) {
    const Column& in = columns[n.inputs[0]];
    if (in.values.empty()) return;
    bool fresh = false;
    for (std::size_t i = 0; i < in.values.size(); ++i) fresh |= fresh_at(n.inputs[0], i) != 0;
    out.push(0, n.fn->aggregate(in.values), fresh);
  }

  void eval_stateful(std::uint32_t id, const PlanNode& n, Column& out) {
    const Column& in = columns[n.inputs[0]];
    auto& sl = slots[id];
    if (sl.size() < labelsets.size()) sl.resize(labelsets.size());
    for (std::size_t i = 0; i < in.values.size(); ++i) {
      StatefulSlot& slot = sl[in.labels[i]];
      const bool fresh = fresh_at(n.inputs[0], i);
      if (fresh) {
        slot.out = n.fn->stateful(slot.state, in.values[i], n.const_args);
        slot.defined = slot.state.n >= static_cast<std::int64_t>(n.fn->min_samples) ||
                       std::isnan(in.values[i]);
      }
      if (!slot.defined) continue;
      out.push(in.labels[i], slot.out, fresh);
    }
  }

  /// Operators over whole columns with Eigen when the operands line up (the
  /// same label sets, or a scalar against a vector): one dispatch on the
  /// operator per node, not per element. Returns false to take the general
  /// join path.
  bool eval_operator(const PlanNode& n, Column& out) {
    if (n.op == ir::Op::call) return false;
    using Array = Eigen::ArrayXd;
    using Map = Eigen::Map<const Array>;
    const std::uint32_t li = n.inputs[0];
    const Column& l = columns[li];
    const auto size = static_cast<Eigen::Index>(l.values.size());
    if (n.inputs.size() == 1) {
      out.labels.assign(l.labels.begin(), l.labels.end());
      out.values.resize(l.values.size());
      Eigen::Map<Array> o(out.values.data(), size);
      Map a(l.values.data(), size);
      if (n.op == ir::Op::neg)
        o = -a;
      else
        o = ((a == 0) || (a != a)).cast<double>();
      copy_fresh(li, out);
      return true;
    }
    const std::uint32_t ri = n.inputs[1];
    const Column& r = columns[ri];
    // A lone label-less element against a labelled vector broadcasts as a scalar.
    const bool ll = lone(li), rl = lone(ri);
    const bool lv = plan->nodes[li].vector && !(ll && !rl && plan->nodes[ri].vector);
    const bool rv = plan->nodes[ri].vector && !(rl && !ll && plan->nodes[li].vector);
    if (lv == rv && l.labels != r.labels) return false;  // needs a join
    const Column& shape = lv || !rv ? l : r;
    const auto m = static_cast<Eigen::Index>(shape.values.size());
    out.labels.assign(shape.labels.begin(), shape.labels.end());
    out.values.resize(shape.values.size());
    if ((!lv && l.values.empty()) || (!rv && r.values.empty())) {
      out.clear();
      return true;
    }
    Eigen::Map<Array> o(out.values.data(), m);
    if (lv == rv)
      binary(n.op, Map(l.values.data(), m), Map(r.values.data(), m), o);
    else if (lv)
      binary(n.op, Map(l.values.data(), m), Array::Constant(m, r.values[0]), o);
    else
      binary(n.op, Array::Constant(m, l.values[0]), Map(r.values.data(), m), o);
    out.fresh.assign(shape.values.size(), 0);
    for (std::size_t i = 0; i < out.fresh.size(); ++i)
      out.fresh[i] = fresh_at(li, lv ? i : 0) || fresh_at(ri, rv ? i : 0);
    return true;
  }

  void copy_fresh(std::uint32_t in, Column& out) const {
    out.fresh.assign(columns[in].fresh.begin(), columns[in].fresh.end());
    if (columns[in].computed != obs) std::fill(out.fresh.begin(), out.fresh.end(), 0);
  }

  /// The operator semantics of interp::apply_binary, on whole arrays.
  template <class A, class B, class O>
  static void binary(ir::Op op, const A& a, const B& b, O& o) {
    auto truth = [](const auto& x) { return (x != 0) && (x == x); };
    switch (op) {
      case ir::Op::add: o = a + b; break;
      case ir::Op::sub: o = a - b; break;
      case ir::Op::mul: o = a * b; break;
      case ir::Op::div: o = a / b; break;
      case ir::Op::mod: o = a.binaryExpr(b, [](double x, double y) { return std::fmod(x, y); }); break;
      case ir::Op::pow: o = a.binaryExpr(b, [](double x, double y) { return std::pow(x, y); }); break;
      case ir::Op::lt: o = (a < b).template cast<double>(); break;
      case ir::Op::le: o = (a <= b).template cast<double>(); break;
      case ir::Op::gt: o = (a > b).template cast<double>(); break;
      case ir::Op::ge: o = (a >= b).template cast<double>(); break;
      case ir::Op::eq: o = (a == b).template cast<double>(); break;
      case ir::Op::ne: o = ((a != b) && (a == a) && (b == b)).template cast<double>(); break;
      case ir::Op::and_: o = (truth(a) && truth(b)).template cast<double>(); break;
      case ir::Op::or_: o = (truth(a) || truth(b)).template cast<double>(); break;
      default: o.setConstant(std::numeric_limits<double>::quiet_NaN()); break;
    }
  }

  /// A vector whose only element has no labels (`loss`): it pairs with
  /// every element of a labelled vector, as a scalar would.
  [[nodiscard]] bool lone(std::uint32_t in) const {
    const Column& c = columns[in];
    return c.labels.size() == 1 && c.labels[0] == 0;
  }

  /// Elementwise over 1..k inputs: vectors are joined on identical label
  /// sets; scalars, and vectors of one label-less element, broadcast.
  void eval_elementwise(const PlanNode& n, Column& out) {
    if (eval_operator(n, out)) return;
    const std::size_t k = n.inputs.size();
    std::uint32_t driver = no_node;
    for (auto in : n.inputs)
      if (plan->nodes[in].vector && !lone(in)) {
        driver = in;
        break;
      }
    for (auto in : n.inputs)
      if (driver == no_node && plan->nodes[in].vector) driver = in;
    if (driver == no_node) driver = n.inputs[0];
    const bool broadcast_lone = !lone(driver);
    const Column& d = columns[driver];
    for (std::size_t i = 0; i < d.values.size(); ++i) {
      const std::uint32_t label = d.labels[i];
      args.clear();
      bool fresh = false, ok = true;
      for (auto in : n.inputs) {
        const Column& c = columns[in];
        std::size_t j;
        if (!plan->nodes[in].vector || (broadcast_lone && in != driver && lone(in))) {
          if (c.values.empty()) {
            ok = false;
            break;
          }
          j = 0;
        } else if (in == driver) {
          j = i;
        } else {
          auto it = std::lower_bound(c.labels.begin(), c.labels.end(), label);
          if (it == c.labels.end() || *it != label) {
            ok = false;
            break;
          }
          j = static_cast<std::size_t>(it - c.labels.begin());
        }
        args.push_back(c.values[j]);
        fresh |= fresh_at(in, j);
      }
      if (!ok) continue;
      double v;
      if (n.op == ir::Op::call)
        v = n.fn->elementwise(args);
      else if (k == 1)
        v = interp::apply_unary(n.op, args[0]);
      else
        v = interp::apply_binary(n.op, args[0], args[1]);
      out.push(label, v, fresh);
    }
  }

  // ---- rules ----------------------------------------------------------------

  /// How far into the run this observation is, in `unit` (samples/evals:
  /// the rule's evaluation opportunities before this one).
  double progress(ir::Unit unit, std::uint64_t opportunity) const {
    switch (unit) {
      case ir::Unit::steps: return static_cast<double>(step);
      case ir::Unit::samples:
      case ir::Unit::evals: return static_cast<double>(opportunity);
      case ir::Unit::seconds: return time - first_time;
      case ir::Unit::epochs: return epoch;
    }
    return nan;
  }

  bool gate(const interp::PlanRule& pr, RuleState& rs) {
    const ir::Rule& r = pr.rule;
    const std::uint64_t opportunity = rs.opportunities++;
    // `after`: from this point on; `until`: only before it. NaN progress
    // (no time or epoch yet) passes neither.
    if (r.after && !(progress(r.after->unit, opportunity) >= r.after->amount)) return false;
    if (r.until && !(progress(r.until->unit, opportunity) < r.until->amount)) return false;
    if (r.every) {
      const auto& e = *r.every;
      switch (e.unit) {
        case ir::Unit::samples:
        case ir::Unit::evals:
          if (rs.every_index++ % static_cast<std::uint64_t>(e.amount) != 0) return false;
          break;
        case ir::Unit::steps:
          if (rs.has_every && static_cast<double>(step) < static_cast<double>(rs.every_step) + e.amount)
            return false;
          break;
        case ir::Unit::seconds:
          if (rs.has_every && !(time >= rs.every_time + e.amount)) return false;
          break;
        case ir::Unit::epochs:
          if (rs.has_every && !(epoch >= rs.every_epoch + e.amount)) return false;
          break;
      }
      rs.has_every = true;
      rs.every_step = step;
      rs.every_time = time;
      rs.every_epoch = epoch;
    }
    return true;
  }

  void evaluate_rules() {
    for (std::size_t ri = 0; ri < plan->rules.size(); ++ri) {
      const auto& pr = plan->rules[ri];
      const ir::Rule& r = pr.rule;
      RuleState& rs = rules[ri];
      if (!r.info.mode.empty() && r.info.mode != modes[mode]) continue;
      const Column& root = columns[pr.root];
      if (root.computed != obs) continue;
      if (std::none_of(root.fresh.begin(), root.fresh.end(), [](auto f) { return f != 0; }))
        continue;
      if (!gate(pr, rs)) continue;
      if (rs.elems.size() < labelsets.size()) rs.elems.resize(labelsets.size());
      const std::size_t first_firing = firings.size();
      for (std::size_t i = 0; i < root.values.size(); ++i) {
        if (!root.fresh[i]) continue;
        const std::uint32_t label = root.labels[i];
        ElemState& e = rs.elems[label];
        ++e.evals;
        const double v = root.values[i];
        if (!(v != 0) || std::isnan(v)) {
          e.run = 0;
          e.fired = false;
          continue;
        }
        if (++e.run == 1) {
          e.first_step = step;
          e.first_time = time;
          e.first_epoch = epoch;
        }
        e.recent[(e.run - 1) % 8] = step;
        if (!satisfied(r, e)) continue;
        bool fire = !e.fired;
        if (!fire && r.cooldown) fire = since_last_fire(r.cooldown->unit, e) >= r.cooldown->amount;
        if (!fire) continue;
        // Escalation: count this firing's chain of earlier firings, each
        // within the clause's span of the next (measured before updating
        // last_fire), and take the last clause whose count is reached.
        const bool fired_before = e.last_fire_eval > 0;
        int level = 0;
        for (std::size_t k = 0; k < r.escalation_within.size(); ++k) {
          const auto& w = r.escalation_within[k];
          e.chain[k] = fired_before && since_last_fire(w.unit, e) <= w.amount ? e.chain[k] + 1 : 0;
          if (e.chain[k] >= r.info.escalations[k].after) level = static_cast<int>(k) + 1;
        }
        e.fired = true;
        e.last_fire_eval = e.evals;
        e.last_fire_step = step;
        e.last_fire_time = time;
        e.last_fire_epoch = epoch;
        Firing f;
        f.rule = &program.rules()[ri];
        f.step = step;
        f.mode = modes[mode];
        f.time = time;
        f.severity = r.info.severity;
        f.labels = labelsets[label].get();
        f.value = firing_value(pr, label);
        f.pending_since = e.first_step;
        f.escalation = level;
        f.actions = level == 0 ? &program.rules()[ri].actions
                               : &program.rules()[ri].escalations[level - 1].actions;
        firings.push_back(f);
      }
      // Columns are ordered by label id (first-seen order); report a rule's
      // series in label order so output does not depend on arrival order.
      std::sort(firings.begin() + static_cast<std::ptrdiff_t>(first_firing), firings.end(),
                [](const Firing& a, const Firing& b) { return *a.labels < *b.labels; });
    }
  }

  /// How far this evaluation is from the element's last firing, in `unit`.
  double since_last_fire(ir::Unit unit, const ElemState& e) const {
    switch (unit) {
      case ir::Unit::samples:
      case ir::Unit::evals: return static_cast<double>(e.evals - e.last_fire_eval);
      case ir::Unit::steps: return span(e.last_fire_step, step);
      case ir::Unit::seconds: return time - e.last_fire_time;
      case ir::Unit::epochs: return epoch - e.last_fire_epoch;
    }
    return nan;
  }

  /// to - from in double: steps are host data and int64 subtraction of
  /// extreme values would overflow.
  static double span(std::int64_t from, std::int64_t to) {
    return static_cast<double>(to) - static_cast<double>(from);
  }

  bool satisfied(const ir::Rule& r, const ElemState& e) const {
    if (!r.for_) return true;
    const auto& d = *r.for_;
    switch (d.unit) {
      case ir::Unit::samples:
      case ir::Unit::evals: return static_cast<double>(e.run) >= d.amount;
      case ir::Unit::steps: return span(e.first_step, step) >= d.amount;
      case ir::Unit::seconds: return time - e.first_time >= d.amount;
      case ir::Unit::epochs: return epoch - e.first_epoch >= d.amount;
    }
    return false;
  }

  /// Element `label` of node `id`'s column (a scalar's, or a lone element's,
  /// whatever the label).
  std::optional<double> element(std::uint32_t id, std::uint32_t label) const {
    const Column& c = columns[id];
    if (c.values.empty()) return std::nullopt;
    if (!plan->nodes[id].vector || lone(id)) return c.values[0];
    auto it = std::lower_bound(c.labels.begin(), c.labels.end(), label);
    if (it == c.labels.end() || *it != label) return std::nullopt;
    return c.values[static_cast<std::size_t>(it - c.labels.begin())];
  }

  /// The firing's value: the left-hand side of the comparison that decided
  /// (interp::Decision).
  std::optional<double> firing_value(const interp::PlanRule& pr, std::uint32_t label,
                                     std::int32_t at = 0) const {
    using Kind = interp::Decision::Kind;
    if (at < 0 || static_cast<std::size_t>(at) >= pr.decisions.size()) return std::nullopt;
    const auto& d = pr.decisions[static_cast<std::size_t>(at)];
    auto holds = [&](std::int32_t k) {
      auto v = element(pr.decisions[static_cast<std::size_t>(k)].node, label);
      return v && *v != 0 && !std::isnan(*v);
    };
    switch (d.kind) {
      case Kind::comparison: return element(d.lhs, label);
      case Kind::and_: return firing_value(pr, label, d.a);
      case Kind::or_: return firing_value(pr, label, !holds(d.a) && holds(d.b) ? d.b : d.a);
      case Kind::fallback:
        return firing_value(
            pr, label,
            columns[pr.decisions[static_cast<std::size_t>(d.a)].node].values.empty() ? d.b : d.a);
      case Kind::none: break;
    }
    return std::nullopt;
  }


  void check_bindings() {
    if (bindings_checked) return;
    bindings_checked = true;
    if (options.unbound != UnboundActions::error) return;
    auto unbound = unbound_actions();
    if (!unbound.empty())
      throw Error("unbound actions:\n" + format_diagnostics(unbound, program.sources()));
  }

  std::vector<Diagnostic> unbound_actions() const {
    std::vector<Diagnostic> out;
    for (const auto& pr : plan->rules) {
      // The rule's actions, then each escalation's: the order of action_sites.
      std::vector<const std::string*> names;
      for (const auto& a : pr.rule.info.actions) names.push_back(&a.name);
      for (const auto& esc : pr.rule.info.escalations)
        for (const auto& a : esc.actions) names.push_back(&a.name);
      for (std::size_t i = 0; i < names.size(); ++i) {
        const auto& name = *names[i];
        if (callbacks.count(name)) continue;
        const auto& [file, range] = pr.rule.action_sites[i];
        out.push_back({DiagLevel::error, "unbound-action",
                       fmt::format("action '{}' of rule '{}' has no callback bound", name,
                                   pr.rule.info.name),
                       file, range, {}, {}});
      }
    }
    return out;
  }

  std::span<const Firing> observe(std::int64_t st, std::span<const Sample> samples,
                                  const ObserveOptions& o) {
    if (dispatching) throw Error("observe() called from an action callback");
    check_bindings();
    firings.clear();
    const std::uint16_t m = intern_mode(o.mode);
    if (st < last_step_by_mode[m]) {
      ++stats.out_of_order;
      return {};
    }
    last_step_by_mode[m] = st;
    low_step = st;
    for (auto last : last_step_by_mode)
      if (last != INT64_MIN) low_step = std::min(low_step, last);
    if (!std::isnan(o.time)) last_time = o.time;
    ++obs;
    ++stats.observations;
    step = st;
    mode = m;
    time = o.time;
    if (std::isnan(first_time) && !std::isnan(time)) first_time = time;
    for (const auto& s : samples) ingest(s);
    if (recorder) record(samples);
    evaluate_plan();
    force = false;
    evaluate_rules();
    stats.firings += firings.size();
    // Callbacks run after every rule has been evaluated, so an action cannot
    // change what other rules see in this observation.
    dispatching = true;
    struct Reset {
      bool& flag;
      ~Reset() { flag = false; }
    } reset{dispatching};
    for (const auto& f : firings)
      for (const auto& a : *f.actions)
        if (auto it = callbacks.find(a.name); it != callbacks.end() && it->second)
          it->second(f, a);
    return firings;
  }

  void record(std::span<const Sample> samples) {
    recorded.step = step;
    recorded.mode = modes[mode];
    recorded.time = time;
    recorded.values.clear();
    for (const auto& s : samples) {
      if (s.series >= series.size()) continue;
      const Series& sr = series[s.series];
      recorded.values.emplace_back(format_series_key(sr.name, *labelsets[sr.labels]), s.value);
    }
    recorder(recorded);
  }

  // ---- explain --------------------------------------------------------------

  /// "N samples [value@step ...]": what range node `n` reads of `h` (the
  /// newest 12 shown).
  std::string window_text(const History& h, const PlanNode& n) const {
    // window() and preceding() fill scratch buffers; explain is off the hot path.
    auto* self = const_cast<Impl*>(this);
    auto w = n.fn->preceding ? self->preceding(h, n.window) : self->window(h, n.window);
    std::string vals;
    const std::size_t from = w.n > 12 ? w.n - 12 : 0;
    if (from) vals += "... ";
    for (std::size_t i = from; i < w.n; ++i)
      vals += fmt::format("{}{}@{}", i > from ? " " : "", w.values[i], w.steps[i]);
    return fmt::format("{} samples [{}]", w.n, vals);
  }

  /// The recorded values of a range over an expression, for the firing's
  /// label set (or every label set of a scalar firing, up to 8).
  void explain_expr_range(std::uint32_t id, std::string_view expr, const Firing& f,
                          std::string& out) const {
    std::size_t shown = 0;
    for (const auto& h : expr_hist[id]) {
      if (!f.labels->empty() && labelsets[h.labels].get() != f.labels) continue;
      if (++shown > 8) {
        out += "    ...\n";
        break;
      }
      const std::string labels = format_series_key("", *labelsets[h.labels]);
      out += fmt::format("    {}{}{}: {}\n", expr, labels.empty() ? "" : " for ", labels,
                         window_text(h.hist, plan->nodes[id]));
    }
  }

  std::string explain(const Firing& f) const {
    std::size_t ri = static_cast<std::size_t>(f.rule - program.rules().data());
    if (ri >= plan->rules.size()) return {};
    const auto& pr = plan->rules[ri];
    std::string out;
    const auto& src = program.sources();
    // A rule made by `use` shows its inputs in the template's words
    // (`median(metric[window steps])`): first say which arguments those are.
    const RuleInfo& info = program.rules()[ri];
    if (!info.template_name.empty() && info.range.end <= src[info.file].text.size()) {
      std::string_view use = std::string_view(src[info.file].text)
                                 .substr(info.range.begin, info.range.end - info.range.begin);
      use = use.substr(0, use.find('\n'));
      out += fmt::format("    {} ({}:{})\n", use, src[info.file].name,
                         src.line_col(info.file, info.range.begin).line);
    }
    for (auto leaf : pr.leaves) {
      const PlanNode& n = plan->nodes[leaf];
      const auto& text = src[n.file].text;
      std::string_view expr = n.range.end <= text.size()
                                  ? std::string_view(text).substr(n.range.begin,
                                                                  n.range.end - n.range.begin)
                                  : std::string_view{};
      if (n.selector == no_node) {
        explain_expr_range(leaf, expr, f, out);
        continue;
      }
      const auto& ms = members[n.selector];
      std::size_t shown = 0;
      for (SeriesId sid : ms) {
        const Series& s = series[sid];
        if (s.hist.size == 0) continue;
        if (!f.labels->empty() && labelsets[s.labels].get() != f.labels && ms.size() > 1) continue;
        if (++shown > 8) {
          out += "    ...\n";
          break;
        }
        std::string key = format_series_key(s.name, *labelsets[s.labels]);
        if (n.op == ir::Op::selector) {
          out += fmt::format("    {} = {} (step {})\n", key, s.hist.value[s.hist.newest()],
                             s.hist.step[s.hist.newest()]);
        } else if (n.fn->kind == stdlib::FnKind::clock) {
          out += fmt::format("    {} for {}: {} s since its sample at step {}\n", expr, key,
                             time - s.hist.time[s.hist.newest()], s.hist.step[s.hist.newest()]);
        } else {
          out += fmt::format("    {} over {}: {}\n", expr, key, window_text(s.hist, n));
        }
      }
    }
    const auto& rs = rules[ri];
    const std::uint32_t label = [&] {
      for (std::uint32_t i = 0; i < labelsets.size(); ++i)
        if (labelsets[i].get() == f.labels) return i;
      return 0u;
    }();
    if (label < rs.elems.size()) {
      const auto& e = rs.elems[label];
      std::string steps;
      const std::int64_t k = std::min<std::int64_t>(e.run, 8);
      for (std::int64_t i = e.run - k; i < e.run; ++i)
        steps += fmt::format("{}{}", steps.empty() ? "" : ", ", e.recent[i % 8]);
      out += fmt::format("    pending since step {}: {} consecutive true evaluation{} ({}{})\n",
                         e.first_step, e.run, e.run == 1 ? "" : "s", e.run > 8 ? "..., " : "",
                         steps);
    }
    return out;
  }

  // ---- state ----------------------------------------------------------------

  static void save_history(Writer& w, const History& h) {
    w.pod<std::uint64_t>(h.size);
    for (std::size_t i = 0; i < h.size; ++i) {
      std::size_t p = h.at(i);
      w.pod(h.value[p]);
      w.pod(h.step[p]);
      w.pod(h.time[p]);
      w.pod(h.mode[p]);
    }
  }

  /// Reads what save_history wrote into an empty history of at least `cap`.
  void restore_history(Reader& r, History& h, std::size_t cap) const {
    auto size = r.count(8);
    h = History{};
    h.reserve(std::max<std::size_t>({cap, static_cast<std::size_t>(size), 2}));
    for (std::uint64_t i = 0; i < size; ++i) {
      double v = r.pod<double>();
      auto st = r.pod<std::int64_t>();
      double t = r.pod<double>();
      auto m = r.pod<std::uint16_t>();
      if (m >= modes.size()) throw Error("engine state is corrupt (mode)");
      h.put(v, st, t, m);
      if (m == 1) ++h.evals;
    }
  }

  std::string save() const {
    Writer w;
    w.out = "VIGILST4";
    w.pod(program.impl().fingerprint);
    w.pod<std::uint64_t>(modes.size());
    for (std::size_t i = 0; i < modes.size(); ++i) {
      w.str(modes[i]);
      w.pod(last_step_by_mode[i]);
    }
    w.pod<std::uint64_t>(labelsets.size());
    for (const auto& l : labelsets) w.str(format_series_key("x", *l));
    w.pod<std::uint64_t>(series.size());
    for (const auto& s : series) {
      w.str(format_series_key(s.name, *labelsets[s.labels]));
      w.pod(s.stamp);
      save_history(w, s.hist);
    }
    w.pod<std::uint64_t>(tensors.size());
    for (const auto& t : tensors) {
      w.str(format_series_key(t.name, t.labels));
      w.pod(t.has_prev);
      w.pod(t.prev_dtype);
      w.vec(t.prev_shape);
      w.vec(t.prev);
      w.pod(t.combined_norm);
    }
    w.pod(obs);
    w.pod(step);
    w.pod(time);
    w.pod(first_time);
    w.pod(epoch);
    w.pod(low_step);
    w.pod(last_time);
    w.pod(mode);
    w.pod(stats);
    for (const auto& sl : slots) w.vec(sl);
    for (const auto& hs : expr_hist) {
      w.pod<std::uint64_t>(hs.size());
      for (const auto& h : hs) {
        w.pod(h.labels);
        w.pod(h.stamp);
        save_history(w, h.hist);
      }
    }
    for (const auto& r : rules) {
      w.vec(r.elems);
      w.pod(r.opportunities);
      w.pod(r.every_index);
      w.pod(r.has_every);
      w.pod(r.every_step);
      w.pod(r.every_time);
      w.pod(r.every_epoch);
    }
    return std::move(w.out);
  }

  /// Restores saved state into a fresh engine over the same program. The
  /// host's series and tensor ids stay valid: the fresh engine first interns
  /// this engine's keys in id order, then takes the saved state by key
  /// (label-set ids are remapped the same way).
  void restore(std::string_view bytes) {
    if (bytes.substr(0, 8) != "VIGILST4") throw Error("not a Vigil engine state");
    Reader r{bytes.substr(8)};
    if (r.pod<std::uint64_t>() != program.impl().fingerprint)
      throw Error("engine state was saved by a different rule program");
    Impl fresh(program, options);
    fresh.callbacks = callbacks;
    fresh.bindings_checked = bindings_checked;
    for (const auto& s : series) fresh.intern_rule_series(format_series_key(s.name, *labelsets[s.labels]));
    for (const auto& t : tensors) fresh.intern_tensor(format_series_key(t.name, t.labels));

    fresh.modes.clear();
    fresh.last_step_by_mode.clear();
    for (auto n = r.count(); n-- > 0;) {
      fresh.modes.push_back(r.str());
      fresh.last_step_by_mode.push_back(r.pod<std::int64_t>());
    }
    if (fresh.modes.size() < 2 || fresh.modes[0] != "train" || fresh.modes[1] != "eval")
      throw Error("engine state is corrupt (modes)");
    std::vector<std::uint32_t> label_map;  // saved label id -> fresh id
    for (auto n = r.count(); n-- > 0;) {
      std::string name;
      Labels labels;
      if (!parse_series_key(r.str(), name, labels)) throw Error("engine state is corrupt (labels)");
      label_map.push_back(fresh.intern_labels(labels));
    }
    for (auto n = r.count(); n-- > 0;) {
      auto id = fresh.intern_rule_series(r.str());
      if (!id) throw Error("engine state is corrupt (series)");
      Series& s = fresh.series[*id];
      s.stamp = r.pod<std::uint64_t>();
      fresh.restore_history(r, s.hist, s.need.count);
    }
    for (auto n = r.count(); n-- > 0;) {
      auto id = fresh.intern_tensor(r.str());
      if (!id) throw Error("engine state is corrupt (tensors)");
      TensorSeries& t = fresh.tensors[*id];
      t.has_prev = r.pod<bool>();
      t.prev_dtype = r.pod<DType>();
      t.prev_shape = r.vec<std::int64_t>();
      t.prev = r.vec<std::byte>();
      t.combined_norm = r.pod<double>();
    }
    fresh.obs = r.pod<std::uint64_t>();
    fresh.step = r.pod<std::int64_t>();
    fresh.time = r.pod<double>();
    fresh.first_time = r.pod<double>();
    fresh.epoch = r.pod<double>();
    fresh.low_step = r.pod<std::int64_t>();
    fresh.last_time = r.pod<double>();
    fresh.mode = r.pod<std::uint16_t>();
    fresh.stats = r.pod<EngineStats>();
    // Per-label state, moved to the fresh label ids.
    auto remap = [&](auto saved, auto& into) {
      into.assign(fresh.labelsets.size(), {});
      if (saved.size() > label_map.size()) throw Error("engine state is corrupt (label state)");
      for (std::size_t i = 0; i < saved.size(); ++i) into[label_map[i]] = saved[i];
    };
    for (auto& sl : fresh.slots) remap(r.vec<StatefulSlot>(), sl);
    for (std::size_t id = 0; id < fresh.expr_hist.size(); ++id) {
      auto& hs = fresh.expr_hist[id];
      for (auto n = r.count(); n-- > 0;) {
        ExprHistory h;
        const auto saved = r.pod<std::uint32_t>();
        if (saved >= label_map.size()) throw Error("engine state is corrupt (label state)");
        h.labels = label_map[saved];
        h.stamp = r.pod<std::uint64_t>();
        fresh.restore_history(r, h.hist, plan->nodes[id].history.count);
        hs.push_back(std::move(h));
      }
      std::sort(hs.begin(), hs.end(), [](const auto& a, const auto& b) { return a.labels < b.labels; });
    }
    for (auto& rs : fresh.rules) {
      remap(r.vec<ElemState>(), rs.elems);
      rs.opportunities = r.pod<std::uint64_t>();
      rs.every_index = r.pod<std::uint64_t>();
      rs.has_every = r.pod<bool>();
      rs.every_step = r.pod<std::int64_t>();
      rs.every_time = r.pod<double>();
      rs.every_epoch = r.pod<double>();
    }
    if (!r.in.empty()) throw Error("engine state has trailing bytes");
    fresh.force = true;
    *this = std::move(fresh);
  }
};

Engine::Engine(Program program, EngineOptions options) {
  if (!options.params.empty()) {
    auto result = recompile_with(program, options.params);
    if (!result.ok()) throw Error("bad engine params:\n" + result.format_diagnostics());
    program = *result.program;
  }
  impl_ = std::make_unique<Impl>(std::move(program), std::move(options));
}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const Program& Engine::program() const { return impl_->program; }

void Engine::on(std::string_view action, ActionCallback callback) {
  impl_->callbacks[std::string(action)] = std::move(callback);
}

std::vector<Diagnostic> Engine::unbound_actions() const { return impl_->unbound_actions(); }

std::optional<SeriesId> Engine::series(std::string_view key) { return impl_->intern_series(key); }

std::optional<SeriesId> Engine::series(std::string_view name, const Labels& labels) {
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  return impl_->intern_series(format_series_key(name, sorted));
}

std::span<const Firing> Engine::observe(std::int64_t step, std::span<const Sample> samples,
                                        const ObserveOptions& options) {
  return impl_->observe(step, samples, options);
}

std::span<const Firing> Engine::observe(
    std::int64_t step, std::initializer_list<std::pair<std::string_view, double>> values,
    const ObserveOptions& options) {
  std::vector<Sample> samples;
  samples.reserve(values.size());
  for (const auto& [key, v] : values)
    if (auto id = impl_->intern_series(key)) samples.push_back({*id, v});
  return impl_->observe(step, samples, options);
}

std::span<const Firing> Engine::observe(std::int64_t step, std::span<const Sample> samples,
                                        std::span<const TensorSample> tensors,
                                        const ObserveOptions& options) {
  auto& buf = impl_->with_tensors;
  buf.assign(samples.begin(), samples.end());
  if (impl_->options.allgather)
    impl_->derive_gathered(tensors);
  else
    for (const auto& t : tensors) impl_->derive(t);
  return impl_->observe(step, buf, options);
}

std::optional<TensorId> Engine::tensor(std::string_view key) { return impl_->intern_tensor(key); }

void Engine::record(std::function<void(const Observation&)> recorder) {
  impl_->recorder = std::move(recorder);
}

StatMask Engine::tensor_stats_used(TensorId id) const {
  if (id >= impl_->tensors.size()) return 0;
  const auto& t = impl_->tensors[id];
  return t.mask | (t.params.empty() ? 0 : param_stats_bit);
}

std::string Engine::explain(const Firing& firing) const { return impl_->explain(firing); }
std::string Engine::save_state() const { return impl_->save(); }
void Engine::restore_state(std::string_view bytes) { impl_->restore(bytes); }
const EngineStats& Engine::stats() const { return impl_->stats; }

bool Engine::pending() const {
  for (const auto& r : impl_->rules)
    for (const auto& e : r.elems)
      if (e.run > 0) return true;
  return false;
}

}  // namespace vigil
