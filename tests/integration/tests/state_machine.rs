//! A property-based test of the job state machine (issue 5, item 4).
//!
//! [proptest] generates random sequences of API calls, valid and invalid: enqueues (single and
//! batch) with random options and one bad option at a time, claims of `n` in 0, 1, 2, 3, 1000 and
//! 1001 with good and bad leases and kinds, heartbeats and settle calls (complete, the batch
//! complete, fail, release) presenting the job's latest lease, an older one, a random one or
//! `NULL`, cancels, retries, pauses and resumes, and reclaims of leases made to expire (a claim
//! or heartbeat with a 1 ms lease, then `jobs_reclaim()`). Each call runs against the real
//! extension and against [`Model`], a reference model written from SPEC.md's rules and the
//! README's "Rules and guarantees". After every step the test checks that:
//!
//! * the call answered what the model answers: the same outcome string, the same claimed jobs
//!   in the same order with the same attempts, the same reclaim count, or an error with the
//!   model's SQLSTATE;
//! * every job of the case is in the database exactly as in the model: state, attempt,
//!   max_attempts, priority, the lease token (the very claim that minted it, or none), whether
//!   `lease_until` is set and whether it has passed, whether it is due, the number of errors
//!   and the last one's text, `release_reason`, `progress` and `result`;
//! * the dead-letter queue holds one copy per job that ended `failed`, with its error history;
//! * no job anywhere is in an impossible state (the rules of `crash.rs`).
//!
//! The cluster preloads pg_jobs but serves no database (`pg_jobs.databases = ''`), so no
//! background worker reclaims anything behind the test's back and `jobs_reclaim()` counts are
//! exact. Each case starts from an empty database with a fresh queue and dead-letter queue.
//!
//! On a failure proptest shrinks the sequence, then the test replays the minimal sequence with
//! every SQL call printed and panics with it. The number of cases is `PROPTEST_CASES` (default
//! 100) and the longest sequence `PG_JOBS_SM_STEPS` (default 40):
//!
//! ```sh
//! PROPTEST_CASES=1000 cargo test -p pg_jobs_tests --test state_machine -- --nocapture
//! ```

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use pg_jobs_tests::{scalar, settings_with, Client, Cluster};
use postgres::types::ToSql;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};
use serde_json::{json, Value};
use uuid::Uuid;

/// The case queue's `max_attempts`, used by jobs enqueued without their own.
const QUEUE_MAX_ATTEMPTS: i32 = 3;

/// A lease token no claim ever mints (claims mint random version 4 uuids).
const FOREIGN_LEASE: Uuid = Uuid::from_u128(0x0000_0000_0000_4000_8000_0000_0000_0001);

/// An id no job has.
const UNKNOWN_ID: i64 = -1;

// ---------------------------------------------------------------------------------------------
// Commands: what proptest generates
// ---------------------------------------------------------------------------------------------

/// Which job a call names.
#[derive(Clone, Copy, Debug)]
enum JobPick {
    /// The i-th job that a lease holds (running, or reclaimed and not claimed again), modulo
    /// their number; while there are none, like `Job`.
    Held(usize),
    /// The i-th job of the case, modulo the number of jobs (an unknown id while there are none).
    Job(usize),
    /// An id no job has.
    Unknown,
    /// `NULL`.
    Null,
}

/// Which lease a call presents for its job.
#[derive(Clone, Copy, Debug)]
enum LeasePick {
    /// The lease of the job's latest claim (whether or not it is still current).
    Latest,
    /// The lease of one of the job's claims, i modulo their number.
    Older(usize),
    /// A token no claim minted.
    Foreign,
    /// `NULL`.
    Null,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    A,
    B,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::A => "a",
            Kind::B => "b",
        }
    }
}

/// The options of an enqueued job.
#[derive(Clone, Copy, Debug)]
struct JobSpec {
    kind: Kind,
    /// Due in an hour rather than now.
    later: bool,
    priority: i16,
    max_attempts: Option<i32>,
}

/// The one bad argument of an enqueue, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EnqueueFault {
    None,
    UnknownQueue,
    BadQueueName,
    NullQueue,
    NullPayload,
    EmptyKind,
    NullRunAt,
    PriorityOutOfRange,
    MaxAttemptsZero,
    HeadersNotObject,
    BadOnConflict,
    EmptyUniqueKey,
}

impl EnqueueFault {
    fn sqlstate(self) -> Option<&'static str> {
        match self {
            EnqueueFault::None => None,
            EnqueueFault::UnknownQueue => Some("42704"),
            EnqueueFault::NullQueue | EnqueueFault::NullPayload | EnqueueFault::NullRunAt => {
                Some("22004")
            }
            EnqueueFault::EmptyUniqueKey => Some("22023"),
            EnqueueFault::BadQueueName
            | EnqueueFault::EmptyKind
            | EnqueueFault::PriorityOutOfRange
            | EnqueueFault::MaxAttemptsZero
            | EnqueueFault::HeadersNotObject
            | EnqueueFault::BadOnConflict => Some("22023"),
        }
    }
}

/// The `lease` argument of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimLease {
    /// `NULL`: the queue's (one hour).
    Queue,
    /// `'1 millisecond'`: expired by the next step.
    Short,
    Hour,
    /// `'0'`: refused.
    Zero,
    /// `'8 days'`: refused.
    EightDays,
}

/// The `kinds` argument of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kinds {
    Any,
    Only(Kind),
    Both,
    /// `ARRAY[]`: refused.
    Empty,
    /// `ARRAY[NULL]`: refused.
    OnlyNull,
}

/// A `retry_in` argument (fail, release).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delay {
    Now,
    Hour,
    /// `'-1 second'`: refused.
    Negative,
    /// `NULL`: the queue's backoff (an hour) for a fail, refused for a release.
    Null,
}

impl Delay {
    fn sql(self) -> Option<&'static str> {
        match self {
            Delay::Now => Some("0"),
            Delay::Hour => Some("1 hour"),
            Delay::Negative => Some("-1 second"),
            Delay::Null => None,
        }
    }
}

/// The `extend` argument of a heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extend {
    /// `NULL`: the claim's lease length.
    Default,
    Short,
    Hour,
    Zero,
    EightDays,
}

/// One API call, with symbolic jobs and leases.
#[derive(Clone, Debug)]
enum Cmd {
    Enqueue {
        spec: JobSpec,
        fault: EnqueueFault,
    },
    EnqueueBatch {
        count: usize,
        spec: JobSpec,
        null_element: bool,
    },
    Claim {
        n: i32,
        lease: ClaimLease,
        kinds: Kinds,
        unknown_queue: bool,
    },
    Heartbeat {
        job: JobPick,
        lease: LeasePick,
        extend: Extend,
    },
    Complete {
        job: JobPick,
        lease: LeasePick,
    },
    CompleteMany {
        pairs: Vec<(JobPick, LeasePick)>,
        extra_lease: bool,
    },
    Fail {
        job: JobPick,
        lease: LeasePick,
        retry: Option<bool>,
        retry_in: Delay,
        null_error: bool,
    },
    Release {
        job: JobPick,
        lease: LeasePick,
        retry_in: Delay,
    },
    Cancel {
        job: JobPick,
    },
    /// `later`: `None` passes `run_at => NULL`.
    Retry {
        job: JobPick,
        later: Option<bool>,
    },
    /// Waits until every 1 ms lease has run out, then calls `jobs_reclaim()`.
    Reclaim,
    Pause {
        unknown: bool,
    },
    Resume {
        unknown: bool,
    },
}

