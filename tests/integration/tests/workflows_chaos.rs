//! Workflows under faults (issue 37): chains, diamonds, fan-ins and jobs that await signals,
//! worked by sessions that are terminated at random, that fail jobs, abandon them to their
//! lease and settle some of them in prepared transactions, while the server crashes and
//! restarts; signals are sent before and after their awaits, some first in a transaction that
//! rolls back.
//!
//! Each claim records, in its own transaction, the job, its attempt, the signal it carried and
//! whether every parent had succeeded by then (read after the claim, in the same transaction:
//! a wrong claim can only be missed, never invented). The record commits or vanishes with the
//! claim, so a crash cannot make it lie. Once every job has finished, the rules are checked on
//! the record and the final rows:
//!
//! * no job was claimed before all its parents had succeeded;
//! * nothing is left queued, running or waiting;
//! * a job with a failed or cancelled parent is cancelled, naming the dependency, and was never
//!   claimed; a job whose parents all succeeded was not cancelled for them;
//! * a job that awaited a signal resumed with the payload of a committed signal (never of a
//!   rolled-back one), or flagged as timed out when none came.
//!
//! `PG_JOBS_WORKFLOW_CHAOS_SEED` repeats a run's decisions (the interleaving is the
//! scheduler's).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::Rng;
use pg_jobs_tests::{column, row, scalar, Client, Cluster, TEST_SETTINGS};
use serde_json::{json, Value};

/// What a worker does with a job the first time it runs it.
fn plan(rng: &mut Rng) -> &'static str {
    match rng.below(100) {
        0..=4 => "fail",
        5..=14 => "fail_once",
        _ => "succeed",
    }
}

/// Connects to `cluster`, retrying while it restarts.
fn connect(cluster: &Cluster, stop: &AtomicBool) -> Option<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Ok(client) = postgres::Client::connect(&cluster.dsn("postgres"), postgres::NoTls) {
            return Some(client);
        }
        thread::sleep(Duration::from_millis(100));
    }
    None
}

/// The jobs of the run: their parents, and the signal each awaiting job waits for.
#[derive(Default)]
struct Graph {
    parents: BTreeMap<i64, Vec<i64>>,
    awaits: BTreeMap<i64, String>,
}

/// Enqueues the run's workflows: 24 chains of 4 steps, 16 diamonds, 4 fan-ins of 8 parents,
/// and 30 jobs that await a signal, with a plan each in their payload.
fn enqueue_graph(client: &mut Client, rng: &mut Rng) -> Graph {
    let mut graph = Graph::default();
    let job = |client: &mut Client, rng: &mut Rng, after: &[i64], awaits: Option<&str>| {
        let payload = json!({ "plan": plan(rng), "awaits": awaits });
        let id: i64 = scalar(
            client,
            "SELECT jobs_enqueue('wf', $1, after => $2)",
            &[&payload, &(!after.is_empty()).then_some(after.to_vec())],
        );
        client
            .execute(
                "INSERT INTO wf_parent SELECT $1, unnest($2::bigint[])",
                &[&id, &after],
            )
            .unwrap();
        id
    };
    for _ in 0..24 {
        let mut previous: Vec<i64> = Vec::new();
        for _ in 0..4 {
            let id = job(client, rng, &previous, None);
            graph.parents.insert(id, previous.clone());
            previous = vec![id];
        }
    }
    for _ in 0..16 {
        let top = job(client, rng, &[], None);
        let left = job(client, rng, &[top], None);
        let right = job(client, rng, &[top], None);
        let bottom = job(client, rng, &[left, right], None);
        graph.parents.insert(top, vec![]);
        graph.parents.insert(left, vec![top]);
        graph.parents.insert(right, vec![top]);
        graph.parents.insert(bottom, vec![left, right]);
    }
    for _ in 0..4 {
        let parents: Vec<i64> = (0..8).map(|_| job(client, rng, &[], None)).collect();
        for &parent in &parents {
            graph.parents.insert(parent, vec![]);
        }
        let child = job(client, rng, &parents, None);
        graph.parents.insert(child, parents);
    }
    for n in 0..30 {
        let name = format!("paid-{n}");
        let id = job(client, rng, &[], Some(&name));
        graph.parents.insert(id, vec![]);
        graph.awaits.insert(id, name);
    }
    graph
}

/// A claimed job: id, lease, attempt, the signal it carries, payload.
type Held = (i64, uuid::Uuid, i32, Option<Value>, Value);

