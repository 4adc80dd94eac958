// Series keys: the text form of a series' identity, `name` or
// `name{a="x",b="y"}`, as traces store it and hosts name series.
//
//   vigil::Labels labels;
//   std::string name;
//   vigil::parse_series_key(R"(grad_norm{layer="fc1"})", name, labels);  // true
//   vigil::format_series_key(name, labels);  // grad_norm{layer="fc1"}
//
// Pure functions over strings: no engine, no program, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vigil {

/// Sorted (label, value) pairs of one series, without the metric name.
using Labels = std::vector<std::pair<std::string, std::string>>;

/// Parses a series key `name` or `name{a="x",b="y"}` (the Vigil trace form,
/// values with \" \\ \n escapes) into its name and its labels, sorted by
/// label name. Returns false on malformed keys (and on a label given twice).
///
///   parse_series_key(R"(x{b="2",a="1"})", name, labels);  // name "x", labels a=1, b=2
bool parse_series_key(std::string_view key, std::string& name, Labels& labels);

/// The canonical key: labels (which must be sorted by name) as
/// `name{a="x",b="y"}`, or just `name` without labels. With an empty name it
/// is the label set's own key (`{a="x"}`, or "" for none).
///
///   format_series_key("loss", {});                     // loss
///   format_series_key("grad", {{"layer", "fc1"}});     // grad{layer="fc1"}
std::string format_series_key(std::string_view name, const Labels& labels);

}  // namespace vigil
