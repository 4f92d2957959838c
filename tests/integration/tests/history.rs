//! A history checker (issue 5, item 3): a seeded random workload records every operation with
//! its outcome, and a checker then judges the whole history, Jepsen style.
//!
//! # The workload
//!
//! A private cluster runs with the background worker on (`TEST_SETTINGS`: reclaim every 100
//! ms), one queue `history` with short leases (each claim asks for 300 ms, 500 ms or 1 s), three
//! attempts and a backoff of 10–100 ms. Against it run, each thread on its own connection:
//!
//! * 2 producers: single and batch enqueues of jobs whose payload carries a unique tag, some
//!   with `max_attempts` 1 or 2, paced to keep a few hundred jobs outstanding;
//! * 8 workers, each holding up to 12 jobs at a time: claims of 1–5 jobs (waiting claims when
//!   they hold nothing), then per job a random plan: settle at once (complete, the batch
//!   complete, fail with retry, fail with `retry => false`, release), work for longer than the
//!   lease while heartbeating every third of it, stall past the lease and settle late (often
//!   after a reclaim: "done wins" or `lost`), or abandon the job; now and then a worker stalls
//!   outright past all its leases;
//! * 1 admin: random cancels (of queued, running and finished jobs) and `pg_terminate_backend`
//!   of a random worker's or producer's backend every 50–250 ms. A client whose connection
//!   dies reconnects, keeps the leases it holds, and retries the settle call that failed once,
//!   as the README advises.
//!
//! Each thread draws from its own generator seeded from `PG_JOBS_HISTORY_SEED` (printed), so the
//! decisions are reproducible; the interleaving is up to the scheduler. When every job has been
//! produced the chaos stops and the workers drain the queue (complete everything) until every
//! job is finished.
//!
//! # The record
//!
//! Every operation is recorded with its process, its invocation and completion on the client's
//! monotonic clock, its arguments and its outcome: `Ok` with the reply, `Failed` (a definite
//! error: the statement ran in its own implicit transaction, which rolled back) or `Unknown`
//! (the connection died mid-call; it may or may not have committed). Calls go over the simple
//! query protocol, whose server commits before it reports the command complete, so an `Ok`
//! means committed. Each call also records the server's `clock_timestamp()` before and after
//! it, and a claim returns each job's `lease_until`, so lease intervals are judged on the
//! server's clock alone (SPEC rule 10), never across client and server clocks.
//!
//! # The checker
//!
//! [`check`] reports, in the categories of Jepsen's queue checker:
//!
//! * **lost**: an acknowledged enqueue whose job is missing at the end, or never reached a
//!   final state;
//! * **duplicated**: a job held by two live leases at overlapping times, a stale lease acting
//!   (a heartbeat, complete, fail or release that took effect after a newer claim, after its
//!   own settle or after a cancel), a job settled to success twice, or claimed again after it
//!   finished;
//! * **unexpected**: a delivered or stored job that was never enqueued, whose enqueue failed,
//!   or that exists twice;
//! * **recovered**: a job whose enqueue had an unknown outcome but that showed up (fine);
//!
//! and verifies each job's final row against its history: the final state agrees with every
//! acknowledged settle and cancel and is explained by some operation (or by a reclaim on the
//! final attempt, whose last error is `lease expired on the final attempt`); a cancelled job
//! never succeeded after its cancel; attempts follow claims minus releases (allowing for claims
//! whose outcome was unknown); every error entry comes from an acknowledged (or unknown) fail
//! with the attempt of the lease that failed, or from a reclaim; `result` and `release_reason`
//! come from the acknowledged calls. A lease is live from the server time after its claim until
//! the earlier of its `lease_until` (extended by acknowledged heartbeats, counted from the
//! server time before each) and the server time before its first acknowledged settle or cancel
//! (or, for a settle with an unknown outcome, the last server time its process saw before it):
//! both ends are taken so that the interval is inside the real one, so an overlap is a real one.
//!
//! The checker is tested on synthetic histories (a lost job, overlapping leases, a stale lease,
//! an unexpected delivery, a recovery, a wrong final state, and a clean history with a reclaim
//! and a late "done wins" complete), and end to end by a negative control: a small run in which
//! a saboteur breaks the rules behind the extension's back (putting running jobs back in the
//! queue under live leases, deleting queued jobs) must come out with duplicated and lost jobs.
//!
//! # Running it
//!
//! `cargo test -p pg_jobs_tests --test history` runs 2,000 jobs (`PG_JOBS_HISTORY_JOBS`
//! overrides it). The large history, 100,000 jobs, runs on demand with one command (after
//! `cargo pgrx install`, as for every integration test):
//!
//! ```sh
//! PG_JOBS_HISTORY_JOBS=100000 cargo test --release -p pg_jobs_tests --test history -- --ignored --nocapture
//! ```
//!
//! Every run prints the seed, the operations by kind and outcome, the final states and the
//! checker's counts.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::{wait_until, Client, Cluster, NoTls, TEST_SETTINGS};
use postgres::SimpleQueryMessage;
use uuid::Uuid;

/// A time on the server's clock: microseconds since the Unix epoch.
type Micros = i64;

/// The queue of the workload.
const QUEUE: &str = "history";
const WORKERS: usize = 8;
const PRODUCERS: usize = 2;
/// The queue's `max_attempts`; some jobs get 1 or 2 instead.
const MAX_ATTEMPTS: i32 = 3;
/// Lease lengths the workers ask for, in milliseconds.
const LEASES_MS: [i64; 3] = [300, 500, 1000];
/// Jobs one worker holds at most at once.
const HOLD_AT_MOST: usize = 12;
/// Open (queued or running) jobs the producers aim to stay under.
const OUTSTANDING: i64 = 300;
/// The server's clock, as microseconds since the epoch.
const SERVER_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::int8";

// ---------------------------------------------------------------------------------------------
// The history: operations and their outcomes
// ---------------------------------------------------------------------------------------------

/// An API call as the history records it.
#[derive(Clone, Debug)]
enum Call {
    /// One `jobs_enqueue` (one tag) or `jobs_enqueue_batch` (several), every job with
    /// `max_attempts`.
    Enqueue {
        tags: Vec<u64>,
        max_attempts: i32,
    },
    Claim {
        n: i32,
        lease_ms: i64,
    },
    Heartbeat {
        id: i64,
        lease: Uuid,
    },
    /// `jobs_complete(id, lease, result => {"op": <this op's index>})`.
    Complete {
        id: i64,
        lease: Uuid,
    },
    /// `jobs_complete(ids, leases)`.
    CompleteMany {
        pairs: Vec<(i64, Uuid)>,
    },
    /// `jobs_fail(id, lease, 'fail op <index>', retry => retry)`.
    Fail {
        id: i64,
        lease: Uuid,
        retry: bool,
    },
    /// `jobs_release(id, lease, 'release op <index>')`.
    Release {
        id: i64,
        lease: Uuid,
    },
    Cancel {
        id: i64,
    },
    /// `pg_terminate_backend` of a process's backend.
    Terminate {
        process: usize,
    },
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Enqueue { tags, .. } if tags.len() == 1 => "enqueue",
            Call::Enqueue { .. } => "enqueue_batch",
            Call::Claim { .. } => "claim",
            Call::Heartbeat { .. } => "heartbeat",
            Call::Complete { .. } => "complete",
            Call::CompleteMany { .. } => "complete_many",
            Call::Fail { retry: true, .. } => "fail",
            Call::Fail { retry: false, .. } => "fail_final",
            Call::Release { .. } => "release",
            Call::Cancel { .. } => "cancel",
            Call::Terminate { .. } => "terminate",
        }
    }
}

/// A job a claim handed out.
#[derive(Clone, Debug)]
struct Delivered {
    id: i64,
    lease: Uuid,
    attempt: i32,
    lease_until: Micros,
    /// The tag in the job's payload.
    tag: u64,
    /// The server's clock after the claim (the job was ours from some time before this).
    taken_at: Micros,
}

/// What a call that completed returned.
#[derive(Clone, Debug)]
enum Reply {
    /// Enqueue: the ids, in payload order.
    Ids(Vec<i64>),
    Claimed(Vec<Delivered>),
    /// A text outcome, between two readings of the server's clock.
    Outcome {
        outcome: String,
        before: Micros,
        after: Micros,
    },
    /// The batch complete's (id, outcome) rows.
    Outcomes {
        rows: Vec<(i64, String)>,
        before: Micros,
        after: Micros,
    },
    /// `pg_terminate_backend`'s answer.
    Terminated(bool),
}

/// How a call ended.
#[derive(Clone, Debug)]
enum OpResult {
    Ok(Reply),
    /// A definite error: the call's implicit transaction rolled back.
    Failed(String),
    /// The connection died mid-call: it may or may not have committed.
    Unknown(String),
}

/// One operation of the history.
#[derive(Clone, Debug)]
struct Op {
    /// Its place in invocation order, unique in the history.
    index: usize,
    /// The thread that ran it.
    process: usize,
    /// Client monotonic time of invocation and completion, in microseconds since the start.
    invoke: u64,
    complete: u64,
    call: Call,
    result: OpResult,
    /// The latest server time the process had seen when it invoked the call: a server-side
    /// lower bound for when the call ran.
    server_floor: Option<Micros>,
}

// ---------------------------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------------------------

/// A job as the database holds it at the end.
#[derive(Clone, Debug)]
struct FinalJob {
    id: i64,
    /// The tag in its payload (`None`: no tag).
    tag: Option<u64>,
    state: String,
    attempt: i32,
    max_attempts: i32,
    /// `errors[]`: (attempt, error).
    errors: Vec<(i32, String)>,
    /// `result ->> 'op'`: the complete call that stored it.
    result_op: Option<usize>,
    release_reason: Option<String>,
}

