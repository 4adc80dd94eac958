// Shared output and replay for the rulecheck subcommands.
//
// Owns: what the subcommands share. Must not touch: any one subcommand's output format.
#include "tools/rulecheck/common.hpp"

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
                                      const vigil::CompileOptions& options) {
  vigil::CompileResult result = vigil::compile_files(paths, options);
  print_err(result.format_diagnostics());
  if (!result.ok()) return std::nullopt;
  return std::move(*result.program);
}

std::optional<vigil::Program> compile_with(const std::vector<std::string>& rules,
                                           const std::vector<std::string>& params,
                                           const std::vector<std::string>& aliases) {
  vigil::CompileOptions options;
  if (!parse_params(params, options.params)) return std::nullopt;
  if (!parse_aliases(aliases, options.aliases)) return std::nullopt;
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

bool parse_aliases(const std::vector<std::string>& raw,
                   std::vector<std::pair<std::string, std::string>>& out) {
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
  if (explain) {
    // Indented under its firing so the firing lines stay scannable.
    const std::string explanation = engine.explain(f);
    std::string_view text = explanation;
    while (!text.empty()) {
      const auto nl = text.find('\n');
      const auto line = text.substr(0, nl);
      // The engine may already indent its account; don't double it.
      if (!line.starts_with(' ') && !line.starts_with('\t')) out += "    ";
      out += line;
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
  out += j.dump();
  out += '\n';
}

// Warns (as diagnostics at the rule text) about series the rules read that
// the trace never contains: usually a naming mismatch between logger and rules.
void warn_missing_series(const vigil::Program& program, const std::string& trace,
                         const std::unordered_set<std::string>& names_seen) {
  const std::vector<std::string> candidates(names_seen.begin(), names_seen.end());
  std::unordered_set<std::string> warned;  // one warning per series name, at its first use
  std::vector<vigil::Diagnostic> warnings;
  for (const auto& use : program.series_uses()) {
    if (names_seen.contains(use.name) || !warned.insert(use.name).second) continue;
    vigil::Diagnostic d;
    d.level = vigil::DiagLevel::warning;
    d.code = "missing-series";
    d.message = fmt::format("series '{}' never appears in trace '{}'", use.name, trace);
    d.file = use.file;
    d.range = use.range;
    d.suggestion = vigil::closest_match(use.name, candidates);
    warnings.push_back(std::move(d));
  }
  print_err(vigil::format_diagnostics(warnings, program.sources()));
}

namespace {
// rulecheck records actions, never executes them.
vigil::EngineOptions recording() {
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  return options;
}
}  // namespace

Replay::Replay(const vigil::Program& program, std::string trace)
    : trace_(std::move(trace)),
      engine_(program, recording()) {}

void Replay::intern(const vigil::Observation& obs) {
  samples_.clear();
  for (const auto& [key, value] : obs.values) {
    auto it = ids_.find(key);
    if (it == ids_.end()) {
      std::string name;
      vigil::Labels labels;
      std::optional<vigil::SeriesId> id;
      if (vigil::parse_series_key(key, name, labels)) {
        names_seen_.emplace(engine_.program().resolve_alias(name));  // as the rules name it
        id = engine_.series(key);
      }
      if (!id) print_err(fmt::format("{}: warning: malformed series key '{}' ignored\n", trace_, key));
      it = ids_.emplace(key, id).first;
    }
    if (it->second) samples_.push_back({*it->second, value});
  }
}

void Replay::note(const vigil::Observation& obs) { intern(obs); }

std::span<const vigil::Firing> Replay::feed(const vigil::Observation& obs) {
  intern(obs);
  last_.fed = true;
  last_.step = obs.step;
  last_.mode = obs.mode;  // reuses the string's capacity
  last_.time = obs.time;
  return engine_.observe(obs.step, samples_, {.mode = obs.mode, .time = obs.time});
}

std::span<const vigil::Firing> Replay::tick(double time) {
  if (!last_.fed) return {};
  return engine_.observe(last_.step, {}, {.mode = last_.mode, .time = time});
}

}  // namespace rulecheck
