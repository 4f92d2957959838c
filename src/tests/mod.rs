//! In-database tests (`#[pg_test]`): each runs inside one transaction that is rolled back, so
//! they cover logic that needs no second session. Anything about concurrency, commits, the
//! background worker or crashes lives in `tests/integration`, over real connections.

use pgrx::prelude::*;

/// Runs a query returning one value, for the tests below.
fn one<T: pgrx::FromDatum + pgrx::IntoDatum>(sql: &str) -> T {
    Spi::get_one::<T>(sql)
        .expect("the query runs")
        .expect("the query returns a value")
}

#[pg_schema]
mod tests {
    use super::one;
    use pgrx::prelude::*;

    /// The bytes of a jsonb datum (a plain 4-byte-header varlena, as both sides make them).
    fn jsonb_bytes(datum: pg_sys::Datum) -> Vec<u8> {
        // SAFETY: a detoasted jsonb value; its size is in its header.
        unsafe {
            let value = pg_sys::pg_detoast_datum(datum.cast_mut_ptr());
            let size = pgrx::varsize_any(value);
            std::slice::from_raw_parts(value.cast::<u8>(), size).to_vec()
        }
    }

    // A slot's headers are built in Rust, in jsonb's binary form: they must be exactly what
    // the SQL expression they replace makes, byte for byte, with and without the schedule's
    // own headers (whose pg_jobs keys they override).
    #[pg_test]
    fn slot_headers_are_the_bytes_jsonb_build_object_makes() {
        use crate::engine::enqueue::slot_headers;
        use crate::pg::datum::Jsonb;
        let cases: [(&str, Option<&str>); 4] = [
            ("nightly-report", None),
            ("", None),
            ("a name with \"quotes\" and ünïcode", None),
            (
                "s1",
                Some(
                    r#"{"traceparent": "00-ab-cd-01", "pg_jobs.slot": "old", "z": [1, {"y": 2}]}"#,
                ),
            ),
        ];
        for (name, base) in cases {
            let slot = "2026-12-01T10:00:00Z";
            let expected: pgrx::JsonB = Spi::get_one_with_args(
                "SELECT CASE WHEN $3::jsonb IS NULL
                             THEN jsonb_build_object('pg_jobs.schedule', $1, 'pg_jobs.slot', $2)
                             ELSE $3::jsonb || jsonb_build_object('pg_jobs.schedule', $1, 'pg_jobs.slot', $2)
                        END",
                &[name.into(), slot.into(), base.into()],
            )
            .unwrap()
            .unwrap();
            let expected = expected.into_datum().unwrap();
            let base = base.map(|text| {
                let value: pgrx::JsonB = Spi::get_one_with_args("SELECT $1::jsonb", &[text.into()])
                    .unwrap()
                    .unwrap();
                // SAFETY: a jsonb datum in the current context, passed through untouched.
                unsafe {
                    Jsonb::from_polymorphic_datum(
                        value.into_datum().unwrap(),
                        false,
                        pg_sys::JSONBOID,
                    )
                }
                .unwrap()
            });
            let built = slot_headers(base, name, slot);
            assert_eq!(
                jsonb_bytes(built),
                jsonb_bytes(expected),
                "headers of {name:?}"
            );
        }
    }

    #[pg_test]
    fn default_queue_exists_after_create_extension() {
        assert!(one::<bool>(
            "SELECT EXISTS (SELECT FROM jobs.queue WHERE name = 'default')"
        ));
    }

    #[pg_test]
    fn claim_takes_priority_then_run_at_then_id() {
        Spi::run(
            "SELECT jobs_create_queue('order');
             SELECT jobs_enqueue('order', '{\"n\": 1}', priority => 5);
             SELECT jobs_enqueue('order', '{\"n\": 2}', priority => -1, run_at => now() - interval '1 minute');
             SELECT jobs_enqueue('order', '{\"n\": 3}', priority => -1, run_at => now() - interval '2 minutes');
             SELECT jobs_enqueue('order', '{\"n\": 4}', priority => 5);
             SELECT jobs_enqueue('order', '{\"n\": 5}', run_at => now() + interval '1 hour');",
        )
        .unwrap();
        let order: String = one(
            "SELECT string_agg(payload->>'n', ',') FROM (SELECT payload FROM jobs_claim('order', n => 10)) c",
        );
        assert_eq!(order, "3,2,1,4", "the delayed job stays invisible");
    }