/// The checker's verdict.
#[derive(Debug, Default)]
struct Report {
    /// Acknowledged enqueues that are missing or never reached a final state.
    lost: Vec<String>,
    /// Jobs held by two live leases at once, stale leases acting, double settles, deliveries
    /// after the end.
    duplicated: Vec<String>,
    /// Deliveries or rows of jobs never (successfully) enqueued.
    unexpected: Vec<String>,
    /// Tags whose enqueue outcome was unknown but that showed up.
    recovered: usize,
    /// Final rows that disagree with the history.
    state_errors: Vec<String>,
    /// Definite errors from calls that must not fail.
    call_errors: Vec<String>,
    /// Enqueued tags: acknowledged, failed, unknown.
    enqueues: (usize, usize, usize),
    /// Jobs delivered at least once.
    delivered: usize,
    final_states: BTreeMap<String, usize>,
    /// Operations by kind: answers (outcome, or "ok"), definite errors, unknown outcomes.
    ops: BTreeMap<String, BTreeMap<String, usize>>,
    /// What a few calls with unknown outcomes saw.
    unknown_examples: Vec<String>,
    /// Reclaims the final rows record: `lease expired` entries, and jobs failed by a reclaim.
    reclaimed: usize,
    failed_by_reclaim: usize,
    /// Settle calls surely made after their lease ran out: that took effect ("done wins"),
    /// and that answered `lost`.
    late_acted: usize,
    late_lost: usize,
}

impl Report {
    fn is_clean(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.unexpected.is_empty()
            && self.state_errors.is_empty()
            && self.call_errors.is_empty()
    }

    fn print(&self) {
        let (acked, failed, unknown) = self.enqueues;
        eprintln!("history checker:");
        eprintln!("  enqueued: {acked} acknowledged, {failed} failed, {unknown} unknown");
        eprintln!("  delivered at least once: {}", self.delivered);
        eprintln!(
            "  reclaims recorded: {} ({} on the final attempt); settles after the lease ran out: {} took effect, {} lost",
            self.reclaimed, self.failed_by_reclaim, self.late_acted, self.late_lost
        );
        eprintln!("  lost:        {}", self.lost.len());
        eprintln!("  duplicated:  {}", self.duplicated.len());
        eprintln!("  unexpected:  {}", self.unexpected.len());
        eprintln!("  recovered:   {}", self.recovered);
        eprintln!("  final state mismatches: {}", self.state_errors.len());
        eprintln!("  calls with definite errors: {}", self.call_errors.len());
        let states: Vec<String> = self
            .final_states
            .iter()
            .map(|(state, count)| format!("{state} {count}"))
            .collect();
        eprintln!("  final states: {}", states.join(", "));
        eprintln!("  operations:");
        for (kind, outcomes) in &self.ops {
            let total: usize = outcomes.values().sum();
            let detail: Vec<String> = outcomes.iter().map(|(o, c)| format!("{o} {c}")).collect();
            eprintln!("    {kind:<14} {total:>8}  ({})", detail.join(", "));
        }
        for (name, list) in [
            ("unknown outcomes, for example", &self.unknown_examples),
            ("lost", &self.lost),
            ("duplicated", &self.duplicated),
            ("unexpected", &self.unexpected),
            ("final state mismatches", &self.state_errors),
            ("calls with definite errors", &self.call_errors),
        ] {
            if !list.is_empty() {
                eprintln!("  {name}:");
                for line in list.iter().take(20) {
                    eprintln!("    {line}");
                }
            }
        }
    }
}

/// How an enqueue of a tag ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enqueued {
    Acked(i64),
    Failed,
    Unknown,
}

/// What a lease-holder's call is, for the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HolderCall {
    Heartbeat,
    /// `batch`: the batch complete, which stores no result.
    Complete {
        batch: bool,
    },
    Fail {
        retry: bool,
    },
    Release,
}

impl HolderCall {
    /// Whether an answer means the call took effect.
    fn acted(self, outcome: &str) -> bool {
        match self {
            HolderCall::Heartbeat => outcome == "running",
            HolderCall::Complete { .. } => outcome == "succeeded",
            HolderCall::Fail { .. } => outcome == "queued" || outcome == "failed",
            HolderCall::Release => outcome == "queued",
        }
    }

    /// Whether, having acted, it ended the lease.
    fn ends_lease(self) -> bool {
        self != HolderCall::Heartbeat
    }
}

/// A call's outcome as the checker sees it.
#[derive(Clone, Debug)]
enum Seen {
    Answered {
        outcome: String,
        before: Micros,
        after: Micros,
    },
    Unknown,
    Failed,
}

/// A heartbeat or settle call presenting one lease.
#[derive(Clone, Debug)]
struct HolderEvent<'a> {
    op: &'a Op,
    call: HolderCall,
    seen: Seen,
}

impl HolderEvent<'_> {
    /// The server time before the call, if it answered and took effect.
    fn acted_at(&self) -> Option<(Micros, Micros)> {
        match &self.seen {
            Seen::Answered {
                outcome,
                before,
                after,
            } if self.call.acted(outcome) => Some((*before, *after)),
            _ => None,
        }
    }

    /// Whether it took effect or may have.
    fn maybe_acted(&self) -> bool {
        match &self.seen {
            Seen::Answered { outcome, .. } => self.call.acted(outcome),
            Seen::Unknown => true,
            Seen::Failed => false,
        }
    }
}

/// A claim of one job.
#[derive(Clone, Debug)]
struct ClaimEvent<'a> {
    op: &'a Op,
    job: &'a Delivered,
    lease_len: Micros,
}

/// Everything the history says about one job.
#[derive(Default)]
struct JobHistory<'a> {
    claims: Vec<ClaimEvent<'a>>,
    /// Heartbeat and settle calls by lease.
    holder: HashMap<Uuid, Vec<HolderEvent<'a>>>,
    cancels: Vec<(&'a Op, Seen)>,
}

fn seen(op: &Op) -> Seen {
    match &op.result {
        OpResult::Ok(Reply::Outcome {
            outcome,
            before,
            after,
        }) => Seen::Answered {
            outcome: outcome.clone(),
            before: *before,
            after: *after,
        },
        OpResult::Unknown(_) => Seen::Unknown,
        _ => Seen::Failed,
    }
}

/// A piece of a lease's live time on the server's clock: `[start, end)`.
type Segment = (Micros, Micros);

