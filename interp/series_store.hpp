// The series store: the identities the engine has seen and the samples it
// keeps for them. Interns label sets, series keys (with aliases), tensor
// series (which derived stat series a tensor feeds) and modes to dense ids,
// and holds each series' history.
//
// Owns: ids and their reverse maps, which plan selectors each series belongs
// to, each series' History and retention. Must not touch: plan evaluation,
// rule state, firings, actions. Interning allocates (warm-up); looking up a
// key seen before does not.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "interp/plan.hpp"
#include "interp/window.hpp"
#include "vigil/engine.hpp"

namespace vigil::interp {

struct Series {
  std::string name;
  std::uint32_t labels = 0;  // label set id
  History hist;
  Retention need;           // the widest retention of the selectors it matches
  std::uint64_t stamp = 0;  // observation number of the newest sample
  std::vector<std::uint32_t> selectors;  // the plan selectors it is a member of
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

  /// Some rule reads a stat of it (else observing it costs nothing).
  [[nodiscard]] bool used() const { return mask != 0 || !params.empty(); }
  /// The kept previous value (valid until `prev` changes), and whether there is one.
  [[nodiscard]] TensorView previous() const { return {prev.data(), prev_dtype, prev_shape, {}}; }
  [[nodiscard]] bool has_previous() const { return needs_prev && has_prev; }
};

class SeriesStore {
 public:
  /// A store for `program`'s plan: which selectors a series joins is decided
  /// when it is interned. Starts with the empty label set (id 0) and the
  /// modes "train" (0) and "eval" (1).
  explicit SeriesStore(Program program, std::size_t max_label_sets = default_max_label_sets);

  /// The id of a label set (sorted), interning it.
  std::uint32_t intern_labels(const Labels& labels);
  std::uint32_t intern_labels(Labels&& labels);
  /// A trace's series key -> the series the rules read (aliases applied,
  /// once, never chained), interning it. Trace keys are cached apart from
  /// rule-side keys, so an alias's target is never looked up as a trace name
  /// again. Two trace series landing on one name: an exact name beats an
  /// alias (from its first appearance on), otherwise the first to appear
  /// keeps the name; the loser's key, or a malformed one, gives nullopt
  /// (docs/language.md, alias).
  /// A key that would give its series name more than max_label_sets label
  /// sets (EngineOptions) is refused too (nullopt, counted in
  /// label_limit_drops) and not remembered.
  std::optional<SeriesId> intern_series(std::string_view key);
  /// A series by its rule-side key (aliases already applied): derived tensor
  /// stats and restored state. nullopt if the key is malformed. Not bounded
  /// by max_label_sets: intern_tensor checks its derived series first, and
  /// a restored state holds what the saving engine held.
  std::optional<SeriesId> intern_rule_series(std::string_view key);
  /// The id of tensor series `key`, interning it (and the derived series of
  /// every stat some rule reads); nullopt if the key is malformed, or
  /// (`bounded`) if it would give its tensor name, or the name of a derived
  /// series it creates, more than max_label_sets label sets (counted in
  /// label_limit_drops, not remembered). Restoring a saved state is not
  /// bounded: it holds what the saving engine held.
  std::optional<TensorId> intern_tensor(std::string_view key, bool bounded = true);
  /// The id of a mode name, interning it.
  std::uint16_t intern_mode(std::string_view mode);

  /// The canonical key of series `id`.
  [[nodiscard]] std::string key(SeriesId id) const {
    return format_series_key(series[id].name, *labelsets[series[id].labels]);
  }

  // The store's contents, read by the executor, explain and engine_state.
  std::vector<std::unique_ptr<Labels>> labelsets;  // id -> labels (stable addresses)
  std::vector<std::string> modes{"train", "eval"};
  std::vector<std::int64_t> last_step_by_mode{INT64_MIN, INT64_MIN};
  std::vector<Series> series;
  std::vector<TensorSeries> tensors;
  std::vector<std::vector<SeriesId>> members;  // per plan selector, by label id
  /// Per plan selector: the observation number of its members' newest
  /// sample (the engine stamps it at ingest), so whether a selector has a
  /// new sample is one comparison, not a scan of its label sets.
  std::vector<std::uint64_t> selector_stamp;
  /// Per plan selector: its members that got a sample at observation
  /// selector_stamp (in arrival order), so the executor updates only their
  /// elements: a new label set costs O(1), not a pass over all it holds.
  std::vector<std::vector<SeriesId>> selector_fresh;
  std::optional<SeriesId> epoch_series;        // `epoch`, the epoch clock
  std::uint64_t label_limit_drops = 0;         // keys refused by max_label_sets

 private:
  SeriesId add_series(std::string key, std::string name, Labels&& labels);
  /// Whether a new label set of series `name` is within max_label_sets.
  [[nodiscard]] bool room_for(std::string_view name) const;
  /// Whether `name` is a trace name some alias renames or an alias's target:
  /// only then can two trace series land on one series (owners_).
  [[nodiscard]] bool alias_involved(std::string_view name) const;

  /// Key -> id, looked up by string_view without building a string.
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view k) const { return std::hash<std::string_view>{}(k); }
  };
  using KeyMap = std::unordered_map<std::string, std::uint32_t, KeyHash, std::equal_to<>>;

  Program program_;
  const Plan* plan_;
  std::size_t max_label_sets_;  // per series name; 0: unbounded
  /// Label sets per series name (rule side), for max_label_sets_.
  std::unordered_map<std::string, std::size_t, KeyHash, std::equal_to<>> label_sets_per_name_;
  /// Tensor series per tensor name, for max_label_sets_.
  std::unordered_map<std::string, std::size_t> tensors_per_name_;
  std::vector<std::string> derived_;  // intern_tensor's scratch
  /// Label set -> id, keyed by the label sets in `labelsets` (stable addresses).
  struct LabelsHash {
    std::size_t operator()(const Labels* l) const;
  };
  struct LabelsEq {
    bool operator()(const Labels* a, const Labels* b) const { return *a == *b; }
  };
  std::unordered_map<const Labels*, std::uint32_t, LabelsHash, LabelsEq> labelset_ids_;
  KeyMap series_ids_;  // rule-side keys
  /// Trace keys as hosts and readers spell them -> the series read (nullopt:
  /// malformed, or lost its name to another trace series).
  std::unordered_map<std::string, std::optional<SeriesId>, KeyHash, std::equal_to<>> trace_ids_;
  struct TraceOwner {
    std::string key;     // the trace series (canonical trace key) read into a series
    bool exact = false;  // read under its own name, not through an alias
    std::vector<std::string> raw_keys;  // its spellings in trace_ids_
  };
  std::unordered_map<SeriesId, TraceOwner> owners_;  // per series: which trace series feeds it
  KeyMap tensor_ids_;
};

}  // namespace vigil::interp
