//! Exclusive claim under concurrency (SPEC rule 1), over real connections to a real server.
//!
//! * [`concurrent_claimers_get_every_job_exactly_once_without_waiting`]: eight sessions drain
//!   5,000 jobs with claims of 1 and of 10, some holding their claim transaction open for
//!   twice `lock_timeout` (rule 9 lets a claim join the caller's transaction). Every claim is
//!   recorded; the test proves each job was claimed once, under one lease, and succeeded once,
//!   and that no claimer's session ever waited on a lock another claimer held: not in a claim
//!   (rule 1: skip, never wait) and not while completing its own jobs (a claim must not lock
//!   rows it does not hand out). Each session runs with a small `lock_timeout`, and a sampler
//!   watches `pg_stat_activity` / `pg_locks` for lock waits of the test's sessions all along.
//! * [`claims_racing_reclaim_and_cancel_never_complete_a_job_twice`]: short leases, workers that
//!   sometimes sleep past them, `jobs_reclaim()` in a loop and random cancels. No job succeeds
//!   twice or under two leases, a success only ever comes from the job's latest lease, and every
//!   job ends in one terminal state that agrees with what its callers were told.
//! * [`a_claim_reads_on_past_more_held_jobs_than_it_reads_at_first`]: a claim that meets a run
//!   of jobs another open transaction holds, longer than the few extra candidates it reads at
//!   first, reads on past them and still returns the next jobs in claim order.
//! * [`the_lock_sampler_and_lock_timeout_catch_a_blocked_session`]: a positive control showing
//!   that the two wait detectors above do fire when a session of the test blocks on a row lock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use pg_jobs_tests::Rng;
use pg_jobs_tests::{column, jobs_in_state, scalar, wait_until, Client, Cluster};
use postgres::error::SqlState;
use uuid::Uuid;

/// How long a claimer may wait for a heavyweight lock before its statement fails.
const LOCK_TIMEOUT: Duration = Duration::from_millis(50);

/// A safety net so that a misbehaving extension fails the test instead of hanging it.
const GIVE_UP_AFTER: Duration = Duration::from_secs(240);

/// Opens a session of the test, named `application_name` so the sampler can find it.
fn connect_as(application_name: &str) -> Client {
    let mut client = Cluster::shared().connect();
    client
        .batch_execute(&format!("SET application_name = '{application_name}'"))
        .expect("set application_name");
    client
}

/// Renders an error with its SQLSTATE, for failure messages.
fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}

/// The first few items of a list, for failure messages that stay readable.
fn first_few<T: std::fmt::Debug>(items: &[T]) -> String {
    format!("{:#?}", &items[..items.len().min(5)])
}

/// Whether the error is a statement cancelled by `lock_timeout` (55P03).
fn is_lock_timeout(error: &postgres::Error) -> bool {
    error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

// ---------------------------------------------------------------------------------------------
// The lock-wait sampler
// ---------------------------------------------------------------------------------------------

/// One observation of a session of the test waiting for a heavyweight lock.
#[derive(Clone, Debug)]
struct LockWait {
    pid: i32,
    /// `pg_stat_activity.wait_event` (`tuple`, `transactionid`, `relation`, `extend`, ...).
    wait_event: Option<String>,
    /// `pg_locks.locktype` of the lock it has not been granted, if pg_locks showed one.
    lock_type: Option<String>,
    query: String,
    /// The sessions it waited for (`pg_blocking_pids`): application name, state and query.
    blockers: Option<String>,
}

impl LockWait {
    /// A wait for a relation extension lock: the storage layer allocating a new page, which
    /// every inserting session briefly takes. It is no other session's row.
    fn is_relation_extension(&self) -> bool {
        self.wait_event.as_deref() == Some("extend") || self.lock_type.as_deref() == Some("extend")
    }

    /// Whether the waiting statement was a claim (as opposed to a settle call).
    fn in_claim(&self) -> bool {
        self.query.contains("jobs_claim")
    }
}

/// What the sampler saw.
#[derive(Default)]
struct Sampled {
    polls: u64,
    /// Every backend that carried the test's application_name at some poll.
    pids: HashSet<i32>,
    waits: Vec<LockWait>,
}

/// Polls `pg_stat_activity` and `pg_locks` from its own session for lock waits of every
/// backend named `application_name`, until stopped.
struct LockSampler {
    stop: Arc<AtomicBool>,
    sampled: Arc<Mutex<Sampled>>,
    handle: JoinHandle<()>,
}

impl LockSampler {
    fn start(application_name: &str) -> LockSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let sampled = Arc::new(Mutex::new(Sampled::default()));
        let watched = application_name.to_owned();
        let mut client = connect_as(&format!("{application_name}-sampler"));
        let handle = {
            let (stop, sampled) = (stop.clone(), sampled.clone());
            thread::spawn(move || {
                let poll = client
                    .prepare(
                        "SELECT a.pid, a.wait_event_type, a.wait_event, l.locktype,
                                left(a.query, 200),
                                CASE WHEN a.wait_event_type = 'Lock' OR l.pid IS NOT NULL THEN
                                    (SELECT string_agg(format('%s (pid %s, %s): %s',
                                                b.application_name, b.pid, b.state,
                                                left(b.query, 120)), '; ')
                                       FROM pg_stat_activity b
                                      WHERE b.pid = ANY (pg_blocking_pids(a.pid)))
                                END
                           FROM pg_stat_activity a
                           LEFT JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted
                          WHERE a.application_name = $1",
                    )
                    .expect("prepare the sampler query");
                while !stop.load(Ordering::Relaxed) {
                    let rows = client.query(&poll, &[&watched]).expect("sample pg_locks");
                    let mut sampled = sampled.lock().unwrap();
                    sampled.polls += 1;
                    for row in rows {
                        let pid: i32 = row.get(0);
                        sampled.pids.insert(pid);
                        let wait_event_type: Option<String> = row.get(1);
                        let lock_type: Option<String> = row.get(3);
                        if wait_event_type.as_deref() == Some("Lock") || lock_type.is_some() {
                            sampled.waits.push(LockWait {
                                pid,
                                wait_event: row.get(2),
                                lock_type,
                                query: row.get(4),
                                blockers: row.get(5),
                            });
                        }
                    }
                    drop(sampled);
                    thread::sleep(Duration::from_millis(1));
                }
            })
        };
        LockSampler {
            stop,
            sampled,
            handle,
        }
    }

    /// Lock waits seen so far.
    fn waits(&self) -> Vec<LockWait> {
        self.sampled.lock().unwrap().waits.clone()
    }

    fn finish(self) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the sampler panicked");
        std::mem::take(&mut *self.sampled.lock().unwrap())
    }
}

