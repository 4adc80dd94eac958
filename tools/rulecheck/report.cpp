// `rulecheck report`: one self-contained HTML page per run — a table of the
// firings, then a chart per series the rules read, with every firing of a
// rule that reads it marked at its step. No scripts, no external assets:
// inline SVG, so the file opens anywhere and can be attached to a ticket.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <set>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"

namespace rulecheck {
namespace {

/// One point per observation that sampled the series.
struct Point {
  std::int64_t step;
  double value;
};

struct SeriesData {
  std::vector<Point> points;
  bool eval = false;                // every sample came from eval observations
  bool train = false;
};

struct Mark {
  std::int64_t step;
  std::string rule;
  vigil::Severity severity;
  std::string text;  // tooltip
};

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string_view severity_color(vigil::Severity s) {
  switch (s) {
    case vigil::Severity::info: return "#4a90d9";
    case vigil::Severity::warning: return "#e0a000";
    case vigil::Severity::error: return "#e06000";
    case vigil::Severity::critical: return "#c00020";
  }
  return "#888";
}

std::string number(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : fmt::format("{}", v); }

/// A line chart of one series: at most `width` columns, each drawn as the
/// min..max of the samples that fall in it (so spikes survive downsampling),
/// non-finite samples as red ticks on the axis, firing marks as vertical lines.
std::string chart(const std::string& key, const SeriesData& data, const std::vector<Mark>& marks) {
  constexpr int width = 900, height = 180, left = 70, right = 10, top = 10, bottom = 24;
  const int plot_w = width - left - right, plot_h = height - top - bottom;
  const auto& pts = data.points;
  std::int64_t s0 = pts.front().step, s1 = pts.back().step;
  for (const auto& p : pts) s0 = std::min(s0, p.step), s1 = std::max(s1, p.step);
  for (const auto& m : marks) s0 = std::min(s0, m.step), s1 = std::max(s1, m.step);
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& p : pts)
    if (std::isfinite(p.value)) lo = std::min(lo, p.value), hi = std::max(hi, p.value);
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (lo == hi) lo -= 0.5, hi += 0.5;
  const double span = s1 > s0 ? static_cast<double>(s1 - s0) : 1.0;
  auto x_of = [&](std::int64_t step) {
    return left + static_cast<double>(step - s0) / span * plot_w;
  };
  auto y_of = [&](double v) { return top + (hi - v) / (hi - lo) * plot_h; };

  // Column buckets: min/max of the finite samples in each pixel column.
  std::vector<double> cmin(plot_w + 1, INFINITY), cmax(plot_w + 1, -INFINITY);
  std::vector<bool> bad(plot_w + 1, false);
  for (const auto& p : pts) {
    const auto c = static_cast<std::size_t>(std::clamp(x_of(p.step) - left, 0.0, double(plot_w)));
    if (std::isfinite(p.value)) {
      cmin[c] = std::min(cmin[c], p.value);
      cmax[c] = std::max(cmax[c], p.value);
    } else {
      bad[c] = true;
    }
  }
  // Columns without samples are bridged (sparse series such as eval losses);
  // a NaN or Inf sample breaks the line.
  std::string path, dots;
  bool pen = false;
  const bool sparse = pts.size() < static_cast<std::size_t>(plot_w / 4);
  for (int c = 0; c <= plot_w; ++c) {
    if (bad[c]) pen = false;
    if (!std::isfinite(cmin[c])) continue;
    path += fmt::format("{}{} {:.1f} L{} {:.1f} ", pen ? "L" : "M", left + c, y_of(cmax[c]),
                        left + c, y_of(cmin[c]));
    if (sparse)
      dots += fmt::format("<circle cx=\"{}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"#225\"/>\n", left + c,
                          y_of(cmax[c]));
    pen = true;
  }

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      width, height, width, height, escape(key));
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" "
                     "stroke=\"#ddd\"/>\n",
                     left, top, plot_w, plot_h);
  for (double v : {lo, (lo + hi) / 2, hi})
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\" "
                       "dominant-baseline=\"middle\">{}</text>\n",
                       left - 4, y_of(v), number(v));
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">step {}</text>\n", left,
                     height - 6, s0);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">step {}</text>\n",
                     width - right, height - 6, s1);
  for (const auto& m : marks)
    svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\" "
                       "stroke-width=\"1.5\" opacity=\"0.8\"><title>{4}</title></line>\n",
                       x_of(m.step), top, top + plot_h, severity_color(m.severity),
                       escape(m.text));
  svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"#225\" stroke-width=\"1\"/>\n", path);
  svg += dots;
  for (int c = 0; c <= plot_w; ++c)
    if (bad[c])
      svg += fmt::format("<line x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" stroke=\"red\" "
                         "stroke-width=\"2\"><title>NaN or Inf</title></line>\n",
                         left + c, top + plot_h - 6, top + plot_h);
  svg += "</svg>\n";
  return svg;
}

}  // namespace