    /// Two names of the form `prefix || n` that `hashtext` maps to the same value, found on
    /// this server (the claim indexes lead with that hash, not the name).
    fn names_hashing_alike(prefix: &str) -> (String, String) {
        let pair: String = one(&format!(
            "SELECT min(name) || ',' || max(name)
               FROM (SELECT '{prefix}' || i AS name FROM generate_series(1, 400000) i) n
              GROUP BY pg_catalog.hashtext(name)
             HAVING count(*) > 1
              ORDER BY 1
              LIMIT 1"
        ));
        let (a, b) = pair.split_once(',').expect("two names");
        (a.to_owned(), b.to_owned())
    }

    // The claim indexes are keyed by hashes of the queue and kind: queues (and kinds) whose
    // names collide share index ranges, and the claim must still take only its own jobs, in
    // claim order. Claims of some kinds read the kinds index in queues with claims_by_kind and
    // the claim index in the others: both ways.
    #[pg_test]
    fn queues_and_kinds_whose_names_hash_alike_keep_their_own_jobs() {
        for by_kind in [false, true] {
            jobs_of_queues_and_kinds_hashing_alike_stay_apart(by_kind);
        }
    }

    /// [`queues_and_kinds_whose_names_hash_alike_keep_their_own_jobs`] for queues with
    /// claims_by_kind `by_kind`.
    fn jobs_of_queues_and_kinds_hashing_alike_stay_apart(by_kind: bool) {
        let (a, b) = names_hashing_alike(&format!("queue-{by_kind}-"));
        let (kind_a, kind_b) = names_hashing_alike("kind-");
        Spi::run(&format!(
            "SELECT jobs_create_queue('{a}', claims_by_kind => {by_kind});
             SELECT jobs_create_queue('{b}', claims_by_kind => {by_kind});
             SELECT jobs_enqueue(q, jsonb_build_object('q', q, 'n', n), kind => k, priority => p)
               FROM (VALUES ('{b}', 1, '{kind_a}', 0), ('{a}', 2, '{kind_b}', 1),
                            ('{b}', 3, '{kind_b}', -1), ('{a}', 4, '{kind_a}', 0),
                            ('{a}', 5, '{kind_b}', -1), ('{b}', 6, '{kind_a}', -2),
                            ('{a}', 7, '{kind_a}', 2)) AS j(q, n, k, p);"
        ))
        .unwrap();
        let claimed = |call: &str| -> String {
            one(&format!(
                "SELECT string_agg((payload->>'q') || ':' || (payload->>'n'), ',')
                   FROM (SELECT payload FROM {call}) c"
            ))
        };
        assert_eq!(
            claimed(&format!(
                "jobs_claim('{a}', n => 10, kinds => ARRAY['{kind_a}'])"
            )),
            format!("{a}:4,{a}:7"),
            "a claim of one kind takes neither the other queue's jobs nor the other kind's \
             (claims_by_kind {by_kind})"
        );
        assert_eq!(
            claimed(&format!("jobs_claim('{a}', n => 10)")),
            format!("{a}:5,{a}:2"),
            "the rest of the queue, in claim order, and none of the other queue's"
        );
        let nothing: Option<i64> = Spi::get_one(&format!("SELECT count(*) FROM jobs_claim('{a}')"))
            .expect("the claim runs");
        assert_eq!(
            nothing,
            Some(0),
            "the other queue's jobs are not this one's"
        );
        assert_eq!(
            claimed(&format!("jobs_claim('{b}', n => 10)")),
            format!("{b}:6,{b}:3,{b}:1"),
            "the other queue keeps all of its jobs"
        );
    }

    /// The kinds index entries of `queue`'s queued jobs: how many jobs of the queue its
    /// condition admits, read through the index itself.
    fn kinds_index_entries(queue: &str) -> i64 {
        Spi::run("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;").unwrap();
        let count = format!(
            "SELECT count(*) FROM jobs.job
              WHERE pg_catalog.hashtext(queue) = pg_catalog.hashtext('{queue}')
                AND state = 'queued' AND NOT group_wait AND kind_indexed"
        );
        let plan = Spi::connect(|client| {
            client
                .select(&format!("EXPLAIN (COSTS OFF) {count}"), None, &[])
                .expect("EXPLAIN runs")
                .map(|row| row.get::<String>(1).ok().flatten().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" ")
        });
        assert!(
            plan.contains("job_kind_claim_idx"),
            "the count reads the kinds index: {plan}"
        );
        let entries = one(&count);
        Spi::run("RESET enable_seqscan; RESET enable_bitmapscan;").unwrap();
        entries
    }

