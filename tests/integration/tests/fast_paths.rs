//! The fast paths and their SQL twins give the same outcome (`pg_jobs.fast_paths`,
//! docs/src/internals/fast-paths.md): one deterministic workload runs in two databases of one
//! cluster, one with the setting on and one with it off, and what each call answered and what
//! the tables hold afterwards are compared line by line.
//!
//! The workload goes through every path the setting switches: single and batch enqueues (the job
//! writer, its kept queue rows, unique keys tried speculatively or in a subtransaction, marks of
//! a batch's jobs behind their group), claims of n and of kinds and of a tenant (the claim
//! reader, the kept flow settings and tenant grants), groups of concurrency 1 and 2 (the group
//! reader, freed heads), a rate-limited queue (the shared bucket or `jobs.rate_bucket`),
//! heartbeats, complete, fail, release, cancel, retry, reclaim, a schedule's slots (the job
//! writer and the progress writer) and an idempotency record (the key reader). Neither database
//! is served by the background worker, so nothing but the workload acts in them.
//!
//! Ids are not compared (a unique key found held costs the job writer's speculative insert an
//! id), nor times: each job is named by its payload, and the outcome says where jobs are due, not
//! when. A group's mark is compared as claims see it: a freed head (handed to the next claim in
//! shared memory, mark kept) counts as unmarked, as the twin clears its mark instead.
//!
//! `PG_JOBS_TEST_SHOW=1` prints both runs' lines, those that differ marked with `!`.

use std::collections::HashMap;

use pg_jobs_tests::{
    assert_claims_nothing, claim, column, complete, freed_heads, scalar, unique_queue, Claimed,
    Client, Cluster, ExplainingSession, TEST_SETTINGS,
};
use serde_json::json;
use uuid::Uuid;

/// The two databases: the setting each one runs with.
const DATABASES: [(&str, bool); 2] = [("fast_paths_on", true), ("fast_paths_off", false)];

/// The first lines of twin statements: with the fast paths on the workload never runs them,
/// with them off it runs each (so both sides of the comparison really took their own path).
const TWINS: [(&str, &str); 5] = [
    (
        "-- Due jobs of queue $1 in claim order within one priority",
        "claim/candidates_in_priority.sql (the claim reader)",
    ),
    (
        "-- For each job ($2 ids, $3 group keys, $4 tenants, pairwise) of queue $1, in a group of",
        "groups/blocked.sql (the group reader, at a claim)",
    ),
    (
        "-- Inserts one job into queue $1 and returns its id",
        "enqueue/insert.sql (the job writer)",
    ),
    (
        "-- Inserts one job per element of $2 into queue $1 and returns their ids in payload order",
        "enqueue/insert_batch.sql (the job writer)",
    ),
    (
        "-- The rate limit without shared memory",
        "claim/rate_bucket.sql (the shared rate bucket)",
    ),
];

/// One database's run: its session and what it recorded.
struct Run {
    session: ExplainingSession,
    /// Every call's answer and every snapshot of the tables, in order.
    lines: Vec<String>,
    /// The lease each running job (by name) was claimed with.
    leases: HashMap<String, (i64, Uuid)>,
    /// The first lines of the statements the run's calls ran.
    statements: Vec<String>,
    /// Whether a snapshot found freed heads (groups moved on in shared memory).
    freed_seen: bool,
}

impl Run {
    fn client(&mut self) -> &mut Client {
        &mut self.session.client
    }

    fn note(&mut self, line: String) {
        self.lines.push(line);
    }

    /// Runs `sql` (one row of one text column expected, or an error) and notes its answer.
    fn call(&mut self, what: &str, sql: &str) {
        let answer = match self.client().query(sql, &[]) {
            Ok(rows) => rows
                .iter()
                .map(|row| row.get::<_, Option<String>>(0).unwrap_or("NULL".into()))
                .collect::<Vec<_>>()
                .join(", "),
            Err(error) => described(&error),
        };
        self.note(format!("{what}: {answer}"));
    }