int run_report(const ReportOptions& opts) {
  const auto program = compile_with(opts.rules, opts.params, opts.aliases);
  if (!program) return exit_error;

  // A firing is marked on the charts of the series its rule reads.
  std::map<std::string, std::set<std::string>> readers;  // series name -> rule names
  for (const auto& rule : program->rules())
    for (const auto& name : rule.reads) readers[name].insert(rule.name);

  std::string firings_html;
  std::map<std::string, SeriesData> series;  // series key -> points
  std::vector<Mark> marks;
  std::size_t firings = 0;
  bool error = false;
  for (const auto& trace : opts.traces) {
    vigil::TraceError open_error;
    auto reader = vigil::open_trace(trace, open_error, {.step_column = opts.step_column});
    if (!reader) {
      print_err(open_error.format() + "\n");
      error = true;
      continue;
    }
    Replay replay(*program, trace);
    vigil::Observation obs;
    while (reader->next(obs)) {
      for (const auto& [key, value] : obs.values) {
        std::string name;
        vigil::Labels labels;
        if (!vigil::parse_series_key(key, name, labels)) continue;
        name = std::string(program->resolve_alias(name));
        if (!readers.count(name)) continue;
        auto& data = series[vigil::format_series_key(name, labels)];
        data.points.push_back({obs.step, value});
        (obs.mode == "eval" ? data.eval : data.train) = true;
      }
      for (const auto& f : replay.feed(obs)) {
        ++firings;
        std::string labels = vigil::format_series_key("", *f.labels);
        std::string actions;
        for (const auto& a : *f.actions) actions += (actions.empty() ? "" : ", ") + a.name;
        const std::string value = f.value ? number(*f.value) : "";
        marks.push_back({f.step, f.rule_name(), f.severity,
                         fmt::format("{} at step {} {} {}", f.rule_name(), f.step, labels, value)});
        firings_html += fmt::format(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td style=\"color:{}\">{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(trace), f.step, escape(std::string(f.mode)), severity_color(f.severity),
            vigil::to_string(f.severity), escape(f.rule_name()), escape(labels), value,
            escape(actions));
      }
    }
    if (const auto& e = reader->error()) {
      print_err(e->format() + "\n");
      error = true;
    }
  }

  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>rulecheck report</title>\n<style>body{{font-family:sans-serif;margin:24px;}}"
      "table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ddd;padding:3px 8px;"
      "text-align:left}}h2{{font-size:15px;margin:22px 0 4px}}</style></head><body>\n"
      "<h1>rulecheck report</h1>\n<p>Rules: {}. Traces: {}. {} firing{}.</p>\n",
      escape(fmt::format("{}", fmt::join(opts.rules, ", "))),
      escape(fmt::format("{}", fmt::join(opts.traces, ", "))), firings, firings == 1 ? "" : "s");
  if (firings > 0)
    html += "<table><tr><th>trace</th><th>step</th><th>mode</th><th>severity</th><th>rule</th>"
            "<th>labels</th><th>value</th><th>actions</th></tr>\n" +
            firings_html + "</table>\n";
  for (const auto& [key, data] : series) {
    std::string name;
    vigil::Labels labels;
    vigil::parse_series_key(key, name, labels);
    std::vector<Mark> mine;
    const auto& rs = readers[name];
    for (const auto& m : marks)
      if (rs.count(m.rule)) mine.push_back(m);
    html += fmt::format("<h2>{}{}</h2>\n", escape(key),
                        data.eval && !data.train ? " <small>(eval)</small>" : "");
    html += chart(key, data, mine);
  }
  if (series.empty()) html += "<p>None of the series the rules read appears in the traces.</p>\n";
  html += "</body></html>\n";

  std::ofstream out(opts.output, std::ios::binary);
  if (!(out << html)) {
    print_err(fmt::format("rulecheck: cannot write '{}'\n", opts.output));
    return exit_error;
  }
  print_err(fmt::format("wrote {}: {} firing{}, {} chart{}\n", opts.output, firings,
                        firings == 1 ? "" : "s", series.size(), series.size() == 1 ? "" : "s"));
  if (error) return exit_error;
  return firings > 0 ? exit_fired : exit_ok;
}

}  // namespace rulecheck
