//! The history's record (operations and their outcomes) and the checker that judges it; see
//! the documentation of `history.rs` for what it checks and why each check is sound.

use std::collections::{BTreeMap, HashMap, HashSet};

use uuid::Uuid;

/// A time on the server's clock: microseconds since the Unix epoch.
pub type Micros = i64;

/// The processes of the workload: workers first, then producers, the admin, the fault injector.
pub const WORKERS: usize = 8;

// ---------------------------------------------------------------------------------------------
// The history: operations and their outcomes
// ---------------------------------------------------------------------------------------------

/// An API call (or a fault) as the history records it.
#[derive(Clone, Debug)]
pub enum Call {
    /// One `jobs_enqueue` (one tag) or `jobs_enqueue_batch` (several), every job with
    /// `max_attempts`; `unique` holds each tag's unique key (if any), all of them kept for
    /// `unique_for` after success (`None`: not kept).
    Enqueue {
        tags: Vec<u64>,
        max_attempts: i32,
        unique: Vec<Option<String>>,
        unique_for: Option<Micros>,
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
    /// `jobs_complete_batch(ids, leases)`.
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
    /// `pg_terminate_backend(pid)` of a process's backend.
    Terminate {
        process: usize,
        pid: i32,
    },
    /// `pg_ctl stop -m immediate`, then a start (crash recovery). Complete once the server
    /// accepts connections again: every backend of before is gone by then.
    Crash,
    /// A kill of the background worker: SIGKILL (the postmaster then restarts every process,
    /// as after any crash of a child; complete once the server accepts connections again) or
    /// SIGTERM (the worker alone exits and is started again).
    KillWorker {
        sigkill: bool,
    },
    /// `pg_ctl restart -m fast`: a clean shutdown (every session ended, a shutdown checkpoint)
    /// and a start. Complete once the server accepts connections again.
    Restart,
    /// `BEGIN`, then `call` (between two readings of the server's clock), then `PREPARE
    /// TRANSACTION gid`, in one simple query. The op's outcome is the call's: `Ok` means
    /// prepared, with the call's reply. What the call did is decided by the gid's later
    /// [`Call::Finish`]: committed, it took effect between the call and the finish; rolled
    /// back, it did nothing.
    Prepared {
        gid: String,
        call: Box<Call>,
    },
    /// `COMMIT PREPARED gid` (`commit`) or `ROLLBACK PREPARED gid`, from any session, answered
    /// between two readings of the server's clock. The workload decides each gid's ending once
    /// and never tries the other.
    Finish {
        gid: String,
        commit: bool,
    },
    /// Whether `gid` is in `pg_prepared_xacts`, read once the backend of a call with an unknown
    /// outcome on it (its prepare, or its finish) had ended: the answer settles that outcome.
    Inspect {
        gid: String,
    },
    /// A waiting `jobs_claim(n, lease)` sent on a raw connection whose socket was then closed
    /// without a word, as a killed client's is (its outcome is unknown by nature), and what
    /// was seen of its backend afterwards.
    VanishedClaim {
        n: i32,
        lease_ms: i64,
        vanish: Vanish,
    },
}

/// What the history saw of a claim whose client vanished while it waited.
#[derive(Clone, Debug)]
pub struct Vanish {
    /// The `worker` name the claim passed; no other claim uses it.
    pub worker: String,
    /// The claim's backend.
    pub pid: i32,
    /// When (server time) the backend was seen asleep in the claim; `None`: it was not seen
    /// asleep before the socket closed (the server went away, say).
    pub asleep_at: Option<Micros>,
    /// A server time read after the socket had closed: the client was gone by then, so the
    /// claim may have taken a job only before it.
    pub gone_by: Micros,
    /// A server time by which the backend had ended (`None`: it was still there when the
    /// history stopped watching).
    pub ended_by: Option<Micros>,
    /// The jobs whose row named the claim's worker once its backend had ended (with a lease
    /// long enough that nobody took them meanwhile): what it claimed and committed.
    pub took: Vec<Took>,
}

/// A job a vanished client's claim took, as its row told.
#[derive(Clone, Debug)]
pub struct Took {
    pub id: i64,
    pub attempt: i32,
    /// The row's `started_at`: the server time the claim took it.
    pub started_at: Micros,
}

impl Call {
    pub fn name(&self) -> &'static str {
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
            Call::Crash => "server crash",
            Call::KillWorker { sigkill: true } => "worker SIGKILL",
            Call::KillWorker { sigkill: false } => "worker SIGTERM",
            Call::Restart => "server restart",
            Call::Prepared { call, .. } => match call.name() {
                "enqueue" => "prepared enqueue",
                "enqueue_batch" => "prepared enqueue_batch",
                "claim" => "prepared claim",
                "heartbeat" => "prepared heartbeat",
                "complete" => "prepared complete",
                "complete_many" => "prepared complete_many",
                "fail" => "prepared fail",
                "fail_final" => "prepared fail_final",
                "release" => "prepared release",
                "cancel" => "prepared cancel",
                _ => "prepared other",
            },
            Call::Finish { commit: true, .. } => "commit prepared",
            Call::Finish { commit: false, .. } => "rollback prepared",
            Call::Inspect { .. } => "inspect prepared",
            Call::VanishedClaim { .. } => "vanished claim",
        }
    }

    /// Whether it is a fault the injector caused rather than a call on a connection.
    fn is_fault(&self) -> bool {
        matches!(self, Call::Crash | Call::KillWorker { .. } | Call::Restart)
    }

    /// Whether it ends every backend of the server (a crash, or a restart).
    fn ends_every_backend(&self) -> bool {
        matches!(
            self,
            Call::Crash | Call::KillWorker { sigkill: true } | Call::Restart
        )
    }
}

/// A job a claim handed out.
#[derive(Clone, Debug)]
pub struct Delivered {
    pub id: i64,
    pub lease: Uuid,
    pub attempt: i32,
    /// The `lease_until` the claim reported (checked against the lease asked for, never
    /// trusted for lease intervals).
    pub lease_until: Micros,
    /// The tag in the job's payload.
    pub tag: u64,
    /// The server's clock after the claim (the job was ours from some time before this).
    pub taken_at: Micros,
}

/// What a call that completed returned.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Enqueue: the ids, in payload order, between two readings of the server's clock, the
    /// second after the enqueue committed (or, prepared, before its `COMMIT PREPARED`).
    Ids {
        ids: Vec<i64>,
        before: Micros,
        after: Micros,
    },
    /// A claim's jobs, between two readings of the server's clock.
    Claimed {
        jobs: Vec<Delivered>,
        before: Micros,
        after: Micros,
    },
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
    /// Whether a gid was in `pg_prepared_xacts` at server time `at`.
    Present { present: bool, at: Micros },
    /// A fault that was carried out.
    Done,
}

/// How a call ended.
#[derive(Clone, Debug)]
pub enum OpResult {
    Ok(Reply),
    /// A definite error: the call's implicit transaction rolled back.
    Failed(String),
    /// The connection died mid-call: it may or may not have committed.
    Unknown(String),
    /// An unknown outcome that the checker found could not have run: the call was sent on a
    /// connection whose backend a termination or a crash had already ended.
    NotRun(String),
}

/// One operation of the history.
#[derive(Clone, Debug)]
pub struct Op {
    /// Its place in invocation order, unique in the history.
    pub index: usize,
    /// The thread that ran it.
    pub process: usize,
    /// Client monotonic time of invocation and completion, in microseconds since the start
    /// (one clock for every thread).
    pub invoke: u64,
    pub complete: u64,
    pub call: Call,
    pub result: OpResult,
    /// The latest server time the process had seen when it invoked the call: a server-side
    /// lower bound for when the call ran.
    pub server_floor: Option<Micros>,
    /// For an unknown outcome: the server time the process read on its next connection, an
    /// upper bound for when the call can have taken effect (its backend had ended by then).
    pub server_ceiling: Option<Micros>,
    /// The backend pid of the connection the call was sent on (0: none).
    pub backend: i32,
    /// When (client clock) that connection was made.
    pub connected_at: u64,
}

// ---------------------------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------------------------

/// One entry of a job's `errors`.
#[derive(Clone, Debug)]
pub struct ErrorEntry {
    pub attempt: i32,
    pub error: String,
    /// Its `at`, on the server's clock.
    pub at: Micros,
}

impl ErrorEntry {
    fn is_reclaim(&self) -> bool {
        self.error.starts_with("lease expired")
    }
}

/// A job as the database holds it at the end.
#[derive(Clone, Debug)]
pub struct FinalJob {
    pub id: i64,
    /// The tag in its payload (`None`: no tag).
    pub tag: Option<u64>,
    pub state: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub errors: Vec<ErrorEntry>,
    /// `result ->> 'op'`: the complete call that stored it.
    pub result_op: Option<usize>,
    pub release_reason: Option<String>,
    /// The lease column (a cancel keeps the lease it cancelled under).
    pub lease: Option<Uuid>,
    /// Its group, if any.
    pub group: Option<String>,
    /// Its unique key, whether the row holds it (`unique_hold`), and for how long it keeps
    /// it after success (`unique_for`, µs).
    pub unique_key: Option<String>,
    pub unique_hold: bool,
    pub unique_for: Option<Micros>,
    /// When it finished, on the server's clock.
    pub finished_at: Option<Micros>,
}

/// What the history read at the end besides the jobs' rows: probes of the rules that a stuck
/// cache would break while the rows look fine.
#[derive(Clone, Debug, Default)]
pub struct End {
    /// The server time the final rows were read at (`None`: unknown, skip the checks that
    /// need it).
    pub now: Option<Micros>,
    /// Gids still in `pg_prepared_xacts` once the drain was over.
    pub prepared_left: Vec<String>,
    /// For each group of the workload: whether a job enqueued into it after the drain (when
    /// nothing of it was left open) was claimed right away.
    pub group_probes: Vec<(String, bool)>,
    /// For each unique key of the workload: an enqueue with that key (then rolled back).
    pub key_probes: Vec<KeyProbe>,
}