    /// Enqueues one job with `call` (of `jobs_enqueue`), noting the name of the job it
    /// answered (a unique key's holder, for a duplicate).
    fn enqueue(&mut self, what: &str, call: &str) {
        self.enqueue_with(what, &format!("SELECT {call}, NULL::boolean"));
    }

    /// Enqueues with `call` (of `jobs_enqueue_batch`), noting the names of the jobs it
    /// answered and whether each was inserted.
    fn enqueue_batch(&mut self, what: &str, call: &str) {
        self.enqueue_with(what, &format!("SELECT id, inserted FROM {call}"));
    }

    /// Runs `sql` (rows of an id and whether it was inserted), then notes the names of those
    /// jobs (read by a later statement: the enqueue's own statement does not see its rows).
    fn enqueue_with(&mut self, what: &str, sql: &str) {
        let answered: Vec<(i64, Option<bool>)> = match self.client().query(sql, &[]) {
            Ok(rows) => rows.iter().map(|row| (row.get(0), row.get(1))).collect(),
            Err(error) => {
                let error = described(&error);
                self.note(format!("{what}: {error}"));
                return;
            }
        };
        let mut names = Vec::new();
        for (id, inserted) in answered {
            let name: String = self
                .client()
                .query_one("SELECT payload->>'n' FROM jobs.job WHERE id = $1", &[&id])
                .expect("read an enqueued job")
                .get(0);
            names.push(match inserted {
                Some(inserted) => format!("{name} {inserted}"),
                None => name,
            });
        }
        self.note(format!("{what}: {}", names.join(", ")));
    }

    /// Claims with the arguments `args` (after the queue), noting the names in claim order and
    /// their attempts, and keeping the leases.
    fn claim(&mut self, queue: &str, args: &str) -> Vec<String> {
        let rows = self
            .client()
            .query(
                &format!(
                    "SELECT payload->>'n', id, lease, attempt FROM jobs_claim('{queue}'{args})"
                ),
                &[],
            )
            .unwrap_or_else(|e| panic!("claim from {queue}{args}: {e}"));
        let mut names = Vec::new();
        for row in rows {
            let name: String = row.get(0);
            self.leases
                .insert(name.clone(), (row.get(1), row.get::<_, Uuid>(2)));
            names.push(format!("{name}#{}", row.get::<_, i32>(3)));
        }
        self.note(format!("claim {queue}{args}: [{}]", names.join(" ")));
        names
            .iter()
            .map(|n| n.split('#').next().unwrap_or_default().to_owned())
            .collect()
    }

    /// Calls `function(id, lease{rest})` for the job named `name`, noting its outcome.
    fn settle(&mut self, function: &str, name: &str, rest: &str) {
        let Some(&(id, lease)) = self.leases.get(name) else {
            self.note(format!("{function} {name}{rest}: never claimed"));
            return;
        };
        let sql = format!("SELECT {function}({id}, '{lease}'::uuid{rest})::text");
        self.call(&format!("{function} {name}{rest}"), &sql);
    }

    /// Calls `function(<the id of the job of queue named name>{rest})`, noting its answer.
    fn by_name(&mut self, function: &str, queue: &str, name: &str, rest: &str) {
        let sql = format!(
            "SELECT {function}((SELECT id FROM jobs.job WHERE queue = '{queue}' AND payload->>'n' = '{name}'){rest})::text"
        );
        self.call(&format!("{function} {name}{rest}"), &sql);
    }

