//! Every state-changing function under every way a transaction can end, with a server restart
//! between `PREPARE TRANSACTION` and its end among them: afterwards no job is stuck.
//!
//! Each function (a *scenario*) runs in a transaction of its own on a queue of its own, against
//! a fixture set up before, and the transaction then ends in one of six ways (an *outcome*):
//! commit, rollback, prepare then commit, prepare then rollback, prepare then a crash restart
//! then commit, prepare then a clean restart then rollback. The outcomes run one after another
//! on one cluster whose background worker never ticks in the test's time (so nothing is rescued
//! by its backstop); the scenarios of an outcome run side by side. After each outcome:
//!
//! * a claim that was waiting on the queue is woken when the outcome made a job claimable, and
//!   only then (`wakes`);
//! * the totals (`jobs_totals`) count the scenario's settles exactly when it committed (after a
//!   restart, counted from the restart: the totals are since the server started);
//! * unique keys are held exactly as the rows say;
//! * the queue drains: claims take every queued job in turn (no group stays blocked, no job
//!   waits below a claim floor), and every job ends `succeeded`.
//!
//! State that pg_jobs keeps outside its tables (claim floors, wake-ups, freed heads of groups,
//! totals) must be rebuilt from the tables or from what a prepared transaction recorded in
//! them; a restart between a prepare and its commit used to leave a group blocked for good.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::{
    assert_claims_nothing, claim, column, complete, scalar, settings_with, wait_until, Claimed,
    Client, Cluster, NoTls,
};
use postgres::types::ToSql;
use serde_json::json;

/// How a scenario's transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Commit,
    Rollback,
    PrepareCommit,
    PrepareRollback,
    PrepareCrashCommit,
    PrepareRestartRollback,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::Commit,
        Outcome::Rollback,
        Outcome::PrepareCommit,
        Outcome::PrepareRollback,
        Outcome::PrepareCrashCommit,
        Outcome::PrepareRestartRollback,
    ];

    fn commits(self) -> bool {
        matches!(
            self,
            Outcome::Commit | Outcome::PrepareCommit | Outcome::PrepareCrashCommit
        )
    }

    fn prepares(self) -> bool {
        !matches!(self, Outcome::Commit | Outcome::Rollback)
    }

    fn restarts(self) -> bool {
        matches!(
            self,
            Outcome::PrepareCrashCommit | Outcome::PrepareRestartRollback
        )
    }
}

/// Settles a scenario's transaction makes, as `jobs_totals` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    completed: i64,
    failed: i64,
    retried: i64,
}

/// One state-changing function, with what it needs before and what it makes claimable.
struct Scenario {
    name: &'static str,
    /// `jobs_create_queue` settings of its queue.
    settings: &'static str,
    /// Before the transaction: leaves nothing claimable on the queue (a waiting claim sleeps).
    setup: fn(&mut Client, &str, &mut Fixture),
    /// Inside the transaction.
    action: fn(&mut Client, &str, &mut Fixture),
    /// The settles `action` makes.
    settles: Counts,
    /// Whether a job is claimable after a commit, and after a rollback.
    wakes: (bool, bool),
}

/// What a scenario set up and did: the leases it knows of, to settle them at the end.
#[derive(Default)]
struct Fixture {
    held: Vec<Claimed>,
    ids: Vec<i64>,
}

