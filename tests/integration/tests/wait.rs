//! Waiting claims (`jobs_claim(..., wait => ...)`) against real servers over real connections:
//! a waiting claim sleeps without locks or polling, is woken by the commit that makes a job
//! claimable (and by nothing that does not), wakes one waiter per job, returns empty when the
//! wait runs out, and can be cancelled.
//!
//! Every waiting claim runs on its own connection in a thread ([`WaitingClaim`]); the test
//! watches it from another session through `pg_stat_activity` (a sleeping claim shows
//! `wait_event_type = 'Extension'`). Time assertions are generous upper bounds that only say
//! "it woke up at all" (and lower bounds where returning early would be wrong); the measured
//! times are printed (run with `--nocapture`).
//!
//! Tests that check a particular wake-up source run on a quiet private cluster whose worker
//! never ticks ([`quiet_cluster`]), so the worker's periodic backstop cannot hide a missing
//! wake-up; the reclaim source needs the worker and runs on [`Cluster::shared`]. Tests that
//! measure a whole server (wake-ups of idle waiters, stampedes, table locks, latency) use a
//! private cluster of their own.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use pg_jobs_tests::vanishing::VanishingClient;
use pg_jobs_tests::{
    enqueue, row, scalar, settings_with, state, unique_queue, wait_until, Claimed, Client, Cluster,
    TEST_SETTINGS,
};
use postgres::error::SqlState;
use serde_json::json;

/// Longest a claim may take to notice a commit and still count as "woken" (an upper bound for
/// slow CI machines, not a speed claim).
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// A `jobs_claim` with `wait` running on its own connection in a thread.
struct WaitingClaim {
    /// The backend pid of the claim's connection.
    pid: i32,
    handle: JoinHandle<Returned>,
}

/// What a waiting claim came back with.
struct Returned {
    result: Result<Vec<Claimed>, postgres::Error>,
    /// When the call was sent.
    started: Instant,
    /// When the call returned.
    at: Instant,
    /// The connection, for further use.
    client: Client,
}

impl Returned {
    /// The ids of the claimed jobs; panics if the claim failed.
    fn ids(&self) -> Vec<i64> {
        match &self.result {
            Ok(jobs) => jobs.iter().map(|job| job.id).collect(),
            Err(e) => panic!("the waiting claim failed: {e:?}"),
        }
    }

    /// The claimed jobs; panics if the claim failed.
    fn jobs(&self) -> &[Claimed] {
        self.result
            .as_deref()
            .unwrap_or_else(|e| panic!("the waiting claim failed: {e:?}"))
    }

    /// How long the call took.
    fn took(&self) -> Duration {
        self.at - self.started
    }

    /// The SQLSTATE the claim failed with; panics if it succeeded.
    fn sqlstate(&self) -> SqlState {
        match &self.result {
            Ok(jobs) => panic!("the claim succeeded with {jobs:?}; an error was expected"),
            Err(e) => e
                .code()
                .cloned()
                .unwrap_or_else(|| panic!("not a database error: {e:?}")),
        }
    }
}

impl WaitingClaim {
    /// Sends `jobs_claim(queue, n => n, wait => wait)` on `client` from a new thread.
    fn start(mut client: Client, queue: &str, n: i32, wait: &str) -> WaitingClaim {
        let pid: i32 = scalar(&mut client, "SELECT pg_backend_pid()", &[]);
        let sql =
            format!("SELECT id, lease, attempt FROM jobs_claim($1, n => $2, wait => '{wait}')");
        let queue = queue.to_owned();
        let handle = thread::spawn(move || {
            let started = Instant::now();
            let result = client
                .query(&sql, &[&queue, &n])
                .map(|rows| rows.iter().map(Claimed::from_row).collect());
            Returned {
                result,
                started,
                at: Instant::now(),
                client,
            }
        });
        WaitingClaim { pid, handle }
    }

    /// A claim of one job of `queue` waiting up to `wait`, sent on a new connection to
    /// `cluster` and asleep (seen so by `observer`): how most tests here begin.
    fn asleep_on(
        cluster: &Cluster,
        queue: &str,
        wait: &str,
        observer: &mut Client,
    ) -> WaitingClaim {
        WaitingClaim::start(cluster.connect(), queue, 1, wait).asleep(observer)
    }