/// An enqueue with a unique key after the drain, rolled back once answered.
#[derive(Clone, Debug)]
pub struct KeyProbe {
    pub key: String,
    /// The server's clock before and after it.
    pub before: Micros,
    pub after: Micros,
    /// The id of the job it found holding the key (`None`: it inserted its own).
    pub holder: Option<i64>,
}

/// The checker's verdict.
#[derive(Debug, Default)]
pub struct Report {
    /// Acknowledged enqueues that are missing or never reached a final state.
    pub lost: Vec<String>,
    /// Jobs held by two live leases at once, stale leases acting, double settles, deliveries
    /// after the end.
    pub duplicated: Vec<String>,
    /// Deliveries or rows of jobs never (successfully) enqueued.
    pub unexpected: Vec<String>,
    /// Tags whose enqueue outcome was unknown but that showed up.
    pub recovered: usize,
    /// Final rows that disagree with the history.
    pub state_errors: Vec<String>,
    /// Answers that did nothing (`lost`, `cancelled`) without a reason in the history, and
    /// answers a call never gives.
    pub answers: Vec<String>,
    /// Definite errors from calls that must not fail, and calls answered on a dead backend.
    pub call_errors: Vec<String>,
    /// Groups that ran more jobs at once than their concurrency, or (at concurrency 1) a job
    /// before an earlier one of its group.
    pub groups: Vec<String>,
    /// Grouped jobs, and the groups they were in.
    pub grouped: (usize, usize),
    /// Enqueued tags: acknowledged, failed, unknown.
    pub enqueues: (usize, usize, usize),
    /// Jobs delivered at least once.
    pub delivered: usize,
    pub final_states: BTreeMap<String, usize>,
    /// Operations by kind: answers (outcome, or "ok"), definite errors, unknown outcomes,
    /// calls that never ran.
    pub ops: BTreeMap<String, BTreeMap<String, usize>>,
    /// What a few calls with unknown outcomes saw, and why a few others never ran.
    pub unknown_examples: Vec<String>,
    pub not_run_examples: Vec<String>,
    /// Reclaims the final rows record: `lease expired` entries, and jobs failed by a reclaim.
    pub reclaimed: usize,
    pub failed_by_reclaim: usize,
    /// Settle calls surely made after their lease ran out: that took effect ("done wins"),
    /// and that answered `lost`.
    pub late_acted: usize,
    pub late_lost: usize,
    /// Answers of `lost` and `cancelled` that the checker judged.
    pub judged: usize,
    /// Unknown settles that the final rows or a later call resolved, and those left open
    /// (these end their lease's live time early, where overlaps go unchecked).
    pub resolved_unknowns: usize,
    pub open_unknowns: usize,
    /// Job attempts that only claims with unknown outcomes can explain.
    pub phantom_attempts: usize,
    /// Prepared transactions the history cannot square: finished twice, never finished, left
    /// prepared at the end, seen prepared after their end.
    pub prepared: Vec<String>,
    pub prepared_counts: PreparedCounts,
    /// Attempts spent by a client that was gone: a vanished client's claim that took a job
    /// after its socket had closed, or whose backend outlived the watch.
    pub gone: Vec<String>,
    /// Claims whose client vanished; of them, seen asleep in their wait before, and seen to
    /// end after; jobs they took (before their client was gone).
    pub vanished: (usize, usize, usize, usize),
    /// Unique keys held against the rules: two holders at once, a duplicate answered by a job
    /// that no longer held the key, rows holding a key they should not (or not one they
    /// should), a probe after the drain that disagrees with the rows.
    pub unique: Vec<String>,
    /// Tags enqueued with a unique key; of them, deduplicated (answered another job's id).
    pub unique_counts: (usize, usize),
    /// Groups and keys stuck after the drain: a group whose new job no claim took.
    pub stuck: Vec<String>,
    /// For the first jobs an anomaly names: every op that touched each, as recorded (prepared
    /// calls, their ends and inspections included), and its final row.
    pub excerpts: Vec<String>,
}

/// How the prepared transactions of a history ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct PreparedCounts {
    /// Surely prepared.
    pub prepared: usize,
    pub committed: usize,
    pub rolled_back: usize,
    /// Calls whose transaction never got prepared (the connection died first).
    pub never: usize,
    /// Prepared before a crash or restart and ended after it.
    pub across_restarts: usize,
    /// Ends whose outcome was unknown and that `pg_prepared_xacts` settled.
    pub settled_by_inspection: usize,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.unexpected.is_empty()
            && self.state_errors.is_empty()
            && self.answers.is_empty()
            && self.call_errors.is_empty()
            && self.groups.is_empty()
            && self.prepared.is_empty()
            && self.gone.is_empty()
            && self.unique.is_empty()
            && self.stuck.is_empty()
    }

    /// How many `kind` operations answered `outcome` ("ok" for replies without one).
    pub fn answered(&self, kind: &str, outcome: &str) -> usize {
        self.ops
            .get(kind)
            .and_then(|o| o.get(outcome))
            .copied()
            .unwrap_or(0)
    }

    pub fn print(&self) {
        let (acked, failed, unknown) = self.enqueues;
        eprintln!("history checker:");
        eprintln!("  enqueued: {acked} acknowledged, {failed} failed, {unknown} unknown");
        eprintln!("  delivered at least once: {}", self.delivered);
        eprintln!(
            "  reclaims recorded: {} ({} on the final attempt); settles after the lease ran out: {} took effect, {} lost",
            self.reclaimed, self.failed_by_reclaim, self.late_acted, self.late_lost
        );
        eprintln!(
            "  answers that did nothing, judged: {}; unknown settles resolved {}, left open {}; attempts only unknown claims explain: {}",
            self.judged, self.resolved_unknowns, self.open_unknowns, self.phantom_attempts
        );
        eprintln!("  lost:        {}", self.lost.len());
        eprintln!("  duplicated:  {}", self.duplicated.len());
        eprintln!("  unexpected:  {}", self.unexpected.len());
        eprintln!("  recovered:   {}", self.recovered);
        eprintln!("  final state mismatches: {}", self.state_errors.len());
        eprintln!("  unexplained answers: {}", self.answers.len());
        eprintln!("  calls with definite errors: {}", self.call_errors.len());
        eprintln!(
            "  groups: {} grouped jobs in {} groups, {} violations of their concurrency or order",
            self.grouped.0,
            self.grouped.1,
            self.groups.len()
        );
        let p = self.prepared_counts;
        eprintln!(
            "  prepared transactions: {} prepared ({} committed, {} rolled back, {} across a crash or restart, {} ends settled by pg_prepared_xacts), {} never prepared; {} anomalies",
            p.prepared,
            p.committed,
            p.rolled_back,
            p.across_restarts,
            p.settled_by_inspection,
            p.never,
            self.prepared.len()
        );
        let (vanished, asleep, ended, took) = self.vanished;
        eprintln!(
            "  vanished clients: {vanished} waiting claims ({asleep} seen asleep before their socket closed), {ended} backends seen to end, {took} jobs taken before the client was gone; attempts spent by a gone client: {}",
            self.gone.len()
        );
        eprintln!(
            "  unique keys: {} tags with a key, {} deduplicated; {} violations",
            self.unique_counts.0,
            self.unique_counts.1,
            self.unique.len()
        );
        eprintln!("  stuck after the drain: {}", self.stuck.len());
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
            eprintln!("    {kind:<18} {total:>8}  ({})", detail.join(", "));
        }
        for (name, list) in [
            ("unknown outcomes, for example", &self.unknown_examples),
            ("calls that never ran, for example", &self.not_run_examples),
            ("lost", &self.lost),
            ("duplicated", &self.duplicated),
            ("unexpected", &self.unexpected),
            ("final state mismatches", &self.state_errors),
            ("unexplained answers", &self.answers),
            ("calls with definite errors", &self.call_errors),
            ("group violations", &self.groups),
            ("prepared transactions", &self.prepared),
            ("attempts spent by a gone client", &self.gone),
            ("unique keys", &self.unique),
            ("stuck after the drain", &self.stuck),
        ] {
            if !list.is_empty() {
                eprintln!("  {name}:");
                for line in list.iter().take(20) {
                    eprintln!("    {line}");
                }
            }
        }
        if !self.excerpts.is_empty() {
            eprintln!("  the history of the jobs named above (the first few):");
            for line in &self.excerpts {
                eprintln!("    {line}");
            }
        }
    }

    /// Every anomaly, of every category.
    fn anomalies(&self) -> impl Iterator<Item = &String> {
        [
            &self.lost,
            &self.duplicated,
            &self.unexpected,
            &self.state_errors,
            &self.answers,
            &self.call_errors,
            &self.groups,
            &self.prepared,
            &self.gone,
            &self.unique,
            &self.stuck,
        ]
        .into_iter()
        .flatten()
    }
}

