// Pieces shared by the rulecheck subcommands: exit codes, diagnostics and
// firing output, and the replay of observations into an engine.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/program.hpp"
#include "vigil/trace.hpp"

namespace rulecheck {

inline constexpr int exit_ok = 0;
inline constexpr int exit_fired = 1;
inline constexpr int exit_error = 2;

/// Writes to stderr, or to the buffer of this thread's innermost ErrCapture.
void print_err(std::string_view text);

/// While alive, print_err on this thread appends to `into` instead of
/// writing to stderr: runs evaluated in parallel keep their diagnostics apart
/// and the caller prints them in a deterministic order.
class ErrCapture {
 public:
  explicit ErrCapture(std::string& into);
  ~ErrCapture();
  ErrCapture(const ErrCapture&) = delete;
  ErrCapture& operator=(const ErrCapture&) = delete;

 private:
  std::string* previous_;
};

/// Compiles and prints every diagnostic (warnings included) to stderr.
/// `strict` (`rulecheck check --strict`, like promtool's --lint-fatal): every
/// warning is printed as an error (its code tagged "[--strict]") and makes
/// the compilation fail; notes stay notes.
std::optional<vigil::Program> compile(const std::vector<std::string>& paths,
                                      const vigil::CompileOptions& options, bool strict = false);

/// The opening run, report and watch share: parses `--param k=v` and
/// `--alias NEW=OLD` values, then compiles `rules` with them (and the
/// `--import-path` roots, CompileOptions::import_paths), printing every
/// diagnostic. nullopt (after a message) if any of it fails.
std::optional<vigil::Program> compile_with(const std::vector<std::string>& rules,
                                           const std::vector<std::string>& params,
                                           const std::vector<std::string>& aliases,
                                           const std::vector<std::string>& import_paths = {});

/// `--param k=v` values; false (and a message) on a malformed one.
bool parse_params(const std::vector<std::string>& raw, std::map<std::string, vigil::Value>& out);

/// A finite number (std::from_chars; "nan", "inf" and trailing text refused).
bool parse_finite(std::string_view text, double& out);
/// Bytes with an optional K, M, G (or KiB, MiB, GiB) binary suffix: "64M".
bool parse_byte_size(std::string_view text, std::uint64_t& out);

/// `text` with bytes a terminal would act on (C0 controls other than tab,
/// DEL, and the C1 controls U+0080..U+009F) written as \u00XX, so that a
/// label from a trace cannot move the cursor or retitle the window. Also
/// used for --exec variables, where a NUL would cut the value short.
std::string escape_controls(std::string_view text);

/// `--alias NEW=OLD` values as CompileOptions::aliases entries (OLD, NEW):
/// trace series OLD are read as NEW. False (and a message) on a malformed
/// one, or a second --alias for the same OLD (it would silently override).
bool parse_aliases(const std::vector<std::string>& raw,
                   std::vector<std::pair<std::string, std::string>>& out);

/// One firing as a text line (plus the engine's explanation, indented).
void print_firing_text(const vigil::Firing& f, const vigil::Engine& engine, bool explain,
                       std::string& out);
/// One firing as a SPEC §5 JSON object on one line.
void print_firing_json(const vigil::Firing& f, const std::string& trace, std::string& out);

/// Warns (as diagnostics at the rule text) about series the rules read that
/// the trace never contained: usually a naming mismatch between logger and
/// rules (`for 2 epochs` reads `epoch`). With `modes_seen`, also about each
/// rule's `in MODE` whose mode the trace never had (the rule never runs).
void warn_missing_series(const vigil::Program& program, const std::string& trace,
                         const std::unordered_set<std::string>& names_seen,
                         const std::unordered_set<std::string>* modes_seen = nullptr);

/// Feeds trace observations into a recording engine: interns each distinct
/// key a rule reads once, remembers which series names appeared, and warns
/// once per malformed key.
///
/// Keys of series no rule reads never reach the engine: at most 65,536 of
/// them (each up to 1 KiB) are remembered, the others are recognised again
/// by their name at each occurrence. So a trace of millions of distinct
/// names costs time linear in its size and bounded memory (issue 11 §3).
class Replay {
 public:
  /// `max_label_sets`: EngineOptions::max_label_sets; past it, one warning.
  Replay(const vigil::Program& program, std::string trace,
         std::size_t max_label_sets = vigil::default_max_label_sets);