/// Judges a history against the jobs the database holds at the end.
fn check(ops: &[Op], finals: &[FinalJob]) -> Report {
    let mut report = Report::default();

    // Operations by kind and outcome; definite errors are never expected in this workload.
    for op in ops {
        let outcome = match &op.result {
            OpResult::Ok(Reply::Outcome { outcome, .. }) => outcome.clone(),
            OpResult::Ok(Reply::Terminated(done)) => match &op.call {
                Call::Terminate { process } if *process < WORKERS => format!("worker {done}"),
                _ => format!("producer {done}"),
            },
            OpResult::Ok(Reply::Claimed(jobs)) => format!("{} job(s)", jobs.len().min(2)),
            OpResult::Ok(_) => "ok".to_owned(),
            OpResult::Failed(e) => {
                report
                    .call_errors
                    .push(format!("op {} {:?}: {e}", op.index, op.call));
                "error".to_owned()
            }
            OpResult::Unknown(why) => {
                if report.unknown_examples.len() < 3 {
                    report.unknown_examples.push(format!(
                        "op {} {}: {why}",
                        op.index,
                        op.call.name()
                    ));
                }
                "unknown".to_owned()
            }
        };
        *report
            .ops
            .entry(op.call.name().to_owned())
            .or_default()
            .entry(outcome)
            .or_default() += 1;
        if let (Call::CompleteMany { .. }, OpResult::Ok(Reply::Outcomes { rows, .. })) =
            (&op.call, &op.result)
        {
            for (_, outcome) in rows {
                *report
                    .ops
                    .entry("complete_many rows".to_owned())
                    .or_default()
                    .entry(outcome.clone())
                    .or_default() += 1;
            }
        }
    }

    // Enqueues: every tag is enqueued by exactly one call.
    let mut enqueued: HashMap<u64, (Enqueued, i32)> = HashMap::new();
    for op in ops {
        let Call::Enqueue { tags, max_attempts } = &op.call else {
            continue;
        };
        for (i, tag) in tags.iter().enumerate() {
            let status = match &op.result {
                OpResult::Ok(Reply::Ids(ids)) if ids.len() == tags.len() => Enqueued::Acked(ids[i]),
                OpResult::Ok(reply) => {
                    report.unexpected.push(format!(
                        "op {}: enqueue of {} tags answered {reply:?}",
                        op.index,
                        tags.len()
                    ));
                    Enqueued::Unknown
                }
                OpResult::Failed(_) => Enqueued::Failed,
                OpResult::Unknown(_) => Enqueued::Unknown,
            };
            if enqueued.insert(*tag, (status, *max_attempts)).is_some() {
                report
                    .unexpected
                    .push(format!("tag {tag} was enqueued by two operations"));
            }
        }
    }
    report.enqueues = enqueued
        .values()
        .fold((0, 0, 0), |(a, f, u), (s, _)| match s {
            Enqueued::Acked(_) => (a + 1, f, u),
            Enqueued::Failed => (a, f + 1, u),
            Enqueued::Unknown => (a, f, u + 1),
        });

    // The jobs at the end, by tag: each must come from one enqueue that did not fail.
    let mut by_tag: HashMap<u64, &FinalJob> = HashMap::new();
    let mut by_id: HashMap<i64, &FinalJob> = HashMap::new();
    for job in finals {
        by_id.insert(job.id, job);
        *report.final_states.entry(job.state.clone()).or_default() += 1;
        let Some(tag) = job.tag else {
            report
                .unexpected
                .push(format!("job {} has no tag: nobody enqueued it", job.id));
            continue;
        };
        match enqueued.get(&tag) {
            None => report
                .unexpected
                .push(format!("job {} carries tag {tag}, never enqueued", job.id)),
            Some((Enqueued::Failed, _)) => report.unexpected.push(format!(
                "job {} carries tag {tag}, whose enqueue failed (rolled back)",
                job.id
            )),
            Some((Enqueued::Acked(id), _)) if *id != job.id => report.unexpected.push(format!(
                "job {} carries tag {tag}, but its enqueue answered id {id}",
                job.id
            )),
            Some((_, max_attempts)) if *max_attempts != job.max_attempts => {
                report.state_errors.push(format!(
                    "job {}: max_attempts {} but it was enqueued with {max_attempts}",
                    job.id, job.max_attempts
                ))
            }
            _ => {}
        }
        if by_tag.insert(tag, job).is_some() {
            report
                .unexpected
                .push(format!("tag {tag} is stored twice (job {})", job.id));
        }
    }

    // Deliveries: each must be a job that was enqueued, under the id it was stored with.
    let mut histories: HashMap<i64, JobHistory> = HashMap::new();
    let mut delivered_tags: HashSet<u64> = HashSet::new();
    for op in ops {
        let (Call::Claim { lease_ms, .. }, OpResult::Ok(Reply::Claimed(jobs))) =
            (&op.call, &op.result)
        else {
            continue;
        };
        for job in jobs {
            delivered_tags.insert(job.tag);
            let problem = match enqueued.get(&job.tag) {
                None => Some("whose tag was never enqueued".to_owned()),
                Some((Enqueued::Failed, _)) => Some("whose enqueue failed".to_owned()),
                Some((Enqueued::Acked(id), _)) if *id != job.id => {
                    Some(format!("but its enqueue answered id {id}"))
                }
                _ => match by_tag.get(&job.tag) {
                    Some(stored) if stored.id != job.id => {
                        Some(format!("but the tag is stored as job {}", stored.id))
                    }
                    _ => None,
                },
            };
            if let Some(problem) = problem {
                report.unexpected.push(format!(
                    "op {} delivered job {} (tag {}) {problem}",
                    op.index, job.id, job.tag
                ));
            }
            histories
                .entry(job.id)
                .or_default()
                .claims
                .push(ClaimEvent {
                    op,
                    job,
                    lease_len: lease_ms * 1000,
                });
        }
    }
    report.delivered = delivered_tags.len();
    report.recovered = enqueued
        .iter()
        .filter(|(tag, (status, _))| {
            *status == Enqueued::Unknown
                && (by_tag.contains_key(tag) || delivered_tags.contains(tag))
        })
        .count();

    // Lost: acknowledged, but missing or unfinished at the end.
    let mut lost: Vec<(u64, i64, String)> = Vec::new();
    for (tag, (status, _)) in &enqueued {
        let Enqueued::Acked(id) = status else {
            continue;
        };
        match by_tag.get(tag) {
            None => lost.push((
                *tag,
                *id,
                format!("job {id} (tag {tag}) is missing at the end"),
            )),
            Some(job) if !matches!(job.state.as_str(), "succeeded" | "failed" | "cancelled") => {
                lost.push((
                    *tag,
                    *id,
                    format!(
                        "job {id} (tag {tag}) never reached a final state: it is {}",
                        job.state
                    ),
                ))
            }
            _ => {}
        }
    }
    lost.sort();
    let lost_ids: HashSet<i64> = lost.iter().map(|(_, id, _)| *id).collect();
    report.lost = lost.into_iter().map(|(_, _, line)| line).collect();

    // Heartbeats, settles and cancels, by job.
    for op in ops {
        let mut holder = |id: i64, lease: Uuid, call: HolderCall, seen: Seen| {
            histories
                .entry(id)
                .or_default()
                .holder
                .entry(lease)
                .or_default()
                .push(HolderEvent { op, call, seen });
        };
        match &op.call {
            Call::Heartbeat { id, lease } => holder(*id, *lease, HolderCall::Heartbeat, seen(op)),
            Call::Complete { id, lease } => {
                holder(*id, *lease, HolderCall::Complete { batch: false }, seen(op))
            }
            Call::Fail { id, lease, retry } => {
                holder(*id, *lease, HolderCall::Fail { retry: *retry }, seen(op))
            }
            Call::Release { id, lease } => holder(*id, *lease, HolderCall::Release, seen(op)),
            Call::CompleteMany { pairs } => {
                for (i, (id, lease)) in pairs.iter().enumerate() {
                    let seen = match &op.result {
                        OpResult::Ok(Reply::Outcomes {
                            rows,
                            before,
                            after,
                        }) => match rows.get(i) {
                            Some((row_id, outcome)) if row_id == id => Seen::Answered {
                                outcome: outcome.clone(),
                                before: *before,
                                after: *after,
                            },
                            other => {
                                report.state_errors.push(format!(
                                    "op {}: row {i} of the batch complete is {other:?}, not job {id}",
                                    op.index
                                ));
                                Seen::Failed
                            }
                        },
                        OpResult::Unknown(_) => Seen::Unknown,
                        _ => Seen::Failed,
                    };
                    holder(*id, *lease, HolderCall::Complete { batch: true }, seen);
                }
            }
            Call::Cancel { id } => histories
                .entry(*id)
                .or_default()
                .cancels
                .push((op, seen(op))),
            _ => {}
        }
    }

    // Claims whose outcome is unknown may have taken jobs nobody heard of ("phantoms"):
    // (invoke, complete, n) of each, to allow for them in attempt counts.
    let phantoms: Vec<(u64, u64, i32)> = ops
        .iter()
        .filter_map(|op| match (&op.call, &op.result) {
            (Call::Claim { n, .. }, OpResult::Unknown(_)) => Some((op.invoke, op.complete, *n)),
            _ => None,
        })
        .collect();
    let phantoms_between = |from: u64, to: u64| -> i32 {
        phantoms
            .iter()
            .filter(|(invoke, complete, _)| *invoke < to && *complete > from)
            .map(|(_, _, n)| n)
            .sum()
    };

    let mut ids: Vec<i64> = histories.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let history = histories.get_mut(&id).expect("listed");
        history.claims.sort_by_key(|c| c.job.taken_at);
        let history = &histories[&id];
        match by_id.get(&id) {
            Some(job) => check_job(job, history, &phantoms_between, &mut report),
            None if !history.claims.is_empty() && !lost_ids.contains(&id) => report
                .lost
                .push(format!("job {id} was delivered but is missing at the end")),
            None => {}
        }
    }
    // Jobs nobody ever touched must still be consistent (queued → cancelled by nobody...).
    for job in finals {
        if !histories.contains_key(&job.id) {
            let empty = JobHistory::default();
            check_job(job, &empty, &phantoms_between, &mut report);
        }
    }
    report
}

