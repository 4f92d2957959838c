//! The background worker against real servers: it reclaims the lease of a claimer whose session
//! died, reclaims within a tick of expiry, comes back after SIGKILL and SIGTERM, survives a failing tick, is not
//! captured by a database's hostile search path, starts serving a
//! database whose extension is created after start-up, waits quietly for a database that does
//! not exist and leaves one that is dropped, is started by a launcher that comes back alone,
//! holds no snapshot for long and reclaims a bounded number of jobs a tick among dead index
//! entries, checks many queues' floors in few transactions, purges only finished jobs past their queue's retention, and without the preload
//! everything but the worker still works.
//!
//! Tests that kill processes, lock the job table or need other server settings run on a
//! private cluster of their own, so the other tests of this binary (on [`Cluster::shared`])
//! are not disturbed. Nothing here calls `jobs_reclaim()` except the test without the preload,
//! so on the shared cluster every reclaim is the worker's.

use std::thread;
use std::time::{Duration, Instant, SystemTime};

use pg_jobs_tests::{
    claim, claim_ids, column, complete, enqueue, row, scalar, settings_with, settings_without,
    state, unique_queue, wait_until, Claimed, Client, Cluster, NoTls, TEST_SETTINGS,
};
use serde_json::json;

/// The key of a `postgresql.conf` line (`"pg_jobs.tick = '100ms'"` → `"pg_jobs.tick"`).
/// A private cluster with `settings` and the extension created in database `postgres`.
fn private_cluster(name: &str, settings: &[&str]) -> (Cluster, Client) {
    let cluster = Cluster::start_with_extension(name, settings);
    let client = cluster.connect();
    (cluster, client)
}

/// One row of `jobs_worker_status()`.
#[derive(Debug, Clone)]
struct WorkerStatus {
    pid: Option<i32>,
    started_at: Option<SystemTime>,
    last_tick: Option<SystemTime>,
    serving: bool,
    ticks: i64,
    reclaimed: i64,
    purged: i64,
    last_error: Option<String>,
    last_error_at: Option<SystemTime>,
}

/// The worker status row of `database`, if there is one.
fn worker_status(client: &mut Client, database: &str) -> Option<WorkerStatus> {
    client
        .query_opt(
            "SELECT pid, started_at, last_tick, serving, ticks, reclaimed, purged, last_error,
                    last_error_at
               FROM jobs_worker_status() WHERE database = $1",
            &[&database],
        )
        .expect("jobs_worker_status()")
        .map(|row| WorkerStatus {
            pid: row.get(0),
            started_at: row.get(1),
            last_tick: row.get(2),
            serving: row.get(3),
            ticks: row.get(4),
            reclaimed: row.get(5),
            purged: row.get(6),
            last_error: row.get(7),
            last_error_at: row.get(8),
        })
}

/// Polls `jobs_worker_status()` until the row of `database` satisfies `condition` (30 s at
/// most) and returns it.
fn wait_for_worker(
    client: &mut Client,
    database: &str,
    what: &str,
    condition: impl Fn(&WorkerStatus) -> bool,
) -> WorkerStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = worker_status(client, database);
        if let Some(status) = status.as_ref().filter(|s| condition(s)) {
            return status.clone();
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the worker of {database}: {what}; last status {status:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the worker of `database` has ticked with the extension present.
fn wait_for_serving_worker(client: &mut Client, database: &str) -> WorkerStatus {
    wait_for_worker(client, database, "serving, with a pid", |s| {
        s.serving && s.pid.is_some() && s.ticks > 0
    })
}

/// The pids of `pg_jobs worker` backends connected to `database`, from pg_stat_activity.
fn worker_backends(client: &mut Client, database: &str) -> Vec<i32> {
    column(
        client,
        "SELECT pid FROM pg_stat_activity
              WHERE backend_type = 'pg_jobs worker' AND datname = $1",
        &[&database],
    )
}

/// The pids of `pg_jobs launcher` backends, from pg_stat_activity.
fn launcher_backends(client: &mut Client) -> Vec<i32> {
    column(
        client,
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_jobs launcher'",
        &[],
    )
}

/// The `error` of the job's latest errors entry.
fn last_error(client: &mut Client, id: i64) -> Option<String> {
    scalar(
        client,
        "SELECT errors->-1->>'error' FROM jobs.job WHERE id = $1",
        &[&id],
    )
}

/// Claims a fresh job under a 1-second lease and lets the lease run out without calling
/// `jobs_reclaim()`; asserts the worker puts the job back and returns how long that took
/// from the claim.
fn assert_worker_reclaims(client: &mut Client, prefix: &str) -> Duration {
    let queue = unique_queue(client, prefix, "lease => '1 second'");
    let id = enqueue(client, &queue, json!({"reclaim": prefix}));
    let claimed = claim(client, &queue, 1, "");
    let started = Instant::now();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, id);
    wait_until(
        Duration::from_secs(10),
        "the worker to reclaim the expired lease",
        || state(client, id) == "queued",
    );
    let took = started.elapsed();
    assert_eq!(last_error(client, id).as_deref(), Some("lease expired"));
    let attempt: i32 = scalar(client, "SELECT attempt FROM jobs.job WHERE id = $1", &[&id]);
    assert_eq!(attempt, 1, "a reclaimed attempt stays spent");
    took
}

/// A claimer's session is terminated while it holds two jobs under a 1-second lease: the
/// worker, with nobody calling `jobs_reclaim()`, queues the one with attempts left again
/// (attempt spent, `lease expired` recorded) and fails the one on its final attempt.
#[test]
fn lease_of_a_terminated_claimer_is_reclaimed_by_the_worker() {
    let cluster = Cluster::shared();
    let (mut admin, queue) = cluster.connect_with_queue("terminated", "lease => '1 second'");
    let retried = enqueue(&mut admin, &queue, json!({"attempts": "five"}));
    let final_attempt: i64 = scalar(
        &mut admin,
        "SELECT jobs_enqueue($1, '{\"attempts\": \"one\"}', max_attempts => 1)",
        &[&queue],
    );
    let reclaimed_before = worker_status(&mut admin, "postgres").map_or(0, |s| s.reclaimed);

    let mut claimer = cluster.connect();
    let pid: i32 = scalar(&mut claimer, "SELECT pg_backend_pid()", &[]);
    let mut held: Vec<i64> = claim_ids(&mut claimer, &queue, 2);
    let claimed_at = Instant::now();
    held.sort_unstable();
    assert_eq!(held, [retried, final_attempt]);
    let lease_until: SystemTime = scalar(
        &mut admin,
        "SELECT lease_until FROM jobs.job WHERE id = $1",
        &[&retried],
    );

    let terminated: bool = scalar(&mut admin, "SELECT pg_terminate_backend($1)", &[&pid]);
    assert!(terminated);
    wait_until(
        Duration::from_secs(10),
        "the claimer's backend to exit",
        || {
            let alive: bool = scalar(
                &mut admin,
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)",
                &[&pid],
            );
            !alive
        },
    );
    assert!(claimer.simple_query("SELECT 1").is_err());

    wait_until(
        Duration::from_secs(10),
        "the worker to reclaim both leases",
        || state(&mut admin, retried) != "running" && state(&mut admin, final_attempt) != "running",
    );
    let since_claim = claimed_at.elapsed();

    // Attempts left: queued again, the attempt spent, the expiry recorded.
    let row = admin
        .query_one(
            "SELECT state::text, attempt, lease_until, jsonb_array_length(errors),
                    (errors->-1->>'at')::timestamptz
               FROM jobs.job WHERE id = $1",
            &[&retried],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "queued");
    assert_eq!(row.get::<_, i32>(1), 1);
    assert_eq!(row.get::<_, Option<SystemTime>>(2), None);
    assert_eq!(row.get::<_, i32>(3), 1);
    assert_eq!(
        last_error(&mut admin, retried).as_deref(),
        Some("lease expired")
    );
    let reclaimed_at: SystemTime = row.get(4);
    let lag = reclaimed_at
        .duration_since(lease_until)
        .expect("reclaimed after the lease ran out");

    // The final attempt: failed for good.
    let row = admin
        .query_one(
            "SELECT state::text, attempt, finished_at IS NOT NULL FROM jobs.job WHERE id = $1",
            &[&final_attempt],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "failed");
    assert_eq!(row.get::<_, i32>(1), 1);
    assert!(row.get::<_, bool>(2));
    assert_eq!(
        last_error(&mut admin, final_attempt).as_deref(),
        Some("lease expired on the final attempt")
    );

    let reclaimed_after = worker_status(&mut admin, "postgres").map_or(0, |s| s.reclaimed);
    assert!(
        reclaimed_after >= reclaimed_before + 2,
        "the worker counted its reclaims: {reclaimed_before} → {reclaimed_after}"
    );
    // The queued one is claimable again, on its second attempt.
    let again = claim(&mut admin, &queue, 2, "");
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].attempt), (retried, 2));

    println!(
        "reclaim after backend termination: {since_claim:?} from claim to both jobs settled \
         (lease 1 s, tick 100 ms); server-side lease_until → reclaim: {lag:?}"
    );
}

