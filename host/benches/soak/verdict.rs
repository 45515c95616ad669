//! The oracle and the report: every call judged against the fault windows, every task's end
//! against what was asked, the budget against its rate, the resources' growth over the second
//! half of the run, p99 outside the fault windows; a Markdown report and CSV files in
//! `target/soak/`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::journal::{Asked, BudgetTally, Call, Failure, Fault, Task};
use crate::sample::{Sample, slope};
use crate::world::{BUDGET_CALLS, BUDGET_SECS};

/// How long after a fault's window a call may still fail (a replica's restart noticed by nginx,
/// a task lease of 5 s running out, the store's reconnection backing off up to 2 s).
pub const GRACE: f64 = 10.0;

/// The bounds of a run.
pub struct Bounds {
    /// p99 of calls outside fault windows, milliseconds.
    pub p99_ms: f64,
    /// Fitted growth over the second half: resident memory (KiB, and as a fraction of the mean),
    /// threads, file descriptors, sockets.
    pub rss_kb: f64,
    pub rss_fraction: f64,
    pub threads: f64,
    pub fds: f64,
    pub sockets: f64,
}

/// Whether call `c` falls in the window of fault `f` (and, when `f` has a scope, is of a tool
/// in it).
fn in_window(c: &Call, f: &Fault) -> bool {
    let end = c.at + c.micros as f64 / 1e6;
    end >= f.start
        && c.at <= f.end + GRACE
        && (f.scope.is_empty() || f.scope.contains(&c.tool.as_str()))
}

/// Whether call `c` falls in a window of a fault that excuses it.
fn excused(c: &Call, faults: &[Fault]) -> bool {
    faults.iter().any(|f| f.excuses && in_window(c, f))
}

/// Whether call `c` was in flight where a kill fault struck, answered with the error the host
/// documents for it, never with a result: in a worker the kill-worker fault killed (the crash, a
/// tool error naming the signal), or at a stdio upstream the kill-upstream fault killed ("the
/// calls in flight answer with an error": it went away during the request). Either may have run
/// the call, so neither is retryable.
fn killed_under(c: &Call, faults: &[Fault], error: &str) -> bool {
    let fault = if error.contains("crashed") {
        "kill-worker"
    } else if error.contains("went away during the request") {
        "kill-upstream"
    } else {
        return false;
    };
    faults.iter().any(|f| f.name == fault && in_window(c, f))
}

/// Whether call `c` came after a Redis restart (within the run's task lifetimes: 90 s).
fn forgotten(c: &Call, faults: &[Fault]) -> bool {
    faults
        .iter()
        .any(|f| f.name == "restart-redis" && c.at >= f.start && c.at <= f.end + 90.0)
}

/// What the run found.
#[derive(Default)]
pub struct Findings {
    pub failures: Vec<String>,
    pub lines: String,
}

impl Findings {
    fn fail(&mut self, what: String) {
        self.failures.push(what);
    }
}

/// Judge the calls: wrong answers, failures outside windows or not retryable; p99 outside.
pub fn judge_calls(calls: &[Call], faults: &[Fault], b: &Bounds, out: &mut Findings) -> (f64, f64) {
    let mut excused_by: BTreeMap<String, u64> = BTreeMap::new();
    let mut unexcused_by: BTreeMap<String, u64> = BTreeMap::new();
    let mut calm = Vec::new();
    let (mut wrong, mut unexcused) = (0, 0);
    for c in calls {
        let inside = excused(c, faults);
        match &c.outcome {
            Ok(()) if !inside => calm.push(c.micros),
            Ok(()) => {}
            Err(Failure::Wrong(w)) => {
                wrong += 1;
                if wrong <= 20 {
                    out.fail(format!(
                        "WRONG at {:.1}s {} {}: {w}",
                        c.at, c.client, c.tool
                    ));
                }
            }
            Err(Failure::Retryable(e)) if inside => {
                *excused_by.entry(shorten(e)).or_default() += 1;
            }
            // A restarted Redis (no persistence here) forgot the tasks it held: asked for one
            // of them, the host rightly says it does not know it.
            Err(Failure::Other(e)) if e.contains("Task not found") && forgotten(c, faults) => {
                *excused_by.entry(shorten(e)).or_default() += 1;
            }
            Err(Failure::Other(e)) if killed_under(c, faults, e) => {
                *excused_by.entry(shorten(e)).or_default() += 1;
            }
            Err(Failure::Retryable(e) | Failure::Other(e)) => {
                unexcused += 1;
                *unexcused_by
                    .entry(format!("{} {}: {}", c.client, c.tool, shorten(e)))
                    .or_default() += 1;
                if unexcused <= 20 {
                    let when = if inside {
                        "inside a fault window, not retryable"
                    } else {
                        "outside every fault window"
                    };
                    out.fail(format!(
                        "FAILED at {:.1}s {} {} ({when}): {e}",
                        c.at, c.client, c.tool
                    ));
                }
            }
        }
    }
    if wrong > 20 || unexcused > 20 {
        out.fail(format!(
            "… {wrong} wrong answers and {unexcused} unexcused failures in all"
        ));
    }
    for (what, n) in &unexcused_by {
        out.fail(format!("{n} × unexcused: {what}"));
    }
    calm.sort_unstable();
    let pct = |p: f64| {
        calm.get(((calm.len() as f64 * p) as usize).min(calm.len().saturating_sub(1)))
            .map_or(0.0, |m| *m as f64 / 1000.0)
    };
    let (p50, p99) = (pct(0.50), pct(0.99));
    if p99 > b.p99_ms {
        out.fail(format!(
            "p99 outside fault windows {p99:.1} ms > {} ms",
            b.p99_ms
        ));
    }
    let _ = writeln!(
        out.lines,
        "\nRetryable failures inside fault windows (excused), by kind:\n"
    );
    for (what, n) in &excused_by {
        let _ = writeln!(out.lines, "- {n} × {what}");
    }
    (p50, p99)
}

