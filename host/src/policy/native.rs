//! The parts of a condition the policy can decide without `cel`'s interpreter: comparisons of a
//! request's fields with literals (`caller.agent == 'x'`, `args.id != 7`, `size(args.text) > 64`,
//! `'admin' in caller.claims.roles`, `has(args.id)`, `tool.name in ['a', 'b']`,
//! `resource.uri.startsWith('x://')`, `args.text.matches('^[a-z]+$')`) joined with `&&`, `||` and
//! `!`, read from the compiled expression and evaluated on the call's own JSON (a `matches`
//! pattern compiled once, with the `regex` crate `cel` uses, rather than at every evaluation).
//!
//! A [`Check`] answers `Some(bool)` only where CEL's answer is that bool, and `None` — "ask the
//! interpreter" — wherever the value could be anything else: an error (a missing field, a type
//! the operator does not take), another type (a double, a large unsigned number, a list of mixed
//! values), or a shape it does not know. `&&` and `||` follow CEL's commutative logic: `false &&
//! x` is false and `true || x` true whatever `x` is, error included, so one decided side can
//! decide the whole. A rule whose check says false is skipped, one whose check says true matches,
//! and the rest are evaluated by `cel` as written.

use cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue, operators};
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

/// A request variable and the fields selected on it (`caller.claims.roles`).
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
}

/// A literal a field is compared with.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Literal {
    Text(String),
    Int(i64),
    Bool(bool),
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

    fn holds(self, a: i64, b: i64) -> bool {
        match self {
            Op::Less => a < b,
            Op::LessEq => a <= b,
            Op::Greater => a > b,
            Op::GreaterEq => a >= b,
            Op::Eq => a == b,
            Op::NotEq => a != b,
        }
    }
}

impl Check {
    /// The check of a compiled condition (`Unknown` for what it cannot decide).
    pub(super) fn compile(expr: &IdedExpr) -> Check {
        match &expr.expr {
            Expr::Literal(LiteralValue::Boolean(b)) => Check::Const(*b.inner()),
            Expr::Select(select) if select.test => match path(&select.operand) {
                Some(path) => Check::Has {
                    path,
                    name: select.field.clone(),
                },
                None => Check::Unknown,
            },
            Expr::Select(_) | Expr::Ident(_) => path(expr).map_or(Check::Unknown, Check::Truthy),
            Expr::Call(call) if call.target.is_some() => {
                let path = call.target.as_deref().and_then(path);
                match (path, Method::of(call)) {
                    (Some(path), Some(method)) => Check::Text { path, method },
                    _ => Check::Unknown,
                }
            }
            Expr::Call(call) if call.target.is_none() => {
                match (call.func_name.as_str(), call.args.as_slice()) {
                    (operators::LOGICAL_AND, [a, b]) => joined(a, b, true),
                    (operators::LOGICAL_OR, [a, b]) => joined(a, b, false),
                    (operators::LOGICAL_NOT, [a]) => match Check::compile(a) {
                        Check::Unknown => Check::Unknown,
                        check => Check::Not(Box::new(check)),
                    },
                    (operators::IN, [a, b]) => membership(a, b),
                    (name, [a, b]) => comparison(name, a, b),
                    _ => Check::Unknown,
                }
            }
            _ => Check::Unknown,
        }
    }

    /// Whether the whole condition is unknown (nothing to try before the interpreter).
    pub(super) fn is_unknown(&self) -> bool {
        matches!(self, Check::Unknown)
    }

    /// CEL's value of the condition for `facts`, where it is decided here.
    pub(super) fn eval(&self, facts: &CallFacts<'_>) -> Option<bool> {
        match self {
            Check::Unknown => None,
            Check::Const(b) => Some(*b),
            Check::And(all) => three_valued(all, facts, false),
            Check::Or(any) => three_valued(any, facts, true),
            Check::Not(check) => check.eval(facts).map(|b| !b),
            Check::Truthy(path) => match path.find(facts)? {
                Node::Json(Value::Bool(b)) => Some(*b),
                _ => None,
            },
            Check::Equals {
                path,
                literal,
                equal,
            } => {
                let node = path.find(facts)?;
                let same = match literal {
                    Literal::Text(t) => node.text()? == t,
                    Literal::Int(i) => node.int()? == *i,
                    Literal::Bool(b) => node.bool()? == *b,
                };
                Some(same == *equal)
            }
            Check::Has { path, name } => path.find(facts)?.has(name),
            Check::Contains { path, text } => path.find(facts)?.contains(text),
            Check::OneOf { path, texts } => {
                let text = path.find(facts)?.text()?;
                Some(texts.iter().any(|t| t == text))
            }
            Check::Compare { path, size, op, n } => {
                let node = path.find(facts)?;
                let value = if *size { node.size()? } else { node.int()? };
                Some(op.holds(value, *n))
            }
            Check::Text { path, method } => Some(method.holds(path.find(facts)?.text()?)),
        }
    }
}