    /// Whether the call has returned.
    fn is_done(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits until the claim sleeps in its wait; panics if it returns first.
    fn asleep(self, observer: &mut Client) -> WaitingClaim {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_sleeping(observer, self.pid) {
            if self.is_done() {
                let returned = self.handle.join().expect("the claim thread panicked");
                panic!(
                    "the claim returned {:?} after {:?} instead of waiting",
                    returned.result,
                    returned.took()
                );
            }
            assert!(Instant::now() < deadline, "the claim never started to wait");
            thread::sleep(Duration::from_millis(10));
        }
        self
    }

    /// Waits at most `within` for the call to return. A claim still waiting then is
    /// cancelled and the test fails.
    fn finish(self, observer: &mut Client, within: Duration) -> Returned {
        let deadline = Instant::now() + within;
        while !self.is_done() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        if !self.is_done() {
            let _ = observer.execute("SELECT pg_cancel_backend($1)", &[&self.pid]);
            let _ = self.handle.join();
            panic!("the waiting claim did not return within {within:?}");
        }
        self.handle.join().expect("the claim thread panicked")
    }
}

/// Whether backend `pid` is running a statement asleep in an extension's wait.
fn is_sleeping(observer: &mut Client, pid: i32) -> bool {
    observer
        .query_opt(
            "SELECT state = 'active' AND wait_event_type = 'Extension'
               FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .expect("read pg_stat_activity")
        .and_then(|row| row.get::<_, Option<bool>>(0))
        .unwrap_or(false)
}

/// Runs `sql` (no parameters, no rows) and panics with the full error.
fn exec(client: &mut Client, sql: &str) {
    client
        .batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// A private cluster with `settings` and the extension created in database `postgres`.
fn private_cluster(name: &str, settings: &[&str]) -> Cluster {
    let cluster = Cluster::start(name, settings);
    exec(&mut cluster.connect(), "CREATE EXTENSION pg_jobs");
    cluster
}

/// A cluster for tests that must see a claim woken by the event under test alone: its worker
/// never ticks (`pg_jobs.tick = '1h'`), so the worker's backstop wake-up of queues with due
/// jobs cannot stand in for a missing wake-up. Shared by those tests, each on its own queue.
fn quiet_cluster() -> &'static Cluster {
    static QUIET: OnceLock<Cluster> = OnceLock::new();
    QUIET.get_or_init(|| private_cluster("wait-quiet", &settings_with(&["pg_jobs.tick = '1h'"])))
}

/// Claims one job of `queue` without waiting.
fn claim_now(client: &mut Client, queue: &str) -> Claimed {
    let claimed = pg_jobs_tests::claim(client, queue, 1, "");
    assert_eq!(claimed.len(), 1, "a job to claim on {queue}");
    claimed[0]
}

/// A claim waiting 60 s returns the job soon after another session commits it, and not a
/// moment before the commit.
#[test]
fn waiting_claim_returns_a_job_soon_after_its_commit_and_not_before() {
    let cluster = quiet_cluster();
    let (mut producer, queue) = cluster.connect_with_queue("wake-commit", "");
    let mut observer = cluster.connect();
    let waiter = WaitingClaim::asleep_on(cluster, &queue, "60 seconds", &mut observer);

    exec(&mut producer, "BEGIN");
    let id = enqueue(&mut producer, &queue, json!({"n": 1}));
    thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_done(), "the claim returned before the commit");
    assert!(is_sleeping(&mut observer, waiter.pid));
    exec(&mut producer, "COMMIT");
    let committed = Instant::now();

    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    assert_eq!(returned.ids(), [id]);
    let latency = returned.at.saturating_duration_since(committed);
    assert!(latency < WOKEN_WITHIN, "woke {latency:?} after the commit");
    println!("wake-up latency after commit: {latency:?}");
}

/// An enqueue that rolls back hands the waiter nothing: it returns empty when its wait runs
/// out, and the job never existed.
#[test]
fn rolled_back_enqueue_does_not_hand_the_waiter_anything() {
    let cluster = Cluster::shared();
    let (mut producer, queue) = cluster.connect_with_queue("wake-rollback", "");
    let mut observer = cluster.connect();
    let waiter = WaitingClaim::asleep_on(cluster, &queue, "3 seconds", &mut observer);

    exec(&mut producer, "BEGIN");
    let id = enqueue(&mut producer, &queue, json!({}));
    exec(&mut producer, "ROLLBACK");

    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    assert_eq!(returned.ids(), Vec::<i64>::new());
    assert!(
        returned.took() >= Duration::from_secs(3),
        "returned empty after {:?}, before its wait ran out",
        returned.took()
    );
    let exists: bool = scalar(
        &mut producer,
        "SELECT jobs_get($1) IS NOT NULL OR EXISTS (SELECT FROM jobs.job WHERE id = $1)",
        &[&id],
    );
    assert!(!exists, "the rolled-back job {id} exists");
}

/// Enqueues a job due in 2 seconds and returns its id and when the enqueue was sent.
fn enqueue_due_in_two_seconds(client: &mut Client, queue: &str) -> (i64, Instant) {
    let sent = Instant::now();
    let id = scalar(
        client,
        "SELECT jobs_enqueue($1, run_at => now() + interval '2 seconds')",
        &[&queue],
    );
    (id, sent)
}

/// Checks that a claim woken by a job due 2 s after `sent` returned it when it came due.
fn assert_woken_when_due(returned: &Returned, id: i64, sent: Instant) {
    assert_eq!(returned.ids(), [id]);
    let after = returned.at - sent;
    // The job is due 2 s after the server's now() of the enqueue, which is after `sent`.
    assert!(
        after >= Duration::from_millis(1990),
        "returned the job {after:?} after the enqueue, before it was due"
    );
    assert!(
        after < Duration::from_secs(2) + WOKEN_WITHIN,
        "returned the job {after:?} after the enqueue"
    );
    println!("delayed job (due in 2 s) returned {after:?} after the enqueue");
}

/// A delayed job committed before the wait begins wakes a claim waiting 30 s when it comes due.
#[test]
fn delayed_job_committed_before_the_wait_wakes_it_when_due() {
    let cluster = quiet_cluster();
    let (mut producer, queue) = cluster.connect_with_queue("wake-due-before", "");
    let mut observer = cluster.connect();
    let (id, sent) = enqueue_due_in_two_seconds(&mut producer, &queue);
    let waiter = WaitingClaim::asleep_on(cluster, &queue, "30 seconds", &mut observer);
    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    assert_woken_when_due(&returned, id, sent);
}

/// A delayed job committed while a claim waits 30 s wakes it when it comes due.
#[test]
fn delayed_job_committed_during_the_wait_wakes_it_when_due() {
    let cluster = quiet_cluster();
    let (mut producer, queue) = cluster.connect_with_queue("wake-due-during", "");
    let mut observer = cluster.connect();
    let waiter = WaitingClaim::asleep_on(cluster, &queue, "30 seconds", &mut observer);
    let (id, sent) = enqueue_due_in_two_seconds(&mut producer, &queue);
    thread::sleep(Duration::from_millis(1500));
    assert!(
        !waiter.is_done(),
        "the claim returned before the job was due"
    );
    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    assert_woken_when_due(&returned, id, sent);
}

/// With nothing to claim, the claim returns empty when its wait runs out.
#[test]
fn waiting_claim_returns_empty_when_the_wait_runs_out() {
    let cluster = Cluster::shared();
    let (mut observer, queue) = cluster.connect_with_queue("wake-timeout", "");
    let waiter = WaitingClaim::start(cluster.connect(), &queue, 1, "1 second");
    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    assert_eq!(returned.ids(), Vec::<i64>::new());
    let took = returned.took();
    assert!(took >= Duration::from_secs(1), "returned after {took:?}");
    assert!(took < WOKEN_WITHIN, "returned after {took:?}");
    println!("empty wait of 1 s returned after {took:?}");
}

/// `pg_cancel_backend` and `statement_timeout` end a waiting claim with SQLSTATE 57014; the
/// connection is usable afterwards and can wait (and be woken) again.
#[test]
fn waiting_claim_is_cancellable() {
    let cluster = Cluster::shared();
    let (mut observer, queue) = cluster.connect_with_queue("wake-cancel", "");

    let waiter = WaitingClaim::asleep_on(cluster, &queue, "60 seconds", &mut observer);
    let sent: bool = scalar(
        &mut observer,
        "SELECT pg_cancel_backend($1)",
        &[&waiter.pid],
    );
    assert!(sent);
    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    assert_eq!(returned.sqlstate(), SqlState::QUERY_CANCELED);
    let mut client = returned.client;
    let one: i32 = scalar(&mut client, "SELECT 1", &[]);
    assert_eq!(one, 1);

    exec(&mut client, "SET statement_timeout = '500ms'");
    let waiter = WaitingClaim::start(client, &queue, 1, "60 seconds");
    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    assert_eq!(returned.sqlstate(), SqlState::QUERY_CANCELED);
    let took = returned.took();
    assert!(took >= Duration::from_millis(500), "ended after {took:?}");
    let mut client = returned.client;
    exec(&mut client, "RESET statement_timeout");

    // The same connection waits again and a commit still wakes it.
    let waiter = WaitingClaim::start(client, &queue, 1, "30 seconds").asleep(&mut observer);
    let id = enqueue(&mut observer, &queue, json!({}));
    let returned = waiter.finish(&mut observer, WOKEN_WITHIN);
    assert_eq!(returned.ids(), [id]);
}

/// A waiting claim refuses REPEATABLE READ and SERIALIZABLE (its snapshot would never see
/// new jobs) with SQLSTATE 25000; without a wait it works under them.
#[test]
fn waiting_claim_refuses_repeatable_read_and_serializable() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("wake-isolation", "");
    let id = enqueue(&mut client, &queue, json!({}));
    let claim_sql = |wait: &str| format!("SELECT id FROM jobs_claim($1, wait => '{wait}')");

    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        exec(&mut client, &format!("BEGIN ISOLATION LEVEL {level}"));
        let started = Instant::now();
        let error = client
            .query(&claim_sql("1 second"), &[&queue])
            .expect_err("a waiting claim must be refused");
        assert_eq!(
            error.code(),
            Some(&SqlState::INVALID_TRANSACTION_STATE),
            "{level}: {error:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once"
        );
        exec(&mut client, "ROLLBACK");
    }

    // The session default counts as well.
    exec(
        &mut client,
        "SET default_transaction_isolation = 'serializable'",
    );
    let error = client
        .query(&claim_sql("1 second"), &[&queue])
        .expect_err("a waiting claim under a serializable default");
    assert_eq!(error.code(), Some(&SqlState::INVALID_TRANSACTION_STATE));
    exec(&mut client, "RESET default_transaction_isolation");

    // Nothing was claimed by the refused calls; wait '0' works under REPEATABLE READ.
    assert_eq!(state(&mut client, id), "queued");
    exec(&mut client, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    let rows = client.query(&claim_sql("0"), &[&queue]).unwrap();
    exec(&mut client, "COMMIT");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i64>(0), id);
}

