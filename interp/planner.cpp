// IR trees -> one DAG with shared subexpressions and folded constants.
//
// Owns: the DAG build (CSE, folding, retention, decisions). Must not touch: names or types
// (the checker has settled them) or run-time state.
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <unordered_map>

#include "interp/plan.hpp"
#include "interp/window_state.hpp"

namespace vigil::interp {

// apply_unary / apply_binary are in execute_operator.cpp, beside the array
// version of the same semantics.

void Retention::cover(const ir::Dur& window, const stdlib::FunctionDef& fn) {
  // `before(x[N])` reads the (N+1)-th newest sample. A running window
  // (window_state.hpp) removes the samples that leave it, so it keeps one
  // sample more than the window too: else a history exactly as long as the
  // window would evict the leaving sample first and force a rebuild.
  const bool running = running_kind(fn) != RunKind::none;
  const std::size_t extra = fn.preceding || running ? 1 : 0;
  switch (window.unit) {
    case ir::Unit::samples:
      count = std::max(count, static_cast<std::size_t>(window.amount) + extra);
      break;
    case ir::Unit::evals:
      evals = std::max(evals, static_cast<std::size_t>(window.amount) + extra);
      break;
    case ir::Unit::steps:
      steps = std::max(steps, window.amount);
      preceding_steps |= fn.preceding || running;
      break;
    case ir::Unit::seconds:
      seconds = std::max(seconds, window.amount);
      preceding_seconds |= fn.preceding || running;
      break;
    case ir::Unit::epochs: break;  // rejected by the checker
  }
}

void Retention::widen(const Retention& other) {
  count = std::max(count, other.count);
  steps = std::max(steps, other.steps);
  seconds = std::max(seconds, other.seconds);
  evals = std::max(evals, other.evals);
  preceding_steps |= other.preceding_steps;
  preceding_seconds |= other.preceding_seconds;
}

bool PlanSelector::matches(std::string_view name,
                           const std::vector<std::pair<std::string, std::string>>& labels) const {
  if (name != selector.name) return false;
  for (std::size_t i = 0; i < selector.matchers.size(); ++i) {
    const auto& m = selector.matchers[i];
    std::string_view value;  // a missing label matches as ""
    for (const auto& [k, v] : labels)
      if (k == m.label) value = v;
    bool ok = false;
    switch (m.op) {
      case ir::MatchOp::eq: ok = value == m.value; break;
      case ir::MatchOp::ne: ok = value != m.value; break;
      case ir::MatchOp::re: ok = RE2::FullMatch(value, *regexes[i]); break;
      case ir::MatchOp::nre: ok = !RE2::FullMatch(value, *regexes[i]); break;
    }
    if (!ok) return false;
  }
  return true;
}

namespace {

bool is_comparison(ir::Op op) { return op >= ir::Op::lt && op <= ir::Op::ne; }

bool pure_elementwise(const PlanNode& n) {
  switch (n.op) {
    case ir::Op::neg: case ir::Op::not_:
    case ir::Op::add: case ir::Op::sub: case ir::Op::mul: case ir::Op::div: case ir::Op::mod:
    case ir::Op::pow: case ir::Op::lt: case ir::Op::le: case ir::Op::gt: case ir::Op::ge:
    case ir::Op::eq: case ir::Op::ne: case ir::Op::and_: case ir::Op::or_:
      return true;
    case ir::Op::call: return n.fn->kind == stdlib::FnKind::elementwise;
    default: return false;
  }
}

class Planner {
 public:
  Plan run(std::vector<ir::Rule> rules) {
    for (auto& r : rules) {
      PlanRule pr;
      pr.root = add(*r.condition);
      // Built on the IR, before folding can turn `1 < 2` into a constant.
      decision_at_.clear();
      decision(*r.condition, pr.decisions);
      std::vector<bool> visited(plan_.nodes.size(), false);
      collect_leaves(pr.root, pr.leaves, visited);
      r.condition.reset();
      pr.rule = std::move(r);
      plan_.rules.push_back(std::move(pr));
    }
    drop_unreachable();
    return std::move(plan_);
  }

