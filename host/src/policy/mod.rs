//! Call policy: the operator's rules over who calls (`caller`), what (`tool`, `resource` or
//! `prompt`) and with which arguments (`args`), written in CEL and evaluated on every tool call —
//! and, for the rules whose `on` says so, every resource read and prompt — before its plugin or
//! upstream server runs.
//! The first rule whose `when` holds decides — allow, deny (with the operator's message), limit
//! (a named budget, [`budget`]) or approve (a human's yes first) — and no match allows the call.
//! A stage of its own between `access` and `plugins`: it knows nothing of plugins or registries,
//! only the plain facts the call path hands it ([`CallFacts`]).

pub mod budget;

use crate::access::auth::Claims;
use std::sync::Arc;
use std::time::Duration;

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};
use cel::{Context, Env, Program, Value as CelValue};
use serde_json::{Map, Value};

use crate::config::{Budget, Policed, PolicyRule, PolicySettings, RuleOutcome};

/// Why a policy cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// A rule's `when` does not compile (the message names the line and column).
    #[error("policy rule `{rule}` (policy.rules[{index}].when) does not compile: {message}")]
    Compile {
        /// The rule's name.
        rule: String,
        /// Its place in `policy.rules`.
        index: usize,
        /// The CEL parser's errors, with their positions.
        message: String,
    },
    /// A rule is incomplete or names what does not exist.
    #[error("policy rule `{rule}` (policy.rules[{index}]): {message}")]
    Invalid {
        /// The rule's name.
        rule: String,
        /// Its place in `policy.rules`.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A budget cannot work as written.
    #[error("policy budget `{name}`: {message}")]
    Budget {
        /// The budget's name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// What a request asks for.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// A tool call (`tools/call`).
    Tool {
        /// The tool as clients name it.
        name: &'a str,
        /// Its annotations (`readOnlyHint`, `destructiveHint`, …) as JSON.
        annotations: &'a Value,
    },
    /// A resource read (`resources/read`).
    Resource {
        /// The URI read.
        uri: &'a str,
    },
    /// A prompt (`prompts/get`).
    Prompt {
        /// The prompt's name.
        name: &'a str,
    },
}

impl Subject<'_> {
    /// The kind of request, as rules' `on` names it.
    pub fn policed(&self) -> Policed {
        match self {
            Subject::Tool { .. } => Policed::Tools,
            Subject::Resource { .. } => Policed::Resources,
            Subject::Prompt { .. } => Policed::Prompts,
        }
    }

    /// `kind` as rules see it: `tool`, `resource` or `prompt`.
    pub fn kind(&self) -> &'static str {
        match self {
            Subject::Tool { .. } => "tool",
            Subject::Resource { .. } => "resource",
            Subject::Prompt { .. } => "prompt",
        }
    }

    /// The tool's name (empty for a read or a prompt).
    fn tool_name(&self) -> &str {
        match self {
            Subject::Tool { name, .. } => name,
            _ => "",
        }
    }

    /// The tool's name, the resource's URI or the prompt's name.
    pub fn name(&self) -> &str {
        match self {
            Subject::Tool { name, .. } | Subject::Prompt { name } => name,
            Subject::Resource { uri } => uri,
        }
    }
}

/// What the policy sees of one call, read or prompt.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The verified caller's user id (none: unauthenticated, e.g. stdio without a user).
    pub user: Option<&'a str>,
    /// The agent whose view applies.
    pub agent: Option<&'a str>,
    /// The caller's JWT claims (none: not a JWT, e.g. a personal secret or stdio).
    pub claims: Option<&'a Claims>,
    /// The tool, resource or prompt asked for.
    pub subject: Subject<'a>,
    /// The plugin (or upstream server) serving it.
    pub plugin: &'a str,
    /// A tool's or a prompt's arguments; a templated resource's variables (else `{}`).
    pub args: &'a Value,
}

/// A rule, compiled.
#[derive(Debug)]
pub struct Rule {
    /// As written.
    pub spec: PolicyRule,
    program: Program,
    /// The only tools the rule can match, when its condition says so (see [`tools_named`]); a
    /// call of another tool (and a read or a prompt, whose `tool.name` is empty) skips it
    /// without evaluating anything.
    tools: Option<Vec<String>>,
}

