//! Bad input (SPEC rule 11): every bad call raises an ERROR with a documented SQLSTATE, a message
//! that names the argument and what it accepts, and changes nothing.
//!
//! * [`bad_calls_raise_documented_errors_and_change_nothing`] runs a table of bad calls, each on
//!   a fresh session, against a fixture queue with a running, a queued and a succeeded job. It
//!   snapshots every table of the extension's `jobs` schema and each queue's shared memory
//!   (`jobs.runtime_state`: claim floor and reach, wake-up slot) before and after each call, and
//!   checks the SQLSTATE, the message and that the snapshot did not move. Every `jobs_*`
//!   function that takes arguments must have a bad call in the table. It prints the table of
//!   calls and their SQLSTATEs at the end (`--nocapture` shows it).
//! * [`error_messages_name_the_argument_and_the_range`] pins the exact wording of a few
//!   messages, and the hint of the unknown-queue error.
//! * [`payload_limit_is_the_jsonb_size_to_the_byte`] shows the limit is exact: a payload of
//!   exactly `pg_jobs.max_payload_bytes` is accepted, one byte more is refused.
//!
//! The tests of this file share a cluster of their own, whose worker does not tick (it would
//! change shared memory between the snapshots), and its tables, so they run one at a time.

use std::sync::{Mutex, OnceLock};

use pg_jobs_tests::{claim, column, enqueue, jobs_in, row, scalar, settings_with, Client, Cluster};
use serde_json::json;

/// Serialises the tests of this file: the snapshots cover the whole schema.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A bad call and what it must raise.
struct BadCall {
    /// Statements run first in the caller's session (settings, `BEGIN ISOLATION LEVEL ...`).
    setup: Vec<String>,
    sql: String,
    sqlstate: &'static str,
    /// A substring of the message: the argument's name and, for ranges, the range.
    message: String,
}

/// A bad call raising `sqlstate` with a message that contains `message`.
fn bad(sql: impl Into<String>, sqlstate: &'static str, message: impl Into<String>) -> BadCall {
    BadCall {
        setup: Vec::new(),
        sql: sql.into(),
        sqlstate,
        message: message.into(),
    }
}

impl BadCall {
    /// Runs `statement` in the caller's session before the call.
    fn after(mut self, statement: impl Into<String>) -> BadCall {
        self.setup.push(statement.into());
        self
    }
}

/// Queue names the bad calls use that name no queue; their shared-memory slots are watched too.
const UNKNOWN_QUEUES: [&str; 2] = ["no-such-queue", "bad-input-new"];

/// The cluster of this file: the test settings with a worker that does not tick, so that the
/// only changes to shared memory (claim floors and reaches, which the tick forgets, and
/// wake-up slots, which it signals for due jobs) are the calls' own.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let settings = settings_with(&["pg_jobs.tick = '1h'"]);
        Cluster::start_with_extension("bad-input", &settings)
    })
}

/// Every table of the extension (each relation of schema `jobs`), rendered as sorted JSON, and
/// what shared memory holds for every queue (`jobs.runtime_state`: claim floor, reach, wake-up
/// slot), so that "changes nothing" covers both.
fn snapshot(client: &mut Client) -> Vec<(String, String)> {
    let tables: Vec<String> = column(
        client,
        "SELECT format('%I.%I', n.nspname, c.relname)
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'jobs' AND c.relkind IN ('r', 'p')
              ORDER BY 1",
        &[],
    );
    assert!(
        tables.iter().any(|t| t == "jobs.job") && tables.iter().any(|t| t == "jobs.queue"),
        "the extension's tables: {tables:?}"
    );
    let mut snapshot: Vec<(String, String)> = tables
        .into_iter()
        .map(|table| {
            let rows: String = scalar(
                client,
                &format!(
                    "SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY to_jsonb(t)::text), '[]')::text
                       FROM {table} AS t"
                ),
                &[],
            );
            (table, rows)
        })
        .collect();
    let unknown: Vec<&str> = UNKNOWN_QUEUES.to_vec();
    let memory: String = scalar(
        client,
        "SELECT coalesce(jsonb_agg(jsonb_build_object('queue', q.name, 'state', to_jsonb(s))
                                   ORDER BY q.name), '[]')::text
           FROM (SELECT name FROM jobs.queue UNION SELECT unnest($1::text[])) AS q(name),
                LATERAL jobs.runtime_state(q.name) AS s",
        &[&unknown],
    );
    assert!(
        memory.contains("floor_generation"),
        "jobs.runtime_state shows the shared memory of the preloaded library: {memory}"
    );
    snapshot.push(("shared memory (jobs.runtime_state)".to_owned(), memory));
    snapshot
}

/// The `jobs_*` functions of the extension that take arguments (as `pg_proc` lists them) but
/// that no call of `calls` tries.
fn functions_without_bad_calls(client: &mut Client, calls: &[BadCall]) -> Vec<String> {
    let functions: Vec<String> = column(
        client,
        "SELECT DISTINCT p.proname::text
               FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                               AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_jobs'
              WHERE p.proname LIKE 'jobs\\_%' AND p.pronargs > 0
              ORDER BY 1",
        &[],
    );
    assert!(
        functions.iter().any(|f| f == "jobs_claim"),
        "the extension's functions: {functions:?}"
    );
    functions
        .into_iter()
        .filter(|f| !calls.iter().any(|call| call.sql.contains(&format!("{f}("))))
        .collect()
}