    /// Notes what the tables hold: every job, the schedules' progress, the rate buckets, and
    /// the totals.
    fn snapshot(&mut self, at: &str) {
        let rows = self
            .client()
            .query(
                "WITH freed AS (
                     SELECT unnest(s.freed_heads) AS id
                       FROM jobs.queue q, jobs.runtime_state(q.name) s)
                 SELECT concat_ws(' | ',
                          j.queue, j.payload->>'n', j.headers->>'pg_jobs.slot', j.kind,
                          j.state::text, 'priority ' || j.priority,
                          CASE WHEN j.run_at <= now() THEN 'due' ELSE 'later' END,
                          'attempt ' || j.attempt || '/' || j.max_attempts,
                          'tenant ' || coalesce(j.tenant, '-'),
                          'group ' || coalesce(j.group_key, '-'),
                          CASE WHEN j.group_wait AND j.id NOT IN (SELECT id FROM freed)
                               THEN 'waits' ELSE 'free' END,
                          'key ' || coalesce(j.unique_key, '-') || ' '
                                 || CASE WHEN j.unique_hold THEN 'held' ELSE 'not held' END,
                          'errors ' || coalesce((SELECT string_agg(
                                  (e->>'attempt') || ':' || (e->>'error'), '; ')
                                FROM jsonb_array_elements(j.errors) e), '-'),
                          'released ' || coalesce(j.release_reason, '-'),
                          'progress ' || coalesce(j.progress::text, '-'),
                          'result ' || coalesce(j.result::text, '-'),
                          'lease ' || CASE WHEN j.lease IS NULL THEN 'none' ELSE 'set' END,
                          'until ' || CASE WHEN j.lease_until IS NULL THEN 'none'
                                           WHEN j.lease_until > now() THEN 'later'
                                           ELSE 'passed' END,
                          'origin ' || coalesce(j.origin->>'queue', '-'))
                   FROM jobs.job j
                  ORDER BY j.queue, j.payload->>'n', j.headers->>'pg_jobs.slot', j.state",
                &[],
            )
            .expect("read the jobs");
        let jobs: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
        for job in jobs {
            self.note(format!("{at}: job {job}"));
        }
        for (what, sql) in [
            (
                "schedule",
                "SELECT concat_ws(' | ', s.name, s.next_slot::text, s.due_floor::text,
                        s.last_slot::text, (SELECT j.payload->>'n' || ' ' || (j.headers->>'pg_jobs.slot')
                                              FROM jobs.job j WHERE j.id = s.last_job))
                   FROM jobs.schedule s ORDER BY s.name",
            ),
            (
                "totals",
                "SELECT concat_ws(' | ', queue, completed, failed, retried)
                   FROM jobs_totals() ORDER BY queue",
            ),
        ] {
            let rows = self
                .client()
                .query(sql, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let lines: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
            for line in lines {
                self.note(format!("{at}: {what} {line}"));
            }
        }
        let freed: i64 = self
            .client()
            .query_one(
                "SELECT count(*) FROM jobs.queue q, jobs.runtime_state(q.name) s, unnest(s.freed_heads)",
                &[],
            )
            .expect("count the freed heads")
            .get(0);
        self.freed_seen |= freed > 0;
        let plans = self.session.take_plans();
        self.statements.extend(plans.iter().map(|plan| {
            plan["Query Text"]
                .as_str()
                .unwrap_or("")
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        }));
    }
}

/// An error as the comparison shows it: its SQLSTATE and message, digits left out (a message
/// that names a job names its id).
fn described(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!(
            "error {} {}",
            db.code().code(),
            db.message().replace(|c: char| c.is_ascii_digit(), "#")
        ),
        None => format!("error {error}"),
    }
}

/// A payload naming a job.
fn named(name: &str) -> String {
    format!("'{}'::jsonb", json!({ "n": name }))
}

/// Payloads naming jobs, as an array.
fn all_named(names: &[&str]) -> String {
    let payloads: Vec<String> = names.iter().map(|name| named(name)).collect();
    format!("ARRAY[{}]", payloads.join(", "))
}