/// Checks one job's history and final row.
fn check_job(
    job: &FinalJob,
    history: &JobHistory,
    phantoms_between: &dyn Fn(u64, u64) -> i32,
    report: &mut Report,
) {
    let id = job.id;
    let mut duplicated = Vec::new();
    let mut state_errors = Vec::new();
    for (_, error) in &job.errors {
        if error.starts_with("lease expired") {
            report.reclaimed += 1;
        }
    }
    if job.state == "failed"
        && job.errors.last().map(|(_, e)| e.as_str()) == Some("lease expired on the final attempt")
    {
        report.failed_by_reclaim += 1;
    }
    let no_events = Vec::new();
    let events_of = |lease: &Uuid| history.holder.get(lease).unwrap_or(&no_events);

    // Acknowledged terminal facts.
    let mut succeeded: Vec<&HolderEvent> = Vec::new();
    let mut failed: Vec<&HolderEvent> = Vec::new();
    for event in history.holder.values().flatten() {
        if let Seen::Answered { outcome, .. } = &event.seen {
            match (event.call, outcome.as_str()) {
                (HolderCall::Complete { .. }, "succeeded") => succeeded.push(event),
                (HolderCall::Fail { .. }, "failed") => failed.push(event),
                _ => {}
            }
        }
    }
    let terminal_acks: Vec<(Micros, &str, usize)> = succeeded
        .iter()
        .chain(&failed)
        .filter_map(|e| match &e.seen {
            Seen::Answered { outcome, after, .. } => Some((*after, outcome.as_str(), e.op.index)),
            _ => None,
        })
        .collect();
    if succeeded.len() + failed.len() > 1 {
        let ops: Vec<String> = terminal_acks
            .iter()
            .map(|(_, outcome, op)| format!("op {op} → {outcome}"))
            .collect();
        duplicated.push(format!("job {id} was finished twice: {}", ops.join(", ")));
    }
    if !succeeded.is_empty() && job.state != "succeeded" {
        state_errors.push(format!(
            "job {id} is {} but op {} completed it (succeeded)",
            job.state, succeeded[0].op.index
        ));
    }
    if !failed.is_empty() && job.state != "failed" {
        state_errors.push(format!(
            "job {id} is {} but op {} failed it for good",
            job.state, failed[0].op.index
        ));
    }
    // The earliest cancel that answered 'cancelled': it took effect after its `before` and
    // before its `after`.
    let mut cancelled: Option<(Micros, Micros)> = None;
    for (op, seen) in &history.cancels {
        let Seen::Answered {
            outcome,
            before,
            after,
        } = seen
        else {
            continue;
        };
        if *outcome != job.state {
            state_errors.push(format!(
                "job {id} is {} but cancel op {} answered {outcome}",
                job.state, op.index
            ));
        }
        if outcome == "cancelled" {
            cancelled = Some(match cancelled {
                None => (*before, *after),
                Some((b, a)) => (b.min(*before), a.min(*after)),
            });
            for (finished, how, by) in &terminal_acks {
                if finished < before {
                    state_errors.push(format!(
                        "job {id}: op {by} finished it ({how}) before cancel op {} turned it cancelled",
                        op.index
                    ));
                }
            }
        } else if !matches!(outcome.as_str(), "succeeded" | "failed") {
            state_errors.push(format!(
                "job {id}: cancel op {} answered {outcome}, not a final state",
                op.index
            ));
        } else if terminal_acks.iter().all(|(_, how, _)| how != outcome)
            && outcome == "succeeded"
            && !history
                .holder
                .values()
                .flatten()
                .any(|e| matches!(e.call, HolderCall::Complete { .. }) && e.maybe_acted())
        {
            state_errors.push(format!(
                "job {id}: cancel op {} found it succeeded, but no complete could have done that (answered at {after})",
                op.index
            ));
        }
    }
    // Rule 7: after a cancel, no holder call takes effect.
    if let Some((_, cancelled_after)) = cancelled {
        for event in history.holder.values().flatten() {
            if let Some((before, _)) = event.acted_at() {
                if before > cancelled_after {
                    duplicated.push(format!(
                        "job {id}: op {} ({:?}) took effect after the job was cancelled",
                        event.op.index, event.call
                    ));
                }
            }
        }
    }

    // The final state must be explained by some operation.
    let maybe = |pred: &dyn Fn(HolderCall) -> bool| {
        history
            .holder
            .values()
            .flatten()
            .any(|e| pred(e.call) && e.maybe_acted())
    };
    let last_error = job.errors.last().map(|(_, e)| e.as_str());
    match job.state.as_str() {
        "succeeded" => {
            if !maybe(&|c| matches!(c, HolderCall::Complete { .. })) {
                state_errors.push(format!(
                    "job {id} is succeeded, but no complete of it answered succeeded or had an unknown outcome"
                ));
            }
            let acked_single = succeeded
                .iter()
                .find(|e| e.call == HolderCall::Complete { batch: false });
            let acked_batch = succeeded
                .iter()
                .any(|e| e.call == HolderCall::Complete { batch: true });
            match (job.result_op, acked_single, acked_batch) {
                (Some(op), Some(acked), _) if op != acked.op.index => state_errors.push(format!(
                    "job {id}: result is from op {op}, but op {} completed it",
                    acked.op.index
                )),
                (None, Some(acked), _) => state_errors.push(format!(
                    "job {id}: no result, but op {} completed it with one",
                    acked.op.index
                )),
                (Some(op), None, true) => state_errors.push(format!(
                    "job {id}: result from op {op}, but a batch complete (no result) completed it"
                )),
                (Some(op), None, false)
                    if !history.holder.values().flatten().any(|e| {
                        e.op.index == op
                            && e.call == HolderCall::Complete { batch: false }
                            && e.maybe_acted()
                    }) =>
                {
                    state_errors.push(format!(
                        "job {id}: result from op {op}, which did not complete it"
                    ))
                }
                _ => {}
            }
        }
        "failed" => {
            let by_fail = maybe(&|c| matches!(c, HolderCall::Fail { .. }));
            let by_reclaim = last_error == Some("lease expired on the final attempt");
            if !by_fail && !by_reclaim {
                state_errors.push(format!(
                    "job {id} is failed, but no fail ended it and its last error is {last_error:?}"
                ));
            }
            if by_reclaim && job.attempt != job.max_attempts {
                state_errors.push(format!(
                    "job {id} failed by reclaim on attempt {} of {}",
                    job.attempt, job.max_attempts
                ));
            }
        }
        "cancelled" => {
            let maybe_cancelled = history.cancels.iter().any(|(_, seen)| match seen {
                Seen::Answered { outcome, .. } => outcome == "cancelled",
                Seen::Unknown => true,
                Seen::Failed => false,
            });
            if !maybe_cancelled {
                state_errors.push(format!("job {id} is cancelled, but nobody cancelled it"));
            }
        }
        _ => {} // reported as lost
    }

    // Leases: live segments on the server's clock, never two at once.
    let claims = &history.claims;
    let mut live: Vec<Vec<Segment>> = Vec::new();
    for claim in claims {
        let events = events_of(&claim.job.lease);
        let mut segments: Vec<Segment> = vec![(claim.job.taken_at, claim.job.lease_until)];
        // The latest the lease can have run until, renewals included.
        let expiry = events
            .iter()
            .filter(|e| e.call == HolderCall::Heartbeat)
            .filter_map(|e| e.acted_at().map(|(_, after)| after + claim.lease_len))
            .fold(claim.job.lease_until, Micros::max);
        for event in events.iter().filter(|e| e.call.ends_lease()) {
            if let Seen::Answered { before, .. } = &event.seen {
                if *before > expiry {
                    if event.acted_at().is_some() {
                        report.late_acted += 1;
                    } else {
                        report.late_lost += 1;
                    }
                }
            }
        }
        let mut end = Micros::MAX;
        for event in events {
            match (&event.seen, event.call) {
                (Seen::Answered { .. }, HolderCall::Heartbeat) => {
                    if let Some((before, after)) = event.acted_at() {
                        segments.push((after, before + claim.lease_len));
                    }
                }
                (Seen::Answered { .. }, call) if call.ends_lease() => {
                    if let Some((before, _)) = event.acted_at() {
                        end = end.min(before);
                    }
                }
                (Seen::Unknown, call) if call.ends_lease() => {
                    end = end.min(event.op.server_floor.unwrap_or(claim.job.taken_at));
                }
                _ => {}
            }
        }
        if let Some((cancelled_before, _)) = cancelled {
            end = end.min(cancelled_before);
        }
        live.push(
            segments
                .into_iter()
                .map(|(start, stop)| (start, stop.min(end)))
                .filter(|(start, stop)| start < stop)
                .collect(),
        );
    }
    for (i, a) in claims.iter().enumerate() {
        for (j, b) in claims.iter().enumerate().skip(i + 1) {
            let overlap = live[i].iter().find_map(|sa| {
                live[j]
                    .iter()
                    .find(|sb| sa.0.max(sb.0) < sa.1.min(sb.1))
                    .map(|sb| (sa, sb))
            });
            if let Some((sa, sb)) = overlap {
                duplicated.push(format!(
                            "job {id}: lease {} (claim op {} by process {}, attempt {}) live over {sa:?} while lease {} (claim op {} by process {}, attempt {}) live over {sb:?}",
                            a.job.lease, a.op.index, a.op.process, a.job.attempt,
                            b.job.lease, b.op.index, b.op.process, b.job.attempt
                        ));
            }
        }
    }
    // A lease acts only until a newer claim, its own settle, or a cancel.
    for (i, claim) in claims.iter().enumerate() {
        let events = events_of(&claim.job.lease);
        // Server times after which the lease is surely dead: a newer claim had taken the job,
        // its own settle had taken effect, or a cancel had.
        let mut dead = claims
            .get(i + 1)
            .map_or(Micros::MAX, |next| next.job.taken_at);
        if let Some((_, cancelled_after)) = cancelled {
            dead = dead.min(cancelled_after);
        }
        if let Some(settled) = events
            .iter()
            .filter(|e| e.call.ends_lease())
            .filter_map(|e| e.acted_at().map(|(_, after)| after))
            .min()
        {
            dead = dead.min(settled);
        }
        for event in events {
            if let Some((before, _)) = event.acted_at() {
                if before > dead {
                    duplicated.push(format!(
                        "job {id}: op {} by process {} ({:?}, took effect) used lease {} (claim op {}) after it was replaced, settled or cancelled",
                        event.op.index, event.op.process, event.call, claim.job.lease, claim.op.index
                    ));
                }
            }
        }
        // A claim that began after the job finished is a second delivery.
        let claim_began = claim.job.lease_until - claim.lease_len;
        for (finished, how, by) in &terminal_acks {
            if *finished < claim_began {
                duplicated.push(format!(
                    "job {id}: op {} claimed it after op {by} finished it ({how})",
                    claim.op.index
                ));
            }
        }
        if let Some((_, cancelled_after)) = cancelled {
            if cancelled_after < claim_began {
                duplicated.push(format!(
                    "job {id}: op {} claimed it after it was cancelled",
                    claim.op.index
                ));
            }
        }
    }
    // Holder calls under leases no claim of this job handed out must all be 'lost'.
    for (lease, events) in &history.holder {
        if claims.iter().any(|c| c.job.lease == *lease) {
            continue;
        }
        for event in events {
            if event.acted_at().is_some() {
                duplicated.push(format!(
                    "job {id}: op {} acted under lease {lease}, which no claim of this job returned",
                    event.op.index
                ));
            }
        }
    }

    // Attempts: each claim adds one, a release gives one back (rule 3); claims with unknown
    // outcomes may have added some.
    let released = |claim: &ClaimEvent| -> (i32, i32) {
        let mut certain = 0;
        let mut possible = 0;
        for event in events_of(&claim.job.lease) {
            if event.call != HolderCall::Release {
                continue;
            }
            match &event.seen {
                Seen::Answered { outcome, .. } if outcome == "queued" => certain += 1,
                Seen::Unknown => possible += 1,
                _ => {}
            }
        }
        (
            certain.min(1),
            if certain > 0 { 0 } else { possible.min(1) },
        )
    };
    let mut previous: Option<&ClaimEvent> = None;
    for claim in claims {
        let (base, from) = match previous {
            None => (0, 0),
            Some(p) => {
                let (certain, _) = released(p);
                (p.job.attempt - certain, p.op.invoke)
            }
        };
        let possible = previous.map_or(0, |p| released(p).1);
        let attempt = claim.job.attempt;
        let low = base - possible + 1;
        if attempt < low
            || (attempt > base + 1
                && attempt > base + 1 + phantoms_between(from, claim.op.complete))
        {
            state_errors.push(format!(
                "job {id}: op {} claimed attempt {attempt}, but the history before allows {low}..={}",
                claim.op.index,
                base + 1
            ));
        }
        if attempt < 1 || attempt > job.max_attempts {
            state_errors.push(format!(
                "job {id}: op {} claimed attempt {attempt} of {}",
                claim.op.index, job.max_attempts
            ));
        }
        previous = Some(claim);
    }
    let (base, from, possible) = match previous {
        None => (0, 0, 0),
        Some(p) => {
            let (certain, possible) = released(p);
            (p.job.attempt - certain, p.op.invoke, possible)
        }
    };
    if job.attempt < base - possible
        || (job.attempt > base && job.attempt > base + phantoms_between(from, u64::MAX))
    {
        state_errors.push(format!(
            "job {id} ends at attempt {}, but its claims and releases make {base}",
            job.attempt
        ));
    }

    // Errors: one entry per acknowledged failure, with the attempt of the lease that failed,
    // and otherwise only reclaims.
    let fails: HashMap<usize, (&HolderEvent, i32)> = claims
        .iter()
        .flat_map(|c| {
            events_of(&c.job.lease)
                .iter()
                .filter(|e| matches!(e.call, HolderCall::Fail { .. }))
                .map(move |e| (e.op.index, (e, c.job.attempt)))
        })
        .collect();
    let mut recorded: HashSet<usize> = HashSet::new();
    for (position, (attempt, error)) in job.errors.iter().enumerate() {
        let last = position + 1 == job.errors.len();
        if error == "lease expired" {
            if *attempt >= job.max_attempts {
                state_errors.push(format!(
                    "job {id}: 'lease expired' on attempt {attempt} of {} should have failed it",
                    job.max_attempts
                ));
            }
        } else if error == "lease expired on the final attempt" {
            if !last || *attempt != job.max_attempts || job.state != "failed" {
                state_errors.push(format!(
                    "job {id}: '{error}' (attempt {attempt} of {}, entry {} of {}) but the job is {}",
                    job.max_attempts,
                    position + 1,
                    job.errors.len(),
                    job.state
                ));
            }
        } else if let Some(op) = error
            .strip_prefix("fail op ")
            .and_then(|n| n.parse::<usize>().ok())
        {
            match fails.get(&op) {
                Some((event, claimed)) if event.maybe_acted() => {
                    if attempt != claimed {
                        state_errors.push(format!(
                            "job {id}: error of op {op} records attempt {attempt}, its lease's attempt was {claimed}"
                        ));
                    }
                    if !recorded.insert(op) {
                        state_errors.push(format!("job {id}: op {op}'s error is recorded twice"));
                    }
                }
                _ => state_errors.push(format!(
                    "job {id}: errors hold '{error}', but that op did not fail this job"
                )),
            }
        } else {
            state_errors.push(format!("job {id}: unexpected error entry '{error}'"));
        }
    }
    for (op, (event, _)) in &fails {
        if event.acted_at().is_some() && !recorded.contains(op) {
            state_errors.push(format!(
                "job {id}: op {op} failed it ({:?}) but errors do not record it",
                event.seen
            ));
        }
    }
    if job.state == "failed" {
        if let Some(op) = last_error
            .and_then(|e| e.strip_prefix("fail op "))
            .and_then(|n| n.parse::<usize>().ok())
        {
            if let Some((event, _)) = fails.get(&op) {
                if let Seen::Answered { outcome, .. } = &event.seen {
                    if outcome != "failed" {
                        state_errors.push(format!(
                            "job {id} is failed, its last error is op {op}'s, which answered {outcome}"
                        ));
                    }
                }
            }
        }
    }

    // release_reason: from the latest release that took effect (or may have).
    if let Some(reason) = &job.release_reason {
        let from = reason
            .strip_prefix("release op ")
            .and_then(|n| n.parse::<usize>().ok());
        let ok = from.is_some_and(|op| {
            history
                .holder
                .values()
                .flatten()
                .any(|e| e.op.index == op && e.call == HolderCall::Release && e.maybe_acted())
        });
        if !ok {
            state_errors.push(format!(
                "job {id}: release_reason '{reason}' is not from a release of it"
            ));
        }
    } else if let Some(event) = history
        .holder
        .values()
        .flatten()
        .find(|e| e.call == HolderCall::Release && e.acted_at().is_some())
    {
        state_errors.push(format!(
            "job {id}: op {} released it, but it has no release_reason",
            event.op.index
        ));
    }
    report.duplicated.extend(duplicated);
    report.state_errors.extend(state_errors);
}

