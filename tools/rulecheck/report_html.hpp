// The page of `rulecheck report`: what it shows (ReportModel, filled by
// report.cpp from the traces) and how it is written (render_report). The page
// is one self-contained HTML file: dygraphs, the page script and the data are
// inlined, so it opens offline and can be attached to a ticket. Its size is
// linear in the samples and firings of the model (each firing is marked on a
// bounded number of charts; see ReportModel::Chart::marks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vigil/engine.hpp"

namespace rulecheck {

struct ReportModel {
  struct Trace {
    std::string path;  // as given
    std::string name;  // shortest unambiguous form (the path minus the common directory)
    std::uint64_t observations = 0;
    std::optional<std::int64_t> first, last;  // steps
    std::string error;  // read error (everything before it is still shown)
  };
  struct Firing {
    std::size_t trace = 0;
    std::size_t rule = 0;  // index into rules
    std::int64_t step = 0;
    std::string mode;
    vigil::Severity severity = vigil::Severity::warning;
    vigil::Labels labels;
    std::optional<double> value;
    std::int64_t pending_since = 0;
    std::string actions;  // comma-separated names
  };
  struct Line {
    std::size_t trace = 0;
    std::vector<std::int64_t> steps;
    std::vector<double> values;
  };
  /// One series key (name and labels) over all traces: a line per trace.
  struct Chart {
    std::string key, name;
    vigil::Labels labels;
    bool eval_only = false;  // every sample came from eval observations
    std::vector<Line> lines;
    /// Firings shown on this chart: those of rules reading `name` whose labels
    /// are a subset of the chart's (a per-layer firing on its layer's chart,
    /// a scalar one on every drawn chart of the series).
    std::vector<std::size_t> marks;
  };
  /// A series name with more label sets than the chart limit: the label sets
  /// not drawn, with their firing counts.
  struct Folded {
    std::string name;
    std::size_t shown = 0;
    std::vector<std::pair<std::string, std::size_t>> hidden;  // key, firings
  };

  std::vector<std::string> rule_files;
  std::vector<std::string> rules;  // names, in program order
  std::vector<Trace> traces;
  std::vector<Firing> firings;  // by trace, then in firing order
  std::vector<Chart> charts;
  std::vector<Folded> folded;
  std::size_t points = 2000;  // per line before downsampling for drawing
};

/// The whole page.
std::string render_report(const ReportModel& model);

/// False when rulecheck was built without libjs-dygraphs (no page can be drawn).
bool report_assets_available();

}  // namespace rulecheck
