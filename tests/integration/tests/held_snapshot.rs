//! A snapshot held open for a long time (a report, a forgotten `BEGIN`, a replica's feedback)
//! keeps vacuum from removing the dead index entries claimed jobs leave at the head of the claim
//! index. A claim must not walk them: the queue's claim floor lets it start past them.
//!
//! The test holds a snapshot, burns down most of a queue, and measures (with `auto_explain`'s
//! BUFFERS) what one claim touches: a handful of buffers. As a control it then resets the floor
//! (a claim rolled back does that, since its jobs come back) and shows that the next claim,
//! which has to find its way from the head of the index again, touches hundreds; and that the
//! floor is back for the claim after it.
//!
//! On a busy queue other sessions commit jobs while a claim runs, each commit lowering the
//! floor's generation; the floor must rise past every claim all the same, or it falls behind
//! and claims walk the entries between it and the head of the queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use pg_jobs_tests::{
    claim, complete, enqueue_empty, plan_buffers, scalar, Cluster, ExplainingSession,
};

/// Jobs burnt down while the snapshot is held.
const BURNT: i32 = 20_000;
/// Jobs left queued for the measured claims.
const LEFT: i32 = 10;

/// Each test here holds a snapshot and runs `VACUUM ANALYZE jobs.job`; the analyze invalidates
/// the plans of every other session, and a claim that replans reads the claim index's ends,
/// dead entries and all. Run concurrently, one test's set-up lands in another's measurement.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Takes this file's turn: the tests measure the same table's buffers, one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lesser of two readings of `measure`. Autovacuum analyzes `jobs.job` when it likes (the
/// tests change thousands of its rows), and a claim that runs just after replans: planning
/// reads the index's ends, so that one claim touches the dead entries the floor is there to
/// skip. A claim that walks them itself does so both times.
fn settled(mut measure: impl FnMut() -> i64) -> i64 {
    let first = measure();
    first.min(measure())
}

/// A queue of `jobs` queued jobs, vacuumed, and a session holding a snapshot taken after that:
/// it keeps every dead index entry the queue's claims leave from then on. Returns the worker's
/// session, the queue and the holder's session (its transaction open).
fn queue_under_held_snapshot(
    cluster: &Cluster,
    prefix: &str,
    jobs: i32,
) -> (postgres::Client, String, Vec<i64>, postgres::Client) {
    let (mut worker, queue) = cluster.connect_with_queue(prefix, "");
    let ids = enqueue_empty(&mut worker, &queue, jobs);
    worker.batch_execute("VACUUM ANALYZE jobs.job").unwrap();
    let mut holder = cluster.connect();
    holder
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jobs.job;")
        .unwrap();
    (worker, queue, ids, holder)
}

/// The buffers the statements of the session's last `jobs_claim` call touched, from the plans
/// auto_explain logged since the session's plans were last taken.
fn claim_call_buffers(session: &mut ExplainingSession) -> i64 {
    let plans = session.take_plans();
    let call = plans
        .iter()
        .find(|p| {
            p["Query Text"]
                .as_str()
                .unwrap_or("")
                .contains("FROM jobs_claim")
        })
        .expect("auto_explain logged the claim call");
    plan_buffers(&call["Plan"])
}

/// Runs one claim of one job that commits, and returns the buffers its statements touched.
fn measured_claim(session: &mut ExplainingSession, queue: &str) -> i64 {
    session.take_plans();
    let row = session
        .client
        .query_one("SELECT id, lease FROM jobs_claim($1)", &[&queue])
        .expect("claim");
    let (id, lease): (i64, uuid::Uuid) = (row.get(0), row.get(1));
    let buffers = claim_call_buffers(session);
    let outcome: String = session
        .client
        .query_one("SELECT jobs_complete($1::bigint, $2::uuid)", &[&id, &lease])
        .expect("complete")
        .get(0);
    assert_eq!(outcome, "succeeded");
    buffers
}