/// Runs `call` on a fresh session; returns what went wrong with it, if anything.
fn check(cluster: &Cluster, observer: &mut Client, call: &BadCall) -> Result<(), String> {
    let before = snapshot(observer);
    let mut caller = cluster.connect();
    for statement in &call.setup {
        caller
            .batch_execute(statement)
            .map_err(|e| format!("setup {statement:?} failed: {e}"))?;
    }
    let result = caller.batch_execute(&call.sql);
    // Ends a transaction the setup began; a warning when there is none.
    let _ = caller.batch_execute("ROLLBACK");
    drop(caller);
    let after = snapshot(observer);

    let mut problems = Vec::new();
    match result {
        Ok(()) => problems.push("succeeded, but must fail".to_owned()),
        Err(error) => match error.as_db_error() {
            None => problems.push(format!("failed without a server error: {error}")),
            Some(db) => {
                if db.code().code() != call.sqlstate {
                    problems.push(format!(
                        "raised {} ({}), expected {}",
                        db.code().code(),
                        db.message(),
                        call.sqlstate
                    ));
                }
                if !db.message().contains(&call.message) {
                    problems.push(format!(
                        "message {:?} does not contain {:?}",
                        db.message(),
                        call.message
                    ));
                }
                if call.sqlstate == "42704" && call.message.starts_with("queue '") {
                    let hint = db.hint().unwrap_or_default();
                    if !hint.contains("jobs_create_queue(") {
                        problems.push(format!("hint {hint:?} does not say how to create it"));
                    }
                }
            }
        },
    }
    for ((table, rows_before), (_, rows_after)) in before.iter().zip(&after) {
        if rows_before != rows_after {
            problems.push(format!(
                "changed {table}:\n  before {rows_before}\n  after  {rows_after}"
            ));
        }
    }
    if before.len() != after.len() {
        problems.push("changed the set of tables".to_owned());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The queues and jobs the bad calls aim at.
struct Fixture {
    queue: String,
    dead_letter: String,
    running: (i64, uuid::Uuid),
    queued: i64,
    succeeded: i64,
    /// An id no job has.
    stale: i64,
}

/// Creates the fixture queues `name` and `name-dead` (its dead-letter queue) and their jobs.
fn fixture(client: &mut Client, name: &str) -> Fixture {
    let dead_letter = format!("{name}-dead");
    let queue = name.to_owned();
    client
        .batch_execute(&format!(
            "SELECT jobs_create_queue('{dead_letter}');
             SELECT jobs_create_queue('{queue}', lease => '1 hour', dead_letter => '{dead_letter}');"
        ))
        .expect("create the fixture queues");
    let first = enqueue(client, &queue, json!({"job": 1}));
    let second = enqueue(client, &queue, json!({"job": 2}));
    let queued = enqueue(client, &queue, json!({"job": 3}));
    let claimed = claim(client, &queue, 2, "");
    assert_eq!(
        claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
        [first, second]
    );
    let done: String = scalar(
        client,
        "SELECT jobs_complete($1::bigint, $2::uuid)",
        &[&second, &claimed[1].lease],
    );
    assert_eq!(done, "succeeded");
    let stale: i64 = scalar(client, "SELECT max(id) + 1000 FROM jobs.job", &[]);
    // Idempotency records: one whose request is in flight, one finished.
    client
        .batch_execute(&format!(
            "SELECT * FROM jobs_idempotency_save('{queue}-pending');
             SELECT * FROM jobs_idempotency_save('{queue}-done', 'completed', '{{}}', fingerprint => 'request');"
        ))
        .expect("create the fixture idempotency records");
    Fixture {
        queue,
        dead_letter,
        running: (first, claimed[0].lease),
        queued,
        succeeded: second,
        stale,
    }
}

/// A payload and its size in bytes of jsonb, as `pg_jobs.max_payload_bytes` measures it.
fn sized_payload(client: &mut Client) -> (String, i32) {
    let payload = json!({ "pad": "x".repeat(300) }).to_string();
    let size: i32 = scalar(
        client,
        "SELECT pg_column_size($1::text::jsonb)",
        &[&payload],
    );
    (payload, size)
}

#[test]
fn bad_calls_raise_documented_errors_and_change_nothing() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let mut observer = cluster.connect();
    let f = fixture(&mut observer, "bad-input");
    let (q, dl, stale) = (&f.queue, &f.dead_letter, f.stale);
    let (id, lease) = f.running;
    let (payload, size) = sized_payload(&mut observer);
    let max_wait_ms: i64 = scalar(
        &mut observer,
        "SELECT setting::bigint FROM pg_settings WHERE name = 'pg_jobs.max_wait'",
        &[],
    );
    let over_max_wait = format!("{} milliseconds", max_wait_ms + 1);
    let long_name = "q".repeat(64);

    // One call per line, read as a table: (SQL, SQLSTATE, what the message must contain).
    #[rustfmt::skip]
    let calls = vec![
        // Required arguments that are NULL: 22004, naming the argument.
        bad("SELECT jobs_enqueue(NULL, '{}')", "22004", "queue must not be NULL"),
        bad(format!("SELECT jobs_enqueue('{q}', NULL)"), "22004", "payload must not be NULL"),
        bad(format!("SELECT jobs_enqueue('{q}', kind => NULL)"), "22004", "kind must not be NULL"),
        bad(format!("SELECT jobs_enqueue('{q}', run_at => NULL)"), "22004", "run_at must not be NULL"),
        bad(format!("SELECT jobs_enqueue('{q}', priority => NULL)"), "22004", "priority must not be NULL"),
        bad(format!("SELECT jobs_enqueue_batch('{q}', NULL)"), "22004", "payloads must not be NULL"),
        bad(format!("SELECT jobs_enqueue_batch('{q}', ARRAY['{{}}', NULL]::jsonb[])"), "22004", "payloads[2] must not be NULL"),
        bad("SELECT * FROM jobs_claim(NULL)", "22004", "queue must not be NULL"),
        bad(format!("SELECT * FROM jobs_claim('{q}', n => NULL)"), "22004", "n must not be NULL"),
        bad(format!("SELECT * FROM jobs_claim('{q}', wait => NULL)"), "22004", "wait must not be NULL"),
        bad(format!("SELECT jobs_complete(NULL::bigint, '{lease}'::uuid)"), "22004", "id must not be NULL"),
        bad(format!("SELECT jobs_complete({id}, NULL::uuid)"), "22004", "lease must not be NULL"),
        bad(format!("SELECT jobs_heartbeat(NULL, '{lease}')"), "22004", "id must not be NULL"),
        bad(format!("SELECT jobs_fail({id}, '{lease}', NULL)"), "22004", "error must not be NULL"),
        bad(format!("SELECT jobs_release({id}, NULL)"), "22004", "lease must not be NULL"),
        bad(format!("SELECT * FROM jobs_complete_batch(ARRAY[{id}, NULL]::bigint[], ARRAY['{lease}', '{lease}']::uuid[])"), "22004", "ids[2] must not be NULL"),
        bad(format!("SELECT * FROM jobs_complete_batch(ARRAY[{id}]::bigint[], ARRAY[NULL]::uuid[])"), "22004", "leases[1] must not be NULL"),
        bad("SELECT jobs_cancel(NULL)", "22004", "id must not be NULL"),
        bad("SELECT jobs_run_now(NULL)", "22004", "id must not be NULL"),
        bad("SELECT * FROM jobs_get(NULL)", "22004", "id must not be NULL"),
        bad("SELECT jobs_grant_tenant(NULL, 'acme')", "22004", "role must not be NULL"),
        bad("SELECT jobs_grant_tenant('postgres', NULL)", "22004", "tenant must not be NULL"),
        bad("SELECT jobs_revoke_tenant(NULL, 'acme')", "22004", "role must not be NULL"),
        bad("SELECT jobs_revoke_tenant('postgres', NULL)", "22004", "tenant must not be NULL"),
        bad(format!("SELECT jobs_retry({id}, run_at => NULL)"), "22004", "run_at must not be NULL"),
        // Arguments out of range: 22023, naming the argument and the range.
        bad(format!("SELECT * FROM jobs_claim('{q}', n => 0)"), "22023", "n must be between 1 and 1000, got 0"),
        bad(format!("SELECT * FROM jobs_claim('{q}', n => -1)"), "22023", "n must be between 1 and 1000, got -1"),
        bad(format!("SELECT * FROM jobs_claim('{q}', n => 1001)"), "22023", "n must be between 1 and 1000, got 1001"),
        bad(format!("SELECT * FROM jobs_claim('{q}', lease => '0')"), "22023", "lease must be greater than 0"),
        bad(format!("SELECT * FROM jobs_claim('{q}', lease => '-1 second')"), "22023", "lease must be greater than 0"),
        bad(format!("SELECT * FROM jobs_claim('{q}', lease => '8 days')"), "22023", "at most 7 days"),
        bad(format!("SELECT jobs_create_queue('{q}', lease => '0')"), "22023", "lease must be greater than 0"),
        bad(format!("SELECT jobs_fail({id}, '{lease}', 'boom', retry_in => '-1 second')"), "22023", "retry_in must be at least 0"),
        bad(format!("SELECT jobs_release({id}, '{lease}', retry_in => '-1 second')"), "22023", "retry_in must be at least 0"),
        bad(format!("SELECT jobs_heartbeat({id}, '{lease}', extend => '-1 second')"), "22023", "extend must be greater than 0"),
        bad(format!("SELECT * FROM jobs_claim('{q}', wait => '{over_max_wait}')"), "22023", format!("wait must be at least 0 and at most pg_jobs.max_wait ({max_wait_ms} ms)")),
        bad(format!("SELECT * FROM jobs_claim('{q}', wait => '2 seconds')"), "22023", "at most pg_jobs.max_wait (1000 ms)")
            .after("SET pg_jobs.max_wait = '1s'"),
        bad(format!("SELECT * FROM jobs_claim('{q}', wait => '-1 second')"), "22023", "wait must be at least 0"),
        bad("SELECT jobs_enqueue('', '{}')", "22023", "queue must be 1 to 63 characters"),
        bad(format!("SELECT * FROM jobs_claim('{long_name}')"), "22023", "queue must be 1 to 63 characters"),
        bad("SELECT jobs_create_queue('has space')", "22023", "queue must be 1 to 63 characters"),
        bad("SELECT jobs_pause('it''s')", "22023", "queue must be 1 to 63 characters"),
        bad("SELECT jobs_enqueue_batch('wärme', ARRAY['{}']::jsonb[])", "22023", "queue must be 1 to 63 characters"),
        bad("SELECT * FROM jobs_list(queue => 'a/b')", "22023", "queue must be 1 to 63 characters"),
        bad(format!("SELECT jobs_enqueue('{q}', headers => '[1]')"), "22023", "headers must be a JSON object"),
        bad(format!("SELECT jobs_enqueue_batch('{q}', ARRAY['{{}}']::jsonb[], headers => '\"x\"')"), "22023", "headers must be a JSON object"),
        bad("SELECT * FROM jobs_list(state => 'done')", "22023", "state must be one of queued, ready, scheduled, running, succeeded, failed, cancelled, waiting, got 'done'"),
        bad("SELECT * FROM jobs_list(\"limit\" => 0)", "22023", "limit must be between 1 and 10000, got 0"),
        bad("SELECT * FROM jobs_list(\"limit\" => 10001)", "22023", "limit must be between 1 and 10000, got 10001"),
        bad(format!("SELECT jobs_enqueue('{q}', priority => 32768)"), "22023", "priority must be between -32768 and 32767, got 32768"),
        bad(format!("SELECT jobs_enqueue('{q}', priority => -32769)"), "22023", "priority must be between -32768 and 32767, got -32769"),
        bad(format!("SELECT jobs_enqueue('{q}', max_attempts => 0)"), "22023", "max_attempts must be between 1 and 10000, got 0"),
        bad(format!("SELECT jobs_create_queue('{q}', max_attempts => 0)"), "22023", "max_attempts must be between 1 and 10000, got 0"),
        bad(format!("SELECT jobs_create_queue('{q}', jitter => 1.5)"), "22023", "jitter must be between 0 and 1, got 1.5"),
        bad(format!("SELECT jobs_create_queue('{q}', jitter => -0.1)"), "22023", "jitter must be between 0 and 1"),
        bad(format!("SELECT jobs_create_queue('{q}', backoff_base => '10 seconds', backoff_max => '1 second')"), "22023", "backoff_max must be at least backoff_base"),
        bad("SELECT jobs_create_queue('bad-input-new', backoff_base => '1 hour', backoff_max => '1 minute')", "22023", "backoff_max must be at least backoff_base"),
        bad(format!("SELECT jobs_create_queue('{q}', backoff_base => '-1 second')"), "22023", "backoff_base must be at least 0"),
        bad(format!("SELECT * FROM jobs_complete_batch(ARRAY[{id}]::bigint[], ARRAY[]::uuid[])"), "22023", "ids and leases must have the same length, got 1 ids and 0 leases"),
        bad(format!("SELECT jobs_enqueue('{q}', on_conflict => 'overwrite')"), "22023", "on_conflict must be 'skip', 'replace' or 'error'"),
        // Unknown queues: 42704, with a hint that says how to create one.
        bad("SELECT jobs_enqueue('no-such-queue')", "42704", "queue 'no-such-queue' does not exist"),
        bad("SELECT jobs_enqueue_batch('no-such-queue', ARRAY['{}']::jsonb[])", "42704", "queue 'no-such-queue' does not exist"),
        bad("SELECT * FROM jobs_claim('no-such-queue')", "42704", "queue 'no-such-queue' does not exist"),
        bad("SELECT jobs_pause('no-such-queue')", "42704", "queue 'no-such-queue' does not exist"),
        bad("SELECT jobs_resume('no-such-queue')", "42704", "queue 'no-such-queue' does not exist"),
        bad("SELECT jobs_drop_queue('no-such-queue')", "42704", "queue 'no-such-queue' does not exist"),
        bad("SELECT jobs_create_queue('bad-input-new', dead_letter => 'no-such-queue')", "42704", "queue 'no-such-queue' does not exist"),
        // Payloads above pg_jobs.max_payload_bytes: 54000.
        bad(format!("SELECT jobs_enqueue('{q}', '{payload}')"), "54000", format!("payload is {size} bytes, above pg_jobs.max_payload_bytes ({} bytes)", size - 1))
            .after(format!("SET pg_jobs.max_payload_bytes = {}", size - 1)),
        bad(format!("SELECT jobs_enqueue_batch('{q}', ARRAY['{{}}', '{payload}']::jsonb[])"), "54000", format!("payloads[2] is {size} bytes"))
            .after(format!("SET pg_jobs.max_payload_bytes = {}", size - 1)),
        // Tenants, unique jobs, groups and rate limits.
        bad(format!("SELECT jobs_enqueue('{q}', tenant => 'a,b')"), "22023", "tenant must be 1 to 255 bytes without commas or surrounding spaces, got 'a,b'"),
        bad("SELECT jobs_grant_tenant('postgres', 'a,b')", "22023", "tenant must be 1 to 255 bytes without commas or surrounding spaces, got 'a,b'"),
        bad(format!("SELECT jobs_enqueue('{q}', unique_key => '')"), "22023", "unique_key must be 1 to 512 bytes long, got 0 bytes"),
        bad(format!("SELECT jobs_enqueue('{q}', unique_key => repeat('k', 513))"), "22023", "unique_key must be 1 to 512 bytes long, got 513 bytes"),
        bad(format!("SELECT jobs_enqueue('{q}', unique_for => '1 hour')"), "22023", "unique_for needs a unique_key"),
        bad(format!("SELECT jobs_enqueue('{q}', unique_key => 'k', unique_for => '-1 second')"), "22023", "unique_for must be at least 0 and at most 100 years"),
        bad(format!("SELECT jobs_enqueue('{q}', group_key => '')"), "22023", "group_key must be 1 to 255 bytes long, got 0 bytes"),
        bad(format!("SELECT * FROM jobs_enqueue_batch('{q}', ARRAY['{{}}', '{{}}']::jsonb[], unique_keys => ARRAY['a'])"), "22023", "unique_keys must have one element per payload, got 1 for 2 payloads"),
        bad(format!("SELECT * FROM jobs_enqueue_batch('{q}', ARRAY['{{}}']::jsonb[], group_keys => ARRAY[''])"), "22023", "group_keys[1] must be 1 to 255 bytes long, got 0 bytes"),
        bad(format!("SELECT jobs_create_queue('{q}', rate_limit => -1)"), "22023", "rate_limit must be a number of claims per second of at least 0.000000001 (0 clears it), got -1"),
        bad(format!("SELECT jobs_create_queue('{q}', rate_limit => 'infinity')"), "22023", "rate_limit must be a number of claims per second of at least 0.000000001 (0 clears it), got inf"),
        bad(format!("SELECT jobs_create_queue('{q}', rate_limit => 'NaN')"), "22023", "rate_limit must be a number of claims per second of at least 0.000000001 (0 clears it), got NaN"),
        // Limits so small that the next token's time left the timestamp range: a waiting claim
        // was admitted about once a second.
        bad(format!("SELECT jobs_create_queue('{q}', rate_limit => 1e-13)"), "22023", "rate_limit must be a number of claims per second of at least 0.000000001 (0 clears it), got 0.0000000000001"),
        bad(format!("SELECT jobs_create_queue('{q}', rate_limit => 1e-300)"), "22023", "rate_limit must be a number of claims per second of at least 0.000000001"),
        bad(format!("SELECT jobs_create_queue('{q}', rate_burst => 0.5)"), "22023", "rate_burst must be a number of jobs of at least 1"),
        // One commit per job: the settles' arrays, and the claim's arguments as jobs_claim's.
        bad(format!("SELECT * FROM jobs_complete_and_claim('{q}', ARRAY[{id}]::bigint[], ARRAY[]::uuid[])"), "22023", "ids and leases must have the same length, got 1 ids and 0 leases"),
        bad(format!("SELECT * FROM jobs_complete_and_claim('{q}', ARRAY[{id}]::bigint[], ARRAY['{lease}']::uuid[], results => ARRAY['{{}}', '{{}}']::jsonb[])"), "22023", "results must have one element per id (or be NULL), got 2 results for 1 ids"),
        bad(format!("SELECT * FROM jobs_complete_and_claim('{q}', ARRAY[{id}]::bigint[], ARRAY['{lease}']::uuid[], n => 0)"), "22023", "n must be between 1 and 1000, got 0"),
        bad(format!("SELECT * FROM jobs_complete_and_claim(NULL, ARRAY[{id}]::bigint[], ARRAY['{lease}']::uuid[])"), "22004", "queue must not be NULL"),
        bad(format!("SELECT * FROM jobs_complete_and_claim('{q}', NULL, ARRAY['{lease}']::uuid[])"), "22004", "ids must not be NULL"),
        bad(format!("SELECT jobs_create_queue('{q}', group_concurrency => 0)"), "22023", "group_concurrency must be between 1 and 10000, got 0"),
        // Idempotency records: bad arguments, then a live pending record (55P03) and a finished
        // one saved for another request (23000).
        bad("SELECT * FROM jobs_idempotency_save(NULL)", "22004", "key must not be NULL"),
        bad("SELECT * FROM jobs_idempotency_save('')", "22023", "key must be 1 to 255 bytes long, got 0 bytes"),
        bad("SELECT * FROM jobs_idempotency_get(repeat('k', 256))", "22023", "key must be 1 to 255 bytes long, got 256 bytes"),
        bad("SELECT * FROM jobs_idempotency_save('k', scope => repeat('s', 256))", "22023", "scope must be NULL or at most 255 bytes long, got 256 bytes"),
        bad("SELECT * FROM jobs_idempotency_save('k', status => 'done')", "22023", "status must be one of pending, completed, failed, got 'done'"),
        bad("SELECT * FROM jobs_idempotency_save('k', ttl => '-1 second')", "22023", "ttl must be greater than 0 and at most 100 years"),
        bad("SELECT * FROM jobs_idempotency_save('k', ttl => '0')", "22023", "ttl must be greater than 0 and at most 100 years"),
        bad("SELECT * FROM jobs_idempotency_save('k', pending_for => '200 years')", "22023", "pending_for must be greater than 0 and at most 100 years"),
        bad("SELECT * FROM jobs_idempotency_save('k', fingerprint => '')", "22023", "fingerprint must be 1 to 1024 bytes long, got 0 bytes"),
        bad(format!("SELECT * FROM jobs_idempotency_save('k', 'completed', '{payload}')"), "54000", format!("response is {size} bytes, above pg_jobs.max_payload_bytes"))
            .after(format!("SET pg_jobs.max_payload_bytes = {}", size - 1)),
        bad(format!("SELECT jobs_idempotency_update('{q}-pending', 'completed')"), "22004", "token must not be NULL"),
        bad(format!("SELECT jobs_idempotency_update('{q}-pending', 'finished', token => gen_random_uuid())"), "22023", "status must be one of pending, completed, failed"),
        bad("SELECT jobs_idempotency_delete(NULL)", "22004", "key must not be NULL"),
        bad("SELECT * FROM jobs_idempotency_get('k')", "22023", "an idempotency record belongs to one tenant")
            .after("SET pg_jobs.tenant = 'acme, globex'"),
        bad(format!("SELECT * FROM jobs_idempotency_save('{q}-pending')"), "55P03", format!("idempotency key '{q}-pending' is pending")),
        bad(format!("SELECT * FROM jobs_idempotency_save('{q}-done', fingerprint => 'another request')"), "23000", format!("idempotency key '{q}-done' was used for a different request")),
        // A waiting claim under REPEATABLE READ or SERIALIZABLE: 25000.
        bad(format!("SELECT * FROM jobs_claim('{q}', wait => '1 second')"), "25000", "REPEATABLE READ or SERIALIZABLE")
            .after("BEGIN ISOLATION LEVEL REPEATABLE READ"),
        bad(format!("SELECT * FROM jobs_claim('{q}', wait => '1 second')"), "25000", "REPEATABLE READ or SERIALIZABLE")
            .after("BEGIN ISOLATION LEVEL SERIALIZABLE"),
        // Workflows (engine::workflows): after, results, waits, awaits and signals.
        bad(format!("SELECT jobs_enqueue('{q}', after => ARRAY[NULL::bigint])"), "22004", "after[1] must not be NULL"),
        bad(format!("SELECT jobs_enqueue('{q}', after => ARRAY[{stale}])"), "P0002", format!("after[1] names job {stale}, which does not exist or is not visible to this session")),
        bad(format!("SELECT jobs_enqueue_batch('{q}', ARRAY['{{}}'::jsonb], after => ARRAY[{}, {stale}])", f.queued), "P0002", format!("after[2] names job {stale}")),
        bad("SELECT * FROM jobs_results(NULL)", "22004", "ids must not be NULL"),
        bad("SELECT * FROM jobs_results(ARRAY[NULL::bigint])", "22004", "ids[1] must not be NULL"),
        bad(format!("SELECT * FROM jobs_wait(ARRAY[{}], NULL)", f.queued), "22004", "timeout must not be NULL"),
        bad(format!("SELECT * FROM jobs_wait(ARRAY[{}], '{over_max_wait}')", f.queued), "22023", "timeout must be at least 0 and at most pg_jobs.max_wait"),
        bad(format!("SELECT * FROM jobs_wait(ARRAY[{}], '1 second')", f.queued), "25000", "REPEATABLE READ or SERIALIZABLE")
            .after("BEGIN ISOLATION LEVEL REPEATABLE READ"),
        bad(format!("SELECT jobs_await({id}, NULL, 'paid')"), "22004", "lease must not be NULL"),
        bad(format!("SELECT jobs_await({id}, '{lease}', NULL)"), "22004", "signal must not be NULL"),
        bad(format!("SELECT jobs_await({id}, '{lease}', '')"), "22023", "signal must be 1 to 255 bytes long, got 0 bytes"),
        bad(format!("SELECT jobs_await({id}, '{lease}', 'paid', timeout => '0')"), "22023", "timeout must be greater than 0 and at most 100 years"),
        bad("SELECT jobs_signal(NULL)", "22004", "signal must not be NULL"),
        bad("SELECT jobs_signal('')", "22023", "signal must be 1 to 255 bytes long, got 0 bytes"),
        bad("SELECT jobs_signal('paid', keep => '-1 second')", "22023", "keep must be at least 0 and at most 100 years"),
        bad(format!("SELECT jobs_signal('paid', '{payload}')"), "54000", format!("payload is {size} bytes, above pg_jobs.max_payload_bytes"))
            .after(format!("SET pg_jobs.max_payload_bytes = {}", size - 1)),
        bad("SELECT jobs_distribute(NULL)", "22004", "shard_count must not be NULL"),
        bad("SELECT jobs_distribute(0)", "22023", "shard_count must be between 1 and 4096, got 0"),
        bad("SELECT jobs_distribute(4097)", "22023", "shard_count must be between 1 and 4096, got 4097"),
        // Unknown roles: 42704.
        bad("SELECT jobs_grant_tenant('no_such_role', 'acme')", "42704", "role 'no_such_role' does not exist"),
        // Unknown job ids: P0002.
        bad(format!("SELECT jobs_cancel({stale})"), "P0002", format!("no job has id {stale}")),
        bad(format!("SELECT jobs_retry({stale})"), "P0002", format!("no job has id {stale}")),
        bad(format!("SELECT jobs_run_now({stale})"), "P0002", format!("no job has id {stale}")),
        // Retry of a job that is not failed or cancelled: 55000.
        bad(format!("SELECT jobs_retry({id})"), "55000", format!("job {id} is running")),
        bad(format!("SELECT jobs_retry({})", f.queued), "55000", format!("job {} is queued", f.queued)),
        bad(format!("SELECT jobs_retry({})", f.succeeded), "55000", format!("job {} is succeeded", f.succeeded)),
        // Dropping a busy or referenced queue: 55006.
        bad(format!("SELECT jobs_drop_queue('{q}')"), "55006", format!("queue '{q}' has 2 queued, running or waiting jobs")),
        bad(format!("SELECT jobs_drop_queue('{dl}')"), "55006", format!("queue '{dl}' is the dead-letter queue of queue '{q}'")),
        // Schedules: a bad expression, zone or catch_up is refused before anything is stored.
        bad(format!("SELECT jobs_schedule('bad', '0 25 * * *', '{q}')"), "22023", "cron '0 25 * * *' has an invalid hour field '25'"),
        bad(format!("SELECT jobs_schedule('bad', '0 0 30 2 *', '{q}')"), "22023", "never matches a time"),
        bad(format!("SELECT jobs_schedule('bad', '@daily', '{q}', timezone => 'Mars/Olympus_Mons')"), "22023", "timezone 'Mars/Olympus_Mons' is not a known IANA time zone"),
        bad(format!("SELECT jobs_schedule('bad', '@daily', '{q}', catch_up => 'sometimes')"), "22023", "catch_up must be 'latest', 'none' or 'all', got 'sometimes'"),
        bad(format!("SELECT jobs_schedule('', '@daily', '{q}')"), "22023", "name must be 1 to 255 bytes long, got 0 bytes"),
        bad(format!("SELECT jobs_schedule(NULL, '@daily', '{q}')"), "22004", "name must not be NULL"),
        bad("SELECT jobs_schedule('bad', '@daily', 'no-such-queue')", "42704", "queue 'no-such-queue' does not exist"),
        bad("SELECT jobs_cron_next('61 seconds')", "22023", "cron as an interval must be 1 to 59 seconds"),
        bad("SELECT jobs_cron_next('@daily', 'infinity')", "22023", "after must be a finite time"),
        bad("SELECT jobs_cron_next(NULL)", "22004", "cron must not be NULL"),
        bad("SELECT jobs_unschedule(NULL)", "22004", "name must not be NULL"),
    ];
    let uncovered = functions_without_bad_calls(&mut observer, &calls);
    assert!(
        uncovered.is_empty(),
        "these functions take arguments but no bad call here tries them: {uncovered:?}; add \
         their bad calls (rule 11 holds for every function)"
    );

    let mut failures = Vec::new();
    let mut table = String::new();
    for call in &calls {
        let verdict = check(cluster, &mut observer, call);
        let setup = if call.setup.is_empty() {
            String::new()
        } else {
            format!("{}; ", call.setup.join("; "))
        };
        let shown = format!("{setup}{}", call.sql)
            .replace(&payload, &format!("<{size}-byte payload>"))
            .replace(&lease.to_string(), "<lease>");
        table.push_str(&format!(
            "| {} | `{shown}` | {} |\n",
            call.sqlstate,
            if verdict.is_ok() { "ok" } else { "FAILED" }
        ));
        if let Err(problem) = verdict {
            failures.push(format!("{setup}{}\n    {problem}", call.sql));
        }
    }
    println!(
        "{} bad calls:\n| SQLSTATE | call | result |\n|---|---|---|\n{table}",
        calls.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} bad calls misbehaved:\n{}",
        failures.len(),
        calls.len(),
        failures.join("\n")
    );
}

