//! The parts of a condition the policy can decide without `cel`'s interpreter: comparisons of a
//! request's fields with literals (`caller.agent == 'x'`, `args.id != 7`, `size(args.text) > 64`,
//! `'admin' in caller.claims.roles`, `has(args.id)`, `tool.name in ['a', 'b']`,
//! `resource.uri.startsWith('x://')`, `args.text.matches('^[a-z]+$')`), comparisons of integer
//! arithmetic, string concatenation and the conversions `string()`/`int()`
//! (`args.a + args.b > 10`, `string(args.id) == '7'`), doubles compared with doubles
//! (`args.amount > 100.0`, `double(args.n) <= 2.5`), conditionals whose condition is decided here
//! (`(has(args.to) ? args.to : '') == 'all'`), and the macros `exists`, `all` and `exists_one`
//! over a list or a map field whose predicate is itself decided here — joined with
//! `&&`, `||` and `!`, read from the compiled expression and evaluated on the call's own JSON (a
//! `matches` pattern compiled once, with the `regex` crate `cel` uses, rather than at every
//! evaluation).
//!
//! A [`Check`] answers `Some(bool)` only where CEL's answer is that bool, and `None` — "ask the
//! interpreter" — wherever the value could be anything else: an error (a missing field, a type
//! the operator does not take, an overflow, a division by zero, a string `int()` cannot parse),
//! another type (an integer against a double, a `NaN`, a large unsigned number, a list of mixed
//! values), or a shape it does
//! not know. `&&` and `||` follow CEL's commutative logic: `false && x` is false and `true || x`
//! true whatever `x` is, error included, so one decided side can decide the whole; `exists` and
//! `all` likewise (one element whose predicate is true, resp. false, decides them), `exists_one`
//! only when every element is decided (an error on any element is its error). A rule whose check
//! says false is skipped, one whose check says true matches, and the rest are evaluated by `cel`
//! as written.

use std::borrow::Cow;
use std::cmp::Ordering;

use cel::common::ast::{CallExpr, ComprehensionExpr, Expr, IdedExpr, LiteralValue, operators};
use regex::Regex;
use serde_json::{Map, Value};

use super::{CallFacts, Subject};

/// A condition, or the part of it decided natively.
#[derive(Debug, Clone)]
pub(super) enum Check {
    /// Only the interpreter knows.
    Unknown,
    /// A literal `true` or `false`.
    Const(bool),
    /// `a && b && …`.
    And(Vec<Check>),
    /// `a || b || …`.
    Or(Vec<Check>),
    /// `!a`.
    Not(Box<Check>),
    /// A field that is a bool.
    Truthy(Path),
    /// `field == literal` (`equal`) or `field != literal`.
    Equals {
        path: Path,
        literal: Literal,
        equal: bool,
    },
    /// `has(field.name)`.
    Has { path: Path, name: String },
    /// `'text' in field` (a list of strings, or a map's keys).
    Contains { path: Path, text: String },
    /// `field in ['a', 'b']`.
    OneOf { path: Path, texts: Vec<String> },
    /// `size(field) <op> n` (`size` true) or `field <op> n`.
    Compare {
        path: Path,
        size: bool,
        op: Op,
        n: i64,
    },
    /// `field.startsWith('x')`, `endsWith`, `contains`, `matches` on a string field.
    Text { path: Path, method: Method },
    /// Any other comparison of two terms (`args.a + 1 > args.b`, `string(args.id) == 'x'`):
    /// decided when both are integers, both strings, or (for `==`, `!=`) both bools.
    Relate { left: Term, op: Op, right: Term },
    /// `range.exists(x, pred)`, `range.all(x, pred)` or `range.exists_one(x, pred)` over a list's
    /// elements or a map's keys, `x` bound to each (the innermost [`Root::Bound`]).
    Each {
        quantifier: Quantifier,
        range: Term,
        pred: Box<Check>,
    },
}

/// Which comprehension macro.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Quantifier {
    Exists,
    All,
    ExistsOne,
}

/// A value computed from the request: a field, a literal, a size, a conversion or integer
/// arithmetic (string concatenation for `+` on two strings).
#[derive(Debug, Clone)]
pub(super) enum Term {
    Path(Path),
    Literal(Literal),
    Size(Box<Term>),
    /// `string(x)`.
    String(Box<Term>),
    /// `int(x)`.
    Int(Box<Term>),
    /// `double(x)`.
    Double(Box<Term>),
    /// `c ? a : b`, its condition one the policy decides.
    Cond(Box<Check>, Box<Term>, Box<Term>),
    /// `-x`.
    Negate(Box<Term>),
    Arith(Arith, Box<Term>, Box<Term>),
}

/// A binary arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// A string method with a literal argument.
#[derive(Debug, Clone)]
pub(super) enum Method {
    StartsWith(String),
    EndsWith(String),
    Contains(String),
    Matches(Regex),
}