 private:
  /// Folding leaves the folded operands behind; drop every node no rule
  /// reads, keeping the topological order.
  void drop_unreachable() {
    std::vector<bool> live(plan_.nodes.size(), false);
    for (const auto& r : plan_.rules) {
      live[r.root] = true;
      for (const auto& d : r.decisions)
        for (auto id : {d.node, d.lhs})
          if (id != no_node) live[id] = true;
    }
    for (std::size_t i = plan_.nodes.size(); i-- > 0;)
      if (live[i])
        for (auto in : plan_.nodes[i].inputs) live[in] = true;
    std::vector<std::uint32_t> renumber(plan_.nodes.size(), no_node);
    std::vector<PlanNode> kept;
    for (std::size_t i = 0; i < plan_.nodes.size(); ++i) {
      if (!live[i]) continue;
      renumber[i] = static_cast<std::uint32_t>(kept.size());
      kept.push_back(std::move(plan_.nodes[i]));
      for (auto& in : kept.back().inputs) in = renumber[in];
    }
    plan_.nodes = std::move(kept);
    for (auto& r : plan_.rules) {
      r.root = renumber[r.root];
      for (auto& d : r.decisions)
        for (auto* id : {&d.node, &d.lhs})
          if (*id != no_node) *id = renumber[*id];
      for (auto& l : r.leaves) l = renumber[l];
    }
  }

  /// Appends the decision tree of `n` (see Decision); returns its index.
  /// Plan ids come from `ids_` (filled by add), so this adds no nodes.
  std::int32_t decision(const ir::Node& n, std::vector<Decision>& out) {
    // The IR is a DAG (a let used twice): a shared node's decisions once.
    if (auto it = decision_at_.find(&n); it != decision_at_.end()) return it->second;
    const auto at = static_cast<std::int32_t>(out.size());
    decision_at_.emplace(&n, at);
    out.push_back({Decision::Kind::none, ids_.at(&n), no_node, -1, -1});
    if (is_comparison(n.op)) {
      out[at].kind = Decision::Kind::comparison;
      out[at].lhs = ids_.at(n.args[0].get());
    } else if (n.op == ir::Op::and_) {
      out[at].kind = Decision::Kind::and_;
      const auto a = decision(*n.args[0], out);
      out[at].a = a;
    } else if (n.op == ir::Op::or_ ||
               (n.op == ir::Op::call && n.fn->kind == stdlib::FnKind::fallback)) {
      out[at].kind = n.op == ir::Op::or_ ? Decision::Kind::or_ : Decision::Kind::fallback;
      const auto a = decision(*n.args[0], out);
      const auto b = decision(*n.args[1], out);
      out[at].a = a;
      out[at].b = b;
    }
    return at;
  }

  /// The plan is a DAG (CSE, shared lets): each node once, or `x + x`
  /// chains cost 2^depth.
  void collect_leaves(std::uint32_t id, std::vector<std::uint32_t>& out,
                      std::vector<bool>& visited) const {
    if (visited[id]) return;
    visited[id] = true;
    const auto& n = plan_.nodes[id];
    if (n.op == ir::Op::selector || n.op == ir::Op::range_call) {
      if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
      if (n.selector != no_node) return;  // a range over an expression: its series too
    }
    for (auto in : n.inputs) collect_leaves(in, out, visited);
  }