/// Rule 5: the worker reclaims an expired lease within one tick of its expiry, not merely some
/// time after it. Eight jobs are claimed one after another with leases of different lengths,
/// so they run out at different points of the worker's tick. The test counts ticks, not time:
/// its tick counter grows when a tick ends, so once a job's lease has run out at counter `E`,
/// the tick running then ends at `E + 1` and the next one, begun after the expiry, has
/// reclaimed it by `E + 2`. A job seen still running at `E + 2` fails the test, however slowly
/// the machine runs; a worker that reclaimed only every few ticks fails here.
#[test]
fn the_worker_reclaims_within_one_tick_of_expiry() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("within-a-tick", "");
    let mut held: Vec<(i64, i64)> = Vec::new();
    for k in 0..8 {
        let id = enqueue(&mut client, &queue, json!({ "k": k }));
        let lease_ms = 150 + 37 * k;
        let claimed = claim(
            &mut client,
            &queue,
            1,
            &format!(", lease => '{lease_ms} milliseconds'"),
        );
        assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [id]);
        let until: i64 = scalar(
            &mut client,
            "SELECT (extract(epoch FROM lease_until) * 1000000)::int8 FROM jobs.job WHERE id = $1",
            &[&id],
        );
        held.push((id, until));
    }
    let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
    // The tick counter at which each job's lease was first seen run out.
    let mut expired_at: Vec<Option<i64>> = vec![None; held.len()];
    let mut ticks_to_reclaim: Vec<Option<i64>> = vec![None; held.len()];
    let deadline = Instant::now() + Duration::from_secs(30);
    while ticks_to_reclaim.iter().any(Option::is_none) {
        assert!(
            Instant::now() < deadline,
            "the worker reclaimed no lease in 30 s"
        );
        // Three statements in this order: the clock before the counter, so a lease seen run
        // out ran out by that count; the counter before the states, so a job seen running was
        // running at that count.
        let now: i64 = scalar(
            &mut client,
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8",
            &[],
        );
        let ticks: i64 = scalar(
            &mut client,
            "SELECT ticks FROM jobs_worker_status() WHERE database = current_database()",
            &[],
        );
        let running: Vec<i64> = column(
            &mut client,
            "SELECT id FROM jobs.job WHERE id = ANY ($1) AND state = 'running'",
            &[&ids],
        );
        for (k, &(id, until)) in held.iter().enumerate() {
            if expired_at[k].is_none() && now >= until {
                expired_at[k] = Some(ticks);
            }
            let Some(expired) = expired_at[k] else {
                continue;
            };
            if running.contains(&id) {
                assert!(
                    ticks < expired + 2,
                    "job {id} is still running at tick {ticks}, although its lease ran out by \
                     tick {expired} and a whole tick has run since"
                );
            } else if ticks_to_reclaim[k].is_none() {
                ticks_to_reclaim[k] = Some(ticks - expired);
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
    for &(id, until) in &held {
        let (error, at): (String, i64) = row(&mut client, "SELECT errors -> -1 ->> 'error',
                            (extract(epoch FROM (errors -> -1 ->> 'at')::timestamptz) * 1000000)::int8
                       FROM jobs.job WHERE id = $1",
                    &[&id]);
        assert_eq!(error, "lease expired", "job {id} was reclaimed");
        assert!(
            at > until,
            "job {id} was reclaimed {}µs before its lease ran out",
            until - at
        );
    }
    println!("ticks from a lease's expiry to its reclaim being seen: {ticks_to_reclaim:?}");
}

/// The worker that came back as `new_pid` (after `signal` ended `old_pid`) is the database's
/// only worker backend and reclaims an expired lease, counting it in its status.
fn reclaims_after_coming_back(client: &mut Client, signal: &str, old_pid: i32, new_pid: i32) {
    assert_eq!(worker_backends(client, "postgres"), [new_pid]);
    let took = assert_worker_reclaims(client, &format!("after-{}", signal.to_lowercase()));
    // The worker counts a tick's reclaims once the tick's last step is done, after the
    // reclaim's own transaction committed.
    let status = wait_for_worker(client, "postgres", "its reclaim counted", |s| {
        s.reclaimed >= 1
    });
    assert_eq!(status.pid, Some(new_pid));
    println!("after {signal}: worker {old_pid} → {new_pid}; reclaim took {took:?} from claim");
}

/// SIGKILL of the worker crash-restarts the server; the worker comes back with a new pid and
/// reclaims expired leases again.
#[test]
fn worker_killed_with_sigkill_comes_back_and_reclaims() {
    // Commits must survive the crash-restart: WAL buffers in shared memory are lost with it.
    let settings = settings_with(&["synchronous_commit = on"]);
    let (cluster, mut client) = private_cluster("worker-sigkill", &settings);
    let before = wait_for_serving_worker(&mut client, "postgres");
    let old_pid = before.pid.unwrap();
    assert_eq!(worker_backends(&mut client, "postgres"), [old_pid]);

    // SAFETY: sends a signal to a process of the cluster we started.
    assert_eq!(unsafe { libc::kill(old_pid, libc::SIGKILL) }, 0);
    // The postmaster ends every backend, ours too, and starts over.
    wait_until(
        Duration::from_secs(30),
        "the crash restart to drop our connection",
        || client.simple_query("SELECT 1").is_err(),
    );
    let mut client = cluster.connect();
    let after = wait_for_worker(&mut client, "postgres", "back with a new pid", |s| {
        s.pid.is_some_and(|pid| pid != old_pid) && s.serving && s.ticks > 0
    });
    let new_pid = after.pid.unwrap();
    reclaims_after_coming_back(&mut client, "SIGKILL", old_pid, new_pid);
}

/// SIGTERM (`pg_terminate_backend`) ends the worker alone; the postmaster starts it again
/// and it reclaims expired leases. Client sessions are not disturbed.
#[test]
fn worker_terminated_with_sigterm_comes_back_and_reclaims() {
    let (_cluster, mut client) = private_cluster("worker-sigterm", TEST_SETTINGS);
    let before = wait_for_serving_worker(&mut client, "postgres");
    let old_pid = before.pid.unwrap();
    assert_eq!(worker_backends(&mut client, "postgres"), [old_pid]);

    let terminated: bool = scalar(&mut client, "SELECT pg_terminate_backend($1)", &[&old_pid]);
    assert!(terminated);
    let after = wait_for_worker(&mut client, "postgres", "back with a new pid", |s| {
        s.pid.is_some_and(|pid| pid != old_pid) && s.serving && s.ticks > 0
    });
    let new_pid = after.pid.unwrap();
    assert!(
        after.started_at > before.started_at,
        "{before:?} / {after:?}"
    );
    reclaims_after_coming_back(&mut client, "SIGTERM", old_pid, new_pid);
}

/// The worker connects with its database's settings, so `ALTER DATABASE ... SET search_path`
/// reaches it, and it runs none of the functions' own `SET search_path`: its statements must
/// pin the search path themselves. A database whose search path puts a user's schema ahead of
/// pg_catalog, with an `=` on (text, text) there that is never true and a `now()` in the year
/// 2000, changes nothing: the worker still reclaims an expired lease and enqueues a
/// schedule's slots at the right time.
#[test]
fn a_hostile_database_search_path_changes_nothing_the_worker_does() {
    let (cluster, mut client) = private_cluster("worker-search-path", TEST_SETTINGS);
    // This session connected before the setting, so its own statements are not captured.
    client
        .batch_execute(
            "CREATE SCHEMA hostile;
             CREATE FUNCTION hostile.never(text, text) RETURNS boolean
                 LANGUAGE sql AS 'SELECT false';
             CREATE OPERATOR hostile.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.never);
             CREATE FUNCTION hostile.now() RETURNS timestamptz
                 LANGUAGE sql AS $$ SELECT '2000-01-01 00:00:00+00'::timestamptz $$;
             ALTER DATABASE postgres SET search_path = hostile, public, pg_catalog;",
        )
        .unwrap();
    // A worker started from now on connects with the hostile search path.
    let old_pid = wait_for_serving_worker(&mut client, "postgres")
        .pid
        .unwrap();
    let terminated: bool = scalar(&mut client, "SELECT pg_terminate_backend($1)", &[&old_pid]);
    assert!(terminated);
    wait_for_worker(&mut client, "postgres", "back with a new pid", |s| {
        s.pid.is_some_and(|pid| pid != old_pid) && s.serving && s.ticks > 0
    });
    let seen_by_new_sessions: String = scalar(
        &mut cluster.connect(),
        "SELECT current_setting('search_path')",
        &[],
    );
    assert_eq!(seen_by_new_sessions, "hostile, public, pg_catalog");

    assert_worker_reclaims(&mut client, "hostile-path");

    let queue = unique_queue(&mut client, "hostile-schedule", "");
    client
        .execute(
            "SELECT jobs_schedule('hostile-every-second', '1 seconds', $1)",
            &[&queue],
        )
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        "the worker to enqueue a slot of the schedule",
        || {
            scalar::<i64>(
                &mut client,
                "SELECT count(*) FROM jobs.job WHERE queue = $1",
                &[&queue],
            ) > 0
        },
    );
    let (slot_header, run_at_ok): (String, bool) = row(
        &mut client,
        "SELECT headers ->> 'pg_jobs.schedule', run_at > now() - interval '1 minute'
                   FROM jobs.job WHERE queue = $1 ORDER BY id LIMIT 1",
        &[&queue],
    );
    assert_eq!(slot_header, "hostile-every-second");
    assert!(run_at_ok, "the slot's job was timed by a user's now()");
}