    // A job goes into the kinds index only when its queue asks for it (claims_by_kind): every
    // enqueue path, in queues with and without it.
    #[pg_test]
    fn jobs_enter_the_kinds_index_only_in_queues_that_claim_by_kind() {
        for (queue, by_kind) in [("plain-kinds", false), ("by-kind", true)] {
            Spi::run(&format!(
                "SELECT jobs_create_queue('{queue}', claims_by_kind => {by_kind});
                 SELECT jobs_enqueue('{queue}', '{{}}', kind => 'a');
                 SELECT jobs_enqueue('{queue}', '{{}}', kind => 'b', unique_key => 'k');
                 SELECT jobs_enqueue('{queue}', '{{}}', kind => 'b', group_key => 'g');
                 SELECT count(*) FROM jobs_enqueue_batch('{queue}', ARRAY['{{}}', '{{}}']::jsonb[], kind => 'c');
                 SELECT count(*) FROM jobs_enqueue_batch('{queue}', ARRAY['{{}}', '{{}}']::jsonb[],
                                                        kind => 'c', unique_keys => ARRAY['u1', 'u2']);"
            ))
            .unwrap();
            let marked: i64 = one(&format!(
                "SELECT count(*) FILTER (WHERE kind_indexed = {by_kind}) FROM jobs.job
                  WHERE queue = '{queue}'"
            ));
            assert_eq!(marked, 7, "{queue}: every job's kind_indexed is {by_kind}");
            let expected = if by_kind { 7 } else { 0 };
            assert_eq!(
                kinds_index_entries(queue),
                expected,
                "{queue}: kinds index entries"
            );
        }
    }

    // Turning claims_by_kind on puts the queue's unfinished jobs into the kinds index (claims
    // of some kinds then read it alone), a finished job that a retry brings back goes in as it
    // comes back, and a running job stays in when released: claims of some kinds miss none.
    #[pg_test]
    fn turning_claims_by_kind_on_indexes_the_jobs_claims_of_kinds_can_take() {
        Spi::run(
            "SELECT jobs_create_queue('switch', max_attempts => 1);
             SELECT jobs_enqueue('switch', jsonb_build_object('n', n), kind => k)
               FROM (VALUES (1, 'a'), (2, 'b'), (3, 'a'), (4, 'a'), (5, 'b')) AS j(n, k);
             SELECT jobs_complete(id, lease) FROM jobs_claim('switch', kinds => ARRAY['a']);
             SELECT jobs_fail(id, lease, 'no') FROM jobs_claim('switch', kinds => ARRAY['a']);",
        )
        .unwrap();
        let running: i64 = one("SELECT id FROM jobs_claim('switch', kinds => ARRAY['b'])");
        let indexed = || -> String {
            one(
                "SELECT string_agg((payload->>'n') || ':' || kind_indexed, ',' ORDER BY id)
                   FROM jobs.job WHERE queue = 'switch'",
            )
        };
        assert_eq!(indexed(), "1:false,2:false,3:false,4:false,5:false");

        let row_says: bool =
            one("SELECT claims_by_kind FROM jobs_create_queue('switch', claims_by_kind => true)");
        assert!(row_says, "the queue's row shows the setting");
        assert_eq!(
            indexed(),
            "1:false,2:true,3:false,4:true,5:true",
            "the queued and running jobs go in; the succeeded (1) and failed (3) ones do not"
        );
        assert_eq!(kinds_index_entries("switch"), 2, "the queued jobs 4 and 5");

        Spi::run(
            "SELECT jobs_retry(id) FROM jobs.job WHERE queue = 'switch' AND payload->>'n' = '3'",
        )
        .unwrap();
        let released: String = one(&format!(
            "SELECT jobs_release(id, lease) FROM jobs.job WHERE id = {running}"
        ));
        assert_eq!(released, "queued");
        let taken: String = one(
            "SELECT string_agg(payload->>'n', ',') FROM jobs_claim('switch', n => 10, kinds => ARRAY['a'])",
        );
        assert_eq!(
            taken, "3,4",
            "the retried job and the one queued all along, in claim order"
        );
        let rest: String = one(
            "SELECT string_agg(payload->>'n', ',') FROM jobs_claim('switch', n => 10, kinds => ARRAY['b'])",
        );
        assert_eq!(
            rest, "5,2",
            "the other job of that kind, then the released one (due again as it was released)"
        );
    }

