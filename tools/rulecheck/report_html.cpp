// Writes the report page (report_html.hpp). The tables are static HTML (they
// read without JavaScript); the charts are drawn by report.js from the data
// embedded as JSON.
#include "tools/rulecheck/report_html.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

namespace rulecheck {

namespace assets {
extern const std::string_view dygraph_js, dygraph_css, report_js, report_css;
}  // namespace assets

bool report_assets_available() { return !assets::dygraph_js.empty(); }

namespace {

using Json = nlohmann::json;

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string number(double v) {
  return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
}

// Non-finite numbers as the trace format spells them (JSON has no NaN).
Json json_number(double v) {
  if (std::isfinite(v)) return v;
  return number(v);
}

// JSON inside <script>: no '<' at all, so neither "</script>" nor "<!--" can
// appear (in JSON, '<' only occurs inside strings, where \u003c means the same).
std::string script_json(const Json& j) {
  const std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

std::string sev_cell(vigil::Severity s) {
  const auto name = vigil::to_string(s);
  return fmt::format("<td class=\"sev sev-{0}\">{0}</td>", name);
}

std::string steps(const std::optional<std::int64_t>& first, const std::optional<std::int64_t>& last) {
  if (!first) return "&ndash;";
  return *first == *last ? fmt::format("{}", *first) : fmt::format("{}&ndash;{}", *first, *last);
}

void summary(const ReportModel& m, std::string& html) {
  struct RuleStats {
    std::size_t firings = 0;
    vigil::Severity worst = vigil::Severity::info;
    std::optional<std::int64_t> first, last;
    std::set<std::size_t> traces;
  };
  std::vector<RuleStats> rules(m.rules.size());
  std::vector<std::size_t> per_trace(m.traces.size());
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> where;  // (trace, rule) -> firings
  for (const auto& f : m.firings) {
    auto& r = rules[f.rule];
    ++r.firings;
    r.worst = std::max(r.worst, f.severity);
    r.first = r.first ? std::min(*r.first, f.step) : f.step;
    r.last = r.last ? std::max(*r.last, f.step) : f.step;
    r.traces.insert(f.trace);
    ++per_trace[f.trace];
    ++where[{f.trace, f.rule}];
  }

  html += "<h2 id=\"summary\">Summary</h2>\n";
  std::vector<std::size_t> fired, quiet;
  for (std::size_t i = 0; i < rules.size(); ++i) (rules[i].firings ? fired : quiet).push_back(i);
  std::sort(fired.begin(), fired.end(), [&](auto a, auto b) {
    return rules[a].firings != rules[b].firings ? rules[a].firings > rules[b].firings : a < b;
  });
  if (fired.empty()) {
    html += "<p>No rule fired.</p>\n";
  } else {
    html += "<div class=\"scroll\"><table id=\"rule-summary\"><tr><th>rule</th><th>severity</th>"
            "<th>firings</th><th>first step</th><th>last step</th><th>traces</th></tr>\n";
    for (auto i : fired) {
      const auto& r = rules[i];
      html += fmt::format("<tr><td>{}</td>{}<td class=\"num\">{}</td><td class=\"num\">{}</td>"
                          "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
                          escape(m.rules[i]), sev_cell(r.worst), r.firings, *r.first, *r.last,
                          r.traces.size());
    }
    html += "</table></div>\n";
  }
  if (!quiet.empty()) {
    std::string names;
    for (auto i : quiet) names += (names.empty() ? "" : ", ") + escape(m.rules[i]);
    html += fmt::format("<p class=\"meta\">Did not fire: {}.</p>\n", names);
  }

  html += "<div class=\"scroll\"><table id=\"trace-summary\"><tr><th>trace</th><th>path</th>"
          "<th>observations</th><th>steps</th><th>firings</th><th>error</th></tr>\n";
  for (std::size_t t = 0; t < m.traces.size(); ++t) {
    const auto& tr = m.traces[t];
    html += fmt::format("<tr><td class=\"path\"><span class=\"swatch\"></span>{}</td>"
                        "<td class=\"path\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                        "<td class=\"num\">{}</td><td>{}</td></tr>\n",
                        escape(tr.name), escape(tr.path), tr.observations, steps(tr.first, tr.last),
                        per_trace[t], escape(tr.error));
  }
  html += "</table></div>\n";

  // The sweep question: which run went bad, by which rule.
  if (m.traces.size() > 1 && !fired.empty()) {
    html += "<h2>Which rules fired where</h2>\n<div class=\"scroll\"><table id=\"fired-where\"><tr>"
            "<th>trace</th>";
    for (auto i : fired) html += "<th>" + escape(m.rules[i]) + "</th>";
    html += "</tr>\n";
    for (std::size_t t = 0; t < m.traces.size(); ++t) {
      html += "<tr><td class=\"path\">" + escape(m.traces[t].name) + "</td>";
      for (auto i : fired) {
        const auto it = where.find({t, i});
        html += it == where.end() ? std::string("<td class=\"num\">&ndash;</td>")
                                  : fmt::format("<td class=\"num\">{}</td>", it->second);
      }
      html += "</tr>\n";
    }
    html += "</table></div>\n";
  }
}

void firings_table(const ReportModel& m, std::string& html) {
  html += fmt::format("<h2 id=\"firings\">Firings ({})</h2>\n", m.firings.size());
  if (m.firings.empty()) return;
  // A long list stays folded so the charts are one scroll away.
  html += fmt::format("<details{}><summary>{} firing{}</summary>\n", m.firings.size() <= 200 ? " open" : "",
                      m.firings.size(), m.firings.size() == 1 ? "" : "s");
  html += "<div class=\"scroll\"><table id=\"firing-table\"><tr><th>trace</th><th>step</th><th>mode</th>"
          "<th>severity</th><th>rule</th><th>labels</th><th>value</th><th>pending since</th>"
          "<th>actions</th></tr>\n";
  for (const auto& f : m.firings)
    html += fmt::format("<tr><td class=\"path\">{}</td><td class=\"num\">{}</td><td>{}</td>{}<td>{}</td>"
                        "<td class=\"labels\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                        "<td>{}</td></tr>\n",
                        escape(m.traces[f.trace].name), f.step, escape(f.mode), sev_cell(f.severity),
                        escape(m.rules[f.rule]), escape(vigil::format_series_key("", f.labels)),
                        f.value ? number(*f.value) : "", f.pending_since, escape(f.actions));
  html += "</table></div></details>\n";
}

Json data(const ReportModel& m) {
  Json j;
  auto& traces = j["traces"] = Json::array();
  for (const auto& t : m.traces)
    traces.push_back({{"name", t.name}, {"path", t.path}, {"observations", t.observations},
                      {"error", t.error}});
  j["rules"] = m.rules;
  auto& firings = j["firings"] = Json::array();
  for (const auto& f : m.firings)
    firings.push_back(Json::array({f.trace, f.rule, f.step, std::string(vigil::to_string(f.severity)),
                                   f.labels.empty() ? "" : vigil::format_series_key("", f.labels),
                                   f.value ? json_number(*f.value) : Json(nullptr), f.pending_since}));
  auto& charts = j["charts"] = Json::array();
  for (const auto& c : m.charts) {
    Json lines = Json::array();
    for (const auto& l : c.lines) {
      Json values = Json::array();
      for (double v : l.values) values.push_back(json_number(v));
      lines.push_back({{"trace", l.trace}, {"steps", l.steps}, {"values", std::move(values)}});
    }
    charts.push_back({{"key", c.key}, {"name", c.name}, {"eval", c.eval_only},
                      {"lines", std::move(lines)}, {"marks", c.marks}});
  }
  j["points"] = m.points;
  return j;
}

// Installed first, so errors of any later script (dygraphs included) count.
constexpr std::string_view selftest_js = R"(
(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message || e)); });
  ['error', 'warn'].forEach(function (level) {
    var original = console[level];
    console[level] = function () {
      errors.push(level + ': ' + Array.prototype.map.call(arguments, String).join(' '));
      original.apply(console, arguments);
    };
  });
  window.__vigilSelftest = { finish: function (r) {
    r.errors = errors;
    r.ok = errors.length === 0 && r.rendered === r.charts && r.mismatched.length === 0;
    document.getElementById('vigil-selftest').textContent = JSON.stringify(r);
  } };
})();
)";

}  // namespace

