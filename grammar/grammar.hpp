// The Vigil rule language as a PEGTL 3.2 grammar. Internal to grammar/: only
// the parser's files (parse_state.hpp, recovery.cpp) include it, and no PEGTL
// type leaves this folder.
//
// One struct per production, its EBNF in the comment next to it. `ws` (blanks,
// newlines and `#` comments) separates tokens; newlines mean nothing else.
// `must<>` appears only at commit points (after a keyword or operator has
// decided what must follow), so ordinary alternatives still backtrack. Every
// rule used in a `must<>` or `raise<>` needs an entry in the `error_message`
// table below: the control class (must_if) refuses to compile without one.
//
// The grammar is shaped so that no rule carrying an action can match and then
// be backtracked over: wherever two alternatives share a prefix (selector vs
// call, duration vs number, named vs positional argument), an action-free
// `at<>` look-ahead decides first.
//
// Owns: the grammar and its messages. Must not touch: AST building (the actions' job).
#pragma once

#include <cstddef>

#include <tao/pegtl.hpp>
#include <tao/pegtl/contrib/analyze_traits.hpp>

#include "grammar/parser.hpp"

namespace vigil::grammar::peg {

namespace pegtl = tao::pegtl;
using pegtl::at;
using pegtl::eof;
using pegtl::not_at;
using pegtl::one;
using pegtl::opt;
using pegtl::plus;
using pegtl::seq;
using pegtl::sor;
using pegtl::star;
using pegtl::string;

// must<R...>: R must match here, else raise R's message. Unlike pegtl::must,
// a failing R is rewound first, so the error points at the start of the token
// that could not be R rather than somewhere inside a partial match.
template <typename... R>
struct must : seq<sor<R, pegtl::raise<R>>...> {};

// ---- lexical ----------------------------------------------------------------

// comment = "#" { any char except newline } ;
struct comment : seq<one<'#'>, pegtl::until<pegtl::eolf>> {};
// ws = { blank | newline | comment } ;
struct ws : star<sor<pegtl::space, comment>> {};

struct ident_first : pegtl::ranges<'a', 'z', 'A', 'Z', '_'> {};
struct ident_other : pegtl::ranges<'a', 'z', 'A', 'Z', '0', '9', '_'> {};
// identifier = [A-Za-z_] { [A-Za-z0-9_] } ;
struct identifier : seq<ident_first, star<ident_other>> {};

template <char... Cs>
struct kw : seq<string<Cs...>, not_at<ident_other>> {};
struct kw_rule : kw<'r', 'u', 'l', 'e'> {};
struct kw_when : kw<'w', 'h', 'e', 'n'> {};
struct kw_for : kw<'f', 'o', 'r'> {};
struct kw_after : kw<'a', 'f', 't', 'e', 'r'> {};
struct kw_every : kw<'e', 'v', 'e', 'r', 'y'> {};
struct kw_until : kw<'u', 'n', 't', 'i', 'l'> {};
struct kw_cooldown : kw<'c', 'o', 'o', 'l', 'd', 'o', 'w', 'n'> {};
struct kw_severity : kw<'s', 'e', 'v', 'e', 'r', 'i', 't', 'y'> {};
struct kw_in : kw<'i', 'n'> {};
struct kw_do : kw<'d', 'o'> {};
struct kw_use : kw<'u', 's', 'e'> {};
struct kw_as : kw<'a', 's'> {};
struct kw_import : kw<'i', 'm', 'p', 'o', 'r', 't'> {};
struct kw_param : kw<'p', 'a', 'r', 'a', 'm'> {};
struct kw_let : kw<'l', 'e', 't'> {};
struct kw_action : kw<'a', 'c', 't', 'i', 'o', 'n'> {};
struct kw_alias : kw<'a', 'l', 'i', 'a', 's'> {};
struct kw_escalate : kw<'e', 's', 'c', 'a', 'l', 'a', 't', 'e'> {};
// `after` and `within` inside `escalate` are contextual, not reserved.
struct kw_within : kw<'w', 'i', 't', 'h', 'i', 'n'> {};
struct kw_and : kw<'a', 'n', 'd'> {};
struct kw_or : kw<'o', 'r'> {};
struct kw_not : kw<'n', 'o', 't'> {};
struct kw_true : kw<'t', 'r', 'u', 'e'> {};
struct kw_false : kw<'f', 'a', 'l', 's', 'e'> {};

// keyword = "rule" | "when" | ... (words that cannot be bare identifiers) ;
// The clause words (for, after, until, every, cooldown, severity, in) are not
// reserved: a clause only starts where an expression has ended, so they stay
// usable as names — `reduce_lr_on_plateau(cooldown = 2)` needs that.
struct keyword : sor<kw_rule, kw_when, kw_do, kw_use, kw_as, kw_import, kw_param, kw_let, kw_action,
                     kw_alias, kw_escalate, kw_and, kw_or, kw_not, kw_true, kw_false> {};
// name = identifier - keyword ;
struct name : seq<not_at<keyword>, identifier> {};

// statement_keyword = "rule" | "when" | "use" | "param" | "let" | "import" | "action" | "alias" ;
struct statement_keyword
    : sor<kw_rule, kw_when, kw_use, kw_param, kw_let, kw_import, kw_action, kw_alias> {};

// ---- literals -------------------------------------------------------------------

struct digits : plus<pegtl::digit> {};
// exponent = ("e" | "E") ["+" | "-"] digits ;
struct exponent : seq<one<'e', 'E'>, opt<one<'+', '-'>>, digits> {};
// number_text = (digits ["." {digit}] | "." digits) [exponent] ;
struct number_text
    : seq<sor<seq<digits, opt<one<'.'>, star<pegtl::digit>>>, seq<one<'.'>, digits>>, opt<exponent>> {
};
// number = number_text ["%"] ;          (no space before "%": `5%` is 0.05)
struct number : seq<number_text, opt<one<'%'>>> {};

// string = '"' { char | "\" ("\"" | "\\" | "n" | "t") } '"' ;   (no raw newline)
// A hand-written rule (parser.cpp) so that errors point at the right byte:
// an unknown escape at its backslash, an unterminated string at its opening
// quote. The unescaped text is left in the state for the rule's action.
struct string_token {
  using rule_t = string_token;
  using subs_t = pegtl::type_list<>;
  template <pegtl::apply_mode A, pegtl::rewind_mode M, template <typename...> class Action,
            template <typename...> class Control, typename ParseInput, typename State>
  static bool match(ParseInput& in, State& st);
};

// backtick_name = "`" char {char} "`" ;      (any char except backtick and newline)
// Hand-written like string_token: an unterminated name is reported at its
// opening backtick.
struct backtick_name {
  using rule_t = backtick_name;
  using subs_t = pegtl::type_list<>;
  template <pegtl::apply_mode A, pegtl::rewind_mode M, template <typename...> class Action,
            template <typename...> class Control, typename ParseInput, typename State>
  static bool match(ParseInput& in, State& st);
};

// ---- durations ------------------------------------------------------------------

struct unit_samples : sor<kw<'s', 'a', 'm', 'p', 'l', 'e', 's'>, kw<'s', 'a', 'm', 'p', 'l', 'e'>> {};
struct unit_steps : sor<kw<'s', 't', 'e', 'p', 's'>, kw<'s', 't', 'e', 'p'>> {};
struct unit_evals : sor<kw<'e', 'v', 'a', 'l', 's'>, kw<'e', 'v', 'a', 'l'>> {};
struct unit_epochs : sor<kw<'e', 'p', 'o', 'c', 'h', 's'>, kw<'e', 'p', 'o', 'c', 'h'>> {};
// unit_word = "samples" | "sample" | "steps" | "step" | "evals" | "eval" | "epochs" | "epoch" ;
struct unit_word : sor<unit_samples, unit_steps, unit_evals, unit_epochs> {};
// unit_suffix = ("s" | "m" | "h") ;           (immediately after the number: `30s`)
struct unit_suffix : seq<one<'s', 'm', 'h'>, not_at<ident_other>> {};

struct dur_number : number_text {};
struct dur_name : name {};
// duration = number_text unit_suffix | (number_text | name) unit_word ;
// (Factored so the amount, which carries an action, is matched only once.)
struct duration : seq<sor<dur_number, dur_name>, sor<unit_suffix, seq<ws, unit_word>>> {};
// Action-free look-ahead for `duration`.
struct duration_ahead
    : sor<seq<number_text, unit_suffix>, seq<sor<number_text, name>, ws, unit_word>> {};

// ---- expressions ------------------------------------------------------------------

struct expr;
struct unary_expr;
struct not_expr;

// nested<R>: R one level deeper in the expression tree; more than max_nesting
// levels raise "expression nested too deeply" (bounds parser recursion and
// AST depth alike).
struct too_deep {};
template <typename R>
struct nested {
  using rule_t = nested;
  using subs_t = pegtl::type_list<R>;
  template <pegtl::apply_mode A, pegtl::rewind_mode M, template <typename...> class Action,
            template <typename...> class Control, typename ParseInput, typename State>
  static bool match(ParseInput& in, State& st) {
    if (st.depth >= max_nesting) Control<too_deep>::raise(in, st);
    ++st.depth;
    // Not RAII: on an exception the whole statement is abandoned and the
    // state reset, so the counter need not be restored.
    const bool ok = Control<R>::template match<A, M, Action, Control>(in, st);
    --st.depth;
    return ok;
  }
};

struct rparen : one<')'> {};
struct rbracket : one<']'> {};
struct rbrace : one<'}'> {};

// matcher = identifier ("=~" | "!~" | "!=" | "=") string ;
struct match_op : sor<string<'=', '~'>, string<'!', '~'>, string<'!', '='>,
                      seq<one<'='>, not_at<one<'='>>>> {};
struct label_name : identifier {};
struct matcher_value : string_token {};
struct matcher : seq<label_name, ws, match_op, ws, must<matcher_value>> {};
// matchers = [matcher {"," matcher}] ;
struct matcher_list : seq<matcher, star<ws, one<','>, ws, must<matcher>>> {};
struct matcher_ahead : seq<identifier, ws, match_op> {};

struct sel_name : name {};
struct sel_backtick : backtick_name {};
// selector = (name | backtick_name) ( "(" [matchers] ")" | "{" [matchers] "}" ) ;
struct sel_parens : seq<one<'('>, ws, opt<matcher_list>, ws, must<rparen>> {};
struct sel_braces : seq<one<'{'>, ws, opt<matcher_list>, ws, must<rbrace>> {};
struct selector : seq<sel_name, ws, sor<sel_parens, sel_braces>> {};
struct selector_ahead
    : seq<name, ws, sor<one<'{'>, seq<one<'('>, ws, sor<one<')'>, matcher_ahead>>>> {};
struct backtick_ref : seq<sel_backtick, opt<ws, sor<sel_parens, sel_braces>>> {};

// call = name "(" expr {"," expr} ")" ;          (not a selector, see selector_ahead)
struct call_name : name {};
struct call_arg : nested<expr> {};
struct call : seq<call_name, ws, one<'('>, ws, must<call_arg>,
                  star<ws, one<','>, ws, must<call_arg>>, ws, must<rparen>> {};
struct call_ahead : seq<name, ws, one<'('>> {};

struct name_ref : name {};
struct string_lit : string_token {};
struct true_lit : kw_true {};
struct false_lit : kw_false {};
struct number_lit : number {};
struct duration_lit : duration {};
// paren = "(" expr ")" [unit_word] ;   (with a unit word: a duration, `(n + 1) steps`)
struct paren : seq<one<'('>, ws, must<nested<expr>>, ws, must<rparen>> {};
struct paren_unit : unit_word {};
struct paren_expr : seq<paren, opt<ws, paren_unit>> {};

// primary = paren | string | "true" | "false" | duration | number
//         | selector | call | backtick_ref | name ;
struct primary
    : sor<paren_expr, string_lit, true_lit, false_lit, seq<at<duration_ahead>, duration_lit>, number_lit,
          seq<at<selector_ahead>, selector>, seq<at<call_ahead>, call>, backtick_ref, name_ref> {};

// postfix = primary { "[" expr "]" | "." name [stat_args] } ;   (no space before "." or "(")
// stat_args = "(" expr {"," expr} ")" ;
struct subscript : seq<ws, one<'['>, ws, must<nested<expr>>, ws, must<rbracket>> {};
struct member_name : name {};
struct stat_args : seq<one<'('>, ws, must<call_arg>, star<ws, one<','>, ws, must<call_arg>>, ws,
                       must<rparen>> {};
struct member : seq<one<'.'>, must<member_name>, opt<stat_args>> {};
struct postfix_expr : seq<primary, star<sor<subscript, member>>> {};

// pow = postfix ["^" unary] ;               (right associative through unary)
struct op_pow : one<'^'> {};
struct pow_tail : seq<ws, op_pow, ws, must<nested<unary_expr>>> {};
struct pow_expr : seq<postfix_expr, opt<pow_tail>> {};

// unary = "-" unary | pow ;
struct op_neg : one<'-'> {};
struct neg_expr : seq<op_neg, ws, must<nested<unary_expr>>> {};
struct unary_expr : sor<neg_expr, pow_expr> {};

// mul = unary { ("*" | "/" | "%") unary } ;
struct op_mul : one<'*'> {};
struct op_div : one<'/'> {};
struct op_mod : one<'%'> {};
struct mul_tail : seq<ws, sor<op_mul, op_div, op_mod>, ws, must<unary_expr>> {};
struct mul_expr : seq<unary_expr, star<mul_tail>> {};

// add = mul { ("+" | "-") mul } ;
struct op_add : one<'+'> {};
struct op_sub : one<'-'> {};
struct add_tail : seq<ws, sor<op_add, op_sub>, ws, must<mul_expr>> {};
struct add_expr : seq<mul_expr, star<add_tail>> {};

// cmp = add [("<=" | "<" | ">=" | ">" | "==" | "!=") add] ;   (non-associative)
struct op_le : string<'<', '='> {};
struct op_lt : one<'<'> {};
struct op_ge : string<'>', '='> {};
struct op_gt : one<'>'> {};
struct op_eq : string<'=', '='> {};
struct op_ne : string<'!', '='> {};
struct cmp_op : sor<op_le, op_lt, op_ge, op_gt, op_eq, op_ne> {};
struct chained_comparison {};
struct cmp_chain_check : seq<ws, at<cmp_op>, pegtl::raise<chained_comparison>> {};
struct cmp_tail : seq<ws, cmp_op, ws, must<add_expr>> {};
struct cmp_expr : seq<add_expr, opt<cmp_tail, opt<cmp_chain_check>>> {};

// not = "not" not | cmp ;
struct op_not : kw_not {};
struct not_prefix : seq<op_not, ws, must<nested<not_expr>>> {};
struct not_expr : sor<not_prefix, cmp_expr> {};

// and = not { "and" not } ;
struct op_and : kw_and {};
struct and_tail : seq<ws, op_and, ws, must<not_expr>> {};
struct and_expr : seq<not_expr, star<and_tail>> {};

// or = and { "or" and } ;
struct op_or : kw_or {};
struct or_tail : seq<ws, op_or, ws, must<and_expr>> {};
struct or_expr : seq<and_expr, star<or_tail>> {};

// expr = or ;
struct expr : or_expr {};

// ---- clauses and actions ---------------------------------------------------------------

// arg = [identifier "="] expr ;
struct arg_name : name {};
struct arg_value : expr {};
struct arg_named_ahead : seq<name, ws, one<'='>, not_at<one<'='>>> {};
struct arg : sor<seq<at<arg_named_ahead>, arg_name, ws, one<'='>, ws, must<arg_value>>, arg_value> {};
// args = "(" [arg {"," arg}] ")" ;
struct arg_list : seq<one<'('>, ws, opt<arg, star<ws, one<','>, ws, must<arg>>>, ws, must<rparen>> {};

// action_call = name [args] ;
struct action_name : name {};
struct action_call : seq<action_name, opt<ws, arg_list>> {};
// do = "do" action_call {"," action_call} ;
struct do_clause : seq<kw_do, ws, must<action_call>, star<ws, one<','>, ws, must<action_call>>> {};

// clause_duration = duration | name ;
struct clause_duration_value
    : sor<seq<at<duration_ahead>, duration_lit>, seq<at<one<'('>>, paren_expr>, name_ref> {};
// A number without a unit is the common mistake: point at where the unit belongs.
struct clause_duration
    : sor<clause_duration_value, seq<number_text, ws, must<unit_word>>> {};
struct for_clause : seq<kw_for, ws, must<clause_duration>> {};
struct after_clause : seq<kw_after, ws, must<clause_duration>> {};
struct until_clause : seq<kw_until, ws, must<clause_duration>> {};
struct every_clause : seq<kw_every, ws, must<clause_duration>> {};
struct cooldown_clause : seq<kw_cooldown, ws, must<clause_duration>> {};
struct severity_word : name {};
struct severity_clause : seq<kw_severity, ws, must<severity_word>> {};
struct mode_word : name {};
struct in_clause : seq<kw_in, ws, must<mode_word>> {};
// clause = "for" dur | "after" dur | "until" dur | "every" dur | "cooldown" dur
//        | "severity" name | "in" name ;
struct clause : sor<for_clause, after_clause, until_clause, every_clause, cooldown_clause,
                    severity_clause, in_clause> {};

// escalate = "escalate" "after" (number | name) "within" duration do ;
struct escalate_kw : kw_escalate {};
struct escalate_count : sor<number_lit, name_ref> {};
struct escalate_within : kw_within {};
struct escalate_do : seq<kw_do, ws, must<action_call>, star<ws, one<','>, ws, must<action_call>>> {};
struct escalate_clause
    : seq<escalate_kw, ws, must<kw_after>, ws, must<escalate_count>, ws, must<escalate_within>, ws,
          must<clause_duration>, ws, must<escalate_do>> {};

struct when_kw : kw_when {};
struct condition : expr {};
// when = "when" expr ;
struct when_clause : seq<when_kw, ws, must<condition>> {};
struct rule_when : when_clause {};
// rule_body = when {clause} do {escalate} ;
struct rule_body
    : seq<must<rule_when>, star<ws, clause>, ws, must<do_clause>, star<ws, escalate_clause>> {};

// ---- statements -------------------------------------------------------------------

// tparam = name ["=" expr] ;
struct tparam_name : name {};
struct tparam_default : expr {};
struct tparam : seq<tparam_name, opt<ws, one<'='>, ws, must<tparam_default>>> {};
struct tparam_open : one<'('> {};
struct tparams
    : seq<tparam_open, ws, opt<tparam, star<ws, one<','>, ws, must<tparam>>>, ws, must<rparen>> {};
struct rule_name : name {};
struct description : string_token {};
struct rule_colon : one<':'> {};
// rule = "rule" name [string] ["(" [tparam {"," tparam}] ")"] ":" rule_body ;
struct rule_decl : seq<kw_rule, ws, must<rule_name>, ws, opt<description, ws>, opt<tparams, ws>,
                       must<rule_colon>, ws, rule_body> {};

// anonymous_rule = when {clause} do ;
struct anon_rule : seq<at<kw_when>, rule_body> {};

// use = "use" ["std" "."] name [args] ["as" name] {when | clause} [do] ;
struct use_std : seq<string<'s', 't', 'd'>, ws, one<'.'>> {};
struct template_name : name {};
struct use_target : sor<seq<at<use_std>, use_std, ws, must<template_name>>, template_name> {};
struct use_args : arg_list {};
struct alias_name : name {};
// A `when` that begins a line starts a new anonymous rule rather than
// overriding the condition of the `use` before it:
//     use std.terminate_on_nan
//     when loss > 10 do stop          # a separate rule
struct not_line_start {
  using rule_t = not_line_start;
  using subs_t = pegtl::type_list<>;
  template <pegtl::apply_mode A, pegtl::rewind_mode M, template <typename...> class Action,
            template <typename...> class Control, typename ParseInput, typename State>
  static bool match(ParseInput& in, State& st) {
    const char* p = in.current();
    while (p > st.base && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\r')) --p;
    return p > st.base && p[-1] != '\n';
  }
};
struct when_override : seq<not_line_start, when_clause> {};
struct use_override : sor<when_override, clause> {};
struct use_decl : seq<kw_use, ws, must<use_target>, opt<ws, use_args>,
                      opt<ws, kw_as, ws, must<alias_name>>, star<ws, use_override>,
                      opt<ws, do_clause>, star<ws, escalate_clause>> {};

struct equals : seq<one<'='>, not_at<one<'='>>> {};
struct decl_name : name {};
struct decl_value : expr {};
// param = "param" name "=" expr ;
struct param_decl : seq<kw_param, ws, must<decl_name>, ws, must<equals>, ws, must<decl_value>> {};
// let = "let" name "=" expr ;
struct let_decl : seq<kw_let, ws, must<decl_name>, ws, must<equals>, ws, must<decl_value>> {};

// import = "import" string ;
struct import_path : string_token {};
struct import_decl : seq<kw_import, ws, must<import_path>> {};

// aparam = name ":" name ["=" expr] ;
struct aparam_name : name {};
struct aparam_colon : one<':'> {};
struct aparam_type : name {};
struct aparam_default : expr {};
struct aparam : seq<aparam_name, ws, must<aparam_colon>, ws, must<aparam_type>,
                    opt<ws, one<'='>, ws, must<aparam_default>>> {};
struct aparams
    : seq<one<'('>, ws, opt<aparam, star<ws, one<','>, ws, must<aparam>>>, ws, must<rparen>> {};
struct action_decl_name : name {};
// action_decl = "action" name ["(" [aparam {"," aparam}] ")"] ;
struct action_decl : seq<kw_action, ws, must<action_decl_name>, opt<ws, aparams>> {};

// alias = "alias" name "=" series_name {"," series_name} ;   series_name = name | backtick_name
struct alias_target_name : name {};
struct alias_target_backtick : backtick_name {};
struct alias_target : sor<alias_target_backtick, alias_target_name> {};
struct alias_decl : seq<kw_alias, ws, must<decl_name>, ws, must<equals>, ws, must<alias_target>,
                        star<ws, one<','>, ws, must<alias_target>>> {};

// statement = rule | anonymous_rule | use | param | let | import | action_decl | alias ;
struct statement : sor<rule_decl, anon_rule, use_decl, param_decl, let_decl, import_decl,
                       action_decl, alias_decl> {};

// One step of the file loop: the parser calls this once per statement, so that
// an error abandons only the statement it is in (see parser.cpp).
// file = ws { statement ws } eof ;
struct next_statement : seq<ws, sor<eof, must<statement>>> {};

// ---- the error message table --------------------------------------------------------

// Hand-raised errors (not tied to a grammar rule) still take their text from
// this table, through these tag types.
struct unterminated_string {};
struct unterminated_backtick {};
struct empty_backtick {};
struct unknown_escape {};
struct number_out_of_range {};
struct duplicate_clause {};
struct unexpected_character {};
struct internal_error {};

template <typename>
inline constexpr const char* error_message = nullptr;

// clang-format off
template <> inline constexpr auto error_message<statement> = "expected a statement (rule, when, use, param, let, import, action or alias)";
template <> inline constexpr auto error_message<member_name> = "expected a stat name after '.' (e.g. grad.norm)";
template <> inline constexpr auto error_message<kw_after> = "expected 'after N within DURATION do ...' after 'escalate'";
template <> inline constexpr auto error_message<escalate_count> = "expected the number of earlier firings after 'escalate after'";
template <> inline constexpr auto error_message<escalate_within> = "expected 'within DURATION' after the firing count";
template <> inline constexpr auto error_message<escalate_do> = "expected 'do' and the escalated actions";
template <> inline constexpr auto error_message<alias_target> = "expected a series name (an identifier or a `backticked` name)";
template <> inline constexpr auto error_message<rule_name> = "expected rule name after 'rule'";
template <> inline constexpr auto error_message<rule_colon> = "expected ':' after rule header";
template <> inline constexpr auto error_message<rule_when> = "expected 'when' and a condition";
template <> inline constexpr auto error_message<condition> = "expected expression";
template <> inline constexpr auto error_message<do_clause> = "expected 'do' and at least one action";
template <> inline constexpr auto error_message<action_call> = "expected action name";
template <> inline constexpr auto error_message<arg> = "expected argument";
template <> inline constexpr auto error_message<arg_value> = "expected expression";
template <> inline constexpr auto error_message<clause_duration> = "expected duration (e.g. '3 samples', '100 steps', '10m')";
template <> inline constexpr auto error_message<unit_word> = "expected duration unit (samples, steps, evals, epochs) or s/m/h suffix";
template <> inline constexpr auto error_message<severity_word> = "expected severity after 'severity'";
template <> inline constexpr auto error_message<mode_word> = "expected mode name after 'in'";
template <> inline constexpr auto error_message<tparam> = "expected parameter name";
template <> inline constexpr auto error_message<tparam_default> = "expected expression";
template <> inline constexpr auto error_message<use_target> = "expected template name after 'use'";
template <> inline constexpr auto error_message<template_name> = "expected template name after 'std.'";
template <> inline constexpr auto error_message<alias_name> = "expected name after 'as'";
template <> inline constexpr auto error_message<decl_name> = "expected name";
template <> inline constexpr auto error_message<equals> = "expected '='";
template <> inline constexpr auto error_message<decl_value> = "expected expression";
template <> inline constexpr auto error_message<import_path> = "expected a string path after 'import'";
template <> inline constexpr auto error_message<action_decl_name> = "expected action name after 'action'";
template <> inline constexpr auto error_message<aparam> = "expected parameter name";
template <> inline constexpr auto error_message<aparam_colon> = "expected ':' and a type after parameter name";
template <> inline constexpr auto error_message<aparam_type> = "expected type name (number, string, bool, duration)";
template <> inline constexpr auto error_message<aparam_default> = "expected expression";
template <> inline constexpr auto error_message<nested<expr>> = "expected expression";
template <> inline constexpr auto error_message<nested<unary_expr>> = "expected expression";
template <> inline constexpr auto error_message<nested<not_expr>> = "expected expression";
template <> inline constexpr auto error_message<call_arg> = "expected expression";
template <> inline constexpr auto error_message<unary_expr> = "expected expression";
template <> inline constexpr auto error_message<mul_expr> = "expected expression";
template <> inline constexpr auto error_message<add_expr> = "expected expression";
template <> inline constexpr auto error_message<not_expr> = "expected expression";
template <> inline constexpr auto error_message<and_expr> = "expected expression";
template <> inline constexpr auto error_message<rparen> = "expected ')'";
template <> inline constexpr auto error_message<rbracket> = "expected ']'";
template <> inline constexpr auto error_message<rbrace> = "expected '}'";
template <> inline constexpr auto error_message<matcher> = "expected label matcher (label=\"value\")";
template <> inline constexpr auto error_message<matcher_value> = "label matcher value must be a string";
template <> inline constexpr auto error_message<empty_backtick> = "empty name in backticks";
template <> inline constexpr auto error_message<unterminated_backtick> = "unterminated backtick name";
template <> inline constexpr auto error_message<too_deep> = "expression nested too deeply";
template <> inline constexpr auto error_message<chained_comparison> = "comparison operators cannot be chained; use 'and'";
template <> inline constexpr auto error_message<unterminated_string> = "unterminated string";
template <> inline constexpr auto error_message<unknown_escape> = "unknown escape sequence in string";
template <> inline constexpr auto error_message<number_out_of_range> = "number out of range";
template <> inline constexpr auto error_message<duplicate_clause> = "duplicate '{}' clause";
template <> inline constexpr auto error_message<unexpected_character> = "unexpected character '{}'";
template <> inline constexpr auto error_message<internal_error> = "internal parser error";
// clang-format on

struct error_table {
  template <typename Rule>
  static constexpr const char* message = error_message<Rule>;
  // Only explicit must<>/raise<> raise; a failing rule with a message in a
  // plain alternative still just backtracks.
  template <typename Rule>
  static constexpr bool raise_on_failure = false;
};

template <typename Rule>
using control = pegtl::must_if<error_table>::control<Rule>;

}  // namespace vigil::grammar::peg

// How the hand-written rules consume input, for pegtl::analyze (which proves
// the grammar free of infinite loops; see tests/grammar/grammar_analyze_test.cpp).
namespace tao::pegtl {
template <typename Name>
struct analyze_traits<Name, vigil::grammar::peg::string_token> : analyze_any_traits<> {};
template <typename Name>
struct analyze_traits<Name, vigil::grammar::peg::backtick_name> : analyze_any_traits<> {};
template <typename Name>
struct analyze_traits<Name, vigil::grammar::peg::not_line_start> : analyze_opt_traits<> {};
template <typename Name, typename R>
struct analyze_traits<Name, vigil::grammar::peg::nested<R>> : analyze_seq_traits<R> {};
}  // namespace tao::pegtl
