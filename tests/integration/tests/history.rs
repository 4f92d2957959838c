//! A history checker (issue 5, item 3; issue 16; issue 35): a seeded random workload records
//! every operation with its outcome, while backends are terminated, the server crashes and
//! restarts, the background worker is killed, transactions are prepared and ended later, and
//! clients vanish while their claims wait; a checker then judges the whole history, Jepsen
//! style.
//!
//! # The workload
//!
//! A private cluster runs with the background worker on (`TEST_SETTINGS`: reclaim every 100
//! ms, but `synchronous_commit = on`, so that an acknowledged commit survives a crash, and
//! `max_prepared_transactions` set), one queue `history` with short leases (each claim asks for
//! 300 ms, 500 ms or 1 s), three attempts and a backoff of 10–100 ms, and a second queue for the
//! vanishing clients. Against it run, each thread on its own connection (workers log in as a
//! `jobs_worker` that is also a `jobs_client`, producers as a `jobs_client`, the admin as a
//! `jobs_admin` role; only the fault injector, the resolver and the checks are superuser):
//!
//! * 2 producers: single and batch enqueues of jobs whose payload carries a unique tag, some
//!   with `max_attempts` 1 or 2, half of them in one of 8 groups (the queue's
//!   `group_concurrency` is 1, and 2 in a second, smaller run), 8% with one of 24 unique keys
//!   (half of those calls keeping the key 100 ms after success), paced to keep a few hundred
//!   jobs outstanding. 12% of the calls run inside `BEGIN ... PREPARE TRANSACTION`, and are
//!   committed (85%) or rolled back, by the producer at once or by the resolver up to 300 ms
//!   later;
//! * 8 workers, each holding up to 12 jobs at a time: claims of 1–5 jobs (waiting claims when
//!   they hold nothing), then per job a random plan: settle at once (complete, the batch
//!   complete, fail with retry, fail with `retry => false`, release), work for longer than the
//!   lease while heartbeating every third of it, stall past the lease and settle late (often
//!   after a reclaim: "done wins" or `lost`), or abandon the job; now and then a worker stalls
//!   outright past all its leases. 5% of the claims (never waiting) and 10% of the settles run
//!   inside a prepared transaction: a claim is committed (85%) or rolled back by its worker
//!   within 20 ms (its jobs are worked only once committed), a settle (80% committed) by the
//!   worker or the resolver. Early on, and now and then after, a worker lets a client vanish:
//!   a raw connection sends a waiting claim on the second queue for a kind of its own (nothing
//!   of it is queued), is seen asleep in it, and closes its socket without a Terminate
//!   message, as a killed process's would; the worker then enqueues a job of that kind, which
//!   wakes the orphaned claim, watches its backend end, reads the rows that name the claim's
//!   worker (its lease is 5 s: nothing it took can have moved on meanwhile), and claims the
//!   job itself;
//! * 1 admin: random cancels (of queued, running and finished jobs) and `pg_terminate_backend`
//!   of a random worker's or producer's backend every 50–250 ms. A client whose connection
//!   dies reconnects, keeps the leases it holds, and retries the settle call that failed once,
//!   as the README advises;
//! * 1 resolver: ends the prepared transactions handed to it when their time comes, all that
//!   are left once everything stops;
//! * 1 fault injector: at evenly spaced points of the production, in turn, a SIGTERM of the
//!   background worker (it alone restarts), a server crash (`pg_ctl stop -m immediate`, then a
//!   start with crash recovery), a clean restart (`pg_ctl restart -m fast`) and a SIGKILL of
//!   the background worker (the postmaster then ends every backend and restarts, as after any
//!   crash of a child). Before the three that end every backend it waits (up to 3 s) until a
//!   few transactions are prepared, so that the fault lands between their PREPARE and their
//!   end. Four faults by default; `PG_JOBS_HISTORY_FAULTS` sets how many.
//!
//! Each thread draws from its own generator seeded from `PG_JOBS_HISTORY_SEED` (printed), so the
//! decisions are reproducible; the interleaving is up to the scheduler. When every job has been
//! produced and every fault injected, the chaos stops and the workers drain both queues
//! (complete everything) until every job is finished. Then, beside the final rows, the history
//! reads what is still in `pg_prepared_xacts` (nothing may be: a lingering prepared
//! transaction holds its locks and rows), enqueues one job into every group (each must be
//! claimed at once: nothing of the group is open), and, once every `unique_for` has run out,
//! probes every unique key with an enqueue it rolls back (it must insert its own job exactly
//! when no row holds the key).
//!
//! # The record
//!
//! Every operation is recorded with its process, its invocation and completion on the client's
//! monotonic clock, the backend it was sent on, its arguments and its outcome: `Ok` with the
//! reply, `Failed` (a definite error: the statement ran in its own implicit transaction, which
//! rolled back) or `Unknown` (the connection died mid-call; it may or may not have committed).
//! Calls go over the simple query protocol, whose server commits before it reports the command
//! complete, so an `Ok` means committed. Each call also records the server's
//! `clock_timestamp()` before and after it (in the same simple query), so times are judged on
//! the server's clock alone (SPEC rule 10), never across client and server clocks. A process
//! whose call had an unknown outcome reads the server's clock on its new connection: the call
//! took effect, if at all, before that.
//!
//! A call inside a prepared transaction is recorded as `Prepared` (its gid and the call): `Ok`
//! means prepared, with the call's reply. Its gid's `COMMIT PREPARED` or `ROLLBACK PREPARED`
//! (the workload tries one ending per gid, maybe again after an unknown outcome, never the
//! other) is a `Finish` op between two readings of the server's clock. After an unknown
//! outcome of either, the process waits for the old backend to end and records an `Inspect`:
//! whether the gid is in `pg_prepared_xacts`, which settles it (a prepare that is not there
//! never took; an end whose gid is gone took). A vanished client's claim is one
//! `VanishedClaim` op with an unknown outcome, carrying what the worker saw: its backend, when
//! it was seen asleep, a server time read after its socket closed (`gone_by`), when its backend
//! was seen gone, and the jobs whose rows named its worker then.
//!
//! # The checker
//!
//! [`checker::check`] reports, in the categories of Jepsen's queue checker:
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
//! and, for this round's reliability work (issue 35):
//!
//! * **prepared**: a gid ended twice, never ended, seen prepared after its end, ended without
//!   having been prepared, or still prepared after the drain. Before anything else is judged,
//!   each prepared call becomes the plain call it carried: committed, with its reply and its
//!   effect somewhere between the call and the commit (a prepared claim's lease runs from the
//!   claim, whose row lock kept everyone else off the job until the commit; what the commit
//!   made visible counts as done only from the commit's answer); rolled back or never
//!   prepared, a call that did nothing, so a rolled-back enqueue whose job exists is
//!   unexpected and a rolled-back settle whose effect shows is a state error;
//! * **attempts spent by a gone client**: a job a vanished client's claim took (its row's
//!   `started_at`) after `gone_by`, or a backend still running long after its client was
//!   gone. Such a claim's unknown outcome explains attempts only until `gone_by`;
//! * **unique keys**: a duplicate answered by a job that no longer held the key by the time
//!   the enqueue began (a key held by nothing), a job inserted while another surely held its
//!   key, a row holding a key its state says it should not (or not holding one it should), a
//!   key stored otherwise than enqueued, a probe after the drain that inserted while a row
//!   holds the key;
//! * **stuck**: a group whose probe job no claim took after the drain, a key whose probe was
//!   answered by a job that does not hold it;
//!
//! and verifies each job's final row against its history:
//!
//! * the final state agrees with every acknowledged settle and cancel and is explained by some
//!   operation (or by a reclaim on the final attempt); a cancelled job never succeeded after
//!   its cancel;
//! * **every answer is judged**, those that did nothing too: a `lost` needs a reason that came
//!   before it (a newer claim, a settle under the same lease that may have acted, a reclaim on
//!   the final attempt, or a claim with an unknown outcome that took the job, as its attempts
//!   show); a `cancelled` needs a cancel before it, a job that ends cancelled, and that under
//!   this very lease (a cancel keeps the lease); a fail answers `queued` only with attempts
//!   left and a retry asked for; and no call answers what it never answers. A spurious `lost`
//!   or a broken "done wins" fails the history;
//! * **attempts** (rule 3) follow the claims, minus releases; a claim with an unknown outcome
//!   can add one attempt to a job only if it ran while that job may have been free (its
//!   server-time window meets a gap between the job's live leases), and every such attempt
//!   must end in a recorded reclaim (nobody knows its lease to settle it), unless a cancel
//!   ended the job under it;
//! * **errors**: every `fail op N` entry comes from a fail of this job that acted (or may
//!   have), with the attempt of the lease that failed and an `at` stamped while the call ran;
//!   every fail that acted is recorded once; every `lease expired` entry comes from a lease of
//!   its attempt that may have run out by then, never while the lease was certainly live;
//! * **leases**: a claim grants the lease it asked for (its `lease_until` lies within the
//!   requested length of the claim's own server-time window); the checker takes lease
//!   intervals from the requested length, not from what the claim reports;
//! * `result` and `release_reason` come from the calls that stored them (the reason from the
//!   latest release);
//! * **groups**: at no moment do more jobs of a group hold live leases than its concurrency,
//!   and at concurrency 1 no job is claimed surely before a claim of an earlier job of its
//!   group (runs start in enqueue order; nobody calls `jobs_retry` here).
//!
//! A lease is live from the server time after its claim until the requested length after the
//! server time before it (extended by acknowledged heartbeats, counted from the server time
//! before each), and until the earliest moment a settle under it, or a cancel, may have taken
//! effect: both ends are taken so that the interval is inside the real one, so an overlap is a
//! real one. Unknown outcomes are resolved where the final rows or later calls tell: a fail
//! records `fail op N` exactly when it acted, a single complete stores `{"op": N}` exactly when
//! it acted, and a settle did not act if a later call under its lease took effect; and a call
//! sent on a backend that `pg_terminate_backend` or a crash had already ended never ran (such a
//! call answering is reported too). Only unknown settles nothing resolves end a lease early.
//!
//! The checker is tested on synthetic histories (`history/synthetic.rs`): one or more per
//! anomaly it claims to find, and clean histories with reclaims, late "done wins" completes,
//! unknown outcomes, claims with unknown outcomes, prepared transactions ended across a crash
//! and from other sessions, and a vanished client's claim that took a job while its client
//! was still there, that must pass; and end to end by a
//! negative control: a small run in which a saboteur breaks the rules behind the extension's
//! back (putting running jobs back in the queue under live leases, deleting queued jobs) and
//! lets groups run four jobs at once must come out with duplicated and lost jobs and groups
//! over their concurrency.
//!
//! # Running it
//!
//! `cargo test -p pg_jobs_tests --test history` runs 2,000 jobs with four faults, and 1,000
//! with groups of two slots, and the negative control (`PG_JOBS_HISTORY_JOBS` and
//! `PG_JOBS_HISTORY_FAULTS` override the sizes): about half a minute on a 2-core machine. The
//! large history, 100,000 jobs with 20 faults, runs on demand with one command (after `cargo
//! pgrx install`, as for every integration test):
//!
//! ```sh
//! PG_JOBS_HISTORY_JOBS=100000 cargo test --release -p pg_jobs_tests --test history -- --ignored --nocapture
//! ```
//!
//! Every run prints the seed, the operations by kind and outcome, the final states, the
//! checker's counts, and a one-line summary: lost, run twice at once (or by a stale lease),
//! attempts spent by a gone client, groups or keys stuck, prepared transactions left or
//! unsquared, unique-key violations.