/// While a claim sleeps it holds no locks: pg_locks shows only its virtualxid (no
/// transactionid, no relation), its wait event is 'Extension', and another session can take
/// `jobs.job` in ACCESS EXCLUSIVE mode with NOWAIT.
#[test]
fn waiting_claim_holds_no_locks_while_it_sleeps() {
    let cluster = private_cluster("wait-locks", TEST_SETTINGS);
    let (mut observer, queue) = cluster.connect_with_queue("wake-locks", "");
    let waiter = WaitingClaim::asleep_on(&cluster, &queue, "30 seconds", &mut observer);

    for _ in 0..10 {
        let row = observer
            .query_one(
                "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $1",
                &[&waiter.pid],
            )
            .unwrap();
        assert_eq!(
            row.get::<_, Option<String>>(0).as_deref(),
            Some("Extension")
        );
        assert_eq!(
            row.get::<_, Option<String>>(1).as_deref(),
            Some("Extension")
        );
        let locks: Vec<(String, String, Option<String>)> = observer
            .query(
                "SELECT locktype, mode, relation::regclass::text FROM pg_locks WHERE pid = $1",
                &[&waiter.pid],
            )
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        assert_eq!(
            locks,
            [("virtualxid".to_owned(), "ExclusiveLock".to_owned(), None)],
            "the sleeping claim's locks"
        );
        thread::sleep(Duration::from_millis(50));
    }

    // The worker's ticks take locks for a moment every 100 ms; retry a NOWAIT that meets one.
    // A lock the sleeping claim held would refuse every attempt.
    let mut locker = cluster.connect();
    let mut refusals = 0;
    loop {
        exec(&mut locker, "BEGIN");
        match locker.batch_execute("LOCK TABLE jobs.job IN ACCESS EXCLUSIVE MODE NOWAIT") {
            Ok(()) => break,
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) && refusals < 20 => {
                refusals += 1;
                exec(&mut locker, "ROLLBACK");
                thread::sleep(Duration::from_millis(37));
            }
            Err(e) => panic!("LOCK TABLE jobs.job NOWAIT while a claim waits: {e:?}"),
        }
    }
    exec(&mut locker, "ROLLBACK");
    assert!(!waiter.is_done());
    assert!(is_sleeping(&mut observer, waiter.pid));

    let id = enqueue(&mut observer, &queue, json!({}));
    let returned = waiter.finish(&mut observer, WOKEN_WITHIN);
    assert_eq!(returned.ids(), [id]);
}