fn job_pick() -> impl Strategy<Value = JobPick> {
    prop_oneof![
        24 => (0usize..4).prop_map(JobPick::Held),
        12 => (0usize..8).prop_map(JobPick::Job),
        1 => Just(JobPick::Unknown),
        1 => Just(JobPick::Null),
    ]
}

fn lease_pick() -> impl Strategy<Value = LeasePick> {
    prop_oneof![
        24 => Just(LeasePick::Latest),
        8 => (0usize..4).prop_map(LeasePick::Older),
        1 => Just(LeasePick::Foreign),
        1 => Just(LeasePick::Null),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![3 => Just(Kind::A), 1 => Just(Kind::B)]
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        kind(),
        prop::bool::weighted(0.15),
        prop_oneof![4 => Just(0i16), 1 => Just(-1i16), 1 => Just(1i16)],
        prop_oneof![3 => Just(None), 1 => (1i32..=3).prop_map(Some)],
    )
        .prop_map(|(kind, later, priority, max_attempts)| JobSpec {
            kind,
            later,
            priority,
            max_attempts,
        })
}

fn enqueue_fault() -> impl Strategy<Value = EnqueueFault> {
    prop_oneof![
        12 => Just(EnqueueFault::None),
        1 => prop::sample::select(vec![
            EnqueueFault::UnknownQueue,
            EnqueueFault::BadQueueName,
            EnqueueFault::NullQueue,
            EnqueueFault::NullPayload,
            EnqueueFault::EmptyKind,
            EnqueueFault::NullRunAt,
            EnqueueFault::PriorityOutOfRange,
            EnqueueFault::MaxAttemptsZero,
            EnqueueFault::HeadersNotObject,
            EnqueueFault::BadOnConflict,
            EnqueueFault::EmptyUniqueKey,
        ]),
    ]
}

/// A `retry_in` for a fail: `NULL` means the queue's backoff, which is valid.
fn fail_delay() -> impl Strategy<Value = Delay> {
    prop_oneof![
        12 => Just(Delay::Now),
        2 => Just(Delay::Hour),
        6 => Just(Delay::Null),
        1 => Just(Delay::Negative),
    ]
}

/// A `retry_in` for a release: `NULL` is refused.
fn release_delay() -> impl Strategy<Value = Delay> {
    prop_oneof![
        12 => Just(Delay::Now),
        3 => Just(Delay::Hour),
        1 => Just(Delay::Null),
        1 => Just(Delay::Negative),
    ]
}

/// A claim: mostly valid ones, sometimes any combination, bad arguments included.
fn claim() -> impl Strategy<Value = Cmd> {
    let valid = (
        prop_oneof![8 => Just(1i32), 2 => Just(2), 2 => Just(3), 1 => Just(1000)],
        prop_oneof![
            4 => Just(ClaimLease::Queue),
            4 => Just(ClaimLease::Short),
            1 => Just(ClaimLease::Hour),
        ],
        prop_oneof![
            10 => Just(Kinds::Any),
            2 => kind().prop_map(Kinds::Only),
            1 => Just(Kinds::Both),
        ],
    )
        .prop_map(|(n, lease, kinds)| Cmd::Claim {
            n,
            lease,
            kinds,
            unknown_queue: false,
        });
    let any = (
        prop::sample::select(vec![0i32, 1, 2, 1000, 1001]),
        prop::sample::select(vec![
            ClaimLease::Queue,
            ClaimLease::Short,
            ClaimLease::Hour,
            ClaimLease::Zero,
            ClaimLease::EightDays,
        ]),
        prop::sample::select(vec![
            Kinds::Any,
            Kinds::Only(Kind::B),
            Kinds::Both,
            Kinds::Empty,
            Kinds::OnlyNull,
        ]),
        any::<bool>(),
    )
        .prop_map(|(n, lease, kinds, unknown_queue)| Cmd::Claim {
            n,
            lease,
            kinds,
            unknown_queue,
        });
    prop_oneof![8 => valid, 1 => any]
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        8 => (job_spec(), enqueue_fault()).prop_map(|(spec, fault)| Cmd::Enqueue { spec, fault }),
        1 => (0usize..4, job_spec(), prop::bool::weighted(0.1)).prop_map(
            |(count, spec, null_element)| Cmd::EnqueueBatch { count, spec, null_element }
        ),
        9 => claim(),
        3 => (
            job_pick(),
            lease_pick(),
            prop_oneof![
                8 => Just(Extend::Default), 3 => Just(Extend::Short), 3 => Just(Extend::Hour),
                1 => Just(Extend::Zero), 1 => Just(Extend::EightDays)
            ],
        )
            .prop_map(|(job, lease, extend)| Cmd::Heartbeat { job, lease, extend }),
        4 => (job_pick(), lease_pick()).prop_map(|(job, lease)| Cmd::Complete { job, lease }),
        1 => (
            prop::collection::vec((job_pick(), lease_pick()), 0..4),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(pairs, extra_lease)| Cmd::CompleteMany { pairs, extra_lease }),
        4 => (
            job_pick(),
            lease_pick(),
            prop_oneof![20 => Just(Some(true)), 8 => Just(Some(false)), 1 => Just(None)],
            fail_delay(),
            prop::bool::weighted(0.03),
        )
            .prop_map(|(job, lease, retry, retry_in, null_error)| Cmd::Fail {
                job, lease, retry, retry_in, null_error
            }),
        3 => (job_pick(), lease_pick(), release_delay())
            .prop_map(|(job, lease, retry_in)| Cmd::Release { job, lease, retry_in }),
        2 => job_pick().prop_map(|job| Cmd::Cancel { job }),
        2 => (
            job_pick(),
            prop_oneof![12 => Just(Some(false)), 3 => Just(Some(true)), 1 => Just(None)],
        )
            .prop_map(|(job, later)| Cmd::Retry { job, later }),
        3 => Just(Cmd::Reclaim),
        1 => prop::bool::weighted(0.2).prop_map(|unknown| Cmd::Pause { unknown }),
        2 => prop::bool::weighted(0.1).prop_map(|unknown| Cmd::Resume { unknown }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Resolved calls: commands with their jobs and leases looked up in the model
// ---------------------------------------------------------------------------------------------

/// A job as a call names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JobRef {
    /// The i-th job of the case.
    Job(usize),
    Unknown,
    Null,
}

/// A lease as a call presents it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaseRef {
    /// The token minted by the case's n-th claimed job.
    Claim(usize),
    Foreign,
    Null,
}