/// The workload, run through `run`'s session.
fn workload(run: &mut Run) {
    for sql in [
        "SELECT jobs_create_queue('dead', max_attempts => 1)",
        "SELECT jobs_create_queue('plain', max_attempts => 3, dead_letter => 'dead')",
        "SELECT jobs_create_queue('one', group_concurrency => 1)",
        "SELECT jobs_create_queue('two', group_concurrency => 2)",
        "SELECT jobs_create_queue('unique')",
        // Burst 3 and nearly no refill: a claim of 5 gets 3, the next none.
        "SELECT jobs_create_queue('limited', rate_limit => 0.001, rate_burst => 3)",
    ] {
        run.client().batch_execute(sql).expect(sql);
    }

    // Enqueues: single jobs of priorities, kinds, delays and tenants; batches.
    run.enqueue("a1", &format!("jobs_enqueue('plain', {})", named("a1")));
    run.enqueue(
        "a2",
        &format!("jobs_enqueue('plain', {}, priority => -1)", named("a2")),
    );
    run.enqueue(
        "a3",
        &format!(
            "jobs_enqueue('plain', {}, run_at => now() - interval '1 minute')",
            named("a3")
        ),
    );
    run.enqueue(
        "a4",
        &format!(
            "jobs_enqueue('plain', {}, run_at => now() + interval '1 hour')",
            named("a4")
        ),
    );
    run.enqueue(
        "a5",
        &format!("jobs_enqueue('plain', {}, kind => 'k2')", named("a5")),
    );
    run.enqueue_batch(
        "batch b",
        &format!(
            "jobs_enqueue_batch('plain', {}, priority => 1, max_attempts => 2)",
            all_named(&["b1", "b2", "b3", "b4"])
        ),
    );
    run.enqueue(
        "t1",
        &format!("jobs_enqueue('plain', {}, tenant => 'acme')", named("t1")),
    );
    run.enqueue(
        "t2",
        &format!("jobs_enqueue('plain', {}, tenant => 'globex')", named("t2")),
    );
    // Groups of concurrency 1: a batch whose later jobs wait for its first of their group,
    // and single jobs behind them.
    run.enqueue_batch(
        "batch one",
        &format!(
            "jobs_enqueue_batch('one', {}, group_keys => ARRAY['x', 'x', 'y', 'x'])",
            all_named(&["o1", "o2", "o3", "o4"])
        ),
    );
    run.enqueue(
        "o5",
        &format!("jobs_enqueue('one', {}, group_key => 'x')", named("o5")),
    );
    run.enqueue(
        "o6",
        &format!(
            "jobs_enqueue('one', {}, group_key => 'z', tenant => 'acme')",
            named("o6")
        ),
    );
    run.enqueue(
        "o7",
        &format!(
            "jobs_enqueue('one', {}, group_key => 'z', tenant => 'globex')",
            named("o7")
        ),
    );
    // Groups of concurrency 2.
    run.enqueue_batch(
        "batch two",
        &format!(
            "jobs_enqueue_batch('two', {}, group_key => 'w', group_keys => ARRAY[NULL, NULL, NULL, NULL, 'v'])",
            all_named(&["w1", "w2", "w3", "w4", "v1"])
        ),
    );
    // Unique keys: free, held (skip, replace, error), a batch with a held key and a key twice,
    // a batch of free keys in a group.
    run.enqueue(
        "u1",
        &format!(
            "jobs_enqueue('unique', {}, unique_key => 'k1')",
            named("u1")
        ),
    );
    run.enqueue(
        "u2 skip",
        &format!(
            "jobs_enqueue('unique', {}, unique_key => 'k1')",
            named("u2")
        ),
    );
    run.enqueue(
        "u3 replace",
        &format!(
            "jobs_enqueue('unique', {}, unique_key => 'k1', on_conflict => 'replace', priority => 2)",
            named("u3")
        ),
    );
    run.enqueue(
        "u4",
        &format!(
            "jobs_enqueue('unique', {}, unique_key => 'k2', on_conflict => 'error')",
            named("u4")
        ),
    );
    run.enqueue(
        "u5 error",
        &format!(
            "jobs_enqueue('unique', {}, unique_key => 'k2', on_conflict => 'error')",
            named("u5")
        ),
    );
    run.enqueue_batch(
        "batch unique",
        &format!(
            "jobs_enqueue_batch('unique', {}, unique_keys => ARRAY['k3', 'k1', 'k4', 'k3'])",
            all_named(&["u6", "u7", "u8", "u9"])
        ),
    );
    run.enqueue_batch(
        "batch unique free",
        &format!(
            "jobs_enqueue_batch('one', {}, group_key => 'q', unique_keys => ARRAY['k5', 'k6', 'k7'])",
            all_named(&["q1", "q2", "q3"])
        ),
    );
    // The session tries the direct writer again after a held key (a skipped call) only now.
    run.enqueue_batch(
        "batch unique free again",
        &format!(
            "jobs_enqueue_batch('one', {}, group_key => 'p', unique_keys => ARRAY['k9', 'k10', 'k11'])",
            all_named(&["p1", "p2", "p3"])
        ),
    );
    run.enqueue(
        "unique for",
        &format!(
            "jobs_enqueue('unique', {}, unique_key => 'k8', unique_for => '1 hour')",
            named("u10")
        ),
    );
    run.enqueue_batch(
        "batch limited",
        &format!(
            "jobs_enqueue_batch('limited', {})",
            all_named(&["l1", "l2", "l3", "l4", "l5"])
        ),
    );
    run.snapshot("enqueued");

    // Claims: of n, of kinds, of a tenant, of groups, under a rate limit.
    let first = run.claim("plain", ", n => 3");
    assert_eq!(
        first,
        ["a2", "a3", "a1"],
        "claim order: priority, run_at, id"
    );
    run.claim("plain", ", n => 5, kinds => ARRAY['k2']");
    run.client()
        .batch_execute("SET pg_jobs.tenant = 'acme'")
        .unwrap();
    run.claim("plain", ", n => 5");
    run.claim("one", ", n => 10");
    run.client().batch_execute("RESET pg_jobs.tenant").unwrap();
    run.claim("plain", ", n => 2, kinds => ARRAY['default']");
    run.claim("one", ", n => 10");
    run.claim("one", ", n => 10");
    run.claim("two", ", n => 10");
    run.claim("unique", ", n => 10");
    run.claim("limited", ", n => 5");
    run.claim("limited", ", n => 5");
    run.snapshot("claimed");

    // Heartbeats with progress, then every settle.
    run.settle("jobs_heartbeat", "a2", ", progress => '{\"done\": 1}'");
    run.settle("jobs_heartbeat", "o1", ", progress => '{\"done\": 2}'");
    run.settle("jobs_complete", "a2", ", result => '{\"ok\": true}'");
    run.settle("jobs_fail", "a3", ", error => 'boom', retry_in => '0'");
    run.settle("jobs_release", "a1", ", reason => 'not now'");
    run.settle("jobs_fail", "a5", ", error => 'fatal', retry => false");
    run.settle("jobs_complete", "o1", "");
    run.settle("jobs_complete", "o3", "");
    run.settle("jobs_fail", "o6", ", error => 'again', retry_in => '0'");
    run.settle("jobs_complete", "w1", "");
    run.settle("jobs_release", "w2", ", retry_in => '0'");
    run.settle("jobs_complete", "u3", "");
    run.by_name("jobs_cancel", "plain", "b4", "");
    run.by_name("jobs_cancel", "plain", "t1", "");
    run.snapshot("settled");

    // The groups move on; a retry of a cancelled and a failed job; a heartbeat of a settled one.
    run.claim("one", ", n => 10");
    run.claim("two", ", n => 10");
    run.claim("plain", ", n => 10");
    run.by_name("jobs_retry", "plain", "t1", "");
    run.by_name("jobs_retry", "plain", "a5", "");
    run.settle("jobs_heartbeat", "a2", "");
    run.enqueue(
        "u1 again",
        &format!(
            "jobs_enqueue('unique', {}, unique_key => 'k1')",
            named("u11")
        ),
    );
    run.snapshot("moved on");

    // Reclaim: leases run out (set back by hand: the test does not wait) for a grouped job and
    // a plain one on its last attempt.
    let running: Vec<String> = run
        .client()
        .query(
            "SELECT payload->>'n' FROM jobs.job WHERE state = 'running' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    run.note(format!("running before the reclaim: {}", running.join(" ")));
    run.client()
        .batch_execute(
            "UPDATE jobs.job SET lease_until = now() - interval '1 second'
              WHERE state = 'running' AND payload->>'n' IN ('o2', 'a3', 'w3', 'b1')",
        )
        .expect("let leases run out");
    run.call("reclaim", "SELECT jobs_reclaim()::text");
    run.settle("jobs_heartbeat", "a3", "");
    run.settle("jobs_complete", "o2", "");
    run.snapshot("reclaimed");

    // A schedule's slots (the job writer) and its progress (the progress writer).
    run.call(
        "schedule",
        "SELECT name FROM jobs_schedule('yearly', '0 0 1 1 *', 'plain', payload => '{\"n\": \"s\"}')",
    );
    run.client()
        .batch_execute(
            "UPDATE jobs.schedule SET next_slot = '2024-01-01 00:00+00', due_floor = '2024-01-01 00:00+00'",
        )
        .expect("make three slots due");
    run.call("run schedules", "SELECT jobs_run_schedules()::text");
    run.call("run schedules again", "SELECT jobs_run_schedules()::text");

    // An idempotency record (the key reader).
    run.call(
        "idempotency save",
        "SELECT outcome FROM jobs_idempotency_save('req-1', 'completed', response => '{\"status\": 201}')",
    );
    run.call(
        "idempotency get",
        "SELECT status || ' ' || response::text FROM jobs_idempotency_get('req-1')",
    );
    run.call(
        "idempotency get missing",
        "SELECT status FROM jobs_idempotency_get('req-2')",
    );
    run.snapshot("scheduled");

    // Drain: claim and complete everything claimable, queue by queue, one job at a time.
    for queue in ["plain", "one", "two", "unique", "dead"] {
        loop {
            let claimed = run.claim(queue, ", n => 1");
            let Some(name) = claimed.first() else { break };
            run.settle("jobs_complete", name, "");
        }
    }
    run.snapshot("drained");
}

/// Runs the workload in each database and compares what they recorded.
#[test]
fn the_fast_paths_and_their_sql_twins_agree_row_by_row() {
    // The run's own choice of fast paths (scripts/test's second pass) is overridden per
    // database below: this test compares both either way.
    let cluster = Cluster::start("fast-paths", TEST_SETTINGS);
    let mut admin = cluster.connect();
    let mut runs = Vec::new();
    for (database, on) in DATABASES {
        admin
            .batch_execute(&format!("CREATE DATABASE {database}"))
            .expect("create the database");
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {database} SET pg_jobs.fast_paths = {}",
                if on { "on" } else { "off" }
            ))
            .expect("set the database's fast paths");
        let mut client = cluster.connect_to(database);
        client
            .batch_execute("CREATE EXTENSION pg_jobs")
            .expect("create the extension");
        let session = ExplainingSession::open_in(&cluster, database, "");
        let mut run = Run {
            session,
            lines: Vec::new(),
            leases: HashMap::new(),
            statements: Vec::new(),
            freed_seen: false,
        };
        let setting: String = run
            .client()
            .query_one("SHOW pg_jobs.fast_paths", &[])
            .unwrap()
            .get(0);
        assert_eq!(setting, if on { "on" } else { "off" });
        workload(&mut run);
        runs.push(run);
    }
    let (off, on) = (runs.pop().unwrap(), runs.pop().unwrap());

    // Each database took its own paths.
    for (first_line, twin) in TWINS {
        let ran = |run: &Run| run.statements.iter().any(|s| s.starts_with(first_line));
        assert!(!ran(&on), "with the fast paths on, the workload ran {twin}");
        assert!(
            ran(&off),
            "with the fast paths off, the workload never ran {twin}"
        );
    }
    assert!(
        on.freed_seen,
        "with the fast paths on, no settle handed a group's head over"
    );
    assert!(
        !off.freed_seen,
        "with the fast paths off, a settle handed a group's head over"
    );

    if std::env::var_os("PG_JOBS_TEST_SHOW").is_some() {
        for (a, b) in on.lines.iter().zip(&off.lines) {
            eprintln!("{}{a}", if a == b { "  " } else { "! " });
        }
    }
    for (index, (a, b)) in on.lines.iter().zip(&off.lines).enumerate() {
        assert_eq!(
            a,
            b,
            "line {index} differs between the fast paths (left) and their twins (right); \
             the lines before it:\n{}",
            on.lines[index.saturating_sub(12)..index].join("\n")
        );
    }
    assert_eq!(
        on.lines.len(),
        off.lines.len(),
        "one run recorded more than the other:\n{}",
        if on.lines.len() > off.lines.len() {
            on.lines[off.lines.len()..].join("\n")
        } else {
            off.lines[on.lines.len()..].join("\n")
        }
    );
}

