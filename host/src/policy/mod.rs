//! Call policy: the operator's rules over who calls (`caller`), what (`tool`, `resource` or
//! `prompt`) and with which arguments (`args`), written in CEL and evaluated on every tool call —
//! and, for the rules whose `on` says so, every resource read and prompt — before its plugin or
//! upstream server runs.
//! The first rule whose `when` holds decides — allow, deny (with the operator's message), limit
//! (a named budget, [`budget`]) or approve (a human's yes first) — and no match allows the call.
//! A stage of its own between `access` and `plugins`: it knows nothing of plugins or registries,
//! only the plain facts the call path hands it ([`CallFacts`]).

pub mod budget;
pub mod detect;
pub mod guardrails;
mod native;

use native::Check;

use crate::access::auth::Claims;
use std::sync::Arc;
use std::time::Duration;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::{Context, Env, Value as CelValue};
use serde_json::{Map, Value};
use std::collections::HashMap;

use crate::config::{Approver, Budget, Policed, PolicyRule, PolicySettings, RuleOutcome};

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
        /// The tool as clients name it (overrides applied).
        name: &'a str,
        /// The source's own name for it (before prefixes and overrides).
        source_name: &'a str,
        /// Its annotations (`readOnlyHint`, `destructiveHint`, …) as JSON.
        annotations: &'a Value,
    },
    /// A resource read (`resources/read`).
    Resource {
        /// The URI read, in normal form (`registry::uri::normalize`): what is read.
        uri: &'a str,
        /// The URI as the client sent it.
        raw: &'a str,
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
            Subject::Resource { uri, .. } => uri,
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
    /// The condition as evaluated: its compiled expression with the field selections on the
    /// request's variables made direct (see [`direct_selects`]).
    expr: IdedExpr,
    /// What of the condition is decided without the interpreter (none: nothing).
    check: Option<Check>,
    /// The only tools the rule can match, when its condition says so (see [`names_at`]); a
    /// call of another tool (and a read or a prompt, whose `tool.name` is empty) skips it
    /// without evaluating anything.
    tools: Option<Vec<String>>,
    /// The same for the agents (`caller.agent`) and users (`caller.user`) it names.
    agents: Option<Vec<String>>,
    users: Option<Vec<String>>,
}

impl Rule {
    /// The condition's value in `context`, as `Program::execute` gives it.
    fn evaluate(&self, context: &Context<'_, '_>) -> cel::ResolveResult {
        CelValue::resolve(&self.expr, context)
    }

    /// Whether a request for `facts` needs this rule evaluated: the rule polices its kind, and
    /// names its tool, agent and user if it names any.
    fn may_match(&self, facts: &CallFacts<'_>, policed: Policed) -> bool {
        let among = |names: &Option<Vec<String>>, value: &str| {
            names
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == value))
        };
        self.spec.on.contains(&policed)
            && among(&self.tools, facts.subject.tool_name())
            && among(&self.agents, facts.agent.unwrap_or(""))
            && among(&self.users, facts.user.unwrap_or(""))
    }
}

/// A field of a variable whose value is always a string (`""` when absent), so a condition
/// comparing it with a literal is false, never an error, for any other value.
type Field = (&'static str, &'static str);

const TOOL_NAME: Field = ("tool", "name");
const CALLER_AGENT: Field = ("caller", "agent");
const CALLER_USER: Field = ("caller", "user");

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
        /// Who answers.
        by: Approver,
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
#[derive(Default)]
pub struct Policy {
    rules: Vec<Rule>,
    settings: PolicySettings,
    /// The variables the rules read.
    reads: Reads,
    /// Whether some rule polices tool results.
    results: bool,
}

/// What an `on: [results]` rule sees of a tool's result (`result`): its text content (the
/// `text` of its content items, one per line), its `structuredContent` (`{}` when it has
/// none), whether it is an
/// error, and what the detectors found (`findings`: every detector's and group's name → how
/// many times).
#[derive(Debug, Clone, Copy)]
pub struct ResultFacts<'a> {
    /// The text content.
    pub text: &'a str,
    /// The structured content, if any.
    pub structured: Option<&'a Value>,
    /// `isError`.
    pub is_error: bool,
    /// What the detectors found.
    pub findings: &'a guardrails::Findings,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

/// CEL's standard library, made the first time a rule is compiled: a configuration without rules
/// (most) never builds it (~240k instructions and ~80 kB of code at start, measured by the serving
/// bench's `counts` section), and every reload with rules shares it.
fn stdlib() -> &'static Arc<Env> {
    static STDLIB: std::sync::LazyLock<Arc<Env>> =
        std::sync::LazyLock::new(|| Arc::new(Env::stdlib()));
    &STDLIB
}

/// How long an approval waits for the human by default.
const APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether every budget can work as written.
fn check_budgets(settings: &PolicySettings) -> Result<(), PolicyError> {
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
    Ok(())
}

