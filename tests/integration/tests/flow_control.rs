//! Flow control (README "Unique jobs", "Groups", "Rate limits"), over real connections: the
//! semantics of each feature, and the failure modes peers are known for, each a test.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::{
    assert_claims_nothing, claim, claim_ids, column, complete, enqueue_empty, fast_paths,
    freed_heads, jobs_in_state, offered, row, scalar, state, unique_queue, wait_for_a_lock,
    wait_until, Client, Cluster, TEST_SETTINGS,
};
use postgres::types::ToSql;
use serde_json::json;

/// Enqueues with extra named arguments and returns the id.
fn enqueue_with(client: &mut Client, queue: &str, options: &str) -> i64 {
    scalar(
        client,
        &format!("SELECT jobs_enqueue($1, '{{}}'{options})"),
        &[&queue],
    )
}

/// The SQLSTATE and message of the error `sql` raises.
fn error_of(client: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> (String, String) {
    let error = client
        .query(sql, params)
        .expect_err(&format!("{sql} must fail"));
    let db = error.as_db_error().expect("a server error");
    (db.code().code().to_owned(), db.message().to_owned())
}

fn count(client: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> i64 {
    scalar(client, sql, params)
}

// ---------------------------------------------------------------------------------------
// Unique jobs
// ---------------------------------------------------------------------------------------

#[test]
fn a_duplicate_is_skipped_replaced_or_refused_as_asked() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("unique", "");
    let first = enqueue_with(&mut client, &queue, ", unique_key => 'k'");
    // skip (the default): the existing job's id, nothing inserted.
    let again: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, '{\"second\": true}', unique_key => 'k')",
        &[&queue],
    );
    assert_eq!(again, first);
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM jobs.job WHERE queue = $1",
            &[&queue]
        ),
        1
    );
    // replace: a still-queued duplicate takes the new payload, headers, run_at and priority.
    let replaced: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, '{\"v\": 2}', unique_key => 'k', on_conflict => 'replace',
                            priority => -3, headers => '{\"h\": 1}', run_at => now() + interval '1 hour')",
        &[&queue],
    );
    assert_eq!(replaced, first);
    let row = client
        .query_one(
            "SELECT payload, headers, priority, run_at > now() + interval '59 minutes'
               FROM jobs.job WHERE id = $1",
            &[&first],
        )
        .unwrap();
    assert_eq!(row.get::<_, serde_json::Value>(0), json!({"v": 2}));
    assert_eq!(row.get::<_, serde_json::Value>(1), json!({"h": 1}));
    assert_eq!(row.get::<_, i16>(2), -3);
    assert!(row.get::<_, bool>(3));
    // error: 23505, naming the existing job.
    let (code, message) = error_of(
        &mut client,
        "SELECT jobs_enqueue($1, '{}', unique_key => 'k', on_conflict => 'error')",
        &[&queue],
    );
    assert_eq!(code, "23505");
    assert!(
        message.contains(&format!("job {first} (queued)")),
        "{message}"
    );

    // 'replace' never touches a running job.
    let running = enqueue_with(&mut client, &queue, ", unique_key => 'r'");
    let held = claim(&mut client, &queue, 1, "");
    let held: Vec<_> = held.into_iter().filter(|c| c.id == running).collect();
    assert_eq!(held.len(), 1, "claimed the job with key r");
    let before: serde_json::Value = scalar(
        &mut client,
        "SELECT to_jsonb(j) FROM jobs.job j WHERE id = $1",
        &[&running],
    );
    let answer: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, '{\"new\": 1}', unique_key => 'r', on_conflict => 'replace')",
        &[&queue],
    );
    assert_eq!(answer, running);
    let after: serde_json::Value = scalar(
        &mut client,
        "SELECT to_jsonb(j) FROM jobs.job j WHERE id = $1",
        &[&running],
    );
    assert_eq!(before, after, "replace changed a running job");
}

#[test]
fn a_key_is_free_again_once_its_job_failed_was_cancelled_or_its_window_passed() {
    let (mut client, queue) =
        Cluster::shared().connect_with_queue("unique-free", "max_attempts => 1");
    // Failed.
    let first = enqueue_with(&mut client, &queue, ", unique_key => 'f'");
    let held = claim(&mut client, &queue, 1, "");
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'boom')",
        &[&first, &held[0].lease],
    );
    assert_eq!(answer, "failed");
    let second = enqueue_with(&mut client, &queue, ", unique_key => 'f'");
    assert_ne!(second, first, "the key of a failed job must be free");
    // Cancelled.
    let state: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&second]);
    assert_eq!(state, "cancelled");
    let third = enqueue_with(&mut client, &queue, ", unique_key => 'f'");
    assert_ne!(third, second, "the key of a cancelled job must be free");
    // Succeeded without a window: free at once.
    let held = claim(&mut client, &queue, 1, "");
    let _: String = scalar(
        &mut client,
        "SELECT jobs_complete($1, $2)",
        &[&third, &held[0].lease],
    );
    let fourth = enqueue_with(&mut client, &queue, ", unique_key => 'f'");
    assert_ne!(fourth, third);
    // Succeeded with unique_for: held for the window, free after it.
    let windowed = enqueue_with(
        &mut client,
        &queue,
        ", unique_key => 'w', unique_for => '2 seconds'",
    );
    let held: Vec<_> = claim(&mut client, &queue, 10, "")
        .into_iter()
        .filter(|c| c.id == windowed)
        .collect();
    let _: String = scalar(
        &mut client,
        "SELECT jobs_complete($1, $2)",
        &[&windowed, &held[0].lease],
    );
    let during = enqueue_with(&mut client, &queue, ", unique_key => 'w'");
    assert_eq!(
        during, windowed,
        "a succeeded job holds its key for unique_for"
    );
    thread::sleep(Duration::from_millis(2100));
    let after = enqueue_with(&mut client, &queue, ", unique_key => 'w'");
    assert_ne!(
        after, windowed,
        "the key must be free once the window passed"
    );
}

#[test]
fn a_unique_job_never_conflicts_with_itself() {
    let (mut client, queue) = Cluster::shared()
        .connect_with_queue("unique-self", "lease => '1 second', max_attempts => 10");
    let id = enqueue_with(&mut client, &queue, ", unique_key => 'self'");
    // Retried by a failure.
    let held = claim(&mut client, &queue, 1, "");
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'again', retry_in => '0')",
        &[&id, &held[0].lease],
    );
    assert_eq!(answer, "queued");
    // Released.
    let held = claim(&mut client, &queue, 1, "");
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_release($1, $2)",
        &[&id, &held[0].lease],
    );
    assert_eq!(answer, "queued");
    // Reclaimed after its lease ran out.
    let _ = claim(&mut client, &queue, 1, "");
    wait_until(Duration::from_secs(20), "the reclaim", || {
        state(&mut client, id) == "queued"
    });
    // Failed for good, then jobs_retry'd.
    let held = claim(&mut client, &queue, 1, "");
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'stop', retry => false)",
        &[&id, &held[0].lease],
    );
    assert_eq!(answer, "failed");
    let answer: String = scalar(&mut client, "SELECT jobs_retry($1)", &[&id]);
    assert_eq!(answer, "queued");
    assert_eq!(
        enqueue_with(&mut client, &queue, ", unique_key => 'self'"),
        id,
        "the retried job holds its key again"
    );
    // A retry while a newer job holds the key is refused, naming it.
    let held = claim(&mut client, &queue, 1, "");
    let _: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'stop', retry => false)",
        &[&id, &held[0].lease],
    );
    let newer = enqueue_with(&mut client, &queue, ", unique_key => 'self'");
    assert_ne!(newer, id);
    let (code, message) = error_of(&mut client, "SELECT jobs_retry($1)", &[&id]);
    assert_eq!(code, "23505");
    assert!(
        message.contains(&format!("job {newer} (queued) holds")),
        "{message}"
    );
}

#[test]
fn the_same_key_in_two_queues_or_two_tenants_is_two_jobs() {
    let (mut client, a) = Cluster::shared().connect_with_queue("unique-a", "");
    let b = unique_queue(&mut client, "unique-b", "");
    let in_a = enqueue_with(&mut client, &a, ", unique_key => 'same'");
    let in_b = enqueue_with(&mut client, &b, ", unique_key => 'same'");
    assert_ne!(in_a, in_b);
    let acme = enqueue_with(&mut client, &a, ", unique_key => 'same', tenant => 'acme'");
    let globex = enqueue_with(
        &mut client,
        &a,
        ", unique_key => 'same', tenant => 'globex'",
    );
    assert!(acme != in_a && globex != in_a && acme != globex);
}