impl Rule {
    /// Whether a request for `subject` needs this rule evaluated: the rule polices its kind,
    /// and names its tool if it names any.
    fn may_match(&self, subject: &Subject<'_>) -> bool {
        let tool = subject.tool_name();
        self.spec.on.contains(&subject.policed())
            && self
                .tools
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == tool))
    }
}

/// What the policy decided for one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<'p> {
    /// The call runs; `rule` is the allow rule that matched (none: no rule matched).
    Allow {
        /// The matching rule, if any.
        rule: Option<&'p str>,
    },
    /// The call is refused with `message`.
    Deny {
        /// The matching rule.
        rule: &'p str,
        /// What the caller is told.
        message: String,
    },
    /// The call runs if `budget` has room for `key`.
    Limit {
        /// The matching rule.
        rule: &'p str,
        /// The budget's name.
        budget: &'p str,
        /// Its limits.
        limits: &'p Budget,
        /// Whose bucket: the caller (and the tool, for a `per_tool` rule).
        key: String,
    },
    /// A human must say yes first; `shown` are the argument fields the rule shows.
    Approve {
        /// The matching rule.
        rule: &'p str,
        /// `field -> value` of the rule's `show` list (missing fields left out).
        shown: Map<String, Value>,
    },
}

impl Decision<'_> {
    /// The matching rule's name, if a rule matched.
    pub fn rule(&self) -> Option<&str> {
        match self {
            Decision::Allow { rule } => *rule,
            Decision::Deny { rule, .. }
            | Decision::Limit { rule, .. }
            | Decision::Approve { rule, .. } => Some(rule),
        }
    }

    /// The outcome's name (`allow`, `deny`, `limit`, `approve`).
    pub fn outcome(&self) -> &'static str {
        match self {
            Decision::Allow { .. } => "allow",
            Decision::Deny { .. } => "deny",
            Decision::Limit { .. } => "limit",
            Decision::Approve { .. } => "approve",
        }
    }
}

/// The compiled rules and budgets of one configuration.
pub struct Policy {
    rules: Vec<Rule>,
    env: Arc<Env>,
    settings: PolicySettings,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            rules: Vec::new(),
            env: Arc::new(Env::stdlib()),
            settings: PolicySettings::default(),
        }
    }
}

/// How long an approval waits for the human by default.
const APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

impl Policy {
    /// Compile `settings`: every rule's condition, its outcome's fields and the budgets it names.
    pub fn compile(settings: &PolicySettings) -> Result<Policy, PolicyError> {
        let env = Arc::new(Env::stdlib());
        for (name, b) in &settings.budgets {
            let bad = |message: &str| PolicyError::Budget {
                name: name.clone(),
                message: message.into(),
            };
            if b.calls.is_none() && b.concurrent.is_none() && b.bytes.is_none() {
                return Err(bad(
                    "set `calls` or `bytes` (with `per_secs`), `concurrent`, or several",
                ));
            }
            if b.calls == Some(0) || b.concurrent == Some(0) || b.bytes == Some(0) {
                return Err(bad("`calls`, `concurrent` and `bytes` must be at least 1"));
            }
            if !(b.per_secs.is_finite() && b.per_secs > 0.0) {
                return Err(bad("`per_secs` must be a positive number of seconds"));
            }
        }
        let mut rules = Vec::with_capacity(settings.rules.len());
        for (index, spec) in settings.rules.iter().enumerate() {
            let invalid = |message: String| PolicyError::Invalid {
                rule: spec.name.clone(),
                index,
                message,
            };
            if spec.name.trim().is_empty() {
                return Err(invalid("every rule needs a `name`".into()));
            }
            if settings.rules[..index].iter().any(|r| r.name == spec.name) {
                return Err(invalid("another rule has the same name".into()));
            }
            if spec.on.is_empty() {
                return Err(invalid(
                    "`on` names what the rule polices: tools, resources, prompts".into(),
                ));
            }
            match spec.outcome {
                RuleOutcome::Limit => match &spec.budget {
                    None => return Err(invalid("a `limit` rule names its `budget`".into())),
                    Some(b) if !settings.budgets.contains_key(b) => {
                        return Err(invalid(format!(
                            "budget `{b}` is not defined in policy.budgets"
                        )));
                    }
                    Some(_) => {}
                },
                RuleOutcome::Deny | RuleOutcome::Allow | RuleOutcome::Approve => {
                    if spec.budget.is_some() {
                        return Err(invalid("only a `limit` rule takes a `budget`".into()));
                    }
                }
            }
            let program = env.compile(&spec.when).map_err(|e| PolicyError::Compile {
                rule: spec.name.clone(),
                index,
                message: e.to_string(),
            })?;
            let tools = tools_named(program.expression());
            rules.push(Rule {
                spec: spec.clone(),
                program,
                tools,
            });
        }
        if let Some(t) = settings.approval_timeout_secs
            && !(t.is_finite() && t > 0.0)
        {
            return Err(PolicyError::Budget {
                name: "approval_timeout_secs".into(),
                message: "must be a positive number of seconds".into(),
            });
        }
        Ok(Policy {
            rules,
            env,
            settings: settings.clone(),
        })
    }

