//! Waiting claims and the rest of the database: a sleeping claim holds no snapshot (so an idle
//! worker pool does not hold VACUUM back for every table), and a wake-up it cannot use reaches
//! a waiter that can (README "Waiting for work").

use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::{scalar, unique_queue, wait_until, Client, Cluster, NoTls, TEST_SETTINGS};

/// A cluster whose worker ticks only once an hour: a wake-up that is lost is not rescued by
/// the worker's backstop within these tests.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let mut settings: Vec<&str> = TEST_SETTINGS
            .iter()
            .copied()
            .filter(|s| !s.starts_with("pg_jobs.tick"))
            .collect();
        settings.push("pg_jobs.tick = '1h'");
        let cluster = Cluster::start("wait-snapshot", &settings);
        cluster
            .connect()
            .batch_execute("CREATE EXTENSION pg_jobs")
            .unwrap();
        cluster
    })
}

/// Serialises the tests of this file: a snapshot one of them holds on purpose (a claim in a
/// transaction block) holds VACUUM back for every database of the cluster.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Starts `count` sessions that each run `sql` (a waiting claim) once, tagged with
/// `application_name` so pg_stat_activity finds them; returns their threads.
fn start_waiters(
    cluster: &Cluster,
    count: usize,
    sql: &str,
    tag: &str,
) -> Vec<thread::JoinHandle<Vec<i64>>> {
    (0..count)
        .map(|_| {
            let dsn = format!("{} application_name={tag}", cluster.dsn("postgres"));
            let sql = sql.to_owned();
            thread::spawn(move || {
                let mut client = Client::connect(&dsn, NoTls).unwrap();
                client
                    .query(&sql, &[])
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
                    .iter()
                    .map(|row| row.get(0))
                    .collect()
            })
        })
        .collect()
}

/// Waits until `count` sessions tagged `tag` sleep in a waiting claim.
fn wait_for_sleepers(admin: &mut Client, tag: &str, count: i64) {
    wait_until(Duration::from_secs(20), "the claims to be waiting", || {
        scalar::<i64>(
            admin,
            "SELECT count(*) FROM pg_stat_activity
              WHERE application_name = $1 AND wait_event_type = 'Extension'",
            &[&tag],
        ) == count
    });
}

/// How many of the dead rows VACUUM (VERBOSE) of `table` reports as not yet removable.
fn dead_but_not_removable(admin: &mut Client, cluster: &Cluster, table: &str) -> i64 {
    let notices = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = notices.clone();
    let mut config: postgres::Config = cluster.dsn("postgres").parse().unwrap();
    // PostgreSQL 13 and 14 give the count in the DETAIL of a notice, later versions in a
    // message.
    config.notice_callback(move |notice| {
        let mut sink = sink.lock().unwrap();
        sink.push(notice.message().to_owned());
        sink.extend(notice.detail().map(str::to_owned));
    });
    let mut vacuum = config.connect(NoTls).unwrap();
    vacuum
        .batch_execute(&format!("VACUUM (VERBOSE) {table}"))
        .unwrap();
    let _ = admin;
    let report = notices.lock().unwrap().join("\n");
    let (at, marker) = [
        " are dead but not yet removable",
        " dead row versions cannot be removed yet",
    ]
    .into_iter()
    .find_map(|marker| Some((report.find(marker)?, marker)))
    .unwrap_or_else(|| panic!("VACUUM VERBOSE said nothing about dead rows:\n{report}"));
    let before = &report[..at];
    let number = before
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap_or_default();
    number
        .parse()
        .unwrap_or_else(|_| panic!("no count before {marker:?} in:\n{report}"))
}