// ---------------------------------------------------------------------------------------------
// Exclusive claim
// ---------------------------------------------------------------------------------------------

/// One job handed out by one claim.
#[derive(Clone, Debug)]
struct ClaimRecord {
    id: i64,
    lease: Uuid,
    attempt: i32,
    claimer: String,
    /// `statement_timestamp()` of the claim: the server's clock when the claim began.
    began: SystemTime,
    /// `clock_timestamp()` right after the claim returned, on the server.
    claimed_at: SystemTime,
}

/// A claim transaction that held its row locks on purpose: from the claim until just before
/// its commit, by the server's clock.
struct Hold {
    claimer: String,
    from: SystemTime,
    until: SystemTime,
}

/// What one claimer did.
#[derive(Default)]
struct ClaimerReport {
    pid: i32,
    claim_calls: u64,
    claims: Vec<ClaimRecord>,
    /// (id, lease, outcome) of every completion.
    outcomes: Vec<(i64, Uuid, String)>,
    holds: Vec<Hold>,
    /// Claims cancelled by lock_timeout: the claim waited on a lock.
    claim_lock_timeouts: Vec<String>,
    /// Completions cancelled by lock_timeout: a settle call waited on a lock.
    settle_lock_timeouts: Vec<String>,
    errors: Vec<String>,
}

/// How one claimer behaves.
struct ClaimerPlan {
    queue: String,
    application_name: String,
    claimer: String,
    n: i32,
    seed: u64,
}