/// A session holds `jobs.job` in ACCESS EXCLUSIVE mode longer than the tick's 1 s lock
/// timeout: the tick fails, the failure shows in `jobs_worker_status()`, the worker keeps its
/// pid, and once the lock is gone it ticks again and reclaims the lease that ran out meanwhile.
#[test]
fn a_failing_tick_does_not_kill_the_worker() {
    let (cluster, mut client) = private_cluster("worker-tick-error", TEST_SETTINGS);
    let before = wait_for_serving_worker(&mut client, "postgres");
    let queue = unique_queue(&mut client, "tick-error", "lease => '1 second'");
    let id = enqueue(&mut client, &queue, json!({}));
    assert_eq!(claim(&mut client, &queue, 1, "").len(), 1);

    let mut locker = cluster.connect();
    locker
        .batch_execute("BEGIN; LOCK TABLE jobs.job IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let locked_at: SystemTime = scalar(&mut locker, "SELECT now()", &[]);
    thread::sleep(Duration::from_millis(2500));

    // jobs_worker_status() reads shared memory only, so it does not queue behind the lock.
    let during = worker_status(&mut client, "postgres").unwrap();
    assert_eq!(during.pid, before.pid, "the worker kept its pid");
    let error = during.last_error.clone().unwrap_or_default();
    assert!(error.contains("lock timeout"), "last_error: {during:?}");
    assert!(
        during.last_error_at.is_some_and(|at| at >= locked_at),
        "last_error_at after the lock was taken: {during:?}"
    );
    assert_eq!(
        worker_backends(&mut client, "postgres"),
        [before.pid.unwrap()],
        "one worker, the same process"
    );
    locker.batch_execute("COMMIT").unwrap();

    wait_until(
        Duration::from_secs(10),
        "the worker to reclaim after the lock is gone",
        || state(&mut client, id) == "queued",
    );
    assert_eq!(
        last_error(&mut client, id).as_deref(),
        Some("lease expired")
    );
    let after = wait_for_worker(
        &mut client,
        "postgres",
        "a successful tick, its reclaim counted",
        |s| s.ticks > during.ticks && s.last_tick > s.last_error_at && s.reclaimed >= 1,
    );
    assert_eq!(after.pid, before.pid);
    println!(
        "failing tick recorded: {error:?}; worker pid {:?} kept",
        after.pid
    );
}

/// A database named in `pg_jobs.databases` that is created, and gets the extension, after
/// the server started: the worker skips it quietly while the extension is missing, then
/// serves it.
#[test]
fn worker_serves_a_database_whose_extension_is_created_later() {
    let settings = settings_with(&["pg_jobs.databases = 'postgres, late'"]);
    let (cluster, mut postgres) = private_cluster("worker-late", &settings);
    postgres.batch_execute("CREATE DATABASE late").unwrap();
    let mut late = cluster.connect_to("late");

    // Status is in shared memory: read it from `postgres`, where the function exists.
    let skipping = wait_for_worker(&mut postgres, "late", "connected, not serving", |s| {
        s.pid.is_some() && s.ticks > 0
    });
    assert!(!skipping.serving, "{skipping:?}");
    let pid = skipping.pid.unwrap();
    assert_eq!(worker_backends(&mut postgres, "late"), [pid]);
    assert!(worker_status(&mut postgres, "postgres").is_some());

    late.batch_execute("CREATE EXTENSION pg_jobs").unwrap();
    let took = assert_worker_reclaims(&mut late, "late");
    // The worker counts a tick's reclaims once the tick's last step is done.
    let status = wait_for_worker(&mut late, "late", "serving, its reclaim counted", |s| {
        s.serving && s.reclaimed >= 1
    });
    assert_eq!(
        status.pid,
        Some(pid),
        "the same worker, no restart needed; the server log:\n{}",
        cluster.log()
    );
    assert!(status.reclaimed >= 1, "{status:?}");
    println!("late database: reclaim took {took:?} from claim");
}

/// What `jobs_worker_status()` shows for a database of `pg_jobs.databases` that does not exist.
fn missing_note(database: &str) -> String {
    format!(
        "database {database} does not exist; the worker starts serving it once it is created (CREATE DATABASE {database}, then CREATE EXTENSION pg_jobs in it)"
    )
}

/// Waits for `ticks` more ticks of the worker of `database` (100 ms each).
fn wait_ticks(client: &mut Client, database: &str, ticks: i64) {
    let now = worker_status(client, database).map_or(0, |s| s.ticks);
    wait_for_worker(client, database, "more ticks", |s| s.ticks >= now + ticks);
}

/// The FATAL lines of a server log but PostgreSQL's own ending of autovacuum workers (which
/// `CREATE DATABASE ... TEMPLATE` does on 13 to copy a database they are in).
fn pg_jobs_fatals(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains("FATAL"))
        .filter(|line| {
            !line.contains("terminating autovacuum process due to administrator command")
        })
        .collect()
}