/// Voluntary context switches of process `pid` so far (Linux): one each time it went to
/// sleep, so the count grows with every wake-up.
fn voluntary_switches(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no voluntary_ctxt_switches in /proc/{pid}/status"))
}

/// Of processes with voluntary context switch counts `before`, how many went to sleep again
/// since (woke up at least once), and how many times in all.
///
/// Robust against stray wake-ups: a backend also wakes for signals that have nothing to do
/// with pg_jobs (a cache invalidation catch-up sent to the laggard, a reload), now and then
/// and one process at a time. A broadcast or a polling loop wakes every waiter, so the tests
/// compare how many distinct processes woke with how many there are.
fn woken(before: &[(i32, u64)]) -> (usize, u64) {
    let grown: Vec<u64> = before
        .iter()
        .map(|&(pid, switches)| voluntary_switches(pid) - switches)
        .collect();
    (grown.iter().filter(|&&g| g > 0).count(), grown.iter().sum())
}

/// CPU time of process `pid` so far (user + system), in clock ticks (Linux).
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/stat: {e}"));
    // Fields after the parenthesised command name, starting with the state (field 3);
    // utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a /proc stat line") + 1..]
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// No stampede: of 16 claims waiting on one queue, a commit of one job wakes exactly one;
/// the other 15 sleep on undisturbed. A commit of 15 jobs then hands one to each of them.
#[test]
fn one_job_wakes_one_of_many_waiting_claims() {
    // No worker ticks: its backstop wake-up of a queue with a due job could race the winner's
    // claim and wake everybody, which would blur what a commit itself wakes.
    let cluster = private_cluster("wait-stampede", &settings_with(&["pg_jobs.tick = '1h'"]));
    let (mut observer, queue) = cluster.connect_with_queue("stampede", "");
    let waiters: Vec<WaitingClaim> = (0..16)
        .map(|_| WaitingClaim::start(cluster.connect(), &queue, 1, "30 seconds"))
        .collect();
    // Each sleeping claim with its process's voluntary context switches so far.
    let mut waiters: Vec<(WaitingClaim, u64)> = waiters
        .into_iter()
        .map(|waiter| {
            let waiter = waiter.asleep(&mut observer);
            let switches = voluntary_switches(waiter.pid);
            (waiter, switches)
        })
        .collect();

    let first = enqueue(&mut observer, &queue, json!({"n": 0}));
    let committed = Instant::now();
    wait_until(WOKEN_WITHIN, "a claim to return the job", || {
        waiters.iter().any(|(w, _)| w.is_done())
    });
    let winner = waiters.iter().position(|(w, _)| w.is_done()).unwrap();
    let (winner, _) = waiters.remove(winner);
    let returned = winner.finish(&mut observer, WOKEN_WITHIN);
    assert_eq!(returned.ids(), [first]);
    let latency = returned.at.saturating_duration_since(committed);

    thread::sleep(Duration::from_secs(1));
    let done = waiters.iter().filter(|(w, _)| w.is_done()).count();
    assert_eq!(
        done, 0,
        "{done} more claims returned after one job's commit"
    );
    for (waiter, _) in &waiters {
        assert!(
            is_sleeping(&mut observer, waiter.pid),
            "claim {} is still asleep",
            waiter.pid
        );
    }
    let before: Vec<(i32, u64)> = waiters.iter().map(|(w, b)| (w.pid, *b)).collect();
    let (woken_waiters, wakeups) = woken(&before);
    // A broadcast wakes every one of the 15; stray wake-ups touch a few at most.
    assert!(
        woken_waiters <= 5,
        "{woken_waiters} of the 15 losing claims woke up ({wakeups} times) after a commit of one job"
    );

    exec(&mut observer, "BEGIN");
    let mut rest: Vec<i64> = (1..=15)
        .map(|n| enqueue(&mut observer, &queue, json!({ "n": n })))
        .collect();
    exec(&mut observer, "COMMIT");
    let mut claimed = vec![first];
    for (waiter, _) in waiters {
        let returned = waiter.finish(&mut observer, WOKEN_WITHIN);
        let ids = returned.ids();
        assert_eq!(ids.len(), 1, "each claim gets one job: {ids:?}");
        claimed.extend(ids);
    }
    claimed.sort_unstable();
    rest.push(first);
    rest.sort_unstable();
    assert_eq!(claimed, rest, "every job claimed exactly once");
    println!(
        "stampede: one job woke one claim in {latency:?}; of the 15 others {woken_waiters} woke, {wakeups} times"
    );
}

