// `rulecheck test`: rule unit tests in `.rtest` files (docs/rtest.md).
//
// Each test builds observations from its series (per step: the train
// observation, then one per other mode), replays them through a recording
// engine, and compares the firings with the test's expectations. Results go
// to stdout (`PASS name` / `FAIL name` with expected vs got and the rule's
// timeline, then `N passed, M failed`); diagnostics about the files go to
// stderr. Exit status 0 all passed, 1 a test failed, 2 a file error.
//
// Owns: evaluating .rtest tests. Must not touch: parsing them (test_format.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"
#include "tools/rulecheck/test_format.hpp"

namespace rulecheck {
namespace {

using rtest::Expectation;
using rtest::TestCase;

// One firing as the comparison needs it (the engine's Firing is only valid
// until the next observe).
struct Got {
  std::string rule;  // display name (see RuleNames)
  std::int64_t step = 0;
  std::string mode;
  vigil::Labels labels;
  std::optional<double> value;
  std::vector<std::string> actions;
  vigil::Severity severity = vigil::Severity::warning;
  std::int64_t pending_since = 0;
  std::size_t observation = 0;  // index into the test's observations
  std::string text;             // firing line plus the engine's explanation
};

// A rule's condition was evaluated for a label set at an observation: the
// evidence that an `expect no fire` saw the rule judge its inputs.
struct Evaluated {
  std::string rule;  // display name
  vigil::Labels labels;
  std::string mode;
  std::int64_t step = 0;
};

// Rule names as tests write them. Anonymous rules are named `FILE:LINE` after
// the path the compiler was given; a test names them after the path written
// in the .rtest file (`spike.rules:3`), or, for inline rules, after the
// .rtest file's own name (`basic.rtest:12`).
struct RuleNames {
  std::vector<std::pair<std::string, std::string>> prefixes;  // compiled -> written