/// A database that `pg_jobs.databases` names but that does not exist yet is waited for
/// quietly: no worker process, no FATAL (a worker connecting to it failed and was started again
/// every second, for ever), one line in the log, and `jobs_worker_status()` says why. Once it is
/// created it is served. `DROP DATABASE` of it then succeeds while it is served (its worker
/// leaves; a session connected to the database would make the drop fail after five seconds
/// with "database is being accessed by other users"), and it is waited for again, said once
/// more; created again, it is served again. `CREATE DATABASE ... TEMPLATE` of a served
/// database works too (it waits for the template's other sessions to leave, like the drop).
#[test]
fn a_missing_database_is_waited_for_and_a_served_one_can_be_dropped() {
    let settings = settings_with(&[
        "pg_jobs.databases = 'postgres, later'",
        "log_min_messages = log",
    ]);
    let (cluster, mut postgres) = private_cluster("worker-missing-database", &settings);
    wait_for_serving_worker(&mut postgres, "postgres");
    // Two seconds of launcher looks (every tick, 100 ms) while it does not exist.
    wait_ticks(&mut postgres, "postgres", 20);
    let waiting = worker_status(&mut postgres, "later").expect("a row for database later");
    assert_eq!(waiting.pid, None, "{waiting:?}");
    assert!(!waiting.serving);
    assert_eq!(waiting.last_error, Some(missing_note("later")));
    assert!(worker_backends(&mut postgres, "later").is_empty());
    let said_missing = "pg_jobs launcher: database later named in pg_jobs.databases does not exist";
    // This cluster logs LOG lines (log_min_messages = log), so the launcher's note is there
    // on every major; the FATALs of a worker that cannot connect would be too.
    let log = cluster.log();
    assert!(pg_jobs_fatals(&log).is_empty(), "{log}");
    assert_eq!(log.matches(said_missing).count(), 1, "{log}");

    postgres.batch_execute("CREATE DATABASE later").unwrap();
    let mut later = cluster.connect_to("later");
    later.batch_execute("CREATE EXTENSION pg_jobs").unwrap();
    assert_worker_reclaims(&mut later, "later");
    let served = wait_for_serving_worker(&mut postgres, "later");
    assert_eq!(served.last_error, None, "{served:?}");
    drop(later);

    postgres.batch_execute("DROP DATABASE later").unwrap();
    let dropped = wait_for_worker(&mut postgres, "later", "waiting again", |s| {
        s.pid.is_none() && s.last_error == Some(missing_note("later"))
    });
    assert!(!dropped.serving, "{dropped:?}");
    wait_ticks(&mut postgres, "postgres", 10);
    assert!(worker_backends(&mut postgres, "later").is_empty());
    let log = cluster.log();
    assert!(pg_jobs_fatals(&log).is_empty(), "{log}");
    assert_eq!(log.matches(said_missing).count(), 2, "{log}");

    postgres.batch_execute("CREATE DATABASE later").unwrap();
    cluster
        .connect_to("later")
        .batch_execute("CREATE EXTENSION pg_jobs")
        .unwrap();
    wait_for_serving_worker(&mut postgres, "later");

    // A copy of a served database: its worker leaves for the copy and comes back.
    let before = wait_for_serving_worker(&mut postgres, "postgres");
    postgres
        .batch_execute("CREATE DATABASE copied TEMPLATE postgres")
        .unwrap();
    let after = wait_for_worker(&mut postgres, "postgres", "back after the copy", |s| {
        s.pid.is_some_and(|pid| Some(pid) != before.pid) && s.serving && s.ticks > 0
    });
    assert_eq!(
        worker_backends(&mut postgres, "postgres"),
        [after.pid.unwrap()]
    );
    let log = cluster.log();
    assert!(pg_jobs_fatals(&log).is_empty(), "{log}");
}