/// The job ids an anomaly names ("job 12", "jobs [10, 11]", "before job 10").
fn named_jobs(line: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    for (i, _) in line.match_indices("job") {
        let rest = line[i + 3..].trim_start_matches('s').trim_start();
        let rest = rest.trim_start_matches('[');
        for part in rest.split(", ") {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            match digits.parse() {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
            if digits.len() < part.len() {
                break;
            }
        }
    }
    ids
}

/// Whether `op` touched job `id` (whose tag is `tag`): enqueued it, delivered it, presented
/// a lease of it, cancelled it, or is a prepared call that did.
fn touches(op: &Call, result: &OpResult, id: i64, tag: Option<u64>) -> bool {
    match op {
        Call::Enqueue { tags, .. } => tag.is_some_and(|t| tags.contains(&t)),
        Call::Claim { .. } => match result {
            OpResult::Ok(Reply::Claimed { jobs, .. }) => jobs.iter().any(|j| j.id == id),
            _ => false,
        },
        Call::Heartbeat { id: of, .. }
        | Call::Complete { id: of, .. }
        | Call::Fail { id: of, .. }
        | Call::Release { id: of, .. }
        | Call::Cancel { id: of } => *of == id,
        Call::CompleteMany { pairs } => pairs.iter().any(|(of, _)| *of == id),
        Call::Prepared { call, .. } => touches(call, result, id, tag),
        Call::VanishedClaim { vanish, .. } => vanish.took.iter().any(|t| t.id == id),
        _ => false,
    }
}

/// Every op of `ops` that touched one of the first jobs the report's anomalies name, with
/// the ends and inspections of its prepared transactions, and each job's final row.
fn excerpts(ops: &[Op], finals: &[FinalJob], report: &Report) -> Vec<String> {
    let mut ids: Vec<i64> = Vec::new();
    for line in report.anomalies() {
        for id in named_jobs(line) {
            if !ids.contains(&id) && ids.len() < 6 {
                ids.push(id);
            }
        }
    }
    let mut lines = Vec::new();
    for id in ids {
        let job = finals.iter().find(|j| j.id == id);
        let tag = job.and_then(|j| j.tag);
        lines.push(format!("job {id}, finally: {job:?}"));
        let mine: Vec<&Op> = ops
            .iter()
            .filter(|op| touches(&op.call, &op.result, id, tag))
            .collect();
        let gids: HashSet<&str> = mine
            .iter()
            .filter_map(|op| match &op.call {
                Call::Prepared { gid, .. } => Some(gid.as_str()),
                _ => None,
            })
            .collect();
        for op in ops.iter().filter(|op| {
            touches(&op.call, &op.result, id, tag)
                || matches!(&op.call, Call::Finish { gid, .. } | Call::Inspect { gid } if gids.contains(gid.as_str()))
                || op.call.is_fault()
        }) {
            let result = match &op.result {
                // A claim's reply, but only this job of it.
                OpResult::Ok(Reply::Claimed {
                    jobs,
                    before,
                    after,
                }) => format!(
                    "claimed {:?} of {} job(s) between {before} and {after}",
                    jobs.iter().find(|j| j.id == id),
                    jobs.len()
                ),
                other => format!("{other:?}"),
            };
            let call = match &op.call {
                Call::Enqueue { tags, unique, .. } if tags.len() > 1 => {
                    let i = tags.iter().position(|t| Some(*t) == tag);
                    format!(
                        "Enqueue of {} tags (this one at {i:?}, key {:?})",
                        tags.len(),
                        i.and_then(|i| unique.get(i))
                    )
                }
                other => format!("{other:?}"),
            };
            lines.push(format!(
                "  op {} by process {} (client {}..{} µs, backend {}, server floor {:?}, ceiling {:?}): {call} → {result}",
                op.index,
                op.process,
                op.invoke,
                op.complete,
                op.backend,
                op.server_floor,
                op.server_ceiling
            ));
        }
    }
    lines
}

/// How an enqueue of a tag ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enqueued {
    Acked(i64),
    /// Answered the id of another job that held its unique key: nothing was inserted.
    Deduplicated(i64),
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

    /// The answers the call can give.
    fn answers(self) -> &'static [&'static str] {
        match self {
            HolderCall::Heartbeat => &["running", "cancelled", "lost"],
            HolderCall::Complete { .. } => &["succeeded", "cancelled", "lost"],
            HolderCall::Fail { .. } => &["queued", "failed", "cancelled", "lost"],
            HolderCall::Release => &["queued", "cancelled", "lost"],
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
    /// A definite error, or a call that never ran: no effect.
    NoEffect,
}

/// What a heartbeat or settle call did, as far as the history and the final rows tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    /// It took effect between these server times.
    Acted(Micros, Micros),
    /// An unknown outcome nothing settles: it may have taken effect between these times.
    Maybe(Micros, Micros),
    /// It changed nothing.
    Nothing,
}

impl Effect {
    fn possible(self) -> bool {
        self != Effect::Nothing
    }

    /// The earliest server time it can have taken effect at.
    fn earliest(self) -> Option<Micros> {
        match self {
            Effect::Acted(lo, _) | Effect::Maybe(lo, _) => Some(lo),
            Effect::Nothing => None,
        }
    }

    /// The latest server time it can have taken effect at.
    fn latest(self) -> Option<Micros> {
        match self {
            Effect::Acted(_, hi) | Effect::Maybe(_, hi) => Some(hi),
            Effect::Nothing => None,
        }
    }
}

/// A heartbeat or settle call presenting one lease.
#[derive(Clone, Debug)]
struct HolderEvent<'a> {
    op: &'a Op,
    call: HolderCall,
    seen: Seen,
    /// Resolved per job (see [`resolve_effects`]).
    effect: Effect,
}

impl HolderEvent<'_> {
    /// The server times between which it certainly took effect.
    fn acted_at(&self) -> Option<(Micros, Micros)> {
        match self.effect {
            Effect::Acted(lo, hi) => Some((lo, hi)),
            _ => None,
        }
    }
}

/// A claim of one job.
#[derive(Clone, Debug)]
struct ClaimEvent<'a> {
    op: &'a Op,
    job: &'a Delivered,
    /// The lease length asked for.
    lease_len: Micros,
    /// The server's clock before the claim: it took effect after this.
    began: Micros,
}

impl ClaimEvent<'_> {
    /// The earliest end of its lease the contract allows: the lease asked for, from the
    /// earliest moment the claim can have run.
    fn lease_end(&self) -> Micros {
        self.began + self.lease_len
    }
}

/// Everything the history says about one job.
#[derive(Default)]
struct JobHistory<'a> {
    claims: Vec<ClaimEvent<'a>>,
    /// Heartbeat and settle calls by lease.
    holder: HashMap<Uuid, Vec<HolderEvent<'a>>>,
    cancels: Vec<(&'a Op, Seen)>,
}

/// A claim with an unknown outcome: it may have taken up to `n` jobs nobody heard of, at some
/// server time between `floor` and `ceiling`.
#[derive(Clone, Copy, Debug)]
struct Phantom {
    floor: Micros,
    ceiling: Micros,
    n: i32,
}

/// What the checker knows about one job beyond its own history.
struct Context<'a> {
    phantoms: &'a [Phantom],
    /// The earliest server time the job can have existed at (its enqueue's).
    enqueued_at: Micros,
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
        _ => Seen::NoEffect,
    }
}

/// A piece of a lease's live time on the server's clock: `[start, end)`.
type Segment = (Micros, Micros);

/// Whether some moment of `[floor, ceiling]` inside `(lo, hi)` is covered by none of
/// `segments`: a claim running then may have found the job free.
fn touches_free_time(
    (floor, ceiling): (Micros, Micros),
    (lo, hi): (Micros, Micros),
    segments: &[Segment],
) -> bool {
    let (start, end) = (floor.max(lo), ceiling.min(hi));
    if start >= end {
        return false;
    }
    let mut sorted: Vec<Segment> = segments
        .iter()
        .copied()
        .filter(|(s, e)| s < e && *e > start && *s < end)
        .collect();
    sorted.sort_unstable();
    let mut covered_to = start;
    for (s, e) in sorted {
        if s > covered_to {
            return true;
        }
        covered_to = covered_to.max(e);
        if covered_to >= end {
            return false;
        }
    }
    covered_to < end
}

/// Finds the calls with unknown outcomes that never reached a server. A call sent on a
/// connection after `pg_terminate_backend` of its backend returned true cannot run: the
/// signal is pending before the query arrives, and a backend reading a command handles it
/// first (PostgreSQL's `ProcessClientReadInterrupt`). A call sent on a connection after a
/// crash that ended every backend of before cannot run either. Such calls count as having
/// done nothing; an answer on such a connection is an error of its own.
fn mark_never_ran(ops: &[Op], report: &mut Report) -> Vec<Op> {
    let terminated: Vec<(i32, u64, u64)> = ops
        .iter()
        .filter_map(|op| match (&op.call, &op.result) {
            (Call::Terminate { pid, .. }, OpResult::Ok(Reply::Terminated(true))) => {
                Some((*pid, op.invoke, op.complete))
            }
            _ => None,
        })
        .collect();
    let crashes: Vec<(u64, u64)> = ops
        .iter()
        .filter_map(|op| match (&op.call, &op.result) {
            (call, OpResult::Ok(_)) if call.ends_every_backend() => Some((op.invoke, op.complete)),
            _ => None,
        })
        .collect();
    ops.iter()
        .map(|op| {
            if op.call.is_fault() {
                return op.clone();
            }
            let ended = terminated
                .iter()
                .find(|(pid, invoke, complete)| {
                    *pid == op.backend && op.connected_at < *invoke && *complete < op.invoke
                })
                .map(|(pid, ..)| format!("its backend {pid} had been terminated"))
                .or_else(|| {
                    crashes
                        .iter()
                        .any(|(invoke, complete)| {
                            op.connected_at < *invoke && *complete < op.invoke
                        })
                        .then(|| "the server had crashed since it connected".to_owned())
                });
            match (&op.result, ended) {
                (OpResult::Unknown(why), Some(how)) => Op {
                    result: OpResult::NotRun(format!("{how} ({why})")),
                    ..op.clone()
                },
                (OpResult::Ok(_), Some(how)) => {
                    report.call_errors.push(format!(
                        "op {} ({}) was answered, but {how} before it was sent",
                        op.index,
                        op.call.name()
                    ));
                    op.clone()
                }
                _ => op.clone(),
            }
        })
        .collect()
}

/// A tag enqueued with a unique key.
struct KeyedTag {
    key: String,
    /// How long a success keeps it, as the enqueue asked.
    unique_for: Option<Micros>,
    /// The enqueue's window on the server's clock, when it answered.
    window: Option<(Micros, Micros)>,
    /// The enqueue op.
    op: usize,
}