// ---------------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------------

/// SplitMix64: a small seeded generator, one per thread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        let mut rng = Rng(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`.
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// What the threads share.
struct Shared {
    dsn: String,
    start: Instant,
    next_op: AtomicUsize,
    /// Every thread stops.
    stop: AtomicBool,
    /// The producers are done: no more chaos, workers complete everything.
    draining: AtomicBool,
    /// The backend pid of each process (0: not connected).
    pids: Vec<AtomicI32>,
    /// Acknowledged job ids, for random cancels.
    known_ids: Mutex<Vec<i64>>,
    /// Cancels the producers asked the admin for: (when, id).
    cancel_requests: Mutex<VecDeque<(Instant, i64)>>,
}

impl Shared {
    fn micros(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }
}

/// Records one process's operations.
struct Recorder {
    process: usize,
    shared: Arc<Shared>,
    ops: Vec<Op>,
    server_seen: Option<Micros>,
}

impl Recorder {
    fn new(process: usize, shared: Arc<Shared>) -> Recorder {
        Recorder {
            process,
            shared,
            ops: Vec::new(),
            server_seen: None,
        }
    }

    /// Runs `run` as operation `call` (it gets the op's index) and records it.
    fn record(
        &mut self,
        call: Call,
        run: impl FnOnce(usize) -> Result<Reply, postgres::Error>,
    ) -> &Op {
        let index = self.shared.next_op.fetch_add(1, Ordering::Relaxed);
        let invoke = self.shared.micros();
        let server_floor = self.server_seen;
        let result = match run(index) {
            Ok(reply) => OpResult::Ok(reply),
            Err(e) => classify(&e),
        };
        let complete = self.shared.micros();
        let latest = match &result {
            OpResult::Ok(Reply::Outcome { after, .. } | Reply::Outcomes { after, .. }) => {
                Some(*after)
            }
            OpResult::Ok(Reply::Claimed(jobs)) => jobs.iter().map(|j| j.taken_at).max(),
            _ => None,
        };
        if let Some(latest) = latest {
            self.server_seen = Some(self.server_seen.map_or(latest, |s| s.max(latest)));
        }
        self.ops.push(Op {
            index,
            process: self.process,
            invoke,
            complete,
            call,
            result,
            server_floor,
        });
        self.ops.last().expect("just pushed")
    }
}

/// A definite error (the implicit transaction rolled back) or an unknown outcome (the
/// connection or the backend died: the call may have committed).
fn classify(error: &postgres::Error) -> OpResult {
    match error.as_db_error() {
        Some(db)
            if db.severity() == "ERROR"
                && !matches!(db.code().code(), "57P01" | "57P02" | "57P03") =>
        {
            OpResult::Failed(format!("{} {}", db.code().code(), db.message()))
        }
        Some(db) => OpResult::Unknown(format!(
            "{} {} {}",
            db.severity(),
            db.code().code(),
            db.message()
        )),
        None => OpResult::Unknown(error.to_string()),
    }
}

/// The rows of every statement of a simple query, in order, as text.
fn simple(client: &mut Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, postgres::Error> {
    Ok(client
        .simple_query(sql)?
        .into_iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

fn int(value: &Option<String>) -> i64 {
    value
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("expected an integer, got {value:?}"))
}

fn text(value: &Option<String>) -> String {
    value.clone().unwrap_or_default()
}

/// Runs `call_sql` between two readings of the server's clock in one implicit transaction and
/// returns its single text answer.
fn outcome_call(client: &mut Client, call_sql: &str) -> Result<Reply, postgres::Error> {
    let rows = simple(
        client,
        &format!("SELECT {SERVER_NOW}; SELECT {call_sql}; SELECT {SERVER_NOW}"),
    )?;
    Ok(Reply::Outcome {
        before: int(&rows[0][0]),
        outcome: text(&rows[1][0]),
        after: int(&rows[2][0]),
    })
}

/// A connection of a worker or producer, its backend pid published for the admin.
fn connect(shared: &Shared, process: usize) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Client::connect(&shared.dsn, NoTls) {
            Ok(mut client) => match simple(&mut client, "SELECT pg_backend_pid()") {
                Ok(rows) => {
                    shared.pids[process].store(int(&rows[0][0]) as i32, Ordering::Relaxed);
                    return client;
                }
                Err(_) => continue,
            },
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("process {process} cannot reconnect: {e}"),
        }
    }
}

/// How a worker settles a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settle {
    Complete,
    /// With the other due jobs of this kind, in one `jobs_complete(ids, leases)`.
    CompleteBatch,
    /// Fail with retry; `backoff`: the queue's backoff, else `retry_in => '0'`.
    FailRetry {
        backoff: bool,
    },
    FailFinal,
    Release,
}

/// How a worker runs a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// Settles within a few ms, sometimes after one heartbeat.
    Quick { heartbeat_first: bool },
    /// Works for longer than the lease, heartbeating every third of it.
    Heartbeating,
    /// Does not heartbeat and settles after the lease ran out.
    Late,
}

/// A job a worker holds.
struct Holding {
    id: i64,
    lease: Uuid,
    lease_ms: i64,
    work: Work,
    settle: Settle,
    /// When the worker acts on it next.
    next_at: Instant,
    /// When its work is done (heartbeating jobs).
    done_at: Instant,
    /// A batch complete waited once for company.
    postponed: bool,
}

struct Worker {
    process: usize,
    shared: Arc<Shared>,
    client: Client,
    rng: Rng,
    rec: Recorder,
    holding: Vec<Holding>,
}