#[test]
fn when_the_first_enqueue_rolls_back_a_concurrent_one_inserts() {
    let cluster = Cluster::shared();
    let (mut admin, queue) = cluster.connect_with_queue("unique-rollback", "");
    for outcome in ["ROLLBACK", "COMMIT"] {
        let key = format!("key-{outcome}");
        let mut first = cluster.connect();
        first.batch_execute("BEGIN").unwrap();
        let first_id: i64 = scalar(
            &mut first,
            "SELECT jobs_enqueue($1, '{}', unique_key => $2)",
            &[&queue, &key],
        );
        let (queue2, key2) = (queue.clone(), key.clone());
        let mut second = cluster.connect();
        let racer = thread::spawn(move || -> i64 {
            scalar(
                &mut second,
                "SELECT jobs_enqueue($1, '{}', unique_key => $2)",
                &[&queue2, &key2],
            )
        });
        // The second waits on the first's uncommitted job.
        wait_until(
            Duration::from_secs(10),
            "the second enqueue to wait",
            || {
                count(
                    &mut admin,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
                    AND query LIKE 'SELECT jobs_enqueue(%unique_key%'",
                    &[],
                ) > 0
            },
        );
        first.batch_execute(outcome).unwrap();
        let second_id = racer.join().unwrap();
        let jobs = count(
            &mut admin,
            "SELECT count(*) FROM jobs.job WHERE queue = $1 AND unique_key = $2",
            &[&queue, &key],
        );
        assert_eq!(jobs, 1, "{outcome}: exactly one job holds the key");
        if outcome == "ROLLBACK" {
            assert_ne!(
                second_id, first_id,
                "the loser must insert when the winner rolls back"
            );
        } else {
            assert_eq!(second_id, first_id, "the loser must get the winner's id");
        }
    }
}

#[test]
fn thirty_two_concurrent_enqueues_of_one_key_make_one_job() {
    let cluster = Cluster::shared();
    let (mut admin, queue) = cluster.connect_with_queue("unique-race", "");
    let barrier = Arc::new(Barrier::new(32));
    let racers: Vec<_> = (0..32)
        .map(|i| {
            let barrier = barrier.clone();
            let queue = queue.clone();
            let mut client = cluster.connect();
            thread::spawn(move || -> i64 {
                barrier.wait();
                if i % 2 == 0 {
                    scalar(
                        &mut client,
                        "SELECT jobs_enqueue($1, '{}', unique_key => 'hot')",
                        &[&queue],
                    )
                } else {
                    scalar(
                        &mut client,
                        "SELECT id FROM jobs_enqueue_batch($1, ARRAY['{}', '{}']::jsonb[],
                                                          unique_keys => ARRAY['hot', 'hot'])
                          LIMIT 1",
                        &[&queue],
                    )
                }
            })
        })
        .collect();
    let ids: HashSet<i64> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(
        ids.len(),
        1,
        "every enqueue must answer the one job: {ids:?}"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM jobs.job WHERE queue = $1",
            &[&queue]
        ),
        1
    );
}

/// Jobs whose unique keys nobody holds go through the direct writer, in a subtransaction
/// (the row's xmin is that subtransaction's id, not the transaction's own); a held key rolls
/// that back and takes the `ON CONFLICT` statements (the duplicate is answered with its
/// holder, as always); after that the session skips the direct try for its next call, then
/// tries again. Inside one transaction, so every insert's xmin can be compared with its id.
/// With the fast paths off, every call takes the statements.
/// The transaction id of `tx` as a row's xmin shows it (the low 32 bits).
fn own_xid(tx: &mut postgres::Transaction<'_>) -> i64 {
    scalar(tx, "SELECT txid_current() % 4294967296", &[])
}

#[test]
fn keys_nobody_holds_take_the_direct_writer_and_held_ones_the_statements() {
    // The statements find a key's holder through the unique index; the direct writer only
    // inserts into it. So this transaction's scans of that index tell the two apart.
    let (mut client, queue) = Cluster::shared().connect_with_queue("unique-direct", "");
    let mut tx = client.transaction().unwrap();
    let own = own_xid(&mut tx);
    // (id, the row's xmin, whether the call scanned the unique index)
    let mut enqueue = |key: &str| -> (i64, i64, bool) {
        let scans = |tx: &mut postgres::Transaction<'_>| -> i64 {
            scalar(
                tx,
                "SELECT pg_stat_get_xact_numscans('jobs.job_unique_idx'::regclass)",
                &[],
            )
        };
        let before = scans(&mut tx);
        let id: i64 = scalar(
            &mut tx,
            "SELECT jobs_enqueue($1, '{}', unique_key => $2)",
            &[&queue, &key],
        );
        let scanned = scans(&mut tx) > before;
        let xmin: i64 = scalar(
            &mut tx,
            "SELECT xmin::text::bigint FROM jobs.job WHERE id = $1",
            &[&id],
        );
        (id, xmin, scanned)
    };
    let direct = fast_paths();
    let (first, first_xmin, scanned) = enqueue("a");
    assert_eq!(
        !scanned, direct,
        "a free key takes the direct writer with the fast paths on, the statements off"
    );
    assert_eq!(
        first_xmin, own,
        "a single unique job went in through a subtransaction"
    );
    let (duplicate, _, scanned) = enqueue("a");
    assert_eq!(
        duplicate, first,
        "the duplicate was not answered with its holder"
    );
    assert!(scanned, "the held key was not resolved by the statements");
    let (after_conflict, _, scanned) = enqueue("b");
    assert_ne!(after_conflict, first);
    assert!(
        scanned,
        "the call after a held key did not skip the direct try"
    );
    let (again, again_xmin, scanned) = enqueue("c");
    assert!(again > after_conflict);
    assert_eq!(
        !scanned, direct,
        "the session tries the direct writer again, with the fast paths on"
    );
    assert_eq!(again_xmin, own);
    let batch: Vec<(i64, bool)> = tx
        .query(
            "SELECT id, inserted FROM jobs_enqueue_batch($1, ARRAY['{}', '{}']::jsonb[],
                                                        unique_keys => ARRAY['d', 'e'])",
            &[&queue],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(batch.iter().all(|(_, inserted)| *inserted), "{batch:?}");
    let (held, holds): (i64, i64) = row(
        &mut tx,
        "SELECT count(*), count(*) FILTER (WHERE unique_hold AND unique_key IS NOT NULL)
                   FROM jobs.job WHERE queue = $1",
        &[&queue],
    );
    assert_eq!((held, holds), (5, 5), "every job holds its key");
    tx.commit().unwrap();
}

#[test]
fn a_transaction_of_many_unique_enqueues_opens_no_subtransaction() {
    // Past 64 subtransactions in one transaction every snapshot taken in the whole server
    // overflows and reads pg_subtrans: an application that enqueues a unique job per row it
    // changes must not open one per job. Each enqueue here also meets a held key (the keys
    // repeat), which the statements resolve without one either.
    let (mut client, queue) = Cluster::shared().connect_with_queue("unique-no-subxact", "");
    let mut tx = client.transaction().unwrap();
    let own = own_xid(&mut tx);
    for n in 0..200 {
        tx.query_one(
            "SELECT jobs_enqueue($1, '{}', unique_key => $2)",
            &[&queue, &format!("key-{}", n % 100)],
        )
        .unwrap();
    }
    let (jobs, in_own_xid): (i64, i64) = row(
        &mut tx,
        "SELECT count(*), count(*) FILTER (WHERE xmin::text::bigint = $2)
                   FROM jobs.job WHERE queue = $1",
        &[&queue, &own],
    );
    assert_eq!(jobs, 100, "one job per key");
    assert_eq!(
        in_own_xid, 100,
        "jobs inserted by subtransactions of the caller's transaction"
    );
    tx.commit().unwrap();
}

#[test]
fn a_batch_answers_each_payload_and_takes_duplicates_inside_it() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("unique-batch", "");
    let existing = enqueue_with(&mut client, &queue, ", unique_key => 'old'");
    let rows = client
        .query(
            "SELECT id, inserted FROM jobs_enqueue_batch($1,
                 ARRAY['{\"n\": 1}', '{\"n\": 2}', '{\"n\": 3}', '{\"n\": 4}', '{\"n\": 5}']::jsonb[],
                 unique_keys => ARRAY['a', 'old', NULL, 'a', 'b'])",
            &[&queue],
        )
        .unwrap();
    let answers: Vec<(i64, bool)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(answers.len(), 5, "one row per payload");
    assert!(answers[0].1 && answers[2].1 && answers[4].1);
    assert_eq!(
        answers[1],
        (existing, false),
        "the existing holder of 'old'"
    );
    assert_eq!(
        answers[3],
        (answers[0].0, false),
        "the batch's own first 'a'"
    );
    let payload_of_a: serde_json::Value = scalar(
        &mut client,
        "SELECT payload FROM jobs.job WHERE id = $1",
        &[&answers[0].0],
    );
    assert_eq!(
        payload_of_a,
        json!({"n": 1}),
        "skip keeps the first payload"
    );
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM jobs.job WHERE queue = $1",
            &[&queue]
        ),
        4
    );
    // The shared unique_key: the first payload wins, the rest are duplicates of it.
    let rows = client
        .query(
            "SELECT id, inserted FROM jobs_enqueue_batch($1, ARRAY['{}', '{}', '{}']::jsonb[],
                                                          unique_key => 'shared')",
            &[&queue],
        )
        .unwrap();
    let flags: Vec<bool> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(flags, [true, false, false]);
}

// ---------------------------------------------------------------------------------------
// Groups
// ---------------------------------------------------------------------------------------

/// Enqueues `n` jobs of group `g` into `queue` and returns their ids, in enqueue order.
fn enqueue_in_group(client: &mut Client, queue: &str, n: usize) -> Vec<i64> {
    (0..n)
        .map(|_| enqueue_with(client, queue, ", group_key => 'g'"))
        .collect()
}