/// `pg_terminate_backend` of the launcher: the postmaster starts it again after a second; the
/// workers it started keep serving, and the new launcher starts no second worker beside them.
/// A worker terminated after that is started again by the new launcher.
#[test]
fn a_terminated_launcher_comes_back_and_starts_no_second_worker() {
    let settings = settings_with(&["pg_jobs.databases = 'postgres, second'"]);
    let (_cluster, mut client) = private_cluster("worker-launcher", &settings);
    client.batch_execute("CREATE DATABASE second").unwrap();
    let worker = wait_for_serving_worker(&mut client, "postgres")
        .pid
        .unwrap();
    let second = wait_for_worker(&mut client, "second", "connected", |s| {
        s.pid.is_some() && s.ticks > 0
    })
    .pid
    .unwrap();
    let launchers = launcher_backends(&mut client);
    assert_eq!(launchers.len(), 1, "one launcher: {launchers:?}");

    let terminated: bool = scalar(
        &mut client,
        "SELECT pg_terminate_backend($1)",
        &[&launchers[0]],
    );
    assert!(terminated);
    wait_until(Duration::from_secs(30), "a new launcher", || {
        let now = launcher_backends(&mut client);
        now.len() == 1 && now[0] != launchers[0]
    });
    // Some ticks of the new launcher (it looks every tick, 100 ms).
    wait_ticks(&mut client, "postgres", 10);
    assert_eq!(worker_backends(&mut client, "postgres"), [worker]);
    assert_eq!(worker_backends(&mut client, "second"), [second]);

    // The new launcher did not start these workers; it starts their successors all the same.
    let terminated: bool = scalar(&mut client, "SELECT pg_terminate_backend($1)", &[&worker]);
    assert!(terminated);
    let after = wait_for_worker(&mut client, "postgres", "back with a new pid", |s| {
        s.pid.is_some_and(|pid| pid != worker) && s.serving && s.ticks > 0
    });
    assert_eq!(
        worker_backends(&mut client, "postgres"),
        [after.pid.unwrap()]
    );
    assert_eq!(worker_backends(&mut client, "second"), [second]);
}

/// Jobs the bloat of [`the_worker_holds_no_snapshot_for_long_on_a_bloated_table`] claims and
/// completes, and the jobs of the queue it drops.
const BLOAT_JOBS: i64 = 100_000;

/// The worker never holds a snapshot for long, even where its work meets many dead index
/// entries: a table bloated under a held snapshot (every job claimed and completed leaves a
/// dead entry in the claim index and the lease index), and a queue of as many queued jobs
/// dropped and created again (their dead entries sit in the claim index below the new queue's
/// floor, and in the table's id order), with an expired lease to reclaim and a claim waiting.
///
/// The bloat is held by a REPEATABLE READ snapshot without a transaction id: it keeps vacuum
/// (and index scans) from cleaning anything up, and leaves the xmin of other snapshots alone,
/// so the worker's `backend_xmin` tells only how long the worker's own snapshot has been
/// held. Measured in transaction ids that another session consumes one after another all
/// along (the age of the worker's xmin), against the ids it consumes per worker tick: a tick in
/// one transaction held its snapshot through all its work (most of a tick's ids: the work of
/// the bounded share of windows a tick walks takes longer than the tick's 100 ms sleep), a tick
/// in short transactions holds it for one bounded window or batch of one step. The bound is
/// half the ids of a tick: since a tick walks a bounded share of the dead entries, ticks are
/// short, and on a loaded machine one window of dead rows can take a quarter of one.
#[test]
fn the_worker_holds_no_snapshot_for_long_on_a_bloated_table() {
    let (cluster, mut client) = private_cluster("worker-bloat", TEST_SETTINGS);
    let mut holder = cluster.connect();
    holder
        .batch_execute(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_catalog.pg_class",
        )
        .unwrap();
    let no_xid: Option<String> =
        scalar(&mut holder, "SELECT txid_current_if_assigned()::text", &[]);
    assert_eq!(no_xid, None, "the holder must not have a transaction id");

    client
        .batch_execute(&format!(
            "SELECT jobs_create_queue('bloat', lease => '1 hour');
             SELECT jobs_enqueue_batch('bloat',
                 (SELECT array_agg('{{}}'::jsonb) FROM generate_series(1, {BLOAT_JOBS})));
             SELECT jobs_create_queue('dropped');
             SELECT jobs_enqueue_batch('dropped',
                 (SELECT array_agg('{{}}'::jsonb) FROM generate_series(1, {BLOAT_JOBS})));"
        ))
        .unwrap();
    for _ in 0..BLOAT_JOBS / 1000 {
        client
            .batch_execute(
                "WITH c AS (SELECT array_agg(id) AS ids, array_agg(lease) AS leases
                              FROM jobs_claim('bloat', n => 1000))
                 SELECT count(*) FROM c, jobs_complete_batch(c.ids, c.leases)",
            )
            .unwrap();
    }
    client
        .batch_execute(
            "SELECT jobs_drop_queue('dropped', force => true);
             SELECT jobs_create_queue('dropped', lease => '1 second');
             SELECT jobs_enqueue('dropped', '{}', run_at => now() + interval '1 hour');",
        )
        .unwrap();
    // An expired lease on the recreated queue, and a claim waiting on the bloated one.
    let id = enqueue(&mut client, "dropped", json!({"expires": true}));
    assert_eq!(claim(&mut client, "dropped", 1, "")[0].id, id);
    let waiter = {
        let mut waiter = cluster.connect();
        thread::spawn(move || claim(&mut waiter, "bloat", 1, ", wait => '60 seconds'"))
    };

    let worker = wait_for_serving_worker(&mut client, "postgres")
        .pid
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer = {
        let (stop, mut consumer) = (stop.clone(), cluster.connect());
        thread::spawn(move || {
            let mut consumed = 0_u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                consumer.batch_execute("SELECT txid_current()").unwrap();
                consumed += 1;
            }
            consumed
        })
    };
    let mut sampler = cluster.connect();
    let ticks_before = worker_status(&mut client, "postgres").unwrap().ticks;
    let xid_before: i64 = scalar(&mut sampler, "SELECT txid_current()", &[]);
    let mut ages = Vec::new();
    let mut ticks = 0;
    while ticks < 10 {
        let age: Option<i32> = scalar(
            &mut sampler,
            "SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = $1",
            &[&worker],
        );
        ages.push(age.unwrap_or(0));
        ticks = worker_status(&mut client, "postgres").unwrap().ticks - ticks_before;
    }
    let xid_after: i64 = scalar(&mut sampler, "SELECT txid_current()", &[]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let consumed = consumer.join().expect("the xid consumer panicked");
    holder.batch_execute("ROLLBACK").unwrap();
    let per_tick = (xid_after - xid_before) / ticks;
    let max_age = *ages.iter().max().unwrap_or(&0);
    ages.sort_unstable();
    println!(
        "bloated table: worker xmin age max {max_age}, median {}, over {} samples; {per_tick} ids consumed per tick ({consumed} by the consumer, {ticks} ticks)",
        ages[ages.len() / 2],
        ages.len()
    );
    assert!(
        i64::from(max_age) * 2 < per_tick,
        "the worker held a snapshot for {max_age} transaction ids, a tick is {per_tick}"
    );
    // And it did its work meanwhile.
    assert_eq!(state(&mut client, id), "queued");
    let last = enqueue(&mut client, "bloat", json!({"last": true}));
    let woken = waiter.join().expect("the waiting claim panicked");
    assert_eq!(woken.iter().map(|c| c.id).collect::<Vec<_>>(), [last]);
}

/// Jobs a tick reclaims at most (`worker::tick::RECLAIM_PER_TICK`).
const RECLAIMED_PER_TICK: i64 = 10_000;