/// Whether rule `index` of `settings` (`spec`) is complete: a unique name, something to police,
/// and the fields its outcome takes.
fn check_rule(
    settings: &PolicySettings,
    index: usize,
    spec: &PolicyRule,
) -> Result<(), PolicyError> {
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
            "`on` names what the rule polices: tools, resources, prompts, or results".into(),
        ));
    }
    if spec.on.contains(&Policed::Results) {
        if spec.on.len() > 1 {
            return Err(invalid(
                "a rule on `results` polices results only (`on: [results]`): write the \
                 request's rule apart"
                    .into(),
            ));
        }
        if !matches!(spec.outcome, RuleOutcome::Allow | RuleOutcome::Deny) {
            return Err(invalid(
                "a rule on `results` is `allow` or `deny` (the call has run: there is nothing \
                 to limit or approve)"
                    .into(),
            ));
        }
    }
    match (spec.outcome, &spec.budget) {
        (RuleOutcome::Limit, None) => Err(invalid("a `limit` rule names its `budget`".into())),
        (RuleOutcome::Limit, Some(b)) if !settings.budgets.contains_key(b) => Err(invalid(
            format!("budget `{b}` is not defined in policy.budgets"),
        )),
        (RuleOutcome::Deny | RuleOutcome::Allow | RuleOutcome::Approve, Some(_)) => {
            Err(invalid("only a `limit` rule takes a `budget`".into()))
        }
        _ if spec.outcome != RuleOutcome::Approve && !spec.approver.is_caller() => {
            Err(invalid("only an `approve` rule takes an `approver`".into()))
        }
        _ => Ok(()),
    }
}

/// The variables some rule reads (any identifier of that name in any condition, a comprehension's
/// own variable included): the context of a call holds only these.
#[derive(Debug, Default, Clone, Copy)]
struct Reads {
    caller: bool,
    kind: bool,
    tool: bool,
    resource: bool,
    prompt: bool,
    args: bool,
    result: bool,
}

impl Reads {
    /// Every identifier in `expr`.
    fn add(&mut self, expr: &IdedExpr) {
        match &expr.expr {
            Expr::Ident(name) => match name.trim_start_matches('.') {
                "caller" => self.caller = true,
                "kind" => self.kind = true,
                "tool" => self.tool = true,
                "resource" => self.resource = true,
                "prompt" => self.prompt = true,
                "args" => self.args = true,
                "result" => self.result = true,
                _ => {}
            },
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    self.add(target);
                }
                call.args.iter().for_each(|a| self.add(a));
            }
            Expr::Comprehension(c) => {
                for e in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    self.add(e);
                }
            }
            Expr::List(list) => list.elements.iter().for_each(|e| self.add(e)),
            Expr::Map(map) => map.entries.iter().for_each(|e| self.add_entry(&e.expr)),
            Expr::Struct(st) => st.entries.iter().for_each(|e| self.add_entry(&e.expr)),
            Expr::Select(select) => self.add(&select.operand),
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn add_entry(&mut self, entry: &EntryExpr) {
        match entry {
            EntryExpr::StructField(f) => self.add(&f.value),
            EntryExpr::MapEntry(m) => {
                self.add(&m.key);
                self.add(&m.value);
            }
        }
    }
}