impl Worker {
    fn run(mut self) -> Vec<Op> {
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if self.holding.iter().any(|h| h.next_at <= now) {
                self.act_on_due(now);
                continue;
            }
            if self.holding.len() < HOLD_AT_MOST && self.claim() > 0 {
                continue;
            }
            let next = self
                .holding
                .iter()
                .map(|h| h.next_at)
                .min()
                .unwrap_or(now + Duration::from_millis(5));
            let nap = next.saturating_duration_since(Instant::now());
            thread::sleep(nap.min(Duration::from_millis(5)));
        }
        self.rec.ops
    }

    fn draining(&self) -> bool {
        self.shared.draining.load(Ordering::Relaxed)
    }

    /// Reconnects after a call whose connection died.
    fn reconnect_if(&mut self, unknown: bool) {
        if unknown {
            self.client = connect(&self.shared, self.process);
        }
    }

    /// Claims a few jobs (waiting a little when it holds none) and plans each.
    fn claim(&mut self) -> usize {
        let n = (self.rng.pick(&[1, 1, 2, 3, 5]) as usize).min(HOLD_AT_MOST - self.holding.len());
        let n = n as i32;
        let lease_ms = self.rng.pick(&LEASES_MS);
        let wait = if self.holding.is_empty() { 100 } else { 0 };
        let worker = format!("w{}", self.process);
        let client = &mut self.client;
        let op = self.rec.record(Call::Claim { n, lease_ms }, |_| {
            let rows = simple(
                client,
                &format!(
                    "SELECT c.id, c.lease, c.attempt,
                            (extract(epoch FROM c.lease_until) * 1000000)::int8,
                            c.payload ->> 'tag'
                       FROM jobs_claim('{QUEUE}', worker => '{worker}', n => {n},
                                       lease => '{lease_ms} milliseconds',
                                       wait => '{wait} milliseconds') c;
                     SELECT {SERVER_NOW}"
                ),
            )?;
            let taken_at = int(&rows[rows.len() - 1][0]);
            Ok(Reply::Claimed(
                rows[..rows.len() - 1]
                    .iter()
                    .map(|r| Delivered {
                        id: int(&r[0]),
                        lease: text(&r[1]).parse().expect("a lease uuid"),
                        attempt: int(&r[2]) as i32,
                        lease_until: int(&r[3]),
                        tag: int(&r[4]) as u64,
                        taken_at,
                    })
                    .collect(),
            ))
        });
        let claimed: Vec<Delivered> = match &op.result {
            OpResult::Ok(Reply::Claimed(jobs)) => jobs.clone(),
            _ => Vec::new(),
        };
        let unknown = matches!(op.result, OpResult::Unknown(_));
        self.reconnect_if(unknown);
        let now = Instant::now();
        let lease = Duration::from_millis(lease_ms as u64);
        for job in &claimed {
            let (work, settle) = self.plan();
            let (next_at, done_at) = match work {
                Work::Quick { .. } => {
                    let at = now + Duration::from_millis(self.rng.below(5));
                    (at, at)
                }
                Work::Heartbeating => {
                    let done = now + lease.mul_f64(1.2 + self.rng.below(80) as f64 / 100.0);
                    (now + lease / 3, done)
                }
                Work::Late => {
                    let at = now + lease + Duration::from_millis(20 + self.rng.below(400));
                    (at, at)
                }
            };
            // Some jobs are abandoned outright: the worker "crashed" holding them.
            if !self.draining() && self.rng.chance(2) {
                continue;
            }
            self.holding.push(Holding {
                id: job.id,
                lease: job.lease,
                lease_ms,
                work,
                settle,
                next_at,
                done_at,
                postponed: false,
            });
        }
        // Now and then the whole worker stalls past every lease it holds.
        if !self.draining() && !claimed.is_empty() && self.rng.below(1000) < 3 {
            thread::sleep(Duration::from_millis(1000 + self.rng.below(300)));
        }
        claimed.len()
    }

    fn plan(&mut self) -> (Work, Settle) {
        if self.draining() {
            return (
                Work::Quick {
                    heartbeat_first: false,
                },
                Settle::Complete,
            );
        }
        let work = match self.rng.below(100) {
            0..=83 => Work::Quick {
                heartbeat_first: self.rng.chance(10),
            },
            84..=91 => Work::Heartbeating,
            _ => Work::Late,
        };
        let settle = match self.rng.below(100) {
            0..=54 => Settle::Complete,
            55..=64 => Settle::CompleteBatch,
            65..=79 => Settle::FailRetry {
                backoff: self.rng.chance(50),
            },
            80..=84 => Settle::FailFinal,
            _ => Settle::Release,
        };
        (work, settle)
    }

    /// Heartbeats or settles every job whose time has come.
    fn act_on_due(&mut self, now: Instant) {
        let (due, rest): (Vec<Holding>, Vec<Holding>) = std::mem::take(&mut self.holding)
            .into_iter()
            .partition(|h| h.next_at <= now);
        self.holding = rest;
        let mut batch = Vec::new();
        for mut job in due {
            let heartbeat = match job.work {
                Work::Quick { heartbeat_first } => {
                    job.work = Work::Quick {
                        heartbeat_first: false,
                    };
                    heartbeat_first
                }
                Work::Heartbeating => now < job.done_at,
                Work::Late => false,
            };
            if heartbeat {
                let outcome = self.heartbeat(&job);
                if outcome.as_deref() == Some("running") || self.rng.chance(30) {
                    // Go on; after a 'cancelled' or 'lost', sometimes settle anyway to see it
                    // answered the same way.
                    let step = Duration::from_millis(job.lease_ms as u64 / 3);
                    job.next_at = if job.work == Work::Heartbeating {
                        (now + step).min(job.done_at)
                    } else {
                        now + Duration::from_millis(self.rng.below(5))
                    };
                    if outcome.as_deref() != Some("running") {
                        job.work = Work::Late;
                    }
                    self.holding.push(job);
                }
                continue;
            }
            if job.settle == Settle::CompleteBatch {
                batch.push(job);
            } else {
                self.settle(&job);
            }
        }
        if !batch.is_empty() {
            // Every other job waiting for a batch complete with nothing left to do joins in.
            let (more, rest): (Vec<Holding>, Vec<Holding>) = std::mem::take(&mut self.holding)
                .into_iter()
                .partition(|h| {
                    h.settle == Settle::CompleteBatch
                        && h.work
                            == Work::Quick {
                                heartbeat_first: false,
                            }
                });
            self.holding = rest;
            batch.extend(more);
        }
        match batch.len() {
            0 => {}
            1 if !batch[0].postponed => {
                // Wait a little for company.
                let mut job = batch.pop().expect("one");
                job.postponed = true;
                job.next_at = now + Duration::from_millis(15);
                self.holding.push(job);
            }
            1 => self.settle(&Holding {
                settle: Settle::Complete,
                ..batch.pop().expect("one")
            }),
            _ => self.complete_many(&batch),
        }
    }

    fn heartbeat(&mut self, job: &Holding) -> Option<String> {
        let (id, lease) = (job.id, job.lease);
        let client = &mut self.client;
        let op = self.rec.record(Call::Heartbeat { id, lease }, |_| {
            outcome_call(client, &format!("jobs_heartbeat({id}, '{lease}')"))
        });
        let unknown = matches!(op.result, OpResult::Unknown(_));
        let outcome = match &op.result {
            OpResult::Ok(Reply::Outcome { outcome, .. }) => Some(outcome.clone()),
            _ => None,
        };
        self.reconnect_if(unknown);
        outcome
    }

    /// Settles one job; a call whose connection died is retried once on a new connection.
    fn settle(&mut self, job: &Holding) {
        for _try in 0..2 {
            let (id, lease) = (job.id, job.lease);
            let (call, sql): (Call, Box<dyn Fn(usize) -> String>) = match job.settle {
                Settle::Complete | Settle::CompleteBatch => (
                    Call::Complete { id, lease },
                    Box::new(move |op| {
                        format!("jobs_complete({id}::bigint, '{lease}'::uuid, jsonb_build_object('op', {op}))")
                    }),
                ),
                Settle::FailRetry { backoff } => {
                    (
                        Call::Fail {
                            id,
                            lease,
                            retry: true,
                        },
                        Box::new(move |op| {
                            let retry_in = if backoff { "NULL" } else { "'0'" };
                            format!("jobs_fail({id}, '{lease}', 'fail op {op}', retry_in => {retry_in})")
                        }),
                    )
                }
                Settle::FailFinal => (
                    Call::Fail {
                        id,
                        lease,
                        retry: false,
                    },
                    Box::new(move |op| {
                        format!("jobs_fail({id}, '{lease}', 'fail op {op}', retry => false)")
                    }),
                ),
                Settle::Release => {
                    let retry_in = self.rng.pick(&[0, 0, 30]);
                    (
                        Call::Release { id, lease },
                        Box::new(move |op| {
                            format!(
                                "jobs_release({id}, '{lease}', 'release op {op}', retry_in => '{retry_in} milliseconds')"
                            )
                        }),
                    )
                }
            };
            let client = &mut self.client;
            let op = self
                .rec
                .record(call, |index| outcome_call(client, &sql(index)));
            let unknown = matches!(op.result, OpResult::Unknown(_));
            self.reconnect_if(unknown);
            if !unknown {
                return;
            }
        }
    }

    fn complete_many(&mut self, jobs: &[Holding]) {
        let pairs: Vec<(i64, Uuid)> = jobs.iter().map(|j| (j.id, j.lease)).collect();
        for _try in 0..2 {
            let ids: Vec<String> = pairs.iter().map(|(id, _)| id.to_string()).collect();
            let leases: Vec<String> = pairs.iter().map(|(_, l)| format!("'{l}'")).collect();
            let client = &mut self.client;
            let op = self.rec.record(
                Call::CompleteMany {
                    pairs: pairs.clone(),
                },
                |_| {
                    let rows = simple(
                        client,
                        &format!(
                            "SELECT {SERVER_NOW};
                             SELECT id, outcome FROM jobs_complete_batch(ARRAY[{}]::bigint[], ARRAY[{}]::uuid[]);
                             SELECT {SERVER_NOW}",
                            ids.join(","),
                            leases.join(",")
                        ),
                    )?;
                    let last = rows.len() - 1;
                    Ok(Reply::Outcomes {
                        before: int(&rows[0][0]),
                        rows: rows[1..last]
                            .iter()
                            .map(|r| (int(&r[0]), text(&r[1])))
                            .collect(),
                        after: int(&rows[last][0]),
                    })
                },
            );
            let unknown = matches!(op.result, OpResult::Unknown(_));
            self.reconnect_if(unknown);
            if !unknown {
                return;
            }
        }
    }
}

/// The number of queued and running jobs, read on a connection of its own that nobody
/// terminates (it paces the producers and is no part of the history).
struct Pacer {
    client: Client,
    open: i64,
    checked: Instant,
}

impl Pacer {
    fn new(shared: &Shared) -> Pacer {
        Pacer {
            client: Client::connect(&shared.dsn, NoTls).expect("connect the pacer"),
            open: 0,
            checked: Instant::now(),
        }
    }