/// Starts a claim waiting 30 s on `queue` of `cluster`, makes sure it sleeps and stays asleep
/// through the set-up, runs `wake`, and returns the (id, attempt) of each job the claim got and
/// how long after `wake` it returned.
fn woken_by(cluster: &Cluster, queue: &str, wake: impl FnOnce()) -> (Vec<(i64, i32)>, Duration) {
    let mut observer = cluster.connect();
    let waiter = WaitingClaim::asleep_on(cluster, queue, "30 seconds", &mut observer);
    thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_done(), "the claim returned before the wake-up");
    assert!(is_sleeping(&mut observer, waiter.pid));
    wake();
    let woken = Instant::now();
    let returned = waiter.finish(&mut observer, Duration::from_secs(10));
    let latency = returned.at.saturating_duration_since(woken);
    assert!(latency < WOKEN_WITHIN, "woke {latency:?} after the wake-up");
    let jobs = returned.jobs().iter().map(|j| (j.id, j.attempt)).collect();
    (jobs, latency)
}

/// `settle` (with a held job's id and lease) answers `queued` and wakes a waiting claim, which
/// gets the job on `attempt`; `what` names the settle in the output.
fn settle_wakes_a_waiting_claim(prefix: &str, settle: &str, attempt: i32, what: &str) {
    let (mut client, queue) = quiet_cluster().connect_with_queue(prefix, "");
    let id = enqueue(&mut client, &queue, json!({}));
    let held = claim_now(&mut client, &queue);
    let (jobs, latency) = woken_by(quiet_cluster(), &queue, || {
        let outcome: String = scalar(&mut client, settle, &[&id, &held.lease]);
        assert_eq!(outcome, "queued", "{settle}");
    });
    assert_eq!(jobs, [(id, attempt)], "{settle}");
    println!("woken by {what} after {latency:?}");
}

/// `jobs_release` of a held job wakes a waiting claim, which gets the job.
#[test]
fn waiting_claim_is_woken_by_release() {
    settle_wakes_a_waiting_claim("wake-release", "SELECT jobs_release($1, $2)", 1, "release");
}

/// `jobs_fail` with an immediate retry wakes a waiting claim, which gets the job.
#[test]
fn waiting_claim_is_woken_by_fail_with_immediate_retry() {
    settle_wakes_a_waiting_claim(
        "wake-fail",
        "SELECT jobs_fail($1, $2, 'try again', retry_in => '0')",
        2,
        "fail with retry_in '0'",
    );
}

/// `jobs_retry` of a failed job wakes a waiting claim, which gets the job.
#[test]
fn waiting_claim_is_woken_by_retry_of_a_failed_job() {
    let (mut client, queue) = quiet_cluster().connect_with_queue("wake-retry", "");
    let id: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, max_attempts => 1)",
        &[&queue],
    );
    let held = claim_now(&mut client, &queue);
    let outcome: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'boom')",
        &[&id, &held.lease],
    );
    assert_eq!(outcome, "failed");
    let (jobs, latency) = woken_by(quiet_cluster(), &queue, || {
        let outcome: String = scalar(&mut client, "SELECT jobs_retry($1)", &[&id]);
        assert_eq!(outcome, "queued");
    });
    assert_eq!(jobs, [(id, 1)]);
    println!("woken by retry after {latency:?}");
}

/// `jobs_resume` of a paused queue with a queued job wakes a waiting claim, which gets it.
#[test]
fn waiting_claim_is_woken_by_resume() {
    let (mut client, queue) = quiet_cluster().connect_with_queue("wake-resume", "");
    exec(&mut client, &format!("SELECT jobs_pause('{queue}')"));
    let id = enqueue(&mut client, &queue, json!({}));
    let (jobs, latency) = woken_by(quiet_cluster(), &queue, || {
        exec(&mut client, &format!("SELECT jobs_resume('{queue}')"));
    });
    assert_eq!(jobs, [(id, 1)]);
    println!("woken by resume after {latency:?}");
}

/// Another session's claim that rolls back puts its job back and wakes a waiting claim, which
/// gets the job on its first attempt (the rolled-back claim left no trace).
#[test]
fn waiting_claim_is_woken_by_the_rollback_of_another_claim() {
    let (mut client, queue) = quiet_cluster().connect_with_queue("wake-rollback-claim", "");
    let id = enqueue(&mut client, &queue, json!({}));
    exec(&mut client, "BEGIN");
    assert_eq!(claim_now(&mut client, &queue).id, id);
    let (jobs, latency) = woken_by(quiet_cluster(), &queue, || exec(&mut client, "ROLLBACK"));
    assert_eq!(jobs, [(id, 1)]);
    println!("woken by the rollback of another claim after {latency:?}");
}

