//! Idempotency records (README "Idempotency records"), over real connections: one save wins a
//! key however many race for it, live pending records conflict, finished and expired ones are
//! replaced, dead pending ones are taken over and their late holder's update changes nothing,
//! fingerprints tell a reused key from a retry, reads treat expired records as absent by the
//! server's clock, scopes and keys never collide, tenants keep their records apart, bad input
//! changes nothing, and the background worker purges expired records in bounded batches
//! without slowing down saves and reads.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use pg_jobs_tests::{
    column, plan_buffers, row, scalar, wait_until, Client, Cluster, ExplainingSession,
};
use postgres::types::ToSql;
use serde_json::{json, Value};

/// A key no other test uses.
fn unique_key(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The shared cluster, with the login roles the tenant tests use: `idem_acme` and
/// `idem_globex` (clients granted their tenant), `idem_client` (a client without tenants),
/// `idem_worker` (a worker without tenants) and `idem_nobody` (no pg_jobs role).
fn cluster() -> &'static Cluster {
    static ROLES: OnceLock<()> = OnceLock::new();
    let cluster = Cluster::shared();
    ROLES.get_or_init(|| {
        cluster
            .connect()
            .batch_execute(
                "CREATE ROLE idem_acme LOGIN;   GRANT jobs_client TO idem_acme;
                 CREATE ROLE idem_globex LOGIN; GRANT jobs_client TO idem_globex;
                 CREATE ROLE idem_client LOGIN; GRANT jobs_client TO idem_client;
                 CREATE ROLE idem_worker LOGIN; GRANT jobs_worker TO idem_worker;
                 CREATE ROLE idem_nobody LOGIN;
                 SELECT jobs_grant_tenant('idem_acme', 'acme');
                 SELECT jobs_grant_tenant('idem_globex', 'globex');",
            )
            .expect("create the test roles");
    });
    cluster
}

/// What a successful save returned.
#[derive(Debug)]
struct Saved {
    outcome: String,
    token: uuid::Uuid,
}

/// A save with extra SQL arguments (", fingerprint => 'f'"); the error when it is refused.
fn try_save(client: &mut Client, key: &str, extra: &str) -> Result<Saved, postgres::Error> {
    client
        .query_one(
            &format!("SELECT outcome, token FROM jobs_idempotency_save($1{extra})"),
            &[&key],
        )
        .map(|row| Saved {
            outcome: row.get(0),
            token: row.get(1),
        })
}

fn save(client: &mut Client, key: &str, extra: &str) -> Saved {
    try_save(client, key, extra).unwrap_or_else(|e| {
        let (code, message) = refusal(&e);
        panic!("save {key}{extra}: {code} {message}")
    })
}

/// The SQLSTATE and message of a refused call.
fn refusal(error: &postgres::Error) -> (String, String) {
    let db = error
        .as_db_error()
        .unwrap_or_else(|| panic!("no server error: {error}"));
    (db.code().code().to_owned(), db.message().to_owned())
}