/// The error a statement raises: (SQLSTATE, message, hint).
fn error_of(client: &mut Client, sql: &str) -> (String, String, Option<String>) {
    let error = client
        .batch_execute(sql)
        .expect_err(&format!("{sql} must fail"));
    let db = error
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: no server error: {error}"));
    (
        db.code().code().to_owned(),
        db.message().to_owned(),
        db.hint().map(str::to_owned),
    )
}

#[test]
fn error_messages_name_the_argument_and_the_range() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut client = cluster().connect();
    for (sql, sqlstate, message) in [
        (
            "SELECT * FROM jobs_claim('default', n => 0)",
            "22023",
            "n must be between 1 and 1000, got 0",
        ),
        (
            "SELECT * FROM jobs_claim('default', n => 1001)",
            "22023",
            "n must be between 1 and 1000, got 1001",
        ),
        (
            "SELECT * FROM jobs_list(\"limit\" => 0)",
            "22023",
            "limit must be between 1 and 10000, got 0",
        ),
        (
            "SELECT jobs_enqueue('default', priority => 40000)",
            "22023",
            "priority must be between -32768 and 32767, got 40000",
        ),
        (
            "SELECT jobs_enqueue('default', max_attempts => 0)",
            "22023",
            "max_attempts must be between 1 and 10000, got 0",
        ),
        (
            "SELECT jobs_create_queue('default', jitter => 1.5)",
            "22023",
            "jitter must be between 0 and 1, got 1.5",
        ),
        (
            "SELECT * FROM jobs_claim(NULL)",
            "22004",
            "queue must not be NULL",
        ),
        (
            "SELECT jobs_enqueue_batch('default', ARRAY['{}', '{}', NULL]::jsonb[])",
            "22004",
            "payloads[3] must not be NULL",
        ),
        (
            "SELECT jobs_enqueue('no-such-queue')",
            "42704",
            "queue 'no-such-queue' does not exist",
        ),
    ] {
        let (code, text, _) = error_of(&mut client, sql);
        assert_eq!((code.as_str(), text.as_str()), (sqlstate, message), "{sql}");
    }

    // Interval arguments name the argument, the range and the value given.
    let (code, text, _) = error_of(
        &mut client,
        "SELECT * FROM jobs_claim('default', lease => '-5 seconds')",
    );
    assert_eq!(code, "22023");
    for part in ["lease", "greater than 0", "7 days", "-00:00:05"] {
        assert!(text.contains(part), "{text:?} does not contain {part:?}");
    }

    // A bad queue name quotes the name it got.
    let (code, text, _) = error_of(&mut client, "SELECT jobs_pause('has space')");
    assert_eq!(code, "22023");
    assert!(
        text.starts_with("queue must be 1 to 63 characters"),
        "{text}"
    );
    assert!(text.contains("'has space'"), "{text}");

    // The unknown-queue error says how to create the queue.
    let (_, _, hint) = error_of(&mut client, "SELECT * FROM jobs_claim('no-such-queue')");
    assert_eq!(
        hint.as_deref(),
        Some("Create it with SELECT jobs_create_queue('no-such-queue');")
    );
}