/// Claims and completes until no job of the queue is queued any more.
fn run_claimer(plan: ClaimerPlan) -> ClaimerReport {
    let mut client = connect_as(&plan.application_name);
    client
        .batch_execute(&format!(
            "SET lock_timeout = '{}ms'",
            LOCK_TIMEOUT.as_millis()
        ))
        .expect("set lock_timeout");
    let mut report = ClaimerReport {
        pid: scalar(&mut client, "SELECT pg_backend_pid()", &[]),
        ..ClaimerReport::default()
    };
    let mut rng = Rng::new(plan.seed, 0);
    let deadline = Instant::now() + GIVE_UP_AFTER;
    let mut round: u64 = 0;
    while report.errors.len() + report.claim_lock_timeouts.len() < 20 {
        if Instant::now() > deadline {
            report
                .errors
                .push(format!("{} gave up after {GIVE_UP_AFTER:?}", plan.claimer));
            break;
        }
        round += 1;
        // One claim in 12 keeps its transaction, and so its row locks, open for longer than
        // lock_timeout: a claimer that waited on those rows instead of skipping them would fail.
        let hold = rng.below(12) == 0;
        let claimed = match claim(&mut client, &plan, hold, &mut report) {
            Ok(claimed) => claimed,
            Err(error) => {
                let text = format!("{} claim: {}", plan.claimer, describe(&error));
                if is_lock_timeout(&error) {
                    report.claim_lock_timeouts.push(text);
                } else {
                    report.errors.push(text);
                }
                continue;
            }
        };
        report.claim_calls += 1;
        if claimed.is_empty() {
            let queued = jobs_in_state(&mut client, &plan.queue, "queued");
            if queued == 0 {
                break;
            }
            // The rest is held by uncommitted claims of others; look again shortly.
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        settle(
            &mut client,
            &plan.claimer,
            &claimed,
            round.is_multiple_of(2),
            &mut report,
        );
        report.claims.extend(claimed);
    }
    report
}

/// One claim transaction: claims up to `n` jobs, optionally holds their row locks for twice the
/// lock timeout, and commits. Returns the committed claims.
fn claim(
    client: &mut Client,
    plan: &ClaimerPlan,
    hold: bool,
    report: &mut ClaimerReport,
) -> Result<Vec<ClaimRecord>, postgres::Error> {
    let mut transaction = client.transaction()?;
    let rows = transaction.query(
        "SELECT c.id, c.lease, c.attempt, clock_timestamp(), statement_timestamp()
           FROM jobs_claim($1, worker => $2, n => $3) AS c",
        &[&plan.queue, &plan.claimer, &plan.n],
    )?;
    if hold && !rows.is_empty() {
        thread::sleep(LOCK_TIMEOUT * 2);
        let until: SystemTime = transaction
            .query_one("SELECT clock_timestamp()", &[])?
            .get(0);
        report.holds.push(Hold {
            claimer: plan.claimer.clone(),
            from: rows[0].get(3),
            until,
        });
    }
    transaction.commit()?;
    Ok(rows
        .iter()
        .map(|row| ClaimRecord {
            id: row.get(0),
            lease: row.get(1),
            attempt: row.get(2),
            claimer: plan.claimer.clone(),
            began: row.get(4),
            claimed_at: row.get(3),
        })
        .collect())
}

/// Completes the claimed jobs, in one batch call or one by one. A completion that lock_timeout
/// cancels is recorded, then finished without a lock timeout so that the run stays whole.
fn settle(
    client: &mut Client,
    claimer: &str,
    claimed: &[ClaimRecord],
    batch: bool,
    report: &mut ClaimerReport,
) {
    let mut outcomes = Vec::with_capacity(claimed.len());
    let first_try = if batch {
        complete_batch(client, claimed).map(|done| outcomes = done)
    } else {
        complete_each(client, claimed, &mut outcomes)
    };
    if let Err(error) = first_try {
        let text = format!("{claimer} complete: {}", describe(&error));
        if !is_lock_timeout(&error) {
            report.errors.push(text);
            return;
        }
        report.settle_lock_timeouts.push(text);
        let rest = &claimed[outcomes.len()..];
        let retried = client
            .batch_execute("SET lock_timeout = 0")
            .and_then(|()| complete_each(client, rest, &mut outcomes))
            .and_then(|()| {
                client.batch_execute(&format!(
                    "SET lock_timeout = '{}ms'",
                    LOCK_TIMEOUT.as_millis()
                ))
            });
        if let Err(error) = retried {
            report
                .errors
                .push(format!("{claimer} complete again: {}", describe(&error)));
        }
    }
    report.outcomes.extend(outcomes);
}

/// Completes each job with its own `jobs_complete(id, lease)` call, appending the outcomes.
fn complete_each(
    client: &mut Client,
    claimed: &[ClaimRecord],
    outcomes: &mut Vec<(i64, Uuid, String)>,
) -> Result<(), postgres::Error> {
    for job in claimed {
        let outcome: String = client
            .query_one(
                "SELECT jobs_complete($1::bigint, $2::uuid)",
                &[&job.id, &job.lease],
            )?
            .get(0);
        outcomes.push((job.id, job.lease, outcome));
    }
    Ok(())
}

/// Completes all jobs with one `jobs_complete(ids, leases)` call, checking that it answers one
/// row per pair in input order.
fn complete_batch(
    client: &mut Client,
    claimed: &[ClaimRecord],
) -> Result<Vec<(i64, Uuid, String)>, postgres::Error> {
    let ids: Vec<i64> = claimed.iter().map(|job| job.id).collect();
    let leases: Vec<Uuid> = claimed.iter().map(|job| job.lease).collect();
    let rows = client.query(
        "SELECT id, outcome FROM jobs_complete_batch($1::bigint[], $2::uuid[])",
        &[&ids, &leases],
    )?;
    let answered: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(
        answered, ids,
        "jobs_complete(ids, leases) must answer one row per pair, in input order"
    );
    Ok(claimed
        .iter()
        .zip(rows)
        .map(|(job, row)| (job.id, job.lease, row.get(1)))
        .collect())
}

#[test]
fn concurrent_claimers_get_every_job_exactly_once_without_waiting() {
    const JOBS: i32 = 5_000;
    const CLAIMERS: usize = 8;

    let (mut setup, queue) = Cluster::shared().connect_with_queue("exclusive", "lease => '1 hour'");
    let enqueued: Vec<i64> = column(
        &mut setup,
        "SELECT id FROM jobs_enqueue_batch($1, ARRAY(
                 SELECT jsonb_build_object('n', g) FROM generate_series(1, $2) AS g))",
        &[&queue, &JOBS],
    );
    let enqueued_set: HashSet<i64> = enqueued.iter().copied().collect();
    assert_eq!(enqueued.len(), JOBS as usize);
    assert_eq!(
        enqueued_set.len(),
        JOBS as usize,
        "enqueue returned an id twice"
    );

    let application_name = format!("pg_jobs-test-{queue}");
    let sampler = LockSampler::start(&application_name);
    let started = Instant::now();
    let claimers: Vec<JoinHandle<ClaimerReport>> = (0..CLAIMERS)
        .map(|i| {
            let plan = ClaimerPlan {
                queue: queue.clone(),
                application_name: application_name.clone(),
                claimer: format!("claimer-{i}"),
                n: if i % 2 == 0 { 1 } else { 10 },
                seed: i as u64 + 1,
            };
            thread::spawn(move || run_claimer(plan))
        })
        .collect();
    let reports: Vec<ClaimerReport> = claimers
        .into_iter()
        .map(|handle| handle.join().expect("a claimer panicked"))
        .collect();
    let elapsed = started.elapsed();
    let sampled = sampler.finish();

    let errors: Vec<&String> = reports.iter().flat_map(|r| &r.errors).collect();
    assert!(errors.is_empty(), "claimers hit errors: {errors:#?}");

    // The sampler watched the claimers' own backends.
    let pids: HashSet<i32> = reports.iter().map(|r| r.pid).collect();
    assert_eq!(pids.len(), CLAIMERS, "each claimer has its own backend");
    assert!(
        pids.is_subset(&sampled.pids),
        "the sampler never saw some claimer backends: claimers {pids:?}, seen {:?}",
        sampled.pids
    );
    let (extension_waits, lock_waits): (Vec<&LockWait>, Vec<&LockWait>) = sampled
        .waits
        .iter()
        .partition(|wait| wait.is_relation_extension());
    let (claim_waits, settle_waits): (Vec<&LockWait>, Vec<&LockWait>) =
        lock_waits.iter().partition(|wait| wait.in_claim());

    // Rule 1: a claim skips rows others hold; it never waited on a lock, neither long enough
    // for lock_timeout nor at any moment the sampler looked.
    let claim_lock_timeouts: Vec<&String> = reports
        .iter()
        .flat_map(|r| &r.claim_lock_timeouts)
        .collect();
    assert!(
        claim_lock_timeouts.is_empty(),
        "claims waited on a lock for longer than lock_timeout: {claim_lock_timeouts:#?}"
    );
    assert!(
        claim_waits.is_empty(),
        "claims waited on locks held by others ({} samples): {}",
        claim_waits.len(),
        first_few(&claim_waits)
    );

    // Every job was claimed exactly once, under a lease of its own, at its first attempt.
    let claims: Vec<&ClaimRecord> = reports.iter().flat_map(|r| &r.claims).collect();
    let mut claims_by_id: HashMap<i64, Vec<&ClaimRecord>> = HashMap::new();
    for claim in &claims {
        claims_by_id.entry(claim.id).or_default().push(claim);
    }
    let claimed_twice: Vec<&Vec<&ClaimRecord>> =
        claims_by_id.values().filter(|c| c.len() > 1).collect();
    assert!(
        claimed_twice.is_empty(),
        "{} jobs were handed to more than one claim, e.g. {:#?}",
        claimed_twice.len(),
        claimed_twice.first()
    );
    let claimed_ids: HashSet<i64> = claims_by_id.keys().copied().collect();
    assert_eq!(
        claimed_ids, enqueued_set,
        "the claimed jobs are not the enqueued ones"
    );
    assert_eq!(claims.len(), JOBS as usize);
    let leases: HashSet<Uuid> = claims.iter().map(|c| c.lease).collect();
    assert_eq!(leases.len(), claims.len(), "two claims got the same lease");
    let not_first: Vec<&&ClaimRecord> = claims.iter().filter(|c| c.attempt != 1).collect();
    assert!(
        not_first.is_empty(),
        "a claim of a fresh job must be attempt 1: {not_first:#?}"
    );

    // Every job was completed exactly once, with 'succeeded', under its claim's lease.
    let mut outcomes_by_id: HashMap<i64, Vec<(Uuid, &str)>> = HashMap::new();
    for report in &reports {
        for (id, lease, outcome) in &report.outcomes {
            outcomes_by_id
                .entry(*id)
                .or_default()
                .push((*lease, outcome.as_str()));
        }
    }
    for (id, claim) in claims_by_id.iter().map(|(id, c)| (id, c[0])) {
        assert_eq!(
            outcomes_by_id.get(id).map(Vec::as_slice),
            Some(&[(claim.lease, "succeeded")][..]),
            "job {id} must be completed once, with 'succeeded', under lease {}",
            claim.lease
        );
    }

    // The database agrees: every job succeeded once, under the lease and worker recorded here,
    // claimed at a moment of its own claim statement by the server's clock (rule 10: not the
    // start of the claim's transaction, nor of another claimer's), under the queue's 1 hour
    // lease from then.
    let rows = setup
        .query(
            "SELECT id, state::text, attempt, lease, worker, finished_at IS NOT NULL,
                    started_at, lease_until IS NULL AND finished_at > started_at
               FROM jobs.job WHERE queue = $1",
            &[&queue],
        )
        .expect("read the jobs back");
    assert_eq!(
        rows.len(),
        JOBS as usize,
        "the queue has other jobs than enqueued"
    );
    for row in rows {
        let id: i64 = row.get(0);
        let claim = claims_by_id[&id][0];
        let (state, attempt, lease, worker, finished): (String, i32, Uuid, String, bool) =
            (row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
        assert_eq!(
            (state.as_str(), attempt, lease, worker.as_str(), finished),
            ("succeeded", 1, claim.lease, claim.claimer.as_str(), true),
            "job {id} in the database"
        );
        let started: SystemTime = row.get(6);
        assert!(
            claim.began <= started && started <= claim.claimed_at,
            "job {id}: started_at {started:?} outside its claim statement [{:?}, {:?}]",
            claim.began,
            claim.claimed_at
        );
        assert!(
            row.get::<_, bool>(7),
            "job {id}: settled after it started, lease cleared"
        );
    }

    // The claimers really ran side by side: while one held its rows, others kept claiming.
    let holds: Vec<&Hold> = reports.iter().flat_map(|r| &r.holds).collect();
    let overlapped = holds
        .iter()
        .filter(|hold| {
            claims.iter().any(|claim| {
                claim.claimer != hold.claimer
                    && claim.claimed_at > hold.from
                    && claim.claimed_at < hold.until
            })
        })
        .count();
    assert!(
        overlapped > 0,
        "no claimer ever claimed while another held its claim open ({} holds)",
        holds.len()
    );
    let claimers_with_jobs: HashSet<&str> = claims.iter().map(|c| c.claimer.as_str()).collect();
    assert_eq!(
        claimers_with_jobs.len(),
        CLAIMERS,
        "every claimer got some jobs"
    );

    let calls: u64 = reports.iter().map(|r| r.claim_calls).sum();
    let settle_lock_timeouts: Vec<&String> = reports
        .iter()
        .flat_map(|r| &r.settle_lock_timeouts)
        .collect();
    println!(
        "exclusive claim: {JOBS} jobs, {CLAIMERS} claimers, {calls} claim calls in {elapsed:.2?} \
         ({:.0} jobs/s claimed and completed); {} held claims, {overlapped} overlapped by other \
         claimers; sampler: {} polls, {} sessions seen, lock waits: {} in claims, {} in settle \
         calls, {} relation-extension; lock_timeout: {} claims, {} settle calls",
        f64::from(JOBS) / elapsed.as_secs_f64(),
        holds.len(),
        sampled.polls,
        sampled.pids.len(),
        claim_waits.len(),
        settle_waits.len(),
        extension_waits.len(),
        claim_lock_timeouts.len(),
        settle_lock_timeouts.len(),
    );

    // A claimer's session never waits on another claimer's locks to settle its own jobs either:
    // a claim must not lock rows it does not hand out.
    assert!(
        settle_lock_timeouts.is_empty() && settle_waits.is_empty(),
        "completing a claimed job waited on a lock held by another claimer's transaction \
         ({} lock timeouts, {} sampled waits): {} {}",
        settle_lock_timeouts.len(),
        settle_waits.len(),
        first_few(&settle_lock_timeouts),
        first_few(&settle_waits)
    );
}