// A test target's root looks for modules beside itself; these live in `history/`.
#[path = "history/checker.rs"]
mod checker;
#[path = "history/synthetic.rs"]
mod synthetic;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use checker::{
    check_with_end, Call, Delivered, End, ErrorEntry, FinalJob, KeyProbe, Micros, Op, OpResult,
    Reply, Report, Took, Vanish, WORKERS,
};
use pg_jobs_tests::vanishing::VanishingClient;
use pg_jobs_tests::Rng;
use pg_jobs_tests::{column, settings_with, wait_until, Client, Cluster, NoTls};
use postgres::SimpleQueryMessage;
use uuid::Uuid;

/// The queue of the workload.
const QUEUE: &str = "history";
const PRODUCERS: usize = 2;
/// The admin's process number; the fault injector's and the resolver's are the next.
const ADMIN: usize = WORKERS + PRODUCERS;
const FAULTS: usize = ADMIN + 1;
/// The process that ends prepared transactions others handed over.
const RESOLVER: usize = FAULTS + 1;
/// The queue of the vanishing clients' claims: empty while they wait, so each sleeps until
/// the job its worker enqueues once the client is gone wakes it.
const VANISH_QUEUE: &str = "history-vanish";
/// The lease a vanishing client's claim asks for: long enough that what it took is still its
/// own when its worker reads the rows.
const VANISH_LEASE_MS: i64 = 5000;
/// Unique keys the producers give some jobs.
const KEYS: u64 = 24;
/// The queue's `max_attempts`; some jobs get 1 or 2 instead.
const MAX_ATTEMPTS: i32 = 3;
/// Lease lengths the workers ask for, in milliseconds.
const LEASES_MS: [i64; 3] = [300, 500, 1000];
/// Jobs one worker holds at most at once.
const HOLD_AT_MOST: usize = 12;
/// Open (queued or running) jobs the producers aim to stay under.
const OUTSTANDING: i64 = 300;
/// Groups the producers put half of the jobs in.
const GROUPS: u64 = 8;
/// The server's clock, as microseconds since the epoch.
const SERVER_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::int8";

// ---------------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------------

/// What the threads share.
struct Shared {
    /// The superuser's connection string (the fault injector, the pacer, set-up and checks).
    dsn: String,
    /// The processes' connection strings: workers log in as a `jobs_worker`, producers as a
    /// `jobs_client` and the admin as a `jobs_admin` role, as applications would.
    worker_dsn: String,
    producer_dsn: String,
    admin_dsn: String,
    start: Instant,
    next_op: AtomicUsize,
    /// Every thread stops.
    stop: AtomicBool,
    /// The producers are done and the faults injected: no more chaos, workers complete
    /// everything.
    draining: AtomicBool,
    /// The producers are done (the fault injector then injects what it has left at once).
    produced_all: AtomicBool,
    /// Jobs enqueued so far (acknowledged or not), for the fault injector's timing.
    produced: AtomicU64,
    /// The backend pid of each process (0: not connected).
    pids: Vec<AtomicI32>,
    /// Acknowledged job ids, for random cancels.
    known_ids: Mutex<Vec<i64>>,
    /// Cancels the producers asked the admin for: (when, id).
    cancel_requests: Mutex<VecDeque<(Instant, i64)>>,
    /// Prepared transactions handed to the resolver: (when, gid, commit).
    to_resolve: Mutex<Vec<(Instant, String, bool)>>,
    /// The resolver ends nothing while a fault that ends every backend is injected, so the
    /// transactions handed to it before the fault are ended after it.
    resolver_paused: AtomicBool,
    /// The server's port (the vanishing clients speak the protocol themselves).
    port: u16,
}

impl Shared {
    fn micros(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }
}

/// Records one process's operations, with the connection each was sent on.
struct Recorder {
    process: usize,
    shared: Arc<Shared>,
    ops: Vec<Op>,
    server_seen: Option<Micros>,
    /// The backend pid of the current connection, and when it was made.
    backend: i32,
    connected_at: u64,
}

impl Recorder {
    fn new(process: usize, shared: Arc<Shared>) -> Recorder {
        Recorder {
            process,
            shared,
            ops: Vec::new(),
            server_seen: None,
            backend: 0,
            connected_at: 0,
        }
    }

    /// Notes a new connection: its backend, and the server time read on it, which bounds
    /// from above when the calls with unknown outcomes before it can have taken effect (their
    /// backend had ended by then).
    fn connected(&mut self, backend: i32, server_now: Micros) {
        self.backend = backend;
        self.connected_at = self.shared.micros();
        self.server_seen = Some(self.server_seen.map_or(server_now, |s| s.max(server_now)));
        // A process reconnects right after a call whose connection died, so only its last
        // call can be waiting for a ceiling.
        if let Some(op) = self.ops.last_mut() {
            if matches!(op.result, OpResult::Unknown(_)) && op.server_ceiling.is_none() {
                op.server_ceiling = Some(server_now);
            }
        }
    }