#[test]
fn payload_limit_is_the_jsonb_size_to_the_byte() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut client = cluster().connect();
    let queue = pg_jobs_tests::unique_queue(&mut client, "payload-limit", "");
    let (payload, size) = sized_payload(&mut client);

    // At exactly the limit the payload goes in (rolled back: this test leaves nothing behind).
    client
        .batch_execute(&format!(
            "BEGIN; SET LOCAL pg_jobs.max_payload_bytes = {size}"
        ))
        .unwrap();
    let id: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, $2::text::jsonb)",
        &[&queue, &payload],
    );
    assert!(id > 0);
    client.batch_execute("ROLLBACK").unwrap();

    // One byte under it, the same payload is refused.
    client
        .batch_execute(&format!("SET pg_jobs.max_payload_bytes = {}", size - 1))
        .unwrap();
    let (code, text, hint) = error_of(
        &mut client,
        &format!("SELECT jobs_enqueue('{queue}', '{payload}')"),
    );
    assert_eq!(code, "54000");
    assert_eq!(
        text,
        format!(
            "payload is {size} bytes, above pg_jobs.max_payload_bytes ({} bytes)",
            size - 1
        )
    );
    assert!(hint.is_some_and(|h| h.contains("pg_jobs.max_payload_bytes")));
    let jobs = jobs_in(&mut client, &queue);
    assert_eq!(jobs, 0);
}

