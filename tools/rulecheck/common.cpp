// Shared output and replay for the rulecheck subcommands.
//
// Owns: what the subcommands share. Must not touch: any one subcommand's output format.
#include "tools/rulecheck/common.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace rulecheck {

namespace {
thread_local std::string* err_capture = nullptr;
}  // namespace

void print_err(std::string_view text) {
  if (err_capture != nullptr) err_capture->append(text);
  else std::fwrite(text.data(), 1, text.size(), stderr);
}

ErrCapture::ErrCapture(std::string& into) : previous_(err_capture) { err_capture = &into; }
ErrCapture::~ErrCapture() { err_capture = previous_; }

// Compiles and prints every diagnostic (warnings included) to stderr.
std::optional<vigil::Program> compile(const std::vector<std::string>& paths,
                                      const vigil::CompileOptions& options, bool strict) {
  vigil::CompileResult result = vigil::compile_files(paths, options);
  std::size_t promoted = 0;
  if (strict) {
    // -Werror style: the warning is reported as what it now is, an error,
    // with a mark saying why, so the output and the exit status agree.
    for (auto& d : result.diagnostics) {
      if (d.level != vigil::DiagLevel::warning) continue;
      d.level = vigil::DiagLevel::error;
      d.message += " [--strict]";
      ++promoted;
    }
  }
  print_err(result.format_diagnostics());
  if (promoted > 0)
    print_err(fmt::format("rulecheck: {} warning{} treated as error{} (--strict)\n", promoted,
                          promoted == 1 ? "" : "s", promoted == 1 ? "" : "s"));
  if (!result.ok() || promoted > 0) return std::nullopt;
  return std::move(*result.program);
}

std::optional<vigil::Program> compile_with(const std::vector<std::string>& rules,
                                           const std::vector<std::string>& params,
                                           const std::vector<std::string>& aliases,
                                           const std::vector<std::string>& import_paths) {
  vigil::CompileOptions options;
  if (!parse_params(params, options.params)) return std::nullopt;
  if (!parse_aliases(aliases, options.aliases)) return std::nullopt;
  options.import_paths = import_paths;
  return compile(rules, options);
}

// `--param k=v` values; false (and a message) on a malformed one.
bool parse_params(const std::vector<std::string>& raw, std::map<std::string, vigil::Value>& out) {
  for (const auto& item : raw) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      print_err(fmt::format("rulecheck: --param expects KEY=VALUE, got '{}'\n", item));
      return false;
    }
    out[item.substr(0, eq)] = vigil::parse_value(std::string_view(item).substr(eq + 1));
  }
  return true;
}

bool parse_finite(std::string_view text, double& out) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty() &&
         std::isfinite(out);
}

bool parse_byte_size(std::string_view text, std::uint64_t& out) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end == text.data()) return false;
  std::string_view suffix(end, static_cast<std::size_t>(text.data() + text.size() - end));
  int shift = 0;
  if (!suffix.empty()) {
    const char c = static_cast<char>(suffix[0] | 0x20);
    shift = c == 'k' ? 10 : c == 'm' ? 20 : c == 'g' ? 30 : -1;
    suffix.remove_prefix(1);
    if (shift < 0 || !(suffix.empty() || suffix == "iB" || suffix == "B")) return false;
  }
  if (v > (std::numeric_limits<std::uint64_t>::max() >> shift)) return false;
  out = v << shift;
  return true;
}

std::string escape_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      out += fmt::format("\\u{:04x}", c);
    } else if (c == 0xC2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[++i]));  // C1 control
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool parse_aliases(const std::vector<std::string>& raw,
                   std::vector<std::pair<std::string, std::string>>& out) {
  std::map<std::string, std::string> seen;  // OLD -> NEW
  for (const auto& item : raw) {
    const auto eq = item.find('=');
    // Both sides are bare series names: labels are kept, never renamed.
    const bool ok = eq != std::string::npos && eq > 0 && eq + 1 < item.size() &&
                    item.find_first_of("{}") == std::string::npos;
    if (!ok) {
      print_err(fmt::format("rulecheck: --alias expects NEW=OLD (two series names), got '{}'\n",
                            item));
      return false;
    }
    std::string name = item.substr(0, eq), old_name = item.substr(eq + 1);
    if (auto [it, added] = seen.emplace(old_name, name); !added) {
      // Reading one trace series under two names is not a thing aliases do;
      // a later flag silently winning would hide a typo.
      print_err(fmt::format("rulecheck: --alias {}={}: series '{}' is already read as '{}' "
                            "(--alias {}={})\n",
                            name, old_name, old_name, it->second, it->second, old_name));
      return false;
    }
    out.emplace_back(std::move(old_name), std::move(name));
  }
  return true;
}