/// A lease that runs out is reclaimed by the background worker, and that wakes a waiting
/// claim, which gets the job on its second attempt.
#[test]
fn waiting_claim_is_woken_by_reclaim_of_an_expired_lease() {
    let (mut client, queue) =
        Cluster::shared().connect_with_queue("wake-reclaim", "lease => '1 second'");
    let id = enqueue(&mut client, &queue, json!({}));
    claim_now(&mut client, &queue);
    let lease_until: SystemTime = scalar(
        &mut client,
        "SELECT lease_until FROM jobs.job WHERE id = $1",
        &[&id],
    );
    let (jobs, _) = woken_by(Cluster::shared(), &queue, || {
        // Nothing to do: the lease runs out and the worker reclaims it.
        let left = lease_until
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        thread::sleep(left);
    });
    let after_expiry = SystemTime::now()
        .duration_since(lease_until)
        .unwrap_or_default();
    assert_eq!(jobs, [(id, 2)]);
    println!("woken by the worker's reclaim ≤ {after_expiry:?} after the lease ran out");
}

/// One sample of the idle-cost test: the database's transaction count, the worker's ticks,
/// and each waiter's (pid, query_start, state_change, state, wait_event_type).
struct IdleSample {
    transactions: i64,
    ticks: i64,
    activity: Vec<(i32, SystemTime, SystemTime, String, Option<String>)>,
}

/// Samples for the idle-cost test, one transaction each: the statement is prepared once
/// (with the extended protocol, preparing is a transaction of its own).
struct IdleSampler {
    client: Client,
    statement: postgres::Statement,
    pids: Vec<i32>,
    /// Samples taken so far.
    taken: i64,
}

impl IdleSampler {
    fn new(mut client: Client, pids: &[i32]) -> IdleSampler {
        let statement = client
            .prepare(
                "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database
                          WHERE datname = current_database()),
                        (SELECT ticks FROM jobs_worker_status()
                          WHERE database = current_database()),
                        a.pid, a.query_start, a.state_change, a.state, a.wait_event_type
                   FROM pg_stat_activity a
                  WHERE a.pid = ANY ($1)
                  ORDER BY a.pid",
            )
            .unwrap();
        IdleSampler {
            client,
            statement,
            pids: pids.to_vec(),
            taken: 0,
        }
    }

    fn sample(&mut self) -> IdleSample {
        let rows = self.client.query(&self.statement, &[&self.pids]).unwrap();
        self.taken += 1;
        assert_eq!(rows.len(), self.pids.len(), "every waiter is connected");
        IdleSample {
            transactions: rows[0].get(0),
            ticks: rows[0].get(1),
            activity: rows
                .iter()
                .map(|row| (row.get(2), row.get(3), row.get(4), row.get(5), row.get(6)))
                .collect(),
        }
    }
}

/// What an idle tick of the worker costs in transactions, as the statistics can show it.
struct TickCost {
    /// Transactions an idle tick runs at most (each step of a tick runs in transactions of
    /// its own).
    transactions: i64,
    /// Ticks the statistics may lag behind the worker's tick counter: the worker sends its
    /// counts at most once a second, so a read sees its transactions up to its last send only.
    lag: i64,
}

/// Measures [`TickCost`] over four seconds of ticks while nothing else runs. The transactions
/// read at either end may miss up to a second of ticks, so they are divided by the ticks less
/// that lag and rounded up: never below what a tick costs, whichever second the sends fall in.
fn idle_tick_cost(client: &mut Client) -> TickCost {
    let read = pg_jobs_tests::transactions_and_ticks;
    let started = Instant::now();
    let (transactions_before, ticks_before) = read(client);
    thread::sleep(Duration::from_secs(4));
    let (transactions_after, ticks_after) = read(client);
    let elapsed = started.elapsed().as_secs_f64();
    // Our own: the read and the flush (and, before 15, the flush's SELECT 1) of the first read.
    let own = if pg_jobs_tests::pg_major() >= 15 {
        2
    } else {
        3
    };
    let ticks = ticks_after - ticks_before;
    let lag = (ticks as f64 / elapsed).ceil() as i64 + 1;
    assert!(
        ticks > lag,
        "the worker ticked {ticks} times in {elapsed:.1} s: too few to measure a tick by"
    );
    let worker = (transactions_after - transactions_before - own).max(0);
    let counted_ticks = ticks - lag;
    let transactions = (worker + counted_ticks - 1) / counted_ticks;
    println!(
        "an idle tick of the worker: {transactions} transactions at most ({worker} in {ticks} ticks, \
         of which the statistics may have missed {lag})"
    );
    TickCost { transactions, lag }
}

