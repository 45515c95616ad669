//! Benchmark: what the call policy adds to a tool call — one `Policy::decide` (building the CEL
//! context from the caller, the tool and the arguments, then trying the rules in order) with 0, 10
//! and 100 rules. The rules read the tool's name, the caller and the arguments as operators write
//! them; none matches the call measured, so every rule is tried (the worst case for a call that is
//! allowed) — three in four evaluated, the fourth, naming another agent (`caller.agent == …`),
//! skipped by the agent index — and a second row has the last rule match. Those rules compare
//! fields with literals; two rows have rules that convert (`string()`), iterate (`exists`) and
//! compute (`+`), which needed the interpreter before the policy decided them too; a row has ten
//! rules comparing doubles (`double()`) or choosing with a conditional (`? :`), decided the same
//! way; a last row has ten rules only the interpreter evaluates (a `map` macro).
//!
//! Run: `cargo bench -p mcp-host --bench policy`. Prints a Markdown table (median of 7 batches per
//! row); docs/performance.md quotes it. Target (issue 39): under 2 µs for 10 rules.
//! `POLICY_BENCH_ROW=3` runs one row alone (0-based) and `POLICY_BENCH_ITERATIONS=1000` sets the
//! batch size: for counting instructions under callgrind
//! (`valgrind --tool=callgrind --toggle-collect='*Policy::decide*'`, divided by the calls).

#![allow(clippy::unwrap_used)]

/// The host's allocator (mimalloc), so allocation costs what it costs in `mcp-host`.
#[path = "../src/allocator.rs"]
mod allocator;

#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

use std::hint::black_box;
use std::time::{Duration, Instant};

use mcp_host::config::PolicySettings;
use mcp_host::policy::{CallFacts, Policy, Subject};
use serde_json::{Value, json};

/// Which rules a row has.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// Each names another tool (`tool.name == …` first), so a call of `echo` skips them all.
    OtherTools,
    /// None names a tool: each is tried for the call (argument sizes, the agent, claims, argument
    /// values — comparisons with literals), none matching.
    ThisCall,
    /// As `ThisCall`, with conversions, comprehensions and arithmetic (decided without the
    /// interpreter since they are).
    Interpreted,
    /// As `ThisCall`, comparing doubles (`double()`) or choosing with a conditional.
    Double,
    /// As `ThisCall`, in a shape only `cel`'s interpreter evaluates (`map`).
    Mapped,
}

/// `count` rules of `shape`, as operators write them. `last_matches`: the last rule matches the
/// call instead.
fn rules(count: usize, shape: Shape, last_matches: bool) -> PolicySettings {
    let mut rules = Vec::with_capacity(count);
    for i in 0..count {
        let when = match (shape, i % 4) {
            (Shape::OtherTools, 0) => format!("tool.name == 'tool_{i}' && size(args.text) > 64"),
            (Shape::OtherTools, 1) => {
                format!("tool.name == 'tool_{i}' && caller.agent != 'billing'")
            }
            (Shape::OtherTools, 2) => {
                format!("tool.name in ['tool_{i}', 'other_{i}'] && has(args.id)")
            }
            (Shape::OtherTools, _) => format!("tool.name == 'tool_{i}' && args.id != caller.user"),
            (Shape::ThisCall, 0) => format!("size(args.text) > {}", 100_000 + i),
            (Shape::ThisCall, 1) => format!("caller.agent == 'agent_{i}'"),
            (Shape::ThisCall, 2) => {
                format!("has(caller.claims.roles) && 'role_{i}' in caller.claims.roles")
            }
            (Shape::ThisCall, _) => format!("has(args.id) && args.id == {}", 1_000 + i),
            (Shape::Interpreted, 0) => format!("string(args.id) == 'rule_{i}'"),
            (Shape::Interpreted, 1) => {
                format!("caller.claims.roles.exists(r, r == 'role_{i}')")
            }
            (Shape::Interpreted, 2) => format!("args.text + '_' == 'rule_{i}'"),
            (Shape::Interpreted, _) => format!("has(args.id) && args.id + {i} == 0"),
            (Shape::Double, 0) => format!("double(args.id) > {}.5", 1_000 + i),
            (Shape::Double, _) => format!("(has(args.id) ? args.id : 0) == {}", 1_000 + i),
            (Shape::Mapped, _) => format!("args.map(k, k + '_').size() == {}", 1_000 + i),
        };
        rules.push(
            json!({"name": format!("rule-{i}"), "when": when, "outcome": "deny", "message": "no"}),
        );
    }
    if last_matches && let Some(last) = rules.last_mut() {
        last["when"] = json!("tool.name == 'echo' && size(args.text) < 64");
    }
    serde_json::from_value(json!({ "rules": rules })).unwrap()
}