/// The inputs a new user found that broke pg_jobs (issue 9): each is refused with the SQLSTATE
/// and a message naming the argument, and changes nothing (tables and shared memory alike are
/// checked by [`check`]).
#[test]
fn odd_values_a_new_user_pastes_are_refused() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let mut observer = cluster.connect();
    let f = fixture(&mut observer, "odd-input");
    let (q, dl, stale) = (&f.queue, &f.dead_letter, f.stale);
    let (id, lease) = f.running;
    let worker_256 = "w".repeat(256);
    let progress = json!({ "pad": "x".repeat(300) }).to_string();

    #[rustfmt::skip]
    let calls = vec![
        // Times must be finite: an infinite run_at blinded monitoring or blocked a drop forever.
        bad(format!("SELECT jobs_enqueue('{q}', run_at => '-infinity')"), "22023", "run_at must be a finite time, got '-infinity'"),
        bad(format!("SELECT jobs_enqueue('{q}', run_at => 'infinity')"), "22023", "run_at must be a finite time, got 'infinity'"),
        bad(format!("SELECT jobs_enqueue_batch('{q}', ARRAY['{{}}']::jsonb[], run_at => '-infinity')"), "22023", "run_at must be a finite time"),
        bad(format!("SELECT jobs_retry({stale}, '-infinity')"), "22023", "run_at must be a finite time, got '-infinity'"),
        bad(format!("SELECT jobs_retry({stale}, 'infinity')"), "22023", "run_at must be a finite time, got 'infinity'"),
        // A chain of dead-letter queues that leads back to the queue.
        bad(format!("SELECT jobs_create_queue('{dl}', dead_letter => '{q}')"), "22023", format!("dead_letter '{q}' would make a cycle of dead-letter queues: {dl} -> {q} -> {dl}")),
        // Intervals judged by the timestamp they yield: a month is never "30 days" here, and
        // '-1 mon 27 days' lies 1 to 4 days in the past whatever today's date.
        bad(format!("SELECT * FROM jobs_claim('{q}', lease => '-1 mon 27 days')"), "22023", "lease must be greater than 0 and at most 7 days, got '-1 mons +27 days'"),
        bad(format!("SELECT jobs_create_queue('{q}', lease => '-1 mon 27 days')"), "22023", "lease must be greater than 0 and at most 7 days"),
        bad(format!("SELECT jobs_heartbeat({id}, '{lease}', extend => '-1 mon 27 days')"), "22023", "extend must be greater than 0 and at most 7 days"),
        bad(format!("SELECT * FROM jobs_claim('{q}', lease => '1 mon')"), "22023", "lease must be greater than 0 and at most 7 days, got '1 mon'"),
        bad(format!("SELECT jobs_fail({id}, '{lease}', 'boom', retry_in => '-1 mon 27 days')"), "22023", "retry_in must be at least 0 and at most 100 years"),
        bad(format!("SELECT jobs_create_queue('{q}', retention => '-1 year 300 days')"), "22023", "retention must be at least 0 and at most 100 years"),
        bad(format!("SELECT jobs_create_queue('{q}', backoff_max => '200 years')"), "22023", "backoff_max must be at least 0 and at most 100 years"),
        bad(format!("SELECT jobs_create_queue('{q}', retention => '36526 days')"), "22023", "retention must be at least 0 and at most 100 years, got '36526 days'"),
        // Cron's calendar starts at year 1: an earlier `after` answered 0001-01-01.
        bad("SELECT jobs_cron_next('* * * * *', '4713-01-01 BC')", "22023", "after must be a time from 0001-01-01 00:00:00+00 on, got '4713-"),
        bad(format!("SELECT jobs_create_queue('{q}', backoff_base => '1 minute', backoff_max => '30 seconds')"), "22023", "backoff_max must be at least backoff_base, got backoff_base '00:01:00' and backoff_max '00:00:30'"),
        // jobs.backoff_delay: the same ranges as the queue settings it serves.
        bad("SELECT jobs.backoff_delay('-1 second', '1 hour', 0.1, 1)", "22023", "base must be at least 0 and at most 100 years, got '-00:00:01'"),
        bad("SELECT jobs.backoff_delay('1 second', '1 hour', 5, 1)", "22023", "jitter must be between 0 and 1, got 5"),
        bad("SELECT jobs.backoff_delay('1 second', '1 hour', -5, 1)", "22023", "jitter must be between 0 and 1, got -5"),
        bad("SELECT jobs.backoff_delay('1 second', '1 hour', 'NaN', 1)", "22023", "jitter must be between 0 and 1, got NaN"),
        bad("SELECT jobs.backoff_delay('1000000 years', '2000000 years', 0, 100)", "22023", "base must be at least 0 and at most 100 years"),
        bad("SELECT jobs.backoff_delay('1 hour', '1 second', 0, 1)", "22023", "max must be at least base"),
        bad("SELECT jobs.backoff_delay('1 second', '1 hour', 0, 0)", "22023", "attempt must be at least 1, got 0"),
        // Bounded texts and values.
        bad(format!("SELECT * FROM jobs_claim('{q}', kinds => ARRAY[''])"), "22023", "kinds[1] must be 1 to 255 bytes long, got 0 bytes"),
        bad(format!("SELECT * FROM jobs_claim('{q}', kinds => ARRAY['a', NULL, repeat('k', 256)])"), "22023", "kinds[3] must be 1 to 255 bytes long, got 256 bytes"),
        bad(format!("SELECT jobs_enqueue('{q}', kind => '')"), "22023", "kind must be 1 to 255 bytes long, got 0 bytes"),
        bad(format!("SELECT * FROM jobs_claim('{q}', worker => '{worker_256}')"), "22023", "worker must be 1 to 255 bytes long, got 256 bytes"),
        bad(format!("SELECT * FROM jobs_claim('{q}', worker => '')"), "22023", "worker must be 1 to 255 bytes long, got 0 bytes"),
        bad(format!("SELECT jobs_heartbeat({id}, '{lease}', progress => '{progress}')"), "54000", "progress is")
            .after("SET pg_jobs.max_payload_bytes = 100"),
        bad(format!("SELECT jobs_complete({id}, '{lease}', '{progress}')"), "54000", "result is")
            .after("SET pg_jobs.max_payload_bytes = 100"),
        bad(format!("SELECT jobs_enqueue('{q}', headers => '{progress}')"), "54000", "headers is")
            .after("SET pg_jobs.max_payload_bytes = 100"),
        // The default queue exists: it cannot be dropped.
        bad("SELECT jobs_drop_queue('default')", "55000", "the default queue cannot be dropped"),
        bad("SELECT jobs_drop_queue('default', force => true)", "55000", "the default queue cannot be dropped"),
    ];
    let failures: Vec<String> = calls
        .iter()
        .filter_map(|call| {
            check(cluster, &mut observer, call)
                .err()
                .map(|problem| format!("{}\n    {problem}", call.sql))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} odd values misbehaved:\n{}",
        failures.len(),
        calls.len(),
        failures.join("\n")
    );
}