/// Claims one job and returns its id, if any.
fn claim_id(client: &mut Client, queue: &str) -> Option<i64> {
    claim(client, queue, 1, "").first().map(|c| c.id)
}

#[test]
fn a_group_of_concurrency_one_runs_in_enqueue_order_whatever_the_priorities() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("group-order", "");
    let ids: Vec<i64> = [5, 0, -5]
        .iter()
        .map(|p| {
            enqueue_with(
                &mut client,
                &queue,
                &format!(", group_key => 'g', priority => {p}"),
            )
        })
        .collect();
    let mut order = Vec::new();
    while let Some(c) = claim(&mut client, &queue, 10, "").first().copied() {
        assert!(
            claim(&mut client, &queue, 10, "").is_empty(),
            "a second job of the group ran while {} ran",
            c.id
        );
        assert_eq!(complete(&mut client, &c), "succeeded");
        order.push(c.id);
    }
    assert_eq!(order, ids, "priority is ignored inside a group");
}

#[test]
fn a_head_waiting_for_its_backoff_blocks_its_group_and_no_other() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("group-backoff", "");
    let head = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let _later = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let other = enqueue_with(&mut client, &queue, ", group_key => 'h'");
    let held = claim(&mut client, &queue, 10, "");
    let ids: HashSet<i64> = held.iter().map(|c| c.id).collect();
    assert_eq!(ids, HashSet::from([head, other]), "one job per group");
    let head_lease = held.iter().find(|c| c.id == head).unwrap().lease;
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'later', retry_in => '1 hour')",
        &[&head, &head_lease],
    );
    assert_eq!(answer, "queued");
    assert_claims_nothing(
        &mut client,
        &queue,
        10,
        "the group's next job ran while its head waits for its retry",
    );
    let free_group = enqueue_with(&mut client, &queue, ", group_key => 'i'");
    assert_eq!(claim_id(&mut client, &queue), Some(free_group));
}

#[test]
fn every_path_that_ends_a_run_frees_the_groups_slot() {
    let cluster = Cluster::shared();
    let mut client = cluster.connect();
    // Leases long enough that no reclaim comes between a claim and its ender on a busy machine
    // (the suite runs this file's tests at once); the reclaim below asks for a short one.
    let queue = unique_queue(
        &mut client,
        "group-slots",
        "lease => '1 hour', max_attempts => 5",
    );
    let jobs = enqueue_in_group(&mut client, &queue, 6);
    type Ender = Box<dyn Fn(&mut Client, i64, uuid::Uuid)>;
    let enders: Vec<(&str, Ender)> = vec![
        (
            "complete",
            Box::new(|c, id, lease| {
                let _: String = scalar(c, "SELECT jobs_complete($1, $2)", &[&id, &lease]);
            }),
        ),
        (
            "fail",
            Box::new(|c, id, lease| {
                let _: String = scalar(
                    c,
                    "SELECT jobs_fail($1, $2, 'x', retry => false)",
                    &[&id, &lease],
                );
            }),
        ),
        (
            "cancel",
            Box::new(|c, id, _| {
                let _: String = scalar(c, "SELECT jobs_cancel($1)", &[&id]);
            }),
        ),
        (
            "release to a later time",
            Box::new(|c, id, lease| {
                let _: String = scalar(
                    c,
                    "SELECT jobs_release($1, $2, retry_in => '1 hour')",
                    &[&id, &lease],
                );
            }),
        ),
    ];
    for (name, end) in &enders {
        let held = claim(&mut client, &queue, 10, "");
        assert_eq!(held.len(), 1, "{name}: one job of the group at a time");
        assert_claims_nothing(
            &mut client,
            &queue,
            10,
            "{name}: the group's next job ran while its head runs",
        );
        end(&mut client, held[0].id, held[0].lease);
        if *name == "release to a later time" {
            // A released head keeps its place: the group waits for it.
            assert_claims_nothing(&mut client, &queue, 10, "{name}");
            let _: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&held[0].id]);
        }
    }
    // Reclaim after a worker died.
    let held = claim(&mut client, &queue, 10, ", lease => '1 second'");
    assert_eq!(held.len(), 1, "the group's next job after the cancel");
    wait_until(Duration::from_secs(20), "the reclaim", || {
        state(&mut client, held[0].id) == "queued"
    });
    let again = claim(&mut client, &queue, 10, "");
    assert_eq!(
        again.iter().map(|c| c.id).collect::<Vec<_>>(),
        [held[0].id],
        "the reclaimed head runs again, and only it"
    );
    assert_eq!(jobs.len(), 6);
}

/// The history checker's finding at concurrency 2: a reclaimed job's old holder heartbeated
/// it back to running after a claim had given its slot to another job of the group.
#[test]
fn a_heartbeat_never_runs_a_reclaimed_job_over_its_groups_concurrency() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("group-revive", "group_concurrency => 2");
    let first = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let second = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let held = claim(&mut client, &queue, 2, ", lease => '1 hour'");
    assert_eq!(
        held.iter().map(|c| c.id).collect::<Vec<_>>(),
        [first, second]
    );
    // The first one's lease runs out in a second (a heartbeat's `extend` counts from now).
    let short = &held[0..1];
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_heartbeat($1, $2, extend => '1 second')",
        &[&first, &short[0].lease],
    );
    assert_eq!(answer, "running");
    // Ahead of the reclaimed job in claim order, so the next claim takes it instead.
    let urgent = enqueue_with(&mut client, &queue, ", group_key => 'g', priority => -1");
    wait_until(Duration::from_secs(20), "the reclaim", || {
        state(&mut client, first) == "queued"
    });
    let slot = claim(&mut client, &queue, 10, "");
    assert_eq!(
        slot.iter().map(|c| c.id).collect::<Vec<_>>(),
        [urgent],
        "the reclaim freed one slot"
    );
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_heartbeat($1, $2)",
        &[&first, &short[0].lease],
    );
    assert_eq!(answer, "lost", "its slot went to another job");
    let running = jobs_in_state(&mut client, &queue, "running");
    assert_eq!(running, 2, "never more than the group's concurrency");
    assert_eq!(state(&mut client, first), "queued");
    // Done still wins: the late holder's result is recorded.
    let done: String = scalar(
        &mut client,
        "SELECT jobs_complete($1, $2)",
        &[&first, &short[0].lease],
    );
    assert_eq!(done, "succeeded");
    // An ungrouped job in the same place is revived, as before.
    let plain = enqueue_with(&mut client, &queue, "");
    let held = claim(&mut client, &queue, 10, ", lease => '1 second'");
    assert_eq!(held.iter().map(|c| c.id).collect::<Vec<_>>(), [plain]);
    wait_until(Duration::from_secs(20), "the reclaim", || {
        state(&mut client, plain) == "queued"
    });
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_heartbeat($1, $2)",
        &[&plain, &held[0].lease],
    );
    assert_eq!(answer, "running");
}

#[test]
fn a_claim_skips_full_groups_and_takes_from_as_many_groups_as_it_needs() {
    let (mut client, queue) =
        Cluster::shared().connect_with_queue("group-many", "group_concurrency => 2");
    for group in 0..20 {
        for _ in 0..3 {
            enqueue_with(&mut client, &queue, &format!(", group_key => 'g{group}'"));
        }
    }
    let held = claim(&mut client, &queue, 40, "");
    assert_eq!(held.len(), 40, "two jobs from each of 20 groups");
    let per_group: HashMap<String, i64> = client
        .query(
            "SELECT group_key, count(*) FROM jobs.job WHERE queue = $1 AND state = 'running'
              GROUP BY group_key",
            &[&queue],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(per_group.len(), 20);
    assert!(per_group.values().all(|n| *n == 2), "{per_group:?}");
    assert_claims_nothing(&mut client, &queue, 40, "every group is full");
}

#[test]
fn a_waiting_claim_wakes_when_its_group_frees_a_slot() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("group-wake", "");
    let head = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let next = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let held = claim(&mut client, &queue, 1, "");
    assert_eq!(held[0].id, head);
    let q = queue.clone();
    let mut waiter = cluster.connect();
    let waiting = thread::spawn(move || claim(&mut waiter, &q, 1, ", wait => '20 seconds'"));
    wait_until(Duration::from_secs(10), "the claim to wait", || {
        scalar::<i32>(
            &mut client,
            "SELECT waiters FROM jobs.runtime_state($1)",
            &[&queue],
        ) > 0
    });
    let started = Instant::now();
    let _: String = scalar(
        &mut client,
        "SELECT jobs_complete($1, $2)",
        &[&head, &held[0].lease],
    );
    let got = waiting.join().unwrap();
    assert_eq!(got.iter().map(|c| c.id).collect::<Vec<_>>(), [next]);
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// The ids of `queue`'s jobs that wait for their groups, in id order: marked waiting
/// (`group_wait`) and not handed to the next claim as a freed head.
fn waiting(client: &mut Client, queue: &str) -> Vec<i64> {
    let freed = freed_heads(client, queue);
    marked(client, queue)
        .into_iter()
        .filter(|id| !freed.contains(id))
        .collect()
}

/// The ids of `queue`'s jobs marked waiting for their groups (`group_wait`), in id order.
fn marked(client: &mut Client, queue: &str) -> Vec<i64> {
    column(
        client,
        "SELECT id FROM jobs.job WHERE queue = $1 AND group_wait ORDER BY id",
        &[&queue],
    )
}

#[test]
fn a_job_behind_its_group_waits_out_of_the_claim_index_until_its_group_moves_on() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("group-marks", "");
    let jobs = enqueue_in_group(&mut client, &queue, 3);
    let held = claim(&mut client, &queue, 10, "");
    assert_eq!(held.iter().map(|c| c.id).collect::<Vec<_>>(), [jobs[0]]);
    assert_eq!(
        waiting(&mut client, &queue),
        [jobs[1], jobs[2]],
        "the claim marked the jobs behind the running head"
    );
    // Out of the claim index: a claim does not see them at all (the plan reads only the
    // index, whose predicate leaves them out).
    let visible: i64 = count(
        &mut client,
        "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state = 'queued' AND NOT group_wait",
        &[&queue],
    );
    assert_eq!(visible, 0);
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    assert_eq!(
        waiting(&mut client, &queue),
        [jobs[2]],
        "completing the head handed the next job to the next claim, and only it"
    );
    assert_eq!(freed_heads(&mut client, &queue), offered([jobs[1]]));
    let next = claim(&mut client, &queue, 10, "");
    assert_eq!(next.iter().map(|c| c.id).collect::<Vec<_>>(), [jobs[1]]);
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'x', retry => false)",
        &[&next[0].id, &next[0].lease],
    );
    assert_eq!(answer, "failed");
    assert!(waiting(&mut client, &queue).is_empty());
    assert_eq!(claim_id(&mut client, &queue), Some(jobs[2]));

    // jobs_retry of the failed job makes it the group's head again while a later job of the
    // group runs: a claim marks it waiting (the group is full), and the running job's end
    // moves the group on.
    let _: String = scalar(&mut client, "SELECT jobs_retry($1)", &[&jobs[1]]);
    assert!(claim(&mut client, &queue, 10, "").is_empty());
    assert_eq!(waiting(&mut client, &queue), [jobs[1]]);
    let _: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&jobs[2]]);
    assert_eq!(
        claim_id(&mut client, &queue),
        Some(jobs[1]),
        "cancel moved the group on"
    );
}

