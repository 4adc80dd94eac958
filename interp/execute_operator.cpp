// Operators (`a + b`, `x > 1`, `!x`) and elementwise functions over columns:
// whole-column Eigen kernels when the operands line up, else a join on label
// sets. The scalar semantics (apply_unary / apply_binary, which the planner
// folds constants with) live here too, beside the array version they must
// agree with. Must not touch series, rule state or firings.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include "interp/executor.hpp"

namespace vigil::interp {

// ---- scalar semantics (constant folding, joins) ------------------------------

double apply_unary(ir::Op op, double a) {
  return op == ir::Op::neg ? -a : (a != 0 && !std::isnan(a) ? 0.0 : 1.0);
}

double apply_binary(ir::Op op, double a, double b) {
  const bool nan = std::isnan(a) || std::isnan(b);
  switch (op) {
    case ir::Op::add: return a + b;
    case ir::Op::sub: return a - b;
    case ir::Op::mul: return a * b;
    case ir::Op::div: return a / b;
    case ir::Op::mod: return std::fmod(a, b);
    case ir::Op::pow: return std::pow(a, b);
    case ir::Op::lt: return !nan && a < b;
    case ir::Op::le: return !nan && a <= b;
    case ir::Op::gt: return !nan && a > b;
    case ir::Op::ge: return !nan && a >= b;
    case ir::Op::eq: return !nan && a == b;
    case ir::Op::ne: return !nan && a != b;
    case ir::Op::and_: return (a != 0 && !std::isnan(a)) && (b != 0 && !std::isnan(b));
    case ir::Op::or_: return (a != 0 && !std::isnan(a)) || (b != 0 && !std::isnan(b));
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

namespace {

/// The operator semantics of apply_binary above, on whole arrays.
template <class A, class B, class O>
void binary(ir::Op op, const A& a, const B& b, O& o) {
  auto truth = [](const auto& x) { return (x != 0) && (x == x); };
  switch (op) {
    case ir::Op::add: o = a + b; break;
    case ir::Op::sub: o = a - b; break;
    case ir::Op::mul: o = a * b; break;
    case ir::Op::div: o = a / b; break;
    case ir::Op::mod:
      o = a.binaryExpr(b, [](double x, double y) { return std::fmod(x, y); });
      break;
    case ir::Op::pow: o = a.binaryExpr(b, [](double x, double y) { return std::pow(x, y); }); break;
    case ir::Op::lt: o = (a < b).template cast<double>(); break;
    case ir::Op::le: o = (a <= b).template cast<double>(); break;
    case ir::Op::gt: o = (a > b).template cast<double>(); break;
    case ir::Op::ge: o = (a >= b).template cast<double>(); break;
    case ir::Op::eq: o = (a == b).template cast<double>(); break;
    case ir::Op::ne: o = ((a != b) && (a == a) && (b == b)).template cast<double>(); break;
    case ir::Op::and_: o = (truth(a) && truth(b)).template cast<double>(); break;
    case ir::Op::or_: o = (truth(a) || truth(b)).template cast<double>(); break;
    default: o.setConstant(std::numeric_limits<double>::quiet_NaN()); break;
  }
}

}  // namespace

// ---- whole columns -------------------------------------------------------------

/// Operators over whole columns with Eigen when the operands line up (the
/// same label sets, or a scalar against a vector): one dispatch on the
/// operator per node, not per element. Returns false to take the general
/// join path.
bool Executor::eval_operator(const PlanNode& n, Column& out) {
  if (n.op == ir::Op::call) return false;
  using Array = Eigen::ArrayXd;
  using Map = Eigen::Map<const Array>;
  const std::uint32_t li = n.inputs[0];
  const Column& l = columns_[li];
  const auto size = static_cast<Eigen::Index>(l.values.size());
  if (n.inputs.size() == 1) {
    out.labels.assign(l.labels.begin(), l.labels.end());
    out.values.resize(l.values.size());
    Eigen::Map<Array> o(out.values.data(), size);
    Map a(l.values.data(), size);
    if (n.op == ir::Op::neg)
      o = -a;
    else
      o = ((a == 0) || (a != a)).cast<double>();
    copy_fresh(li, out);
    return true;
  }
  const std::uint32_t ri = n.inputs[1];
  const Column& r = columns_[ri];
  // A lone label-less element against a labelled vector broadcasts as a scalar.
  const bool ll = lone(li), rl = lone(ri);
  const bool lv = plan_->nodes[li].vector && !(ll && !rl && plan_->nodes[ri].vector);
  const bool rv = plan_->nodes[ri].vector && !(rl && !ll && plan_->nodes[li].vector);
  if (lv == rv && l.labels != r.labels) return false;  // needs a join
  const Column& shape = lv || !rv ? l : r;
  const auto m = static_cast<Eigen::Index>(shape.values.size());
  out.labels.assign(shape.labels.begin(), shape.labels.end());
  out.values.resize(shape.values.size());
  if ((!lv && l.values.empty()) || (!rv && r.values.empty())) {
    out.clear();
    return true;
  }
  Eigen::Map<Array> o(out.values.data(), m);
  if (lv == rv)
    binary(n.op, Map(l.values.data(), m), Map(r.values.data(), m), o);
  else if (lv)
    binary(n.op, Map(l.values.data(), m), Array::Constant(m, r.values[0]), o);
  else
    binary(n.op, Array::Constant(m, l.values[0]), Map(r.values.data(), m), o);
  out.fresh.assign(shape.values.size(), 0);
  for (std::size_t i = 0; i < out.fresh.size(); ++i)
    out.fresh[i] = fresh_at(li, lv ? i : 0) || fresh_at(ri, rv ? i : 0);
  return true;
}

/// The input whose label sets an elementwise node iterates: the first vector
/// that is not lone (one label-less element), else the first vector, else the
/// first input; the other inputs join on its labels or broadcast.
std::uint32_t Executor::elementwise_driver(const PlanNode& n) const {
  std::uint32_t first_vector = no_node;
  for (auto in : n.inputs) {
    if (!plan_->nodes[in].vector) continue;
    if (!lone(in)) return in;
    if (first_vector == no_node) first_vector = in;
  }
  return first_vector != no_node ? first_vector : n.inputs[0];
}

/// The common case of rules over unlabelled metrics (`loss > 1.1 *
/// median(loss[100])`): every input is a scalar, a lone vector or empty, so
/// the result is at most one label-less element. Computed directly, it gives
/// what eval_operator and the join below give (an empty input empties the
/// result), without their column machinery. False if some input is labelled.
bool Executor::eval_scalar(const PlanNode& n, Column& out) {
  bool empty = false, fresh = false;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const Column& c = columns_[n.inputs[i]];
    if (c.values.empty()) {
      empty = true;
    } else {
      if (c.labels.size() != 1 || c.labels[0] != 0) return false;
      fresh |= fresh_at(n.inputs[i], 0);
    }
  }
  if (empty) {
    out.clear();
    return true;
  }
  auto arg = [&](std::size_t i) { return columns_[n.inputs[i]].values[0]; };
  double v;
  if (n.op == ir::Op::call) {
    args_.clear();
    for (std::size_t i = 0; i < n.inputs.size(); ++i) args_.push_back(arg(i));
    v = n.fn->elementwise(args_);
  } else if (n.inputs.size() == 1) {
    v = apply_unary(n.op, arg(0));
  } else {
    v = apply_binary(n.op, arg(0), arg(1));
  }
  if (out.values.size() != 1) {
    out.clear();
    out.push(0, v, fresh);
  } else {
    out.labels[0] = 0;
    out.values[0] = v;
    out.fresh[0] = fresh;
  }
  return true;
}

/// Elementwise over 1..k inputs: vectors are joined on identical label
/// sets; scalars, and vectors of one label-less element, broadcast.
void Executor::eval_elementwise(const PlanNode& n, Column& out) {
  if (eval_operator(n, out)) return;
  const std::size_t k = n.inputs.size();
  const std::uint32_t driver = elementwise_driver(n);
  const bool broadcast_lone = !lone(driver);
  const Column& d = columns_[driver];
  for (std::size_t i = 0; i < d.values.size(); ++i) {
    const std::uint32_t label = d.labels[i];
    args_.clear();
    bool fresh = false, ok = true;
    for (auto in : n.inputs) {
      const Column& c = columns_[in];
      std::size_t j;
      if (!plan_->nodes[in].vector || (broadcast_lone && in != driver && lone(in))) {
        if (c.values.empty()) {
          ok = false;
          break;
        }
        j = 0;
      } else if (in == driver) {
        j = i;
      } else {
        auto it = std::lower_bound(c.labels.begin(), c.labels.end(), label);
        if (it == c.labels.end() || *it != label) {
          ok = false;
          break;
        }
        j = static_cast<std::size_t>(it - c.labels.begin());
      }
      args_.push_back(c.values[j]);
      fresh |= fresh_at(in, j);
    }
    if (!ok) continue;
    double v;
    if (n.op == ir::Op::call)
      v = n.fn->elementwise(args_);
    else if (k == 1)
      v = apply_unary(n.op, args_[0]);
    else
      v = apply_binary(n.op, args_[0], args_[1]);
    out.push(label, v, fresh);
  }
}

}  // namespace vigil::interp