/// Only a superuser changes `pg_jobs.fast_paths` (a worker's `SET` is refused, and changes
/// nothing); a group head a settle handed over while the fast paths were on is not lost when
/// they go off: the next claim clears its mark and takes it from the claim index, and the
/// settles after that clear marks instead of handing heads over.
#[test]
fn only_a_superuser_switches_and_heads_offered_before_are_not_lost() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE ROLE fast_paths_worker LOGIN; GRANT jobs_worker TO fast_paths_worker",
        )
        .expect("create a worker role");
    let mut worker = cluster.connect_as("fast_paths_worker");
    let shown = |client: &mut Client| -> String { scalar(client, "SHOW pg_jobs.fast_paths", &[]) };
    let before = shown(&mut worker);
    let refused = worker
        .batch_execute("SET pg_jobs.fast_paths = off")
        .expect_err("a worker switched the fast paths");
    assert_eq!(
        refused.as_db_error().map(|e| e.code().code()),
        Some("42501"),
        "{refused}"
    );
    assert_eq!(
        shown(&mut worker),
        before,
        "the refused SET changed the setting"
    );

    admin.batch_execute("SET pg_jobs.fast_paths = on").unwrap();
    let queue = unique_queue(&mut admin, "switched", "");
    let jobs: Vec<i64> = (0..3)
        .map(|_| {
            scalar(
                &mut admin,
                "SELECT jobs_enqueue($1, '{}', group_key => 'g')",
                &[&queue],
            )
        })
        .collect();
    let ids = |claimed: Vec<Claimed>| -> Vec<i64> { claimed.iter().map(|c| c.id).collect() };
    let running = claim(&mut admin, &queue, 1, "");
    assert_eq!(ids(running.clone()), [jobs[0]]);
    assert_claims_nothing(&mut admin, &queue, 10, "the group runs one");
    assert_eq!(complete(&mut admin, &running[0]), "succeeded");
    assert_eq!(freed_heads(&mut admin, &queue), [jobs[1]], "handed over");
    let marked = |client: &mut Client| -> Vec<i64> {
        column(
            client,
            "SELECT id FROM jobs.job WHERE queue = $1 AND group_wait ORDER BY id",
            &[&queue],
        )
    };
    assert_eq!(marked(&mut admin), jobs[1..]);

    admin.batch_execute("SET pg_jobs.fast_paths = off").unwrap();
    let next = claim(&mut admin, &queue, 10, "");
    assert_eq!(ids(next.clone()), [jobs[1]], "the offered head was lost");
    assert!(freed_heads(&mut admin, &queue).is_empty());
    assert_eq!(marked(&mut admin), [jobs[2]]);
    assert_eq!(complete(&mut admin, &next[0]), "succeeded");
    assert!(
        freed_heads(&mut admin, &queue).is_empty(),
        "a settle handed a head over with the fast paths off"
    );
    assert!(marked(&mut admin).is_empty(), "the settle left the mark");
    assert_eq!(ids(claim(&mut admin, &queue, 10, "")), [jobs[2]]);
}
