//! Upgrading from the released 0.1.0 to this version the way README "Upgrading" says: a cluster
//! runs the real 0.1.0 (built from the commit that shipped it) with queued, delayed, running
//! (leases held by another session) and finished jobs; it stops, the current package is
//! installed over it, it starts again on the new library with the old SQL definitions, and
//! `ALTER EXTENSION pg_jobs UPDATE` runs while the worker runs. Then every running job settles
//! with its old lease, the queued ones are claimed in order, nothing is lost or duplicated, ids
//! continue, and the catalogs of the upgraded database equal those of a fresh install.
//!
//! Between the restart and the update (the gap) every 0.1.0 function either works or refuses
//! with a clear error, never crashes the server, and the worker idles, saying so once.
//!
//! The 0.1.0 build is cached in `<target>/tmp/pg_jobs-0.1.0` (or `PG_JOBS_UPGRADE_CACHE`); see
//! `pg_jobs_tests::released`. The PostgreSQL installation is copied under `PG_JOBS_TEST_DIR`
//! for the test, so the installation other tests use keeps the current package.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pg_jobs_tests::pg_jobs_version;
use pg_jobs_tests::released::{package_0_1_0, Tree, COMMIT_0_1_0};
use pg_jobs_tests::{catalog, manifest, row, scalar, wait_until, Client, Cluster, TEST_SETTINGS};

/// Where the 0.1.0 build is cached between runs.
fn cache() -> PathBuf {
    std::env::var_os("PG_JOBS_UPGRADE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("pg_jobs-0.1.0"))
}

/// The kept 0.1.0 install script.
fn kept_install_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql/pg_jobs--0.1.0.sql")
}

/// The statements of a pgrx install script as a sorted list of its blocks: pgrx does not
/// promise the order of independent blocks from one build to the next.
fn script_blocks(path: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut blocks: Vec<String> = text
        .split("/* <begin connected objects> */")
        .map(|block| block.trim().to_owned())
        .filter(|block| !block.is_empty())
        .collect();
    blocks.sort();
    blocks
}

/// One job as 0.1.0 left it.
#[derive(Clone, Debug, PartialEq)]
struct JobRow {
    state: String,
    attempt: i32,
    lease: Option<uuid::Uuid>,
    payload: serde_json::Value,
    run_at_epoch: f64,
}

fn jobs(client: &mut Client) -> BTreeMap<i64, JobRow> {
    client
        .query(
            "SELECT id, state::text, attempt, lease, payload, extract(epoch FROM run_at)::float8
               FROM jobs.job ORDER BY id",
            &[],
        )
        .expect("read jobs.job")
        .iter()
        .map(|row| {
            (
                row.get(0),
                JobRow {
                    state: row.get(1),
                    attempt: row.get(2),
                    lease: row.get(3),
                    payload: row.get(4),
                    run_at_epoch: row.get(5),
                },
            )
        })
        .collect()
}

fn extension_version(client: &mut Client) -> String {
    scalar(
        client,
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_jobs'",
        &[],
    )
}

fn worker_pid(client: &mut Client) -> Option<i32> {
    client
        .query_opt(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_jobs worker'",
            &[],
        )
        .expect("read pg_stat_activity")
        .map(|row| row.get(0))
}

/// Every 0.1.0 function, called in the gap with NULL for each argument: it works (the plain
/// SQL and pure functions) or refuses with 55000 (or, for the C function whose symbol 0.2.0
/// no longer has, 42883 from PostgreSQL), and the connection survives each call.
fn call_every_function_in_the_gap(client: &mut Client) -> Vec<String> {
    let functions: Vec<(String, String)> = client
        .query(
            "SELECT p.oid::regprocedure::text,
                    format('SELECT * FROM %s(%s)', p.oid::regproc,
                           coalesce((SELECT string_agg(format('NULL::%s', t::regtype), ', ' ORDER BY n)
                                       FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, n)), ''))
               FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_jobs'
              ORDER BY 1",
            &[],
        )
        .expect("list the 0.1.0 functions")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(
        functions.len() >= 20,
        "0.1.0 has 22 functions: {functions:?}"
    );
    let mut worked = Vec::new();
    for (function, call) in functions {
        match client.simple_query(&call) {
            Ok(_) => worked.push(function),
            Err(error) => {
                let db = error
                    .as_db_error()
                    .unwrap_or_else(|| panic!("{call} broke the connection: {error}"));
                let code = db.code().code();
                match code {
                    "55000" => {
                        assert!(
                            db.message().contains(&format!("version {}", pg_jobs_version()))
                                && db.message().contains("version 0.1.0")
                                && db.hint().unwrap_or("").contains("ALTER EXTENSION pg_jobs UPDATE"),
                            "{call}: the refusal must name both versions and what to run: {} / {:?}",
                            db.message(),
                            db.hint()
                        );
                    }
                    "42883" => assert!(
                        db.message().contains("could not find function"),
                        "{call}: {}",
                        db.message()
                    ),
                    _ => panic!("{call} in the gap failed with {code}: {}", db.message()),
                }
            }
        }
    }
    worked
}

