// The canonical printer: AST -> rule text that parses back to the same AST.
//
// Layout is fixed (one clause per line for named rules, one line for
// anonymous rules and `use`), selectors print with braces, and a
// subexpression gets parentheses exactly when its precedence (or
// associativity) would otherwise change the tree on re-parsing.
//
// Owns: canonical text. Must not touch: checking or the grammar.
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "grammar/parser.hpp"

namespace vigil::grammar {

namespace {

// Binding strength, low to high, matching the grammar's levels.
enum Prec : int {
  p_or = 1,
  p_and = 2,
  p_not = 3,
  p_cmp = 4,
  p_add = 5,
  p_mul = 6,
  p_neg = 7,
  p_pow = 8,
  p_postfix = 9,
  p_primary = 10
};

int binary_prec(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::or_: return p_or;
    case ast::BinaryOp::and_: return p_and;
    case ast::BinaryOp::lt:
    case ast::BinaryOp::le:
    case ast::BinaryOp::gt:
    case ast::BinaryOp::ge:
    case ast::BinaryOp::eq:
    case ast::BinaryOp::ne: return p_cmp;
    case ast::BinaryOp::add:
    case ast::BinaryOp::sub: return p_add;
    case ast::BinaryOp::mul:
    case ast::BinaryOp::div:
    case ast::BinaryOp::mod: return p_mul;
    case ast::BinaryOp::pow: return p_pow;
  }
  return p_primary;
}

const char* binary_token(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::or_: return "or";
    case ast::BinaryOp::and_: return "and";
    case ast::BinaryOp::lt: return "<";
    case ast::BinaryOp::le: return "<=";
    case ast::BinaryOp::gt: return ">";
    case ast::BinaryOp::ge: return ">=";
    case ast::BinaryOp::eq: return "==";
    case ast::BinaryOp::ne: return "!=";
    case ast::BinaryOp::add: return "+";
    case ast::BinaryOp::sub: return "-";
    case ast::BinaryOp::mul: return "*";
    case ast::BinaryOp::div: return "/";
    case ast::BinaryOp::mod: return "%";
    case ast::BinaryOp::pow: return "^";
  }
  return "?";
}

int prec(const ast::Expr& e) {
  if (const auto* b = std::get_if<ast::Binary>(&e.node)) return binary_prec(b->op);
  if (const auto* u = std::get_if<ast::Unary>(&e.node)) {
    return u->op == ast::UnaryOp::neg ? p_neg : p_not;
  }
  if (std::holds_alternative<ast::Subscript>(e.node) || std::holds_alternative<ast::Member>(e.node))
    return p_postfix;
  return p_primary;
}

const char* unit_word(ast::DurUnit u) {
  switch (u) {
    case ast::DurUnit::samples: return " samples";
    case ast::DurUnit::steps: return " steps";
    case ast::DurUnit::evals: return " evals";
    case ast::DurUnit::epochs: return " epochs";
    case ast::DurUnit::seconds: return "s";
    case ast::DurUnit::minutes: return "m";
    case ast::DurUnit::hours: return "h";
  }
  return " samples";
}

bool parses_to(const std::string& text, double want) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && ptr == text.data() + text.size() && v / 100.0 == want;
}

std::string number_text(const ast::Number& n) {
  if (!n.percent) return fmt::format("{}", n.value);
  // `X%` parses as X / 100; find the shortest X that gives back exactly the
  // stored value (value * 100 can be off by an ulp or two).
  double p = n.value * 100.0;
  for (int i = 0; i < 8; ++i) {
    for (double c : {p, std::nextafter(p, HUGE_VAL), std::nextafter(p, -HUGE_VAL)}) {
      std::string s = fmt::format("{}", c);
      if (parses_to(s, n.value)) return s + "%";
    }
    p = std::nextafter(p, i % 2 == 0 ? HUGE_VAL : -HUGE_VAL);
  }
  return fmt::format("{}", n.value);  // same value, percent flag lost
}

void print_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  out += '"';
}

void print_name(std::string& out, const std::string& name, bool backticked) {
  if (backticked) {
    out += '`';
    out += name;
    out += '`';
  } else {
    out += name;
  }
}

void print_expr(std::string& out, const ast::Expr& e);