impl Method {
    /// `target.name(argument)`, when `argument` is a string literal (and, for `matches`, a
    /// pattern that compiles: one that does not is the interpreter's error to report).
    fn of(call: &CallExpr) -> Option<Method> {
        let [argument] = call.args.as_slice() else {
            return None;
        };
        let Some(Literal::Text(text)) = literal(argument) else {
            return None;
        };
        Some(match call.func_name.as_str() {
            "startsWith" => Method::StartsWith(text),
            "endsWith" => Method::EndsWith(text),
            "contains" => Method::Contains(text),
            "matches" => Method::Matches(Regex::new(&text).ok()?),
            _ => return None,
        })
    }

    fn holds(&self, text: &str) -> bool {
        match self {
            Method::StartsWith(x) => text.starts_with(x.as_str()),
            Method::EndsWith(x) => text.ends_with(x.as_str()),
            Method::Contains(x) => text.contains(x.as_str()),
            Method::Matches(re) => re.is_match(text),
        }
    }
}

/// A request variable, or a comprehension's variable, and the fields selected on it
/// (`caller.claims.roles`, `x.name`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Path {
    root: Root,
    fields: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Root {
    Caller,
    Kind,
    Tool,
    Resource,
    Prompt,
    Args,
    /// The variable of the comprehension this many levels out (0: the innermost).
    Bound(usize),
}

/// Names a comprehension's variable may not take here: a request variable or a type the
/// standard library names (the interpreter resolves those itself).
const RESERVED: [&str; 18] = [
    "caller",
    "result",
    "kind",
    "tool",
    "resource",
    "prompt",
    "args",
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "optional_type",
    "string",
    "type",
    "uint",
];

/// A literal a field is compared with.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Literal {
    Text(String),
    Int(i64),
    Bool(bool),
    /// Compared only as a term ([`Check::Relate`]).
    Double(f64),
}

/// An ordering comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    Less,
    LessEq,
    Greater,
    GreaterEq,
    Eq,
    NotEq,
}

impl Op {
    fn from_call(name: &str) -> Option<Op> {
        Some(match name {
            operators::LESS => Op::Less,
            operators::LESS_EQUALS => Op::LessEq,
            operators::GREATER => Op::Greater,
            operators::GREATER_EQUALS => Op::GreaterEq,
            operators::EQUALS => Op::Eq,
            operators::NOT_EQUALS => Op::NotEq,
            _ => return None,
        })
    }

    /// The same comparison with its sides swapped (`1 < x` is `x > 1`).
    fn flipped(self) -> Op {
        match self {
            Op::Less => Op::Greater,
            Op::LessEq => Op::GreaterEq,
            Op::Greater => Op::Less,
            Op::GreaterEq => Op::LessEq,
            other => other,
        }
    }

    fn holds<T: Ord>(self, a: T, b: T) -> bool {
        self.holds_partial(a.cmp(&b))
    }

    /// Whether `order` (of the left side against the right) satisfies the comparison.
    fn holds_partial(self, order: Ordering) -> bool {
        match self {
            Op::Less => order == Ordering::Less,
            Op::LessEq => order != Ordering::Greater,
            Op::Greater => order == Ordering::Greater,
            Op::GreaterEq => order != Ordering::Less,
            Op::Eq => order == Ordering::Equal,
            Op::NotEq => order != Ordering::Equal,
        }
    }
}

/// The comprehension variables in scope while compiling, innermost last.
type Names<'n> = &'n [String];

/// What a check is evaluated on: the call, and the elements the enclosing comprehensions' variables
/// are bound to (innermost first).
#[derive(Clone, Copy)]
struct Scope<'s, 'a> {
    facts: &'s CallFacts<'a>,
    item: Option<(Node<'a>, &'s Scope<'s, 'a>)>,
}

impl<'a> Scope<'_, 'a> {
    /// The element bound `depth` comprehensions out.
    fn bound(&self, depth: usize) -> Option<Node<'a>> {
        let mut scope = self;
        for _ in 0..depth {
            scope = scope.item?.1;
        }
        scope.item.map(|(node, _)| node)
    }
}

impl Check {
    /// The check of a compiled condition (`Unknown` for what it cannot decide).
    pub(super) fn compile(expr: &IdedExpr) -> Check {
        Check::of(expr, &[])
    }

    fn of(expr: &IdedExpr, names: Names<'_>) -> Check {
        match &expr.expr {
            Expr::Literal(LiteralValue::Boolean(b)) => Check::Const(*b.inner()),
            Expr::Select(select) if select.test => match path(&select.operand, names) {
                Some(path) => Check::Has {
                    path,
                    name: select.field.clone(),
                },
                None => Check::Unknown,
            },
            Expr::Select(_) | Expr::Ident(_) => {
                path(expr, names).map_or(Check::Unknown, Check::Truthy)
            }
            Expr::Call(call) if call.target.is_some() => {
                let path = call.target.as_deref().and_then(|t| path(t, names));
                match (path, Method::of(call)) {
                    (Some(path), Some(method)) => Check::Text { path, method },
                    _ => Check::Unknown,
                }
            }
            Expr::Call(call) => match (call.func_name.as_str(), call.args.as_slice()) {
                (operators::LOGICAL_AND, [a, b]) => joined(a, b, true, names),
                (operators::LOGICAL_OR, [a, b]) => joined(a, b, false, names),
                (operators::LOGICAL_NOT, [a]) => match Check::of(a, names) {
                    Check::Unknown => Check::Unknown,
                    check => Check::Not(Box::new(check)),
                },
                (operators::IN, [a, b]) => membership(a, b, names),
                (name, [a, b]) => comparison(name, a, b, names),
                _ => Check::Unknown,
            },
            Expr::Comprehension(c) => comprehension(c, names),
            _ => Check::Unknown,
        }
    }