  std::uint32_t selector_id(const ir::Selector& s) {
    std::string key = s.name;
    for (const auto& m : s.matchers)
      key += fmt::format("\x1f{}\x1e{}\x1e{}", m.label, static_cast<int>(m.op), m.value);
    auto [it, added] = selectors_.try_emplace(key, plan_.selectors.size());
    if (added) {
      PlanSelector ps{s, {}, {}};
      for (const auto& m : s.matchers) {
        std::shared_ptr<const RE2> re;
        if (m.op == ir::MatchOp::re || m.op == ir::MatchOp::nre)
          re = std::make_shared<const RE2>(m.value, RE2::Quiet);
        ps.regexes.push_back(std::move(re));
      }
      plan_.selectors.push_back(std::move(ps));
    }
    return it->second;
  }

  std::uint32_t add(const ir::Node& n) {
    // The IR is a DAG (lets are shared): each node is planned once.
    if (auto it = ids_.find(&n); it != ids_.end()) return it->second;
    const std::uint32_t id = add_node(n);
    ids_[&n] = id;
    return id;
  }

  std::uint32_t add_node(const ir::Node& n) {
    PlanNode p;
    p.op = n.op;
    p.type = n.type;
    p.vector = n.vector;
    p.constant = n.constant;
    p.window = n.window;
    p.fn = n.fn;
    p.const_args = n.const_args;
    p.file = n.file;
    p.range = n.range;
    for (const auto& a : n.args) p.inputs.push_back(add(*a));
    if (n.op == ir::Op::selector || (n.op == ir::Op::range_call && !n.selector.name.empty()))
      p.selector = selector_id(n.selector);
    fold(p);

    // Structural key: equal keys compute equal values (CSE).
    std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}", static_cast<int>(p.op),
                                  static_cast<int>(p.type), p.vector, bits(p.constant),
                                  p.selector, static_cast<int>(p.window.unit),
                                  bits(p.window.amount));
    key += fmt::format("|{}", static_cast<const void*>(p.fn));
    for (double c : p.const_args) key += fmt::format(",{}", bits(c));
    for (auto in : p.inputs) key += fmt::format(";{}", in);
    auto [it, added] = nodes_.try_emplace(key, static_cast<std::uint32_t>(plan_.nodes.size()));
    if (!added) return it->second;

    if (p.op == ir::Op::range_call) {
      auto& r = p.selector == no_node ? p.history : plan_.selectors[p.selector].retention;
      r.cover(p.window, *p.fn);
      p.time_dependent |= p.window.unit == ir::Unit::steps || p.window.unit == ir::Unit::seconds ||
                          p.fn->kind == stdlib::FnKind::clock;
    }
    for (auto in : p.inputs) p.time_dependent |= plan_.nodes[in].time_dependent;
    plan_.nodes.push_back(std::move(p));
    return it->second;
  }

  /// Replaces a pure node whose inputs are all constants by its value.
  void fold(PlanNode& p) {
    if (p.inputs.empty() || !pure_elementwise(p)) return;
    std::vector<double> args;
    for (auto in : p.inputs) {
      if (plan_.nodes[in].op != ir::Op::constant) return;
      args.push_back(plan_.nodes[in].constant);
    }
    double v = 0;
    if (p.op == ir::Op::call)
      v = p.fn->elementwise(args);
    else if (args.size() == 1)
      v = apply_unary(p.op, args[0]);
    else
      v = apply_binary(p.op, args[0], args[1]);
    p.op = ir::Op::constant;
    p.constant = v;
    p.fn = nullptr;
    p.inputs.clear();
    p.vector = false;
  }

  static std::uint64_t bits(double d) {
    std::uint64_t b;
    std::memcpy(&b, &d, sizeof b);
    return b;
  }

  Plan plan_;
  std::unordered_map<std::string, std::uint32_t> nodes_;
  std::unordered_map<const ir::Node*, std::uint32_t> ids_;  // IR node -> plan node
  std::unordered_map<const ir::Node*, std::int32_t> decision_at_;  // this rule's
  std::unordered_map<std::string, std::uint32_t> selectors_;
};

}  // namespace

Plan make_plan(std::vector<ir::Rule> rules) { return Planner().run(std::move(rules)); }

}  // namespace vigil::interp