/// An error message with its numbers and ids dropped, to tally alike ones together.
fn shorten(e: &str) -> String {
    let s: String = e
        .chars()
        .take(90)
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    s.replace('\n', " ")
}

/// Judge the tasks: each ends as asked, unless a store or replica fault overlapped it.
pub fn judge_tasks(tasks: &[Task], faults: &[Fault], out: &mut Findings) -> (usize, usize, usize) {
    let (mut right, mut excused_n, mut lost) = (0, 0, 0);
    for t in tasks {
        let overlapped = faults.iter().any(|f| {
            f.excuses && f.scope.is_empty() && t.ended >= f.start && t.created <= f.end + GRACE
        });
        // A cancel that never got through may let the task complete: that is what was asked last.
        let completed_uncancelled =
            t.asked == Asked::Cancel && !t.cancel_acked && t.end.starts_with("completed");
        if t.right || completed_uncancelled {
            right += 1;
        } else if overlapped && (t.end.starts_with("failed") || t.end.starts_with("missing")) {
            excused_n += 1;
        } else {
            lost += 1;
            out.fail(format!(
                "TASK created {:.1}s ended {:.1}s asked {:?}: {}",
                t.created, t.ended, t.asked, t.end
            ));
        }
    }
    (right, excused_n, lost)
}

/// Judge the budget: never more admitted than it allows (plus a full bucket per Redis restart,
/// which forgets the counters), some refused, every refusal well-formed.
pub fn judge_budget(b: &BudgetTally, secs: f64, faults: &[Fault], out: &mut Findings) -> u64 {
    let restarts = faults.iter().filter(|f| f.name == "restart-redis").count() as u64;
    let allowed = BUDGET_CALLS
        + (secs / BUDGET_SECS as f64 * BUDGET_CALLS as f64).ceil() as u64
        + BUDGET_CALLS * restarts;
    if b.admitted > allowed {
        out.fail(format!(
            "BUDGET admitted {} calls, at most {allowed} allowed",
            b.admitted
        ));
    }
    if b.refused == 0 {
        out.fail("BUDGET never refused a call: the policy was not exercised".into());
    }
    for m in b.malformed.iter().take(5) {
        out.fail(format!(
            "BUDGET refusal without its budget or retryAfter: {m}"
        ));
    }
    allowed
}