    /// Whether the whole condition is unknown (nothing to try before the interpreter).
    pub(super) fn is_unknown(&self) -> bool {
        matches!(self, Check::Unknown)
    }

    /// CEL's value of the condition for `facts`, where it is decided here.
    pub(super) fn eval(&self, facts: &CallFacts<'_>) -> Option<bool> {
        self.holds(&Scope { facts, item: None })
    }

    fn holds<'a>(&'a self, scope: &Scope<'_, 'a>) -> Option<bool> {
        match self {
            Check::Unknown => None,
            Check::Const(b) => Some(*b),
            Check::And(all) => three_valued(all, scope, false),
            Check::Or(any) => three_valued(any, scope, true),
            Check::Not(check) => check.holds(scope).map(|b| !b),
            Check::Truthy(path) => path.find(scope)?.bool(),
            Check::Equals {
                path,
                literal,
                equal,
            } => {
                let node = path.find(scope)?;
                let same = match literal {
                    Literal::Text(t) => node.text()? == t,
                    Literal::Int(i) => node.int()? == *i,
                    Literal::Bool(b) => node.bool()? == *b,
                    // Never built: a double literal is compared as a term.
                    Literal::Double(_) => return None,
                };
                Some(same == *equal)
            }
            Check::Has { path, name } => path.find(scope)?.has(name),
            Check::Contains { path, text } => path.find(scope)?.contains(text),
            Check::OneOf { path, texts } => {
                let text = path.find(scope)?.text()?;
                Some(texts.iter().any(|t| t == text))
            }
            Check::Compare { path, size, op, n } => {
                let node = path.find(scope)?;
                let value = if *size { node.size()? } else { node.int()? };
                Some(op.holds(value, *n))
            }
            Check::Text { path, method } => Some(method.holds(path.find(scope)?.text()?)),
            Check::Relate { left, op, right } => {
                relate(*op, &left.value(scope)?, &right.value(scope)?)
            }
            Check::Each {
                quantifier,
                range,
                pred,
            } => match range.value(scope)? {
                Got::Node(Node::Json(Value::Array(items))) => {
                    quantify(*quantifier, items.iter().map(Node::Json), pred, scope)
                }
                Got::Node(Node::Json(Value::Object(map)) | Node::Object(map)) => {
                    let keys = map.keys().map(|k| Node::Text(k.as_str()));
                    quantify(*quantifier, keys, pred, scope)
                }
                Got::Node(Node::Empty) => quantify(*quantifier, std::iter::empty(), pred, scope),
                _ => None,
            },
        }
    }
}

/// `a && b` (`and`) or `a || b`, flattened; unknown when both sides are.
fn joined(a: &IdedExpr, b: &IdedExpr, and: bool, names: Names<'_>) -> Check {
    let mut parts = Vec::new();
    for side in [a, b] {
        match (Check::of(side, names), and) {
            (Check::And(inner), true) | (Check::Or(inner), false) => parts.extend(inner),
            (check, _) => parts.push(check),
        }
    }
    if parts.iter().all(Check::is_unknown) {
        Check::Unknown
    } else if and {
        Check::And(parts)
    } else {
        Check::Or(parts)
    }
}

/// CEL's `&&` (`short` false: any false decides) or `||` (`short` true: any true decides): the
/// short-circuiting value if any part has it, the other value if all have it, else unknown.
fn three_valued<'a>(parts: &'a [Check], scope: &Scope<'_, 'a>, short: bool) -> Option<bool> {
    let mut decided = true;
    for part in parts {
        match part.holds(scope) {
            Some(b) if b == short => return Some(short),
            Some(_) => {}
            None => decided = false,
        }
    }
    decided.then_some(!short)
}

/// `exists`, `all` or `exists_one` of `pred` over `items`, as `cel` folds them: `exists` is true
/// once an element's predicate is true (whatever the others gave, errors included) and false
/// only when all are false; `all` the same with false; `exists_one` fails on the first error, so
/// it is decided only when every element is.
fn quantify<'a>(
    quantifier: Quantifier,
    items: impl Iterator<Item = Node<'a>>,
    pred: &'a Check,
    scope: &Scope<'_, 'a>,
) -> Option<bool> {
    let (mut count, mut decided) = (0usize, true);
    for item in items {
        let inner = Scope {
            facts: scope.facts,
            item: Some((item, scope)),
        };
        match (quantifier, pred.holds(&inner)) {
            (Quantifier::Exists, Some(true)) => return Some(true),
            (Quantifier::All, Some(false)) => return Some(false),
            (Quantifier::ExistsOne, None) => return None,
            (Quantifier::ExistsOne, Some(true)) => count += 1,
            (_, None) => decided = false,
            _ => {}
        }
    }
    match quantifier {
        Quantifier::Exists => decided.then_some(false),
        Quantifier::All => decided.then_some(true),
        Quantifier::ExistsOne => Some(count == 1),
    }
}

