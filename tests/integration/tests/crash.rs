//! Crash recovery: a workload runs while the server is stopped with `pg_ctl stop -m immediate`
//! and started again. That is a process crash: every server process dies at once, with no
//! shutdown checkpoint, and recovery replays the WAL; what was written to the kernel survives.
//! A power cut, which also loses the kernel's unwritten pages, cannot be simulated on this
//! machine; the second variant runs with the durability settings of production (`fsync` and
//! `full_page_writes` on) so that recovery is checked under them too.
//!
//! Afterwards every enqueue whose commit returned is there; every acknowledged completion
//! stands, under the lease and attempt of its claim; every acknowledged claim survives with its
//! lease, its attempt and (for leases still running) its `lease_until`, and its holder can still
//! settle the job with that lease; work claimed in transactions that never committed is
//! claimable with its attempt given back; leases held at the crash are reclaimed by the worker
//! (the token kept, the attempt spent); and no job is in an impossible state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use pg_jobs_tests::{claim, column, scalar, settings_with, Client, Cluster};
use uuid::Uuid;

/// A claim whose transaction committed.
#[derive(Clone, Copy, Debug)]
struct ClaimSeen {
    lease: Uuid,
    attempt: i32,
    lease_until: SystemTime,
}

/// What the clients saw acknowledged before the crash.
#[derive(Default)]
struct Acknowledged {
    enqueued: BTreeSet<i64>,
    /// The latest committed claim of each job.
    claims: BTreeMap<i64, ClaimSeen>,
    completed: BTreeSet<i64>,
    /// Jobs the hanging worker claimed under a 2 s lease and never settled: their leases were
    /// live at the crash and run out after it.
    held: BTreeSet<i64>,
    /// The same under a 1 hour lease: still running after recovery.
    held_long: BTreeSet<i64>,
    /// Jobs claimed inside a transaction that was still open at the crash.
    uncommitted_claims: BTreeSet<i64>,
}

/// Runs `body` until the server goes away (any error ends the loop).
fn until_crash(stop: &AtomicBool, mut body: impl FnMut() -> Result<(), postgres::Error>) {
    while !stop.load(Ordering::Acquire) {
        if let Err(e) = body() {
            eprintln!("client stopped: {e:?}");
            return;
        }
    }
}

/// Claims up to `n` jobs with `lease` (SQL interval or NULL) and records the committed claims.
fn try_claim(
    client: &mut Client,
    n: i32,
    lease: &str,
    seen: &Mutex<Acknowledged>,
) -> Result<Vec<(i64, Uuid)>, postgres::Error> {
    let rows = client.query(
        &format!("SELECT id, lease, attempt, lease_until FROM jobs_claim('crash', n => $1, lease => {lease})"),
        &[&n],
    )?;
    let mut seen = seen.lock().unwrap();
    Ok(rows
        .iter()
        .map(|r| {
            let (id, lease): (i64, Uuid) = (r.get(0), r.get(1));
            seen.claims.insert(
                id,
                ClaimSeen {
                    lease,
                    attempt: r.get(2),
                    lease_until: r.get(3),
                },
            );
            (id, lease)
        })
        .collect())
}