/// A command whose symbolic job and lease picks are resolved against the model before the step.
#[derive(Clone, Debug)]
enum Call {
    Enqueue {
        spec: JobSpec,
        fault: EnqueueFault,
    },
    EnqueueBatch {
        count: usize,
        spec: JobSpec,
        null_element: bool,
    },
    Claim {
        n: i32,
        lease: ClaimLease,
        kinds: Kinds,
        unknown_queue: bool,
    },
    Heartbeat {
        job: JobRef,
        lease: LeaseRef,
        extend: Extend,
        progress: i64,
    },
    Complete {
        job: JobRef,
        lease: LeaseRef,
        result: i64,
    },
    CompleteMany {
        pairs: Vec<(JobRef, LeaseRef)>,
        extra_lease: bool,
    },
    Fail {
        job: JobRef,
        lease: LeaseRef,
        error: Option<String>,
        retry: Option<bool>,
        retry_in: Delay,
    },
    Release {
        job: JobRef,
        lease: LeaseRef,
        reason: String,
        retry_in: Delay,
    },
    Cancel {
        job: JobRef,
    },
    Retry {
        job: JobRef,
        later: Option<bool>,
    },
    Reclaim,
    Pause {
        unknown: bool,
    },
    Resume {
        unknown: bool,
    },
}

/// What a call answered, in the model's terms (jobs as indices, leases as claim numbers).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    /// An error with this SQLSTATE.
    Error(String),
    /// A text outcome (heartbeat, complete, fail, release, cancel, retry).
    Text(String),
    /// New jobs: how many the enqueue created.
    Created(usize),
    /// Claimed jobs in the order the claim returned them: (job, attempt, kind, priority,
    /// max_attempts).
    Claimed(Vec<(usize, i32, Kind, i16, i32)>),
    /// The batch complete's rows: (job, outcome), in input order.
    Outcomes(Vec<(JobRef, String)>),
    /// `jobs_reclaim()`'s count.
    Count(i32),
    /// A void function returned.
    Void,
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
        }
    }
}

/// One job as the model knows it.
#[derive(Clone, Debug)]
struct ModelJob {
    kind: Kind,
    priority: i16,
    max_attempts: i32,
    state: State,
    attempt: i32,
    /// The job's current lease token (a claim number), kept by cancel, reclaim, complete and a
    /// final failure, cleared by a requeuing fail, release and retry.
    lease: Option<usize>,
    /// Every claim of this job, oldest first.
    leases: Vec<usize>,
    /// The claim's lease was 1 ms: plain heartbeats keep it (nearly) expired.
    short_lease: bool,
    /// While running: `lease_until` has passed.
    expired: bool,
    /// While queued: `run_at` has come (everything not due is an hour or more away).
    due: bool,
    /// The order of `run_at` among the case's jobs.
    run_seq: u64,
    /// The `error` text of each entry of `errors`.
    errors: Vec<String>,
    release_reason: Option<String>,
    progress: Option<i64>,
    result: Option<i64>,
}

/// The reference model of one case: its jobs, the queue's pause flag and the dead letters.
#[derive(Clone, Debug, Default)]
struct Model {
    jobs: Vec<ModelJob>,
    paused: bool,
    /// Leases minted so far.
    claims: usize,
    /// A counter that orders `run_at` values.
    seq: u64,
    /// Dead-letter copies: (origin job, number of errors copied).
    dead_letters: Vec<(usize, usize)>,
}

