// compile_* entry points: text -> checked IR -> plan -> Program.
//
// Owns: the compile_* entry points and Program accessors. Must not touch: checking or
// planning logic (it sequences them) or engine state.
#include <algorithm>
#include <charconv>
#include <limits>
#include <cmath>
#include <fmt/format.h>

#include "interp/program_impl.hpp"

namespace vigil {

const std::vector<RuleInfo>& Program::rules() const { return impl_->rules; }
const std::vector<SeriesUse>& Program::series_uses() const { return impl_->series_uses; }
const SourceSet& Program::sources() const { return impl_->sources; }
const std::map<std::string, Value>& Program::params() const { return impl_->params; }
std::size_t Program::plan_size() const { return impl_->plan.nodes.size(); }
const std::vector<std::pair<std::string, std::string>>& Program::aliases() const {
  return impl_->aliases;
}
std::string_view Program::resolve_alias(std::string_view trace_name) const {
  const auto& a = impl_->aliases;
  auto it = std::lower_bound(a.begin(), a.end(), trace_name,
                             [](const auto& entry, std::string_view n) { return entry.first < n; });
  return it != a.end() && it->first == trace_name ? std::string_view(it->second) : trace_name;
}

std::string_view to_string(Severity s) {
  switch (s) {
    case Severity::info: return "info";
    case Severity::warning: return "warning";
    case Severity::error: return "error";
    case Severity::critical: return "critical";
  }
  return "warning";
}

Value parse_value(std::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  std::string_view t = text;
  bool percent = !t.empty() && t.back() == '%';
  if (percent) t.remove_suffix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc() && end == t.data() + t.size() && !t.empty())
    return percent ? v / 100 : v;
  return std::string(text);
}

std::string to_string(const Value& v) {
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return fmt::format("\"{}\"", std::get<std::string>(v));
}

const Value* Action::find(std::string_view key) const {
  for (const auto& [k, v] : args)
    if (k == key) return &v;
  return nullptr;
}
double Action::number(std::string_view key, double fallback) const {
  const Value* v = find(key);
  return v && std::holds_alternative<double>(*v) ? std::get<double>(*v) : fallback;
}
std::string Action::string(std::string_view key, std::string fallback) const {
  const Value* v = find(key);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : fallback;
}

namespace {

std::uint64_t fingerprint(const interp::Plan& plan) {
  // FNV-1a over the plan's shape: nodes, selectors, rules.
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  for (const auto& n : plan.nodes)
    mix(fmt::format("{}:{}:{}:{};", static_cast<int>(n.op), n.selector, n.inputs.size(),
                    n.fn ? n.fn->name : ""));
  for (const auto& s : plan.selectors) mix(s.selector.name);
  for (const auto& r : plan.rules) mix(r.rule.info.name);
  return h;
}

CompileResult compile_roots(std::vector<interp::RootFile> roots, const CompileOptions& options,
                            CompileResult result = {}) {
  const interp::FileLoader files(options.import_paths);
  const interp::CheckEnv env{stdlib::standard_functions(), files};
  auto checked = interp::check(roots, options, env, result.sources, result.diagnostics);
  for (const auto& d : result.diagnostics)
    if (d.level == DiagLevel::error) return result;
  auto impl = std::make_shared<detail::ProgramImpl>();
  impl->roots = std::move(roots);
  impl->options = options;
  for (const auto& r : checked.rules) impl->rules.push_back(r.info);
  impl->plan = interp::make_plan(std::move(checked.rules));
  for (std::size_t i = 0; i < impl->plan.rules.size(); ++i) {
    auto& reads = impl->rules[i].reads;
    for (auto leaf : impl->plan.rules[i].leaves)
      if (const auto sel = impl->plan.nodes[leaf].selector; sel != interp::no_node)
        reads.push_back(impl->plan.selectors[sel].selector.name);
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
  }
  impl->series_uses = std::move(checked.series_uses);
  impl->params = std::move(checked.params);
  impl->aliases = std::move(checked.aliases);
  std::sort(impl->aliases.begin(), impl->aliases.end());
  impl->fingerprint = fingerprint(impl->plan);
  impl->sources = result.sources;
  result.program.emplace(std::move(impl));
  return result;
}

}  // namespace

CompileResult compile_files(const std::vector<std::string>& paths, const CompileOptions& options) {
  std::vector<interp::RootFile> roots;
  CompileResult result;
  const interp::FileLoader files;
  for (const auto& path : paths) {
    std::string reason;
    auto text = files.read(path, reason);
    if (!text) {
      // No source text, so no file id: the diagnostic prints without an
      // empty source line and caret, and says why.
      result.diagnostics.push_back({DiagLevel::error, "io",
                                    fmt::format("cannot read rule file '{}': {}", path, reason),
                                    std::numeric_limits<std::uint32_t>::max(), {}, {}, {}});
      continue;
    }
    roots.push_back({path, std::move(*text), interp::FileLoader::dir_of(path)});
  }
  if (!result.diagnostics.empty()) return result;
  return compile_roots(std::move(roots), options, std::move(result));
}

CompileResult compile_file(const std::string& path, const CompileOptions& options) {
  return compile_files({path}, options);
}

CompileResult compile_string(std::string_view text, std::string name,
                             const CompileOptions& options) {
  return compile_roots({{std::move(name), std::string(text), "."}}, options);
}

/// Recompiles a program's sources with other param values (Engine params).
CompileResult recompile_with(const Program& program, const std::map<std::string, Value>& params) {
  CompileOptions options = program.impl().options;
  for (const auto& [k, v] : params) options.params[k] = v;
  return compile_roots(program.impl().roots, options);
}

}  // namespace vigil