/// `a && b` (`and`) or `a || b`, flattened; unknown when both sides are.
fn joined(a: &IdedExpr, b: &IdedExpr, and: bool) -> Check {
    let mut parts = Vec::new();
    for side in [a, b] {
        match (Check::compile(side), and) {
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
fn three_valued(parts: &[Check], facts: &CallFacts<'_>, short: bool) -> Option<bool> {
    let mut decided = true;
    for part in parts {
        match part.eval(facts) {
            Some(b) if b == short => return Some(short),
            Some(_) => {}
            None => decided = false,
        }
    }
    decided.then_some(!short)
}

/// `'text' in field` or `field in ['a', …]`.
fn membership(a: &IdedExpr, b: &IdedExpr) -> Check {
    if let (Some(Literal::Text(text)), Some(path)) = (literal(a), path(b)) {
        return Check::Contains { path, text };
    }
    let (Some(path), Expr::List(list)) = (path(a), &b.expr) else {
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

/// `field == literal`, `field != literal`, `size(field) < n`, `n <= field`, …
fn comparison(name: &str, a: &IdedExpr, b: &IdedExpr) -> Check {
    let Some(op) = Op::from_call(name) else {
        return Check::Unknown;
    };
    let (side, lit, op) = match (literal(a), literal(b)) {
        (None, Some(lit)) => (a, lit, op),
        (Some(lit), None) => (b, lit, op.flipped()),
        _ => return Check::Unknown,
    };
    if let Some(path) = sized(side) {
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
    let Some(path) = path(side) else {
        return Check::Unknown;
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
        _ => Check::Unknown,
    }
}

/// The field of `size(field)` or `field.size()`.
fn sized(expr: &IdedExpr) -> Option<Path> {
    let Expr::Call(call) = &expr.expr else {
        return None;
    };
    match (call.func_name.as_str(), &call.target, call.args.as_slice()) {
        ("size", None, [arg]) => path(arg),
        ("size", Some(target), []) => path(target),
        _ => None,
    }
}

fn literal(expr: &IdedExpr) -> Option<Literal> {
    match &expr.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(Literal::Text(s.inner().to_owned())),
        Expr::Literal(LiteralValue::Int(i)) => Some(Literal::Int(*i.inner())),
        Expr::Literal(LiteralValue::Boolean(b)) => Some(Literal::Bool(*b.inner())),
        _ => None,
    }
}

/// The request variable and fields `expr` selects (`args.a.b`), if that is all it does.
fn path(expr: &IdedExpr) -> Option<Path> {
    let mut fields = Vec::new();
    let mut at = expr;
    loop {
        match &at.expr {
            Expr::Select(select) if !select.test => {
                fields.push(select.field.clone());
                at = &select.operand;
            }
            Expr::Ident(name) => {
                let root = match name.as_str() {
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
    /// The value at the path for `facts`; none where CEL's selection would fail.
    fn find<'a>(&self, facts: &CallFacts<'a>) -> Option<Node<'a>> {
        let mut node = match self.root {
            Root::Kind => Node::Text(facts.subject.kind()),
            Root::Args => Node::Json(facts.args),
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
                ("plugin", _) => Some(of(matches!(subject, Subject::Tool { .. }), plugin)),
                ("annotations", Subject::Tool { annotations, .. }) => Some(Node::Json(annotations)),
                ("name", _) => Some(Node::Text("")),
                ("annotations", _) => Some(Node::Empty),
                _ => None,
            },
            Node::Var(Root::Resource) => match (field, subject) {
                ("uri", Subject::Resource { uri }) => Some(Node::Text(uri)),
                ("uri", _) => Some(Node::Text("")),
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
    ];

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            1 => Just(Value::Null),
            1 => any::<bool>().prop_map(Value::from),
            4 => (0i64..5).prop_map(Value::from),
            3 => prop::sample::select(&["", "a", "x", "é", "admin", "ana", "k"][..])
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
        ) {
            let args = Value::Object(args);
            let subject = match kind {
                0 => Subject::Tool { name: &subject_name, annotations: &annotations },
                1 => Subject::Resource { uri: &subject_name },
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
                    let program = policy.env.compile(when).expect("compiles");
                    let vars = policy.vars(&facts);
                    let cel = program.execute(&policy.context(&vars));
                    prop_assert_eq!(cel, Ok(CelValue::Bool(b)), "{} on {:?}", when, facts);
                }
            }
        }
    }
}