/// The documented bounds themselves are accepted: "at most 100 years" takes `'100 years'`
/// (36,524 or 36,525 days, as leap days fall), the lowest rate limit is one claim in about 32
/// years (and a waiting claim is not admitted before its token), and `jobs_cron_next` answers
/// from year 1 on.
#[test]
fn values_at_the_documented_bounds_are_accepted() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let mut client = cluster.connect();
    let f = fixture(&mut client, "bounds");
    let q = &f.queue;
    for sql in [
        format!("SELECT jobs_create_queue('{q}', retention => '100 years', backoff_max => '100 years')"),
        format!("SELECT jobs_create_queue('{q}', retention => '36525 days')"),
        format!("SELECT jobs_enqueue('{q}', unique_key => 'bounds', unique_for => '100 years')"),
        "SELECT * FROM jobs_idempotency_save('bounds', ttl => '100 years', pending_for => '100 years')".to_owned(),
        "SELECT jobs.backoff_delay('100 years', '100 years', 0, 1)".to_owned(),
        "SELECT jobs_cron_next('* * * * *', '0001-01-01 00:00:00+00')".to_owned(),
    ] {
        client
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    let (id, lease) = f.running;
    let outcome: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, 'later', retry_in => '100 years')",
        &[&id, &lease],
    );
    assert_eq!(outcome, "queued");
    let first_slot: String = scalar(
        &mut client,
        "SELECT jobs_cron_next('* * * * *', '0001-01-01 00:00:00+00')::text",
        &[],
    );
    assert!(
        first_slot.starts_with("0001-01-01 00:01:00"),
        "{first_slot}"
    );

    let slow =
        pg_jobs_tests::unique_queue(&mut client, "slowest-rate", "rate_limit => 0.000000001");
    for n in 0..2 {
        enqueue(&mut client, &slow, json!({ "n": n }));
    }
    let claimed = |client: &mut Client, wait: &str| -> i64 {
        scalar(
            client,
            &format!("SELECT count(*) FROM jobs_claim($1, n => 2, wait => '{wait}')"),
            &[&slow],
        )
    };
    assert_eq!(
        claimed(&mut client, "0"),
        1,
        "the bucket starts with one token"
    );
    assert_eq!(
        claimed(&mut client, "2 seconds"),
        0,
        "the next token is 32 years away"
    );
}