    /// Runs `run` as operation `call` (it gets the op's index) and records it.
    fn record(
        &mut self,
        call: Call,
        run: impl FnOnce(usize) -> Result<Reply, postgres::Error>,
    ) -> &Op {
        self.record_op(|index| {
            let result = match run(index) {
                Ok(reply) => OpResult::Ok(reply),
                Err(e) => classify(&e),
            };
            (call, result)
        })
    }

    /// Runs `run` (it gets the op's index, and returns the call it made and how it ended) and
    /// records it.
    fn record_op(&mut self, run: impl FnOnce(usize) -> (Call, OpResult)) -> &Op {
        let index = self.shared.next_op.fetch_add(1, Ordering::Relaxed);
        let invoke = self.shared.micros();
        let server_floor = self.server_seen;
        let (call, result) = run(index);
        let complete = self.shared.micros();
        let latest = match &result {
            OpResult::Ok(
                Reply::Outcome { after, .. }
                | Reply::Outcomes { after, .. }
                | Reply::Ids { after, .. }
                | Reply::Claimed { after, .. }
                | Reply::Present { at: after, .. },
            ) => Some(*after),
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
            server_ceiling: None,
            backend: self.backend,
            connected_at: self.connected_at,
        });
        self.ops.last().expect("just pushed")
    }

    /// Takes the next op index and its invocation time, for an op recorded later with
    /// [`Recorder::push_reserved`] (one that spans calls recorded meanwhile).
    fn reserve(&mut self) -> (usize, u64, Option<Micros>) {
        (
            self.shared.next_op.fetch_add(1, Ordering::Relaxed),
            self.shared.micros(),
            self.server_seen,
        )
    }

    /// Records the op of a [`Recorder::reserve`]d slot, sent on backend `backend` (connected
    /// at client time `connected_at`), with an unknown outcome settled by server time
    /// `ceiling`.
    fn push_reserved(
        &mut self,
        (index, invoke, server_floor): (usize, u64, Option<Micros>),
        call: Call,
        result: OpResult,
        (backend, connected_at, ceiling): (i32, u64, Micros),
    ) {
        self.ops.push(Op {
            index,
            process: self.process,
            invoke,
            complete: self.shared.micros(),
            call,
            result,
            server_floor,
            server_ceiling: Some(ceiling),
            backend,
            connected_at,
        });
    }

    /// Records a fault the injector causes: `run` carries it out.
    fn record_fault(&mut self, call: Call, run: impl FnOnce()) {
        self.record(call, |_| {
            run();
            Ok(Reply::Done)
        });
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

/// The server's clock in a statement of its own, after the implicit transaction of the simple
/// query before it committed. The readings inside that query come before its commit, which may
/// come much later on a busy server: a claim that began between the two does not see the
/// enqueued jobs, so an enqueue's answer time (what the checker takes as "surely committed by")
/// is read here.
fn committed_now(client: &mut Client) -> Result<i64, postgres::Error> {
    Ok(int(&simple(client, &format!("SELECT {SERVER_NOW}"))?[0][0]))
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
    outcome_call_in(client, call_sql, None)
}

/// [`outcome_call`], inside a transaction prepared as `gid` when one is given.
fn outcome_call_in(
    client: &mut Client,
    call_sql: &str,
    gid: Option<&str>,
) -> Result<Reply, postgres::Error> {
    let rows = simple(
        client,
        &maybe_prepared(
            format!("SELECT {SERVER_NOW}; SELECT {call_sql}; SELECT {SERVER_NOW}"),
            gid,
        ),
    )?;
    Ok(Reply::Outcome {
        before: int(&rows[0][0]),
        outcome: text(&rows[1][0]),
        after: int(&rows[2][0]),
    })
}

/// `sql` (a simple query of one or more statements), inside `BEGIN ... PREPARE TRANSACTION
/// 'gid'` when `gid` is given.
fn maybe_prepared(sql: String, gid: Option<&str>) -> String {
    match gid {
        Some(gid) => format!("BEGIN; {sql}; PREPARE TRANSACTION '{gid}'"),
        None => sql,
    }
}

/// `call` as the history records it: inside a prepared transaction when `gid` is given.
fn prepared_call(call: Call, gid: Option<&str>) -> Call {
    match gid {
        Some(gid) => Call::Prepared {
            gid: gid.to_owned(),
            call: Box::new(call),
        },
        None => call,
    }
}

/// Ends the prepared transaction `gid` on `client` (`COMMIT PREPARED` when `commit`, else
/// `ROLLBACK PREPARED`), between two readings of the server's clock. An end whose outcome is
/// unknown is settled by `pg_prepared_xacts` once its backend has ended ([`inspect`]): still
/// there, the same end is sent again (never the other, so the gid's absence always means this
/// end took).
fn finish(rec: &mut Recorder, client: &mut Client, shared: &Shared, gid: &str, commit: bool) {
    let verb = if commit { "COMMIT" } else { "ROLLBACK" };
    loop {
        let op = rec.record(
            Call::Finish {
                gid: gid.to_owned(),
                commit,
            },
            |_| {
                // COMMIT PREPARED cannot run in a multi-statement query (an implicit block).
                let before = int(&simple(client, &format!("SELECT {SERVER_NOW}"))?[0][0]);
                client.batch_execute(&format!("{verb} PREPARED '{gid}'"))?;
                let after = int(&simple(client, &format!("SELECT {SERVER_NOW}"))?[0][0]);
                Ok(Reply::Outcome {
                    outcome: "ok".into(),
                    before,
                    after,
                })
            },
        );
        let (unknown, backend) = (matches!(op.result, OpResult::Unknown(_)), op.backend);
        if !unknown {
            return;
        }
        *client = connect(shared, rec);
        if !inspect(rec, client, shared, gid, backend) {
            return;
        }
    }
}

/// Whether `gid` is still prepared, read (as a [`Call::Inspect`]) once the backend `old`, which
/// sent a call on it with an unknown outcome, has ended: only then is the answer final.
fn inspect(rec: &mut Recorder, client: &mut Client, shared: &Shared, gid: &str, old: i32) -> bool {
    loop {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match simple(
                client,
                &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {old}"),
            ) {
                Ok(rows) if int(&rows[0][0]) == 0 => break,
                Ok(_) => thread::sleep(Duration::from_millis(5)),
                Err(_) => *client = connect(shared, rec),
            }
        }
        let op = rec.record(
            Call::Inspect {
                gid: gid.to_owned(),
            },
            |_| {
                let rows = simple(
                    client,
                    &format!(
                        "SELECT EXISTS (SELECT FROM pg_prepared_xacts WHERE gid = '{gid}')::text, {SERVER_NOW}"
                    ),
                )?;
                Ok(Reply::Present {
                    present: text(&rows[0][0]) == "true",
                    at: int(&rows[0][1]),
                })
            },
        );
        if let OpResult::Ok(Reply::Present { present, .. }) = op.result {
            return present;
        }
        *client = connect(shared, rec);
    }
}

/// After a call sent inside a prepared transaction `gid` (on `client`, whose backend was
/// `backend`): a definite error leaves the transaction block aborted (rolled back here); an
/// unknown outcome is settled by `pg_prepared_xacts` on a new connection; a prepared
/// transaction is then committed (`commit_percent` of the time) or rolled back, by the process
/// itself or, `handover_percent` of the time, by the resolver a little later.
#[allow(clippy::too_many_arguments)]
fn end_prepared(
    rec: &mut Recorder,
    client: &mut Client,
    shared: &Shared,
    rng: &mut Rng,
    gid: &str,
    (result, backend): (&OpResult, i32),
    commit_percent: u64,
    handover_percent: u64,
) {
    match result {
        OpResult::Failed(_) => {
            let _ = client.batch_execute("ROLLBACK");
            return;
        }
        OpResult::Unknown(_) => {
            *client = connect(shared, rec);
            if !inspect(rec, client, shared, gid, backend) {
                return;
            }
        }
        _ => {}
    }
    let commit = rng.chance(commit_percent);
    if rng.chance(handover_percent) {
        let at = Instant::now() + Duration::from_millis(rng.below(300));
        shared
            .to_resolve
            .lock()
            .unwrap()
            .push((at, gid.to_owned(), commit));
    } else {
        finish(rec, client, shared, gid, commit);
    }
}