namespace {

// Non-finite numbers as the trace format spells them (JSON has no NaN).
nlohmann::ordered_json json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace

void print_firing_text(const vigil::Firing& f, const vigil::Engine& engine, bool explain,
                       std::string& out) {
  const std::size_t start = out.size();
  out += fmt::format("step {} [{}] {} ({})", f.step, f.mode, f.rule_name(),
                     vigil::to_string(f.severity));
  if (f.labels != nullptr && !f.labels->empty()) out += " " + vigil::format_series_key("", *f.labels);
  if (f.value) out += fmt::format(" value={}", *f.value);
  if (f.actions != nullptr && !f.actions->empty()) {
    out += f.escalation > 0 ? fmt::format(" -> escalation {}:", f.escalation) : std::string(" ->");
    for (std::size_t i = 0; i < f.actions->size(); ++i)
      out += (i == 0 ? " " : ", ") + (*f.actions)[i].name;
  }
  out += '\n';
  // Labels, modes and values come from the trace: nothing in them may reach
  // the terminal as a control sequence.
  const std::string line =
      escape_controls(std::string_view(out).substr(start, out.size() - start - 1));
  out.resize(start);
  out += line;
  out += '\n';
  if (explain) {
    // Indented under its firing so the firing lines stay scannable.
    const std::string explanation = engine.explain(f);
    std::string_view text = explanation;
    while (!text.empty()) {
      const auto nl = text.find('\n');
      const auto line = text.substr(0, nl);
      // The engine may already indent its account; don't double it.
      if (!line.starts_with(' ') && !line.starts_with('\t')) out += "    ";
      out += escape_controls(line);
      out += '\n';
      if (nl == std::string_view::npos) break;
      text.remove_prefix(nl + 1);
    }
  }
}

void print_firing_json(const vigil::Firing& f, const std::string& trace, std::string& out) {
  nlohmann::ordered_json j;
  j["rule"] = f.rule_name();
  j["step"] = f.step;
  j["mode"] = std::string(f.mode);
  j["time"] = std::isfinite(f.time) ? nlohmann::ordered_json(f.time) : nullptr;
  j["severity"] = std::string(vigil::to_string(f.severity));
  auto& labels = j["labels"] = nlohmann::ordered_json::object();
  if (f.labels != nullptr)
    for (const auto& [k, v] : *f.labels) labels[k] = v;
  j["value"] = f.value ? json_number(*f.value) : nullptr;
  auto& actions = j["actions"] = nlohmann::ordered_json::array();
  if (f.actions != nullptr)
    for (const auto& a : *f.actions) actions.push_back(a.name);
  j["pending_since"] = f.pending_since;
  j["trace"] = trace;
  // Bytes that are not UTF-8 (a label from a binary trace) become U+FFFD
  // rather than an exception: the firing is still printed.
  out += j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  out += '\n';
}

// Warns (as diagnostics at the rule text) about series the rules read that
// the trace never contains: usually a naming mismatch between logger and rules.
namespace {
// The name written around `range` when it is joined to neighbours by '/'
// without spaces (`train/loss`, `eval/acc/top1`): the text a user meant as
// one series name. Otherwise the range's own text.
std::string slash_joined(const std::string& text, vigil::SourceRange range) {
  auto word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/';
  };
  std::size_t b = std::min<std::size_t>(range.begin, text.size());
  std::size_t e = std::min<std::size_t>(std::max(range.end, range.begin), text.size());
  while (b > 0 && word(text[b - 1])) --b;
  while (e < text.size() && word(text[e])) ++e;
  // Trim slashes at the ends (`x /y` is not a name).
  while (b < e && text[b] == '/') ++b;
  while (e > b && text[e - 1] == '/') --e;
  return text.substr(b, e - b);
}
}  // namespace

