//! Call policy: the operator's rules over who calls (`caller`), what (`tool`) and with which
//! arguments (`args`), written in CEL and evaluated on every tool call before its plugin runs.
//! The first rule whose `when` holds decides — allow, deny (with the operator's message), limit
//! (a named budget, [`budget`]) or approve (a human's yes first) — and no match allows the call.
//! A stage of its own between `access` and `plugins`: it knows nothing of plugins or registries,
//! only the plain facts the call path hands it ([`CallFacts`]).

pub mod budget;

use crate::access::auth::Claims;
use std::sync::Arc;
use std::time::Duration;

use cel::{Context, Env, Program, Value as CelValue};
use serde_json::{Map, Value, json};

use crate::config::{Budget, PolicyRule, PolicySettings, RuleOutcome};

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

/// What the policy sees of one call.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The verified caller's user id (none: unauthenticated, e.g. stdio without a user).
    pub user: Option<&'a str>,
    /// The agent whose view applies.
    pub agent: Option<&'a str>,
    /// The caller's JWT claims (none: not a JWT, e.g. a personal secret or stdio).
    pub claims: Option<&'a Claims>,
    /// The tool as clients name it.
    pub tool: &'a str,
    /// The plugin serving it.
    pub plugin: &'a str,
    /// The tool's annotations (`readOnlyHint`, `destructiveHint`, …) as JSON.
    pub annotations: &'a Value,
    /// The call's arguments.
    pub args: &'a Value,
}

/// A rule, compiled.
#[derive(Debug)]
pub struct Rule {
    /// As written.
    pub spec: PolicyRule,
    program: Program,
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
            rules.push(Rule {
                spec: spec.clone(),
                program,
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
        if self.rules.is_empty() {
            return Decision::Allow { rule: None };
        }
        let mut context = Context::with_env(Arc::clone(&self.env));
        context.add_variable_from_value(
            "caller",
            to_cel(&json!({
                "user": facts.user.unwrap_or(""),
                "agent": facts.agent.unwrap_or(""),
                "claims": facts.claims.unwrap_or(&Claims::new()),
            })),
        );
        context.add_variable_from_value(
            "tool",
            to_cel(&json!({
                "name": facts.tool,
                "plugin": facts.plugin,
                "annotations": facts.annotations,
            })),
        );
        context.add_variable_from_value("args", to_cel(facts.args));
        for rule in &self.rules {
            let name = rule.spec.name.as_str();
            match rule.program.execute(&context) {
                Ok(CelValue::Bool(false)) => continue,
                Ok(CelValue::Bool(true)) => return self.outcome(rule, facts),
                Ok(other) => {
                    tracing::warn!(rule = name, "policy rule yielded {other:?}, not a bool");
                    return Decision::Deny {
                        rule: name,
                        message: format!(
                            "refused: policy rule `{name}` could not be evaluated (it yields \
                             no bool)"
                        ),
                    };
                }
                Err(e) => {
                    tracing::warn!(rule = name, "policy rule could not be evaluated: {e}");
                    return Decision::Deny {
                        rule: name,
                        message: format!(
                            "refused: policy rule `{name}` could not be evaluated for this \
                             call: {e}"
                        ),
                    };
                }
            }
        }
        Decision::Allow { rule: None }
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
                    format!("{who}|tool:{}", facts.tool)
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
        Value::Object(map) => {
            let entries: std::collections::HashMap<String, CelValue> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            CelValue::from(entries)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml_rules: Value) -> PolicySettings {
        serde_json::from_value(yaml_rules).expect("settings")
    }

    fn facts<'a>(user: Option<&'a str>, tool: &'a str, args: &'a Value) -> CallFacts<'a> {
        static NONE: Value = Value::Null;
        CallFacts {
            user,
            agent: None,
            claims: None,
            tool,
            plugin: "p",
            annotations: &NONE,
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
