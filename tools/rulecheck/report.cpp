// `rulecheck report`: replays each trace (in parallel, each through its own
// engine), keeps the samples of the series the rules read and the firings,
// and writes one self-contained HTML page (report_html.hpp, docs/report.md).
#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"
#include "tools/rulecheck/report_html.hpp"
#include "tools/rulecheck/runs.hpp"

namespace rulecheck {
namespace {

struct SeriesSamples {
  std::string name;
  vigil::Labels labels;
  std::vector<std::int64_t> steps;
  std::vector<double> values;
  bool eval = false, train = false;
};

// What one trace contributed, collected by a worker.
struct Collected {
  ReportModel::Trace trace;
  std::map<std::string, SeriesSamples> series;  // by canonical key
  std::vector<ReportModel::Firing> firings;     // `trace` field left 0
  std::string diagnostics;
  bool error = false;
};

void collect(const vigil::Program& program, const std::set<std::string>& read_names,
             const RunInput& run, const ReportOptions& opts, Collected& out) {
  ErrCapture capture(out.diagnostics);
  out.trace.path = run.trace;
  if (!run.error.empty()) {
    out.trace.error = run.error;
    print_err(fmt::format("{}: {}\n", run.trace, run.error));
    out.error = true;
    return;
  }
  vigil::TraceError open_error;
  auto reader = vigil::open_trace(run.trace, open_error, {.step_column = opts.step_column});
  if (!reader) {
    out.trace.error = open_error.format();
    print_err(open_error.format() + "\n");
    out.error = true;
    return;
  }
  const auto& rules = program.rules();
  Replay replay(program, run.trace);
  // By the reader's key id: its series (null: not read by any rule, or
  // malformed), decided when the id first appears. Read keyed, like `run`:
  // no name is copied or hashed per sample.
  struct ById {
    bool known = false;
    SeriesSamples* series = nullptr;
  };
  std::vector<ById> by_id;
  vigil::KeyedObservation obs;
  while (reader->next_keyed(obs)) {
    ++out.trace.observations;
    out.trace.first = out.trace.first ? std::min(*out.trace.first, obs.step) : obs.step;
    out.trace.last = out.trace.last ? std::max(*out.trace.last, obs.step) : obs.step;
    const bool eval = reader->mode_name(obs.mode) == "eval";
    for (const auto& [key_id, value] : obs.values) {
      if (key_id >= by_id.size()) by_id.resize(reader->key_count());
      ById& entry = by_id[key_id];
      if (!entry.known) {
        entry.known = true;
        std::string name;
        vigil::Labels labels;
        if (vigil::parse_series_key(reader->key_name(key_id), name, labels)) {
          name = std::string(program.resolve_alias(name));
          if (read_names.count(name)) {
            entry.series = &out.series[vigil::format_series_key(name, labels)];
            entry.series->name = name;
            entry.series->labels = std::move(labels);
          }
        }
      }
      if (auto* s = entry.series) {
        s->steps.push_back(obs.step);
        s->values.push_back(value);
        (eval ? s->eval : s->train) = true;
      }
    }
    for (const auto& f : replay.feed(*reader, obs)) {
      ReportModel::Firing r;
      r.rule = static_cast<std::size_t>(f.rule - rules.data());
      r.step = f.step;
      r.mode = std::string(f.mode);
      r.severity = f.severity;
      if (f.labels != nullptr) r.labels = *f.labels;
      r.value = f.value;
      r.pending_since = f.pending_since;
      if (f.actions != nullptr)
        for (const auto& a : *f.actions) r.actions += (r.actions.empty() ? "" : ", ") + a.name;
      out.firings.push_back(std::move(r));
    }
  }
  if (const auto& e = reader->error()) {
    out.trace.error = e->format();
    print_err(e->format() + "\n");
    out.error = true;
  }
  warn_missing_series(program, run.trace, replay.names_seen(), &replay.modes_seen());
}

// Trace names for legends and tables: the paths without the directories all
// of them share; identical ones numbered.
void name_traces(std::vector<ReportModel::Trace>& traces) {
  auto parts = [](const std::string& path) {
    std::vector<std::string> out;
    std::size_t from = 0;
    while (true) {
      const auto slash = path.find('/', from);
      out.push_back(path.substr(from, slash == std::string::npos ? std::string::npos : slash - from));
      if (slash == std::string::npos) break;
      from = slash + 1;
    }
    return out;
  };
  std::vector<std::vector<std::string>> split;
  for (const auto& t : traces) split.push_back(parts(t.path));
  std::size_t common = 0;
  if (traces.size() == 1) {
    common = split[0].size() - 1;
  } else {
    for (bool same = true; same; ++common) {
      for (const auto& s : split)
        same = same && common + 1 < s.size() && s[common] == split[0][common];
      if (!same) break;
    }
  }
  std::map<std::string, int> seen;
  for (std::size_t i = 0; i < traces.size(); ++i) {
    std::string name;
    for (std::size_t k = common; k < split[i].size(); ++k) name += (name.empty() ? "" : "/") + split[i][k];
    if (name.empty()) name = traces[i].path;
    if (const int n = ++seen[name]; n > 1) name += fmt::format(" ({})", n);
    traces[i].name = name;
  }
}

bool subset(const vigil::Labels& small, const vigil::Labels& big) {
  return std::all_of(small.begin(), small.end(), [&](const auto& kv) {
    return std::find(big.begin(), big.end(), kv) != big.end();
  });
}

}  // namespace

int run_report(const ReportOptions& opts) {
  if (!report_assets_available()) {
    print_err("rulecheck: this rulecheck was built without libjs-dygraphs, which reports are drawn "
              "with (apt-get install libjs-dygraphs, then rebuild)\n");
    return exit_error;
  }
  const auto program = compile_with(opts.rules, opts.params, opts.aliases);
  if (!program) return exit_error;

  const auto& rules = program->rules();
  std::set<std::string> read_names;
  for (const auto& rule : rules) read_names.insert(rule.reads.begin(), rule.reads.end());

  bool dirs_expanded = false;
  const auto runs = expand_runs(opts.traces, dirs_expanded);
  std::vector<Collected> collected(runs.size());
  bool error = false;
  ordered_parallel(
      runs.size(), worker_count(runs.size(), opts.jobs),
      [&](std::size_t i) { collect(*program, read_names, runs[i], opts, collected[i]); },
      [&](std::size_t i) {
        print_err(collected[i].diagnostics);
        error = error || collected[i].error;
      });

  ReportModel model;
  model.rule_files = opts.rules;
  model.points = opts.points;
  for (const auto& rule : rules) model.rules.push_back(rule.name);
  for (std::size_t t = 0; t < collected.size(); ++t) {
    model.traces.push_back(collected[t].trace);
    for (auto& f : collected[t].firings) {
      f.trace = t;
      model.firings.push_back(std::move(f));
    }
    collected[t].firings.clear();
  }
  name_traces(model.traces);

  // Series keys by name, and each key's own firings (exact labels), which
  // rank the label sets when a name has more than opts.top of them.
  std::map<std::string, std::set<std::string>> keys_of;  // name -> keys
  std::map<std::string, vigil::Labels> labels_of;
  for (const auto& c : collected)
    for (const auto& [key, s] : c.series) {
      keys_of[s.name].insert(key);
      labels_of.emplace(key, s.labels);
    }
  std::map<std::string, std::size_t> own_firings;
  for (const auto& f : model.firings)
    for (const auto& name : rules[f.rule].reads) {
      const auto key = vigil::format_series_key(name, f.labels);
      if (labels_of.count(key)) ++own_firings[key];
    }

  std::map<std::string, std::vector<std::size_t>> charts_of;  // name -> chart indices
  for (const auto& [name, keys] : keys_of) {
    std::vector<std::string> ranked(keys.begin(), keys.end());
    std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
      return own_firings[a] > own_firings[b];
    });
    const std::size_t shown = std::min(ranked.size(), std::max<std::size_t>(opts.top, 1));
    if (shown < ranked.size()) {
      ReportModel::Folded folded{name, shown, {}};
      for (std::size_t k = shown; k < ranked.size(); ++k)
        folded.hidden.emplace_back(ranked[k], own_firings[ranked[k]]);
      model.folded.push_back(std::move(folded));
    }
    for (std::size_t k = 0; k < shown; ++k) {
      ReportModel::Chart chart;
      chart.key = ranked[k];
      chart.name = name;
      chart.labels = labels_of[ranked[k]];
      bool eval = false, train = false;
      for (std::size_t t = 0; t < collected.size(); ++t) {
        const auto it = collected[t].series.find(ranked[k]);
        if (it == collected[t].series.end()) continue;
        eval = eval || it->second.eval;
        train = train || it->second.train;
        chart.lines.push_back({t, std::move(it->second.steps), std::move(it->second.values)});
      }
      chart.eval_only = eval && !train;
      charts_of[name].push_back(model.charts.size());
      model.charts.push_back(std::move(chart));
    }
  }
  collected.clear();

  // Each firing on the drawn charts of the series its rule reads whose labels
  // include the firing's: at most (series read) x opts.top marks per firing.
  for (std::size_t i = 0; i < model.firings.size(); ++i) {
    const auto& f = model.firings[i];
    for (const auto& name : rules[f.rule].reads) {
      const auto it = charts_of.find(name);
      if (it == charts_of.end()) continue;
      for (auto c : it->second)
        if (subset(f.labels, model.charts[c].labels)) model.charts[c].marks.push_back(i);
    }
  }

  const std::string html = render_report(model);
  std::ofstream out(opts.output, std::ios::binary);
  if (!(out << html) || !out.flush()) {
    print_err(fmt::format("rulecheck: cannot write '{}'\n", opts.output));
    return exit_error;
  }
  const auto firings = model.firings.size();
  print_err(fmt::format("wrote {}: {} firing{}, {} chart{}, {} trace{}\n", opts.output, firings,
                        firings == 1 ? "" : "s", model.charts.size(),
                        model.charts.size() == 1 ? "" : "s", model.traces.size(),
                        model.traces.size() == 1 ? "" : "s"));
  if (error) return exit_error;
  return firings > 0 ? exit_fired : exit_ok;
}

}  // namespace rulecheck
