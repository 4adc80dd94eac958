// explain(): a human-readable account of a firing, from the state the engine
// holds right after the observation that produced it (inputs, windows, the
// rule's pending run). Read-only: it takes the engine as const and reads
// windows through a WindowReader of its own, so it cannot disturb the
// executor's scratch or any state.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "interp/engine_impl.hpp"

namespace vigil {

namespace {

using interp::History;
using interp::no_node;
using interp::PlanNode;

/// "N samples [value@step ...]": what range node `n` reads of `h` (the
/// newest 12 shown).
std::string window_text(const History& h, const PlanNode& n, const interp::Clock& clock) {
  interp::WindowReader reader;
  auto w = reader.read(h, n.window, *n.fn, clock);
  std::string vals;
  const std::size_t from = w.n > 12 ? w.n - 12 : 0;
  if (from) vals += "... ";
  for (std::size_t i = from; i < w.n; ++i)
    vals += fmt::format("{}{}@{}", i > from ? " " : "", w.values[i], w.steps[i]);
  return fmt::format("{} samples [{}]", w.n, vals);
}

/// The decision that decided element `label` of rule `pr` -- a comparison, or a
/// condition that is no comparison (`ewma_chart(loss, 0.2, 3)`) -- as an index
/// into pr.decisions, or -1: the walk of interp::firing_value (rule_state.cpp),
/// which takes the firing's value from the same comparison's left-hand side.
std::int32_t deciding_decision(const interp::PlanRule& pr, const interp::Executor& exec,
                                 std::uint32_t label, std::int32_t at) {
  using Kind = interp::Decision::Kind;
  if (at < 0 || static_cast<std::size_t>(at) >= pr.decisions.size()) return -1;
  const auto& d = pr.decisions[static_cast<std::size_t>(at)];
  auto holds = [&](std::int32_t k) {
    auto v = exec.element(pr.decisions[static_cast<std::size_t>(k)].node, label);
    return v && *v != 0 && !std::isnan(*v);
  };
  switch (d.kind) {
    case Kind::comparison: return at;
    case Kind::and_: return deciding_decision(pr, exec, label, d.a);
    case Kind::or_:
      return deciding_decision(pr, exec, label, !holds(d.a) && holds(d.b) ? d.b : d.a);
    case Kind::fallback:
      return deciding_decision(
          pr, exec, label,
          exec.column(pr.decisions[static_cast<std::size_t>(d.a)].node).values.empty() ? d.b : d.a);
    case Kind::none: return at;
  }
  return -1;
}

const char* comparison_symbol(ir::Op op) {
  switch (op) {
    case ir::Op::lt: return "<";
    case ir::Op::le: return "<=";
    case ir::Op::gt: return ">";
    case ir::Op::ge: return ">=";
    case ir::Op::eq: return "==";
    case ir::Op::ne: return "!=";
    default: return "?";
  }
}

/// Stateful nodes under `id` (itself included) whose function can describe
/// its state, in evaluation order, each once.
void described_detectors(const interp::Plan& plan, std::uint32_t id, std::vector<std::uint32_t>& out) {
  const PlanNode& n = plan.nodes[id];
  for (auto in : n.inputs) described_detectors(plan, in, out);
  if (n.fn && n.fn->kind == stdlib::FnKind::stateful && n.fn->describe &&
      std::find(out.begin(), out.end(), id) == out.end())
    out.push_back(id);
}

}  // namespace

std::string Engine::Impl::explain(const Firing& f) const {
  std::size_t ri = static_cast<std::size_t>(f.rule - program.rules().data());
  if (ri >= plan->rules.size()) return {};
  const auto& pr = plan->rules[ri];
  const auto& store = state.store;
  const auto& labelsets = store.labelsets;
  const auto& clock = state.clock;
  std::string out;
  const auto& src = program.sources();
  // A rule made by `use` shows its inputs in the template's words
  // (`median(metric[window steps])`): first say which arguments those are.
  const RuleInfo& info = program.rules()[ri];
  if (!info.template_name.empty() && info.range.end <= src[info.file].text.size()) {
    std::string_view use = std::string_view(src[info.file].text)
                               .substr(info.range.begin, info.range.end - info.range.begin);
    use = use.substr(0, use.find('\n'));
    out += fmt::format("    {} ({}:{})\n", use, src[info.file].name,
                       src.line_col(info.file, info.range.begin).line);
  }
  for (auto leaf : pr.leaves) {
    const PlanNode& n = plan->nodes[leaf];
    const auto& text = src[n.file].text;
    std::string_view expr =
        n.range.end <= text.size()
            ? std::string_view(text).substr(n.range.begin, n.range.end - n.range.begin)
            : std::string_view{};
    if (n.selector == no_node) {
      // A range over an expression: its recorded values for the firing's
      // label set (or every label set of a scalar firing, up to 8).
      std::size_t shown = 0;
      for (const auto& h : state.exec.expr_hist[leaf]) {
        if (!f.labels->empty() && labelsets[h.labels].get() != f.labels) continue;
        if (++shown > 8) {
          out += "    ...\n";
          break;
        }
        const std::string labels = format_series_key("", *labelsets[h.labels]);
        out += fmt::format("    {}{}{}: {}\n", expr, labels.empty() ? "" : " for ", labels,
                           window_text(h.hist, n, clock));
      }
      continue;
    }
    const auto& ms = store.members[n.selector];
    std::size_t shown = 0;
    for (SeriesId sid : ms) {
      const interp::Series& s = store.series[sid];
      if (s.hist.size == 0) continue;
      if (!f.labels->empty() && labelsets[s.labels].get() != f.labels && ms.size() > 1) continue;
      if (++shown > 8) {
        out += "    ...\n";
        break;
      }
      std::string key = store.key(sid);
      if (n.op == ir::Op::selector) {
        out += fmt::format("    {} = {} (step {})\n", key, s.hist.value[s.hist.newest()],
                           s.hist.step[s.hist.newest()]);
      } else if (n.fn->kind == stdlib::FnKind::clock) {
        out += fmt::format("    {} for {}: {} s since its sample at step {}\n", expr, key,
                           clock.time - s.hist.time[s.hist.newest()], s.hist.step[s.hist.newest()]);
      } else {
        out += fmt::format("    {} over {}: {}\n", expr, key, window_text(s.hist, n, clock));
      }
    }
  }
  const auto& rs = state.rules[ri];
  const std::uint32_t label = [&] {
    for (std::uint32_t i = 0; i < labelsets.size(); ++i)
      if (labelsets[i].get() == f.labels) return i;
    return 0u;
  }();
  // Both sides of the deciding comparison as computed at this observation: the
  // value a firing reports is only the left-hand side, and a user must also see
  // what it was compared with (the median, the best, the patience...).
  const std::int32_t at = deciding_decision(pr, state.exec, label, 0);
  const interp::Decision* decided = at >= 0 ? &pr.decisions[static_cast<std::size_t>(at)] : nullptr;
  if (decided && decided->kind == interp::Decision::Kind::comparison) {
    const PlanNode& cmp = plan->nodes[decided->node];
    if (cmp.inputs.size() == 2) {
      auto side = [&](std::uint32_t id) {
        const PlanNode& n = plan->nodes[id];
        const auto& text = src[n.file].text;
        std::string_view expr =
            n.range.end <= text.size() && n.range.end > n.range.begin
                ? std::string_view(text).substr(n.range.begin, n.range.end - n.range.begin)
                : std::string_view{};
        const auto v = state.exec.element(id, label);
        const std::string value = v ? fmt::format("{}", *v) : std::string("(no value)");
        if (n.op == ir::Op::constant || expr.empty() || expr == value) return value;
        return fmt::format("{} = {}", expr, value);
      };
      out += fmt::format("    decided by: {} {} {}\n", side(cmp.inputs[0]), comparison_symbol(cmp.op),
                         side(cmp.inputs[1]));
    }
  }
  // A detector that returns a verdict or a count (ewma_chart, cusum,
  // steps_since_best) compares against a limit of its own: say what it
  // computed at this observation (its state right after the kernel call).
  std::vector<std::uint32_t> detectors;
  if (decided) described_detectors(*plan, decided->node, detectors);
  for (std::uint32_t id : detectors) {
    const PlanNode& n = plan->nodes[id];
    const interp::Column& c = state.exec.column(id);
    if (c.values.empty() || id >= state.exec.slots.size()) continue;
    // The element the rule read: a lone unlabelled element pairs with every label set.
    const bool lone = !n.vector || (c.labels.size() == 1 && c.labels[0] == 0);
    const std::uint32_t l = lone ? c.labels[0] : label;
    if (!std::binary_search(c.labels.begin(), c.labels.end(), l)) continue;
    const auto& slots = state.exec.slots[id];
    if (l >= slots.size() || slots[l].state.n == 0) continue;
    const auto& text = src[n.file].text;
    std::string_view expr =
        n.range.end <= text.size() ? std::string_view(text).substr(n.range.begin, n.range.end - n.range.begin)
                                   : std::string_view{};
    std::string over;
    if (!n.inputs.empty() && plan->nodes[n.inputs[0]].op == ir::Op::selector) {
      const auto& sel = plan->selectors[plan->nodes[n.inputs[0]].selector].selector;
      over = " over " + format_series_key(sel.name, *labelsets[l]);
    }
    out += fmt::format("    {}{}: {}\n", expr, over, n.fn->describe(slots[l].state, n.const_args));
  }
  if (label < rs.elems.size()) {
    const auto& e = rs.elems[label];
    std::string steps;
    const std::int64_t k = std::min<std::int64_t>(e.run, 8);
    for (std::int64_t i = e.run - k; i < e.run; ++i)
      steps += fmt::format("{}{}", steps.empty() ? "" : ", ", e.recent[i % 8]);
    out += fmt::format("    pending since step {}: {} consecutive true evaluation{} ({}{})\n",
                       e.first_step, e.run, e.run == 1 ? "" : "s", e.run > 8 ? "..., " : "", steps);
  }
  return out;
}

}  // namespace vigil