/// The SQLSTATE and message of the error `sql` raises.
fn refused(client: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> (String, String) {
    let error = client
        .query(sql, params)
        .expect_err(&format!("{sql} must be refused"));
    refusal(&error)
}

fn update(
    client: &mut Client,
    key: &str,
    status: &str,
    response: Value,
    token: uuid::Uuid,
) -> String {
    scalar(
        client,
        "SELECT jobs_idempotency_update($1, $2, $3, token => $4)",
        &[&key, &status, &response, &token],
    )
}

/// Deletes the record of `key` held with `token`; whether there was one to delete.
fn delete(client: &mut Client, key: &str, token: uuid::Uuid) -> bool {
    scalar(
        client,
        "SELECT jobs_idempotency_delete($1, token => $2)",
        &[&key, &token],
    )
}

/// The live record of `key` (default scope) as (status, response), if any.
fn get(client: &mut Client, key: &str) -> Option<(String, Option<Value>)> {
    client
        .query_opt(
            "SELECT status, response FROM jobs_idempotency_get($1)",
            &[&key],
        )
        .expect("get")
        .map(|row| (row.get(0), row.get(1)))
}

/// Every stored record of `key` as JSON, read as the superuser (every tenant's, expired ones
/// too).
fn stored(key: &str) -> Value {
    scalar(
        &mut cluster().connect(),
        "SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.tenant, r.scope), '[]')
           FROM jobs.idempotency r WHERE r.key = $1",
        &[&key],
    )
}

#[test]
fn of_32_concurrent_saves_of_one_key_exactly_one_wins() {
    const SAVERS: usize = 32;
    let cluster = cluster();
    for round in 0..3 {
        let key = unique_key("race");
        let barrier = Barrier::new(SAVERS);
        let outcomes: Vec<Result<String, (String, String)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..SAVERS)
                .map(|_| {
                    let (key, barrier) = (&key, &barrier);
                    s.spawn(move || {
                        let mut client = cluster.connect();
                        barrier.wait();
                        // Each winner keeps its transaction open a moment, so the others
                        // queue behind an uncommitted record as well as a committed one.
                        let mut tx = client.transaction().unwrap();
                        let saved = tx.query_one(
                            "SELECT outcome FROM jobs_idempotency_save($1, fingerprint => 'same')",
                            &[key],
                        );
                        match saved {
                            Ok(row) => {
                                std::thread::sleep(Duration::from_millis(50));
                                tx.commit().unwrap();
                                Ok(row.get::<_, String>(0))
                            }
                            Err(e) => Err(refusal(&e)),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        assert_eq!(
            winners,
            [&"created".to_owned()],
            "round {round}: exactly one save takes the key: {outcomes:?}"
        );
        for outcome in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert_eq!(
                outcome.0, "55P03",
                "round {round}: a loser's error: {outcome:?}"
            );
            assert!(
                outcome.1.contains(&key),
                "the conflict names the key: {}",
                outcome.1
            );
        }
        assert_eq!(stored(&key).as_array().unwrap().len(), 1);
    }
}

#[test]
fn of_32_concurrent_takeovers_of_a_dead_request_exactly_one_wins() {
    const SAVERS: usize = 32;
    let cluster = cluster();
    let key = unique_key("takeover-race");
    let mut client = cluster.connect();
    let dead = save(&mut client, &key, ", pending_for => '100 ms'");
    std::thread::sleep(Duration::from_millis(300));
    let barrier = Barrier::new(SAVERS);
    let outcomes: Vec<Result<String, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..SAVERS)
            .map(|_| {
                let (key, barrier) = (&key, &barrier);
                s.spawn(move || {
                    let mut client = cluster.connect();
                    barrier.wait();
                    try_save(&mut client, key, "")
                        .map(|saved| saved.outcome)
                        .map_err(|e| refusal(&e).0)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    assert_eq!(winners, [&"taken_over".to_owned()], "{outcomes:?}");
    assert!(outcomes
        .iter()
        .filter_map(|o| o.as_ref().err())
        .all(|code| code == "55P03"));
    assert_eq!(
        update(&mut client, &key, "completed", json!(1), dead.token),
        "lost"
    );
}

#[test]
fn a_live_pending_record_conflicts_and_a_finished_one_is_replaced() {
    let mut client = cluster().connect();
    let key = unique_key("lifecycle");
    let first = save(&mut client, &key, ", fingerprint => 'POST /pay 42'");
    assert_eq!(first.outcome, "created");
    assert_eq!(get(&mut client, &key), Some(("pending".to_owned(), None)));

    // While the request runs, a duplicate conflicts, with or without a fingerprint.
    for extra in [
        ", fingerprint => 'POST /pay 42'",
        "",
        ", fingerprint => 'other'",
    ] {
        let error =
            try_save(&mut client, &key, extra).expect_err("a live pending record conflicts");
        let (code, message) = refusal(&error);
        assert_eq!(code, "55P03", "{extra}: {message}");
        assert!(
            message.contains("pending") && message.contains(&key),
            "{message}"
        );
    }

    // The request finishes; a later duplicate reads the stored response.
    let response = json!({"status": 201, "body": {"payment": 42}});
    assert_eq!(
        update(
            &mut client,
            &key,
            "completed",
            response.clone(),
            first.token
        ),
        "updated"
    );
    assert_eq!(
        get(&mut client, &key),
        Some(("completed".to_owned(), Some(response)))
    );

    // A save of the same request replaces the finished record with a new pending one.
    let again = save(&mut client, &key, ", fingerprint => 'POST /pay 42'");
    assert_eq!(again.outcome, "replaced");
    assert_ne!(again.token, first.token, "every save mints a new token");
    assert_eq!(get(&mut client, &key), Some(("pending".to_owned(), None)));
    assert_eq!(
        update(&mut client, &key, "failed", json!(null), first.token),
        "lost",
        "the first holder's token no longer names the record"
    );
    assert_eq!(
        update(
            &mut client,
            &key,
            "failed",
            json!({"error": "timeout"}),
            again.token
        ),
        "updated"
    );
    // A failed record is finished too: a retry of the request replaces it.
    assert_eq!(
        save(&mut client, &key, ", fingerprint => 'POST /pay 42'").outcome,
        "replaced"
    );
}

#[test]
fn a_finished_record_saved_with_another_fingerprint_is_a_mismatch() {
    let mut client = cluster().connect();
    let key = unique_key("mismatch");
    let first = save(&mut client, &key, ", fingerprint => 'sha256:aaa'");
    update(
        &mut client,
        &key,
        "completed",
        json!({"status": 200}),
        first.token,
    );
    let before = stored(&key);
    // Another fingerprint, and no fingerprint at all, are another request.
    for extra in [", fingerprint => 'sha256:bbb'", ""] {
        let error = try_save(&mut client, &key, extra).expect_err("a mismatch");
        let (code, message) = refusal(&error);
        assert_eq!(code, "23000", "{extra}: {message}");
        assert!(
            message.contains("different request") && message.contains(&key),
            "{message}"
        );
        assert_eq!(stored(&key), before, "a mismatch replaced the record");
    }

    // Records saved without a fingerprint match saves without one.
    let plain = unique_key("no-fingerprint");
    let first = save(&mut client, &plain, "");
    update(&mut client, &plain, "completed", json!({}), first.token);
    assert_eq!(save(&mut client, &plain, "").outcome, "replaced");
    let plain = unique_key("no-fingerprint");
    let first = save(&mut client, &plain, "");
    update(&mut client, &plain, "completed", json!({}), first.token);
    let (code, _) = refusal(&try_save(&mut client, &plain, ", fingerprint => 'f'").unwrap_err());
    assert_eq!(
        code, "23000",
        "a record without fingerprint is not any request's"
    );
}

#[test]
fn a_pending_record_past_its_pending_for_is_taken_over_and_the_late_original_changes_nothing() {
    let mut original = cluster().connect();
    let mut retry = cluster().connect();
    let key = unique_key("dead");
    let started = Instant::now();
    let first = save(&mut original, &key, ", pending_for => '3 seconds'");

    // The original is alive and says so: a pending update renews the window.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        update(
            &mut original,
            &key,
            "pending",
            json!({"step": 1}),
            first.token
        ),
        "updated"
    );
    let renewed = Instant::now();
    sleep_until(started + Duration::from_millis(3500));
    let (code, _) = refusal(&try_save(&mut retry, &key, "").unwrap_err());
    assert_eq!(code, "55P03", "a renewed pending record is not taken over");

    // Then it goes quiet past its pending_for: the retry takes the key over.
    sleep_until(renewed + Duration::from_millis(3300));
    let second = save(&mut retry, &key, ", pending_for => '1 hour'");
    assert_eq!(second.outcome, "taken_over");
    let taken = stored(&key);

    // The late original finishes after all: its update and delete change nothing, and say so.
    assert_eq!(
        update(
            &mut original,
            &key,
            "completed",
            json!({"late": true}),
            first.token
        ),
        "lost"
    );
    assert!(!delete(&mut original, &key, first.token));
    assert_eq!(
        stored(&key),
        taken,
        "the late original changed its successor's record"
    );

    // The record is the retry's: it finishes it.
    assert_eq!(
        update(
            &mut retry,
            &key,
            "completed",
            json!({"who": "retry"}),
            second.token
        ),
        "updated"
    );
    assert_eq!(
        get(&mut original, &key),
        Some(("completed".to_owned(), Some(json!({"who": "retry"}))))
    );

    // Without pending_for, a pending record is never taken over before it expires.
    let forever = unique_key("no-pending-for");
    save(&mut original, &forever, ", ttl => '1 hour'");
    std::thread::sleep(Duration::from_millis(200));
    let (code, message) = refusal(&try_save(&mut retry, &forever, "").unwrap_err());
    assert_eq!(code, "55P03");
    assert!(message.contains("expires at"), "{message}");
}

fn sleep_until(at: Instant) {
    if let Some(left) = at.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

/// Rule 10: expiry is judged by the server's clock at each call, not by the transaction's
/// start, and an expired record is absent before any purge could have run (here the record is
/// not even committed, so no other session could purge it).
#[test]
fn reads_treat_an_expired_record_as_absent_by_the_servers_clock_at_the_call() {
    let mut client = cluster().connect();
    let key = unique_key("expiry");
    let mut tx = client.transaction().unwrap();
    let first: uuid::Uuid = scalar(
        &mut tx,
        "SELECT token FROM jobs_idempotency_save($1, ttl => '1 second', fingerprint => 'f')",
        &[&key],
    );
    let live: i64 = scalar(
        &mut tx,
        "SELECT count(*) FROM jobs_idempotency_get($1)",
        &[&key],
    );
    assert_eq!(live, 1);
    std::thread::sleep(Duration::from_millis(1200));
    // now() is still the transaction's start, a second before the record expired.
    let row = tx
        .query_one(
            "SELECT (SELECT count(*) FROM jobs_idempotency_get($1)),
                    (SELECT count(*) FROM jobs.idempotency WHERE key = $1),
                    (SELECT expires_at > now() FROM jobs.idempotency WHERE key = $1)",
            &[&key],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 0, "get shows an expired record");
    assert_eq!(row.get::<_, i64>(1), 1, "the record is still stored");
    assert!(
        row.get::<_, bool>(2),
        "by the transaction's now() it has not expired"
    );
    let outcome: String = scalar(
        &mut tx,
        "SELECT jobs_idempotency_update($1, 'completed', token => $2)",
        &[&key, &first],
    );
    assert_eq!(outcome, "lost", "update changed an expired record");
    // An expired record is replaced whatever its fingerprint and status.
    let saved: String = scalar(
        &mut tx,
        "SELECT outcome FROM jobs_idempotency_save($1, fingerprint => 'another')",
        &[&key],
    );
    assert_eq!(saved, "replaced_expired");
    tx.commit().unwrap();

    // A finished record that expired is no mismatch: it is replaced (or, when the worker
    // purged it first, the key is simply free).
    let key = unique_key("expiry-finished");
    let first = save(&mut client, &key, ", ttl => '1 second', fingerprint => 'a'");
    update(&mut client, &key, "completed", json!({}), first.token);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(get(&mut client, &key), None);
    let outcome = save(&mut client, &key, ", fingerprint => 'b'").outcome;
    assert!(
        outcome == "replaced_expired" || outcome == "created",
        "{outcome}"
    );
}

#[test]
fn get_returns_the_whole_record_as_the_transaction_sees_it() {
    // get reads the record through its key's index without a statement: what it returns must
    // be the row as a statement of the caller's transaction would see it, a response stored
    // out of line (TOAST) included.
    let cluster = cluster();
    let mut client = cluster.connect();
    let key = unique_key("whole");
    let big: String = (0..60_000u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect();
    let response = json!({"status": 200, "body": big});
    let saved = save(&mut client, &key, ", fingerprint => 'f-whole'");
    assert_eq!(
        update(
            &mut client,
            &key,
            "completed",
            response.clone(),
            saved.token
        ),
        "updated"
    );
    // 60 kB: far above the ~2 kB at which PostgreSQL compresses a row's values or moves them
    // out of line.
    let row = client
        .query_one(
            "SELECT status, response, fingerprint, created_at = updated_at OR created_at < updated_at,
                    expires_at > now()
               FROM jobs_idempotency_get($1)",
            &[&key],
        )
        .expect("get the record");
    assert_eq!(row.get::<_, String>(0), "completed");
    assert_eq!(row.get::<_, Value>(1), response);
    assert_eq!(row.get::<_, Option<String>>(2).as_deref(), Some("f-whole"));
    assert!(row.get::<_, bool>(3) && row.get::<_, bool>(4));

    // Inside a transaction: its own save is visible to its get; another session sees
    // nothing until it commits, and a rolled-back save never.
    let fresh = unique_key("in-transaction");
    let mut other = cluster.connect();
    let mut transaction = client.transaction().expect("begin");
    transaction
        .query_one("SELECT jobs_idempotency_save($1)", &[&fresh])
        .expect("save in the transaction");
    let own: i64 = transaction
        .query_one("SELECT count(*) FROM jobs_idempotency_get($1)", &[&fresh])
        .expect("get in the transaction")
        .get(0);
    assert_eq!(own, 1, "a transaction's own record is visible to its get");
    assert_eq!(
        get(&mut other, &fresh),
        None,
        "an uncommitted record is visible"
    );
    transaction.rollback().expect("roll back");
    assert_eq!(get(&mut other, &fresh), None);
    assert_eq!(get(&mut client, &fresh), None);
}

#[test]
fn scopes_and_keys_never_collide() {
    let mut client = cluster().connect();
    let tag = unique_key("sep");
    // Pairs that a joined "scope + separator + key" would confuse, separators included.
    let pairs: Vec<(Option<String>, String)> = vec![
        (Some("a".into()), format!("bc{tag}")),
        (Some("ab".into()), format!("c{tag}")),
        (Some("a:b".into()), format!("c{tag}")),
        (Some("a".into()), format!("b:c{tag}")),
        (Some("a/b".into()), format!("c{tag}")),
        (Some("a|".into()), format!("|c{tag}")),
        (Some("a\\".into()), format!("c{tag}")),
        (Some("a".into()), format!("\\c{tag}")),
        (None, format!("abc{tag}")),
        (Some("abc".into()), tag.clone()),
        (Some("a ".into()), format!("bc{tag}")),
    ];
    let mut tokens = Vec::new();
    for (i, (scope, key)) in pairs.iter().enumerate() {
        let row = client
            .query_one(
                "SELECT outcome, token FROM jobs_idempotency_save($1, scope => $2, status => 'completed', response => $3)",
                &[key, scope, &json!(i)],
            )
            .unwrap();
        assert_eq!(
            row.get::<_, String>(0),
            "created",
            "{scope:?} + {key:?} collided"
        );
        tokens.push(row.get::<_, uuid::Uuid>(1));
    }
    for (i, (scope, key)) in pairs.iter().enumerate() {
        let response: Value = scalar(
            &mut client,
            "SELECT response FROM jobs_idempotency_get($1, $2)",
            &[key, scope],
        );
        assert_eq!(
            response,
            json!(i),
            "{scope:?} + {key:?} read another pair's record"
        );
    }
    // NULL and '' are the same, default scope.
    let key = unique_key("default-scope");
    save(&mut client, &key, ", scope => NULL");
    let (code, _) = refused(
        &mut client,
        "SELECT * FROM jobs_idempotency_save($1, scope => '')",
        &[&key],
    );
    assert_eq!(code, "55P03");
    // A delete in one scope leaves the other scopes' records.
    let deleted: bool = scalar(
        &mut client,
        "SELECT jobs_idempotency_delete($1, 'a')",
        &[&pairs[0].1],
    );
    assert!(deleted);
    let left: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.idempotency WHERE key LIKE '%' || $1",
        &[&tag],
    );
    assert_eq!(left as usize, pairs.len() - 1);
}

#[test]
fn tenants_keep_their_records_apart() {
    let cluster = cluster();
    let mut acme = cluster.connect_as("idem_acme");
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let mut globex = cluster.connect_as("idem_globex");
    globex
        .batch_execute("SET pg_jobs.tenant = 'globex'")
        .unwrap();
    let mut plain = cluster.connect_as("idem_client");
    let key = unique_key("tenant");

    let acme_saved = save(&mut acme, &key, ", fingerprint => 'acme'");
    let globex_saved = save(&mut globex, &key, ", fingerprint => 'globex'");
    let plain_saved = save(&mut plain, &key, ", fingerprint => 'plain'");
    for saved in [&acme_saved, &globex_saved, &plain_saved] {
        assert_eq!(
            saved.outcome, "created",
            "one tenant's key is another's too"
        );
    }
    update(
        &mut acme,
        &key,
        "completed",
        json!("acme's"),
        acme_saved.token,
    );
    let before = stored(&key);
    assert_eq!(
        before
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["tenant"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["", "acme", "globex"]
    );

    // globex cannot read, update or delete acme's record, even with its token.
    let fingerprint: String = scalar(
        &mut globex,
        "SELECT fingerprint FROM jobs_idempotency_get($1)",
        &[&key],
    );
    assert_eq!(fingerprint, "globex");
    assert_eq!(
        update(&mut globex, &key, "failed", json!(null), acme_saved.token),
        "lost"
    );
    assert!(!delete(&mut globex, &key, acme_saved.token));
    assert_eq!(
        stored(&key),
        before,
        "globex changed another tenant's record"
    );

    // Direct reads show each session its tenant's records; a client without a tenant the
    // records without one; a worker without a tenant every record (the shared pool).
    for (client, expected) in [
        (&mut acme, vec!["acme"]),
        (&mut globex, vec!["globex"]),
        (&mut plain, vec![""]),
        (
            &mut cluster.connect_as("idem_worker"),
            vec!["", "acme", "globex"],
        ),
    ] {
        let seen: Vec<String> = column(
            client,
            "SELECT tenant FROM jobs.idempotency WHERE key = $1 ORDER BY tenant",
            &[&key],
        );
        assert_eq!(seen, expected);
    }
    // A worker without a tenant acts on the records without one.
    let mut worker = cluster.connect_as("idem_worker");
    let fingerprint: String = scalar(
        &mut worker,
        "SELECT fingerprint FROM jobs_idempotency_get($1)",
        &[&key],
    );
    assert_eq!(fingerprint, "plain");
}

#[test]
fn a_session_of_several_or_ungranted_tenants_names_no_record() {
    let cluster = cluster();
    let key = unique_key("tenants");
    let mut acme = cluster.connect_as("idem_acme");
    acme.batch_execute("SET pg_jobs.tenant = 'globex'").unwrap();
    let (code, message) = refused(&mut acme, "SELECT * FROM jobs_idempotency_get($1)", &[&key]);
    assert_eq!(code, "42501", "{message}");
    let mut superuser = cluster.connect();
    superuser
        .batch_execute("SET pg_jobs.tenant = 'acme, globex'")
        .unwrap();
    for sql in [
        "SELECT * FROM jobs_idempotency_save($1)",
        "SELECT * FROM jobs_idempotency_get($1)",
        "SELECT jobs_idempotency_update($1, 'completed', token => gen_random_uuid())",
        "SELECT jobs_idempotency_delete($1)",
    ] {
        let (code, message) = refused(&mut superuser, sql, &[&key]);
        assert_eq!(code, "22023", "{sql}: {message}");
        assert!(message.contains("one tenant"), "{message}");
    }
    assert_eq!(stored(&key), json!([]));
}

#[test]
fn records_are_client_powers_and_written_only_through_the_functions() {
    let cluster = cluster();
    let key = unique_key("roles");
    let mut nobody = cluster.connect_as("idem_nobody");
    for sql in [
        "SELECT * FROM jobs_idempotency_save($1)",
        "SELECT * FROM jobs_idempotency_get($1)",
        "SELECT jobs_idempotency_update($1, 'completed', token => gen_random_uuid())",
        "SELECT jobs_idempotency_delete($1)",
    ] {
        let error = nobody.query(sql, &[&key]).expect_err(sql);
        let db = error.as_db_error().unwrap();
        assert_eq!(db.code().code(), "42501", "{sql}: {}", db.message());
        assert!(
            db.hint().unwrap_or("").contains("jobs_client"),
            "{sql}: {:?}",
            db.hint()
        );
    }
    let mut client = cluster.connect_as("idem_client");
    let saved = save(&mut client, &key, "");
    let before = stored(&key);
    for sql in [
        "INSERT INTO jobs.idempotency (key, status, token, save_outcome, created_at, updated_at, expires_at)
              VALUES ($1, 'completed', gen_random_uuid(), 'created', now(), now(), now())",
        "UPDATE jobs.idempotency SET status = 'completed' WHERE key = $1",
        "DELETE FROM jobs.idempotency WHERE key = $1",
    ] {
        let (code, message) = refused(&mut client, sql, &[&key]);
        assert_eq!(code, "42501", "{sql}: {message}");
    }
    assert_eq!(stored(&key), before);
    assert_eq!(
        update(&mut client, &key, "completed", json!({}), saved.token),
        "updated"
    );
}

#[test]
fn bad_input_is_refused_naming_the_argument_and_changes_nothing() {
    let mut client = cluster().connect();
    let key = unique_key("bad");
    let saved = save(&mut client, &key, ", fingerprint => 'f'");
    let long_key = "k".repeat(256);
    let big = json!({ "blob": "x".repeat(1024 * 1024) });
    let token = saved.token;
    let cases: Vec<(&str, Vec<&(dyn ToSql + Sync)>, &str, &str)> = vec![
        (
            "SELECT * FROM jobs_idempotency_save(NULL)",
            vec![],
            "22004",
            "key",
        ),
        (
            "SELECT * FROM jobs_idempotency_save('')",
            vec![],
            "22023",
            "key",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1)",
            vec![&long_key],
            "22023",
            "key",
        ),
        (
            "SELECT * FROM jobs_idempotency_get($1)",
            vec![&long_key],
            "22023",
            "key",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, scope => repeat('s', 256))",
            vec![&key],
            "22023",
            "scope",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, status => 'done')",
            vec![&key],
            "22023",
            "status",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, status => NULL)",
            vec![&key],
            "22004",
            "status",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, ttl => '-1 second')",
            vec![&key],
            "22023",
            "ttl",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, ttl => '0')",
            vec![&key],
            "22023",
            "ttl",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, ttl => '1 mon -31 days')",
            vec![&key],
            "22023",
            "ttl",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, ttl => '200 years')",
            vec![&key],
            "22023",
            "ttl",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, ttl => '1000000 years')",
            vec![&key],
            "22023",
            "ttl",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, ttl => NULL)",
            vec![&key],
            "22004",
            "ttl",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, pending_for => '-1 second')",
            vec![&key],
            "22023",
            "pending_for",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, fingerprint => '')",
            vec![&key],
            "22023",
            "fingerprint",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, fingerprint => repeat('f', 1025))",
            vec![&key],
            "22023",
            "fingerprint",
        ),
        (
            "SELECT * FROM jobs_idempotency_save($1, 'completed', $2)",
            vec![&key, &big],
            "54000",
            "response",
        ),
        (
            "SELECT jobs_idempotency_update($1, 'completed', $2, token => $3)",
            vec![&key, &big, &token],
            "54000",
            "response",
        ),
        (
            "SELECT jobs_idempotency_update($1, 'finished', token => $2)",
            vec![&key, &token],
            "22023",
            "status",
        ),
        (
            "SELECT jobs_idempotency_update($1, 'completed', ttl => '-1 day', token => $2)",
            vec![&key, &token],
            "22023",
            "ttl",
        ),
        (
            "SELECT jobs_idempotency_update($1, 'completed')",
            vec![&key],
            "22004",
            "token",
        ),
        (
            "SELECT jobs_idempotency_update(NULL, 'completed', token => $1)",
            vec![&token],
            "22004",
            "key",
        ),
        ("SELECT jobs_idempotency_delete('')", vec![], "22023", "key"),
    ];
    let before = stored(&key);
    for (sql, params, code, argument) in cases {
        let (got, message) = refused(&mut client, sql, &params);
        assert_eq!(got, code, "{sql}: {message}");
        assert!(
            message.starts_with(argument),
            "{sql}: the message must name {argument}: {message}"
        );
        assert_eq!(stored(&key), before, "{sql} changed the record");
    }
    let too_long: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.idempotency WHERE octet_length(key) > 255",
        &[],
    );
    assert_eq!(too_long, 0);
}