#[test]
fn upgrade_from_0_1_0_with_jobs_in_flight() {
    let started = Instant::now();
    let package = package_0_1_0(&cache());
    eprintln!(
        "the 0.1.0 package was ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        script_blocks(&kept_install_script()),
        script_blocks(&package.install_script),
        "sql/pg_jobs--0.1.0.sql must be the install script commit {COMMIT_0_1_0} generates, as released"
    );

    let test_dir = std::env::var_os("PG_JOBS_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/pg_jobs-tests"));
    let root = test_dir.join(format!("upgrade-tree-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let tree = Tree::copy_into(&root);
    tree.install_release(&package, &kept_install_script());

    let cluster = Cluster::start_in(&tree.bin, "upgrade", TEST_SETTINGS, &[]);
    let mut admin = cluster.connect();
    admin.batch_execute("CREATE EXTENSION pg_jobs").unwrap();
    assert_eq!(extension_version(&mut admin), "0.1.0");
    let released = manifest::read()
        .into_iter()
        .find(|s| s.version == "0.1.0")
        .expect("sql/api-manifest.txt has a [0.1.0] section");
    if let Some(diff) = manifest::difference(&released, &manifest::listing(&mut admin)) {
        panic!("the released 0.1.0: {diff}");
    }

    // Jobs of every kind, with the 0.1.0 API. The lease outlives the test: no reclaim may
    // settle the running jobs for their holders.
    admin
        .batch_execute("SELECT jobs_create_queue('up', lease => '10 minutes', max_attempts => 3)")
        .unwrap();
    let enqueue = |client: &mut Client, n: i64, delay: &str| -> Vec<i64> {
        (0..n)
            .map(|i| {
                scalar(
                    client,
                    &format!(
                        "SELECT jobs_enqueue('up', jsonb_build_object('n', {i}::int), run_at => now() + interval '{delay}')"
                    ),
                    &[],
                )
            })
            .collect()
    };
    let claim = |client: &mut Client, n: i32| -> Vec<(i64, uuid::Uuid)> {
        client
            .query("SELECT id, lease FROM jobs_claim('up', n => $1)", &[&n])
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    };
    let finished_ids = enqueue(&mut admin, 4, "0 seconds");
    let finished = claim(&mut admin, 4);
    assert_eq!(finished.len(), 4);
    for (i, (id, lease)) in finished.iter().enumerate() {
        let outcome: String = if i % 2 == 0 {
            scalar(
                &mut admin,
                "SELECT jobs_complete($1::bigint, $2::uuid)",
                &[id, lease],
            )
        } else {
            scalar(
                &mut admin,
                "SELECT jobs_fail($1::bigint, $2::uuid, 'broken', retry => false)",
                &[id, lease],
            )
        };
        assert_eq!(outcome, if i % 2 == 0 { "succeeded" } else { "failed" });
    }
    // Running: claimed by another session, which keeps the leases.
    let running_ids = enqueue(&mut admin, 3, "0 seconds");
    let mut holder = cluster.connect();
    let running = claim(&mut holder, 3);
    assert_eq!(
        running.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        running_ids
    );
    let queued_ids = enqueue(&mut admin, 10, "0 seconds");
    let delayed_ids = enqueue(&mut admin, 3, "20 seconds");
    let before = jobs(&mut admin);
    assert_eq!(before.len(), 20);
    let max_id_before = *before.keys().max().unwrap();
    drop(holder);
    drop(admin);

    // The upgrade: the new package over the old one, a restart, the update.
    cluster.stop();
    tree.install_current();
    cluster.restart();
    let mut admin = cluster.connect();
    assert_eq!(extension_version(&mut admin), "0.1.0");
    wait_until(
        Duration::from_secs(30),
        "the worker to say it waits for ALTER EXTENSION pg_jobs UPDATE",
        || {
            cluster.log().contains(
                &format!("the database has the SQL definitions of pg_jobs 0.1.0 but the library is {}; the worker idles until ALTER EXTENSION pg_jobs UPDATE", pg_jobs_version()),
            )
        },
    );
    let gap_worker = worker_pid(&mut admin).expect("the worker runs in the gap");

    // The gap: every function works or refuses; the arguments 0.1.0 passes to the two functions
    // whose argument lists changed are never read as the new ones.
    let worked = call_every_function_in_the_gap(&mut admin);
    assert_eq!(
        worked,
        vec![
            "jobs.backoff_delay(interval,interval,double precision,integer)".to_owned(),
            "jobs.queued_priorities(text,smallint)".to_owned(),
        ],
        "in the gap only the functions that touch nothing of the new version may work"
    );
    for call in [
        "SELECT jobs_create_queue('gap', '1 minute', 3, '1 second', '1 hour', 0.5, '1 day', 10, 4, 'up')",
        "SELECT * FROM jobs_enqueue_batch('up', ARRAY['{}'::jsonb], 'k', now(), 1, 2, '{}', NULL, NULL, 'skip', NULL, NULL)",
        "SELECT jobs_enqueue('up', '{}')",
        "SELECT * FROM jobs_claim('up', n => 5)",
    ] {
        let error = admin.simple_query(call).expect_err(call);
        let db = error.as_db_error().expect(call);
        assert_eq!(db.code().code(), "55000", "{call}: {}", db.message());
    }
    let (id, lease) = running[0];
    let error = admin
        .query("SELECT jobs_complete($1::bigint, $2::uuid)", &[&id, &lease])
        .expect_err("complete in the gap");
    assert_eq!(error.as_db_error().unwrap().code().code(), "55000");
    assert_eq!(
        jobs(&mut admin),
        before,
        "nothing changed a job in the gap (the worker idles, every function refused)"
    );
    assert!(
        !cluster.log().contains("terminated by signal"),
        "no backend crashed in the gap:\n{}",
        cluster.log()
    );

    // The update, while the worker runs.
    admin
        .batch_execute("ALTER EXTENSION pg_jobs UPDATE")
        .unwrap();
    assert_eq!(extension_version(&mut admin), pg_jobs_version());
    wait_until(Duration::from_secs(30), "the worker to serve", || {
        scalar::<bool>(
            &mut admin,
            "SELECT coalesce(bool_or(serving), false) FROM jobs_worker_status() WHERE database = 'postgres'",
            &[],
        )
    });
    assert_eq!(
        worker_pid(&mut admin),
        Some(gap_worker),
        "the worker resumed without a restart"
    );
    assert!(cluster.log().contains(&format!(
        "the SQL definitions are now version {}; the worker serves the database",
        pg_jobs_version()
    )));

    // The sessions that held leases come back and settle with their old leases.
    let mut holder = cluster.connect();
    for (i, (id, lease)) in running.iter().enumerate() {
        let heartbeat: String = scalar(&mut holder, "SELECT jobs_heartbeat($1, $2)", &[id, lease]);
        assert_eq!(heartbeat, "running", "job {id} keeps its lease");
        let outcome: String = if i == 0 {
            scalar(
                &mut holder,
                "SELECT jobs_fail($1, $2, 'after the upgrade', retry => false)",
                &[id, lease],
            )
        } else {
            scalar(&mut holder, "SELECT jobs_complete($1, $2)", &[id, lease])
        };
        assert_eq!(outcome, if i == 0 { "failed" } else { "succeeded" });
    }

    // The queued jobs, one claim at a time, in their order; the delayed ones once due.
    let mut worker = cluster.connect();
    let mut claimed: Vec<(i64, uuid::Uuid)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while claimed.len() < queued_ids.len() + delayed_ids.len() {
        assert!(Instant::now() < deadline, "claimed only {claimed:?}");
        let got = claim(&mut worker, 1);
        if got.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let (id, lease) = got[0];
        if delayed_ids.contains(&id) {
            let now: f64 = scalar(&mut worker, "SELECT extract(epoch FROM now())::float8", &[]);
            assert!(
                now >= before[&id].run_at_epoch,
                "delayed job {id} was claimed before it was due"
            );
        }
        let outcome: String = scalar(&mut worker, "SELECT jobs_complete($1, $2)", &[&id, &lease]);
        assert_eq!(outcome, "succeeded");
        claimed.push((id, lease));
    }
    let order: Vec<i64> = claimed.iter().map(|(id, _)| *id).collect();
    let expected: Vec<i64> = queued_ids.iter().chain(&delayed_ids).copied().collect();
    assert_eq!(
        order, expected,
        "the queued jobs are claimed in their order"
    );
    assert!(
        claim(&mut worker, 10).is_empty(),
        "nothing is claimed twice"
    );

    // Nothing lost, nothing duplicated: the same jobs, each settled once, payloads intact.
    let after = jobs(&mut admin);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (id, job) in &after {
        assert_eq!(job.payload, before[id].payload, "job {id}'s payload");
        let expected_state = if finished_ids.contains(id) {
            before[id].state.as_str()
        } else if *id == running_ids[0] {
            "failed"
        } else {
            "succeeded"
        };
        assert_eq!(job.state, expected_state, "job {id}");
        assert_eq!(job.attempt, 1, "job {id} was claimed exactly once");
    }
    let next: i64 = scalar(&mut admin, "SELECT jobs_enqueue('up')", &[]);
    assert!(
        next > max_id_before,
        "ids continue: {next} after {max_id_before}"
    );
    let settings: (String, i32) = row(
        &mut admin,
        "SELECT lease::text, max_attempts FROM jobs.queue WHERE name = 'up'",
        &[],
    );
    assert_eq!(settings, ("00:10:00".to_owned(), 3), "the queue's settings");

    // The catalogs equal a fresh install's.
    admin.batch_execute("CREATE DATABASE fresh").unwrap();
    let mut fresh = cluster.connect_to("fresh");
    fresh.batch_execute("CREATE EXTENSION pg_jobs").unwrap();
    let upgraded = catalog::snapshot(&mut admin);
    let installed = catalog::snapshot(&mut fresh);
    assert!(
        upgraded.len() > 1000,
        "the catalog query sees the extension ({} facts)",
        upgraded.len()
    );
    if let Some(diff) = catalog::difference("upgraded", &upgraded, "fresh", &installed) {
        panic!(
            "the upgraded database's catalogs differ from a fresh {} install: {diff}",
            pg_jobs_version()
        );
    }

    drop(fresh);
    drop(admin);
    drop(holder);
    drop(worker);
    cluster.stop();
    let _ = std::fs::remove_dir_all(&root);
    eprintln!("upgrade test took {:.1} s", started.elapsed().as_secs_f64());
}

/// The version check follows the catalog at once, in this session and in others, both ways:
/// a session that found the definitions current refuses from the statement after they stop
/// being so, and works again once they are; the worker idles meanwhile and resumes after.
/// (`extversion` is changed by hand here: only what the check reads changes.)
#[test]
fn the_version_check_follows_pg_extension_in_every_session() {
    let cluster = Cluster::shared();
    let mut changer = cluster.connect();
    let mut caller = cluster.connect();
    let metrics = |client: &mut Client| client.simple_query("SELECT jobs_metrics()").map(|_| ());
    metrics(&mut caller).expect("current definitions: the call works (and is cached)");

    // In the changing session itself, inside its transaction, and undone by the rollback.
    changer
        .batch_execute(
            "BEGIN; UPDATE pg_extension SET extversion = '0.1.0' WHERE extname = 'pg_jobs'",
        )
        .unwrap();
    let error = metrics(&mut changer).expect_err("refused within the transaction");
    assert_eq!(error.as_db_error().unwrap().code().code(), "55000");
    changer.batch_execute("ROLLBACK").unwrap();
    metrics(&mut changer).expect("works again after the rollback");
    metrics(&mut caller).expect("the other session never saw the change");

    // Committed: the other session refuses at its next call, and the worker idles.
    changer
        .batch_execute("UPDATE pg_extension SET extversion = '0.1.0' WHERE extname = 'pg_jobs'")
        .unwrap();
    let error = metrics(&mut caller).expect_err("refused after the commit");
    let db = error.as_db_error().unwrap();
    assert_eq!(db.code().code(), "55000");
    assert_eq!(
        db.message(),
        format!("cannot read the queues' metrics: the pg_jobs library is version {} but this database has the SQL definitions of version 0.1.0", pg_jobs_version())
    );
    wait_until(Duration::from_secs(30), "the worker to idle", || {
        cluster
            .log()
            .contains("the worker idles until ALTER EXTENSION pg_jobs UPDATE")
    });
    changer
        .batch_execute(&format!(
            "UPDATE pg_extension SET extversion = '{}' WHERE extname = 'pg_jobs'",
            pg_jobs_version()
        ))
        .unwrap();
    metrics(&mut caller).expect("works again at the next call");
    wait_until(Duration::from_secs(30), "the worker to serve again", || {
        cluster.log().contains(&format!(
            "the SQL definitions are now version {}; the worker serves the database",
            pg_jobs_version()
        ))
    });
}
