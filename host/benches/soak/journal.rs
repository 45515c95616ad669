//! What the run saw, as it happened: every call's outcome and latency, every task's end, every
//! fault's window, every hostile request's answer. The oracle (`verdict`) judges it afterwards,
//! when every fault window is known.

use std::sync::Mutex;
use std::time::Instant;

/// Why a call did not answer what it had to.
#[derive(Clone, Debug)]
pub enum Failure {
    /// An answer that is not what the tool must return: never excused.
    Wrong(String),
    /// An error a client is told to retry (HTTP 429/502/503/504, a reset connection, a timeout, a
    /// JSON-RPC error with `retryAfter`, an expired legacy session): excused inside a fault window.
    Retryable(String),
    /// Any other error: never excused.
    Other(String),
}

/// One call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Seconds since the start of the run, when it was sent.
    pub at: f64,
    /// How long until its answer (or its failure), microseconds.
    pub micros: u64,
    pub client: &'static str,
    pub tool: String,
    pub outcome: Result<(), Failure>,
}

/// What a task was asked to do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Asked {
    Complete,
    Cancel,
}

/// One task, from its creation to its end as `tasks/get` last told it.
#[derive(Clone, Debug)]
pub struct Task {
    pub created: f64,
    pub ended: f64,
    pub asked: Asked,
    /// Whether a `tasks/cancel` was acknowledged.
    pub cancel_acked: bool,
    /// `completed: TEXT`, `cancelled`, `failed: MESSAGE`, `missing: ...`, `timeout: ...`.
    pub end: String,
    /// Whether the end is the one asked for, with the right result.
    pub right: bool,
}

/// One injected fault: its window and which tools it may excuse (empty: every call).
#[derive(Clone, Debug)]
pub struct Fault {
    pub name: &'static str,
    pub start: f64,
    pub end: f64,
    pub scope: &'static [&'static str],
    /// Whether calls may fail while it lasts (a slow reader or a hostile burst excuses nothing).
    pub excuses: bool,
    pub note: String,
}

/// A policy budget decision seen by the budget client.
#[derive(Clone, Debug, Default)]
pub struct BudgetTally {
    pub admitted: u64,
    pub refused: u64,
    /// Refusals that did not say which budget or when to retry.
    pub malformed: Vec<String>,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    tasks: Vec<Task>,
    faults: Vec<Fault>,
    budget: BudgetTally,
    hostile: Vec<String>,
}

/// The run's record, shared by every client and the fault scheduler.
pub struct Journal {
    pub start: Instant,
    inner: Mutex<Inner>,
}

impl Journal {
    pub fn new() -> Journal {
        Journal {
            start: Instant::now(),
            inner: Mutex::default(),
        }
    }

    /// Seconds since the start.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn call(
        &self,
        client: &'static str,
        tool: &str,
        sent: Instant,
        outcome: Result<(), Failure>,
    ) {
        let call = Call {
            at: sent.duration_since(self.start).as_secs_f64(),
            micros: sent.elapsed().as_micros() as u64,
            client,
            tool: tool.to_owned(),
            outcome,
        };
        self.inner.lock().unwrap().calls.push(call);
    }

    pub fn task(&self, task: Task) {
        self.inner.lock().unwrap().tasks.push(task);
    }

    pub fn fault(&self, fault: Fault) {
        eprintln!(
            "[{:7.1}s] fault {} ({:.1}s..{:.1}s) {}",
            self.now(),
            fault.name,
            fault.start,
            fault.end,
            fault.note
        );
        self.inner.lock().unwrap().faults.push(fault);
    }

    pub fn budget(&self, f: impl FnOnce(&mut BudgetTally)) {
        f(&mut self.inner.lock().unwrap().budget);
    }

    /// A hostile request that was not answered as it must be (a 5xx, or the replica gone).
    pub fn hostile(&self, what: String) {
        self.inner.lock().unwrap().hostile.push(what);
    }

    /// How many calls so far (for progress lines).
    pub fn calls_so_far(&self) -> usize {
        self.inner.lock().unwrap().calls.len()
    }

    /// Everything, once the run is over.
    pub fn take(&self) -> (Vec<Call>, Vec<Task>, Vec<Fault>, BudgetTally, Vec<String>) {
        let mut i = self.inner.lock().unwrap();
        (
            std::mem::take(&mut i.calls),
            std::mem::take(&mut i.tasks),
            std::mem::take(&mut i.faults),
            std::mem::take(&mut i.budget),
            std::mem::take(&mut i.hostile),
        )
    }
}