/// One worker: claims up to 3 jobs, records each claim, and settles each as its plan says;
/// reconnects whenever its session is ended.
fn worker(cluster: &Cluster, index: u64, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng::from_state(seed ^ (index + 1).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut client = None;
    let mut serial = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(session) = client.as_mut() else {
            client = connect(cluster, stop);
            if let Some(session) = client.as_mut() {
                let _ = session.batch_execute("SET application_name = 'wf-worker'");
            }
            continue;
        };
        let claimed = (|| -> Result<Vec<Held>, postgres::Error> {
            let mut tx = session.transaction()?;
            let rows = tx.query(
                "SELECT id, lease, attempt, signal, payload
                   FROM jobs_claim('wf', worker => 'chaos', n => 3, lease => '1 second')",
                &[],
            )?;
            let jobs: Vec<Held> = rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
                .collect();
            for (id, _, attempt, signal, _) in &jobs {
                tx.execute(
                    "INSERT INTO wf_claim (job, attempt, signal, parents_succeeded)
                     SELECT $1, $2, $3, NOT EXISTS (
                            SELECT FROM wf_parent p JOIN jobs.job j ON j.id = p.parent
                             WHERE p.child = $1 AND j.state <> 'succeeded')",
                    &[id, attempt, signal],
                )?;
            }
            tx.commit()?;
            Ok(jobs)
        })();
        let jobs = match claimed {
            Ok(jobs) => jobs,
            Err(_) => {
                client = None;
                continue;
            }
        };
        if jobs.is_empty() {
            thread::sleep(Duration::from_millis(20));
            continue;
        }
        for (id, lease, attempt, signal, payload) in jobs {
            // The work itself, so that faults land while jobs are in flight.
            thread::sleep(Duration::from_millis(5 + rng.below(30)));
            // Now and then a worker walks away from a job: its lease runs out.
            if rng.chance(4) {
                continue;
            }
            let plan = payload["plan"].as_str().unwrap_or("succeed");
            let awaits = payload["awaits"].as_str();
            let call = match (awaits, &signal) {
                (Some(name), None) => {
                    format!("SELECT jobs_await({id}, '{lease}', '{name}', timeout => '4 seconds')")
                }
                _ if plan == "fail" => {
                    format!("SELECT jobs_fail({id}, '{lease}', 'planned', retry => false)")
                }
                _ if plan == "fail_once" && attempt == 1 => {
                    format!("SELECT jobs_fail({id}, '{lease}', 'once', retry_in => '10 ms')")
                }
                _ => {
                    let result = json!({ "signal": signal });
                    format!("SELECT jobs_complete({id}, '{lease}', '{result}')")
                }
            };
            let outcome = if rng.chance(15) {
                serial += 1;
                let gid = format!("wf-{index}-{serial}");
                session.batch_execute(&format!("BEGIN; {call}; PREPARE TRANSACTION '{gid}'"))
            } else {
                session.batch_execute(&call)
            };
            if outcome.is_err() {
                client = None;
                break;
            }
        }
    }
}

/// Sends every awaiting job's signal but a few, at random moments (some before their await),
/// some first in a transaction that rolls back; returns the payload each committed signal
/// carries.
fn signaller(
    cluster: &Cluster,
    seed: u64,
    names: Vec<String>,
    stop: &AtomicBool,
) -> BTreeMap<String, Value> {
    let mut rng = Rng::from_state(seed ^ 0x5151);
    let mut sent = BTreeMap::new();
    let mut client = None;
    let mut queue: Vec<String> = names;
    while !queue.is_empty() && !stop.load(Ordering::Relaxed) {
        let index = rng.below(queue.len() as u64) as usize;
        let name = queue[index].clone();
        // A few awaits never get a signal: their timeout queues them.
        if rng.chance(10) {
            queue.swap_remove(index);
            continue;
        }
        let Some(session) = client.as_mut() else {
            client = connect(cluster, stop);
            continue;
        };
        let payload = json!({ "for": name });
        let rolled_back = json!({ "rolled_back": true });
        let result = (|| -> Result<(), postgres::Error> {
            if rng.chance(30) {
                let mut tx = session.transaction()?;
                tx.execute("SELECT jobs_signal($1, $2)", &[&name, &rolled_back])?;
                tx.rollback()?;
            }
            session.execute("SELECT jobs_signal($1, $2)", &[&name, &payload])?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                sent.insert(name, payload);
                queue.swap_remove(index);
            }
            // Whether it committed is read back from the job at the end.
            Err(_) => client = None,
        }
        thread::sleep(Duration::from_millis(rng.below(120)));
    }
    sent
}