/// How a heartbeat or settle call presenting (id, lease) is answered.
enum Held {
    /// The lease is the job's current one and the job is running or was reclaimed: it acts.
    Acts(usize),
    /// It changes nothing and answers this.
    Answers(&'static str),
}

impl Model {
    /// Resolves the command's picks against the jobs and leases that exist now.
    fn resolve(&self, cmd: &Cmd, step: usize) -> Call {
        let held: Vec<usize> = (0..self.jobs.len())
            .filter(|&i| {
                let j = &self.jobs[i];
                j.lease.is_some() && matches!(j.state, State::Running | State::Queued)
            })
            .collect();
        let job = |pick: JobPick| match pick {
            JobPick::Held(i) if !held.is_empty() => JobRef::Job(held[i % held.len()]),
            JobPick::Held(_) | JobPick::Job(_) if self.jobs.is_empty() => JobRef::Unknown,
            JobPick::Held(i) | JobPick::Job(i) => JobRef::Job(i % self.jobs.len()),
            JobPick::Unknown => JobRef::Unknown,
            JobPick::Null => JobRef::Null,
        };
        let lease = |job: JobRef, pick: LeasePick| {
            let leases: &[usize] = match job {
                JobRef::Job(i) => &self.jobs[i].leases,
                _ => &[],
            };
            match pick {
                LeasePick::Null => LeaseRef::Null,
                LeasePick::Foreign => LeaseRef::Foreign,
                _ if leases.is_empty() => LeaseRef::Foreign,
                LeasePick::Latest => LeaseRef::Claim(leases[leases.len() - 1]),
                LeasePick::Older(i) => LeaseRef::Claim(leases[i % leases.len()]),
            }
        };
        let step = step as i64;
        match cmd.clone() {
            Cmd::Enqueue { spec, fault } => Call::Enqueue { spec, fault },
            Cmd::EnqueueBatch {
                count,
                spec,
                null_element,
            } => Call::EnqueueBatch {
                count,
                spec,
                null_element,
            },
            Cmd::Claim {
                n,
                lease,
                kinds,
                unknown_queue,
            } => Call::Claim {
                n,
                lease,
                kinds,
                unknown_queue,
            },
            Cmd::Heartbeat {
                job: j,
                lease: l,
                extend,
            } => {
                let j = job(j);
                Call::Heartbeat {
                    job: j,
                    lease: lease(j, l),
                    extend,
                    progress: step,
                }
            }
            Cmd::Complete { job: j, lease: l } => {
                let j = job(j);
                Call::Complete {
                    job: j,
                    lease: lease(j, l),
                    result: step,
                }
            }
            Cmd::CompleteMany { pairs, extra_lease } => Call::CompleteMany {
                pairs: pairs
                    .into_iter()
                    .map(|(j, l)| {
                        let j = job(j);
                        (j, lease(j, l))
                    })
                    .collect(),
                extra_lease,
            },
            Cmd::Fail {
                job: j,
                lease: l,
                retry,
                retry_in,
                null_error,
            } => {
                let j = job(j);
                Call::Fail {
                    job: j,
                    lease: lease(j, l),
                    error: (!null_error).then(|| format!("failure at step {step}")),
                    retry,
                    retry_in,
                }
            }
            Cmd::Release {
                job: j,
                lease: l,
                retry_in,
            } => {
                let j = job(j);
                Call::Release {
                    job: j,
                    lease: lease(j, l),
                    reason: format!("released at step {step}"),
                    retry_in,
                }
            }
            Cmd::Cancel { job: j } => Call::Cancel { job: job(j) },
            Cmd::Retry { job: j, later } => Call::Retry { job: job(j), later },
            Cmd::Reclaim => Call::Reclaim,
            Cmd::Pause { unknown } => Call::Pause { unknown },
            Cmd::Resume { unknown } => Call::Resume { unknown },
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn add_jobs(&mut self, spec: JobSpec, count: usize) {
        let run_seq = self.next_seq();
        for _ in 0..count {
            self.jobs.push(ModelJob {
                kind: spec.kind,
                priority: spec.priority,
                max_attempts: spec.max_attempts.unwrap_or(QUEUE_MAX_ATTEMPTS),
                state: State::Queued,
                attempt: 0,
                lease: None,
                leases: Vec::new(),
                short_lease: false,
                expired: false,
                due: !spec.later,
                run_seq,
                errors: Vec::new(),
                release_reason: None,
                progress: None,
                result: None,
            });
        }
    }

    /// Rule 4 (fencing) and rule 5 ("done wins"): whether (job, lease) may act.
    fn held(&self, job: JobRef, lease: LeaseRef) -> Held {
        let (JobRef::Job(i), LeaseRef::Claim(claim)) = (job, lease) else {
            return Held::Answers("lost");
        };
        let j = &self.jobs[i];
        if j.lease != Some(claim) {
            return Held::Answers("lost");
        }
        match j.state {
            State::Running | State::Queued => Held::Acts(i),
            State::Cancelled => Held::Answers("cancelled"),
            State::Succeeded | State::Failed => Held::Answers("lost"),
        }
    }

    /// Ends job `i` failed and copies it into the dead-letter queue.
    fn end_failed(&mut self, i: usize) {
        let job = &mut self.jobs[i];
        job.state = State::Failed;
        self.dead_letters.push((i, job.errors.len()));
    }

    /// Applies a call and returns what the extension must answer.
    fn apply(&mut self, call: &Call) -> Answer {
        let error = |code: &str| Answer::Error(code.to_owned());
        match call {
            Call::Enqueue { spec, fault } => {
                if let Some(code) = fault.sqlstate() {
                    return error(code);
                }
                self.add_jobs(*spec, 1);
                Answer::Created(1)
            }
            Call::EnqueueBatch {
                count,
                spec,
                null_element,
            } => {
                if *null_element {
                    return error("22004");
                }
                self.add_jobs(*spec, *count);
                Answer::Created(*count)
            }
            Call::Claim {
                n,
                lease,
                kinds,
                unknown_queue,
            } => {
                if !(1..=1000).contains(n)
                    || matches!(lease, ClaimLease::Zero | ClaimLease::EightDays)
                    || matches!(kinds, Kinds::Empty | Kinds::OnlyNull)
                {
                    return error("22023");
                }
                if *unknown_queue {
                    return error("42704");
                }
                if self.paused {
                    return Answer::Claimed(Vec::new());
                }
                let wanted = |kind: Kind| match kinds {
                    Kinds::Only(k) => *k == kind,
                    _ => true,
                };
                let mut due: Vec<usize> = (0..self.jobs.len())
                    .filter(|&i| {
                        let j = &self.jobs[i];
                        j.state == State::Queued && j.due && wanted(j.kind)
                    })
                    .collect();
                // Rule 2: priority, then run_at, then id (ids grow with the job index).
                due.sort_by_key(|&i| (self.jobs[i].priority, self.jobs[i].run_seq, i));
                due.truncate(*n as usize);
                let short = *lease == ClaimLease::Short;
                let mut claimed = Vec::new();
                for i in due {
                    let claim = self.claims;
                    self.claims += 1;
                    let j = &mut self.jobs[i];
                    j.state = State::Running;
                    j.attempt += 1;
                    j.lease = Some(claim);
                    j.leases.push(claim);
                    j.short_lease = short;
                    j.expired = short;
                    claimed.push((i, j.attempt, j.kind, j.priority, j.max_attempts));
                }
                Answer::Claimed(claimed)
            }
            Call::Heartbeat {
                job,
                lease,
                extend,
                progress,
            } => {
                if *job == JobRef::Null || *lease == LeaseRef::Null {
                    return error("22004");
                }
                if matches!(extend, Extend::Zero | Extend::EightDays) {
                    return error("22023");
                }
                match self.held(*job, *lease) {
                    Held::Answers(answer) => Answer::Text(answer.into()),
                    Held::Acts(i) => {
                        let j = &mut self.jobs[i];
                        j.state = State::Running;
                        j.expired = match extend {
                            Extend::Default => j.short_lease,
                            Extend::Short => true,
                            _ => false,
                        };
                        j.progress = Some(*progress);
                        Answer::Text("running".into())
                    }
                }
            }
            Call::Complete { job, lease, result } => {
                if *job == JobRef::Null || *lease == LeaseRef::Null {
                    return error("22004");
                }
                match self.held(*job, *lease) {
                    Held::Answers(answer) => Answer::Text(answer.into()),
                    Held::Acts(i) => {
                        let j = &mut self.jobs[i];
                        j.state = State::Succeeded;
                        j.result = Some(*result);
                        Answer::Text("succeeded".into())
                    }
                }
            }
            Call::CompleteMany { pairs, extra_lease } => {
                if *extra_lease {
                    return error("22023");
                }
                if pairs
                    .iter()
                    .any(|(j, l)| *j == JobRef::Null || *l == LeaseRef::Null)
                {
                    return error("22004");
                }
                // Every pair is judged against the jobs as they were before the call.
                let outcomes: Vec<(JobRef, String, Option<usize>)> = pairs
                    .iter()
                    .map(|(job, lease)| match self.held(*job, *lease) {
                        Held::Acts(i) => (*job, "succeeded".to_owned(), Some(i)),
                        Held::Answers(answer) => (*job, answer.to_owned(), None),
                    })
                    .collect();
                for (_, _, acted) in &outcomes {
                    if let Some(i) = acted {
                        self.jobs[*i].state = State::Succeeded;
                    }
                }
                Answer::Outcomes(outcomes.into_iter().map(|(j, o, _)| (j, o)).collect())
            }
            Call::Fail {
                job,
                lease,
                error: message,
                retry,
                retry_in,
            } => {
                if *job == JobRef::Null
                    || *lease == LeaseRef::Null
                    || message.is_none()
                    || retry.is_none()
                {
                    return error("22004");
                }
                if *retry_in == Delay::Negative {
                    return error("22023");
                }
                match self.held(*job, *lease) {
                    Held::Answers(answer) => Answer::Text(answer.into()),
                    Held::Acts(i) => {
                        let seq = self.next_seq();
                        let j = &mut self.jobs[i];
                        j.errors.push(message.clone().unwrap_or_default());
                        if retry.unwrap_or(true) && j.attempt < j.max_attempts {
                            j.state = State::Queued;
                            j.lease = None;
                            j.due = *retry_in == Delay::Now;
                            j.run_seq = seq;
                            Answer::Text("queued".into())
                        } else {
                            self.end_failed(i);
                            Answer::Text("failed".into())
                        }
                    }
                }
            }
            Call::Release {
                job,
                lease,
                reason,
                retry_in,
            } => {
                if *job == JobRef::Null || *lease == LeaseRef::Null || *retry_in == Delay::Null {
                    return error("22004");
                }
                if *retry_in == Delay::Negative {
                    return error("22023");
                }
                match self.held(*job, *lease) {
                    Held::Answers(answer) => Answer::Text(answer.into()),
                    Held::Acts(i) => {
                        let seq = self.next_seq();
                        let j = &mut self.jobs[i];
                        j.state = State::Queued;
                        j.attempt -= 1;
                        j.lease = None;
                        j.due = *retry_in == Delay::Now;
                        j.run_seq = seq;
                        j.release_reason = Some(reason.clone());
                        Answer::Text("queued".into())
                    }
                }
            }
            Call::Cancel { job } => match job {
                JobRef::Null => error("22004"),
                JobRef::Unknown => error("P0002"),
                JobRef::Job(i) => {
                    let j = &mut self.jobs[*i];
                    if matches!(j.state, State::Queued | State::Running) {
                        j.state = State::Cancelled;
                    }
                    Answer::Text(j.state.as_str().into())
                }
            },
            Call::Retry { job, later } => {
                if *job == JobRef::Null || later.is_none() {
                    return error("22004");
                }
                let JobRef::Job(i) = job else {
                    return error("P0002");
                };
                if !matches!(self.jobs[*i].state, State::Failed | State::Cancelled) {
                    return error("55000");
                }
                let seq = self.next_seq();
                let j = &mut self.jobs[*i];
                j.state = State::Queued;
                j.attempt = 0;
                j.lease = None;
                j.due = *later == Some(false);
                j.run_seq = seq;
                j.result = None;
                Answer::Text("queued".into())
            }
            Call::Reclaim => {
                let mut count = 0;
                for i in 0..self.jobs.len() {
                    let j = &mut self.jobs[i];
                    if j.state != State::Running || !j.expired {
                        continue;
                    }
                    count += 1;
                    if j.attempt < j.max_attempts {
                        j.state = State::Queued;
                        j.errors.push("lease expired".into());
                    } else {
                        j.errors.push("lease expired on the final attempt".into());
                        self.end_failed(i);
                    }
                }
                Answer::Count(count)
            }
            Call::Pause { unknown } | Call::Resume { unknown } if *unknown => error("42704"),
            Call::Pause { .. } => {
                self.paused = true;
                Answer::Void
            }
            Call::Resume { .. } => {
                self.paused = false;
                Answer::Void
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The system under test
// ---------------------------------------------------------------------------------------------

/// One case's view of the real extension: its queues, and the real ids and lease tokens
/// behind the model's job indices and claim numbers.
struct Sut {
    queue: String,
    dead_letter: String,
    ids: Vec<i64>,
    leases: Vec<Uuid>,
    /// Every SQL call of the case with its answer, for the replay of a failing case.
    transcript: String,
    verbose: bool,
}

/// A parameter list for `postgres`.
type Params<'a> = Vec<&'a (dyn ToSql + Sync)>;

impl Sut {
    fn id(&self, job: JobRef) -> Option<i64> {
        match job {
            JobRef::Job(i) => Some(self.ids[i]),
            JobRef::Unknown => Some(UNKNOWN_ID),
            JobRef::Null => None,
        }
    }

    fn lease(&self, lease: LeaseRef) -> Option<Uuid> {
        match lease {
            LeaseRef::Claim(claim) => Some(self.leases[claim]),
            LeaseRef::Foreign => Some(FOREIGN_LEASE),
            LeaseRef::Null => None,
        }
    }

    fn job_of(&self, id: i64) -> Result<usize, String> {
        self.ids
            .iter()
            .position(|&known| known == id)
            .ok_or_else(|| format!("the call returned job {id}, which the case never created"))
    }

    fn log(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)], answer: &str) {
        let line = format!("{sql}  -- params {params:?} => {answer}");
        if self.verbose {
            eprintln!("{line}");
        }
        let _ = writeln!(self.transcript, "{line}");
    }

    /// Runs a query and returns its rows, or the SQLSTATE of its error.
    fn query(
        &mut self,
        client: &mut Client,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, String> {
        let result = client.query(sql, params);
        let (rows, answer) = match result {
            Ok(rows) => {
                let answer = format!("{} row(s)", rows.len());
                (Ok(rows), answer)
            }
            Err(e) => match e.as_db_error() {
                Some(db) => (
                    Err(db.code().code().to_owned()),
                    format!("ERROR {} {}", db.code().code(), db.message()),
                ),
                None => panic!("{sql}: the connection failed: {e}"),
            },
        };
        self.log(sql, params, &answer);
        rows
    }

    /// Runs a call that answers one text value.
    fn text(&mut self, client: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Answer {
        match self.query(client, sql, params) {
            Ok(rows) => Answer::Text(rows[0].get(0)),
            Err(code) => Answer::Error(code),
        }
    }

    /// Runs the call against the extension and returns its answer in the model's terms.
    fn execute(&mut self, client: &mut Client, call: &Call) -> Result<Answer, String> {
        let queue = self.queue.clone();
        Ok(match call {
            Call::Enqueue { spec, fault } => {
                let name: Option<String> = match fault {
                    EnqueueFault::UnknownQueue => Some(format!("{queue}-missing")),
                    EnqueueFault::BadQueueName => Some("no spaces allowed".into()),
                    EnqueueFault::NullQueue => None,
                    _ => Some(queue),
                };
                let payload = (*fault != EnqueueFault::NullPayload).then(|| json!({"n": 1}));
                let kind = if *fault == EnqueueFault::EmptyKind {
                    ""
                } else {
                    spec.kind.as_str()
                };
                let run_at: i32 = match (fault, spec.later) {
                    (EnqueueFault::NullRunAt, _) => 2,
                    (_, true) => 1,
                    (_, false) => 0,
                };
                let priority: i32 = if *fault == EnqueueFault::PriorityOutOfRange {
                    40_000
                } else {
                    spec.priority.into()
                };
                let max_attempts = if *fault == EnqueueFault::MaxAttemptsZero {
                    Some(0)
                } else {
                    spec.max_attempts
                };
                let headers = match fault {
                    EnqueueFault::HeadersNotObject => Some(json!([1, 2])),
                    _ => Some(json!({"traceparent": "00-abc-def-01"})),
                };
                let on_conflict = if *fault == EnqueueFault::BadOnConflict {
                    "overwrite"
                } else {
                    "skip"
                };
                let unique_key = (*fault == EnqueueFault::EmptyUniqueKey).then_some("");
                let sql = "SELECT jobs_enqueue($1::text, $2::jsonb, kind => $3::text,
                                run_at => CASE $4::int WHEN 0 THEN now()
                                                       WHEN 1 THEN now() + interval '1 hour' END,
                                priority => $5::int, max_attempts => $6::int, headers => $7::jsonb,
                                on_conflict => $8::text, unique_key => $9::text)";
                let params: Params = vec![
                    &name,
                    &payload,
                    &kind,
                    &run_at,
                    &priority,
                    &max_attempts,
                    &headers,
                    &on_conflict,
                    &unique_key,
                ];
                match self.query(client, sql, &params) {
                    Ok(rows) => {
                        self.ids.push(rows[0].get(0));
                        Answer::Created(1)
                    }
                    Err(code) => Answer::Error(code),
                }
            }
            Call::EnqueueBatch {
                count,
                spec,
                null_element,
            } => {
                let mut payloads: Vec<Option<Value>> =
                    (0..*count).map(|i| Some(json!({ "i": i }))).collect();
                if *null_element {
                    payloads.push(None);
                }
                let later = spec.later;
                let sql =
                    "SELECT id FROM jobs_enqueue_batch($1::text, $2::jsonb[], kind => $3::text,
                                run_at => CASE WHEN $4::bool THEN now() + interval '1 hour'
                                               ELSE now() END,
                                priority => $5::int, max_attempts => $6::int)";
                let priority = i32::from(spec.priority);
                let kind = spec.kind.as_str();
                let params: Params = vec![
                    &queue,
                    &payloads,
                    &kind,
                    &later,
                    &priority,
                    &spec.max_attempts,
                ];
                match self.query(client, sql, &params) {
                    Ok(rows) => {
                        self.ids.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
                        Answer::Created(rows.len())
                    }
                    Err(code) => Answer::Error(code),
                }
            }
            Call::Claim {
                n,
                lease,
                kinds,
                unknown_queue,
            } => {
                let name = if *unknown_queue {
                    format!("{queue}-missing")
                } else {
                    queue
                };
                let lease: Option<&str> = match lease {
                    ClaimLease::Queue => None,
                    ClaimLease::Short => Some("1 millisecond"),
                    ClaimLease::Hour => Some("1 hour"),
                    ClaimLease::Zero => Some("0"),
                    ClaimLease::EightDays => Some("8 days"),
                };
                let kinds: Option<Vec<Option<&str>>> = match kinds {
                    Kinds::Any => None,
                    Kinds::Only(k) => Some(vec![Some(k.as_str())]),
                    Kinds::Both => Some(vec![Some("a"), Some("b")]),
                    Kinds::Empty => Some(vec![]),
                    Kinds::OnlyNull => Some(vec![None]),
                };
                let sql = "SELECT id, attempt, lease, kind, priority, max_attempts
                             FROM jobs_claim($1::text, n => $2::int, lease => $3::text::interval,
                                             kinds => $4::text[])";
                let params: Params = vec![&name, n, &lease, &kinds];
                match self.query(client, sql, &params) {
                    Ok(rows) => {
                        let mut claimed = Vec::new();
                        for row in rows {
                            let job = self.job_of(row.get(0))?;
                            self.leases.push(row.get(2));
                            let kind = match row.get::<_, String>(3).as_str() {
                                "a" => Kind::A,
                                "b" => Kind::B,
                                other => return Err(format!("claimed a job of kind {other}")),
                            };
                            claimed.push((job, row.get(1), kind, row.get(4), row.get(5)));
                        }
                        // Let 1 ms leases run out before anything looks at them.
                        std::thread::sleep(Duration::from_millis(2));
                        Answer::Claimed(claimed)
                    }
                    Err(code) => Answer::Error(code),
                }
            }
            Call::Heartbeat {
                job,
                lease,
                extend,
                progress,
            } => {
                let extend: Option<&str> = match extend {
                    Extend::Default => None,
                    Extend::Short => Some("1 millisecond"),
                    Extend::Hour => Some("1 hour"),
                    Extend::Zero => Some("0"),
                    Extend::EightDays => Some("8 days"),
                };
                let (id, lease) = (self.id(*job), self.lease(*lease));
                let progress = json!({ "step": progress });
                let answer = self.text(
                    client,
                    "SELECT jobs_heartbeat($1::bigint, $2::uuid, extend => $3::text::interval,
                                           progress => $4::jsonb)",
                    &[&id, &lease, &extend, &progress],
                );
                std::thread::sleep(Duration::from_millis(2));
                answer
            }
            Call::Complete { job, lease, result } => {
                let (id, lease) = (self.id(*job), self.lease(*lease));
                let result = json!({ "step": result });
                self.text(
                    client,
                    "SELECT jobs_complete($1::bigint, $2::uuid, $3::jsonb)",
                    &[&id, &lease, &result],
                )
            }
            Call::CompleteMany { pairs, extra_lease } => {
                let ids: Vec<Option<i64>> = pairs.iter().map(|(j, _)| self.id(*j)).collect();
                let mut leases: Vec<Option<Uuid>> =
                    pairs.iter().map(|(_, l)| self.lease(*l)).collect();
                if *extra_lease {
                    leases.push(Some(FOREIGN_LEASE));
                }
                let sql = "SELECT id, outcome FROM jobs_complete_batch($1::bigint[], $2::uuid[])";
                match self.query(client, sql, &[&ids, &leases]) {
                    Ok(rows) => {
                        let mut outcomes = Vec::new();
                        for row in rows {
                            let id: i64 = row.get(0);
                            let job = if id == UNKNOWN_ID {
                                JobRef::Unknown
                            } else {
                                JobRef::Job(self.job_of(id)?)
                            };
                            outcomes.push((job, row.get(1)));
                        }
                        Answer::Outcomes(outcomes)
                    }
                    Err(code) => Answer::Error(code),
                }
            }
            Call::Fail {
                job,
                lease,
                error,
                retry,
                retry_in,
            } => {
                let (id, lease) = (self.id(*job), self.lease(*lease));
                let retry_in = retry_in.sql();
                self.text(
                    client,
                    "SELECT jobs_fail($1::bigint, $2::uuid, $3::text,
                                      retry_in => $4::text::interval, retry => $5::bool)",
                    &[&id, &lease, error, &retry_in, retry],
                )
            }
            Call::Release {
                job,
                lease,
                reason,
                retry_in,
            } => {
                let (id, lease) = (self.id(*job), self.lease(*lease));
                let retry_in = retry_in.sql();
                self.text(
                    client,
                    "SELECT jobs_release($1::bigint, $2::uuid, $3::text,
                                         retry_in => $4::text::interval)",
                    &[&id, &lease, reason, &retry_in],
                )
            }
            Call::Cancel { job } => {
                let id = self.id(*job);
                self.text(client, "SELECT jobs_cancel($1::bigint)", &[&id])
            }
            Call::Retry { job, later } => {
                let id = self.id(*job);
                self.text(
                    client,
                    "SELECT jobs_retry($1::bigint, run_at => CASE $2::bool
                                          WHEN false THEN now()
                                          WHEN true THEN now() + interval '1 hour' END)",
                    &[&id, later],
                )
            }
            Call::Reclaim => {
                std::thread::sleep(Duration::from_millis(2));
                match self.query(client, "SELECT jobs_reclaim()", &[]) {
                    Ok(rows) => Answer::Count(rows[0].get(0)),
                    Err(code) => Answer::Error(code),
                }
            }
            Call::Pause { unknown } | Call::Resume { unknown } => {
                let function = if matches!(call, Call::Pause { .. }) {
                    "jobs_pause"
                } else {
                    "jobs_resume"
                };
                let name = if *unknown {
                    format!("{queue}-missing")
                } else {
                    queue
                };
                let sql = format!("SELECT {function}($1::text)::text");
                match self.query(client, &sql, &[&name]) {
                    Ok(_) => Answer::Void,
                    Err(code) => Answer::Error(code),
                }
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Invariants: the database agrees with the model
// ---------------------------------------------------------------------------------------------

/// One job as the database shows it, in the model's terms.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    state: String,
    attempt: i32,
    max_attempts: i32,
    priority: i16,
    /// The claim that minted the job's lease token, `Err(token)` for one no claim of the case
    /// minted.
    lease: Option<Result<usize, Uuid>>,
    lease_until_set: bool,
    lease_expired: bool,
    due: bool,
    errors: usize,
    last_error: Option<String>,
    release_reason: Option<String>,
    progress: Option<i64>,
    result: Option<i64>,
}

impl ModelJob {
    /// What the database must show for this job.
    fn expected(&self) -> Observed {
        let running = self.state == State::Running;
        Observed {
            state: self.state.as_str().into(),
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            priority: self.priority,
            lease: self.lease.map(Ok),
            lease_until_set: running,
            lease_expired: running && self.expired,
            due: self.state == State::Queued && self.due,
            errors: self.errors.len(),
            last_error: self.errors.last().cloned(),
            release_reason: self.release_reason.clone(),
            progress: self.progress,
            result: self.result,
        }
    }
}

/// Compares every job of the case and the dead-letter queue with the model, and checks that
/// no job in the database is in an impossible state.
fn check_invariants(client: &mut Client, model: &Model, sut: &Sut) -> Result<(), String> {
    let rows = client
        .query(
            "SELECT id, state::text, attempt, max_attempts, priority, lease,
                    lease_until IS NOT NULL, coalesce(lease_until < clock_timestamp(), false),
                    state = 'queued' AND run_at <= clock_timestamp(),
                    jsonb_array_length(errors), errors -> -1 ->> 'error', release_reason,
                    (progress ->> 'step')::int8, (result ->> 'step')::int8
               FROM jobs.job WHERE queue = $1 ORDER BY id",
            &[&sut.queue],
        )
        .map_err(|e| format!("read the jobs: {e}"))?;
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    if ids != sut.ids {
        return Err(format!(
            "the queue holds jobs {ids:?}, the case created {:?}",
            sut.ids
        ));
    }
    let mut problems = Vec::new();
    for (i, (row, job)) in rows.iter().zip(&model.jobs).enumerate() {
        let lease: Option<Uuid> = row.get(5);
        let observed = Observed {
            state: row.get(1),
            attempt: row.get(2),
            max_attempts: row.get(3),
            priority: row.get(4),
            lease: lease.map(|token| {
                sut.leases
                    .iter()
                    .position(|&minted| minted == token)
                    .ok_or(token)
            }),
            lease_until_set: row.get(6),
            lease_expired: row.get(7),
            due: row.get(8),
            errors: row.get::<_, i32>(9) as usize,
            last_error: row.get(10),
            release_reason: row.get(11),
            progress: row.get(12),
            result: row.get(13),
        };
        let expected = job.expected();
        if observed != expected {
            problems.push(format!(
                "job #{i} (id {}):\n  database {observed:?}\n  model    {expected:?}",
                ids[i]
            ));
        }
    }

    let copies = client
        .query(
            "SELECT (origin ->> 'id')::int8, state::text, attempt,
                    jsonb_array_length(origin -> 'errors'), origin ->> 'queue'
               FROM jobs.job WHERE queue = $1 ORDER BY (origin ->> 'id')::int8, id",
            &[&sut.dead_letter],
        )
        .map_err(|e| format!("read the dead letters: {e}"))?;
    let observed: Vec<(i64, String, i32, i32, String)> = copies
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    let mut expected: Vec<(i64, String, i32, i32, String)> = model
        .dead_letters
        .iter()
        .map(|&(origin, errors)| {
            (
                sut.ids[origin],
                "queued".to_owned(),
                0,
                errors as i32,
                sut.queue.clone(),
            )
        })
        .collect();
    expected.sort();
    if observed != expected {
        problems.push(format!(
            "dead letters (origin id, state, attempt, errors, origin queue):\n  database {observed:?}\n  model    {expected:?}"
        ));
    }

    let broken = pg_jobs_tests::impossible_states(client)
        .map_err(|e| format!("check for impossible states: {e}"))?;
    problems.extend(broken.into_iter().map(|b| format!("impossible state: {b}")));

    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

// ---------------------------------------------------------------------------------------------
// Running cases
// ---------------------------------------------------------------------------------------------

/// The cluster: pg_jobs preloaded (commit-driven wake-ups work) but serving no database, so no
/// background worker reclaims leases behind the test's back.
fn cluster() -> Cluster {
    let settings = settings_with(&["pg_jobs.databases = ''"]);
    let cluster = Cluster::start_with_extension("state-machine", &settings);
    let mut client = cluster.connect();
    // The row for this database says why nothing serves it; no row has a worker.
    let workers: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs_worker_status() WHERE pid IS NOT NULL",
        &[],
    );
    assert_eq!(workers, 0, "no background worker may run on this cluster");
    cluster
}

/// Drops every queue but `default` and its jobs, then creates the case's queues.
fn fresh_queues(client: &mut Client) -> (String, String) {
    static CASE: AtomicU32 = AtomicU32::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    client
        .batch_execute(
            "SELECT jobs_create_queue(name, dead_letter => '') FROM jobs.queue;
             SELECT jobs_drop_queue(name, force => true) FROM jobs.queue WHERE name <> 'default';",
        )
        .expect("drop the previous case's queues");
    let queue = format!("sm{case}");
    let dead_letter = format!("sm{case}-dead");
    client
        .execute("SELECT jobs_create_queue($1::text)", &[&dead_letter])
        .expect("create the dead-letter queue");
    client
        .execute(
            "SELECT jobs_create_queue($1::text, lease => '1 hour', max_attempts => $3::int,
                                     backoff_base => '1 hour', backoff_max => '2 hours',
                                     dead_letter => $2::text)",
            &[&queue, &dead_letter, &QUEUE_MAX_ATTEMPTS],
        )
        .expect("create the case's queue");
    (queue, dead_letter)
}

/// Runs one sequence against a fresh queue and the model, checking after every step.
fn run_case(
    client: &mut Client,
    cmds: &[Cmd],
    verbose: bool,
    coverage: &mut Coverage,
) -> Result<(), String> {
    let (queue, dead_letter) = fresh_queues(client);
    let mut model = Model::default();
    let mut sut = Sut {
        queue,
        dead_letter,
        ids: Vec::new(),
        leases: Vec::new(),
        transcript: String::new(),
        verbose,
    };
    for (step, cmd) in cmds.iter().enumerate() {
        let call = model.resolve(cmd, step);
        let expected = model.apply(&call);
        let actual = sut
            .execute(client, &call)
            .map_err(|e| format!("step {step} {call:?}: {e}\n{}", sut.transcript))?;
        if actual != expected {
            return Err(format!(
                "step {step} {call:?}:\n  extension answered {actual:?}\n  model answers      {expected:?}\nSQL so far:\n{}",
                sut.transcript
            ));
        }
        coverage.note(&call, &actual);
        check_invariants(client, &model, &sut).map_err(|e| {
            format!(
                "after step {step} {call:?}:\n{e}\nSQL so far:\n{}",
                sut.transcript
            )
        })?;
    }
    Ok(())
}

/// How often each kind of call got each kind of answer, printed after the run so that a reader
/// can see the sequences reached the interesting transitions (and not only errors).
#[derive(Default)]
struct Coverage {
    steps: u64,
    answers: std::collections::BTreeMap<String, u64>,
}

impl Coverage {
    fn note(&mut self, call: &Call, answer: &Answer) {
        let name = format!("{call:?}");
        let name = name
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or_default();
        let answer = match answer {
            Answer::Error(code) => format!("error {code}"),
            Answer::Text(text) => text.clone(),
            Answer::Created(n) => format!("{} job(s)", n.min(&2)),
            Answer::Claimed(jobs) => format!("{} job(s)", jobs.len().min(2)),
            Answer::Outcomes(rows) => format!("{} row(s)", rows.len().min(2)),
            Answer::Count(n) => format!("{} reclaimed", n.min(&2)),
            Answer::Void => "void".into(),
        };
        self.steps += 1;
        *self
            .answers
            .entry(format!("{name} -> {answer}"))
            .or_default() += 1;
    }

    fn print(&self) {
        eprintln!(
            "{} steps; answers (counts of 2 mean 2 or more):",
            self.steps
        );
        for (answer, count) in &self.answers {
            eprintln!("  {answer:<32} {count:>6}");
        }
    }
}

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_call_sequences_agree_with_the_reference_model() {
    let cluster = cluster();
    let client = std::cell::RefCell::new(cluster.connect());
    let cases = env_number("PROPTEST_CASES", 100);
    let steps = env_number("PG_JOBS_SM_STEPS", 40) as usize;
    eprintln!("state machine: {cases} cases of up to {steps} steps");
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = prop::collection::vec(cmd(), 1..=steps);
    let coverage = std::cell::RefCell::new(Coverage::default());
    let result = runner.run(&strategy, |cmds| {
        run_case(
            &mut client.borrow_mut(),
            &cmds,
            false,
            &mut coverage.borrow_mut(),
        )
        .map_err(TestCaseError::fail)
    });
    coverage.borrow().print();
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, minimal)) => {
            eprintln!("minimal failing sequence ({} steps):", minimal.len());
            for (step, cmd) in minimal.iter().enumerate() {
                eprintln!("  {step:>2}: {cmd:?}");
            }
            eprintln!("replaying it with every SQL call:");
            let replay = run_case(
                &mut client.borrow_mut(),
                &minimal,
                true,
                &mut Coverage::default(),
            );
            let replayed = match replay {
                Err(_) => "the replay above fails too",
                Ok(()) => "the replay above passed (a timing-dependent failure?)",
            };
            panic!(
                "the extension disagrees with the model ({replayed}).\nminimal sequence: {minimal:#?}\n{reason}"
            );
        }
        Err(TestError::Abort(reason)) => panic!("proptest aborted: {reason}"),
    }
}

/// The model itself follows the documented rules on a hand-written sequence, so that a model
/// bug cannot hide behind an extension bug of the same shape.
#[test]
fn the_model_follows_the_rules_by_hand() {
    let mut model = Model::default();
    let spec = JobSpec {
        kind: Kind::A,
        later: false,
        priority: 0,
        max_attempts: Some(2),
    };
    let mut run = |cmd: Cmd| {
        let call = model.resolve(&cmd, 0);
        model.apply(&call)
    };
    assert_eq!(
        run(Cmd::Enqueue {
            spec,
            fault: EnqueueFault::None
        }),
        Answer::Created(1)
    );
    let claim = |lease| Cmd::Claim {
        n: 1,
        lease,
        kinds: Kinds::Any,
        unknown_queue: false,
    };
    assert_eq!(
        run(claim(ClaimLease::Short)),
        Answer::Claimed(vec![(0, 1, Kind::A, 0, 2)])
    );
    // The lease ran out: the reclaim takes the job back, its holder can still finish it...
    assert_eq!(run(Cmd::Reclaim), Answer::Count(1));
    assert_eq!(
        run(Cmd::Heartbeat {
            job: JobPick::Job(0),
            lease: LeasePick::Latest,
            extend: Extend::Hour
        }),
        Answer::Text("running".into())
    );
    // ... but after a second reclaim and a newer claim, the old lease is lost.
    assert_eq!(
        run(Cmd::Heartbeat {
            job: JobPick::Job(0),
            lease: LeasePick::Latest,
            extend: Extend::Short
        }),
        Answer::Text("running".into())
    );
    assert_eq!(run(Cmd::Reclaim), Answer::Count(1));
    assert_eq!(
        run(claim(ClaimLease::Queue)),
        Answer::Claimed(vec![(0, 2, Kind::A, 0, 2)])
    );
    assert_eq!(
        run(Cmd::Complete {
            job: JobPick::Job(0),
            lease: LeasePick::Older(0)
        }),
        Answer::Text("lost".into())
    );
    // The second attempt is the last: a retried failure ends the job failed, dead-lettered.
    assert_eq!(
        run(Cmd::Fail {
            job: JobPick::Job(0),
            lease: LeasePick::Latest,
            retry: Some(true),
            retry_in: Delay::Now,
            null_error: false
        }),
        Answer::Text("failed".into())
    );
    assert_eq!(model.dead_letters, vec![(0, 3)]);
    assert_eq!(
        model.jobs[0].errors,
        vec!["lease expired", "lease expired", "failure at step 0"]
    );
}