/// The claims whose client vanished while they waited: none may take a job once its client
/// is gone (the row's `started_at` after `gone_by`), and each backend must end (it notices
/// the closed connection when it wakes, or at the latest when its wait runs out and it answers
/// nobody).
fn check_vanished(ops: &[Op], report: &mut Report) {
    for op in ops {
        let Call::VanishedClaim {
            vanish, lease_ms, ..
        } = &op.call
        else {
            continue;
        };
        report.vanished.0 += 1;
        report.vanished.1 += usize::from(vanish.asleep_at.is_some());
        match vanish.ended_by {
            Some(_) => report.vanished.2 += 1,
            None => report.gone.push(format!(
                "op {} (vanished claim, worker {}): its backend {} was still running when the history stopped watching, long after its client was gone by {}",
                op.index, vanish.worker, vanish.pid, vanish.gone_by
            )),
        }
        for took in &vanish.took {
            if took.started_at > vanish.gone_by {
                report.gone.push(format!(
                    "job {}: attempt {} spent at {} by backend {} (claim op {}, worker {}, a {lease_ms} ms lease), whose client was gone by {}",
                    took.id, took.attempt, took.started_at, vanish.pid, op.index, vanish.worker, vanish.gone_by
                ));
            } else {
                report.vanished.3 += 1;
            }
        }
    }
}

/// How a prepared transaction ended, as far as the history tells.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// Committed by this server time (the finish op's answer, or the inspection that settled
    /// its unknown outcome).
    Committed(Micros),
    /// Rolled back by this op.
    RolledBack(usize),
    /// Never prepared: its transaction rolled back before `PREPARE TRANSACTION` took.
    Never,
    /// Prepared (or maybe), and nothing ended it.
    Open,
}

/// Turns each [`Call::Prepared`] op into the plain call it carried, with the outcome its
/// transaction's ending gave it: committed, the call's reply, its effect taking place between
/// the call and the commit (so the reply's closing server time becomes the commit's); rolled
/// back or never prepared, an op that did nothing; left open, an unknown outcome. Each gid's
/// ending is read from its ops in order: a finish that answered, or a finish with an unknown
/// outcome after which an inspection no longer found the gid (the workload tries one ending
/// per gid, so the gid's absence means that finish took effect); an inspection finding the gid
/// prepared means the finish before it did not. Whatever does not square (two endings, a gid
/// prepared after its end, an end of a gid never prepared, a gid never ended or left prepared
/// at the end) is reported.
fn resolve_prepared(ops: &[Op], end: &End, report: &mut Report) -> Vec<Op> {
    let mut by_gid: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Call::Prepared { gid, .. } | Call::Finish { gid, .. } | Call::Inspect { gid } =
            &op.call
        {
            by_gid.entry(gid.as_str()).or_default().push(op);
        }
    }
    let restarts: Vec<(u64, u64)> = ops
        .iter()
        .filter(|op| op.call.ends_every_backend() && matches!(op.result, OpResult::Ok(_)))
        .map(|op| (op.invoke, op.complete))
        .collect();
    let mut endings: HashMap<usize, Ending> = HashMap::new();
    for (gid, mut list) in by_gid {
        list.sort_by_key(|op| op.index);
        let prepares: Vec<&Op> = list
            .iter()
            .copied()
            .filter(|op| matches!(op.call, Call::Prepared { .. }))
            .collect();
        let Some(prepare) = prepares.first().copied() else {
            if list.iter().any(|op| {
                matches!(op.call, Call::Finish { .. }) && matches!(op.result, OpResult::Ok(_))
            }) {
                report
                    .prepared
                    .push(format!("gid {gid}: ended, but no op prepared it"));
            }
            continue;
        };
        if prepares.len() > 1 {
            report.prepared.push(format!(
                "gid {gid}: prepared by {} ops (the workload uses each gid once)",
                prepares.len()
            ));
        }
        let mut known = matches!(prepare.result, OpResult::Ok(_));
        let mut never = matches!(prepare.result, OpResult::Failed(_) | OpResult::NotRun(_));
        // The ending: committed or not, its window, and the op that did it.
        let mut ending: Option<(bool, Micros, Micros, &Op)> = None;
        let mut pending: Option<&Op> = None;
        for op in list.iter().copied().filter(|op| op.index > prepare.index) {
            match (&op.call, &op.result) {
                (Call::Finish { commit, .. }, OpResult::Ok(Reply::Outcome { before, after, .. })) => {
                    if never {
                        report.prepared.push(format!(
                            "gid {gid}: op {} ended it, but its prepare op {} never took",
                            op.index, prepare.index
                        ));
                    }
                    if let Some((_, _, _, first)) = ending {
                        report.prepared.push(format!(
                            "gid {gid}: ended twice, by op {} and op {}",
                            first.index, op.index
                        ));
                    } else {
                        ending = Some((*commit, *before, *after, op));
                    }
                    known = true;
                    pending = None;
                }
                (Call::Finish { .. }, OpResult::Unknown(_)) => pending = Some(op),
                (Call::Inspect { .. }, OpResult::Ok(Reply::Present { present: true, at })) => {
                    if never {
                        report.prepared.push(format!(
                            "gid {gid}: prepared at {at} (op {}), but its prepare op {} failed",
                            op.index, prepare.index
                        ));
                    }
                    if let Some((_, _, _, by)) = ending {
                        report.prepared.push(format!(
                            "gid {gid}: still prepared at {at} (op {}), after op {} ended it",
                            op.index, by.index
                        ));
                    }
                    known = true;
                    pending = None;
                }
                (Call::Inspect { .. }, OpResult::Ok(Reply::Present { present: false, at })) => {
                    match (pending.take(), known, ending) {
                        (Some(finish), true, None) => {
                            let Call::Finish { commit, .. } = finish.call else {
                                unreachable!("pending holds finishes")
                            };
                            report.prepared_counts.settled_by_inspection += 1;
                            ending = Some((
                                commit,
                                finish.server_floor.unwrap_or(Micros::MIN),
                                *at,
                                finish,
                            ));
                        }
                        (Some(finish), false, None) => report.prepared.push(format!(
                            "gid {gid}: absent at {at}, but neither its prepare (op {}) nor its end (op {}) is known to have taken",
                            prepare.index, finish.index
                        )),
                        (None, false, None) => never = true,
                        (None, true, None) => report.prepared.push(format!(
                            "gid {gid}: gone from pg_prepared_xacts at {at} (op {}), but nothing ended it",
                            op.index
                        )),
                        (_, _, Some(_)) => {}
                    }
                }
                _ => {}
            }
        }
        let state = match ending {
            Some((true, _, hi, _)) => Ending::Committed(hi),
            Some((false, _, _, by)) => Ending::RolledBack(by.index),
            None if never => Ending::Never,
            None => {
                if end.prepared_left.iter().any(|left| left == gid) {
                    // Reported below with the others left prepared.
                } else {
                    report.prepared.push(format!(
                        "gid {gid}: prepared by op {}, and the history never saw it end",
                        prepare.index
                    ));
                }
                Ending::Open
            }
        };
        match state {
            Ending::Committed(..) | Ending::RolledBack(_) => {
                report.prepared_counts.prepared += 1;
                if matches!(state, Ending::Committed(..)) {
                    report.prepared_counts.committed += 1;
                } else {
                    report.prepared_counts.rolled_back += 1;
                }
                let (_, _, _, by) = ending.expect("ended");
                if restarts
                    .iter()
                    .any(|(invoke, complete)| prepare.complete < *invoke && *complete < by.invoke)
                {
                    report.prepared_counts.across_restarts += 1;
                }
            }
            Ending::Never => report.prepared_counts.never += 1,
            Ending::Open => report.prepared_counts.prepared += usize::from(known),
        }
        if let (Ending::Committed(..), OpResult::Failed(e)) = (state, &prepare.result) {
            report.prepared.push(format!(
                "gid {gid}: committed, but its call (op {}) failed: {e}",
                prepare.index
            ));
        }
        endings.insert(prepare.index, state);
    }
    for gid in &end.prepared_left {
        report.prepared.push(format!(
            "gid {gid} was still prepared after the drain (it holds its locks and rows)"
        ));
    }

    ops.iter()
        .map(|op| {
            let Call::Prepared { call, .. } = &op.call else {
                return op.clone();
            };
            let mut plain = Op {
                call: (**call).clone(),
                ..op.clone()
            };
            match (endings.get(&op.index).copied(), &op.result) {
                (Some(Ending::Committed(hi)), OpResult::Ok(reply)) => {
                    plain.result = OpResult::Ok(committed_by(reply, hi));
                }
                (Some(Ending::Committed(hi)), OpResult::Unknown(_)) => {
                    plain.server_ceiling = Some(hi);
                }
                (Some(Ending::RolledBack(by)), _) => {
                    plain.result = OpResult::NotRun(format!("rolled back by op {by}"));
                }
                (Some(Ending::Never), OpResult::Unknown(why)) => {
                    plain.result = OpResult::NotRun(format!("never prepared ({why})"));
                }
                (Some(Ending::Open), OpResult::Ok(_)) => {
                    plain.result = OpResult::Unknown("prepared, never ended".into());
                    plain.server_ceiling = None;
                }
                _ => {}
            }
            plain
        })
        .collect()
}

/// A prepared call's reply once its transaction committed by server time `hi`: what it did
/// took effect before then (and not before the call).
fn committed_by(reply: &Reply, hi: Micros) -> Reply {
    match reply.clone() {
        Reply::Ids { ids, before, after } => Reply::Ids {
            ids,
            before,
            after: after.max(hi),
        },
        Reply::Claimed {
            jobs,
            before,
            after,
        } => Reply::Claimed {
            jobs,
            before,
            after: after.max(hi),
        },
        Reply::Outcome {
            outcome,
            before,
            after,
        } => Reply::Outcome {
            outcome,
            before,
            after: after.max(hi),
        },
        Reply::Outcomes {
            rows,
            before,
            after,
        } => Reply::Outcomes {
            rows,
            before,
            after: after.max(hi),
        },
        other => other,
    }
}

/// Whether a succeeded job's hold on its key had run out by server time `at`.
fn hold_ran_out(job: &FinalJob, at: Micros) -> bool {
    match (job.state.as_str(), job.finished_at, job.unique_for) {
        ("succeeded", Some(finished), Some(keep)) => finished + keep <= at,
        _ => false,
    }
}