/// Judge the resources: the fitted growth over the second half, per series of one process.
pub fn judge_resources(samples: &[Sample], secs: f64, b: &Bounds, out: &mut Findings) {
    let mut series: BTreeMap<(String, u32), Vec<&Sample>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.at >= secs / 2.0 && s.pid != 0) {
        series.entry((s.what.clone(), s.pid)).or_default().push(s);
    }
    let _ = writeln!(
        out.lines,
        "\n| process | pid | samples | RSS start→end (MiB) | RSS growth/h (MiB) | threads | fds | sockets |\n|---|---|---|---|---|---|---|---|"
    );
    for ((what, pid), ss) in &series {
        // A process restarted during the second half has too short a series to judge.
        if ss.len() < 8 || ss.last().unwrap().at - ss[0].at < secs / 2.0 * 0.8 {
            continue;
        }
        let xs: Vec<f64> = ss.iter().map(|s| s.at).collect();
        let span = xs[xs.len() - 1] - xs[0];
        let grow = |f: &dyn Fn(&Sample) -> u64| {
            slope(&xs, &ss.iter().map(|s| f(s) as f64).collect::<Vec<_>>()) * span
        };
        let rss = grow(&|s| s.rss_kb);
        let mean_rss = ss.iter().map(|s| s.rss_kb as f64).sum::<f64>() / ss.len() as f64;
        let (th, fd, so) = (grow(&|s| s.threads), grow(&|s| s.fds), grow(&|s| s.sockets));
        let first = &ss[0];
        let last = ss[ss.len() - 1];
        let _ = writeln!(
            out.lines,
            "| {what} | {pid} | {} | {:.1} → {:.1} | {:.1} | {}→{} (fit {th:+.1}) | {}→{} (fit {fd:+.1}) | {}→{} (fit {so:+.1}) |",
            ss.len(),
            first.rss_kb as f64 / 1024.0,
            last.rss_kb as f64 / 1024.0,
            rss / span * 3600.0 / 1024.0,
            first.threads,
            last.threads,
            first.fds,
            last.fds,
            first.sockets,
            last.sockets
        );
        if rss > b.rss_kb.max(mean_rss * b.rss_fraction) {
            out.fail(format!(
                "{what} (pid {pid}): RSS grew {rss:.0} KiB over the second half"
            ));
        }
        for (name, g, bound) in [
            ("threads", th, b.threads),
            ("fds", fd, b.fds),
            ("sockets", so, b.sockets),
        ] {
            if g > bound {
                out.fail(format!(
                    "{what} (pid {pid}): {name} grew {g:.1} over the second half (bound {bound})"
                ));
            }
        }
    }
}

/// Per 10 s of the run: calls, failures, p50 and p99 (ms).
pub fn timeline(calls: &[Call]) -> String {
    let mut buckets: BTreeMap<u64, Vec<&Call>> = BTreeMap::new();
    for c in calls {
        buckets.entry((c.at / 10.0) as u64).or_default().push(c);
    }
    let mut csv = String::from("second,calls,failed,p50_ms,p99_ms\n");
    for (b, cs) in buckets {
        let mut ok: Vec<u64> = cs
            .iter()
            .filter(|c| c.outcome.is_ok())
            .map(|c| c.micros)
            .collect();
        ok.sort_unstable();
        let p = |q: f64| {
            ok.get(((ok.len() as f64 * q) as usize).min(ok.len().saturating_sub(1)))
                .map_or(0.0, |m| *m as f64 / 1000.0)
        };
        let _ = writeln!(
            csv,
            "{},{},{},{:.2},{:.2}",
            b * 10,
            cs.len(),
            cs.len() - ok.len(),
            p(0.5),
            p(0.99)
        );
    }
    csv
}

/// Write `name` under `dir`.
pub fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

/// The samples as CSV.
pub fn samples_csv(samples: &[Sample]) -> String {
    let mut csv = String::from("second,what,pid,rss_kb,threads,fds,sockets\n");
    for s in samples {
        let _ = writeln!(
            csv,
            "{:.1},{},{},{},{},{},{}",
            s.at, s.what, s.pid, s.rss_kb, s.threads, s.fds, s.sockets
        );
    }
    csv
}

/// The faults as CSV.
pub fn faults_csv(faults: &[Fault]) -> String {
    let mut csv = String::from("start,end,fault,excuses,note\n");
    for f in faults {
        let _ = writeln!(
            csv,
            "{:.1},{:.1},{},{},\"{}\"",
            f.start,
            f.end,
            f.name,
            f.excuses,
            f.note.replace('"', "'")
        );
    }
    csv
}

/// Every call that failed, as CSV.
pub fn failures_csv(calls: &[Call]) -> String {
    let mut csv = String::from("second,millis,client,tool,failure\n");
    for c in calls {
        if let Err(f) = &c.outcome {
            let what = match f {
                Failure::Wrong(w) => format!("wrong: {w}"),
                Failure::Retryable(e) => format!("retryable: {e}"),
                Failure::Other(e) => format!("other: {e}"),
            };
            let _ = writeln!(
                csv,
                "{:.2},{:.1},{},{},\"{}\"",
                c.at,
                c.micros as f64 / 1000.0,
                c.client,
                c.tool,
                what.replace('"', "'")
            );
        }
    }
    csv
}