void warn_missing_series(const vigil::Program& program, const std::string& trace,
                         const std::unordered_set<std::string>& names_seen,
                         const std::unordered_set<std::string>* modes_seen) {
  const std::vector<std::string> candidates(names_seen.begin(), names_seen.end());
  std::unordered_set<std::string> warned;  // one warning per series name, at its first use
  std::vector<vigil::Diagnostic> warnings;
  const auto& sources = program.sources();
  for (const auto& use : program.series_uses()) {
    if (names_seen.contains(use.name) || !warned.insert(use.name).second) continue;
    vigil::Diagnostic d;
    d.level = vigil::DiagLevel::warning;
    d.code = "missing-series";
    d.message = fmt::format("series '{}' never appears in trace '{}'", use.name, trace);
    d.suggestion = vigil::closest_match(use.name, candidates);
    // `train/loss` without backticks is `train` divided by `loss`: when the
    // joined name is a series of the trace, or every part is missing too,
    // suggest the backticked name (once, not once per part).
    if (const auto joined = slash_joined(sources[use.file].text, use.range);
        joined.find('/') != std::string::npos && joined != use.name) {
      bool parts_missing = true;  // and every part a name (`loss/2` divides)
      for (std::size_t at = 0; at <= joined.size();) {
        const auto slash = std::min(joined.find('/', at), joined.size());
        const auto part = joined.substr(at, slash - at);
        parts_missing &= !part.empty() && !std::isdigit(static_cast<unsigned char>(part[0])) &&
                         !names_seen.contains(part);
        at = slash + 1;
      }
      if (names_seen.contains(joined) || parts_missing) {
        for (std::size_t at = 0; at <= joined.size();) {
          const auto slash = std::min(joined.find('/', at), joined.size());
          warned.insert(joined.substr(at, slash - at));
          at = slash + 1;
        }
        d.message = fmt::format(
            "series '{}' never appears in trace '{}'; '{}' divides series, a name with '/' is "
            "written in backticks",
            use.name, trace, joined);
        d.suggestion = "`" + joined + "`";
      }
    }
    // `for 2 epochs` reads the epoch series without naming it: say why.
    const auto& text = sources[use.file].text;
    if (use.name == "epoch" && use.range.end <= text.size() &&
        text.compare(use.range.begin, use.range.end - use.range.begin, "epoch") != 0)
      d.message = fmt::format(
          "'{}' counts epochs by the series 'epoch', which never appears in trace '{}': this "
          "clause never completes (log an 'epoch' series, or use steps)",
          escape_controls(text.substr(use.range.begin, use.range.end - use.range.begin)), trace);
    d.file = use.file;
    d.range = use.range;
    warnings.push_back(std::move(d));
  }
  if (modes_seen) {
    std::vector<std::string> modes(modes_seen->begin(), modes_seen->end());
    std::sort(modes.begin(), modes.end());
    std::string listed;
    for (const auto& m : modes) listed += (listed.empty() ? "" : ", ") + escape_controls(m);
    std::unordered_set<std::string> warned_modes;  // one warning per mode
    for (const auto& rule : program.rules()) {
      if (rule.mode.empty() || modes_seen->contains(rule.mode) ||
          !warned_modes.insert(rule.mode).second)
        continue;
      vigil::Diagnostic d;
      d.level = vigil::DiagLevel::warning;
      d.code = "missing-mode";
      d.message = fmt::format(
          "mode '{}' never appears in trace '{}' (its modes: {}): rules 'in {}' never run",
          escape_controls(rule.mode), trace, listed.empty() ? "none" : listed,
          escape_controls(rule.mode));
      d.file = rule.mode_file;
      d.range = rule.mode_range;
      d.suggestion = vigil::closest_match(rule.mode, modes);
      warnings.push_back(std::move(d));
    }
  }
  print_err(vigil::format_diagnostics(warnings, program.sources()));
}

namespace {
// rulecheck records actions, never executes them.
vigil::EngineOptions recording(std::size_t max_label_sets) {
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  options.max_label_sets = max_label_sets;
  return options;
}
}  // namespace

namespace {
// Bounds on what a replay remembers of series no rule reads (common.hpp).
constexpr std::size_t max_unread_keys = 65'536;
constexpr std::size_t max_remembered_key_bytes = 1024;
constexpr std::size_t max_other_names = 10'000;
constexpr std::size_t max_other_modes = 1'000;
constexpr std::size_t max_malformed_warnings = 100;
}  // namespace