/// An accepted interval with months is applied exactly as it was judged: a lease of
/// `'1 mon -27 days'` (1 to 4 days, depending on the month) ends that long after the claim,
/// never in the past.
#[test]
fn a_lease_with_months_ends_as_long_after_the_claim_as_it_was_judged() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut client = cluster().connect();
    let queue = pg_jobs_tests::unique_queue(&mut client, "month-lease", "");
    enqueue(&mut client, &queue, json!({}));
    let held = claim(&mut client, &queue, 1, ", lease => '1 mon -27 days'");
    assert_eq!(held.len(), 1);
    let (length_ok, future): (bool, bool) = row(
        &mut client,
        "SELECT lease_until - started_at = (started_at + interval '1 mon -27 days') - started_at,
                        lease_until > now() + interval '1 day'
                   FROM jobs.job WHERE id = $1",
        &[&held[0].id],
    );
    assert!(
        length_ok,
        "lease_until must be the claim time plus the lease as the server applies it"
    );
    assert!(future, "an accepted lease never ends in the past");
}

/// Texts pg_jobs must never refuse (a worker's error message) are kept cut to their limit.
#[test]
fn long_error_and_reason_texts_are_kept_cut_to_their_limits() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut client = cluster().connect();
    let queue = pg_jobs_tests::unique_queue(&mut client, "long-texts", "");
    let id = enqueue(&mut client, &queue, json!({}));
    let held = claim(&mut client, &queue, 1, "");
    let error = "e".repeat(1_000_000);
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_fail($1, $2, $3, retry_in => '0')",
        &[&id, &held[0].lease, &error],
    );
    assert_eq!(answer, "queued");
    let kept: String = scalar(
        &mut client,
        "SELECT errors -> -1 ->> 'error' FROM jobs.job WHERE id = $1",
        &[&id],
    );
    assert!(
        kept.len() <= 8 * 1024,
        "kept {} bytes of the error",
        kept.len()
    );
    assert!(kept.starts_with("eeee") && kept.ends_with("more bytes cut by pg_jobs]"));
    let held = claim(&mut client, &queue, 1, "");
    let answer: String = scalar(
        &mut client,
        "SELECT jobs_release($1, $2, $3)",
        &[&id, &held[0].lease, &"r".repeat(100_000)],
    );
    assert_eq!(answer, "queued");
    let reason_bytes: i32 = scalar(
        &mut client,
        "SELECT octet_length(release_reason) FROM jobs.job WHERE id = $1",
        &[&id],
    );
    assert!(
        reason_bytes <= 1024,
        "kept {reason_bytes} bytes of the reason"
    );
}