#[test]
fn a_batch_marks_the_jobs_behind_its_own_jobs_of_a_group_and_no_others() {
    let mut client = Cluster::shared().connect();
    for (concurrency, expected) in [
        (1, [false, true, true, false, false]),
        (2, [false, false, true, false, false]),
    ] {
        let queue = unique_queue(
            &mut client,
            "group-batch",
            &format!("group_concurrency => {concurrency}"),
        );
        // An earlier job of group h: the batch's h job does not look at it (a claim will).
        enqueue_with(&mut client, &queue, ", group_key => 'h'");
        let ids: Vec<i64> = column(
            &mut client,
            "SELECT id FROM jobs_enqueue_batch($1, ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[],
                                                   group_keys => ARRAY['g', 'g', 'g', 'h', NULL])",
            &[&queue],
        );
        let marks: Vec<bool> = column(
            &mut client,
            "SELECT group_wait FROM jobs.job WHERE id = ANY ($1) ORDER BY id",
            &[&ids],
        );
        assert_eq!(marks, expected, "group_concurrency {concurrency}");
        // Claims that complete what they got run every job, each group's in enqueue order.
        let mut order = Vec::new();
        loop {
            let held = claim(&mut client, &queue, 10, "");
            if held.is_empty() {
                break;
            }
            for job in &held {
                assert_eq!(complete(&mut client, job), "succeeded");
                order.push(job.id);
            }
        }
        let left: i64 = count(
            &mut client,
            "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state <> 'succeeded'",
            &[&queue],
        );
        assert_eq!(left, 0, "group_concurrency {concurrency}");
        let position = |id: i64| order.iter().position(|done| *done == id).unwrap();
        assert!(position(ids[0]) < position(ids[2]), "{order:?}");
    }
}

#[test]
fn a_larger_group_frees_one_waiting_job_per_free_slot_and_a_new_concurrency_frees_all() {
    let (mut client, queue) =
        Cluster::shared().connect_with_queue("group-slots-k", "group_concurrency => 2");
    let jobs = enqueue_in_group(&mut client, &queue, 6);
    let held = claim(&mut client, &queue, 10, "");
    assert_eq!(held.len(), 2);
    assert_eq!(waiting(&mut client, &queue), jobs[2..].to_vec());
    // A release frees a slot (the released job waits for its retry time, not for a slot).
    let _: String = scalar(
        &mut client,
        "SELECT jobs_release($1, $2, retry_in => '1 hour')",
        &[&held[0].id, &held[0].lease],
    );
    assert_eq!(waiting(&mut client, &queue), jobs[3..].to_vec());
    assert_eq!(claim_id(&mut client, &queue), Some(jobs[2]));
    assert_claims_nothing(&mut client, &queue, 10, "the group is full");
    // More concurrency: every mark goes, and claims decide again.
    let _: i64 = count(
        &mut client,
        "SELECT count(*) FROM jobs_create_queue($1, group_concurrency => 5)",
        &[&queue],
    );
    assert!(waiting(&mut client, &queue).is_empty());
    let more = claim(&mut client, &queue, 10, "");
    assert_eq!(
        more.iter().map(|c| c.id).collect::<Vec<_>>(),
        jobs[3..].to_vec(),
        "five running: the two before and these three"
    );
}

/// A claim that marks a job keeps its group's lock until it ends, and a settle of the group
/// waits for it: the settle then sees the mark and clears it. Were the settle not to wait (or
/// to read with its transaction's older snapshot, under REPEATABLE READ), the mark would be
/// made after the settle looked, and the job would wait for ever.
#[test]
fn a_settle_racing_a_claim_that_marks_its_groups_next_job_clears_the_mark() {
    let cluster = Cluster::shared();
    for isolation in ["READ COMMITTED", "REPEATABLE READ"] {
        let (mut client, queue) = cluster.connect_with_queue("group-race", "");
        let head = enqueue_with(&mut client, &queue, ", group_key => 'g'");
        let next = enqueue_with(&mut client, &queue, ", group_key => 'g'");
        let held = claim(&mut client, &queue, 1, "");
        assert_eq!(held[0].id, head);

        // The settling session's snapshot is taken before the claim marks `next`.
        let mut settler = cluster.connect();
        settler
            .batch_execute(&format!("BEGIN ISOLATION LEVEL {isolation}; SELECT 1"))
            .unwrap();
        let mut claimer = cluster.connect();
        claimer.batch_execute("BEGIN").unwrap();
        assert!(claim(&mut claimer, &queue, 10, "").is_empty());
        assert_eq!(waiting(&mut claimer, &queue), [next], "{isolation}");
        let settler_pid: i32 = scalar(&mut settler, "SELECT pg_backend_pid()", &[]);
        let (id, lease) = (held[0].id, held[0].lease);
        let settling = thread::spawn(move || {
            let answer: String =
                scalar(&mut settler, "SELECT jobs_complete($1, $2)", &[&id, &lease]);
            settler.batch_execute("COMMIT").unwrap();
            answer
        });
        wait_for_a_lock(
            &mut client,
            settler_pid,
            "the settle to wait for the group's lock",
        );
        claimer.batch_execute("COMMIT").unwrap();
        assert_eq!(settling.join().unwrap(), "succeeded", "{isolation}");
        assert!(
            waiting(&mut client, &queue).is_empty(),
            "{isolation}: the mark stayed"
        );
        assert_eq!(claim_id(&mut client, &queue), Some(next), "{isolation}");
    }
}