/// The worker purges expired records in bounded batches: a tick deletes at most 50,000, so
/// N records take at least N / 50,000 ticks, and not many more. While they are there, saves
/// and reads of other keys touch as few buffers as on an empty table. Records:
/// `PG_JOBS_IDEMPOTENCY_RECORDS` (default 120,000; the README quotes a run with 1,000,000).
#[test]
fn the_worker_purges_expired_records_in_bounded_batches_without_slowing_saves() {
    const PER_TICK: i64 = 50_000;
    let records: i64 = std::env::var("PG_JOBS_IDEMPOTENCY_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120_000);
    // A cluster of its own whose worker waits an hour between ticks until told otherwise, so
    // the expired records stay while saves and reads are measured.
    let settings = pg_jobs_tests::settings_with(&["pg_jobs.tick = '1h'"]);
    let cluster = Cluster::start_with_extension("idempotency-purge", &settings);
    let mut admin = cluster.connect();

    let mut session = ExplainingSession::open(&cluster, "");
    let measure = |session: &mut ExplainingSession, label: &str| -> (i64, i64, Duration) {
        // The first calls of a session prepare its plans; measure the ones after.
        let mut last = (0, 0, Duration::ZERO);
        for round in 0..3 {
            let key = format!("{label}-{round}");
            session.take_plans();
            let started = Instant::now();
            session
                .client
                .query_one("SELECT token FROM jobs_idempotency_save($1)", &[&key])
                .unwrap();
            let save_plans = session.take_plans();
            session
                .client
                .query_one("SELECT status FROM jobs_idempotency_get($1)", &[&key])
                .unwrap();
            let took = started.elapsed();
            let get_plans = session.take_plans();
            let buffers = |plans: &[Value], call: &str| {
                let plan = plans
                    .iter()
                    .find(|p| p["Query Text"].as_str().unwrap_or("").contains(call))
                    .unwrap_or_else(|| panic!("auto_explain logged {call}"));
                plan_buffers(&plan["Plan"])
            };
            last = (
                buffers(&save_plans, "FROM jobs_idempotency_save"),
                buffers(&get_plans, "FROM jobs_idempotency_get"),
                took,
            );
        }
        last
    };
    let empty = measure(&mut session, "empty");

    admin
        .execute(
            "INSERT INTO jobs.idempotency (key, status, token, save_outcome, created_at, updated_at, expires_at)
             SELECT 'expired-' || i, 'completed', gen_random_uuid(), 'created',
                    now() - interval '2 days', now() - interval '2 days',
                    now() - interval '1 day' + i * interval '1 ms'
               FROM generate_series(1, $1::bigint) i",
            &[&records],
        )
        .unwrap();
    admin
        .batch_execute("VACUUM ANALYZE jobs.idempotency")
        .unwrap();
    let loaded = measure(&mut session, "loaded");
    println!(
        "save + get with no records: {} + {} buffers ({:?}); with {records} expired records: {} + {} buffers ({:?})",
        empty.0, empty.1, empty.2, loaded.0, loaded.1, loaded.2
    );
    // The primary key grows a level or two; nothing walks the expired records.
    assert!(
        loaded.0 <= empty.0 + 6,
        "save touched {} buffers, {} on an empty table",
        loaded.0,
        empty.0
    );
    assert!(
        loaded.1 <= empty.1 + 4,
        "get touched {} buffers, {} on an empty table",
        loaded.1,
        empty.1
    );
    // An expired record is absent before the purge runs, and replaced by a save.
    assert_eq!(
        scalar::<i64>(
            &mut admin,
            "SELECT count(*) FROM jobs_idempotency_get('expired-1')",
            &[]
        ),
        0
    );
    let outcome: String = scalar(
        &mut admin,
        "SELECT outcome FROM jobs_idempotency_save('expired-1', fingerprint => 'new')",
        &[],
    );
    assert_eq!(outcome, "replaced_expired");
    // Deleting an expired record deletes it, and answers that there was no live one.
    let deleted: bool = scalar(
        &mut admin,
        "SELECT jobs_idempotency_delete('expired-2')",
        &[],
    );
    assert!(!deleted);
    assert_eq!(
        scalar::<i64>(
            &mut admin,
            "SELECT count(*) FROM jobs.idempotency WHERE key = 'expired-2'",
            &[]
        ),
        0
    );

    // Now let the worker tick every 100 ms and count its ticks until the records are gone.
    let status = |admin: &mut Client| -> (i64, i64) {
        row(
            admin,
            "SELECT ticks, idempotency_purged FROM jobs_worker_status() WHERE database = 'postgres'",
            &[],
        )
    };
    let (ticks_before, purged_before) = status(&mut admin);
    admin
        .batch_execute("ALTER SYSTEM SET pg_jobs.tick = '100ms'")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let started = Instant::now();
    wait_until(
        Duration::from_secs(600),
        "the worker to purge the expired records",
        || {
            scalar::<i64>(
                &mut admin,
                "SELECT count(*) FROM jobs.idempotency WHERE expires_at <= clock_timestamp()",
                &[],
            ) == 0
        },
    );
    let took = started.elapsed();
    let (ticks_after, purged_after) = status(&mut admin);
    let ticks = ticks_after - ticks_before;
    let purged = purged_after - purged_before;
    println!(
        "{records} expired records purged in {ticks} ticks ({took:?} at a 100 ms tick), {purged} counted"
    );
    let expired = records - 2;
    let fewest = (expired + PER_TICK - 1) / PER_TICK;
    assert!(
        ticks >= fewest,
        "{records} records purged in {ticks} ticks: more than {PER_TICK} a tick"
    );
    assert!(
        ticks <= fewest + 5,
        "{records} records took {ticks} ticks to purge"
    );
    assert_eq!(purged, expired, "the worker's counter");
    assert_eq!(
        scalar::<i64>(&mut admin, "SELECT count(*) FROM jobs.idempotency", &[]),
        7,
        "live records are kept: the six measured and the replaced one"
    );
}