/// Commits the workers' prepared transactions once they are 300 ms old, as a transaction
/// manager recovering them would: read from `pg_prepared_xacts`, so one whose PREPARE answered
/// into a dying connection is committed too.
fn resolve(cluster: &Cluster, stop: &AtomicBool) {
    let mut client = None;
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(150));
        let Some(session) = client.as_mut() else {
            client = connect(cluster, stop);
            continue;
        };
        let gids: Result<Vec<String>, _> = session
            .query(
                "SELECT gid FROM pg_prepared_xacts
                  WHERE gid LIKE 'wf-%' AND prepared < now() - interval '300 ms'",
                &[],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect());
        let Ok(gids) = gids else {
            client = None;
            continue;
        };
        for gid in gids {
            // An error ends this round: the session died, or another round committed it.
            if session
                .batch_execute(&format!("COMMIT PREPARED '{gid}'"))
                .is_err()
            {
                client = None;
                break;
            }
        }
    }
}

#[test]
fn workflows_keep_their_rules_through_kills_crashes_and_prepared_settles() {
    let seed = std::env::var("PG_JOBS_WORKFLOW_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!(
        "workflow chaos: seed {seed} (PG_JOBS_WORKFLOW_CHAOS_SEED={seed} repeats its decisions)"
    );
    let mut settings: Vec<&str> = TEST_SETTINGS.to_vec();
    settings.push("max_prepared_transactions = 20");
    let cluster = Arc::new(Cluster::start("workflows-chaos", &settings));
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE EXTENSION pg_jobs;
             SELECT jobs_create_queue('wf', max_attempts => 6, backoff_base => '10 ms',
                                      backoff_max => '50 ms');
             CREATE TABLE wf_parent (child bigint NOT NULL, parent bigint NOT NULL);
             CREATE TABLE wf_claim (job bigint NOT NULL, attempt int NOT NULL, signal jsonb,
                                    parents_succeeded bool NOT NULL,
                                    at timestamptz NOT NULL DEFAULT clock_timestamp());",
        )
        .unwrap();
    let mut rng = Rng::from_state(seed);
    let graph = enqueue_graph(&mut admin, &mut rng);
    // A few roots cancelled before anyone runs them: their descendants go with them.
    let roots: Vec<i64> = graph
        .parents
        .iter()
        .filter(|(id, parents)| parents.is_empty() && !graph.awaits.contains_key(id))
        .map(|(id, _)| *id)
        .collect();
    for _ in 0..3 {
        let root = roots[rng.below(roots.len() as u64) as usize];
        admin.execute("SELECT jobs_cancel($1)", &[&root]).unwrap();
    }
    drop(admin);

    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for index in 0..4 {
        let (cluster, stop) = (cluster.clone(), stop.clone());
        threads.push(thread::spawn(move || worker(&cluster, index, seed, &stop)));
    }
    let resolver = {
        let (cluster, stop) = (cluster.clone(), stop.clone());
        thread::spawn(move || resolve(&cluster, &stop))
    };
    let signals = {
        let (cluster, stop) = (cluster.clone(), stop.clone());
        let names: Vec<String> = graph.awaits.values().cloned().collect();
        thread::spawn(move || signaller(&cluster, seed, names, &stop))
    };

    // The faults: terminated workers throughout, a crash, then a clean restart.
    let mut chaos = Rng::from_state(seed ^ 0xC4A05);
    let started = Instant::now();
    let mut crashed = false;
    let mut crash_at = std::time::SystemTime::now();
    let mut restarted = false;
    let finished = |client: &mut Client| -> bool {
        client
            .query_one(
                "SELECT count(*) = 0 FROM jobs.job WHERE state NOT IN ('succeeded', 'failed', 'cancelled')",
                &[],
            )
            .map(|r| r.get(0))
            .unwrap_or(false)
    };
    loop {
        thread::sleep(Duration::from_millis(100 + chaos.below(200)));
        let elapsed = started.elapsed();
        if !crashed && elapsed > Duration::from_millis(1500) {
            crash_at = std::time::SystemTime::now();
            cluster.crash();
            cluster.restart();
            crashed = true;
            continue;
        }
        if !restarted && elapsed > Duration::from_millis(4000) {
            cluster.restart_fast();
            restarted = true;
            continue;
        }
        let Ok(mut client) = postgres::Client::connect(&cluster.dsn("postgres"), postgres::NoTls)
        else {
            continue;
        };
        if crashed && restarted && finished(&mut client) {
            break;
        }
        if elapsed < Duration::from_secs(8) {
            let _ = client.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE application_name = 'wf-worker' AND pid <> pg_backend_pid()
                  ORDER BY random() LIMIT 1",
                &[],
            );
        }
        assert!(
            elapsed < Duration::from_secs(120),
            "jobs still unfinished after 120 s (seed {seed}):\n{:#?}",
            client
                .query(
                    "SELECT id, state::text, attempt, run_at::text FROM jobs.job
                      WHERE state NOT IN ('succeeded', 'failed', 'cancelled') ORDER BY id LIMIT 20",
                    &[],
                )
                .map(|rows| rows
                    .iter()
                    .map(|r| format!(
                        "{} {} attempt {} run_at {}",
                        r.get::<_, i64>(0),
                        r.get::<_, String>(1),
                        r.get::<_, i32>(2),
                        r.get::<_, String>(3)
                    ))
                    .collect::<Vec<_>>())
        );
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    resolver.join().unwrap();
    signals.join().unwrap();

    let mut client = cluster.connect();
    // Settles prepared as the run ended (late ones, of finished jobs) are committed too; they
    // change nothing.
    let left: Vec<String> = column(&mut client, "SELECT gid FROM pg_prepared_xacts", &[]);
    for gid in left {
        client
            .batch_execute(&format!("COMMIT PREPARED '{gid}'"))
            .unwrap();
    }
    assert!(
        finished(&mut client),
        "a settle prepared as the run ended changed a finished job (seed {seed})"
    );

    // No claim before every parent had succeeded.
    let early: Vec<(i64, i32)> = client
        .query(
            "SELECT job, attempt FROM wf_claim WHERE NOT parents_succeeded ORDER BY job",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        early.is_empty(),
        "claimed before their parents succeeded (seed {seed}): {early:?}"
    );

    // Final states against the parents'.
    let finals: BTreeMap<i64, (String, Value, Option<Value>)> = client
        .query("SELECT id, state::text, errors, result FROM jobs.job", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3))))
        .collect();
    let claimed: BTreeSet<i64> = column(&mut client, "SELECT DISTINCT job FROM wf_claim", &[]);
    let mut broken = Vec::new();
    for (id, parents) in &graph.parents {
        let (state, errors, _) = &finals[id];
        let unsucceeded: Vec<i64> = parents
            .iter()
            .copied()
            .filter(|parent| finals[parent].0 != "succeeded")
            .collect();
        match unsucceeded.first() {
            Some(parent) => {
                // It names the parent whose end decided it, whichever of them that was.
                let named = unsucceeded
                    .iter()
                    .any(|p| errors.to_string().contains(&format!("dependency {p} ")));
                if state != "cancelled" || !named || claimed.contains(id) {
                    broken.push(format!(
                        "job {id}: parent {parent} is {}, but it is {state} (errors {errors}, claimed {})",
                        finals[parent].0,
                        claimed.contains(id)
                    ));
                }
            }
            None if state == "cancelled" && errors.to_string().contains("dependency") => {
                broken.push(format!(
                    "job {id}: every parent succeeded, but it was cancelled for one: {errors}"
                ));
            }
            None => {}
        }
    }
    assert!(
        broken.is_empty(),
        "dependency rules broken (seed {seed}):\n{}",
        broken.join("\n")
    );

    // Awaits: resumed with a committed signal's payload, or timed out when none came.
    let mut wrong = Vec::new();
    for (id, name) in &graph.awaits {
        let (state, _, result) = &finals[id];
        if state != "succeeded" {
            continue;
        }
        let signal = result
            .as_ref()
            .map(|r| r["signal"].clone())
            .unwrap_or(Value::Null);
        let payload = &signal["payload"];
        let ok = signal["name"] == json!(name)
            && (payload == &json!({ "for": name })
                || (signal["timed_out"] == json!(true) && payload.is_null()));
        if !ok {
            wrong.push(format!("job {id} awaiting {name} resumed with {signal}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "awaits resumed wrongly (seed {seed}):\n{}",
        wrong.join("\n")
    );
    let resumed: i64 = scalar(
        &mut client,
        "SELECT count(DISTINCT job) FROM wf_claim WHERE signal IS NOT NULL",
        &[],
    );
    let (claims, before_crash, states): (i64, i64, String) = row(
        &mut client,
        "SELECT (SELECT count(*) FROM wf_claim),
                (SELECT count(*) FROM wf_claim WHERE at < $1::timestamptz),
                (SELECT string_agg(state::text || ' ' || n, ', ' ORDER BY state)
                   FROM (SELECT state, count(*) AS n FROM jobs.job GROUP BY state) s)",
        &[&crash_at],
    );
    eprintln!(
        "workflow chaos: {claims} claims ({before_crash} before the crash), {resumed} resumed from an await, final: {states}"
    );
    assert!(
        resumed > 0,
        "no job resumed from an await: the run exercised nothing (seed {seed})"
    );
}