#[test]
fn claims_do_not_walk_dead_entries_a_held_snapshot_keeps() {
    let _turn = one_at_a_time();
    let cluster = Cluster::shared();
    let (mut worker, queue, _, mut holder) =
        queue_under_held_snapshot(cluster, "held", BURNT + LEFT);

    let mut burnt = 0;
    while burnt < BURNT {
        let rows = worker
            .query("SELECT id, lease FROM jobs_claim($1, n => 100)", &[&queue])
            .unwrap();
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let leases: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(1)).collect();
        worker
            .execute(
                "SELECT count(*) FROM jobs_complete_batch($1::bigint[], $2::uuid[])",
                &[&ids, &leases],
            )
            .unwrap();
        burnt += ids.len() as i32;
    }

    let mut session = ExplainingSession::open(cluster, "");
    // The session's first claim prepares its plans; planning looks at the index's ends, dead
    // entries and all, once per session. Measure the claims after it.
    measured_claim(&mut session, &queue);
    let with_floor = settled(|| measured_claim(&mut session, &queue));

    // Control: a rolled-back claim gives its job back and resets the floor...
    let mut rollback = cluster.connect();
    rollback
        .batch_execute(&format!(
            "BEGIN; SELECT count(*) FROM jobs_claim('{queue}'); ROLLBACK;"
        ))
        .unwrap();
    // ...so the next claim starts at the head of the index, among the dead entries...
    let without_floor = measured_claim(&mut session, &queue);
    // ...and sets the floor again for the one after it.
    let floor_again = settled(|| measured_claim(&mut session, &queue));
    holder.batch_execute("COMMIT").unwrap();

    println!(
        "held snapshot, {BURNT} jobs burnt down: a claim touched {with_floor} buffers with the \
         floor, {without_floor} without it, {floor_again} with it again"
    );
    assert!(
        with_floor < 60,
        "a claim walked dead entries: {with_floor} buffers"
    );
    assert!(
        floor_again < 60,
        "the floor did not come back: {floor_again} buffers"
    );
    assert!(
        without_floor > 5 * with_floor.max(20),
        "the control should walk the dead entries: {without_floor} buffers vs {with_floor}"
    );
}

/// Claims measured while producers enqueue.
const BUSY_CLAIMS: usize = 400;

#[test]
fn the_floor_rises_past_each_claim_while_other_sessions_enqueue() {
    let _turn = one_at_a_time();
    let cluster = Cluster::shared();
    let (mut worker, queue) = cluster.connect_with_queue("busy", "");
    enqueue_empty(&mut worker, &queue, BUSY_CLAIMS as i32);
    let stop = AtomicBool::new(false);
    let (kept_up, enqueued) = std::thread::scope(|s| {
        // Two sessions commit a job at the tail of the queue, one per transaction, as fast as
        // they can: almost every claim sees one of them commit while it runs.
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (queue, stop) = (&queue, &stop);
                s.spawn(move || {
                    let mut producer = cluster.connect();
                    let mut enqueued = 0;
                    while !stop.load(Ordering::Relaxed) {
                        producer
                            .execute("SELECT jobs_enqueue($1, '{}')", &[queue])
                            .unwrap();
                        enqueued += 1;
                    }
                    enqueued
                })
            })
            .collect();
        let mut kept_up = 0;
        for _ in 0..BUSY_CLAIMS {
            let row = worker
                .query_one("SELECT id, lease FROM jobs_claim($1)", &[&queue])
                .expect("claim");
            let (id, lease): (i64, uuid::Uuid) = (row.get(0), row.get(1));
            worker
                .execute("SELECT jobs_complete($1::bigint, $2::uuid)", &[&id, &lease])
                .unwrap();
            // The jobs committed meanwhile lie past it, so the floor must be right past it.
            let floor: Option<i64> = scalar(
                &mut worker,
                "SELECT floor_id FROM jobs.runtime_state($1)",
                &[&queue],
            );
            if floor == Some(id + 1) {
                kept_up += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let enqueued: i32 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        (kept_up, enqueued)
    });
    println!(
        "{kept_up} of {BUSY_CLAIMS} claims raised the floor while {enqueued} jobs were enqueued"
    );
    assert!(
        enqueued as usize >= BUSY_CLAIMS,
        "the producers enqueued only {enqueued} jobs: too few to race the claims"
    );
    assert!(
        kept_up >= BUSY_CLAIMS * 9 / 10,
        "the floor fell behind: only {kept_up} of {BUSY_CLAIMS} claims raised it past their job"
    );
}

/// Jobs claimed and completed while the snapshot is held, whose entries end up past the floor.
const DEAD_PAST: i32 = 300;

/// Runs one claim that finds nothing, and returns the buffers its statements touched.
fn measured_empty_claim(session: &mut ExplainingSession, queue: &str) -> i64 {
    session.take_plans();
    let claimed: i64 = session
        .client
        .query_one("SELECT count(*) FROM jobs_claim($1)", &[&queue])
        .expect("claim")
        .get(0);
    assert_eq!(claimed, 0, "the queue should be empty");
    claim_call_buffers(session)
}