/// Unique keys (README "Unique jobs"): at most one job holds a key at a time, from its insert
/// until it fails, is cancelled, or succeeds (then for `unique_for` longer); a duplicate
/// answers the id of the job that holds the key then. Judged on the server's clock, with the
/// rows' `finished_at` (the hold ends no earlier: in the transaction that finished the job)
/// and the answers that finished each job (no later), and at the end on the rows and on one
/// probe enqueue per key.
fn check_unique(
    ops: &[Op],
    finals: &[FinalJob],
    by_id: &HashMap<i64, &FinalJob>,
    enqueued: &HashMap<u64, (Enqueued, i32, Micros)>,
    keyed: &HashMap<u64, KeyedTag>,
    end: &End,
    report: &mut Report,
) {
    report.unique_counts.0 = keyed.len();
    // The earliest answer that finished each job (its hold ends no later, unless it keeps its
    // key for unique_for after success).
    let mut finished_by: HashMap<i64, Micros> = HashMap::new();
    let mut note = |id: i64, after: Micros| {
        let at = finished_by.entry(id).or_insert(after);
        *at = (*at).min(after);
    };
    for op in ops {
        match (&op.call, &op.result) {
            (
                Call::Complete { id, .. } | Call::Fail { id, .. } | Call::Cancel { id },
                OpResult::Ok(Reply::Outcome { outcome, after, .. }),
            ) if matches!(outcome.as_str(), "succeeded" | "failed" | "cancelled") => {
                // A cancel answering 'succeeded' or 'failed' found it finished by then too.
                note(*id, *after);
            }
            (Call::CompleteMany { .. }, OpResult::Ok(Reply::Outcomes { rows, after, .. })) => {
                for (id, outcome) in rows {
                    if outcome == "succeeded" {
                        note(*id, *after);
                    }
                }
            }
            _ => {}
        }
    }
    // When a job surely held its key from, and until (no earlier than).
    let enqueue_of = |job: &FinalJob| job.tag.and_then(|tag| keyed.get(&tag));
    let held_from = |job: &FinalJob| enqueue_of(job).and_then(|k| k.window).map(|(_, a)| a);
    let held_until = |job: &FinalJob| -> Micros {
        match (job.state.as_str(), job.finished_at) {
            ("succeeded", Some(finished)) => finished + job.unique_for.unwrap_or(0),
            (_, Some(finished)) => finished,
            _ => Micros::MAX,
        }
    };
    // When a job surely no longer held its key, if the history tells.
    let released_by = |job: &FinalJob| -> Option<Micros> {
        match (job.state.as_str(), job.finished_at, job.unique_for) {
            ("succeeded", Some(finished), Some(keep)) => Some(finished + keep),
            ("succeeded" | "failed" | "cancelled", _, _) => finished_by.get(&job.id).copied(),
            _ => None,
        }
    };
    let mut holders: HashMap<&str, Vec<&FinalJob>> = HashMap::new();
    for job in finals {
        if let Some(key) = &job.unique_key {
            holders.entry(key.as_str()).or_default().push(job);
        }
    }
    let stored: HashMap<u64, &FinalJob> = finals
        .iter()
        .filter_map(|job| Some((job.tag?, job)))
        .collect();
    let mut tags: Vec<(&u64, &KeyedTag)> = keyed.iter().collect();
    tags.sort_by_key(|(tag, _)| **tag);
    for (tag, k) in tags {
        if let Some(job) = stored.get(tag) {
            if job.unique_key.as_deref() != Some(k.key.as_str()) || job.unique_for != k.unique_for {
                report.unique.push(format!(
                    "job {} (tag {tag}): stored with key {:?} kept for {:?} µs, enqueued (op {}) with key {} kept for {:?}",
                    job.id, job.unique_key, job.unique_for, k.op, k.key, k.unique_for
                ));
            }
        }
        let Some((b, a)) = k.window else { continue };
        match enqueued.get(tag).map(|e| e.0) {
            Some(Enqueued::Deduplicated(holder)) => {
                report.unique_counts.1 += 1;
                let job = by_id[&holder];
                if job.unique_key.as_deref() != Some(k.key.as_str()) {
                    report.unique.push(format!(
                        "tag {tag} (op {}, key {}): answered job {holder}, whose key is {:?}",
                        k.op, k.key, job.unique_key
                    ));
                } else if let Some(released) = released_by(job).filter(|r| *r < b) {
                    report.unique.push(format!(
                        "tag {tag} (op {}, key {}): answered job {holder} over [{b}, {a}], but that job ({}) no longer held the key by {released}: a key held by nothing",
                        k.op, k.key, job.state
                    ));
                } else if enqueued
                    .get(&job.tag.unwrap_or(u64::MAX))
                    .is_some_and(|(_, _, since)| *since > a)
                {
                    report.unique.push(format!(
                        "tag {tag} (op {}, key {}): answered job {holder}, enqueued only after it answered",
                        k.op, k.key
                    ));
                }
            }
            Some(Enqueued::Acked(id)) => {
                let Some(others) = holders.get(k.key.as_str()) else {
                    continue;
                };
                for other in others.iter().filter(|o| o.id != id) {
                    let Some(from) = held_from(other) else {
                        continue;
                    };
                    if from < b && held_until(other) > a {
                        report.unique.push(format!(
                            "key {}: op {} inserted job {id} over [{b}, {a}] while job {} held the key (from {from} until no earlier than {})",
                            k.key,
                            k.op,
                            other.id,
                            held_until(other)
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    // The rows at the end: a job holds its key while open, and after success for unique_for
    // (a hold that ran out may linger until an enqueue of the key takes it over); never after
    // it failed or was cancelled.
    for job in finals {
        let Some(key) = &job.unique_key else {
            if job.unique_hold {
                report
                    .unique
                    .push(format!("job {}: holds a unique key but has none", job.id));
            }
            continue;
        };
        let should = match job.state.as_str() {
            "queued" | "running" => Some(true),
            "failed" | "cancelled" => Some(false),
            "succeeded" if job.unique_for.is_none() => Some(false),
            // Within its window it holds; past it, it may still.
            _ => match (end.now, job.finished_at, job.unique_for) {
                (Some(now), Some(finished), Some(keep)) if finished + keep > now => Some(true),
                _ => None,
            },
        };
        if let Some(should) = should.filter(|s| *s != job.unique_hold) {
            report.unique.push(format!(
                "job {} ({}, key {key}): unique_hold is {}, the rows say it should {}hold the key",
                job.id,
                job.state,
                job.unique_hold,
                if should { "" } else { "not " }
            ));
        }
    }
    // The probes after the drain: an enqueue of each key inserts exactly when no job holds it
    // (a cache that thought it held, or free, shows here).
    for probe in &end.key_probes {
        // The jobs whose rows hold the key at server time `at`.
        let holding = |at: Micros| -> Vec<i64> {
            holders
                .get(probe.key.as_str())
                .map(|jobs| {
                    jobs.iter()
                        .filter(|j| j.unique_hold && !hold_ran_out(j, at))
                        .map(|j| j.id)
                        .collect()
                })
                .unwrap_or_default()
        };
        match probe.holder {
            None if !holding(probe.after).is_empty() => report.unique.push(format!(
                "key {}: a probe enqueue after the drain inserted its own job, but job(s) {:?} hold the key",
                probe.key,
                holding(probe.after)
            )),
            Some(holder) if !holding(probe.before).contains(&holder) => {
                let row = by_id.get(&holder).map_or("no row".to_owned(), |j| {
                    format!(
                        "{}, unique_hold {}, key {:?}",
                        j.state, j.unique_hold, j.unique_key
                    )
                });
                report.stuck.push(format!(
                    "key {}: a probe enqueue after the drain was answered by job {holder} ({row}), which does not hold it: a key held by nothing",
                    probe.key
                ));
            }
            _ => {}
        }
    }
}

/// Judges a history against the jobs the database holds at the end.
pub fn check(recorded: &[Op], finals: &[FinalJob], group_concurrency: usize) -> Report {
    check_with_end(recorded, finals, &End::default(), group_concurrency)
}

/// Adds `op`, with `why` it ended so, to `examples` while they are fewer than `most`: a
/// report names a few of each kind of ending, not all.
fn keep_example(examples: &mut Vec<String>, most: usize, op: &Op, why: &str) {
    if examples.len() < most {
        examples.push(format!("op {} {}: {why}", op.index, op.call.name()));
    }
}

/// Judges a history against the jobs the database holds at the end and what was read at the
/// end besides ([`End`]).
pub fn check_with_end(
    recorded: &[Op],
    finals: &[FinalJob],
    end: &End,
    group_concurrency: usize,
) -> Report {
    let mut report = Report::default();
    let ops = mark_never_ran(recorded, &mut report);
    let ops = &ops[..];

    // Operations by kind and outcome; definite errors are never expected in this workload.
    for op in ops {
        let outcome = match &op.result {
            OpResult::Ok(Reply::Outcome { outcome, .. }) => outcome.clone(),
            OpResult::Ok(Reply::Terminated(done)) => match &op.call {
                Call::Terminate { process, .. } if *process < WORKERS => format!("worker {done}"),
                Call::Terminate { .. } => format!("producer {done}"),
                _ => format!("{done}"),
            },
            OpResult::Ok(Reply::Claimed { jobs, .. }) => format!("{} job(s)", jobs.len().min(2)),
            OpResult::Ok(_) => "ok".to_owned(),
            OpResult::Failed(e) => {
                report
                    .call_errors
                    .push(format!("op {} {:?}: {e}", op.index, op.call));
                "error".to_owned()
            }
            OpResult::Unknown(why) => {
                keep_example(&mut report.unknown_examples, 3, op, why);
                "unknown".to_owned()
            }
            OpResult::NotRun(why) => {
                keep_example(&mut report.not_run_examples, 2, op, why);
                "not run".to_owned()
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

    // Prepared calls become the plain calls they were, with the outcome their ending gave.
    check_vanished(ops, &mut report);
    let ops = resolve_prepared(ops, end, &mut report);
    let ops = &ops[..];

    // Enqueues: every tag is enqueued by exactly one call, no earlier than its server floor.
    let mut enqueued: HashMap<u64, (Enqueued, i32, Micros)> = HashMap::new();
    let mut enqueue_answered: HashMap<u64, Micros> = HashMap::new();
    // Tags with a unique key: the key, how long a success keeps it, and the enqueue's window
    // on the server's clock (acknowledged enqueues only).
    let mut keyed: HashMap<u64, KeyedTag> = HashMap::new();
    for op in ops {
        let Call::Enqueue {
            tags,
            max_attempts,
            unique,
            unique_for,
        } = &op.call
        else {
            continue;
        };
        for (i, tag) in tags.iter().enumerate() {
            if let Some(Some(key)) = unique.get(i) {
                keyed.insert(
                    *tag,
                    KeyedTag {
                        key: key.clone(),
                        unique_for: *unique_for,
                        window: match &op.result {
                            OpResult::Ok(Reply::Ids { before, after, .. }) => {
                                Some((*before, *after))
                            }
                            _ => None,
                        },
                        op: op.index,
                    },
                );
            }
            let (status, since) = match &op.result {
                OpResult::Ok(Reply::Ids { ids, before, after }) if ids.len() == tags.len() => {
                    enqueue_answered.insert(*tag, *after);
                    (Enqueued::Acked(ids[i]), *before)
                }
                OpResult::Ok(reply) => {
                    report.unexpected.push(format!(
                        "op {}: enqueue of {} tags answered {reply:?}",
                        op.index,
                        tags.len()
                    ));
                    (Enqueued::Unknown, Micros::MIN)
                }
                OpResult::Failed(_) | OpResult::NotRun(_) => (Enqueued::Failed, Micros::MIN),
                OpResult::Unknown(_) => (Enqueued::Unknown, op.server_floor.unwrap_or(Micros::MIN)),
            };
            if enqueued
                .insert(*tag, (status, *max_attempts, since))
                .is_some()
            {
                report
                    .unexpected
                    .push(format!("tag {tag} was enqueued by two operations"));
            }
        }
    }
    report.enqueues = enqueued
        .values()
        .fold((0, 0, 0), |(a, f, u), (s, _, _)| match s {
            Enqueued::Acked(_) | Enqueued::Deduplicated(_) => (a + 1, f, u),
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
            Some((Enqueued::Failed, _, _)) => report.unexpected.push(format!(
                "job {} carries tag {tag}, whose enqueue failed (rolled back) or never ran",
                job.id
            )),
            Some((Enqueued::Acked(id), _, _)) if *id != job.id => report.unexpected.push(format!(
                "job {} carries tag {tag}, but its enqueue answered id {id}",
                job.id
            )),
            Some((_, max_attempts, _)) if *max_attempts != job.max_attempts => {
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
    // A tag with a unique key whose enqueue answered the id of a stored job that carries
    // another tag was deduplicated: that job held the key, and nothing was inserted.
    for (tag, entry) in enqueued.iter_mut() {
        if let (Enqueued::Acked(id), Some(_)) = (entry.0, keyed.get(tag)) {
            if !by_tag.contains_key(tag) && by_id.get(&id).is_some_and(|j| j.tag != Some(*tag)) {
                entry.0 = Enqueued::Deduplicated(id);
            }
        }
    }
    let enqueued_at = |job: &FinalJob| -> Micros {
        job.tag
            .and_then(|tag| enqueued.get(&tag))
            .map_or(Micros::MIN, |(_, _, since)| *since)
    };
    // The server time by which each job's enqueue had surely committed (its call's answer).
    let committed_by: HashMap<i64, Micros> = finals
        .iter()
        .filter_map(|job| Some((job.id, *enqueue_answered.get(&job.tag?)?)))
        .collect();

    // Deliveries: each must be a job that was enqueued, under the id it was stored with.
    let mut histories: HashMap<i64, JobHistory> = HashMap::new();
    let mut delivered_tags: HashSet<u64> = HashSet::new();
    for op in ops {
        let (Call::Claim { lease_ms, .. }, OpResult::Ok(Reply::Claimed { jobs, before, .. })) =
            (&op.call, &op.result)
        else {
            continue;
        };
        for job in jobs {
            delivered_tags.insert(job.tag);
            let problem = match enqueued.get(&job.tag) {
                None => Some("whose tag was never enqueued".to_owned()),
                Some((Enqueued::Failed, _, _)) => Some("whose enqueue failed".to_owned()),
                Some((Enqueued::Acked(id), _, _)) if *id != job.id => {
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
                    began: *before,
                });
        }
    }
    report.delivered = delivered_tags.len();
    report.recovered = enqueued
        .iter()
        .filter(|(tag, (status, _, _))| {
            *status == Enqueued::Unknown
                && (by_tag.contains_key(tag) || delivered_tags.contains(tag))
        })
        .count();

    // Lost: acknowledged, but missing or unfinished at the end.
    let mut lost: Vec<(u64, i64, String)> = Vec::new();
    for (tag, (status, _, _)) in &enqueued {
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
                .push(HolderEvent {
                    op,
                    call,
                    seen,
                    effect: Effect::Nothing,
                });
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
                                Seen::NoEffect
                            }
                        },
                        OpResult::Unknown(_) => Seen::Unknown,
                        _ => Seen::NoEffect,
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

    // Claims whose outcome is unknown may have taken jobs nobody heard of.
    let phantoms: Vec<Phantom> = ops
        .iter()
        .filter_map(|op| match (&op.call, &op.result) {
            (Call::Claim { n, .. }, OpResult::Unknown(_)) => Some(Phantom {
                floor: op.server_floor.unwrap_or(Micros::MIN),
                ceiling: op.server_ceiling.unwrap_or(Micros::MAX),
                n: *n,
            }),
            // A vanished client's claim may take jobs only while its client was there: what
            // it took later is an attempt spent by a gone client, which no unknown outcome
            // explains.
            (Call::VanishedClaim { n, vanish, .. }, OpResult::Unknown(_)) => Some(Phantom {
                floor: op.server_floor.unwrap_or(Micros::MIN),
                ceiling: vanish.gone_by,
                n: *n,
            }),
            _ => None,
        })
        .collect();

    let mut ids: Vec<i64> = histories.keys().copied().collect();
    ids.sort_unstable();
    let mut runs: HashMap<i64, Runs> = HashMap::new();
    for id in ids {
        let history = histories.get_mut(&id).expect("listed");
        history.claims.sort_by_key(|c| c.job.taken_at);
        resolve_effects(history, by_id.get(&id).copied(), &mut report);
        let history = &histories[&id];
        match by_id.get(&id) {
            Some(job) => {
                let ctx = Context {
                    phantoms: &phantoms,
                    enqueued_at: enqueued_at(job),
                };
                runs.insert(id, check_job(job, history, &ctx, &mut report));
            }
            None if !history.claims.is_empty() && !lost_ids.contains(&id) => report
                .lost
                .push(format!("job {id} was delivered but is missing at the end")),
            None => {}
        }
    }
    // Jobs nobody ever touched must still be consistent (attempts, errors, final state).
    for job in finals {
        if !histories.contains_key(&job.id) {
            let ctx = Context {
                phantoms: &phantoms,
                enqueued_at: enqueued_at(job),
            };
            check_job(job, &JobHistory::default(), &ctx, &mut report);
        }
    }
    check_groups(finals, &runs, &committed_by, group_concurrency, &mut report);
    check_unique(ops, finals, &by_id, &enqueued, &keyed, end, &mut report);
    for (group, claimed) in &end.group_probes {
        if !claimed {
            report.stuck.push(format!(
                "group {group}: a job enqueued into it after the drain, with nothing of the group open, was not claimed"
            ));
        }
    }
    // Across jobs: the claims with unknown outcomes took at most their `n` jobs each.
    let capacity: i32 = phantoms.iter().map(|p| p.n).sum();
    if report.phantom_attempts > capacity as usize {
        report.state_errors.push(format!(
            "{} attempts only claims with unknown outcomes explain, but those {} claims took at most {capacity} jobs",
            report.phantom_attempts,
            phantoms.len()
        ));
    }
    if !report.is_clean() {
        report.excerpts = excerpts(recorded, finals, &report);
    }
    report
}

/// Decides what each heartbeat and settle call of a job did. An answer says it; a call that
/// failed or never ran did nothing. An unknown outcome is settled by evidence where there is
/// some: a fail stores `fail op <index>` in `errors` exactly when it acted, a single complete
/// stores `{"op": <index>}` as the result exactly when it acted, and a call that ends the
/// lease did not act if a later call under the same lease (the same process, after it) took
/// effect. What nothing settles may have acted.
fn resolve_effects(history: &mut JobHistory, job: Option<&FinalJob>, report: &mut Report) {
    for events in history.holder.values_mut() {
        events.sort_by_key(|e| e.op.index);
        for i in 0..events.len() {
            let later_acted = events[i + 1..].iter().any(
                |e| matches!(&e.seen, Seen::Answered { outcome, .. } if e.call.acted(outcome)),
            );
            let event = &mut events[i];
            event.effect = match &event.seen {
                Seen::Answered {
                    outcome,
                    before,
                    after,
                } if event.call.acted(outcome) => Effect::Acted(*before, *after),
                Seen::Answered { .. } | Seen::NoEffect => Effect::Nothing,
                Seen::Unknown => {
                    let window = (
                        event.op.server_floor.unwrap_or(Micros::MIN),
                        event.op.server_ceiling.unwrap_or(Micros::MAX),
                    );
                    let index = event.op.index;
                    let evidence = match (event.call, job) {
                        (HolderCall::Fail { .. }, Some(job)) => Some(
                            job.errors
                                .iter()
                                .any(|e| e.error == format!("fail op {index}")),
                        ),
                        (HolderCall::Complete { batch: false }, Some(job)) => {
                            Some(job.result_op == Some(index))
                        }
                        _ => None,
                    };
                    let effect = match evidence {
                        Some(true) => Effect::Acted(window.0, window.1),
                        Some(false) => Effect::Nothing,
                        None if later_acted && event.call.ends_lease() => Effect::Nothing,
                        None => Effect::Maybe(window.0, window.1),
                    };
                    if event.call.ends_lease() {
                        if matches!(effect, Effect::Maybe(..)) {
                            report.open_unknowns += 1;
                        } else {
                            report.resolved_unknowns += 1;
                        }
                    }
                    effect
                }
            };
        }
    }
}

/// What the history shows of one job's runs, on the server's clock.
#[derive(Default)]
struct Runs {
    /// The live time of its leases (inside the real one: an overlap is a real one).
    live: Vec<Segment>,
    /// Each claim's window: it took effect after the first and before the second.
    claims: Vec<(Micros, Micros)>,
}

/// The group rules (README "Groups"), across the jobs of each group: at no moment more live
/// leases among its jobs than `concurrency`, and at concurrency 1 no job of a group claimed
/// surely before a claim of an earlier one (runs start in enqueue order: a job runs only once
/// every earlier job of its group finished, and a finished job is never claimed again here,
/// where nobody calls jobs_retry).
fn check_groups(
    finals: &[FinalJob],
    runs: &HashMap<i64, Runs>,
    committed_by: &HashMap<i64, Micros>,
    concurrency: usize,
    report: &mut Report,
) {
    let mut groups: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for job in finals {
        if let Some(group) = &job.group {
            groups.entry(group).or_default().push(job.id);
        }
    }
    report.grouped = (groups.values().map(Vec::len).sum(), groups.len());
    let none = Runs::default();
    for (group, mut ids) in groups {
        ids.sort_unstable();
        let runs_of = |id: &i64| runs.get(id).unwrap_or(&none);
        // Live leases at once: +1 at each start, -1 at each end (ends first at a tie, since a
        // segment is [start, end)).
        let mut edges: Vec<(Micros, i32, i64)> = Vec::new();
        for id in &ids {
            for (start, end) in &runs_of(id).live {
                edges.push((*start, 1, *id));
                edges.push((*end, -1, *id));
            }
        }
        edges.sort_unstable_by_key(|(at, delta, _)| (*at, *delta));
        let mut live: Vec<i64> = Vec::new();
        for (at, delta, id) in edges {
            if delta < 0 {
                if let Some(i) = live.iter().position(|l| *l == id) {
                    live.remove(i);
                }
                continue;
            }
            live.push(id);
            let mut jobs = live.clone();
            jobs.sort_unstable();
            jobs.dedup();
            if jobs.len() > concurrency {
                report.groups.push(format!(
                    "group {group}: jobs {jobs:?} held live leases at once at server time {at}, concurrency {concurrency}"
                ));
                break;
            }
        }
        if concurrency > 1 {
            continue;
        }
        // Enqueue order: no job is claimed surely before a claim of an earlier one began, when
        // that earlier job was surely committed before the later one's claim began (a claim
        // cannot see a job whose transaction has not committed, so one committed after a later
        // job of its group started runs after it).
        for (i, id) in ids.iter().enumerate() {
            let Some((claim_began, taken)) = runs_of(id)
                .claims
                .iter()
                .min_by_key(|(_, taken)| *taken)
                .copied()
            else {
                continue;
            };
            let earlier_claimed_later = ids[..i].iter().find_map(|earlier| {
                let committed = *committed_by.get(earlier)?;
                let (began, _) = runs_of(earlier)
                    .claims
                    .iter()
                    .max_by_key(|(began, _)| *began)?;
                (committed < claim_began && taken < *began).then_some((*earlier, *began, committed))
            });
            if let Some((earlier, began, committed)) = earlier_claimed_later {
                report.groups.push(format!(
                    "group {group}: job {id} was claimed by server time {taken}, before job {earlier}, earlier in the group and enqueued by {committed}, was claimed after {began}"
                ));
            }
        }
    }
}

/// Checks one job's history and final row; returns what it shows of the job's runs.
fn check_job(job: &FinalJob, history: &JobHistory, ctx: &Context, report: &mut Report) -> Runs {
    let id = job.id;
    let mut duplicated = Vec::new();
    let mut state_errors = Vec::new();
    let mut answers = Vec::new();
    for entry in &job.errors {
        if entry.is_reclaim() {
            report.reclaimed += 1;
        }
    }
    let last_error = job.errors.last().map(|e| e.error.as_str());
    if job.state == "failed" && last_error == Some("lease expired on the final attempt") {
        report.failed_by_reclaim += 1;
    }
    let no_events = Vec::new();
    let events_of = |lease: &Uuid| history.holder.get(lease).unwrap_or(&no_events);
    let all_events = || history.holder.values().flatten();

    // Acknowledged terminal facts.
    let mut succeeded: Vec<&HolderEvent> = Vec::new();
    let mut failed: Vec<&HolderEvent> = Vec::new();
    for event in all_events() {
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

    // Cancels. `cancelled`: the server times between which the job became cancelled, from
    // the earliest cancel that answered 'cancelled' or, failing that, from the cancels with
    // unknown outcomes of a job that ends cancelled.
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
            && !all_events()
                .any(|e| matches!(e.call, HolderCall::Complete { .. }) && e.effect.possible())
        {
            state_errors.push(format!(
                "job {id}: cancel op {} found it succeeded, but no complete could have done that (answered at {after})",
                op.index
            ));
        }
    }
    if cancelled.is_none() && job.state == "cancelled" {
        let windows: Vec<(Micros, Micros)> = history
            .cancels
            .iter()
            .filter(|(_, seen)| matches!(seen, Seen::Unknown))
            .map(|(op, _)| {
                (
                    op.server_floor.unwrap_or(Micros::MIN),
                    op.server_ceiling.unwrap_or(Micros::MAX),
                )
            })
            .collect();
        if !windows.is_empty() {
            cancelled = Some((
                windows.iter().map(|w| w.0).min().expect("some"),
                windows.iter().map(|w| w.1).max().expect("some"),
            ));
        }
    }
    // Rule 7: after a cancel, no holder call takes effect.
    if let Some((_, cancelled_after)) = cancelled {
        for event in all_events() {
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
        all_events().any(|e| pred(e.call) && e.effect.possible())
    };
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
                    if !all_events().any(|e| {
                        e.op.index == op
                            && e.call == HolderCall::Complete { batch: false }
                            && e.effect.possible()
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
                Seen::NoEffect => false,
            });
            if !maybe_cancelled {
                state_errors.push(format!("job {id} is cancelled, but nobody cancelled it"));
            }
        }
        _ => {} // reported as lost
    }

    // Leases: what each claim granted, and its live segments on the server's clock.
    let claims = &history.claims;
    let mut live: Vec<Vec<Segment>> = Vec::new();
    for claim in claims {
        // The claim ran between `began` and `taken_at`; the lease it grants runs for the
        // length asked for from then (a shorter one breaks the contract).
        let (low, high) = (claim.lease_end(), claim.job.taken_at + claim.lease_len);
        if claim.job.lease_until < low || claim.job.lease_until > high {
            state_errors.push(format!(
                "job {id}: claim op {} asked for a {} ms lease but got lease_until {}, outside [{low}, {high}] (the claim ran in [{}, {}])",
                claim.op.index,
                claim.lease_len / 1000,
                claim.job.lease_until,
                claim.began,
                claim.job.taken_at
            ));
        }
        let events = events_of(&claim.job.lease);
        // Live from the claim until the lease asked for runs out, and from each renewal for
        // another lease length; the claim's own report of lease_until is not trusted.
        let mut segments: Vec<Segment> = vec![(claim.job.taken_at, claim.lease_end())];
        let expiry = events
            .iter()
            .filter(|e| e.call == HolderCall::Heartbeat)
            .filter_map(|e| e.acted_at().map(|(_, after)| after + claim.lease_len))
            .fold(claim.job.taken_at + claim.lease_len, Micros::max);
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
            if event.call == HolderCall::Heartbeat {
                if let Some((before, after)) = event.acted_at() {
                    segments.push((after, before + claim.lease_len));
                }
            } else if let Some(earliest) = event.effect.earliest() {
                end = end.min(earliest);
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
        for (finished, how, by) in &terminal_acks {
            if *finished < claim.began {
                duplicated.push(format!(
                    "job {id}: op {} claimed it after op {by} finished it ({how})",
                    claim.op.index
                ));
            }
        }
        if let Some((_, cancelled_after)) = cancelled {
            if cancelled_after < claim.began {
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

    // Attempts (rule 3): each claim adds one, a release gives one back. Between two known
    // claims (before the first, after the last) only claims with unknown outcomes that ran
    // while the job may have been free can have added more, one each; and each such attempt
    // ends in a reclaim that `errors` records (nobody knows its lease to settle it), unless a
    // cancel ends the job under it.
    let segments: Vec<Segment> = live.iter().flatten().copied().collect();
    let gap = |i: usize| -> (Micros, Micros) {
        (
            if i == 0 {
                ctx.enqueued_at
            } else {
                claims[i - 1].began
            },
            claims.get(i).map_or(Micros::MAX, |c| c.job.taken_at),
        )
    };
    let may_touch =
        |p: &Phantom, i: usize| touches_free_time((p.floor, p.ceiling), gap(i), &segments);
    let releases = |claim: &ClaimEvent| -> (bool, bool) {
        let events = events_of(&claim.job.lease);
        let released = |effect: fn(Effect) -> bool| {
            events
                .iter()
                .any(|e| e.call == HolderCall::Release && effect(e.effect))
        };
        (
            released(|e| matches!(e, Effect::Acted(..))),
            released(|e| matches!(e, Effect::Maybe(..))),
        )
    };
    // Attempts only claims with unknown outcomes explain, per gap: (gap, attempt).
    let mut phantom_attempts: Vec<(usize, i32)> = Vec::new();
    let mut extras = vec![0; claims.len() + 1];
    for i in 0..=claims.len() {
        let allowance = ctx.phantoms.iter().filter(|p| may_touch(p, i)).count() as i32;
        let bases: Vec<i32> = match i.checked_sub(1).map(|p| &claims[p]) {
            None => vec![0],
            Some(previous) => match releases(previous) {
                (true, _) => vec![previous.job.attempt - 1],
                (false, true) => vec![previous.job.attempt - 1, previous.job.attempt],
                (false, false) => vec![previous.job.attempt],
            },
        };
        // The attempt the next claim spent, or the job's final attempt.
        let (reached, spent) = match claims.get(i) {
            Some(next) => (next.job.attempt - 1, true),
            None => (job.attempt, false),
        };
        let fitting = bases
            .iter()
            .map(|base| reached - base)
            .filter(|extra| (0..=allowance).contains(extra))
            .min();
        match fitting {
            Some(extra) => {
                extras[i] = extra;
                let base = reached - extra;
                phantom_attempts.extend((base + 1..=reached).map(|attempt| (i, attempt)));
            }
            None => {
                let (low, high) = (
                    bases.iter().min().expect("a base"),
                    bases.iter().max().expect("a base") + allowance,
                );
                state_errors.push(if spent {
                    format!(
                        "job {id}: op {} claimed attempt {}, but the history before allows {}..={} ({allowance} claims with unknown outcomes could have taken it meanwhile)",
                        claims[i].op.index,
                        reached + 1,
                        low + 1,
                        high + 1
                    )
                } else {
                    format!(
                        "job {id} ends at attempt {}, but its claims and releases make {low}..={high} ({allowance} claims with unknown outcomes could have taken it meanwhile)",
                        job.attempt
                    )
                });
            }
        }
        if !spent {
            continue;
        }
        let attempt = claims[i].job.attempt;
        if attempt < 1 || attempt > job.max_attempts {
            state_errors.push(format!(
                "job {id}: op {} claimed attempt {attempt} of {}",
                claims[i].op.index, job.max_attempts
            ));
        }
    }
    let touching_any = ctx
        .phantoms
        .iter()
        .filter(|p| (0..=claims.len()).any(|i| may_touch(p, i)))
        .count();
    if phantom_attempts.len() > touching_any {
        state_errors.push(format!(
            "job {id}: {} attempts only claims with unknown outcomes explain, but only {touching_any} such claims could have taken it",
            phantom_attempts.len()
        ));
    }
    report.phantom_attempts += phantom_attempts.len();
    for &(i, attempt) in &phantom_attempts {
        let (lo, hi) = gap(i);
        let cancelled_under_it =
            i == claims.len() && job.state == "cancelled" && attempt == job.attempt;
        let reclaimed = job
            .errors
            .iter()
            .any(|e| e.is_reclaim() && e.attempt == attempt && lo < e.at && e.at < hi);
        if !cancelled_under_it && !reclaimed {
            state_errors.push(format!(
                "job {id}: attempt {attempt} was taken by no known claim, and no reclaim of it is recorded between {lo} and {hi}"
            ));
        }
    }

    // Reclaims: each `lease expired` entry comes from a lease of its attempt that may have run
    // out by then, never from one that was certainly still live.
    for entry in job.errors.iter().filter(|e| e.is_reclaim()) {
        let mut premature = None;
        let by_claim = claims.iter().enumerate().any(|(j, c)| {
            if c.job.attempt != entry.attempt || c.began >= entry.at {
                return false;
            }
            let next = claims.get(j + 1).map_or(Micros::MAX, |n| n.job.taken_at);
            let certainly_live = live[j].iter().any(|(s, e)| *s <= entry.at && entry.at < *e);
            if certainly_live {
                premature = Some(c.op.index);
            }
            entry.at < next && !certainly_live
        });
        let by_phantom = phantom_attempts.iter().any(|&(i, attempt)| {
            let (lo, hi) = gap(i);
            attempt == entry.attempt && lo < entry.at && entry.at < hi
        });
        if !by_claim && !by_phantom {
            state_errors.push(match premature {
                Some(op) => format!(
                    "job {id}: reclaimed ('{}', attempt {}) at {}, while the lease of claim op {op} was certainly live",
                    entry.error, entry.attempt, entry.at
                ),
                None => format!(
                    "job {id}: reclaimed ('{}', attempt {}) at {}, but no lease of that attempt can have run out then",
                    entry.error, entry.attempt, entry.at
                ),
            });
        }
    }

    // Answers that did nothing must have a reason in the history; every answer must be one
    // the call gives.
    for (i, claim) in claims.iter().enumerate() {
        let events = events_of(&claim.job.lease);
        for event in events {
            let Seen::Answered { outcome, after, .. } = &event.seen else {
                continue;
            };
            let (t, what) = (*after, format!("op {} ({:?})", event.op.index, event.call));
            if !event.call.answers().contains(&outcome.as_str()) {
                answers.push(format!(
                    "job {id}: {what} answered '{outcome}', which it never answers"
                ));
                continue;
            }
            match (outcome.as_str(), event.call) {
                ("lost", _) => {
                    report.judged += 1;
                    let newer_claim = claims[i + 1..].iter().any(|c| c.began < t);
                    let unknown_claim = extras[i + 1] > 0
                        && ctx
                            .phantoms
                            .iter()
                            .any(|p| p.floor < t && may_touch(p, i + 1));
                    let own_end = events.iter().any(|e| {
                        e.op.index < event.op.index
                            && e.call.ends_lease()
                            && e.effect.earliest().is_some_and(|at| at < t)
                    });
                    let final_reclaim = job.errors.iter().any(|e| {
                        e.error == "lease expired on the final attempt"
                            && e.attempt == claim.job.attempt
                            && e.at < t
                    });
                    // A reclaim gives a grouped job's slot away: its holder's heartbeat no
                    // longer makes it run.
                    let grouped_reclaim = event.call == HolderCall::Heartbeat
                        && job.group.is_some()
                        && job
                            .errors
                            .iter()
                            .any(|e| e.is_reclaim() && e.attempt == claim.job.attempt && e.at < t);
                    if !(newer_claim
                        || unknown_claim
                        || own_end
                        || final_reclaim
                        || grouped_reclaim)
                    {
                        answers.push(format!(
                            "job {id}: {what} answered 'lost', but lease {} (claim op {}) was still the job's: no newer claim, no settle under it and no final reclaim came before {t}",
                            claim.job.lease, claim.op.index
                        ));
                    }
                }
                ("cancelled", _) => {
                    report.judged += 1;
                    let cancel_before = history.cancels.iter().any(|(op, seen)| match seen {
                        Seen::Answered {
                            outcome, before, ..
                        } => outcome == "cancelled" && *before < t,
                        Seen::Unknown => op.server_floor.unwrap_or(Micros::MIN) < t,
                        Seen::NoEffect => false,
                    });
                    if job.state != "cancelled"
                        || job.lease != Some(claim.job.lease)
                        || !cancel_before
                    {
                        answers.push(format!(
                            "job {id}: {what} answered 'cancelled', but the job {} (lease {:?}) and {} cancel came before {t}",
                            if job.state == "cancelled" { "ends cancelled" } else { "never was cancelled" },
                            job.lease,
                            if cancel_before { "a" } else { "no" }
                        ));
                    }
                }
                ("queued", HolderCall::Fail { retry })
                    if !retry || claim.job.attempt >= job.max_attempts =>
                {
                    answers.push(format!(
                        "job {id}: {what} answered 'queued' on attempt {} of {} (retry {retry})",
                        claim.job.attempt, job.max_attempts
                    ));
                }
                ("failed", HolderCall::Fail { retry: true })
                    if claim.job.attempt < job.max_attempts =>
                {
                    answers.push(format!(
                        "job {id}: {what} answered 'failed' on attempt {} of {}, with a retry asked for",
                        claim.job.attempt, job.max_attempts
                    ));
                }
                _ => {}
            }
        }
    }

    // Errors: one entry per failure that took effect, with the attempt of the lease that
    // failed and stamped while the call ran, and otherwise only reclaims.
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
    for (position, entry) in job.errors.iter().enumerate() {
        let last = position + 1 == job.errors.len();
        let (attempt, error) = (entry.attempt, &entry.error);
        if error == "lease expired" {
            if attempt >= job.max_attempts {
                state_errors.push(format!(
                    "job {id}: 'lease expired' on attempt {attempt} of {} should have failed it",
                    job.max_attempts
                ));
            }
        } else if error == "lease expired on the final attempt" {
            if !last || attempt != job.max_attempts || job.state != "failed" {
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
                Some((event, claimed)) if event.effect.possible() => {
                    if attempt != *claimed {
                        state_errors.push(format!(
                            "job {id}: error of op {op} records attempt {attempt}, its lease's attempt was {claimed}"
                        ));
                    }
                    if !recorded.insert(op) {
                        state_errors.push(format!("job {id}: op {op}'s error is recorded twice"));
                    }
                    let (lo, hi) = (
                        event.effect.earliest().expect("possible"),
                        event.effect.latest().expect("possible"),
                    );
                    if entry.at < lo || entry.at > hi {
                        state_errors.push(format!(
                            "job {id}: error of op {op} is stamped {}, outside the call's [{lo}, {hi}] on the server's clock",
                            entry.at
                        ));
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
    let release_events: Vec<&HolderEvent> = all_events()
        .filter(|e| e.call == HolderCall::Release && e.effect.possible())
        .collect();
    if let Some(reason) = &job.release_reason {
        let from = reason
            .strip_prefix("release op ")
            .and_then(|n| n.parse::<usize>().ok());
        match from.and_then(|op| release_events.iter().find(|e| e.op.index == op)) {
            None => state_errors.push(format!(
                "job {id}: release_reason '{reason}' is not from a release of it"
            )),
            Some(named) => {
                let named_latest = named.effect.latest().expect("possible");
                if let Some(later) = release_events.iter().find(|e| {
                    e.acted_at()
                        .is_some_and(|(earliest, _)| earliest > named_latest)
                }) {
                    state_errors.push(format!(
                        "job {id}: release_reason '{reason}' is op {}'s, but op {} released it later",
                        named.op.index, later.op.index
                    ));
                }
            }
        }
    } else if let Some(event) = release_events.iter().find(|e| e.acted_at().is_some()) {
        state_errors.push(format!(
            "job {id}: op {} released it, but it has no release_reason",
            event.op.index
        ));
    }
    report.duplicated.extend(duplicated);
    report.state_errors.extend(state_errors);
    report.answers.extend(answers);
    Runs {
        live: live.into_iter().flatten().collect(),
        claims: claims.iter().map(|c| (c.began, c.job.taken_at)).collect(),
    }
}