// ---------------------------------------------------------------------------------------------
// Claims racing reclaim and cancel
// ---------------------------------------------------------------------------------------------

/// What one worker of the race did.
#[derive(Default)]
struct WorkerReport {
    claims: Vec<ClaimRecord>,
    /// (id, lease, what was called, answer) of every heartbeat and completion.
    outcomes: Vec<(i64, Uuid, &'static str, String)>,
    slept_past_lease: u64,
    errors: Vec<String>,
}

/// Claims from `queue` until none of its jobs is queued or running; sometimes sleeps past the
/// lease before settling, sometimes heartbeats first, completes singly or in batches.
fn race_worker(queue: String, worker: String, n: i32, seed: u64, lease: Duration) -> WorkerReport {
    let mut client = Cluster::shared().connect();
    let mut rng = Rng::new(seed, 0);
    let mut report = WorkerReport::default();
    let deadline = Instant::now() + GIVE_UP_AFTER;
    while report.errors.len() < 20 {
        if Instant::now() > deadline {
            report.errors.push(format!("{worker} gave up"));
            break;
        }
        let rows = match client.query(
            "SELECT c.id, c.lease, c.attempt, clock_timestamp(), statement_timestamp()
               FROM jobs_claim($1, worker => $2, n => $3) AS c",
            &[&queue, &worker, &n],
        ) {
            Ok(rows) => rows,
            Err(error) => {
                report.errors.push(format!("claim: {}", describe(&error)));
                continue;
            }
        };
        if rows.is_empty() {
            let open: i64 = scalar(
                &mut client,
                "SELECT count(*) FROM jobs.job
                  WHERE queue = $1 AND state IN ('queued', 'running')",
                &[&queue],
            );
            if open == 0 {
                break;
            }
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        let claimed: Vec<ClaimRecord> = rows
            .iter()
            .map(|row| ClaimRecord {
                id: row.get(0),
                lease: row.get(1),
                attempt: row.get(2),
                claimer: worker.clone(),
                began: row.get(4),
                claimed_at: row.get(3),
            })
            .collect();
        report.claims.extend(claimed.iter().cloned());

        // One claim in five outlives its lease: reclaim (the loop below, or the background
        // worker) may take the jobs back and hand them to someone else meanwhile.
        if rng.below(5) == 0 {
            report.slept_past_lease += 1;
            thread::sleep(lease + Duration::from_millis(50 + rng.below(150)));
        }
        let result = (|| -> Result<(), postgres::Error> {
            if rng.below(4) == 0 {
                for job in &claimed {
                    let answer: String = client
                        .query_one("SELECT jobs_heartbeat($1, $2)", &[&job.id, &job.lease])?
                        .get(0);
                    report
                        .outcomes
                        .push((job.id, job.lease, "heartbeat", answer));
                }
            }
            let settled = if rng.below(2) == 0 {
                complete_batch(&mut client, &claimed)?
            } else {
                let mut settled = Vec::new();
                complete_each(&mut client, &claimed, &mut settled)?;
                settled
            };
            for (id, lease, answer) in settled {
                report.outcomes.push((id, lease, "complete", answer));
            }
            Ok(())
        })();
        if let Err(error) = result {
            report.errors.push(format!("settle: {}", describe(&error)));
        }
    }
    report
}

#[test]
fn claims_racing_reclaim_and_cancel_never_complete_a_job_twice() {
    const JOBS: i32 = 600;
    const WORKERS: usize = 6;
    const MAX_ATTEMPTS: i32 = 3;
    const LEASE: Duration = Duration::from_millis(200);

    let (mut setup, queue) = Cluster::shared().connect_with_queue(
        "race",
        &format!("lease => '200 milliseconds', max_attempts => {MAX_ATTEMPTS}"),
    );
    let ids: Vec<i64> = column(
        &mut setup,
        "SELECT id FROM jobs_enqueue_batch($1, ARRAY(
                 SELECT jsonb_build_object('n', g) FROM generate_series(1, $2) AS g))",
        &[&queue, &JOBS],
    );
    assert_eq!(ids.len(), JOBS as usize);