impl Policy {
    /// Compile `settings`: every rule's condition, its outcome's fields and the budgets it names.
    pub fn compile(settings: &PolicySettings) -> Result<Policy, PolicyError> {
        check_budgets(settings)?;
        let mut rules = Vec::with_capacity(settings.rules.len());
        let mut reads = Reads::default();
        for (index, spec) in settings.rules.iter().enumerate() {
            check_rule(settings, index, spec)?;
            let program = stdlib()
                .compile(&spec.when)
                .map_err(|e| PolicyError::Compile {
                    rule: spec.name.clone(),
                    index,
                    message: e.to_string(),
                })?;
            reads.add(program.expression());
            let expr = program.expression();
            let (tools, agents, users) = (
                names_at(expr, TOOL_NAME),
                names_at(expr, CALLER_AGENT),
                names_at(expr, CALLER_USER),
            );
            let mut direct = expr.clone();
            direct_selects(&mut direct);
            let check = Check::compile(expr);
            rules.push(Rule {
                spec: spec.clone(),
                expr: direct,
                check: (!check.is_unknown()).then_some(check),
                tools,
                agents,
                users,
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
            results: rules.iter().any(|r| r.spec.on.contains(&Policed::Results)),
            rules,
            settings: settings.clone(),
            reads,
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
        self.decide_on(facts, None)
    }

    /// The decision of the `on: [results]` rules for the result `result` of the tool call
    /// `facts` describes (failing closed like [`Policy::decide`]).
    pub fn decide_result(&self, facts: &CallFacts<'_>, result: &ResultFacts<'_>) -> Decision<'_> {
        if !self.results {
            return Decision::Allow { rule: None };
        }
        self.decide_on(facts, Some(result))
    }

    /// Whether some rule polices tool results (`on: [results]`).
    pub fn polices_results(&self) -> bool {
        self.results
    }

    /// [`Policy::decide`] for a request, or for a tool's `result`.
    fn decide_on(&self, facts: &CallFacts<'_>, result: Option<&ResultFacts<'_>>) -> Decision<'_> {
        let policed = match result {
            Some(_) => Policed::Results,
            None => facts.subject.policed(),
        };
        // Built once, and only for a call some rule may match.
        let (vars, context) = (std::cell::OnceCell::new(), std::cell::OnceCell::new());
        for rule in &self.rules {
            if !rule.may_match(facts, policed) {
                continue;
            }
            match rule.check.as_ref().and_then(|c| c.eval(facts)) {
                Some(false) => continue,
                Some(true) => return self.outcome(rule, facts),
                None => {}
            }
            let name = rule.spec.name.as_str();
            let context =
                context.get_or_init(|| self.context(vars.get_or_init(|| self.vars(facts, result))));
            match rule.evaluate(context) {
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

    /// A context over `vars`: the standard library, and the variables resolved by name.
    fn context<'v>(&self, vars: &'v Vars<'v>) -> Context<'v, 'v> {
        let mut context = Context::with_env(Arc::clone(stdlib()));
        context.set_variable_resolver(vars);
        context
    }

    /// What rules see of a request: `caller`, `kind`, `tool`, `resource`, `prompt` and `args` (the
    /// two of `tool`, `resource` and `prompt` the request is not about have empty fields), each
    /// only if some rule reads it. Built straight into `cel`'s values, borrowing every string from
    /// `facts`: nothing is copied but the shape.
    fn vars<'v>(&self, facts: &CallFacts<'v>, result: Option<&ResultFacts<'v>>) -> Vars<'v> {
        let reads = self.reads;
        let caller = reads.caller.then(|| {
            let claims = facts.claims.map_or_else(|| fields(Vec::new()), object_val);
            fields(vec![
                ("user", text_val(facts.user.unwrap_or(""))),
                ("agent", text_val(facts.agent.unwrap_or(""))),
                ("claims", claims),
            ])
        });
        let (tool, resource, prompt) = subject_vals(&facts.subject, facts.plugin, reads);
        Vars {
            caller,
            kind: reads.kind.then(|| text_val(facts.subject.kind())),
            tool,
            resource,
            prompt,
            args: reads.args.then(|| json_val(facts.args)),
            result: reads
                .result
                .then(|| result.map_or_else(|| fields(Vec::new()), result_val)),
        }
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
                Decision::Approve {
                    rule: name,
                    shown,
                    by: spec.approver,
                }
            }
        }
    }
}

/// `tool`, `resource` and `prompt` as rules see them for a request about `subject` served by
/// `plugin`: the one it is about filled in, the others with empty fields; each only if some rule
/// `reads` it.
fn subject_vals<'v>(
    subject: &Subject<'v>,
    plugin: &'v str,
    reads: Reads,
) -> (Option<Val<'v>>, Option<Val<'v>>, Option<Val<'v>>) {
    let (name, (uri, raw), served, annotations) = match *subject {
        Subject::Tool {
            name, annotations, ..
        } => (name, ("", ""), plugin, Some(annotations)),
        Subject::Resource { uri, raw } => ("", (uri, raw), plugin, None),
        Subject::Prompt { name } => (name, ("", ""), plugin, None),
    };
    let source_name = match *subject {
        Subject::Tool { source_name, .. } => source_name,
        _ => "",
    };
    let (tool, resource, prompt) = match subject {
        Subject::Tool { .. } => ((name, served), ("", ""), ("", "")),
        Subject::Resource { .. } => (("", ""), (uri, served), ("", "")),
        Subject::Prompt { .. } => (("", ""), ("", ""), (name, served)),
    };
    let tool = reads.tool.then(|| {
        fields(vec![
            ("name", text_val(tool.0)),
            ("source_name", text_val(source_name)),
            ("plugin", text_val(tool.1)),
            (
                "annotations",
                annotations.map_or_else(|| fields(Vec::new()), json_val),
            ),
        ])
    });
    let resource = reads.resource.then(|| {
        fields(vec![
            ("uri", text_val(resource.0)),
            ("raw", text_val(raw)),
            ("plugin", text_val(resource.1)),
        ])
    });
    let prompt = reads.prompt.then(|| {
        fields(vec![
            ("name", text_val(prompt.0)),
            ("plugin", text_val(prompt.1)),
        ])
    });
    (tool, resource, prompt)
}

/// The values of `field` (e.g. `tool.name`) a condition can hold for, when it says:
/// `tool.name == 'x'` (either way round) and `tool.name in ['x', 'y']` name theirs; `a && b` holds
/// only for values both allow (either side false makes it false, even when the other cannot be
/// evaluated); `a || b` for the values either names, when both name some. `None`: any value. A
/// condition is false — never an error — for a value outside its set (the field is always a
/// string), so skipping it decides exactly as evaluating it would.
fn names_at(expr: &IdedExpr, field: Field) -> Option<Vec<String>> {
    let Expr::Call(call) = &expr.expr else {
        return None;
    };
    if call.target.is_some() {
        return None;
    }
    let is_field = |e: &IdedExpr| is_select(e, field);
    match (call.func_name.as_str(), call.args.as_slice()) {
        (operators::LOGICAL_AND, [a, b]) => match (names_at(a, field), names_at(b, field)) {
            (Some(x), Some(y)) => Some(x.into_iter().filter(|n| y.contains(n)).collect()),
            (x, y) => x.or(y),
        },
        (operators::LOGICAL_OR, [a, b]) => {
            let mut names = names_at(a, field)?;
            names.extend(names_at(b, field)?);
            Some(names)
        }
        (operators::EQUALS, [a, b]) => match (is_field(a), is_field(b)) {
            (true, false) => string_literal(b).map(|n| vec![n]),
            (false, true) => string_literal(a).map(|n| vec![n]),
            _ => None,
        },
        (operators::IN, [a, b]) if is_field(a) => match &b.expr {
            Expr::List(list) => list.elements.iter().map(string_literal).collect(),
            _ => None,
        },
        _ => None,
    }
}