fn one(client: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)]) {
    client
        .query(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

fn enqueue(client: &mut Client, queue: &str, payload: serde_json::Value) -> i64 {
    pg_jobs_tests::enqueue(client, queue, payload)
}

fn hold(client: &mut Client, queue: &str, f: &mut Fixture, n: i32) {
    let claimed = claim(client, queue, n, "");
    assert_eq!(claimed.len(), n as usize, "the fixture's claim of {queue}");
    f.held.extend(claimed);
}

/// Enqueues `n` jobs and holds them: claimed for the fixture, settled at the end.
fn enqueue_and_hold(client: &mut Client, queue: &str, f: &mut Fixture, n: i32) {
    for _ in 0..n {
        enqueue(client, queue, json!({}));
    }
    hold(client, queue, f, n);
}

/// Runs `sql` on the fixture's first held job: `$1` is its id, `$2` its lease.
fn on_first_held(client: &mut Client, f: &mut Fixture, sql: &str) {
    let job = f.held[0];
    one(client, sql, &[&job.id, &job.lease]);
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "enqueue",
            settings: "",
            setup: |_, _, _| {},
            action: |c, q, f| f.ids.push(enqueue(c, q, json!({ "n": 1 }))),
            settles: Counts::default(),
            wakes: (true, false),
        },
        Scenario {
            name: "enqueue_batch",
            settings: "",
            setup: |_, _, _| {},
            action: |c, q, _| {
                one(
                    c,
                    "SELECT * FROM jobs_enqueue_batch($1, ARRAY['{}', '{}', '{}']::jsonb[])",
                    &[&q],
                )
            },
            settles: Counts::default(),
            wakes: (true, false),
        },
        Scenario {
            name: "claim",
            settings: "",
            setup: |c, q, _| {
                enqueue(c, q, json!({}));
            },
            action: |c, q, f| hold(c, q, f, 1),
            settles: Counts::default(),
            wakes: (false, true),
        },
        Scenario {
            name: "complete",
            settings: "",
            setup: |c, q, f| enqueue_and_hold(c, q, f, 1),
            action: |c, _, f| on_first_held(c, f, "SELECT jobs_complete($1, $2)"),
            settles: Counts {
                completed: 1,
                ..Counts::default()
            },
            wakes: (false, false),
        },
        Scenario {
            name: "complete_batch",
            settings: "",
            setup: |c, q, f| enqueue_and_hold(c, q, f, 2),
            action: |c, _, f| {
                let ids: Vec<i64> = f.held.iter().map(|j| j.id).collect();
                let leases: Vec<uuid::Uuid> = f.held.iter().map(|j| j.lease).collect();
                one(
                    c,
                    "SELECT * FROM jobs_complete_batch($1, $2)",
                    &[&ids, &leases],
                );
            },
            settles: Counts {
                completed: 2,
                ..Counts::default()
            },
            wakes: (false, false),
        },
        Scenario {
            name: "fail_and_retry",
            settings: "",
            setup: |c, q, f| enqueue_and_hold(c, q, f, 1),
            action: |c, _, f| {
                on_first_held(c, f, "SELECT jobs_fail($1, $2, 'boom', retry_in => '0')")
            },
            settles: Counts {
                retried: 1,
                ..Counts::default()
            },
            wakes: (true, false),
        },
        Scenario {
            name: "fail_for_good",
            settings: "max_attempts => 1",
            setup: |c, q, f| enqueue_and_hold(c, q, f, 1),
            action: |c, _, f| on_first_held(c, f, "SELECT jobs_fail($1, $2, 'boom')"),
            settles: Counts {
                failed: 1,
                ..Counts::default()
            },
            wakes: (false, false),
        },
        Scenario {
            name: "release",
            settings: "",
            setup: |c, q, f| enqueue_and_hold(c, q, f, 1),
            action: |c, _, f| on_first_held(c, f, "SELECT jobs_release($1, $2, 'later')"),
            settles: Counts::default(),
            wakes: (true, false),
        },
        Scenario {
            name: "heartbeat",
            settings: "",
            setup: |c, q, f| enqueue_and_hold(c, q, f, 1),
            action: |c, _, f| {
                on_first_held(
                    c,
                    f,
                    "SELECT jobs_heartbeat($1, $2, progress => '{\"half\": true}')",
                )
            },
            settles: Counts::default(),
            wakes: (false, false),
        },
        Scenario {
            name: "cancel",
            settings: "",
            setup: |c, q, f| enqueue_and_hold(c, q, f, 1),
            action: |c, _, f| {
                let job = f.held[0];
                one(c, "SELECT jobs_cancel($1)", &[&job.id]);
            },
            settles: Counts::default(),
            wakes: (false, false),
        },
        Scenario {
            name: "retry_failed",
            settings: "max_attempts => 1",
            setup: |c, q, f| {
                let id = enqueue(c, q, json!({}));
                let job = claim(c, q, 1, "")[0];
                one(
                    c,
                    "SELECT jobs_fail($1, $2, 'boom')",
                    &[&job.id, &job.lease],
                );
                f.ids.push(id);
            },
            action: |c, _, f| {
                let id = f.ids[0];
                one(c, "SELECT jobs_retry($1)", &[&id]);
            },
            settles: Counts::default(),
            wakes: (true, false),
        },
        Scenario {
            name: "reclaim",
            settings: "lease => '1 second', max_attempts => 5",
            setup: |c, q, f| {
                enqueue(c, q, json!({}));
                hold(c, q, f, 1);
                thread::sleep(Duration::from_millis(1100));
            },
            action: |c, _, _| one(c, "SELECT jobs_reclaim()", &[]),
            settles: Counts {
                retried: 1,
                ..Counts::default()
            },
            wakes: (true, false),
        },
        Scenario {
            name: "group_head_freed",
            settings: "group_concurrency => 1",
            setup: |c, q, f| {
                for n in 0..2 {
                    one(
                        c,
                        "SELECT jobs_enqueue($1, jsonb_build_object('n', $2::int), group_key => 'g')",
                        &[&q, &n],
                    );
                }
                hold(c, q, f, 1);
                assert_claims_nothing(c, q, 1, "the group's second job waits for its first");
            },
            action: |c, _, f| on_first_held(c, f, "SELECT jobs_complete($1, $2)"),
            settles: Counts {
                completed: 1,
                ..Counts::default()
            },
            wakes: (true, false),
        },
        Scenario {
            name: "unique_enqueue",
            settings: "",
            setup: |_, _, _| {},
            action: |c, q, f| {
                let id: i64 = scalar(
                    c,
                    "SELECT jobs_enqueue($1, '{}', unique_key => 'only-one')",
                    &[&q],
                );
                f.ids.push(id);
            },
            settles: Counts::default(),
            wakes: (true, false),
        },
        Scenario {
            name: "resume",
            settings: "",
            setup: |c, q, _| {
                one(c, "SELECT jobs_pause($1)", &[&q]);
                enqueue(c, q, json!({}));
            },
            action: |c, q, _| one(c, "SELECT jobs_resume($1)", &[&q]),
            settles: Counts::default(),
            wakes: (true, false),
        },
    ]
}