    /// Whether there is any rule (a policy without rules costs a call nothing).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The settings it was compiled from.
    pub fn settings(&self) -> &PolicySettings {
        &self.settings
    }

    /// How long an approval waits for its answer over a 2025 session.
    pub fn approval_timeout(&self) -> Duration {
        self.settings
            .approval_timeout_secs
            .map_or(APPROVAL_TIMEOUT, Duration::from_secs_f64)
    }

    /// The decision for the call `facts` describes. A rule that cannot be evaluated on this call
    /// (not a bool, a missing field read without `has()`, a type error) refuses the call: a
    /// policy fails closed.
    pub fn decide(&self, facts: &CallFacts<'_>) -> Decision<'_> {
        // Built once, and only for a call some rule may match.
        let mut context = None;
        for rule in &self.rules {
            if !rule.may_match(&facts.subject) {
                continue;
            }
            let name = rule.spec.name.as_str();
            let context = context.get_or_insert_with(|| self.context(facts));
            match rule.program.execute(context) {
                Ok(CelValue::Bool(false)) => continue,
                Ok(CelValue::Bool(true)) => return self.outcome(rule, facts),
                Ok(other) => {
                    let other = shortened(&format!("{other:?}"));
                    tracing::warn!(rule = name, "policy rule yielded {other}, not a bool");
                    return Decision::Deny {
                        rule: name,
                        message: format!(
                            "refused: policy rule `{name}` could not be evaluated (it yields \
                             no bool)"
                        ),
                    };
                }
                Err(e) => {
                    // The error may quote the values (a whole argument): a few words of it.
                    let why = shortened(&e.to_string());
                    tracing::warn!(rule = name, "policy rule could not be evaluated: {why}");
                    return Decision::Deny {
                        rule: name,
                        message: format!(
                            "refused: policy rule `{name}` could not be evaluated for this \
                             call: {why}"
                        ),
                    };
                }
            }
        }
        Decision::Allow { rule: None }
    }

    /// What rules see of a request: `caller`, `kind`, `tool`, `resource`, `prompt` and `args` (the
    /// two of `tool`, `resource` and `prompt` the request is not about have empty fields).
    fn context(&self, facts: &CallFacts<'_>) -> Context<'_, '_> {
        let mut context = Context::with_env(Arc::clone(&self.env));
        let claims = facts.claims.map_or_else(
            || CelValue::from(std::collections::HashMap::<String, CelValue>::new()),
            object_to_cel,
        );
        let caller: std::collections::HashMap<String, CelValue> = [
            ("user".to_owned(), text_to_cel(facts.user.unwrap_or(""))),
            ("agent".to_owned(), text_to_cel(facts.agent.unwrap_or(""))),
            ("claims".to_owned(), claims),
        ]
        .into();
        context.add_variable_from_value("caller", CelValue::from(caller));
        context.add_variable_from_value("kind", text_to_cel(facts.subject.kind()));
        let (tool, resource, prompt) = subject_to_cel(&facts.subject, facts.plugin);
        context.add_variable_from_value("tool", tool);
        context.add_variable_from_value("resource", resource);
        context.add_variable_from_value("prompt", prompt);
        context.add_variable_from_value("args", to_cel(facts.args));
        context
    }

    fn outcome<'p>(&'p self, rule: &'p Rule, facts: &CallFacts<'_>) -> Decision<'p> {
        let spec = &rule.spec;
        let name = spec.name.as_str();
        match spec.outcome {
            RuleOutcome::Allow => Decision::Allow { rule: Some(name) },
            RuleOutcome::Deny => Decision::Deny {
                rule: name,
                message: spec
                    .message
                    .clone()
                    .unwrap_or_else(|| format!("refused by policy rule `{name}`")),
            },
            RuleOutcome::Limit => {
                let budget = spec.budget.as_deref().unwrap_or_default();
                let Some(limits) = self.settings.budgets.get(budget) else {
                    // Checked at compile: unreachable, but refuse rather than panic.
                    return Decision::Deny {
                        rule: name,
                        message: format!("refused: budget `{budget}` is not defined"),
                    };
                };
                let who = match (facts.user, facts.agent) {
                    (Some(u), _) => format!("user:{u}"),
                    (None, Some(a)) => format!("agent:{a}"),
                    (None, None) => "anonymous".to_owned(),
                };
                let key = if spec.per_tool {
                    format!("{who}|{}:{}", facts.subject.kind(), facts.subject.name())
                } else {
                    who
                };
                Decision::Limit {
                    rule: name,
                    budget,
                    limits,
                    key,
                }
            }
            RuleOutcome::Approve => {
                let shown = spec
                    .show
                    .iter()
                    .filter_map(|f| Some((f.clone(), facts.args.get(f)?.clone())))
                    .collect();
                Decision::Approve { rule: name, shown }
            }
        }
    }
}