/// Done wins for a grouped job too (Rule 5): a late holder completes its reclaimed head while a
/// claim that picked the head (holding the job's and the group's locks) waits for the job's
/// row, which the settle holds (its first statement met the row while the reclaim changed it;
/// here a `FOR UPDATE` holds it on purpose). No claim took the job before the settle, so the
/// complete succeeds, whether the claim then rolls back or commits (it took nothing of the
/// head; its rollback was how the history checker saw a `lost` answer with no claim after it).
/// The settle cannot wait for the group's lock (the claim holding it waits for the settle), so
/// the group moves on without it: the next job of the group is claimable afterwards, also when
/// the waiting claim marked it in its own transaction (then the claim moves the group on).
#[test]
fn a_late_complete_of_a_reclaimed_grouped_head_wins_over_a_claim_waiting_for_its_row() {
    let cluster = Cluster::shared();
    let mut client = cluster.connect();
    for (ending, marked_before) in [
        ("ROLLBACK", true),
        ("COMMIT", true),
        ("ROLLBACK", false),
        ("COMMIT", false),
    ] {
        let queue = unique_queue(&mut client, "group-late", "");
        let mut jobs = enqueue_in_group(&mut client, &queue, 1);
        if marked_before {
            jobs.extend(enqueue_in_group(&mut client, &queue, 1));
        }
        let held = claim(&mut client, &queue, 10, "");
        assert_eq!(held.iter().map(|c| c.id).collect::<Vec<_>>(), [jobs[0]]);
        if !marked_before {
            // Enqueued behind the running head: the claim below marks it.
            jobs.extend(enqueue_in_group(&mut client, &queue, 1));
        }
        let case = format!(
            "{ending}, marked {}",
            if marked_before {
                "before"
            } else {
                "by the claim"
            }
        );
        assert_eq!(
            marked(&mut client, &queue),
            if marked_before { vec![jobs[1]] } else { vec![] },
            "{case}"
        );
        client
            .execute(
                "UPDATE jobs.job SET lease_until = now() - interval '1 second' WHERE id = $1",
                &[&jobs[0]],
            )
            .unwrap();
        let _: i32 = scalar(&mut client, "SELECT jobs_reclaim()", &[]);
        // The background worker may be reclaiming it at the same moment (jobs_reclaim then
        // skips the row it holds): wait for whichever commits.
        wait_until(Duration::from_secs(10), "the head to be reclaimed", || {
            state(&mut client, jobs[0]) == "queued"
        });

        let mut settler = cluster.connect();
        settler.batch_execute("BEGIN").unwrap();
        settler
            .execute("SELECT FROM jobs.job WHERE id = $1 FOR UPDATE", &[&jobs[0]])
            .unwrap();
        let mut claimer = cluster.connect();
        let claimer_pid: i32 = scalar(&mut claimer, "SELECT pg_backend_pid()", &[]);
        let claiming = {
            let queue = queue.clone();
            thread::spawn(move || {
                claimer.batch_execute("BEGIN").unwrap();
                let taken: Vec<i64> = claim_ids(&mut claimer, &queue, 10);
                claimer.batch_execute(ending).unwrap();
                taken
            })
        };
        wait_for_a_lock(
            &mut client,
            claimer_pid,
            "the claim to wait for the head's row",
        );
        let answer: String = scalar(
            &mut settler,
            "SELECT jobs_complete($1, $2)",
            &[&jobs[0], &held[0].lease],
        );
        assert_eq!(answer, "succeeded", "{case}: no claim took the job before");
        settler.batch_execute("COMMIT").unwrap();
        let taken = claiming.join().unwrap();
        assert!(
            !taken.contains(&jobs[0]),
            "{case}: the claim took the finished head"
        );
        assert_eq!(state(&mut client, jobs[0]), "succeeded", "{case}");
        // The group moved on: its next job was taken by the claim (if it committed), or is
        // claimable now.
        if ending == "COMMIT" && taken.contains(&jobs[1]) {
            assert_eq!(state(&mut client, jobs[1]), "running");
        } else {
            assert_eq!(claim_id(&mut client, &queue), Some(jobs[1]), "{case}");
        }
        assert!(marked(&mut client, &queue).is_empty(), "{case}");
    }
}

/// A settle that frees its group's slots while another transaction holds the row of a job
/// waiting for the group, and waits for the group's lock: the history checker found the
/// deadlock (a late settle of a reclaimed job against a settle moving the group on, at
/// concurrency 2); a cancel of the waiting job makes it on demand. The settle that moves the
/// group on passes over the held job, the cancel then moves the group on itself, and the other
/// waiting job is claimable.
#[test]
fn a_group_moving_on_passes_over_a_waiting_job_another_transaction_holds() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("group-held", "group_concurrency => 2");
    let jobs = enqueue_in_group(&mut client, &queue, 4);
    let held = claim(&mut client, &queue, 10, "");
    assert_eq!(held.len(), 2);
    assert_eq!(waiting(&mut client, &queue), jobs[2..].to_vec());

    // The settler holds the group's lock from its first complete (which frees jobs[2]).
    let mut settler = cluster.connect();
    settler.batch_execute("BEGIN").unwrap();
    assert_eq!(complete(&mut settler, &held[0]), "succeeded");
    // The canceller updates the still-waiting jobs[3], then waits for the group's lock.
    let mut canceller = cluster.connect();
    let canceller_pid: i32 = scalar(&mut canceller, "SELECT pg_backend_pid()", &[]);
    let waiting_job = jobs[3];
    let cancelling = thread::spawn(move || {
        canceller.batch_execute("BEGIN").unwrap();
        let cancelled: String = scalar(&mut canceller, "SELECT jobs_cancel($1)", &[&waiting_job]);
        canceller.batch_execute("COMMIT").unwrap();
        cancelled
    });
    wait_for_a_lock(
        &mut client,
        canceller_pid,
        "the cancel to wait for the group's lock",
    );
    // The second complete frees another slot: its move-on meets jobs[3], held by the cancel.
    let second = settler.query_one(
        "SELECT jobs_complete($1, $2)",
        &[&held[1].id, &held[1].lease],
    );
    let second: String = second
        .unwrap_or_else(|e| panic!("the second complete: {e}"))
        .get(0);
    assert_eq!(second, "succeeded");
    settler.batch_execute("COMMIT").unwrap();
    assert_eq!(cancelling.join().unwrap(), "cancelled");
    assert!(waiting(&mut client, &queue).is_empty());
    assert_eq!(claim_id(&mut client, &queue), Some(jobs[2]));
    assert_eq!(claim_id(&mut client, &queue), None, "jobs[3] was cancelled");
}

/// A payload of a unique batch whose key's holder had expired goes in after the batch's
/// statement, on the single enqueue's path: with its own group (it went in without one, so it
/// ran beside its group's jobs, and the history checker met it).
#[test]
fn a_unique_batchs_payload_that_goes_in_late_keeps_its_group() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("group-late-key", "");
    let holder: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, '{}', unique_key => 'k', unique_for => '10 milliseconds')",
        &[&queue],
    );
    let held = claim(&mut client, &queue, 10, "");
    assert_eq!(held.iter().map(|c| c.id).collect::<Vec<_>>(), [holder]);
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    wait_until(Duration::from_secs(10), "the key's window to pass", || {
        scalar::<bool>(
            &mut client,
            "SELECT finished_at + unique_for < clock_timestamp() FROM jobs.job WHERE id = $1",
            &[&holder],
        )
    });
    let ids: Vec<i64> = column(
        &mut client,
        "SELECT id FROM jobs_enqueue_batch($1, ARRAY['{}', '{}']::jsonb[],
                 group_keys => ARRAY['g', 'g'], unique_keys => ARRAY[NULL, 'k'],
                 unique_for => '10 milliseconds')",
        &[&queue],
    );
    assert_eq!(ids.len(), 2);
    assert!(
        ids[1] > ids[0] + 1,
        "the keyed payload went in late: {ids:?}"
    );
    let group: Option<String> = scalar(
        &mut client,
        "SELECT group_key FROM jobs.job WHERE id = $1",
        &[&ids[1]],
    );
    assert_eq!(group.as_deref(), Some("g"));
    // It waits for the batch's first job of its group.
    let first = claim(&mut client, &queue, 10, "");
    assert_eq!(first.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[0]]);
    assert_eq!(complete(&mut client, &first[0]), "succeeded");
    assert_eq!(claim_id(&mut client, &queue), Some(ids[1]));
}

/// Two producers enqueue batches into one group of concurrency 1 at once (their ids
/// interleave, and a batch marks its own later jobs waiting), while three claimers take and
/// complete its jobs: no job is claimed before an earlier one of the group whose enqueue had
/// committed when that claim began (a claim cannot see a job not committed yet, so a later job
/// may run first only then). The times are this process's clock around each call: a commit is
/// done when its call returns, a claim decides after its call is sent.
#[test]
fn concurrent_batches_into_one_group_run_in_id_order() {
    let cluster = Cluster::shared();
    let (_, queue) = cluster.connect_with_queue("group-batches", "");
    let start = Instant::now();
    let at = move || start.elapsed();
    let rounds = 60;
    let producing = Arc::new(std::sync::atomic::AtomicUsize::new(2));
    let producers: Vec<_> = (0..2usize)
        .map(|p| {
            let queue = queue.clone();
            let mut client = cluster.connect();
            let producing = producing.clone();
            thread::spawn(move || {
                let mut committed: Vec<(i64, Duration)> = Vec::new();
                for round in 0..rounds {
                    let count = 2 + (round * 7 + p * 3) % 12;
                    let rows = client
                        .query(
                            "SELECT id FROM jobs_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[$2::int]),
                                 group_keys => array_fill('g'::text, ARRAY[$2::int]))",
                            &[&queue, &(count as i32)],
                        )
                        .unwrap();
                    let by = at();
                    committed.extend(rows.iter().map(|r| (r.get::<_, i64>(0), by)));
                }
                producing.fetch_sub(1, std::sync::atomic::Ordering::Release);
                committed
            })
        })
        .collect();
    let claimers: Vec<_> = (0..3)
        .map(|_| {
            let queue = queue.clone();
            let mut client = cluster.connect();
            let producing = producing.clone();
            thread::spawn(move || {
                // Each job's claim: when the call was sent, when it returned.
                let mut claims: Vec<(i64, Duration, Duration)> = Vec::new();
                loop {
                    let done = producing.load(std::sync::atomic::Ordering::Acquire) == 0;
                    let began = at();
                    let held = claim(&mut client, &queue, 4, "");
                    let taken = at();
                    if held.is_empty() {
                        if done {
                            let left: i64 = scalar(
                                &mut client,
                                "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state <> 'succeeded'",
                                &[&queue],
                            );
                            if left == 0 {
                                return claims;
                            }
                        }
                        thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    for job in &held {
                        claims.push((job.id, began, taken));
                        assert_eq!(complete(&mut client, job), "succeeded");
                    }
                }
            })
        })
        .collect();
    let committed: HashMap<i64, Duration> = producers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    let mut claims: Vec<(i64, Duration, Duration)> = Vec::new();
    for claimer in claimers {
        claims.extend(claimer.join().unwrap());
    }
    claims.sort_unstable_by_key(|(id, _, _)| *id);
    assert_eq!(claims.len(), committed.len(), "each job claimed once");
    let mut out_of_order = Vec::new();
    for (i, (later, began, taken)) in claims.iter().enumerate() {
        for (earlier, earlier_began, _) in &claims[..i] {
            if committed[earlier] < *began && taken < earlier_began {
                out_of_order.push((*later, *earlier));
            }
        }
    }
    assert!(
        out_of_order.is_empty(),
        "(job, earlier job of its group committed before its claim began and claimed after it): {out_of_order:?}"
    );
}