/// A cluster with prepared transactions and no background worker: nothing but the outcome
/// itself may make a job claimable or wake a claim.
fn cluster() -> Cluster {
    let settings = settings_with(&["pg_jobs.databases = ''", "max_prepared_transactions = 40"]);
    Cluster::start_with_extension("liveness", &settings)
}

/// The totals of `queue` (zero when it settled nothing since the server started).
fn totals(client: &mut Client, queue: &str) -> Counts {
    let row = client
        .query_opt(
            "SELECT completed, failed, retried FROM jobs_totals() WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    row.map_or(Counts::default(), |row| Counts {
        completed: row.get(0),
        failed: row.get(1),
        retried: row.get(2),
    })
}

/// Starts a claim that waits up to 20 s on `queue`; joins to the ids it got.
fn wait_on(cluster: &Cluster, queue: &str) -> thread::JoinHandle<(Vec<i64>, Duration)> {
    let dsn = format!(
        "{} application_name=liveness-{queue}",
        cluster.dsn("postgres")
    );
    let queue = queue.to_owned();
    thread::spawn(move || {
        let mut client = Client::connect(&dsn, NoTls).unwrap();
        let started = Instant::now();
        let ids: Vec<i64> = column(
            &mut client,
            "SELECT id FROM jobs_claim($1, wait => '20 seconds')",
            &[&queue],
        );
        (ids, started.elapsed())
    })
}

/// Claims and completes every job of `queue` until none is queued or running; panics when a
/// claim finds nothing while due jobs are queued (a job stuck below a floor, a blocked group).
fn drain(client: &mut Client, queue: &str, held: &[Claimed], label: &str) {
    for job in held {
        let _: String = complete(client, job);
    }
    for _ in 0..50 {
        let claimed = claim(client, queue, 100, "");
        if claimed.is_empty() {
            let left: i64 = scalar(
                client,
                "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state IN ('queued', 'running')",
                &[&queue],
            );
            assert_eq!(
                left, 0,
                "{label}: a claim found nothing while {left} jobs are queued or running (stuck)"
            );
            return;
        }
        for job in claimed {
            let _: String = complete(client, &job);
        }
    }
    panic!("{label}: the queue did not drain");
}