/// A comprehension the parser made of `range.exists(x, pred)`, `all` or `exists_one` (its
/// exact shape: the other macros, and anything else, are the interpreter's).
fn comprehension(c: &ComprehensionExpr, names: Names<'_>) -> Check {
    let Some((quantifier, pred)) = macro_of(c) else {
        return Check::Unknown;
    };
    if RESERVED.contains(&c.iter_var.as_str()) {
        return Check::Unknown;
    }
    let Some(range) = Term::of(&c.iter_range, names) else {
        return Check::Unknown;
    };
    let mut inner = names.to_vec();
    inner.push(c.iter_var.clone());
    match Check::of(pred, &inner) {
        Check::Unknown => Check::Unknown,
        pred => Check::Each {
            quantifier,
            range,
            pred: Box::new(pred),
        },
    }
}

/// Which macro `c` expands, and its predicate.
fn macro_of(c: &ComprehensionExpr) -> Option<(Quantifier, &IdedExpr)> {
    if c.iter_var2.is_some() {
        return None;
    }
    let accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
    let Expr::Call(step) = &c.loop_step.expr else {
        return None;
    };
    let init = &c.accu_init.expr;
    let cond = args_of(&c.loop_cond, operators::NOT_STRICTLY_FALSE);
    match (step.func_name.as_str(), step.args.as_slice()) {
        (operators::LOGICAL_OR, [acc, pred])
            if accu(acc)
                && accu(&c.result)
                && matches!(init, Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner())
                && matches!(cond, Some([not])
                    if matches!(args_of(not, operators::LOGICAL_NOT), Some([x]) if accu(x))) =>
        {
            Some((Quantifier::Exists, pred))
        }
        (operators::LOGICAL_AND, [acc, pred])
            if accu(acc)
                && accu(&c.result)
                && matches!(init, Expr::Literal(LiteralValue::Boolean(b)) if *b.inner())
                && matches!(cond, Some([x]) if accu(x)) =>
        {
            Some((Quantifier::All, pred))
        }
        (operators::CONDITIONAL, [pred, plus, acc])
            if accu(acc)
                && is_int(&c.accu_init, 0)
                && matches!(&c.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if *b.inner())
                && matches!(args_of(plus, operators::ADD), Some([x, one]) if accu(x) && is_int(one, 1))
                && matches!(args_of(&c.result, operators::EQUALS),
                    Some([x, one]) if accu(x) && is_int(one, 1)) =>
        {
            Some((Quantifier::ExistsOne, pred))
        }
        _ => None,
    }
}

/// The arguments of `e` when it calls the global function `name`.
fn args_of<'e>(e: &'e IdedExpr, name: &str) -> Option<&'e [IdedExpr]> {
    match &e.expr {
        Expr::Call(call) if call.target.is_none() && call.func_name == name => Some(&call.args),
        _ => None,
    }
}

fn is_int(e: &IdedExpr, n: i64) -> bool {
    matches!(&e.expr, Expr::Literal(LiteralValue::Int(i)) if *i.inner() == n)
}

/// `'text' in field` or `field in ['a', …]`.
fn membership(a: &IdedExpr, b: &IdedExpr, names: Names<'_>) -> Check {
    if let (Some(Literal::Text(text)), Some(path)) = (literal(a), path(b, names)) {
        return Check::Contains { path, text };
    }
    let (Some(path), Expr::List(list)) = (path(a, names), &b.expr) else {
        return Check::Unknown;
    };
    let texts: Option<Vec<String>> = list
        .elements
        .iter()
        .map(|e| match literal(e) {
            Some(Literal::Text(t)) => Some(t),
            _ => None,
        })
        .collect();
    match texts {
        Some(texts) if list.optional_indices.is_empty() => Check::OneOf { path, texts },
        _ => Check::Unknown,
    }
}

/// `field == literal`, `field != literal`, `size(field) < n`, `n <= field`, … and, for any other
/// pair of terms, [`Check::Relate`].
fn comparison(name: &str, a: &IdedExpr, b: &IdedExpr, names: Names<'_>) -> Check {
    let Some(op) = Op::from_call(name) else {
        return Check::Unknown;
    };
    let relate = || match (Term::of(a, names), Term::of(b, names)) {
        (Some(left), Some(right)) => Check::Relate { left, op, right },
        _ => Check::Unknown,
    };
    let (side, lit, op) = match (literal(a), literal(b)) {
        (Some(Literal::Double(_)), _) | (_, Some(Literal::Double(_))) => return relate(),
        (None, Some(lit)) => (a, lit, op),
        (Some(lit), None) => (b, lit, op.flipped()),
        _ => return relate(),
    };
    if let Some(path) = sized(side, names) {
        return match lit {
            Literal::Int(n) => Check::Compare {
                path,
                size: true,
                op,
                n,
            },
            _ => Check::Unknown,
        };
    }
    let Some(path) = path(side, names) else {
        return relate();
    };
    match (op, lit) {
        (Op::Eq | Op::NotEq, literal) => Check::Equals {
            path,
            literal,
            equal: op == Op::Eq,
        },
        (op, Literal::Int(n)) => Check::Compare {
            path,
            size: false,
            op,
            n,
        },
        _ => relate(),
    }
}