/// `tool`, `resource` and `prompt` as rules see them for a request about `subject` served by
/// `plugin`: the one it is about filled in, the others with empty fields.
fn subject_to_cel(subject: &Subject<'_>, plugin: &str) -> (CelValue, CelValue, CelValue) {
    let map = |entries: Vec<(&str, CelValue)>| {
        let map: std::collections::HashMap<String, CelValue> = entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        CelValue::from(map)
    };
    let empty = || text_to_cel("");
    let (mut tool, mut resource, mut prompt) = (
        vec![
            ("name", empty()),
            ("plugin", empty()),
            ("annotations", map(Vec::new())),
        ],
        vec![("uri", empty()), ("plugin", empty())],
        vec![("name", empty()), ("plugin", empty())],
    );
    match subject {
        Subject::Tool { name, annotations } => {
            tool = vec![
                ("name", text_to_cel(name)),
                ("plugin", text_to_cel(plugin)),
                ("annotations", to_cel(annotations)),
            ];
        }
        Subject::Resource { uri } => {
            resource = vec![("uri", text_to_cel(uri)), ("plugin", text_to_cel(plugin))];
        }
        Subject::Prompt { name } => {
            prompt = vec![("name", text_to_cel(name)), ("plugin", text_to_cel(plugin))];
        }
    }
    (map(tool), map(resource), map(prompt))
}