// True if `text` starts like a label matcher: identifier, then =~ !~ != or a
// lone '=' (the parser's rule for telling a selector from a call).
bool looks_like_matcher(std::string_view text) {
  std::size_t i = 0;
  auto ident = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && c >= '0' && c <= '9');
  };
  if (text.empty() || !ident(text[0], true)) return false;
  while (i < text.size() && ident(text[i], i == 0)) ++i;
  while (i < text.size() && text[i] == ' ') ++i;
  const std::string_view rest = text.substr(i);
  if (rest.starts_with("=~") || rest.starts_with("!~") || rest.starts_with("!=")) return true;
  return rest.starts_with("=") && !rest.starts_with("==");
}

void print_operand(std::string& out, const ast::Expr& e, bool parens) {
  if (parens) out += '(';
  print_expr(out, e);
  if (parens) out += ')';
}

struct ExprPrinter {
  std::string& out;

  void operator()(const ast::Number& n) const { out += number_text(n); }
  void operator()(const ast::String& s) const { print_string(out, s.value); }
  void operator()(const ast::Bool& b) const { out += b.value ? "true" : "false"; }
  void operator()(const ast::Name& n) const { print_name(out, n.name, n.backticked); }
  void operator()(const ast::Selector& s) const {
    print_name(out, s.name, s.backticked);
    out += '{';
    for (std::size_t i = 0; i < s.matchers.size(); ++i) {
      const auto& m = s.matchers[i];
      if (i > 0) out += ", ";
      out += m.label;
      switch (m.op) {
        case ast::MatchOp::eq: out += '='; break;
        case ast::MatchOp::ne: out += "!="; break;
        case ast::MatchOp::re: out += "=~"; break;
        case ast::MatchOp::nre: out += "!~"; break;
      }
      print_string(out, m.value);
    }
    out += '}';
  }
  void operator()(const ast::Duration& d) const {
    if (d.amount) print_operand(out, *d.amount, prec(*d.amount) < p_primary);
    out += unit_word(d.unit);
  }
  void operator()(const ast::Subscript& s) const {
    if (s.base) print_operand(out, *s.base, prec(*s.base) < p_postfix);
    out += '[';
    if (s.size) print_expr(out, *s.size);
    out += ']';
  }
  void operator()(const ast::Member& m) const {
    // `2.h` would read back as the number `2.` with a unit: parenthesise numbers.
    if (m.base)
      print_operand(out, *m.base,
                    prec(*m.base) < p_postfix || std::holds_alternative<ast::Number>(m.base->node));
    out += '.';
    out += m.field;
    if (m.args.empty()) return;
    out += '(';
    for (std::size_t i = 0; i < m.args.size(); ++i) {
      if (i > 0) out += ", ";
      if (m.args[i]) print_expr(out, *m.args[i]);
    }
    out += ')';
  }
  void operator()(const ast::Call& c) const {
    out += c.fn;
    out += '(';
    for (std::size_t i = 0; i < c.args.size(); ++i) {
      if (i > 0) out += ", ";
      if (!c.args[i]) continue;
      std::string arg = print(*c.args[i]);
      // `f(a != b)` would read back as a selector with matcher `a != b`.
      if (i == 0 && looks_like_matcher(arg)) arg = "(" + arg + ")";
      out += arg;
    }
    out += ')';
  }
  void operator()(const ast::Unary& u) const {
    if (u.op == ast::UnaryOp::neg) {
      out += '-';
      if (u.operand) print_operand(out, *u.operand, prec(*u.operand) < p_neg);
    } else {
      out += "not ";
      if (u.operand) print_operand(out, *u.operand, prec(*u.operand) < p_not);
    }
  }
  void operator()(const ast::Binary& b) const {
    const int p = binary_prec(b.op);
    bool lhs_parens = false;
    bool rhs_parens = false;
    if (b.lhs && b.rhs) {
      const int l = prec(*b.lhs);
      const int r = prec(*b.rhs);
      if (b.op == ast::BinaryOp::pow) {
        // Right associative; the exponent may be a unary minus (`2 ^ -3`).
        lhs_parens = l <= p;
        rhs_parens = r < p_neg;
      } else if (p == p_cmp) {
        // Non-associative: a comparison operand is never a comparison.
        lhs_parens = l <= p;
        rhs_parens = r <= p;
      } else {
        lhs_parens = l < p;
        rhs_parens = r <= p;
      }
    }
    if (b.lhs) print_operand(out, *b.lhs, lhs_parens);
    out += ' ';
    out += binary_token(b.op);
    out += ' ';
    if (b.rhs) print_operand(out, *b.rhs, rhs_parens);
  }
};

