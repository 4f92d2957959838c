//! Waiting claims and the rest of the database: a sleeping claim holds no snapshot (so an idle
//! worker pool does not hold VACUUM back for every table), and a wake-up it cannot use reaches
//! a waiter that can (README "Waiting for work").

use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::{enqueue, scalar, settings_with, wait_until, Client, Cluster, NoTls};
use serde_json::json;

/// A cluster whose worker ticks only once an hour: a wake-up that is lost is not rescued by
/// the worker's backstop within these tests.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let settings = settings_with(&["pg_jobs.tick = '1h'"]);
        Cluster::start_with_extension("wait-snapshot", &settings)
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
    let (mut admin, queue) = cluster.connect_with_queue("idle", "");
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
        enqueue(&mut admin, &queue, json!({ "n": n }));
    }
    let got: usize = waiters.into_iter().map(|w| w.join().unwrap().len()).sum();
    assert_eq!(got, 16);
}

#[test]
fn a_waiting_claim_lets_go_of_its_snapshot_unless_something_may_read_with_it() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let (mut admin, queue) = cluster.connect_with_queue("forms", "");
    admin
        .batch_execute(
            "CREATE OR REPLACE FUNCTION public.stable_reader(bigint) RETURNS bigint
               LANGUAGE sql STABLE AS 'SELECT count(*) FROM jobs.queue WHERE $1 > 0';
             CREATE OR REPLACE FUNCTION public.volatile_reader(bigint) RETURNS bigint
               LANGUAGE plpgsql VOLATILE AS 'BEGIN RETURN (SELECT count(*) FROM jobs.queue); END';
             CREATE TABLE IF NOT EXISTS public.written (n int);",
        )
        .unwrap();
    // The forms people use (the client libraries' select lists, a READ COMMITTED transaction
    // block as psycopg opens, an aggregate over the claim), and forms that must keep their
    // snapshot because something may still read with it after the claim returns: a join, a
    // subquery, a user's STABLE function (which reads with the statement's snapshot), an open
    // cursor, a transaction that has written.
    let claim = format!("jobs_claim('{queue}', wait => '30 seconds')");
    let forms = [
        (format!("SELECT * FROM {claim}"), true),
        (format!("SELECT id, payload ->> 'n' FROM jobs_claim('{queue}', n => 5, wait => '30 seconds') ORDER BY id LIMIT 2"), true),
        (format!("SELECT id, now() FROM {claim}"), true),
        (format!("SELECT c.*, (extract(epoch FROM c.lease_until - clock_timestamp()) * 1000)::float8 AS lease_ms FROM {claim} AS c"), true),
        (format!("SELECT count(*) FROM {claim}"), true),
        (format!("SELECT id, public.volatile_reader(id) FROM {claim}"), true),
        (format!("BEGIN; SELECT id FROM {claim}; COMMIT"), true),
        (format!("BEGIN; SELECT 1; SELECT * FROM {claim}; COMMIT"), true),
        (format!("SELECT c.id FROM {claim} c JOIN jobs.queue q ON q.name = c.queue"), false),
        (format!("SELECT id, (SELECT count(*) FROM jobs.queue) FROM {claim}"), false),
        (format!("SELECT id, public.stable_reader(id) FROM {claim}"), false),
        (format!("SELECT id, query_to_xml('SELECT 1', true, false, '') FROM {claim}"), false),
        (format!("BEGIN; DECLARE open_cursor CURSOR FOR SELECT * FROM jobs.queue; SELECT id FROM {claim}; COMMIT"), false),
        (format!("BEGIN; INSERT INTO public.written VALUES (1); SELECT id FROM {claim}; COMMIT"), false),
    ];
    // A server built without libxml (the tested 13.4 build) has no query_to_xml.
    let has_xml = admin
        .batch_execute("SELECT query_to_xml('SELECT 1', true, false, '')")
        .is_ok();
    let forms = forms
        .into_iter()
        .filter(|(sql, _)| has_xml || !sql.contains("query_to_xml"));
    for (i, (sql, releases)) in forms.enumerate() {
        let tag = format!("form-{i}");
        let dsn = format!("{} application_name={tag}", cluster.dsn("postgres"));
        let sql_owned = sql.clone();
        let waiter = thread::spawn(move || {
            let mut client = Client::connect(&dsn, NoTls).unwrap();
            client.batch_execute(&sql_owned).unwrap();
        });
        wait_for_sleepers(&mut admin, &tag, 1);
        // Holding back nothing means neither an xmin nor an xid (which holds VACUUM back as
        // surely).
        let holds_nothing: bool = scalar(
            &mut admin,
            "SELECT backend_xmin IS NULL AND backend_xid IS NULL
               FROM pg_stat_activity WHERE application_name = $1",
            &[&tag],
        );
        assert_eq!(
            holds_nothing, releases,
            "{sql}: backend_xmin and backend_xid NULL should be {releases} while it sleeps"
        );
        admin
            .execute("SELECT jobs_enqueue($1, '{\"n\": 1}')", &[&queue])
            .unwrap();
        waiter.join().unwrap();
    }
}

/// The snapshot a claim lets go of is never read again: the statement's rows, the select list
/// evaluated after the wait and the rest of the transaction see what was committed, while
/// VACUUM removes what the old snapshot alone could have seen.
#[test]
fn what_reads_after_a_released_wait_sees_committed_rows() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let (mut admin, queue) = cluster.connect_with_queue("after-wait", "");
    admin
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS public.churn (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = off);
             TRUNCATE public.churn;
             INSERT INTO public.churn SELECT g, 0 FROM generate_series(1, 500) g;
             CREATE OR REPLACE FUNCTION public.churn_sum() RETURNS bigint
               LANGUAGE plpgsql VOLATILE AS 'BEGIN RETURN (SELECT sum(v) FROM public.churn); END';",
        )
        .unwrap();
    let dsn = format!("{} application_name=after-wait", cluster.dsn("postgres"));
    let sql = format!(
        "SELECT id, public.churn_sum() AS total FROM jobs_claim('{queue}', wait => '30 seconds')"
    );
    let waiter = thread::spawn(move || {
        let mut client = Client::connect(&dsn, NoTls).unwrap();
        client.batch_execute("BEGIN").unwrap();
        let row = client.query_one(&sql, &[]).unwrap();
        let total: i64 = row.get("total");
        let after: i64 = scalar(&mut client, "SELECT sum(v)::bigint FROM public.churn", &[]);
        client.batch_execute("COMMIT").unwrap();
        (total, after)
    });
    wait_for_sleepers(&mut admin, "after-wait", 1);
    admin
        .batch_execute("UPDATE public.churn SET v = 1")
        .unwrap();
    assert_eq!(
        dead_but_not_removable(&mut admin, cluster, "public.churn"),
        0
    );
    admin
        .batch_execute("UPDATE public.churn SET v = 2")
        .unwrap();
    admin
        .execute("SELECT jobs_enqueue($1, '{}')", &[&queue])
        .unwrap();
    let (total, after) = waiter.join().unwrap();
    assert_eq!(
        total, 1000,
        "the select list read with a snapshot from after the wait"
    );
    assert_eq!(
        after, 1000,
        "the transaction's next statement reads what was committed"
    );
}

#[test]
fn a_wake_up_a_waiter_cannot_use_reaches_one_that_can() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let (mut admin, queue) = cluster.connect_with_queue("kinds", "");
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