  [[nodiscard]] std::string display(const std::string& name) const {
    for (const auto& [compiled, written] : prefixes)
      if (name.size() > compiled.size() && name.starts_with(compiled) && name[compiled.size()] == ':')
        return written + name.substr(compiled.size());
    return name;
  }
};

std::string format_labels(const vigil::Labels& labels) {
  return vigil::format_series_key("", labels).empty() ? "{}" : vigil::format_series_key("", labels);
}

std::string format_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
  return fmt::format("{}", v);
}

std::string format_value(const std::optional<double>& v) { return v ? format_number(*v) : "none"; }

std::string join_steps(const std::vector<std::int64_t>& steps) {
  if (steps.empty()) return "nothing";
  std::string out;
  for (std::size_t i = 0; i < steps.size(); ++i) out += (i ? ", " : "") + std::to_string(steps[i]);
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

// Values compare exactly, except for rounding in the last bits (a test
// writes `0.3`, the engine computes 0.1 + 0.2); NaN matches NaN.
bool same_value(const std::optional<double>& want, const std::optional<double>& got) {
  if (!want || !got) return want.has_value() == got.has_value();
  if (std::isnan(*want) || std::isnan(*got)) return std::isnan(*want) && std::isnan(*got);
  if (*want == *got) return true;
  return std::fabs(*want - *got) <= 1e-12 * std::max(std::fabs(*want), std::fabs(*got));
}

// Expectations about one rule, label set and mode: together they give the
// exact list of steps at which those firings happen.
struct Group {
  std::string rule;
  std::optional<vigil::Labels> labels;
  std::optional<std::string> mode;
  std::vector<const Expectation*> lines;

  template <class Event>  // Got or Evaluated
  [[nodiscard]] bool matches(const Event& g) const {
    return g.rule == rule && (!labels || *labels == g.labels) && (!mode || *mode == g.mode);
  }
  [[nodiscard]] std::string describe() const {
    std::string out = rule;
    if (labels) out += " labels " + format_labels(*labels);
    if (mode) out += " in " + *mode;
    return out;
  }
};

struct Observations {
  std::vector<vigil::Observation> list;
};

Observations build_observations(const TestCase& t) {
  std::size_t columns = 0;
  std::vector<std::string> modes{"train"};
  for (const auto& s : t.series) {
    columns = std::max(columns, s.values.size());
    if (std::find(modes.begin(), modes.end(), s.mode) == modes.end()) modes.push_back(s.mode);
  }
  Observations out;
  for (std::size_t i = 0; i < columns; ++i) {
    const std::int64_t step = t.steps ? (*t.steps)[i]
                                      : t.step_start + static_cast<std::int64_t>(i) * t.step_stride;
    const double time = i < t.times.size() && t.times[i] ? *t.times[i]
                                                         : std::numeric_limits<double>::quiet_NaN();
    const std::size_t before = out.list.size();
    for (const auto& mode : modes) {
      vigil::Observation o;
      o.step = step;
      o.mode = mode;
      o.time = time;
      for (const auto& s : t.series)
        if (s.mode == mode && i < s.values.size() && s.values[i]) o.values.emplace_back(s.key, *s.values[i]);
      if (!o.values.empty()) out.list.push_back(std::move(o));
    }
    // A column with a time and no sample at all is a clock tick (age(...)).
    if (out.list.size() == before && !std::isnan(time) && before > 0) {
      vigil::Observation tick;
      tick.step = step;
      tick.mode = out.list.back().mode;
      tick.time = time;
      out.list.push_back(std::move(tick));
    }
  }
  return out;
}

// The names of the series a rule reads (written inside the rule's text);
// empty when that cannot be told (a `use` of a template written elsewhere).
std::set<std::string> series_read_by(const vigil::Program& program, const vigil::RuleInfo& rule) {
  std::set<std::string> out;
  for (const auto& use : program.series_uses())
    if (use.file == rule.file && use.range.begin >= rule.range.begin && use.range.end <= rule.range.end)
      out.insert(use.name);
  return out;
}

/// Everything one test needs from its compiled rules.
struct Compiled {
  std::optional<vigil::Program> program;
  RuleNames names;
};

class TestRunner {
 public:
  explicit TestRunner(const TestOptions& opts) : opts_(opts) {}

  int run() {
    for (const auto& path : opts_.files) run_file(path);
    out_ += fmt::format("{} passed, {} failed\n", passed_, failed_);
    flush();
    if (file_error_) return exit_error;
    return failed_ > 0 ? exit_fired : exit_ok;
  }

 private:
  void flush() {
    std::fwrite(out_.data(), 1, out_.size(), stdout);
    std::fflush(stdout);
    out_.clear();
  }

  void run_file(const std::string& path) {
    // Test files come with shared rule libraries: read like rule files
    // (regular files only, size cap, never the content in the message).
    vigil::SourceSet sources;
    std::string reason;
    const auto loaded = sources.load(path, reason);
    if (!loaded) {
      print_err(fmt::format("rulecheck: cannot read test file '{}': {}\n", escape_controls(path), reason));
      file_error_ = true;
      return;
    }
    const auto file = *loaded;
    rtest::TestFile tf;
    std::vector<vigil::Diagnostic> diagnostics;
    const bool ok = rtest::parse_test_file(sources, file, tf, diagnostics);
    print_err(vigil::format_diagnostics(diagnostics, sources));
    if (!ok) {
      file_error_ = true;
      return;
    }
    if (opts_.files.size() > 1) out_ += fmt::format("== {}\n", path);
    for (const auto& t : tf.tests) {
      run_case(tf, t, sources);
      flush();
    }
  }

  // Compiles the test's rules with its params; the same rules and params are
  // compiled (and their warnings printed) once per file.
  const Compiled& compile_for(const rtest::TestFile& tf, const TestCase& t) {
    const auto& s = t.settings;
    std::string key = tf.path + '\n' + s.inline_rules.value_or("") + '\n';
    for (const auto& f : s.rule_files) key += f + '\n';
    for (const auto& [k, v] : s.params) key += k + '=' + vigil::to_string(v) + '\n';
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;

    vigil::CompileOptions options;
    options.params = s.params;
    Compiled c;
    vigil::CompileResult result =
        s.inline_rules ? vigil::compile_string(*s.inline_rules, tf.path, options)
                       : vigil::compile_files(s.rule_files, options);
    print_err(result.format_diagnostics());
    if (result.ok()) c.program = std::move(*result.program);
    for (std::size_t i = 0; i < s.rule_files.size(); ++i)
      c.names.prefixes.emplace_back(s.rule_files[i], s.rule_files_as_written[i]);
    if (s.inline_rules)
      c.names.prefixes.emplace_back(tf.path, std::filesystem::path(tf.path).filename().string());
    return cache_.emplace(std::move(key), std::move(c)).first->second;
  }

  void run_case(const rtest::TestFile& tf, const TestCase& t, const vigil::SourceSet& sources) {
    const Compiled& compiled = compile_for(tf, t);
    if (!compiled.program) {
      file_error_ = true;
      out_ += fmt::format("ERROR {} (rules do not compile)\n", t.name);
      return;
    }
    const vigil::Program& program = *compiled.program;

    // Unknown rule names are mistakes in the test, not failures of the rules.
    std::vector<std::string> rule_names;
    for (const auto& r : program.rules()) rule_names.push_back(compiled.names.display(r.name));
    std::vector<vigil::Diagnostic> unknown;
    for (const auto& e : t.expects) {
      if (std::find(rule_names.begin(), rule_names.end(), e.rule) != rule_names.end()) continue;
      vigil::Diagnostic d;
      d.code = "rtest";
      d.message = fmt::format("no rule named '{}' in the rules of test \"{}\"", e.rule, t.name);
      d.range = e.rule_range;
      d.suggestion = vigil::closest_match(e.rule, rule_names);
      unknown.push_back(std::move(d));
    }
    if (!unknown.empty()) {
      print_err(vigil::format_diagnostics(unknown, sources));
      file_error_ = true;
      out_ += fmt::format("ERROR {} (unknown rule)\n", t.name);
      return;
    }

    const Observations obs = build_observations(t);
    Replay replay(program, tf.path);
    std::vector<Got> got;
    std::vector<Evaluated> evaluated;
    // Per rule, the evaluation count of each label set so far.
    std::vector<std::map<const vigil::Labels*, std::uint64_t>> eval_counts(program.rules().size());
    for (std::size_t i = 0; i < obs.list.size(); ++i) {
      const auto& fired = replay.feed(obs.list[i]);
      for (std::size_t r = 0; r < program.rules().size(); ++r)
        for (const auto& [labels, count] : replay.engine().evaluations(r)) {
          auto& seen = eval_counts[r][labels];
          if (count == seen) continue;
          seen = count;
          evaluated.push_back({compiled.names.display(program.rules()[r].name), *labels,
                               obs.list[i].mode, obs.list[i].step});
        }
      for (const auto& f : fired) {
        Got g;
        g.rule = compiled.names.display(f.rule_name());
        g.step = f.step;
        g.mode = std::string(f.mode);
        if (f.labels != nullptr) g.labels = *f.labels;
        g.value = f.value;
        if (f.actions != nullptr)
          for (const auto& a : *f.actions) g.actions.push_back(a.name);
        g.severity = f.severity;
        g.pending_since = f.pending_since;
        g.observation = i;
        print_firing_text(f, replay.engine(), true, g.text);
        got.push_back(std::move(g));
      }
    }
    if (const auto skipped = replay.engine().stats().out_of_order; skipped > 0)
      print_err(fmt::format("{}:{}: warning: test \"{}\": {} observation{} ignored: step went "
                            "backwards within a mode\n",
                            tf.path, t.line, t.name, skipped, skipped == 1 ? "" : "s"));

    std::string report;
    check(t, program, compiled, obs, got, evaluated, report);
    if (report.empty()) {
      ++passed_;
      out_ += fmt::format("PASS {}\n", t.name);
    } else {
      ++failed_;
      out_ += fmt::format("FAIL {} ({}:{})\n", t.name, tf.path, t.line);
      out_ += report;
    }
  }

  // Appends one paragraph per failing group (nothing when the test passes).
  void check(const TestCase& t, const vigil::Program& program, const Compiled& compiled,
             const Observations& obs, const std::vector<Got>& got,
             const std::vector<Evaluated>& evaluated, std::string& report) {
    std::vector<Group> groups;
    for (const auto& e : t.expects) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
        return g.rule == e.rule && g.labels == e.labels && g.mode == e.mode;
      });
      if (it == groups.end()) it = groups.insert(groups.end(), {e.rule, e.labels, e.mode, {}});
      it->lines.push_back(&e);
    }