    let stop = Arc::new(AtomicBool::new(false));
    let reclaimer = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut client = Cluster::shared().connect();
            let mut reclaimed = 0i64;
            while !stop.load(Ordering::Relaxed) {
                reclaimed += scalar::<i64>(&mut client, "SELECT jobs_reclaim()::bigint", &[]);
                thread::sleep(Duration::from_millis(10));
            }
            reclaimed
        })
    };
    let canceller = {
        let (stop, ids) = (stop.clone(), ids.clone());
        thread::spawn(move || {
            let mut client = Cluster::shared().connect();
            let mut rng = Rng::new(99, 0);
            let mut answers: Vec<(i64, String)> = Vec::new();
            while !stop.load(Ordering::Relaxed) && answers.len() < 60 {
                let id = ids[rng.below(ids.len() as u64) as usize];
                let answer: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&id]);
                answers.push((id, answer));
                thread::sleep(Duration::from_millis(15));
            }
            answers
        })
    };
    let workers: Vec<JoinHandle<WorkerReport>> = (0..WORKERS)
        .map(|i| {
            let queue = queue.clone();
            let n = [1, 3, 5][i % 3];
            thread::spawn(move || race_worker(queue, format!("racer-{i}"), n, i as u64 + 7, LEASE))
        })
        .collect();
    let reports: Vec<WorkerReport> = workers
        .into_iter()
        .map(|handle| handle.join().expect("a worker panicked"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    let reclaimed = reclaimer.join().expect("the reclaimer panicked");
    let cancels = canceller.join().expect("the canceller panicked");

    let errors: Vec<&String> = reports.iter().flat_map(|r| &r.errors).collect();
    assert!(errors.is_empty(), "workers hit errors: {errors:#?}");

    // Per job: its claims in attempt order, and what each settle call was told.
    let mut claims: BTreeMap<i64, Vec<&ClaimRecord>> = BTreeMap::new();
    for claim in reports.iter().flat_map(|r| &r.claims) {
        claims.entry(claim.id).or_default().push(claim);
    }
    for job_claims in claims.values_mut() {
        job_claims.sort_by_key(|c| c.attempt);
    }
    let mut succeeded: BTreeMap<i64, Vec<Uuid>> = BTreeMap::new();
    for (id, lease, call, answer) in reports.iter().flat_map(|r| &r.outcomes) {
        let allowed: &[&str] = match *call {
            "heartbeat" => &["running", "cancelled", "lost"],
            _ => &["succeeded", "cancelled", "lost"],
        };
        assert!(
            allowed.contains(&answer.as_str()),
            "{call} of job {id} answered {answer:?}"
        );
        if *call == "complete" && answer == "succeeded" {
            succeeded.entry(*id).or_default().push(*lease);
        }
    }

    // No lease was ever minted twice.
    let all_leases: Vec<Uuid> = claims.values().flatten().map(|c| c.lease).collect();
    let distinct: HashSet<&Uuid> = all_leases.iter().collect();
    assert_eq!(
        distinct.len(),
        all_leases.len(),
        "two claims got the same lease"
    );

    // No job succeeded twice (under one lease or two).
    for (id, leases) in &succeeded {
        assert_eq!(
            leases.len(),
            1,
            "job {id} was completed with 'succeeded' {leases:?}"
        );
    }

    let cancelled_by_call: HashSet<i64> = cancels
        .iter()
        .filter(|(_, answer)| answer == "cancelled")
        .map(|(id, _)| *id)
        .collect();
    for (id, answer) in &cancels {
        assert!(
            ["cancelled", "succeeded", "failed"].contains(&answer.as_str()),
            "jobs_cancel({id}) answered {answer:?}"
        );
    }

    // Holder calls that heard 'cancelled', by job.
    let mut cancelled_answers: HashMap<i64, Vec<(Uuid, &str)>> = HashMap::new();
    for (id, lease, call, answer) in reports.iter().flat_map(|r| &r.outcomes) {
        if answer == "cancelled" {
            cancelled_answers
                .entry(*id)
                .or_default()
                .push((*lease, call));
        }
    }

    // Every job ended in exactly one terminal state, agreeing with what its callers were told.
    let rows = setup
        .query(
            "SELECT id, state::text, attempt, lease, errors -> -1 ->> 'error'
               FROM jobs.job WHERE queue = $1 ORDER BY id",
            &[&queue],
        )
        .expect("read the jobs back");
    assert_eq!(rows.len(), JOBS as usize);
    let mut by_state: BTreeMap<String, usize> = BTreeMap::new();
    for row in rows {
        let (id, state, attempt, lease, last_error): (
            i64,
            String,
            i32,
            Option<Uuid>,
            Option<String>,
        ) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        *by_state.entry(state.clone()).or_default() += 1;
        let job_claims = claims.get(&id).map(Vec::as_slice).unwrap_or_default();
        let attempts: Vec<i32> = job_claims.iter().map(|c| c.attempt).collect();
        let expected_attempts: Vec<i32> = (1..=job_claims.len() as i32).collect();
        assert_eq!(
            attempts, expected_attempts,
            "job {id}: each claim spends the next attempt, and only claims do"
        );
        assert_eq!(
            attempt as usize,
            job_claims.len(),
            "job {id}: attempts in the database"
        );
        assert!(attempt <= MAX_ATTEMPTS, "job {id} ran {attempt} times");
        let latest_lease = job_claims.last().map(|c| c.lease);
        let success = succeeded.get(&id).map(|leases| leases[0]);
        match state.as_str() {
            "succeeded" => {
                assert!(
                    success.is_some(),
                    "job {id} is succeeded but no completion was told so"
                );
                assert_eq!(
                    success, latest_lease,
                    "job {id} succeeded under a lease that a newer claim had replaced"
                );
                assert_eq!(lease, latest_lease, "job {id}: lease in the database");
            }
            "failed" => {
                assert_eq!(
                    success, None,
                    "job {id} is failed but a completion succeeded"
                );
                assert_eq!(attempt, MAX_ATTEMPTS, "job {id} failed with attempts left");
                assert_eq!(
                    last_error.as_deref(),
                    Some("lease expired on the final attempt"),
                    "job {id}: why it failed"
                );
            }
            "cancelled" => {
                assert_eq!(
                    success, None,
                    "job {id} is cancelled but a completion succeeded"
                );
                assert!(
                    cancelled_by_call.contains(&id),
                    "job {id} is cancelled but no jobs_cancel said so"
                );
            }
            other => panic!("job {id} ended {other}, not in a terminal state"),
        }
        if cancelled_by_call.contains(&id) {
            assert_eq!(
                state, "cancelled",
                "job {id}: jobs_cancel answered 'cancelled'"
            );
        }
        // Rule 7: a holder hears 'cancelled' only when the job was cancelled under its own
        // lease (a cancel keeps the lease); any other holder hears 'lost'.
        for (answered, call) in cancelled_answers
            .get(&id)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            assert!(
                state == "cancelled" && lease == Some(*answered),
                "job {id}: a {call} under lease {answered} answered 'cancelled', but the job is \
                 {state} under lease {lease:?}"
            );
        }
    }

    // The race really happened: leases ran out, jobs were taken back and handed out again,
    // late completions lost, and cancels landed.
    let reclaimed_jobs = claims.values().filter(|c| c.len() > 1).count();
    let lost = reports
        .iter()
        .flat_map(|r| &r.outcomes)
        .filter(|(_, _, _, answer)| answer == "lost")
        .count();
    let slept: u64 = reports.iter().map(|r| r.slept_past_lease).sum();
    assert!(
        slept > 0 && reclaimed_jobs > 0,
        "no lease ever expired and was reclaimed"
    );
    assert!(!cancelled_by_call.is_empty(), "no cancel landed");
    println!(
        "race: {JOBS} jobs, {WORKERS} workers, {} claims ({reclaimed_jobs} jobs claimed more than \
         once), {slept} claims slept past their lease, jobs_reclaim() took back {reclaimed}, \
         {lost} settle calls answered 'lost', {} cancels answered 'cancelled'; final states \
         {by_state:?}",
        all_leases.len(),
        cancelled_by_call.len(),
    );
}