/// The workload, the crash and every check, on a cluster with `settings`.
fn crash_and_recover(name: &str, settings: &[&str]) {
    let cluster = Cluster::start(name, settings);
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE EXTENSION pg_jobs;
             SELECT jobs_create_queue('crash', lease => '2 seconds', max_attempts => 5);",
        )
        .unwrap();
    // A backlog, so every kind of worker below finds work at any moment.
    let backlog: Vec<i64> = column(
        &mut admin,
        "SELECT id FROM jobs_enqueue_batch('crash', array_fill('{}'::jsonb, ARRAY[2000]))",
        &[],
    );
    let seen = Arc::new(Mutex::new(Acknowledged {
        enqueued: backlog.into_iter().collect(),
        ..Default::default()
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();

    // Producers: one job per transaction; an id counts once COMMIT has returned.
    for _ in 0..2 {
        let (mut client, seen, stop) = (cluster.connect(), seen.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            until_crash(&stop, || {
                let mut tx = client.transaction()?;
                let id: i64 = tx.query_one("SELECT jobs_enqueue('crash')", &[])?.get(0);
                tx.commit()?;
                seen.lock().unwrap().enqueued.insert(id);
                Ok(())
            })
        }));
    }
    // Workers that complete what they claim.
    for _ in 0..2 {
        let (mut client, seen, stop) = (cluster.connect(), seen.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            until_crash(&stop, || {
                for (id, lease) in try_claim(&mut client, 5, "NULL", &seen)? {
                    let outcome: String = client
                        .query_one("SELECT jobs_complete($1::bigint, $2::uuid)", &[&id, &lease])?
                        .get(0);
                    assert_eq!(outcome, "succeeded");
                    seen.lock().unwrap().completed.insert(id);
                }
                thread::sleep(Duration::from_millis(5));
                Ok(())
            })
        }));
    }
    // Workers that commit their claims and then hang on them: live leases at the crash, one
    // under the queue's 2 s lease, one under a lease that outlasts the test.
    for long in [false, true] {
        let (mut client, seen, stop) = (cluster.connect(), seen.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            let lease = if long { "'1 hour'" } else { "NULL" };
            until_crash(&stop, || {
                let ids: Vec<i64> = try_claim(&mut client, 1, lease, &seen)?
                    .iter()
                    .map(|(id, _)| *id)
                    .collect();
                let mut seen = seen.lock().unwrap();
                if long {
                    &mut seen.held_long
                } else {
                    &mut seen.held
                }
                .extend(ids);
                drop(seen);
                thread::sleep(Duration::from_millis(20));
                Ok(())
            })
        }));
    }
    // A worker whose claim transaction is open when the crash comes.
    {
        let (mut client, seen) = (cluster.connect(), seen.clone());
        threads.push(thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            let Ok(mut tx) = client.transaction() else {
                return;
            };
            let Ok(rows) = tx.query("SELECT id FROM jobs_claim('crash', n => 3)", &[]) else {
                return;
            };
            seen.lock()
                .unwrap()
                .uncommitted_claims
                .extend(rows.iter().map(|r| r.get::<_, i64>(0)));
            // Hold the transaction open until the server dies under it.
            let _ = tx.query("SELECT pg_sleep(60)", &[]);
        }));
    }

    thread::sleep(Duration::from_millis(1500));
    cluster.crash();
    stop.store(true, Ordering::Release);
    for thread in threads {
        thread.join().expect("a client thread panicked");
    }
    cluster.restart();

    let seen = seen.lock().unwrap();
    assert!(
        seen.enqueued.len() > 2020,
        "the producers should have enqueued jobs before the crash"
    );
    assert!(
        !seen.completed.is_empty(),
        "the workers should have completed jobs before the crash"
    );
    assert!(
        !seen.uncommitted_claims.is_empty(),
        "the open claim should have taken jobs"
    );
    assert!(
        !seen.held_long.is_empty(),
        "some 1 hour leases should have been live at the crash"
    );
    let mut client = cluster.connect();

    // Nothing acknowledged is lost.
    let rows = client
        .query(
            "SELECT id, state::text, attempt, lease, lease_until FROM jobs.job",
            &[],
        )
        .unwrap();
    type Row = (String, i32, Option<Uuid>, Option<SystemTime>);
    let after: BTreeMap<i64, Row> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4))))
        .collect();
    for id in &seen.enqueued {
        assert!(
            after.contains_key(id),
            "acknowledged enqueue {id} was lost in the crash"
        );
    }
    // Every committed claim survives with its lease and attempt: the job is still running
    // under it, or was completed or (after the restart) reclaimed under it.
    for (id, claim) in &seen.claims {
        let (state, attempt, lease, _) = &after[id];
        assert_eq!(
            (*lease, *attempt),
            (Some(claim.lease), claim.attempt),
            "job {id} ({state}) after recovery: the lease and attempt of its committed claim"
        );
    }
    for id in &seen.completed {
        assert_eq!(
            after[id].0, "succeeded",
            "acknowledged completion of {id} was lost"
        );
    }
    // A lease that outlasts the test is running as claimed, to the microsecond.
    for id in &seen.held_long {
        let claim = seen.claims[id];
        assert_eq!(
            after[id],
            (
                "running".to_owned(),
                claim.attempt,
                Some(claim.lease),
                Some(claim.lease_until)
            ),
            "job {id}, claimed under a 1 hour lease before the crash"
        );
    }
    // The open claim never happened: its jobs are queued with the attempt given back.
    for id in &seen.uncommitted_claims {
        assert_eq!(
            (after[id].0.as_str(), after[id].1, after[id].2),
            ("queued", 0, None),
            "job {id} claimed in an uncommitted transaction"
        );
    }
    assert_no_impossible_state(&mut client);

    // Leases held at the crash (under 2 s) expire and the worker reclaims them, without
    // jobs_reclaim: queued again with the token kept and the attempt spent. That covers the
    // hanging worker's claims, the completing workers' claims in flight, and any claim whose
    // commit made it to disk though its answer did not reach the client. On a slow machine the
    // worker may have reclaimed some before the rows above were read.
    assert!(
        !seen.held.is_empty(),
        "the hanging worker should have held leases at the crash"
    );
    // A claim under the 1 hour lease whose commit reached the disk though its answer did not
    // reach the client is running legitimately: not one of those to wait for.
    let short_lease = |row: &Row| {
        row.3
            .is_some_and(|until| until < SystemTime::now() + Duration::from_secs(600))
    };
    let unacknowledged_long: Vec<i64> = after
        .iter()
        .filter(|(id, row)| row.0 == "running" && !seen.held_long.contains(id) && !short_lease(row))
        .map(|(id, _)| *id)
        .collect();
    let running: Vec<i64> = after
        .iter()
        .filter(|(id, row)| {
            // On a slow machine a 2 s lease of the hanging worker may have run out, been
            // reclaimed and the job claimed again under an hour before the crash.
            let long_running = row.0 == "running" && !short_lease(row);
            !long_running
                && ((row.0 == "running" && !seen.held_long.contains(id)) || seen.held.contains(id))
        })
        .map(|(id, _)| *id)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let still: Vec<String> = column(
            &mut client,
            "SELECT format('job %s: lease_until %s, now %s', id, lease_until, clock_timestamp())
                   FROM jobs.job WHERE id = ANY($1) AND state = 'running'",
            &[&running],
        );
        if still.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let worker: Vec<String> = column(
                &mut client,
                "SELECT format('%s', w) FROM jobs_worker_status() w",
                &[],
            );
            panic!(
                "timed out after 30 s waiting for the worker to reclaim leases held at the crash: \
                 {still:#?}\nworker: {worker:#?}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for id in &running {
        let row = client
            .query_one(
                "SELECT state::text, attempt, lease, errors -> -1 ->> 'error',
                        (errors -> -1 ->> 'attempt')::int
                   FROM jobs.job WHERE id = $1",
                &[id],
            )
            .unwrap();
        let got: (String, i32, Option<Uuid>, Option<String>, Option<i32>) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        let (attempt, lease) = (after[id].1, after[id].2);
        assert_eq!(
            got,
            (
                "queued".to_owned(),
                attempt,
                lease,
                Some("lease expired".to_owned()),
                Some(attempt)
            ),
            "job {id}, reclaimed after the crash"
        );
    }
    assert_no_impossible_state(&mut client);

    // The holders of the long leases can still settle with them.
    for id in &seen.held_long {
        let outcome: String = scalar(
            &mut client,
            "SELECT jobs_complete($1::bigint, $2::uuid)",
            &[id, &seen.claims[id].lease],
        );
        assert_eq!(
            outcome, "succeeded",
            "job {id}: its holder completes it after recovery"
        );
    }

    // And every job can still be finished: nothing is stuck.
    loop {
        let jobs = claim(&mut client, "crash", 100, "");
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let outcome: String = scalar(
                &mut client,
                "SELECT jobs_complete($1::bigint, $2::uuid)",
                &[&job.id, &job.lease],
            );
            assert_eq!(outcome, "succeeded");
        }
    }
    // Those stay running until their hour is up: nobody knows their lease.
    let unfinished: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.job
              WHERE state NOT IN ('succeeded', 'failed') AND NOT id = ANY($1)",
        &[&unacknowledged_long],
    );
    assert_eq!(
        unfinished, 0,
        "every job ends succeeded or failed, but for the unacknowledged claims under 1 hour leases"
    );
    println!(
        "{name}: {} jobs enqueued, {} claims committed ({} completed, {} held under 2 s, {} under 1 hour), {} claimed uncommitted",
        seen.enqueued.len(),
        seen.claims.len(),
        seen.completed.len(),
        seen.held.len(),
        seen.held_long.len(),
        seen.uncommitted_claims.len()
    );
}

#[test]
fn a_crash_loses_no_acknowledged_work_and_leaves_no_impossible_state() {
    crash_and_recover("crash", &settings_with(&["synchronous_commit = on"]));
}

/// The same with the production durability settings: fsync and full-page writes on.
#[test]
fn a_crash_with_fsync_and_full_page_writes_on_loses_nothing_either() {
    crash_and_recover(
        "crash-fsync",
        &settings_with(&[
            "synchronous_commit = on",
            "fsync = on",
            "full_page_writes = on",
        ]),
    );
}

/// Checks the invariants every job satisfies in every committed state.
fn assert_no_impossible_state(client: &mut Client) {
    let broken = pg_jobs_tests::impossible_states(client).unwrap();
    assert!(
        broken.is_empty(),
        "jobs in impossible states:\n{}",
        broken.join("\n")
    );
}