/// The field of `size(field)` or `field.size()`.
fn sized(expr: &IdedExpr, names: Names<'_>) -> Option<Path> {
    let Expr::Call(call) = &expr.expr else {
        return None;
    };
    match (call.func_name.as_str(), &call.target, call.args.as_slice()) {
        ("size", None, [arg]) => path(arg, names),
        ("size", Some(target), []) => path(target, names),
        _ => None,
    }
}

fn literal(expr: &IdedExpr) -> Option<Literal> {
    match &expr.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(Literal::Text(s.inner().to_owned())),
        Expr::Literal(LiteralValue::Int(i)) => Some(Literal::Int(*i.inner())),
        Expr::Literal(LiteralValue::Boolean(b)) => Some(Literal::Bool(*b.inner())),
        Expr::Literal(LiteralValue::Double(d)) => Some(Literal::Double(*d.inner())),
        _ => None,
    }
}

/// The variable and fields `expr` selects (`args.a.b`, `x.name`), if that is all it does; a
/// comprehension's variable hides a request variable of its name.
fn path(expr: &IdedExpr, names: Names<'_>) -> Option<Path> {
    let mut fields = Vec::new();
    let mut at = expr;
    loop {
        match &at.expr {
            Expr::Select(select) if !select.test => {
                fields.push(select.field.clone());
                at = &select.operand;
            }
            Expr::Ident(name) => {
                let bound = names.iter().rev().position(|n| n == name);
                let root = match name.as_str() {
                    _ if bound.is_some() => Root::Bound(bound.unwrap_or_default()),
                    "caller" => Root::Caller,
                    "kind" => Root::Kind,
                    "tool" => Root::Tool,
                    "resource" => Root::Resource,
                    "prompt" => Root::Prompt,
                    "args" => Root::Args,
                    _ => return None,
                };
                fields.reverse();
                return Some(Path { root, fields });
            }
            _ => return None,
        }
    }
}

impl Term {
    /// The term `expr` computes, if it is one.
    fn of(expr: &IdedExpr, names: Names<'_>) -> Option<Term> {
        if let Some(lit) = literal(expr) {
            return Some(Term::Literal(lit));
        }
        if let Some(path) = path(expr, names) {
            return Some(Term::Path(path));
        }
        let Expr::Call(call) = &expr.expr else {
            return None;
        };
        let term = |e: &IdedExpr| Term::of(e, names).map(Box::new);
        let target = call.target.as_deref();
        Some(
            match (call.func_name.as_str(), target, call.args.as_slice()) {
                ("size", None, [a]) | ("size", Some(a), []) => Term::Size(term(a)?),
                ("string", None, [a]) => Term::String(term(a)?),
                ("int", None, [a]) => Term::Int(term(a)?),
                ("double", None, [a]) => Term::Double(term(a)?),
                (operators::CONDITIONAL, None, [c, a, b]) => {
                    let check = Check::of(c, names);
                    if check.is_unknown() {
                        return None;
                    }
                    Term::Cond(Box::new(check), term(a)?, term(b)?)
                }
                (operators::NEGATE, None, [a]) => Term::Negate(term(a)?),
                (name, None, [a, b]) => {
                    let op = match name {
                        operators::ADD => Arith::Add,
                        operators::SUBSTRACT => Arith::Sub,
                        operators::MULTIPLY => Arith::Mul,
                        operators::DIVIDE => Arith::Div,
                        operators::MODULO => Arith::Rem,
                        _ => return None,
                    };
                    Term::Arith(op, term(a)?, term(b)?)
                }
                _ => return None,
            },
        )
    }

    /// The term's value for `scope`; none where CEL's would be an error or is not one `Got`
    /// holds exactly.
    fn value<'a>(&'a self, scope: &Scope<'_, 'a>) -> Option<Got<'a>> {
        Some(match self {
            Term::Path(path) => Got::Node(path.find(scope)?),
            Term::Literal(Literal::Text(t)) => Got::Text(Cow::Borrowed(t)),
            Term::Literal(Literal::Int(i)) => Got::Int(*i),
            Term::Literal(Literal::Bool(b)) => Got::Bool(*b),
            Term::Literal(Literal::Double(d)) => Got::Double(*d),
            Term::Size(t) => Got::Int(t.value(scope)?.size()?),
            Term::String(t) => Got::Text(t.value(scope)?.string()?),
            Term::Int(t) => Got::Int(t.value(scope)?.to_int()?),
            Term::Double(t) => Got::Double(t.value(scope)?.to_double()?),
            // As CEL: only the branch the condition chooses is evaluated.
            Term::Cond(c, a, b) => match c.holds(scope)? {
                true => a.value(scope)?,
                false => b.value(scope)?,
            },
            Term::Negate(t) => Got::Int(t.value(scope)?.int()?.checked_neg()?),
            Term::Arith(op, a, b) => arithmetic(*op, a.value(scope)?, b.value(scope)?)?,
        })
    }
}