/// One row with infinite times (written behind the functions' back, or by an older version)
/// must not make monitoring fail for every queue.
#[test]
fn monitoring_survives_a_row_with_infinite_times() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut client = cluster().connect();
    let queue = pg_jobs_tests::unique_queue(&mut client, "infinite-row", "");
    let ids: Vec<i64> = ["-infinity", "infinity"]
        .iter()
        .map(|at| {
            scalar(
                &mut client,
                &format!(
                    "INSERT INTO jobs.job (queue, max_attempts, run_at) VALUES ($1, 5, '{at}') RETURNING id"
                ),
                &[&queue],
            )
        })
        .collect();
    let ready: i64 = scalar(
        &mut client,
        "SELECT ready FROM jobs.queue_stats WHERE queue = $1",
        &[&queue],
    );
    assert_eq!(
        ready, 1,
        "the -infinity job is ready; the view still answers"
    );
    let metrics: String = scalar(&mut client, "SELECT jobs_metrics()", &[]);
    assert!(metrics.contains(&format!(
        "pg_jobs_queue_jobs{{queue=\"{queue}\",state=\"scheduled\"}} 1"
    )));
    client
        .execute("DELETE FROM jobs.job WHERE id = ANY($1)", &[&ids])
        .unwrap();
}

/// Expected errors are sentences, never Rust backtraces, whatever the server's environment
/// (`RUST_BACKTRACE=1` is set on these machines): neither pg_jobs's own errors nor
/// PostgreSQL's errors raised inside pg_jobs's statements carry one, and pg_jobs's own errors
/// point at the code that raised them, not at the error helper.
#[test]
fn errors_carry_no_backtrace_whatever_the_environment() {
    let cluster = Cluster::start_with_env(
        "backtrace",
        pg_jobs_tests::TEST_SETTINGS,
        &[("RUST_BACKTRACE", "1")],
    );
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE EXTENSION pg_jobs;
             SELECT jobs_create_queue('bt');
             CREATE ROLE nobody LOGIN;",
        )
        .unwrap();
    let cases: [(&str, &str, &str); 3] = [
        ("SELECT * FROM jobs_claim('bt', n => 0)", "22023", ""),
        (
            "SELECT * FROM jobs_claim('bt', wait => '5 seconds')",
            "57014",
            "SET statement_timeout = '200ms'",
        ),
        ("SELECT jobs_enqueue('bt')", "42501", "SET ROLE nobody"),
    ];
    for (sql, sqlstate, setup) in cases {
        let mut client = cluster.connect();
        if !setup.is_empty() {
            client.batch_execute(setup).unwrap();
        }
        let error = client.batch_execute(sql).expect_err(sql);
        let db = error.as_db_error().expect("a server error");
        assert_eq!(db.code().code(), sqlstate, "{sql}: {}", db.message());
        let detail = db.detail().unwrap_or_default();
        assert!(
            !detail.contains("backtrace")
                && !detail.contains("rust_begin_unwind")
                && !detail.contains("  0: "),
            "{sql}: DETAIL carries a backtrace:\n{detail}"
        );
        if sqlstate == "22023" {
            let file = db.file().unwrap_or_default();
            assert!(
                !file.ends_with("errors.rs"),
                "{sql}: LOCATION points at the error helper ({file}:{:?})",
                db.line()
            );
        }
    }
}