void print_expr(std::string& out, const ast::Expr& e) { std::visit(ExprPrinter{out}, e.node); }

void print_args(std::string& out, const std::vector<ast::Arg>& args) {
  out += '(';
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ", ";
    if (!args[i].name.empty()) out += args[i].name + " = ";
    if (args[i].value) print_expr(out, *args[i].value);
  }
  out += ')';
}

// Clauses in canonical order, each preceded by `sep`.
void print_clauses(std::string& out, const ast::Clauses& c, const char* sep) {
  auto clause = [&](const char* kw, const ast::ExprPtr& e) {
    if (!e) return;
    out += sep;
    out += kw;
    out += ' ';
    print_expr(out, *e);
  };
  clause("when", c.when);
  clause("for", c.for_);
  clause("after", c.after);
  clause("until", c.until);
  clause("every", c.every);
  clause("cooldown", c.cooldown);
  if (c.severity) out += std::string(sep) + "severity " + *c.severity;
  if (c.mode) out += std::string(sep) + "in " + *c.mode;
  auto actions = [&](const std::vector<ast::ActionCall>& calls) {
    out += "do ";
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (i > 0) out += ", ";
      out += calls[i].name;
      if (!calls[i].args.empty()) print_args(out, calls[i].args);
    }
  };
  if (c.has_do || !c.actions.empty()) {
    out += sep;
    actions(c.actions);
  }
  for (const auto& e : c.escalations) {
    out += sep;
    out += "escalate after ";
    if (e.count) print_expr(out, *e.count);
    out += " within ";
    if (e.within) print_expr(out, *e.within);
    out += ' ';
    actions(e.actions);
  }
}

struct StatementPrinter {
  std::string& out;

  void operator()(const ast::RuleDecl& r) const {
    if (r.name.empty()) {
      // Anonymous: one line, starting with `when` (print_clauses' separator).
      std::string body;
      print_clauses(body, r.clauses, " ");
      out += body.empty() ? body : body.substr(1);
      out += '\n';
      return;
    }
    out += "rule " + r.name;
    if (r.description) {
      out += ' ';
      print_string(out, *r.description);
    }
    if (r.is_template) {
      out += '(';
      for (std::size_t i = 0; i < r.params.size(); ++i) {
        if (i > 0) out += ", ";
        out += r.params[i].name;
        if (r.params[i].default_value) {
          out += " = ";
          print_expr(out, *r.params[i].default_value);
        }
      }
      out += ')';
    }
    out += ':';
    print_clauses(out, r.clauses, "\n    ");
    out += '\n';
  }
  void operator()(const ast::UseDecl& u) const {
    out += "use ";
    if (u.std_prefix) out += "std.";
    out += u.template_name;
    print_args(out, u.args);
    if (u.alias) out += " as " + *u.alias;
    print_clauses(out, u.overrides, " ");
    out += '\n';
  }
  void operator()(const ast::ParamDecl& p) const {
    out += "param " + p.name + " = ";
    if (p.value) print_expr(out, *p.value);
    out += '\n';
  }
  void operator()(const ast::LetDecl& l) const {
    out += "let " + l.name + " = ";
    if (l.value) print_expr(out, *l.value);
    out += '\n';
  }
  void operator()(const ast::ImportDecl& i) const {
    out += "import ";
    print_string(out, i.path);
    out += '\n';
  }
  void operator()(const ast::AliasDecl& a) const {
    out += "alias " + a.name + " =";
    for (std::size_t i = 0; i < a.targets.size(); ++i) {
      out += i == 0 ? " " : ", ";
      out += '`' + a.targets[i] + '`';
    }
    out += '\n';
  }
  void operator()(const ast::ActionDecl& a) const {
    out += "action " + a.name;
    if (!a.params.empty()) {
      out += '(';
      for (std::size_t i = 0; i < a.params.size(); ++i) {
        if (i > 0) out += ", ";
        out += a.params[i].name + ": " + a.params[i].type;
        if (a.params[i].default_value) {
          out += " = ";
          print_expr(out, *a.params[i].default_value);
        }
      }
      out += ')';
    }
    out += '\n';
  }
};

}  // namespace

std::string print(const ast::Expr& expr) {
  std::string out;
  print_expr(out, expr);
  return out;
}

std::string print(const ast::File& file) {
  std::string out;
  for (const auto& s : file.statements) std::visit(StatementPrinter{out}, s);
  return out;
}

}  // namespace vigil::grammar