    // jobs.job has no CHECK on attempts (a check is parsed again by every statement that
    // writes the table): the claim itself never runs a job past its attempts (Rule 3), even
    // one a direct write left queued with none left.
    #[pg_test]
    fn a_queued_job_without_attempts_left_is_never_claimed() {
        Spi::run(
            "SELECT jobs_create_queue('spent', max_attempts => 2);
             SELECT jobs_enqueue('spent', '{\"n\": 1}');
             SELECT jobs_enqueue('spent', '{\"n\": 2}');
             UPDATE jobs.job SET attempt = 2 WHERE queue = 'spent' AND payload->>'n' = '1';",
        )
        .unwrap();
        let claimed: String =
            one("SELECT string_agg(payload->>'n', ',') FROM jobs_claim('spent', n => 10)");
        assert_eq!(claimed, "2", "only the job with attempts left runs");
        let spent: i32 = one("SELECT attempt FROM jobs.job
              WHERE queue = 'spent' AND payload->>'n' = '1' AND state = 'queued'");
        assert_eq!(spent, 2, "the other stays queued, its attempts untouched");
    }

    #[pg_test]
    fn claim_skips_priorities_with_only_delayed_jobs() {
        // Thousands of delayed jobs at the best priority must not hide a due one behind them.
        Spi::run(
            "SELECT jobs_create_queue('skip');
             SELECT jobs_enqueue_batch('skip', array_agg('{}'::jsonb), priority => -5, run_at => now() + interval '1 day')
               FROM generate_series(1, 5000);
             SELECT jobs_enqueue('skip', '{\"due\": true}', priority => 3);",
        )
        .unwrap();
        let due: bool = one("SELECT (payload->>'due')::bool FROM jobs_claim('skip')");
        assert!(due);
        let delayed: i64 = one(
            "SELECT count(*) FROM jobs.job WHERE queue = 'skip' AND state = 'queued' AND priority = -5",
        );
        assert_eq!(delayed, 5000, "the delayed jobs stay queued");
    }

    #[pg_test]
    fn claim_returns_payload_headers_and_a_fresh_lease() {
        Spi::run(
            "SELECT jobs_create_queue('fields');
             SELECT jobs_enqueue('fields', '{\"to\": \"ada\"}', kind => 'email',
                                 headers => '{\"traceparent\": \"00-abc-def-01\"}', max_attempts => 3);",
        )
        .unwrap();
        let row: String = one(
            "SELECT format('%s|%s|%s|%s|%s', kind, payload->>'to', headers->>'traceparent', attempt, max_attempts)
               FROM jobs_claim('fields', worker => 'w1')",
        );
        assert_eq!(row, "email|ada|00-abc-def-01|1|3");
        let lease_set: bool = one(
            "SELECT lease IS NOT NULL AND lease_until > now() FROM jobs.job WHERE queue = 'fields'",
        );
        assert!(lease_set);
    }

    #[pg_test]
    fn statements_ignore_objects_on_the_users_search_path() {
        // A hostile schema first on the search path, with a table and an operator that would
        // capture unqualified names, must not change what the functions do.
        Spi::run(
            "CREATE SCHEMA hostile;
             CREATE TABLE hostile.job (id bigint);
             CREATE FUNCTION hostile.never(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false';
             CREATE OPERATOR hostile.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.never);
             SET LOCAL search_path = hostile, public, pg_catalog;
             SELECT public.jobs_create_queue('pinned');
             SELECT public.jobs_enqueue('pinned');",
        )
        .unwrap();
        let claimed: i64 = one("SELECT count(*) FROM public.jobs_claim('pinned')");
        assert_eq!(claimed, 1);
    }

    #[pg_test]
    fn lengths_without_a_calendar_part_are_what_the_server_would_add() {
        // The shortcut for intervals of time alone must agree with timestamptz + interval,
        // also at both ends of the timestamp range, where the server refuses the sum.
        use crate::pg::clock::{
            add_interval, interval_of, length_at, server_now, END_TIMESTAMP, MIN_TIMESTAMP,
        };
        let now = server_now();
        let lengths = [
            0,
            1,
            -1,
            30_000_000,
            86_400_000_000,
            -300_000_000,
            END_TIMESTAMP - now - 1,
            END_TIMESTAMP - now,
            MIN_TIMESTAMP - now,
            MIN_TIMESTAMP - now - 1,
            i64::MAX,
            i64::MIN,
        ];
        for micros in lengths {
            let interval = interval_of(micros);
            let server = add_interval(now, &interval).map(|then| then - now);
            let shortcut = length_at(now, &interval);
            assert!(
                shortcut == server,
                "{micros} microseconds: {shortcut:?}, the server {server:?}"
            );
        }
        let at_end = length_at(now, &interval_of(END_TIMESTAMP - now));
        assert!(at_end.is_none(), "past the range: {at_end:?}");
        let at_min = length_at(now, &interval_of(MIN_TIMESTAMP - now));
        assert!(
            at_min == Some(MIN_TIMESTAMP - now),
            "the first valid timestamp: {at_min:?}"
        );
    }

    // A freed head's stamp holds only while no commit that queues jobs of its queue has begun
    // since it was read, and only if none was half-way then (runtime::queued_changes). The
    // commit's two events are called directly; the test's own transaction counts nothing.
    #[pg_test]
    fn a_stamp_holds_until_a_commit_that_queues_jobs_begins() {
        use crate::runtime::queued_changes::{
            commit_begins, stamp, transaction_ended, two_phase_begins, two_phase_ended,
            unchanged_since,
        };
        let queue = "pg-test-stamped";
        let before = stamp(queue);
        assert!(unchanged_since(queue, before));
        commit_begins([queue].into_iter());
        assert!(!unchanged_since(queue, before), "a commit began");
        let half_way = stamp(queue);
        assert!(
            !unchanged_since(queue, half_way),
            "read while a commit was half-way"
        );
        transaction_ended();
        assert!(!unchanged_since(queue, before));
        let after = stamp(queue);
        assert!(unchanged_since(queue, after));
        two_phase_begins();
        assert!(!unchanged_since(queue, after), "a COMMIT PREPARED began");
        two_phase_ended();
        assert!(!unchanged_since(queue, after));
        assert!(unchanged_since(queue, stamp(queue)));
    }

    #[pg_test]
    fn backoff_delay_doubles_and_caps() {
        let delays: String = one(
            "SELECT string_agg(extract(epoch FROM jobs.backoff_delay('1 second', '10 seconds', 0, a))::float8::text, ',' ORDER BY a)
               FROM generate_series(1, 6) a",
        );
        assert_eq!(delays, "1,2,4,8,10,10");
    }

    #[pg_test]
    fn backoff_jitter_stretches_within_bounds() {
        let (min, max): (f64, f64) = Spi::get_two(
            "SELECT min(d), max(d) FROM (
                SELECT extract(epoch FROM jobs.backoff_delay('4 seconds', '1 hour', 0.25, 1))::float8 AS d
                  FROM generate_series(1, 2000)) s",
        )
        .map(|(a, b)| (a.unwrap(), b.unwrap()))
        .unwrap();
        assert!(
            min >= 4.0 && max <= 5.0,
            "delays in [{min}, {max}] must lie in [4, 5]"
        );
        assert!(
            max - min > 0.5,
            "jitter must actually spread the delays: [{min}, {max}]"
        );
    }