/// The floor rises past the jobs a claim takes, not past the entries it finds after them. When
/// a job comes in below claimed jobs' entries (a run_at in the past here; under steady traffic,
/// an enqueue whose transaction began before a claimed job's, or a skipped job), its commit
/// lowers the floor, its claim raises it just past itself, and the claimed jobs' entries lie
/// past the floor. While a snapshot holds vacuum back, every claim and every probe of a waiting
/// claim read them again (under steady traffic, about a hundred entries a claim). A claim that
/// reads from the floor and finds no row behind the entries there raises the floor past them.
#[test]
fn a_claim_raises_the_floor_past_the_dead_entries_it_read() {
    let _turn = one_at_a_time();
    let cluster = Cluster::shared();
    let (mut worker, queue, ids, mut holder) =
        queue_under_held_snapshot(cluster, "dead_run", DEAD_PAST);
    let last = *ids.last().unwrap();
    for job in claim(&mut worker, &queue, DEAD_PAST, "") {
        assert_eq!(complete(&mut worker, &job), "succeeded");
    }
    let floor_id = |client: &mut postgres::Client| -> Option<i64> {
        scalar(
            client,
            "SELECT floor_id FROM jobs.runtime_state($1)",
            &[&queue],
        )
    };
    assert_eq!(floor_id(&mut worker), Some(last + 1));

    // A job below them: its commit lowers the floor, its claim raises it just past itself.
    let early: i64 = scalar(
        &mut worker,
        "SELECT jobs_enqueue($1, run_at => now() - interval '1 hour')",
        &[&queue],
    );
    let taken = claim(&mut worker, &queue, 1, "");
    assert_eq!(taken.iter().map(|j| j.id).collect::<Vec<_>>(), [early]);
    assert_eq!(complete(&mut worker, &taken[0]), "succeeded");
    let behind = floor_id(&mut worker);
    assert_eq!(
        behind,
        Some(early + 1),
        "the floor should lie just past the early job"
    );

    let mut session = ExplainingSession::open(cluster, "");
    // Its first claim prepares the session's plans (planning reads the index's ends).
    let reading = measured_empty_claim(&mut session, &queue);
    let raised = floor_id(&mut worker);
    let after = settled(|| measured_empty_claim(&mut session, &queue));
    holder.batch_execute("COMMIT").unwrap();
    println!(
        "{DEAD_PAST} dead entries past the floor: the claim that read them touched {reading} \
         buffers, the next {after}; the floor went from id {behind:?} (past the early job) to \
         id {raised:?} (past the last dead entry)"
    );
    assert_eq!(
        raised,
        Some(last + 1),
        "the claim should raise the floor just past the last dead entry it read"
    );
    assert!(
        reading > 5 * after.max(10),
        "the control: the first claim should read the dead entries ({reading} buffers, the \
         next {after})"
    );
    assert!(after < 40, "a claim walked dead entries: {after} buffers");
}

/// The probe a claim that got nothing makes (whether the queue is paused, when its first job
/// comes due) reads from the floor too, in every part. Its search for the earliest job of the
/// floor's priority once named the priority and the floor's position both, and the btree then
/// started at the priority's head and checked every entry from there, each dead one an old
/// snapshot keeps included: with a delayed job queued, each empty attempt of a waiting claim
/// read them all.
#[test]
fn the_probe_of_a_queue_with_a_delayed_job_does_not_walk_dead_entries() {
    let _turn = one_at_a_time();
    let cluster = Cluster::shared();
    let (mut worker, queue, _, mut holder) =
        queue_under_held_snapshot(cluster, "delayed_probe", BURNT);
    let mut burnt = 0;
    while burnt < BURNT {
        let done: i64 = scalar(
            &mut worker,
            "SELECT count(jobs_complete(c.id, c.lease)) FROM jobs_claim($1, n => 1000) c",
            &[&queue],
        );
        assert!(done > 0, "the burn-down stalled at {burnt} jobs");
        burnt += done as i32;
    }
    worker
        .execute(
            "SELECT jobs_enqueue($1, run_at => now() + interval '1 hour')",
            &[&queue],
        )
        .unwrap();

    let mut session = ExplainingSession::open(cluster, "");
    // The session's first claim prepares its plans.
    measured_empty_claim(&mut session, &queue);
    let probed = settled(|| measured_empty_claim(&mut session, &queue));
    holder.batch_execute("COMMIT").unwrap();
    println!("{BURNT} dead entries, a delayed job queued: an empty claim touched {probed} buffers");
    assert!(
        probed < 40,
        "an empty claim walked dead entries: {probed} buffers"
    );
}