/// Idle waiting costs nothing: 16 claims waiting 8 s on an empty queue run one statement
/// each, add no transactions beyond the worker's ticks and our own sampling, and do not wake
/// up (their processes stay asleep: their voluntary context switches in /proc do not grow).
#[test]
fn idle_waiting_claims_cost_nothing() {
    let cluster = private_cluster("wait-idle", &settings_with(&["autovacuum = off"]));
    let (mut observer, queue) = cluster.connect_with_queue("idle", "");
    let tick = idle_tick_cost(&mut observer);
    // The window below must end before the first waiter's wait does, however slowly a busy
    // machine starts the other fifteen.
    let started = Instant::now();
    let waiters: Vec<WaitingClaim> = (0..16)
        .map(|_| WaitingClaim::start(cluster.connect(), &queue, 1, "8 seconds"))
        .collect();
    let waiters: Vec<WaitingClaim> = waiters
        .into_iter()
        .map(|waiter| waiter.asleep(&mut observer))
        .collect();
    let pids: Vec<i32> = waiters.iter().map(|w| w.pid).collect();

    // Everything this session did so far is counted at its next flush: force that flush
    // now, before the window, so that the window sees only the samples themselves.
    let mut sampler = IdleSampler::new(cluster.connect(), &pids);
    pg_jobs_tests::flush_statistics(&mut sampler.client);
    thread::sleep(Duration::from_millis(50));
    let switches_before: Vec<(i32, u64)> = pids
        .iter()
        .map(|&pid| (pid, voluntary_switches(pid)))
        .collect();
    let cpu_before: u64 = pids.iter().map(|&pid| cpu_ticks(pid)).sum();
    let window_start = Instant::now();
    let first = sampler.sample();
    let mut most = first.transactions;
    while started.elapsed() < Duration::from_millis(6000) {
        thread::sleep(Duration::from_millis(250));
        let sample = sampler.sample();
        assert_eq!(
            sample.activity, first.activity,
            "a waiter ran another statement"
        );
        most = most.max(sample.transactions);
    }
    let last = sampler.sample();
    let window = window_start.elapsed();
    let (woken_waiters, switches) = woken(&switches_before);
    let cpu: u64 = pids.iter().map(|&pid| cpu_ticks(pid)).sum::<u64>() - cpu_before;
    assert!(
        waiters.iter().all(|w| !w.is_done()),
        "the sampling window lies within the wait"
    );

    for (pid, _, _, state, wait_event_type) in &last.activity {
        assert_eq!(state, "active", "waiter {pid}");
        assert_eq!(
            wait_event_type.as_deref(),
            Some("Extension"),
            "waiter {pid}"
        );
    }
    assert_eq!(
        last.activity, first.activity,
        "a waiter ran another statement"
    );
    let transactions = most.max(last.transactions) - first.transactions;
    let ticks = last.ticks - first.ticks;
    let samples = sampler.taken;
    // Every transaction in the window is one of a worker tick's or one of our samples. The
    // worker sends its statistics at most once a second, so up to a second's worth of ticks
    // from before the window may be counted in it.
    let bound = (ticks + tick.lag) * tick.transactions + samples;
    assert!(
        transactions <= bound,
        "{transactions} transactions in {window:?}; ticks ({ticks} + {}) x {} + samples {samples} = {bound}",
        tick.lag,
        tick.transactions
    );
    // Polling at any period shorter than the window wakes all 16, each at least once.
    assert!(
        woken_waiters <= 5 && switches < 16,
        "{woken_waiters} of 16 idle waiters woke up, {switches} times in all, in {window:?}"
    );

    for waiter in waiters {
        let returned = waiter.finish(&mut observer, Duration::from_secs(10));
        assert_eq!(returned.ids(), Vec::<i64>::new());
        assert!(returned.took() >= Duration::from_secs(8));
    }
    let seconds = window.as_secs_f64();
    println!(
        "16 idle waiters over {window:?}: 0 statements/s (query_start unchanged); \
         {:.2} transactions/s beyond ticks and samples ({transactions} seen: {ticks} ticks, \
         {samples} samples); {:.2} wake-ups/s in total; {cpu} CPU ticks in total",
        (transactions - ticks - samples).max(0) as f64 / seconds,
        switches as f64 / seconds,
    );
}