/// A tick reclaims at most [`RECLAIMED_PER_TICK`] jobs, however the expired leases lie in the
/// lease index. Reclaim walks that index a window of 1,000 entries at a time, and under a held
/// snapshot half of each window can be dead entries (jobs completed since): every batch then
/// takes fewer than a full batch's 1,000, and a tick that bounded itself by full batches
/// walked the whole index in one go. Here 25,000 expired leases lie between as many dead
/// entries: they take at least three ticks, and every one of them is reclaimed.
#[test]
fn a_tick_reclaims_a_bounded_number_of_jobs_between_dead_entries() {
    const EXPIRED: i64 = 25_000;
    // The worker waits an hour between ticks until told otherwise, so nothing is reclaimed
    // while the leases are taken.
    let (cluster, mut client) = private_cluster(
        "worker-reclaim-bound",
        &settings_with(&["pg_jobs.tick = '1h'", "autovacuum = off"]),
    );
    let mut holder = cluster.connect();
    holder
        .batch_execute(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_catalog.pg_class",
        )
        .unwrap();
    client
        .batch_execute(&format!(
            "SELECT jobs_create_queue('reclaim-bound', lease => '1 second');
             SELECT jobs_enqueue_batch('reclaim-bound',
                 (SELECT array_agg('{{}}'::jsonb) FROM generate_series(1, {})));",
            2 * EXPIRED
        ))
        .unwrap();
    // Claims of 1,000, every other one completed: its lease index entry is left dead.
    for _ in 0..2 * EXPIRED / 1000 {
        client
            .batch_execute(
                "WITH c AS (SELECT id, lease, row_number() OVER (ORDER BY id) AS n
                              FROM jobs_claim('reclaim-bound', n => 1000)),
                      done AS (SELECT array_agg(id) AS ids, array_agg(lease) AS leases
                                 FROM c WHERE n % 2 = 0)
                 SELECT count(*) FROM done, jobs_complete_batch(done.ids, done.leases)",
            )
            .unwrap();
    }
    let expired = |client: &mut Client| -> i64 {
        scalar(
            client,
            "SELECT count(*) FROM jobs.job
              WHERE queue = 'reclaim-bound' AND state = 'running' AND lease_until < now()",
            &[],
        )
    };
    wait_until(Duration::from_secs(30), "every lease to expire", || {
        expired(&mut client) == EXPIRED
    });

    let status = |client: &mut Client| -> (i64, i64) {
        let status = worker_status(client, "postgres").expect("the worker's row");
        (status.ticks, status.reclaimed)
    };
    let (ticks_before, reclaimed_before) = status(&mut client);
    client
        .batch_execute("ALTER SYSTEM SET pg_jobs.tick = '100ms'")
        .unwrap();
    client.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until(Duration::from_secs(120), "the worker to reclaim", || {
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM jobs.job WHERE queue = 'reclaim-bound' AND state = 'running'",
            &[],
        ) == 0
    });
    // The tick that reclaimed the last ones may not be counted yet.
    wait_until(Duration::from_secs(30), "the last tick's report", || {
        status(&mut client).1 - reclaimed_before == EXPIRED
    });
    let (ticks_after, _) = status(&mut client);
    holder.batch_execute("ROLLBACK").unwrap();
    let ticks = ticks_after - ticks_before;
    let fewest = (EXPIRED + RECLAIMED_PER_TICK - 1) / RECLAIMED_PER_TICK;
    println!("{EXPIRED} expired leases between as many dead entries: reclaimed in {ticks} ticks");
    assert!(
        ticks >= fewest,
        "{EXPIRED} leases reclaimed in {ticks} ticks: more than {RECLAIMED_PER_TICK} a tick"
    );
    let queued: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.job WHERE queue = 'reclaim-bound' AND state = 'queued'",
        &[],
    );
    assert_eq!(queued, EXPIRED);
}

/// Queues of [`floor_checks_of_many_queues_share_transactions`].
const FLOOR_QUEUES: usize = 256;

/// The floor check of each queue runs in short transactions, but the checks of queues with
/// little below their floors share them (up to 16 windows a transaction): a tick does not run
/// a transaction per queue. With some 250 queues holding claim floors, an idle tick runs a few
/// dozen transactions at most; a transaction per floor would be more than the floors.
#[test]
fn floor_checks_of_many_queues_share_transactions() {
    let (_cluster, mut client) = private_cluster(
        "worker-floor-transactions",
        &settings_with(&["autovacuum = off"]),
    );
    let mut queues = Vec::new();
    for _ in 0..FLOOR_QUEUES {
        let queue = unique_queue(&mut client, "floors", "");
        enqueue(&mut client, &queue, json!({}));
        enqueue(&mut client, &queue, json!({}));
        // A claim sets the queue's floor.
        assert_eq!(claim(&mut client, &queue, 1, "").len(), 1);
        queues.push(queue);
    }
    // Queues that share a floor cell own it one at a time.
    let floors: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM unnest($1::text[]) q, jobs.runtime_state(q)
          WHERE floor_id IS NOT NULL",
        &[&queues],
    );
    assert!(floors as usize > FLOOR_QUEUES / 2, "{floors} floors");
    wait_for_serving_worker(&mut client, "postgres");

    let read = pg_jobs_tests::transactions_and_ticks;
    let (transactions_before, ticks_before) = read(&mut client);
    thread::sleep(Duration::from_secs(5));
    let (transactions_after, ticks_after) = read(&mut client);
    let ticks = (ticks_after - ticks_before).max(1);
    // Up to a second of the worker's transactions may be flushed on either side of the window
    // (a worker flushes its statistics at most once a second), and our reads count a few.
    let per_tick = (transactions_after - transactions_before) / ticks;
    println!(
        "{floors} floors: {} transactions in {ticks} ticks, {per_tick} a tick",
        transactions_after - transactions_before
    );
    assert!(
        per_tick * 3 < floors,
        "an idle tick ran {per_tick} transactions with {floors} floors to check"
    );
}

/// How a job of the retention test ends.
#[derive(Clone, Copy)]
enum Ending {
    Succeeded,
    Failed,
    Cancelled,
}

/// Enqueues a job on `queue` (which must have nothing else queued), ends it as `ending` and
/// backdates its `finished_at` by `age`.
fn finished_job(client: &mut Client, queue: &str, ending: Ending, age: &str) -> i64 {
    let id = enqueue(client, queue, json!({"age": age}));
    let outcome: String = match ending {
        Ending::Cancelled => scalar(client, "SELECT jobs_cancel($1)", &[&id]),
        Ending::Succeeded | Ending::Failed => {
            let claimed: Vec<Claimed> = claim(client, queue, 1, "");
            assert_eq!(claimed.len(), 1);
            assert_eq!(claimed[0].id, id);
            let lease = claimed[0].lease;
            if matches!(ending, Ending::Succeeded) {
                scalar(
                    client,
                    "SELECT jobs_complete($1::bigint, $2::uuid)",
                    &[&id, &lease],
                )
            } else {
                scalar(
                    client,
                    "SELECT jobs_fail($1, $2, 'boom', retry => false)",
                    &[&id, &lease],
                )
            }
        }
    };
    let expected = match ending {
        Ending::Succeeded => "succeeded",
        Ending::Failed => "failed",
        Ending::Cancelled => "cancelled",
    };
    assert_eq!(outcome, expected);
    backdate(client, id, "finished_at", age);
    id
}