    #[pg_test(error = "queue must be 1 to 63 characters of A-Z a-z 0-9 _ - . :, got 'has space'")]
    fn bad_queue_name_is_refused() {
        Spi::run("SELECT jobs_enqueue('has space')").unwrap();
    }

    #[pg_test(error = "n must be between 1 and 1000, got 1001")]
    fn claim_size_is_capped() {
        Spi::run("SELECT jobs_claim('default', n => 1001)").unwrap();
    }

    #[pg_test]
    fn enqueue_batch_returns_ids_in_payload_order() {
        Spi::run(
            "SELECT jobs_create_queue('batch');
             CREATE TEMP TABLE ids AS
             SELECT id, row_number() OVER () AS position
               FROM jobs_enqueue_batch('batch', ARRAY['{\"p\":1}', '{\"p\":2}', '{\"p\":3}']::jsonb[]) AS id;",
        )
        .unwrap();
        let in_order: bool = one(
            "SELECT count(*) = 3 AND bool_and((j.payload->>'p')::int = ids.position AND j.id > prev.id IS NOT FALSE)
               FROM ids JOIN jobs.job j USING (id) LEFT JOIN ids prev ON prev.position = ids.position - 1",
        );
        assert!(in_order);
    }

    #[pg_test]
    fn idempotency_ttl_is_applied_as_the_length_it_was_checked_at() {
        // A month is as long as the calendar makes it from today, and the record expires
        // exactly that long after the save: no 30-day approximation, no months stored.
        Spi::run("SELECT * FROM jobs_idempotency_save('months', ttl => '1 mon -27 days')").unwrap();
        let (exact, days): (bool, f64) = Spi::get_two(
            "SELECT extract(month FROM expires_at - created_at) = 0
                    AND expires_at - created_at = (created_at + interval '1 mon -27 days') - created_at,
                    (extract(epoch FROM expires_at - created_at) / 86400)::float8
               FROM jobs.idempotency WHERE key = 'months'",
        )
        .map(|(a, b)| (a.unwrap(), b.unwrap()))
        .unwrap();
        assert!(exact, "the ttl was not applied as the length it has today");
        assert!(
            (1.0..=4.0).contains(&days),
            "1 mon -27 days lasted {days} days"
        );
    }