/// Polls `condition` every 20 ms until it holds (true) or `timeout` passes (false).
fn wait_until_or_timeout(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn every_change_under_every_ending_leaves_nothing_stuck() {
    let cluster = cluster();
    let mut admin = cluster.connect();
    let scenarios = scenarios();
    let mut problems = Vec::new();
    for outcome in Outcome::ALL {
        // Set-up, then each scenario's transaction, left open (or prepared).
        let mut sessions: Vec<(Client, String, Fixture, Counts)> = Vec::new();
        for scenario in &scenarios {
            let queue = format!("{}-{outcome:?}", scenario.name).to_lowercase();
            let extra = if scenario.settings.is_empty() {
                String::new()
            } else {
                format!(", {}", scenario.settings)
            };
            admin
                .batch_execute(&format!("SELECT jobs_create_queue('{queue}'{extra})"))
                .unwrap();
            let mut fixture = Fixture::default();
            (scenario.setup)(&mut admin, &queue, &mut fixture);
            let before = totals(&mut admin, &queue);
            let mut session = cluster.connect();
            session.batch_execute("BEGIN").unwrap();
            (scenario.action)(&mut session, &queue, &mut fixture);
            if outcome.prepares() {
                session
                    .batch_execute(&format!("PREPARE TRANSACTION 'liveness-{queue}'"))
                    .unwrap();
            }
            sessions.push((session, queue, fixture, before));
        }
        if outcome.restarts() {
            if outcome == Outcome::PrepareCrashCommit {
                cluster.crash();
            } else {
                cluster.stop();
            }
            cluster.restart();
            admin = cluster.connect();
            // What the worker's first tick does after a start: a committed claim of the
            // database clears the marks of every waiting head with nothing before it; a head
            // whose group runs a job held by a prepared transaction keeps its mark.
            one(&mut admin, "SELECT * FROM jobs_claim('default')", &[]);
        }
        // Claims that wait on each queue, woken (or not) by the outcome.
        let waiters: Vec<_> = sessions
            .iter()
            .map(|(_, queue, _, _)| wait_on(&cluster, queue))
            .collect();
        for (_, queue, _, _) in &sessions {
            let tag = format!("liveness-{queue}");
            wait_until(Duration::from_secs(20), "the claims to wait", || {
                scalar::<i64>(
                    &mut admin,
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE application_name = $1 AND wait_event_type = 'Extension'",
                    &[&tag],
                ) == 1
            });
        }
        let ended = Instant::now();
        for (session, queue, _, _) in sessions.iter_mut() {
            let sql = match (outcome.prepares(), outcome.commits()) {
                (false, true) => "COMMIT".to_owned(),
                (false, false) => "ROLLBACK".to_owned(),
                (true, true) => format!("COMMIT PREPARED 'liveness-{queue}'"),
                (true, false) => format!("ROLLBACK PREPARED 'liveness-{queue}'"),
            };
            if outcome.restarts() {
                admin.batch_execute(&sql).unwrap();
            } else {
                session.batch_execute(&sql).unwrap();
            }
        }
        let mut results: HashMap<String, (Vec<i64>, Duration)> = HashMap::new();
        let mut woken_by_outcome = HashMap::new();
        for (scenario, (_, queue, _, _)) in scenarios.iter().zip(&sessions) {
            let expected = if outcome.commits() {
                scenario.wakes.0
            } else {
                scenario.wakes.1
            };
            woken_by_outcome.insert(queue.clone(), expected);
        }
        let sleeping = |admin: &mut Client, queue: &str| -> bool {
            scalar(
                admin,
                "SELECT count(*) = 1 FROM pg_stat_activity
                  WHERE application_name = $1 AND wait_event_type = 'Extension'",
                &[&format!("liveness-{queue}")],
            )
        };
        // The claims the outcome should wake leave their sleep (a generous bound for a busy
        // machine; the others are seen still asleep after it).
        let _ = wait_until_or_timeout(Duration::from_secs(5), || {
            sessions
                .iter()
                .filter(|(_, queue, _, _)| woken_by_outcome[queue])
                .all(|(_, queue, _, _)| !sleeping(&mut admin, queue))
        });
        let mut woken_by_test = std::collections::HashSet::new();
        for (_, queue, _, _) in &sessions {
            // A claim the outcome had no job for may still be between attempts (a rollback
            // wakes every waiter): give it time to fall asleep again.
            let asleep = woken_by_outcome[queue] && sleeping(&mut admin, queue)
                || !woken_by_outcome[queue]
                    && wait_until_or_timeout(Duration::from_secs(3), || {
                        sleeping(&mut admin, queue)
                    });
            if asleep {
                woken_by_test.insert(queue.clone());
                // Not woken: a job of the test's own, so that it returns; a paused queue is
                // resumed for it.
                one(&mut admin, "SELECT jobs_resume($1)", &[queue]);
                enqueue(&mut admin, queue, json!({ "wake": "test" }));
            }
        }
        for ((_, queue, _, _), waiter) in sessions.iter().zip(waiters) {
            results.insert(queue.clone(), waiter.join().unwrap());
        }

        for (scenario, (_, queue, fixture, before)) in scenarios.iter().zip(&sessions) {
            let label = format!("{} {outcome:?}", scenario.name);
            let (got, took) = &results[queue];
            let expected_wake = woken_by_outcome[queue];
            if expected_wake && woken_by_test.contains(queue) {
                problems.push(format!(
                    "{label}: a waiting claim was not woken by the outcome (got {got:?} after {took:?}, {:?} after the outcome)",
                    ended.elapsed()
                ));
            }
            if !expected_wake && !woken_by_test.contains(queue) && !got.is_empty() {
                problems.push(format!(
                    "{label}: a waiting claim got {got:?}, but the outcome made nothing claimable"
                ));
            }
            // Totals: the settles counted exactly when committed, since the server started.
            let base = if outcome.restarts() {
                Counts::default()
            } else {
                *before
            };
            let expected = if outcome.commits() {
                Counts {
                    completed: base.completed + scenario.settles.completed,
                    failed: base.failed + scenario.settles.failed,
                    retried: base.retried + scenario.settles.retried,
                }
            } else {
                base
            };
            let counted = totals(&mut admin, queue);
            if counted != expected {
                problems.push(format!(
                    "{label}: jobs_totals says {counted:?}, the tables {expected:?}"
                ));
            }
            // Unique keys: held exactly by the unfinished jobs that carry them.
            let misheld: i64 = scalar(
                &mut admin,
                "SELECT count(*) FROM jobs.job
                  WHERE queue = $1
                    AND unique_hold IS DISTINCT FROM
                        (unique_key IS NOT NULL AND state IN ('queued', 'running'))",
                &[&queue],
            );
            if misheld != 0 {
                problems.push(format!(
                    "{label}: {misheld} jobs hold unique keys the rows do not say"
                ));
            }
            one(&mut admin, "SELECT jobs_resume($1)", &[queue]);
            // The test's own wake-up claims are settled with the rest.
            let mut held = fixture.held.clone();
            if !got.is_empty() {
                let leases: Vec<Claimed> = admin
                    .query(
                        "SELECT id, lease, attempt FROM jobs.job WHERE id = ANY($1) AND state = 'running'",
                        &[got],
                    )
                    .unwrap()
                    .iter()
                    .map(Claimed::from_row)
                    .collect();
                held.extend(leases);
            }
            drain(&mut admin, queue, &held, &label);
            let unfinished: i64 = scalar(
                &mut admin,
                "SELECT count(*) FROM jobs.job
                  WHERE queue = $1 AND state NOT IN ('succeeded', 'failed', 'cancelled')",
                &[&queue],
            );
            if unfinished != 0 {
                problems.push(format!(
                    "{label}: {unfinished} jobs unfinished after draining"
                ));
            }
        }
        drop(sessions);
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