/// Nanoseconds per decision: the median of 7 batches of `iterations`.
fn per_decision(policy: &Policy, facts: &CallFacts<'_>, iterations: u32) -> f64 {
    let mut batches: Vec<Duration> = (0..7)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iterations {
                black_box(policy.decide(black_box(facts)));
            }
            start.elapsed()
        })
        .collect();
    batches.sort();
    batches[3].as_nanos() as f64 / f64::from(iterations)
}

fn main() {
    let args = json!({"text": "hello, policy", "id": 7});
    let annotations = json!({"readOnlyHint": true, "destructiveHint": false});
    let claims: serde_json::Map<String, Value> =
        serde_json::from_value(json!({"sub": "ana", "roles": ["viewer"], "aud": "x"})).unwrap();
    let facts = CallFacts {
        user: Some("ana"),
        agent: Some("research"),
        claims: Some(&claims),
        subject: Subject::Tool {
            name: "echo",
            source_name: "echo",
            annotations: &annotations,
        },
        plugin: "fixture-basic",
        args: &args,
    };
    println!("| rules | what they test | decision | per call |");
    println!("|---|---|---|---|");
    let rows = [
        (0, Shape::OtherTools, false),
        (10, Shape::OtherTools, false),
        (100, Shape::OtherTools, false),
        (10, Shape::ThisCall, false),
        (10, Shape::ThisCall, true),
        (100, Shape::ThisCall, false),
        (10, Shape::Interpreted, false),
        (100, Shape::Interpreted, false),
        (10, Shape::Double, false),
        (10, Shape::Mapped, false),
    ];
    let only: Option<usize> = std::env::var("POLICY_BENCH_ROW")
        .ok()
        .map(|r| r.parse().unwrap());
    let fixed: Option<u32> = std::env::var("POLICY_BENCH_ITERATIONS")
        .ok()
        .map(|n| n.parse().unwrap());
    for (row, (count, shape, last_matches)) in rows.into_iter().enumerate() {
        if only.is_some_and(|only| only != row) {
            continue;
        }
        let policy = Policy::compile(&rules(count, shape, last_matches)).unwrap();
        let decision = format!("{:?}", policy.decide(&facts));
        let outcome = if decision.starts_with("Allow") {
            "allow (no rule matched)"
        } else {
            "deny (the last rule)"
        };
        let what = match shape {
            _ if count == 0 => "-",
            Shape::OtherTools => "other tools (skipped by name)",
            Shape::ThisCall => "this call (none names its tool)",
            Shape::Interpreted => "this call (conversions, comprehensions, arithmetic)",
            Shape::Double => "this call (`double()` compared, `? :`)",
            Shape::Mapped => "this call, through `cel` (`map`)",
        };
        let iterations = fixed.unwrap_or(if count >= 100 { 2_000 } else { 20_000 });
        let ns = per_decision(&policy, &facts, iterations);
        println!("| {count} | {what} | {outcome} | {:.2} µs |", ns / 1000.0);
    }
}