std::string render_report(const ReportModel& m) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>rulecheck report: {}</title>\n<script>{}</script>\n<style>\n{}\n{}</style>\n",
      escape(fmt::format("{}", fmt::join(m.rule_files, ", "))), selftest_js, assets::dygraph_css,
      assets::report_css);
  // Trace colours in the tables match the chart lines (report.js's palette).
  html += "<style>";
  static constexpr std::string_view palette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                                 "#56B4E9", "#D55E00", "#000000"};
  for (std::size_t t = 0; t < m.traces.size() && t < 64; ++t)
    html += fmt::format("#trace-summary tr:nth-child({}) .swatch{{background:{}}}", t + 2,
                        palette[t % std::size(palette)]);
  html += ".swatch{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:6px}"
          "</style>\n</head><body>\n";

  html += "<h1>rulecheck report</h1>\n";
  html += fmt::format("<p class=\"meta\">Rules: {}. {} trace{}, {} firing{}, {} chart{}.</p>\n",
                      escape(fmt::format("{}", fmt::join(m.rule_files, ", "))), m.traces.size(),
                      m.traces.size() == 1 ? "" : "s", m.firings.size(), m.firings.size() == 1 ? "" : "s",
                      m.charts.size(), m.charts.size() == 1 ? "" : "s");
  summary(m, html);

  html += "<h2 id=\"charts-title\">Series the rules read</h2>\n"
          "<noscript><p>The charts need JavaScript; the tables above and below do not.</p></noscript>\n"
          "<div class=\"controls\">"
          "<label><input type=\"checkbox\" id=\"ctl-log\"> log scale</label>"
          "<label>smoothing: rolling mean of <input type=\"number\" id=\"ctl-smooth\" value=\"1\" "
          "min=\"1\" max=\"1000\" style=\"width:5em\"> points</label>"
          "<label><input type=\"checkbox\" id=\"ctl-full\"> all points (no downsampling)</label>"
          "<span class=\"note\">drag: zoom &middot; shift-drag: pan &middot; double-click: reset "
          "&middot; hover a firing for its details</span></div>\n"
          "<div id=\"charts\"></div>\n";
  if (m.charts.empty()) html += "<p>None of the series the rules read appears in the traces.</p>\n";
  for (const auto& f : m.folded) {
    std::size_t hidden_firings = 0;
    for (const auto& [_, n] : f.hidden) hidden_firings += n;
    html += fmt::format("<details class=\"folded\"><summary>{}: {} more label set{} not drawn "
                        "({} firing{}); the {} with the most firings are shown</summary><ul>\n",
                        escape(f.name), f.hidden.size(), f.hidden.size() == 1 ? "" : "s",
                        hidden_firings, hidden_firings == 1 ? "" : "s", f.shown);
    for (const auto& [key, n] : f.hidden)
      html += fmt::format("<li><code>{}</code>: {} firing{}</li>\n", escape(key), n, n == 1 ? "" : "s");
    html += "</ul></details>\n";
  }

  firings_table(m, html);

  html += "<pre id=\"vigil-selftest\" hidden></pre>\n";
  html += "<script type=\"application/json\" id=\"vigil-data\">" + script_json(data(m)) + "</script>\n";
  html += "<script>\n";
  html += assets::dygraph_js;
  html += "\n</script>\n<script>\n";
  html += assets::report_js;
  html += "\n</script>\n</body></html>\n";
  return html;
}

}  // namespace rulecheck