/// Eight workers burn down 30 groups of 8 jobs at concurrency 1 (and, in a second queue, 2),
/// failing some attempts, releasing others and dying now and then, while a monitor reads the
/// queue's jobs over and over (each read one consistent snapshot): never more running jobs in a
/// group than its concurrency, and at concurrency 1 never a running job while an earlier job of
/// its group is unfinished (runs start in enqueue order).
#[test]
fn under_concurrent_workers_groups_keep_their_concurrency_and_order() {
    let cluster = Cluster::shared();
    for concurrency in [1, 2] {
        let (mut admin, queue) = cluster.connect_with_queue("group-race",
            &format!("group_concurrency => {concurrency}, lease => '2 seconds', max_attempts => 20, backoff_base => '0'"),
        );
        admin
            .execute(
                "SELECT count(*) FROM jobs_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[240]),
                     group_keys => ARRAY(SELECT 'g' || (n % 30) FROM generate_series(0, 239) n))",
                &[&queue],
            )
            .unwrap();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let monitor = {
            let queue = queue.clone();
            let done = done.clone();
            let mut client = cluster.connect();
            thread::spawn(move || {
                let (mut reads, mut too_many, mut out_of_order) = (0, 0i64, 0i64);
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    let row = client
                        .query_one(
                            "SELECT (SELECT count(*) FROM (
                                       SELECT group_key FROM jobs.job
                                        WHERE queue = $1 AND state = 'running'
                                        GROUP BY group_key HAVING count(*) > $2) g),
                                    (SELECT count(*) FROM jobs.job later
                                       JOIN jobs.job earlier
                                         ON earlier.queue = later.queue AND earlier.group_key = later.group_key
                                        AND earlier.id < later.id
                                      WHERE later.queue = $1 AND later.state = 'running'
                                        AND earlier.state IN ('queued', 'running'))",
                            &[&queue, &i64::from(concurrency)],
                        )
                        .unwrap();
                    reads += 1;
                    too_many += row.get::<_, i64>(0);
                    out_of_order += row.get::<_, i64>(1);
                }
                (reads, too_many, out_of_order)
            })
        };
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let queue = queue.clone();
                let dsn = cluster.dsn("postgres");
                thread::spawn(move || {
                    let mut client = Client::connect(&dsn, postgres::NoTls).unwrap();
                    let mut rounds = 0;
                    let deadline = Instant::now() + Duration::from_secs(90);
                    loop {
                        rounds += 1;
                        let held = claim(&mut client, &queue, 4, ", wait => '1 second'");
                        if held.is_empty() {
                            let left: i64 = scalar(
                                &mut client,
                                "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state IN ('queued', 'running')",
                                &[&queue],
                            );
                            if left == 0 || Instant::now() > deadline {
                                return;
                            }
                            continue;
                        }
                        for (i, job) in held.iter().enumerate() {
                            let sql = match (rounds * 7 + i * 3 + w) % 10 {
                                0 => "SELECT jobs_fail($1, $2, 'flaky', retry_in => '0')",
                                1 => "SELECT jobs_release($1, $2)",
                                _ => "SELECT jobs_complete($1, $2)",
                            };
                            let _: String = scalar(&mut client, sql, &[&job.id, &job.lease]);
                        }
                        if rounds % 17 == w {
                            // A worker dies holding a job: the reclaim must free the slot.
                            let _ = claim(&mut client, &queue, 1, "");
                            drop(client);
                            client = Client::connect(&dsn, postgres::NoTls).unwrap();
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        let (reads, too_many, out_of_order) = monitor.join().unwrap();
        let left: i64 = scalar(
            &mut admin,
            "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state <> 'succeeded'",
            &[&queue],
        );
        assert_eq!(
            left, 0,
            "concurrency {concurrency}: every job succeeded in the end"
        );
        assert!(reads > 20, "the monitor read the queue only {reads} times");
        assert_eq!(
            too_many, 0,
            "concurrency {concurrency}: {too_many} times a group ran more jobs than allowed ({reads} reads)"
        );
        if concurrency == 1 {
            assert_eq!(
                out_of_order, 0,
                "{out_of_order} times a job ran while an earlier job of its group was unfinished ({reads} reads)"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rate limits
// ---------------------------------------------------------------------------------------

/// Claims of jobs by second of the server's clock (from their started_at), for `queue`.
fn claims_per_second(client: &mut Client, queue: &str) -> BTreeMap<i64, i64> {
    client
        .query(
            "SELECT floor(extract(epoch FROM started_at))::bigint, count(*)
               FROM jobs.job WHERE queue = $1 AND started_at IS NOT NULL GROUP BY 1 ORDER BY 1",
            &[&queue],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Runs `claimers` sessions claiming and completing on `queue` for `seconds`; returns the
/// jobs claimed.
fn burn_limited(cluster: &Cluster, queue: &str, claimers: usize, seconds: u64, wait: bool) -> i64 {
    let stop = Instant::now() + Duration::from_secs(seconds);
    let handles: Vec<_> = (0..claimers)
        .map(|_| {
            let queue = queue.to_owned();
            let mut client = cluster.connect();
            thread::spawn(move || {
                let mut claimed = 0i64;
                while Instant::now() < stop {
                    let extra = if wait {
                        ", wait => '200 milliseconds'"
                    } else {
                        ""
                    };
                    let held = claim(&mut client, &queue, 5, extra);
                    claimed += held.len() as i64;
                    for job in held {
                        let _: String = complete(&mut client, &job);
                    }
                }
                claimed
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

#[test]
fn sixteen_claimers_stay_within_the_rate_limit_and_reach_it() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    let (rate, burst) = (100i64, 20i64);
    let queue = unique_queue(
        &mut admin,
        "rate",
        &format!("rate_limit => {rate}, rate_burst => {burst}"),
    );
    enqueue_empty(&mut admin, &queue, 5000);
    let seconds = 20;
    let claimed = burn_limited(cluster, &queue, 16, seconds, false);
    let per_second = claims_per_second(&mut admin, &queue);
    for (second, n) in &per_second {
        assert!(
            *n <= rate + burst,
            "second {second}: {n} claims, above limit {rate} + burst {burst}"
        );
    }
    // Full seconds only (the first and last are partial), after the first burst.
    let full: Vec<i64> = per_second.values().copied().skip(1).collect();
    let full = &full[..full.len().saturating_sub(1)];
    let steady = full.iter().sum::<i64>() as f64 / full.len() as f64;
    assert!(
        (steady - rate as f64).abs() <= 0.03 * rate as f64,
        "steady rate {steady:.1}/s over {} full seconds, limit {rate}/s ({claimed} claimed)",
        full.len()
    );
}

#[test]
fn waiting_claimers_are_admitted_at_the_rate_limit() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    let rate = 50i64;
    let queue = unique_queue(
        &mut admin,
        "rate-wait",
        &format!("rate_limit => {rate}, rate_burst => 1"),
    );
    enqueue_empty(&mut admin, &queue, 2000);
    burn_limited(cluster, &queue, 8, 8, true);
    let per_second = claims_per_second(&mut admin, &queue);
    for (second, n) in &per_second {
        assert!(
            *n <= rate + 1,
            "second {second}: {n} claims, above limit + burst"
        );
    }
    let full: Vec<i64> = per_second.values().copied().skip(1).collect();
    let full = &full[..full.len().saturating_sub(1)];
    let steady = full.iter().sum::<i64>() as f64 / full.len() as f64;
    if fast_paths() {
        assert!(
            (steady - rate as f64).abs() <= 0.03 * rate as f64,
            "waiting claimers: steady rate {steady:.1}/s, limit {rate}/s ({per_second:?})"
        );
    } else {
        // The bucket is then the queue's row of jobs.rate_bucket, which holds no reservations:
        // a waiting claim looks again when a token should have come, and the tokens that come
        // while no claim looks are lost to the burst of 1. The limit holds; the rate is lower.
        assert!(
            steady >= 0.7 * rate as f64,
            "waiting claimers with the fast paths off: steady rate {steady:.1}/s, limit \
             {rate}/s ({per_second:?})"
        );
    }
}

#[test]
fn without_shared_memory_the_rate_limit_still_holds() {
    let cluster = Cluster::start_with_extension(
        "rate-no-preload",
        &[
            "max_connections = 100",
            "fsync = off",
            "synchronous_commit = off",
        ],
    );
    let mut admin = cluster.connect();
    let rate = 40i64;
    let queue = unique_queue(
        &mut admin,
        "rate-slow",
        &format!("rate_limit => {rate}, rate_burst => 10"),
    );
    enqueue_empty(&mut admin, &queue, 1000);
    burn_limited(&cluster, &queue, 8, 5, false);
    let per_second = claims_per_second(&mut admin, &queue);
    assert!(per_second.len() >= 4);
    for (second, n) in &per_second {
        assert!(
            *n <= rate + 10,
            "second {second}: {n} claims without shared memory"
        );
    }
    let total: i64 = per_second.values().sum();
    assert!(
        total >= 3 * rate,
        "the slow path let only {total} through in 5 s"
    );
}

/// A settle hands its group's next job to the next claim as a freed head instead of clearing
/// the job's mark (a row update of its own): the job stays out of the claim indexes, the claim
/// takes it from shared memory and clears the mark in the update that takes it.
#[test]
fn a_settle_hands_its_groups_next_job_to_the_next_claim_which_clears_the_mark_as_it_takes_it() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("freed", "");
    let jobs = enqueue_in_group(&mut client, &queue, 3);
    let held = claim(&mut client, &queue, 10, "");
    assert_eq!(held.iter().map(|c| c.id).collect::<Vec<_>>(), [jobs[0]]);
    assert_eq!(marked(&mut client, &queue), jobs[1..].to_vec());
    assert!(freed_heads(&mut client, &queue).is_empty());

    // Uncommitted, the offer is not there for others yet.
    client.batch_execute("BEGIN").unwrap();
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    let mut other = Cluster::shared().connect();
    assert!(freed_heads(&mut other, &queue).is_empty());
    assert!(claim(&mut other, &queue, 10, "").is_empty());
    client.batch_execute("COMMIT").unwrap();
    assert_eq!(freed_heads(&mut client, &queue), offered([jobs[1]]));
    assert_eq!(
        marked(&mut client, &queue),
        if fast_paths() {
            jobs[1..].to_vec()
        } else {
            jobs[2..].to_vec()
        },
        "the settle wrote nothing to the next job (with the fast paths off: cleared its mark)"
    );

    let next = claim(&mut other, &queue, 10, "");
    assert_eq!(next.iter().map(|c| c.id).collect::<Vec<_>>(), [jobs[1]]);
    assert_eq!(state(&mut client, jobs[1]), "running");
    assert_eq!(
        marked(&mut client, &queue),
        [jobs[2]],
        "the take cleared the mark"
    );
    assert!(freed_heads(&mut client, &queue).is_empty());

    // A settle that rolls back offers nothing.
    client.batch_execute("BEGIN").unwrap();
    assert_eq!(complete(&mut client, &next[0]), "succeeded");
    client.batch_execute("ROLLBACK").unwrap();
    assert!(freed_heads(&mut client, &queue).is_empty());
    assert_eq!(state(&mut client, jobs[1]), "running");
    assert!(claim(&mut other, &queue, 10, "").is_empty());
    assert_eq!(complete(&mut client, &next[0]), "succeeded");
    assert_eq!(claim_id(&mut other, &queue), Some(jobs[2]));
}

/// A claim that took a freed head and rolls back (the whole transaction, or a savepoint around
/// the claim) gives it back: the job is still marked, and only the freed head hands it out.
#[test]
fn a_freed_head_taken_by_a_claim_that_rolls_back_is_offered_again() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("freed-rollback", "");
    let jobs = enqueue_in_group(&mut client, &queue, 2);
    let held = claim(&mut client, &queue, 1, "");
    assert!(claim(&mut client, &queue, 1, "").is_empty());
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    assert_eq!(freed_heads(&mut client, &queue), offered([jobs[1]]));

    let mut claimer = Cluster::shared().connect();
    claimer.batch_execute("BEGIN").unwrap();
    assert_eq!(claim_id(&mut claimer, &queue), Some(jobs[1]));
    assert!(freed_heads(&mut client, &queue).is_empty());
    claimer.batch_execute("ROLLBACK").unwrap();
    assert_eq!(freed_heads(&mut client, &queue), offered([jobs[1]]));
    // Marked only while offered (with the fast paths off the settle cleared the mark).
    assert_eq!(marked(&mut client, &queue), offered([jobs[1]]));

    claimer
        .batch_execute("BEGIN; SAVEPOINT before_claim")
        .unwrap();
    assert_eq!(claim_id(&mut claimer, &queue), Some(jobs[1]));
    claimer
        .batch_execute("ROLLBACK TO SAVEPOINT before_claim")
        .unwrap();
    assert_eq!(freed_heads(&mut client, &queue), offered([jobs[1]]));
    assert_eq!(
        claim_id(&mut claimer, &queue),
        Some(jobs[1]),
        "the same transaction takes it again"
    );
    claimer.batch_execute("COMMIT").unwrap();
    assert_eq!(state(&mut client, jobs[1]), "running");
    assert!(freed_heads(&mut client, &queue).is_empty());
}

/// Freed heads are taken in claim order with the jobs of the claim index (Rule 2), and only by
/// claims that may take them: a claim of other kinds leaves one for a claim of its kind.
#[test]
fn freed_heads_keep_claim_order_and_go_only_to_claims_of_their_kind() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("freed-order", "");
    let head = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let late = enqueue_with(&mut client, &queue, ", group_key => 'g', priority => 9");
    let middle = enqueue_with(&mut client, &queue, ", priority => 5");
    let held = claim(&mut client, &queue, 1, "");
    assert_eq!(held[0].id, head);
    assert_eq!(claim_id(&mut client, &queue), Some(middle));
    // Marks the group's next job: it waits behind the running head.
    assert_eq!(claim_id(&mut client, &queue), None);
    assert_eq!(marked(&mut client, &queue), [late]);
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    assert_eq!(freed_heads(&mut client, &queue), offered([late]));

    let ungrouped_first = enqueue_with(&mut client, &queue, ", priority => 4");
    let ungrouped_last = enqueue_with(&mut client, &queue, ", priority => 10");
    let got: Vec<i64> = claim_ids(&mut client, &queue, 2);
    assert_eq!(
        got,
        [ungrouped_first, late],
        "priority 4 before the freed head's 9, which comes before 10"
    );
    assert_eq!(claim_id(&mut client, &queue), Some(ungrouped_last));

    // Kinds: a freed head of kind 'x' is left by a claim of 'y'.
    let queue = unique_queue(&mut client, "freed-kinds", "");
    let first = enqueue_with(&mut client, &queue, ", kind => 'x', group_key => 'g'");
    let second = enqueue_with(&mut client, &queue, ", kind => 'x', group_key => 'g'");
    let held = claim(&mut client, &queue, 1, "");
    assert_eq!(held[0].id, first);
    assert!(claim(&mut client, &queue, 1, "").is_empty());
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    assert!(claim(&mut client, &queue, 1, ", kinds => ARRAY['y']").is_empty());
    assert_eq!(freed_heads(&mut client, &queue), offered([second]));
    let got = claim(&mut client, &queue, 1, ", kinds => ARRAY['x']");
    assert_eq!(got.iter().map(|c| c.id).collect::<Vec<_>>(), [second]);
}

/// Dropping a queue drops its freed heads with its jobs: a queue created again under its name
/// starts without them.
#[test]
fn a_dropped_queue_leaves_no_freed_heads() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("freed-dropped", "");
    enqueue_in_group(&mut client, &queue, 2);
    let held = claim(&mut client, &queue, 1, "");
    assert!(claim(&mut client, &queue, 1, "").is_empty());
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    let heads = freed_heads(&mut client, &queue);
    assert_eq!(heads.len(), offered([0]).len());
    let mut dropping = Cluster::shared().connect();
    dropping.batch_execute("BEGIN").unwrap();
    dropping
        .batch_execute(&format!("SELECT jobs_drop_queue('{queue}', force => true)"))
        .unwrap();
    dropping.batch_execute("ROLLBACK").unwrap();
    assert_eq!(
        freed_heads(&mut client, &queue),
        heads,
        "a rolled-back drop keeps them"
    );
    client
        .batch_execute(&format!(
            "SELECT jobs_drop_queue('{queue}', force => true); SELECT jobs_create_queue('{queue}')"
        ))
        .unwrap();
    assert!(freed_heads(&mut client, &queue).is_empty());
}

/// The ids of what a claim of up to 10 jobs of `queue` got.
fn claimed_ids(client: &mut Client, queue: &str) -> Vec<i64> {
    claim_ids(client, queue, 10)
}

/// A freed head is taken without reading its group again only while no commit queued jobs of
/// its queue since its settle read the group. Ids are drawn before commit: a job of the group
/// with a lower id whose enqueue commits after the settle comes first, and the head waits.
#[test]
fn a_freed_head_behind_a_job_of_its_group_committed_after_its_settle_is_not_taken() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("freed-late", "");
    let mut producer = cluster.connect();
    enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let running = claim(&mut client, &queue, 1, "");
    producer.batch_execute("BEGIN").unwrap();
    let late = enqueue_with(&mut producer, &queue, ", group_key => 'g'");
    let head = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    // A claim meets the head behind the running job and marks it.
    assert!(claim(&mut client, &queue, 1, "").is_empty());
    assert_eq!(marked(&mut client, &queue), [head]);
    assert_eq!(complete(&mut client, &running[0]), "succeeded");
    assert_eq!(freed_heads(&mut client, &queue), offered([head]));
    producer.batch_execute("COMMIT").unwrap();
    assert_eq!(
        claimed_ids(&mut client, &queue),
        [late],
        "the freed head ran beside an earlier job of its group"
    );
}

/// The same for a job of the group that `jobs_retry` queues again after the settle.
#[test]
fn a_freed_head_behind_a_job_of_its_group_retried_after_its_settle_is_not_taken() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("freed-retried", "");
    let failed = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let first = claim(&mut client, &queue, 1, "");
    assert_eq!(
        scalar::<String>(
            &mut client,
            "SELECT jobs_fail($1, $2, 'broken', retry => false)",
            &[&first[0].id, &first[0].lease],
        ),
        "failed"
    );
    enqueue_with(&mut client, &queue, ", group_key => 'g'");
    let running = claim(&mut client, &queue, 1, "");
    let head = enqueue_with(&mut client, &queue, ", group_key => 'g'");
    assert!(claim(&mut client, &queue, 1, "").is_empty());
    assert_eq!(complete(&mut client, &running[0]), "succeeded");
    assert_eq!(freed_heads(&mut client, &queue), offered([head]));
    let _: String = scalar(&mut client, "SELECT jobs_retry($1)", &[&failed]);
    assert_eq!(
        claimed_ids(&mut client, &queue),
        [failed],
        "the freed head ran beside an earlier job of its group"
    );
}

/// A freed head whose queue's groups now run more than one job at a time is not used: the next
/// claim clears its mark, and the job runs as a job of the larger group.
#[test]
fn freed_heads_of_a_queue_whose_group_concurrency_grew_are_cleared() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("freed-grown", "");
    let jobs = enqueue_in_group(&mut client, &queue, 3);
    let held = claim(&mut client, &queue, 1, "");
    assert!(claim(&mut client, &queue, 1, "").is_empty());
    assert_eq!(complete(&mut client, &held[0]), "succeeded");
    assert_eq!(freed_heads(&mut client, &queue), offered([jobs[1]]));
    let _: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs_create_queue($1, group_concurrency => 2)",
        &[&queue],
    );
    let got: Vec<i64> = claim_ids(&mut client, &queue, 10);
    assert_eq!(got, jobs[1..].to_vec());
    assert!(freed_heads(&mut client, &queue).is_empty());
    assert!(marked(&mut client, &queue).is_empty());
}

/// Makes each of three groups of queue `q` in `database` hand its third job over as a freed
/// head, then crashes and restarts the server: the freed heads are gone, their marks are not.
/// Returns the three jobs. The session that strands them runs the fast paths whatever the
/// run's setting (freed heads are one): what comes after the crash runs under the run's.
fn strand_freed_heads(cluster: &Cluster, database: &str) -> Vec<i64> {
    let mut client = cluster.connect_to(database);
    client
        .batch_execute(
            "SET pg_jobs.fast_paths = on; CREATE EXTENSION pg_jobs; SELECT jobs_create_queue('q')",
        )
        .unwrap();
    // Before any sweep, a settle clears the mark itself; the first claim sweeps.
    for group in ["a", "b", "c"] {
        for _ in 0..2 {
            let _: i64 = scalar(
                &mut client,
                "SELECT jobs_enqueue('q', '{}', group_key => $1)",
                &[&group],
            );
        }
    }
    let first = claim(&mut client, "q", 3, "");
    assert_eq!(first.len(), 3);
    for job in &first {
        assert_eq!(complete(&mut client, job), "succeeded");
    }
    let second = claim(&mut client, "q", 3, "");
    assert_eq!(second.len(), 3);
    // Each group's third job: marked behind the running second, then freed by its settle.
    let third: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|group| {
            scalar(
                &mut client,
                "SELECT jobs_enqueue('q', '{}', group_key => $1)",
                &[group],
            )
        })
        .collect();
    assert!(claim(&mut client, "q", 3, "").is_empty());
    assert_eq!(marked(&mut client, "q"), third);
    for job in &second {
        assert_eq!(complete(&mut client, job), "succeeded");
    }
    assert_eq!(freed_heads(&mut client, "q"), third);
    // The suite's servers commit asynchronously: flush what committed before the power cut.
    client.batch_execute("CHECKPOINT").unwrap();
    drop(client);

    cluster.crash();
    cluster.restart();
    third
}

/// A cluster named `name` whose database `unserved` (which the background worker does not
/// serve, so only claims sweep there) holds the three stranded heads of [`strand_freed_heads`].
fn stranded_where_no_worker_serves(name: &str) -> (Cluster, Vec<i64>) {
    let cluster = Cluster::start(name, TEST_SETTINGS);
    cluster
        .connect()
        .batch_execute("CREATE DATABASE unserved")
        .unwrap();
    let third = strand_freed_heads(&cluster, "unserved");
    (cluster, third)
}

/// Shared memory starts empty after a crash: freed heads offered before it are gone while
/// their jobs are still marked. In a database the background worker does not serve, the first
/// claim clears the marks of every waiting head with nothing before it, so none of them waits
/// for ever.
#[test]
fn freed_heads_lost_in_a_crash_are_found_again_by_the_first_claim() {
    let (cluster, third) = stranded_where_no_worker_serves("freed_crash");
    let mut client = cluster.connect_to("unserved");
    assert!(freed_heads(&mut client, "q").is_empty());
    // Longer than the worker's tick: nothing clears them but a claim here.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        marked(&mut client, "q"),
        third,
        "the marks outlived the crash"
    );
    let got: Vec<i64> = claimed_ids(&mut client, "q");
    assert_eq!(got, third, "the first claim found the stranded heads");
    assert!(marked(&mut client, "q").is_empty());
    cluster.stop();
}

/// A stranded head whose row another transaction holds while the sweep runs is passed over,
/// and the sweep is then not recorded: once the row is free, the next claim sweeps again and
/// finds it (recorded, the head would have stayed marked for good).
#[test]
fn a_stranded_head_the_sweep_passed_over_is_found_by_the_next_sweep() {
    let (cluster, third) = stranded_where_no_worker_serves("freed_crash_held");
    let mut holder = cluster.connect_to("unserved");
    holder.batch_execute("BEGIN").unwrap();
    holder
        .query(
            "SELECT FROM jobs.job WHERE id = $1 FOR UPDATE",
            &[&third[0]],
        )
        .unwrap();
    let mut client = cluster.connect_to("unserved");
    let got: Vec<i64> = claimed_ids(&mut client, "q");
    assert_eq!(got, third[1..]);
    assert_eq!(marked(&mut client, "q"), [third[0]]);
    holder.batch_execute("ROLLBACK").unwrap();
    let got: Vec<i64> = claimed_ids(&mut client, "q");
    assert_eq!(got, [third[0]], "the next claim swept again");
    assert!(marked(&mut client, "q").is_empty());
    cluster.stop();
}

/// One transaction sweeps at a time: while a claim's transaction that swept is open it holds
/// the database's sweep lock, and another session's claim goes on without waiting for it (nor
/// sweeping: it would only pass over the rows the first one holds).
#[test]
fn one_transaction_at_a_time_sweeps_and_claims_do_not_wait_for_it() {
    let (cluster, third) = stranded_where_no_worker_serves("freed_crash_lock");
    let mut sweeping = cluster.connect_to("unserved");
    sweeping.batch_execute("BEGIN").unwrap();
    let got: Vec<i64> = claimed_ids(&mut sweeping, "q");
    assert_eq!(got, third);
    let sweeper: i32 = scalar(&mut sweeping, "SELECT pg_backend_pid()", &[]);
    let mut other = cluster.connect_to("unserved");
    let holders = |client: &mut Client| -> Vec<i32> {
        column(
            client,
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 20558 AND granted",
            &[],
        )
    };
    assert_eq!(holders(&mut other), [sweeper]);
    other.batch_execute("SET statement_timeout = '5s'").unwrap();
    let _: i64 = scalar(
        &mut other,
        "SELECT jobs_enqueue('q', '{}', group_key => 'd')",
        &[],
    );
    assert_eq!(claim(&mut other, "q", 10, "").len(), 1, "the claim went on");
    sweeping.batch_execute("COMMIT").unwrap();
    assert!(holders(&mut other).is_empty());
    cluster.stop();
}

/// In a database the background worker serves, its first tick after the crash clears the
/// stranded marks before any claim comes, and records the sweep: settles hand heads over again.
#[test]
fn freed_heads_lost_in_a_crash_are_found_again_by_the_worker() {
    let cluster = Cluster::start("freed_crash_worker", TEST_SETTINGS);
    let third = strand_freed_heads(&cluster, "postgres");
    let mut client = cluster.connect();
    wait_until(
        Duration::from_secs(10),
        "the worker to clear the stranded marks",
        || marked(&mut client, "q").is_empty(),
    );
    let claimed = claim(&mut client, "q", 10, "");
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), third);
    // A fourth job of group a, marked by a claim behind the running third: the settle of the
    // third hands it over, as it may only once the sweep is recorded.
    let fourth: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue('q', '{}', group_key => 'a')",
        &[],
    );
    assert!(claim(&mut client, "q", 1, "").is_empty());
    assert_eq!(marked(&mut client, "q"), [fourth]);
    assert_eq!(complete(&mut client, &claimed[0]), "succeeded");
    assert_eq!(freed_heads(&mut client, "q"), offered([fourth]));
    cluster.stop();
}