/// Ends the prepared transactions handed over to it, each once its time has come (all at once
/// when everything stops), until everything stops and none is left.
fn resolve(process: usize, shared: Arc<Shared>) -> Vec<Op> {
    let mut rec = Recorder::new(process, shared.clone());
    let mut client = connect(&shared, &mut rec);
    loop {
        let stopping = shared.stop.load(Ordering::Relaxed);
        if !stopping && shared.resolver_paused.load(Ordering::Acquire) {
            thread::sleep(Duration::from_millis(2));
            continue;
        }
        let now = Instant::now();
        let due: Vec<(String, bool)> = {
            let mut queue = shared.to_resolve.lock().unwrap();
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut *queue)
                .into_iter()
                .partition(|(at, _, _)| stopping || *at <= now);
            *queue = later;
            due.into_iter()
                .map(|(_, gid, commit)| (gid, commit))
                .collect()
        };
        for (gid, commit) in &due {
            finish(&mut rec, &mut client, &shared, gid, *commit);
        }
        if stopping && due.is_empty() && shared.to_resolve.lock().unwrap().is_empty() {
            return rec.ops;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// A new connection, retried while the server restarts: the client, its backend pid and the
/// server's clock.
fn open(dsn: &str, who: &str) -> (Client, i32, Micros) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = Client::connect(dsn, NoTls).and_then(|mut client| {
            let rows = simple(
                &mut client,
                &format!("SELECT pg_backend_pid(), {SERVER_NOW}"),
            )?;
            Ok((client, int(&rows[0][0]) as i32, int(&rows[0][1])))
        });
        match attempt {
            Ok(connected) => return connected,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{who} cannot reconnect: {e}"),
        }
    }
}

/// A connection of a process, its backend pid published for the admin and noted by its
/// recorder.
fn connect(shared: &Shared, rec: &mut Recorder) -> Client {
    let dsn = match rec.process {
        p if p < WORKERS => &shared.worker_dsn,
        p if p < ADMIN => &shared.producer_dsn,
        ADMIN => &shared.admin_dsn,
        // The fault injector kills backends and the server: only a superuser may. The resolver
        // ends transactions that workers and producers prepared: only a superuser (or the role
        // that prepared it) may.
        _ => &shared.dsn,
    };
    let (client, pid, server_now) = open(dsn, &format!("process {}", rec.process));
    shared.pids[rec.process].store(pid, Ordering::Relaxed);
    rec.connected(pid, server_now);
    client
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
    /// A superuser connection for what the worker observes beside its calls (the backends of
    /// its vanishing clients, the rows they touched); no part of the history.
    observer: Option<Client>,
    /// Transactions it prepared, and clients it let vanish, so far.
    prepared: u64,
    vanished: u64,
    /// Claims so far (the drain alternates between the queues).
    claims: u64,
}

impl Worker {
    fn new(process: usize, shared: Arc<Shared>, seed: u64) -> Worker {
        let mut rec = Recorder::new(process, shared.clone());
        Worker {
            process,
            client: connect(&shared, &mut rec),
            rng: Rng::new(seed, process as u64),
            rec,
            shared,
            holding: Vec::new(),
            observer: None,
            prepared: 0,
            vanished: 0,
            claims: 0,
        }
    }

    fn run(mut self) -> Vec<Op> {
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if self.holding.iter().any(|h| h.next_at <= now) {
                self.act_on_due(now);
                continue;
            }
            // Every worker lets a client vanish early on, and now and then after.
            let first = self.vanished == 0 && self.claims >= 10;
            if !self.draining() && (first || self.rng.below(1000) < 4) {
                self.vanishing_claim();
                continue;
            }
            self.claims += 1;
            // The drain empties the vanishing clients' queue too.
            let queue = if self.draining() && self.claims.is_multiple_of(2) {
                VANISH_QUEUE
            } else {
                QUEUE
            };
            if self.holding.len() < HOLD_AT_MOST && self.claim(queue) > 0 {
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
            self.client = connect(&self.shared, &mut self.rec);
        }
    }

    /// A gid no other transaction of the history uses.
    fn gid(&mut self) -> String {
        self.prepared += 1;
        format!("w{}-{}", self.process, self.prepared)
    }

    /// Runs `sql` on the observer connection (made again when a restart took it).
    fn observe(&mut self, sql: &str) -> Vec<Vec<Option<String>>> {
        loop {
            let observer = self
                .observer
                .get_or_insert_with(|| open(&self.shared.dsn, "an observer").0);
            match simple(observer, sql) {
                Ok(rows) => return rows,
                Err(_) => self.observer = None,
            }
        }
    }