/// Commit→claim latency, measured client-side: 300 jobs enqueued one per transaction, ~10 ms
/// apart, to 4 claimers looping claim(wait '10 s') + complete. Asserts only that every job is
/// claimed exactly once; prints p50/p99/max.
#[test]
fn wake_up_latency_of_looping_claimers() {
    const JOBS: usize = 300;
    const CLAIMERS: usize = 4;
    let cluster = private_cluster("wait-latency", TEST_SETTINGS);
    let (mut producer, queue) = cluster.connect_with_queue("latency", "");
    let claims: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();

    let mut pids = Vec::new();
    let claimers: Vec<JoinHandle<()>> = (0..CLAIMERS)
        .map(|_| {
            let mut client = cluster.connect();
            pids.push(scalar::<i32>(&mut client, "SELECT pg_backend_pid()", &[]));
            let queue = queue.clone();
            let claims = Arc::clone(&claims);
            thread::spawn(move || loop {
                let rows = client
                    .query(
                        "SELECT id, lease, payload ? 'stop'
                           FROM jobs_claim($1, wait => '10 seconds')",
                        &[&queue],
                    )
                    .unwrap_or_else(|e| panic!("claim: {e:?}"));
                let at = Instant::now();
                let Some(row) = rows.first() else { continue };
                let (id, lease, stop): (i64, uuid::Uuid, bool) =
                    (row.get(0), row.get(1), row.get(2));
                let outcome: String = scalar(
                    &mut client,
                    "SELECT jobs_complete($1::bigint, $2::uuid)",
                    &[&id, &lease],
                );
                assert_eq!(outcome, "succeeded");
                if stop {
                    return;
                }
                claims.lock().unwrap().push((id, at));
            })
        })
        .collect();
    for &pid in &pids {
        wait_until(Duration::from_secs(10), "the claimers to wait", || {
            is_sleeping(&mut producer, pid)
        });
    }

    let mut commits: HashMap<i64, Instant> = HashMap::new();
    for n in 0..JOBS {
        let id = enqueue(&mut producer, &queue, json!({ "n": n }));
        commits.insert(id, Instant::now());
        thread::sleep(Duration::from_millis(10));
    }
    wait_until(Duration::from_secs(30), "every job to be claimed", || {
        claims.lock().unwrap().len() >= JOBS
    });
    for _ in 0..CLAIMERS {
        enqueue(&mut producer, &queue, json!({"stop": true}));
    }
    for claimer in claimers {
        claimer.join().expect("a claimer panicked");
    }

    let claims = claims.lock().unwrap();
    let ids: BTreeSet<i64> = claims.iter().map(|(id, _)| *id).collect();
    assert_eq!(claims.len(), JOBS, "claims");
    assert_eq!(ids.len(), JOBS, "no job claimed twice");
    assert_eq!(ids, commits.keys().copied().collect(), "every job claimed");
    let unfinished: i64 = scalar(
        &mut producer,
        "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state <> 'succeeded'",
        &[&queue],
    );
    assert_eq!(unfinished, 0);

    // Signed: a claim may return before the producer has seen its own commit acknowledged.
    let mut latencies: Vec<f64> = claims
        .iter()
        .map(|(id, at)| {
            let committed = commits[id];
            if *at >= committed {
                (*at - committed).as_secs_f64() * 1000.0
            } else {
                -((committed - *at).as_secs_f64() * 1000.0)
            }
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let rank = |p: f64| latencies[((p * JOBS as f64).ceil() as usize).clamp(1, JOBS) - 1];
    println!(
        "commit→claim latency over {JOBS} jobs, {CLAIMERS} claimers: \
         p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (min {:.3} ms)",
        rank(0.50),
        rank(0.99),
        latencies[JOBS - 1],
        latencies[0],
    );
}

/// A client killed while its claim waits (its socket closed, nothing said) must not take a
/// job: the orphaned backend notices the closed connection before it claims, ends, and the
/// job goes to a live worker with its attempts untouched. Without the check the orphan claims
/// the job, commits and only then fails to send it: the job sits running for a whole lease with
/// an attempt spent on nothing.
#[test]
fn a_killed_clients_waiting_claim_takes_nothing() {
    let cluster = quiet_cluster();
    let (mut observer, queue) = cluster.connect_with_queue("vanished", "max_attempts => 2");
    let mut vanishing = VanishingClient::connect(cluster, "vanishing-worker");
    vanishing
        .send(&format!(
            "SELECT * FROM jobs_claim('{queue}', wait => '60 seconds')"
        ))
        .unwrap();
    let pid: i32 = {
        let mut pid = 0;
        wait_until(Duration::from_secs(20), "the claim to sleep", || {
            pid = scalar::<Option<i32>>(
                &mut observer,
                "SELECT max(pid) FROM pg_stat_activity
                  WHERE application_name = 'vanishing-worker' AND wait_event_type = 'Extension'",
                &[],
            )
            .unwrap_or(0);
            pid != 0
        });
        pid
    };
    vanishing.vanish();

    let id = enqueue(&mut observer, &queue, json!({ "for": "a live worker" }));
    wait_until(
        Duration::from_secs(20),
        "the orphaned backend to end",
        || {
            !scalar::<bool>(
                &mut observer,
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)",
                &[&pid],
            )
        },
    );
    let (state, attempt): (String, i32) = row(
        &mut observer,
        "SELECT state::text, attempt FROM jobs.job WHERE id = $1",
        &[&id],
    );
    assert_eq!(
        (state.as_str(), attempt),
        ("queued", 0),
        "the job a vanished client's claim was woken for"
    );
    assert_eq!(claim_now(&mut observer, &queue).id, id);
}

/// `DROP EXTENSION pg_jobs` while claims wait: the drop's commit wakes them, and they end at
/// once with an error that says what happened, instead of sleeping to the end of their wait and
/// failing on a table that no longer exists.
#[test]
fn a_waiting_claim_ends_with_a_clear_error_when_the_extension_is_dropped() {
    let cluster = private_cluster("wait-drop", &settings_with(&["pg_jobs.tick = '1h'"]));
    let (mut observer, queue) = cluster.connect_with_queue("dropped", "");
    let waiter = WaitingClaim::asleep_on(&cluster, &queue, "60 seconds", &mut observer);
    exec(&mut observer, "DROP EXTENSION pg_jobs");
    let returned = waiter.finish(&mut observer, WOKEN_WITHIN);
    assert_eq!(
        returned.sqlstate(),
        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
    );
    let Err(error) = &returned.result else {
        unreachable!()
    };
    assert_eq!(
        error.as_db_error().map(|db| db.message()),
        Some("jobs_claim stopped waiting: pg_jobs was dropped from this database")
    );
}

/// A client gone before its claim returns takes nothing, also when the claim does not wait
/// (or has not slept yet): the claim checks the connection before it returns what it took, and
/// the session ends with the claim rolled back.
#[test]
fn a_claim_whose_client_left_before_it_ran_takes_nothing() {
    let cluster = quiet_cluster();
    let mut observer = cluster.connect();
    for wait in ["0", "5 seconds"] {
        let queue = unique_queue(&mut observer, "left-early", "");
        let id = enqueue(&mut observer, &queue, json!({ "wait": wait }));
        let mut vanishing = VanishingClient::connect(cluster, "left-early");
        let pid = vanishing.pid();
        // The sleep runs first, while the socket closes; the claim then finds the job.
        vanishing
            .send(&format!(
                "SELECT pg_sleep(0.3); SELECT * FROM jobs_claim('{queue}', wait => '{wait}')"
            ))
            .unwrap();
        vanishing.vanish();
        wait_until(
            Duration::from_secs(20),
            "the orphaned backend to end",
            || {
                !scalar::<bool>(
                    &mut observer,
                    "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)",
                    &[&pid],
                )
            },
        );
        let row = observer
            .query_one(
                "SELECT state::text, attempt FROM jobs.job WHERE id = $1",
                &[&id],
            )
            .unwrap();
        assert_eq!(
            (row.get::<_, String>(0).as_str(), row.get::<_, i32>(1)),
            ("queued", 0),
            "wait => '{wait}': the job a gone client's claim found"
        );
    }
}