/// The variables a request gives its rules.
const VARIABLES: [&str; 7] = [
    "caller", "kind", "tool", "resource", "prompt", "args", "result",
];

/// Makes every field selection on a request variable (`args.text`, `caller.claims.roles`,
/// `has(args.id)`) in `expr` select from the variable directly. `cel` evaluates `a.b.c` as a
/// qualified name: it joins it into a string and looks the variable `a.b.c`, the type `a.b.c`, the
/// variable `a.b` and the variable `a` up in turn (a type lookup under SipHash each) before
/// selecting the fields — on every evaluation. A request variable's name never starts a longer
/// variable or type name, so `a` is what it always finds: written `(true ? a : a).b.c`, the root
/// is no name, and `a` is resolved as an identifier (same scopes, so a comprehension's own
/// variable of that name still wins) with `.b` and `.c` selected on it — the same value, or the
/// same error, for about a fifth of the work.
fn direct_selects(expr: &mut IdedExpr) {
    match &mut expr.expr {
        Expr::Select(select) => {
            let operand = &mut select.operand;
            let variable = matches!(&operand.expr, Expr::Ident(name)
                if VARIABLES.contains(&name.trim_start_matches('.')));
            if variable {
                let ident = std::mem::take(&mut **operand);
                let id = ident.id;
                let yes = IdedExpr {
                    id,
                    expr: Expr::Literal(LiteralValue::Boolean(CelBool::from(true))),
                };
                operand.expr = Expr::Call(CallExpr {
                    func_name: operators::CONDITIONAL.to_owned(),
                    target: None,
                    args: vec![yes, ident.clone(), ident],
                });
                operand.id = id;
            } else {
                direct_selects(operand);
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                direct_selects(target);
            }
            call.args.iter_mut().for_each(direct_selects);
        }
        Expr::Comprehension(c) => {
            for e in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                direct_selects(e);
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(direct_selects),
        Expr::Map(map) => map
            .entries
            .iter_mut()
            .for_each(|e| entry_selects(&mut e.expr)),
        Expr::Struct(st) => st
            .entries
            .iter_mut()
            .for_each(|e| entry_selects(&mut e.expr)),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry_selects(entry: &mut EntryExpr) {
    match entry {
        EntryExpr::StructField(f) => direct_selects(&mut f.value),
        EntryExpr::MapEntry(m) => {
            direct_selects(&mut m.key);
            direct_selects(&mut m.value);
        }
    }
}

/// Whether `expr` is `field` (`tool.name`, …).
fn is_select(expr: &IdedExpr, (variable, name): Field) -> bool {
    matches!(&expr.expr, Expr::Select(select)
        if !select.test
            && select.field == name
            && matches!(&select.operand.expr, Expr::Ident(id) if id == variable))
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

/// A value as `cel` evaluates it, borrowing for `'v`.
type Val<'v> = Box<dyn cel::common::value::Val + 'v>;

/// The variables of one request, looked up by name (a match, not a map of names).
#[derive(Debug)]
struct Vars<'v> {
    caller: Option<Val<'v>>,
    kind: Option<Val<'v>>,
    tool: Option<Val<'v>>,
    resource: Option<Val<'v>>,
    prompt: Option<Val<'v>>,
    args: Option<Val<'v>>,
    result: Option<Val<'v>>,
}

impl cel::context::VariableResolver for Vars<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<cel::common::value::CowVal<'b, 'b>> {
        let value = match variable {
            "caller" => &self.caller,
            "kind" => &self.kind,
            "tool" => &self.tool,
            "resource" => &self.resource,
            "prompt" => &self.prompt,
            "args" => &self.args,
            "result" => &self.result,
            _ => return None,
        };
        let value: &'b (dyn cel::common::value::Val + 'b) = value.as_deref()?;
        Some(cel::common::value::CowVal::Borrowed(value))
    }
}

fn text_val(text: &str) -> Val<'_> {
    Box::new(CelString::from(text))
}

/// A map of `entries`, as `caller` and `tool` are.
fn fields<'v>(entries: Vec<(&'static str, Val<'v>)>) -> Val<'v> {
    let map: HashMap<CelMapKey<'v>, Val<'v>> = entries
        .into_iter()
        .map(|(k, v)| (CelMapKey::from(k), v))
        .collect();
    Box::new(CelMap::from(map))
}

fn object_val(map: &Map<String, Value>) -> Val<'_> {
    let map: HashMap<CelMapKey<'_>, Val<'_>> = map
        .iter()
        .map(|(k, v)| (CelMapKey::from(k.as_str()), json_val(v)))
        .collect();
    Box::new(CelMap::from(map))
}