    /// Waits (up to a second) while more than [`OUTSTANDING`] jobs are open.
    fn pace(&mut self) {
        let give_up = Instant::now() + Duration::from_secs(1);
        loop {
            if self.checked.elapsed() >= Duration::from_millis(20) {
                self.open = self
                    .client
                    .query_one(
                        "SELECT count(*) FROM jobs.job
                          WHERE queue = $1 AND state IN ('queued', 'running')",
                        &[&QUEUE],
                    )
                    .expect("count open jobs")
                    .get(0);
                self.checked = Instant::now();
            }
            if self.open <= OUTSTANDING || Instant::now() >= give_up {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Enqueues `jobs` tagged jobs, singly and in batches, paced by the number of open jobs.
fn produce(process: usize, shared: Arc<Shared>, seed: u64, jobs: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed, process as u64);
    let mut rec = Recorder::new(process, shared.clone());
    let mut client = connect(&shared, process);
    let mut pacer = Pacer::new(&shared);
    let mut produced = 0;
    while produced < jobs && !shared.stop.load(Ordering::Relaxed) {
        pacer.pace();
        let count = if rng.chance(70) { 1 } else { 2 + rng.below(19) }.min(jobs - produced);
        let tags: Vec<u64> = (produced..produced + count)
            .map(|n| ((process as u64) << 40) | n)
            .collect();
        produced += count;
        let max_attempts = match rng.below(10) {
            0 => 1,
            1 | 2 => 2,
            _ => MAX_ATTEMPTS,
        };
        let sql = if tags.len() == 1 {
            format!(
                "SELECT jobs_enqueue('{QUEUE}', '{{\"tag\": {}}}', max_attempts => {max_attempts})",
                tags[0]
            )
        } else {
            let payloads: Vec<String> =
                tags.iter().map(|t| format!("'{{\"tag\": {t}}}'")).collect();
            format!(
                "SELECT jobs_enqueue_batch('{QUEUE}', ARRAY[{}]::jsonb[], max_attempts => {max_attempts})",
                payloads.join(",")
            )
        };
        let op = rec.record(
            Call::Enqueue {
                tags: tags.clone(),
                max_attempts,
            },
            |_| {
                let rows = simple(&mut client, &sql)?;
                Ok(Reply::Ids(rows.iter().map(|r| int(&r[0])).collect()))
            },
        );
        match &op.result {
            OpResult::Ok(Reply::Ids(ids)) => {
                shared.known_ids.lock().unwrap().extend(ids);
                for id in ids {
                    if rng.chance(3) {
                        let at = Instant::now() + Duration::from_millis(rng.below(400));
                        shared.cancel_requests.lock().unwrap().push_back((at, *id));
                    }
                }
            }
            OpResult::Unknown(_) => client = connect(&shared, process),
            _ => {}
        }
    }
    rec.ops
}

/// Cancels jobs and terminates backends of workers and producers until the drain begins.
fn administer(process: usize, shared: Arc<Shared>, seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed, process as u64);
    let mut rec = Recorder::new(process, shared.clone());
    let mut client = connect(&shared, process);
    let mut next_kill = Instant::now() + Duration::from_millis(50 + rng.below(200));
    while !shared.stop.load(Ordering::Relaxed) && !shared.draining.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut cancels = Vec::new();
        {
            let mut requests = shared.cancel_requests.lock().unwrap();
            while requests.front().is_some_and(|(at, _)| *at <= now) {
                cancels.push(requests.pop_front().expect("front").1);
            }
        }
        // Now and then a cancel of an older job, most likely finished already.
        if rng.chance(2) {
            let ids = shared.known_ids.lock().unwrap();
            if !ids.is_empty() {
                cancels.push(ids[rng.below(ids.len() as u64) as usize]);
            }
        }
        for id in cancels {
            let op = rec.record(Call::Cancel { id }, |_| {
                outcome_call(&mut client, &format!("jobs_cancel({id})"))
            });
            if matches!(op.result, OpResult::Unknown(_)) {
                client = connect(&shared, process);
            }
        }
        if now >= next_kill {
            next_kill = now + Duration::from_millis(50 + rng.below(200));
            // Mostly workers, sometimes a producer (their enqueues then have unknown outcomes).
            let target = if rng.chance(80) {
                rng.below(WORKERS as u64) as usize
            } else {
                WORKERS + rng.below(PRODUCERS as u64) as usize
            };
            let pid = shared.pids[target].load(Ordering::Relaxed);
            if pid != 0 {
                let op = rec.record(Call::Terminate { process: target }, |_| {
                    let rows = simple(&mut client, &format!("SELECT pg_terminate_backend({pid})"))?;
                    Ok(Reply::Terminated(text(&rows[0][0]) == "t"))
                });
                if matches!(op.result, OpResult::Unknown(_)) {
                    client = connect(&shared, process);
                }
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
    rec.ops
}

/// Reads every job of the queue at the end.
fn final_jobs(client: &mut Client) -> Vec<FinalJob> {
    client
        .query(
            "SELECT id, (payload ->> 'tag')::int8, state::text, attempt, max_attempts,
                    errors::text, (result ->> 'op')::int8, release_reason
               FROM jobs.job WHERE queue = $1 ORDER BY id",
            &[&QUEUE],
        )
        .expect("read the final jobs")
        .iter()
        .map(|row| {
            let errors: serde_json::Value =
                serde_json::from_str(row.get::<_, &str>(5)).expect("errors is JSON");
            FinalJob {
                id: row.get(0),
                tag: row.get::<_, Option<i64>>(1).map(|t| t as u64),
                state: row.get(2),
                attempt: row.get(3),
                max_attempts: row.get(4),
                errors: errors
                    .as_array()
                    .expect("errors is an array")
                    .iter()
                    .map(|e| {
                        (
                            e["attempt"].as_i64().unwrap_or(-1) as i32,
                            e["error"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect(),
                result_op: row.get::<_, Option<i64>>(6).map(|op| op as usize),
                release_reason: row.get(7),
            }
        })
        .collect()
}

/// Jobs in impossible states (the rules of `crash.rs`).
fn impossible_states(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT format('job %s: %s', id, to_jsonb(j))
               FROM jobs.job j
              WHERE NOT CASE state
                  WHEN 'queued'    THEN finished_at IS NULL AND lease_until IS NULL
                                        AND attempt < max_attempts
                  WHEN 'running'   THEN lease IS NOT NULL AND lease_until IS NOT NULL
                                        AND attempt >= 1 AND finished_at IS NULL
                  ELSE finished_at IS NOT NULL AND lease_until IS NULL
                END
                 OR attempt NOT BETWEEN 0 AND max_attempts",
            &[],
        )
        .expect("check for impossible states")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

/// Runs the workload for `jobs` jobs, checks its history and panics on any anomaly.
fn run_history(jobs: u64, sabotage: bool) -> (Report, Vec<String>) {
    let seed = env_u64("PG_JOBS_HISTORY_SEED").unwrap_or(0x5EED_2026);
    eprintln!("history: {jobs} jobs, seed {seed} (set PG_JOBS_HISTORY_SEED={seed} to repeat its decisions)");
    let cluster = Cluster::start("history", TEST_SETTINGS);
    let mut admin = cluster.connect();
    admin
        .batch_execute(&format!(
            "CREATE EXTENSION pg_jobs;
             SELECT jobs_create_queue('{QUEUE}', lease => '500 milliseconds',
                                      max_attempts => {MAX_ATTEMPTS}, backoff_base => '10 milliseconds',
                                      backoff_max => '100 milliseconds', jitter => 0.1);"
        ))
        .expect("set up the queue");
    let shared = Arc::new(Shared {
        dsn: cluster.dsn("postgres"),
        start: Instant::now(),
        next_op: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        pids: (0..=WORKERS + PRODUCERS)
            .map(|_| AtomicI32::new(0))
            .collect(),
        known_ids: Mutex::new(Vec::new()),
        cancel_requests: Mutex::new(VecDeque::new()),
    });

    // Whatever happens to the test thread, the others stop.
    struct StopOnDrop(Arc<Shared>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.stop.store(true, Ordering::Relaxed);
        }
    }
    let _stop = StopOnDrop(shared.clone());

    let mut workers = Vec::new();
    for process in 0..WORKERS {
        let shared = shared.clone();
        workers.push(thread::spawn(move || {
            Worker {
                process,
                client: connect(&shared, process),
                rng: Rng::new(seed, process as u64),
                rec: Recorder::new(process, shared.clone()),
                shared,
                holding: Vec::new(),
            }
            .run()
        }));
    }
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let shared = shared.clone();
        let share = jobs / PRODUCERS as u64 + u64::from((p as u64) < jobs % PRODUCERS as u64);
        producers.push(thread::spawn(move || {
            produce(WORKERS + p, shared, seed, share)
        }));
    }
    let admin_thread = {
        let shared = shared.clone();
        thread::spawn(move || administer(WORKERS + PRODUCERS, shared, seed))
    };
    let saboteur = sabotage.then(|| {
        let shared = shared.clone();
        thread::spawn(move || sabotage_rules(&shared))
    });

    let mut ops: Vec<Op> = Vec::new();
    for producer in producers {
        ops.extend(producer.join().expect("a producer panicked"));
    }
    let produced_in = shared.start.elapsed();
    // The chaos stops; the workers complete whatever is left.
    shared.draining.store(true, Ordering::Relaxed);
    ops.extend(admin_thread.join().expect("the admin panicked"));
    if let Some(saboteur) = saboteur {
        let (cut, deleted) = saboteur.join().expect("the saboteur panicked");
        eprintln!(
            "history: the saboteur requeued {cut} jobs under live leases and deleted {deleted} queued jobs"
        );
    }
    let drain = Duration::from_secs(120);
    let drained = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(drain, "the workers to finish every job", || {
            let open: i64 = admin
                .query_one(
                    "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state IN ('queued', 'running')",
                    &[&QUEUE],
                )
                .expect("count open jobs")
                .get(0);
            open == 0
        })
    }));
    shared.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        ops.extend(worker.join().expect("a worker panicked"));
    }
    ops.sort_by_key(|op| op.index);
    eprintln!(
        "history: {} operations; produced in {:.1?}, finished in {:.1?}",
        ops.len(),
        produced_in,
        shared.start.elapsed()
    );
    if drained.is_err() {
        eprintln!("history: jobs were still open after {drain:?} of draining (reported as lost)");
    }

    let finals = final_jobs(&mut admin);
    let broken = impossible_states(&mut admin);
    let report = check(&ops, &finals);
    report.print();
    (report, broken)
}

/// Breaks the rules behind the extension's back, as a buggy extension would, until the drain
/// begins: puts running jobs with live leases back in the queue (a premature reclaim: another
/// worker claims them while their holders still hold them) and deletes queued jobs (lost
/// jobs). Returns how many of each it did. Only the negative control uses it.
fn sabotage_rules(shared: &Shared) -> (usize, usize) {
    let mut client = Client::connect(&shared.dsn, NoTls).expect("connect the saboteur");
    let (mut cut, mut deleted) = (0, 0);
    while !shared.draining.load(Ordering::Relaxed) && !shared.stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(30));
        if cut <= deleted {
            cut += client
                .execute(
                    "UPDATE jobs.job SET state = 'queued', lease_until = NULL
                      WHERE id = (SELECT id FROM jobs.job
                                   WHERE queue = $1 AND state = 'running'
                                     AND attempt < max_attempts
                                     AND lease_until > clock_timestamp() + interval '200 milliseconds'
                                   ORDER BY random() LIMIT 1)",
                    &[&QUEUE],
                )
                .expect("requeue a running job") as usize;
        } else {
            deleted += client
                .execute(
                    "DELETE FROM jobs.job
                      WHERE id = (SELECT id FROM jobs.job WHERE queue = $1 AND state = 'queued'
                                   ORDER BY id LIMIT 1)",
                    &[&QUEUE],
                )
                .expect("delete a job") as usize;
        }
    }
    (cut, deleted)
}

