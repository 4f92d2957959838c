//! Drivers that send parameters untyped. node-postgres sends every parameter with type OID 0
//! (`unknown`), and psycopg does for Python strings: the server must resolve each `jobs_*`
//! call from the function's name alone, which only works while no function is overloaded.
//! Here every call of a worker's loop is prepared without parameter types (as those drivers
//! do) and run with text values, and the catalog is checked for overloads.

use std::error::Error;

use pg_jobs_tests::{column, jobs_in_state, Cluster};
use postgres::types::private::BytesMut;
use postgres::types::{to_sql_checked, Format, IsNull, ToSql, Type};

/// A parameter value sent the way node-postgres sends every value: as text, in text format,
/// for whatever type the server resolved the parameter to.
#[derive(Debug)]
struct Untyped<'a>(&'a str);

impl ToSql for Untyped<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

/// Runs `sql` with every parameter of unknown type, sent as text (as node-postgres does), and
/// returns the rows as text.
fn untyped(client: &mut postgres::Client, sql: &str, params: &[&str]) -> Vec<Vec<Option<String>>> {
    let statement = client
        .prepare_typed(sql, &vec![Type::UNKNOWN; params.len()])
        .unwrap_or_else(|e| panic!("prepare {sql} with untyped parameters: {e:?}"));
    let values: Vec<Untyped> = params.iter().map(|p| Untyped(p)).collect();
    let params: Vec<&(dyn ToSql + Sync)> =
        values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
    // Every column comes back as text: the caller casts in SQL where it needs to.
    client
        .query(&statement, &params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| (0..row.len()).map(|i| row.get(i)).collect())
        .collect()
}

#[test]
fn no_jobs_function_is_overloaded() {
    let mut client = Cluster::shared().connect();
    let overloaded: Vec<String> = column(&mut client, "SELECT p.proname FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_jobs'
              GROUP BY p.pronamespace, p.proname HAVING count(*) > 1",
            &[]);
    assert!(
        overloaded.is_empty(),
        "overloaded functions: {overloaded:?}"
    );
}