/// Sets `column` of job `id` to `now() - age` (test set-up edits the table directly).
fn backdate(client: &mut Client, id: i64, column: &str, age: &str) {
    client
        .execute(
            &format!("UPDATE jobs.job SET {column} = now() - $2::text::interval WHERE id = $1"),
            &[&id, &age],
        )
        .unwrap_or_else(|e| panic!("backdate {column} of job {id}: {e}"));
}

/// The ids among `ids` that still exist.
fn existing(client: &mut Client, ids: &[i64]) -> Vec<i64> {
    let mut found: Vec<i64> = column(
        client,
        "SELECT id FROM jobs.job WHERE id = ANY ($1)",
        &[&ids.to_vec()],
    );
    found.sort_unstable();
    found
}

/// The worker purges finished jobs older than their queue's retention, and nothing else:
/// not jobs finished within it, not queued or running jobs however old (even with a stale
/// `finished_at`), not old jobs of a queue whose retention (the default 7 days) keeps them.
#[test]
fn retention_purge_removes_only_finished_jobs_past_their_queues_retention() {
    let mut client = Cluster::shared().connect();
    // A minute, not a second: the "recently finished" jobs must still be within retention
    // when we look, however slow the machine.
    let short = unique_queue(
        &mut client,
        "purge-short",
        "retention => '1 minute', lease => '1 hour'",
    );
    let long = unique_queue(&mut client, "purge-default", "");
    let purged_before = worker_status(&mut client, "postgres").unwrap().purged;

    let mut purged = vec![
        finished_job(&mut client, &short, Ending::Succeeded, "1 hour"),
        finished_job(&mut client, &short, Ending::Failed, "1 hour"),
        finished_job(&mut client, &short, Ending::Cancelled, "1 hour"),
        finished_job(&mut client, &short, Ending::Succeeded, "2 minutes"),
        finished_job(&mut client, &long, Ending::Succeeded, "8 days"),
    ];
    let mut kept = vec![
        finished_job(&mut client, &short, Ending::Succeeded, "30 seconds"),
        finished_job(&mut client, &short, Ending::Failed, "0 seconds"),
        finished_job(&mut client, &long, Ending::Succeeded, "1 hour"),
        finished_job(&mut client, &long, Ending::Failed, "6 days"),
        finished_job(&mut client, &long, Ending::Cancelled, "6 days 23 hours"),
    ];
    // A running and a queued job, old in every way, with a stale finished_at as well.
    let running = enqueue(&mut client, &short, json!({"old": "running"}));
    assert_eq!(claim(&mut client, &short, 1, "")[0].id, running);
    let queued: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, run_at => now() - interval '1 day')",
        &[&short],
    );
    for id in [running, queued] {
        for column in ["created_at", "run_at", "finished_at"] {
            backdate(&mut client, id, column, "1 day");
        }
    }
    backdate(&mut client, running, "started_at", "1 day");
    kept.extend([running, queued]);
    purged.sort_unstable();
    kept.sort_unstable();

    wait_until(
        Duration::from_secs(10),
        "the worker to purge the finished jobs past retention",
        || existing(&mut client, &purged).is_empty(),
    );
    // A couple more ticks change nothing for the rest.
    let ticks = worker_status(&mut client, "postgres").unwrap().ticks;
    wait_for_worker(&mut client, "postgres", "two more ticks", |s| {
        s.ticks >= ticks + 2
    });
    assert_eq!(existing(&mut client, &kept), kept);
    assert_eq!(state(&mut client, running), "running");
    assert_eq!(state(&mut client, queued), "queued");

    let purged_after = worker_status(&mut client, "postgres").unwrap().purged;
    assert!(
        purged_after >= purged_before + purged.len() as i64,
        "purged counter {purged_before} → {purged_after}"
    );
}

/// The retention sweep starts over once it reaches the newest job, even while producers keep
/// adding jobs behind it: a sweep that started over only at an empty window chased the
/// newest jobs for ever and purged nothing (a soak with producers at work grew without end).
#[test]
fn retention_purge_keeps_up_while_producers_keep_adding_jobs() {
    let (cluster, mut client) = private_cluster("worker-purge-busy", TEST_SETTINGS);
    client
        .batch_execute(
            "SELECT jobs_create_queue('busy');
             SELECT jobs_create_queue('swept', retention => '1 second');",
        )
        .unwrap();
    // Some jobs a tick behind the sweep, for as long as the test runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (stop, mut producer) = (stop.clone(), cluster.connect());
        thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                enqueue(&mut producer, "busy", json!({}));
                thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // Let the sweep reach the newest jobs and follow them a few ticks.
    thread::sleep(Duration::from_secs(1));
    let finished: Vec<i64> = (0..50)
        .map(|_| {
            let id = enqueue(&mut client, "swept", json!({}));
            let held = claim(&mut client, "swept", 1, "");
            assert_eq!(complete(&mut client, &held[0]), "succeeded");
            id
        })
        .collect();
    let purged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(
            Duration::from_secs(20),
            "the worker to purge the jobs past their 1 s retention while producers add jobs",
            || existing(&mut client, &finished).is_empty(),
        )
    }));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.join().expect("the producer panicked");
    if let Err(panic) = purged {
        std::panic::resume_unwind(panic);
    }
}