/// The tools a condition can hold for, when it says: `tool.name == 'x'` (either way round) and
/// `tool.name in ['x', 'y']` name theirs; `a && b` holds only for tools both allow (either side
/// false makes it false, even when the other cannot be evaluated); `a || b` for the tools either
/// names, when both name some. `None`: any tool. A condition is false — never an error — for a
/// tool outside its set, so skipping it decides exactly as evaluating it would.
fn tools_named(expr: &IdedExpr) -> Option<Vec<String>> {
    let Expr::Call(call) = &expr.expr else {
        return None;
    };
    if call.target.is_some() {
        return None;
    }
    match (call.func_name.as_str(), call.args.as_slice()) {
        (operators::LOGICAL_AND, [a, b]) => match (tools_named(a), tools_named(b)) {
            (Some(x), Some(y)) => Some(x.into_iter().filter(|n| y.contains(n)).collect()),
            (x, y) => x.or(y),
        },
        (operators::LOGICAL_OR, [a, b]) => {
            let mut names = tools_named(a)?;
            names.extend(tools_named(b)?);
            Some(names)
        }
        (operators::EQUALS, [a, b]) => match (is_tool_name(a), is_tool_name(b)) {
            (true, false) => string_literal(b).map(|n| vec![n]),
            (false, true) => string_literal(a).map(|n| vec![n]),
            _ => None,
        },
        (operators::IN, [a, b]) if is_tool_name(a) => match &b.expr {
            Expr::List(list) => list.elements.iter().map(string_literal).collect(),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `expr` is `tool.name`.
fn is_tool_name(expr: &IdedExpr) -> bool {
    matches!(&expr.expr, Expr::Select(select)
        if !select.test
            && select.field == "name"
            && matches!(&select.operand.expr, Expr::Ident(id) if id == "tool"))
}

fn string_literal(expr: &IdedExpr) -> Option<String> {
    match &expr.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_owned()),
        _ => None,
    }
}

/// At most [`WHY_CHARS`] characters of `text`, marked when cut.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(WHY_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// How much of an evaluation error a refusal quotes.
const WHY_CHARS: usize = 160;

fn text_to_cel(text: &str) -> CelValue {
    CelValue::String(Arc::new(text.to_owned()))
}

fn object_to_cel(map: &Map<String, Value>) -> CelValue {
    let entries: std::collections::HashMap<String, CelValue> =
        map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
    CelValue::from(entries)
}

/// A JSON value as CEL sees it (numbers: integers when they are, else doubles).
fn to_cel(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => CelValue::Int(i),
            (None, Some(u)) => CelValue::UInt(u),
            _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => object_to_cel(map),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_tools_a_condition_names_are_read_from_its_expression() {
        let named = |when: &str| {
            let program = Env::stdlib().compile(when).expect("compiles");
            tools_named(program.expression()).map(|mut v| {
                v.sort();
                v
            })
        };
        let some = |names: &[&str]| Some(names.iter().map(|n| (*n).to_owned()).collect());
        assert_eq!(
            named("tool.name == 'x' && size(args.text) > 1"),
            some(&["x"])
        );
        assert_eq!(
            named("size(args.text) > 1 && 'x' == tool.name"),
            some(&["x"])
        );
        assert_eq!(named("a.b && tool.name == 'x' && c"), some(&["x"]));
        assert_eq!(
            named("tool.name in ['a', 'b'] && args.n > 2"),
            some(&["a", "b"])
        );
        assert_eq!(
            named("tool.name == 'a' || tool.name == 'b'"),
            some(&["a", "b"])
        );
        assert_eq!(named("tool.name == 'a' && tool.name == 'b'"), some(&[]));
        for any in [
            "tool.name == 'a' || args.x",
            "!(tool.name == 'a')",
            "tool.name != 'a'",
            "tool.annotations.destructiveHint",
            "tool.name.startsWith('x')",
            "tool.name in args.names",
            "has(tool.name) && true",
            "true",
        ] {
            assert_eq!(named(any), None, "{any}");
        }
    }

    #[test]
    fn a_skipped_rule_decides_as_its_evaluation_would() {
        // Evaluated for `echo`, the left side cannot be (no `text`) and the right is false: false.
        // Skipped by its tool name, the decision is the same: no rule matched.
        let policy = Policy::compile(&settings(json!({"rules": [
            {"name": "r", "when": "size(args.text) > 64 && tool.name == 'other'", "outcome": "deny"},
            {"name": "any", "when": "tool.name != 'other' && has(args.id)", "outcome": "deny"},
        ]})))
        .expect("compiles");
        let args = json!({});
        assert_eq!(
            policy.decide(&facts(None, "echo", &args)),
            Decision::Allow { rule: None }
        );
        let args = json!({"text": "x".repeat(70)});
        assert!(matches!(
            policy.decide(&facts(None, "other", &args)),
            Decision::Deny { rule: "r", .. }
        ));
        let args = json!({"id": 1});
        assert!(matches!(
            policy.decide(&facts(None, "echo", &args)),
            Decision::Deny { rule: "any", .. }
        ));
    }

    fn settings(yaml_rules: Value) -> PolicySettings {
        serde_json::from_value(yaml_rules).expect("settings")
    }

    fn facts<'a>(user: Option<&'a str>, tool: &'a str, args: &'a Value) -> CallFacts<'a> {
        static NONE: Value = Value::Null;
        CallFacts {
            user,
            agent: None,
            claims: None,
            subject: Subject::Tool {
                name: tool,
                annotations: &NONE,
            },
            plugin: "p",
            args,
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_no_match_allows() {
        let policy = Policy::compile(&settings(json!({
            "rules": [
                {"name": "big", "when": "tool.name == 'echo' && size(args.text) > 5",
                 "outcome": "deny", "message": "too long"},
                {"name": "alice", "when": "caller.user == 'alice'", "outcome": "allow"},
                {"name": "rest", "when": "tool.name == 'echo'", "outcome": "deny"},
            ]
        })))
        .expect("compiles");
        let long = json!({"text": "123456"});
        let short = json!({"text": "1"});
        assert_eq!(
            policy.decide(&facts(Some("alice"), "echo", &long)),
            Decision::Deny {
                rule: "big",
                message: "too long".into()
            }
        );
        assert_eq!(
            policy.decide(&facts(Some("alice"), "echo", &short)),
            Decision::Allow {
                rule: Some("alice")
            }
        );
        assert_eq!(
            policy.decide(&facts(Some("bob"), "echo", &short)).rule(),
            Some("rest")
        );
        assert_eq!(
            policy.decide(&facts(Some("bob"), "other", &short)),
            Decision::Allow { rule: None }
        );
    }

    #[test]
    fn rules_police_tools_unless_on_names_reads_or_prompts() {
        let policy = Policy::compile(&settings(json!({"rules": [
            {"name": "any-tool", "when": "true", "outcome": "deny"},
            {"name": "reads", "on": ["resources"], "outcome": "deny",
             "when": "resource.uri.startsWith('x://') && tool.name == ''"},
            {"name": "prompts", "on": ["prompts", "resources"], "outcome": "deny",
             "when": "kind == 'prompt' && prompt.name == 'p' && args.a == 'b'"},
        ]})))
        .expect("compiles");
        let args = json!({"a": "b"});
        let ask = |subject| {
            policy
                .decide(&CallFacts {
                    subject,
                    ..facts(None, "t", &args)
                })
                .rule()
                .map(str::to_owned)
        };
        assert_eq!(
            ask(Subject::Resource { uri: "x://1" }).as_deref(),
            Some("reads")
        );
        assert_eq!(ask(Subject::Resource { uri: "y://1" }), None);
        assert_eq!(
            ask(Subject::Prompt { name: "p" }).as_deref(),
            Some("prompts")
        );
        assert_eq!(ask(Subject::Prompt { name: "q" }), None);
        let none = Value::Null;
        let tool = Subject::Tool {
            name: "t",
            annotations: &none,
        };
        assert_eq!(ask(tool).as_deref(), Some("any-tool"));
        let err = Policy::compile(&settings(json!({"rules": [
            {"name": "nothing", "on": [], "outcome": "deny"},
        ]})))
        .expect_err("polices nothing");
        assert!(err.to_string().contains("`on`"), "{err}");
    }

    #[test]
    fn a_rule_that_does_not_compile_is_named_with_its_position() {
        let err = Policy::compile(&settings(json!({
            "rules": [{"name": "broken", "when": "args.x ==", "outcome": "allow"}]
        })))
        .expect_err("does not compile");
        let text = err.to_string();
        assert!(text.contains("`broken`"), "{text}");
        assert!(text.contains(":1:"), "{text}");
    }

    #[test]
    fn a_rule_that_cannot_be_evaluated_refuses_the_call() {
        let policy = Policy::compile(&settings(json!({
            "rules": [{"name": "n", "when": "args.missing > 3", "outcome": "allow"}]
        })))
        .expect("compiles");
        let args = json!({});
        assert_eq!(policy.decide(&facts(None, "t", &args)).outcome(), "deny");
    }

    #[test]
    fn limit_rules_need_a_defined_budget() {
        let err = Policy::compile(&settings(json!({
            "rules": [{"name": "l", "outcome": "limit", "budget": "nope"}]
        })))
        .expect_err("unknown budget");
        assert!(err.to_string().contains("nope"));
        let policy = Policy::compile(&settings(json!({
            "rules": [{"name": "l", "outcome": "limit", "budget": "b", "per_tool": true}],
            "budgets": {"b": {"calls": 2, "per_secs": 10}}
        })))
        .expect("compiles");
        let args = json!({});
        match policy.decide(&facts(Some("u"), "t", &args)) {
            Decision::Limit { key, budget, .. } => {
                assert_eq!(budget, "b");
                assert_eq!(key, "user:u|tool:t");
            }
            other => panic!("{other:?}"),
        }
    }
}