#[test]
fn sixteen_waiting_claims_hold_back_no_vacuum() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "idle", "");
    admin
        .batch_execute(
            "CREATE TABLE busy (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = off);
             INSERT INTO busy SELECT g, 0 FROM generate_series(1, 2000) g;",
        )
        .unwrap();
    admin.batch_execute("VACUUM busy").unwrap();
    let waiters = start_waiters(
        cluster,
        16,
        &format!("SELECT id FROM jobs_claim('{queue}', wait => '60 seconds')"),
        "idle-waiter",
    );
    wait_for_sleepers(&mut admin, "idle-waiter", 16);
    let holding: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM pg_stat_activity
          WHERE application_name = 'idle-waiter' AND backend_xmin IS NOT NULL",
        &[],
    );
    assert_eq!(holding, 0, "sleeping claims advertise an xmin");

    // Another session makes 2,000 dead rows in an unrelated table while they sleep.
    admin.batch_execute("UPDATE busy SET v = v + 1").unwrap();
    let held_back = dead_but_not_removable(&mut admin, cluster, "busy");
    assert_eq!(
        held_back, 0,
        "16 waiting claims held back {held_back} dead rows"
    );

    // They still wake at once for work.
    for n in 0..16 {
        admin
            .execute(
                "SELECT jobs_enqueue($1, jsonb_build_object('n', $2::int))",
                &[&queue, &n],
            )
            .unwrap();
    }
    let got: usize = waiters.into_iter().map(|w| w.join().unwrap().len()).sum();
    assert_eq!(got, 16);
}

#[test]
fn only_a_lone_waiting_claim_lets_go_of_its_snapshot() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "forms", "");
    // The forms workers use, and forms that must keep their snapshot because something in the
    // statement (or the transaction) may still read with it after the claim returns.
    let forms = [
        (format!("SELECT * FROM jobs_claim('{queue}', wait => '30 seconds')"), true),
        (format!("SELECT id, payload ->> 'n' FROM jobs_claim('{queue}', n => 5, wait => '30 seconds') ORDER BY id LIMIT 2"), true),
        (format!("SELECT id, now() FROM jobs_claim('{queue}', wait => '30 seconds')"), false),
        (format!("SELECT c.id FROM jobs_claim('{queue}', wait => '30 seconds') c JOIN jobs.queue q ON q.name = c.queue"), false),
        (format!("BEGIN; SELECT id FROM jobs_claim('{queue}', wait => '30 seconds'); COMMIT"), false),
    ];
    for (i, (sql, releases)) in forms.iter().enumerate() {
        let tag = format!("form-{i}");
        let dsn = format!("{} application_name={tag}", cluster.dsn("postgres"));
        let sql_owned = sql.clone();
        let waiter = thread::spawn(move || {
            let mut client = Client::connect(&dsn, NoTls).unwrap();
            client.batch_execute(&sql_owned).unwrap();
        });
        wait_for_sleepers(&mut admin, &tag, 1);
        let xmin_null: bool = scalar(
            &mut admin,
            "SELECT backend_xmin IS NULL FROM pg_stat_activity WHERE application_name = $1",
            &[&tag],
        );
        assert_eq!(
            xmin_null, *releases,
            "{sql}: backend_xmin IS NULL should be {releases} while it sleeps"
        );
        admin
            .execute("SELECT jobs_enqueue($1, '{\"n\": 1}')", &[&queue])
            .unwrap();
        waiter.join().unwrap();
    }
}

#[test]
fn a_wake_up_a_waiter_cannot_use_reaches_one_that_can() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "kinds", "");
    // The filtered waiter sleeps first, so the one signal a commit sends goes to it.
    let filtered = start_waiters(
        cluster,
        1,
        &format!("SELECT id FROM jobs_claim('{queue}', kinds => ARRAY['x'], wait => '30 seconds')"),
        "kinds-x",
    );
    wait_for_sleepers(&mut admin, "kinds-x", 1);
    let started = Instant::now();
    let any = start_waiters(
        cluster,
        1,
        &format!("SELECT id FROM jobs_claim('{queue}', wait => '30 seconds')"),
        "kinds-any",
    );
    wait_for_sleepers(&mut admin, "kinds-any", 1);
    let job: i64 = scalar(
        &mut admin,
        "SELECT jobs_enqueue($1, '{}', kind => 'y')",
        &[&queue],
    );
    let got = any.into_iter().next().unwrap().join().unwrap();
    assert_eq!(got, [job], "the waiter that can take the job must get it");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the job reached the waiter only when its wait ran out"
    );
    let x: i64 = scalar(
        &mut admin,
        "SELECT jobs_enqueue($1, '{}', kind => 'x')",
        &[&queue],
    );
    assert_eq!(filtered.into_iter().next().unwrap().join().unwrap(), [x]);
}