/// Without `shared_preload_libraries` there is no worker, and everything else works:
/// enqueue, claim, complete, `jobs_reclaim()` on demand, and a waiting claim (which polls).
#[test]
fn without_the_preload_everything_but_the_worker_works() {
    let settings = settings_without(&["shared_preload_libraries"]);
    let (cluster, mut client) = private_cluster("worker-no-preload", &settings);
    let preload: String = scalar(&mut client, "SHOW shared_preload_libraries", &[]);
    assert_eq!(preload, "");
    // No worker's row: only this database's, saying why nothing serves it.
    let rows = client
        .query(
            "SELECT database, pid, last_error FROM jobs_worker_status()",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>(0), "postgres");
    assert_eq!(rows[0].get::<_, Option<i32>>(1), None);
    let reason: String = rows[0].get(2);
    assert!(
        reason.starts_with("pg_jobs is not in shared_preload_libraries"),
        "{reason}"
    );
    assert!(worker_backends(&mut client, "postgres").is_empty());
    assert!(launcher_backends(&mut client).is_empty());

    let queue = unique_queue(&mut client, "no-preload", "lease => '1 second'");
    let id = enqueue(&mut client, &queue, json!({}));
    let claimed = claim(&mut client, &queue, 1, "");
    assert_eq!(claimed.len(), 1);
    let outcome: String = scalar(
        &mut client,
        "SELECT jobs_complete($1::bigint, $2::uuid)",
        &[&id, &claimed[0].lease],
    );
    assert_eq!(outcome, "succeeded");

    // Nobody reclaims an expired lease until jobs_reclaim() is called.
    let id = enqueue(&mut client, &queue, json!({}));
    assert_eq!(claim(&mut client, &queue, 1, "")[0].id, id);
    thread::sleep(Duration::from_millis(2000));
    assert_eq!(state(&mut client, id), "running");
    let reclaimed: i32 = scalar(&mut client, "SELECT jobs_reclaim()", &[]);
    assert_eq!(reclaimed, 1);
    assert_eq!(state(&mut client, id), "queued");
    assert_eq!(
        last_error(&mut client, id).as_deref(),
        Some("lease expired")
    );
    let again = claim(&mut client, &queue, 1, "");
    assert_eq!((again[0].id, again[0].attempt), (id, 2));
    let outcome: String = scalar(
        &mut client,
        "SELECT jobs_complete($1::bigint, $2::uuid)",
        &[&id, &again[0].lease],
    );
    assert_eq!(outcome, "succeeded");

    // A waiting claim still gets a job another session commits while it waits.
    let mut waiter = cluster.connect();
    let waiter_pid: i32 = scalar(&mut waiter, "SELECT pg_backend_pid()", &[]);
    let waiting_queue = queue.clone();
    let started = Instant::now();
    let handle = thread::spawn(move || {
        let claimed = claim(&mut waiter, &waiting_queue, 1, ", wait => '10 seconds'");
        (claimed, Instant::now())
    });
    wait_until(Duration::from_secs(10), "the claim to wait", || {
        let waiting: Option<bool> = client
            .query_opt(
                "SELECT wait_event_type = 'Extension' FROM pg_stat_activity
                  WHERE pid = $1 AND state = 'active'",
                &[&waiter_pid],
            )
            .unwrap()
            .and_then(|row| row.get(0));
        waiting == Some(true)
    });
    thread::sleep(Duration::from_millis(300));
    assert!(
        !handle.is_finished(),
        "the claim returned before any job existed"
    );
    let id = enqueue(&mut client, &queue, json!({"late": true}));
    let committed = Instant::now();
    let (claimed, returned) = handle.join().unwrap();
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [id]);
    let latency = returned.saturating_duration_since(committed);
    assert!(
        latency < Duration::from_secs(5),
        "woke {latency:?} after the commit"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    println!("without the preload: waiting claim returned {latency:?} after the commit (polling)");
}

/// The records of prepared transactions' effects (`jobs.prepared_effects`) that no
/// `COMMIT PREPARED` took (only a crash between a commit and its taking leaves one) are deleted
/// by the worker; a record younger than a minute, or of a transaction still prepared, stays.
#[test]
fn the_worker_deletes_records_of_prepared_transactions_that_ended() {
    let (_cluster, mut client) = private_cluster(
        "prepared-orphans",
        &settings_with(&["max_prepared_transactions = 4"]),
    );
    client
        .batch_execute(
            "INSERT INTO jobs.prepared_effects (gid, effects, prepared_at)
             VALUES ('orphan', '{}', now() - interval '2 minutes'),
                    ('young', '{}', now())",
        )
        .unwrap();
    client
        .batch_execute(
            "BEGIN;
             INSERT INTO jobs.prepared_effects (gid, effects, prepared_at)
             VALUES ('still-prepared', '{}', now() - interval '2 minutes');
             PREPARE TRANSACTION 'still-prepared';",
        )
        .unwrap();
    // The prepared row is visible once committed; until then only the other two are.
    wait_until(
        Duration::from_secs(20),
        "the worker to delete the orphan",
        || {
            scalar::<i64>(
                &mut client,
                "SELECT count(*) FROM jobs.prepared_effects WHERE gid = 'orphan'",
                &[],
            ) == 0
        },
    );
    client
        .batch_execute("COMMIT PREPARED 'still-prepared'")
        .unwrap();
    let left: Vec<String> = column(
        &mut client,
        "SELECT gid FROM jobs.prepared_effects ORDER BY gid",
        &[],
    );
    // COMMIT PREPARED took the committed transaction's own record (its gid).
    assert_eq!(left, ["young"]);
}

/// A database that `pg_jobs.databases` does not name has no worker: nothing reclaims its
/// expired leases but `jobs_reclaim()`. `CREATE EXTENSION` warns (saying how to serve it in a
/// way scripts/up keeps), `jobs_worker_status()` shows it unserved with the reason, and the
/// metrics say `pg_jobs_database_served 0`; a served database says 1.
#[test]
fn a_database_no_worker_serves_says_so() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    cluster.recreate_database("unserved");
    let said = cluster.warnings_of("unserved", "CREATE EXTENSION pg_jobs");
    let mut client = Client::connect(&cluster.dsn("unserved"), NoTls).unwrap();
    assert!(
        said.iter().any(|(message, hint)| message
            == "pg_jobs.databases (postgres) does not name database unserved: no background worker will serve it"
            && hint.starts_with("Run ALTER SYSTEM SET pg_jobs.databases = 'postgres, unserved' and restart the server")),
        "{said:?}"
    );
    let row = client
        .query_one(
            "SELECT pid, serving, last_error FROM jobs_worker_status() WHERE database = 'unserved'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, Option<i32>>(0), None);
    assert!(!row.get::<_, bool>(1));
    let reason: String = row.get(2);
    assert!(
        reason.starts_with("pg_jobs.databases does not name database unserved"),
        "{reason}"
    );
    let metrics: String = scalar(&mut client, "SELECT jobs_metrics()", &[]);
    assert!(
        metrics.contains("pg_jobs_database_served{database=\"unserved\"} 0"),
        "{metrics}"
    );
    let served: String = scalar(&mut admin, "SELECT jobs_metrics()", &[]);
    assert!(
        served.contains("pg_jobs_database_served{database=\"postgres\"} 1"),
        "{served}"
    );
    drop(client);
}

/// A lease can run out before its claim commits (a claim in a transaction that then does
/// slow work). Each tick walks the lease index in full only from a little before the previous
/// tick's start; the part before that, where such a lease lies, it walks a bounded share of a
/// tick, going on at the next. The lease still comes back: the worker reclaims it once its
/// walk of that part comes round.
#[test]
fn a_lease_that_ran_out_before_its_claim_committed_is_reclaimed() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("late-commit", "");
    let id = enqueue(&mut client, &queue, json!({}));
    let mut claimer = Cluster::shared().connect();
    claimer.batch_execute("BEGIN").unwrap();
    let claimed = claim(&mut claimer, &queue, 1, ", lease => '1 second'");
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [id]);
    // Ticks go by while the claim's transaction is open: their walks see the job queued.
    let ticks = |client: &mut Client| worker_status(client, "postgres").map_or(0, |s| s.ticks);
    let before = ticks(&mut client);
    wait_until(
        Duration::from_secs(60),
        "the lease and 12 seconds to pass",
        || {
            // Only the claim's own transaction sees its lease yet.
            scalar::<bool>(
                &mut claimer,
                "SELECT lease_until < clock_timestamp() - interval '11 seconds'
               FROM jobs.job WHERE id = $1",
                &[&id],
            ) && ticks(&mut client) > before + 2
        },
    );
    claimer.batch_execute("COMMIT").unwrap();
    wait_until(
        Duration::from_secs(60),
        "the worker to reclaim the lease",
        || state(&mut client, id) == "queued",
    );
}