/// `result` as an `on: [results]` rule sees it.
fn result_val<'v>(result: &ResultFacts<'v>) -> Val<'v> {
    let mut counts: HashMap<&'static str, i64> = HashMap::new();
    for d in detect::DETECTORS {
        counts.insert(d.name, 0);
        counts.insert(d.group.name(), 0);
    }
    for f in &result.findings.0 {
        for key in [f.name(), f.group()] {
            *counts.entry(key).or_default() += i64::from(f.count);
        }
    }
    let counts: HashMap<CelMapKey<'v>, Val<'v>> = counts
        .into_iter()
        .map(|(k, n)| (CelMapKey::from(k), Box::new(CelInt::from(n)) as Val<'v>))
        .collect();
    // None is an empty map, so `has(result.structuredContent.x)` is false, not an error.
    let structured: Val<'v> = match result.structured {
        Some(value) => json_val(value),
        None => fields(Vec::new()),
    };
    fields(vec![
        ("text", text_val(result.text)),
        ("structuredContent", structured),
        ("isError", Box::new(CelBool::from(result.is_error))),
        ("findings", Box::new(CelMap::from(counts))),
    ])
}

/// A JSON value as CEL sees it (numbers: integers when they are, else doubles).
fn json_val(value: &Value) -> Val<'_> {
    match value {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(s) => text_val(s),
        Value::Array(items) => Box::new(CelList::from(
            items.iter().map(json_val).collect::<Vec<_>>(),
        )),
        Value::Object(map) => object_val(map),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_tools_a_condition_names_are_read_from_its_expression() {
        let agents = |when: &str| {
            let program = Env::stdlib().compile(when).expect("compiles");
            names_at(program.expression(), CALLER_AGENT)
        };
        assert_eq!(
            agents("caller.agent == 'billing' && args.n > 1"),
            Some(vec!["billing".to_owned()])
        );
        assert_eq!(agents("caller.agent != 'billing'"), None);
        let named = |when: &str| {
            let program = Env::stdlib().compile(when).expect("compiles");
            names_at(program.expression(), TOOL_NAME).map(|mut v| {
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
                source_name: tool,
                annotations: &NONE,
            },
            plugin: "p",
            args,
        }
    }

    #[test]
    fn result_rules_see_the_result_and_its_findings_and_only_results() {
        let policy = Policy::compile(&settings(json!({
            "rules": [
                {"name": "no-cards", "on": ["results"], "outcome": "deny",
                 "when": "result.findings.payment_card > 0 || result.findings.credentials > 1",
                 "message": "no cards"},
                {"name": "big", "on": ["results"], "outcome": "deny",
                 "when": "tool.name == 'echo' && size(result.text) > 10 && !result.isError"},
                {"name": "vip", "on": ["results"], "outcome": "deny",
                 "when": "has(result.structuredContent.vip) && result.structuredContent.vip"},
                {"name": "calls", "when": "true", "outcome": "allow"},
            ]
        })))
        .expect("compiles");
        assert!(policy.polices_results());
        let args = json!({});
        let call = facts(None, "echo", &args);
        // A request is decided by the request's rules only.
        assert_eq!(
            policy.decide(&call),
            Decision::Allow {
                rule: Some("calls")
            }
        );
        let card = detect::index_of("payment_card").expect("known");
        let found = guardrails::Findings(vec![guardrails::Finding {
            detector: card,
            count: 1,
            action: None,
        }]);
        let none = guardrails::Findings::default();
        let result = |text, structured, is_error, findings| ResultFacts {
            text,
            structured,
            is_error,
            findings,
        };
        let denied = policy.decide_result(&call, &result("ok", None, false, &found));
        assert!(
            matches!(&denied, Decision::Deny { rule: "no-cards", message } if message == "no cards"),
            "{denied:?}"
        );
        assert!(matches!(
            policy.decide_result(&call, &result("a long long text", None, false, &none)),
            Decision::Deny { rule: "big", .. }
        ));
        assert_eq!(
            policy.decide_result(&call, &result("a long long text", None, true, &none)),
            Decision::Allow { rule: None }
        );
        let vip = json!({"vip": true});
        assert!(matches!(
            policy.decide_result(&call, &result("", Some(&vip), false, &none)),
            Decision::Deny { rule: "vip", .. }
        ));
        // Only allow and deny, in a rule of its own.
        for bad in [
            json!({"name": "r", "on": ["results", "tools"], "outcome": "deny"}),
            json!({"name": "r", "on": ["results"], "outcome": "approve"}),
        ] {
            let err = Policy::compile(&settings(json!({"rules": [bad]}))).unwrap_err();
            assert!(err.to_string().contains("results"), "{err}");
        }
        let plain = Policy::compile(&settings(json!({"rules": [
            {"name": "r", "when": "true", "outcome": "allow"}
        ]})))
        .expect("compiles");
        assert!(!plain.polices_results());
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
            ask(Subject::Resource {
                uri: "x://1",
                raw: "X://1"
            })
            .as_deref(),
            Some("reads")
        );
        assert_eq!(
            ask(Subject::Resource {
                uri: "y://1",
                raw: "y://1"
            }),
            None
        );
        assert_eq!(
            ask(Subject::Prompt { name: "p" }).as_deref(),
            Some("prompts")
        );
        assert_eq!(ask(Subject::Prompt { name: "q" }), None);
        let none = Value::Null;
        let tool = Subject::Tool {
            name: "t",
            source_name: "t",
            annotations: &none,
        };
        assert_eq!(ask(tool).as_deref(), Some("any-tool"));
        let err = Policy::compile(&settings(json!({"rules": [
            {"name": "nothing", "on": [], "outcome": "deny"},
        ]})))
        .expect_err("polices nothing");
        assert!(err.to_string().contains("`on`"), "{err}");
    }

    /// The context as `cel`'s own values, converted from JSON (the way it was built before it
    /// borrowed from the call): every variable, whether a rule reads it or not.
    fn converted<'a>(env: &Arc<Env>, facts: &CallFacts<'a>) -> Context<'a, 'a> {
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
                Value::Object(map) => CelValue::from(
                    map.iter()
                        .map(|(k, v)| (k.clone(), to_cel(v)))
                        .collect::<HashMap<String, CelValue>>(),
                ),
            }
        }
        let mut context = Context::with_env(Arc::clone(env));
        let claims = Value::Object(facts.claims.cloned().unwrap_or_default());
        let caller = json!({"user": facts.user.unwrap_or(""), "agent": facts.agent.unwrap_or(""),
                            "claims": claims});
        context.add_variable_from_value("caller", to_cel(&caller));
        context.add_variable_from_value("kind", to_cel(&json!(facts.subject.kind())));
        let Subject::Tool {
            name,
            source_name,
            annotations,
        } = facts.subject
        else {
            unreachable!("tools only here")
        };
        let tool = json!({"name": name, "source_name": source_name, "plugin": facts.plugin,
                          "annotations": annotations});
        context.add_variable_from_value("tool", to_cel(&tool));
        let empty = json!({"uri": "", "raw": "", "name": "", "plugin": ""});
        context.add_variable_from_value("resource", to_cel(&empty));
        context.add_variable_from_value("prompt", to_cel(&empty));
        context.add_variable_from_value("args", to_cel(facts.args));
        context
    }

    #[test]
    fn resource_raw_is_the_uri_as_sent_and_empty_for_a_tool() {
        let policy = Policy::compile(&settings(json!({"rules": [
            {"name": "dots", "on": ["resources", "tools"], "outcome": "deny",
             "when": "resource.raw.contains('/../')"},
            {"name": "spelt", "on": ["resources", "tools"], "outcome": "deny",
             "when": "size(resource.raw) > 0 && resource.raw != resource.uri"},
        ]})))
        .expect("compiles");
        let args = json!({});
        let ask = |subject| {
            policy
                .decide(&CallFacts {
                    subject,
                    ..facts(None, "t", &args)
                })
                .rule()
                .map(str::to_owned)
        };
        let read = |raw| Subject::Resource {
            uri: "x://h/b",
            raw,
        };
        assert_eq!(ask(read("x://h/a/../b")).as_deref(), Some("dots"));
        assert_eq!(ask(read("X://h/b")).as_deref(), Some("spelt"));
        assert_eq!(ask(read("x://h/b")), None);
        assert_eq!(ask(facts(None, "t", &args).subject), None);
    }

    #[test]
    fn the_borrowed_context_evaluates_as_converted_values_do() {
        let whens = [
            "size(args.text) > 3 && args.text.startsWith('he')",
            "has(args.id) && args.id == 7 && args.id < 7.5 && args.id != 7u",
            "args.big > 9223372036854775806u && args.neg < -1 && args.f == 1.5",
            "'k' in args && args.k.v == [1, 'two', null, true] && size(args) == 8",
            "args.items.exists(i, i == 'x') && args.items.all(i, size(i) < 3)",
            "args == {'text': 'hello', 'id': 7} || args.nested.a.b == 'deep'",
            "'admin' in caller.claims.roles && caller.claims.sub == caller.user",
            "caller.agent == '' && tool.annotations.destructiveHint == false",
            "tool.name == 'echo' && tool.plugin == 'p' && kind == 'tool'",
            "resource.uri == '' && prompt.name == '' && type(args.f) == double",
            "args.missing > 1",
            "args.text + 1",
        ];
        let args = json!({"text": "hello", "id": 7, "big": u64::MAX, "neg": -5, "f": 1.5,
                          "k": {"v": [1, "two", null, true]}, "items": ["x", "y"],
                          "nested": {"a": {"b": "deep"}}});
        let claims: Map<String, Value> =
            serde_json::from_value(json!({"sub": "ana", "roles": ["admin"]})).expect("claims");
        let annotations = json!({"destructiveHint": false});
        let facts = CallFacts {
            user: Some("ana"),
            claims: Some(&claims),
            subject: Subject::Tool {
                name: "echo",
                source_name: "echo",
                annotations: &annotations,
            },
            ..facts(None, "echo", &args)
        };
        for when in whens {
            let rules = json!({"rules": [{"name": "r", "when": when, "outcome": "deny"}]});
            let policy = Policy::compile(&settings(rules)).expect("compiles");
            let program = stdlib().compile(when).expect("compiles");
            let vars = policy.vars(&facts, None);
            let borrowed = policy.rules()[0].evaluate(&policy.context(&vars));
            let converted = program.execute(&converted(stdlib(), &facts));
            assert_eq!(borrowed, converted, "{when}");
        }
    }

    #[test]
    fn direct_selects_evaluate_as_the_qualified_names_do() {
        let whens = [
            "size(args.text) > 3 && args.text.startsWith('he')",
            "has(args.id) && args.id == 7",
            "has(args.nested.a.b) && !has(args.nested.a.c)",
            "has(caller.claims.roles) && 'admin' in caller.claims.roles",
            "caller.claims.sub == caller.user && caller.agent == ''",
            "[{'text': 'he'}].exists(args, args.text == 'he')",
            "args.items.exists(args, args == 'x')",
            "args.items.map(i, i + args.text)[0] == 'xhello'",
            "args['text'] == args.text && tool.annotations.destructiveHint == false",
            "tool.name == 'echo' && tool.plugin == 'p' && resource.uri == ''",
            ".args.text == 'hello' && .caller.user == 'ana'",
            "{'k': args.id}.k == 7 && [args.id][0] == 7",
            "args.nested.a.b == 'deep' ? args.id > 1 : args.id < 1",
            "has(args.missing.x)",
            "caller.claims.missing.x == 1",
            "args.text.x == 1",
            "args.id.size() > 0",
        ];
        let claims: Map<String, Value> =
            serde_json::from_value(json!({"sub": "ana", "roles": ["admin"]})).expect("claims");
        let annotations = json!({"destructiveHint": false});
        let holds = json!({"text": "hello", "id": 7, "items": ["x", "y"],
                           "nested": {"a": {"b": "deep"}}});
        let fails = json!({"text": "no", "id": 1, "items": ["y"], "nested": {"a": {"c": 1}}});
        let (mut yes, mut no, mut errors) = (0, 0, 0);
        for args in [&holds, &fails] {
            let facts = CallFacts {
                user: Some("ana"),
                claims: Some(&claims),
                subject: Subject::Tool {
                    name: "echo",
                    source_name: "echo",
                    annotations: &annotations,
                },
                ..facts(None, "echo", args)
            };
            for when in whens {
                let rules = json!({"rules": [{"name": "r", "when": when, "outcome": "deny"}]});
                let policy = Policy::compile(&settings(rules)).expect("compiles");
                let rule = &policy.rules()[0];
                let program = stdlib().compile(when).expect("compiles");
                assert_ne!(&rule.expr, program.expression(), "{when}: not rewritten");
                let vars = policy.vars(&facts, None);
                let context = policy.context(&vars);
                let direct = rule.evaluate(&context);
                assert_eq!(direct, program.execute(&context), "{when} on {args}");
                match direct {
                    Ok(CelValue::Bool(true)) => yes += 1,
                    Ok(_) => no += 1,
                    Err(_) => errors += 1,
                }
            }
        }
        assert!(yes > 5 && no > 5 && errors > 3, "{yes} {no} {errors}");
    }

    /// Every condition `whens` holds on four requests (a tool call with claims and arguments of
    /// every type, another without, a read and a prompt).
    fn on_four_requests(whens: &[&str], mut each: impl FnMut(&str, &CallFacts<'_>, &Policy)) {
        let claims: Map<String, Value> =
            serde_json::from_value(json!({"sub": "ana", "roles": ["admin"]})).expect("claims");
        let annotations = json!({"destructiveHint": false});
        let full = json!({"text": "hello", "id": 7, "items": ["x", "y"], "flag": true,
                          "mixed": [1, "a"], "f": 1.0, "big": u64::MAX, "u": "é", "n": null,
                          "g": 7.0, "num": "12", "frac": "1.5"});
        let other = json!({"text": "héllo wörld", "id": 1, "items": [], "flag": false});
        let (empty, odd) = (json!({}), json!({"id": 7.5, "text": 3}));
        let requests = [
            CallFacts {
                user: Some("ana"),
                agent: Some("research"),
                claims: Some(&claims),
                subject: Subject::Tool {
                    name: "echo",
                    source_name: "echo",
                    annotations: &annotations,
                },
                ..facts(None, "echo", &full)
            },
            facts(Some("bob"), "other", &other),
            CallFacts {
                subject: Subject::Resource {
                    uri: "x://1",
                    raw: "X://1",
                },
                ..facts(None, "", &empty)
            },
            CallFacts {
                subject: Subject::Prompt { name: "p" },
                ..facts(Some("ana"), "", &odd)
            },
        ];
        for when in whens {
            let rules = json!({"rules": [{"name": "r", "when": when, "outcome": "deny",
                                          "on": ["tools", "resources", "prompts"]}]});
            let policy = Policy::compile(&settings(rules)).expect("compiles");
            for request in &requests {
                each(when, request, &policy);
            }
        }
    }

    #[test]
    fn checks_decide_only_as_the_interpreter_would() {
        let whens = [
            "caller.agent == 'research'",
            "caller.user != 'ana' && 'ana' != caller.agent",
            "size(args.text) > 5 || args.text.size() <= 5",
            "10 > size(args.text) && size(args.items) == 2",
            "size(caller.claims) >= 1 || size(args) < 3",
            "has(args.id) && args.id == 7",
            "args.id != 7 && args.id > 6 && args.id < 100 && 8 <= args.id",
            "has(caller.claims.roles) && 'admin' in caller.claims.roles",
            "'admin' in caller.claims.roles",
            "'x' in args.items || 'text' in args",
            "'a' in args.mixed",
            "tool.name in ['echo', 'other'] && args.text in ['hello', 'é']",
            "!has(args.id) || args.flag",
            "args.flag || !args.flag && true",
            "args.missing == 1 && false",
            "args.missing == 1 || true",
            "args.missing == 1",
            "tool.annotations.destructiveHint == false",
            "has(tool.annotations.readOnlyHint)",
            "resource.uri == 'x://1' && kind == 'resource'",
            "prompt.name == 'p' || prompt.plugin == 'p' || tool.plugin == 'p'",
            "args.f == 1 || args.big > 1",
            "args.id == 'seven' || args.text == 7 || args.id == true",
            "size(args.id) > 1",
            "size(args.u) == 1 && args.n == null",
            "false || size(args.text) > 1",
            "args.items.exists(i, i == 'x') && args.id == 7",
            "string(args.id) == '7' || string(args.flag) == 'false'",
            "string(args.text) + '!' == 'hello!' || string(args.big) == '18446744073709551615'",
            "string(args.f) == '1' || string(args.n) == 'null'",
            "int(args.text) > 0 || int(string(args.id)) == args.id",
            "int('12') + args.id == 19 && int(args.big) > 0",
            "args.id + 1 > 7 && args.id * 2 <= 14",
            "args.id - 8 < 0 || args.id / 2 == 3 || args.id % 4 == 3",
            "args.id / 0 == 1 || args.id % 0 == 1 || false",
            "args.id * 9223372036854775807 > 0 || -args.id < -5",
            "size(args.items) * 2 <= 100 && size(args.text + 'x') > 5",
            "args.items.exists(i, i == 'x')",
            "args.items.all(i, i.startsWith('x') || i == 'y')",
            "args.items.exists_one(i, i in ['x', 'z'])",
            "args.mixed.exists(m, m == 1) || args.mixed.exists_one(m, m > 0)",
            "args.mixed.all(m, m == 1)",
            "caller.claims.exists(k, k == 'sub') && caller.claims.all(k, size(k) > 2)",
            "caller.claims.roles.exists(r, r == 'admin') && args.items.all(x, args.text != x)",
            "args.items.exists(x, args.items.exists(y, x != y))",
            "args.items.exists(x, args.items.exists(x, x == 'y'))",
            "args.text.exists(c, c == 'h') || args.n.all(x, x)",
            "args.items.all(x, x > 'w') && tool.name < 'f' && args.text >= 'h'",
            "args.f + 1 > 1 || args.big - 1 > 1 || args.u + args.id == 'é'",
            "args.id * 4611686018427387904 > 0",
            "args.id / 0 == 0",
            "(args.id - 10) % 4 == -3",
            "-(-9223372036854775807 - args.id) > 0",
            "string(args.f) == '1.0'",
            "int(args.frac) == 1",
            "int(args.num) + 1 == 13",
            "args.id != args.g",
            "args.f > 0.5",
            "args.f == 1",
            "0.5 >= args.f",
            "double(args.id) == 7.0",
            "double(args.id) >= args.f",
            "double(args.f) != 1.0",
            "double(args.num) > 1.0",
            "(args.id > 5 ? args.text : 'short') == 'hello'",
            "(has(args.nope) ? args.nope : args.id) == 7",
            "(args.num ? 1 : 2) == 1",
        ];
        let (mut yes, mut no, mut open) = (0, 0, 0);
        on_four_requests(&whens, |when, facts, policy| {
            let program = stdlib().compile(when).expect("compiles");
            let vars = policy.vars(facts, None);
            let cel = program.execute(&policy.context(&vars));
            let check = policy.rules()[0].check.as_ref().expect("a check");
            match check.eval(facts) {
                Some(b) => {
                    assert_eq!(cel, Ok(CelValue::Bool(b)), "{when} on {facts:?}");
                    if b { yes += 1 } else { no += 1 }
                }
                None => open += 1,
            }
            let decided = policy.decide(facts).rule().is_some();
            assert_eq!(
                decided,
                cel != Ok(CelValue::Bool(false)),
                "{when} on {facts:?}"
            );
        });
        // Every decided answer was the interpreter's; these pin how many there are, so a check
        // that stops deciding a shape fails here too.
        assert_eq!((yes, no, open), (63, 47, 158));
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

    #[test]
    fn only_approve_rules_name_an_approver_and_the_decision_carries_it() {
        let err = Policy::compile(&settings(json!({
            "rules": [{"name": "d", "outcome": "deny", "approver": "console"}]
        })))
        .expect_err("an approver on a deny rule");
        assert!(err.to_string().contains("only an `approve` rule"), "{err}");
        let policy = Policy::compile(&settings(json!({
            "rules": [{"name": "a", "outcome": "approve", "approver": "console", "show": ["x"]}]
        })))
        .expect("compiles");
        let args = json!({"x": 1, "y": 2});
        match policy.decide(&facts(Some("u"), "t", &args)) {
            Decision::Approve { rule, shown, by } => {
                assert_eq!((rule, by), ("a", Approver::Console));
                assert_eq!(Value::Object(shown), json!({"x": 1}));
            }
            other => panic!("{other:?}"),
        }
    }
}