Replay::Replay(const vigil::Program& program, std::string trace, std::size_t max_label_sets)
    : trace_(std::move(trace)),
      engine_(program, recording(max_label_sets)),
      max_label_sets_(max_label_sets) {
  const auto& sources = program.sources();
  for (const auto& use : program.series_uses()) {
    reads_.insert(use.name);
    watched_.insert(use.name);
    if (use.file < sources.size())
      if (auto joined = slash_joined(sources[use.file].text, use.range);
          joined.find('/') != std::string::npos)
        watched_.insert(std::move(joined));
  }
  for (const auto& rule : program.rules())
    if (!rule.mode.empty()) watched_modes_.insert(rule.mode);
}

Replay::Key Replay::classify(const std::string& key) {
  const auto& program = engine_.program();
  const std::string_view trace_name(key.data(), std::min(key.find('{'), key.size()));
  const std::string_view rule_name = program.resolve_alias(trace_name);
  if (!rule_name.empty() && (watched_.contains(rule_name) || names_seen_.size() < max_other_names))
    names_seen_.emplace(rule_name);  // as the rules name it
  if (!reads_.contains(rule_name)) return Key::unread;  // not parsed: no rule reads it
  std::string name;
  vigil::Labels labels;
  if (!vigil::parse_series_key(key, name, labels)) {
    if (malformed_warnings_ < max_malformed_warnings)
      print_err(fmt::format("{}: warning: malformed series key '{}' ignored\n", trace_,
                            escape_controls(key)));
    else if (malformed_warnings_ == max_malformed_warnings)
      print_err(fmt::format("{}: warning: more malformed series keys are ignored without a "
                            "warning\n", trace_));
    ++malformed_warnings_;
    return Key::malformed;
  }
  // Two trace series can only land on one name through an alias: only then
  // are the (possibly huge) keys worth copying to track owners.
  const auto& aliases = program.aliases();
  const bool alias_involved = std::any_of(aliases.begin(), aliases.end(), [&](const auto& a) {
    return a.first == name || a.second == rule_name;
  });
  if (alias_involved)
    note_owner(vigil::format_series_key(rule_name, labels), vigil::format_series_key(name, labels),
               rule_name == name);
  return Key::read;
}

void Replay::note_mode(const std::string& mode) {
  if (!modes_seen_.contains(mode) &&
      (modes_seen_.size() < max_other_modes || watched_modes_.contains(mode)))
    modes_seen_.insert(mode);
}

bool Replay::take(std::string_view key, Seen& seen, double value) {
  // Asked again after a new key: the engine moves a name from an alias to
  // the trace's own series of that name when the latter first appears.
  if (seen.generation != generation_) {
    const auto drops = engine_.stats().label_limit_drops;
    seen.id = engine_.series(key);
    seen.generation = generation_;
    if (!seen.id && engine_.stats().label_limit_drops != drops) {
      // One warning per trace, at the first refused label set.
      if (!label_limit_warned_) {
        label_limit_warned_ = true;
        print_err(fmt::format(
            "{}: warning: series '{}' has more than {} label sets; samples of new label sets "
            "are ignored (raise the limit with --max-label-sets N, 0 for none)\n",
            trace_, escape_controls(key.substr(0, key.find('{'))), max_label_sets_));
      }
      return false;  // not remembered: a flood of new label sets must not grow memory
    }
  }
  const auto id = seen.id;
  if (!id) return true;  // lost a name collision (warned about in note_owner)
  if (*id >= slot_.size()) slot_.resize(*id + 1, {0, 0});
  auto& [stamp, index] = slot_[*id];
  if (stamp == stamp_) {
    samples_[index].value = value;  // the new owner's sample, in the observation of the handover
    return true;
  }
  stamp = stamp_;
  index = samples_.size();
  samples_.push_back({*id, value});
  return true;
}