// ---------------------------------------------------------------------------------------------
// Positive control
// ---------------------------------------------------------------------------------------------

#[test]
fn the_lock_sampler_and_lock_timeout_catch_a_blocked_session() {
    let (mut holder, queue) = Cluster::shared().connect_with_queue("control", "");
    let id = pg_jobs_tests::enqueue(&mut holder, &queue, serde_json::json!({}));
    let application_name = format!("pg_jobs-test-{queue}");

    // The holder locks the job's row the way a claim does.
    let holder_pid: i32 = scalar(&mut holder, "SELECT pg_backend_pid()", &[]);
    holder.batch_execute("BEGIN").unwrap();
    holder
        .execute("SELECT FROM jobs.job WHERE id = $1 FOR UPDATE", &[&id])
        .unwrap();

    // A session of the test that waits for the row instead of skipping it is seen waiting...
    let sampler = LockSampler::start(&application_name);
    let waiter = {
        let application_name = application_name.clone();
        thread::spawn(move || {
            let mut client = connect_as(&application_name);
            client
                .execute("SELECT FROM jobs.job WHERE id = $1 FOR UPDATE", &[&id])
                .map(|_| ())
        })
    };
    wait_until(
        Duration::from_secs(30),
        "the sampler to see the wait",
        || {
            sampler
                .waits()
                .iter()
                .any(|wait| !wait.is_relation_extension())
        },
    );
    holder.batch_execute("COMMIT").unwrap();
    waiter
        .join()
        .unwrap()
        .expect("the waiter gets the row once it is free");
    let sampled = sampler.finish();
    let wait = sampled
        .waits
        .iter()
        .find(|wait| !wait.is_relation_extension())
        .expect("a lock wait");
    assert!(wait.query.contains("FOR UPDATE"), "{wait:?}");
    assert!(sampled.pids.contains(&wait.pid));
    assert!(
        wait.blockers
            .as_deref()
            .is_some_and(|b| b.contains(&format!("pid {holder_pid},"))),
        "the wait names its blocker, pid {holder_pid}: {wait:?}"
    );

    // ...and one that runs under lock_timeout fails with the error the claimers watch for.
    holder.batch_execute("BEGIN").unwrap();
    holder
        .execute("SELECT FROM jobs.job WHERE id = $1 FOR UPDATE", &[&id])
        .unwrap();
    let mut waiter = connect_as(&application_name);
    waiter
        .batch_execute(&format!(
            "SET lock_timeout = '{}ms'",
            LOCK_TIMEOUT.as_millis()
        ))
        .unwrap();
    let error = waiter
        .execute("SELECT FROM jobs.job WHERE id = $1 FOR UPDATE", &[&id])
        .expect_err("the row is locked");
    assert!(is_lock_timeout(&error), "{}", describe(&error));
    holder.batch_execute("ROLLBACK").unwrap();
}

