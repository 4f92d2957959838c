//! Crash recovery: a workload runs while the server is stopped with `pg_ctl stop -m immediate`
//! (no shutdown checkpoint, like a power cut for everything but the disk) and started again.
//! Afterwards every enqueue whose commit returned is there, every acknowledged completion
//! stands, work claimed in transactions that never committed is claimable, leases held at the
//! crash are reclaimed by the worker, and no job is in an impossible state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pg_jobs_tests::{claim, wait_until, Client, Cluster, TEST_SETTINGS};

/// The test cluster settings, but with commits durable when they return: a crash test that
/// let acknowledged commits vanish (synchronous_commit = off) would prove nothing.
fn durable_settings() -> Vec<&'static str> {
    TEST_SETTINGS
        .iter()
        .copied()
        .filter(|s| !s.starts_with("synchronous_commit"))
        .chain(["synchronous_commit = on"])
        .collect()
}

/// What the clients saw acknowledged before the crash.
#[derive(Default)]
struct Acknowledged {
    enqueued: BTreeSet<i64>,
    completed: BTreeSet<i64>,
    /// Jobs whose claim committed and that were never settled: their leases were live.
    held: BTreeSet<i64>,
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

#[test]
fn a_crash_loses_no_acknowledged_work_and_leaves_no_impossible_state() {
    let cluster = Cluster::start("crash", &durable_settings());
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE EXTENSION pg_jobs;
             SELECT jobs_create_queue('crash', lease => '2 seconds', max_attempts => 5);",
        )
        .unwrap();
    // A backlog, so every kind of worker below finds work at any moment.
    let backlog: Vec<i64> = admin
        .query(
            "SELECT jobs_enqueue_batch('crash', array_fill('{}'::jsonb, ARRAY[2000]))",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
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
                let jobs = try_claim(&mut client, 5)?;
                for job in jobs {
                    let outcome: String = client
                        .query_one(
                            "SELECT jobs_complete($1::bigint, $2::uuid)",
                            &[&job.id, &job.lease],
                        )?
                        .get(0);
                    assert_eq!(outcome, "succeeded");
                    seen.lock().unwrap().completed.insert(job.id);
                }
                thread::sleep(Duration::from_millis(5));
                Ok(())
            })
        }));
    }
    // A worker that commits its claims and then hangs on them: live leases at the crash.
    {
        let (mut client, seen, stop) = (cluster.connect(), seen.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            until_crash(&stop, || {
                let jobs = try_claim(&mut client, 1)?;
                seen.lock().unwrap().held.extend(jobs.iter().map(|j| j.id));
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
    let mut client = cluster.connect();

    // Nothing acknowledged is lost.
    let rows = client
        .query("SELECT id, state::text, attempt FROM jobs.job", &[])
        .unwrap();
    let after: BTreeMap<i64, (String, i32)> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    for id in &seen.enqueued {
        assert!(
            after.contains_key(id),
            "acknowledged enqueue {id} was lost in the crash"
        );
    }
    for id in &seen.completed {
        assert_eq!(
            after[id].0, "succeeded",
            "acknowledged completion of {id} was lost"
        );
    }
    // The open claim never happened: its jobs are queued with the attempt given back.
    for id in &seen.uncommitted_claims {
        assert_eq!(
            after[id],
            ("queued".to_owned(), 0),
            "job {id} claimed in an uncommitted transaction"
        );
    }
    assert_no_impossible_state(&mut client);

    // Leases held at the crash expire and the worker reclaims them, without jobs_reclaim.
    let held: Vec<i64> = seen
        .held
        .iter()
        .copied()
        .filter(|id| after[id].0 == "running")
        .collect();
    assert!(
        !held.is_empty(),
        "some leases should have been live at the crash"
    );
    wait_until(
        Duration::from_secs(30),
        "the worker to reclaim leases held at the crash",
        || {
            let running: i64 = client
                .query_one(
                    "SELECT count(*) FROM jobs.job WHERE id = ANY($1) AND state = 'running'",
                    &[&held],
                )
                .unwrap()
                .get(0);
            running == 0
        },
    );
    assert_no_impossible_state(&mut client);

    // And every job can still be finished: nothing is stuck.
    loop {
        let jobs = claim(&mut client, "crash", 100, "");
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let outcome: String = client
                .query_one(
                    "SELECT jobs_complete($1::bigint, $2::uuid)",
                    &[&job.id, &job.lease],
                )
                .unwrap()
                .get(0);
            assert_eq!(outcome, "succeeded");
        }
    }
    let unfinished: i64 = client
        .query_one(
            "SELECT count(*) FROM jobs.job WHERE state NOT IN ('succeeded', 'failed')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(unfinished, 0, "every job ends succeeded or failed");
}

fn try_claim(client: &mut Client, n: i32) -> Result<Vec<pg_jobs_tests::Claimed>, postgres::Error> {
    Ok(client
        .query(
            "SELECT id, lease, attempt FROM jobs_claim('crash', n => $1)",
            &[&n],
        )?
        .iter()
        .map(|r| pg_jobs_tests::Claimed {
            id: r.get(0),
            lease: r.get(1),
            attempt: r.get(2),
        })
        .collect())
}

/// Checks the invariants every job satisfies in every committed state.
fn assert_no_impossible_state(client: &mut Client) {
    let broken: Vec<String> = client
        .query(
            "SELECT format('job %s: %s', id, to_jsonb(j))
               FROM jobs.job j
              WHERE NOT CASE state
                  WHEN 'queued'    THEN finished_at IS NULL AND lease_until IS NULL AND attempt < max_attempts
                  WHEN 'running'   THEN lease IS NOT NULL AND lease_until IS NOT NULL AND attempt >= 1
                                        AND finished_at IS NULL
                  ELSE finished_at IS NOT NULL AND lease_until IS NULL
                END
                 OR attempt NOT BETWEEN 0 AND max_attempts",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        broken.is_empty(),
        "jobs in impossible states:\n{}",
        broken.join("\n")
    );
}