void Replay::intern(const vigil::Observation& obs) {
  samples_.clear();
  ++stamp_;
  note_mode(obs.mode);
  for (const auto& [key, value] : obs.values) {
    auto it = ids_.find(key);
    if (it == ids_.end()) {
      const Key kind = classify(key);
      if (kind == Key::read) {
        it = ids_.emplace(key, Seen{kind, 0, std::nullopt}).first;
        ++generation_;
      } else {
        if (unread_keys_ < max_unread_keys && key.size() <= max_remembered_key_bytes) {
          ids_.emplace(key, Seen{kind, 0, std::nullopt});
          ++unread_keys_;
        }
        continue;
      }
    }
    Seen& seen = it->second;
    if (seen.kind != Key::read) continue;
    if (!take(key, seen, value)) ids_.erase(it);
  }
}

void Replay::intern(const vigil::TraceReader& reader, const vigil::KeyedObservation& obs) {
  samples_.clear();
  ++stamp_;
  if (obs.mode >= mode_noted_.size()) mode_noted_.resize(reader.mode_count(), false);
  if (!mode_noted_[obs.mode]) {  // whether it goes in depends only on the mode: once
    note_mode(std::string(reader.mode_name(obs.mode)));
    mode_noted_[obs.mode] = true;
  }
  // The same steps as by name, with the reader's id in place of the hash
  // lookup. Every key is classified once: the reader already holds its name
  // (within TraceOptions::max_keys), so the bound ids_ needs on unread keys
  // does not apply; a read key whose label set was refused is asked again.
  for (const auto& [key_id, value] : obs.values) {
    if (key_id >= by_id_.size()) by_id_.resize(reader.key_count());
    SeenById& entry = by_id_[key_id];
    if (!entry.known) {
      const Key kind = classify(std::string(reader.key_name(key_id)));
      entry.seen = Seen{kind, 0, std::nullopt};
      entry.known = true;
      if (kind == Key::read) ++generation_;
    }
    if (entry.seen.kind != Key::read) continue;
    if (!take(reader.key_name(key_id), entry.seen, value)) entry.known = false;
  }
}

void Replay::note_owner(const std::string& rule_key, const std::string& trace_key, bool exact) {
  auto [it, added] = owners_.try_emplace(rule_key, trace_key, exact);
  if (added || it->second.first == trace_key) return;
  // The engine's rule (docs/language.md, alias): an exact name beats an
  // alias, otherwise the first to appear keeps the name.
  const std::string previous = it->second.first;
  const bool previous_exact = it->second.second;
  const bool takes_over = exact && !previous_exact;
  if (takes_over) it->second = {trace_key, true};
  // Once per series name, not per label set.
  if (!warned_.insert(rule_key.substr(0, rule_key.find('{'))).second) return;
  const std::string& winner = takes_over ? trace_key : previous;
  const std::string& loser = takes_over ? previous : trace_key;
  print_err(fmt::format(
      "{}: warning: trace series '{}' and '{}' are both read as '{}': '{}' is used, '{}' ignored "
      "({})\n",
      trace_, escape_controls(previous), escape_controls(trace_key), escape_controls(rule_key),
      escape_controls(winner), escape_controls(loser),
      exact || previous_exact ? "a series' own name beats an alias" : "the first to appear is used"));
}

void Replay::note(const vigil::Observation& obs) { intern(obs); }
void Replay::note(const vigil::TraceReader& reader, const vigil::KeyedObservation& obs) {
  intern(reader, obs);
}

std::span<const vigil::Firing> Replay::feed(const vigil::Observation& obs) {
  intern(obs);
  last_.fed = true;
  last_.step = obs.step;
  last_.mode = obs.mode;  // reuses the string's capacity
  last_.time = obs.time;
  return engine_.observe(obs.step, samples_, {.mode = obs.mode, .time = obs.time});
}

std::span<const vigil::Firing> Replay::feed(const vigil::TraceReader& reader,
                                            const vigil::KeyedObservation& obs) {
  intern(reader, obs);
  last_.fed = true;
  last_.step = obs.step;
  const std::string_view mode = reader.mode_name(obs.mode);
  last_.mode.assign(mode);
  last_.time = obs.time;
  return engine_.observe(obs.step, samples_, {.mode = mode, .time = obs.time});
}

std::span<const vigil::Firing> Replay::tick(double time) {
  if (!last_.fed) return {};
  return engine_.observe(last_.step, {}, {.mode = last_.mode, .time = time});
}

}  // namespace rulecheck