    /// A client killed while its claim waits (issue 35): a raw connection sends a waiting
    /// claim on the vanishing queue for a kind of its own (of which nothing is queued), is seen
    /// asleep in it, and closes its socket without a word. The worker then enqueues a job of
    /// that kind, which wakes the orphaned claim: it must notice its client is gone and end
    /// without taking it. The worker watches the backend end, reads the rows that name the claim's
    /// worker (its lease is long: nobody else can have taken them meanwhile), records it all
    /// as one [`Call::VanishedClaim`], and claims the job itself.
    fn vanishing_claim(&mut self) {
        self.vanished += 1;
        let name = format!("vanish-{}-{}", self.process, self.vanished);
        let Ok(mut raw) = VanishingClient::connect_as(self.shared.port, "history_worker", &name)
        else {
            // The server is restarting: no claim was sent.
            return;
        };
        let (pid, connected_at) = (raw.pid(), self.shared.micros());
        let slot = self.rec.reserve();
        let n = 1 + self.rng.below(3) as i32;
        let wait_ms = 1000 + self.rng.below(2000);
        let sent = raw.send(&format!(
            "SELECT id FROM jobs_claim('{VANISH_QUEUE}', worker => '{name}', n => {n},
                                       kinds => ARRAY['{name}'],
                                       lease => '{VANISH_LEASE_MS} milliseconds',
                                       wait => '{wait_ms} milliseconds')"
        ));
        let mut asleep_at = None;
        if sent.is_ok() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                let rows = self.observe(&format!(
                    "SELECT coalesce(wait_event_type = 'Extension', false)::text, {SERVER_NOW}
                       FROM pg_stat_activity WHERE pid = {pid} AND application_name = '{name}'"
                ));
                match rows.first() {
                    Some(row) if text(&row[0]) == "true" => {
                        asleep_at = Some(int(&row[1]));
                        break;
                    }
                    Some(_) => thread::sleep(Duration::from_millis(2)),
                    None => break,
                }
            }
        }
        raw.vanish();
        let gone_by = int(&self.observe(&format!("SELECT {SERVER_NOW}"))[0][0]);
        // The job that wakes the orphan.
        let tag = ((self.process as u64) << 40) | (1 << 39) | self.vanished;
        let client = &mut self.client;
        let op = self.rec.record(
            Call::Enqueue {
                tags: vec![tag],
                max_attempts: MAX_ATTEMPTS,
                unique: vec![None],
                unique_for: None,
            },
            |_| {
                let rows = simple(
                    client,
                    &format!(
                        "SELECT {SERVER_NOW};
                         SELECT jobs_enqueue('{VANISH_QUEUE}', '{{\"tag\": {tag}}}', kind => '{name}');
                         SELECT {SERVER_NOW}"
                    ),
                )?;
                Ok(Reply::Ids {
                    ids: vec![int(&rows[1][0])],
                    before: int(&rows[0][0]),
                    after: committed_now(client)?,
                })
            },
        );
        let unknown = matches!(op.result, OpResult::Unknown(_));
        self.reconnect_if(unknown);
        // The backend must end: it notices the closed socket when the job wakes it (or, at the
        // latest, when its wait runs out and it answers nobody).
        let deadline = Instant::now() + Duration::from_millis(wait_ms) + Duration::from_secs(30);
        let mut ended_by = None;
        while Instant::now() < deadline {
            let rows = self.observe(&format!(
                "SELECT count(*), {SERVER_NOW} FROM pg_stat_activity
                  WHERE pid = {pid} AND application_name = '{name}'"
            ));
            if int(&rows[0][0]) == 0 {
                ended_by = Some(int(&rows[0][1]));
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        let took = self
            .observe(&format!(
                "SELECT id, attempt, (extract(epoch FROM started_at) * 1000000)::int8
                   FROM jobs.job WHERE worker = '{name}' ORDER BY id"
            ))
            .iter()
            .map(|row| Took {
                id: int(&row[0]),
                attempt: int(&row[1]) as i32,
                started_at: int(&row[2]),
            })
            .collect();
        self.rec.push_reserved(
            slot,
            Call::VanishedClaim {
                n,
                lease_ms: VANISH_LEASE_MS,
                vanish: Vanish {
                    worker: name,
                    pid,
                    asleep_at,
                    gone_by,
                    ended_by,
                    took,
                },
            },
            OpResult::Unknown("the client vanished while its claim waited".into()),
            (pid, connected_at, ended_by.unwrap_or(gone_by)),
        );
        if self.holding.len() < HOLD_AT_MOST {
            self.claim(VANISH_QUEUE);
        }
    }

    /// Claims a few jobs of `queue` (waiting a little when it holds none; now and then inside
    /// a prepared transaction, committed or rolled back right after) and plans each.
    fn claim(&mut self, queue: &str) -> usize {
        let n = (self.rng.pick(&[1, 1, 2, 3, 5]) as usize).min(HOLD_AT_MOST - self.holding.len());
        let n = n as i32;
        let lease_ms = self.rng.pick(&LEASES_MS);
        let gid = (!self.draining() && self.rng.chance(5)).then(|| self.gid());
        let wait = if self.holding.is_empty() && gid.is_none() {
            100
        } else {
            0
        };
        let worker = format!("w{}", self.process);
        let client = &mut self.client;
        let call = prepared_call(Call::Claim { n, lease_ms }, gid.as_deref());
        let op = self.rec.record(call, |_| {
            let rows = simple(
                client,
                &maybe_prepared(
                    format!(
                        "SELECT {SERVER_NOW};
                         SELECT c.id, c.lease, c.attempt,
                                (extract(epoch FROM c.lease_until) * 1000000)::int8,
                                c.payload ->> 'tag'
                           FROM jobs_claim('{queue}', worker => '{worker}', n => {n},
                                           lease => '{lease_ms} milliseconds',
                                           wait => '{wait} milliseconds') c;
                         SELECT {SERVER_NOW}"
                    ),
                    gid.as_deref(),
                ),
            )?;
            let last = rows.len() - 1;
            let taken_at = int(&rows[last][0]);
            Ok(Reply::Claimed {
                jobs: rows[1..last]
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
                before: int(&rows[0][0]),
                after: taken_at,
            })
        });
        let mut claimed: Vec<Delivered> = match &op.result {
            OpResult::Ok(Reply::Claimed { jobs, .. }) => jobs.clone(),
            _ => Vec::new(),
        };
        let (result, backend) = (op.result.clone(), op.backend);
        match &gid {
            None => self.reconnect_if(matches!(result, OpResult::Unknown(_))),
            Some(gid) => {
                // A prepared claim whose reply was lost is rolled back: nobody knows what it
                // took.
                let commit = matches!(result, OpResult::Ok(_)) && self.rng.chance(85);
                match result {
                    OpResult::Failed(_) => {
                        let _ = self.client.batch_execute("ROLLBACK");
                    }
                    OpResult::Unknown(_) => {
                        self.client = connect(&self.shared, &mut self.rec);
                        if inspect(&mut self.rec, &mut self.client, &self.shared, gid, backend) {
                            finish(&mut self.rec, &mut self.client, &self.shared, gid, false);
                        }
                    }
                    _ => {
                        thread::sleep(Duration::from_millis(self.rng.below(20)));
                        finish(&mut self.rec, &mut self.client, &self.shared, gid, commit);
                    }
                }
                if !commit {
                    claimed.clear();
                }
            }
        }
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

    /// Settles one job, now and then inside a prepared transaction (ended by the worker or
    /// handed to the resolver); a plain call whose connection died is retried once on a new
    /// connection.
    fn settle(&mut self, job: &Holding) {
        let mut gid = (!self.draining() && self.rng.chance(10)).then(|| self.gid());
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
            let prepared = gid.take();
            let op = self
                .rec
                .record(prepared_call(call, prepared.as_deref()), |index| {
                    outcome_call_in(client, &sql(index), prepared.as_deref())
                });
            let (result, backend) = (op.result.clone(), op.backend);
            if self.settle_is_over(prepared, &result, backend) {
                return;
            }
        }
    }

    /// After a settle's attempt with `result`: ends it when it was prepared (as `prepared`), and
    /// reconnects when its answer was lost. True unless it is to be tried again: an unprepared
    /// settle whose answer is unknown.
    fn settle_is_over(
        &mut self,
        prepared: Option<String>,
        result: &OpResult,
        backend: i32,
    ) -> bool {
        if let Some(gid) = prepared {
            self.end_prepared(&gid, result, backend);
            return true;
        }
        let unknown = matches!(result, OpResult::Unknown(_));
        self.reconnect_if(unknown);
        !unknown
    }

    /// Ends a prepared settle: committed 80% of the time, by the worker or the resolver.
    fn end_prepared(&mut self, gid: &str, result: &OpResult, backend: i32) {
        end_prepared(
            &mut self.rec,
            &mut self.client,
            &self.shared,
            &mut self.rng,
            gid,
            (result, backend),
            80,
            50,
        );
    }

    fn complete_many(&mut self, jobs: &[Holding]) {
        let pairs: Vec<(i64, Uuid)> = jobs.iter().map(|j| (j.id, j.lease)).collect();
        let mut gid = (!self.draining() && self.rng.chance(10)).then(|| self.gid());
        for _try in 0..2 {
            let ids: Vec<String> = pairs.iter().map(|(id, _)| id.to_string()).collect();
            let leases: Vec<String> = pairs.iter().map(|(_, l)| format!("'{l}'")).collect();
            let client = &mut self.client;
            let prepared = gid.take();
            let op = self.rec.record(
                prepared_call(
                    Call::CompleteMany {
                        pairs: pairs.clone(),
                    },
                    prepared.as_deref(),
                ),
                |_| {
                    let rows = simple(
                        client,
                        &maybe_prepared(
                            format!(
                                "SELECT {SERVER_NOW};
                                 SELECT id, outcome FROM jobs_complete_batch(ARRAY[{}]::bigint[], ARRAY[{}]::uuid[]);
                                 SELECT {SERVER_NOW}",
                                ids.join(","),
                                leases.join(",")
                            ),
                            prepared.as_deref(),
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
            let (result, backend) = (op.result.clone(), op.backend);
            if self.settle_is_over(prepared, &result, backend) {
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
            client: open(&shared.dsn, "the pacer").0,
            open: 0,
            checked: Instant::now(),
        }
    }

    /// Waits (up to a second) while more than [`OUTSTANDING`] jobs are open; reconnects when
    /// a crash took its connection.
    fn pace(&mut self, shared: &Shared) {
        let give_up = Instant::now() + Duration::from_secs(1);
        loop {
            if self.checked.elapsed() >= Duration::from_millis(20) {
                match self.client.query_one(
                    "SELECT count(*) FROM jobs.job
                      WHERE queue = $1 AND state IN ('queued', 'running')",
                    &[&QUEUE],
                ) {
                    Ok(row) => self.open = row.get(0),
                    Err(_) => self.client = open(&shared.dsn, "the pacer").0,
                }
                self.checked = Instant::now();
            }
            if self.open <= OUTSTANDING || Instant::now() >= give_up {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Enqueues `jobs` tagged jobs, singly and in batches, paced by the number of open jobs; some
/// with a unique key (a few of them kept for 100 ms after success), and some inside a prepared
/// transaction that the producer or the resolver commits or rolls back.
fn produce(process: usize, shared: Arc<Shared>, seed: u64, jobs: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed, process as u64);
    let mut rec = Recorder::new(process, shared.clone());
    let mut client = connect(&shared, &mut rec);
    let mut pacer = Pacer::new(&shared);
    let mut produced = 0;
    while produced < jobs && !shared.stop.load(Ordering::Relaxed) {
        pacer.pace(&shared);
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
        // Half the jobs in one of a few groups.
        let groups: Vec<String> = tags
            .iter()
            .map(|_| {
                if rng.chance(50) {
                    format!("'g{}'", rng.below(GROUPS))
                } else {
                    "NULL".to_owned()
                }
            })
            .collect();
        // Some jobs with a unique key: the key space is small, so keys are often held.
        let unique: Vec<Option<String>> = tags
            .iter()
            .map(|_| rng.chance(8).then(|| format!("u{}", rng.below(KEYS))))
            .collect();
        // unique_for needs a unique key.
        let unique_for = (unique.iter().any(Option::is_some) && rng.chance(50)).then_some(100_000);
        let keys_sql: Vec<String> = unique
            .iter()
            .map(|key| key.as_ref().map_or("NULL".to_owned(), |k| format!("'{k}'")))
            .collect();
        let unique_for_sql = if unique_for.is_some() {
            "'100 milliseconds'"
        } else {
            "NULL"
        };
        let sql = if tags.len() == 1 {
            format!(
                "SELECT jobs_enqueue('{QUEUE}', '{{\"tag\": {}}}', max_attempts => {max_attempts}, group_key => {}, unique_key => {}, unique_for => {unique_for_sql})",
                tags[0], groups[0], keys_sql[0]
            )
        } else {
            let payloads: Vec<String> =
                tags.iter().map(|t| format!("'{{\"tag\": {t}}}'")).collect();
            format!(
                "SELECT id FROM jobs_enqueue_batch('{QUEUE}', ARRAY[{}]::jsonb[], max_attempts => {max_attempts}, group_keys => ARRAY[{}]::text[], unique_keys => ARRAY[{}]::text[], unique_for => {unique_for_sql})",
                payloads.join(","),
                groups.join(","),
                keys_sql.join(",")
            )
        };
        let gid = rng
            .chance(12)
            .then(|| format!("p{process}-{}", produced - count));
        let op = rec.record(
            prepared_call(
                Call::Enqueue {
                    tags: tags.clone(),
                    max_attempts,
                    unique,
                    unique_for,
                },
                gid.as_deref(),
            ),
            |_| {
                let rows = simple(
                    &mut client,
                    &maybe_prepared(
                        format!("SELECT {SERVER_NOW}; {sql}; SELECT {SERVER_NOW}"),
                        gid.as_deref(),
                    ),
                )?;
                let last = rows.len() - 1;
                // Unprepared, it commits after its last reading: read again once it has.
                let after = match gid {
                    Some(_) => int(&rows[last][0]),
                    None => committed_now(&mut client)?,
                };
                Ok(Reply::Ids {
                    ids: rows[1..last].iter().map(|r| int(&r[0])).collect(),
                    before: int(&rows[0][0]),
                    after,
                })
            },
        );
        if let Some(gid) = &gid {
            let (result, backend) = (op.result.clone(), op.backend);
            end_prepared(
                &mut rec,
                &mut client,
                &shared,
                &mut rng,
                gid,
                (&result, backend),
                85,
                50,
            );
            shared.produced.fetch_add(count, Ordering::Relaxed);
            continue;
        }
        match &op.result {
            OpResult::Ok(Reply::Ids { ids, .. }) => {
                shared.known_ids.lock().unwrap().extend(ids);
                for id in ids {
                    if rng.chance(3) {
                        let at = Instant::now() + Duration::from_millis(rng.below(400));
                        shared.cancel_requests.lock().unwrap().push_back((at, *id));
                    }
                }
            }
            OpResult::Unknown(_) => client = connect(&shared, &mut rec),
            _ => {}
        }
        shared.produced.fetch_add(count, Ordering::Relaxed);
    }
    rec.ops
}

/// Cancels jobs and terminates backends of workers and producers until the drain begins.
fn administer(process: usize, shared: Arc<Shared>, seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed, process as u64);
    let mut rec = Recorder::new(process, shared.clone());
    let mut client = connect(&shared, &mut rec);
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
                client = connect(&shared, &mut rec);
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
                let op = rec.record(
                    Call::Terminate {
                        process: target,
                        pid,
                    },
                    |_| {
                        let rows =
                            simple(&mut client, &format!("SELECT pg_terminate_backend({pid})"))?;
                        Ok(Reply::Terminated(text(&rows[0][0]) == "t"))
                    },
                );
                if matches!(op.result, OpResult::Unknown(_)) {
                    client = connect(&shared, &mut rec);
                }
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
    rec.ops
}

/// A fault the injector causes.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `pg_terminate_backend` of the background worker: it alone exits and comes back.
    TermWorker,
    /// `pg_ctl stop -m immediate`, then a start: crash recovery.
    Crash,
    /// SIGKILL of the background worker: the postmaster ends every backend and restarts.
    KillWorker,
    /// `pg_ctl restart -m fast`: a clean shutdown and a start.
    Restart,
}

/// `count` faults at evenly spaced points of the production of `jobs` jobs, in turn each
/// kind.
fn fault_plan(jobs: u64, count: u64) -> Vec<(u64, Fault)> {
    const KINDS: [Fault; 4] = [
        Fault::TermWorker,
        Fault::Crash,
        Fault::Restart,
        Fault::KillWorker,
    ];
    (0..count)
        .map(|k| {
            (
                jobs * (k + 1) / (count + 1),
                KINDS[k as usize % KINDS.len()],
            )
        })
        .collect()
}

/// The pid of the background worker, waiting while it is being restarted.
fn worker_pid(client: &mut Client) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = simple(
            client,
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_jobs worker'",
        )
        .expect("find the background worker");
        if let Some(row) = rows.first() {
            return int(&row[0]) as i32;
        }
        assert!(
            Instant::now() < deadline,
            "the background worker did not come back within 30 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Injects the faults of `plan` as the production reaches each point (all that are left,
/// once the producers are done).
fn inject_faults(shared: Arc<Shared>, cluster: Arc<Cluster>, plan: Vec<(u64, Fault)>) -> Vec<Op> {
    let mut rec = Recorder::new(FAULTS, shared.clone());
    let mut client = connect(&shared, &mut rec);
    for (at, fault) in plan {
        while shared.produced.load(Ordering::Relaxed) < at
            && !shared.produced_all.load(Ordering::Relaxed)
        {
            if shared.stop.load(Ordering::Relaxed) {
                return rec.ops;
            }
            thread::sleep(Duration::from_millis(5));
        }
        let ends_every_backend = !matches!(fault, Fault::TermWorker);
        if ends_every_backend {
            // A fault that ends every backend lands between some PREPARE TRANSACTION and its
            // end. Most are ended at once, by calls that may well come before the fault or meet
            // it (then their end is settled by pg_prepared_xacts, which cannot tell on which
            // side of the fault it took). So the resolver is paused until the server is back,
            // and the fault waits (a little) for a transaction handed to it: that one is ended
            // after the fault, whatever the timing.
            shared.resolver_paused.store(true, Ordering::Release);
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && shared.to_resolve.lock().unwrap().is_empty() {
                thread::sleep(Duration::from_millis(2));
            }
        }
        match fault {
            Fault::TermWorker => {
                let pid = worker_pid(&mut client);
                rec.record_fault(Call::KillWorker { sigkill: false }, || {
                    let rows = simple(&mut client, &format!("SELECT pg_terminate_backend({pid})"))
                        .expect("terminate the background worker");
                    assert_eq!(text(&rows[0][0]), "t", "the worker {pid} was not signalled");
                });
            }
            Fault::Crash => {
                // Complete once the server is back: every backend of before is gone then.
                rec.record_fault(Call::Crash, || {
                    cluster.crash();
                    cluster.restart();
                    client = open(&shared.dsn, "the fault injector").0;
                });
            }
            Fault::Restart => {
                rec.record_fault(Call::Restart, || {
                    cluster.restart_fast();
                    client = open(&shared.dsn, "the fault injector").0;
                });
            }
            Fault::KillWorker => {
                let pid = worker_pid(&mut client);
                rec.record_fault(Call::KillWorker { sigkill: true }, || {
                    // SAFETY: sends a signal to a process of the cluster this test started.
                    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
                    // The postmaster ends our backend with all the others, waits for them all
                    // to exit, and only then accepts connections again.
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while client.simple_query("SELECT 1").is_ok() {
                        assert!(
                            Instant::now() < deadline,
                            "the postmaster did not restart after the worker's SIGKILL"
                        );
                        thread::sleep(Duration::from_millis(5));
                    }
                    client = open(&shared.dsn, "the fault injector").0;
                });
            }
        }
        shared.resolver_paused.store(false, Ordering::Release);
    }
    rec.ops
}

/// Reads every job of the queue at the end.
fn final_jobs(client: &mut Client) -> Vec<FinalJob> {
    client
        .query(
            "SELECT id, (payload ->> 'tag')::int8, state::text, attempt, max_attempts,
                    (SELECT coalesce(jsonb_agg(jsonb_build_array(
                                (e ->> 'attempt')::int, e ->> 'error',
                                (extract(epoch FROM (e ->> 'at')::timestamptz) * 1000000)::int8)
                              ORDER BY n), '[]')
                       FROM jsonb_array_elements(j.errors) WITH ORDINALITY AS x(e, n))::text,
                    (result ->> 'op')::int8, release_reason, lease, group_key,
                    unique_key, unique_hold,
                    (extract(epoch FROM unique_for) * 1000000)::int8,
                    (extract(epoch FROM finished_at) * 1000000)::int8
               FROM jobs.job j WHERE queue = ANY ($1) ORDER BY id",
            &[&vec![QUEUE, VANISH_QUEUE]],
        )
        .expect("read the final jobs")
        .iter()
        .map(|row| {
            let errors: Vec<(i32, String, Micros)> =
                serde_json::from_str(row.get::<_, &str>(5)).expect("errors is JSON");
            FinalJob {
                id: row.get(0),
                tag: row.get::<_, Option<i64>>(1).map(|t| t as u64),
                state: row.get(2),
                attempt: row.get(3),
                max_attempts: row.get(4),
                errors: errors
                    .into_iter()
                    .map(|(attempt, error, at)| ErrorEntry { attempt, error, at })
                    .collect(),
                result_op: row.get::<_, Option<i64>>(6).map(|op| op as usize),
                release_reason: row.get(7),
                lease: row.get(8),
                group: row.get(9),
                unique_key: row.get(10),
                unique_hold: row.get(11),
                unique_for: row.get(12),
                finished_at: row.get(13),
            }
        })
        .collect()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

/// The history cluster's settings: the test settings, but with commits durable when they
/// return, or a crash would take acknowledged work with it (fsync stays off: a process crash
/// keeps what was written to the kernel).
fn history_settings() -> Vec<&'static str> {
    settings_with(&[
        "synchronous_commit = on",
        // Producers and workers prepare some of their calls' transactions.
        "max_prepared_transactions = 100",
    ])
}

/// Runs the workload for `jobs` jobs with `faults` faults, its groups running
/// `group_concurrency` jobs at once, checks its history and returns the report and the jobs in
/// impossible states.
fn run_history(
    jobs: u64,
    faults: u64,
    sabotage: bool,
    group_concurrency: usize,
) -> (Report, Vec<String>) {
    let seed = env_u64("PG_JOBS_HISTORY_SEED").unwrap_or(0x5EED_2026);
    eprintln!(
        "history: {jobs} jobs, {faults} faults, groups of concurrency {group_concurrency}, seed {seed} (set PG_JOBS_HISTORY_SEED={seed} to repeat its decisions)"
    );
    let cluster = Arc::new(Cluster::start("history", &history_settings()));
    cluster
        .connect()
        .batch_execute(&format!(
            "CREATE EXTENSION pg_jobs;
             CREATE ROLE history_worker LOGIN;   GRANT jobs_worker TO history_worker;
             -- A worker enqueues the job that wakes its vanished client's claim.
             GRANT jobs_client TO history_worker;
             CREATE ROLE history_producer LOGIN; GRANT jobs_client TO history_producer;
             CREATE ROLE history_admin LOGIN;    GRANT jobs_admin TO history_admin;
             -- The admin also ends workers' and producers' backends (none is a superuser).
             GRANT pg_signal_backend TO history_admin;
             SELECT jobs_create_queue('{QUEUE}', lease => '500 milliseconds',
                                      max_attempts => {MAX_ATTEMPTS}, backoff_base => '10 milliseconds',
                                      backoff_max => '100 milliseconds', jitter => 0.1,
                                      group_concurrency => {group_concurrency});
             SELECT jobs_create_queue('{VANISH_QUEUE}', lease => '500 milliseconds',
                                      max_attempts => {MAX_ATTEMPTS}, backoff_base => '10 milliseconds',
                                      backoff_max => '100 milliseconds');"
        ))
        .expect("set up the queues");
    let shared = Arc::new(Shared {
        dsn: cluster.dsn("postgres"),
        worker_dsn: cluster.dsn_as("history_worker", "postgres"),
        producer_dsn: cluster.dsn_as("history_producer", "postgres"),
        admin_dsn: cluster.dsn_as("history_admin", "postgres"),
        start: Instant::now(),
        next_op: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        produced_all: AtomicBool::new(false),
        produced: AtomicU64::new(0),
        pids: (0..=RESOLVER).map(|_| AtomicI32::new(0)).collect(),
        known_ids: Mutex::new(Vec::new()),
        cancel_requests: Mutex::new(VecDeque::new()),
        to_resolve: Mutex::new(Vec::new()),
        resolver_paused: AtomicBool::new(false),
        port: cluster.port,
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
            Worker::new(process, shared, seed).run()
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
        thread::spawn(move || administer(ADMIN, shared, seed))
    };
    let resolver = {
        let shared = shared.clone();
        thread::spawn(move || resolve(RESOLVER, shared))
    };
    let injector = {
        let (shared, cluster) = (shared.clone(), cluster.clone());
        let plan = fault_plan(jobs, faults);
        thread::spawn(move || inject_faults(shared, cluster, plan))
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
    shared.produced_all.store(true, Ordering::Relaxed);
    ops.extend(injector.join().expect("the fault injector panicked"));
    // The chaos stops; the workers complete whatever is left.
    shared.draining.store(true, Ordering::Relaxed);
    ops.extend(admin_thread.join().expect("the admin panicked"));
    if let Some(saboteur) = saboteur {
        let (cut, deleted) = saboteur.join().expect("the saboteur panicked");
        eprintln!(
            "history: the saboteur requeued {cut} jobs under live leases and deleted {deleted} queued jobs"
        );
    }
    let mut admin = cluster.connect();
    let drain = Duration::from_secs(120);
    let drained = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(drain, "the workers to finish every job", || {
            let open: i64 = admin
                .query_one(
                    "SELECT count(*) FROM jobs.job
                      WHERE queue = ANY ($1) AND state IN ('queued', 'running')",
                    &[&vec![QUEUE, VANISH_QUEUE]],
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
    ops.extend(resolver.join().expect("the resolver panicked"));
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

    let now: i64 = admin
        .query_one(&format!("SELECT {SERVER_NOW}"), &[])
        .expect("read the server's clock")
        .get(0);
    let finals = final_jobs(&mut admin);
    let broken = pg_jobs_tests::impossible_states(&mut admin).expect("check for impossible states");
    let end = End {
        now: Some(now),
        prepared_left: column(
            &mut admin,
            "SELECT gid FROM pg_prepared_xacts ORDER BY gid",
            &[],
        ),
        group_probes: probe_groups(&mut admin),
        key_probes: probe_keys(&mut admin),
    };
    let report = check_with_end(&ops, &finals, &end, group_concurrency);
    report.print();
    print_deadlocks(&cluster.log());
    eprintln!(
        "history summary: seed {seed}, {jobs} jobs, {faults} faults, {:.1?}: lost {}, run twice at once or by a stale lease {}, attempts spent by a gone client {} (of {} vanished clients), groups or keys stuck {}, prepared transactions left or unsquared {} (of {} prepared, {} across a crash or restart), unique-key violations {}, {}",
        shared.start.elapsed(),
        report.lost.len(),
        report.duplicated.len(),
        report.gone.len(),
        report.vanished.0,
        report.stuck.len(),
        report.prepared.len(),
        report.prepared_counts.prepared,
        report.prepared_counts.across_restarts,
        report.unique.len(),
        if report.is_clean() && broken.is_empty() { "clean" } else { "NOT CLEAN" }
    );
    (report, broken)
}

/// After the drain, with nothing of any group open: a job enqueued into each group must be
/// claimable at once (a group whose slot a cache still thinks taken, or whose head it lost,
/// would keep its job). The probe jobs are claimed and completed; they come after the final
/// rows were read, so the checker never sees them as jobs of the history.
fn probe_groups(client: &mut Client) -> Vec<(String, bool)> {
    let groups: Vec<String> = (0..GROUPS).map(|g| format!("g{g}")).collect();
    for group in &groups {
        client
            .execute(
                "SELECT jobs_enqueue($1, jsonb_build_object('probe', $2::text), group_key => $2)",
                &[&QUEUE, group],
            )
            .expect("enqueue a group probe");
    }
    let mut claimed: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while claimed.len() < groups.len() && Instant::now() < deadline {
        let rows = client
            .query(
                "SELECT c.id, c.lease, c.payload ->> 'probe' FROM jobs_claim($1, n => 100, wait => '1 second') c",
                &[&QUEUE],
            )
            .expect("claim the group probes");
        for row in rows {
            let (id, lease, group): (i64, Uuid, Option<String>) =
                (row.get(0), row.get(1), row.get(2));
            client
                .execute("SELECT jobs_complete($1, $2)", &[&id, &lease])
                .expect("complete a group probe");
            claimed.extend(group);
        }
    }
    groups
        .into_iter()
        .map(|group| {
            let taken = claimed.contains(&group);
            (group, taken)
        })
        .collect()
}

/// After the drain, once every key's `unique_for` has run out: one enqueue per unique key,
/// rolled back, answering whether it inserted its own job or which job it found holding the
/// key.
fn probe_keys(client: &mut Client) -> Vec<KeyProbe> {
    // The longest unique_for of the workload is 100 ms.
    thread::sleep(Duration::from_millis(200));
    (0..KEYS)
        .map(|k| {
            let key = format!("u{k}");
            let mut tx = client.transaction().expect("begin a key probe");
            let before: i64 = tx
                .query_one(&format!("SELECT {SERVER_NOW}"), &[])
                .expect("read the clock")
                .get(0);
            let id: i64 = tx
                .query_one(
                    "SELECT jobs_enqueue($1, '{\"probe\": true}', unique_key => $2)",
                    &[&QUEUE, &key],
                )
                .expect("enqueue a key probe")
                .get(0);
            let inserted: bool = tx
                .query_one(
                    "SELECT coalesce(payload ? 'probe', false) FROM jobs.job WHERE id = $1",
                    &[&id],
                )
                .expect("read the probe's answer")
                .get(0);
            let after: i64 = tx
                .query_one(&format!("SELECT {SERVER_NOW}"), &[])
                .expect("read the clock")
                .get(0);
            tx.rollback().expect("roll the key probe back");
            KeyProbe {
                key,
                before,
                after,
                holder: (!inserted).then_some(id),
            }
        })
        .collect()
}

/// Prints the server log's reports of deadlocks (the error, which processes waited for what,
/// and the statements), since the cluster and its log are gone once the test binary exits.
fn print_deadlocks(log: &str) {
    let lines: Vec<&str> = log.lines().collect();
    let starts: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("deadlock detected"))
        .collect();
    if starts.is_empty() {
        return;
    }
    eprintln!(
        "server log: {} deadlocks detected; the first ones:",
        starts.len()
    );
    for &start in starts.iter().take(5) {
        let end = (start + 1..lines.len())
            .find(|&i| {
                !lines[i].starts_with('\t')
                    && !lines[i].contains("DETAIL")
                    && !lines[i].contains("HINT")
                    && !lines[i].contains("CONTEXT")
                    && !lines[i].contains("STATEMENT")
            })
            .unwrap_or(lines.len());
        for line in &lines[start..end] {
            eprintln!("    {line}");
        }
    }
}

/// Breaks the rules behind the extension's back, as a buggy extension would, until the drain
/// begins: puts running jobs with live leases back in the queue (a premature reclaim: another
/// worker claims them while their holders still hold them) and deletes queued jobs (lost
/// jobs). Returns how many of each it did. Only the negative control uses it.
fn sabotage_rules(shared: &Shared) -> (usize, usize) {
    let mut client = Client::connect(&shared.dsn, NoTls).expect("connect the saboteur");
    // Groups run four jobs at once while the checker is told one.
    client
        .execute(
            "SELECT jobs_create_queue($1, group_concurrency => 4)",
            &[&QUEUE],
        )
        .expect("widen the groups");
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
fn assert_clean_and_exercised(jobs: u64, faults: u64, report: &Report, broken: &[String]) {
    assert!(
        broken.is_empty(),
        "jobs in impossible states:\n{}",
        broken.join("\n")
    );
    assert!(
        report.is_clean(),
        "the history checker found anomalies; see the report above"
    );
    let answered = |kind: &str, outcome: &str| report.answered(kind, outcome);
    let (acked, failed, unknown) = report.enqueues;
    assert_eq!(
        acked + failed + unknown,
        jobs as usize + report.vanished.0,
        "every job was enqueued by one call (failed: calls that never ran), and one more woke each vanished client's claim"
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
    assert!(report.judged > 0, "no answer that did nothing was judged");
    assert!(report.grouped.0 > 0, "no job was in a group");
    let injected = [
        "server crash",
        "server restart",
        "worker SIGKILL",
        "worker SIGTERM",
    ]
    .iter()
    .map(|kind| answered(kind, "ok"))
    .sum::<usize>();
    assert_eq!(injected as u64, faults, "every planned fault was injected");
    let prepared = report.prepared_counts;
    assert!(
        prepared.committed > 0 && prepared.rolled_back > 0,
        "no prepared transaction was committed, or none rolled back"
    );
    if faults >= 2 {
        assert!(
            prepared.across_restarts > 0,
            "no prepared transaction was ended after a crash or restart that came after its prepare"
        );
    }
    let (vanished, asleep, ended, _) = report.vanished;
    assert!(
        asleep > 0,
        "no vanishing client's claim was seen asleep before its socket closed"
    );
    assert_eq!(ended, vanished, "every vanished client's backend ended");
    assert!(
        report.unique_counts.1 > 0,
        "no enqueue was answered by a job holding its unique key"
    );
}

/// Faults of a run of `jobs` jobs: `PG_JOBS_HISTORY_FAULTS`, else four (one of each kind),
/// and one more per 5,000 jobs beyond 20,000.
fn faults_for(jobs: u64) -> u64 {
    env_u64("PG_JOBS_HISTORY_FAULTS").unwrap_or((jobs / 5_000).max(4))
}

/// A random history of `PG_JOBS_HISTORY_JOBS` jobs (else `default_jobs`), with the faults for
/// that many, in groups of `group_concurrency` slots: nothing lost, duplicated or unexpected, and
/// every rule exercised.
fn runs_clean(default_jobs: u64, group_concurrency: usize) {
    let jobs = env_u64("PG_JOBS_HISTORY_JOBS").unwrap_or(default_jobs);
    let faults = faults_for(jobs);
    let (report, broken) = run_history(jobs, faults, false, group_concurrency);
    assert_clean_and_exercised(jobs, faults, &report, &broken);
}

#[test]
fn a_random_history_has_no_lost_duplicated_or_unexpected_jobs() {
    runs_clean(2_000, 1);
}

/// The same workload with groups of two slots: never three of a group's jobs at once.
#[test]
fn a_random_history_with_groups_of_two_slots_keeps_them() {
    runs_clean(1_000, 2);
}

/// The large history, on demand:
/// `PG_JOBS_HISTORY_JOBS=100000 cargo test --release -p pg_jobs_tests --test history -- --ignored --nocapture`
#[test]
#[ignore = "large: run on demand (see the module documentation)"]
fn a_large_random_history_has_no_lost_duplicated_or_unexpected_jobs() {
    runs_clean(100_000, 1);
}

/// The negative control: the same workload against a queue whose rules a saboteur breaks
/// (premature reclaims, deleted jobs) must be reported as duplicated and lost.
#[test]
fn the_checker_catches_a_sabotaged_queue() {
    let (report, _) = run_history(1000, 0, true, 1);
    assert!(
        !report.duplicated.is_empty(),
        "jobs requeued under live leases were not reported as duplicated"
    );
    assert!(
        !report.lost.is_empty(),
        "deleted jobs were not reported as lost"
    );
    assert!(
        !report.groups.is_empty(),
        "groups running four jobs at once were not reported at concurrency 1"
    );
}