/// `a op b` on two integers (checked: overflow and division by zero are errors in CEL) or, for
/// `+`, two strings.
fn arithmetic<'a>(op: Arith, a: Got<'a>, b: Got<'a>) -> Option<Got<'a>> {
    if let (Some(x), Some(y)) = (a.int(), b.int()) {
        return Some(Got::Int(match op {
            Arith::Add => x.checked_add(y)?,
            Arith::Sub => x.checked_sub(y)?,
            Arith::Mul => x.checked_mul(y)?,
            Arith::Div => x.checked_div(y)?,
            Arith::Rem => x.checked_rem(y)?,
        }));
    }
    match (op, a.text(), b.text()) {
        (Arith::Add, Some(x), Some(y)) => Some(Got::Text(Cow::Owned(format!("{x}{y}")))),
        _ => None,
    }
}

/// `a op b` where both are integers, both doubles (neither `NaN`), both strings (compared as
/// `cel` does, byte by byte), or both bools compared for equality.
fn relate(op: Op, a: &Got<'_>, b: &Got<'_>) -> Option<bool> {
    if let (Some(x), Some(y)) = (a.int(), b.int()) {
        return Some(op.holds(x, y));
    }
    if let (Some(x), Some(y)) = (a.double(), b.double()) {
        return Some(op.holds_partial(x.partial_cmp(&y)?));
    }
    if let (Some(x), Some(y)) = (a.text(), b.text()) {
        return Some(op.holds(x, y));
    }
    match (op, a.bool(), b.bool()) {
        (Op::Eq, Some(x), Some(y)) => Some(x == y),
        (Op::NotEq, Some(x), Some(y)) => Some(x != y),
        _ => None,
    }
}

/// A term's value.
#[derive(Debug)]
enum Got<'a> {
    Node(Node<'a>),
    Int(i64),
    Double(f64),
    Text(Cow<'a, str>),
    Bool(bool),
}

impl<'a> Got<'a> {
    fn int(&self) -> Option<i64> {
        match self {
            Got::Int(i) => Some(*i),
            Got::Node(node) => node.int(),
            _ => None,
        }
    }

    /// A double as CEL holds it (a JSON number that is no integer); not an integer.
    fn double(&self) -> Option<f64> {
        match self {
            Got::Double(d) => Some(*d),
            Got::Node(Node::Json(Value::Number(n))) if !n.is_i64() && !n.is_u64() => n.as_f64(),
            _ => None,
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            Got::Text(t) => Some(t),
            Got::Node(node) => node.text(),
            _ => None,
        }
    }

    fn bool(&self) -> Option<bool> {
        match self {
            Got::Bool(b) => Some(*b),
            Got::Node(node) => node.bool(),
            _ => None,
        }
    }

    fn size(&self) -> Option<i64> {
        match self {
            Got::Text(t) => i64::try_from(t.chars().count()).ok(),
            Got::Node(node) => node.size(),
            _ => None,
        }
    }

    /// `string(x)`: a string as it is; an integer (signed or not) in decimal; a bool as
    /// `true`/`false`. A double's formatting is the interpreter's.
    fn string(self) -> Option<Cow<'a, str>> {
        Some(match self {
            Got::Text(t) => t,
            Got::Int(i) => Cow::Owned(i.to_string()),
            Got::Bool(b) => Cow::Borrowed(if b { "true" } else { "false" }),
            Got::Node(Node::Text(t)) => Cow::Borrowed(t),
            Got::Node(Node::Json(Value::String(t))) => Cow::Borrowed(t),
            Got::Node(Node::Json(Value::Bool(b))) => Got::Bool(*b).string()?,
            Got::Node(Node::Json(Value::Number(n))) if n.is_i64() || n.is_u64() => {
                Cow::Owned(n.to_string())
            }
            Got::Node(_) | Got::Double(_) => return None,
        })
    }

    /// `double(x)`: a double as it is; an integer as the nearest double (as `cel` converts it).
    /// A string's parsing and an unsigned integer are the interpreter's.
    fn to_double(&self) -> Option<f64> {
        self.double().or_else(|| Some(self.int()? as f64))
    }

    /// `int(x)`: an integer as it is; a string parsed as `cel` parses it.
    fn to_int(&self) -> Option<i64> {
        self.int().or_else(|| self.text()?.parse().ok())
    }
}