  /// Observes `obs` (its samples) and returns the firings.
  std::span<const vigil::Firing> feed(const vigil::Observation& obs);
  /// Interns `obs`'s keys (so their names count as seen) without observing.
  void note(const vigil::Observation& obs);
  /// The same for an observation `reader` handed out with next_keyed: its
  /// series are found by the reader's ids (a vector index), not by hashing
  /// their names. One Replay follows one reader (or only Observations).
  std::span<const vigil::Firing> feed(const vigil::TraceReader& reader,
                                      const vigil::KeyedObservation& obs);
  void note(const vigil::TraceReader& reader, const vigil::KeyedObservation& obs);
  /// A clock tick: an observation without samples at `time`, with the step
  /// and mode of the last one fed (nothing before the first). Rules reading
  /// `age(...)` see time pass; no other rule is evaluated.
  std::span<const vigil::Firing> tick(double time);
  /// The time of the last observation fed, NaN if it had none.
  [[nodiscard]] double last_time() const { return last_.time; }

  [[nodiscard]] vigil::Engine& engine() { return engine_; }
  /// The series names (as rules name them) that appeared: every name a rule
  /// reads or spells joined by '/' (`train/loss`), and the first 10,000
  /// others (the candidates of "did you mean" suggestions).
  [[nodiscard]] const std::unordered_set<std::string>& names_seen() const { return names_seen_; }
  /// The modes that appeared: every mode a rule runs `in`, and up to 1,000 others.
  [[nodiscard]] const std::unordered_set<std::string>& modes_seen() const { return modes_seen_; }
  [[nodiscard]] const std::string& trace() const { return trace_; }

 private:
  /// Strings looked up as views, without building a string.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using NameSet = std::unordered_set<std::string, Hash, std::equal_to<>>;
  enum class Key : std::uint8_t { read, unread, malformed };

  /// What a trace key is to the rules; remembers its name (and warns if it is
  /// read but malformed).
  Key classify(const std::string& key);
  void intern(const vigil::Observation& obs);
  void intern(const vigil::TraceReader& reader, const vigil::KeyedObservation& obs);
  /// Tracks which trace series is read as each rule-side series key and
  /// warns (once per pair) when two land on one name.
  void note_owner(const std::string& rule_key, const std::string& trace_key, bool exact);

  std::string trace_;
  vigil::Engine engine_;
  NameSet reads_;          // series names rules read (rule side)
  NameSet watched_;        // those, and names written joined by '/' (`train/loss`)
  NameSet watched_modes_;  // modes rules run `in`
  /// A trace key seen, and for a read key its engine id as of `generation`.
  struct Seen {
    Key kind;
    std::uint64_t generation = 0;  // 0: not asked yet
    std::optional<vigil::SeriesId> id;
  };
  std::unordered_map<std::string, Seen> ids_;  // trace keys seen (bounded, see above)
  /// The same by the reader's KeyId (keyed feeds): classified at the key's
  /// first sample; `known` false until then, and again after a read key's
  /// label set was refused (as ids_ forgets it).
  struct SeenById {
    bool known = false;
    Seen seen{Key::unread, 0, std::nullopt};
  };
  std::vector<SeenById> by_id_;
  std::vector<bool> mode_noted_;  // by the reader's ModeId
  /// One sample of a read key whose Seen is `seen` (its engine id refreshed
  /// if the generation moved); false if the key must be forgotten (its label
  /// set was refused).
  bool take(std::string_view key, Seen& seen, double value);
  void note_mode(const std::string& mode);

  /// Bumped whenever a key new to the engine is interned: only then can the
  /// engine hand an existing key's name to another series (an exact name
  /// taking it over from an alias), so ids asked since stay valid.
  std::uint64_t generation_ = 1;
  std::size_t unread_keys_ = 0;               // of them, not read or malformed
  std::size_t malformed_warnings_ = 0;
  // rule-side key -> (trace key read as it, read under its own name)
  std::unordered_map<std::string, std::pair<std::string, bool>> owners_;
  // Per series id: the observation (stamp) and index of its sample in
  // samples_, so one observation never gives one series two samples.
  std::vector<std::pair<std::uint64_t, std::size_t>> slot_;
  std::uint64_t stamp_ = 0;
  std::unordered_set<std::string> warned_;  // series names whose collision was reported
  std::unordered_set<std::string> names_seen_;
  std::unordered_set<std::string> modes_seen_;
  std::vector<vigil::Sample> samples_;
  std::size_t max_label_sets_;
  bool label_limit_warned_ = false;
  struct Last {
    bool fed = false;
    std::int64_t step = 0;
    std::string mode;
    double time = std::numeric_limits<double>::quiet_NaN();
  } last_;
};

}  // namespace rulecheck