/// Asserts that the history is clean and that the workload exercised what it claims to.
fn assert_clean_and_exercised(jobs: u64, report: &Report, broken: &[String]) {
    assert!(
        broken.is_empty(),
        "jobs in impossible states:\n{}",
        broken.join("\n")
    );
    assert!(
        report.is_clean(),
        "the history checker found anomalies; see the report above"
    );
    let answered = |kind: &str, outcome: &str| {
        report
            .ops
            .get(kind)
            .and_then(|o| o.get(outcome))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        report.enqueues.0 + report.enqueues.2,
        jobs as usize,
        "every job was enqueued once"
    );
    assert!(
        answered("terminate", "worker true") > 0,
        "no backend was terminated"
    );
    assert!(answered("cancel", "cancelled") > 0, "no job was cancelled");
    assert!(answered("fail", "queued") > 0, "no failure was retried");
    assert!(answered("release", "queued") > 0, "no job was released");
    assert!(report.reclaimed > 0, "no lease expired and was reclaimed");
    assert!(
        report.late_acted + report.late_lost > 0,
        "no settle came after its lease ran out"
    );
    assert!(
        answered("heartbeat", "running") > 0,
        "no heartbeat renewed a lease"
    );
}

#[test]
fn a_random_history_has_no_lost_duplicated_or_unexpected_jobs() {
    let jobs = env_u64("PG_JOBS_HISTORY_JOBS").unwrap_or(2_000);
    let (report, broken) = run_history(jobs, false);
    assert_clean_and_exercised(jobs, &report, &broken);
}

/// The large history, on demand:
/// `PG_JOBS_HISTORY_JOBS=100000 cargo test --release -p pg_jobs_tests --test history -- --ignored --nocapture`
#[test]
#[ignore = "large: run on demand (see the module documentation)"]
fn a_large_random_history_has_no_lost_duplicated_or_unexpected_jobs() {
    let jobs = env_u64("PG_JOBS_HISTORY_JOBS").unwrap_or(100_000);
    let (report, broken) = run_history(jobs, false);
    assert_clean_and_exercised(jobs, &report, &broken);
}

/// The negative control: the same workload against a queue whose rules a saboteur breaks
/// (premature reclaims, deleted jobs) must be reported as duplicated and lost.
#[test]
fn the_checker_catches_a_sabotaged_queue() {
    let (report, _) = run_history(1000, true);
    assert!(
        !report.duplicated.is_empty(),
        "jobs requeued under live leases were not reported as duplicated"
    );
    assert!(
        !report.lost.is_empty(),
        "deleted jobs were not reported as lost"
    );
}

// ---------------------------------------------------------------------------------------------
// The checker on synthetic histories: it must be able to fail
// ---------------------------------------------------------------------------------------------

/// Builds synthetic histories: one server clock (µs) and one client clock.
#[derive(Default)]
struct Synthetic {
    ops: Vec<Op>,
}

impl Synthetic {
    fn push(&mut self, process: usize, call: Call, result: OpResult) -> usize {
        let index = self.ops.len();
        let at = index as u64 * 10;
        self.ops.push(Op {
            index,
            process,
            invoke: at,
            complete: at + 5,
            call,
            result,
            server_floor: None,
        });
        index
    }

    fn enqueue(&mut self, tag: u64, id: i64) {
        self.push(
            9,
            Call::Enqueue {
                tags: vec![tag],
                max_attempts: 3,
            },
            OpResult::Ok(Reply::Ids(vec![id])),
        );
    }

    /// A claim of one job at server time `at` with a 1 s lease.
    fn claim(&mut self, process: usize, id: i64, tag: u64, attempt: i32, at: Micros) -> Uuid {
        let lease = Uuid::from_u128(((id as u128) << 32) | (self.ops.len() as u128 + 1));
        self.push(
            process,
            Call::Claim {
                n: 1,
                lease_ms: 1000,
            },
            OpResult::Ok(Reply::Claimed(vec![Delivered {
                id,
                lease,
                attempt,
                lease_until: at + 1_000_000,
                tag,
                taken_at: at,
            }])),
        );
        lease
    }

    /// A complete that answered `outcome` at server time `at`; returns the op index.
    fn complete(
        &mut self,
        process: usize,
        id: i64,
        lease: Uuid,
        outcome: &str,
        at: Micros,
    ) -> usize {
        self.push(
            process,
            Call::Complete { id, lease },
            OpResult::Ok(Reply::Outcome {
                outcome: outcome.into(),
                before: at,
                after: at + 100,
            }),
        )
    }

    fn heartbeat(&mut self, process: usize, id: i64, lease: Uuid, outcome: &str, at: Micros) {
        self.push(
            process,
            Call::Heartbeat { id, lease },
            OpResult::Ok(Reply::Outcome {
                outcome: outcome.into(),
                before: at,
                after: at + 100,
            }),
        );
    }
}

fn final_job(id: i64, tag: u64, state: &str, attempt: i32, errors: &[(i32, &str)]) -> FinalJob {
    FinalJob {
        id,
        tag: Some(tag),
        state: state.into(),
        attempt,
        max_attempts: 3,
        errors: errors.iter().map(|(a, e)| (*a, (*e).to_owned())).collect(),
        result_op: None,
        release_reason: None,
    }
}

#[test]
fn the_checker_passes_a_clean_history_with_reclaims_and_a_late_success() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // Lease A runs out at 2 s and is reclaimed; nobody claims the job, so A's heartbeat at
    // 2.1 s revives it ("done wins"), and A fails it with a retry at 2.2 s.
    let a = h.claim(0, 10, 1, 1, 1_000_000);
    h.heartbeat(0, 10, a, "running", 2_100_000);
    let fail = h.push(
        0,
        Call::Fail {
            id: 10,
            lease: a,
            retry: true,
        },
        OpResult::Ok(Reply::Outcome {
            outcome: "queued".into(),
            before: 2_200_000,
            after: 2_200_100,
        }),
    );
    // Lease B takes the retry at 2.3 s, heartbeats, and completes late (at 3.5 s, within its
    // renewed lease); A's own late complete at 3.6 s is 'lost'.
    let b = h.claim(1, 10, 1, 2, 2_300_000);
    h.heartbeat(1, 10, b, "running", 2_400_000);
    let done = h.complete(1, 10, b, "succeeded", 3_300_000);
    h.complete(0, 10, a, "lost", 3_600_000);
    let mut job = final_job(
        10,
        1,
        "succeeded",
        2,
        &[(1, "lease expired"), (1, &format!("fail op {fail}"))],
    );
    job.result_op = Some(done);
    // A second job: enqueued with an unknown outcome, yet stored (recovered), then cancelled.
    h.push(
        8,
        Call::Enqueue {
            tags: vec![2],
            max_attempts: 3,
        },
        OpResult::Unknown("connection closed".into()),
    );
    h.push(
        9,
        Call::Cancel { id: 11 },
        OpResult::Ok(Reply::Outcome {
            outcome: "cancelled".into(),
            before: 4_000_000,
            after: 4_000_100,
        }),
    );
    let stray = final_job(11, 2, "cancelled", 0, &[]);
    let report = check(&h.ops, &[job, stray]);
    report.print();
    assert!(report.is_clean(), "a clean history was judged anomalous");
    assert_eq!(report.recovered, 1);
}

#[test]
fn the_checker_reports_a_lost_job() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    h.enqueue(2, 11);
    // Job 10 is gone at the end; job 11 is still queued.
    let report = check(&h.ops, &[final_job(11, 2, "queued", 0, &[])]);
    report.print();
    assert_eq!(report.lost.len(), 2, "{:?}", report.lost);
    assert!(!report.is_clean());
}

#[test]
fn the_checker_reports_two_live_leases_at_once() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // Lease A runs until 2 s, but lease B is handed out at 1.5 s.
    let a = h.claim(0, 10, 1, 1, 1_000_000);
    let b = h.claim(1, 10, 1, 2, 1_500_000);
    let done = h.complete(1, 10, b, "succeeded", 1_600_000);
    let _ = a;
    let mut job = final_job(10, 1, "succeeded", 2, &[]);
    job.result_op = Some(done);
    let report = check(&h.ops, &[job]);
    report.print();
    assert!(
        report.duplicated.iter().any(|d| d.contains("live over")),
        "{:?}",
        report.duplicated
    );
}

#[test]
fn the_checker_reports_a_stale_lease_that_acted() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // A's lease expired (2 s) and B claimed at 2.5 s; A's late complete must be 'lost', yet it
    // answered 'succeeded' at 2.6 s.
    let a = h.claim(0, 10, 1, 1, 1_000_000);
    let b = h.claim(1, 10, 1, 2, 2_500_000);
    let stale = h.complete(0, 10, a, "succeeded", 2_600_000);
    let _ = b;
    let mut job = final_job(10, 1, "succeeded", 2, &[(1, "lease expired")]);
    job.result_op = Some(stale);
    let report = check(&h.ops, &[job]);
    report.print();
    assert!(
        report
            .duplicated
            .iter()
            .any(|d| d.contains("after it was replaced")),
        "{:?}",
        report.duplicated
    );
}

#[test]
fn the_checker_reports_an_unexpected_delivery() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // A claim hands out job 99 with tag 7, which nobody enqueued.
    h.claim(0, 99, 7, 1, 1_000_000);
    let report = check(&h.ops, &[final_job(10, 1, "cancelled", 0, &[])]);
    report.print();
    assert!(
        report
            .unexpected
            .iter()
            .any(|u| u.contains("never enqueued")),
        "{:?}",
        report.unexpected
    );
}

#[test]
fn the_checker_reports_a_final_state_that_contradicts_the_history() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    let a = h.claim(0, 10, 1, 1, 1_000_000);
    let done = h.complete(0, 10, a, "succeeded", 1_100_000);
    // The complete was acknowledged, yet the job ends failed, and a cancel after it says
    // 'cancelled' (terminal states must stay terminal).
    h.push(
        9,
        Call::Cancel { id: 10 },
        OpResult::Ok(Reply::Outcome {
            outcome: "cancelled".into(),
            before: 1_200_000,
            after: 1_200_100,
        }),
    );
    let mut job = final_job(10, 1, "failed", 1, &[]);
    job.result_op = Some(done);
    let report = check(&h.ops, &[job]);
    report.print();
    assert!(
        report
            .state_errors
            .iter()
            .any(|e| e.contains("completed it (succeeded)")),
        "{:?}",
        report.state_errors
    );
    assert!(
        report
            .state_errors
            .iter()
            .any(|e| e.contains("before cancel op")),
        "{:?}",
        report.state_errors
    );
}