    #[pg_test]
    fn idempotency_update_keeps_the_expiry_unless_given_a_ttl() {
        // Each check reads the record in a statement of its own: a statement's snapshot does
        // not see what a function it calls changed.
        Spi::run(
            "CREATE TEMP TABLE saved AS
             SELECT token, expires_at FROM jobs_idempotency_save('expiry', ttl => '1 hour');",
        )
        .unwrap();
        let updated: String =
            one("SELECT jobs_idempotency_update('expiry', 'pending', token => token) FROM saved");
        assert_eq!(updated, "updated");
        let kept: bool = one(
            "SELECT r.expires_at = s.expires_at FROM jobs.idempotency r, saved s WHERE r.key = 'expiry'",
        );
        assert!(kept, "an update without ttl moved the expiry");
        let updated: String = one(
            "SELECT jobs_idempotency_update('expiry', 'completed', '{}', ttl => '2 days', token => token) FROM saved",
        );
        assert_eq!(updated, "updated");
        let renewed: bool = one(
            "SELECT expires_at - updated_at = interval '2 days' AND status = 'completed'
               FROM jobs.idempotency WHERE key = 'expiry'",
        );
        assert!(
            renewed,
            "an update with ttl did not set the expiry to now + ttl"
        );
    }

    #[pg_test(error = "token must not be NULL")]
    fn idempotency_update_needs_the_token() {
        Spi::run("SELECT * FROM jobs_idempotency_save('untokened')").unwrap();
        Spi::run("SELECT jobs_idempotency_update('untokened', 'completed')").unwrap();
    }

    // Workflows (engine::workflows): the states the code knows are the enum's, in its order.
    #[pg_test]
    fn the_job_states_are_the_enums() {
        let names: Vec<Option<String>> =
            one("SELECT enum_range(NULL::jobs.state)::text[] AS states");
        let known: Vec<Option<String>> = crate::engine::model::JobState::ALL
            .iter()
            .map(|state| Some(state.as_str().to_owned()))
            .collect();
        assert_eq!(names, known);
    }

    // Within one transaction: a dependent waits, is queued by its parent's settle, and a
    // claim never takes it while it waits.
    #[pg_test]
    fn a_dependent_waits_until_its_parent_succeeds() {
        Spi::run(
            "SELECT jobs_create_queue('pg-test-after');
             CREATE TEMP TABLE ids AS
               SELECT jobs_enqueue('pg-test-after', '{\"n\": 1}') AS parent;
             ALTER TABLE ids ADD COLUMN child bigint;
             UPDATE ids SET child = jobs_enqueue('pg-test-after', '{\"n\": 2}', after => ARRAY[parent]);",
        )
        .unwrap();
        let waiting: String =
            one("SELECT state::text FROM jobs.job WHERE id = (SELECT child FROM ids)");
        assert_eq!(waiting, "waiting");
        let claimed: i64 = one(
            "SELECT count(*) FROM jobs_claim('pg-test-after', n => 10) c, ids
              WHERE jobs_complete(c.id, c.lease, '{\"sum\": 3}') = 'succeeded' AND c.id = ids.parent",
        );
        assert_eq!(claimed, 1, "only the parent is claimed");
        let queued: String =
            one("SELECT state::text FROM jobs.job WHERE id = (SELECT child FROM ids)");
        assert_eq!(queued, "queued");
        let read: pgrx::JsonB = one("SELECT r.result FROM ids, jobs_results(ARRAY[ids.parent]) r");
        assert_eq!(read.0, serde_json::json!({"sum": 3}));
    }

    #[pg_test(
        error = "after[1] names job 9223372036854775807, which does not exist or is not visible to this session"
    )]
    fn a_job_cannot_wait_for_a_job_that_does_not_exist_yet() {
        Spi::run("SELECT jobs_enqueue('default', after => ARRAY[9223372036854775807])").unwrap();
    }
}