#[test]
fn a_worker_loop_runs_with_untyped_parameters() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("untyped", "");
    let ids = untyped(
        &mut client,
        "SELECT count(*)::text FROM jobs_enqueue_batch($1, $2)",
        &[
            &queue,
            r#"{"{\"n\": 1}","{\"n\": 2}","{\"n\": 3}","{\"n\": 4}"}"#,
        ],
    );
    assert_eq!(ids[0][0].as_deref(), Some("4"));
    let one = untyped(
        &mut client,
        "SELECT jobs_enqueue($1, $2, kind => $3)::text",
        &[&queue, r#"{"n": 5}"#, "default"],
    );
    assert!(one[0][0].is_some());

    let claimed = untyped(
        &mut client,
        "SELECT id::text, lease::text FROM jobs_claim($1, worker => $2, n => $3, lease => $4, wait => $5)",
        &[&queue, "untyped-worker", "5", "30 seconds", "0"],
    );
    assert_eq!(claimed.len(), 5);
    let job = |i: usize| {
        (
            claimed[i][0].clone().unwrap(),
            claimed[i][1].clone().unwrap(),
        )
    };

    let (id, lease) = job(0);
    let beat = untyped(
        &mut client,
        "SELECT jobs_heartbeat($1, $2, extend => $3, progress => $4)",
        &[&id, &lease, "1 minute", r#"{"done": 0.5}"#],
    );
    assert_eq!(beat[0][0].as_deref(), Some("running"));
    let done = untyped(
        &mut client,
        "SELECT jobs_complete($1, $2, $3)",
        &[&id, &lease, r#"{"ok": true}"#],
    );
    assert_eq!(done[0][0].as_deref(), Some("succeeded"));

    let (id, lease) = job(1);
    let failed = untyped(
        &mut client,
        "SELECT jobs_fail($1, $2, $3, retry_in => $4, retry => $5)",
        &[&id, &lease, "boom", "1 hour", "true"],
    );
    assert_eq!(failed[0][0].as_deref(), Some("queued"));

    let (id, lease) = job(2);
    let released = untyped(
        &mut client,
        "SELECT jobs_release($1, $2, $3, retry_in => $4)",
        &[&id, &lease, "deploy in progress", "0"],
    );
    assert_eq!(released[0][0].as_deref(), Some("queued"));

    let (id3, lease3) = job(3);
    let (id4, lease4) = job(4);
    let batch = untyped(
        &mut client,
        "SELECT id::text, outcome FROM jobs_complete_batch($1, $2)",
        &[
            &format!("{{{id3},{id4}}}"),
            &format!("{{{lease3},{lease4}}}"),
        ],
    );
    assert_eq!(
        batch,
        vec![
            vec![Some(id3.clone()), Some("succeeded".to_owned())],
            vec![Some(id4.clone()), Some("succeeded".to_owned())],
        ]
    );
    // An empty batch, as a driver sends an empty list.
    let empty = untyped(
        &mut client,
        "SELECT id::text, outcome FROM jobs_complete_batch($1, $2)",
        &["{}", "{}"],
    );
    assert!(empty.is_empty());

    let cancelled = untyped(&mut client, "SELECT jobs_cancel($1)", &[&job(1).0]);
    assert_eq!(cancelled[0][0].as_deref(), Some("cancelled"));
    let retried = untyped(
        &mut client,
        "SELECT jobs_retry($1, run_at => $2)",
        &[&job(1).0, "2000-01-01 00:00:00+00"],
    );
    assert_eq!(retried[0][0].as_deref(), Some("queued"));
    let got = untyped(&mut client, "SELECT (jobs_get($1)).state::text", &[&id3]);
    assert_eq!(got[0][0].as_deref(), Some("succeeded"));
    let listed = untyped(
        &mut client,
        "SELECT count(*)::text FROM jobs_list($1, $2, $3, $4)",
        &[&queue, "succeeded", "default", "10"],
    );
    assert_eq!(listed[0][0].as_deref(), Some("3"));
    let succeeded = jobs_in_state(&mut client, &queue, "succeeded");
    assert_eq!(succeeded, 3);
}

#[test]
fn an_idempotency_middleware_runs_with_untyped_parameters() {
    let mut client = Cluster::shared().connect();
    let key = format!("untyped-{}", std::process::id());
    let saved = untyped(
        &mut client,
        "SELECT outcome, token::text FROM jobs_idempotency_save($1, $2, $3, $4, $5, $6, $7)",
        &[
            &key,
            "pending",
            "null",
            "24 hours",
            "shop",
            "sha256:abc",
            "30 seconds",
        ],
    );
    assert_eq!(saved[0][0].as_deref(), Some("created"));
    let token = saved[0][1].clone().unwrap();
    let updated = untyped(
        &mut client,
        "SELECT jobs_idempotency_update($1, $2, $3, ttl => $4, scope => $5, token => $6)",
        &[
            &key,
            "completed",
            r#"{"status": 201}"#,
            "1 hour",
            "shop",
            &token,
        ],
    );
    assert_eq!(updated[0][0].as_deref(), Some("updated"));
    let got = untyped(
        &mut client,
        "SELECT status, response::text, fingerprint FROM jobs_idempotency_get($1, $2)",
        &[&key, "shop"],
    );
    assert_eq!(
        got,
        vec![vec![
            Some("completed".to_owned()),
            Some(r#"{"status": 201}"#.to_owned()),
            Some("sha256:abc".to_owned()),
        ]]
    );
    let deleted = untyped(
        &mut client,
        "SELECT jobs_idempotency_delete($1, $2, $3)::text",
        &[&key, "shop", &token],
    );
    assert_eq!(deleted[0][0].as_deref(), Some("true"));
}
