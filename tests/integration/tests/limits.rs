//! Limits, exactly at the edge: the largest payload, batch, claim size, attempt count and queue
//! name are accepted, and one past each is refused with its documented SQLSTATE.

use pg_jobs_tests::{assert_claims_nothing, claim, column, jobs_in, row, scalar, Client, Cluster};
use postgres::error::SqlState;

/// Runs `sql`, which must fail with SQLSTATE `expected`.
fn assert_refused(client: &mut Client, sql: &str, expected: SqlState) {
    let error = client
        .batch_execute(sql)
        .expect_err("the statement should fail");
    let code = error
        .code()
        .cloned()
        .unwrap_or_else(|| panic!("{sql}: not a database error: {error}"));
    assert_eq!(code, expected, "{sql}: {error}");
}

/// A jsonb object whose size (as `pg_column_size` reports it) is exactly `bytes`.
fn payload_of_size(client: &mut Client, bytes: i32) -> String {
    // The object {"x": "aaa..."} grows one byte per character; find the length that lands on
    // the size exactly, starting from the header overhead.
    let length: i32 = scalar(
        client,
        "SELECT k FROM generate_series($1 - 64, $1) k
          WHERE pg_column_size(jsonb_build_object('x', repeat('a', k))) = $1",
        &[&bytes],
    );
    format!("jsonb_build_object('x', repeat('a', {length}))")
}

#[test]
fn payload_at_the_limit_is_accepted_and_one_byte_more_is_refused() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("limit-payload", "");
    // The default limit, 1 MB.
    let limit: i32 = scalar(
        &mut client,
        "SELECT setting::int FROM pg_settings WHERE name = 'pg_jobs.max_payload_bytes'",
        &[],
    );
    assert_eq!(limit, 1024 * 1024);
    let at_limit = payload_of_size(&mut client, limit);
    let over_limit = payload_of_size(&mut client, limit + 1);
    let id: i64 = scalar(
        &mut client,
        &format!("SELECT jobs_enqueue('{queue}', {at_limit})"),
        &[],
    );
    let stored: i32 = scalar(
        &mut client,
        "SELECT pg_column_size(payload::text::jsonb) FROM jobs.job WHERE id = $1",
        &[&id],
    );
    assert_eq!(stored, limit);
    assert_refused(
        &mut client,
        &format!("SELECT jobs_enqueue('{queue}', {over_limit})"),
        SqlState::PROGRAM_LIMIT_EXCEEDED,
    );
    assert_refused(
        &mut client,
        &format!(
            "SELECT id FROM jobs_enqueue_batch('{queue}', ARRAY['{{}}'::jsonb, {over_limit}])"
        ),
        SqlState::PROGRAM_LIMIT_EXCEEDED,
    );
    let jobs = jobs_in(&mut client, &queue);
    assert_eq!(jobs, 1, "refused payloads leave nothing behind");
}

#[test]
fn a_batch_of_100000_jobs_is_enqueued_in_one_call_in_order() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("limit-batch", "");
    let ids: Vec<i64> = column(
        &mut client,
        "SELECT id FROM jobs_enqueue_batch($1::text, (SELECT array_agg(jsonb_build_object('n', n) ORDER BY n)
                                                        FROM generate_series(1, 100000) n))",
        &[&queue],
    );
    assert_eq!(ids.len(), 100_000);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids come back in payload order"
    );
    let matching: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.job j JOIN unnest($1::bigint[]) WITH ORDINALITY AS u(id, n) USING (id)
          WHERE (j.payload->>'n')::bigint = u.n",
        &[&ids],
    );
    assert_eq!(
        matching, 100_000,
        "each id carries the payload at its position"
    );
}

#[test]
fn a_claim_of_n_at_its_cap_works_and_above_is_refused() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("limit-claim", "");
    client
        .batch_execute(&format!(
            "SELECT id FROM jobs_enqueue_batch('{queue}', array_fill('{{}}'::jsonb, ARRAY[1500]))"
        ))
        .unwrap();
    assert_eq!(claim(&mut client, &queue, 1000, "").len(), 1000);
    assert_refused(
        &mut client,
        &format!("SELECT jobs_claim('{queue}', n => 1001)"),
        SqlState::INVALID_PARAMETER_VALUE,
    );
}

#[test]
fn attempt_counters_stay_within_their_bounds() {
    let (mut client, queue) =
        Cluster::shared().connect_with_queue("limit-attempts", "max_attempts => 10000");
    // The cap on attempts is what keeps the counter from ever overflowing.
    assert_refused(
        &mut client,
        &format!("SELECT jobs_create_queue('{queue}', max_attempts => 10001)"),
        SqlState::INVALID_PARAMETER_VALUE,
    );
    assert_refused(
        &mut client,
        &format!("SELECT jobs_enqueue('{queue}', max_attempts => 10001)"),
        SqlState::INVALID_PARAMETER_VALUE,
    );

    // Releases give the attempt back, however often a job bounces.
    let id: i64 = scalar(&mut client, &format!("SELECT jobs_enqueue('{queue}')"), &[]);
    for _ in 0..200 {
        let job = claim(&mut client, &queue, 1, "")[0];
        assert_eq!(job.attempt, 1);
        let _: String = scalar(
            &mut client,
            "SELECT jobs_release($1::bigint, $2::uuid)",
            &[&job.id, &job.lease],
        );
    }
    // Failures spend attempts up to max_attempts and no further.
    client
        .batch_execute(&format!(
            "SELECT jobs_create_queue('{queue}', max_attempts => 3)"
        ))
        .unwrap();
    let capped: i64 = scalar(&mut client, &format!("SELECT jobs_enqueue('{queue}')"), &[]);
    client
        .batch_execute(&format!("SELECT jobs_cancel({id})"))
        .unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let job = claim(&mut client, &queue, 1, "")[0];
        assert_eq!(job.id, capped);
        outcomes.push(scalar::<String>(
            &mut client,
            "SELECT jobs_fail($1::bigint, $2::uuid, 'boom', retry_in => '0')",
            &[&job.id, &job.lease],
        ));
    }
    assert_eq!(outcomes, ["queued", "queued", "failed"]);
    let (attempt, max): (i32, i32) = row(
        &mut client,
        "SELECT attempt, max_attempts FROM jobs.job WHERE id = $1",
        &[&capped],
    );
    assert_eq!((attempt, max), (3, 3));
    assert_claims_nothing(
        &mut client,
        &queue,
        1,
        "a failed job is never claimed again",
    );
}

#[test]
fn queue_names_of_63_characters_work_and_64_are_refused() {
    let mut client = Cluster::shared().connect();
    let name63 = format!("q{}", "x".repeat(62));
    let name64 = format!("q{}", "x".repeat(63));
    client
        .batch_execute(&format!("SELECT jobs_create_queue('{name63}')"))
        .unwrap();
    let id: i64 = scalar(
        &mut client,
        &format!("SELECT jobs_enqueue('{name63}')"),
        &[],
    );
    assert_eq!(claim(&mut client, &name63, 1, "")[0].id, id);
    for sql in [
        format!("SELECT jobs_create_queue('{name64}')"),
        format!("SELECT jobs_enqueue('{name64}')"),
        format!("SELECT jobs_claim('{name64}')"),
    ] {
        assert_refused(&mut client, &sql, SqlState::INVALID_PARAMETER_VALUE);
    }
}