/// A value on the way down a path, as the CEL context would hold it.
#[derive(Debug, Clone, Copy)]
enum Node<'a> {
    /// `caller`, `tool`, `resource` or `prompt` (maps of fixed fields).
    Var(Root),
    Text(&'a str),
    Json(&'a Value),
    Object(&'a Map<String, Value>),
    /// An empty map (no claims; the annotations of what is not a tool).
    Empty,
}

impl Path {
    /// The value at the path for `scope`; none where CEL's selection would fail.
    fn find<'a>(&self, scope: &Scope<'_, 'a>) -> Option<Node<'a>> {
        let facts = scope.facts;
        let mut node = match self.root {
            Root::Kind => Node::Text(facts.subject.kind()),
            Root::Args => Node::Json(facts.args),
            Root::Bound(depth) => scope.bound(depth)?,
            root => Node::Var(root),
        };
        for field in &self.fields {
            node = node.select(field, facts)?;
        }
        Some(node)
    }
}

impl<'a> Node<'a> {
    /// `node.field`, as `vars` builds the variables (`subject_vals`).
    fn select(self, field: &str, facts: &CallFacts<'a>) -> Option<Node<'a>> {
        let (subject, plugin) = (facts.subject, facts.plugin);
        let of = |mine: bool, text: &'a str| Node::Text(if mine { text } else { "" });
        match self {
            Node::Var(Root::Caller) => match field {
                "user" => Some(Node::Text(facts.user.unwrap_or(""))),
                "agent" => Some(Node::Text(facts.agent.unwrap_or(""))),
                "claims" => Some(facts.claims.map_or(Node::Empty, Node::Object)),
                _ => None,
            },
            Node::Var(Root::Tool) => match (field, subject) {
                ("name", Subject::Tool { name, .. }) => Some(Node::Text(name)),
                ("source_name", Subject::Tool { source_name, .. }) => Some(Node::Text(source_name)),
                ("source_name", _) => Some(Node::Text("")),
                ("plugin", _) => Some(of(matches!(subject, Subject::Tool { .. }), plugin)),
                ("annotations", Subject::Tool { annotations, .. }) => Some(Node::Json(annotations)),
                ("name", _) => Some(Node::Text("")),
                ("annotations", _) => Some(Node::Empty),
                _ => None,
            },
            Node::Var(Root::Resource) => match (field, subject) {
                ("uri", Subject::Resource { uri, .. }) => Some(Node::Text(uri)),
                ("raw", Subject::Resource { raw, .. }) => Some(Node::Text(raw)),
                ("uri" | "raw", _) => Some(Node::Text("")),
                ("plugin", _) => Some(of(matches!(subject, Subject::Resource { .. }), plugin)),
                _ => None,
            },
            Node::Var(Root::Prompt) => match (field, subject) {
                ("name", Subject::Prompt { name }) => Some(Node::Text(name)),
                ("name", _) => Some(Node::Text("")),
                ("plugin", _) => Some(of(matches!(subject, Subject::Prompt { .. }), plugin)),
                _ => None,
            },
            Node::Json(Value::Object(map)) | Node::Object(map) => map.get(field).map(Node::Json),
            _ => None,
        }
    }

    fn text(self) -> Option<&'a str> {
        match self {
            Node::Text(t) => Some(t),
            Node::Json(Value::String(t)) => Some(t),
            _ => None,
        }
    }

    /// An integer as CEL holds it: a JSON number that fits an `i64` (larger ones are `uint`s,
    /// fractions `double`s).
    fn int(self) -> Option<i64> {
        match self {
            Node::Json(Value::Number(n)) => n.as_i64(),
            _ => None,
        }
    }

    fn bool(self) -> Option<bool> {
        match self {
            Node::Json(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// `size()`: a string's code points, a list's or a map's entries.
    fn size(self) -> Option<i64> {
        let n = match self {
            Node::Text(t) => t.chars().count(),
            Node::Json(Value::String(t)) => t.chars().count(),
            Node::Json(Value::Array(items)) => items.len(),
            Node::Json(Value::Object(map)) | Node::Object(map) => map.len(),
            Node::Empty => 0,
            _ => return None,
        };
        i64::try_from(n).ok()
    }

    /// `has(node.name)` on a map.
    fn has(self, name: &str) -> Option<bool> {
        match self {
            Node::Json(Value::Object(map)) | Node::Object(map) => Some(map.contains_key(name)),
            Node::Empty => Some(false),
            _ => None,
        }
    }

    /// `'text' in node`: a map's key, or an element of a list of strings only.
    fn contains(self, text: &str) -> Option<bool> {
        match self {
            Node::Json(Value::Object(map)) | Node::Object(map) => Some(map.contains_key(text)),
            Node::Empty => Some(false),
            Node::Json(Value::Array(items)) => items
                .iter()
                .try_fold(false, |found, item| Some(found || item.as_str()? == text)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CallFacts, Policy, Subject};
    use cel::Value as CelValue;
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    /// Conditions of every shape a check decides, over fields and literals that collide often.
    const WHENS: &[&str] = &[
        "args.id == 3",
        "args.id != 3 && args.n < 2",
        "size(args.text) >= 1 || size(args.items) == 2",
        "'a' in args.items",
        "args.text in ['a', 'x']",
        "has(args.m.a) && args.m.a == 'x'",
        "args.flag || !args.flag",
        "!(args.n > 2) && caller.user == 'ana'",
        "'admin' in caller.claims.roles || caller.agent == 'b'",
        "has(caller.claims.sub) && caller.claims.sub == caller.user",
        "tool.annotations.readOnlyHint == true",
        "has(tool.annotations.x)",
        "resource.uri == 'a' || prompt.name == 'a' || tool.name == 'a'",
        "resource.raw == 'ana' || resource.raw.startsWith('b') && resource.uri != resource.raw",
        "kind == 'tool' && size(tool.name) < 2",
        "3 <= args.n && args.n <= 3",
        "2 > args.id || 1 >= args.n",
        "args.text == true || args.id == 'a'",
        "'k' in args.m && size(args.m) > 1",
        "size(caller.claims) == 0 || tool.plugin == 'p'",
        "size(args.text) == 1",
        "args.text.startsWith('a') || args.text.endsWith('x')",
        "args.text.contains('dm') && !args.text.matches('^a')",
        "resource.uri.startsWith('a') || args.m.contains('a') || args.text.matches('n+')",
        "'x' == args.text || args.text.matches('[')",
        "string(args.id) == '3' || string(args.n) == 'a' || string(args.flag) == 'true'",
        "int(args.text) == args.n || int('4') - args.id < args.n || int(args.id) == 3",
        "args.id + args.n > 4 && args.id * args.n <= 6",
        "args.id - args.n == 1 || args.id / args.n == 2 || args.id % args.n == 1",
        "-args.id < -2 || size(args.items) * 2 > 4",
        "args.text + args.text == 'aa' || size(args.text + 'x') > 1",
        "args.text < 'b' || args.text >= 'x'",
        "args.items.exists(x, x == 'a' || x > 2)",
        "args.items.all(x, x.startsWith('a'))",
        "args.items.exists_one(x, x == 3)",
        "args.m.exists(k, k == 'a') || args.m.all(k, k in ['a', 'x'])",
        "args.items.exists(x, x.a == 1 || has(x.k))",
        "args.items.exists(x, args.items.all(y, x == y))",
        "caller.claims.roles.exists(r, r == caller.user) || args.m.exists_one(k, size(k) == 1)",
        "args.id * 4611686018427387904 > 0",
        "args.id / args.n == 0",
        "(args.id - 3) % 2 == -1",
        "-(args.id - 9223372036854775807 - 1) > 0",
        "string(args.id) == '1'",
        "int(args.text) == 1",
        "args.id != args.n",
        "args.n <= 3.0",
        "double(args.id) > 1.5 && args.n != 7.5",
        "double(args.n) == 3.0 || args.items.exists(x, x < 2.5)",
        "(args.id > 2 ? args.text : args.n) == 'a'",
        "(has(args.m.a) ? args.m.a : 0) == 1",
    ];

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            1 => Just(Value::Null),
            1 => any::<bool>().prop_map(Value::from),
            4 => (0i64..5).prop_map(Value::from),
            3 => prop::sample::select(&["", "a", "x", "é", "admin", "ana", "k", "1", "1.5"][..])
                .prop_map(Value::from),
            1 => prop::sample::select(&[1.0, 3.0, 7.5][..]).prop_map(Value::from),
            1 => Just(Value::from(u64::MAX)),
        ];
        leaf.prop_recursive(2, 12, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(&["a", "k", "x"][..]).prop_map(str::to_owned),
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn object(keys: &'static [&'static str]) -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::btree_map(
            prop::sample::select(keys).prop_map(str::to_owned),
            value(),
            0..6,
        )
        .prop_map(|m| m.into_iter().collect())
    }

    fn name() -> impl Strategy<Value = String> {
        prop::sample::select(&["", "a", "ana", "b"][..]).prop_map(str::to_owned)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None,
                                            ..ProptestConfig::default() })]
        #[test]
        fn a_check_answers_only_what_the_interpreter_answers(
            args in object(&["text", "id", "n", "items", "flag", "m"]),
            claims in prop::option::of(object(&["roles", "sub"])),
            (user, agent) in (prop::option::of(name()), prop::option::of(name())),
            (kind, subject_name, annotations) in (0..3u8, name(), value()),
            raw in name(),
        ) {
            let args = Value::Object(args);
            let subject = match kind {
                0 => Subject::Tool { name: &subject_name, source_name: &subject_name, annotations: &annotations },
                1 => Subject::Resource { uri: &subject_name, raw: &raw },
                _ => Subject::Prompt { name: &subject_name },
            };
            let facts = CallFacts {
                user: user.as_deref(),
                agent: agent.as_deref(),
                claims: claims.as_ref(),
                subject,
                plugin: "p",
                args: &args,
            };
            for when in WHENS {
                let rules = json!({"rules": [{"name": "r", "when": when, "outcome": "deny",
                                              "on": ["tools", "resources", "prompts"]}]});
                let policy = Policy::compile(&serde_json::from_value(rules).expect("settings"))
                    .expect("compiles");
                let check = policy.rules()[0].check.as_ref().expect("a check");
                if let Some(b) = check.eval(&facts) {
                    let program = crate::policy::stdlib().compile(when).expect("compiles");
                    let vars = policy.vars(&facts, None);
                    let cel = program.execute(&policy.context(&vars));
                    prop_assert_eq!(cel, Ok(CelValue::Bool(b)), "{} on {:?}", when, facts);
                }
            }
        }
    }
}