#[test]
fn a_claim_reads_on_past_more_held_jobs_than_it_reads_at_first() {
    const HELD: i32 = 10;
    let cluster = Cluster::shared();
    let (mut setup, queue) = cluster.connect_with_queue("held-run", "lease => '1 hour'");
    let ids: Vec<i64> = column(
        &mut setup,
        "SELECT id FROM jobs_enqueue_batch($1, ARRAY(
                 SELECT jsonb_build_object('n', g) FROM generate_series(1, 20) AS g))",
        &[&queue],
    );

    // An open transaction holds the first ten jobs.
    let mut holder = cluster.connect();
    let mut held = holder
        .transaction()
        .expect("begin the holder's transaction");
    let held_ids: Vec<i64> = column(
        &mut held,
        "SELECT id FROM jobs_claim($1, n => $2)",
        &[&queue, &HELD],
    );
    assert_eq!(
        held_ids,
        ids[..HELD as usize],
        "the holder took the first ten"
    );

    // A job due earlier than all of them brings the claim's start back before the held run.
    let early: i64 = scalar(
        &mut setup,
        "SELECT jobs_enqueue($1, '{}', run_at => now() - interval '1 hour')",
        &[&queue],
    );

    let mut claimer = cluster.connect();
    claimer
        .batch_execute(&format!(
            "SET lock_timeout = '{}ms'",
            LOCK_TIMEOUT.as_millis()
        ))
        .expect("set lock_timeout");
    let claimed: Vec<i64> = column(
        &mut claimer,
        "SELECT id FROM jobs_claim($1, n => 3)",
        &[&queue],
    );
    assert_eq!(
        claimed,
        vec![early, ids[HELD as usize], ids[HELD as usize + 1]],
        "the early job, then the first two jobs after the held ones (held: {held_ids:?})"
    );

    held.rollback().expect("the holder rolls back");
    let queued = jobs_in_state(&mut setup, &queue, "queued");
    assert_eq!(
        queued,
        21 - 3,
        "the held jobs are queued again, the three claimed are not"
    );
}
