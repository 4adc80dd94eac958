#include "test_util.hpp"

#include <fmt/format.h>

namespace vigil::grammar::test {

namespace {

std::string dump_ptr(const ast::ExprPtr& e) { return e ? dump(*e) : "null"; }

const char* unit_name(ast::DurUnit u) {
  switch (u) {
    case ast::DurUnit::samples: return "samples";
    case ast::DurUnit::steps: return "steps";
    case ast::DurUnit::evals: return "evals";
    case ast::DurUnit::epochs: return "epochs";
    case ast::DurUnit::seconds: return "s";
    case ast::DurUnit::minutes: return "m";
    case ast::DurUnit::hours: return "h";
  }
  return "?";
}

std::string dump_args(const std::vector<ast::Arg>& args) {
  std::string out = "(";
  for (const auto& a : args) out += fmt::format(" [{}={}]", a.name, dump_ptr(a.value));
  return out + ")";
}

std::string dump_clauses(const ast::Clauses& c) {
  std::string out = fmt::format("(clauses when={} for={} after={} every={} cooldown={}",
                                dump_ptr(c.when), dump_ptr(c.for_), dump_ptr(c.after),
                                dump_ptr(c.every), dump_ptr(c.cooldown));
  out += fmt::format(" severity={} mode={} do={}", c.severity.value_or("-"), c.mode.value_or("-"),
                     c.has_do);
  for (const auto& a : c.actions) out += fmt::format(" (action {} {})", a.name, dump_args(a.args));
  for (const auto& e : c.escalations) {
    out += fmt::format(" (escalate {} {}", dump_ptr(e.count), dump_ptr(e.within));
    for (const auto& a : e.actions) out += fmt::format(" (action {} {})", a.name, dump_args(a.args));
    out += ")";
  }
  return out + ")";
}

struct ExprDump {
  std::string operator()(const ast::Number& n) const {
    return fmt::format("(num {}{})", n.value, n.percent ? "%" : "");
  }
  std::string operator()(const ast::String& s) const { return fmt::format("(str {:?})", s.value); }
  std::string operator()(const ast::Bool& b) const { return b.value ? "true" : "false"; }
  std::string operator()(const ast::Name& n) const {
    return fmt::format("(name {}{})", n.backticked ? "`" : "", n.name);
  }
  std::string operator()(const ast::Selector& s) const {
    std::string out = fmt::format("(sel {}{}", s.backticked ? "`" : "", s.name);
    for (const auto& m : s.matchers) {
      out += fmt::format(" {}{}{:?}", m.label, static_cast<int>(m.op), m.value);
    }
    return out + ")";
  }
  std::string operator()(const ast::Duration& d) const {
    return fmt::format("(dur {} {})", dump_ptr(d.amount), unit_name(d.unit));
  }
  std::string operator()(const ast::Subscript& s) const {
    return fmt::format("(sub {} {})", dump_ptr(s.base), dump_ptr(s.size));
  }
  std::string operator()(const ast::Member& m) const {
    std::string out = fmt::format("(member {} {}", dump_ptr(m.base), m.field);
    for (const auto& a : m.args) out += " " + dump_ptr(a);
    return out + ")";
  }
  std::string operator()(const ast::Call& c) const {
    std::string out = "(call " + c.fn;
    for (const auto& a : c.args) out += " " + dump_ptr(a);
    return out + ")";
  }
  std::string operator()(const ast::Unary& u) const {
    return fmt::format("({} {})", u.op == ast::UnaryOp::neg ? "neg" : "not", dump_ptr(u.operand));
  }
  std::string operator()(const ast::Binary& b) const {
    return fmt::format("(bin{} {} {})", static_cast<int>(b.op), dump_ptr(b.lhs), dump_ptr(b.rhs));
  }
};

struct StatementDump {
  std::string operator()(const ast::RuleDecl& r) const {
    std::string out = fmt::format("(rule {} desc={} template={}", r.name,
                                  r.description ? fmt::format("{:?}", *r.description) : "-",
                                  r.is_template);
    for (const auto& p : r.params) out += fmt::format(" [{}={}]", p.name, dump_ptr(p.default_value));
    return out + " " + dump_clauses(r.clauses) + ")";
  }
  std::string operator()(const ast::UseDecl& u) const {
    return fmt::format("(use std={} {} {} as={} {})", u.std_prefix, u.template_name,
                       dump_args(u.args), u.alias.value_or("-"), dump_clauses(u.overrides));
  }
  std::string operator()(const ast::ParamDecl& p) const {
    return fmt::format("(param {} {})", p.name, dump_ptr(p.value));
  }
  std::string operator()(const ast::LetDecl& l) const {
    return fmt::format("(let {} {})", l.name, dump_ptr(l.value));
  }
  std::string operator()(const ast::ImportDecl& i) const {
    return fmt::format("(import {:?})", i.path);
  }
  std::string operator()(const ast::AliasDecl& a) const {
    std::string out = "(alias " + a.name;
    for (const auto& t : a.targets) out += fmt::format(" {:?}", t);
    return out + ")";
  }
  std::string operator()(const ast::ActionDecl& a) const {
    std::string out = "(action " + a.name;
    for (const auto& p : a.params) {
      out += fmt::format(" [{}:{}={}]", p.name, p.type, dump_ptr(p.default_value));
    }
    return out + ")";
  }
};

}  // namespace

std::string dump(const ast::Expr& e) { return std::visit(ExprDump{}, e.node); }

std::string dump(const ast::File& f) {
  std::string out;
  for (const auto& s : f.statements) out += std::visit(StatementDump{}, s) + "\n";
  return out;
}

}  // namespace vigil::grammar::test