    std::vector<bool> covered(got.size(), false);
    for (const auto& g : groups) {
      std::vector<std::size_t> matched;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (g.matches(got[i])) {
          matched.push_back(i);
          covered[i] = true;
        }
      check_group(t, program, compiled, obs, got, g, matched, report);
      check_evaluated(g, evaluated, report);
    }
    if (t.settings.strict || opts_.strict) {
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (covered[i]) continue;
        report += fmt::format("  unexpected firing (strict: every firing must be expected):\n    {}",
                              indent(got[i].text, "    "));
      }
    }
  }

  // A group without firing lines says something only if the rule judged its
  // inputs: `expect no fire` needs an evaluation, `expect no eval` forbids one.
  static void check_evaluated(const Group& g, const std::vector<Evaluated>& evaluated,
                              std::string& report) {
    bool any_fire = false, no_eval = false, no_fire = false;
    for (const auto* e : g.lines) {
      any_fire = any_fire || e->fire;
      no_eval = no_eval || e->no_eval;
      no_fire = no_fire || (!e->fire && !e->no_eval);
    }
    if (any_fire && no_eval) {
      report += fmt::format("  {}: expects firings and no evaluation at once\n", g.describe());
      return;
    }
    if (any_fire) return;
    std::vector<std::int64_t> steps;
    for (const auto& ev : evaluated)
      if (g.matches(ev) && (steps.empty() || steps.back() != ev.step)) steps.push_back(ev.step);
    if (no_eval && !steps.empty())
      report += fmt::format("  {}: expected no evaluation; evaluated at {}\n", g.describe(),
                            join_steps(steps));
    else if (no_fire && !no_eval && steps.empty())
      report += fmt::format(
          "  {}: expected no firing, but the rule was never evaluated (its inputs never had a "
          "value{}): the expectation proves nothing; feed what it reads, or write "
          "`expect no eval` if that is the point\n",
          g.describe(), g.labels || g.mode ? " for these labels / this mode" : "");
  }

  static std::string indent(const std::string& text, std::string_view prefix) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
      out += text[i];
      if (text[i] == '\n' && i + 1 < text.size()) out += prefix;
    }
    return out;
  }

  void check_group(const TestCase& t, const vigil::Program& program, const Compiled& compiled,
                   const Observations& obs, const std::vector<Got>& got, const Group& g,
                   const std::vector<std::size_t>& matched, std::string& report) {
    // Expected (step, line) pairs, in step order; a `no fire` line adds none.
    std::vector<std::pair<std::int64_t, const Expectation*>> want;
    bool any_fire = false;
    for (const auto* e : g.lines) {
      any_fire = any_fire || e->fire;
      for (auto s : e->steps) want.emplace_back(s, e);
    }
    std::stable_sort(want.begin(), want.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::size_t> have = matched;
    std::stable_sort(have.begin(), have.end(),
                     [&](std::size_t a, std::size_t b) { return got[a].step < got[b].step; });

    // Pair equal steps (multiset match); the rest is missing / unexpected.
    std::vector<std::int64_t> missing;
    std::vector<std::size_t> unexpected;
    std::vector<std::string> wrong;  // attribute mismatches at paired steps
    std::set<std::size_t> marked;     // observations the timeline must show
    std::size_t w = 0, h = 0;
    while (w < want.size() || h < have.size()) {
      if (h == have.size() || (w < want.size() && want[w].first < got[have[h]].step)) {
        missing.push_back(want[w++].first);
      } else if (w == want.size() || got[have[h]].step < want[w].first) {
        unexpected.push_back(have[h++]);
      } else {
        const Got& f = got[have[h++]];
        const Expectation& e = *want[w++].second;
        const std::size_t before = wrong.size();
        compare_attributes(e, f, wrong);
        if (wrong.size() != before) marked.insert(f.observation);
      }
    }
    if (missing.empty() && unexpected.empty() && wrong.empty()) return;

    std::vector<std::int64_t> want_steps, got_steps;
    for (const auto& [s, e] : want) want_steps.push_back(s);
    for (auto i : have) got_steps.push_back(got[i].step);
    if (any_fire)
      report += fmt::format("  {}: expected fire at {}; got {}\n", g.describe(), join_steps(want_steps),
                            got_steps.empty() ? "no firing" : "fire at " + join_steps(got_steps));
    else
      report += fmt::format("  {}: expected no firing; got fire at {}\n", g.describe(),
                            join_steps(got_steps));
    for (const auto& m : wrong) report += "    " + m + "\n";
    for (auto s : missing) report += fmt::format("    step {}: expected to fire, did not\n", s);
    for (auto i : unexpected) {
      report += fmt::format("    step {}: fired, not expected:\n      {}", got[i].step,
                            indent(got[i].text, "      "));
      marked.insert(got[i].observation);
    }
    for (std::size_t i = 0; i < obs.list.size(); ++i)
      if (std::find(missing.begin(), missing.end(), obs.list[i].step) != missing.end()) marked.insert(i);
    timeline(t, program, compiled, obs, got, g, want_steps, marked, report);
  }

  static void compare_attributes(const Expectation& e, const Got& f, std::vector<std::string>& wrong) {
    if (e.actions && *e.actions != f.actions)
      wrong.push_back(fmt::format("step {}: expected actions {}, got {}", f.step, join(*e.actions),
                                  join(f.actions)));
    if (e.severity && *e.severity != f.severity)
      wrong.push_back(fmt::format("step {}: expected severity {}, got {}", f.step,
                                  vigil::to_string(*e.severity), vigil::to_string(f.severity)));
    if (e.value && !same_value(*e.value, f.value))
      wrong.push_back(fmt::format("step {}: expected value {}, got {}", f.step, format_value(*e.value),
                                  format_value(f.value)));
    if (e.pending_since && *e.pending_since != f.pending_since)
      wrong.push_back(fmt::format("step {}: expected pending_since {}, got {}", f.step,
                                  *e.pending_since, f.pending_since));
  }

  // The rule's timeline around the mismatches: per observation, the values
  // of the series the rule reads, whether a firing was expected there, and
  // whether (and since when pending) it fired.
  void timeline(const TestCase& t, const vigil::Program& program, const Compiled& compiled,
                const Observations& obs, const std::vector<Got>& got, const Group& g,
                const std::vector<std::int64_t>& want_steps, const std::set<std::size_t>& marked,
                std::string& report) {
    std::set<std::string> names;
    for (const auto& r : program.rules())
      if (compiled.names.display(r.name) == g.rule) names = series_read_by(program, r);
    std::vector<const rtest::SeriesSpec*> shown;
    for (const auto& s : t.series)
      if (names.contains(s.name)) shown.push_back(&s);
    if (shown.empty())
      for (const auto& s : t.series) shown.push_back(&s);

    // Small tests show every observation; longer ones the neighbourhood
    // (two observations either side) of each mismatch.
    std::set<std::size_t> rows;
    for (auto m : marked)
      for (std::size_t i = m >= 2 ? m - 2 : 0; i <= m + 2 && i < obs.list.size(); ++i) rows.insert(i);
    if (obs.list.size() <= 16)
      for (std::size_t i = 0; i < obs.list.size(); ++i) rows.insert(i);

    report += "    timeline (inputs; E = expected to fire, F = fired):\n";
    std::size_t previous = 0;
    bool first = true;
    for (auto i : rows) {
      if (!first && i > previous + 1) report += "      ...\n";
      first = false;
      previous = i;
      const auto& o = obs.list[i];
      std::string inputs;
      for (const auto* s : shown) {
        if (s->mode != o.mode) continue;
        const auto it = std::find_if(o.values.begin(), o.values.end(),
                                     [&](const auto& kv) { return kv.first == s->key; });
        inputs += fmt::format(" {}={}", s->key, it == o.values.end() ? "_" : format_number(it->second));
      }
      const bool expected = (!g.mode || *g.mode == o.mode) &&
                            std::find(want_steps.begin(), want_steps.end(), o.step) != want_steps.end();
      std::string fired;
      for (const auto& f : got)
        if (f.observation == i && g.matches(f))
          fired += fmt::format(" F{} (pending since {}{})", f.labels.empty() ? "" : " " + format_labels(f.labels),
                               f.pending_since, f.value ? ", value " + format_number(*f.value) : "");
      std::string time = std::isnan(o.time) ? "" : fmt::format(" t={}", format_number(o.time));
      report += fmt::format("      step {} {}{}:{}{}{}\n", o.step, o.mode, time,
                            inputs.empty() ? " (none of its inputs)" : inputs, expected ? "  E" : "", fired);
    }
  }

  const TestOptions& opts_;
  std::string out_;
  std::map<std::string, Compiled> cache_;
  std::uint64_t passed_ = 0;
  std::uint64_t failed_ = 0;
  bool file_error_ = false;
};

}  // namespace

int run_test(const TestOptions& opts) { return TestRunner(opts).run(); }

}  // namespace rulecheck
